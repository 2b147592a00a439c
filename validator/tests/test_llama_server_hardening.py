"""The llama_server unit's sandbox: IPAddressDeny/Allow from ip_allow (refused empty beyond
loopback), the CPU/GPU differences, and the `systemd-analyze security` score where the host's
systemd can score a unit file offline (>= 1.0 CPU, >= 1.5 GPU)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from test_unit_template import _instance, render

from conftest import load_ansible_plugin, plugin_path

COMMON_FILTERS = plugin_path("filter", "llamafleet_common")


@pytest.fixture(scope="module")
def common_filters() -> ModuleType:
    """The llamafleet_common role's filters (IPAddressAllow= on the validator's loopback test)."""
    return load_ansible_plugin(COMMON_FILTERS)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_cpu_unit_is_locked_down(server_filters: ModuleType) -> None:
    lines = _lines(render(server_filters, _instance(server_filters)))
    for want in (
        "PrivateDevices=yes",
        "PrivateMounts=yes",
        "ProcSubset=pid",
        "IPAddressDeny=any",
        "IPAddressAllow=localhost",
        "RestrictAddressFamilies=AF_INET AF_INET6",
        "SystemCallFilter=~@resources",
        "SystemCallErrorNumber=EPERM",
        "MemoryDenyWriteExecute=yes",
        "PrivateUsers=yes",
        "KeyringMode=private",
    ):
        assert want in lines, want
    assert [x for x in lines if x.startswith("IPAddressAllow=")] == ["IPAddressAllow=localhost"]


def test_gpu_unit_opens_only_the_nvidia_devices(server_filters: ModuleType) -> None:
    lines = _lines(render(server_filters, _instance(server_filters, gpu=True)))
    for want in (
        "PrivateDevices=no",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "DeviceAllow=char-nvidia-caps rw",
        "PrivateUsers=no",
        "IPAddressDeny=any",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    ):
        assert want in lines, want
    for absent in ("MemoryDenyWriteExecute=yes", "ProcSubset=pid", "SystemCallFilter=~@resources"):
        assert absent not in lines


def test_ip_allow_renders_one_line_each(
    server_filters: ModuleType, common_filters: ModuleType
) -> None:
    nets = common_filters.ip_allow(["10.0.0.0/8", "fd00::/8"], "main", "10.1.2.3")
    assert nets == ["10.0.0.0/8", "fd00::/8", "10.1.2.3"]
    lines = _lines(render(server_filters, _instance(server_filters, ip_allow=nets)))
    assert [x for x in lines if x.startswith("IPAddressAllow=")] == [
        "IPAddressAllow=localhost",
        "IPAddressAllow=10.0.0.0/8",
        "IPAddressAllow=fd00::/8",
        "IPAddressAllow=10.1.2.3",
    ]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_needs_no_networks(common_filters: ModuleType, host: str) -> None:
    assert common_filters.ip_allow([], "main", host) == []


def test_any_keeps_every_address(common_filters: ModuleType) -> None:
    assert common_filters.ip_allow(["any"], "main", "0.0.0.0") == ["any"]


@pytest.mark.parametrize(
    ("nets", "host", "message"),
    [
        ([], "0.0.0.0", "names no client networks"),
        ([], "10.1.2.3", "names no client networks"),
        (["10.0.0.0/8\nExecStartPre=+/bin/sh"], "0.0.0.0", "is not an address"),
        (["example.com"], "0.0.0.0", "is not an address"),
        ("10.0.0.0/8", "0.0.0.0", "must be a list"),
    ],
)
def test_ip_allow_refused(
    common_filters: ModuleType, nets: object, host: str, message: str
) -> None:
    pytest.importorskip("ansible")
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=message):
        common_filters.ip_allow(nets, "main", host)


def _offline_score(path: Path) -> float:
    out = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    m = re.search(r"Overall exposure level for \S+: *([0-9]+(?:\.[0-9]+)?)", out.stdout)
    if out.returncode != 0 or m is None:
        pytest.skip(f"systemd-analyze cannot score a unit offline here: {out.stderr.strip()[:200]}")
    return float(m.group(1))


@pytest.mark.parametrize(("gpu", "limit"), [(False, 1.0), (True, 1.5)])
def test_systemd_analyze_score(
    server_filters: ModuleType,
    tmp_path: Path,
    gpu: bool,
    limit: float,
) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    unit = tmp_path / "llama-server-main.service"
    unit.write_text(render(server_filters, _instance(server_filters, gpu=gpu, api_key=False)))
    assert _offline_score(unit) <= limit

"""The llamafleet_ip_filter module (llamafleet_common): does a unit's IPAddressAllow= filter drop
a connection from an address of this host that it does not allow? Against real listening sockets
on this machine's own non-loopback address. Whether systemd's BPF filter runs depends on the
machine (this kind runs a hybrid cgroup hierarchy, where it does not); the pool scenario compares
the module's verdict with a probe from the controller, another machine. The "dropped" case is a
stand-in here (connect made to time out), saying so: it shows the verdict, not a kernel."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, plugin_path

MODULE = plugin_path("modules", "llamafleet_ip_filter")


@pytest.fixture(scope="module")
def ipf() -> ModuleType:
    return load_ansible_plugin(MODULE)


def _own_address() -> str:
    """A non-loopback IPv4 address of this machine (the one a default route leaves from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            addr = str(s.getsockname()[0])
        except OSError:
            addr = ""
    if not addr or addr.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address")
    return addr


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def test_an_open_listener_is_reported_by_unit_and_port(ipf: ModuleType, listener: int) -> None:
    addr = _own_address()
    out = ipf.check(addr, [{"port": listener, "unit": "x.service"}], [], 2.0)
    assert out["checked"] is True and out["enforced"] is False
    assert out["results"] == [{"port": listener, "unit": "x.service", "state": "open"}]
    assert f"x.service (port {listener})" in out["reason"] and addr in out["reason"]


def test_an_allowed_address_is_not_a_test(ipf: ModuleType, listener: int) -> None:
    addr = _own_address()
    out = ipf.check(addr, [{"port": listener, "unit": "x"}], [f"{addr}/32"], 2.0)
    assert out["checked"] is False and "allowed" in out["reason"]
    assert ipf.check("127.0.0.1", [{"port": listener, "unit": "x"}], [], 2.0)["checked"] is False


def test_nothing_listening_is_no_verdict(ipf: ModuleType) -> None:
    out = ipf.check(_own_address(), [{"port": _free_port(), "unit": "x"}], [], 2.0)
    assert out["checked"] is False and out["results"][0]["state"] == "closed"


def test_an_address_of_another_host_cannot_be_tested_from(ipf: ModuleType) -> None:
    out = ipf.check("192.0.2.77", [{"port": 9100, "unit": "x"}], [], 1.0)
    assert out["checked"] is False and "not an address of this host" in out["reason"]


def test_dropped_connections_mean_the_filter_is_in_effect(
    ipf: ModuleType, monkeypatch: pytest.MonkeyPatch, listener: int
) -> None:
    # stand-in for a kernel that runs the filter: the SYN is dropped, connect() times out
    def drop(self: socket.socket, where: object) -> None:
        raise TimeoutError("timed out")

    addr = _own_address()
    monkeypatch.setattr(socket.socket, "connect", drop)
    out = ipf.check(addr, [{"port": listener, "unit": "x"}], [], 0.2)
    assert out["checked"] is True and out["enforced"] is True
    assert out["results"][0]["state"] == "filtered"

"""The llama_server role's check that an instance's address filter is in effect: its real task
("Connect to each instance from an address its filter refuses", read from tasks/verify.yml, not
copied) run by the real ansible-playbook on localhost, with the llamafleet_ip_filter module.

What stands in for an instance: a TCP listener on 0.0.0.0 in this test process, outside any
systemd unit, so no IPAddressAllow= filter applies to it, as on a host whose kernel or container
does not run systemd's BPF filter. It cannot show a filter that works (the pool scenario's m4
compares the monitoring role's verdict with a connection from the controller)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import run_playbook

REPO = Path(__file__).resolve().parents[2]
TASK = "Connect to each instance from an address its filter refuses"


def _own_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(8)
        yield int(s.getsockname()[1])


def _run(tmp_path: Path, port: int, address: str, allow: list[str], require: bool) -> str:
    tasks = yaml.safe_load((REPO / "roles" / "llama_server" / "tasks" / "verify.yml").read_text())
    (task,) = [t for t in tasks if t.get("name") == TASK]
    role = tmp_path / "roles" / "probe"
    (role / "tasks").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([task], sort_keys=False))
    (role / "meta" / "main.yml").write_text("dependencies: [{role: llamafleet_common}]\n")
    values = {
        "ansible_host": address,
        "llama_server_require_ip_filter": require,
        "_llama_server_resolved": [
            {"name": "main", "host": "0.0.0.0", "port": port,
             "unit": "llama-server-main.service", "ip_allow": allow},
            # an instance that serves every address is not probed
            {"name": "open", "host": "0.0.0.0", "port": port,
             "unit": "llama-server-open.service", "ip_allow": ["any"]},
        ],
    }  # fmt: skip
    (tmp_path / "vars.json").write_text(json.dumps(values))
    play = "- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles: [probe]\n"
    out = run_playbook(tmp_path, play, "-e", "@vars.json")
    return out.stdout + out.stderr


@pytest.fixture
def address() -> str:
    found = _own_address()
    if found is None:
        pytest.skip("this machine has no address besides loopback to test from")
    return found


def test_an_unfiltered_instance_is_named_in_a_warning(
    tmp_path: Path, listener: int, address: str
) -> None:
    text = _run(tmp_path, listener, address, ["198.51.100.0/24"], require=False)
    assert "failed=0" in text, text
    assert "IPAddressAllow= is not in effect for llama-server-main.service" in text, text
    assert "llama-server-open.service" not in text.split("PLAY RECAP")[0].split(TASK)[1], text


def test_require_fails_the_run(tmp_path: Path, listener: int, address: str) -> None:
    text = _run(tmp_path, listener, address, ["198.51.100.0/24"], require=True)
    assert "failed=1" in text and "IPAddressAllow= is not in effect" in text, text


def test_nothing_to_test_from_when_the_hosts_address_is_allowed(
    tmp_path: Path, listener: int, address: str
) -> None:
    text = _run(tmp_path, listener, address, [f"{address}/32"], require=True)
    assert "failed=0" in text, text
    assert "not in effect" not in text, text

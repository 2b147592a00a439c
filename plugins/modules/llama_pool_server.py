#!/usr/bin/python
# Apache-2.0
"""Ansible module: one server of an HAProxy backend through the runtime API (its stats socket):
set it to ready, drain or maint, and wait until it has no request in flight or is UP."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_pool_server
short_description: Drain or ready a backend server of an HAProxy pool, and wait for it
description:
  - Talks to HAProxy's runtime API on its Unix stats socket (C(level admin)), as root.
  - O(state) sets the server's administrative state with C(set server PROXY/SERVER state ...);
    changed only when it was another one. C(drain) takes it out of load balancing (its
    conversations go to the other servers; with consistent hashing the others keep theirs) while
    the requests it is serving finish.
  - O(wait=idle) then polls C(show stat) until the server has no current session and nothing
    queued (C(scur) and C(qcur) 0); O(wait=up) polls until the health check sees it running
    (C(show servers state) operational state 2, status UP). Either fails after O(timeout) seconds,
    naming what is still in flight or the last check result; the state set stays as it is.
  - >-
    A socket that does not exist (HAProxy not installed yet) or a server the pool does not list
    is not an error with O(missing_ok) (C(found) false): nothing to drain there.
  - In check mode it reports what it would set and does not wait.
options:
  socket: {type: path, required: true, description: HAProxy's stats socket (level admin).}
  proxy: {type: str, default: llama, description: The HAProxy backend section.}
  server: {type: str, required: true, description: The server's name in that section.}
  state:
    type: str
    choices: [ready, drain, maint]
    description: The administrative state to set; omitted to leave it.
  wait:
    type: str
    choices: [none, idle, up]
    default: none
    description: What to wait for after setting the state.
  timeout: {type: int, default: 300, description: Seconds to wait in all.}
  interval: {type: float, default: 1.0, description: Seconds between two looks.}
  missing_ok: {type: bool, default: true, description: A missing socket or server is not an error.}
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

RETURN = r"""
found: {description: Whether the socket and the server exist.}
admin_before: {description: The administrative state before (ready, drain, maint).}
admin: {description: The administrative state now.}
status: {description: The server's status in show stat (UP, DOWN, DRAIN, MAINT, ...).}
check: {description: The last health check's description.}
scur: {description: Current sessions (requests in flight) of the server.}
qcur: {description: Requests queued for it.}
waited: {description: Seconds waited.}
"""

# imports after the module's documentation (Ansible's layout)
import csv  # noqa: E402
import os  # noqa: E402
import socket as _socket  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

#: srv_admin_state bits (HAProxy's server.h): forced, inherited, configured, resolver, health maint
MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
#: forced and inherited drain
DRAIN_BITS = 0x08 | 0x10
#: srv_op_state: SRV_ST_RUNNING
RUNNING = 2


class CommandRefusedError(Exception):
    """HAProxy answered a command with an error (``No such server.``, ``Unknown command``...)."""


def cli(path: str, command: str, timeout: float = 10.0) -> str:
    """Send one command to the runtime API and return its whole answer."""
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def parse_servers_state(text: str) -> dict[str, dict[str, str]]:
    """``show servers state PROXY``: a version line, a ``# be_id be_name ...`` header, one row per
    server; by server name."""
    header: list[str] = []
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
            continue
        fields = line.split()
        if not header or len(fields) < 4:
            continue
        row = dict(zip(header, fields, strict=False))
        if "srv_name" in row:
            out[row["srv_name"]] = row
    return out


def parse_stat(text: str) -> list[dict[str, str]]:
    """``show stat``: CSV with a ``# pxname,svname,...`` header."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return []
    header = lines[0][2:].split(",")
    return [dict(zip(header, row, strict=False)) for row in csv.reader(lines[1:]) if row]


def admin_word(bits: str) -> str:
    try:
        value = int(bits)
    except ValueError:
        return "unknown"
    if value & MAINT_BITS:
        return "maint"
    if value & DRAIN_BITS:
        return "drain"
    return "ready"


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


class Pool:
    """One server of one HAProxy backend section, seen through the runtime API."""

    def __init__(self, path: str, proxy: str, server: str) -> None:
        self.path, self.proxy, self.server = path, proxy, server

    def state(self) -> dict[str, str] | None:
        text = cli(self.path, f"show servers state {self.proxy}")
        if "Can't find backend" in text:
            return None
        return parse_servers_state(text).get(self.server)

    def stat(self) -> dict[str, str]:
        for row in parse_stat(cli(self.path, "show stat")):
            if row.get("pxname") == self.proxy and row.get("svname") == self.server:
                return row
        return {}

    def set(self, state: str) -> None:
        answer = cli(self.path, f"set server {self.proxy}/{self.server} state {state}").strip()
        if answer:
            raise CommandRefusedError(answer)

    def look(self) -> dict[str, Any]:
        row, st = self.state() or {}, self.stat()
        return {
            "admin": admin_word(row.get("srv_admin_state", "")),
            "op_state": _int(row.get("srv_op_state")),
            "status": st.get("status", ""),
            "check": st.get("check_desc", "") or st.get("check_status", ""),
            "scur": _int(st.get("scur")),
            "qcur": _int(st.get("qcur")),
        }


def run(module: AnsibleModule) -> dict[str, Any]:
    p = module.params
    path, proxy, server = p["socket"], p["proxy"], p["server"]
    name = f"{proxy}/{server}"
    if not os.path.exists(path):
        if p["missing_ok"]:
            return {"changed": False, "found": False, "msg": f"no HAProxy runtime API at {path}"}
        module.fail_json(msg=f"no HAProxy runtime API at {path}", found=False)
    pool = Pool(path, proxy, server)
    try:
        row = pool.state()
    except (ConnectionRefusedError, FileNotFoundError) as e:
        # a socket left behind by an HAProxy that is not running: nothing flows through it
        if p["missing_ok"]:
            return {"changed": False, "found": False, "msg": f"HAProxy is not running ({e})"}
        raise
    if row is None:
        if not p["missing_ok"]:
            module.fail_json(msg=f"{name} is not in the pool at {path}", found=False)
        return {"changed": False, "found": False, "msg": f"{name} is not in the pool"}
    before = admin_word(row.get("srv_admin_state", ""))
    want = p["state"]
    changed = want is not None and want != before
    if module.check_mode:
        return {"changed": changed, "found": True, "admin_before": before, "admin": want or before}
    if changed:
        try:
            pool.set(want)
        except CommandRefusedError as e:
            module.fail_json(msg=f"HAProxy refused to set {name} to {want}: {e}")
    start = time.monotonic()
    seen = wait(pool, p["wait"], p["timeout"], p["interval"])
    waited = time.monotonic() - start
    if seen.get("why"):
        module.fail_json(
            msg=f"{name} on {path}: {seen.pop('why')}",
            changed=changed,
            found=True,
            admin_before=before,
            waited=round(waited, 1),
            **seen,
        )
    return {
        "changed": changed,
        "found": True,
        "admin_before": before,
        "waited": round(waited, 1),
        **seen,
    }


def wait(pool: Pool, what: str, timeout: float, interval: float) -> dict[str, Any]:
    """Look at the server until ``what`` (idle: no session in flight nor queued; up: running and
    UP) holds, or ``timeout`` seconds passed: then the last look with ``why``."""
    start = time.monotonic()
    seen = pool.look()
    while what != "none":
        if what == "idle" and seen["scur"] == 0 and seen["qcur"] == 0:
            break
        if what == "up" and seen["op_state"] == RUNNING and seen["status"].startswith("UP"):
            break
        waited = time.monotonic() - start
        if waited >= timeout:
            if what == "idle":
                seen["why"] = (
                    f"still {seen['scur']} request(s) in flight and {seen['qcur']} queued "
                    f"(HAProxy scur/qcur) after {waited:.0f} s; it stays in {seen['admin']}"
                )
            else:
                seen["why"] = (
                    f"not UP after {waited:.0f} s (status {seen['status'] or '?'}, last check: "
                    f"{seen['check'] or '?'}); HAProxy sends it nothing until its /health passes"
                )
            break
        time.sleep(interval)
        seen = pool.look()
    return seen


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "required": True},
            "proxy": {"type": "str", "default": "llama"},
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["ready", "drain", "maint"]},
            "wait": {"type": "str", "choices": ["none", "idle", "up"], "default": "none"},
            "timeout": {"type": "int", "default": 300},
            "interval": {"type": "float", "default": 1.0},
            "missing_ok": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except OSError as e:
        module.fail_json(msg=f"HAProxy runtime API at {module.params['socket']}: {e}")


if __name__ == "__main__":
    main()

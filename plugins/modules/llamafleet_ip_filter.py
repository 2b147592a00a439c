#!/usr/bin/python
# Apache-2.0
"""Ansible module: check that systemd's address filter of a listening unit (IPAddressDeny=any
with IPAddressAllow=) is in effect on this host, by connecting to it from an address it refuses."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llamafleet_ip_filter
short_description: Check that a unit's IPAddressAllow= filter drops packets from other addresses
description:
  - systemd enforces C(IPAddressAllow=)/C(IPAddressDeny=) with a cgroup BPF program. Where the
    kernel or the container does not run it (cgroup v1 or hybrid hierarchies, some containers), a
    unit that says C(IPAddressAllow=localhost) and listens on C(0.0.0.0) answers everybody, and
    nothing says so.
  - For each port, connects from O(address) (an address of this host that the filter does not
    allow) to O(address):port. A connection that is set up means the filter is not in effect;
    one that times out means packets from that address are dropped (in effect); a refused one
    means nothing listens there.
  - >-
    Skips the check (RV(checked) false, with the reason) when O(address) is allowed by O(allowed)
    (or is loopback): then there is no address of this host to test from.
  - Never changes anything. With O(require) a filter that is not in effect fails the task;
    otherwise the module warns, naming the units and ports.
options:
  address:
    type: str
    required: true
    description: The address the listeners are reached at (an address of this host), or a name.
  ports:
    type: list
    elements: dict
    required: true
    description: The listeners, each C({port, unit}).
  allowed:
    type: list
    elements: str
    default: []
    description: >-
      The units' C(IPAddressAllow=) entries besides localhost (addresses and CIDR ranges).
  timeout:
    type: float
    default: 2.0
    description: Seconds to wait for each connection.
  require:
    type: bool
    default: false
    description: Fail when a filter is not in effect (else warn).
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Check that the exporters' address filter is in effect
  llamafleet.fleet.llamafleet_ip_filter:
    address: "{{ ansible_host }}"
    ports:
      - {port: 9100, unit: prometheus-node-exporter.service}
      - {port: 3903, unit: llamafleet-mtail.service}
    allowed: ["10.0.0.9"]
"""

RETURN = r"""
checked:
  description: Whether the check ran (false when there is no refused address to test from).
  returned: always
  type: bool
reason:
  description: Why it did not run, or the verdict in words.
  returned: always
  type: str
enforced:
  description: True when every listening port dropped the connection; null when not checked.
  returned: always
  type: bool
results:
  description: Per port, C({port, unit, state}) with state V(filtered), V(open) or V(closed).
  returned: always
  type: list
"""

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def probe(address: str, port: int, timeout: float) -> str:
    """`open` (the connection was set up), `filtered` (no answer: dropped) or `closed`."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.bind((address, 0))
        try:
            s.connect((address, port))
        except TimeoutError:
            return "filtered"
        except ConnectionRefusedError:
            return "closed"
        except OSError:
            return "filtered"
        return "open"


def allowed_by(address: str, allowed: list[str]) -> bool:
    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return True
    for entry in allowed:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def check(
    address: str, ports: list[dict[str, Any]], allowed: list[str], timeout: float
) -> dict[str, Any]:
    try:
        resolved = str(socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except OSError as exc:
        return {"checked": False, "reason": f"{address}: not resolved ({exc})", "results": []}
    if allowed_by(resolved, allowed):
        return {
            "checked": False,
            "reason": f"{resolved} is allowed by the filter: no refused address here to test from",
            "results": [],
        }
    try:
        with socket.socket(socket.AF_INET6 if ":" in resolved else socket.AF_INET) as s:
            s.bind((resolved, 0))
    except OSError as exc:
        return {
            "checked": False,
            "reason": f"{resolved} is not an address of this host ({exc}): cannot test from it",
            "results": [],
        }
    with ThreadPoolExecutor(max_workers=max(1, len(ports))) as pool:
        states = list(pool.map(lambda p: probe(resolved, int(p["port"]), timeout), ports))
    results = [
        {"port": int(p["port"]), "unit": str(p.get("unit", "")), "state": st}
        for p, st in zip(ports, states, strict=True)
    ]
    open_ = [r for r in results if r["state"] == "open"]
    listening = [r for r in results if r["state"] != "closed"]
    if open_:
        names = ", ".join(f"{r['unit']} (port {r['port']})" for r in open_)
        reason = (
            f"IPAddressAllow= is not in effect for {names}: a connection from {resolved}, "
            "which the units do not allow, was accepted (systemd's cgroup BPF address filter "
            "does not run here: a cgroup v1/hybrid hierarchy or a container). Bind the "
            "listeners to the "
            "addresses that need them or add a firewall."
        )
        return {"checked": True, "enforced": False, "reason": reason, "results": results}
    if not listening:
        return {"checked": False, "reason": "nothing listens on these ports", "results": results}
    return {
        "checked": True,
        "enforced": True,
        "reason": f"connections from {resolved} are dropped: the filter is in effect",
        "results": results,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "ports": {"type": "list", "elements": "dict", "required": True},
            "allowed": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "float", "default": 2.0},
            "require": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"enforced": None, **check(p["address"], p["ports"], p["allowed"], p["timeout"])}
    if result["checked"] and not result["enforced"]:
        if p["require"]:
            module.fail_json(msg=result["reason"], **result)
        module.warn(result["reason"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

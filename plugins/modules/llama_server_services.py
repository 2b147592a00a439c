#!/usr/bin/python
# Apache-2.0
# ruff: noqa: E402
"""Ansible module: every llama-server unit of a host enabled and running, and exactly the ones
whose unit or key credential changed restarted, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_services
short_description: Enable and start the llama-server units, and restart the changed ones
description:
  - For each unit of O(units), as M(ansible.builtin.systemd_service) with C(enabled=true) and
    C(state=started) would, enables it when it is not enabled and starts it when it is not
    active (or activating).
  - Then restarts each unit of O(restart) that was already running (a unit this call started
    reads its new unit file and credentials anyway); llama-server reads its flags and keys only
    when it starts.
  - With O(daemon_reload) systemd reloads its unit files first (a unit file was written).
  - In check mode it reports what it would do and changes nothing; a unit systemd does not know
    yet (its file is not written in check mode) is left out and listed in RV(unknown).
version_added: "0.2.0"
options:
  units:
    description: The units (C(llama-server-NAME.service)).
    type: list
    elements: str
    required: true
  restart:
    description:
      - The units of O(units) to restart when they were running (their unit or key credential
        changed).
    type: list
    elements: str
    default: []
  daemon_reload:
    description: Reload systemd's unit files first.
    type: bool
    default: false
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Enable and start each instance, restarting the changed ones
  llamafleet.fleet.llama_server_services:
    units: [llama-server-main.service]
    restart: [llama-server-main.service]
    daemon_reload: true
"""

RETURN = r"""
enabled:
  description: The units enabled by this call.
  returned: always
  type: list
  elements: str
started:
  description: The units started by this call.
  returned: always
  type: list
  elements: str
restarted:
  description: The units restarted by this call.
  returned: always
  type: list
  elements: str
unknown:
  description: Units systemd does not know (in check mode, the ones not written yet).
  returned: always
  type: list
  elements: str
"""

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule

_UNIT = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._-]*\.service")
#: as ansible.builtin.systemd_service counts a unit as running
_RUNNING = frozenset({"active", "activating"})
_ENABLED = frozenset({"enabled", "enabled-runtime", "static", "alias", "indirect", "generated"})


def unit_state(module: AnsibleModule, systemctl: str, unit: str) -> dict[str, str]:
    """LoadState, ActiveState and UnitFileState of a unit, from ``systemctl show``."""
    rc, out, err = module.run_command(
        [systemctl, "show", "--property=LoadState,ActiveState,UnitFileState", "--", unit]
    )
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip() or out.strip()}")
    found: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        found[key.strip()] = value.strip()
    return found


def run(module: AnsibleModule, systemctl: str, *args: str) -> None:
    rc, out, err = module.run_command([systemctl, *args])
    if rc != 0:
        module.fail_json(msg=f"systemctl {' '.join(args)} failed: {err.strip() or out.strip()}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "str", "required": True},
            "restart": {"type": "list", "elements": "str", "default": []},
            "daemon_reload": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [u for u in [*p["units"], *p["restart"]] if not _UNIT.fullmatch(u)]
    if bad:
        module.fail_json(msg=f"not a service unit name: {', '.join(bad)}")
    systemctl = module.get_bin_path("systemctl", required=True)
    check = module.check_mode
    out: dict[str, Any] = {"enabled": [], "started": [], "restarted": [], "unknown": []}
    if p["daemon_reload"] and not check:
        run(module, systemctl, "daemon-reload")
    for unit in p["units"]:
        state = unit_state(module, systemctl, unit)
        if state.get("LoadState") == "not-found":
            if check:
                out["unknown"].append(unit)
                continue
            module.fail_json(msg=f"systemd does not know {unit} (no unit file)", **out)
        if state.get("UnitFileState") not in _ENABLED:
            if not check:
                run(module, systemctl, "enable", "--", unit)
            out["enabled"].append(unit)
        if state.get("ActiveState") not in _RUNNING:
            if not check:
                run(module, systemctl, "start", "--", unit)
            out["started"].append(unit)
        elif unit in p["restart"]:
            if not check:
                run(module, systemctl, "restart", "--", unit)
            out["restarted"].append(unit)
    changed = bool(out["enabled"] or out["started"] or out["restarted"])
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()

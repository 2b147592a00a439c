#!/usr/bin/python
# Apache-2.0
# ruff: noqa: E402
"""Ansible module: what a host serves before a rollout changes it (the build link and the
llama-server units), in one call, for the rollout's rollback."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_units_snapshot
short_description: Remember the build link and the llama-server units a host runs, for a rollback
description:
  - Reads, in one call, what C(playbooks/rollout.yml) puts back when a host fails its rollout, the
    build link (where O(link) points) and the content of every unit file in O(unit_dir) whose name
    matches O(pattern).
  - A unit is read only when it is a regular file with one link, opened without following a
    symbolic link and never blocking; anything else there (a link, a FIFO, a hard-linked file) is
    not taken (it is listed in RV(ignored)) and so is never written back. Files larger than
    O(max_size) bytes fail the task.
  - Never changes anything; runs the same in check mode.
version_added: "0.2.0"
options:
  link:
    description: The build link (C(<llama_cpp_prefix>/current)).
    type: path
    required: true
  unit_dir:
    description: The directory of the units.
    type: path
    default: /etc/systemd/system
  pattern:
    description: Shell pattern of the unit file names.
    type: str
    default: llama-server-*.service
  max_size:
    description: The largest unit file read, in bytes.
    type: int
    default: 1048576
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Remember the build and the units in use
  llamafleet.fleet.llamafleet_units_snapshot:
    link: /opt/llama.cpp/current
  register: _snapshot
"""

RETURN = r"""
link:
  description: The build link as M(ansible.builtin.stat) reports it (C(exists), C(islnk) and, for a
    link, C(lnk_source), the real path it resolves to, and C(lnk_target), what it names).
  returned: always
  type: dict
units:
  description: One entry per unit read, in name order, shaped as M(ansible.builtin.slurp) returns
    it (C(source), the path, and C(content), base64).
  returned: always
  type: list
  elements: dict
ignored:
  description: The paths matching O(pattern) that were not read (not a regular file with one link).
  returned: always
  type: list
  elements: str
"""

import base64
import fnmatch
import os
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils import safefs


def link_state(path: str) -> dict[str, Any]:
    """The link as the stat module reports the keys the rollback reads."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False, "islnk": False}
    found: dict[str, Any] = {"exists": True, "islnk": stat.S_ISLNK(st.st_mode)}
    if found["islnk"]:
        found["lnk_source"] = os.path.realpath(path)
        found["lnk_target"] = os.readlink(path)
    return found


def read_units(
    unit_dir: str, pattern: str, max_size: int
) -> tuple[list[dict[str, str]], list[str]]:
    """(units read, paths not taken); ValueError for a unit larger than max_size. Each unit is
    opened with safefs.open_regular: a regular file with one link, no link followed, no FIFO
    blocked on; anything else is not taken."""
    units: list[dict[str, str]] = []
    ignored: list[str] = []
    try:
        dfd = os.open(unit_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return units, ignored
    try:
        for name in sorted(os.listdir(dfd)):
            if not fnmatch.fnmatchcase(name, pattern):
                continue
            path = os.path.join(unit_dir, name)
            try:
                opened = safefs.open_regular(dfd, unit_dir, name)
            except safefs.UnsafePathError:
                ignored.append(path)
                continue
            if opened is None:
                continue
            fd, _ = opened
            try:
                data = safefs.read_fd(fd, max_size)
            finally:
                os.close(fd)
            if len(data) > max_size:
                raise ValueError(f"{path}: more than max_size={max_size} bytes")
            units.append({"source": path, "content": base64.b64encode(data).decode("ascii")})
    finally:
        os.close(dfd)
    return units, ignored


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "link": {"type": "path", "required": True},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "pattern": {"type": "str", "default": "llama-server-*.service"},
            "max_size": {"type": "int", "default": 1048576},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        units, ignored = read_units(p["unit_dir"], p["pattern"], p["max_size"])
    except (OSError, ValueError) as e:
        module.fail_json(msg=f"cannot read the units in {p['unit_dir']}: {e}")
    module.exit_json(changed=False, link=link_state(p["link"]), units=units, ignored=ignored)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Apache-2.0
"""Ansible module (run on the controller): the index of shipped llama.cpp builds, index.json
beside the tarballs. The controller records the sha256 it computed on its own copy of a fetched
tarball; hosts only ever get to install a tarball that matches it."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_cpp_build_index
short_description: Query or record a shipped llama.cpp build in the controller's index
description:
  - >-
    Meant for C(delegate_to: localhost). The index is C(<dir>/index.json); tarballs are
    C(<dir>/<platform>/<name>.tar.gz).
  - O(name) and O(platform) are validated before they become paths (a build name is
    C(b<number>-<10 hex>-<cpu|cuda>-<10 hex>)); anything else fails.
  - With O(state=query) (read-only) returns the entry of O(name) for O(platform), the tarball's
    path, whether it exists, and the path to fetch a new tarball to (O(builder) names it).
  - >-
    With O(state=query) and no O(name), finds the name: the one build recorded for O(platform)
    with O(commit) whose name ends in C(-<commit[:10]>-<backend>-<options_hash[:10]>) and whose
    tarball is in place (RV(name) is empty when there is none or more than one). A host that
    installs a shipped build learns its build number so, without cloning the history.
  - With O(state=present) computes the sha256 and size of O(src) (the fetched file, on the
    controller), moves it to the tarball's path and records the entry, under a lock. An entry
    whose tarball is still in place with the recorded sha256 is kept and O(src) is dropped.
  - >-
    With O(builders), only those hosts count. A query does not find an entry recorded from
    another host (a builder taken off the list: RV(ignored) says so), and O(state=present) refuses
    to record anything from a O(builder) that is not one of them. Before recording, every member
    of the tarball is checked and every binary must agree with the C(binaries_sha256) of the
    manifest inside it, which must name O(builder) as its host.
options:
  dir:
    description: The controller's directory of shipped builds.
    type: path
    required: true
  platform:
    description: The platform key (distribution, release, architecture, backend, CUDA archs).
    type: str
    required: true
  name:
    description: The build name (required, except for a query that finds it).
    type: str
  backend:
    description: With a query without O(name), the build's backend.
    type: str
    choices: [cpu, cuda]
  options_hash:
    description: With a query without O(name), the sha256 of the build's options (hex).
    type: str
  state:
    description: V(query) or V(present).
    type: str
    choices: [query, present]
    default: query
  src:
    description: With O(state=present), the fetched tarball (the RV(incoming) path of a query).
    type: path
  builder:
    description: The host that built and packed it (recorded; names the incoming file).
    type: str
    default: ""
  commit:
    description: The build's commit (recorded; with a query without O(name), the commit sought).
    type: str
    default: ""
  builders:
    description: >-
      The hosts allowed to ship builds (the inventory's C(llama_cpp_builders) group, as the
      llama_cpp role passes it). Omitted: any host (no restriction).
    type: list
    elements: str
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Look the build up
  llamafleet.fleet.llama_cpp_build_index:
    dir: ~/.cache/llamafleet/builds
    platform: debian-bookworm-x86_64-cpu-any
    name: b9079-69d8e4be47-cpu-3f2a9c1d0e
  delegate_to: localhost
  become: false
  register: _entry
"""

RETURN = r"""
name:
  description: The build's name (O(name), or the one a query found; "" when none).
  returned: always
  type: str
found:
  description: Whether the index has an entry for the build.
  returned: always
  type: bool
entry:
  description: The entry (sha256, size, file, platform, builder, commit, recorded_at), or {}.
  returned: always
  type: dict
tarball:
  description: The tarball's path on the controller.
  returned: always
  type: str
tarball_exists:
  description: Whether that file exists.
  returned: always
  type: bool
incoming:
  description: Where to fetch a new tarball of O(builder) to before recording it.
  returned: always
  type: str
ignored:
  description: Why an entry of the index was not used (recorded from a host not in O(builders)).
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    UnsafeArchiveError,
    query,
    record,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "platform": {"type": "str", "required": True},
            "name": {"type": "str"},
            "backend": {"type": "str", "choices": ["cpu", "cuda"]},
            "options_hash": {"type": "str"},
            "state": {"type": "str", "choices": ["query", "present"], "default": "query"},
            "src": {"type": "path"},
            "builder": {"type": "str", "default": ""},
            "commit": {"type": "str", "default": ""},
            "builders": {"type": "list", "elements": "str"},
        },
        required_if=[("state", "present", ["src", "name"])],
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"] or ""
    if not name and (
        p["state"] != "query" or not (p["backend"] and p["options_hash"] and p["commit"])
    ):
        module.fail_json(msg="a query without name needs commit, backend and options_hash")
    try:
        result = query(
            p["dir"],
            p["platform"],
            name=name,
            commit=p["commit"],
            backend=p["backend"] or "",
            options_hash=p["options_hash"] or "",
            builders=p["builders"],
            builder=p["builder"],
        )
        if p["state"] == "query" or not result["name"]:
            module.exit_json(changed=False, **result)
        if module.check_mode:
            module.exit_json(changed=True, **result)
        incoming = str(result["incoming"])
        if os.path.realpath(p["src"]) != os.path.realpath(incoming):
            module.fail_json(msg=f"src must be the incoming path {incoming}", **result)
        changed, entry = record(
            p["dir"],
            p["platform"],
            name,
            p["src"],
            builder=p["builder"],
            commit=p["commit"],
            builders=p["builders"],
        )
    except (ValueError, OSError, UnsafeArchiveError) as exc:
        module.fail_json(msg=f"shipped builds index {p['dir']}: {exc}")
    result.update(found=True, entry=entry, tarball_exists=True)
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Apache-2.0
"""Ansible module: install a build shipped through the controller, only when its sha256 equals the
one the controller recorded, and only if every member is safe (see
plugins/module_utils/safetar.py)."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_cpp_unpack
short_description: Verify and unpack a shipped llama.cpp build tarball as root, safely
description:
  - Opens O(src) once (no link followed) and computes its sha256 on this host; a value other than
    O(sha256) fails with a message naming the build, the expected and the actual hash, and nothing
    is unpacked.
  - Reads the whole member list before writing anything. Every member must be a regular file or a
    directory below C(<name>/); absolute paths, C(..) components, symbolic and hard links, devices
    and FIFOs refuse the archive.
  - Unpacks into a fresh private staging directory inside O(dest) (files root:root, C(0755) when
    executable else C(0644), directories C(0755), no set-id bits, owner and modes of the archive
    ignored), checks that the unpacked C(manifest.json) names the build O(name) (and the commit
    O(commit)) and that every file in C(bin/) is one of its C(binaries_sha256) with that sha256
    and every binary it lists is there (a binary changed or added by the host that packed it
    refuses the build), and with O(builder) that it was built on that host; then renames it to
    C(<dest>/<name>) and hashes the installed binaries again against the manifest.
  - A C(<dest>/<name>) that already has its C(manifest.json) is left alone (changed=false).
  - O(dest) must be a directory of root that group and others cannot write to.
options:
  src:
    description: The tarball on this host (in a directory only root can write to).
    type: path
    required: true
  dest:
    description: The builds directory (C(<prefix>/builds)).
    type: path
    required: true
  name:
    description: The build's name (its top directory in the archive).
    type: str
    required: true
  sha256:
    description: The sha256 the controller recorded for this build.
    type: str
    required: true
  commit:
    description: The commit this host checked out; the manifest must name it. Empty skips the check.
    type: str
    default: ""
  builder:
    description: >-
      The host the controller recorded the build from (its index entry); the manifest's C(host)
      must name it. Empty skips the check.
    type: str
    default: ""
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.none
"""

EXAMPLES = r"""
- name: Install the shipped build
  llamafleet.fleet.llama_cpp_unpack:
    src: /opt/llama.cpp/.incoming/b9079-69d8e4be47-cpu-3f2a9c1d0e.tar.gz
    dest: /opt/llama.cpp/builds
    name: b9079-69d8e4be47-cpu-3f2a9c1d0e
    sha256: "{{ entry.sha256 }}"
    commit: 69d8e4be47243e83b3d0d71e932bc7aa61c644dc
"""

RETURN = r"""
sha256:
  description: The sha256 computed on this host.
  returned: success
  type: str
members:
  description: The number of archive members.
  returned: success
  type: int
binaries_sha256:
  description: The binaries the manifest lists, with their sha256 (checked on the installed files).
  returned: changed
  type: dict
build_dir:
  description: The installed build directory.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    ChecksumMismatchError,
    UnsafeArchiveError,
    unpack_build,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "sha256": {"type": "str", "required": True},
            "commit": {"type": "str", "default": ""},
            "builder": {"type": "str", "default": ""},
        },
        supports_check_mode=False,
    )
    p = module.params
    try:
        result = unpack_build(
            p["src"],
            p["dest"],
            p["name"],
            p["sha256"].strip().lower(),
            p["commit"] or None,
            builder=p["builder"] or None,
        )
    except ChecksumMismatchError as exc:
        module.fail_json(msg=str(exc))
    except (UnsafeArchiveError, ValueError, OSError, EOFError) as exc:
        module.fail_json(msg=f"shipped build {p['name']}: refused ({exc}); nothing was unpacked")
    except Exception as exc:  # tarfile.TarError, gzip errors
        module.fail_json(
            msg=f"shipped build {p['name']}: not a readable archive ({type(exc).__name__}: {exc}); "
            "nothing was unpacked"
        )
    module.exit_json(build_dir=f"{p['dest'].rstrip('/')}/{p['name']}", **result)


if __name__ == "__main__":
    main()

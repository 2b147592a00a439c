#!/usr/bin/python
# Apache-2.0
"""Ansible module: install the binaries the build account compiled, without root ever opening a
path in the build account's directories (see plugins/module_utils/safetar.py)."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_cpp_install_bins
short_description: Stream binaries out of a build tree as the build account into a root directory
description:
  - Runs C(runuser -u <user> -- tar -C <tree> --no-recursion -cf - <names>), so the build account
    reads its own build tree, and unpacks that stream as root into a fresh private staging directory
    next to O(dest), then renames it to O(dest) (an older O(dest) is replaced).
  - The stream may hold only regular files named exactly as O(names) (no directory, no link, no
    path); anything else, a missing name or a non-zero exit of C(tar) refuses the install and leaves
    nothing behind. A link planted in the build tree is archived as a link and refused, never
    followed by root.
  - Installed files are root:root, mode C(0755). Their sha256 are returned.
  - The parent of O(dest) must be a directory of root (the user running the module) that group and
    others cannot write to.
  - Must run as root (C(runuser)).
options:
  tree:
    description: The build tree's directory that holds the binaries (e.g. C(<tree>/bin)).
    type: path
    required: true
  user:
    description: The build account that owns O(tree).
    type: str
    required: true
  names:
    description: The binaries to install (plain file names).
    type: list
    elements: str
    required: true
  dest:
    description: The directory to create with the binaries (e.g. C(<prefix>/builds/<name>/bin)).
    type: path
    required: true
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.none
"""

EXAMPLES = r"""
- name: Install llama-server from the build tree
  llamafleet.fleet.llama_cpp_install_bins:
    tree: /var/cache/llama.cpp/build/b9079-69d8e4be47-cuda-3f2a9c1d0e/bin
    user: llama-build
    names: [llama-server]
    dest: /opt/llama.cpp/builds/b9079-69d8e4be47-cuda-3f2a9c1d0e/bin
"""

RETURN = r"""
sha256:
  description: The sha256 of each installed binary.
  returned: success
  type: dict
  sample: {llama-server: 3f2a...}
"""

import os
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    UnsafeArchiveError,
    install_stream,
)


def stream_command(runuser: str, tar: str, user: str, tree: str, names: list[str]) -> list[str]:
    """The command that lets the build account archive its own binaries (no link followed)."""
    return [runuser, "-u", user, "--", tar, "-C", tree, "--no-recursion", "-cf", "-", *names]


def run(argv: list[str], dest: str, names: list[str]) -> dict[str, str]:
    """Unpack the stream of `argv` into `dest`; refused when tar fails or the stream is unsafe."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, cwd="/"
        )
        stdout = proc.stdout
        if stdout is None:
            raise AssertionError("expected stdout is not None")

        def tar_ok() -> None:
            stdout.read()
            if proc.wait() != 0:
                err.seek(0)
                raise UnsafeArchiveError(
                    f"{' '.join(argv)} exited {proc.returncode}: "
                    + err.read().decode("utf-8", "replace").strip()[-2000:]
                )

        try:
            hashes: dict[str, str] = install_stream(stdout, dest, names, before_commit=tar_ok)
            return hashes
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "tree": {"type": "path", "required": True},
            "user": {"type": "str", "required": True},
            "names": {"type": "list", "elements": "str", "required": True},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    if os.geteuid() != 0:
        module.fail_json(msg="llama_cpp_install_bins must run as root (become: true)")
    if p["user"] in ("", "root") or p["user"].startswith("-"):
        module.fail_json(msg=f"refusing build account {p['user']!r}")
    argv = stream_command(
        module.get_bin_path("runuser", required=True),
        module.get_bin_path("tar", required=True),
        p["user"],
        p["tree"],
        p["names"],
    )
    try:
        hashes = run(argv, p["dest"], p["names"])
    except (UnsafeArchiveError, ValueError, OSError) as exc:
        module.fail_json(
            msg=f"refused to install the binaries of {p['tree']} into {p['dest']}: {exc}; "
            "nothing was installed"
        )
    module.exit_json(changed=True, sha256=hashes, dest=p["dest"])


if __name__ == "__main__":
    main()

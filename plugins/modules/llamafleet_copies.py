#!/usr/bin/python
# Apache-2.0 (see the repository)
# ruff: noqa: E402
"""Keep a root-owned directory's copies of files read on other hosts, in one task."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_copies
short_description: Keep a root-owned directory of copies of other hosts' files in one task
description:
  - The directory O(path) holds copies of files that the play read on other hosts (the instances'
    monitoring keys, their CA certificates, the backends' CA certificates of a pool). One task
    creates the directory, compares every copy, writes those that differ and removes those no
    longer wanted, where a directory, a C(stat), a C(copy) and a C(file) task per file did it
    before (one module run on the host instead of two or three per file).
  - O(path) is created when missing (C(root:root), O(dir_mode)) and made C(root:root) O(dir_mode)
    when it is not. Every directory above it must be owned by root and writable by nobody else
    (a sticky one such as C(/tmp) is accepted); O(path) is opened without following a link, so
    no other account can redirect what root writes.
  - A copy is replaced when its bytes, its owner (C(root:root)), its mode (O(mode)) or its kind
    differ. The new one is a file created exclusively (C(0600) until complete) and renamed over
    the name through the directory's descriptor. What stood at the name (a link, a file with
    several hard links) is replaced, never written through.
  - An entry of O(files) without C(content) is a file whose source was not reached, and the
    copy from before stays. Where there is none, the task fails before it writes or removes a
    copy, with the C(missing) message of every such entry. In check mode it reports them in
    RV(missing) instead (the source may be made by the run that check mode shows).
  - Every other entry of the directory whose name ends in O(suffix) is removed (a copy of a
    source that is no longer wanted); a directory of such a name is refused.
version_added: "0.2.0"
options:
  path:
    description: The directory (absolute).
    type: path
    required: true
  dir_mode:
    description: The directory's mode (C(0700) for keys).
    type: str
    default: "0755"
  mode:
    description: Each copy's mode (C(0600) for keys).
    type: str
    default: "0644"
  suffix:
    description:
      - The ending of every copy's name (C(.key), C(.crt)).
      - Entries of the directory with this ending that O(files) does not name are removed.
    type: str
    required: true
  files:
    description: The copies the directory holds.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The copy's name in O(path), one path component ending in O(suffix).
        type: str
        required: true
      content:
        description:
          - The copy's text.
          - Absent or null when its source was not read (the copy from before stays).
        type: str
      missing:
        description:
          - The message the task fails with when C(content) is absent and there is no copy from
            before (what could not be read, and what to run first).
        type: str
        default: ""
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check_diff
"""

EXAMPLES = r"""
- name: Copy each instance's monitoring key (root only)
  llamafleet.fleet.llamafleet_copies:
    path: /etc/llamafleet/monitoring/keys
    dir_mode: "0700"
    mode: "0600"
    suffix: .key
    files:
      - name: lf-1-main.key
        content: "{{ key_of_lf_1 }}\n"
        missing: "lf-1: the monitoring key of instance main could not be read"
  no_log: true
"""

RETURN = r"""
written:
  description: The copies written (or that would be, in check mode), by name.
  returned: always
  type: list
  elements: str
removed:
  description: The entries removed (or that would be), by name.
  returned: always
  type: list
  elements: str
missing:
  description:
    - The entries without content and without a copy from before (in check mode; otherwise the
      task fails).
  returned: always
  type: list
  elements: str
"""

import os
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    UnsafePathError,
    check_name,
    entry_problem,
    lstat_entry,
    open_regular,
    open_root_dir,
    read_fd,
    replace_file,
)

#: the largest copy (a key, a certificate chain)
LIMIT = 1024 * 1024


def _current(dfd: int, path: str, name: str, data: bytes, mode: int) -> bool:
    """Whether the entry `name` is already the copy: a regular root:root file of `mode` with one
    link holding `data`."""
    lst = lstat_entry(dfd, name)
    if lst is None:
        return False
    if stat.S_ISDIR(lst.st_mode):
        raise UnsafePathError(f"{path}/{name} is a directory where a copy belongs. Fix: remove it.")
    if entry_problem(lst) is not None:
        return False  # a link or a file with other names: replaced by the rename
    if (lst.st_uid, lst.st_gid, stat.S_IMODE(lst.st_mode)) != (0, 0, mode):
        return False
    if lst.st_size != len(data):
        return False
    opened = open_regular(dfd, path, name)
    if opened is None:
        return False
    fd, _ = opened
    try:
        same: bool = read_fd(fd, LIMIT) == data
        return same
    finally:
        os.close(fd)


def _wanted(
    path: str, files: list[dict[str, Any]], suffix: str
) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """The copies by name (None: its source was not read) and each one's `missing` message."""
    if not suffix or "/" in suffix:
        raise UnsafePathError(f"suffix {suffix!r}: give the ending of the copies' names (.key)")
    wanted: dict[str, bytes | None] = {}
    messages: dict[str, str] = {}
    for f in files:
        name = check_name(f.get("name"), "copy name")
        if not name.endswith(suffix) or name == suffix:
            raise UnsafePathError(f"copy name {name!r}: it must end in {suffix!r}")
        if name in wanted:
            raise UnsafePathError(f"copy name {name!r}: named twice")
        content = f.get("content")
        data = None if content is None else str(content).encode()
        if data is not None and len(data) > LIMIT:
            raise UnsafePathError(f"{path}/{name}: more than {LIMIT} bytes")
        wanted[name] = data
        messages[name] = str(f.get("missing") or f"{path}/{name}: its source was not read")
    return wanted, messages


def _stale(
    fd: int, path: str, names: list[str], wanted: dict[str, bytes | None], suffix: str
) -> list[str]:
    """The entries ending in `suffix` that are not wanted (a directory among them is refused)."""
    stale = []
    for name in sorted(names):
        if not name.endswith(suffix) or name in wanted:
            continue
        lst = lstat_entry(fd, name)
        if lst is None:
            continue
        if stat.S_ISDIR(lst.st_mode):
            raise UnsafePathError(
                f"{path}/{name} is a directory among the copies. Fix: remove it or move it."
            )
        stale.append(name)
    return stale


def keep(
    path: str,
    files: list[dict[str, Any]],
    *,
    suffix: str,
    mode: int = 0o644,
    dir_mode: int = 0o755,
    modify: bool = True,
) -> dict[str, Any]:
    """Bring the directory to `files`; returns written, removed, missing, changes (the
    directory's) and before (the copies it held). Raises UnsafePathError, or ValueError with the
    `missing` messages (before anything is changed in the directory)."""
    wanted, messages = _wanted(path, files, suffix)
    fd, changes = open_root_dir(path, dir_mode, modify=modify)
    out: dict[str, Any] = {"written": [], "removed": [], "missing": [], "changes": changes}
    if fd is None:  # check mode: the directory is not there yet, nor anything in it
        out["written"] = sorted(n for n, d in wanted.items() if d is not None)
        out["missing"] = sorted(n for n, d in wanted.items() if d is None)
        out["before"] = []
        return out
    try:
        names = os.listdir(fd)
        out["before"] = sorted(n for n in names if n.endswith(suffix))
        missing = sorted(n for n, d in wanted.items() if d is None and lstat_entry(fd, n) is None)
        if missing and modify:
            raise ValueError("\n".join(messages[n] for n in missing))
        out["missing"] = missing
        out["removed"] = _stale(fd, path, names, wanted, suffix)
        for name, data in sorted(wanted.items()):
            if data is not None and not _current(fd, path, name, data, mode):
                out["written"].append(name)
                if modify:
                    replace_file(fd, path, name, data, mode=mode)
        if modify:
            for name in out["removed"]:
                os.unlink(name, dir_fd=fd)
        return out
    finally:
        os.close(fd)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "dir_mode": {"type": "str", "default": "0755"},
            "mode": {"type": "str", "default": "0644"},
            "suffix": {"type": "str", "required": True},
            "files": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "name": {"type": "str", "required": True},
                    "content": {"type": "str", "no_log": True},
                    "missing": {"type": "str", "default": ""},
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        mode, dir_mode = int(p["mode"], 8), int(p["dir_mode"], 8)
    except ValueError:
        module.fail_json(msg=f"mode {p['mode']!r} / dir_mode {p['dir_mode']!r}: give octal modes")
    try:
        found = keep(
            p["path"],
            p["files"],
            suffix=p["suffix"],
            mode=mode,
            dir_mode=dir_mode,
            modify=not module.check_mode,
        )
    except (UnsafePathError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{p['path']}: {exc.strerror or exc}")
    changed = bool(found["changes"] or found["written"] or found["removed"])
    after = sorted(set(found["before"]) - set(found["removed"]) | set(found["written"]))
    prepared = found["changes"] + [f"{p['path']}/{n}: written" for n in found["written"]]
    prepared += [f"{p['path']}/{n}: removed" for n in found["removed"]]
    result: dict[str, Any] = {
        "changed": changed,
        "written": found["written"],
        "removed": found["removed"],
        "missing": found["missing"],
    }
    if module._diff:
        result["diff"] = {
            "before_header": p["path"],
            "after_header": p["path"],
            "before": "".join(n + "\n" for n in found["before"]),
            "after": "".join(n + "\n" for n in after),
            "prepared": "\n".join(prepared),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()

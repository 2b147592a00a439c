#!/usr/bin/python
# Apache-2.0 (see the repository)
# ruff: noqa: E402
"""Read a file another account controls, as that account, without following links or blocking."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_read
short_description: Read a file that another account controls, safely
description:
  - Reads one file for an audit. With O(user), the file is opened by a child process that has
    dropped to that account's uid, gid and groups, so a link planted by the user reaches nothing
    the user could not read anyway; every directory below O(anchor) and the file itself are opened
    without following symbolic links.
  - Refuses (and reports in RV(problem), without failing) a symbolic link, a FIFO, a device or any
    other non-regular file, a file with more than one hard link, a file owned by another account
    than O(user), and a file larger than O(max_size) bytes. Opening never blocks (O_NONBLOCK).
  - A file that does not exist is not a problem (RV(exists) is false).
version_added: "0.2.0"
options:
  path:
    description: Absolute path of the file.
    type: path
    required: true
  user:
    description: Read as this account (and require the file to be owned by it). Without it the
      module reads as root and requires every directory from O(anchor) down to be owned by root.
    type: str
  anchor:
    description: The directory from which the walk without links starts (a user's home; C(/)
      by default). It must itself be owned by O(user) (or root).
    type: path
    default: /
  max_size:
    description: The largest file read, in bytes.
    type: int
    default: 1048576
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Read a user's Claude Code settings
  llamafleet.fleet.llamafleet_read:
    path: /home/dev/.claude/settings.json
    anchor: /home/dev
    user: dev
  register: settings
  no_log: true
"""

RETURN = r"""
exists:
  description: Whether the file exists.
  returned: always
  type: bool
content:
  description: The file's bytes, base64-encoded (empty when refused or absent).
  returned: always
  type: str
mode:
  description: The file's permission bits as four octal digits (C(0600)).
  returned: when the file was read
  type: str
uid:
  description: The file's owner.
  returned: when the file was read
  type: int
size:
  description: The file's size in bytes.
  returned: when the file exists
  type: int
problem:
  description: Why the file was not read (empty when it was read or is absent).
  returned: always
  type: str
"""

import base64
import errno
import json
import os
import pwd
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    DIR_FLAGS,
    kind,
    owner_name,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    READ_FLAGS as FILE_FLAGS,
)


def read_file(
    path: str, anchor: str = "/", uid: int | None = None, max_size: int = 1048576
) -> dict[str, Any]:
    """Read `path` below `anchor` without following links. `uid` is the account that must own the
    directories and the file (None: root owns the directories; any owner for the file). Returns a
    dict: exists, content (bytes), mode, uid, size, problem."""
    out: dict[str, Any] = {"exists": False, "content": b"", "problem": ""}
    path = os.path.normpath(path)
    anchor = os.path.normpath(anchor)
    if not path.startswith(anchor.rstrip("/") + "/"):
        out["problem"] = f"{path} is not below {anchor}"
        return out
    parts = path[len(anchor.rstrip("/")) + 1 :].split("/")
    fd = _open_parent(anchor, parts[:-1], 0 if uid is None else uid, out)
    if fd is None:
        return out
    try:
        return _read_leaf(fd, path, parts[-1], out, uid=uid, max_size=max_size)
    finally:
        os.close(fd)


def _open_parent(
    anchor: str, dirs: list[str], want_dir_owner: int, out: dict[str, Any]
) -> int | None:
    """The directory `anchor`/`dirs`..., each step opened without following links and owned by
    root or `want_dir_owner`: its fd (the caller closes it), or None when a step is missing (out
    unchanged) or refused (out["problem"] says why)."""
    try:
        fd = os.open(anchor, DIR_FLAGS)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            out["problem"] = f"{anchor}: cannot open: {exc.strerror}"
        return None
    kept = False
    try:
        st = os.fstat(fd)
        if st.st_uid not in (0, want_dir_owner):
            out["problem"] = (
                f"{anchor} is owned by {owner_name(st.st_uid)}, not {owner_name(want_dir_owner)}"
            )
            return None
        here = anchor
        for name in dirs:
            here = os.path.join(here, name)
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return None
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    lst = os.lstat(name, dir_fd=fd)
                    what, owner = kind(lst.st_mode), owner_name(lst.st_uid)
                    out["problem"] = f"{here} is {what} (owned by {owner}); not followed"
                else:
                    out["problem"] = f"{here}: cannot open: {exc.strerror}"
                return None
            os.close(fd)
            fd = nfd
            st = os.fstat(fd)
            if st.st_uid not in (want_dir_owner, 0):
                owner, wanted = owner_name(st.st_uid), owner_name(want_dir_owner)
                out["problem"] = f"{here} is owned by {owner}, not {wanted}; not read"
                return None
        kept = True
        return fd
    finally:
        if not kept:
            os.close(fd)


def _read_leaf(
    fd: int, path: str, leaf: str, out: dict[str, Any], *, uid: int | None, max_size: int
) -> dict[str, Any]:
    """Read the regular file `leaf` of the directory `fd` (the whole `path`, for messages) into
    `out`: not a link, one hard link, owned by `uid` (when given), at most `max_size` bytes."""
    try:
        lst = os.lstat(leaf, dir_fd=fd)
    except FileNotFoundError:
        return out
    out["exists"] = True
    out["size"] = lst.st_size
    if not stat.S_ISREG(lst.st_mode):
        out["problem"] = (
            f"{path} is {kind(lst.st_mode)} (owned by {owner_name(lst.st_uid)}); not read"
        )
        return out
    try:
        ffd = os.open(leaf, FILE_FLAGS, dir_fd=fd)
    except OSError as exc:
        out["problem"] = f"{path}: cannot open: {exc.strerror}"
        return out
    try:
        fst = os.fstat(ffd)
        problem = _opened_file_problem(fst, path, uid, max_size)
        if problem:
            out["problem"] = problem
            return out
        data = _read_at_most(ffd, max_size + 1)
        if len(data) > max_size:
            out["problem"] = f"{path} grew past {max_size} bytes while read; not read"
            return out
        out.update(
            content=data,
            mode=f"{stat.S_IMODE(fst.st_mode):04o}",
            uid=fst.st_uid,
            size=len(data),
        )
        return out
    finally:
        os.close(ffd)


def _opened_file_problem(fst: os.stat_result, path: str, uid: int | None, max_size: int) -> str:
    """Why the opened file is not read ("" when it is)."""
    if not stat.S_ISREG(fst.st_mode):
        return f"{path} is {kind(fst.st_mode)}; not read"
    if fst.st_nlink != 1:
        return f"{path} has {fst.st_nlink} hard links; not read"
    if uid is not None and fst.st_uid != uid:
        return f"{path} is owned by {owner_name(fst.st_uid)}, not {owner_name(uid)}; not read"
    if fst.st_size > max_size:
        return f"{path} is {fst.st_size} bytes, more than the {max_size} read; not read"
    return ""


def _read_at_most(ffd: int, limit: int) -> bytes:
    """Up to `limit` bytes of `ffd` (less at its end, or when a non-blocking read would wait)."""
    chunks = []
    left = limit
    while left > 0:
        try:
            chunk = os.read(ffd, min(65536, left))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def drop_privileges(uid: int, gid: int, groups: list[int]) -> None:
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def read_as(
    path: str, anchor: str, uid: int, gid: int, groups: list[int], *, max_size: int
) -> dict[str, Any]:
    """read_file in a child process that runs as uid/gid/groups (when running as root)."""
    if os.geteuid() != 0 or uid == os.geteuid():
        return read_file(path, anchor, uid, max_size)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            drop_privileges(uid, gid, groups)
            res = read_file(path, anchor, uid, max_size)
            res["content"] = base64.b64encode(res["content"]).decode("ascii")
            payload = json.dumps(res).encode("utf-8")
        except Exception as exc:  # reported by the parent
            payload = json.dumps({"exists": False, "content": "", "problem": str(exc)}).encode()
            code = 1
        with os.fdopen(wfd, "wb") as fh:
            fh.write(payload)
        os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as fh:
        payload = fh.read()
    os.waitpid(pid, 0)
    got: dict[str, Any] = json.loads(payload.decode("utf-8") or "{}")
    got["content"] = base64.b64decode(got.get("content") or "")
    return got


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            user=dict(type="str"),
            anchor=dict(type="path", default="/"),
            max_size=dict(type="int", default=1048576),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isabs(p["path"]) or not os.path.isabs(p["anchor"]):
        module.fail_json(msg="path and anchor must be absolute")
    if p["user"]:
        try:
            pw = pwd.getpwnam(p["user"])
        except KeyError:
            module.fail_json(msg="no such account: {}".format(p["user"]))
        groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
        res = read_as(p["path"], p["anchor"], pw.pw_uid, pw.pw_gid, groups, max_size=p["max_size"])
    else:
        res = read_file(p["path"], p["anchor"], None, p["max_size"])
    res["content"] = base64.b64encode(res["content"]).decode("ascii")
    res["changed"] = False
    module.exit_json(**res)


if __name__ == "__main__":
    main()

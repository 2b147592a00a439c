#!/usr/bin/python
# Apache-2.0
"""Ansible module: the llama_server role's files of a host in one call: each instance's unit and
fixed chat template written when it differs, and the units and templates of instances that are
gone removed (their services stopped and disabled first)."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_server_units
short_description: Write the systemd units and chat templates of llama-server instances
description:
  - One call for every instance of a host (the llama_server role's configure step, as root).
  - Each file of O(units) (root C(0644)) and O(templates) (root C(0600), in O(template_dir),
    created root C(0700)) is written only when its content, owner or mode differ, through a
    temporary file in the same directory renamed over it (a link there is replaced, not
    followed).
  - A unit in O(unit_dir) that matches O(prune) and is not in O(units) belongs to an instance
    that is gone or disabled; its service is stopped and disabled (C(systemctl disable --now),
    a failure ignored) and the file removed. A C(*.jinja) file in O(template_dir) that is not in
    O(templates) is removed.
  - In check mode nothing changes; with C(--diff) each unit or template that would change shows
    as a diff of its text.
  - Must run as root.
options:
  units:
    description: The units to write.
    type: list
    elements: dict
    required: true
    suboptions:
      name: {description: The instance (in RV(changed_instances))., type: str, required: true}
      path: {description: The unit's absolute path in O(unit_dir)., type: path, required: true}
      content: {description: The unit's text., type: str, required: true}
  templates:
    description: The fixed chat templates to write.
    type: list
    elements: dict
    default: []
    suboptions:
      name: {description: The instance's name., type: str, required: true}
      path:
        {description: The template's absolute path in O(template_dir)., type: path, required: true}
      content: {description: The template's text., type: str, required: true}
  unit_dir: {description: Where the units are., type: path, default: /etc/systemd/system}
  prune:
    description: A shell pattern of the role's unit names.
    type: str
    default: llama-server-*.service
  template_dir:
    {description: The directory of the fixed chat templates., type: path, required: true}
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

RETURN = r"""
changed_instances:
  description: The instances whose unit or chat template was written (or would be).
  type: list
  elements: str
  returned: always
removed:
  description: The units and templates removed (or that would be), by path.
  type: list
  elements: str
  returned: always
"""

import fnmatch
import os
import secrets
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_READ = 16 * 1024 * 1024


class RefusedError(Exception):
    """A file or directory the module refuses; the message names it and the fix."""


def _current(dfd: int, name: str) -> tuple[bytes, tuple[int, int, int]] | None:
    """(content, (uid, gid, mode)) of a regular file ``name`` in ``dfd``; None when it is missing
    or not a regular file (a link, a directory: it is replaced)."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk or size > MAX_READ:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    finally:
        os.close(fd)


def _write(dfd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, CREATE_FLAGS, mode, dir_fd=dfd)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        os.unlink(tmp, dir_fd=dfd)
        raise RefusedError(f"{name} is a directory where a file belongs: remove it")
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def _open_dir(path: str, make: bool, check: bool) -> int | None:
    """A root-owned directory's descriptor (made root 0700 with ``make``); None when it does not
    exist (yet, in check mode)."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except FileNotFoundError:
        if not make or check:
            return None
        os.makedirs(os.path.dirname(path.rstrip("/")) or "/", mode=0o755, exist_ok=True)
        os.mkdir(path, 0o700)
        fd = os.open(path, DIR_FLAGS)
    except OSError as exc:
        raise RefusedError(
            f"{path} is not a directory that can be opened without following a link "
            f"({exc.strerror}): remove it, and the role makes it again"
        ) from exc
    st = os.fstat(fd)
    if st.st_uid != 0:
        os.close(fd)
        raise RefusedError(f"{path} is owned by uid {st.st_uid}: chown root:root {path}")
    return fd


class Files:
    def __init__(self, check: bool, diff: bool) -> None:
        self.check = check
        self.diff = diff
        self.diffs: list[dict[str, str]] = []
        self.changed: list[str] = []
        self.removed: list[str] = []
        self.touched = False

    def put(self, dfd: int | None, path: str, text: str, mode: int, instance: str) -> None:
        name = os.path.basename(path)
        data = text.encode()
        have = None if dfd is None else _current(dfd, name)
        if have is not None and have == (data, (0, 0, mode)):
            return
        self.touched = True
        if instance not in self.changed:
            self.changed.append(instance)
        if self.diff:
            before = "" if have is None else have[0].decode(errors="replace")
            self.diffs.append(
                {
                    "before_header": path if have is not None else f"{path} (absent)",
                    "after_header": path,
                    "before": before,
                    "after": text,
                }
            )
        if not self.check and dfd is not None:
            if have is not None and have[0] == data:
                fd = os.open(name, READ_FLAGS, dir_fd=dfd)  # the same text: owner and mode only
                try:
                    os.fchown(fd, 0, 0)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
            else:
                _write(dfd, name, data, mode)

    def drop(self, module: AnsibleModule, dfd: int, path: str, unit: bool) -> None:
        self.touched = True
        self.removed.append(path)
        if self.diff:
            gone = {"before_header": path, "after_header": f"{path} (removed)"}
            self.diffs.append(gone | {"before": "", "after": ""})
        if self.check:
            return
        if unit:
            module.run_command(["systemctl", "disable", "--now", os.path.basename(path)])
        os.unlink(os.path.basename(path), dir_fd=dfd)


def _in(path: str, directory: str, what: str) -> None:
    if os.path.dirname(os.path.normpath(path)) != os.path.normpath(directory):
        raise RefusedError(f"{what} {path} is not a file directly in {directory}")


def _units(module: AnsibleModule, work: Files, params: dict[str, Any]) -> None:
    unit_dir = params["unit_dir"]
    ufd = _open_dir(unit_dir, make=False, check=work.check)
    if ufd is None:
        raise RefusedError(f"{unit_dir} does not exist: is this a systemd host?")
    try:
        wanted = {os.path.basename(u["path"]) for u in params["units"]}
        for u in params["units"]:
            work.put(ufd, u["path"], u["content"], 0o644, u["name"])
        for entry in sorted(os.listdir(ufd)):
            if fnmatch.fnmatchcase(entry, params["prune"]) and entry not in wanted:
                work.drop(module, ufd, os.path.join(unit_dir, entry), unit=True)
    finally:
        os.close(ufd)


def _templates(module: AnsibleModule, work: Files, params: dict[str, Any]) -> None:
    template_dir, templates = params["template_dir"], params["templates"]
    tfd = _open_dir(template_dir, make=bool(templates), check=work.check)
    if tfd is None:
        work.touched = work.touched or bool(templates)  # made in a real run
        for t in templates:
            work.put(None, t["path"], t["content"], 0o600, t["name"])
        return
    try:
        st = os.fstat(tfd)
        if stat.S_IMODE(st.st_mode) != 0o700 or st.st_gid != 0:
            work.touched = True
            if not work.check:
                os.fchown(tfd, 0, 0)
                os.fchmod(tfd, 0o700)
        for t in templates:
            work.put(tfd, t["path"], t["content"], 0o600, t["name"])
        keep = {os.path.basename(t["path"]) for t in templates}
        for entry in sorted(os.listdir(tfd)):
            if entry.endswith(".jinja") and entry not in keep:
                work.drop(module, tfd, os.path.join(template_dir, entry), unit=False)
    finally:
        os.close(tfd)


def run(module: AnsibleModule, params: dict[str, Any], check: bool, diff: bool) -> dict[str, Any]:
    """What the module returns (raises RefusedError for what it refuses)."""
    for u in params["units"]:
        _in(u["path"], params["unit_dir"], "unit")
    for t in params["templates"]:
        _in(t["path"], params["template_dir"], "chat template")
    work = Files(check, diff)
    _units(module, work, params)
    _templates(module, work, params)
    result: dict[str, Any] = {
        "changed": work.touched,
        "changed_instances": work.changed,
        "removed": work.removed,
    }
    if diff and work.diffs:
        result["diff"] = work.diffs
    return result


def main() -> None:
    file_spec = {
        "name": {"type": "str", "required": True},
        "path": {"type": "path", "required": True},
        "content": {"type": "str", "required": True},
    }
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "dict", "required": True, "options": file_spec},
            "templates": {"type": "list", "elements": "dict", "default": [], "options": file_spec},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "prune": {"type": "str", "default": "llama-server-*.service"},
            "template_dir": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    if os.geteuid() != 0:
        module.fail_json(msg="llama_server_units must run as root (become: true)")
    try:
        result = run(module, module.params, module.check_mode, module._diff)
    except RefusedError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or ''}: {exc.strerror}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

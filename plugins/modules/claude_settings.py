#!/usr/bin/python
# Apache-2.0 (see the repository)
# ruff: noqa: E402
"""Merge owned keys into a Claude Code settings.json, keeping everything else."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: claude_settings
short_description: Merge keys into a Claude Code settings.json file
description:
  - Reads a Claude Code settings file (C(~/.claude/settings.json) or
    C(/etc/claude-code/managed-settings.json)), merges the given C(env) entries and top-level
    settings into it and writes it back only when the content changes. Keys it is not given stay
    as they are, in their order.
  - A file that is not valid JSON (or whose top level is not an object) is never overwritten; the
    module fails with the file, line and column of the error.
  - Top-level C(ANTHROPIC_*), C(CLAUDE_CODE_*) and C(API_TIMEOUT_MS) keys are ignored by Claude Code
    (only the C(env) block counts); they are moved into C(env) (a value already in C(env) wins) and
    reported in RV(moved).
  - The token is given separately (O(token), never logged) and masked in the diff.
  - With O(run_as) every file operation (reading, creating the directory, the backup, the new
    file) runs in a child process that has dropped all privileges to that user, so the user's own
    links and files can never make root read or write anything. Without it (root-owned files such
    as the managed settings) every directory from C(/) to the file must be owned by root and not
    writable by group or others.
  - Files are opened through directory descriptors without following links. A symbolic link, a
    directory or file not owned by the expected account, a file that is not a regular file, has
    more than one hard link or is larger than O(max_size) is refused and left as it is.
  - New content is written to a new file (a random name, created exclusively) beside the old one
    and renamed over it; the backup is a new file, created exclusively, mode 0600.
version_added: "0.1.0"
options:
  path:
    description: The settings file (an absolute path).
    type: path
    required: true
  run_as:
    description:
      - Do all the file work as this user (a forked child process with the user's uid, gid and
        groups). The file and its backups then belong to the user (group its primary group).
      - The user's home directory (from the passwd database; else the directory above the file's
        directory) must be owned by the user or root. The file's directory is created there (mode
        0700) when missing and must be a real directory owned by the user; its mode is set to 0700.
      - Cannot be combined with O(owner) or O(group).
    type: str
  owner:
    description:
      - Owner (name or uid) of the file, without O(run_as). Default the existing file's owner, or
        root for a new file.
    type: str
  group:
    description:
      - Group (name or gid) of the file, without O(run_as). Default the existing file's group, or
        root's for a new file.
    type: str
  mode:
    description:
      - Permissions of the file as an octal string such as C("0600"). Default the existing file's
        mode, or 0600 for a new file.
    type: raw
  max_size:
    description: Refuse settings files larger than this many bytes.
    type: int
    default: 1048576
  env:
    description: Entries to set in the C(env) block (values are written as strings).
    type: dict
    default: {}
  env_absent:
    description: Names to remove from the C(env) block.
    type: list
    elements: str
    default: []
  settings:
    description: Top-level settings to set. Mappings are merged recursively into existing mappings.
    type: dict
    default: {}
  token:
    description: Value of the C(env) entry O(token_key) (the server's API key). Not logged.
    type: str
  token_key:
    description: The C(env) name that carries O(token).
    type: str
    default: ANTHROPIC_AUTH_TOKEN
  move_misplaced:
    description:
      - Move top-level C(ANTHROPIC_*), C(CLAUDE_CODE_*), C(API_TIMEOUT_MS) keys into C(env).
    type: bool
    default: true
  backup:
    description:
      - Keep a copy of the old file when the content changes, beside it as
        C(NAME.<timestamp>.<random>~) (mode 0600, written as O(run_as) when given).
    type: bool
    default: true
  create:
    description: Create the file (and with O(run_as) its directory) when it does not exist.
    type: bool
    default: true
  read_only:
    description:
      - >-
        Change nothing; return the file's bytes in RV(content) (base64), read with the same care
        (as O(run_as), no links, no FIFOs, at most O(max_size)). It holds the key: use C(no_log).
    type: bool
    default: false
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check_diff
"""

EXAMPLES = r"""
- name: Point a user's Claude Code at a llama-server
  llamafleet.fleet.claude_settings:
    path: /home/dev/.claude/settings.json
    run_as: dev
    mode: "0600"
    env:
      ANTHROPIC_BASE_URL: http://10.0.0.5:8080
      CLAUDE_CODE_ATTRIBUTION_HEADER: "0"
    settings:
      includeGitInstructions: false
    token: "{{ key }}"

- name: Managed settings, readable by every user
  llamafleet.fleet.claude_settings:
    path: /etc/claude-code/managed-settings.json
    owner: root
    group: root
    mode: "0644"
    env:
      ANTHROPIC_BASE_URL: http://10.0.0.5:8080
"""

RETURN = r"""
moved:
  description: Top-level keys that were moved into C(env).
  returned: always
  type: list
  elements: str
changed_keys:
  description: Names of the keys whose value changed (C(env.NAME) for env entries).
  returned: always
  type: list
  elements: str
backup_file:
  description: The backup copy, when one was made.
  returned: changed and backup
  type: str
content:
  description: The file's bytes, base64-encoded (O(read_only) only; empty when it does not exist).
  returned: read_only
  type: str
file_mode:
  description: The file's permission bits (C(0600)), when it exists (O(read_only) only).
  returned: read_only
  type: str
settings_path:
  description:
    - The settings file. (Not C(path), which would make Ansible stat the file as root.)
  returned: always
  type: str
"""

import base64
import collections
import contextlib
import copy
import errno
import grp
import json
import os
import pwd
import select
import signal
import stat
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import kind, owner_name

MISPLACED_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")
MISPLACED_KEYS = ("API_TIMEOUT_MS",)
SECRET_KEYS = ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")
MASK = "********"
MAX_SIZE = 1024 * 1024
DIR_MODE = 0o700
NEW_FILE_MODE = 0o600
NAME_ATTEMPTS = 20
REPLACE_ATTEMPTS = 10

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# The account whose files are written: name, uid, primary gid, home directory.
Account = collections.namedtuple("Account", "name uid gid home")

OPTION_DEFAULTS: dict[str, Any] = {
    "env": {},
    "env_absent": [],
    "settings": {},
    "token": None,
    "token_key": "ANTHROPIC_AUTH_TOKEN",
    "move_misplaced": True,
    "backup": True,
    "create": True,
    "mode": None,  # int, or None: keep the existing file's mode (0600 for a new file)
    "uid": None,  # root mode only: the file's owner (None: keep; a new file: the caller's)
    "gid": None,  # root mode only: the file's group
    "max_size": MAX_SIZE,
    "read_only": False,  # only read the file back (content returned base64-encoded)
}


class SettingsError(Exception):
    """A refusal or failure; msg is the module's failure message, extra more result keys."""

    def __init__(self, msg: str, **extra: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


def options(**overrides: Any) -> dict[str, Any]:
    """The options of update_settings: the defaults with overrides."""
    unknown = set(overrides) - set(OPTION_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown options: {sorted(unknown)}")
    opts = copy.deepcopy(OPTION_DEFAULTS)
    opts.update(overrides)
    return opts


def parse_mode(value: Any) -> int | None:
    """An octal mode string ("0600") or an int; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SettingsError(f'mode: {value!r} is not an octal mode such as "0600"')
    if isinstance(value, int):
        mode = value
    else:
        try:
            mode = int(str(value).strip(), 8)
        except ValueError:
            raise SettingsError(f'mode: {value!r} is not an octal mode such as "0600"') from None
    if not 0 <= mode <= 0o7777:
        raise SettingsError(f"mode: {value!r} is out of range (0000 to 7777)")
    return mode


# ---------------------------------------------------------------------------------------------
# merging


def _misplaced(key: str) -> bool:
    return key.startswith(MISPLACED_PREFIXES) or key in MISPLACED_KEYS


def _merge(dst: dict[str, Any], src: Mapping[str, Any], prefix: str, changed: list[str]) -> None:
    for key, value in src.items():
        name = prefix + key
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, name + ".", changed)
        elif key not in dst or dst[key] != value:
            dst[key] = copy.deepcopy(value)
            changed.append(name)


def _masked(data: dict[str, Any], secrets: Iterable[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    env = out.get("env")
    if isinstance(env, dict):
        for key in list(env):
            if key in secrets and env[key]:
                env[key] = MASK
    for key in list(out):
        if key in secrets and out[key]:
            out[key] = MASK
    return out


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _parse(raw: bytes, path: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(
            f"{path} is not valid UTF-8 (byte {exc.start}); it was left unchanged. "
            "Fix or remove it, then run again.",
            settings_path=path,
        ) from None
    if not text.strip():
        return {}
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", "?")
        col = getattr(exc, "colno", "?")
        reason = getattr(exc, "msg", str(exc))
        raise SettingsError(
            f"{path} is not valid JSON (line {line}, column {col}: {reason}); it was left "
            "unchanged. Fix or remove it, then run again.",
            settings_path=path,
            line=line,
            column=col,
        ) from None
    if not isinstance(data, dict):
        raise SettingsError(
            f"{path}: the top level is a JSON {type(data).__name__}, not an object; it was left "
            "unchanged.",
            settings_path=path,
        )
    return data


def merge_settings(
    data: dict[str, Any], opts: Mapping[str, Any], path: str
) -> tuple[list[str], list[str]]:
    """Apply the options to data (in place); returns (changed_keys, moved)."""
    changed_keys: list[str] = []
    moved: list[str] = []
    env = data.get("env")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise SettingsError(
            f'{path}: "env" must be an object, not {type(env).__name__}; the file was left '
            "unchanged.",
            settings_path=path,
        )

    if opts["move_misplaced"]:
        for key in [k for k in data if _misplaced(k)]:
            value = data.pop(key)
            if key not in env:
                env[key] = value if isinstance(value, str) else json.dumps(value)
            moved.append(key)
            changed_keys.append(key)

    wanted = {
        k: ("" if v is None else (v if isinstance(v, str) else json.dumps(v)))
        for k, v in opts["env"].items()
    }
    if opts["token"] is not None:
        wanted[opts["token_key"]] = opts["token"]
    for key, value in wanted.items():
        if env.get(key) != value:
            env[key] = value
            changed_keys.append("env." + key)
    for key in opts["env_absent"]:
        if key in env:
            del env[key]
            changed_keys.append("env." + key)
    if env or "env" in data:
        data["env"] = env

    settings = dict(opts["settings"])
    settings.pop("env", None)
    _merge(data, settings, "", changed_keys)
    return changed_keys, moved


# ---------------------------------------------------------------------------------------------
# file work through directory descriptors, never following a link


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _not_a_directory(name: str, dir_fd: int, display: str, owner: str) -> str:
    st = _lstat(name, dir_fd)
    fix = f"Remove it (or make it a real directory owned by {owner}) and run again."
    if st is None:
        return f"{display} is not a directory; refusing to use it. {fix}"
    if stat.S_ISLNK(st.st_mode):
        return (
            f"{display} is a symbolic link (owned by {owner_name(st.st_uid)}); refusing to "
            "follow it. " + fix
        )
    return (
        f"{display} is {kind(st.st_mode)} (owned by {owner_name(st.st_uid)}), not a directory; "
        f"refusing to use it. {fix}"
    )


def _open_dir(name: str, dir_fd: int, display: str, owner: str) -> int | None:
    """Open a directory entry without following a link; None when it does not exist."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise SettingsError(_not_a_directory(name, dir_fd, display, owner)) from None
        raise SettingsError(
            f"{display}: cannot open the directory as {owner_name(os.geteuid())}: {exc.strerror}"
        ) from None


def _split_under(dirpath: str, anchor: str) -> list[str] | None:
    """The components of dirpath below anchor, or None when it is not below it."""
    if dirpath == anchor:
        return []
    prefix = anchor if anchor.endswith("/") else anchor + "/"
    if not dirpath.startswith(prefix):
        return None
    return [c for c in dirpath[len(prefix) :].split("/") if c]


def _user_dir(
    path: str, account: Account, create: bool, check_mode: bool
) -> tuple[int | None, bool]:
    """Open the directory of path as the account, from its home; (fd or None, changed).

    fd is None only in check mode, when the directory does not exist yet."""
    dirpath = os.path.dirname(path)
    home = os.path.normpath(account.home) if account.home else ""
    rel = _split_under(dirpath, home) if home and home != "/" else None
    if rel is not None:
        anchor = home
    else:
        anchor, last = os.path.split(dirpath)
        rel = [last] if last else []
    try:
        fd = os.open(os.path.realpath(anchor), DIR_FLAGS)
    except FileNotFoundError:
        raise SettingsError(
            f"{anchor} (the home of {account.name}) does not exist; create it, then run again."
        ) from None
    except OSError as exc:
        raise SettingsError(f"{anchor}: cannot open it as {account.name}: {exc.strerror}") from None
    changed = False
    display = anchor
    try:
        st = os.fstat(fd)
        if st.st_uid not in (account.uid, 0):
            raise SettingsError(
                f"{anchor} is owned by {owner_name(st.st_uid)}, not by {account.name} or root; "
                f"refusing to write {account.name}'s {path} under it. Give it to {account.name}, "
                "then run again."
            )
        for index, comp in enumerate(rel):
            display = os.path.join(display, comp)
            sub, made = _open_or_make_dir(
                comp, fd, display, account, create=create, check_mode=check_mode
            )
            if sub is None:  # check mode: it would be made
                os.close(fd)
                return None, True
            os.close(fd)
            fd = sub
            is_last = index == len(rel) - 1
            changed = _check_user_dir(fd, display, account, is_last, check_mode) or made or changed
    except BaseException:
        _close(fd)
        raise
    return fd, changed


def _open_or_make_dir(
    comp: str, fd: int, display: str, account: Account, *, create: bool, check_mode: bool
) -> tuple[int | None, bool]:
    """(fd of the directory comp of fd, made?); (None, True) in check mode when it is missing."""
    sub = _open_dir(comp, fd, display, account.name)
    if sub is not None:
        return sub, False
    if check_mode:
        return None, True
    if not create:
        raise SettingsError(f"{display} does not exist and create=false")
    try:
        os.mkdir(comp, DIR_MODE, dir_fd=fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SettingsError(
            f"{display}: cannot create it as {account.name}: {exc.strerror}"
        ) from None
    sub = _open_dir(comp, fd, display, account.name)
    if sub is None:
        raise SettingsError(f"{display} vanished while it was created; run again.")
    return sub, True


def _check_user_dir(fd: int, display: str, account: Account, last: bool, check_mode: bool) -> bool:
    """The directory must be the account's; the last one gets DIR_MODE. True when that changed
    (or would change) its mode."""
    st = os.fstat(fd)
    if st.st_uid != account.uid:
        raise SettingsError(
            f"{display} is owned by {owner_name(st.st_uid)}, not {account.name}; refusing to "
            f"use it. Remove it (or give it to {account.name}) and run again."
        )
    if last and stat.S_IMODE(st.st_mode) != DIR_MODE:
        if not check_mode:
            os.fchmod(fd, DIR_MODE)
        return True
    return False


def _check_root_dir(fd: int, display: str, path: str) -> None:
    st = os.fstat(fd)
    fix = "Make it owned by root and not writable by group or others, then run again."
    if st.st_uid != 0:
        raise SettingsError(
            f"{display} is owned by {owner_name(st.st_uid)}, not root; refusing to write {path} as "
            f"root through a directory another account controls. {fix}"
        )
    if st.st_mode & 0o022:
        raise SettingsError(
            f"{display} is writable by its group or by others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing to write {path} as root through a "
            f"directory another account can change. {fix}"
        )


def _root_dir(path: str, anchor: str, check_mode: bool) -> int | None:
    """Open the directory of path as root, from anchor; every directory is root's alone.

    Returns None only in check mode, when the directory does not exist yet."""
    dirpath = os.path.dirname(path)
    anchor = os.path.normpath(anchor)
    rel = _split_under(dirpath, anchor)
    if rel is None:
        raise SettingsError(f"{path} is not under {anchor}")
    fd: int | None
    try:
        fd = os.open(anchor, DIR_FLAGS)
    except OSError as exc:
        raise SettingsError(f"{anchor}: cannot open the directory: {exc.strerror}") from None
    display = anchor
    try:
        _check_root_dir(fd, display, path)
        for comp in rel:
            display = os.path.join(display, comp)
            sub = _open_dir(comp, fd, display, "root")
            os.close(fd)
            fd = sub
            if fd is None:
                if check_mode:
                    return None
                raise SettingsError(
                    f"{display} does not exist; create it (owned by root, mode 0755), then run "
                    "again."
                )
            _check_root_dir(fd, display, path)
    except BaseException:
        _close(fd)
        raise
    return fd


def _open_error(exc: OSError, name: str, dfd: int, display: str, owner: str) -> SettingsError:
    """The SettingsError for a settings file that could not be opened: what is in its place."""
    st = _lstat(name, dfd)
    if exc.errno in (errno.ELOOP, errno.EMLINK) or (st and stat.S_ISLNK(st.st_mode)):
        by = f" (owned by {owner_name(st.st_uid)})" if st else ""
        return SettingsError(
            f"{display} is a symbolic link{by}; refusing to follow it. Remove it (or replace "
            f"it with a regular file owned by {owner}) and run again."
        )
    if st is not None and not stat.S_ISREG(st.st_mode):
        return SettingsError(
            f"{display} is {kind(st.st_mode)}, not a regular file; refusing to use it. "
            "Remove it and run again."
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        by = f", owned by {owner_name(st.st_uid)}" if st else ""
        return SettingsError(
            f"{display} cannot be read by {owner} (permission denied{by}); it was left "
            f"unchanged. Give it to {owner} (or remove it) and run again."
        )
    return SettingsError(f"{display}: cannot open it as {owner}: {exc.strerror}")


def _check_settings_file(
    st: os.stat_result, display: str, account: Account | None, owner: str, max_size: int
) -> None:
    """The opened settings file must be a regular file of the account, with one name, at most
    max_size bytes; else SettingsError."""
    if not stat.S_ISREG(st.st_mode):
        raise SettingsError(
            f"{display} is {kind(st.st_mode)}, not a regular file; refusing to use it. "
            "Remove it and run again."
        )
    if account is not None and st.st_uid != account.uid:
        raise SettingsError(
            f"{display} is owned by {owner_name(st.st_uid)}, not {owner}; refusing to use it. Give "
            f"it to {owner} (or remove it) and run again."
        )
    if st.st_nlink != 1:
        raise SettingsError(
            f"{display} has {st.st_nlink} hard links (the same file has another name "
            "elsewhere); refusing to use it. Replace it with a copy of its own (cp it to a "
            "new name and mv that over it) and run again."
        )
    if st.st_size > max_size:
        raise SettingsError(
            f"{display} is {st.st_size} bytes, more than the {max_size}-byte limit "
            "(max_size); refusing to read it. It was left unchanged: shrink or remove it, "
            "then run again."
        )


def _read_existing(
    dfd: int, name: str, display: str, account: Account | None, max_size: int
) -> tuple[int | None, os.stat_result | None, bytes]:
    """Open and read the settings file; (fd, stat, bytes), or (None, None, b"") when missing."""
    owner = account.name if account is not None else "root"
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return None, None, b""
    except OSError as exc:
        raise _open_error(exc, name, dfd, display, owner) from None
    try:
        st = os.fstat(fd)
        _check_settings_file(st, display, account, owner, max_size)
        chunks = []
        total = 0
        while total <= max_size:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_size:
            raise SettingsError(
                f"{display} grew past the {max_size}-byte limit (max_size) while it was read; "
                "it was left unchanged."
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st, b"".join(chunks)


def _random_token() -> str:
    return os.urandom(6).hex()


def _timestamp() -> str:
    return time.strftime("%Y-%m-%d@%H:%M:%S")


def _unlink_quiet(dfd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dfd)


def _create_exclusive(dfd: int, make_name: Callable[[], str], display_dir: str) -> tuple[str, int]:
    """(name, fd) of a new file, created exclusively under a fresh name from make_name."""
    for _ in range(NAME_ATTEMPTS):
        name = make_name()
        try:
            return name, os.open(name, CREATE_FLAGS, NEW_FILE_MODE, dir_fd=dfd)
        except FileExistsError:
            continue
        except OSError as exc:
            raise SettingsError(
                f"{os.path.join(display_dir, name)}: cannot create it as "
                f"{owner_name(os.geteuid())}: {exc.strerror}"
            ) from None
    raise SettingsError(
        f"{display_dir}: no free name for a new file after {NAME_ATTEMPTS} attempts"
    )


def _write_new(
    dfd: int,
    make_name: Callable[[], str],
    content: bytes,
    *,
    mode: int,
    owner: tuple[int, int] | None,
    display_dir: str,
    keep_open: bool = False,
) -> tuple[str, int | None]:
    """Write content to a new file (a fresh name, created exclusively, never through a link);
    owner is (uid, gid) for fchown (-1 keeps one) or None. Returns (name, fd): with keep_open
    fd stays open and is not synced yet (the caller does both), else it is None."""
    name, fd = _create_exclusive(dfd, make_name, display_dir)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if owner is not None:
                os.fchown(fd, owner[0], owner[1])
            os.fchmod(fd, mode)
            if not keep_open:
                os.fsync(fd)
        finally:
            if not keep_open:
                os.close(fd)
    except OSError as exc:
        if keep_open:
            os.close(fd)
        _unlink_quiet(dfd, name)
        raise SettingsError(f"{os.path.join(display_dir, name)}: cannot write it: {exc}") from None
    except BaseException:
        if keep_open:
            os.close(fd)
        _unlink_quiet(dfd, name)
        raise
    return name, (fd if keep_open else None)


def _replace(
    dfd: int,
    name: str,
    content: bytes,
    *,
    mode: int,
    owner: tuple[int, int] | None,
    display_dir: str,
) -> None:
    """Write content to a new file beside name and rename it over name.

    In a directory another process can change (a user's own), the temporary name may be replaced
    (by a link, say) between its creation and the rename, which then puts that in place of name.
    The rename never follows it; the entry that lands at name is checked to be the new file (its
    descriptor stays open until then, so its inode number cannot be reused), and the write is
    done again (a few times) when it is not. The file is synced after the rename, not before,
    to keep that window to a few system calls."""
    display = os.path.join(display_dir, name)
    for _ in range(REPLACE_ATTEMPTS):
        tmp, fd = _write_new(
            dfd,
            lambda: f".{name}.{_random_token()}",
            content,
            mode=mode,
            owner=owner,
            display_dir=display_dir,
            keep_open=True,
        )
        if fd is None:
            raise AssertionError("keep_open: the new file stays open")
        try:
            ours = os.fstat(fd)
            try:
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except FileNotFoundError:
                continue  # the temporary name was removed under us
            except OSError as exc:
                _unlink_quiet(dfd, tmp)
                raise SettingsError(
                    f"{display}: cannot replace it: {exc.strerror}; it was left unchanged."
                ) from None
            st = _lstat(name, dfd)
            if st is not None and (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino):
                os.fsync(fd)
                with contextlib.suppress(OSError):
                    os.fsync(dfd)  # the rename itself on disk
                return
        finally:
            os.close(fd)
    raise SettingsError(
        f"{display}: another process kept replacing the temporary file (a link, for example) "
        f"before it was renamed into place, {REPLACE_ATTEMPTS} times; the new content was not "
        "written. Stop that process, check the file, then run again."
    )


def _settings_path(path: str, account: Account | None) -> tuple[str, str, str]:
    """(normalized path, its directory, its name); the path must be absolute and name a file,
    and a user's file must be written as that user."""
    path = os.path.normpath(path)
    if not os.path.isabs(path):
        raise SettingsError(f"{path}: the path must be absolute")
    dirpath, name = os.path.split(path)
    if name in ("", ".", ".."):
        raise SettingsError(f"{path}: not a file name")
    if account is not None and os.geteuid() != account.uid:
        raise SettingsError(
            f"internal error: {path} must be written as {account.name} (uid {account.uid}), "
            f"not as uid {os.geteuid()}"
        )
    return path, dirpath, name


def _settings_dir(
    path: str, account: Account | None, opts: Mapping[str, Any], anchor: str, check_mode: bool
) -> tuple[int | None, bool]:
    """(fd of the file's directory or None, changed): a user's from the home, root's from anchor."""
    if account is not None:
        return _user_dir(path, account, opts["create"], check_mode)
    return _root_dir(path, anchor, check_mode), False


def _diff(
    path: str, before: dict[str, Any] | None, after: dict[str, Any], opts: Mapping[str, Any]
) -> dict[str, str]:
    """The module's diff of the settings, secrets masked; before is None for a new file."""
    secrets = set(SECRET_KEYS) | {opts["token_key"]}
    return {
        "before_header": path,
        "after_header": path,
        "before": _dump(_masked(before, secrets)) if before is not None else "",
        "after": _dump(_masked(after, secrets)),
    }


def _read_only_result(path: str, raw: bytes, st: os.stat_result | None) -> dict[str, Any]:
    """The module result of read_only: the file's content and mode, nothing changed."""
    return {
        "changed": False,
        "settings_path": path,
        "exists": st is not None,
        "content": base64.b64encode(raw).decode("ascii"),
        "file_mode": f"{stat.S_IMODE(st.st_mode):04o}" if st is not None else "",
        "moved": [],
        "changed_keys": [],
    }


def _wanted_attrs(
    opts: Mapping[str, Any], account: Account | None, st: os.stat_result | None
) -> tuple[int, int, int, tuple[int, int]]:
    """(mode, uid, gid, owner for fchown) the file should have; st is the existing file's stat
    (None: a new file). A user's file is the user's; root's keeps its owner unless opts say."""
    old_mode = stat.S_IMODE(st.st_mode) if st is not None else NEW_FILE_MODE
    mode = opts["mode"] if opts["mode"] is not None else old_mode
    if account is not None:
        return mode, account.uid, account.gid, (-1, account.gid)
    uid, gid = (st.st_uid, st.st_gid) if st is not None else (os.geteuid(), os.getegid())
    uid = uid if opts["uid"] is None else opts["uid"]
    gid = gid if opts["gid"] is None else opts["gid"]
    return mode, uid, gid, (uid, gid)


def _backup(dfd: int, name: str, raw: bytes, owner: tuple[int, int], dirpath: str) -> str:
    """A copy of the old content beside the file (mode 0600: it may hold a key); its name."""
    backup, _ = _write_new(
        dfd,
        lambda: f"{name}.{_timestamp()}.{_random_token()}~",
        raw,
        mode=0o600,
        owner=owner,
        display_dir=dirpath,
    )
    return backup


def _opened(fd: int | None, why: str) -> int:
    """A descriptor that the code before has opened (``why``), or AssertionError."""
    if fd is None:
        raise AssertionError(why)
    return fd


def update_settings(
    path: str,
    opts: Mapping[str, Any],
    account: Account | None = None,
    *,
    check_mode: bool = False,
    want_diff: bool = False,
    anchor: str = "/",
) -> dict[str, Any]:
    """Read, merge and (unless check_mode) write one settings file; returns the module result.

    account (an Account) is the user whose file it is; the caller must already run as that
    user (run_dropped). Without it the caller is root and every directory from anchor down to
    the file must be root's and not writable by group or others. Raises SettingsError."""
    path, dirpath, name = _settings_path(path, account)
    dfd, dir_changed = _settings_dir(path, account, opts, anchor, check_mode or opts["read_only"])
    fd = None
    try:
        st, raw = None, b""
        if dfd is not None:
            fd, st, raw = _read_existing(dfd, name, path, account, opts["max_size"])
        exists = fd is not None
        if opts["read_only"]:
            return _read_only_result(path, raw, st)
        if not exists and not opts["create"]:
            raise SettingsError(f"{path} does not exist and create=false")
        data = _parse(raw, path)
        before = copy.deepcopy(data)
        changed_keys, moved = merge_settings(data, opts, path)
        content_changed = (not exists) or data != before
        mode, uid, gid, owner = _wanted_attrs(opts, account, st)
        attrs_changed = st is not None and (
            stat.S_IMODE(st.st_mode) != mode or st.st_uid != uid or st.st_gid != gid
        )

        result = {
            "changed": bool(content_changed or attrs_changed or dir_changed),
            "settings_path": path,
            "moved": moved,
            "changed_keys": changed_keys,
        }
        if content_changed and want_diff:
            result["diff"] = _diff(path, before if exists else None, data, opts)
        if check_mode:
            return result

        dfd = _opened(dfd, "None only in check mode or read_only, which returned above")
        if content_changed:
            if st is not None and opts["backup"]:
                backup_owner = owner if account is not None else (st.st_uid, st.st_gid)
                backup = _backup(dfd, name, raw, backup_owner, dirpath)
                result["backup_file"] = os.path.join(dirpath, backup)
            _replace(
                dfd, name, _dump(data).encode("utf-8"), mode=mode, owner=owner, display_dir=dirpath
            )
        elif attrs_changed:
            fd = _opened(fd, "attributes change on an existing file")
            if st is None:
                raise AssertionError("attributes change on an existing file")
            if st.st_uid != uid or st.st_gid != gid:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
        return result
    except OSError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    finally:
        _close(fd)
        _close(dfd)


# ---------------------------------------------------------------------------------------------
# running as another user


def drop_privileges(uid: int, gid: int, groups: Iterable[int]) -> None:
    """Become uid/gid with these supplementary groups, for good (real, effective and saved)."""
    if os.geteuid() == 0:
        os.setgroups(list(groups))
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    elif os.geteuid() != uid or os.getegid() != gid:
        raise SettingsError(
            f"switching to uid {uid} needs root (become: true); running as uid {os.geteuid()}"
        )
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise SettingsError(f"could not switch to uid {uid}, gid {gid}")
    if uid != 0:
        try:
            os.setresuid(0, 0, 0)
        except PermissionError:
            pass
        else:
            raise SettingsError(f"uid {uid} could become root again; refusing to go on")


def _child(
    wfd: int,
    ids: tuple[int, int, Iterable[int]],
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    uid, gid, groups = ids
    status = 0
    try:
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 4096)
        os.umask(0o077)
        try:
            drop_privileges(uid, gid, groups)
            reply: dict[str, Any] = {"ok": func(*args, **kwargs)}
        except SettingsError as exc:
            reply = {"error": exc.msg, "extra": exc.extra}
        except Exception as exc:
            reply = {
                "error": f"{type(exc).__name__}: {exc} (working as uid {uid})",
                "extra": {"exception": traceback.format_exc()},
            }
        view = memoryview(json.dumps(reply).encode("utf-8"))
        while view:
            view = view[os.write(wfd, view) :]
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def run_dropped(
    uid: int,
    gid: int,
    groups: Iterable[int],
    func: Callable[..., Any],
    *args: Any,
    timeout: float | None = None,
    **kwargs: Any,
) -> Any:
    """Call func(*args, **kwargs) in a forked child running as uid/gid/groups only and return
    its (JSON-able) result; a SettingsError in the child is raised here with the same message.
    timeout (seconds): kill the child and fail after that long."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit
        os.close(rfd)
        _child(wfd, (uid, gid, groups), func, args, kwargs)
    os.close(wfd)
    chunks: list[bytes] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    reaped = False
    try:
        while True:
            if deadline is not None:
                left = deadline - time.monotonic()
                ready = select.select([rfd], [], [], max(left, 0))[0] if left > 0 else []
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    reaped = True
                    raise SettingsError(
                        f"the worker running as uid {uid} did not finish within {timeout} s "
                        "and was stopped"
                    )
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(rfd)
        if not reaped:
            _, status = os.waitpid(pid, 0)
    try:
        reply = json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        raise SettingsError(
            f"the worker running as uid {uid} ended without an answer (wait status {status})"
        ) from None
    if "error" in reply:
        raise SettingsError(reply["error"], **reply.get("extra", {}))
    return reply["ok"]


def run_as_user(
    name: str,
    path: str,
    opts: Mapping[str, Any],
    *,
    check_mode: bool = False,
    want_diff: bool = False,
    timeout: float | None = None,
) -> Any:
    """update_settings for a user's file, in a child that runs as that user."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise SettingsError(f"run_as: there is no user {name!r}") from None
    account = Account(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir)
    groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
    return run_dropped(
        account.uid,
        account.gid,
        groups,
        update_settings,
        path,
        opts,
        account,
        check_mode=check_mode,
        want_diff=want_diff,
        timeout=timeout,
    )


def _resolve_id(kind: str, value: Any) -> int | None:
    """uid/gid of an owner/group name or number; None when unknown."""
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    try:
        return (pwd.getpwnam(text).pw_uid) if kind == "owner" else grp.getgrnam(text).gr_gid
    except KeyError:
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "run_as": {"type": "str"},
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "mode": {"type": "raw"},
            "max_size": {"type": "int", "default": MAX_SIZE},
            "env": {"type": "dict", "default": {}},
            "env_absent": {"type": "list", "elements": "str", "default": []},
            "settings": {"type": "dict", "default": {}},
            "token": {"type": "str", "no_log": True},
            "token_key": {"type": "str", "default": "ANTHROPIC_AUTH_TOKEN", "no_log": False},
            "move_misplaced": {"type": "bool", "default": True},
            "backup": {"type": "bool", "default": True},
            "create": {"type": "bool", "default": True},
            "read_only": {"type": "bool", "default": False},
        },
        mutually_exclusive=[("run_as", "owner"), ("run_as", "group")],
        supports_check_mode=True,
    )
    p = module.params
    if p["max_size"] <= 0:
        module.fail_json(msg="max_size must be a positive number of bytes")
    try:
        opts = options(
            env=p["env"],
            env_absent=p["env_absent"],
            settings=p["settings"],
            token=p["token"],
            token_key=p["token_key"],
            move_misplaced=p["move_misplaced"],
            backup=p["backup"],
            create=p["create"],
            mode=parse_mode(p["mode"]),
            max_size=p["max_size"],
            read_only=p["read_only"],
        )
        pending = []
        if p["run_as"]:
            result = run_as_user(
                p["run_as"], p["path"], opts, check_mode=module.check_mode, want_diff=module._diff
            )
        else:
            for kind, key in (("owner", "uid"), ("group", "gid")):
                if p[kind] is None:
                    continue
                opts[key] = _resolve_id(kind, p[kind])
                if opts[key] is None:
                    if not module.check_mode:
                        raise SettingsError(f"{kind}: {p[kind]!r} does not exist")
                    pending.append(f"{kind} {p[kind]}")
            result = update_settings(
                p["path"], opts, check_mode=module.check_mode, want_diff=module._diff
            )
        if pending:
            # check mode before the account exists: it will be set when the play really runs
            result["changed"] = True
            module.warn(f"{p['path']}: {', '.join(pending)} does not exist yet (check mode)")
    except SettingsError as exc:
        # no "path" key: Ansible would stat a user's file as root to describe it
        reserved = ("msg", "changed", "failed", "path", "dest")
        extra = {k: v for k, v in exc.extra.items() if k not in reserved}
        module.fail_json(msg=exc.msg, **extra)
    if result["moved"]:
        module.warn(
            f"{result['settings_path']}: moved {', '.join(result['moved'])} from the top level "
            'into "env" (Claude Code ignores them at the top level)'
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Apache-2.0
"""Ansible module: the API keys of the llama_server role's instances, in one call: each
instance's key and each of its clients' keys made once, read, checked and returned, the
credential of an instance with clients written, and the keys of clients no longer listed
removed."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_server_keys
short_description: Make, read and hand out the API keys of llama-server instances
description:
  - One call for every instance of a host (the llama_server role's keys, as root). Under
    O(key_dir) (created root:root C(0700); an existing one must be a root-owned directory, not a
    link, and is set to C(0700)), as follows.
  - C(<instance>.key), the instance's own key, is made once (48 letters and digits from the
    operating system's random source, created C(O_EXCL|O_NOFOLLOW) root C(0600)); an existing key
    is kept as it is, its owner and mode set to root C(0600).
  - For an instance with O(instances[].client_keys), C(<instance>.clients/) (root C(0700)) holds
    one key per client, C(<name with / as __>.key), made the same way; entries of clients no
    longer listed are removed. C(<instance>.keys), the credential its unit hands the service, is
    the instance's key and then each client's key in the order of the client names, one per
    line, written through a temporary file renamed over it only when it differs.
  - For an instance without clients, C(<instance>.clients/) and C(<instance>.keys) are removed.
  - "Every key read is checked before it is returned or written into a credential: one line of
    1 to 4096 printable ASCII characters without blanks (blanks and newlines around it are
    dropped). A key file that is a link, not a regular file, has more than one hard link, or
    holds anything else (a second line would be a second key the server accepts, and clients
    send the key in an HTTP header) fails the task, naming the file and the fix; nothing is
    written for that instance."
  - In check mode nothing changes; the keys that exist are returned (a key that would be made is
    not), and RV(changes) says what would change.
  - Must run as root.
options:
  key_dir:
    description: The directory of the keys (llama_server_key_dir). An absolute path.
    type: path
    required: true
  instances:
    description: The instances with an API key.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The instance's name (one path component).
        type: str
        required: true
      client_keys:
        description: The names of its clients with their own key (C(host/user) style).
        type: list
        elements: str
        default: []
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

RETURN = r"""
api_keys:
  description: The key of each instance whose key exists, by instance name (secret).
  type: dict
  returned: always
client_api_keys:
  description: The key of each client, by instance and client name ({} for an instance without
    clients; secret).
  type: dict
  returned: always
credentials_changed:
  description: The instances whose credential (C(<instance>.keys)) was written (or would be); their
    services read their keys only when they start.
  type: list
  elements: str
  returned: always
changes:
  description: What was changed (or would be, in check mode), one line each, without any key.
  type: list
  elements: str
  returned: always
"""

import os
import re
import secrets
import stat
import string
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.api_key import (
    MAX_KEY,
    InvalidKeyError,
    check_key,
)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
KEY_ALPHABET = string.ascii_letters + string.digits
KEY_LENGTH = 48
#: an instance or client file name: one path component of letters, digits and _ . @ -
NAME = re.compile(r"[A-Za-z0-9_.@-]+\Z")


class RefusedError(Exception):
    """A key file or directory the module refuses; the message names it and the fix."""


def client_key_file(name: str) -> str:
    """The file of a client's key in ``<instance>.clients/`` (the role's
    llamafleet_client_key_file filter): the name with ``/`` as ``__``, plus ``.key``."""
    return name.replace("/", "__") + ".key"


def _component(name: str, what: str) -> str:
    if not NAME.match(name) or name in (".", ".."):
        raise RefusedError(
            f"{what} {name!r} is not a file name of letters, digits and _ . @ - (a client name may "
            "hold /)"
        )
    return name


class Keys:
    """The work of one call: ``check`` leaves everything as it is."""

    def __init__(self, key_dir: str, check: bool) -> None:
        self.key_dir = key_dir
        self.check = check
        self.changes: list[str] = []

    # -- directories
    def open_dir(self, parent: int | None, path: str, name: str | None) -> int | None:
        """The descriptor of a root-owned 0700 directory (created, or its mode set); None when
        it does not exist yet in check mode."""
        where = path if name is None else f"{path}/{name}"
        try:
            if name is None:
                fd = os.open(path, DIR_FLAGS)
            else:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            self.changes.append(f"create the directory {where} (root 0700)")
            if self.check:
                return None
            if name is None:
                os.makedirs(os.path.dirname(path.rstrip("/")) or "/", mode=0o755, exist_ok=True)
                os.mkdir(path, 0o700)
                fd = os.open(path, DIR_FLAGS)
            else:
                os.mkdir(name, 0o700, dir_fd=parent)
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise RefusedError(
                f"{where} is not a directory that can be opened without following a link "
                f"({exc.strerror}): remove it, and the role makes the directory again"
            ) from exc
        st = os.fstat(fd)
        if st.st_uid != 0:
            os.close(fd)
            raise RefusedError(
                f"{where} is owned by uid {st.st_uid}: the keys' directory must be root's (chown "
                f"root:root {where}, or remove it and the role makes it again)"
            )
        if stat.S_IMODE(st.st_mode) != 0o700 or st.st_gid != 0:
            self.changes.append(f"set {where} to root:root 0700")
            if not self.check:
                os.fchown(fd, 0, 0)
                os.fchmod(fd, 0o700)
        return fd

    # -- one key
    def read(self, dfd: int, where: str, name: str) -> str | None:
        """The key in ``name`` (checked), or None when there is no such file."""
        path = f"{where}/{name}"
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RefusedError(
                f"{path} cannot be opened as a regular file without following a link "
                f"({exc.strerror}): a key must be a plain file; remove it and the role makes a "
                "new key (its clients then get the new one)"
            ) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise RefusedError(
                    f"{path} is not a regular file with one link: remove it and the role makes a "
                    "new key"
                )
            if st.st_size > MAX_KEY + 64:
                raise RefusedError(
                    f"{path} holds {st.st_size} bytes, more than one key ({MAX_KEY} characters at "
                    "most): remove it and the role makes a new key"
                )
            data = os.read(fd, MAX_KEY + 64)
            if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, 0, 0o600):
                self.changes.append(f"set {path} to root:root 0600")
                if not self.check:
                    os.fchown(fd, 0, 0)
                    os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        try:
            key: str = check_key(data.decode("ascii", errors="replace"), path)
        except InvalidKeyError as exc:
            raise RefusedError(str(exc)) from exc
        return key

    def ensure(self, dfd: int | None, where: str, name: str) -> str | None:
        """The key in ``name``, made when missing (None in check mode until it is made)."""
        key = None if dfd is None else self.read(dfd, where, name)
        if key is not None:
            return key
        self.changes.append(f"make a new key {where}/{name} (root 0600)")
        if self.check or dfd is None:
            return None
        key = "".join(secrets.choice(KEY_ALPHABET) for _ in range(KEY_LENGTH))
        fd = os.open(name, CREATE_FLAGS, 0o600, dir_fd=dfd)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, 0o600)
            os.write(fd, (key + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    # -- removal
    def remove(self, dfd: int, where: str, name: str) -> None:
        """Remove an entry (a directory with what it holds), never following a link."""
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        held = " and what it holds" if stat.S_ISDIR(st.st_mode) else ""
        self.changes.append(f"remove {where}/{name}{held}")
        if not self.check:
            _purge(dfd, name, st)

    # -- the credential
    def credential(self, dfd: int, name: str, text: str) -> bool:
        """Write the credential ``name`` when it differs from ``text``; whether it did (or
        would)."""
        path = f"{self.key_dir}/{name}"
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            fd = None
        except OSError as exc:
            raise RefusedError(
                f"{path} cannot be opened as a regular file without following a link "
                f"({exc.strerror}): remove it, and the role writes it again"
            ) from exc
        if fd is not None:
            try:
                st = os.fstat(fd)
                same = (
                    stat.S_ISREG(st.st_mode)
                    and st.st_nlink == 1
                    and os.read(fd, len(text) + 1) == text.encode()
                    and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600)
                )
            finally:
                os.close(fd)
            if same:
                return False
        self.changes.append(f"write {path} (the instance's key and its clients' keys)")
        if self.check:
            return True
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, CREATE_FLAGS, 0o600, dir_fd=dfd)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, 0o600)
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True


def _purge(dfd: int, name: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, DIR_FLAGS, dir_fd=dfd)
        try:
            for entry in os.listdir(sub):
                _purge(sub, entry, os.stat(entry, dir_fd=sub, follow_symlinks=False))
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dfd)
    else:
        os.unlink(name, dir_fd=dfd)


def plan(instances: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """(instance, {client: key file}) of each instance, names checked."""
    seen: set[str] = set()
    plans = []
    for inst in instances:
        name = _component(str(inst["name"]), "instance")
        if name in seen:
            raise RefusedError(f"instance {name!r} is listed twice")
        seen.add(name)
        files: dict[str, str] = {}
        for c in [str(c) for c in inst.get("client_keys") or []]:
            f = _component(client_key_file(c), f"instance {name!r}: client")
            if f in files.values() or c in files:
                raise RefusedError(f"instance {name!r}: client {c!r} listed twice or sharing {f}")
            files[c] = f
        plans.append((name, files))
    return plans


def _clients(work: Keys, dfd: int | None, name: str, files: dict[str, str]) -> dict[str, str]:
    """The keys of an instance's clients (made when missing), the others removed."""
    where = f"{work.key_dir}/{name}.clients"
    cfd = None if dfd is None else work.open_dir(dfd, work.key_dir, f"{name}.clients")
    found: dict[str, str] = {}
    try:
        if cfd is not None:
            wanted = set(files.values())
            for entry in sorted(os.listdir(cfd)):
                if entry not in wanted:
                    work.remove(cfd, where, entry)
        for client in sorted(files):
            key = work.ensure(cfd, where, files[client])
            if key is not None:
                found[client] = key
    finally:
        if cfd is not None:
            os.close(cfd)
    return found


def run(key_dir: str, instances: list[dict[str, Any]], check: bool) -> dict[str, Any]:
    """What the module returns (raises RefusedError for what it refuses)."""
    if not os.path.isabs(key_dir):
        raise RefusedError(f"key_dir {key_dir!r} must be an absolute path (llama_server_key_dir)")
    work = Keys(os.path.normpath(key_dir), check)
    plans = plan(instances)
    api_keys: dict[str, str] = {}
    client_api_keys: dict[str, dict[str, str]] = {}
    rewritten: list[str] = []
    dfd = work.open_dir(None, work.key_dir, None)
    try:
        for name, files in plans:
            key = work.ensure(dfd, work.key_dir, f"{name}.key")
            if key is not None:
                api_keys[name] = key
            if not files:
                client_api_keys[name] = {}
                if dfd is not None:
                    work.remove(dfd, work.key_dir, f"{name}.clients")
                    work.remove(dfd, work.key_dir, f"{name}.keys")
                continue
            client_api_keys[name] = _clients(work, dfd, name, files)
            if dfd is not None and key is not None and len(client_api_keys[name]) == len(files):
                lines = [key] + [client_api_keys[name][c] for c in sorted(files)]
                if work.credential(dfd, f"{name}.keys", "\n".join(lines) + "\n"):
                    rewritten.append(name)
    finally:
        if dfd is not None:
            os.close(dfd)
    return {
        "changed": bool(work.changes),
        "api_keys": api_keys,
        "client_api_keys": client_api_keys,
        "changes": work.changes,
        "credentials_changed": rewritten,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "key_dir": {"type": "path", "required": True},
            "instances": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "name": {"type": "str", "required": True},
                    "client_keys": {"type": "list", "elements": "str", "default": []},
                },
            },
        },
        supports_check_mode=True,
    )
    if os.geteuid() != 0:
        module.fail_json(msg="llama_server_keys must run as root (become: true)")
    try:
        result = run(module.params["key_dir"], module.params["instances"], module.check_mode)
    except RefusedError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or module.params['key_dir']}: {exc.strerror}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

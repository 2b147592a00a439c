#!/usr/bin/python
# Apache-2.0
"""Ansible module: install (or only check) the CUDA repository's apt keyring, refusing any keyring
whose OpenPGP primary keys are not exactly the pinned fingerprint."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: cuda_repo_key
short_description: Install or verify an apt keyring pinned by its OpenPGP key fingerprint
description:
  - >-
    Reads the OpenPGP packets of a key file (binary or ASCII-armoured) and computes the
    fingerprint of every primary key (version 4: SHA-1, version 6: SHA-256, as
    C(gpg --show-keys --with-colons) prints them). The file must hold exactly one primary key, the
    one O(fingerprint) names; any other key, a secret key or a packet that cannot be parsed is
    refused, and nothing is written.
  - With O(state=present) the verified key from O(src) is written to O(dest) (binary packets, or
    the armoured text when O(dest) ends in C(.asc)), root:root 0644, through a temporary file and a
    rename; unchanged when O(dest) already holds those bytes.
  - With O(state=verify) only O(dest) is checked (the keyring the cuda-keyring package installed).
  - Needs no gpg on the host.
options:
  dest:
    description: The keyring apt uses (C(signed-by)).
    type: path
    required: true
  src:
    description: The downloaded key file. Required with O(state=present).
    type: path
  fingerprint:
    description: The expected primary key fingerprint (40 or 64 hex digits; spaces ignored).
    type: str
    required: true
  state:
    description: V(present) installs O(src) at O(dest), V(verify) checks O(dest).
    type: str
    default: present
    choices: [present, verify]
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Install NVIDIA's repository key, pinned
  llamafleet.fleet.cuda_repo_key:
    src: /var/cache/cuda-toolkit/3bf863cc.pub
    dest: /usr/share/keyrings/cuda-archive-keyring.gpg
    fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
"""

RETURN = r"""
fingerprints:
  description: The primary key fingerprints found (upper-case hex).
  returned: always
  type: list
  elements: str
"""

import base64
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import READ_FLAGS, read_fd

MAX_BYTES = 1024 * 1024
PUBLIC_KEY, PUBLIC_SUBKEY, SECRET_KEY, SECRET_SUBKEY = 6, 14, 5, 7
ARMOR_BEGIN = re.compile(rb"^-----BEGIN PGP PUBLIC KEY BLOCK-----\s*$", re.M)
ARMOR_END = re.compile(rb"^-----END PGP PUBLIC KEY BLOCK-----\s*$", re.M)


class RepoKeyError(Exception):
    pass


def crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def is_armored(data: bytes) -> bool:
    return data.lstrip()[:5] == b"-----"


def dearmor(data: bytes) -> bytes:
    """The binary packets of an ASCII-armoured public key block (one block; CRC checked)."""
    begin = ARMOR_BEGIN.search(data)
    end = ARMOR_END.search(data, begin.end()) if begin else None
    if begin is None or end is None:
        raise RepoKeyError("not an ASCII-armoured OpenPGP public key block")
    lines = data[begin.end() : end.start()].decode("ascii", "strict").splitlines()
    lines = [line.strip() for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    if any(":" in line for line in lines):  # armour headers (Version: ...) end at a blank line
        lines = lines[lines.index("") + 1 :] if "" in lines else []
    body: list[str] = []
    crc: str | None = None
    for line in lines:
        if not line:
            continue
        if line.startswith("=") and len(line) == 5:
            crc = line[1:]
            break
        body.append(line)
    try:
        raw = base64.b64decode("".join(body), validate=True)
    except ValueError as e:
        raise RepoKeyError(f"bad base64 in the armoured key: {e}") from e
    if crc is not None and int.from_bytes(base64.b64decode(crc), "big") != crc24(raw):
        raise RepoKeyError("the armoured key's CRC does not match its content")
    return raw


def packets(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet."""
    i, n = 0, len(raw)
    while i < n:
        first = raw[i]
        if not first & 0x80:
            raise RepoKeyError(f"not an OpenPGP packet at byte {i}")
        if first & 0x40:  # new format
            tag = first & 0x3F
            if i + 1 >= n:
                raise RepoKeyError("truncated packet header")
            o1 = raw[i + 1]
            if o1 < 192:
                length, i = o1, i + 2
            elif o1 < 224:
                if i + 2 >= n:
                    raise RepoKeyError("truncated packet header")
                length, i = ((o1 - 192) << 8) + raw[i + 2] + 192, i + 3
            elif o1 == 255:
                length, i = int.from_bytes(raw[i + 2 : i + 6], "big"), i + 6
            else:
                raise RepoKeyError("partial body lengths are not allowed in a keyring")
        else:
            tag, ltype = (first >> 2) & 0x0F, first & 0x03
            if ltype == 3:
                raise RepoKeyError("indeterminate packet length in a keyring")
            size = (1, 2, 4)[ltype]
            length, i = int.from_bytes(raw[i + 1 : i + 1 + size], "big"), i + 1 + size
        if i + length > n:
            raise RepoKeyError("truncated packet")
        yield tag, raw[i : i + length]
        i += length


def fingerprint_of(body: bytes) -> str:
    version = body[0] if body else None
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise RepoKeyError(f"OpenPGP key version {version} is not supported (4 and 6 are)")


def primary_fingerprints(data: bytes) -> tuple[bytes, list[str]]:
    raw = dearmor(data) if is_armored(data) else data
    found: list[str] = []
    for tag, body in packets(raw):
        if tag in (SECRET_KEY, SECRET_SUBKEY):
            raise RepoKeyError("the file holds a secret key; a keyring holds public keys only")
        if tag == PUBLIC_KEY:
            found.append(fingerprint_of(body))
    if not found:
        raise RepoKeyError("no OpenPGP public key in the file")
    return raw, found


def normalise(fpr: str | None) -> str:
    fpr = re.sub(r"\s+", "", fpr or "").upper()
    if not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", fpr):
        raise RepoKeyError(f"the expected fingerprint must be 40 or 64 hex digits, got {fpr!r}")
    return fpr


def read_limited(path: str) -> bytes:
    """At most MAX_BYTES (+1, to tell a larger file) of a file that is not a link, without
    blocking on a FIFO."""
    fd = os.open(path, READ_FLAGS)
    try:
        data: bytes = read_fd(fd, MAX_BYTES)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise RepoKeyError(f"{path} is larger than {MAX_BYTES} bytes")
    return data


def check(path: str, want: str) -> tuple[bytes, bytes, list[str]]:
    """(raw packets, file bytes, fingerprints) of a key file holding exactly the key `want`."""
    data = read_limited(path)
    try:
        raw, found = primary_fingerprints(data)
    except RepoKeyError as e:
        raise RepoKeyError(f"{path}: {e}") from e
    if found != [want]:
        raise RepoKeyError(
            f"{path} holds the key(s) {', '.join(found)}, expected exactly {want} "
            "(cuda_toolkit_repo_key_fingerprint). Refused: the repository key is not the pinned "
            "one. "
            "Fix: check the source of the key (or the mirror), or set "
            "cuda_toolkit_repo_key_fingerprint to the key you trust."
        )
    return raw, data, found


def is_root_0644(path: str) -> bool:
    st = os.lstat(path)
    return st.st_uid == 0 and st.st_gid == 0 and st.st_mode & 0o7777 == 0o644


def write_root_0644(dest: str, content: bytes) -> None:
    """Write dest (root:root 0644) through a temporary file in its directory and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=".cuda-repo-key.", dir=os.path.dirname(dest))
    is_open = True
    try:
        os.write(fd, content)
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o644)
        os.fsync(fd)
        os.close(fd)
        is_open = False
        os.rename(tmp, dest)
    except BaseException:
        if is_open:
            os.close(fd)
        os.unlink(tmp)
        raise


def run(p: Mapping[str, Any], check_mode: bool = False) -> dict[str, Any]:
    want = normalise(p["fingerprint"])
    dest: str = p["dest"]
    src: str | None = p["src"]
    if p["state"] == "verify":
        if not os.path.lexists(dest) and check_mode:
            return {"changed": False, "fingerprints": [], "msg": f"{dest} is not there yet"}
        _, _, found = check(dest, want)
        return {"changed": False, "fingerprints": found}
    if not src:
        raise RepoKeyError("src is required with state=present")
    if check_mode and not os.path.lexists(src):  # check mode did not download it
        return {"changed": True, "fingerprints": [], "msg": f"{src} is not downloaded yet"}
    raw, data, found = check(src, want)
    if dest.endswith(".asc"):
        if not is_armored(data):
            raise RepoKeyError(f"{dest} ends in .asc but {src} is a binary key; name it *.gpg")
        content = data
    else:
        content = raw
    try:
        current = read_limited(dest) if os.path.lexists(dest) else None
    except (OSError, RepoKeyError):
        current = None
    if current == content and is_root_0644(dest):
        return {"changed": False, "fingerprints": found}
    if not check_mode:
        write_root_0644(dest, content)
    return {"changed": True, "fingerprints": found}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "src": {"type": "path"},
            "fingerprint": {"type": "str", "required": True},
            "state": {"type": "str", "default": "present", "choices": ["present", "verify"]},
        },
        required_if=[("state", "present", ("src",))],
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except RepoKeyError as e:
        module.fail_json(msg=str(e))
    except OSError as e:
        module.fail_json(msg=f"{e.filename or module.params['dest']}: {e}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Apache-2.0
"""Ansible module: place one (GGUF) file under its final name only after its sha256 was verified."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_fetch
short_description: Download (resumably) or finalize a model file, verified by sha256
description:
  - With O(url), downloads into C(<dest>.part), resuming a partial download with an HTTP Range
    request, checks the free disk space first, verifies the sha256 and the GGUF magic, and only then
    renames the file to O(dest).
  - Without O(url), verifies and renames a C(<dest>.part) that an earlier task copied there.
  - A verified file gets a C(<dest>.sha256) file in C(sha256sum) format. A file whose sha256 file
    names the expected checksum is not read again (set O(verify_existing) to re-hash it).
  - A checksum mismatch fails, deletes the partial file and leaves nothing under O(dest).
  - With O(state=probe) nothing is changed; the module reports whether O(dest) is in place and, if
    not, checks that O(size) bytes fit.
options:
  dest: {type: path, required: true, description: Final path of the file.}
  sha256: {type: str, required: true, description: Expected sha256 (64 hex digits).}
  url: {type: str, description: Where to download from (http, https, file).}
  headers: {type: dict, description: Extra HTTP headers (e.g. Authorization). Not logged.}
  timeout: {type: int, default: 60, description: Socket timeout in seconds.}
  validate_certs: {type: bool, default: true, description: Verify TLS certificates.}
  size: {type: int, description: Expected size in bytes, for the free space check when the server does not say.}
  min_free_mb: {type: int, default: 1024, description: MiB that must stay free after the file is in place.}
  check_magic: {type: bool, default: true, description: Require the C(GGUF) magic at the start of the file.}
  verify_existing: {type: bool, default: false, description: Re-hash a file that is already in place.}
  state: {type: str, default: present, choices: [present, probe], description: V(probe) only reports.}
extends_documentation_fragment: [files]
"""

RETURN = r"""
valid: {description: O(dest) holds the expected content (before any change this run for probe).}
size: {description: Size of O(dest) in bytes.}
resumed_from: {description: Bytes of a partial download that were kept.}
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

CHUNK = 4 * 1024 * 1024


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sidecar(dest):
    return dest + ".sha256"


def recorded_sha(dest):
    try:
        with open(sidecar(dest)) as f:
            return f.read().split()[0].lower()
    except (OSError, IndexError):
        return None


def write_sidecar(dest, digest):
    tmp = sidecar(dest) + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{digest}  {os.path.basename(dest)}\n")
    os.rename(tmp, sidecar(dest))


def free_bytes(path):
    while not os.path.isdir(path) and path not in ("", "/"):
        path = os.path.dirname(path)  # check mode: the directory may not exist yet
    st = os.statvfs(path or "/")
    return st.f_bavail * st.f_frsize


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
        n /= 1024.0
    return str(n)


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "sha256": {"type": "str", "required": True},
            "url": {"type": "str"},
            "headers": {"type": "dict", "no_log": True},
            "timeout": {"type": "int", "default": 60},
            "validate_certs": {"type": "bool", "default": True},
            "size": {"type": "int"},
            "min_free_mb": {"type": "int", "default": 1024},
            "check_magic": {"type": "bool", "default": True},
            "verify_existing": {"type": "bool", "default": False},
            "state": {"type": "str", "default": "present", "choices": ["present", "probe"]},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    dest = p["dest"]
    part = dest + ".part"
    want = p["sha256"].strip().lower()
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        module.fail_json(msg="sha256 for {} must be 64 hex digits, got {!r}".format(dest, p["sha256"]))
    if p["url"]:
        # never echo credentials embedded in a URL
        module.no_log_values.update(v for v in [p["url"].split("@", 1)[0]] if "@" in p["url"])
    result = {"changed": False, "dest": dest, "valid": False, "resumed_from": 0}

    # 1. Already in place?
    if os.path.isfile(dest):
        rec = recorded_sha(dest)
        if rec == want and not p["verify_existing"]:
            result["valid"] = True
        elif rec is None or p["verify_existing"] or rec != want:
            if rec is not None and rec != want and not p["verify_existing"]:
                got = rec  # another version of the file: replace it
            else:
                got = sha256_of(dest)
            if got == want:
                result["valid"] = True
                if rec != want and not module.check_mode and p["state"] == "present":
                    write_sidecar(dest, got)
                    result["changed"] = True
    if result["valid"]:
        result["size"] = os.path.getsize(dest)
        if p["state"] == "present":
            for path in (dest, sidecar(dest)):
                if os.path.exists(path):
                    fargs = module.load_file_common_arguments(p, path=path)
                    if path != dest:
                        fargs["mode"] = "0644" if fargs.get("mode") is None else fargs["mode"]
                    result["changed"] = module.set_fs_attributes_if_different(fargs, result["changed"])
        module.exit_json(**result)

    directory = os.path.dirname(dest) or "."
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    reserve = p["min_free_mb"] * 1024 * 1024

    def check_space(total):
        if total is None:
            return
        need = max(total - have, 0) + reserve
        avail = free_bytes(directory)
        if avail < need:
            module.fail_json(
                msg=f"Not enough free space in {directory} for {os.path.basename(dest)}: {human(need)} needed ({human(max(total - have, 0))} to download + {human(reserve)} reserve), {human(avail)} free.", **result)

    if p["state"] == "probe":
        check_space(p["size"])
        module.exit_json(**result)

    result["changed"] = True
    if module.check_mode:
        module.exit_json(**result)

    # 2. Download (resuming) into <dest>.part
    if p["url"]:
        headers = dict(p["headers"] or {})
        total = p["size"]
        try:
            head = open_url(p["url"], method="HEAD", headers=headers, timeout=p["timeout"],
                            validate_certs=p["validate_certs"], follow_redirects="all")
            length = head.headers.get("Content-Length")
            if length and length.isdigit():
                total = int(length)
        except Exception as e:  # noqa: BLE001 - some servers refuse HEAD; the size then comes from GET
            result["head_error"] = str(e)
        if total is not None and have > total:
            os.unlink(part)
            have = 0
        check_space(total)
        if total is None or have < total:
            if have:
                headers["Range"] = f"bytes={have}-"
            try:
                resp = open_url(p["url"], headers=headers, timeout=p["timeout"],
                                validate_certs=p["validate_certs"], follow_redirects="all")
            except Exception as e:  # noqa: BLE001 - reported to the user
                code = getattr(e, "code", None)
                if code == 416 and have:
                    resp = None  # the partial file is already complete
                else:
                    module.fail_json(msg="Download of {} failed: {}".format(p["url"], e), **result)
            if resp is not None:
                status = getattr(resp, "status", None) or resp.getcode()
                if have and status != 206:
                    have = 0  # the server ignored the range: start over
                else:
                    result["resumed_from"] = have
                if total is None:
                    length = resp.headers.get("Content-Length")
                    if length and length.isdigit():
                        check_space(int(length) + have)
                with open(part, "ab" if have else "wb") as out:
                    os.chmod(part, 0o600)
                    while True:
                        block = resp.read(CHUNK)
                        if not block:
                            break
                        out.write(block)
    elif not os.path.isfile(part):
        module.fail_json(msg=f"Neither url nor a copied {part} to finalize", **result)

    # 3. Verify, then rename
    got = sha256_of(part)
    if got != want:
        os.unlink(part)
        module.fail_json(
            msg=f"sha256 mismatch for {os.path.basename(dest)}: expected {want}, got {got}. The download was deleted; nothing was "
                f"written to {dest}.", **result)
    if p["check_magic"]:
        with open(part, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            os.unlink(part)
            module.fail_json(msg=f"{os.path.basename(dest)} is not a GGUF file (magic {magic!r}); nothing was written to {dest}.", **result)
    if os.path.exists(dest):
        os.unlink(dest)
    if os.path.exists(sidecar(dest)):
        os.unlink(sidecar(dest))
    os.rename(part, dest)
    write_sidecar(dest, got)
    for path in (dest, sidecar(dest)):
        fargs = module.load_file_common_arguments(p, path=path)
        if fargs.get("mode") is None:
            fargs["mode"] = "0644"
        module.set_fs_attributes_if_different(fargs, True)
    result.update(valid=True, size=os.path.getsize(dest), sha256=got)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

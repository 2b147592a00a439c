#!/usr/bin/python
# Apache-2.0 (see the repository)
# ruff: noqa: E402
"""Keep a host's TLS directory current in one task: its CA, keys and certificates."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_tls
short_description: Keep a host's CA, TLS keys and certificates current in one task
description:
  - One decision for a host's TLS material, where about twenty tasks (C(stat), C(assert),
    C(command) with C(creates), C(copy), C(file), C(slurp)) decided it one file at a time, for the
    llama_server role's instance certificates and the llama_pool role's certificate.
  - O(dir) (C(root:root 0700)) is created when missing; every directory above it must be owned by
    root and writable by nobody else, and no link is followed on the way (C(/tmp)'s sticky bit is
    accepted). What the module writes there is a fresh file created exclusively and renamed over
    its name. A link, a second hard link or anything but a plain file at the name of a key, a
    certificate or an extension file is refused (root alone writes there), never followed.
  - The host's own CA, unless O(ca_cert) names yours - C(ca.key) (made once), C(ca.ext) (the names
    it may sign for, O(name_constraints)) and C(ca.crt) (ten years, signed again with the same key
    when its names change). Your own CA's files must be regular files owned by root, not writable
    by group or others, the key readable by root only; they are read, never changed.
  - Each certificate of O(certs) has a key (made once), an extension file (its names and the
    checksum of the CA certificate) and the certificate, signed again when its extension file
    changes (other names, another CA), when its key is new, or when it is missing or expires
    within O(renew_within) seconds.
  - The keys and the CA key are C(0600); the CA certificate C(0644); each certificate its
    C(mode). In check mode nothing is made or written; RV(signed) lists what would be signed.
  - Needs the C(openssl) command on the host (the roles install it).
version_added: "0.2.0"
options:
  dir:
    description: The directory of the keys and certificates (absolute).
    type: path
    required: true
  ca_cert:
    description:
      - Your own CA certificate (a path on the host); empty for the host's own CA in O(dir).
    type: path
    default: ""
  ca_key:
    description: Your own CA's key, with O(ca_cert).
    type: path
    default: ""
  ca_subject:
    description: The subject of the host's own CA certificate (C(/CN=...)).
    type: str
    default: "/CN=llamafleet CA"
  ca_comment:
    description: The comment line of C(ca.ext) (who the CA is for).
    type: str
    default: "the nameConstraints of the llamafleet CA"
  name_constraints:
    description:
      - The host's own CA's nameConstraints (the filter C(llamafleet_name_constraints) of the
        certificates' names). Required without O(ca_cert).
    type: str
    default: ""
  days:
    description: How many days a certificate it signs is valid.
    type: int
    default: 825
  renew_within:
    description: A certificate that expires within this many seconds is signed again.
    type: int
    default: 2592000
  certs:
    description: The certificates.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The certificate's name in RV(certs) and RV(signed).
        type: str
        required: true
      key:
        description: The key's file name in O(dir).
        type: str
        required: true
      cert:
        description: The certificate's file name in O(dir).
        type: str
        required: true
      ext:
        description: The extension file's name in O(dir).
        type: str
        required: true
      mode:
        description: The certificate's mode.
        type: str
        default: "0600"
      subject:
        description: The certificate's subject (C(/CN=...)).
        type: str
        required: true
      comment:
        description: The first words of the extension file's comment line (whose certificate).
        type: str
        required: true
      sans:
        description:
          - The subjectAltName entries, C(DNS:<name>) or C(IP:<address>) (the filter
            C(llamafleet_tls_sans)).
        type: list
        elements: str
        required: true
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check_diff
"""

EXAMPLES = r"""
- name: Make the CA and the instances' keys and certificates
  llamafleet.fleet.llamafleet_tls:
    dir: /etc/llamafleet/tls
    ca_subject: /CN=llamafleet CA gpu1
    ca_comment: "the nameConstraints of the llamafleet CA of gpu1: its instances' names"
    name_constraints: critical,permitted;DNS:localhost,permitted;DNS:gpu1
    days: 825
    certs:
      - name: main
        key: main.key
        cert: main.crt
        ext: main.ext
        subject: /CN=main
        comment: llama-server instance main
        sans: ["IP:127.0.0.1", "IP:::1", "DNS:localhost", "DNS:gpu1"]
  register: tls
"""

RETURN = r"""
certs:
  description: Each certificate's sha256 (hex) by name, after the run ("" when there is none yet).
  returned: always
  type: dict
signed:
  description: The certificates signed (or that would be, in check mode), by name.
  returned: always
  type: list
  elements: str
ca_pem:
  description: The CA certificate (public; "" when there is none yet).
  returned: always
  type: str
ca_file:
  description: The CA certificate's path.
  returned: always
  type: str
changes:
  description: What was done (or would be), one line each.
  returned: always
  type: list
  elements: str
"""

import hashlib
import os
import re
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    READ_FLAGS,
    UnsafePathError,
    check_name,
    describe,
    has_control,
    open_regular,
    open_root_dir,
    read_fd,
    replace_file,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.tls_names import (
    LABEL,
    san_problem,
)

#: the largest key, certificate or extension file read
LIMIT = 1024 * 1024
#: a nameConstraints value as llamafleet_name_constraints writes it
CONSTRAINTS = re.compile(
    rf"critical(?:,permitted;(?:DNS:{LABEL}(?:\.{LABEL})*|IP:[0-9A-Fa-f.:/]+))+\Z"
)
KEY_ARGS = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]


class OpenSSLError(Exception):
    """An openssl command failed (its arguments and what it printed)."""


def check_san(entry: Any) -> str:
    """A subjectAltName entry: DNS:<name> or IP:<address>, nothing else (a comma or a newline
    would add a name or a line to the extension file)."""
    problem = san_problem(entry)
    if problem:
        raise UnsafePathError(f"certificate name {problem}: give DNS:<name> or IP:<address>")
    return str(entry)


def check_text(value: Any, what: str) -> str:
    text = str(value)
    if has_control(text):
        raise UnsafePathError(f"{what} {text!r}: no control characters or line ends")
    return text


def cert_ext(comment: str, ca_file: str, ca_sum: str, sans: list[str]) -> bytes:
    """A certificate's extension file: its names, and the CA (path and sha256) that signs it."""
    return (
        f"# {comment}, CA {ca_file} sha256 {ca_sum}\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature, keyEncipherment\n"
        "extendedKeyUsage = serverAuth\n"
        f"subjectAltName = {', '.join(sans)}\n"
    ).encode()


def ca_ext(comment: str, constraints: str) -> bytes:
    return f"# {comment}\nnameConstraints = {constraints}\n".encode()


class TLSDir:
    """The directory's descriptor and what the run did in it."""

    def __init__(self, module: Any, path: str, fd: int | None, *, modify: bool) -> None:
        self.module = module
        self.path = path
        self.fd = fd
        self.modify = modify
        self.changes: list[str] = []

    def openssl(self, args: list[str], data: bytes | None = None) -> bytes:
        rc, out, err = self.module.run_command(
            ["openssl", *args], data=data, binary_data=True, encoding=None
        )
        if rc != 0:
            text = (err or b"").decode(errors="replace").strip()
            raise OpenSSLError(f"openssl {' '.join(args[:2])} failed (rc {rc}): {text}")
        return out  # type: ignore[no-any-return]

    def read(self, name: str) -> bytes | None:
        """An entry's bytes (None when missing); anything but a regular file with one link is
        refused (root alone writes here: something else is not the role's)."""
        if self.fd is None:
            return None
        opened = open_regular(self.fd, self.path, name)
        if opened is None:
            return None
        fd, _ = opened
        try:
            data: bytes = read_fd(fd, LIMIT)
            return data
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes, mode: int, why: str) -> None:
        self.changes.append(f"{self.path}/{name}: {why}")
        if self.modify and self.fd is not None:
            replace_file(self.fd, self.path, name, data, mode=mode)

    def own(self, name: str, mode: int) -> None:
        """root:root `mode` for an entry the run did not write."""
        if self.fd is None:
            return
        opened = open_regular(self.fd, self.path, name)
        if opened is None:
            return
        fd, st = opened
        try:
            if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, 0, mode):
                self.changes.append(f"{self.path}/{name}: {describe(st)} -> root:root {mode:04o}")
                if self.modify:
                    os.fchown(fd, 0, 0)
                    os.fchmod(fd, mode)
        finally:
            os.close(fd)

    def key(self, name: str) -> bool:
        """Make the key `name` when there is none; whether it is new."""
        if self.read(name) is not None:
            self.own(name, 0o600)
            return False
        data = self.openssl(KEY_ARGS) if self.modify and self.fd is not None else b""
        self.write(name, data, 0o600, "new key")
        return True


def check_own_ca(cert: str, key: str) -> None:
    """Your own CA's files: regular files owned by root, not writable by group or others, the
    key readable by root only (what the roles' assert checked)."""
    for path in (cert, key):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        problem = None
        if st is None:
            problem = "missing"
        elif not stat.S_ISREG(st.st_mode):
            problem = "a link or not a regular file"
        else:
            read_by_others = path == key and st.st_mode & (stat.S_IRGRP | stat.S_IROTH)
            if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or read_by_others:
                problem = describe(st)
        if problem:
            raise UnsafePathError(
                f"{path} ({problem}): your own CA's certificate and key must be regular files "
                "owned by root, not writable by group or others, the key readable by root only "
                "(chown root:root, chmod 0600 the key, 0644 the certificate)."
            )


def read_file(path: str) -> bytes:
    fd = os.open(path, READ_FLAGS)
    try:
        data: bytes = read_fd(fd, LIMIT)
        return data
    finally:
        os.close(fd)


def expiring(tls: TLSDir, name: str, within: int) -> bool:
    """Whether the certificate `name` must be signed (again): missing, unreadable or expiring."""
    if tls.read(name) is None:
        return True
    rc, _, _ = tls.module.run_command(
        ["openssl", "x509", "-noout", "-checkend", str(within), "-in", f"{tls.path}/{name}"]
    )
    return bool(rc != 0)


def keep(module: Any, p: dict[str, Any], *, modify: bool) -> dict[str, Any]:
    """Bring the directory to what `p` (the module's parameters) asks."""
    path = p["dir"]
    own_ca = bool(p["ca_cert"])
    if own_ca != bool(p["ca_key"]):
        raise UnsafePathError("ca_cert and ca_key: give both (your own CA) or neither (the host's)")
    certs = []
    for c in p["certs"]:
        item = dict(c)
        for field in ("key", "cert", "ext"):
            item[field] = check_name(c[field], f"certificate {field} file name")
        item["sans"] = [check_san(s) for s in c["sans"]]
        item["subject"] = check_text(c["subject"], "subject")
        item["comment"] = check_text(c["comment"], "comment")
        item["mode"] = int(c["mode"], 8)
        certs.append(item)
    if len({c["name"] for c in certs}) != len(certs):
        raise UnsafePathError("certs: a name is given twice")
    fd, dir_changes = open_root_dir(path, 0o700, modify=modify)
    tls = TLSDir(module, path, fd, modify=modify)
    tls.changes.extend(dir_changes)
    try:
        return _keep(tls, p, certs, own_ca)
    finally:
        if fd is not None:
            os.close(fd)


def _host_ca(tls: TLSDir, p: dict[str, Any]) -> bool:
    """Make or keep the host's own CA; whether its certificate is (or would be) new."""
    constraints = check_text(p["name_constraints"], "name_constraints")
    if not CONSTRAINTS.match(constraints):
        raise UnsafePathError(
            f"name_constraints {constraints!r}: give what llamafleet_name_constraints returns "
            "(critical,permitted;DNS:<name>,...)"
        )
    subject = check_text(p["ca_subject"], "ca_subject")
    tls.key("ca.key")
    wanted = ca_ext(check_text(p["ca_comment"], "ca_comment"), constraints)
    same_names = tls.read("ca.ext") == wanted
    if same_names:
        tls.own("ca.ext", 0o600)
    if not same_names or tls.read("ca.crt") is None:
        tls.write("ca.ext", wanted, 0o600, "the CA's names")
        data = b""
        if tls.modify and tls.fd is not None:
            data = tls.openssl(
                [
                    "req",
                    "-x509",
                    "-new",
                    "-sha256",
                    "-days",
                    "3650",
                    "-key",
                    f"{tls.path}/ca.key",
                    "-subj",
                    subject,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE,pathlen:0",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-addext",
                    f"nameConstraints={constraints}",
                ]
            )
        tls.write("ca.crt", data, 0o644, "CA certificate signed (its names)")
        return True
    tls.own("ca.crt", 0o644)
    return False


def _keep(
    tls: TLSDir, p: dict[str, Any], certs: list[dict[str, Any]], own_ca: bool
) -> dict[str, Any]:
    if own_ca:
        ca_file = check_text(p["ca_cert"], "ca_cert")
        ca_key = check_text(p["ca_key"], "ca_key")
        check_own_ca(ca_file, ca_key)
        ca_pem, new_ca = read_file(ca_file), False
    else:
        ca_file, ca_key = f"{tls.path}/ca.crt", f"{tls.path}/ca.key"
        new_ca = _host_ca(tls, p)
        ca_pem = tls.read("ca.crt") or b""
    ca_sum = hashlib.sha256(ca_pem).hexdigest() if ca_pem else ""
    if new_ca and not tls.modify:
        ca_sum = "(the new CA certificate)"  # check mode: not made, but every certificate would be
    signed = []
    sums: dict[str, str] = {}
    for c in certs:
        new_key = tls.key(c["key"])
        ext = cert_ext(c["comment"], ca_file, ca_sum, c["sans"])
        ext_changed = tls.read(c["ext"]) != ext
        if ext_changed:
            tls.write(c["ext"], ext, 0o600, "its names and CA")
        else:
            tls.own(c["ext"], 0o600)
        if new_key or ext_changed or expiring(tls, c["cert"], p["renew_within"]):
            signed.append(c["name"])
            data = b""
            if tls.modify and tls.fd is not None:
                key = f"{tls.path}/{c['key']}"
                csr = tls.openssl(["req", "-new", "-sha256", "-key", key, "-subj", c["subject"]])
                data = tls.openssl(
                    [
                        "x509",
                        "-req",
                        "-sha256",
                        "-days",
                        str(int(p["days"])),
                        "-CA",
                        ca_file,
                        "-CAkey",
                        ca_key,
                        "-CAserial",
                        f"{tls.path}/ca.srl",
                        "-CAcreateserial",
                        "-extfile",
                        f"{tls.path}/{c['ext']}",
                    ],
                    data=csr,
                )
            tls.write(c["cert"], data, c["mode"], "signed")
        else:
            tls.own(c["cert"], c["mode"])
        now = tls.read(c["cert"]) if tls.fd is not None else None
        sums[c["name"]] = hashlib.sha256(now).hexdigest() if now else ""
    return {
        "certs": sums,
        "signed": signed,
        "ca_pem": ca_pem.decode(),
        "ca_file": ca_file,
        "changes": tls.changes,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "ca_cert": {"type": "path", "default": ""},
            "ca_key": {"type": "path", "default": ""},
            "ca_subject": {"type": "str", "default": "/CN=llamafleet CA"},
            "ca_comment": {"type": "str", "default": "the nameConstraints of the llamafleet CA"},
            "name_constraints": {"type": "str", "default": ""},
            "days": {"type": "int", "default": 825},
            "renew_within": {"type": "int", "default": 2592000},
            "certs": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "name": {"type": "str", "required": True},
                    "key": {"type": "str", "required": True, "no_log": False},
                    "cert": {"type": "str", "required": True},
                    "ext": {"type": "str", "required": True},
                    "mode": {"type": "str", "default": "0600"},
                    "subject": {"type": "str", "required": True},
                    "comment": {"type": "str", "required": True},
                    "sans": {"type": "list", "elements": "str", "required": True},
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        found = keep(module, p, modify=not module.check_mode)
    except (UnsafePathError, OpenSSLError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or p['dir']}: {exc.strerror or exc}")
    result: dict[str, Any] = {"changed": bool(found["changes"]), **found}
    if module._diff:
        result["diff"] = {
            "before_header": p["dir"],
            "after_header": p["dir"],
            "before": "",
            "after": "".join(line + "\n" for line in found["changes"]),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()

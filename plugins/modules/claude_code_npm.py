#!/usr/bin/python
# Apache-2.0 (see the repository)
# ruff: noqa: E402
"""Install the Claude Code CLI from npm tarballs checked against pinned integrities."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: claude_code_npm
short_description: Install the Claude Code CLI from integrity-pinned npm tarballs
description:
  - Installs the Claude Code npm wrapper package and the native binary of one platform package
    (both fetched beforehand from the registry) into a dedicated,
    root-owned prefix, and links the command into C(/usr/local/bin).
  - Each tarball's SHA-512 (in the Subresource Integrity form C(sha512-BASE64) that npm prints) must
    equal its pin; the module fails naming the package, the expected and the actual value otherwise
    and changes nothing. The tarballs' C(package.json) must name the expected package and version.
  - The wrapper is unpacked the way npm installs a package without dependencies (regular files and
    directories only, nothing outside C(package/)) to C(PREFIX/lib/node_modules/PACKAGE), its
    lifecycle scripts are never run. Its C(postinstall) (C(install.cjs)) only puts the platform
    package's binary over the stub C(bin/claude.exe) with mode 0755; the module does that itself
    with the verified binary. C(PREFIX/bin/claude) links to it, as npm would.
  - A manifest C(PREFIX/llamafleet-claude-code.json) records the pins and the binary's SHA-256.
    Nothing is done when the installed C(package.json) has the version, the manifest the same pins
    and the binary that SHA-256; the tarballs are then not needed.
  - O(link) is created, or replaced when it is a symbolic link into one of O(replace_links_into)
    (a previous global npm install). Anything else there is left alone and the module fails.
version_added: "0.1.0"
options:
  prefix:
    description: The install prefix (created 0755 when missing; must be owned by root).
    type: path
    required: true
  package:
    description: The wrapper's npm name, such as C(@anthropic-ai/claude-code).
    type: str
    required: true
  version:
    description: The exact version.
    type: str
    required: true
  platform:
    description: The platform suffix of the native package (C(linux-x64), C(linux-arm64)).
    type: str
    required: true
  integrity:
    description: SRI string (C(sha512-...)) of the wrapper tarball.
    type: str
    required: true
  platform_integrity:
    description: SRI string of the platform package's tarball.
    type: str
    required: true
  wrapper_tarball:
    description: The wrapper's tarball (fetched from the registry); needed only to install.
    type: path
  platform_tarball:
    description: The platform package's tarball; needed only when something is installed.
    type: path
  link:
    description: The command's link on PATH.
    type: path
    default: /usr/local/bin/claude
  replace_links_into:
    description: Directories into which an existing O(link) may point and then be replaced.
    type: list
    elements: path
    default: []
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Install Claude Code 2.1.332 for linux-x64
  llamafleet.fleet.claude_code_npm:
    prefix: /opt/claude-code
    package: "@anthropic-ai/claude-code"
    version: "2.1.332"
    platform: linux-x64
    integrity: "{{ claude_code_integrity }}"
    platform_integrity: "{{ claude_code_platform_integrity['linux-x64'] }}"
    wrapper_tarball: /tmp/x/anthropic-ai-claude-code-2.1.332.tgz
    platform_tarball: /tmp/x/anthropic-ai-claude-code-linux-x64-2.1.332.tgz
"""

RETURN = r"""
installed:
  description: Whether the CLI was (or in check mode would be) installed.
  returned: always
  type: bool
link_changed:
  description: Whether the link on PATH was (or would be) created or replaced.
  returned: always
  type: bool
binary:
  description: The native binary.
  returned: always
  type: str
binary_sha256:
  description: SHA-256 of the installed native binary (empty in check mode before an install).
  returned: always
  type: str
"""

import base64
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    member_mode,
    member_problem,
)

MANIFEST = "llamafleet-claude-code.json"
BIN_NAME = "claude"
CHUNK = 1024 * 1024
SRI_RE = re.compile(r"^sha512-[A-Za-z0-9+/]{86}==$")


class InstallError(Exception):
    pass


def tarball_name(package: str, version: str) -> str:
    """The file name `npm pack` gives a package's tarball: @scope/name -> scope-name-VERSION.tgz."""
    return f"{package.lstrip('@').replace('/', '-')}-{version}.tgz"


def sri_sha512(path: str) -> str:
    """The Subresource Integrity string of a file, as npm's `integrity`: sha512-BASE64."""
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return "sha512-" + base64.b64encode(h.digest()).decode("ascii")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def check_sri(path: str, package: str, expected: str | None) -> str:
    """Fail unless the tarball's SHA-512 equals the pin (naming package, expected and actual)."""
    if not SRI_RE.match(expected or ""):
        raise InstallError(
            f"{package}: the pinned integrity {expected!r} is not a sha512-... SRI string "
            f"(`npm view {package} dist.integrity` prints it)"
        )
    actual = sri_sha512(path)
    if actual != expected:
        raise InstallError(
            f"{package}: integrity mismatch for {path}: expected {expected}, got {actual}; "
            "nothing was installed"
        )
    return actual


def _member_path(name: str) -> str | None:
    """The path below package/ of a tar member name, or None when it is outside it or unsafe."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or parts[0] != "package" or ".." in parts or name.startswith("/"):
        return None
    return "/".join(parts[1:])


def select_member(tar: tarfile.TarFile, relpath: str) -> tarfile.TarInfo:
    """The one regular-file member package/RELPATH; links, duplicates and absence are refused."""
    found = [m for m in tar.getmembers() if _member_path(m.name) == relpath]
    if len(found) != 1:
        raise InstallError(f"the tarball has {len(found)} entries package/{relpath}, expected one")
    member = found[0]
    if not member.isreg():
        raise InstallError(f"package/{relpath} in the tarball is not a regular file")
    return member


def read_package_json(tar: tarfile.TarFile) -> dict[str, Any]:
    member = select_member(tar, "package.json")
    f = tar.extractfile(member)
    if f is None:
        raise InstallError("package.json cannot be read from the tarball")
    try:
        data: Any = json.loads(f.read(1024 * 1024))
    except ValueError as exc:
        raise InstallError(f"package.json in the tarball is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InstallError("package.json in the tarball is not an object")
    return data


def check_package_json(data: Mapping[str, Any], name: str, version: str) -> None:
    if data.get("name") != name or data.get("version") != version:
        raise InstallError(
            f"the tarball holds {data.get('name')}@{data.get('version')}, expected {name}@{version}"
        )


def wrapper_bin(data: Mapping[str, Any]) -> str:
    """The relative path of the wrapper's `claude` command (bin/claude.exe)."""
    bins = data.get("bin")
    if isinstance(bins, str):
        bins = {data.get("name", "").split("/")[-1]: bins}
    rel = (bins or {}).get(BIN_NAME) if isinstance(bins, dict) else None
    path = _member_path("package/" + rel) if isinstance(rel, str) else None
    if path is None:
        raise InstallError(f"the wrapper's package.json has no usable bin.{BIN_NAME}: {bins!r}")
    if data.get("dependencies"):
        raise InstallError(
            f"the wrapper now has dependencies ({sorted(data['dependencies'])}); "
            "this role installs only dependency-free wrappers"
        )
    return path


def _copy_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, dest_fd: int, digest: Any = None
) -> None:
    src = tar.extractfile(member)
    if src is None:
        raise InstallError(f"{member.name} cannot be read from the tarball")
    with os.fdopen(dest_fd, "wb") as out:
        for block in iter(lambda: src.read(CHUNK), b""):
            if digest is not None:
                digest.update(block)
            out.write(block)
        out.flush()
        os.fsync(out.fileno())


def unpack_wrapper(tar: tarfile.TarFile, dest: str) -> None:
    """Unpack package/* into the empty directory dest: directories 0755, files 0644 or 0755."""
    for member in tar.getmembers():
        # the tar checks root applies to every archive it unpacks (module_utils/safetar.py)
        problem = member_problem(member, top="package")
        if problem is not None:
            raise InstallError(f"the wrapper tarball is refused: {problem}")
        rel = _member_path(member.name)
        if not rel:
            continue
        target = os.path.join(dest, rel)
        if member.isdir():
            os.makedirs(target, mode=0o755, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        mode = member_mode(member)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        os.fchmod(fd, mode)
        _copy_member(tar, member, fd)


def place_binary(tar: tarfile.TarFile, dest: str) -> str:
    """Put package/claude of the platform tarball at dest (replacing the stub), mode 0755, as
    install.cjs does; returns its SHA-256."""
    member = select_member(tar, BIN_NAME)
    tmp = f"{dest}.{os.getpid()}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    digest = hashlib.sha256()
    try:
        _copy_member(tar, member, fd, digest)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return digest.hexdigest()


def _symlink(target: str, path: str) -> None:
    """Point path at target atomically (a new link renamed over the old one)."""
    tmp = f"{path}.{os.getpid()}.new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def _check_root_dir(path: str) -> None:
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise InstallError(
            f"{path} must be a directory owned by uid {os.geteuid()} and not writable by group "
            "or others"
        )


class Layout:
    def __init__(self, prefix: str, package: str) -> None:
        self.prefix = prefix
        self.pkg_dir = os.path.join(prefix, "lib", "node_modules", *package.split("/"))
        self.bin_dir = os.path.join(prefix, "bin")
        self.manifest = os.path.join(prefix, MANIFEST)

    def bin_link(self) -> str:
        return os.path.join(self.bin_dir, BIN_NAME)


def installed_state(layout: Layout, want: Mapping[str, Any]) -> tuple[bool, str]:
    """(current, reason): whether the prefix holds exactly the wanted install."""
    try:
        with open(layout.manifest, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return False, "no install manifest"
    if not isinstance(manifest, dict):
        return False, "bad install manifest"
    for key, value in want.items():
        if manifest.get(key) != value:
            return False, f"{key} differs ({manifest.get(key)!r} installed)"
    try:
        with open(os.path.join(layout.pkg_dir, "package.json"), encoding="utf-8") as f:
            version = json.load(f).get("version")
    except (OSError, ValueError, AttributeError):
        return False, "no package.json"
    if version != want["version"]:
        return False, f"version {version!r} installed"
    binary = os.path.join(layout.pkg_dir, manifest.get("binary", ""))
    try:
        st = os.lstat(binary)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o755:
            return False, "binary is not a regular file with mode 0755"
        if sha256_file(binary) != manifest.get("binary_sha256"):
            return False, "binary's SHA-256 differs from the manifest"
        if os.readlink(layout.bin_link()) != os.path.relpath(binary, layout.bin_dir):
            return False, f"{layout.bin_link()} points elsewhere"
    except OSError as exc:
        return False, str(exc)
    return True, "installed"


def link_action(link: str, target: str, replace_into: Iterable[str]) -> str | None:
    """None when link already points at target, 'create' or 'replace'; fails on a foreign file."""
    if not os.path.lexists(link):
        return "create"
    if not os.path.islink(link):
        raise InstallError(
            f"{link} exists and is not a symbolic link: left alone; remove it to let the role "
            f"link {target} there"
        )
    current = os.readlink(link)
    if current == target:
        return None
    resolved = os.path.normpath(os.path.join(os.path.dirname(link), current))
    for d in replace_into:
        if resolved.startswith(os.path.normpath(d) + os.sep):
            return "replace"
    raise InstallError(
        f"{link} points to {current}, not into a previous npm install of Claude Code: left "
        f"alone; remove it to let the role link {target} there"
    )


def install(
    layout: Layout,
    want: Mapping[str, Any],
    wrapper_tgz: str,
    platform_tgz: str,
    platform_package: str,
) -> tuple[str, str]:
    check_sri(wrapper_tgz, want["package"], want["integrity"])
    check_sri(platform_tgz, platform_package, want["platform_integrity"])
    with tarfile.open(wrapper_tgz, "r:gz") as wtar, tarfile.open(platform_tgz, "r:gz") as ptar:
        wdata = read_package_json(wtar)
        check_package_json(wdata, want["package"], want["version"])
        rel_bin = wrapper_bin(wdata)
        check_package_json(read_package_json(ptar), platform_package, want["version"])
        parent = os.path.dirname(layout.pkg_dir)
        os.makedirs(parent, mode=0o755, exist_ok=True)
        os.makedirs(layout.bin_dir, mode=0o755, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".new-", dir=parent)
        old = None
        try:
            os.chmod(staging, 0o755)
            unpack_wrapper(wtar, staging)
            dest = os.path.join(staging, rel_bin)
            os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
            digest = place_binary(ptar, dest)
            if os.path.lexists(layout.pkg_dir):
                old = tempfile.mkdtemp(prefix=".old-", dir=parent)
                os.rename(layout.pkg_dir, os.path.join(old, "pkg"))
            os.rename(staging, layout.pkg_dir)
        finally:
            if os.path.lexists(staging):
                shutil.rmtree(staging)
            if old is not None:
                shutil.rmtree(old)
    binary = os.path.join(layout.pkg_dir, rel_bin)
    _symlink(os.path.relpath(binary, layout.bin_dir), layout.bin_link())
    manifest = dict(want, binary=rel_bin, binary_sha256=digest)
    tmp = f"{layout.manifest}.{os.getpid()}.new"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, layout.manifest)
    return binary, digest


def run(module: Any) -> dict[str, Any]:
    p = module.params
    prefix = p["prefix"]
    platform_package = f"{p['package']}-{p['platform']}"
    want = {
        "package": p["package"],
        "version": p["version"],
        "platform": p["platform"],
        "integrity": p["integrity"],
        "platform_integrity": p["platform_integrity"],
    }
    for name, value in (
        (p["package"], p["integrity"]),
        (platform_package, p["platform_integrity"]),
    ):
        if not SRI_RE.match(value or ""):
            raise InstallError(
                f"{name}@{p['version']}: the pinned integrity {value!r} is not a sha512-... SRI "
                f"string (`npm view {name}@{p['version']} dist.integrity` prints it)"
            )
    layout = Layout(prefix, p["package"])
    if os.path.lexists(prefix):
        _check_root_dir(prefix)
        current, reason = installed_state(layout, want)
    else:
        current, reason = False, f"{prefix} does not exist"
    link_do = link_action(p["link"], layout.bin_link(), p["replace_links_into"])
    result: dict[str, Any] = {
        "changed": not current or link_do is not None,
        "installed": not current,
        "link_changed": link_do is not None,
        "binary": "",
        "binary_sha256": "",
        "reason": reason,
    }
    if current:
        with open(layout.manifest, encoding="utf-8") as f:
            manifest = json.load(f)
        result["binary"] = os.path.join(layout.pkg_dir, manifest["binary"])
        result["binary_sha256"] = manifest["binary_sha256"]
    if module.check_mode or not result["changed"]:
        return result
    if not current:
        if not p["wrapper_tarball"] or not p["platform_tarball"]:
            raise InstallError(f"{reason}: wrapper_tarball and platform_tarball are needed")
        if not os.path.lexists(prefix):
            os.makedirs(prefix, mode=0o755)
            os.chmod(prefix, 0o755)
        _check_root_dir(prefix)
        result["binary"], result["binary_sha256"] = install(
            layout, want, p["wrapper_tarball"], p["platform_tarball"], platform_package
        )
    if link_do is not None:
        os.makedirs(os.path.dirname(p["link"]), mode=0o755, exist_ok=True)
        _symlink(layout.bin_link(), p["link"])
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "required": True},
            "package": {"type": "str", "required": True},
            "version": {"type": "str", "required": True},
            "platform": {"type": "str", "required": True},
            "integrity": {"type": "str", "required": True},
            "platform_integrity": {"type": "str", "required": True},
            "wrapper_tarball": {"type": "path"},
            "platform_tarball": {"type": "path"},
            "link": {"type": "path", "default": "/usr/local/bin/claude"},
            "replace_links_into": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except InstallError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc}", exception=traceback.format_exc())


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Apache-2.0
"""Ansible module: the llama_cpp role's one decision. Is the wanted build (pinned commit, ref,
backend, options hash, targets, build number) the one the host's `current` link points
at, and is it intact (its binaries still have the sha256 its manifest recorded, root's files that
nobody else can write)? Read-only; the role runs its checkout, build and install tasks only when
the answer is no."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_cpp_state
short_description: Decide whether the wanted llama.cpp build is installed, current and intact
description:
  - Reads C(<prefix>/current) (a link to C(<prefix>/builds/<name>)) and that build's
    C(manifest.json), without following a link at any file it opens.
  - The build is current when its name has the role's form and its manifest (format 2 or later)
    names O(commit) as a pinned commit, O(ref), O(backend), O(options_hash), O(targets) and,
    unless O(build_number) is V(auto), that build number; its build directory, C(bin/) and every
    binary belong to root and nobody else can write to them; every file in C(bin/) is one of the
    manifest's C(binaries_sha256) with that sha256 (hashed again on every call) and none is
    missing; and the C(--help) text the llama_server role reads is there.
  - RV(current) is false with RV(reason) saying the first thing that differs. The role then runs
    its full path (checkout, build or shipped install, switch), which checks everything again;
    when the build in use is the wanted one (RV(wanted)) but not RV(intact), the role stops
    instead, naming what changed.
  - Also reports whether the checkout's C(.git/config) (O(work_dir)) has a remote URL with
    credentials in it, which the full path removes (RV(checkout_credentials)).
  - The repository URL is not compared (the pinned commit names the source, and a shipped build
    records its builder's URL).
  - Never changes anything (changed=false); runs the same in check mode.
options:
  prefix:
    description: The install prefix (C(llama_cpp_prefix)).
    type: path
    required: true
  commit:
    description: The pinned commit (40 hex digits).
    type: str
    required: true
  ref:
    description: The branch, tag or commit the build was asked for (C(llama_cpp_version)).
    type: str
    required: true
  backend:
    description: The backend chosen for this host.
    type: str
    choices: [cpu, cuda]
    required: true
  options_hash:
    description: The sha256 of the build's options (the role's C(_llama_cpp_options_sha256)).
    type: str
    required: true
  targets:
    description: The CMake targets, so the binaries, of the build.
    type: list
    elements: str
    required: true
  build_number:
    description: V(auto), or the build number set by hand (C(llama_cpp_build_number)).
    type: str
    default: auto
  work_dir:
    description: The build account's work directory (its checkout is C(<work_dir>/src)).
    type: path
  refuse_tampered:
    description:
      - Fail when the build in use is the wanted one but not intact (a binary changed or added
        after the install, a file another account can write), naming what differs and what to
        do; nothing is changed. Without it the result says so (RV(wanted) and not RV(intact)).
    type: bool
    default: false
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Decide whether the wanted build is installed, current and intact
  llamafleet.fleet.llama_cpp_state:
    prefix: /opt/llama.cpp
    commit: 69d8e4be47243e83b3d0d71e932bc7aa61c644dc
    ref: feature/turboquant-kv-cache
    backend: cpu
    options_hash: "{{ _llama_cpp_options_sha256 }}"
    targets: [llama-server]
  register: _llama_cpp_state
"""

RETURN = r"""
current:
  description: Whether the build C(current) points at is the wanted one, intact.
  returned: always
  type: bool
wanted:
  description: >-
    Whether its manifest names the wanted build (RV(current) is false when it is not RV(intact)).
  returned: always
  type: bool
intact:
  description: Whether its files are root's alone and its binaries match its manifest.
  returned: always
  type: bool
reason:
  description: Why it is not current (empty when it is).
  returned: always
  type: str
name:
  description: The name of the build C(current) points at (empty without one).
  returned: always
  type: str
dir:
  description: Its directory.
  returned: always
  type: str
manifest:
  description: Its manifest (empty when it could not be read).
  returned: always
  type: dict
checkout_credentials:
  description: Whether a remote URL of the checkout carries credentials.
  returned: always
  type: bool
"""

import json
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.repo_url import (
    config_has_credentials,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    BUILD_NAME,
    UnsafeArchiveError,
    installed_binaries_problems,
    open_regular,
)

MANIFEST_FORMAT = 2


def _read_json(path: str) -> object:
    fd = open_regular(path)
    with os.fdopen(fd, encoding="utf-8") as f:
        return json.load(f)


def _root_only(path: str) -> str:
    """Why `path` is not a file or directory of root that nobody else can write to ('' if it is)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a link"
    if st.st_uid != 0 or st.st_mode & 0o022:
        return f"{path} is not root's alone (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def checkout_has_credentials(work_dir: str | None) -> bool:
    if not work_dir:
        return False
    try:
        fd = open_regular(os.path.join(work_dir, "src", ".git", "config"))
    except (OSError, UnsafeArchiveError):
        return False
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        return bool(config_has_credentials(f.read()))


def _in_use(prefix: str) -> tuple[str, str, dict[str, object], str]:
    """The build `current` points at: (name, directory, manifest, why it cannot be used)."""
    link = os.path.join(prefix, "current")
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        return "", "", {}, f"{link} does not exist (no build is in use)"
    except OSError as exc:
        return "", "", {}, f"{link} is not a link ({exc.strerror})"
    builds = os.path.join(prefix, "builds")
    name = os.path.basename(target.rstrip("/"))
    build_dir = os.path.join(builds, name)
    if os.path.normpath(target) != os.path.normpath(build_dir):
        return name, build_dir, {}, f"{link} points at {target}, not at a directory of {builds}"
    if not BUILD_NAME.match(name):
        return (
            name,
            build_dir,
            {},
            f"the build in use, {name!r}, is not named as the role names builds",
        )
    try:
        manifest = _read_json(os.path.join(build_dir, "manifest.json"))
    except (OSError, UnsafeArchiveError, ValueError) as exc:
        return name, build_dir, {}, f"the build in use, {name}: {exc}"
    if not isinstance(manifest, dict):
        return name, build_dir, {}, f"the build in use, {name}: manifest.json is not an object"
    return name, build_dir, manifest, ""


def _unwanted(manifest: dict[str, object], want: dict[str, object]) -> str:
    """What of `want` the manifest does not say ('' when it says all of it)."""
    fmt = manifest.get("format")
    if not isinstance(fmt, int) or fmt < MANIFEST_FORMAT:
        return f"has manifest format {fmt!r} (before {MANIFEST_FORMAT})"
    for key, value in want.items():
        if manifest.get(key) != value:
            return f"has {key} {manifest.get(key)!r}; wanted {value!r}"
    return ""


def _not_intact(
    prefix: str, build_dir: str, manifest: dict[str, object], help_file: bool
) -> list[str]:
    """Why the installed files are not what the manifest recorded, root's alone."""
    bindir = os.path.join(build_dir, "bin")
    try:
        dirs = (prefix, os.path.dirname(build_dir), build_dir, bindir)
        problems = [p for p in (_root_only(d) for d in dirs) if p]
        problems += installed_binaries_problems(build_dir, manifest)
        problems += [
            p
            for p in (_root_only(os.path.join(bindir, b)) for b in sorted(os.listdir(bindir)))
            if p
        ]
    except (OSError, UnsafeArchiveError) as exc:
        problems = [str(exc)]
    if help_file and not os.path.isfile(os.path.join(build_dir, "llama-server.help.txt")):
        problems.append("llama-server.help.txt is missing")
    return problems


def build_state(
    prefix: str,
    *,
    commit: str,
    ref: str,
    backend: str,
    options_hash: str,
    targets: list[str],
    build_number: str = "auto",
) -> dict[str, object]:
    """{current, wanted, intact, reason, name, dir, manifest}: see DOCUMENTATION."""
    name, build_dir, manifest, reason = _in_use(prefix)
    out: dict[str, object] = {
        "current": False,
        "wanted": False,
        "intact": False,
        "reason": reason,
        "name": name,
        "dir": build_dir,
        "manifest": manifest,
    }
    if reason:
        return out
    want: dict[str, object] = {
        "name": name,
        "commit": commit,
        "pinned": True,
        "ref": ref,
        "backend": backend,
        "options_hash": options_hash,
        "targets": list(targets),
    }
    if build_number != "auto":
        want["build_number"] = int(build_number)
    unwanted = _unwanted(manifest, want)
    if not unwanted and not name.endswith(f"-{commit[:10]}-{backend}-{options_hash[:10]}"):
        unwanted = "is not named for this commit, backend and options"
    if unwanted:
        out["reason"] = f"the build in use, {name}, {unwanted}"
        return out
    out["wanted"] = True
    problems = _not_intact(prefix, build_dir, manifest, "llama-server" in targets)
    if problems:
        out["reason"] = f"the build in use, {name}, is not intact: " + "; ".join(problems[:3])
        return out
    out["intact"] = out["current"] = True
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "required": True},
            "commit": {"type": "str", "required": True},
            "ref": {"type": "str", "required": True},
            "backend": {"type": "str", "required": True, "choices": ["cpu", "cuda"]},
            "options_hash": {"type": "str", "required": True},
            "targets": {"type": "list", "elements": "str", "required": True},
            "build_number": {"type": "str", "default": "auto"},
            "work_dir": {"type": "path"},
            "refuse_tampered": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    commit = p["commit"].strip().lower()
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        module.fail_json(msg=f"commit must be 40 hex digits, not {p['commit']!r}")
    if p["build_number"] != "auto" and not re.fullmatch(r"[0-9]{1,9}", p["build_number"]):
        module.fail_json(msg=f"build_number must be auto or a number, not {p['build_number']!r}")
    result = build_state(
        p["prefix"],
        commit=commit,
        ref=p["ref"],
        backend=p["backend"],
        options_hash=p["options_hash"].strip().lower(),
        targets=p["targets"],
        build_number=p["build_number"],
    )
    credentials = checkout_has_credentials(p["work_dir"])
    if p["refuse_tampered"] and result.get("wanted") and not result.get("intact"):
        module.fail_json(
            msg=f"{result.get('reason')}. Nothing was changed. Find out who changed it, then remove"
            f" {result.get('dir')} (and {p['prefix']}/current) and run the role again to build or"
            " install it afresh.",
            changed=False,
            checkout_credentials=credentials,
            **result,
        )
    module.exit_json(changed=False, checkout_credentials=credentials, **result)


if __name__ == "__main__":
    main()

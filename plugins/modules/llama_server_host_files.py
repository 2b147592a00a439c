#!/usr/bin/python
# Apache-2.0
"""Ansible module: what the llama_server role's preflight reads from a server host, in one call:
the build's manifest and --help text, and the saved metadata of each model, from model
directories that no other account controls."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: llama_server_host_files
short_description: Read a server host's build manifest, --help text and model metadata in one task
description:
  - Reads the build's C(manifest.json) at O(manifest) and the C(--help) text its C(help_file)
    names; either missing or unreadable is returned empty, as before (the validator then checks
    against the flags of every known build).
  - For each model of O(models) (a name under O(models_dir); absolute paths are skipped), looks at
    its directory without following a link and refuses, naming it, a directory that is a link,
    is not owned by root, or that its group or others can write (root reads C(metadata.json) in
    it by path; the gguf_models role takes such a directory over for root). The C(metadata.json)
    of each accepted directory is read (not through a link) and parsed; a missing one is left
    out.
  - >-
    With O(account), says whether the service account is as the role makes it (RV(account_current)):
    the group exists, and the user exists with it as its primary group, that shell and that home.
    Where it is, the role's account tasks do not run.
  - Reads only; the same in check mode. Files larger than 16 MiB are refused.
options:
  manifest:
    description: The build's manifest.json (an absolute path).
    type: path
    required: true
  models_dir:
    description: The directory of the models (llama_server_models_dir).
    type: path
    required: true
  models:
    description: The instances' C(model) values; only the names under O(models_dir) are read.
    type: list
    elements: str
    default: []
  account:
    description: The service account as the role makes it.
    type: dict
    suboptions:
      user:
        description: The user's name.
        type: str
        required: true
      group:
        description: The name of its primary group.
        type: str
        required: true
      shell:
        description: Its shell.
        type: str
        required: true
      home:
        description: Its home directory.
        type: str
        required: true
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Read the build and the model metadata
  llamafleet.fleet.llama_server_host_files:
    manifest: /opt/llama.cpp/current/manifest.json
    models_dir: /var/lib/llama/models
    models: [qwen3.6-35b-a3b]
  register: _files
"""

RETURN = r"""
manifest:
  description: C({content}) with the manifest base64-encoded, as slurp returns it; C({}) when
    there is none.
  returned: success
  type: dict
manifest_json:
  description: The manifest parsed; C({}) when there is none or it is not a JSON object.
  returned: success
  type: dict
help:
  description: C({content}) with the --help text base64-encoded; C({}) when there is none.
  returned: success
  type: dict
models_meta:
  description: Each model's parsed metadata.json, by the model's name.
  returned: success
  type: dict
account_current:
  description: Whether the service account is as O(account) describes it.
  returned: when O(account) is given
  type: bool
"""

import base64
import grp
import json
import os
import pwd
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import owner_name, read_fd

LIMIT = 16 * 1024 * 1024


class RefusedError(Exception):
    """What the module refuses: the task fails with this message."""


def _read(path: str, *, follow: bool) -> bytes | None:
    """A regular file's bytes, None when it is missing, not a regular file or unreadable."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data: bytes = read_fd(fd, LIMIT)
        if len(data) > LIMIT:
            raise RefusedError(f"{path} is larger than {LIMIT} bytes")
        return data
    finally:
        os.close(fd)


def _slurped(data: bytes | None) -> dict[str, str]:
    return {} if data is None else {"content": base64.b64encode(data).decode("ascii")}


def model_dir_problem(path: str, models_dir: str, model: str) -> str | None:
    """Why root does not read metadata.json in this model's directory; None when it may (or
    there is no such directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    ok = (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == 0
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )
    if ok:
        return None
    what = (
        "a symbolic link"
        if stat.S_ISLNK(st.st_mode)
        else f"owned by {owner_name(st.st_uid)} (mode {stat.S_IMODE(st.st_mode):04o})"
    )
    return (
        f"{models_dir}/{model} is {what}: root does not read its metadata.json by path. Run the "
        "gguf_models role (it takes such a directory over for root), then run again."
    )


def read(manifest: str, models_dir: str, models: list[str]) -> dict[str, Any]:
    raw = _read(manifest, follow=True)
    parsed: Any = {}
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {}
    parsed = parsed if isinstance(parsed, dict) else {}
    help_file = parsed.get("help_file")
    help_raw = _read(str(help_file), follow=True) if help_file is not None else None

    metas: dict[str, Any] = {}
    for model in models:
        if os.path.isabs(model):
            continue
        path = os.path.join(models_dir, model)
        problem = model_dir_problem(path, models_dir, model)
        if problem:
            raise RefusedError(problem)
        data = _read(os.path.join(path, "metadata.json"), follow=False)
        if data is None:
            continue
        try:
            metas[model] = json.loads(data)
        except ValueError as e:
            raise RefusedError(
                f"{path}/metadata.json is not JSON ({e}): run the gguf_models role to write it "
                "again"
            ) from e
    return {
        "manifest": _slurped(raw),
        "manifest_json": parsed,
        "help": _slurped(help_raw),
        "models_meta": metas,
    }


def account_current(user: str, group: str, shell: str, home: str) -> bool:
    """Whether ``group`` exists and ``user`` exists with it as its primary group, that shell and
    that home: what the role's group and user tasks would leave unchanged."""
    try:
        gid = grp.getgrnam(group).gr_gid
        pw = pwd.getpwnam(user)
    except KeyError:
        return False
    return pw.pw_gid == gid and pw.pw_shell == shell and pw.pw_dir == home


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "manifest": {"type": "path", "required": True},
            "models_dir": {"type": "path", "required": True},
            "models": {"type": "list", "elements": "str", "default": []},
            "account": {
                "type": "dict",
                "options": {
                    k: {"type": "str", "required": True} for k in ("user", "group", "shell", "home")
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        found = read(p["manifest"], p["models_dir"], list(p["models"]))
    except RefusedError as e:
        module.fail_json(msg=str(e))
    if p["account"]:
        found["account_current"] = account_current(**p["account"])
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()

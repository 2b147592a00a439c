#!/usr/bin/python
# -*- coding: utf-8 -*-
# Apache-2.0 (see the repository)
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
  - A file that is not valid JSON (or whose top level is not an object) is never overwritten: the
    module fails with the file, line and column of the error.
  - Top-level C(ANTHROPIC_*), C(CLAUDE_CODE_*) and C(API_TIMEOUT_MS) keys are ignored by Claude Code
    (only the C(env) block counts); they are moved into C(env) (a value already in C(env) wins) and
    reported in RV(moved).
  - The token is given separately (O(token), never logged) and masked in the diff.
version_added: "0.1.0"
options:
  path:
    description: The settings file.
    type: path
    required: true
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
    description: Move top-level C(ANTHROPIC_*), C(CLAUDE_CODE_*), C(API_TIMEOUT_MS) keys into C(env).
    type: bool
    default: true
  backup:
    description: Keep a timestamped copy of the old file when the content changes.
    type: bool
    default: true
  create:
    description: Create the file when it does not exist.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.files
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author: llamafleet
"""

EXAMPLES = r"""
- name: Point a user's Claude Code at a llama-server
  claude_settings:
    path: /home/dev/.claude/settings.json
    owner: dev
    group: dev
    mode: "0600"
    env:
      ANTHROPIC_BASE_URL: http://10.0.0.5:8080
      CLAUDE_CODE_ATTRIBUTION_HEADER: "0"
    settings:
      includeGitInstructions: false
    token: "{{ key }}"
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
"""

import copy
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

MISPLACED_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")
MISPLACED_KEYS = ("API_TIMEOUT_MS",)
SECRET_KEYS = ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")
MASK = "********"


def _misplaced(key):
    return key.startswith(MISPLACED_PREFIXES) or key in MISPLACED_KEYS


def _merge(dst, src, prefix, changed):
    for key, value in src.items():
        name = prefix + key
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value, name + ".", changed)
        elif key not in dst or dst[key] != value:
            dst[key] = copy.deepcopy(value)
            changed.append(name)


def _masked(data, secrets):
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


def _dump(data):
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            env=dict(type="dict", default={}),
            env_absent=dict(type="list", elements="str", default=[]),
            settings=dict(type="dict", default={}),
            token=dict(type="str", no_log=True),
            token_key=dict(type="str", default="ANTHROPIC_AUTH_TOKEN", no_log=False),
            move_misplaced=dict(type="bool", default=True),
            backup=dict(type="bool", default=True),
            create=dict(type="bool", default=True),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    secrets = set(SECRET_KEYS) | {p["token_key"]}

    exists = os.path.exists(path)
    text = ""
    if exists:
        if not os.path.isfile(path):
            module.fail_json(msg="%s exists and is not a regular file" % path)
        try:
            with open(path, "r", encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg="%s: cannot read: %s" % (path, exc))
    elif not p["create"]:
        module.fail_json(msg="%s does not exist and create=false" % path)

    if text.strip():
        try:
            data = json.loads(text)
        except ValueError as exc:
            line = getattr(exc, "lineno", "?")
            col = getattr(exc, "colno", "?")
            reason = getattr(exc, "msg", str(exc))
            module.fail_json(
                msg="%s is not valid JSON (line %s, column %s: %s); it was left unchanged. "
                "Fix or remove it, then run again." % (path, line, col, reason),
                path=path,
                line=line,
                column=col,
            )
        if not isinstance(data, dict):
            module.fail_json(
                msg="%s: the top level is a JSON %s, not an object; it was left unchanged."
                % (path, type(data).__name__),
                path=path,
            )
    else:
        data = {}
    before = copy.deepcopy(data)

    changed_keys = []
    moved = []
    env = data.get("env")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        module.fail_json(
            msg='%s: "env" must be an object, not %s; the file was left unchanged.'
            % (path, type(env).__name__),
            path=path,
        )

    if p["move_misplaced"]:
        for key in [k for k in data if _misplaced(k)]:
            value = data.pop(key)
            if key not in env:
                env[key] = value if isinstance(value, str) else json.dumps(value)
            moved.append(key)
            changed_keys.append(key)

    wanted = {k: ("" if v is None else (v if isinstance(v, str) else json.dumps(v)))
              for k, v in p["env"].items()}
    if p["token"] is not None:
        wanted[p["token_key"]] = p["token"]
    for key, value in wanted.items():
        if env.get(key) != value:
            env[key] = value
            changed_keys.append("env." + key)
    for key in p["env_absent"]:
        if key in env:
            del env[key]
            changed_keys.append("env." + key)
    if env or "env" in data:
        data["env"] = env

    settings = dict(p["settings"])
    settings.pop("env", None)
    _merge(data, settings, "", changed_keys)

    if moved:
        module.warn(
            "%s: moved %s from the top level into \"env\" (Claude Code ignores them at the top level)"
            % (path, ", ".join(moved))
        )

    content_changed = (not exists) or data != before
    result = dict(changed=False, path=path, moved=moved, changed_keys=changed_keys)
    if content_changed and module._diff:
        result["diff"] = dict(
            before_header=path,
            after_header=path,
            before=_dump(_masked(before, secrets)) if exists else "",
            after=_dump(_masked(data, secrets)),
        )

    if content_changed:
        result["changed"] = True
        if not module.check_mode:
            if exists and p["backup"]:
                result["backup_file"] = module.backup_local(path)
                st = os.stat(path)
                os.chown(result["backup_file"], st.st_uid, st.st_gid)
                os.chmod(result["backup_file"], 0o600)  # it may hold a key
            directory = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(prefix=".settings.", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(_dump(data))
                os.chmod(tmp, 0o600)
                module.atomic_move(tmp, path, unsafe_writes=p["unsafe_writes"])
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

    file_args = module.load_file_common_arguments(p)
    if os.path.exists(path):
        result["changed"] = module.set_fs_attributes_if_different(
            file_args, result["changed"], diff=None
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()

"""Action plugin: run the llamafleet validator in-process on the controller, on texts a role
rendered or read back (units, Claude Code settings), with facts and the files the texts name
handed over as mappings. Nothing is written to disk and nothing runs on the managed host. Fails
the task, naming the build, when a text is refused. The checking and the refusal's wording are
the validator's (llamafleet.preflight: check_items, refusal); this plugin checks its options,
makes that one call and shapes the result.

    - llamafleet.fleet.llamafleet_check:
        what: instance              # the word used in the refusal
        build: b9079-...            # named in the refusal (the build whose --help is in the facts)
        items:                      # one check per item; the texts of an item are checked together
          - name: main
            path: llama-server-main.service   # the name findings give the text
            text: "..."             # a unit, script, instance mapping or settings file
            kind: unit              # optional: unit, shell, cmd, mapping, settings (else detected)
            texts:                  # more texts checked with it (the units of a client's server)
              - {path: "gpu1:/etc/systemd/system/llama-server-b.service", text: "...", kind: unit}
            facts: {...}            # the shape of a facts file, every fact inline
            files: {PATH: TEXT}     # files the texts name (a key file, a chat template), in memory
            settings:               # Claude Code settings checked with the text (cross-file rules)
              - {path: /home/a/.claude/settings.json, text: "...", scope: user, mode: "0600"}
        fail_on: error              # error | warning | info
        config: ""                  # a .llamafleet.yaml on the controller; "" = the nearest one
                                    # from the directory ansible-playbook runs in (see the README)
        skip: []                    # rule ids skipped besides the config's (a deliberate choice)
        hint: ""                    # appended to the refusal (how to suppress a deliberate choice)
        written: false              # true: the texts are already on the host (the refusal says so)

An item needs ``text``, ``texts`` or ``settings`` (any of them together). A settings entry's
``mode`` is the file's permission bits on its host (an int, or an octal string such as "0644";
absent or null: unknown, and CC008, a key readable by others, stays silent). Returns ``checks``
(per item: name, path, findings, suppressed, refused; not ``results``, which Ansible reserves for
loops), ``refused`` (whether any item was) and ``config`` (the file read, or null). Check mode
changes nothing here: the check runs the same.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import message

_ARGS = frozenset({"items", "fail_on", "config", "skip", "what", "build", "hint", "written"})


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = _ARGS

    def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            from llamafleet.config_file import find_config
            from llamafleet.preflight import PreflightError, check_items, refusal
        except ImportError as exc:
            raise AnsibleActionFail(message(exc)) from exc
        args = self._task.args
        unknown = sorted(set(args) - _ARGS)
        if unknown:
            raise AnsibleActionFail(f"llamafleet_check: unknown option(s) {', '.join(unknown)}")
        skip = args.get("skip") or []
        if not isinstance(skip, list):
            raise AnsibleActionFail("llamafleet_check: skip must be a list of rule ids")
        try:
            written = boolean(args.get("written", False), strict=True)
        except TypeError as exc:
            raise AnsibleActionFail(f"llamafleet_check: written: {exc}") from exc
        config = str(args.get("config") or "") or find_config(os.getcwd())
        try:
            checks = check_items(
                args.get("items") or [], str(args.get("fail_on") or "error"), config, skip
            )
        except PreflightError as exc:
            raise AnsibleActionFail(f"llamafleet_check: {exc}") from exc
        result["changed"] = False
        result["config"] = config
        result["checks"] = [c.as_dict() for c in checks]
        result["refused"] = any(c.refused for c in checks)
        msg = refusal(
            checks,
            str(args.get("what") or "item"),
            args.get("build"),
            str(args.get("hint") or ""),
            written,
        )
        if msg:
            result["failed"] = True
            result["msg"] = msg
        return result

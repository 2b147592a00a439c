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
        report: false               # true: an item's findings below fail_on become a warning
        passed_key: ""              # the `key` of a check this host passed: the same check is not
                                    # run again (the result is skipped, with the same key)

An item needs ``text``, ``texts`` or ``settings`` (any of them together). A settings entry's
``mode`` is the file's permission bits on its host (an int, or an octal string such as "0644";
absent or null: unknown, and CC008, a key readable by others, stays silent). Returns ``checks``
(per item: name, path, findings, suppressed, refused; not ``results``, which Ansible reserves for
loops), ``refused`` (whether any item was), ``config`` (the file read, or null) and ``key`` (a
sha256 of what the check was handed: the items, fail_on, config and skip). With ``passed_key``
equal to that key the check is not run again and the result is skipped. Check mode changes
nothing here: the check runs the same.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import message

_ARGS = frozenset(
    {
        "items",
        "fail_on",
        "config",
        "skip",
        "what",
        "build",
        "hint",
        "written",
        "report",
        "passed_key",
    }
)


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
        flags = {}
        for name in ("written", "report"):
            try:
                flags[name] = boolean(args.get(name, False), strict=True)
            except TypeError as exc:
                raise AnsibleActionFail(f"llamafleet_check: {name}: {exc}") from exc
        written, report = flags["written"], flags["report"]
        items = args.get("items") or []
        key = check_key(items, args.get("fail_on"), args.get("config"), skip)
        result["key"] = key
        if str(args.get("passed_key") or "") == key:
            result.update(changed=False, skipped=True, msg="this host passed exactly this check")
            return result
        config = str(args.get("config") or "") or find_config(os.getcwd())
        try:
            checks = check_items(items, str(args.get("fail_on") or "error"), config, skip)
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
        elif report:
            found = remaining(result["checks"])
            if found:
                result["warnings"] = found
        return result


def check_key(items: Any, fail_on: Any, config: Any, skip: Any) -> str:
    """A sha256 of what a check is handed (the texts with their facts and files, the threshold,
    the configuration named and the rules skipped): the same key, the same check."""
    text = json.dumps([items, fail_on, config, skip], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def remaining(checks: list[dict[str, Any]]) -> list[str]:
    """One line per item whose findings did not refuse it: its name and the rule ids found
    (``main: LS010, LS031 (below fail_on)``), in the items' order."""
    lines = []
    for c in checks:
        ids = [str(f.get("id")) for f in c.get("findings") or [] if isinstance(f, dict)]
        if ids and not c.get("refused"):
            lines.append(f"{c.get('name')}: {', '.join(ids)} (below fail_on)")
    return lines

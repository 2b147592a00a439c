"""Action plugin: run the llamafleet validator in-process on the controller, on texts a role
rendered (units, settings), with facts handed over as mappings. Nothing is written to disk and
nothing runs on the managed host. Fails the task, naming the build, when a text is refused.

    - llamafleet_check:
        what: instance              # the word used in the refusal
        build: b9079-...            # named in the refusal (the build whose --help is in the facts)
        items:                      # one check per item
          - {name: main, path: llama-server-main.service, text: "...", facts: {...}}
        fail_on: error              # error | warning | info
        config: ""                  # a .llamafleet.yaml on the controller; "" = the nearest one
                                    # from the directory ansible-playbook runs in (see the README)
        hint: ""                    # appended to the refusal (how to suppress a deliberate choice)

Returns ``checks`` (per item: name, path, findings, suppressed, refused; not ``results``, which
Ansible reserves for loops) and ``config`` (the file
read, or null).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_ARGS = frozenset({"items", "fail_on", "config", "what", "build", "hint"})


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = _ARGS

    def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        try:
            from llamafleet.config_file import find_config
            from llamafleet.errors import InputError
            from llamafleet.preflight import check_texts, refusal
        except ImportError as exc:
            raise AnsibleActionFail(
                "the llamafleet Python package is not importable by the Python that runs Ansible "
                f"(pip install ./validator into it): {exc}"
            ) from exc
        args = self._task.args
        unknown = sorted(set(args) - _ARGS)
        if unknown:
            raise AnsibleActionFail(f"llamafleet_check: unknown option(s) {', '.join(unknown)}")
        items = args.get("items") or []
        if not isinstance(items, list):
            raise AnsibleActionFail("llamafleet_check: items must be a list")
        config = str(args.get("config") or "") or find_config(os.getcwd())
        try:
            checked = check_texts(items, str(args.get("fail_on") or "error"), config)
        except InputError as exc:
            raise AnsibleActionFail(f"llamafleet_check: {exc}") from exc
        result["changed"] = False
        result["config"] = config
        result["checks"] = [c.as_dict() for c in checked]
        msg = refusal(
            checked, str(args.get("what") or "item"), args.get("build"), str(args.get("hint") or "")
        )
        if msg:
            result["failed"] = True
            result["msg"] = msg
        return result

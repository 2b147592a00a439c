"""Action plugin: one decision for the gguf_models role, "is every model in place, verified and
described?", so that a host that has them runs one task instead of the placing tasks.

    - llamafleet.fleet.gguf_models_state:
        models: "{{ gguf_models_list }}"
        dir: "{{ gguf_models_dir }}"
        takeover_owner: "{{ gguf_models_takeover_owner }}"
        verify_existing: "{{ gguf_models_verify_existing }}"
        inspect_command: "{{ gguf_models_inspect_command }}"
        min_free_mb: "{{ gguf_models_min_free_mb }}"
        allow_insecure_transport: "{{ gguf_models_allow_insecure_transport }}"
      register: _gguf_models_state

First it checks the list as the role always has (each model a name, exactly one of url or src, a
sha256 of 64 hex digits, url|src + sha256 on every part and on mmproj; unique names) and refuses a
variable an earlier version had (gguf_models_owner, _group, _create_owner, _file_mode, _dir_mode),
with the role's own messages, before anything is asked on the host.

Then it runs the module gguf_models_state once on the host (module_utils/gguf_state.py), which
asks the role's own placing code, in check mode and in that one process, what the placing tasks
would do (tasks/install.yml, model.yml, file.yml): gguf_fetch's (module_utils/gguf_place.py) for
the models directory, each model's directory and each file (its sha256 file names the expected
checksum, root owns it, one link; with O(verify_existing) it is hashed again), and
gguf_metadata's (module_utils/gguf_describe.py) for each model's saved metadata.json (the
document it would write is the one there). (Before, the plugin ran those two modules over the
connection once for each of these paths.) When none of them would change anything, the result is
C(current: true) and its C(metadata) is what the placing tasks would have set as
C(gguf_models_metadata) (each model's validated document plus C(dir) and C(path)); the role sets
that fact from it.

Anything else is C(current: false) with the C(reasons), and the role runs its placing tasks,
which make the change or fail with their own message: a module that refuses (a link planted at a
final name, a directory another account controls) is a reason here, never a failure, so the
refusal is reported by the task that would act. A configured O(inspect_command) (the metadata comes
from a command on the host) is always decided by the placing tasks.

Nothing is changed on the host, in check mode or not; the result never reports C(changed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_state import ARGS
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import (
    run_module,
    task_args,
)

#: the task's options: the module's, which makes the decision on the host
_ARGS = ARGS


class ListError(Exception):
    """A gguf_models_list entry or a role variable the role refuses: the task fails with exactly
    this message (the role's own words, before anything is asked on the host)."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_REMOVED = re.compile(r"gguf_models_(owner|group|create_owner|file_mode|dir_mode)")


def check_list(models: Any) -> None:
    """The role's checks of gguf_models_list: each model a name (letters, digits, . _ -), exactly
    one of url or src, a sha256 of 64 hex digits, and url|src + sha256 on every part and on mmproj;
    the names unique. ListError naming the first entry that fails."""
    if not isinstance(models, list):
        raise ListError("gguf_models_list must be a list of models")

    def located(entry: Any) -> bool:
        return isinstance(entry, Mapping) and ("url" in entry or "src" in entry)

    for model in models:
        m = model if isinstance(model, Mapping) else {}
        name = m.get("name")
        parts = m.get("parts") or []
        good = (
            isinstance(name, str)
            and bool(_NAME.fullmatch(name))
            and ("url" in m) != ("src" in m)
            and "sha256" in m
            and bool(_HEX64.fullmatch(str(m["sha256"]).lower()))
            and isinstance(parts, list)
            and all(isinstance(p, Mapping) and "sha256" in p and located(p) for p in parts)
            and ("mmproj" not in m or (located(m["mmproj"]) and "sha256" in m["mmproj"]))
        )
        if not good:
            shown = name if isinstance(name, str) and name else "(no name)"
            raise ListError(
                f"gguf_models_list entry {shown}: each model needs a name (letters, digits, . _ -),"
                " exactly one of url or src, a sha256 of 64 hex digits, and url|src + sha256 on"
                " every part and on mmproj."
            )
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise ListError(f"gguf_models_list has duplicate names: {names}")


def check_removed(variables: Mapping[str, Any]) -> None:
    """ListError when a variable an earlier version had is set (the models are root's now)."""
    found = sorted(n for n in variables if isinstance(n, str) and _REMOVED.fullmatch(n))
    if found:
        raise ListError(
            f"{', '.join(found)}: no longer used. Model directories and files are owned by root"
            " (root:root, directories 0755, files 0644) and only read by the service (see the"
            " role's README, Security). Remove these variables; to have root take over the"
            " directories an earlier version gave to an account, set gguf_models_takeover_owner"
            " to it."
        )


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            check_list(self._task.args.get("models"))
            check_removed(task_vars)
        except ListError as e:
            raise AnsibleActionFail(str(e)) from None
        args = task_args("gguf_models_state", self._task.args, _ARGS)
        # one run of the module on the host, which asks the placing code in check mode: it
        # reports what it would do and changes nothing
        found = run_module(
            self, "llamafleet.fleet.gguf_models_state", args, task_vars, check_mode=True
        )
        if found.get("failed"):
            raise AnsibleActionFail(str(found.get("msg", "gguf_models_state failed")))
        # the role sets gguf_models_metadata from `metadata` with set_fact: facts returned here
        # would be host facts, read at the top level only through INJECT_FACTS_AS_VARS
        result.update(
            current=bool(found.get("current")),
            reasons=list(found.get("reasons") or []),
            changed=False,
        )
        if "metadata" in found:
            result["metadata"] = found["metadata"]
        return result

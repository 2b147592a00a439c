"""Action plugin: the facts every llamafleet role reads, in one task per play and host, and only
where this run has not gathered them yet (llamafleet_common's one task):

    - llamafleet.fleet.llamafleet_facts:
        gather_subset: "{{ llamafleet_common_gather_subset }}"
        nvidia_smi: "{{ llamafleet_common_nvidia_smi }}"

- the host's facts (``ansible.builtin.setup`` with ``gather_subset``) when the distribution or the
  CPU count is not known yet (the play did not gather them, and no earlier play of the run did);
- the fact ``llamafleet_gpus`` (the module ``llamafleet_gpu_facts``: one ``nvidia-smi`` query,
  read-only, so also in check mode) when it is not known yet.

Where both are known, nothing runs on the host: the task costs the controller one check instead
of two skipped tasks. Returns both as ``ansible_facts`` (host facts, as the two modules set them)
and ``gathered``: what ran (``setup``, ``gpus``), empty when nothing did. A module that fails
fails the task with its message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import (
    run_module,
    task_args,
)

_ARGS = frozenset({"gather_subset", "nvidia_smi"})


def wanted(facts: Mapping[str, Any]) -> list[str]:
    """What a host's facts still lack: ``setup`` (no distribution or no CPU count: the roles read
    both), ``gpus`` (no llamafleet_gpus)."""
    need = []
    if "distribution" not in facts or "processor_vcpus" not in facts:
        need.append("setup")
    if "llamafleet_gpus" not in facts:
        need.append("gpus")
    return need


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = task_args("llamafleet_facts", self._task.args, _ARGS)
        facts: dict[str, Any] = {}
        warnings: list[Any] = []
        deprecations: list[Any] = []
        need = wanted(task_vars.get("ansible_facts") or {})
        for what in need:
            if what == "setup":
                subset = args.get("gather_subset") or ["!all", "min", "hardware"]
                found = self._execute_module(
                    module_name="ansible.legacy.setup",
                    module_args={"gather_subset": list(subset)},
                    task_vars=task_vars,
                )
            else:
                # read-only: also in check mode, as the task it replaces (check_mode: false)
                found = run_module(
                    self,
                    "llamafleet.fleet.llamafleet_gpu_facts",
                    {"nvidia_smi": args.get("nvidia_smi") or "nvidia-smi"},
                    task_vars,
                    check_mode=False,
                )
            warnings += found.get("warnings") or []
            deprecations += found.get("deprecations") or []
            if found.get("failed"):
                result.update(failed=True, msg=found.get("msg", f"{what} failed"), gathered=need)
                return result
            facts.update(found.get("ansible_facts") or {})
        if warnings:
            result["warnings"] = warnings
        if deprecations:
            result["deprecations"] = deprecations
        # (-v shows neither the whole fact set nor the GPUs again: setup's own behaviour)
        result.update(changed=False, gathered=need, ansible_facts=facts)
        if facts:
            result["_ansible_verbose_override"] = True
        return result

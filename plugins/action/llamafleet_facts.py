"""Action plugin: the facts every llamafleet role reads, in one task per play and host, and only
where this run has not gathered them yet (llamafleet_common's one task):

    - llamafleet.fleet.llamafleet_facts:
        gather_subset: "{{ llamafleet_common_gather_subset }}"
        nvidia_smi: "{{ llamafleet_common_nvidia_smi }}"

- the host's facts (``ansible.builtin.setup`` with ``gather_subset``) when the distribution or the
  CPU count is not known yet (the play did not gather them, and no earlier play of the run did);
  with ``filter`` (setup's own option, shell patterns of fact names) only the facts it names are
  kept, and always the two this plugin decides on (``distribution``, ``processor_vcpus``) and
  setup's ``gather_subset`` and ``module_setup``. Ansible copies a host's facts for every task it
  runs there: a fact set of 49 values instead of 700 (a workstation's devices, interfaces,
  environment) is what each task then costs the controller;
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

_ARGS = frozenset({"gather_subset", "nvidia_smi", "filter"})
#: what this plugin's decision reads (wanted) and what setup marks a gathering with: kept whatever
#: the filter says
ALWAYS_KEPT = ("distribution", "processor_vcpus", "gather_subset", "module_setup")


def setup_args(gather_subset: Any, keep: Any) -> dict[str, Any]:
    """The options of ansible.builtin.setup: the subset, and with ``keep`` (fact names or shell
    patterns, with or without ``ansible_``) its ``filter``, which always keeps ALWAYS_KEPT."""
    found: dict[str, Any] = {"gather_subset": list(gather_subset or ["!all", "min", "hardware"])}
    if keep:
        if isinstance(keep, str) or not all(isinstance(k, str) and k.strip() for k in keep):
            raise ValueError(
                "llamafleet_facts: filter must be a list of fact names or shell patterns"
            )
        patterns = [k.strip() for k in keep]
        found["filter"] = patterns + [k for k in ALWAYS_KEPT if k not in patterns]
    return found


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
        try:
            setup = setup_args(args.get("gather_subset"), args.get("filter"))
        except ValueError as e:
            result.update(failed=True, msg=str(e))
            return result
        for what in need:
            if what == "setup":
                found = self._execute_module(
                    module_name="ansible.legacy.setup",
                    module_args=setup,
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

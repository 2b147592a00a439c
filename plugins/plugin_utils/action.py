"""What the collection's action plugins share: taking the task's options, refusing one they do
not accept (a misspelt option would otherwise be ignored), and running a module on the host in a
check mode of their choosing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ansible.errors import AnsibleActionFail


def task_args(plugin: str, args: Mapping[str, Any], accepted: frozenset[str]) -> dict[str, Any]:
    """The task's options as a dict; AnsibleActionFail naming every option not in ``accepted``."""
    found = dict(args)
    unknown = set(found) - accepted
    if unknown:
        raise AnsibleActionFail(f"{plugin}: unknown options: {', '.join(sorted(unknown))}")
    return found


class _Action(Protocol):
    """What run_module needs of an action plugin (Ansible's ActionBase)."""

    _task: Any

    def _execute_module(self, **kwargs: Any) -> dict[str, Any]: ...


def run_module(
    action: _Action,
    name: str,
    args: Mapping[str, Any],
    task_vars: dict[str, Any],
    *,
    check_mode: bool,
) -> dict[str, Any]:
    """Run the module ``name`` on the task's host with ``args``, in check mode or not whatever
    the task's own (a read-only module that must answer in check mode too; a module asked what
    it would do), and return its result."""
    saved = action._task.check_mode
    action._task.check_mode = check_mode
    try:
        found: dict[str, Any] = action._execute_module(
            module_name=name, module_args=dict(args), task_vars=task_vars
        )
    finally:
        action._task.check_mode = saved
    return found

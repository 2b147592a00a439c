"""What every action plugin of the collection does first: take the task's options, refusing one
it does not accept (a misspelt option would otherwise be ignored)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail


def task_args(plugin: str, args: Mapping[str, Any], accepted: frozenset[str]) -> dict[str, Any]:
    """The task's options as a dict; AnsibleActionFail naming every option not in ``accepted``."""
    found = dict(args)
    unknown = set(found) - accepted
    if unknown:
        raise AnsibleActionFail(f"{plugin}: unknown options: {', '.join(sorted(unknown))}")
    return found

"""Filter: an instance's ``ignore: {RULE_ID: reason}`` as the validator's suppression comments for
its unit (the llamafleet package checks the ids against the catalogue and the reasons for line
breaks: they go into the unit)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def llamafleet_instance_ignores(ignore: Any, instance: str = "?") -> list[str]:
    try:
        from llamafleet.errors import InputError
        from llamafleet.preflight import instance_ignores
    except ImportError as exc:  # pragma: no cover - reported when the filter is used
        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(exc)
        ) from exc
    try:
        return instance_ignores(ignore, instance)
    except InputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamafleet_instance_ignores": llamafleet_instance_ignores}

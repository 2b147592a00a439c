"""Filters that render llama-server command lines with the llamafleet package (one renderer for
the unit file and for the validator's preflight)."""

from __future__ import annotations

from typing import Any

try:
    from llamafleet.argv import render_argv
except ImportError as exc:  # pragma: no cover - reported when the filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@")


def llamafleet_argv(instance: dict[str, Any]) -> list[str]:
    """Render an instance mapping (model, host, port, args, extra_args) to an argv list."""
    if _IMPORT_ERROR is not None:
        from ansible.errors import AnsibleFilterError

        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(_IMPORT_ERROR)
        )
    return render_argv(instance)


def systemd_quote(argv: list[str]) -> str:
    """Quote words for an ExecStart= line: specifiers (%) and variables ($) are escaped."""
    out = []
    for word in argv:
        w = str(word).replace("%", "%%").replace("$", "$$")
        if w and all(c in _SAFE for c in w):
            out.append(w)
        else:
            out.append('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return " ".join(out)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamafleet_argv": llamafleet_argv, "llamafleet_systemd_quote": systemd_quote}

"""Filters for the fleet playbooks: read a deployed llama-server unit with the validator's own
unit parser (Environment=, quoting, short and long flags), not with regular expressions."""

from __future__ import annotations

from typing import Any

try:
    from llamafleet.rules.cross import server_address
    from llamafleet.units import parse_unit
except ImportError as exc:  # pragma: no cover - reported when the filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

_ANY = ("0.0.0.0", "::", "[::]", "localhost")


def llamafleet_unit_server(text: str, path: str = "unit.service") -> dict[str, Any]:
    """The llama-server a unit runs: host, port, connect_host (where a client on the same host
    connects), model and ctx_size (None when unset). Empty when the unit runs no llama-server."""
    if _IMPORT_ERROR is not None:
        from ansible.errors import AnsibleFilterError

        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(_IMPORT_ERROR)
        )
    server = parse_unit(text, path).server
    if server is None:
        return {}
    host, port = server_address(server)
    return {
        "host": host,
        "port": port,
        "connect_host": "127.0.0.1" if host in _ANY else host,
        "model": server.value("--model"),
        "ctx_size": server.int_value("--ctx-size"),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamafleet_unit_server": llamafleet_unit_server}

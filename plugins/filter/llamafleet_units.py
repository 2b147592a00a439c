"""Filters for the fleet playbooks: read a deployed llama-server unit and a user's Claude Code
settings with the validator's own parsers (Environment=, quoting, short and long flags; settings
precedence), not with regular expressions. The texts come from managed hosts: no file they name
(EnvironmentFile=, a credential's key file) is opened on the controller, and no file is stat'ed."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.refs import NEVER
    from llamafleet.rules.cross import server_address
    from llamafleet.settings import group_clients, load_settings
    from llamafleet.units import parse_unit
except ImportError as exc:  # pragma: no cover - reported when the filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _need_llamafleet() -> None:
    require(_IMPORT_ERROR, AnsibleFilterError)


def llamafleet_unit_server(text: str, path: str = "unit.service") -> dict[str, Any]:
    """The llama-server a unit runs: host, port, model, ctx_size (None when unset) and, for a
    server with --ssl-cert-file and --ssl-key-file, scheme `https` (absent: http). Empty when the
    unit has no ExecStart=. Where the host's own requests to it go: `host | llamafleet_connect_host`
    (the llamafleet_common role's address classifier)."""
    _need_llamafleet()
    server = parse_unit(text, path, NEVER).server
    if server is None:
        return {}
    host, port = server_address(server)
    out: dict[str, Any] = {
        "host": host,
        "port": port,
        "model": server.value("--model"),
        "ctx_size": server.int_value("--ctx-size"),
    }
    # llama-server serves https only with both (and a build with OpenSSL); no key: http
    if server.value("--ssl-cert-file") and server.value("--ssl-key-file"):
        out["scheme"] = "https"
    return out


def llamafleet_client_base_url(user_text: str, managed_text: str | None = None) -> str:
    """The ANTHROPIC_BASE_URL a user's Claude Code uses: their settings.json under the managed
    settings (which win); empty when unset or when the files are not valid JSON."""
    _need_llamafleet()
    files = [load_settings("settings.json", user_text, "user", mode=None)]
    if managed_text:
        files.append(load_settings("managed-settings.json", managed_text, "managed", mode=None))
    clients = group_clients(files, {})
    value = clients[0].base_url() if clients else None
    return value.value.strip() if value is not None and isinstance(value.value, str) else ""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_unit_server": llamafleet_unit_server,
            "llamafleet_client_base_url": llamafleet_client_base_url,
        }

"""The fleet playbooks' filter reads deployed units with the validator's unit parser: variables
from Environment=, quoted paths, short flags and the defaults the rollout and audit rely on."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from conftest import load_ansible_plugin

PLUGIN = (
    Path(__file__).resolve().parents[2] / "playbooks" / "filter_plugins" / "llamafleet_units.py"
)


def _load() -> ModuleType:
    return load_ansible_plugin(PLUGIN)


def _server(text: str) -> dict[str, Any]:
    result: dict[str, Any] = _load().FilterModule().filters()["llamafleet_unit_server"](text)
    return result


def test_reads_environment_quotes_and_short_flags() -> None:
    unit = (
        "[Service]\nEnvironment=PORT=8089\n"
        'ExecStart=/opt/llama.cpp/current/bin/llama-server -m "/srv/models/a b/x.gguf" '
        "--host 0.0.0.0 --port ${PORT} -c 4096\n"
    )
    assert _server(unit) == {
        "host": "0.0.0.0",
        "port": 8089,
        "connect_host": "127.0.0.1",
        "model": "/srv/models/a b/x.gguf",
        "ctx_size": 4096,
    }


def test_defaults_and_a_specific_address() -> None:
    unit = "[Service]\nExecStart=/usr/bin/llama-server --model m.gguf --host 10.0.0.5\n"
    s = _server(unit)
    assert (s["host"], s["port"], s["connect_host"]) == ("10.0.0.5", 8080, "10.0.0.5")
    assert s["ctx_size"] is None


def test_unit_without_execstart_is_empty() -> None:
    assert _server("[Service]\nType=simple\n") == {}


def _base_url(user: str, managed: str | None = None) -> str:
    result: str = _load().FilterModule().filters()["llamafleet_client_base_url"](user, managed)
    return result


def test_base_url_from_user_settings_managed_wins() -> None:
    user = '{"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.5:8080"}}'
    managed = '{"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.9:8081"}}'
    assert _base_url(user) == "http://10.0.0.5:8080"
    assert _base_url(user, managed) == "http://10.0.0.9:8081"
    assert _base_url(user, '{"env": {}}') == "http://10.0.0.5:8080"


def test_base_url_unset_or_broken_is_empty() -> None:
    assert _base_url('{"model": "x"}') == ""
    assert _base_url("{not json") == ""

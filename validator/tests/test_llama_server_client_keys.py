"""Per-client keys of the llama_server role: the client names it accepts (one key file each, a /
as __), the credential the unit hands over (<instance>.keys with clients, else <instance>.key),
and XC002 accepting any line of that credential, so a client sending its own key is not reported."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_unit_template import _instance, render

from llamafleet.engine import Inputs, add_file, run
from llamafleet.refs import ReferencedFiles
from llamafleet.units import parse_unit


def test_client_key_file_names(server_filters: ModuleType) -> None:
    f = server_filters.FilterModule().filters()["llamafleet_client_key_file"]
    assert f("lf-claude-client/dev") == "lf-claude-client__dev.key"
    assert f("alice@ws.example.org") == "alice@ws.example.org.key"


@pytest.mark.parametrize(
    "names",
    [[], ["lf-claude-client/dev"], ["a", "b/c", "user@host", "x.y_z-1", ".."]],
)
def test_client_names_accepted(server_filters: ModuleType, names: list[str]) -> None:
    assert server_filters.client_keys(names, "main") == names


@pytest.mark.parametrize(
    ("names", "shown"),
    [
        ("ws/alice", "must be a list"),
        ({"ws/alice": 1}, "must be a list"),
        (["ws alice"], "is not a client name"),
        (["ws/alice\n"], "is not a client name"),
        (["a:b"], "is not a client name"),
        ([""], "is not a client name"),
        ([7], "is not a client name"),
        (["x" * 201], "is not a client name"),
        (["ws/alice", "ws/alice"], "listed twice"),
        (["a/b", "a__b"], "share the key file a__b.key"),
    ],
)
def test_client_names_refused(
    server_filters: ModuleType, filter_error: type[Exception], names: Any, shown: str
) -> None:
    with pytest.raises(filter_error, match="instance 'main': client_keys") as err:
        server_filters.client_keys(names, "main")
    assert shown in str(err.value)


def _credential(text: str) -> str:
    entry = parse_unit(text, "llama-server-main.service").get("Service", "LoadCredential")
    assert entry is not None
    return entry.value


def test_without_clients_the_credential_is_the_instance_key(server_filters: ModuleType) -> None:
    text = render(server_filters, _instance(server_filters))
    assert _credential(text) == "api-key:/etc/llamafleet/keys/main.key"
    assert "# API keys" not in text
    assert render(server_filters, _instance(server_filters, client_keys=[])) == text


def test_with_clients_the_credential_holds_every_key(server_filters: ModuleType) -> None:
    text = render(server_filters, _instance(server_filters, client_keys=["ws/alice", "ws/bob"]))
    assert _credential(text) == "api-key:/etc/llamafleet/keys/main.keys"
    assert "--api-key-file %d/api-key" in text
    # the count is in the unit (a change shows in --diff); neither names nor keys are
    assert "one per client (2)" in text
    assert "alice" not in text


def _xc002(tmp_path: Path, unit: str, credential: str, token: str) -> list[str]:
    (tmp_path / "main.keys").write_text(credential)
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080", "ANTHROPIC_AUTH_TOKEN": token}
    settings = {"env": env}
    inputs = Inputs(referenced=ReferencedFiles(directory=str(tmp_path)))
    add_file(inputs, "llama-server-main.service", unit, kind="unit")
    add_file(
        inputs, str(tmp_path / "settings.json"), json.dumps(settings), kind="settings", scope="user"
    )
    return [f.message for f in run(inputs).findings if f.id == "XC002"]


@pytest.mark.parametrize(
    ("token", "reported"),
    [("instancekey", False), ("alicekey", False), ("bobkey", False), ("gone", True)],
)
def test_xc002_accepts_every_key_of_the_rendered_credential(
    server_filters: ModuleType, tmp_path: Path, token: str, reported: bool
) -> None:
    unit = render(server_filters, _instance(server_filters, client_keys=["ws/alice", "ws/bob"]))
    found = _xc002(tmp_path, unit, "instancekey\nalicekey\nbobkey\n", token)
    assert bool(found) is reported, found
    if reported:
        assert "different key" in found[0]

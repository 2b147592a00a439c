"""The summary `make site` ends with (llamafleet.fleet.smoke: the claude_code filters
claude_code_summary and claude_code_session_reuse) and the KV types of the endpoints fact
(llama_server's llamafleet_kv_types).

The claude -p results here are stand-ins for `claude -p --output-format json`'s result object: they
carry only the fields the filters read (is_error, result, usage with input_tokens,
cache_creation_input_tokens, cache_read_input_tokens). The real CLI's results are read by the smoke
playbook in `make site`, which fails on an error result or one without usage."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

CLAUDE = plugin_path("filter", "claude_code")
SERVER = plugin_path("filter", "llama_server")

pytestmark = pytest.mark.skipif(
    not CLAUDE.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def claude() -> ModuleType:
    return load_ansible_plugin(CLAUDE)


@pytest.fixture(scope="module")
def server() -> ModuleType:
    return load_ansible_plugin(SERVER)


def _result(evaluated: int, reused: int, created: int = 0, **extra: Any) -> str:
    usage = {
        "input_tokens": evaluated,
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": reused,
        "output_tokens": 2,
    }
    return json.dumps(
        {"type": "result", "is_error": False, "result": "OK", "usage": usage, **extra}
    )


def test_session_reuse(claude: ModuleType) -> None:
    assert claude.session_reuse(_result(30, 13170)) == {
        "prompt": 13200,
        "reused": 13170,
        "ratio": 13170 / 13200,
    }
    # tokens the server wrote to its cache were evaluated too
    assert claude.session_reuse(_result(10, 90, created=100))["ratio"] == 90 / 200
    assert claude.session_reuse(json.loads(_result(0, 0)))["ratio"] == 0.0


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ("Error: connect ECONNREFUSED", "printed no JSON"),
        (json.dumps({"is_error": True, "result": "API Error: 401"}), "API Error: 401"),
        (json.dumps({"is_error": False, "result": "OK"}), "no usage"),
        (json.dumps([1, 2]), "not a claude -p JSON result"),
    ],
)
def test_session_reuse_refuses_a_failed_run(claude: ModuleType, run: str, message: str) -> None:
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=message):
        claude.session_reuse(run)


def test_summary(claude: ModuleType) -> None:
    settings = {
        "env": {
            "ANTHROPIC_BASE_URL": "https://127.0.0.1:8080",
            "ANTHROPIC_MODEL": "main",
            "ANTHROPIC_AUTH_TOKEN": "sk-never-printed",
            "NODE_EXTRA_CA_CERTS": "/etc/llamafleet/ca/lf-local-main.pem",
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "99072",
        }
    }
    endpoint = {
        "model": "tiny-llama",
        "alias": "main",
        "ctx_per_slot": 131072,
        "kv_types": {"k": "q8_0", "v": "turbo3"},
        "key_dir": "/etc/llamafleet/keys",
    }
    lines = claude.summary(
        settings,
        endpoint,
        "dev",
        "/home/dev/.claude/settings.json",
        [_result(13200, 0), _result(40, 13190)],
        "lf-local",
        "/etc/llamafleet/keys",
    )
    text = "\n".join(lines)
    assert "sk-never-printed" not in text
    assert "https://127.0.0.1:8080 (CA: /etc/llamafleet/ca/lf-local-main.pem)" in text
    assert "tiny-llama as main" in text
    assert "131,072 tokens per slot" in text
    assert "K q8_0, V turbo3" in text
    assert "99,072 tokens" in text
    assert "in /home/dev/.claude/settings.json" in text and "/etc/llamafleet/keys" in text
    assert "13,230 prompt tokens, 13,190 from the cache (99.7 %)" in text
    # a key in the managed file, no facts of the server: said, not guessed
    lines = claude.summary(
        {"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.5:8080"}},
        {},
        "dev",
        "/home/dev/.claude/settings.json",
        [_result(10, 0), _result(1, 9)],
    )
    text = "\n".join(lines)
    assert "in the managed settings" in text and "context      unknown" in text
    assert "not set" in text and "(90.0 %)" in text


def test_kv_types(server: ModuleType) -> None:
    assert server.llamafleet_kv_types(["llama-server", "-ctk", "q8_0", "-ctv", "turbo3"]) == {
        "k": "q8_0",
        "v": "turbo3",
    }
    assert server.llamafleet_kv_types(["llama-server", "--cache-type-k=q4_0"]) == {
        "k": "q4_0",
        "v": "f16",
    }
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="expected an argv list"):
        server.llamafleet_kv_types("llama-server -ctk q8_0")


def test_public_target_keeps_no_key_material(claude: ModuleType) -> None:
    """claude_code_settings_files (what llamafleet.fleet.smoke reads): where each file is and what
    it points at, from the role's target; the CA, the key id, the env and the settings stay out."""
    target = {
        "name": "dev",
        "managed": False,
        "path": "/home/dev/.claude/settings.json",
        "server": "lf-local",
        "instance": "main",
        "base_url": "https://10.0.0.5:8080",
        "model": "main",
        "pool": "",
        "key_id": "lf-local/main/lf-local/dev",
        "ca_pem": "-----BEGIN CERTIFICATE-----",
        "env": {"ANTHROPIC_AUTH_TOKEN": "sk-x"},
        "settings": {},
    }
    got = claude.public_target(target)
    assert got == {k: target[k] for k in claude.PUBLIC_TARGET_KEYS}
    assert "sk-x" not in json.dumps(got) and "CERTIFICATE" not in json.dumps(got)
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="not a target"):
        claude.public_target("dev")

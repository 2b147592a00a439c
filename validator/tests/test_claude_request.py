"""The recorded Claude Code request (llamafleet/data/claude-code-request.json, written by
validator/tools/capture_claude_request.py) and the gate requests made from it: they keep what makes
Claude Code's requests hard for a chat template (late system message, tools, thinking) and differ
only in the user's prompt."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llamafleet.claude_request import (
    DEFAULT_PROMPTS,
    gate_requests,
    late_system_index,
    load_recorded,
    replay_headers,
)
from llamafleet.errors import InputError

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "validator" / "src" / "llamafleet" / "data" / "claude-code-request.json"
DEFAULTS = REPO / "roles" / "claude_code" / "defaults" / "main.yml"
# the capture's own key (sk-capture-HEX) or an Anthropic key (not "task-notification")
KEY_RE = re.compile(r"(?<![A-Za-z0-9])sk-(?:capture|ant)-")

pytestmark = pytest.mark.skipif(
    not RECORDED.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return load_recorded(RECORDED)


@pytest.fixture(scope="module")
def gates(recorded: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return gate_requests(recorded, "gate-model", max_tokens=8)


def _prompt_path(body: dict[str, Any], prompt: str) -> tuple[int, int | None]:
    """(message, block) of the prompt; block None when the message's content is the prompt
    itself (Claude Code 2.1.332 sends the first user message as a plain string)."""
    for i, message in enumerate(body["messages"]):
        if message["role"] != "user":
            continue
        if message["content"] == prompt:
            return i, None
        if isinstance(message["content"], list):
            for j, block in enumerate(message["content"]):
                if block.get("text") == prompt:
                    return i, j
    raise AssertionError(f"{prompt!r} not found")


def _set_prompt(body: dict[str, Any], where: tuple[int, int | None], text: str) -> None:
    i, j = where
    if j is None:
        body["messages"][i]["content"] = text
    else:
        body["messages"][i]["content"][j]["text"] = text


# --- the recording -------------------------------------------------------------------------------


def test_recorded_version_is_the_pinned_one(recorded: dict[str, Any]) -> None:
    if not DEFAULTS.is_file():
        pytest.skip("no roles/claude_code in this checkout")
    pinned = yaml.safe_load(DEFAULTS.read_text(encoding="utf-8"))["claude_code_version"]
    assert recorded["capture"]["claude_code_version"] == pinned, (
        "the claude_code role pins another version: run validator/tools/capture_claude_request.py"
    )
    assert recorded["headers"]["user-agent"].startswith(f"claude-cli/{pinned} ")


def test_recorded_has_the_late_system_message(recorded: dict[str, Any]) -> None:
    body = recorded["body"]
    idx = late_system_index(body)
    assert idx is not None
    late = body["messages"][idx]
    assert late["role"] == "system"
    text = late["content"] if isinstance(late["content"], str) else json.dumps(late["content"])
    assert "Available agent types" in text
    assert len(text) > 1000
    # it comes after the user's prompt
    prompt_msg, _ = _prompt_path(body, recorded["capture"]["prompt"])
    assert prompt_msg < idx
    # the session's environment (working directory, platform) rides in it since 2.1.3xx
    assert "Primary working directory: /home/user/project" in text


def test_recorded_has_tools_system_blocks_thinking(recorded: dict[str, Any]) -> None:
    body = recorded["body"]
    assert isinstance(body["tools"], list) and len(body["tools"]) >= 10
    assert all("name" in t and "input_schema" in t for t in body["tools"])
    assert isinstance(body["system"], list) and body["system"]
    assert all(b["type"] == "text" for b in body["system"])
    assert "thinking" in body
    assert body["stream"] is True
    first = body["messages"][0]
    assert first["role"] == "user"
    # the settings the claude_code role writes: no attribution header, no git status
    system = "\n".join(b["text"] for b in body["system"])
    assert "x-anthropic-billing-header" not in system
    assert "gitStatus:" not in system
    assert recorded["headers"]["x-claude-code-session-id"]


def test_recorded_holds_no_key_and_no_path_of_the_capturing_machine(
    recorded: dict[str, Any],
) -> None:
    text = RECORDED.read_text(encoding="utf-8")
    for secret_header in ("authorization", "x-api-key"):
        assert recorded["headers"].get(secret_header, "<scrubbed>") == "<scrubbed>"
    assert recorded["capture"]["settings"]["env"]["ANTHROPIC_AUTH_TOKEN"] == "<scrubbed>"
    assert not re.search(KEY_RE, text)
    body = json.dumps(recorded["body"], ensure_ascii=False)
    assert "/tmp/" not in body and "cc-capture" not in body and "/root" not in body
    # every home path is the neutral one
    assert set(re.findall(r"/home/[^/\s`\"\\]+", body)) <= {"/home/user"}
    assert "/home/user/project" in body
    assert "Today's date is 2026-01-01." in body
    # the capturing machine's kernel release is not recorded either
    assert re.findall(r"OS Version: [^\\\n]*", body) == ["OS Version: Linux 6.1.0"]
    assert re.search(r"127\.0\.0\.1:(?!8080)\d+", json.dumps(recorded)) is None


# --- the gate requests ---------------------------------------------------------------------------


def test_gates_keep_late_system_tools_thinking(
    recorded: dict[str, Any], gates: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    body = recorded["body"]
    for gate in gates:
        idx = late_system_index(gate)
        assert idx == late_system_index(body)
        assert gate["messages"][idx] == body["messages"][idx]
        assert gate["tools"] == body["tools"]
        assert gate["system"] == body["system"]
        assert gate["thinking"] == body["thinking"]
        assert list(gate) == list(body)  # same keys, same order


def test_gates_replace_model_and_max_tokens(
    recorded: dict[str, Any], gates: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    for gate in gates:
        assert gate["model"] == "gate-model"
        assert gate["max_tokens"] == 8
        assert gate["stream"] == recorded["body"]["stream"]
    a, b = gate_requests(recorded, "m", max_tokens=3, stream=False)
    assert a["max_tokens"] == b["max_tokens"] == 3
    assert a["stream"] is b["stream"] is False


def test_gates_differ_only_in_the_prompt_text(
    recorded: dict[str, Any], gates: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    first, second = gates
    where = _prompt_path(first, DEFAULT_PROMPTS[0])
    i, j = where
    assert _prompt_path(second, DEFAULT_PROMPTS[1]) == where
    assert first != second
    normalized = copy.deepcopy(second)
    _set_prompt(normalized, where, DEFAULT_PROMPTS[0])
    assert normalized == first
    # and from the recording only in model, max_tokens and the prompt
    expected = copy.deepcopy(recorded["body"])
    expected["model"] = "gate-model"
    expected["max_tokens"] = 8
    _set_prompt(expected, where, DEFAULT_PROMPTS[0])
    assert first == expected
    # everything before the prompt (system, tools, any system-reminder blocks) is shared
    if j is not None:
        assert first["messages"][i]["content"][:j] == second["messages"][i]["content"][:j]
    assert first["messages"][:i] == second["messages"][:i]
    assert first["messages"][i + 1 :] == second["messages"][i + 1 :]


def test_gates_hold_no_key_and_no_capture_path(
    gates: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    for gate in gates:
        text = json.dumps(gate, ensure_ascii=False)
        assert "/tmp/" not in text and "cc-capture" not in text
        assert not re.search(KEY_RE, text)


def test_gates_do_not_change_the_recording(recorded: dict[str, Any]) -> None:
    before = copy.deepcopy(recorded)
    a, _b = gate_requests(recorded, "x", prompts=("one", "two"))
    a["messages"][0]["content"] = "changed"
    a["tools"].clear()
    assert recorded == before


def test_custom_prompts(recorded: dict[str, Any]) -> None:
    a, b = gate_requests(recorded, "x", prompts=("first prompt", "second prompt"))
    assert _prompt_path(a, "first prompt") == _prompt_path(b, "second prompt")


def test_replay_headers(recorded: dict[str, Any]) -> None:
    headers = replay_headers(recorded)
    assert "authorization" not in headers and "host" not in headers
    assert "content-length" not in headers
    assert headers["anthropic-beta"] == recorded["headers"]["anthropic-beta"]
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-claude-code-session-id"]


# --- helpers on synthetic bodies and bad input ---------------------------------------------------


def test_late_system_index() -> None:
    user = {"role": "user", "content": "hi"}
    system = {"role": "system", "content": "late"}
    assert late_system_index({"messages": [user]}) is None
    assert late_system_index({"messages": [system, user]}) is None
    assert late_system_index({"messages": [user, system]}) == 1
    assert late_system_index({"messages": [system, user, system]}) == 2
    assert late_system_index({}) is None


def test_string_content_prompt() -> None:
    recording = {
        "capture": {"prompt": "p"},
        "headers": {},
        "body": {
            "model": "m",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "p"}, {"role": "system", "content": "s"}],
        },
    }
    a, b = gate_requests(recording, "g", prompts=("A", "B"))
    assert a["messages"] == [
        {"role": "user", "content": "A"},
        {"role": "system", "content": "s"},
    ]
    assert b["messages"][0]["content"] == "B"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "top level is not an object"),
        ("{", "not JSON"),
        ('{"capture": {}, "headers": {}}', "no 'body' object"),
        ('{"capture": {}, "headers": {}, "body": {"messages": []}}', "has no messages"),
        (
            '{"capture": {}, "headers": {}, '
            '"body": {"messages": [{"role": "user", "content": "x"}]}}',
            "capture.prompt",
        ),
        (
            '{"capture": {"prompt": "p"}, "headers": {}, '
            '"body": {"messages": [{"role": "user", "content": "x"}]}}',
            "is not the last text block",
        ),
    ],
)
def test_load_recorded_rejects(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(message)):
        load_recorded(path)


def test_load_recorded_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_recorded(tmp_path / "absent.json")


def test_gate_requests_rejects(recorded: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="different"):
        gate_requests(recorded, "m", prompts=("same", "same"))
    with pytest.raises(InputError, match="max_tokens"):
        gate_requests(recorded, "m", max_tokens=0)
    with pytest.raises(InputError, match="model"):
        gate_requests(recorded, "")
    with pytest.raises(InputError, match="not a recording"):
        gate_requests({"capture": {"prompt": "p"}}, "m")

"""Requests shaped like Claude Code's own, for the gates that check a llama-server.

``llamafleet/data/claude-code-request.json`` (package data) holds the first main-conversation
request of the real Claude Code CLI (the version the claude_code role pins), recorded by
``validator/tools/capture_claude_request.py`` with the settings the role writes:
``{"capture": {...}, "headers": {...}, "body": {...}}``. The body has top-level ``system`` blocks,
``tools``, ``thinking``, a first user message with the ``<system-reminder>`` context and the prompt
as its last text block, and, after the prompt, the late ``{"role": "system"}`` message (agent types
and skills list) that some chat templates reject or drop.

:func:`gate_requests` turns it into two request bodies that share everything up to the user's
prompt and differ only in the prompt text, as two new sessions with different prompts do: the first
warms the server's prompt cache, the second shows how much of it is reused.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import Any

from llamafleet.errors import InputError

#: The two gate prompts (different, short, asking for a short answer).
DEFAULT_PROMPTS = ("Reply with the single word OK.", "Reply with the single word YES.")
#: Recorded headers a replayed request does not send (the transport's own, and the key).
TRANSPORT_HEADERS = frozenset(
    {"host", "content-length", "connection", "accept-encoding", "authorization", "x-api-key"}
)


def load_recorded(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a recording (``capture``, ``headers``, ``body``); returns the whole object.

    Raises InputError when the file is not such a recording: no messages, no recorded prompt, or
    the prompt not found as a text block of a user message.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise InputError(f"{os.fspath(path)}: cannot read the recorded request: {exc}") from exc
    except ValueError as exc:
        raise InputError(f"{os.fspath(path)}: not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{os.fspath(path)}: the top level is not an object")
    for key in ("capture", "headers", "body"):
        if not isinstance(data.get(key), dict):
            raise InputError(f"{os.fspath(path)}: no {key!r} object (not a recorded request)")
    messages = data["body"].get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{os.fspath(path)}: the recorded body has no messages")
    prompt = data["capture"].get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InputError(f"{os.fspath(path)}: capture.prompt (the recorded user prompt) is missing")
    _prompt_block(data["body"], prompt)
    return data


def late_system_index(body: Mapping[str, Any]) -> int | None:
    """The index in ``body["messages"]`` of the first ``role: system`` message that comes after
    another message (Claude Code sends one after the user's prompt), or None."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for i, message in enumerate(messages):
        if i > 0 and isinstance(message, Mapping) and message.get("role") == "system":
            return i
    return None


def _prompt_block(body: Mapping[str, Any], prompt: str) -> tuple[int, int | None]:
    """(message index, block index or None for string content) of the user's prompt: the last
    text of a user message before the late system message that equals the recorded prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InputError("the recorded body has no messages")
    late = late_system_index(body)
    end = len(messages) if late is None else late
    for i in range(end - 1, -1, -1):
        message = messages[i]
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            if content == prompt:
                return i, None
            continue
        if isinstance(content, list):
            for j in range(len(content) - 1, -1, -1):
                block = content[j]
                if isinstance(block, Mapping) and block.get("type") == "text":
                    if block.get("text") == prompt:
                        return i, j
                    break
    raise InputError(
        f"the recorded prompt {prompt!r} is not the last text block of a user message before "
        "the late system message"
    )


def gate_requests(
    recorded: Mapping[str, Any],
    model: str,
    max_tokens: int = 8,
    *,
    prompts: tuple[str, str] = DEFAULT_PROMPTS,
    stream: bool | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two request bodies from a recording (as :func:`load_recorded` returns it).

    Both are the recorded body with ``model`` and ``max_tokens`` replaced (and ``stream`` when
    given; None keeps the recorded value) and the user's prompt text replaced by ``prompts[0]``
    and ``prompts[1]``. Everything else (system blocks, tools, thinking, the system-reminder
    context, the late system message, metadata, cache_control markers, key order) stays as
    recorded, so the two share everything up to the prompt, like two new Claude Code sessions.
    """
    if not model:
        raise InputError("gate_requests: model must be a non-empty name")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InputError(
            f"gate_requests: max_tokens must be a positive integer, not {max_tokens!r}"
        )
    first, second = prompts
    if not first or not second or first == second:
        raise InputError("gate_requests: the two prompts must be different non-empty texts")
    capture = recorded.get("capture")
    body = recorded.get("body")
    if not isinstance(capture, Mapping) or not isinstance(body, Mapping):
        raise InputError("gate_requests: not a recording (see load_recorded)")
    prompt = capture.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InputError("gate_requests: the recording has no capture.prompt")
    where = _prompt_block(body, prompt)
    return (
        _with(body, where, first, model=model, max_tokens=max_tokens, stream=stream),
        _with(body, where, second, model=model, max_tokens=max_tokens, stream=stream),
    )


def _with(
    body: Mapping[str, Any],
    where: tuple[int, int | None],
    prompt: str,
    *,
    model: str,
    max_tokens: int,
    stream: bool | None,
) -> dict[str, Any]:
    out: dict[str, Any] = copy.deepcopy(dict(body))
    out["model"] = model
    out["max_tokens"] = max_tokens
    if stream is not None:
        out["stream"] = stream
    i, j = where
    message = out["messages"][i]
    if j is None:
        message["content"] = prompt
    else:
        message["content"][j]["text"] = prompt
    return out


def replay_headers(recorded: Mapping[str, Any]) -> dict[str, str]:
    """The recorded request headers a replay sends (anthropic-beta, anthropic-version,
    x-claude-code-session-id, user-agent, x-app, ...), without the transport's own (host,
    content-length, connection, accept-encoding) and without the scrubbed key headers: add the
    server's key yourself."""
    headers = recorded.get("headers")
    if not isinstance(headers, Mapping):
        raise InputError("replay_headers: the recording has no headers")
    return {str(k): str(v) for k, v in headers.items() if str(k).lower() not in TRANSPORT_HEADERS}


def packaged_path() -> str:
    """The recording shipped with the package (``llamafleet/data/claude-code-request.json``)."""
    from importlib import resources

    return str(resources.files("llamafleet").joinpath("data").joinpath("claude-code-request.json"))


#: The tools the gates keep (of the 24 recorded): enough to give the request Claude Code's shape
#: (tool definitions rendered by the template, tool-use instructions) at a size a CPU test host
#: evaluates in seconds; the whole recorded request is ~22K tokens.
GATE_TOOLS = ("Bash", "Read", "Edit")


def gate_bodies(
    model: str, max_tokens: int = 8, tools: tuple[str, ...] | None = GATE_TOOLS
) -> list[dict[str, Any]]:
    """Two requests from the packaged recording, not streamed (a JSON answer), for ``model``:
    the first is Claude Code's first request of a session (its system blocks, the ``tools`` named
    in ``tools`` (None: all), ``thinking``, the user's prompt and the late system message after
    it); the second is the same session's next turn (the first's messages, an assistant answer and
    a new user prompt), so the whole prompt of the first is a prefix of the second's. The
    llama_server role's smoke request sends the first; the rollout's prompt-cache gate sends both
    and expects the second to read (nearly) all of the first's prompt from the cache."""
    first, _ = gate_requests(load_recorded(packaged_path()), model, max_tokens, stream=False)
    if tools is not None:
        first["tools"] = [t for t in first.get("tools", []) if t.get("name") in tools]
    second = dict(first)
    second["messages"] = [
        *first["messages"],
        {"role": "assistant", "content": [{"type": "text", "text": "OK"}]},
        {"role": "user", "content": [{"type": "text", "text": DEFAULT_PROMPTS[1]}]},
    ]
    return [first, second]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) if isinstance(b, Mapping) else str(b) for b in content
        )
    return ""


def request_shape(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """What a recording's request is made of, for comparing two releases: the version, the tool
    names, the system blocks' sizes, the messages' roles, each late ``role: system`` message
    (index, size, first line), the header names and the ``anthropic-beta`` flags."""
    body = recorded.get("body", {})
    headers = recorded.get("headers", {})
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    system = body.get("system")
    blocks = system if isinstance(system, list) else ([{"text": system}] if system else [])
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    late = []
    for i, message in enumerate(messages):
        if i > 0 and isinstance(message, Mapping) and message.get("role") == "system":
            text = _text_of(message.get("content"))
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            late.append({"index": i, "chars": len(text), "first_line": first[:80]})
    beta = str(headers.get("anthropic-beta", ""))
    return {
        "version": str(recorded.get("capture", {}).get("claude_code_version", "?")),
        "tools": [str(t.get("name")) for t in tools if isinstance(t, Mapping)],
        "system_blocks": [len(_text_of([b])) for b in blocks if isinstance(b, Mapping)],
        "roles": [str(m.get("role")) for m in messages if isinstance(m, Mapping)],
        "late_system": late,
        "headers": sorted(str(h) for h in headers),
        "beta": sorted(f for f in (s.strip() for s in beta.split(",")) if f),
        "user_agent": str(headers.get("user-agent", "")),
    }


def _set_change(what: str, old: list[str], new: list[str]) -> str:
    added = [x for x in new if x not in old]
    removed = [x for x in old if x not in new]
    if not added and not removed:
        return f"{what}: unchanged ({len(new)})"
    parts = []
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append("removed " + ", ".join(removed))
    return f"{what}: {len(old)} -> {len(new)} ({'; '.join(parts)})"


def shape_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Lines that say how NEW's request differs in shape from OLD's (two recordings)."""
    a, b = request_shape(old), request_shape(new)
    lines = [f"version: {a['version']} -> {b['version']}"]
    lines.append(_set_change("tools", a["tools"], b["tools"]))

    def blocks(sizes: list[int]) -> str:
        return f"{len(sizes)} ({sum(sizes):,} characters: {', '.join(map(str, sizes))})"

    if a["system_blocks"] == b["system_blocks"]:
        lines.append(f"system blocks: unchanged, {blocks(b['system_blocks'])}")
    else:
        lines.append(f"system blocks: {blocks(a['system_blocks'])} -> {blocks(b['system_blocks'])}")
    if a["roles"] == b["roles"]:
        lines.append(f"message roles: unchanged ({', '.join(b['roles'])})")
    else:
        lines.append(f"message roles: {', '.join(a['roles'])} -> {', '.join(b['roles'])}")

    def late(items: list[dict[str, Any]]) -> str:
        if not items:
            return "none"
        return "; ".join(
            f"#{m['index']} {m['chars']:,} characters ({m['first_line']!r})" for m in items
        )

    if a["late_system"] == b["late_system"]:
        lines.append(f"late system messages: unchanged, {late(b['late_system'])}")
    else:
        lines.append(f"late system messages: {late(a['late_system'])} -> {late(b['late_system'])}")
    lines.append(_set_change("headers", a["headers"], b["headers"]))
    lines.append(_set_change("anthropic-beta", a["beta"], b["beta"]))
    if a["user_agent"] != b["user_agent"]:
        lines.append(f"user-agent: {a['user_agent']} -> {b['user_agent']}")
    return lines

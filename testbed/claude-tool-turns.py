#!/usr/bin/env python3
"""Prompt-cache reuse of a multi-turn Claude Code session with real tool calls (Read, Edit), with
the real Claude Code CLI against a real llama-server (Python standard library only).

    claude-tool-turns.py --upstream URL [--ca-file PEM] [--key KEY] [--claude PATH]
        [--workdir DIR] [--tool-turns 6] [--listen 127.0.0.1:0] [--timeout 600]

One `claude -p PROMPT --output-format json --allowedTools Read,Edit` runs in --workdir (a git
repository with a tracked file notes.txt, created if missing; by default a new temporary
repository), with the environment it inherits plus ANTHROPIC_BASE_URL pointing at a small HTTP
stand-in started by this script (no settings file is changed).

The stand-in stands for the model's decision only. Every request Claude Code makes is forwarded
to the real llama-server (--upstream, `/v1/messages`, the body byte for byte as Claude Code sent
it except `"stream": false`; https verified with --ca-file; no proxy), so the server evaluates
the real prompt Claude Code built, and its cache and usage figures are real. The stand-in then
answers Claude Code itself with a scripted assistant turn, because the test model (tiny, random
weights) never chooses to call a tool: while fewer than --tool-turns tool calls are in the
conversation, a `tool_use` block, alternately `Read` of notes.txt and `Edit` of its last line
(read from disk just before answering, so that the edit applies); then a plain text answer.
Claude Code really runs the tools and sends their results in its next request. Side requests
(without `tools`, e.g. a title) are forwarded as well, answered with a short text and not counted
as turns. The authorization and x-api-key headers are forwarded unchanged, unless --key is given
(then the stand-in sends `x-api-key` and `authorization: Bearer` with that key itself).

What it cannot show: what a real model would decide (which tools, how many turns, how long its
answers are). And the server's cache holds the tokens the server generated itself, which differ
from the scripted assistant turn that goes into the next prompt, so the cache can never hold the
whole previous request and its answer: reuse is counted against the previous request's prompt
(cache_read_input_tokens / the previous request's prompt tokens, capped at 1.0).

Output: one line per main-conversation request, `turn N: prompt P tokens, C from the cache (X % of
the prompt, Y % of the previous request's prompt), M messages, late system messages S, reminders
R` (S: messages with `role: system` after the first message; R: `<system-reminder>` texts in the
last user message); a `turn N: changed since the previous request: ...` line where a request
changed or dropped the previous request's messages or the scripted answer (cache_control markers,
which move to the newest message, and a text given as a string or as text blocks aside: Claude Code
2.1.332 adds `"replace_all": false` to each scripted Edit call); then the machine-readable lines
`tool_turns=K` (tool results that came back without an error), `reuse_of_held=0.998,...` and
`reuse_min_of_held=0.998`. Exit 1 when Claude Code fails, when fewer than --tool-turns tool
results came back, or on any stand-in error (Claude Code's stderr is printed then); exit 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPT = (
    "Read notes.txt, then edit its last line, and repeat that a few times. Use the Read and Edit "
    "tools; say Done. when finished."
)
NOTES = "notes.txt"
NOTES_TEXT = "".join(
    f"note {i}: the quick brown fox jumps over the lazy dog\n" for i in range(1, 9)
)
SIDE_TEXT = "Tool turns"
FINAL_TEXT = "Done."
HOP_HEADERS = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "accept-encoding",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "upgrade",
}
AUTH_HEADERS = {"authorization", "x-api-key"}


class StandInError(Exception):
    """Something the stand-in cannot go on with (recorded; the run fails)."""


@dataclass
class Turn:
    """One main-conversation request, as the server saw it."""

    index: int
    prompt: int
    cache_read: int
    messages: int
    late_system: int
    reminders: int
    tool_uses: int
    tool_results: int
    tool_errors: int
    rewritten: list[str]


@dataclass
class State:
    """What the stand-in shares with the main thread."""

    upstream: urllib.parse.SplitResult
    ssl_context: ssl.SSLContext | None
    key: str | None
    notes: Path
    tool_turns: int
    timeout: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    turns: list[Turn] = field(default_factory=list)
    side_requests: int = 0
    other_requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    last_messages: list[Any] | None = None


# --- the request body ------------------------------------------------------------------------


def _skip_ws(raw: bytes, i: int) -> int:
    while i < len(raw) and raw[i] in b" \t\r\n":
        i += 1
    return i


def _string_end(raw: bytes, i: int) -> int:
    """Index just after the JSON string that starts at raw[i] (a quote)."""
    i += 1
    while i < len(raw):
        c = raw[i]
        if c == 0x5C:  # backslash
            i += 2
            continue
        if c == 0x22:
            return i + 1
        i += 1
    raise StandInError("unterminated string in the request body")


def _top_level_key(raw: bytes, name: bytes) -> tuple[int, int] | None:
    """(start, end) of the value of the top-level key `name` in the JSON object `raw`."""
    depth = 0
    i = 0
    expect_key = False
    while i < len(raw):
        c = raw[i]
        if c == 0x22:
            end = _string_end(raw, i)
            if depth == 1 and expect_key:
                colon = _skip_ws(raw, end)
                start = _skip_ws(raw, colon + 1)
                if raw[i + 1 : end - 1] == name:
                    stop = start
                    while stop < len(raw) and raw[stop] not in b",}] \t\r\n":
                        stop += 1
                    return start, stop
                expect_key = False
                i = start
                continue
            i = end
            continue
        if c in b"{[":
            depth += 1
            expect_key = c == 0x7B and depth == 1
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 1:
            expect_key = True
        i += 1
    return None


def unstreamed(raw: bytes, body: dict[str, Any]) -> bytes:
    """The body with `"stream": false`, every other byte as it was."""
    span = _top_level_key(raw, b"stream")
    if span is None:
        brace = raw.index(b"{") + 1
        comma = b"" if raw[_skip_ws(raw, brace) : _skip_ws(raw, brace) + 1] == b"}" else b","
        out = raw[:brace] + b'"stream":false' + comma + raw[brace:]
    else:
        out = raw[: span[0]] + b"false" + raw[span[1] :]
    check = dict(body)
    check["stream"] = False
    if json.loads(out) != check:
        raise StandInError("could not set stream to false without changing the body")
    return out


# --- the scripted assistant turn ---------------------------------------------------------------


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text_of(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in _blocks(message):
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(json.dumps(block.get("content", "")))
    return "\n".join(parts)


def count_blocks(messages: list[Any], role: str, kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        if isinstance(message, dict) and message.get("role") == role
        for block in _blocks(message)
        if block.get("type") == kind
    ]


def scripted_turn(state: State, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant's content blocks for a main-conversation request."""
    names = {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}
    missing = {"Read", "Edit"} - names
    if missing:
        raise StandInError(f"the request offers no tool {', '.join(sorted(missing))}: {names}")
    k = len(count_blocks(body.get("messages", []), "assistant", "tool_use"))
    if k >= state.tool_turns:
        return [{"type": "text", "text": FINAL_TEXT}]
    path = str(state.notes)
    tool_input: dict[str, Any] = {"file_path": path}
    name = "Read"
    if k % 2 == 1:
        name = "Edit"
        text = state.notes.read_text(encoding="utf-8")
        lines = text.rstrip("\n").split("\n")
        last = lines[-1] if lines else ""
        if not last.strip() or text.count(last) != 1:
            raise StandInError(f"the last line of {path} is empty or not unique: {last!r}")
        tool_input.update(old_string=last, new_string=f"{last} edited {k + 1}")
    tool_id = "toolu_" + secrets.token_hex(12)
    return [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]


def message_of(
    body: dict[str, Any], content: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": "msg_" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "main"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_of(message: dict[str, Any]) -> bytes:
    """The message as an Anthropic SSE stream."""
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    out = [_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opened = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        out.append(
            _event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
        )
        out.append(
            _event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        )
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    out.append(_event("message_stop", {"type": "message_stop"}))
    return b"".join(out)


# --- recording --------------------------------------------------------------------------------


def _normal(value: Any) -> Any:
    """value without cache_control markers (they move to the newest message every request)."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _message_normal(message: Any) -> Any:
    """A message's content as a string when it is only text blocks (the two forms are one)."""
    out = _normal(message)
    content = out.get("content") if isinstance(out, dict) else None
    if isinstance(content, list) and all(
        isinstance(b, dict) and set(b) == {"type", "text"} and b["type"] == "text" for b in content
    ):
        out["content"] = "".join(str(b["text"]) for b in content)
    return out


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    """Where new differs from old: `path added`, `path removed`, `path changed`."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}{k} removed" for k in old if k not in new]
        out += [f"{path}{k} added" for k in new if k not in old]
        for k in old:
            if k in new:
                out += _diff(old[k], new[k], f"{path}{k}.")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _diff(a, b, f"{path}{i}.")
        ]
    return [] if old == new else [f"{path.rstrip('.') or 'message'} changed"]


def rewritten(previous: list[Any] | None, messages: list[Any]) -> list[str]:
    """How this request changed or dropped the previous request's messages (with the scripted
    answer), cache_control markers and the string/text-block form of a content aside."""
    if previous is None:
        return []
    out: list[str] = []
    for i, old in enumerate(previous):
        if i >= len(messages):
            out.append(f"message {i} dropped")
            continue
        role = old.get("role") if isinstance(old, dict) else "?"
        if i == len(previous) - 1:
            role = f"{role}, the scripted answer"
        diffs = _diff(_message_normal(old), _message_normal(messages[i]))
        out += [f"message {i} ({role}): {d}" for d in diffs[:4]]
    return out


def record(
    state: State, body: dict[str, Any], usage: dict[str, Any], answer: dict[str, Any]
) -> None:
    messages = body.get("messages", [])
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), {}
    )
    results = count_blocks(messages, "user", "tool_result")
    turn = Turn(
        index=len(state.turns) + 1,
        prompt=sum(
            int(usage.get(k) or 0)
            for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ),
        cache_read=int(usage.get("cache_read_input_tokens") or 0),
        messages=len(messages),
        late_system=sum(
            1 for m in messages[1:] if isinstance(m, dict) and m.get("role") == "system"
        ),
        reminders=_text_of(last_user).count("<system-reminder>"),
        tool_uses=len(count_blocks(messages, "assistant", "tool_use")),
        tool_results=len(results),
        tool_errors=sum(1 for b in results if b.get("is_error")),
        rewritten=rewritten(state.last_messages, messages),
    )
    state.turns.append(turn)
    state.last_messages = [*messages, {"role": "assistant", "content": answer["content"]}]


# --- the stand-in -----------------------------------------------------------------------------


def forward(state: State, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST raw to the upstream's path; (status, body)."""
    up = state.upstream
    send = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
    if state.key is not None:
        send = {k: v for k, v in send.items() if k.lower() not in AUTH_HEADERS}
        send.update({"x-api-key": state.key, "authorization": f"Bearer {state.key}"})
    send.update({"content-type": "application/json", "accept-encoding": "identity"})
    conn: http.client.HTTPConnection
    if up.scheme == "https":
        conn = http.client.HTTPSConnection(
            up.hostname or "", up.port or 443, timeout=state.timeout, context=state.ssl_context
        )
    else:
        conn = http.client.HTTPConnection(up.hostname or "", up.port or 80, timeout=state.timeout)
    try:
        conn.request("POST", up.path.rstrip("/") + path, body=raw, headers=send)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_" + secrets.token_hex(12))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, text: str) -> None:
        with self.state.lock:
            self.state.errors.append(text)
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": text}}
        self._reply(400, json.dumps(error).encode())

    def do_GET(self) -> None:
        with self.state.lock:
            self.state.other_requests.append(f"GET {self.path}")
        self._reply(404, b'{"type":"error","error":{"type":"not_found_error","message":"no"}}')

    def do_HEAD(self) -> None:
        with self.state.lock:
            self.state.other_requests.append(f"HEAD {self.path}")
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = dict(self.headers.items())
        try:
            if path == "/v1/messages":
                self._messages(raw, headers)
            elif path == "/v1/messages/count_tokens":
                with self.state.lock:
                    self.state.other_requests.append(f"POST {self.path}")
                status, data = forward(self.state, path, raw, headers)
                self._reply(status, data)
            else:
                with self.state.lock:
                    self.state.other_requests.append(f"POST {self.path}")
                self._reply(404, b'{"type":"error","error":{"type":"not_found_error"}}')
        except (StandInError, OSError, ValueError, http.client.HTTPException) as exc:
            self._fail(f"{type(exc).__name__}: {exc}")

    def _messages(self, raw: bytes, headers: dict[str, str]) -> None:
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise StandInError("the request body is not a JSON object")
        status, data = forward(self.state, "/v1/messages", unstreamed(raw, body), headers)
        if status != 200:
            raise StandInError(f"upstream answered {status}: {data[:500]!r}")
        got = json.loads(data).get("usage") or {}
        usage = {
            "input_tokens": int(got.get("input_tokens") or 0),
            "cache_read_input_tokens": int(got.get("cache_read_input_tokens") or 0),
            "cache_creation_input_tokens": int(got.get("cache_creation_input_tokens") or 0),
            "output_tokens": 1,
        }
        with self.state.lock:
            if body.get("tools"):
                content = scripted_turn(self.state, body)
                answer = message_of(body, content, usage)
                record(self.state, body, got, answer)
            else:
                self.state.side_requests += 1
                answer = message_of(body, [{"type": "text", "text": SIDE_TEXT}], usage)
        answer["usage"]["output_tokens"] = max(1, len(json.dumps(answer["content"])) // 4)
        if body.get("stream"):
            self._reply(200, sse_of(answer), "text/event-stream")
        else:
            self._reply(200, json.dumps(answer).encode())


# --- the run ----------------------------------------------------------------------------------


def prepare_workdir(arg: str | None) -> tuple[Path, Path | None]:
    """(workdir, temporary directory to remove or None)."""
    git = ["git", "-c", "user.name=tool-turns", "-c", "user.email=tool-turns@invalid"]
    if arg is None:
        tmp = Path(tempfile.mkdtemp(prefix="claude-tool-turns-"))
        subprocess.run([*git, "init", "-q", str(tmp)], check=True)
        (tmp / NOTES).write_text(NOTES_TEXT, encoding="utf-8")
        subprocess.run([*git, "-C", str(tmp), "add", NOTES], check=True)
        subprocess.run([*git, "-C", str(tmp), "commit", "-q", "-m", "notes"], check=True)
        return tmp, tmp
    workdir = Path(arg).resolve()
    inside = subprocess.run(
        ["git", "-C", str(workdir), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise SystemExit(f"--workdir {workdir} is not a git repository")
    if not (workdir / NOTES).exists():
        (workdir / NOTES).write_text(NOTES_TEXT, encoding="utf-8")
        subprocess.run([*git, "-C", str(workdir), "add", NOTES], check=True)
    return workdir, None


def run_claude(
    args: argparse.Namespace, workdir: Path, base_url: str
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANTHROPIC_BASE_URL=base_url)
    if any(env.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
        no_proxy = ",".join(x for x in (env.get("NO_PROXY", ""), "127.0.0.1,localhost") if x)
        env.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
    cmd = [
        args.claude,
        "-p",
        PROMPT,
        "--output-format",
        "json",
        "--allowedTools",
        "Read,Edit",
        "--max-turns",
        str(args.tool_turns + 5),
    ]
    with open(os.devnull, "rb") as devnull:
        return subprocess.run(
            cmd,
            cwd=workdir,
            env=env,
            stdin=devnull,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            check=False,
        )


def pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}" if whole else "-"


def report(state: State) -> list[float]:
    """Print the per-turn lines; the reuse of each request after the first."""
    reuse: list[float] = []
    previous: Turn | None = None
    for t in state.turns:
        held = pct(t.cache_read, previous.prompt) if previous else "-"
        print(
            f"turn {t.index}: prompt {t.prompt} tokens, {t.cache_read} from the cache "
            f"({pct(t.cache_read, t.prompt)} % of the prompt, {held} % of the previous request's "
            f"prompt), {t.messages} messages, late system messages {t.late_system}, "
            f"reminders {t.reminders}"
        )
        if previous is not None:
            reuse.append(min(1.0, t.cache_read / previous.prompt) if previous.prompt else 0.0)
        previous = t
    for t in state.turns:
        if t.rewritten:
            print(f"turn {t.index}: changed since the previous request: " + "; ".join(t.rewritten))
    if state.side_requests or state.other_requests:
        print(f"side requests {state.side_requests}, other requests {state.other_requests}")
    return reuse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--upstream", required=True, help="llama-server or pool base URL")
    p.add_argument("--ca-file", help="CA bundle (PEM) for an https upstream")
    p.add_argument("--key", help="API key the stand-in sends upstream (@FILE: read from FILE)")
    p.add_argument("--claude", default="claude", help="Claude Code executable")
    p.add_argument("--workdir", help="git repository to run in (default: a new temporary one)")
    p.add_argument("--tool-turns", type=int, default=6)
    p.add_argument("--listen", default="127.0.0.1:0", help="stand-in address HOST:PORT")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the claude run")
    args = p.parse_args(argv)
    up = urllib.parse.urlsplit(args.upstream)
    if up.scheme not in ("http", "https") or not up.hostname:
        p.error("--upstream must be an http:// or https:// URL")
    if args.tool_turns < 1 or args.tool_turns > 100:
        p.error("--tool-turns must be between 1 and 100")
    if args.key and args.key.startswith("@"):
        args.key = Path(args.key[1:]).read_text(encoding="utf-8").strip()
    claude = shutil.which(args.claude)
    if claude is None:
        p.error(f"no Claude Code executable {args.claude}")
    args.claude = claude
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    up = urllib.parse.urlsplit(args.upstream)
    context = ssl.create_default_context(cafile=args.ca_file) if up.scheme == "https" else None
    workdir, tmp = prepare_workdir(args.workdir)
    state = State(up, context, args.key, workdir / NOTES, args.tool_turns, args.timeout)
    host, _, port = args.listen.rpartition(":")
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = http.server.ThreadingHTTPServer((host or "127.0.0.1", int(port)), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bound_host, bound_port = server.server_address[:2]
    base_url = f"http://{bound_host!s}:{bound_port}"
    t0 = time.monotonic()
    try:
        proc = run_claude(args, workdir, base_url)
    except subprocess.TimeoutExpired as exc:
        state.errors.append(f"claude ran past {args.timeout:.0f} s")
        proc = subprocess.CompletedProcess(
            exc.cmd, 124, str(exc.stdout or ""), str(exc.stderr or "")
        )
    finally:
        server.shutdown()
        server.server_close()
    seconds = time.monotonic() - t0
    try:
        return summarize(args, state, proc, seconds)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def summarize(
    args: argparse.Namespace, state: State, proc: subprocess.CompletedProcess[str], seconds: float
) -> int:
    reuse = report(state)
    last = state.turns[-1] if state.turns else None
    results = last.tool_results - last.tool_errors if last else 0
    problems = list(state.errors)
    result: dict[str, Any] = {}
    try:
        result = json.loads(proc.stdout or "{}")
    except ValueError:
        problems.append("claude's output is not JSON")
    if proc.returncode != 0 or result.get("is_error"):
        problems.append(f"claude exited {proc.returncode}: {str(result.get('result'))[:300]}")
    if results < args.tool_turns:
        errors = last.tool_errors if last else 0
        problems.append(
            f"{results} tool results came back ({errors} errors), {args.tool_turns} wanted"
        )
    print(
        f"claude: {seconds:.1f} s, {len(state.turns)} main requests, "
        f"num_turns {result.get('num_turns')}, result {str(result.get('result'))[:80]!r}"
    )
    print(f"tool_turns={results}")
    print("reuse_of_held=" + ",".join(f"{r:.3f}" for r in reuse))
    print(f"reuse_min_of_held={min(reuse):.3f}" if reuse else "reuse_min_of_held=")
    if problems:
        for problem in dict.fromkeys(problems):
            times = problems.count(problem)
            print(f"error: {problem}" + (f" ({times} times)" if times > 1 else ""), file=sys.stderr)
        print("--- claude stderr ---\n" + (proc.stderr or ""), file=sys.stderr)
        if proc.returncode != 0:
            print("--- claude stdout ---\n" + (proc.stdout or "")[-4000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

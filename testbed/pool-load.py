#!/usr/bin/env python3
"""Load generator for a llamafleet pool (Python standard library only).

N concurrent conversations, each with its own X-Claude-Code-Session-Id and a prompt that grows by
one user turn (and the previous answer) per request, sent to /v1/messages the way Claude Code
sends them (streamed, Authorization: Bearer). Every request is recorded: HTTP status, the backend
that answered (the pool's X-Llamafleet-Backend response header), and llama-server's usage:
input_tokens (evaluated) and cache_read_input_tokens (read from the prompt cache). A turn's
"reuse" is the share of the previous request, prompt and answer, that the next one read from the
cache (what the rollout's prompt-cache gate measures; never above 100 %).

    pool-load.py run --url https://10.131.7.51:8443 --ca-file ca.pem --key-file pool.key \\
        --conversations 6 --turns 5 --json out.json [--state conv.json] [--stop-file PATH]
        [--spread 3] [--ready-file PATH] [--turns-after-stop 1]
        [--system shared --new-session-every-turn [--attribution-header]]
    pool-load.py compare affinity.json roundrobin.json [--json summary.json]
    pool-load.py moved before.json after.json --stopped HOST [--json summary.json]

Bounded: at most 64 conversations, 10000 turns each and 3600 s; it stops early at --duration or
when --stop-file exists (after the turns in flight). It talks only to private or loopback
addresses (test hosts) unless --any-host. The key is read from a file, never from the command
line. With --state, the conversations are read from and written back to that file, so a second
run continues them (the same sessions, their prompts grown further).

Nothing is left to chance where a test needs traffic on every backend: with --spread N the
conversations' session ids are chosen, before the first turn, so that they land evenly on N
backends (each candidate id is tried with a GET /v1/models carrying it, and the pool's
X-Llamafleet-Backend answer says where it went); a run that cannot reach N backends fails before
it sends a message. --ready-file PATH is written once every conversation has finished its first
turn (a test waits for it instead of sleeping), and --turns-after-stop K lets each conversation
take K more turns once the stop file exists (traffic after a change, without a timed wait).

Many short sessions of one client (`claude -p` from scripts): --system shared gives every session
the same system text (Claude Code's system prompt and tools are the same for every session of one
version and settings), --new-session-every-turn makes every turn a new session, and
--attribution-header puts before it the block Claude Code 2.1.197 sends unless
CLAUDE_CODE_ATTRIBUTION_HEADER=0: `x-anthropic-billing-header: cc_version=<ver>.<hash>; ...` with a
hash of the session's first user message, so no two sessions share more than its first ~47
characters. This stands for the real client's header (its hash is not computed as Claude Code
computes it, only changed as often); it shows what the header does to a server's prompt cache,
not the rest of Claude Code's prompt.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import ipaddress
import json
import os
import random
import ssl
import statistics
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

MAX_CONVERSATIONS = 64
MAX_TURNS = 10000
MAX_DURATION = 3600.0

# plain English words: the tiny test model's vocabulary has a piece for each (about one token)
WORDS_TEXT = (
    "the of and to in is it you that he was for on are with as his they be at one have this "
    "from or had by not word but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did number "
    "sound no most people my over know water than call first who may down side been now find "
    "any new work part take get place made live where after back little only round man year "
    "came show every good me give our under name very through just form sentence great think "
    "say help low line differ turn cause much mean before move right boy old too same tell "
    "does set three want air well also play small end put home read hand port large spell add "
    "even land here must big high such follow act why ask men change went light kind off need "
    "house picture try us again animal point mother world near build self earth father file "
    "server model cache prompt token request answer build test host pool session backend "
)
WORDS = WORDS_TEXT.split()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Conversation:
    """One Claude-Code-like conversation: a session id, a system text unique to it (a random tag
    first, so two conversations share no prefix), and its messages so far."""

    def __init__(self, index: int, seed: int, prompt_tokens: int, shared: str = "") -> None:
        self.index = index
        self.rng = random.Random(f"{seed}-{index}")
        self.shared = shared
        self.session = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.system = shared or f"Conversation {self.session}.\n" + _words(self.rng, prompt_tokens)
        self.messages: list[dict[str, str]] = []
        self.turn = 0
        self.prev_total = 0  # prompt + answer of the last request that succeeded
        self.backend = ""
        self.resets = 0

    def redraw(self, prompt_tokens: int) -> None:
        """Another session id before the first turn (--spread), its system text to match."""
        self.session = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.system = self.shared or f"Conversation {self.session}.\n" + _words(
            self.rng, prompt_tokens
        )

    def reset(self, prompt_tokens: int) -> None:
        """A new session (the prompt reached --max-prompt-tokens): as a user starting over."""
        self.resets += 1
        self.session = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.system = self.shared or f"Conversation {self.session}.\n" + _words(
            self.rng, prompt_tokens
        )
        self.messages = []
        self.turn = 0
        self.prev_total = 0
        self.backend = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "session": self.session,
            "system": self.system,
            "messages": self.messages,
            "turn": self.turn,
            "prev_total": self.prev_total,
            "backend": self.backend,
            "resets": self.resets,
            "shared": self.shared,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], seed: int) -> Conversation:
        conv = cls.__new__(cls)
        conv.index = int(data["index"])
        conv.rng = random.Random(f"{seed}-{conv.index}-{data['session']}-{data['turn']}")
        conv.resets = int(data.get("resets", 0))
        conv.shared = str(data.get("shared", ""))
        conv.session = str(data["session"])
        conv.system = str(data["system"])
        conv.messages = list(data["messages"])
        conv.turn = int(data["turn"])
        conv.prev_total = int(data["prev_total"])
        conv.backend = str(data["backend"])
        return conv


class Client:
    def __init__(self, args: argparse.Namespace, key: str) -> None:
        url = urllib.parse.urlsplit(args.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise SystemExit(f"pool-load: --url {args.url!r} is not an http(s) URL")
        if not args.any_host:
            try:
                ip = ipaddress.ip_address(url.hostname)
            except ValueError:
                raise SystemExit(
                    f"pool-load: {url.hostname} is a name; give the test host's address "
                    "(or --any-host)"
                ) from None
            if not (ip.is_private or ip.is_loopback):
                raise SystemExit(f"pool-load: {ip} is not a private address (or --any-host)")
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.key = key
        self.auth = args.auth
        self.model = args.model
        self.stream = not args.no_stream
        self.attribution_header = bool(getattr(args, "attribution_header", False))
        self.timeout = args.timeout
        self.max_tokens = args.max_tokens
        self.context = None
        if self.scheme == "https":
            self.context = ssl.create_default_context(cafile=args.ca_file or None)

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self.context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def system_blocks(self, conv: Conversation) -> list[dict[str, str]]:
        blocks = [{"type": "text", "text": conv.system}]
        if self.attribution_header and conv.messages:
            first = str(conv.messages[0]["content"])
            h = hashlib.sha256(first.encode()).hexdigest()
            header = (
                f"x-anthropic-billing-header: cc_version=2.1.197.{h[:3]}; "
                f"cc_entrypoint=cli; cch={h[3:8]};"
            )
            blocks.insert(0, {"type": "text", "text": header})
        return blocks

    def headers(self, session: str) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
            "X-Claude-Code-Session-Id": session,
        }
        if self.auth == "bearer":
            headers["Authorization"] = f"Bearer {self.key}"
        else:
            headers["x-api-key"] = self.key
        return headers

    def backend_of(self, session: str) -> str:
        """The backend the pool sends this session id to (a GET /v1/models carrying it, with the
        key: the X-Llamafleet-Backend answer names it; "" when the pool names none)."""
        conn = self._connection()
        try:
            conn.request("GET", "/v1/models", headers=self.headers(session))
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise SystemExit(f"pool-load: GET /v1/models answered {resp.status}")
            return resp.getheader("X-Llamafleet-Backend", "") or ""
        finally:
            conn.close()

    def send(self, conv: Conversation) -> dict[str, Any]:
        body = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": self.stream,
            "system": self.system_blocks(conv),
            "messages": conv.messages,
        }
        headers = self.headers(conv.session)
        out: dict[str, Any] = {"status": 0, "backend": "", "error": ""}
        conn = self._connection()
        try:
            conn.request("POST", "/v1/messages", json.dumps(body).encode(), headers)
            resp = conn.getresponse()
            out["status"] = resp.status
            out["backend"] = resp.getheader("X-Llamafleet-Backend", "") or ""
            if resp.status != 200:
                out["error"] = resp.read(2000).decode("utf-8", "replace")
            elif self.stream:
                out.update(_read_stream(resp))
            else:
                out.update(_read_message(resp.read()))
        except (OSError, http.client.HTTPException, ValueError) as e:
            out["error"] = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        return out


def _usage(out: dict[str, Any], usage: dict[str, Any]) -> None:
    for name in ("input_tokens", "cache_read_input_tokens", "output_tokens"):
        if name in usage:
            out[name] = int(usage[name] or 0)


def _read_message(raw: bytes) -> dict[str, Any]:
    data = json.loads(raw)
    out: dict[str, Any] = {"text": "".join(b.get("text", "") for b in data.get("content", []))}
    _usage(out, data.get("usage", {}))
    out["complete"] = data.get("type") == "message"
    return out


def _read_stream(resp: http.client.HTTPResponse) -> dict[str, Any]:
    """Anthropic's server-sent events: message_start (usage of the prompt), content deltas,
    message_delta (output tokens), message_stop; a stream that ends before message_stop was cut."""
    out: dict[str, Any] = {"text": "", "complete": False}
    while True:
        line = resp.readline()
        if not line:
            break
        text = line.decode("utf-8", "replace").strip()
        if not text.startswith("data:"):
            continue
        data = json.loads(text[5:].strip())
        kind = data.get("type")
        if kind == "message_start":
            _usage(out, data.get("message", {}).get("usage", {}))
        elif kind == "content_block_delta":
            out["text"] += data.get("delta", {}).get("text", "")
        elif kind == "message_delta":
            _usage(out, {"output_tokens": data.get("usage", {}).get("output_tokens", 0)})
        elif kind == "message_stop":
            out["complete"] = True
        elif kind == "error":
            out["error"] = json.dumps(data.get("error", data))[:500]
    return out


def _turn(
    conv: Conversation, client: Client, args: argparse.Namespace, t0: float
) -> dict[str, Any]:
    if (args.max_prompt_tokens and conv.prev_total > args.max_prompt_tokens) or (
        getattr(args, "new_session_every_turn", False) and conv.turn > 0
    ):
        conv.reset(args.prompt_tokens)
    conv.turn += 1
    question = f"Turn {conv.turn}: " + _words(conv.rng, args.turn_tokens)
    conv.messages.append({"role": "user", "content": question})
    start = time.monotonic()
    got = client.send(conv)
    end = time.monotonic()
    ok = got["status"] == 200 and got.get("complete", False) and not got.get("error")
    cached = int(got.get("cache_read_input_tokens", 0))
    evaluated = int(got.get("input_tokens", 0))
    rec: dict[str, Any] = {
        "conversation": conv.index,
        "session": conv.session,
        "turn": conv.turn,
        "start": round(start - t0, 3),
        "seconds": round(end - start, 3),
        "status": got["status"],
        "ok": ok,
        "error": "" if ok else (got.get("error") or "stream ended before message_stop")[:300],
        "backend": got["backend"],
        "prev_backend": conv.backend,
        "input_tokens": evaluated,
        "cache_read_input_tokens": cached,
        "output_tokens": int(got.get("output_tokens", 0)),
        "prompt_tokens": evaluated + cached,
        "prev_total": conv.prev_total,
        # the share of the previous request (prompt and answer) read from the cache
        "reuse": round(min(1.0, cached / conv.prev_total), 4) if ok and conv.prev_total else None,
    }
    if ok:
        conv.messages.append({"role": "assistant", "content": got.get("text") or "OK"})
        conv.prev_total = evaluated + cached + int(got.get("output_tokens", 0))
        conv.backend = got["backend"]
    else:
        conv.messages.pop()  # the turn is asked again next time, as a client would
        conv.turn -= 1
    return rec


MAX_SPREAD_TRIES = 200


def spread(convs: list[Conversation], client: Client, n: int, prompt_tokens: int) -> None:
    """Choose each conversation's session id so that the conversations land evenly on n backends:
    a candidate is kept when its backend has no more conversations than the emptiest of the n
    (a backend not seen yet has none), so conversation i goes to a new backend while fewer than n
    are seen, and every backend ends with len(convs) // n or one more."""
    counts: Counter[str] = Counter()
    for conv in convs:
        for _ in range(MAX_SPREAD_TRIES):
            backend = client.backend_of(conv.session)
            if not backend:
                raise SystemExit(
                    "pool-load: --spread: the pool names no backend (X-Llamafleet-Backend)"
                )
            emptiest = 0 if len(counts) < n else min(counts.values())
            if counts[backend] <= emptiest:
                counts[backend] += 1
                break
            conv.redraw(prompt_tokens)
        else:
            raise SystemExit(
                f"pool-load: --spread {n}: conversation {conv.index} found no session id for a "
                f"backend with {emptiest} conversations in {MAX_SPREAD_TRIES} tries (so far: "
                f"{dict(sorted(counts.items()))}); is every backend up?"
            )
    if len(counts) < n:
        raise SystemExit(f"pool-load: --spread {n}: only {len(counts)} backends answered")


def _conversations(
    args: argparse.Namespace, client: Client, state: Path | None
) -> list[Conversation]:
    """The conversations of a run: read from --state, else new ones (placed with --spread)."""
    if state is not None and state.exists():
        return [Conversation.from_json(c, args.seed) for c in json.loads(state.read_text())]
    shared = ""
    if args.system == "shared":
        # one system text for every session, as one client version's prompt and tools
        shared = "You are a coding agent.\n" + _words(
            random.Random(f"{args.seed}-system"), args.prompt_tokens
        )
    convs = [
        Conversation(i, args.seed, args.prompt_tokens, shared) for i in range(args.conversations)
    ]
    if args.spread:
        if args.new_session_every_turn:
            raise SystemExit(
                "pool-load: --spread places sessions: not with --new-session-every-turn"
            )
        spread(convs, client, args.spread, args.prompt_tokens)
    return convs


def cmd_run(args: argparse.Namespace) -> int:
    if not 1 <= args.conversations <= MAX_CONVERSATIONS:
        raise SystemExit(f"pool-load: --conversations must be 1..{MAX_CONVERSATIONS}")
    if not 1 <= args.turns <= MAX_TURNS:
        raise SystemExit(f"pool-load: --turns must be 1..{MAX_TURNS}")
    duration = min(args.duration, MAX_DURATION)
    key = Path(args.key_file).read_text().strip().splitlines()[0] if args.key_file else ""
    client = Client(args, key)
    state = Path(args.state) if args.state else None
    convs = _conversations(args, client, state)
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    stop = Path(args.stop_file) if args.stop_file else None
    ready = Path(args.ready_file) if args.ready_file else None
    first_turns_done = [0]

    def worker(conv: Conversation) -> None:
        after_stop = 0
        for i in range(args.turns):
            if time.monotonic() - t0 >= duration:
                return
            if stop is not None and stop.exists():
                if after_stop >= args.turns_after_stop:
                    return
                after_stop += 1
            rec = _turn(conv, client, args, t0)
            with lock:
                records.append(rec)
                if i == 0:
                    first_turns_done[0] += 1
                    if ready is not None and first_turns_done[0] == len(convs):
                        ready.write_text("ready\n")
            time.sleep(args.pause)

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in convs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - t0
    records.sort(key=lambda r: (r["start"], r["conversation"]))
    summary = summarize(records)
    summary.update(label=args.label, url=args.url, seconds=round(elapsed, 1))
    if state is not None:
        state.write_text(json.dumps([c.to_json() for c in convs]))
    print_run(summary, records, convs)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "requests": records}, indent=1))
    return 0


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "min": None, "mean": None, "p10": None, "at_least_99": None}
    ordered = sorted(values)
    return {
        "count": len(values),
        "min": round(ordered[0], 4),
        "mean": round(statistics.fmean(values), 4),
        "p10": round(ordered[max(0, int(len(ordered) * 0.1) - 1)], 4),
        "at_least_99": round(sum(1 for v in values if v >= 0.99) / len(values), 4),
    }


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    reuse = [r["reuse"] for r in ok if r["reuse"] is not None]
    same = [r["reuse"] for r in ok if r["reuse"] is not None and r["backend"] == r["prev_backend"]]
    moved = [r for r in ok if r["prev_backend"] and r["backend"] != r["prev_backend"]]
    return {
        "requests": len(records),
        "ok": len(ok),
        "failed": len(records) - len(ok),
        "errors": sorted({f"{r['status']} {r['error']}"[:200] for r in records if not r["ok"]})[
            :10
        ],
        "by_backend": dict(sorted(Counter(r["backend"] or "-" for r in records).items())),
        "conversations": len({r["session"] for r in records}),
        "reuse": _stats(reuse),
        "reuse_same_backend": _stats(same),
        "moves": len(moved),
        "prompt_tokens_max": max((r["prompt_tokens"] for r in ok), default=0),
        # what the servers said they did: per backend, prompt tokens read from the cache and
        # evaluated (the usage of each answer), and the share read from the cache
        "tokens": _tokens(ok),
    }


def _tokens(ok: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in [*sorted({r["backend"] or "-" for r in ok}), "all"]:
        mine = [r for r in ok if name in ("all", r["backend"] or "-")]
        cached = sum(int(r["cache_read_input_tokens"]) for r in mine)
        evaluated = sum(int(r["input_tokens"]) for r in mine)
        total = cached + evaluated
        out[name] = {
            "cached": cached,
            "evaluated": evaluated,
            "ratio": round(cached / total, 4) if total else None,
        }
    return out


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _path(backends: list[str]) -> str:
    """gpu1 x5 > gpu2 x3: the backends a conversation was served by, in order."""
    parts: list[list[Any]] = []
    for b in backends:
        if parts and parts[-1][0] == b:
            parts[-1][1] += 1
        else:
            parts.append([b, 1])
    return " > ".join(f"{b or '-'} x{n}" for b, n in parts)


def print_run(
    summary: dict[str, Any], records: list[dict[str, Any]], convs: list[Conversation]
) -> None:
    label = summary.get("label") or "run"
    print(
        f"== {label}: {summary['requests']} requests, {summary['failed']} failed, "
        f"{summary['conversations']} conversations, {summary['seconds']} s"
    )
    print(
        f"{'conv':>4} {'session':<10} {'turns':>5} {'fail':>4} {'reuse min':>9} "
        f"{'reuse mean':>10}  backends"
    )
    for conv in convs:
        mine = [r for r in records if r["conversation"] == conv.index]
        reuse = [r["reuse"] for r in mine if r["reuse"] is not None]
        print(
            f"{conv.index:>4} {conv.session[:8]:<10} {len(mine):>5} "
            f"{sum(1 for r in mine if not r['ok']):>4} "
            f"{_pct(min(reuse) if reuse else None):>9} "
            f"{_pct(statistics.fmean(reuse) if reuse else None):>10}  "
            f"{_path([r['backend'] for r in mine])}"
        )
    r = summary["reuse"]
    print(
        f"next-turn reuse: mean {_pct(r['mean'])}, min {_pct(r['min'])}, "
        f">= 99 %: {_pct(r['at_least_99'])} of {r['count']} turns; "
        f"by backend: {summary['by_backend']}; moves: {summary['moves']}"
    )
    t = summary["tokens"]["all"] if summary.get("tokens") else None
    if t:
        print(
            f"prompt tokens read from the cache: {t['cached']} of {t['cached'] + t['evaluated']} "
            f"({_pct(t['ratio'])})"
        )
    for err in summary["errors"]:
        print(f"  failed: {err}")
    sys.stdout.flush()


def _load(path: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def cmd_compare(args: argparse.Namespace) -> int:
    """Two runs side by side (e.g. session affinity and round robin)."""
    a, b = _load(args.first)["summary"], _load(args.second)["summary"]
    rows = [
        ("requests", a["requests"], b["requests"]),
        ("failed", a["failed"], b["failed"]),
        ("next-turn reuse, mean", _pct(a["reuse"]["mean"]), _pct(b["reuse"]["mean"])),
        ("next-turn reuse, min", _pct(a["reuse"]["min"]), _pct(b["reuse"]["min"])),
        ("turns reusing >= 99 %", _pct(a["reuse"]["at_least_99"]), _pct(b["reuse"]["at_least_99"])),
        ("turns on another backend", a["moves"], b["moves"]),
        ("requests by backend", a["by_backend"], b["by_backend"]),
    ]
    la, lb = a.get("label") or args.first, b.get("label") or args.second
    print(f"{'':<26} {la:>24} {lb:>24}")
    for name, x, y in rows:
        print(f"{name:<26} {x!s:>24} {y!s:>24}")
    if args.json:
        Path(args.json).write_text(json.dumps({"first": a, "second": b}, indent=1))
    return 0


def cmd_moved(args: argparse.Namespace) -> int:
    """Before and after a backend was stopped: the conversations it served must have moved and
    kept working; the others must have stayed where they were and kept their caches."""
    before, after = _load(args.before)["requests"], _load(args.after)["requests"]
    last: dict[str, str] = {}
    for r in before:
        if r["ok"]:
            last[r["session"]] = r["backend"]
    stopped = args.stopped
    on_stopped = sorted(s for s, b in last.items() if b == stopped)
    others = sorted(s for s, b in last.items() if b != stopped)
    moved_ok = []
    for s in on_stopped:
        mine = [r for r in after if r["session"] == s]
        if mine and all(r["ok"] and r["backend"] != stopped for r in mine):
            moved_ok.append(s)
    kept = []
    other_reuse: list[float] = []
    for s in others:
        mine = [r for r in after if r["session"] == s]
        if mine and all(r["ok"] and r["backend"] == last[s] for r in mine):
            kept.append(s)
        other_reuse += [r["reuse"] for r in mine if r["reuse"] is not None]
    moved_first = [
        r["reuse"]
        for s in on_stopped
        for r in after
        if r["session"] == s and r["prev_backend"] == stopped and r["reuse"] is not None
    ]
    moved_later = [
        r["reuse"]
        for s in on_stopped
        for r in after
        if r["session"] == s and r["prev_backend"] not in ("", stopped) and r["reuse"] is not None
    ]
    result = {
        "stopped": stopped,
        "sessions_on_stopped": len(on_stopped),
        "moved_and_working": len(moved_ok),
        "other_sessions": len(others),
        "others_on_same_backend": len(kept),
        "failed_after": sum(1 for r in after if not r["ok"]),
        "requests_after": len(after),
        "others_reuse": _stats(other_reuse),
        "moved_first_turn_reuse": _stats(moved_first),
        "moved_later_reuse": _stats(moved_later),
    }
    print(f"== {stopped} stopped: {len(on_stopped)} of {len(last)} conversations were on it")
    print(
        f"   moved and working: {len(moved_ok)} of {len(on_stopped)} "
        f"(first turn elsewhere reuses {_pct(result['moved_first_turn_reuse']['mean'])}, "
        f"later turns {_pct(result['moved_later_reuse']['min'])} min)"
    )
    print(
        f"   others on the same backend: {len(kept)} of {len(others)}, "
        f"their reuse: min {_pct(result['others_reuse']['min'])}, "
        f"mean {_pct(result['others_reuse']['mean'])}"
    )
    print(f"   requests after: {len(after)}, failed: {result['failed_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="drive conversations through the pool")
    run.add_argument("--url", required=True, help="the pool, e.g. https://10.131.7.51:8443")
    run.add_argument("--ca-file", default="", help="CA certificate of an https pool")
    run.add_argument("--key-file", default="", help="file whose first line is the API key")
    run.add_argument("--auth", choices=["bearer", "x-api-key"], default="bearer")
    run.add_argument("--model", default="tiny")
    run.add_argument("--conversations", type=int, default=6)
    run.add_argument("--turns", type=int, default=5, help="turns per conversation (at most)")
    run.add_argument("--duration", type=float, default=600.0, help="seconds (at most)")
    run.add_argument(
        "--stop-file", default="", help="stop (after the turns in flight) once it exists"
    )
    run.add_argument(
        "--turns-after-stop",
        type=int,
        default=0,
        help="turns each conversation still takes once the stop file exists",
    )
    run.add_argument(
        "--spread",
        type=int,
        default=0,
        help="choose the session ids so that the conversations land evenly on this many backends",
    )
    run.add_argument(
        "--ready-file", default="", help="written once every conversation had its first turn"
    )
    run.add_argument("--state", default="", help="read and write the conversations here")
    run.add_argument(
        "--prompt-tokens", type=int, default=2000, help="about the first prompt's size"
    )
    run.add_argument("--turn-tokens", type=int, default=400, help="about what each turn adds")
    run.add_argument("--max-tokens", type=int, default=16)
    run.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=0,
        help="start a new session when the prompt grew beyond this (0: never)",
    )
    run.add_argument(
        "--system",
        choices=["own", "shared"],
        default="own",
        help="each conversation its own system text, or one for all (one client's prompt)",
    )
    run.add_argument(
        "--new-session-every-turn",
        action="store_true",
        help="every turn a new session (`claude -p` runs), with a new session id",
    )
    run.add_argument(
        "--attribution-header",
        action="store_true",
        help="the billing header block Claude Code sends by default, before the system text",
    )
    run.add_argument("--pause", type=float, default=0.2, help="seconds between two turns")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    run.add_argument("--no-stream", action="store_true")
    run.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "big"))
    run.add_argument("--label", default="")
    run.add_argument("--json", default="", help="write the requests and the summary here")
    run.add_argument("--any-host", action="store_true", help="allow addresses that are not private")
    run.set_defaults(func=cmd_run)
    cmp_ = sub.add_parser("compare", help="two runs side by side")
    cmp_.add_argument("first")
    cmp_.add_argument("second")
    cmp_.add_argument("--json", default="")
    cmp_.set_defaults(func=cmd_compare)
    mv = sub.add_parser("moved", help="before and after a backend was stopped")
    mv.add_argument("before")
    mv.add_argument("after")
    mv.add_argument("--stopped", required=True, help="the backend's name (X-Llamafleet-Backend)")
    mv.add_argument("--json", default="")
    mv.set_defaults(func=cmd_moved)
    args = p.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

"""testbed/pool-load.py, the pool's load generator, against a stand-in pool on 127.0.0.1 that
answers /v1/messages as llama-server's Anthropic endpoint does (server-sent events: message_start
with the prompt's usage, a text delta, message_delta, message_stop) and names a backend per
session in X-Llamafleet-Backend, on GET /v1/models too: the requests it records, the reuse it
computes, failures (an error status, a cut stream), its bounds (stop file, addresses), the
placement of sessions on every backend (--spread) and its reports. The stand-in places sessions
by a hash of their id, as HAProxy's consistent hash does; it cannot show HAProxy's own placement
(the pool scenario runs the real one)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "testbed" / "pool-load.py"


@pytest.fixture(scope="module")
def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pool_load", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakePool:
    """Two backends behind one address: a session goes to the backend its id hashes to (or to
    ``force``), which remembers the last prompt+answer of each session it served and reports it as
    read from the cache; ``fail`` maps a turn number to a status or "cut" (a stream without its
    message_stop)."""

    def __init__(self, backends: int = 2) -> None:
        self.caches: dict[str, dict[str, int]] = {f"gpu{i + 1}": {} for i in range(backends)}
        self.fail: dict[int, Any] = {}
        self.force = ""
        self.seen: list[dict[str, Any]] = []
        pool = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                pool.probes += 1
                backend = pool.backend(self.headers["X-Claude-Code-Session-Id"])
                self._send(200, b'{"data":[{"id":"tiny"}]}', backend)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                session = self.headers["X-Claude-Code-Session-Id"]
                pool.seen.append({"headers": dict(self.headers.items()), "body": body})
                turn = len([m for m in body["messages"] if m["role"] == "user"])
                backend = pool.backend(session)
                failure = pool.fail.get(turn)
                if isinstance(failure, int):
                    return self._send(failure, b'{"error":{"message":"busy"}}', backend)
                words = len(body["system"][0]["text"].split()) + sum(
                    len(m["content"].split()) for m in body["messages"]
                )
                cached = min(pool.caches[backend].get(session, 0), words)
                pool.caches[backend][session] = words + 1  # the prompt and the one-token answer
                events = [
                    {
                        "type": "message_start",
                        "message": {
                            "usage": {
                                "cache_read_input_tokens": cached,
                                "input_tokens": words - cached,
                                "output_tokens": 0,
                            }
                        },
                    },
                    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "OK"}},
                    {"type": "message_delta", "usage": {"output_tokens": 1}},
                ]
                if failure != "cut":
                    events.append({"type": "message_stop"})
                data = "".join(
                    f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events
                ).encode()
                self._send(200, data, backend)

            def _send(self, code: int, data: bytes, backend: str) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Llamafleet-Backend", backend)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.probes = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def backend(self, session: str) -> str:
        if self.force:
            return self.force
        names = sorted(self.caches)
        return names[hashlib.sha256(session.encode()).digest()[0] % len(names)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake() -> Iterator[FakePool]:
    f = FakePool()
    yield f
    f.close()


def _run(load: ModuleType, fake: FakePool, tmp_path: Path, *extra: str) -> dict[str, Any]:
    key = tmp_path / "pool.key"
    key.write_text("the-pool-key-0123456789\n")
    out = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}.json"
    args = ["run", "--url", fake.url, "--key-file", str(key), "--json", str(out)]
    args += ["--pause", "0", "--prompt-tokens", "50", "--turn-tokens", "10", "--seed", "7"]
    assert load.main([*args, *extra]) == 0
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_conversations_are_recorded_with_backend_and_reuse(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    data = _run(load, fake, tmp_path, "--conversations", "3", "--turns", "4")
    s = data["summary"]
    assert (s["requests"], s["failed"], s["conversations"]) == (12, 0, 3)
    first = [r for r in data["requests"] if r["turn"] == 1]
    assert all(r["reuse"] is None and r["cache_read_input_tokens"] == 0 for r in first)
    later = [r for r in data["requests"] if r["turn"] > 1]
    # each next turn read the whole previous prompt and answer from its backend's cache
    assert all(r["reuse"] == 1.0 and r["backend"] == r["prev_backend"] for r in later)
    assert s["reuse"]["min"] == 1.0 and s["reuse"]["count"] == 9 and s["moves"] == 0
    assert sum(s["by_backend"].values()) == 12
    # sent as Claude Code sends them: streamed, Bearer key, one session id per conversation
    sent = fake.seen[0]
    assert sent["headers"]["Authorization"] == "Bearer the-pool-key-0123456789"
    assert sent["body"]["stream"] is True
    assert len({r["session"] for r in data["requests"]}) == 3
    # the prompt grows by the previous answer and the next question
    last = fake.seen[-1]["body"]["messages"]
    assert [m["role"] for m in last][-3:] == ["user", "assistant", "user"]


def test_failed_requests_are_counted_and_the_turn_asked_again(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    fake.fail = {2: 503}
    data = _run(load, fake, tmp_path, "--conversations", "1", "--turns", "2")
    assert data["summary"]["failed"] == 1 and data["summary"]["ok"] == 1
    assert data["summary"]["errors"][0].startswith("503")
    fake.fail = {2: "cut"}
    cut = _run(load, fake, tmp_path, "--conversations", "1", "--turns", "2")
    (bad,) = [r for r in cut["requests"] if not r["ok"]]
    assert bad["status"] == 200 and "before message_stop" in bad["error"]


def test_a_moved_conversation_reads_nothing_and_counts_as_moved(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    state = tmp_path / "conv.json"
    fake.force = "gpu1"
    before = _run(
        load, fake, tmp_path, "--conversations", "2", "--turns", "2", "--state", str(state)
    )
    fake.force = "gpu2"
    after = _run(load, fake, tmp_path, "--turns", "2", "--state", str(state))
    # the same sessions continued
    assert {r["session"] for r in after["requests"]} == {r["session"] for r in before["requests"]}
    assert min(r["turn"] for r in after["requests"]) == 3
    moved = [r for r in after["requests"] if r["turn"] == 3]
    assert all(r["prev_backend"] == "gpu1" and r["reuse"] == 0.0 for r in moved)
    assert after["summary"]["moves"] == 2
    report = tmp_path / "moved.json"
    assert (
        load.main(
            [
                "moved",
                *(str(p) for p in sorted(tmp_path.glob("run-*.json"))),
                "--stopped",
                "gpu1",
                "--json",
                str(report),
            ]
        )
        == 0
    )
    result = json.loads(report.read_text())
    assert result["sessions_on_stopped"] == 2 and result["moved_and_working"] == 2
    assert (
        result["moved_first_turn_reuse"]["mean"] == 0.0
        and result["moved_later_reuse"]["min"] == 1.0
    )


def test_prompts_start_over_past_the_limit(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    data = _run(
        load, fake, tmp_path, "--conversations", "1", "--turns", "6", "--max-prompt-tokens", "80"
    )
    sessions = [r["session"] for r in data["requests"]]
    assert len(set(sessions)) >= 2 and data["summary"]["failed"] == 0


def test_short_sessions_of_one_client_share_the_system_text(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    """--system shared --new-session-every-turn: every request a new session (its own id), all
    with the same system text; the summary's token tally is the sum of the answers' usage."""
    data = _run(
        load,
        fake,
        tmp_path,
        "--conversations",
        "2",
        "--turns",
        "3",
        "--system",
        "shared",
        "--new-session-every-turn",
    )
    sessions = [r["session"] for r in data["requests"]]
    assert len(sessions) == 6 and len(set(sessions)) == 6
    systems = {json.dumps(seen["body"]["system"]) for seen in fake.seen}
    assert len(systems) == 1
    assert all(len(seen["body"]["messages"]) == 1 for seen in fake.seen)
    tokens = data["summary"]["tokens"]
    assert tokens["all"]["cached"] == sum(r["cache_read_input_tokens"] for r in data["requests"])
    assert tokens["all"]["evaluated"] == sum(r["input_tokens"] for r in data["requests"])
    assert (
        sum(t["evaluated"] for name, t in tokens.items() if name != "all")
        == (tokens["all"]["evaluated"])
    )


def test_the_attribution_header_differs_per_session_not_per_turn(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    """--attribution-header: a first system block as Claude Code 2.1.197 sends it by default,
    whose hash follows the session's first user message: the same for every turn of a session,
    another for every session; the shared system text follows it unchanged."""
    _run(
        load,
        fake,
        tmp_path,
        "--conversations",
        "3",
        "--turns",
        "2",
        "--system",
        "shared",
        "--attribution-header",
    )
    by_session: dict[str, set[str]] = {}
    rest = set()
    for seen in fake.seen:
        blocks = seen["body"]["system"]
        assert blocks[0]["text"].startswith("x-anthropic-billing-header: cc_version=2.1.197.")
        by_session.setdefault(seen["headers"]["X-Claude-Code-Session-Id"], set()).add(
            blocks[0]["text"]
        )
        rest.add(blocks[1]["text"])
    assert len(by_session) == 3 and all(len(h) == 1 for h in by_session.values())
    assert len({next(iter(h)) for h in by_session.values()}) == 3
    assert len(rest) == 1


def test_a_stop_file_ends_the_run(load: ModuleType, fake: FakePool, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    stop.touch()
    data = _run(load, fake, tmp_path, "--turns", "100", "--stop-file", str(stop))
    assert data["summary"]["requests"] == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [("https://8.8.8.8:8443", "not a private address"), ("https://pool.example.org", "is a name")],
)
def test_only_test_hosts_are_reached(load: ModuleType, url: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        load.main(["run", "--url", url, "--turns", "1"])


def test_bounds(load: ModuleType) -> None:
    with pytest.raises(SystemExit, match="--conversations must be"):
        load.main(["run", "--url", "http://127.0.0.1:1", "--conversations", "65"])


def test_compare_prints_both_runs(
    load: ModuleType, fake: FakePool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(load, fake, tmp_path, "--conversations", "2", "--turns", "2", "--label", "affinity")
    _run(load, fake, tmp_path, "--conversations", "2", "--turns", "2", "--label", "other")
    first, second = sorted(tmp_path.glob("run-*.json"))
    capsys.readouterr()
    assert load.main(["compare", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "affinity" in out and "other" in out and "next-turn reuse, mean" in out


@pytest.mark.parametrize(("backends", "conversations"), [(3, 6), (3, 3), (2, 5), (4, 4)])
def test_spread_places_the_conversations_evenly_on_every_backend(
    load: ModuleType, tmp_path: Path, backends: int, conversations: int
) -> None:
    """Six random sessions leave one of three backends empty about one run in four; --spread
    leaves none, whatever the seed."""
    for seed in ("1", "2", "3"):
        fake = FakePool(backends)
        try:
            data = _run(
                load,
                fake,
                tmp_path,
                "--conversations",
                str(conversations),
                "--turns",
                "2",
                "--spread",
                str(backends),
                "--seed",
                seed,
            )
        finally:
            fake.close()
        by_backend = data["summary"]["by_backend"]
        assert sorted(by_backend) == sorted(fake.caches)
        per_conv = {b: n // 2 for b, n in by_backend.items()}
        assert max(per_conv.values()) - min(per_conv.values()) <= 1
        assert data["summary"]["failed"] == 0 and data["summary"]["moves"] == 0
        # the session ids were tried before any message: one probe per candidate
        assert fake.probes >= conversations


def test_spread_fails_before_any_message_when_a_backend_is_missing(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit, match=r"--spread 3: .*is every backend up"):
        _run(load, fake, tmp_path, "--conversations", "3", "--spread", "3")
    assert fake.seen == []


def test_ready_file_once_every_conversation_had_its_first_turn(
    load: ModuleType, fake: FakePool, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    data = _run(
        load, fake, tmp_path, "--conversations", "4", "--turns", "2", "--ready-file", str(ready)
    )
    assert ready.read_text() == "ready\n"
    assert data["summary"]["requests"] == 8
    # not written when a conversation never had a turn (the stop file was there at the start)
    stop, ready2 = tmp_path / "stop", tmp_path / "ready2"
    stop.touch()
    _run(
        load, fake, tmp_path, "--turns", "3", "--stop-file", str(stop), "--ready-file", str(ready2)
    )
    assert not ready2.exists()


def test_turns_after_stop(load: ModuleType, fake: FakePool, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    stop.touch()
    data = _run(
        load,
        fake,
        tmp_path,
        "--conversations",
        "3",
        "--turns",
        "100",
        "--stop-file",
        str(stop),
        "--turns-after-stop",
        "2",
    )
    # each conversation took exactly two turns after the stop file appeared
    assert data["summary"]["requests"] == 6
    assert sorted(r["turn"] for r in data["requests"]) == [1, 1, 1, 2, 2, 2]

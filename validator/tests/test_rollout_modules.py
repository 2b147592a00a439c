"""The rollout's own modules, run as Ansible runs them (a child process with an arguments file):
llamafleet_units_snapshot on a real directory of units and a build link, and llamafleet_cache_gate
against a stand-in for llama-server's /v1/messages on loopback. The stand-in answers with the
`usage` fields the fork's Anthropic endpoint returns (input_tokens, output_tokens,
cache_read_input_tokens) and counts it chooses; it cannot show that the real server's cache reuse
passes the gate: the fleet scenario and testbed/fleet-sim run the gate against real
llama-servers on every rollout."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_llama_pool_modules import run_module

# --- llamafleet_units_snapshot ------------------------------------------------------------------


def test_the_snapshot_reads_the_link_and_the_regular_units_only(tmp_path: Path) -> None:
    units = tmp_path / "system"
    units.mkdir()
    (units / "llama-server-a.service").write_text("[Service]\nExecStart=/a\n")
    (units / "llama-server-b.service").write_text("[Service]\nExecStart=/b\n")
    (units / "other.service").write_text("not ours")
    secret = tmp_path / "secret"
    secret.write_text("root's secret\n")
    # a link planted at a unit's name, a hard link of another file and a FIFO are not taken
    (units / "llama-server-link.service").symlink_to(secret)
    os.link(secret, units / "llama-server-hard.service")
    os.mkfifo(units / "llama-server-fifo.service")
    builds = tmp_path / "builds"
    (builds / "b1").mkdir(parents=True)
    (tmp_path / "current").symlink_to("builds/b1")

    found = run_module(
        tmp_path,
        "llamafleet_units_snapshot",
        {"link": str(tmp_path / "current"), "unit_dir": str(units)},
    )
    assert found.get("failed") is not True, found
    assert found["changed"] is False
    assert [u["source"] for u in found["units"]] == [
        str(units / "llama-server-a.service"),
        str(units / "llama-server-b.service"),
    ]
    assert base64.b64decode(found["units"][0]["content"]) == b"[Service]\nExecStart=/a\n"
    assert sorted(Path(p).name for p in found["ignored"]) == [
        "llama-server-fifo.service",
        "llama-server-hard.service",
        "llama-server-link.service",
    ]
    assert "root's secret" not in json.dumps(found)
    assert found["link"] == {
        "exists": True,
        "islnk": True,
        "lnk_source": str(builds / "b1"),
        "lnk_target": "builds/b1",
    }


def test_the_snapshot_of_a_new_host_is_empty(tmp_path: Path) -> None:
    found = run_module(
        tmp_path,
        "llamafleet_units_snapshot",
        {"link": str(tmp_path / "current"), "unit_dir": str(tmp_path / "none")},
        check=True,
    )
    assert found.get("failed") is not True, found
    assert found["link"] == {"exists": False, "islnk": False}
    assert found["units"] == [] and found["ignored"] == []


def test_the_snapshot_refuses_a_unit_too_large(tmp_path: Path) -> None:
    (tmp_path / "llama-server-a.service").write_text("x" * 200)
    found = run_module(
        tmp_path,
        "llamafleet_units_snapshot",
        {"link": str(tmp_path / "current"), "unit_dir": str(tmp_path), "max_size": 100},
    )
    assert found["failed"] is True
    assert "llama-server-a.service" in found["msg"] and "max_size=100" in found["msg"]


# --- llamafleet_cache_gate ----------------------------------------------------------------------


class StandInMessages:
    """/v1/messages answering each POST with the next of `answers` (status, usage); records the
    requests (path, headers, body)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any] | None]] = []
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.redirect_to = ""
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                stand_in.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                if stand_in.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", stand_in.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, usage = stand_in.answers.pop(0)
                answer: dict[str, Any] = {"type": "message", "content": []}
                if usage is not None:
                    answer["usage"] = usage
                if status != 200:
                    answer = {"type": "error", "error": {"message": "template raised"}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/messages"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def messages() -> Iterator[StandInMessages]:
    stand_in = StandInMessages()
    yield stand_in
    stand_in.close()


FIRST = {"model": "main", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
NEXT = {"model": "main", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}] * 3}
KEY = "sk-instance-key-0123456789"


def _gate(tmp_path: Path, stand_in: StandInMessages, **args: Any) -> dict[str, Any]:
    values = {"url": stand_in.url, "first": FIRST, "next": NEXT, "name": "main"}
    values["headers"] = {"x-api-key": KEY}
    return run_module(tmp_path, "llamafleet_cache_gate", values | args)


def test_the_gate_passes_when_the_next_turn_reads_the_first_from_the_cache(
    tmp_path: Path, messages: StandInMessages
) -> None:
    # 1000 prompt tokens (10 of them already cached) and 8 answered: the server holds 1018
    first = {"input_tokens": 1000, "cache_read_input_tokens": 10, "output_tokens": 8}
    messages.answers = [(200, first), (200, {"input_tokens": 50, "cache_read_input_tokens": 917})]
    found = _gate(tmp_path, messages)
    assert found.get("failed") is not True, found
    assert (found["prefix"], found["read"], found["needed"]) == (1018, 917, 917)
    assert "reused 917 of the first request's 1018 tokens" in found["msg"]
    assert [r[2] for r in messages.requests] == [FIRST, NEXT]
    assert all(r[1].get("x-api-key") == KEY for r in messages.requests)
    # the key reached the instance and is not in the result
    assert KEY not in json.dumps(found)


def test_the_gate_fails_when_the_next_turn_reads_too_little(
    tmp_path: Path, messages: StandInMessages
) -> None:
    first = {"input_tokens": 1000, "cache_read_input_tokens": 10, "output_tokens": 8}
    messages.answers = [(200, first), (200, {"input_tokens": 1050, "cache_read_input_tokens": 916})]
    found = _gate(tmp_path, messages)
    assert found["failed"] is True
    assert found["msg"] == (
        "prompt-cache gate failed on main: the next turn read 916 tokens from the cache; the first"
        " request's prompt and answer, which it starts with, have 1018 (needed 90 %)."
    )
    assert KEY not in json.dumps(found)


def test_the_gate_fails_on_a_request_the_server_refuses(
    tmp_path: Path, messages: StandInMessages
) -> None:
    messages.answers = [(500, None)]
    found = _gate(tmp_path, messages)
    assert found["failed"] is True
    assert found["msg"].startswith("the first request: HTTP 500 from " + messages.url)
    assert "template raised" in found["msg"]
    assert len(messages.requests) == 1  # the next turn is not sent


def test_the_gate_does_not_follow_a_redirect_with_the_key(
    tmp_path: Path, messages: StandInMessages
) -> None:
    """An answer that redirects elsewhere (a compromised or misconfigured listener) gets no
    second request: the instance key goes to the instance only."""
    elsewhere = StandInMessages()
    try:
        messages.redirect_to = elsewhere.url
        found = _gate(tmp_path, messages)
        assert found["failed"] is True
        assert "307" in found["msg"], found["msg"]
        assert elsewhere.requests == []
    finally:
        elsewhere.close()


def test_the_gate_sends_nothing_in_check_mode(tmp_path: Path, messages: StandInMessages) -> None:
    values = {"url": messages.url, "first": FIRST, "next": NEXT, "headers": {"x-api-key": KEY}}
    found = run_module(tmp_path, "llamafleet_cache_gate", values, check=True)
    assert found.get("skipped") is True and found["changed"] is False
    assert messages.requests == []


def test_the_gate_refuses_an_answer_without_usage(
    tmp_path: Path, messages: StandInMessages
) -> None:
    messages.answers = [(200, None)]
    found = _gate(tmp_path, messages)
    assert found["failed"] is True and "has no usage" in found["msg"]


# --- llama_server_services ----------------------------------------------------------------------

#: systemctl as the module calls it: `show --property=LoadState,ActiveState,UnitFileState -- UNIT`
#: printing KEY=VALUE lines, and daemon-reload, enable, start, restart. A stand-in: it keeps the
#: units' states in a JSON file and logs each call; it cannot show systemd itself (the default,
#: pool and fleet scenarios start, restart and check the real units on systemd hosts).
SYSTEMCTL = """#!/usr/bin/env python3
import json, os, sys
path = os.environ["STAND_IN_STATE"]
state = json.load(open(path))
args = sys.argv[1:]
state["calls"].append(" ".join(args))
if args[0] == "show":
    unit = state["units"].get(args[-1])
    if unit is None:
        print("LoadState=not-found\\nActiveState=inactive\\nUnitFileState=")
    else:
        print(f"LoadState=loaded\\nActiveState={unit['active']}\\nUnitFileState={unit['file']}")
elif args[0] == "enable":
    state["units"][args[-1]]["file"] = "enabled"
elif args[0] in ("start", "restart"):
    state["units"][args[-1]]["active"] = "active"
json.dump(state, open(path, "w"))
"""


def _services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, known: dict[str, dict[str, str]], **args: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"units": known, "calls": []}))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_STATE", str(state))
    check = bool(args.pop("check", False))
    found = run_module(tmp_path, "llama_server_services", args, check=check)
    return found, json.loads(state.read_text())


A, B, C = (f"llama-server-{n}.service" for n in "abc")


def test_each_unit_is_enabled_started_and_the_changed_running_ones_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = {
        A: {"active": "active", "file": "enabled"},  # running, its unit changed: restarted
        B: {"active": "inactive", "file": "disabled"},  # new: enabled and started, not restarted
        C: {"active": "active", "file": "enabled"},  # unchanged: left alone
    }
    found, state = _services(
        tmp_path, monkeypatch, units, units=[A, B, C], restart=[A, B], daemon_reload=True
    )
    assert found.get("failed") is not True, found
    assert found["changed"] is True
    assert (found["enabled"], found["started"], found["restarted"]) == ([B], [B], [A])
    acting = [c for c in state["calls"] if not c.startswith("show")]
    assert acting == ["daemon-reload", f"restart -- {A}", f"enable -- {B}", f"start -- {B}"]


def test_a_converged_host_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    units = {A: {"active": "active", "file": "enabled"}}
    found, state = _services(tmp_path, monkeypatch, units, units=[A])
    assert found["changed"] is False and found["restarted"] == []
    assert [c for c in state["calls"] if not c.startswith("show")] == []


def test_check_mode_reports_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = {A: {"active": "active", "file": "enabled"}, B: {"active": "failed", "file": "enabled"}}
    found, state = _services(
        tmp_path, monkeypatch, units, units=[A, B, C], restart=[A], daemon_reload=True, check=True
    )
    assert found["changed"] is True
    assert (found["started"], found["restarted"], found["unknown"]) == ([B], [A], [C])
    assert [c for c in state["calls"] if not c.startswith("show")] == []


def test_a_unit_systemd_does_not_know_or_a_bad_name_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, _ = _services(tmp_path, monkeypatch, {}, units=[A])
    assert found["failed"] is True and f"systemd does not know {A}" in found["msg"]
    found, state = _services(tmp_path, monkeypatch, {}, units=["--now x.service"])
    assert found["failed"] is True and "not a service unit name: --now x.service" in found["msg"]
    assert state["calls"] == []

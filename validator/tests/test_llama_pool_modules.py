"""The llama_pool role's modules, run as Ansible runs them (a child process with an arguments
file): llama_pool_server against a stand-in for HAProxy's runtime API on a Unix socket (HAProxy
2.6's answers: the version line and headers of ``show servers state``, the CSV of ``show stat``,
an empty line for a command done, ``No such server.``; written from HAProxy 2.6's documentation,
it cannot show a change of format in another HAProxy version: the pool scenario runs both modules
against the real HAProxy), and llama_pool_backend_idle against a stand-in llama-server that serves
the fork's own ``/metrics``, ``/slots`` and 401 answers, captured by tools/capture_endpoints.py."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "plugins" / "modules"

#: HAProxy 2.6.12's header lines (show servers state, show stat)
STATE_HEADER = (
    "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
    "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
    "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl "
    "srv_check_port srv_check_addr srv_agent_addr srv_agent_port"
)
STAT_CSV = (
    "pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,"
    "status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,"
    "type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,"
    "hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,"
    "comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,"
    "agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,"
    "agent_fall,agent_health,addr,cookie,mode,algo"
)
STAT_FIELDS = STAT_CSV.split(",")


class FakeHAProxy:
    """HAProxy's runtime API for one backend section ``llama``: servers with an administrative
    state (bits), an operational state, current sessions and a status; ``tick`` runs before each
    ``show stat`` (requests finishing, a health check passing)."""

    def __init__(self, path: Path, servers: dict[str, dict[str, Any]]) -> None:
        self.path = path
        self.servers = servers
        self.commands: list[str] = []
        self.tick: Callable[[FakeHAProxy], None] = lambda fake: None
        self.refuse = ""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                command = data.decode().strip()
                self.commands.append(command)
                conn.sendall(self.answer(command).encode())

    def _status(self, s: dict[str, Any]) -> str:
        if s["admin"] & 0x01:
            return "MAINT"
        if s["op"] != 2:
            return "DOWN"
        return "DRAIN" if s["admin"] & 0x08 else "UP"

    def answer(self, command: str) -> str:
        words = command.split()
        if command == "show servers state llama":
            rows = [
                f"3 llama {i} {name} 10.0.0.{i} {s['op']} {s['admin']} 100 100 5 15 3 3 6 0 0 1"
                " - 8080 - 1 0 - - 0"
                for i, (name, s) in enumerate(self.servers.items(), start=1)
            ]
            return "1\n" + STATE_HEADER + "\n" + "".join(r + "\n" for r in rows) + "\n"
        if command.startswith("show servers state"):
            return "Can't find backend.\n\n"
        if command == "show stat":
            self.tick(self)
            lines = ["# " + ",".join(STAT_FIELDS)]
            for name, s in self.servers.items():
                row = dict.fromkeys(STAT_FIELDS, "")
                row.update(
                    pxname="llama",
                    svname=name,
                    scur=str(s["scur"]),
                    qcur=str(s.get("qcur", 0)),
                    status=self._status(s),
                    check_desc=s.get("check", "Layer7 check passed"),
                )
                lines.append(",".join(row[f] for f in STAT_FIELDS))
            return "\n".join(lines) + "\n\n"
        if len(words) == 5 and words[:2] == ["set", "server"] and words[3] == "state":
            if self.refuse:
                return self.refuse + "\n\n"
            name = words[2].split("/", 1)[1]
            if name not in self.servers:
                return "No such server.\n\n"
            s = self.servers[name]
            if words[4] == "drain":
                s["admin"] = (s["admin"] & ~0x01) | 0x08
            elif words[4] == "ready":
                s["admin"] &= ~(0x01 | 0x08)
            elif words[4] == "maint":
                s["admin"] |= 0x01
            return "\n"
        return "Unknown command.\n\n"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[FakeHAProxy]:
    fake = FakeHAProxy(
        tmp_path / "admin.sock",
        {"gpu1": {"admin": 0, "op": 2, "scur": 0}, "gpu2": {"admin": 0, "op": 2, "scur": 0}},
    )
    yield fake
    fake.close()


def run_module(
    tmp_path: Path, name: str, args: dict[str, Any], check: bool = False
) -> dict[str, Any]:
    """The module as Ansible runs it: a child process reading its arguments file."""
    args = dict(args, _ansible_check_mode=check)
    args_file = tmp_path / f"args-{len(list(tmp_path.glob('args-*')))}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    done = subprocess.run(
        [sys.executable, str(LIBRARY / f"{name}.py"), str(args_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    start = done.stdout.find("{")
    assert start >= 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout[start:])
    return result


def _server(tmp_path: Path, fake: FakeHAProxy, **args: Any) -> dict[str, Any]:
    values = {"socket": str(fake.path), "server": "gpu1", "interval": 0.05, "timeout": 5}
    values.update(args)
    return run_module(tmp_path, "llama_pool_server", values)


# --- llama_pool_server -------------------------------------------------------------------------


def test_drain_sets_the_state_and_waits_until_nothing_is_in_flight(
    tmp_path: Path, haproxy: FakeHAProxy
) -> None:
    haproxy.servers["gpu1"]["scur"] = 3

    def finish_one(fake: FakeHAProxy) -> None:
        s = fake.servers["gpu1"]
        if s["admin"] & 0x08 and s["scur"] > 0:
            s["scur"] -= 1

    haproxy.tick = finish_one
    result = _server(tmp_path, haproxy, state="drain", wait="idle")
    assert result["changed"] and result["found"] and not result.get("failed")
    assert (result["admin_before"], result["admin"], result["scur"], result["status"]) == (
        "ready",
        "drain",
        0,
        "DRAIN",
    )
    assert "set server llama/gpu1 state drain" in haproxy.commands
    # the other server was left alone
    assert haproxy.servers["gpu2"]["admin"] == 0
    again = _server(tmp_path, haproxy, state="drain", wait="idle")
    assert not again["changed"] and again["admin_before"] == "drain"


def test_a_drain_that_does_not_finish_fails_and_stays_drained(
    tmp_path: Path, haproxy: FakeHAProxy
) -> None:
    haproxy.servers["gpu1"]["scur"] = 2
    result = _server(tmp_path, haproxy, state="drain", wait="idle", timeout=1)
    assert result["failed"]
    assert "llama/gpu1" in result["msg"] and "still 2 request(s) in flight" in result["msg"]
    assert "stays in drain" in result["msg"]
    assert haproxy.servers["gpu1"]["admin"] & 0x08


def test_ready_waits_until_the_health_check_passes(tmp_path: Path, haproxy: FakeHAProxy) -> None:
    haproxy.servers["gpu1"].update(admin=0x08, op=0, check="Layer7 wrong status, code: 503")
    looks = {"n": 0}

    def come_up(fake: FakeHAProxy) -> None:
        looks["n"] += 1
        if looks["n"] >= 3:
            fake.servers["gpu1"].update(op=2, check="Layer7 check passed")

    haproxy.tick = come_up
    result = _server(tmp_path, haproxy, state="ready", wait="up")
    assert result["changed"] and result["admin"] == "ready" and result["status"] == "UP"
    assert looks["n"] >= 3


def test_ready_that_never_comes_up_names_the_last_check(
    tmp_path: Path, haproxy: FakeHAProxy
) -> None:
    haproxy.servers["gpu1"].update(admin=0x08, op=0, check="Layer4 connection problem")
    result = _server(tmp_path, haproxy, state="ready", wait="up", timeout=1)
    assert (
        result["failed"]
        and "not UP" in result["msg"]
        and "Layer4 connection problem" in result["msg"]
    )


def test_check_mode_sends_no_command_that_changes(tmp_path: Path, haproxy: FakeHAProxy) -> None:
    values = {"socket": str(haproxy.path), "server": "gpu1", "state": "maint", "wait": "idle"}
    result = run_module(tmp_path, "llama_pool_server", values, check=True)
    assert result["changed"] and result["admin"] == "maint"
    assert not [c for c in haproxy.commands if c.startswith("set ")]
    assert haproxy.servers["gpu1"]["admin"] == 0


def test_maint_and_back(tmp_path: Path, haproxy: FakeHAProxy) -> None:
    assert _server(tmp_path, haproxy, state="maint")["admin"] == "maint"
    assert haproxy.servers["gpu1"]["admin"] & 0x01
    result = _server(tmp_path, haproxy, state="ready")
    assert result["admin_before"] == "maint" and result["admin"] == "ready"


def test_nothing_to_drain_without_haproxy_or_the_server(
    tmp_path: Path, haproxy: FakeHAProxy
) -> None:
    gone = _server(tmp_path, haproxy, socket=str(tmp_path / "none.sock"), state="drain")
    assert not gone["changed"] and not gone["found"] and not gone.get("failed")
    strict = _server(
        tmp_path, haproxy, socket=str(tmp_path / "none.sock"), state="drain", missing_ok=False
    )
    assert strict["failed"] and "no HAProxy runtime API" in strict["msg"]
    other = _server(tmp_path, haproxy, server="gpu9", state="drain")
    assert not other["found"] and not other.get("failed")
    section = _server(tmp_path, haproxy, proxy="elsewhere", state="drain")
    assert not section["found"]


def test_a_socket_left_by_a_stopped_haproxy(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # the file stays, nobody listens
    result = run_module(
        tmp_path, "llama_pool_server", {"socket": str(stale), "server": "gpu1", "state": "drain"}
    )
    assert not result["found"] and "not running" in result["msg"] and not result.get("failed")


def test_a_refused_command_fails_with_haproxys_answer(tmp_path: Path, haproxy: FakeHAProxy) -> None:
    haproxy.refuse = "Permission denied"
    result = _server(tmp_path, haproxy, state="drain")
    assert (
        result["failed"]
        and "refused to set llama/gpu1 to drain: Permission denied" in result["msg"]
    )


# --- llama_pool_backend_idle -------------------------------------------------------------------

# What the TurboQuant fork's llama-server (build 9079) answers, captured from the real server by
# tools/capture_endpoints.py (fixtures/endpoints): /metrics while a request was being answered,
# /slots idle and busy, and the refusal of a wrong key. The stand-in below serves these texts; only
# the numbers of requests_processing / requests_deferred are set per test on the real lines.
ENDPOINTS = Path(__file__).parent / "fixtures" / "endpoints"
METRICS_REAL = (ENDPOINTS / "fork-b9079.metrics.busy.txt").read_text()
SLOT_IDLE, SLOT_BUSY = (
    json.loads((ENDPOINTS / "fork-b9079.slots.busy.json").read_text())[i] for i in (0, 1)
)
UNAUTHORIZED = json.loads((ENDPOINTS / "fork-b9079.unauthorized.json").read_text())


def _metrics(processing: int, deferred: int) -> str:
    text = re.sub(
        r"(?m)^llamacpp:requests_processing .*$",
        f"llamacpp:requests_processing {processing}",
        METRICS_REAL,
    )
    return re.sub(
        r"(?m)^llamacpp:requests_deferred .*$", f"llamacpp:requests_deferred {deferred}", text
    )


def _slots(processing: int, total: int = 4) -> list[dict[str, Any]]:
    return [dict(SLOT_BUSY if i < processing else SLOT_IDLE, id=i) for i in range(total)]


def test_the_captured_endpoints_are_what_the_module_reads() -> None:
    """The real captures hold what the drain module looks for (else the stand-in proves nothing)."""
    assert re.search(r"(?m)^llamacpp:requests_processing 1$", METRICS_REAL)
    assert re.search(r"(?m)^llamacpp:requests_deferred 0$", METRICS_REAL)
    assert SLOT_BUSY["is_processing"] is True and SLOT_IDLE["is_processing"] is False
    assert UNAUTHORIZED["status"] == 401


class FakeLlama:
    """llama-server's /metrics and /slots: ``busy`` is a list of (processing, deferred) answered in
    turn (the last one repeats); ``metrics``/``slots`` False answer 501 as llama-server does without
    --metrics or with --no-slots; ``key`` is the key it accepts."""

    def __init__(self) -> None:
        self.busy: list[tuple[int, int]] = [(0, 0)]
        self.metrics = True
        self.slots = True
        self.key = "instance-key-0123456789abcdef"
        self.seen_auth: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.seen_auth.append(self.headers.get("Authorization", ""))
                if self.headers.get("Authorization") != f"Bearer {fake.key}":
                    return self._send(UNAUTHORIZED["status"], UNAUTHORIZED["body"])
                processing, deferred = fake.busy[0] if len(fake.busy) == 1 else fake.busy.pop(0)
                if self.path == "/metrics":
                    if not fake.metrics:
                        return self._send(
                            501,
                            '{"error":{"message":"This server does not support metrics."}}',
                        )
                    return self._send(200, _metrics(processing, deferred))
                if self.path == "/slots":
                    if not fake.slots:
                        return self._send(
                            501,
                            '{"error":{"message":"This server does not support slots endpoint."}}',
                        )
                    return self._send(200, json.dumps(_slots(processing)))
                return self._send(404, "{}")

            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def llama(tmp_path: Path) -> Iterator[FakeLlama]:
    fake = FakeLlama()
    yield fake
    fake.close()


def _idle(tmp_path: Path, llama: FakeLlama, **args: Any) -> dict[str, Any]:
    key_file = tmp_path / "main.key"
    if not key_file.exists():
        key_file.write_text(llama.key + "\n")
        os.chmod(key_file, 0o600)
    values: dict[str, Any] = {
        "url": llama.url,
        "key_file": str(key_file),
        "interval": 0.05,
        "timeout": 5,
    }
    values.update(args)
    return run_module(tmp_path, "llama_pool_backend_idle", values)


def test_idle_waits_until_metrics_show_no_request(tmp_path: Path, llama: FakeLlama) -> None:
    llama.busy = [(1, 2), (1, 0), (0, 0)]
    result = _idle(tmp_path, llama)
    assert not result.get("failed") and result["serving"] and result["source"] == "metrics"
    assert (result["processing"], result["deferred"]) == (0, 0)
    # the key came from the file on the host, sent as llama-server reads it
    assert set(llama.seen_auth) == {f"Bearer {llama.key}"} and len(llama.seen_auth) >= 3


def test_idle_reads_slots_without_metrics(tmp_path: Path, llama: FakeLlama) -> None:
    llama.metrics = False
    llama.busy = [(2, 0), (0, 0)]
    result = _idle(tmp_path, llama)
    assert result["source"] == "slots" and result["processing"] == 0


def test_idle_needs_metrics_or_slots(tmp_path: Path, llama: FakeLlama) -> None:
    llama.metrics = llama.slots = False
    result = _idle(tmp_path, llama)
    assert result["failed"] and "serves neither /metrics nor /slots" in result["msg"]


def test_a_busy_instance_fails_after_the_timeout(tmp_path: Path, llama: FakeLlama) -> None:
    llama.busy = [(1, 3)]
    result = _idle(tmp_path, llama, timeout=1)
    assert (
        result["failed"]
        and "still processes 1 request(s) with 3 waiting (/metrics)" in result["msg"]
    )


def test_a_refused_key_fails_naming_the_unread_key_file(tmp_path: Path, llama: FakeLlama) -> None:
    result = _idle(tmp_path, llama, key_file=str(tmp_path / "missing.key"))
    assert (
        result["failed"]
        and "the key was refused" in result["msg"]
        and "missing.key" in result["msg"]
    )


def test_an_instance_that_does_not_answer_has_nothing_in_flight(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    result = run_module(
        tmp_path, "llama_pool_backend_idle", {"url": f"http://127.0.0.1:{port}", "timeout": 5}
    )
    assert not result.get("failed") and result["serving"] is False


def test_an_instance_never_set_up_has_nothing_in_flight(tmp_path: Path) -> None:
    """A first rollout drains a host the llama_server role has not set up yet: no CA file, no key
    file, nothing listening. That is "nothing in flight", not a failure (found by the pool scenario,
    whose first rollout runs after the pool exists)."""
    result = run_module(
        tmp_path,
        "llama_pool_backend_idle",
        {
            "url": "https://127.0.0.1:9",
            "ca_path": str(tmp_path / "no-ca.crt"),
            "key_file": str(tmp_path / "no.key"),
            "timeout": 5,
        },
    )
    assert not result.get("failed"), result
    assert result["serving"] is False and "does not exist yet" in result["msg"]


def test_idle_in_check_mode_returns_at_once(tmp_path: Path, llama: FakeLlama) -> None:
    llama.busy = [(1, 0)]
    result = run_module(
        tmp_path, "llama_pool_backend_idle", {"url": llama.url, "timeout": 5}, check=True
    )
    assert not result.get("failed") and llama.seen_auth == []

#!/usr/bin/env python3
"""Capture a llama-server build's log of requests that share a prompt prefix, as the journal shows
it, with the server's own ``/metrics`` and each request's cache figures: the fixtures of the
monitoring role's mtail program (tests/test_monitoring_mtail.py).

Usage:
  capture_server_log.py BINARY MODEL [--name fork] [--out-dir DIR] [--port 18090]
                        [--unit llama-server-main.service] [--hostname lf-server]

Starts ``BINARY -m MODEL --metrics --api-key K -np 2 -c 4096 --host 127.0.0.1 --port PORT``
(environment ``LC_ALL=C`` only, the default log verbosity, as the llama_server role runs it), waits
for ``/health``, then sends ``/v1/chat/completions`` requests: a long shared system text with
different questions (the second and later reuse the prefix), two at once on the two slots (their
log lines interleave), one repeated. Then it reads ``/metrics`` and stops the server. Writes, into
``tests/fixtures/monitoring/`` by default, ``<NAME>-b<N>``:

- ``.server.log``: the server's stderr, byte for byte;
- ``.journal.txt``: that log as ``journalctl -o with-unit`` prints it for the unit: each line made
  a journal entry of UNIT (``_SYSTEMD_UNIT``, the server's pid, HOSTNAME), written into a journal
  file by systemd-journal-remote and printed by the real journalctl (both needed; Debian package
  systemd-journal-remote);
- ``.metrics.txt``: ``/metrics`` after the last request;
- ``.requests.json``: per request, its ``timings.cache_n`` (served from the cache) and
  ``timings.prompt_n`` (evaluated).

``<N>`` comes from ``BINARY --version``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# the same start-up checks as the endpoint capture (this directory is on sys.path when run)
from capture_endpoints import build_number, wait_health

KEY = "capture-key-0123456789abcdef"
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "monitoring"
JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")

SHARED = (
    "You are a careful assistant for a team that runs language models on its own servers. "
    "Answer briefly and say when you do not know. "
) * 12


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {KEY}"})
    resp = conn.getresponse()
    return resp.status, resp.read()


def _chat(port: int, system: str, question: str) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
        "max_tokens": 8,
    }
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        sys.exit(f"request failed: HTTP {resp.status} {data[:200]!r}")
    answer: dict[str, Any] = json.loads(data)
    timings = answer.get("timings") or {}
    return {
        "question": question,
        "cache_n": int(timings.get("cache_n", 0)),
        "prompt_n": int(timings.get("prompt_n", 0)),
    }


def _requests(port: int) -> list[dict[str, Any]]:
    """The requests, in order: cold, two that reuse the shared prefix, two at once (one per slot,
    their lines interleave in the log), and the first one again."""
    done: list[dict[str, Any]] = []
    done.append(_chat(port, SHARED, "What is a prompt cache?"))
    done.append(_chat(port, SHARED, "Why does a changed system text defeat it?"))
    done.append(_chat(port, SHARED, "How many slots does a server need?"))
    pair: list[dict[str, Any]] = [{}, {}]

    def one(i: int, system: str, question: str) -> None:
        pair[i] = _chat(port, system, question)

    threads = [
        threading.Thread(target=one, args=(0, SHARED, "Name one reason to use TLS."), daemon=True),
        threading.Thread(
            target=one, args=(1, "Another system text. " * 30, "Say hello."), daemon=True
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    done.extend(pair)
    done.append(_chat(port, SHARED, "What is a prompt cache?"))
    return done


def journal_text(log: bytes, unit: str, hostname: str, pid: int) -> bytes:
    """The log's lines as ``journalctl -o with-unit`` prints them for ``unit``: each line an
    entry (as journald stores a service's stderr), through a real journal file."""
    if not JOURNAL_REMOTE.is_file() or shutil.which("journalctl") is None:
        sys.exit(
            "systemd-journal-remote and journalctl are needed to render the journal "
            "(apt-get install systemd-journal-remote)"
        )
    start = int(time.time() * 1e6)
    entries = []
    for n, line in enumerate(log.decode("utf-8", "replace").splitlines()):
        fields = {
            "__REALTIME_TIMESTAMP": str(start + n),
            "__MONOTONIC_TIMESTAMP": str(n + 1),
            "_BOOT_ID": "6c6c616d61666c656574626f6f746964",
            "_HOSTNAME": hostname,
            "_SYSTEMD_UNIT": unit,
            "SYSLOG_IDENTIFIER": "llama-server",
            "_COMM": "llama-server",
            "_PID": str(pid),
            "_TRANSPORT": "stdout",
            "PRIORITY": "6",
            "MESSAGE": line,
        }
        entries.append("".join(f"{k}={v}\n" for k, v in fields.items()))
    with tempfile.TemporaryDirectory() as tmp:
        jfile = Path(tmp) / "capture.journal"
        subprocess.run(
            [str(JOURNAL_REMOTE), f"--output={jfile}", "-"],
            input="\n".join(entries).encode() + b"\n",
            check=True,
            capture_output=True,
        )
        out = subprocess.run(
            ["journalctl", f"--file={jfile}", "--output=with-unit", "--no-pager", "--utc"],
            check=True,
            capture_output=True,
            env={"LC_ALL": "C", "SYSTEMD_COLORS": "0", "PATH": "/usr/bin:/bin"},
        )
    return out.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--name", default="fork")
    ap.add_argument("--out-dir", type=Path, default=OUT)
    ap.add_argument("--port", type=int, default=18090)
    ap.add_argument("--unit", default="llama-server-main.service")
    ap.add_argument("--hostname", default="lf-server")
    a = ap.parse_args()
    stem = f"{a.name}-b{build_number(a.binary)}"
    argv = [
        a.binary,
        "-m",
        a.model,
        "--metrics",
        "--api-key",
        KEY,
        "-np",
        "2",
        "-c",
        "4096",
        "--host",
        "127.0.0.1",
        "--port",
        str(a.port),
    ]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={"LC_ALL": "C"})
        try:
            wait_health(a.port, proc)
            done = _requests(a.port)
            metrics = _get(a.port, "/metrics")[1]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        err.seek(0)
        log = err.read()
    files = {
        "server.log": log,
        "journal.txt": journal_text(log, a.unit, a.hostname, proc.pid),
        "metrics.txt": metrics,
        "requests.json": (json.dumps(done, indent=1) + "\n").encode(),
    }
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for suffix, data in files.items():
        (a.out_dir / f"{stem}.{suffix}").write_bytes(data)
        print(a.out_dir / f"{stem}.{suffix}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

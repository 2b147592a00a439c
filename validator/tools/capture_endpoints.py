#!/usr/bin/env python3
"""Capture a llama-server build's ``/metrics`` and ``/slots`` answers as test fixtures.

Usage:
  capture_endpoints.py BINARY MODEL [--name fork] [--out-dir DIR] [--port 18089]

Starts ``BINARY -m MODEL --metrics --api-key K -np 2 --host 127.0.0.1 --port PORT`` (environment
``LC_ALL=C`` only), waits for ``/health``, then captures, with the key:

- ``<NAME>-b<N>.metrics.idle.txt`` and ``<NAME>-b<N>.slots.idle.json``: nothing in flight;
- ``<NAME>-b<N>.metrics.busy.txt`` and ``<NAME>-b<N>.slots.busy.json``: while one streamed
  ``/v1/messages`` request is being answered (read after its first event);
- ``<NAME>-b<N>.unauthorized.json``: ``/metrics`` without the key (status and body),

byte for byte, ``<N>`` from ``BINARY --version``. The tests of the pool's drain module serve these
texts from a local stand-in for llama-server, so the module parses what the real server says.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import sys
import time
from pathlib import Path

KEY = "capture-key-0123456789abcdef"
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "endpoints"


def _get(port: int, path: str, key: str | None = KEY) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
    resp = conn.getresponse()
    return resp.status, resp.read()


def wait_health(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode}")
        try:
            if _get(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("llama-server did not answer /health in time")


def build_number(binary: str) -> str:
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False, env={"LC_ALL": "C"}
    )
    m = re.search(r"version: (\d+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"no build number in {binary} --version")
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--name", default="fork")
    ap.add_argument("--out-dir", type=Path, default=OUT)
    ap.add_argument("--port", type=int, default=18089)
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
        "-n",
        "4000",
        "--ignore-eos",
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"LC_ALL": "C"}
    )
    files: dict[str, bytes] = {}
    try:
        wait_health(a.port, proc)
        files["metrics.idle.txt"] = _get(a.port, "/metrics")[1]
        files["slots.idle.json"] = _get(a.port, "/slots")[1]
        status, body = _get(a.port, "/metrics", key=None)
        files["unauthorized.json"] = json.dumps({"status": status, "body": body.decode()}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
        req = {
            "model": "m",
            "max_tokens": 4000,
            "stream": True,
            "messages": [{"role": "user", "content": "Count to a thousand."}],
        }
        conn.request(
            "POST",
            "/v1/messages",
            body=json.dumps(req),
            headers={"x-api-key": KEY, "content-type": "application/json"},
        )
        resp = conn.getresponse()
        resp.readline()  # the first event: the request is being answered
        files["metrics.busy.txt"] = _get(a.port, "/metrics")[1]
        files["slots.busy.json"] = _get(a.port, "/slots")[1]
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for suffix, data in files.items():
        (a.out_dir / f"{stem}.{suffix}").write_bytes(data)
        print(a.out_dir / f"{stem}.{suffix}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

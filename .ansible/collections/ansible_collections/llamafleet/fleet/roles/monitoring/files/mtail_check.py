#!/usr/bin/python3
"""Check the mtail pipeline of a llama-server host: journal -> journalctl -> mtail -> /metrics.

Usage: mtail_check.py PORT [--timeout SECONDS] [--writer COMMAND...]

Reads mtail's ``mtail_lines_total`` from http://127.0.0.1:PORT/metrics, then writes a check line
into the journal under the identifier the unit follows (``systemd-cat --identifier=llama-server``)
once a second until mtail has counted more lines than before, or the timeout passes. A line is
written again each second because the unit's journalctl starts at the journal's end
(``--lines=0``) and may not be following yet when mtail already answers. The line names itself;
the mtail program counts no request from it.

Exit 0 when mtail counted a line; 1 with the reason on stderr when it did not. ``--writer``
replaces the journal writer (the tests feed mtail's standard input instead); the check line is
appended as its last argument.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import urllib.request

LINE = "llamafleet monitoring: mtail pipeline check (not a request)"
WRITER = ["systemd-cat", "--identifier=llama-server", "--priority=debug", "echo"]
_LINES = re.compile(r"^mtail_lines_total(?:\{[^}]*\})? +([0-9.eE+-]+)$", re.MULTILINE)


def lines_read(exposition: str) -> float:
    """mtail_lines_total of an exposition text (0 when absent)."""
    return sum(float(v) for v in _LINES.findall(exposition))


def _metrics(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None


def check(port: int, timeout: float, writer: list[str]) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout
    before = None
    while before is None:
        before = _metrics(port)
        if before is None:
            if time.monotonic() > deadline:
                return (
                    False,
                    f"mtail's exporter did not answer on port {port} in {timeout:g} s",
                )
            time.sleep(0.5)
    start = lines_read(before)
    while time.monotonic() < deadline:
        subprocess.run([*writer, LINE], check=True, timeout=30)
        time.sleep(1)
        now = _metrics(port)
        if now is not None and lines_read(now) > start:
            return (
                True,
                f"mtail read {lines_read(now) - start:g} new line(s) from the journal",
            )
    return False, (
        f"mtail answers on port {port} but read no line of the journal in {timeout:g} s "
        f"(mtail_lines_total stayed at {start:g}): see `journalctl -u llamafleet-mtail`; "
        "`sudo -u mtail journalctl -t llama-server -n 5` must print the instances' lines, and the "
        "unit's journalctl --follow must see new ones"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--writer", nargs=argparse.REMAINDER, default=None)
    args = parser.parse_args(argv)
    ok, msg = check(args.port, args.timeout, args.writer or WRITER)
    print(msg, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

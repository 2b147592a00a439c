#!/usr/bin/env python3
"""Where a run's CPU goes, per program, from the kernel's process accounting (acct(2)).

    cpu-account.py on FILE      the kernel appends a record for every process that ends, on this
                                machine and in its test hosts (containers share the kernel), to FILE
    cpu-account.py off          stop accounting
    cpu-account.py report FILE [--top N] [--json]
                                CPU seconds (user + system) per command name, largest first

Needs root for on/off (CAP_SYS_PACCT); report reads any FILE. A record is written when a process
ends, so one still running (a llama-server, a test host's systemd) is in FILE only once it has
ended: switch accounting off after the run. The kernel samples the times at its tick: a sum over
thousands of processes is sound, one short process's figure is approximate. Each record holds
the process's own CPU time, not its children's, and the command name as the kernel keeps it (15
characters: `ansible-playboo`).
`make test` on two cores, for example: the test hosts' `python3` is where Ansible runs each module
on a host, `ansible-playboo` the controller and its per-task worker processes (docs/scale.md).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

#: struct acct_v3 (linux/acct.h), 64 bytes: flag, version, tty, exitcode, uid, gid, pid, ppid,
#: btime, etime (float), utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
_RECORD = struct.Struct("<BBHIIIIIIf8H16s")
_VERSION = 3
#: comp_t times count AHZ ticks (100 a second on Linux)
_AHZ = 100


@dataclass(frozen=True)
class Record:
    comm: str
    pid: int
    ppid: int
    start: int  # seconds since the epoch
    elapsed: float  # seconds
    cpu: float  # user + system seconds


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def parse(data: bytes) -> Iterator[Record]:
    """The records of an acct v3 file; fails on a record of another version."""
    if len(data) % _RECORD.size:
        raise ValueError(f"{len(data)} bytes: not a whole number of {_RECORD.size}-byte records")
    for off in range(0, len(data), _RECORD.size):
        f = _RECORD.unpack_from(data, off)
        if f[1] & 0x0F != _VERSION:
            raise ValueError(f"record at byte {off}: version {f[1] & 0x0F}, not {_VERSION}")
        comm = f[18].split(b"\0", 1)[0].decode("utf-8", "replace")
        cpu = (_comp(f[10]) + _comp(f[11])) / _AHZ
        yield Record(comm=comm, pid=f[6], ppid=f[7], start=f[8], elapsed=f[9] / _AHZ, cpu=cpu)


def by_command(records: Iterator[Record]) -> list[tuple[str, float, int]]:
    """(command, CPU seconds, processes), largest CPU first."""
    cpu: dict[str, float] = {}
    count: dict[str, int] = {}
    for r in records:
        cpu[r.comm] = cpu.get(r.comm, 0.0) + r.cpu
        count[r.comm] = count.get(r.comm, 0) + 1
    return sorted(((c, cpu[c], count[c]) for c in cpu), key=lambda t: (-t[1], t[0]))


def _acct(path: str | None) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    arg = os.fsencode(path) if path is not None else None
    if libc.acct(arg) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"cpu-account: acct({path!r}): {os.strerror(err)} (needs root)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    on = sub.add_parser("on", help="start accounting into FILE (created, or appended to)")
    on.add_argument("file")
    sub.add_parser("off", help="stop accounting")
    rep = sub.add_parser("report", help="CPU seconds per command name")
    rep.add_argument("file")
    rep.add_argument("--top", type=int, default=25)
    rep.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.cmd == "on":
        with open(args.file, "ab"):
            pass  # acct(2) needs an existing file
        _acct(os.path.abspath(args.file))
        return 0
    if args.cmd == "off":
        _acct(None)
        return 0
    with open(args.file, "rb") as fh:
        data = fh.read()
    try:
        rows = by_command(parse(data))
    except ValueError as exc:
        print(f"cpu-account: {args.file}: {exc}", file=sys.stderr)
        return 2
    total = sum(r[1] for r in rows)
    if args.json:
        out = [{"command": c, "cpu_s": round(s, 2), "processes": n} for c, s, n in rows]
        print(json.dumps({"total_cpu_s": round(total, 2), "commands": out}))
        return 0
    print(f"{total:,.0f} CPU seconds in {sum(r[2] for r in rows):,} processes")
    for comm, secs, n in rows[: args.top]:
        share = 100 * secs / total if total else 0.0
        print(f"{secs:10.1f} {share:5.1f} % {n:8,} {comm}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

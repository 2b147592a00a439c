#!/usr/bin/env python3
"""Benchmark ``llamafleet check``: prints two figures (a script that prints, not a test).

1. In-process: N generated host configurations (a server script, a systemd unit and a Claude Code
   settings.json each) checked with the engine, in rounds; configurations per second per core
   (CPU time of this process), the median and the best round.
2. One ``llamafleet check`` process on a 3-file configuration: the user+sys CPU time of the child
   (``getrusage(RUSAGE_CHILDREN)``), median of 20 runs. The package is byte-compiled first, as
   ``pip install`` leaves it.

    python tools/bench.py [N] [--rounds R] [--runs K]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import llamafleet
from llamafleet.engine import Inputs, add_file, run
from llamafleet.facts import Facts

#: The targets of issue 17 (part 6).
TARGET_CONFIGS_PER_S = 6000
TARGET_PROCESS_MS = 60

FLAG_CHOICES = [
    ["-c", "131072", "204800", "65536", "32768"],
    ["-np", "1", "2", "4"],
    ["-ctk", "q8_0", "turbo3", "f16"],
    ["-ctv", "turbo3", "q8_0", "q4_0"],
    ["--cache-ram", "0", "8192", "-1"],
    ["-fa", "on", "off", "auto"],
    ["-ngl", "99", "40"],
    ["--n-cpu-moe", "0", "12"],
    ["-b", "2048", "4096"],
    ["-ub", "512", "4096"],
    ["--host", "127.0.0.1", "0.0.0.0"],
    ["-t", "8", "16", "32"],
]


def host_config(rng: random.Random, i: int) -> dict[str, str]:
    flags = []
    for name, *values in FLAG_CHOICES:
        if rng.random() < 0.8:
            flags += [name, rng.choice(values)]
    script = (
        "#!/bin/sh\nexec llama-server -m /srv/models/q.gguf \\\n  "
        + " \\\n  ".join(" ".join(flags[j : j + 2]) for j in range(0, len(flags), 2))
        + "\n"
    )
    unit = (
        f"[Unit]\nDescription=llama-server {i}\n[Service]\nUser=llama\nRestart=on-failure\n"
        f"ExecStart=/opt/llama.cpp/current/bin/llama-server {' '.join(flags)} --mlock\n"
    )
    env = {
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{8080 + rng.randint(0, 1)}",
        "ANTHROPIC_AUTH_TOKEN": "k",
    }
    if rng.random() < 0.5:
        env["CLAUDE_CODE_ATTRIBUTION_HEADER"] = "0"
    settings = json.dumps({"env": env, "includeGitInstructions": rng.random() < 0.5})
    return {"run.sh": script, "llama.service": unit, "settings.json": settings}


def in_process(n: int, rounds: int) -> tuple[list[float], int]:
    """Configurations per second per core of each round, and the findings of one round."""
    rng = random.Random(42)
    configs = [host_config(rng, i) for i in range(n)]
    facts = Facts(cpu_cores=16)
    rates: list[float] = []
    findings = 0
    for _ in range(rounds):
        findings = 0
        cpu0 = time.process_time()
        for files in configs:
            inputs = Inputs()
            for name, text in files.items():
                add_file(inputs, f"<bench>/{name}", text)
            findings += len(run(inputs, facts).findings)
        rates.append(n / (time.process_time() - cpu0))
    return rates, findings


def _command() -> list[str]:
    """How a user runs it: the console script next to this Python, else the same entry point."""
    script = os.path.join(os.path.dirname(sys.executable), "llamafleet")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-c", "from llamafleet.cli import main; raise SystemExit(main())"]


def one_process(runs: int) -> list[float]:
    """CPU ms (user+sys) of each `llamafleet check` run on one 3-file configuration."""
    compileall.compile_dir(os.path.dirname(llamafleet.__file__), quiet=1)
    files = host_config(random.Random(7), 0)
    times: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, text in files.items():
            path = os.path.join(d, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            paths.append(path)
        cmd = [*_command(), "check", *paths]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False, cwd=d)  # warm the page cache
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False, cwd=d)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            times.append(cpu * 1000)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("n", nargs="?", type=int, default=1000, help="configurations per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=20, help="llamafleet check processes")
    args = p.parse_args()
    rates, findings = in_process(args.n, args.rounds)
    print(
        f"in-process: {args.n} host configs (3 files each) per round, {args.rounds} rounds, "
        f"{findings} findings a round: median {statistics.median(rates):.0f}, best "
        f"{max(rates):.0f} configs/s per core (CPU time; target >= {TARGET_CONFIGS_PER_S})"
    )
    times = one_process(args.runs)
    print(
        f"one process: `llamafleet check` on a 3-file config: median {statistics.median(times):.1f}"
        f" ms CPU (user+sys) of {args.runs} runs, min {min(times):.1f}, max {max(times):.1f} "
        f"(target <= {TARGET_PROCESS_MS} ms)"
    )


if __name__ == "__main__":
    main()

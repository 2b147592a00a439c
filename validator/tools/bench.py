#!/usr/bin/env python3
"""Benchmark: check N generated host configurations (server script + unit + settings.json) and
print how many configurations per second one core checks. A script that prints figures, not a
test: run it as `python tools/bench.py [N]`."""

from __future__ import annotations

import json
import random
import sys
import time

from llamafleet.engine import Inputs, add_file, run
from llamafleet.facts import Facts

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


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rng = random.Random(42)
    configs = [host_config(rng, i) for i in range(n)]
    facts = Facts(cpu_cores=16)
    findings = 0
    start, cpu0 = time.perf_counter(), time.process_time()
    for files in configs:
        inputs = Inputs()
        for name, text in files.items():
            add_file(inputs, f"<bench>/{name}", text)
        findings += len(run(inputs, facts).findings)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    print(
        f"{n} host configs (3 files each) checked in {elapsed:.3f} s wall, {cpu:.3f} s CPU: "
        f"{n / cpu:.0f} configs/s per core (CPU time), {n / elapsed:.0f}/s wall; "
        f"{findings} findings"
    )


if __name__ == "__main__":
    main()

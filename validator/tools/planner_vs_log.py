"""Compare the planner's K/V cache and recurrent-state figures with what a real llama-server logs.

    planner_vs_log.py --server PATH_TO_llama-server --models-dir DIR
                      [--ssh "ssh -i KEY root@HOST" --remote-dir /tmp/x] [--json OUT]
                      [--no-generate] [--only ID[,ID...]] [--timeout SECONDS] [--markdown]

DIR holds the three tiny test models written by ``testbed/make-tiny-model.py``:
``tiny-llama.gguf`` (2 layers, 2 KV heads of 32), ``tiny-llama-gqa6.gguf`` (``--gqa-ratio 6``) and
``tiny-qwen35moe.gguf`` (``--arch qwen35moe``: 2 attention + 6 gated-delta-net layers). A model
that is missing is generated into DIR with that script (same interpreter, default seed), unless
``--no-generate`` is given, in which case a missing model is an error (exit 2).

For each configuration of a fixed grid (cache types f16 ... turbo2, ``-np`` 1/2/4 and auto,
``--kv-unified`` on some, contexts 4096 to 131072, the GQA-6 model with symmetric turbo types, the
hybrid model with its recurrent state) the tool starts llama-server on 127.0.0.1 with a random high
port, reads its log until the ``llama_kv_cache: size = ...`` line (and, for the hybrid model,
``llama_memory_recurrent: size = ...``) has appeared and the server listens, sends one short
completion to the hybrid model so that it logs a context checkpoint, and kills the server. Each
run is bounded (``--timeout``, default 60 s) and the server is always killed.

The planner gets the same flags and the model facts read by ``llamafleet.gguf_meta`` and is asked
for the TurboQuant fork's current behaviour (``auto_asymmetric=True``). It prints one row per
component: config | component | planner MiB | log MiB | diff %. A figure is within tolerance when
it differs by at most 1 % or by at most 0.005 MiB (half of the last digit the log prints: small
figures such as a 0.07 MiB conv state cannot be compared more finely). The exit code is 1 when a
K, V, K+V or recurrent figure (or the K/V type, or the cell count) disagrees, 2 on a usage error,
a server that does not start or a log line that does not appear, 0 otherwise.

With ``--ssh`` the models are copied to ``--remote-dir`` on that host (``ssh ... 'cat > path' <
file``, skipped when the remote sha256 already matches), ``--server`` is the path of the binary
there, the server runs there under ``timeout`` (so it dies even if the connection drops) and the
completion request is sent from the remote host with its ``python3``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
GENERATOR = REPO / "testbed" / "make-tiny-model.py"
try:
    from llamafleet import planner
    from llamafleet.gguf_meta import ModelFacts, load_model_meta
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(HERE.parent / "src"))
    from llamafleet import planner
    from llamafleet.gguf_meta import ModelFacts, load_model_meta

#: model key -> (file name, generator arguments)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "llama": ("tiny-llama.gguf", ()),
    "gqa6": ("tiny-llama-gqa6.gguf", ("--gqa-ratio", "6")),
    "qwen35moe": ("tiny-qwen35moe.gguf", ("--arch", "qwen35moe")),
}

#: Tolerance: relative, and absolute (half of the 0.01 MiB the log prints).
REL_TOL = 0.01
ABS_TOL_MIB = 0.005

CHECKPOINT_PROMPT = (
    "The planner reads the model's metadata and the server flags, and works out what the server "
    "will allocate: weights, the K and V cache of every attention layer, the recurrent state of "
    "every linear-attention layer, and the compute buffers. "
) * 4


@dataclass(frozen=True)
class Config:
    cid: str
    model: str  # key of MODELS
    args: tuple[str, ...]
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.cid} {self.model} {' '.join(self.args)}"


def _c(cid: str, model: str, args: str, note: str = "") -> Config:
    return Config(cid, model, tuple(args.split()), note)


#: The grid. Every config is run as ``llama-server -m MODEL --host 127.0.0.1 --port P <args>``.
GRID: tuple[Config, ...] = (
    _c("c01", "llama", "-c 4096 -np 1 -ctk f16 -ctv f16"),
    _c("c02", "llama", "-c 8192 -np 2 -ctk q8_0 -ctv q8_0", "2 streams of 4096 cells"),
    _c("c03", "llama", "-c 16384 -np 4 --kv-unified -ctk q4_0 -ctv q4_0", "one shared stream"),
    _c("c04", "llama", "-c 131072 -np 1 -fa on -ctk q8_0 -ctv turbo3", "V head 32 padded to 128"),
    _c("c05", "llama", "-c 32768 -np 1 -fa on -ctk turbo3 -ctv turbo3", "K and V padded"),
    _c("c06", "llama", "-c 65536 -np 2 --kv-unified -fa on -ctk turbo4 -ctv turbo4"),
    _c("c07", "llama", "-c 32768 -np 4 -fa on -ctk turbo2 -ctv turbo2", "4 streams"),
    _c("c08", "llama", "-c 10000 -np 3 -ctk f16 -ctv f16", "n_ctx 10000 -> 3 x 3584"),
    _c("c09", "llama", "-c 8192 -ctk q8_0 -ctv q8_0", "-np auto: 4 slots, unified"),
    _c("c10", "gqa6", "-c 65536 -np 1 -fa on -ctk turbo3 -ctv turbo3", "GQA 6: K -> q8_0"),
    _c("c11", "gqa6", "-c 16384 -np 2 -fa on -ctk turbo2 -ctv turbo2", "GQA 6: K -> q8_0"),
    _c("c12", "gqa6", "-c 32768 -np 1 -fa on -ctk q8_0 -ctv turbo4", "asymmetric as asked"),
    _c("c13", "qwen35moe", "-c 4096 -np 1 -ctk f16 -ctv f16"),
    _c("c14", "qwen35moe", "-c 131072 -np 4 -fa on -ctk q8_0 -ctv turbo3", "4 states"),
    _c("c15", "qwen35moe", "-c 65536 -np 2 --kv-unified -fa on -ctk turbo3 -ctv turbo3"),
    _c("c16", "qwen35moe", "-c 32768 -np 1 -fa on -ctk turbo2 -ctv turbo2", "boundary V"),
    _c("c17", "qwen35moe", "-c 16384 -ctk q8_0 -ctv q8_0", "-np auto: 4 states"),
    _c("c18", "llama", "-c 5000 -np 2 --kv-unified -ctk bf16 -ctv q5_1", "n_ctx 5000 -> 5120"),
    _c("c19", "llama", "-c 0 -np 1 -ctk q5_0 -ctv iq4_nl", "-c 0: training context"),
    _c("c20", "llama", "-c 12288 -np 1 -fa off -ctk q4_1 -ctv f32", "flash attention off"),
    _c("c21", "qwen35moe", "-c 20000 -np 3 -fa on -ctk turbo4 -ctv turbo4", "3 x 6912 cells"),
    _c("c22", "qwen35moe", "-c 8192 -np 2 -fa on -ctk q8_0 -ctv turbo2", "boundary V, q8_0 K"),
)

_KV_RE = re.compile(
    r"llama_kv_cache: size = +(?P<total>[\d.]+) MiB \( *(?P<cells>\d+) cells, +(?P<layers>\d+) "
    r"layers, +(?P<seqs>\d+)/(?P<streams>\d+) seqs\), K \((?P<tk>\w+)\): +(?P<k>[\d.]+) MiB, "
    r"V \((?P<tv>\w+)\): +(?P<v>[\d.]+) MiB"
)
_RS_RE = re.compile(
    r"llama_memory_recurrent: size = +(?P<total>[\d.]+) MiB \( *(?P<cells>\d+) cells, "
    r"+(?P<layers>\d+) layers, +(?P<seqs>\d+) seqs\), R \((?P<tr>\w+)\): +(?P<r>[\d.]+) MiB, "
    r"S \((?P<ts>\w+)\): +(?P<s>[\d.]+) MiB"
)
_CKPT_RE = re.compile(
    r"created context checkpoint \d+ of (?P<max>\d+) .*size = (?P<size>[\d.]+) MiB"
)
_CTX_RE = re.compile(
    r"llama_context: (?P<key>n_ctx|n_ctx_seq|n_seq_max|kv_unified) += (?P<val>\S+)"
)
_LISTENING = "server is listening on"


class ToolError(Exception):
    """A run could not be completed (exit 2)."""


# ----------------------------------------------------------------------------- log parsing


@dataclass
class LogFacts:
    """What one server log says about its memory."""

    kv: list[dict[str, str]] = field(default_factory=list)
    rs: list[dict[str, str]] = field(default_factory=list)
    checkpoint_mib: float | None = None
    checkpoint_max: int | None = None
    ctx: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def parse_log(text: str) -> LogFacts:
    facts = LogFacts()
    for line in text.splitlines():
        if m := _KV_RE.search(line):
            facts.kv.append(m.groupdict())
        elif m := _RS_RE.search(line):
            facts.rs.append(m.groupdict())
        elif m := _CKPT_RE.search(line):
            if facts.checkpoint_mib is None:
                facts.checkpoint_mib = float(m["size"])
                facts.checkpoint_max = int(m["max"])
        elif m := _CTX_RE.search(line):
            facts.ctx.setdefault(m["key"], m["val"])
        if "auto-asymmetric" in line or "zero-padding" in line or "Boundary V" in line:
            facts.notes.append(line.split(": ", 1)[-1].strip())
    return facts


# ----------------------------------------------------------------------------- running servers


class Runner:
    """Starts llama-server locally; :class:`RemoteRunner` does it over ssh."""

    def __init__(self, server: str) -> None:
        self.server = server

    def model_path(self, local: Path) -> str:
        return str(local)

    def prepare(self, models: Sequence[Path]) -> None:
        if not os.access(self.server, os.X_OK):
            raise ToolError(f"--server {self.server}: not an executable file")

    def start(self, argv: list[str], limit_s: float) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [self.server, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def request(self, port: int, path: str, body: dict[str, Any] | None, timeout: float) -> int:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            data=data,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                resp.read()
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, TimeoutError):
            return 0


_REMOTE_REQUEST = """
import json, sys, urllib.request, urllib.error
port, path, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
body = sys.stdin.buffer.read() or None
req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=body,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read(); print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
"""


class RemoteRunner(Runner):
    """Runs llama-server on another host: ``ssh ... 'exec timeout -s KILL T server ARGS'``."""

    def __init__(self, server: str, ssh: str, remote_dir: str) -> None:
        super().__init__(server)
        self.ssh = shlex.split(ssh)
        self.remote_dir = remote_dir.rstrip("/") or "/"
        self.pids: dict[int, int] = {}

    def _ssh(self, command: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        kw.setdefault("timeout", 300)
        return subprocess.run([*self.ssh, command], capture_output=True, check=False, **kw)

    def model_path(self, local: Path) -> str:
        return f"{self.remote_dir}/{local.name}"

    def prepare(self, models: Sequence[Path]) -> None:
        q = shlex.quote
        res = self._ssh(f"mkdir -p {q(self.remote_dir)} && test -x {q(self.server)}")
        if res.returncode != 0:
            raise ToolError(
                f"ssh: cannot create {self.remote_dir} or {self.server} is not executable there: "
                + res.stderr.decode(errors="replace").strip()
            )
        for local in models:
            digest = hashlib.sha256(local.read_bytes()).hexdigest()
            dest = self.model_path(local)
            have = self._ssh(f"sha256sum {q(dest)} 2>/dev/null")
            if have.stdout.decode().split()[:1] == [digest]:
                continue
            with local.open("rb") as fh:
                res = self._ssh(
                    f"cat > {q(dest + '.part')} && mv {q(dest + '.part')} {q(dest)}", stdin=fh
                )
            if res.returncode != 0:
                raise ToolError(f"ssh: copying {local.name} failed: {res.stderr.decode().strip()}")

    def start(self, argv: list[str], limit_s: float) -> subprocess.Popen[bytes]:
        cmd = " ".join(shlex.quote(a) for a in [self.server, *argv])
        remote = f"echo LLAMAFLEET_PID $$; exec timeout -s KILL {int(limit_s) + 5} {cmd} 2>&1"
        return subprocess.Popen(
            [*self.ssh, remote],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def remote_pid(self, proc: subprocess.Popen[bytes], pid: int) -> None:
        self.pids[proc.pid] = pid

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        pid = self.pids.pop(proc.pid, None)
        if pid is not None:
            # TERM to `timeout` is passed on to the server; if they linger, KILL the process
            # group `timeout` leads (it and the server, nothing else)
            self._ssh(
                f"kill -TERM {pid} 2>/dev/null; for i in 1 2 3 4 5 6 7 8 9 10; do "
                f"kill -0 {pid} 2>/dev/null || break; sleep 0.2; done; "
                f"kill -KILL -- -{pid} 2>/dev/null; true",
                timeout=30,
            )
        super().stop(proc)

    def request(self, port: int, path: str, body: dict[str, Any] | None, timeout: float) -> int:
        data = json.dumps(body).encode() if body is not None else b""
        cmd = " ".join(
            shlex.quote(a)
            for a in ("python3", "-c", _REMOTE_REQUEST, str(port), path, str(timeout))
        )
        try:
            res = self._ssh(cmd, input=data, timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            return 0
        try:
            return int(res.stdout.decode().strip() or 0)
        except ValueError:
            return 0


class LogReader:
    """Collects a server's output lines in a thread."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.proc = proc
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.lines)

    def has(self, needle: str) -> bool:
        with self.lock:
            return any(needle in line for line in self.lines)


def _note_remote_pid(
    runner: RemoteRunner, proc: subprocess.Popen[bytes], reader: LogReader, deadline: float
) -> None:
    """Tell the remote runner the server's pid, which its wrapper prints first."""
    while time.monotonic() < deadline and not reader.has("LLAMAFLEET_PID"):
        time.sleep(0.05)
    for line in reader.text().splitlines():
        if line.startswith("LLAMAFLEET_PID "):
            runner.remote_pid(proc, int(line.split()[1]))


def _wait_listening(
    runner: Runner, proc: subprocess.Popen[bytes], reader: LogReader, port: int, deadline: float
) -> float:
    """The time the server listened at (its log says so, or /health answers), else 0."""
    while time.monotonic() < deadline:
        if reader.has(_LISTENING) or (
            not isinstance(runner, RemoteRunner) and runner.request(port, "/health", None, 2) == 200
        ):
            return time.monotonic()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    return 0.0


def _store_checkpoint(runner: Runner, reader: LogReader, port: int, deadline: float) -> None:
    """A prompt of >= 64 tokens makes a hybrid model's server store a context checkpoint."""
    remaining = max(deadline - time.monotonic(), 1.0)
    body = {"prompt": CHECKPOINT_PROMPT, "n_predict": 4, "cache_prompt": True}
    runner.request(port, "/completion", body, remaining)
    while time.monotonic() < deadline and not (
        reader.has("created context checkpoint") or reader.has("print_timing")
    ):
        time.sleep(0.05)
    time.sleep(0.2)


def run_server(
    runner: Runner, model: str, cfg: Config, timeout_s: float, hybrid: bool
) -> tuple[str, float]:
    """Start the server for ``cfg``; return (its log, seconds until it listened). Always killed."""
    for _attempt in range(3):
        port = random.randint(20000, 60999)
        argv = ["-m", model, "--host", "127.0.0.1", "--port", str(port), *cfg.args]
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        proc = runner.start(argv, timeout_s)
        reader = LogReader(proc)
        listened = 0.0
        try:
            if isinstance(runner, RemoteRunner):
                _note_remote_pid(runner, proc, reader, deadline)
            when = _wait_listening(runner, proc, reader, port, deadline)
            listened = when - t0 if when else 0.0
            if listened and hybrid:
                _store_checkpoint(runner, reader, port, deadline)
        finally:
            exit_code = proc.poll()
            runner.stop(proc)
            reader.thread.join(timeout=10)
        log = reader.text()
        if listened:
            return log, listened
        if "couldn't bind" in log or "Address already in use" in log:
            continue  # port taken: try another
        tail = "\n".join(log.splitlines()[-15:])
        why = (
            f"exited with code {exit_code}"
            if exit_code is not None
            else f"did not listen within {timeout_s:.0f} s"
        )
        raise ToolError(f"{cfg.cid}: the server {why}:\n{tail}")
    raise ToolError(f"{cfg.cid}: no free port after 3 attempts")


# ----------------------------------------------------------------------------- comparison


@dataclass
class Row:
    config: str
    component: str
    planner_mib: float | None
    log_mib: float | None
    checked: bool
    ok: bool
    note: str = ""

    @property
    def diff_pct(self) -> float | None:
        if self.planner_mib is None or self.log_mib is None or self.log_mib == 0:
            return None
        return (self.planner_mib - self.log_mib) / self.log_mib * 100.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "component": self.component,
            "planner_mib": self.planner_mib,
            "log_mib": self.log_mib,
            "diff_pct": None if self.diff_pct is None else round(self.diff_pct, 3),
            "checked": self.checked,
            "ok": self.ok,
            "note": self.note,
        }


def close_enough(planner_mib: float, log_mib: float) -> bool:
    diff = abs(planner_mib - log_mib)
    return diff <= REL_TOL * abs(log_mib) or diff <= ABS_TOL_MIB + 1e-9


def compare(cfg: Config, plan: planner.Plan, log: LogFacts, geo: planner.Geometry) -> list[Row]:
    """Rows for one configuration."""
    rows: list[Row] = []

    def add(
        component: str, p: float | None, lg: float | None, note: str = "", checked: bool = True
    ) -> None:
        ok = p is not None and lg is not None and close_enough(p, lg)
        rows.append(Row(cfg.cid, component, p, lg, checked, ok, note))

    if plan.n_attention_layers:
        if not log.kv:
            add("K", plan.kv_k_mib, None, "no llama_kv_cache size line in the log")
        else:
            k = sum(float(x["k"]) for x in log.kv)
            v = sum(float(x["v"]) for x in log.kv)
            tk, tv = log.kv[0]["tk"], log.kv[0]["tv"]
            cells = sum(int(x["cells"]) * int(x["streams"]) for x in log.kv)
            p_cells = plan.n_ctx_seq * (1 if plan.kv_unified else plan.n_parallel)
            k_note = "" if tk == plan.cache_type_k else f"type: planner {plan.cache_type_k}"
            add(f"K ({tk})", plan.kv_k_mib, k, k_note)
            add(f"V ({tv})", plan.kv_v_mib, v, plan_v_note(plan, tv))
            add("K+V", plan.kv_k_mib + plan.kv_v_mib, float(log.kv[0]["total"]))
            if k_note:
                rows[-3].ok = False
            if plan.cache_type_v != tv:
                rows[-2].ok = False
            cell_row = Row(
                cfg.cid,
                f"cells ({cells} logged, {p_cells} planned)",
                None,
                None,
                True,
                cells == p_cells,
            )
            rows.append(cell_row)
    if plan.n_recurrent_layers:
        if not log.rs:
            add("recurrent", plan.recurrent_mib, None, "no llama_memory_recurrent size line")
        else:
            rs = log.rs[0]
            rows_r = planner_rs_split(plan, geo)
            add("recurrent R+S", plan.recurrent_mib, float(rs["total"]))
            add("  R (conv state)", rows_r[0], float(rs["r"]))
            add("  S (ssm state)", rows_r[1], float(rs["s"]))
        if log.checkpoint_mib is not None:
            # informational: a checkpoint is host RAM, and its size adds a small header
            add("checkpoint (each)", plan.checkpoint_each_mib, log.checkpoint_mib, checked=False)
    return rows


def plan_v_note(plan: planner.Plan, logged_type: str) -> str:
    if plan.cache_type_v != logged_type:
        return f"type: planner {plan.cache_type_v}"
    return ""


def planner_rs_split(plan: planner.Plan, geo: planner.Geometry) -> tuple[float, float]:
    """The planner's conv (R) and SSM (S) parts of ``plan.recurrent_mib``."""
    n = geo.n_recurrent_layers * max(1, plan.n_parallel)
    r_bytes = geo.rs_conv_bytes_per_layer
    s_bytes = geo.rs_bytes_per_layer - r_bytes
    return (r_bytes * n / planner.MIB, s_bytes * n / planner.MIB)


# ----------------------------------------------------------------------------- main


def ensure_models(models_dir: Path, needed: set[str], generate: bool) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for key in sorted(needed):
        name, gen_args = MODELS[key]
        path = models_dir / name
        if not path.exists():
            if not generate:
                raise ToolError(f"{path}: missing (run {GENERATOR.name} or drop --no-generate)")
            if not GENERATOR.exists():
                raise ToolError(f"{path}: missing, and the generator {GENERATOR} is not there")
            models_dir.mkdir(parents=True, exist_ok=True)
            res = subprocess.run(
                [sys.executable, str(GENERATOR), str(path), *gen_args],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            if res.returncode != 0:
                raise ToolError(f"generating {name} failed: {res.stderr.strip()}")
        paths[key] = path
    return paths


def format_table(rows: Sequence[Row], labels: dict[str, str]) -> str:
    head = ("config", "component", "planner MiB", "log MiB", "diff %")
    body: list[tuple[str, ...]] = []
    for r in rows:
        diff = r.diff_pct
        mark = "" if r.ok or not r.checked else "  <-- MISMATCH"
        if not r.ok and not r.checked:
            mark = "  (info: differs)"
        body.append(
            (
                labels[r.config],
                r.component + (f" [{r.note}]" if r.note else ""),
                "" if r.planner_mib is None else f"{r.planner_mib:.3f}",
                "" if r.log_mib is None else f"{r.log_mib:.3f}",
                ("" if diff is None else f"{diff:+.2f}") + mark,
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    for b in body:
        lines.append(" | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)))
    return "\n".join(lines)


def format_markdown(rows: Sequence[Row], labels: dict[str, str]) -> str:
    """The MiB rows as a Markdown table (cell-count rows are left out, though still checked)."""
    lines = [
        "| config | component | planner MiB | log MiB | diff % |",
        "|---|---|---:|---:|---:|",
    ]
    last = ""
    for r in rows:
        if r.planner_mib is None and r.log_mib is None and r.ok:
            continue
        label = labels[r.config] if r.config != last else ""
        last = r.config
        if label:
            cid, _, rest = label.partition(" ")
            label = f"{cid} `{rest}`"
        diff = r.diff_pct
        mark = "" if r.ok else (" **MISMATCH**" if r.checked else " (info)")
        lines.append(
            f"| {label} | {r.component.strip()}{f' ({r.note})' if r.note else ''} | "
            + ("" if r.planner_mib is None else f"{r.planner_mib:.3f}")
            + " | "
            + ("" if r.log_mib is None else f"{r.log_mib:.2f}")
            + " | "
            + ("" if diff is None else f"{diff:+.2f}")
            + f"{mark} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--server", required=True, help="llama-server binary (remote path with --ssh)")
    ap.add_argument("--models-dir", required=True, type=Path, help="where the tiny models are")
    ap.add_argument("--ssh", help='ssh command line, e.g. "ssh -i KEY root@HOST"')
    ap.add_argument("--remote-dir", help="directory on the ssh host for the models")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    ap.add_argument("--no-generate", action="store_true", help="fail when a model is missing")
    ap.add_argument("--only", help="comma-separated config ids (default: all)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per server run")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    if bool(args.ssh) != bool(args.remote_dir):
        ap.error("--ssh and --remote-dir go together")
    grid = list(GRID)
    if args.only:
        wanted = {x.strip() for x in args.only.split(",") if x.strip()}
        unknown = wanted - {c.cid for c in GRID}
        if unknown:
            ap.error(f"--only: unknown config(s) {', '.join(sorted(unknown))}")
        grid = [c for c in GRID if c.cid in wanted]

    runner: Runner = (
        RemoteRunner(args.server, args.ssh, args.remote_dir) if args.ssh else Runner(args.server)
    )
    try:
        paths = ensure_models(args.models_dir, {c.model for c in grid}, not args.no_generate)
        facts: dict[str, ModelFacts] = {k: load_model_meta(str(p)) for k, p in paths.items()}
        geos = {k: planner.geometry(f) for k, f in facts.items()}
        runner.prepare(list(paths.values()))
        rows: list[Row] = []
        labels: dict[str, str] = {}
        extras: dict[str, dict[str, Any]] = {}
        for cfg in grid:
            model = facts[cfg.model]
            plan = planner.estimate_argv(model, list(cfg.args), auto_asymmetric=True)
            hybrid = plan.n_recurrent_layers > 0
            log_text, t_listen = run_server(
                runner, runner.model_path(paths[cfg.model]), cfg, args.timeout, hybrid
            )
            log = parse_log(log_text)
            labels[cfg.cid] = cfg.label
            cfg_rows = compare(cfg, plan, log, geos[cfg.model])
            rows += cfg_rows
            extras[cfg.cid] = {
                "args": list(cfg.args),
                "model": paths[cfg.model].name,
                "note": cfg.note,
                "seconds_to_listen": round(t_listen, 2),
                "log_context": log.ctx,
                "log_notes": log.notes,
                "planner_notes": plan.notes,
            }
            status = "ok" if all(r.ok for r in cfg_rows if r.checked) else "MISMATCH"
            print(f"{cfg.label}: {status} ({t_listen:.1f} s)", file=sys.stderr, flush=True)
    except ToolError as exc:
        print(f"planner_vs_log: error: {exc}", file=sys.stderr)
        return 2
    except planner.PlanError as exc:
        print(f"planner_vs_log: planner error: {exc}", file=sys.stderr)
        return 2

    print(format_markdown(rows, labels) if args.markdown else format_table(rows, labels))
    bad = [r for r in rows if r.checked and not r.ok]
    print(
        f"\n{len(grid)} configurations, {len(rows)} rows; tolerance 1 % or "
        f"{ABS_TOL_MIB} MiB (the log prints 2 decimals); "
        + ("all checked figures agree" if not bad else f"{len(bad)} checked figure(s) disagree")
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "server": args.server,
                    "ssh": args.ssh,
                    "models": {
                        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths.values()
                    },
                    "configs": extras,
                    "rows": [r.as_dict() for r in rows],
                    "ok": not bad,
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fleet at scale, measured: roll playbooks/rollout.yml out to N light test hosts and time it.

For each fleet size N and each variant (a set of Ansible settings and extra variables, so one run
measures "before" and "after" a change without editing the playbooks) the simulation boots N fresh
test hosts (testhost.sh: systemd-nspawn, one overlay each), writes an inventory of them, and runs
the real playbooks/rollout.yml three times:

  first     the first rollout of a shipped build: every host installs the build compiled once
            beforehand (rollout_build_cache), downloads the tiny model and starts llama-server
  rerun     the same rollout again: nothing may change (changed=0 on every host)
  good      a good new config (another context size): every host restarts its server

and records each run's wall time, the peak memory of the controller (the proportional set size
of ansible-playbook and every process under it: forks, ssh), the bytes each host received over its
link and the recap. The hosts are removed after each (N, variant), whatever happened.

llama.cpp is compiled at most once: before any timed run, when the build cache holds no build of
the pinned commit, one extra host compiles it (with the shared ccache) and ships it into the
cache, exactly like a rollout's builder. The build cache is LLAMAFLEET_BUILDS when set (`make
test`: the suite's shipped builds, which the default scenario compiled), else the persistent
LLAMAFLEET_CACHE/fleet-sim/builds.

  fleet-sim.py [--sizes 5,10,25,50] [--variant baseline --variant fast ...] [--out DIR]
  fleet-sim.py --report DIR            table and plot again from DIR/results.json
  fleet-sim.py --list-variants

A variant is NAME or NAME:SETTING,SETTING,... where a SETTING is ENV=VALUE (an environment
variable of ansible-playbook, e.g. ANSIBLE_FORKS=50), e.VAR=VALUE (an extra variable, e.g.
e.rollout_batch=100%) or ref=GITREF (the playbooks and roles of that commit of this repository,
e.g. ref=HEAD~3: a change to them measured against the commit before it, in the same sitting).
`{n}` in a value is the fleet size. A built-in NAME starts from its own settings.
Run as root (bridges, overlay mounts, containers), from any directory.
"""

from __future__ import annotations

import argparse
import configparser
import importlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTHOST = ROOT / "testbed" / "testhost.sh"
ROLLOUT = ROOT / "playbooks" / "rollout.yml"
# the TurboQuant fork's tree at build 9079 (testbed/llama-src.sh: the same archive gives the same
# commits); the scenarios pin the same commit
LLAMA_CPP_VERSION = "feature/turboquant-kv-cache"
LLAMA_CPP_COMMIT = "ef8c15dbd6494e91db171a9be21665d93006d6b0"
HTTP_PORT = 8761
# the platform key playbooks/rollout.yml gives these hosts (Debian bookworm, x86_64, backend auto,
# no CUDA architectures): the one the builder is named for
PLATFORM = "debian-bookworm-x86_64-auto-any"
HOST_PREFIX = "lfsim-"
# host i (1-based) gets NET.(FIRST_OCTET + i); the builder gets NET.FIRST_OCTET
FIRST_OCTET = 100
MAX_HOSTS = 254 - FIRST_OCTET
RUN_KINDS = ("first", "rerun", "good")
RUN_TITLES = {
    "first": "first rollout (shipped build)",
    "rerun": "no-change re-run",
    "good": "good rollout",
}

# Settings that change only how Ansible runs, never what the playbooks do. `baseline` is the
# repository's own ansible.cfg (forks 50, pipelining on, Ansible's default ssh_args:
# ControlMaster=auto, ControlPersist=60s, compression on).
BUILTIN_VARIANTS: dict[str, dict[str, str]] = {
    "baseline": {},
    # one SSH connection per host for the whole run (and the next runs), no compression on a LAN
    "ssh": {"ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=30m"},
    # every host of a batch at once: forks = N
    "forks": {"ANSIBLE_FORKS": "{n}"},
    # facts gathered once and kept (jsonfile): the second play and the next runs reuse them
    "facts": {
        "ANSIBLE_GATHERING": "smart",
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": "{facts}",
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400",
    },
}
BUILTIN_VARIANTS["fast"] = {
    **BUILTIN_VARIANTS["ssh"],
    **BUILTIN_VARIANTS["forks"],
    **BUILTIN_VARIANTS["facts"],
}
VARIANT_HELP = {
    "baseline": "the repository's ansible.cfg as it is",
    "ssh": "ControlPersist 30m, no ssh compression",
    "forks": "ANSIBLE_FORKS = N",
    "facts": "gathering smart + jsonfile fact cache",
    "fast": "ssh + forks + facts",
}

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CFG_VALUE = re.compile(r"[A-Za-z0-9_.:/, -]{1,200}")
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


class SimError(Exception):
    """A failure that ends the simulation with a message (exit status 1)."""


@dataclass(frozen=True)
class Variant:
    """How ansible-playbook runs: environment variables, extra variables and settings of the
    [defaults] section of ansible.cfg (for those without an environment variable, such as
    internal_poll_interval)."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    extra_vars: dict[str, str] = field(default_factory=dict)
    # a commit of this repository whose playbooks and roles run instead of the working tree's
    ref: str = ""
    cfg: dict[str, str] = field(default_factory=dict)

    def resolved_env(self, n: int, facts_dir: Path) -> dict[str, str]:
        """The environment with `{n}` and `{facts}` filled in."""
        return {k: _fill(v, n, facts_dir) for k, v in self.env.items()}

    def resolved_vars(self, n: int, facts_dir: Path) -> dict[str, str]:
        return {k: _fill(v, n, facts_dir) for k, v in self.extra_vars.items()}


def _fill(value: str, n: int, facts_dir: Path) -> str:
    return value.replace("{n}", str(n)).replace("{facts}", str(facts_dir))


def parse_variant(spec: str) -> Variant:
    """NAME or NAME:ENV=VALUE,e.VAR=VALUE,cfg.KEY=VALUE,...; a built-in NAME starts from its
    settings."""
    name, _, rest = spec.partition(":")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}", name):
        raise SimError(
            f"variant {spec!r}: the name must be letters, digits, '_', '.', '+' or '-' "
            "(at most 40), e.g. fast or mine:ANSIBLE_FORKS=50"
        )
    env = dict(BUILTIN_VARIANTS.get(name, {}))
    extra: dict[str, str] = {}
    cfg: dict[str, str] = {}
    ref = ""
    if not rest and name not in BUILTIN_VARIANTS:
        known = ", ".join(BUILTIN_VARIANTS)
        raise SimError(
            f"variant {name!r} is not built in ({known}); give its settings: {name}:KEY=VALUE"
        )
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise SimError(f"variant {spec!r}: {item!r} is not KEY=VALUE")
        if key.startswith("e."):
            var = key[2:]
            if not _VAR_NAME.match(var):
                raise SimError(f"variant {spec!r}: {var!r} is not a variable name")
            extra[var] = value
        elif key.startswith("cfg."):
            setting = key[4:]
            if not _VAR_NAME.match(setting) or not _CFG_VALUE.fullmatch(value):
                raise SimError(f"variant {spec!r}: {item!r} is not cfg.SETTING=VALUE")
            cfg[setting] = value
        elif key == "ref":
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_./~^-]{0,99}", value):
                raise SimError(f"variant {spec!r}: {value!r} is not a git commit or ref")
            ref = value
        elif _ENV_NAME.match(key):
            env[key] = value
        else:
            raise SimError(
                f"variant {spec!r}: {key!r} is neither an environment variable (ANSIBLE_FORKS), "
                "an extra variable (e.rollout_batch), a setting of ansible.cfg's [defaults] "
                "(cfg.internal_poll_interval) nor ref=GITREF"
            )
    return Variant(name, env, extra, ref, cfg)


def parse_sizes(text: str) -> list[int]:
    sizes: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part.isdigit() or not 1 <= int(part) <= MAX_HOSTS:
            raise SimError(f"--sizes: {part!r} is not a fleet size from 1 to {MAX_HOSTS}")
        sizes.append(int(part))
    return sizes


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP counters per host (the last recap of the output)."""
    recap: dict[str, dict[str, int]] = {}
    tail = output.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in output else ""
    for m in _RECAP.finditer(tail):
        recap[m["host"]] = {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
    return recap


_TASK_HEADER = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(?P<title>.*)\] \**$")
_TASK_RESULT = re.compile(r"^(?:ok|changed|skipping|failed|fatal): \[(?P<host>[^\]\s]+)")


def tasks_per_role(output: str, hosts: Sequence[str]) -> dict[str, float]:
    """How many tasks each host ran, by role (a task's title up to " : ", the FQCN prefix dropped;
    "play" for the playbook's own tasks), averaged over `hosts`: every task a host executed,
    skipped ones included (Ansible evaluates those one by one too), a loop counted once. Read
    from the default callback's output (each TASK header, then one line per host or item)."""
    seen: set[tuple[int, str]] = set()
    counts: dict[str, int] = {}
    wanted = set(hosts)
    index, role = -1, "play"
    for line in output.splitlines():
        head = _TASK_HEADER.match(line)
        if head:
            index += 1
            title = head["title"]
            role = title.split(" : ", 1)[0].rsplit(".", 1)[-1] if " : " in title else "play"
            continue
        hit = _TASK_RESULT.match(line)
        if hit and index >= 0 and hit["host"] in wanted and (index, hit["host"]) not in seen:
            seen.add((index, hit["host"]))
            counts[role] = counts.get(role, 0) + 1
    n = max(len(wanted), 1)
    return {r: round(c / n, 1) for r, c in sorted(counts.items(), key=lambda rc: -rc[1])}


def host_names(n: int) -> list[str]:
    return [f"{HOST_PREFIX}{i}" for i in range(1, n + 1)]


def host_address(net: str, i: int) -> str:
    return f"{net}.{FIRST_OCTET + i}"


def inventory(
    hosts: Sequence[tuple[str, str]],
    *,
    key: str,
    net: str,
    build_cache: Path,
    model_sha: str,
) -> dict[str, Any]:
    """The simulated fleet: the fleet scenario's shape, a small context, one tiny model."""
    http = f"http://{net}.1:{HTTP_PORT}"
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": key,
                "ansible_ssh_common_args": (
                    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
                "llama_cpp_repo": f"{http}/git/llama.cpp.git",
                "llama_cpp_version": LLAMA_CPP_VERSION,
                "llama_cpp_commit": LLAMA_CPP_COMMIT,
                "llama_cpp_allow_insecure_transport": True,
                "llama_cpp_build_jobs": 2,
                "rollout_distribute": True,
                "rollout_build_cache": str(build_cache),
                # builders by name: the first host compiles and ships when no shipped build is
                # there; a build recorded from the default scenario's host (the suite's) counts
                "rollout_builder_platform": PLATFORM,
                "llama_cpp_ship_builders": ["lf-default-bookworm", hosts[0][0]],
                "rollout_min_free_mb": 1024,
                "llama_server_health_timeout": 120,
                "rollout_rollback_health_timeout": 120,
                "gguf_models_list": [
                    {
                        "name": "tiny-llama",
                        "url": f"{http}/models/tiny-llama.gguf",
                        "sha256": model_sha,
                    }
                ],
                "llama_server_instances": [server_instance(65536, 16)],
                "claude_code_install": False,
            },
            "children": {
                "llama_servers": {"hosts": {name: {"ansible_host": ip} for name, ip in hosts}},
                "llama_cpp_builders": {"hosts": {hosts[0][0]: {}}},
            },
        }
    }


def server_instance(ctx: int, n_predict: int) -> dict[str, Any]:
    """One slot, the fork's KV types: for the tiny model a few MiB of KV cache at this context."""
    return {
        "name": "main",
        "model": "tiny-llama",
        "port": 8080,
        "args": {
            "ctx_size": ctx,
            "parallel": 1,
            "cache_type_k": "q8_0",
            "cache_type_v": "turbo3",
            "flash_attn": "on",
            "n_predict": n_predict,
        },
    }


# the good rollout: another context size and shorter answers, so every unit changes
GOOD_CONFIG = {"llama_server_instances": [server_instance(32768, 8)]}


# ------------------------------------------------------------------ measuring


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: fields count after the last ')'
        fields = stat.rsplit(")", 1)[-1].split()
        kids.setdefault(int(fields[1]), []).append(int(entry.name))
    return kids


def process_tree(root: int) -> list[int]:
    """root and every process under it (now)."""
    kids = _children_map()
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    return seen


def pss_kib(pid: int) -> int:
    """Proportional set size of one process in KiB (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    m = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(m[1]) if m else 0


def mem_available_kib() -> int:
    m = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return int(m[1]) if m else 0


class Sampler:
    """Peak memory of a process tree and the lowest MemAvailable, sampled in a thread."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.peak_kib = 0
        self.min_available_kib = mem_available_kib()
        self._loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        total = sum(pss_kib(p) for p in process_tree(self.pid))
        self.peak_kib = max(self.peak_kib, total)
        self.min_available_kib = min(self.min_available_kib, mem_available_kib())
        self._loads.append(os.getloadavg()[0])

    @property
    def mean_load(self) -> float:
        """The mean of the 1-minute load average over the samples (the machine's contention)."""
        return sum(self._loads) / len(self._loads) if self._loads else 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def _children_cpu() -> float:
    """User and system CPU seconds of the waited-for descendants of this process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def link_bytes(name: str) -> tuple[int, int]:
    """Bytes sent to and received from host NAME over its link (the controller's side of its veth,
    vb-NAME: tx is what the host received)."""
    base = Path("/sys/class/net") / f"vb-{name}" / "statistics"
    try:
        return int((base / "tx_bytes").read_text()), int((base / "rx_bytes").read_text())
    except OSError:
        return -1, -1


# ------------------------------------------------------------------ hosts


def testhost(*args: str, env: dict[str, str], check: bool = True) -> str:
    proc = subprocess.run(
        [str(TESTHOST), *args], env=env, capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise SimError(f"testhost.sh {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout.strip()


def wait_ssh(ip: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(OSError), socket.create_connection((ip, 22), timeout=2) as s:
            s.settimeout(2)
            if s.recv(64).startswith(b"SSH-"):
                return
        time.sleep(0.2)
    raise SimError(f"no SSH on {ip}:22 after {timeout:.0f} s")


@contextmanager
def booted(
    hosts: Sequence[tuple[str, str]], env: dict[str, str], binds: Sequence[str] = ()
) -> Iterator[None]:
    """Boot the hosts (four at a time; each gets its own apt archive from testhost.sh) and remove
    every one of them afterwards, whatever happens."""

    def up(host: tuple[str, str]) -> None:
        name, ip = host
        testhost("up", name, ip, "bookworm", *binds, env=env)
        wait_ssh(ip)

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(up, hosts))
        yield
    finally:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda h: testhost("down", h[0], env=env, check=False), hosts))


# ------------------------------------------------------------------ runs


@dataclass
class RunResult:
    kind: str
    seconds: float
    rc: int
    peak_controller_mib: float
    min_mem_available_mib: float
    host_rx_mib: float  # mean MiB each host received over its link during the run
    host_tx_mib: float  # mean MiB each host sent
    changed_hosts: int
    failed_hosts: int
    log: str
    # CPU seconds of ansible-playbook and every process it waited for (forks, ssh): the controller's
    # own work (the hosts' work shares these CPUs here; in a real fleet each host has its own)
    controller_cpu_s: float = -1.0
    # the machine's mean 1-minute load average during the run (2 cores: above 2, runs queue for CPU)
    mean_load: float = -1.0
    # tasks each host executed (skipped ones included), in all and by role (tasks_per_role)
    tasks_per_host: float = -1.0
    tasks_by_role: dict[str, float] = field(default_factory=dict)


@dataclass
class Measurement:
    n: int
    variant: str
    settings: dict[str, str]
    runs: list[RunResult]
    boot_seconds: float
    compiled_during_run: bool


def run_playbook(
    label: str,
    *,
    inventory_file: Path,
    extra: Sequence[Path | dict[str, str]],
    env: dict[str, str],
    log: Path,
    hosts: Sequence[str],
    tree: Path = ROOT,
) -> RunResult:
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory_file)]
    for e in extra:
        argv += ["-e", f"@{e}" if isinstance(e, Path) else json.dumps(e)]
    argv.append(str(tree / ROLLOUT.relative_to(ROOT)))
    before = {h: link_bytes(h) for h in hosts}
    cpu0 = _children_cpu()
    t0 = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
        with Sampler(proc.pid) as sampler:
            rc = proc.wait()
    seconds = time.monotonic() - t0
    cpu = _children_cpu() - cpu0
    after = {h: link_bytes(h) for h in hosts}
    rx = [after[h][0] - before[h][0] for h in hosts if before[h][0] >= 0 and after[h][0] >= 0]
    tx = [after[h][1] - before[h][1] for h in hosts if before[h][1] >= 0 and after[h][1] >= 0]
    text = log.read_text(errors="replace")
    recap = parse_recap(text)
    by_role = tasks_per_role(text, hosts)
    mib = 1024 * 1024
    result = RunResult(
        kind=label,
        seconds=round(seconds, 1),
        rc=rc,
        peak_controller_mib=round(sampler.peak_kib / 1024, 1),
        min_mem_available_mib=round(sampler.min_available_kib / 1024, 1),
        host_rx_mib=round(sum(rx) / len(rx) / mib, 2) if rx else -1.0,
        host_tx_mib=round(sum(tx) / len(tx) / mib, 2) if tx else -1.0,
        changed_hosts=sum(1 for h in hosts if recap.get(h, {}).get("changed", 0) > 0),
        failed_hosts=sum(
            1
            for h in hosts
            if recap.get(h, {}).get("failed", 1) + recap.get(h, {}).get("unreachable", 0)
        ),
        log=str(log),
        controller_cpu_s=round(cpu, 1),
        mean_load=round(sampler.mean_load, 2),
        tasks_per_host=round(sum(by_role.values()), 1),
        tasks_by_role=by_role,
    )
    print(
        f"  {label:6} {seconds:7.1f} s  rc={rc}  controller {result.peak_controller_mib:.0f} MiB, "
        f"{cpu:.0f} CPU s, load {result.mean_load:.1f}  "
        f"each host received {result.host_rx_mib:.2f} MiB  "
        f"changed hosts {result.changed_hosts}/{len(hosts)}  "
        f"tasks per host {result.tasks_per_host:.0f}",
        flush=True,
    )
    return result


@dataclass
class Setup:
    env: dict[str, str]
    net: str
    key: str
    www: Path
    build_cache: Path
    model_sha: str
    out: Path


def builds_of_commit(build_cache: Path) -> list[str]:
    """Names of the shipped builds of the pinned commit in the cache's index."""
    try:
        index = json.loads((build_cache / "index.json").read_text())
    except (OSError, ValueError):
        return []
    return sorted(
        name
        for per_platform in index.get("builds", {}).values()
        for name, entry in per_platform.items()
        if entry.get("commit") == LLAMA_CPP_COMMIT
    )


def prepare(env: dict[str, str], out: Path) -> Setup:
    """The served directory (git repository, tiny model), the HTTP server and the network."""
    cache = Path(env["LLAMAFLEET_CACHE"])
    state = Path(env["LLAMAFLEET_TESTHOSTS"])
    www = state / "fleet-sim-www"
    (www / "git").mkdir(parents=True, exist_ok=True)
    repo = subprocess.run(
        [str(ROOT / "testbed" / "llama-src.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if repo.returncode != 0:
        raise SimError(f"testbed/llama-src.sh failed: {repo.stderr.strip()[-2000:]}")
    link = www / "git" / "llama.cpp.git"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(repo.stdout.strip().splitlines()[-1])
    models = subprocess.run(
        [str(ROOT / "testbed" / "make-test-models.sh"), str(www / "models")],
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    if models.returncode != 0:
        raise SimError(f"testbed/make-test-models.sh failed: {models.stderr.strip()[-2000:]}")
    testhost("rootfs", "bookworm", env=env)
    key = testhost("key", env=env)
    testhost("net-up", env=env)
    testhost("serve", str(www), str(HTTP_PORT), env=env)
    return Setup(
        env=env,
        net=env["LLAMAFLEET_NET"],
        key=key,
        www=www,
        # the test suite's shipped builds (make test: the default scenario's build), else its own
        build_cache=Path(env.get("LLAMAFLEET_BUILDS") or cache / "fleet-sim" / "builds"),
        model_sha=(www / "models" / "tiny-llama.gguf.sha256").read_text().strip(),
        out=out,
    )


def write_inventory(setup: Setup, hosts: Sequence[tuple[str, str]], path: Path) -> None:
    inv = inventory(
        hosts,
        key=setup.key,
        net=setup.net,
        build_cache=setup.build_cache,
        model_sha=setup.model_sha,
    )
    # JSON is YAML: the yaml inventory plugin reads it
    path.write_text(json.dumps(inv, indent=2) + "\n")


def ansible_env(setup: Setup, extra: dict[str, str]) -> dict[str, str]:
    env = {**setup.env, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", **extra}
    env.pop("ANSIBLE_CONFIG", None)  # the repository's ansible.cfg (the playbooks run from ROOT)
    return env


def build_once(setup: Setup) -> None:
    """Compile llama.cpp once, on one extra host, into the build cache (if it lacks the commit)."""
    found = builds_of_commit(setup.build_cache)
    if found:
        print(f"build cache {setup.build_cache}: {', '.join(found)} (no compile)", flush=True)
        return
    print(
        f"build cache {setup.build_cache}: empty; compiling once on {HOST_PREFIX}build", flush=True
    )
    setup.build_cache.mkdir(parents=True, exist_ok=True)
    host = [(f"{HOST_PREFIX}build", f"{setup.net}.{FIRST_OCTET}")]
    run_dir = setup.out / "build"
    run_dir.mkdir(parents=True, exist_ok=True)
    inv = run_dir / "hosts.yml"
    write_inventory(setup, host, inv)
    with booted(host, setup.env, ["ccache/bookworm:/var/cache/llama.cpp/ccache"]):
        result = run_playbook(
            "build",
            inventory_file=inv,
            extra=[],
            env=ansible_env(setup, {}),
            log=run_dir / "rollout.log",
            hosts=[h for h, _ in host],
        )
    if result.rc != 0 or not builds_of_commit(setup.build_cache):
        raise SimError(f"the build rollout failed (rc={result.rc}): see {result.log}")


def tree_of(ref: str, dest: Path) -> Path:
    """The repository's files at ``ref`` (git archive), with that commit's llamafleet.fleet
    collection installed into it (a commit from before the collection: this checkout's
    collections): the playbooks and roles of that commit run from there. The validator is the
    installed one."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SimError(f"ref={ref}: not a commit of {ROOT}") from exc
    dest.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SimError(f"ref={ref}: git archive failed")
    if (dest / "galaxy.yml").is_file():
        # that commit's own llamafleet.fleet collection, installed as make bootstrap installs it
        subprocess.run(
            [
                str(Path(sys.executable).parent / "ansible-galaxy"),
                "collection",
                "install",
                "--force",
                "--no-deps",
                "-p",
                str(dest / ".ansible" / "collections"),
                str(dest),
            ],
            capture_output=True,
            check=True,
        )
    else:
        collections = ROOT / ".ansible" / "collections"
        if collections.is_dir():
            (dest / ".ansible").mkdir(exist_ok=True)
            (dest / ".ansible" / "collections").symlink_to(collections)
    (dest / "COMMIT").write_text(commit + "\n")
    return dest


def measure(setup: Setup, n: int, variant: Variant) -> Measurement:
    run_dir = setup.out / f"n{n}-{variant.name}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    facts = run_dir / "facts"
    hosts = [(name, host_address(setup.net, i)) for i, name in enumerate(host_names(n), start=1)]
    names = [h for h, _ in hosts]
    inv = run_dir / "hosts.yml"
    write_inventory(setup, hosts, inv)
    good = run_dir / "good.yml"
    good.write_text(json.dumps(GOOD_CONFIG, indent=2) + "\n")
    env = ansible_env(setup, variant.resolved_env(n, facts))
    extra = variant.resolved_vars(n, facts)
    tree = tree_of(variant.ref, run_dir / "tree") if variant.ref else ROOT
    if variant.cfg:
        env["ANSIBLE_CONFIG"] = str(config_with(tree, variant.cfg, run_dir))
    if variant.ref:
        print(f"  playbooks and roles of {variant.ref} ({(tree / 'COMMIT').read_text().strip()})")
    builds_before = builds_of_commit(setup.build_cache)
    print(
        f"N={n} variant={variant.name} {json.dumps({**env_diff(env, setup), **extra})}", flush=True
    )
    t0 = time.monotonic()
    runs: list[RunResult] = []
    with booted(hosts, setup.env):
        boot = time.monotonic() - t0
        print(f"  booted {n} hosts in {boot:.1f} s", flush=True)
        for kind in RUN_KINDS:
            files: list[Path | dict[str, str]] = [good] if kind == "good" else []
            if extra:
                files.append(extra)
            result = run_playbook(
                kind,
                inventory_file=inv,
                extra=files,
                env=env,
                log=run_dir / f"{kind}.log",
                hosts=names,
                tree=tree,
            )
            runs.append(result)
            if result.rc != 0:
                print(
                    f"  {kind} failed: see {result.log}; the next runs of N={n} are skipped",
                    flush=True,
                )
                break
    if variant.cfg:
        Path(env["ANSIBLE_CONFIG"]).unlink(missing_ok=True)
    # the checked-out tree is not kept (its commit is recorded)
    ref_commit = (tree / "COMMIT").read_text().strip() if variant.ref else ""
    if variant.ref:
        shutil.rmtree(tree, ignore_errors=True)
    return Measurement(
        n=n,
        variant=variant.name,
        settings={
            **variant.env,
            **{f"e.{k}": v for k, v in variant.extra_vars.items()},
            **{f"cfg.{k}": v for k, v in variant.cfg.items()},
            **({"ref": ref_commit} if variant.ref else {}),
        },
        runs=runs,
        boot_seconds=round(boot, 1),
        compiled_during_run=builds_of_commit(setup.build_cache) != builds_before,
    )


def config_with(tree: Path, settings: dict[str, str], run_dir: Path) -> Path:
    """The tree's ansible.cfg with these [defaults] settings, beside it (its relative paths stay
    relative to the tree), removed when the measurement ends. Returns its path."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(tree / "ansible.cfg")
    if not parser.has_section("defaults"):
        parser.add_section("defaults")
    for key, value in settings.items():
        parser.set("defaults", key, value)
    path = tree / f".fleet-sim-{run_dir.name}.cfg"
    with path.open("w") as fh:
        parser.write(fh)
    return path


def env_diff(env: dict[str, str], setup: Setup) -> dict[str, str]:
    return {
        k: v
        for k, v in env.items()
        if k.startswith("ANSIBLE_")
        and setup.env.get(k) != v
        and k not in ("ANSIBLE_FORCE_COLOR", "ANSIBLE_NOCOLOR")
    }


# ------------------------------------------------------------------ report


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "—"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s" if m else f"{sec} s"


def run_of(m: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((r for r in m["runs"] if r["kind"] == kind), None)


def table(measurements: Sequence[dict[str, Any]]) -> str:
    """The Markdown table: one row per (N, variant)."""
    head = (
        "| N | variant | first rollout (shipped build) | no-change re-run | good rollout "
        "| per host (first / re-run) | controller CPU s (first / re-run) | peak controller MiB "
        "| MiB received per host (first) | re-run changed | tasks per host (first / re-run) "
        "| re-run tasks per host by role |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    rows = []
    for m in sorted(measurements, key=lambda m: (m["n"], m["variant"])):
        runs = {k: run_of(m, k) for k in RUN_KINDS}
        ok = {k: r for k, r in runs.items() if r is not None and r["rc"] == 0}

        def cell(k: str, runs: dict[str, Any] = runs) -> str:
            r = runs[k]
            if r is None:
                return "—"
            return fmt_seconds(r["seconds"]) + ("" if r["rc"] == 0 else f" (failed, rc {r['rc']})")

        per_host = " / ".join(
            f"{ok[k]['seconds'] / m['n']:.1f} s" if k in ok else "—" for k in ("first", "rerun")
        )
        cpu = " / ".join(
            f"{ok[k]['controller_cpu_s']:.0f}"
            if ok.get(k, {}).get("controller_cpu_s", -1) >= 0
            else "—"
            for k in ("first", "rerun")
        )
        peak = max((r["peak_controller_mib"] for r in m["runs"]), default=0.0)
        first = runs["first"]
        rx = f"{first['host_rx_mib']:.1f}" if first else "—"
        rerun = runs["rerun"]
        changed = f"{rerun['changed_hosts']}/{m['n']}" if rerun else "—"
        note = " (compiled)" if m.get("compiled_during_run") else ""
        tasks = " / ".join(
            f"{ok[k]['tasks_per_host']:.0f}"
            if ok.get(k, {}).get("tasks_per_host", -1) >= 0
            else "—"
            for k in ("first", "rerun")
        )
        roles = ", ".join(
            f"{r} {c:g}" for r, c in (ok.get("rerun", {}).get("tasks_by_role") or {}).items()
        )
        rows.append(
            f"| {m['n']} | {m['variant']}{note} | {cell('first')} | {cell('rerun')} "
            f"| {cell('good')} | {per_host} | {cpu} | {peak:.0f} | {rx} | {changed} "
            f"| {tasks} | {roles or '—'} |"
        )
    return head + "\n".join(rows) + "\n"


def series(
    measurements: Sequence[dict[str, Any]], variant: str, kind: str, per_host_cpu: bool = False
) -> list[tuple[int, float]]:
    """(N, wall seconds) of this variant's passed runs of this kind, by N; with per_host_cpu,
    (N, controller CPU seconds / N) instead, leaving out runs that have no CPU figure."""
    points: list[tuple[int, float]] = []
    for m in measurements:
        if m["variant"] != variant:
            continue
        for r in m["runs"]:
            if r["kind"] != kind or r["rc"] != 0:
                continue
            if not per_host_cpu:
                points.append((m["n"], r["seconds"]))
            elif r.get("controller_cpu_s", -1.0) >= 0:
                points.append((m["n"], r["controller_cpu_s"] / m["n"]))
    return sorted(points)


def plot(measurements: Sequence[dict[str, Any]], path: Path) -> str:
    """Time against N, one line per run kind and variant; a sentence when matplotlib is missing."""
    try:
        # imported by name: matplotlib is optional (mypy needs no stubs for it)
        mpl: Any = importlib.import_module("matplotlib")
        mpl.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return (
            "no plot: matplotlib is not installed (pip install matplotlib); the table is complete"
        )
    # left: wall time against N; middle: the same per host (falling when hosts run in parallel);
    # right: the controller's CPU seconds per host (falling when a run's fixed cost dominates)
    fig, (ax, per, cpu) = plt.subplots(1, 3, figsize=(17, 5))
    styles = {"first": "-", "rerun": "--", "good": ":"}
    variants = sorted({m["variant"] for m in measurements})
    for vi, variant in enumerate(variants):
        for kind in RUN_KINDS:
            style = {"marker": "o", "color": f"C{vi}", "linestyle": styles[kind]}
            label = f"{variant}: {RUN_TITLES[kind]}"
            points = series(measurements, variant, kind)
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, [y / 60 for y in ys], label=label, **style)
                per.plot(xs, [y / x for x, y in points], label=label, **style)
            cpu_points = series(measurements, variant, kind, per_host_cpu=True)
            if cpu_points:
                xs, ys = zip(*cpu_points, strict=True)
                cpu.plot(xs, ys, label=label, **style)
    ax.set_xlabel("hosts (N)")
    ax.set_ylabel("wall time (min)")
    ax.set_title("playbooks/rollout.yml on N test hosts")
    per.set_xlabel("hosts (N)")
    per.set_ylabel("wall time per host (s)")
    per.set_title("per host")
    cpu.set_xlabel("hosts (N)")
    cpu.set_ylabel("controller CPU seconds per host")
    cpu.set_title("controller CPU per host")
    for a in (ax, per, cpu):
        a.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path}"


def report(out: Path) -> None:
    results = json.loads((out / "results.json").read_text())
    text = table(results["measurements"])
    (out / "table.md").write_text(text)
    print()
    print(text, end="")
    print(plot(results["measurements"], out / "fleet-sim.png"))


def save(out: Path, measurements: list[Measurement], machine: dict[str, Any]) -> None:
    """Write results.json: the measurements of this run, and those of earlier runs into the same
    directory for other (N, variant) pairs (a benchmark can be measured in several sittings)."""
    new = [asdict(m) for m in measurements]
    done = {(m["n"], m["variant"]) for m in new}
    try:
        old = json.loads((out / "results.json").read_text())["measurements"]
    except (OSError, ValueError, KeyError, TypeError):
        old = []
    kept = [m for m in old if (m.get("n"), m.get("variant")) not in done]
    data = {"machine": machine, "measurements": kept + new}
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(out / "results.json")


def machine_info() -> dict[str, Any]:
    mem = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return {
        "cpus": os.cpu_count(),
        "mem_gib": round(int(mem[1]) / 1024 / 1024, 1) if mem else None,
        "ansible": subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "--version"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.splitlines()[:1],
    }


# ------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="See docs/scale.md for the measured table and what each setting buys.",
    )
    ap.add_argument("--sizes", default="5,10,25,50", help="fleet sizes, comma-separated")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME or NAME:ENV=VALUE,e.VAR=VALUE,... (repeatable; default: baseline)",
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / ".cache" / "fleet-sim", help="results, logs, plot"
    )
    ap.add_argument("--report", action="store_true", help="only print the table and plot of --out")
    ap.add_argument("--list-variants", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.list_variants:
            for name, settings in BUILTIN_VARIANTS.items():
                print(f"{name:9} {VARIANT_HELP[name]}: {json.dumps(settings)}")
            return 0
        out: Path = args.out.resolve()
        if args.report:
            report(out)
            return 0
        sizes = parse_sizes(args.sizes)
        variants = [parse_variant(v) for v in args.variant or ["baseline"]]
        if len({v.name for v in variants}) != len(variants):
            raise SimError("--variant: each variant needs its own name")
        if os.geteuid() != 0:
            raise SimError("run as root (test hosts need bridges, overlay mounts and containers)")
        return simulate(out, sizes, variants)
    except SimError as e:
        print(f"fleet-sim: {e}", file=sys.stderr)
        return 1


def simulate(out: Path, sizes: Sequence[int], variants: Sequence[Variant]) -> int:
    env = dict(os.environ)
    env.setdefault("LLAMAFLEET_CACHE", "/var/cache/llamafleet")
    env.setdefault("LLAMAFLEET_TESTHOSTS", "/var/tmp/llamafleet-testhosts")
    env.setdefault("LLAMAFLEET_NET", "10.131.7")
    # ansible-playbook of this Python's environment, and what it runs, first on PATH
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    out.mkdir(parents=True, exist_ok=True)

    # SIGTERM (and SIGHUP) end the run like Ctrl-C: the hosts are removed on the way out
    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    measurements: list[Measurement] = []
    failed = False
    try:
        setup = prepare(env, out)
        build_once(setup)
        machine = machine_info()
        for n in sizes:
            for variant in variants:
                m = measure(setup, n, variant)
                measurements.append(m)
                save(out, measurements, machine)
                failed |= any(r.rc != 0 for r in m.runs) or len(m.runs) != len(RUN_KINDS)
                rerun = next((r for r in m.runs if r.kind == "rerun"), None)
                if rerun is not None and rerun.changed_hosts:
                    print(f"  the no-change re-run changed {rerun.changed_hosts} hosts", flush=True)
                    failed = True
    except KeyboardInterrupt as e:
        print(f"fleet-sim: interrupted ({e}); hosts removed", file=sys.stderr)
        return 130
    finally:
        testhost("unserve", str(HTTP_PORT), env=env, check=False)
        testhost("cleanup", env=env, check=False)
    report(out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The monitoring role's mtail program, run by the real mtail (Debian's 3.0.0~rc50, as the role
installs it) on a real llama-server log: the fork's build 9079 serving requests that share a
prompt prefix, two at once on two slots, its stderr rendered by the real journalctl as the role's
unit reads it (``--output=with-unit``), captured by tools/capture_server_log.py.

Its counters must agree with the server itself: tokens evaluated with llama-server's own
``llamacpp:prompt_tokens_total``, tokens served from the cache with the requests' own
``timings.cache_n``. The role's compile check (its ``validate:``) must refuse a broken program.

mtail comes from PATH or from ``$LLAMAFLEET_CACHE/tools/bin`` (testbed/unit-tools.sh, run by
``make unit``); without it these tests are skipped, except under CI (CI=true), where they fail."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from types import ModuleType

import yaml

from conftest import tool

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "monitoring"
PROGRAM = ROLE / "files" / "llama-server.mtail"
FIXTURES = Path(__file__).parent / "fixtures" / "monitoring"
STEM = "fork-b9079"


def one_shot(log: Path, tmp: Path) -> dict[tuple[str, str], float]:
    """The program's counters after reading ``log`` from start to end (mtail --one_shot)."""
    mtail = tool("mtail")
    progs = tmp / "progs"
    progs.mkdir(exist_ok=True)
    shutil.copy(PROGRAM, progs / PROGRAM.name)
    out = subprocess.run(
        [
            mtail,
            "--one_shot",
            "--one_shot_format",
            "prometheus",
            "--emit_prog_label=false",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--progs",
            str(progs),
            "--logs",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[tuple[str, str], float] = {}
    for line in out.stdout.splitlines():
        m = re.match(r'(llama_server_\w+)\{llama_instance="([^"]*)"\} (\S+)$', line)
        if m:
            found[(m.group(1), m.group(2))] = float(m.group(3))
    return found


def _server_counter(name: str) -> float:
    text = (FIXTURES / f"{STEM}.metrics.txt").read_text()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def test_the_fixture_is_a_real_journal_of_shared_prefix_requests() -> None:
    journal = (FIXTURES / f"{STEM}.journal.txt").read_text().splitlines()
    assert all(" llama-server-main.service[" in line for line in journal)
    requests = json.loads((FIXTURES / f"{STEM}.requests.json").read_text())
    assert len(requests) == 6
    assert sum(r["cache_n"] for r in requests) > 0, "some requests reused the prefix"
    # two slots at once: a second request started before the first one's timing lines
    events = [line for line in journal if "new prompt" in line or "print_timing" in line]
    assert any("new prompt" in a and "new prompt" in b for a, b in itertools.pairwise(events)), (
        "no two requests in flight at once"
    )


def test_mtail_counts_agree_with_the_server(tmp_path: Path) -> None:
    found = one_shot(FIXTURES / f"{STEM}.journal.txt", tmp_path)
    requests = json.loads((FIXTURES / f"{STEM}.requests.json").read_text())
    evaluated = found[("llama_server_prompt_tokens_evaluated_total", "main")]
    cached = found[("llama_server_prompt_tokens_cached_total", "main")]
    received = found[("llama_server_prompt_tokens_received_total", "main")]
    # llama-server's own counter of evaluated prompt tokens
    assert evaluated == _server_counter("llamacpp:prompt_tokens_total")
    # each request's own figures (the answer's timings)
    assert evaluated == sum(r["prompt_n"] for r in requests)
    assert cached == sum(r["cache_n"] for r in requests)
    assert received == evaluated + cached
    assert found[("llama_server_prompt_requests_total", "main")] == len(requests)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unit_exec_start() -> str:
    """The mtail unit's ExecStart= command line, as the template writes it."""
    text = (ROLE / "templates" / "llamafleet-mtail.service.j2").read_text()
    m = re.search(r"^ExecStart=(.*)$", text, re.M)
    assert m
    return m.group(1)


def _check_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mtail_check", ROLE / "files" / "mtail_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_unit_streams_its_standard_input_and_the_check_sees_new_lines(tmp_path: Path) -> None:
    """mtail as the unit runs it: ``--logs /dev/stdin`` fed by a process substitution that stays
    open (the unit's journalctl --follow never ends); its counters read from its live /metrics;
    then the role's post-start check (files/mtail_check.py) must see a line written later reach
    mtail, and must fail when the lines go where mtail does not read.

    What stands in for the journal: ``cat`` of the captured journal text, then ``tail -F`` of a
    file the check's writer appends to (on a host: systemd-cat into the journal). This cannot
    show journalctl following a live journal under the unit's sandbox; the pool scenario does,
    on systemd hosts, through the same check."""
    mtail = tool("mtail")
    check = _check_script()
    progs = tmp_path / "progs"
    progs.mkdir()
    shutil.copy(PROGRAM, progs / PROGRAM.name)
    journal = FIXTURES / f"{STEM}.journal.txt"
    followed = tmp_path / "followed.log"
    followed.touch()
    port = _free_port()
    exec_start = _unit_exec_start()
    # the unit's own options and redirection, with the journal reader swapped
    assert "--logs /dev/stdin" in exec_start and "< <(/usr/bin/journalctl --follow" in exec_start
    cmd = (
        f"exec {shlex.quote(mtail)} --progs {shlex.quote(str(progs))} --logs /dev/stdin "
        f"--address 127.0.0.1 --port {port} --emit_prog_label=false --logtostderr "
        f"< <(cat {shlex.quote(str(journal))}; exec tail -n0 -F {shlex.quote(str(followed))})"
    )
    proc = subprocess.Popen(["bash", "-c", cmd], stderr=subprocess.DEVNULL)
    try:
        lines = len(journal.read_text().splitlines())
        name = "llama_server_prompt_tokens_evaluated_total"
        server = _server_counter("llamacpp:prompt_tokens_total")

        def evaluated_in(text: str) -> float | None:
            m = re.search(rf'^{name}\{{llama_instance="main"\}} (\S+)$', text, re.M)
            return float(m.group(1)) if m else None

        # mtail counts a line in mtail_lines_total when it reads it, before its program has run
        # on it: a scrape can show every line read and the last one's counters not yet moved, so
        # wait for both (within the deadline) and then hold both to their values
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            if check.lines_read(text) >= lines and evaluated_in(text) == server:
                break
            time.sleep(0.5)
        assert check.lines_read(text) == lines
        assert evaluated_in(text) == server

        def writer(path: Path) -> list[str]:
            return ["sh", "-c", f'printf "%s\\n" "$0" >> {shlex.quote(str(path))}']

        ok, msg = check.check(port, 20, writer(followed))
        assert ok, msg
        assert followed.read_text().splitlines()[0] == check.LINE
        # the check line is not a request: the counters did not move
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            after = r.read().decode()
        assert re.findall(r"^llama_server_prompt_requests_total.*$", after, re.M) == re.findall(
            r"^llama_server_prompt_requests_total.*$", text, re.M
        )
        # lines that never reach mtail: the check fails and says so
        ok, msg = check.check(port, 3, writer(tmp_path / "elsewhere.log"))
        assert not ok and "read no line of the journal" in msg
    finally:
        proc.kill()
        proc.wait(timeout=10)
    # nothing listening: the check fails on the exporter
    ok, msg = check.check(_free_port(), 2, ["true"])
    assert not ok and "did not answer" in msg


def test_instances_are_counted_apart(tmp_path: Path) -> None:
    """Two instances' lines interleaved line by line (and a line of another unit): each keeps its
    own counts, as when journalctl follows every instance of a host."""
    lines = (FIXTURES / f"{STEM}.journal.txt").read_text().splitlines()
    other = [
        line.replace(" llama-server-main.service[", " llama-server-second.service[")
        for line in lines
    ]
    mixed: list[str] = []
    for a, b in zip(lines, other, strict=True):
        mixed += [a, b]
    mixed.append(
        "Tue 2026-12-01 02:08:27 UTC lf-server init.scope[1]: "
        "prompt eval time =  1.00 ms /  9 tokens"
    )
    log = tmp_path / "mixed.txt"
    log.write_text("\n".join(mixed) + "\n")
    found = one_shot(log, tmp_path)
    alone = one_shot(FIXTURES / f"{STEM}.journal.txt", tmp_path)
    for name in ("received", "evaluated", "cached"):
        key = f"llama_server_prompt_tokens_{name}_total"
        assert found[(key, "main")] == found[(key, "second")] == alone[(key, "main")]


def test_a_request_whose_start_was_not_seen_is_not_counted(tmp_path: Path) -> None:
    """mtail started while a request was being answered: its timing lines alone count nothing
    (no negative cached count)."""
    lines = (FIXTURES / f"{STEM}.journal.txt").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "new prompt" in line)
    log = tmp_path / "late.txt"
    log.write_text("\n".join(lines[first + 1 :]) + "\n")
    found = one_shot(log, tmp_path)
    requests = json.loads((FIXTURES / f"{STEM}.requests.json").read_text())
    assert found[("llama_server_prompt_requests_total", "main")] == len(requests) - 1
    assert found[("llama_server_prompt_tokens_cached_total", "main")] == sum(
        r["cache_n"] for r in requests[1:]
    )


def _validate_argv(program: Path) -> list[str]:
    """The role's validate: command for the program (vars/main.yml), with ``/usr/bin/mtail`` as
    the mtail found here."""
    text = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_monitoring_mtail_validate"]
    text = text.replace("/usr/bin/mtail", tool("mtail"))
    assert text.count("%s") == 1
    return shlex.split(text.replace("%s", shlex.quote(str(program))))


def test_the_roles_compile_check_refuses_a_broken_program(tmp_path: Path) -> None:
    # a temporary name without the .mtail suffix, as Ansible's validate: gets
    good = tmp_path / "tmpAbC123"
    shutil.copy(PROGRAM, good)
    ok = subprocess.run(
        _validate_argv(good), capture_output=True, text=True, check=False, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    broken = tmp_path / "tmpXyZ789"
    broken.write_text(PROGRAM.read_text().replace("del llama_server_slot_prompt_tokens", "del {"))
    bad = subprocess.run(
        _validate_argv(broken), capture_output=True, text=True, check=False, timeout=60
    )
    assert bad.returncode != 0
    assert "compile failed" in bad.stderr

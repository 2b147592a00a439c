"""testbed/cpu-account.py, the suite's CPU per program from the kernel's process accounting: a
process of known name and CPU time, run with accounting on, is in its report with that time.

Accounting is switched on inside a PID namespace of its own (`unshare --pid --fork`): the kernel
keeps one accounting file per PID namespace, so the test neither reads nor stops accounting a run
on this machine may have on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "testbed" / "cpu-account.py"
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"


@pytest.fixture(scope="module")
def accounted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real accounting file: the kernel's records of a namespace in which `lfacctprobe` (this
    Python under another name: the kernel records the name it was started by) burnt 0.4 s."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (acct(2) needs CAP_SYS_PACCT)")
    d = tmp_path_factory.mktemp("acct")
    probe = d / "lfacctprobe"
    probe.symlink_to(os.path.realpath(sys.executable))
    out = d / "run.pacct"
    py, tool = sys.executable, str(TOOL)
    script = f'"{py}" "{tool}" on "{out}" && "{probe}" -c "$BUSY" && "{py}" "{tool}" off'
    subprocess.run(
        ["unshare", "--pid", "--fork", "sh", "-c", script],
        check=True,
        env={**os.environ, "BUSY": BUSY},
        timeout=60,
    )
    return out


def _report(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), "report", str(path), *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_probe_is_reported_with_its_cpu_time(accounted: Path) -> None:
    res = _report(accounted, "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {r["command"]: r for r in data["commands"]}
    assert rows["lfacctprobe"]["processes"] == 1
    # 0.4 s of CPU asked for; the kernel's figure is sampled at its tick, so on a busy virtual
    # machine one process's figure may be off by a tenth or two (0.25 was seen once in a dozen
    # runs, 0.44 to 0.48 usually). A wrong unit or field would be off by a factor of 100.
    assert 0.1 <= rows["lfacctprobe"]["cpu_s"] < 2.0, rows["lfacctprobe"]
    assert data["total_cpu_s"] >= rows["lfacctprobe"]["cpu_s"]
    # largest first
    cpus = [r["cpu_s"] for r in data["commands"]]
    assert cpus == sorted(cpus, reverse=True)
    line = next(ln for ln in _report(accounted).stdout.splitlines() if ln.endswith(" lfacctprobe"))
    assert line.split()[0] == f"{rows['lfacctprobe']['cpu_s']:.1f}"


def test_a_file_that_is_not_whole_records_is_refused(accounted: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pacct"
    cut.write_bytes(accounted.read_bytes()[:-1])
    res = _report(cut)
    assert res.returncode == 2
    assert str(cut) in res.stderr and "whole number of 64-byte records" in res.stderr

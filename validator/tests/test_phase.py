"""testbed/phase, the timer of `make test`'s phases: each phase's wall time and result in one
table at the end, its budget for a cold or a warm cache, every phase over its budget named, and
the failed phase's last lines printed where CI shows them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PHASE = str(ROOT / "testbed" / "phase")


def _phase(
    tmp_path: Path, *args: str, keep_going: bool = False
) -> subprocess.CompletedProcess[str]:
    # not inherited: `make test` itself runs these tests with LLAMAFLEET_PHASE_KEEP_GOING=1
    env = {k: v for k, v in os.environ.items() if k != "LLAMAFLEET_PHASE_KEEP_GOING"} | {
        "LLAMAFLEET_PHASES": str(tmp_path / "phases"),
        "LLAMAFLEET_CACHE": str(tmp_path / "cache"),
    }
    if keep_going:
        env["LLAMAFLEET_PHASE_KEEP_GOING"] = "1"
    return subprocess.run([PHASE, *args], env=env, capture_output=True, text=True, check=False)


def _row(report: str, name: str) -> list[str]:
    return next(line.split() for line in report.splitlines() if line.startswith(name + " "))


def test_a_cold_suite_table_names_the_phase_over_its_budget(tmp_path: Path) -> None:
    assert "the cache is cold" in _phase(tmp_path, "reset").stdout
    # the script times in whole seconds (date +%s): a phase can straddle one more second than it
    # lasted, and a loaded machine adds to it, so each time is checked within a range
    fast = _phase(tmp_path, "run", "lint", "1", "1", "--", "true")
    assert fast.returncode == 0
    assert re.search(r"phase lint: ok in 0:0[01]\b", fast.stdout), fast.stdout
    # budget 0 minutes (cold): a phase of a second is over it
    slow = _phase(tmp_path, "run", "pool", "0", "5", "--", "sleep", "1.1")
    assert slow.returncode == 0
    report = _phase(tmp_path, "report", "45", "30").stdout
    assert "budgets in minutes for a cold cache" in report
    assert _row(report, "lint")[3:5] == ["1", "ok"]
    pool = _row(report, "pool")
    assert pool[3:8] == ["0", "ok", "OVER", "BUDGET", "by"]
    assert pool[8] in ("0:01", "0:02", "0:03"), pool
    assert "over budget: pool" in report
    suite = _row(report, "suite")
    assert suite[3] == "45" and suite[2] in ("0:01", "0:02", "0:03", "0:04"), suite


def test_a_warm_suite_uses_the_warm_budgets(tmp_path: Path) -> None:
    marker = tmp_path / "cache" / "rootfs" / "bookworm" / ".llamafleet-rootfs"
    marker.parent.mkdir(parents=True)
    marker.write_text("recipe=3\n")
    assert "the cache is warm" in _phase(tmp_path, "reset").stdout
    _phase(tmp_path, "run", "pool", "0", "5", "--", "sleep", "1.1")
    report = _phase(tmp_path, "report", "45", "30").stdout
    assert _row(report, "pool")[3:] == ["5", "ok"]
    assert "every phase within its budget" in report
    assert _row(report, "suite")[3] == "30"


def test_a_failed_phase_keeps_its_exit_status_and_shows_its_last_lines(tmp_path: Path) -> None:
    _phase(tmp_path, "reset")
    cmd = "seq 1 400; echo the-real-error >&2; exit 3"
    failed = _phase(tmp_path, "run", "default", "12", "7", "--", "bash", "-c", cmd)
    assert failed.returncode == 3
    assert "phase default: FAILED (rc 3)" in failed.stdout
    shown = [line for line in failed.stdout.splitlines() if line.startswith("  default| ")]
    # the last 150 lines of its log, not all 401
    assert len(shown) == 150 and shown[-1] == "  default| the-real-error"
    assert (tmp_path / "phases" / "default.log").read_text().count("\n") == 401
    done = _phase(tmp_path, "report")
    assert _row(done.stdout, "default")[4:6] == ["rc", "3"]
    assert "failed: default" in done.stdout and done.returncode == 1


def test_keep_going_records_the_failure_runs_on_and_the_report_fails(tmp_path: Path) -> None:
    """make test: a failed phase returns 0 to make (the other phases go on), the report fails."""
    _phase(tmp_path, "reset")
    failed = _phase(tmp_path, "run", "unit", "5", "4", "--", "false", keep_going=True)
    assert failed.returncode == 0 and "phase unit: FAILED (rc 1)" in failed.stdout
    assert _phase(tmp_path, "run", "cuda", "6", "4", "--", "true", keep_going=True).returncode == 0
    done = _phase(tmp_path, "report")
    assert done.returncode == 1 and "failed: unit" in done.stdout
    assert _row(done.stdout, "cuda")[4] == "ok"
    # without failures the report passes
    _phase(tmp_path, "reset")
    _phase(tmp_path, "run", "lint", "3", "2", "--", "true")
    assert _phase(tmp_path, "report").returncode == 0


def test_bad_names_are_refused(tmp_path: Path) -> None:
    bad = _phase(tmp_path, "run", "../x", "1", "1", "--", "true")
    assert bad.returncode == 2 and "bad name" in bad.stderr

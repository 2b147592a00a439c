#!/usr/bin/env python3
"""Score `llamafleet check` on the real-world corpus in tests/corpus/.

Each case is a folder ``tests/corpus/NNN-slug/`` holding the published input file(s) and a
``case.yaml`` with the findings a correct validator reports (``expected``), the ids it must not
report (``not_expected``) and ids that are acceptable either way (``also_ok``). The script runs
``llamafleet check --format json`` in-process on all input files of a case together, as the
command line would, and compares:

- an ``expected`` entry is a true positive when a reported finding has its id (and its line and
  file, where the entry gives them), else a false negative;
- a notice about the run (LF003, a named file not opened) is neither right nor wrong;
- a reported finding that matches no ``expected`` entry is a false positive unless an ``also_ok``
  entry covers it (same id, and the same severity or line where the entry gives one); a reported
  id listed in ``not_expected`` is always a false positive.

Each case runs in a scratch copy of its folder (settings files with mode 0600, since the mode of
a published file is not known) under an empty configuration, so nothing of this repository or of
the machine running it changes the result. A case that raises, times out or prints no JSON
report is a crash.

    python tools/corpus_score.py            # the per-case table and the totals
    python tools/corpus_score.py --json     # the same as JSON (tests/test_corpus.py reads it)
    python tools/corpus_score.py 007 012    # only the cases whose folder starts so
    python tools/corpus_score.py --corpus tests/corpus-fresh   # another folder of cases
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"
CASE_FILE = "case.yaml"
TIMEOUT_S = 30
KINDS = (
    "shell",
    "systemd",
    "compose",
    "docker-run",
    "powershell",
    "cmd",
    "settings",
    "client-env",
    "argv",
    "mixed",
)


class CaseError(ValueError):
    """A case.yaml that does not follow the format above."""


@dataclass(frozen=True)
class Expect:
    id: str
    line: int | None = None
    file: str | None = None
    severity: str | None = None

    def matches(self, f: Reported) -> bool:
        return (
            f.id == self.id
            and (self.line is None or f.line == self.line)
            and (self.file is None or f.file == self.file)
            and (self.severity is None or f.severity == self.severity)
        )

    def label(self) -> str:
        where = f"{self.file}:" if self.file else ""
        return f"{self.id}@{where}{self.line}" if self.line is not None else f"{self.id}"


@dataclass(frozen=True)
class Reported:
    id: str
    file: str
    line: int
    severity: str

    def label(self) -> str:
        return f"{self.id}@{self.file}:{self.line}({self.severity})"


@dataclass
class Case:
    name: str
    path: Path
    source: str
    kind: str
    what: str
    inputs: list[str]
    args: list[str]
    argv: str | None  # a file whose words are given to `check` after `--`
    expected: list[Expect]
    not_expected: list[Expect]
    also_ok: list[Expect]


@dataclass
class Outcome:
    case: Case
    exit_code: int | None = None
    crash: str | None = None
    reported: list[Reported] = field(default_factory=list)
    tp: list[Expect] = field(default_factory=list)
    fn: list[Expect] = field(default_factory=list)
    fp: list[Reported] = field(default_factory=list)
    forbidden: list[Reported] = field(default_factory=list)  # reported ids in not_expected
    tolerated: list[Reported] = field(default_factory=list)  # covered by also_ok

    @property
    def passes(self) -> bool:
        """What tests/test_corpus.py asserts: expected ⊆ reported, not_expected ∩ reported = ∅,
        and no crash."""
        return self.crash is None and not self.fn and not self.forbidden

    def as_dict(self) -> dict[str, Any]:
        return {
            "case": self.case.name,
            "kind": self.case.kind,
            "exit_code": self.exit_code,
            "crash": self.crash,
            "tp": [e.label() for e in self.tp],
            "fn": [e.label() for e in self.fn],
            "fp": [r.label() for r in self.fp],
            "forbidden": [r.label() for r in self.forbidden],
            "tolerated": [r.label() for r in self.tolerated],
            "passes": self.passes,
        }


# ----------------------------------------------------------------------------- reading cases


def _expect(item: Any, where: str) -> Expect:
    if isinstance(item, str):
        return Expect(item)
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise CaseError(f"{where}: each entry is an id or a mapping with 'id'")
    line = item.get("line")
    if line is not None and not isinstance(line, int):
        raise CaseError(f"{where}: 'line' must be an integer")
    file = item.get("file")
    severity = item.get("severity")
    return Expect(
        item["id"],
        line,
        str(file) if file is not None else None,
        str(severity) if severity is not None else None,
    )


def load_case(path: Path) -> Case:
    where = f"{path.name}/{CASE_FILE}"
    try:
        data = yaml.safe_load((path / CASE_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CaseError(f"{where}: {exc}") from exc
    if not isinstance(data, dict):
        raise CaseError(f"{where}: expected a mapping")
    for key in ("source", "kind", "what"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise CaseError(f"{where}: '{key}' is required")
    if data["kind"] not in KINDS:
        raise CaseError(f"{where}: kind {data['kind']!r} is not one of {', '.join(KINDS)}")
    argv = data.get("argv")
    if argv is not None and not (isinstance(argv, str) and (path / argv).is_file()):
        raise CaseError(f"{where}: argv: {argv!r} is not a file of the case folder")
    inputs = data.get("files") or sorted(
        p.name for p in path.iterdir() if p.is_file() and p.name not in (CASE_FILE, argv)
    )
    if not inputs and argv is None:
        raise CaseError(f"{where}: the case has no input file")
    for name in inputs:
        if not (path / name).is_file():
            raise CaseError(f"{where}: files: {name} is not in the case folder")
    not_expected = [_expect(i, f"{where}: not_expected") for i in data.get("not_expected") or []]
    return Case(
        name=path.name,
        path=path,
        source=data["source"],
        kind=data["kind"],
        what=data["what"],
        inputs=list(inputs),
        args=[str(a) for a in data.get("args") or []],
        argv=argv,
        expected=[_expect(i, f"{where}: expected") for i in data.get("expected") or []],
        not_expected=not_expected,
        also_ok=[_expect(i, f"{where}: also_ok") for i in data.get("also_ok") or []],
    )


def load_cases(only: Sequence[str] = (), corpus: Path = CORPUS) -> list[Case]:
    if not corpus.is_dir():
        raise CaseError(f"{corpus}: not a folder of cases")
    dirs = sorted(p for p in corpus.iterdir() if p.is_dir() and (p / CASE_FILE).is_file())
    if only:
        dirs = [d for d in dirs if any(d.name.startswith(o) for o in only)]
    return [load_case(d) for d in dirs]


# ----------------------------------------------------------------------------- running


class _TimeoutError(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - Windows
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _TimeoutError

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_check(case: Case) -> tuple[int | None, str | None, list[Reported]]:
    """Run `llamafleet check --format json` on the case's files: (exit code, crash, findings)."""
    from llamafleet.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="llamafleet-corpus-") as tmp:
        work = Path(tmp) / "case"
        work.mkdir()
        for name in case.inputs:
            dest = work / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(case.path / name, dest)
            dest.chmod(0o600)
        config = Path(tmp) / "empty.llamafleet.yaml"
        config.write_text("skip: []\n", encoding="utf-8")
        argv = ["check", "--format", "json", "--config", str(config), *case.args, *case.inputs]
        if case.argv is not None:
            text = (case.path / case.argv).read_text(encoding="utf-8")
            argv += ["--", *shlex.split(text, comments=True)]
        code: int | None = None
        crash: str | None = None
        try:
            os.chdir(work)
            with (
                _deadline(TIMEOUT_S),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                code = main(argv)
        except _TimeoutError:
            crash = f"timeout after {TIMEOUT_S} s"
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:
            tb = traceback.extract_tb(exc.__traceback__)
            last = tb[-1] if tb else None
            at = f" at {Path(last.filename).name}:{last.lineno}" if last else ""
            crash = f"{type(exc).__name__}: {exc}{at}"
        finally:
            os.chdir(old_cwd)
    if crash is not None:
        return code, crash, []
    if code == 3:
        return code, f"internal error (exit 3): {err.getvalue().strip()[:200]}", []
    try:
        doc = json.loads(out.getvalue())
        findings = [
            Reported(str(f["id"]), str(f["file"]), int(f.get("line") or 0), str(f["severity"]))
            for f in doc["findings"]
        ]
    except (ValueError, KeyError, TypeError):
        return code, f"no JSON report (exit {code}): {err.getvalue().strip()[:200]}", []
    unique = list(dict.fromkeys(findings))
    return code, None, unique


#: Notices about the run, not about the published file (LF003: a file the checks need was not
#: opened, since the corpus runs with the default of opening none): neither right nor wrong.
NOTICES = frozenset({"LF003"})


def score(case: Case) -> Outcome:
    code, crash, reported = run_check(case)
    o = Outcome(case=case, exit_code=code, crash=crash, reported=reported)
    if crash is not None:
        o.fn = list(case.expected)
        return o
    matched: set[Reported] = set()
    for e in case.expected:
        hits = [r for r in reported if e.matches(r)]
        if hits:
            o.tp.append(e)
            # an entry without a line accepts every report of its id (one finding per client
            # or per file, reported wherever the tool points at it)
            matched.update(hits if e.line is None else hits[:1])
        else:
            o.fn.append(e)
    for r in reported:
        if r in matched:
            continue
        if any(n.matches(r) for n in case.not_expected):
            o.forbidden.append(r)
            o.fp.append(r)
        elif any(a.matches(r) for a in case.also_ok) or r.id in NOTICES:
            o.tolerated.append(r)
        else:
            o.fp.append(r)
    return o


@dataclass
class Totals:
    cases: int
    passing: int
    tp: int
    fp: int
    fn: int
    crashes: int
    exit_codes: dict[str, int]

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "passing": self.passing,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "crashes": self.crashes,
            "exit_codes": self.exit_codes,
        }


def totals(outcomes: Sequence[Outcome]) -> Totals:
    codes: dict[str, int] = {}
    for o in outcomes:
        key = "crash" if o.crash is not None else str(o.exit_code)
        codes[key] = codes.get(key, 0) + 1
    return Totals(
        cases=len(outcomes),
        passing=sum(o.passes for o in outcomes),
        tp=sum(len(o.tp) for o in outcomes),
        fp=sum(len(o.fp) for o in outcomes),
        fn=sum(len(o.fn) for o in outcomes),
        crashes=sum(o.crash is not None for o in outcomes),
        exit_codes=dict(sorted(codes.items())),
    )


def run_all(only: Sequence[str] = (), corpus: Path = CORPUS) -> tuple[list[Outcome], Totals]:
    outcomes = [score(c) for c in load_cases(only, corpus)]
    return outcomes, totals(outcomes)


# ----------------------------------------------------------------------------- report


def table(outcomes: Sequence[Outcome], t: Totals) -> str:
    rows = [f"{'case':<44} {'kind':<10} {'exit':>5} {'TP':>3} {'FP':>3} {'FN':>3}  details"]
    for o in outcomes:
        details = []
        if o.crash:
            details.append(f"CRASH {o.crash}")
        if o.fn:
            details.append("missed " + ", ".join(e.label() for e in o.fn))
        if o.fp:
            details.append("extra " + ", ".join(r.label() for r in o.fp))
        exit_s = "-" if o.exit_code is None else str(o.exit_code)
        rows.append(
            f"{o.case.name[:44]:<44} {o.case.kind:<10} {exit_s:>5} {len(o.tp):>3} "
            f"{len(o.fp):>3} {len(o.fn):>3}  {'; '.join(details)}"
        )
    codes = ", ".join(f"{k}: {v}" for k, v in t.exit_codes.items())
    rows += [
        "",
        f"cases {t.cases} (passing {t.passing}), true positives {t.tp}, false positives {t.fp}, "
        f"false negatives {t.fn}",
        f"precision {t.precision:.1%}, recall {t.recall:.1%}, crashes {t.crashes}; "
        f"exit codes {codes}",
    ]
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("only", nargs="*", help="case folder prefixes (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument(
        "--corpus",
        type=Path,
        default=CORPUS,
        metavar="DIR",
        help="the folder of cases (default: tests/corpus)",
    )
    args = p.parse_args(argv)
    try:
        outcomes, t = run_all(args.only, args.corpus.resolve())
    except CaseError as exc:
        sys.stderr.write(f"corpus_score: {exc}\n")
        return 2
    if args.json:
        doc = {"cases": [o.as_dict() for o in outcomes], "totals": t.as_dict()}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        sys.stdout.write(table(outcomes, t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

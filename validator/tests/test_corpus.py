"""The real-world corpus (tests/corpus/, scored by tools/corpus_score.py): each published case
must give its expected findings and none of its `not_expected` ones, and the totals must not fall
below what was measured when the ratchet was last raised.

A case that fails today is marked xfail(strict=True) with the cause: when the fix lands the case
passes, pytest reports XPASS as a failure, and the marker must go (and the ratchet go up).
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "corpus_score.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_score", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("corpus_score", mod)
    spec.loader.exec_module(mod)
    return mod


corpus = _load_tool()

#: Cases that fail today, with their cause (one line each, e.g. "LS020 on --spec-type draft-mtp,
#: a mode newer builds accept"). Empty: every case passes. The causes fixed so far are listed in
#: docs/corpus.md.
XFAIL: dict[str, str] = {}

#: The totals measured when the ratchet was last raised: they may only get better.
RATCHET = {
    "cases": 50,
    "tp": 136,
    "precision": 1.0,
    "recall": 1.0,
    "crashes": 0,
}


FRESH = Path(__file__).resolve().parent / "corpus-fresh"

#: The fresh sample (tests/corpus-fresh, cases 051-080, scored before any change for it:
#: SCORE-before.md): the cases that fail today, with their cause.
FRESH_XFAIL: dict[str, str] = {
    "066-nixos-services-llama-cpp": "NixOS services.llama-cpp is not read",
}

#: The fresh sample's totals when its ratchet was last raised (first score: 86.9 % / 79.1 %).
FRESH_RATCHET = {"cases": 30, "tp": 65, "precision": 0.985, "recall": 0.970, "crashes": 0}

#: each corpus: its folder, its xfails and its ratchet
CORPORA = {
    "corpus": (corpus.CORPUS, XFAIL, RATCHET),
    "fresh": (FRESH, FRESH_XFAIL, FRESH_RATCHET),
}


@cache
def _outcomes(which: str = "corpus") -> dict[str, Any]:
    cases = corpus.load_cases(corpus=CORPORA[which][0])
    return {o.case.name: o for o in (corpus.score(c) for c in cases)}


def _params() -> list[object]:
    out: list[object] = []
    for which, (folder, xfail, _) in CORPORA.items():
        for case in corpus.load_cases(corpus=folder):
            reason = xfail.get(case.name)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(which, case.name, marks=marks, id=f"{which}-{case.name}"))
    return out


@pytest.mark.parametrize("which", sorted(CORPORA))
def test_xfail_names_are_cases(which: str) -> None:
    folder, xfail, _ = CORPORA[which]
    names = {c.name for c in corpus.load_cases(corpus=folder)}
    assert set(xfail) <= names, sorted(set(xfail) - names)


@pytest.mark.parametrize(("which", "name"), _params())
def test_case(which: str, name: str) -> None:
    o = _outcomes(which)[name]
    assert o.crash is None, f"{name}: {o.crash}"
    missed = [e.label() for e in o.fn]
    forbidden = [r.label() for r in o.forbidden]
    assert not missed, f"{name}: expected findings not reported: {missed}"
    assert not forbidden, f"{name}: reported findings the case rules out: {forbidden}"


@pytest.mark.parametrize("which", sorted(CORPORA))
def test_totals_ratchet(which: str) -> None:
    ratchet = CORPORA[which][2]
    assert RATCHET["cases"] >= 45
    t = corpus.totals(list(_outcomes(which).values()))
    assert t.cases >= ratchet["cases"]
    assert t.tp >= ratchet["tp"], t.as_dict()
    assert round(t.precision, 3) >= ratchet["precision"], t.as_dict()
    assert round(t.recall, 3) >= ratchet["recall"], t.as_dict()
    assert t.crashes <= ratchet["crashes"], t.as_dict()

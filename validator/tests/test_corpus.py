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

#: The classes of cause, as keys of FAILING below.
CAUSES = {
    "A": "CC010 on http://0.0.0.0:PORT, which reaches the local host",
    "B": "a command run through a variable ($BIN -m ...) not read: LF002",
    "C": "LLAMA_ARG_* in a Compose service's environment not read (image not llama.cpp's)",
    "D": "podman/docker run with the image in a variable ($IMAGE ARGS) not read: LF002",
    "E": "--spec-type draft-mtp judged invalid from the fork's value list (LS020)",
    "F": "a unit whose ExecStart runs a start script reported as not understood (LF002)",
    "G": "options of a multi-line ExecStart reported at the ExecStart= line, not at their own",
    "H": "a '#' after a unit value (User=x  # comment) not seen as part of the value: no SD002",
}

#: Cases that fail today, and the classes of cause (CAUSES) of each.
FAILING: dict[str, str] = {
    "001-gpt-oss-missing-backslash-litellm": "A",
    "008-binary-in-variable-bare-flash-attn": "B",
    "019-compose-llama-arg-env-and-entrypoint": "C",
    "033-podman-run-image-variable-fa-1": "D",
    "044-qwen36-mtp-script-compose-and-unit": "EF",
    "045-hardened-unit-vulkan-qwen36": "G",
    "046-qwen35-unit-on-0000": "G",
    "047-unit-inline-comment-in-user": "H",
}
XFAIL = {name: "; ".join(CAUSES[c] for c in cs) for name, cs in FAILING.items()}

#: The totals measured when the ratchet was last raised: they may only get better.
RATCHET = {
    "cases": 50,
    "tp": 123,
    "precision": 0.924,
    "recall": 0.904,
    "crashes": 0,
}


@cache
def _outcomes() -> dict[str, Any]:
    return {o.case.name: o for o in (corpus.score(c) for c in corpus.load_cases())}


def _params() -> list[object]:
    out: list[object] = []
    for case in corpus.load_cases():
        reason = XFAIL.get(case.name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(case.name, marks=marks, id=case.name))
    return out


def test_xfail_names_are_cases() -> None:
    names = {c.name for c in corpus.load_cases()}
    assert set(XFAIL) <= names, sorted(set(XFAIL) - names)


@pytest.mark.parametrize("name", _params())
def test_case(name: str) -> None:
    o = _outcomes()[name]
    assert o.crash is None, f"{name}: {o.crash}"
    missed = [e.label() for e in o.fn]
    forbidden = [r.label() for r in o.forbidden]
    assert not missed, f"{name}: expected findings not reported: {missed}"
    assert not forbidden, f"{name}: reported findings the case rules out: {forbidden}"


def test_totals_ratchet() -> None:
    t = corpus.totals(list(_outcomes().values()))
    assert t.cases >= RATCHET["cases"] >= 45
    assert t.tp >= RATCHET["tp"], t.as_dict()
    assert t.precision >= RATCHET["precision"], t.as_dict()
    assert t.recall >= RATCHET["recall"], t.as_dict()
    assert t.crashes <= RATCHET["crashes"], t.as_dict()

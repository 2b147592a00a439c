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

#: The classes of cause, as keys of XFAIL below.
CAUSES = {
    "A": "client environment in shell scripts (export, VAR=... claude) not read: LF002, no CC rule",
    "B": "no rule yet for an option line cut off the command (lost backslash, comment line)",
    "C": "no rule yet for a stray positional argument (llama-server: invalid argument)",
    "D": "no rule yet for the deprecated ANTHROPIC_SMALL_FAST_MODEL",
    "E": "only the first llama-server command of a file is read",
    "F": "--options written with underscores reported as unknown (LS014)",
    "G": "unresolved shell values judged invalid (LS020 on $port, $(( )))",
    "H": "-ngl -1 (auto) taken for layers placed by hand (LS011)",
    "I": "LS011 reported at -ngl instead of the option that turns --fit off",
    "J": 'options kept in a bash array ("${args[@]}") not read',
    "K": "PowerShell (backtick continuations, .\\llama-server.exe) not read",
    "L": "docker/podman run IMAGE ARGS not read",
    "M": "docker-compose command:/environment not read",
    "N": "LS005 at warning on a build of unknown number",
    "O": "options of a multi-line ExecStart reported at the ExecStart= line",
    "P": "a '#' after a unit value (User=x  # comment) is not seen as part of the value",
}

#: Cases that fail today, and the classes of cause (CAUSES) of each.
FAILING: dict[str, str] = {
    "001-gpt-oss-missing-backslash-litellm": "ABDHI",
    "002-three-servers-comments-in-continuations": "BCEN",
    "003-entrypoint-underscored-options": "F",
    "004-unresolved-variables-arithmetic-ctx": "G",
    "005-bare-flash-attn-unquoted-args-variable": "G",
    "007-underscored-sampling-options": "F",
    "010-commented-option-inside-continuation": "B",
    "011-options-in-bash-array-with-comments": "J",
    "012-powershell-server-and-settings-issue-27107": "K",
    "014-claude-local-wrapper-exports": "AD",
    "015-docker-run-readme-blocks": "L",
    "018-compose-two-services-folded-command": "EM",
    "019-compose-llama-arg-env-and-entrypoint": "M",
    "020-lm-studio-inline-env-in-function": "A",
    "021-ollama-exports-in-notes": "A",
    "022-local-proxy-to-cloud-api-key": "A",
    "023-zsh-exports-litellm-over-http": "AD",
    "024-exported-base-url-with-v1-issue-20416": "A",
    "025-ollama-api-key-exports-issue-16094": "A",
    "026-five-servers-in-shell-functions": "BE",
    "028-powershell-old-server-binary": "K",
    "029-bedrock-gateway-exports": "AD",
    "030-variables-then-exported-indirectly": "AD",
    "031-local-proxy-exports-sourced-from-zshrc": "A",
    "033-podman-run-image-variable-fa-1": "L",
    "036-cli-only-options-given-to-server-issue-9013": "K",
    "040-ollama-exports-empty-api-key": "A",
    "042-quoted-defaults-ngl-minus-one": "H",
    "043-qwen36-docker-one-line-and-router-settings": "L",
    "044-qwen36-mtp-script-compose-and-unit": "M",
    "045-hardened-unit-vulkan-qwen36": "O",
    "046-qwen35-unit-on-0000": "O",
    "047-unit-inline-comment-in-user": "P",
    "048-hosted-api-settings-small-fast-model": "D",
}
XFAIL = {name: "; ".join(CAUSES[c] for c in cs) for name, cs in FAILING.items()}

#: The totals measured when the ratchet was last raised: they may only get better.
RATCHET = {
    "cases": 50,
    "tp": 55,
    "precision": 0.611,
    "recall": 0.407,
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

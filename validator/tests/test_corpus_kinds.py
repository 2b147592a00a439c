"""Each kind of miss the fresh sample showed (issue: `llamafleet check` on configurations it has
never seen) has a published file in the corpora on each side: one where the finding must be
reported (`expected`) and one where it must not (`not_expected`). The corpora's own test
(test_corpus.py) scores every case; this one keeps the kinds covered: a case dropped or an
expectation removed leaves its kind with one side only, and this fails naming it.

Each entry: the kind, then (case, rule) pairs for the fail side and for the pass side. A case
is a directory of tests/corpus or tests/corpus-fresh whose case.yaml names its published source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import run_cli

HERE = Path(__file__).resolve().parent

KINDS: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {
    "docker run IMAGE ARGS (llama.cpp's server images, options after the image)": (
        [
            ("055-docker-gpt-oss-placeholder-key", "LS004"),
            ("062-docker-run-one-line-parallel-8", "LS007"),
        ],
        [
            ("055-docker-gpt-oss-placeholder-key", "LF002"),
            ("062-docker-run-one-line-parallel-8", "LF002"),
        ],
    ),
    "wrapper functions and argument arrays": (
        [
            ("064-shell-functions-two-servers", "LS004"),
            ("011-options-in-bash-array-with-comments", "LS004"),
        ],
        [
            ("064-shell-functions-two-servers", "LS014"),
            ("011-options-in-bash-array-with-comments", "LF002"),
        ],
    ),
    "a Compose service published without services:": (
        [("061-compose-fragment-without-services", "LS007")],
        [("061-compose-fragment-without-services", "LF002")],
    ),
    "a Makefile recipe (read, or LF002: never a silent 0 findings)": (
        [
            ("059-makefile-llava-server-recipe", "LS004"),
            ("060-makefile-llamafile-and-ollama-only", "LF002"),
        ],
        [("059-makefile-llava-server-recipe", "LF002")],
    ),
    "client settings given only as environment (CC004, CC012)": (
        [
            ("024-exported-base-url-with-v1-issue-20416", "CC004"),
            ("072-proxy-docs-exports-small-fast-model", "CC012"),
        ],
        [
            ("025-ollama-api-key-exports-issue-16094", "CC004"),
            ("071-gateway-exports-nonessential-off", "CC012"),
        ],
    ),
    "systemd user units (SD002)": (
        [("047-unit-inline-comment-in-user", "SD002")],
        [
            ("056-user-unit-nemotron-lost-backslash", "SD002"),
            ("057-user-unit-router-models-dir", "SD002"),
        ],
    ),
    "values parsed as the fork parses them (LS020)": (
        [("070-issue-bare-fa-before-ngl-lan-host", "LS020")],
        [
            ("051-gpt-oss-120b-top-k-float", "LS020"),
            ("052-gpt-oss-roo-script-top-k-float", "LS020"),
        ],
    ),
    "a chat template named with --chat-template-file (LS021)": (
        [],
        [("065-addon-chat-template-file-generated", "LS021")],
    ),
}

#: a kind whose miss was a silence: the corpora's scoring counts no notice about the run
#: (tools/corpus_score.py: LF003 is neither right nor wrong), so its fail side is checked below,
#: on the same published file, by running the checker
NOTICE_ONLY = {"a chat template named with --chat-template-file (LS021)"}


def _case(name: str) -> dict[str, Any]:
    for corpus in ("corpus-fresh", "corpus"):
        path = HERE / corpus / name / "case.yaml"
        if path.is_file():
            found: dict[str, Any] = yaml.safe_load(path.read_text())
            return found
    raise AssertionError(f"no case {name} in tests/corpus or tests/corpus-fresh")


def _ids(entries: Any) -> set[str]:
    ids: set[str] = set()
    for e in entries or []:
        ids.add(str(e["id"] if isinstance(e, dict) else e).split()[0])
    return ids


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_has_a_published_case_on_each_side(kind: str) -> None:
    fail, passing = KINDS[kind]
    for name, rule in fail:
        case = _case(name)
        assert str(case.get("source", "")).startswith("https://"), f"{name}: no published source"
        assert rule in _ids(case.get("expected")), f"{kind}: {name} does not expect {rule}"
    for name, rule in passing:
        case = _case(name)
        assert str(case.get("source", "")).startswith("https://"), f"{name}: no published source"
        assert rule in _ids(case.get("not_expected")), f"{kind}: {name} does not rule out {rule}"
    assert passing, f"{kind}: no published case where the finding must stay away"
    assert bool(fail) != (kind in NOTICE_ONLY), f"{kind}: no published case expects the finding"


def test_a_template_file_not_opened_is_said_once_with_the_flag_that_opens_it() -> None:
    """065 (a published add-on start script) names --chat-template-file template.json: by default
    the checker does not open it, and says so once, at info, naming the flag that would."""
    script = HERE / "corpus-fresh" / "065-addon-chat-template-file-generated" / "run.sh"
    res = run_cli(["check", str(script), "--format", "json"], cwd=script.parent)
    assert res.code in (0, 1), res.err
    notes = [f for f in res.json()["findings"] if f["id"] == "LF003"]
    assert len(notes) == 1, notes
    (note,) = notes
    assert note["severity"] == "info" and note["line"] == 10
    assert "LS021" in note["message"] and "--read-referenced" in note["fix"]
    assert not [f for f in res.json()["findings"] if f["id"] == "LS021"]

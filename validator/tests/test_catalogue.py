"""Catalogue invariants: schema, unique ids, a docs page, fixtures and a predicate per rule."""

from __future__ import annotations

import re

import jsonschema
import yaml

from conftest import FIXTURES, run_cli
from llamafleet.catalogue import catalogue, compiled, docs_page, raw_catalogue, schema
from llamafleet.rules import load_all

#: The number of rules. Changing the catalogue means changing this number on purpose.
EXPECTED_RULES = 51


def test_catalogue_matches_schema() -> None:
    jsonschema.validate(raw_catalogue(), schema())


def test_compiled_catalogue_is_the_yaml() -> None:
    """What `llamafleet check` loads (catalogue/compiled.json) is rules.yaml as it is now."""
    assert compiled() == raw_catalogue(), "run `python tools/gen_docs.py` in validator/"


def test_ids_unique_and_counted() -> None:
    ids = [r["id"] for r in raw_catalogue()["rules"]]
    assert len(ids) == len(set(ids))
    names = [r["name"] for r in raw_catalogue()["rules"]]
    assert len(names) == len(set(names))
    assert len(ids) == EXPECTED_RULES


def test_every_rule_has_a_predicate() -> None:
    assert set(load_all()) == set(catalogue()) - {"LF001", "LF002"}


def test_every_rule_has_pass_and_fail_fixtures() -> None:
    for rid in catalogue():
        path = FIXTURES / "rules" / f"{rid}.yaml"
        assert path.is_file(), f"{rid}: no fixture file {path.name}"
        data = yaml.safe_load(path.read_text())
        assert data["rule"] == rid
        assert data.get("fail"), f"{rid}: no fail fixture"
        assert data.get("pass"), f"{rid}: no pass fixture"


def test_every_rule_has_a_docs_page() -> None:
    for rid, info in catalogue().items():
        page = docs_page(rid)
        assert page is not None, f"{rid}: no docs page"
        first = page.splitlines()[0]
        assert first.startswith(f"# {rid}") and info.name in first, first
        assert re.search(rf"\*\*Severity:\*\* {info.severity}\b", page), f"{rid}: severity line"
        assert "## Fix" in page and "## Why" in page


def test_measured_table_in_client_rule_pages() -> None:
    for rid in ("CC001", "CC002", "CC009"):
        page = docs_page(rid) or ""
        assert "99.8 %" in page and "0.1 %" in page and "2236" in page and "100 ms" in page, rid


def test_explain_prints_page(cli: object) -> None:
    res = run_cli(["explain", "LS001"])
    assert res.code == 0 and res.out.startswith("# LS001")
    res = run_cli(["explain", "cache-ram-disabled"])
    assert res.code == 0 and "LS001" in res.out
    res = run_cli(["explain", "XX999"])
    assert res.code == 2 and "unknown rule" in res.err


def test_rules_lists_all() -> None:
    res = run_cli(["rules"])
    assert res.code == 0
    assert len(res.out.strip().splitlines()) == EXPECTED_RULES

"""Every rule against its pass and fail fixtures (tests/fixtures/rules/<ID>.yaml), via the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import FIXTURES, run_cli
from llamafleet.catalogue import catalogue

RULE_FIXTURES = FIXTURES / "rules"


def _cases() -> list[Any]:
    params = []
    for path in sorted(RULE_FIXTURES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for kind in ("fail", "pass"):
            for case in data.get(kind) or []:
                params.append(
                    pytest.param(
                        data["rule"], kind, case, id=f"{data['rule']}-{kind}-{case['name']}"
                    )
                )
    return params


def _materialise(case: dict[str, Any], tmp: Path) -> list[str]:
    args: list[str] = []
    paths: list[str] = []
    for name, content in (case.get("files") or {}).items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content.replace("{dir}", str(tmp)))
        p.chmod(int(str((case.get("modes") or {}).get(name, "600")), 8))
        if not name.endswith(".key"):
            paths.append(str(p))
    if case.get("facts"):
        facts = tmp / "facts.yaml"
        facts.write_text(yaml.safe_dump(case["facts"]))
        args += ["--facts", str(facts)]
    extra = [
        a.replace("{fixtures}", str(FIXTURES)).replace("{dir}", str(tmp))
        for a in case.get("args") or []
    ]
    if "--" in extra:
        cut = extra.index("--")
        return ["check", *paths, *args, *extra[:cut], "--format", "json", "--", *extra[cut + 1 :]]
    return ["check", *paths, *args, *extra, "--format", "json"]


@pytest.mark.parametrize(("rule", "kind", "case"), _cases())
def test_rule_fixture(rule: str, kind: str, case: dict[str, Any], tmp_path: Path) -> None:
    res = run_cli(_materialise(case, tmp_path), cwd=tmp_path)
    assert res.code in (0, 1), res.err
    findings = [f for f in res.json()["findings"] if f["id"] == rule]
    if kind == "pass":
        assert findings == [], f"{rule} fired on a pass fixture: {findings}"
        return
    assert findings, f"{rule} did not fire; got {res.json()['findings']}"
    f = findings[0]
    assert f["severity"] == case.get("severity", catalogue()[rule].severity) or any(
        g["severity"] == case.get("severity") for g in findings
    )
    if "line" in case:
        assert f["line"] == case["line"], findings
    if "message_contains" in case:
        assert any(case["message_contains"] in g["message"] for g in findings), findings
    if "fix_contains" in case:
        assert any(case["fix_contains"] in g["fix"] for g in findings), findings
    assert "{" not in f["message"] and "{" not in f["fix"], f"unfilled placeholder: {f}"

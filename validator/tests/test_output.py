"""Report formats (snapshots of the seed guide's files), exit codes, suppressions, config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from llamafleet.catalogue import catalogue

SEED = FIXTURES / "seed"
SNAPSHOTS = Path(__file__).parent / "snapshots"
SEED_ARGS = [
    "check",
    "start-qwen36.sh",
    "settings.json",
    "start-qwen36.cmd",
    "--facts",
    "facts.yaml",
]


@pytest.fixture
def seed_dir(tmp_path: Path) -> Path:
    for p in SEED.iterdir():
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "settings.json").chmod(0o644)  # as a hand-made file usually is
    facts = (
        (tmp_path / "facts.yaml")
        .read_text()
        .replace(
            "../help/fork-b9079-69d8e4be4.help.txt",
            str(FIXTURES / "help" / "fork-b9079-69d8e4be4.help.txt"),
        )
    )
    (tmp_path / "facts.yaml").write_text(facts)
    return tmp_path


def _snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1" or not path.exists():
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; rerun with UPDATE_SNAPSHOTS=1 if intended"


@pytest.mark.parametrize("fmt", ["human", "json", "sarif"])
def test_seed_snapshot(fmt: str, seed_dir: Path) -> None:
    res = run_cli([*SEED_ARGS, "--format", fmt], cwd=seed_dir)
    assert res.code == 1, res.err
    _snapshot(f"seed.{fmt}", res.out)


def test_seed_ids(seed_dir: Path) -> None:
    res = run_cli([*SEED_ARGS, "--format", "json"], cwd=seed_dir)
    ids = {f["id"] for f in res.json()["findings"]}
    assert {
        "LS001",
        "LS003",
        "LS006",
        "LS007",
        "LS010",
        "LS013",
        "LS015",
        "LS017",
        "LS019",
        "CC003",
        "CC004",
    } <= ids
    by_file = {f["file"] for f in res.json()["findings"]}
    assert by_file == {"start-qwen36.sh", "settings.json", "start-qwen36.cmd"}
    assert all(f["fix"] for f in res.json()["findings"])


def test_json_shape(seed_dir: Path) -> None:
    doc = run_cli([*SEED_ARGS, "--format", "json"], cwd=seed_dir).json()
    assert set(doc) == {"findings", "summary"}
    for f in doc["findings"]:
        assert {"id", "severity", "message", "file", "line", "fix"} <= set(f)
    assert doc["summary"]["error"] == sum(1 for f in doc["findings"] if f["severity"] == "error")


def test_sarif_structure(seed_dir: Path) -> None:
    doc = json.loads(run_cli([*SEED_ARGS, "--format", "sarif"], cwd=seed_dir).out)
    assert doc["version"] == "2.1.0"
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(catalogue())
    for r in run["results"]:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
        assert r["level"] in ("error", "warning", "note")
        region = r["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1
    # a rule's help has no unfilled {placeholder} of a finding
    for rule in rules:
        assert "{" not in rule["help"]["text"], rule["id"]


@pytest.mark.parametrize(("fail_on", "code"), [("error", 0), ("warning", 1), ("info", 1)])
def test_fail_on_thresholds(fail_on: str, code: int, tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("llama-server -m q.gguf -ctk turbo3 -ctv q8_0\n")
    res = run_cli(
        [
            "check",
            "run.sh",
            "--fail-on",
            fail_on,
            "--help-text",
            str(FIXTURES / "help" / "fork-b9079-69d8e4be4.help.txt"),
        ],
        cwd=tmp_path,
    )
    assert res.code == code, res.out


def test_inline_suppression_same_and_previous_line(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text(
        "# llamafleet: ignore[LS010] measured fine on this model\n"
        "llama-server -m q.gguf -ctk turbo3 -ctv turbo3 \\\n"
        "  --cache-reuse 0  # llamafleet: ignore[LS006] explicit on purpose\n"
    )
    doc = run_cli(["check", "run.sh", "--format", "json"], cwd=tmp_path).json()
    ids = [f["id"] for f in doc["findings"]]
    assert "LS010" not in ids and "LS006" not in ids and "LF001" not in ids
    assert doc["summary"]["suppressed"] == 2


def test_file_suppression_and_missing_reason(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text(
        "# llamafleet: ignore-file[LS011]\nllama-server -m q.gguf -ngl 99\n"
    )
    doc = run_cli(["check", "run.sh", "--format", "json"], cwd=tmp_path).json()
    ids = [f["id"] for f in doc["findings"]]
    assert "LS011" not in ids and ids.count("LF001") == 1


def test_config_skip_and_severity(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("llama-server -m q.gguf --cache-reuse 0 -ctk turbo3\n")
    (tmp_path / ".llamafleet.yaml").write_text(
        "skip: [LS009]\nseverity: {LS006: error}\nfail_on: error\n"
    )
    res = run_cli(["check", "run.sh", "--format", "json"], cwd=tmp_path)
    doc = res.json()
    sev = {f["id"]: f["severity"] for f in doc["findings"]}
    assert "LS009" not in sev and sev["LS006"] == "error" and res.code == 1


def test_bad_config_names_file_and_fix(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("llama-server\n")
    (tmp_path / ".llamafleet.yaml").write_text("skip: [LS999]\n")
    res = run_cli(["check", "run.sh"], cwd=tmp_path)
    assert res.code == 2 and ".llamafleet.yaml" in res.err and "LS999" in res.err


def test_missing_file_is_usage_error(tmp_path: Path) -> None:
    res = run_cli(["check", "nope.sh"], cwd=tmp_path)
    assert res.code == 2 and "nope.sh: no such file" in res.err


def test_raw_flags_after_double_dash(tmp_path: Path) -> None:
    res = run_cli(
        ["check", "--format", "json", "--", "-m", "q.gguf", "--cache-ram", "0"], cwd=tmp_path
    )
    assert [f["id"] for f in res.json()["findings"]] == ["LS001"]
    assert res.json()["findings"][0]["file"] == "<argv>"


def test_seed_settings_with_single_slot_script_reports_cc002_cc009_errors(tmp_path: Path) -> None:
    """Issue acceptance: settings with only the header fixed + a -np 1 server script."""
    (tmp_path / "settings.json").write_text(
        json.dumps(
            {
                "env": {
                    "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080",
                    "ANTHROPIC_AUTH_TOKEN": "k",
                    "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
                }
            }
        )
    )
    (tmp_path / "server.sh").write_text("llama-server -m q.gguf -c 131072 -np 1 --port 8080\n")
    doc = run_cli(["check", "settings.json", "server.sh", "--format", "json"], cwd=tmp_path).json()
    sev = {f["id"]: f["severity"] for f in doc["findings"]}
    assert sev.get("CC002") == "error" and sev.get("CC009") == "error"

"""The examples of validator/README.md do what the text around them says: the suppression
comments (a line and the next, a whole file, LF001 without a reason) and the configuration file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    # a block inside a list item is indented like its fence: take that indentation off
    return [
        "".join(line[len(indent) :] for line in body.splitlines(keepends=True))
        for indent, body in re.findall(rf"^( *)```{lang}\n(.*?)^ *```", text, re.M | re.S)
    ]


def _check(tmp_path: Path, name: str, text: str, *extra: str) -> dict[str, Any]:
    (tmp_path / ".git").mkdir(exist_ok=True)  # no config from above tmp_path
    (tmp_path / name).write_text(text)
    res = run_cli(["check", name, "--format", "json", *extra], cwd=tmp_path)
    assert res.code in (0, 1), res.err
    doc: dict[str, Any] = res.json()
    return doc


def _ids(doc: dict[str, Any]) -> set[str]:
    return {f["id"] for f in doc["findings"]}


def test_line_suppressions(tmp_path: Path) -> None:
    (script,) = [b for b in _blocks("sh") if "ignore[LS010]" in b]
    doc = _check(tmp_path, "run.sh", script)
    assert not _ids(doc) & {"LS010", "LS006", "LF001"}
    assert doc["summary"]["suppressed"] == 2
    # without the comments both rules fire
    bare = re.sub(r"\s*# llamafleet:.*", "", script.split("\n", 1)[1])
    assert {"LS010", "LS006"} <= _ids(_check(tmp_path, "bare.sh", bare))


def test_file_suppression(tmp_path: Path) -> None:
    (unit,) = _blocks("ini")
    doc = _check(tmp_path, "test.service", unit)
    assert not _ids(doc) & {"SD002", "SD003", "LF001"}
    assert doc["summary"]["suppressed"] == 2
    assert {"SD002", "SD003"} <= _ids(_check(tmp_path, "bare.service", unit.split("\n", 1)[1]))


def test_missing_reason_still_silences_and_is_lf001(tmp_path: Path) -> None:
    text = "# llamafleet: ignore[LS010]\nllama-server -m q.gguf -fa on -ctk turbo3 -ctv turbo3\n"
    doc = _check(tmp_path, "run.sh", text)
    ids = _ids(doc)
    assert "LF001" in ids and "LS010" not in ids
    # LF001 itself is not silenced by a comment
    doc = _check(
        tmp_path, "run2.sh", "# llamafleet: ignore[LF001,LS010]\n" + text.split("\n", 1)[1]
    )
    assert "LF001" in _ids(doc)


@pytest.mark.parametrize("prefix", ["REM", "::"])
def test_cmd_comment_forms(tmp_path: Path, prefix: str) -> None:
    text = (
        f"{prefix} llamafleet: ignore[ls006] on purpose\r\n"
        "llama-server.exe -m m.gguf --cache-reuse 0\r\n"
    )
    doc = _check(tmp_path, "run.cmd", text)
    assert "LS006" not in _ids(doc) and doc["summary"]["suppressed"] == 1


def test_config_example(tmp_path: Path) -> None:
    (config,) = [b for b in _blocks("yaml") if "fail_on" in b]
    (tmp_path / "sub").mkdir()
    (tmp_path / ".llamafleet.yaml").write_text(config)
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub" / "run.sh").write_text("llama-server -m q.gguf --cache-reuse 0\n")
    res = run_cli(["check", "run.sh", "--format", "json"], cwd=tmp_path / "sub")
    sev = {f["id"]: f["severity"] for f in res.json()["findings"]}
    assert sev.get("LS006") == "error" and res.code == 1
    # fail_on: warning makes a warning fail; --fail-on on the command line wins over it
    (tmp_path / "sub" / "w.sh").write_text("llama-server -m q.gguf -fa on -ctk q8_0 -ctv turbo3\n")
    res = run_cli(["check", "w.sh", "--format", "json"], cwd=tmp_path / "sub")
    assert {f["severity"] for f in res.json()["findings"]} == {"warning"} and res.code == 1
    assert run_cli(["check", "w.sh", "--fail-on", "error"], cwd=tmp_path / "sub").code == 0

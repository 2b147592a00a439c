"""`llamafleet check` loads only what its inputs need: no YAML parser, schema validator, planner
or template engine for a script, a unit and a settings file (each is milliseconds of every run;
tools/bench.py measures the run). The compiled catalogue is what it reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROBE = """
import json, sys
from llamafleet.cli import main
code = main(sys.argv[1:])
mods = sorted(m for m in sys.modules if m.split(".")[0] in ("yaml", "jsonschema", "jinja2")
              or m in ("llamafleet.planner", "llamafleet.plan_cli", "llamafleet.chat_template",
                       "llamafleet.template_cli", "shutil"))
print(json.dumps({"code": code, "modules": mods}), file=sys.stderr)
"""


def _loaded(tmp_path: Path, files: dict[str, str]) -> list[str]:
    paths = []
    for name, text in files.items():
        p = tmp_path / name
        p.write_text(text)
        paths.append(str(p))
    res = subprocess.run(
        [sys.executable, "-c", PROBE, "check", *paths],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    report = json.loads(res.stderr.strip().splitlines()[-1])
    assert report["code"] in (0, 1), res.stderr
    modules: list[str] = report["modules"]
    return modules


def test_a_three_file_check_loads_no_yaml_schema_planner_or_templates(tmp_path: Path) -> None:
    files = {
        "run.sh": "llama-server -m q.gguf -c 65536 -np 1 --cache-ram 0\n",
        "llama.service": "[Service]\nUser=llama\nExecStart=/usr/bin/llama-server -m q.gguf\n",
        "settings.json": '{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}}',
    }
    assert _loaded(tmp_path, files) == []


def test_a_compose_file_loads_yaml_only(tmp_path: Path) -> None:
    files = {"compose.yaml": "services:\n  s:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"}
    assert [m for m in _loaded(tmp_path, files) if not m.startswith("yaml")] == []


def test_main_leaves_the_collector_as_its_caller_had_it(tmp_path: Path) -> None:
    import gc

    from llamafleet.cli import main

    script = tmp_path / "run.sh"
    script.write_text("llama-server -m q.gguf -c 65536\n")
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            assert main(["check", str(script)]) in (0, 1)
            assert gc.isenabled() is before
    finally:
        gc.enable()


def test_a_check_collects_again_once_its_inputs_are_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector is off while the command loads; inputs past COLLECT_ABOVE are read and
    checked with it on (a long run must not keep every cycle it makes)."""
    import gc

    from llamafleet import cli, engine

    seen: list[bool] = []
    real = engine.run

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "run", spy)
    small, big = tmp_path / "small.sh", tmp_path / "big.sh"
    small.write_text("llama-server -m q.gguf\n")
    big.write_text("# " + "x" * cli.COLLECT_ABOVE + "\nllama-server -m q.gguf\n")
    try:
        cli.main(["check", str(small)])
        cli.main(["check", str(big)])
    finally:
        gc.unfreeze()
    assert seen == [False, True]
    assert gc.isenabled()

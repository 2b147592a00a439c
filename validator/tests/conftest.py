from __future__ import annotations

import importlib.util
import io
import json
import os
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llamafleet.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out)
        return data


def run_cli(args: Sequence[str], cwd: Path | None = None) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Any:
    return run_cli


def load_ansible_plugin(path: Path) -> ModuleType:
    """Import a module or plugin file of the repository's roles or playbooks by its path (they
    import Ansible, so the test is skipped without it)."""
    pytest.importorskip("ansible")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
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

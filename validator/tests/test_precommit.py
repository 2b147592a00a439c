"""The repository's pre-commit hook (.pre-commit-hooks.yaml at the top): the real `pre-commit`
program, run from a fresh git repository against this checkout (`pre-commit try-repo`, which
takes uncommitted changes of tracked files too), installs the validator the way pre-commit
installs any Python hook (`pip install .` at the top: pyproject.toml there) and checks the
repository's files with `llamafleet check --skip-unrelated`.

The files of the fresh repository: the real published launch script of fixtures/seed (refused),
a Claude Code settings file and a script of another program. `other.sh` stands for any shell
script of a repository that has nothing to do with llama-server; it cannot show how a real
repository's unrelated scripts are worded, which the corpus test below covers from the other
side (every published file with a finding is one the hook reads). Needs the `pre-commit` package
(the `test` extra) and PyPI or a pip cache for the hook's environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llamafleet.engine import is_related

VALIDATOR = Path(__file__).resolve().parents[1]
ROOT = VALIDATOR.parent
SEED = VALIDATOR / "tests" / "fixtures" / "seed"
TESTS = VALIDATOR / "tests"


def _hook() -> dict[str, Any]:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = [h for h in hooks if h["id"] == "llamafleet-check"]
    return dict(hook)


def _git(repo: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True, timeout=60)


def _try_repo(repo: Path, home: Path) -> subprocess.CompletedProcess[str]:
    pre_commit = shutil.which("pre-commit", path=os.path.dirname(sys.executable))
    assert pre_commit, "pre-commit is not installed: pip install './validator[test]'"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PRE_COMMIT_HOME"] = str(home)
    argv = [pre_commit, "try-repo", str(ROOT), "llamafleet-check", "--all-files"]
    return subprocess.run(
        argv, cwd=repo, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def _project(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        return dict(tomllib.loads(path.read_text(encoding="utf-8"))["project"])
    pytest.skip("tomllib is Python 3.11's")


def test_the_root_pyproject_builds_the_validators_package() -> None:
    root = _project(ROOT / "pyproject.toml")
    own = _project(VALIDATOR / "pyproject.toml")
    for key in ("name", "version", "requires-python", "scripts", "license", "description"):
        assert root[key] == own[key], key
    assert root["dependencies"] == own["dependencies"]
    assert "optional-dependencies" not in root  # the extras are the validator's own


def test_the_hook_selects_the_files_the_checker_reads() -> None:
    hook = _hook()
    assert hook["language"] == "python" and hook["require_serial"] is True
    assert hook["entry"].split()[:2] == ["llamafleet", "check"]
    files = re.compile(hook["files"])
    for name in (
        "start-qwen36.sh",
        "bin/serve.bash",
        "deploy/llama-server.service",
        "win/start.bat",
        "win/start.ps1",
        "compose.yaml",
        "docker/docker-compose.gpu.yml",
        ".claude/settings.json",
        "proj/.claude/settings.local.json",
        "etc/claude-code/managed-settings.json",
        ".env",
    ):
        assert files.search(name), name
    for name in ("package.json", "src/app.py", "README.md", "ansible/site.yml", "tsconfig.json"):
        assert not files.search(name), name


def _corpus_files() -> list[Path]:
    """Every published file of both corpora that the hook selects, in the cases that expect a
    finding other than LF002 (a vLLM script, 035, holds nothing to check: passing it over is
    right)."""
    files = re.compile(_hook()["files"])
    out = []
    for case in sorted(
        [*TESTS.glob("corpus/*/case.yaml"), *TESTS.glob("corpus-fresh/*/case.yaml")]
    ):
        doc = yaml.safe_load(case.read_text(encoding="utf-8"))
        ids = [i["id"] if isinstance(i, dict) else str(i) for i in doc.get("expected") or []]
        if not set(ids) - {"LF002"}:
            continue
        out += [p for p in case.parent.iterdir() if p.is_file() and files.search(p.name)]
    return sorted(out)


def test_every_published_file_with_a_finding_is_read_not_passed_over() -> None:
    files = _corpus_files()
    assert len(files) > 60
    passed_over = [
        f"{p.parent.name}/{p.name}"
        for p in files
        if not is_related(str(p), p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not passed_over


def test_a_file_that_names_llama_server_but_cannot_be_read_is_still_reported(
    tmp_path: Path,
) -> None:
    from llamafleet.cli import main

    broken = tmp_path / "serve.sh"
    broken.write_text('#!/bin/sh\n# starts llama-server\nexec "$(cat cmdline)"\n', encoding="utf-8")
    other = tmp_path / "other.sh"
    other.write_text("#!/bin/sh\nrsync -a src/ dst/\n", encoding="utf-8")
    assert main(["check", "--skip-unrelated", str(other)]) == 0
    assert main(["check", "--skip-unrelated", str(other), str(broken)]) == 1
    assert main(["check", str(other)]) == 1  # without the option: LF002, as before


def test_pre_commit_runs_the_hook_from_this_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    shutil.copy(SEED / "start-qwen36.sh", repo / "start-qwen36.sh")
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text(
        '{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}}\n', encoding="utf-8"
    )
    (repo / "other.sh").write_text("#!/bin/sh\nrsync -a src/ dst/\n", encoding="utf-8")
    (repo / "package.json").write_text('{"name": "x"}\n', encoding="utf-8")
    _git(repo, "add", ".")
    home = tmp_path / "pre-commit-home"

    r = _try_repo(repo, home)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-4000:]
    assert "llamafleet check" in out and "Failed" in out
    assert "start-qwen36.sh:29: LS007 [error]" in out  # 0.0.0.0 without a key
    assert "start-qwen36.sh:24: LS001 [error]" in out  # --cache-ram 0
    assert ".claude/settings.json" in out  # read with the script: one run, both files
    assert "1 file(s) passed over" in out  # other.sh; package.json is not the hook's
    assert "package.json" not in out.split("llamafleet check", 1)[1]

    # the user fixes the script (loopback, a key file, one slot) and the settings (no per-prompt
    # header, no git snapshot, no side requests, the key from a helper, a compaction window that
    # fits the slot); the hook passes
    _git(repo, "rm", "-q", "-f", "start-qwen36.sh")
    (repo / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "includeGitInstructions": False,
                "apiKeyHelper": "cat ~/.config/llamafleet/qwen.key",
                "env": {
                    "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080",
                    "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000",
                },
            }
        ),
        encoding="utf-8",
    )
    (repo / "serve.sh").write_text(
        "#!/bin/sh\nexec llama-server -m /models/qwen.gguf --host 127.0.0.1 --port 8080 \\\n"
        "  --api-key-file /etc/llamafleet/qwen.key -c 131072 -np 1\n",
        encoding="utf-8",
    )
    _git(repo, "add", ".")
    r = _try_repo(repo, home)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "Passed" in out

"""Where `llamafleet check` finds .llamafleet.yaml: --config, else the nearest one upwards from the
current directory, up to the directory holding .git (or the filesystem root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from llamafleet.config_file import CONFIG_NAMES, find_config

SKIP_LS006 = "skip: [LS006]\n"
SCRIPT = "llama-server -m q.gguf --cache-reuse 0\n"  # LS006 (warning) and nothing at error


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """repo/.git, repo/a/b/c: a repository inside tmp_path (whose parents are not searched)."""
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "b" / "c").mkdir(parents=True)
    return tmp_path / "repo"


def test_names() -> None:
    assert CONFIG_NAMES == (".llamafleet.yaml", ".llamafleet.yml")


def test_in_the_start_directory(repo: Path) -> None:
    (repo / "a" / ".llamafleet.yaml").write_text(SKIP_LS006)
    assert find_config(repo / "a") == str(repo / "a" / ".llamafleet.yaml")


def test_nearest_one_upwards_wins(repo: Path) -> None:
    (repo / ".llamafleet.yaml").write_text(SKIP_LS006)
    (repo / "a" / ".llamafleet.yml").write_text(SKIP_LS006)
    assert find_config(repo / "a" / "b" / "c") == str(repo / "a" / ".llamafleet.yml")
    assert find_config(str(repo / "a" / "b")) == str(repo / "a" / ".llamafleet.yml")
    assert find_config(repo) == str(repo / ".llamafleet.yaml")


def test_yaml_before_yml_in_one_directory(repo: Path) -> None:
    (repo / "a" / ".llamafleet.yml").write_text(SKIP_LS006)
    (repo / "a" / ".llamafleet.yaml").write_text(SKIP_LS006)
    assert find_config(repo / "a" / "b") == str(repo / "a" / ".llamafleet.yaml")


def test_the_repository_top_counts_and_nothing_above_it(repo: Path) -> None:
    (repo.parent / ".llamafleet.yaml").write_text(SKIP_LS006)
    assert find_config(repo / "a" / "b" / "c") is None
    (repo / ".llamafleet.yml").write_text(SKIP_LS006)
    assert find_config(repo / "a" / "b" / "c") == str(repo / ".llamafleet.yml")


def test_a_git_file_also_ends_the_search(tmp_path: Path) -> None:
    # a worktree or submodule has a .git *file*
    (tmp_path / ".git").mkdir()
    (tmp_path / ".llamafleet.yaml").write_text(SKIP_LS006)
    (tmp_path / "sub" / "x").mkdir(parents=True)
    (tmp_path / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    assert find_config(tmp_path / "sub" / "x") is None
    assert find_config(tmp_path) == str(tmp_path / ".llamafleet.yaml")


def test_a_directory_of_that_name_is_not_a_config(repo: Path) -> None:
    (repo / "a" / ".llamafleet.yaml").mkdir()
    (repo / ".llamafleet.yaml").write_text(SKIP_LS006)
    assert find_config(repo / "a" / "b") == str(repo / ".llamafleet.yaml")


def test_relative_start_is_made_absolute(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / ".llamafleet.yaml").write_text(SKIP_LS006)
    monkeypatch.chdir(repo / "a")
    found = find_config("b")
    assert found is not None and os.path.isabs(found)
    assert found == str(repo / ".llamafleet.yaml")


def test_up_to_the_root_without_a_repository() -> None:
    # "/" has no parent: the search ends there (whatever the machine has in /)
    expected = next((f"/{n}" for n in CONFIG_NAMES if os.path.isfile(f"/{n}")), None)
    assert find_config("/") == expected


def _ids(res_out: str) -> set[str]:
    import json

    return {f["id"] for f in json.loads(res_out)["findings"]}


def test_check_reads_the_config_of_a_parent_directory(repo: Path) -> None:
    (repo / ".llamafleet.yaml").write_text(SKIP_LS006)
    (repo / "a" / "b" / "run.sh").write_text(SCRIPT)
    res = run_cli(["check", "run.sh", "--format", "json"], cwd=repo / "a" / "b")
    assert res.code == 0 and "LS006" not in _ids(res.out), res.err


def test_check_ignores_a_config_above_the_repository(repo: Path) -> None:
    (repo.parent / ".llamafleet.yaml").write_text(SKIP_LS006)
    (repo / "a" / "run.sh").write_text(SCRIPT)
    res = run_cli(["check", "run.sh", "--format", "json"], cwd=repo / "a")
    assert "LS006" in _ids(res.out), res.err


def test_config_option_wins_over_discovery(repo: Path, tmp_path: Path) -> None:
    (repo / ".llamafleet.yaml").write_text("skip: [LS999]\n")  # broken: must not be read
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(SKIP_LS006)
    (repo / "a" / "run.sh").write_text(SCRIPT)
    res = run_cli(["check", "run.sh", "--format", "json", "--config", str(chosen)], cwd=repo / "a")
    assert res.code == 0 and "LS006" not in _ids(res.out), res.err
    # without --config the discovered (broken) one is read and named
    res = run_cli(["check", "run.sh"], cwd=repo / "a")
    assert res.code == 2 and str(repo / ".llamafleet.yaml") in res.err


def test_help_says_where_the_config_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    from llamafleet.cli import main

    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert ".llamafleet.yaml or .llamafleet.yml" in out and ".git" in out

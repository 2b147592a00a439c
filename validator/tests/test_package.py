"""The validator as a linter package: `python -m build` makes its wheel and sdist, and the wheel
installs into a clean virtual environment (no Ansible, nothing of this checkout) where
`llamafleet` runs and checks a real published launch script. Needs the `build` package (the
`test` extra) and PyPI or a pip cache for the build backend and the dependencies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

VALIDATOR = Path(__file__).resolve().parents[1]
SEED = VALIDATOR / "tests" / "fixtures" / "seed"


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, capture_output=True, text=True, timeout=600, env=env, check=False, **kw
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    # built from a copy: setuptools writes build/ and *.egg-info into the tree it builds
    tree = tmp_path_factory.mktemp("src") / "validator"
    shutil.copytree(
        VALIDATOR,
        tree,
        ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__", ".*"),
    )
    argv = [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out)]
    r = _run([*argv, str(tree)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_the_wheel_and_sdist_hold_the_package_and_its_data(dist: Path) -> None:
    (wheel,) = dist.glob("llamafleet-*.whl")
    (sdist,) = dist.glob("llamafleet-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "llamafleet/cli.py" in names and "llamafleet/py.typed" in names
    assert any(n.startswith("llamafleet/catalogue/") and n.endswith(".yaml") for n in names)
    assert any(n.endswith("entry_points.txt") for n in names)
    assert not any(n.startswith(("tests/", "ansible")) for n in names)
    with tarfile.open(sdist) as t:
        members = t.getnames()
    assert any(m.endswith("/pyproject.toml") for m in members)
    assert any(m.endswith("/src/llamafleet/cli.py") for m in members)


def test_the_wheel_installs_into_a_clean_venv_and_checks_a_script(
    dist: Path, tmp_path: Path
) -> None:
    (wheel,) = dist.glob("llamafleet-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    py = env_dir / "bin" / "python"
    r = _run([str(py), "-m", "pip", "install", "--quiet", str(wheel)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    tool = env_dir / "bin" / "llamafleet"
    version = _run([str(tool), "--version"], cwd=tmp_path)
    assert version.returncode == 0 and "0." in version.stdout + version.stderr
    # no Ansible came with it
    assert _run([str(py), "-c", "import ansible"]).returncode != 0
    # a real launch script (fixtures/seed: published, with --cache-ram 0 among its traps)
    checked = _run([str(tool), "check", str(SEED / "start-qwen36.sh")], cwd=tmp_path)
    assert checked.returncode != 0, checked.stdout
    assert "LS0" in checked.stdout, checked.stdout

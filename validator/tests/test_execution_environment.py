"""Running the playbooks beyond one controller (docs/beyond-one-controller.md).

The execution environment: `ansible-builder create` turns ee/execution-environment.yml into a
build context whose Containerfile installs the llamafleet validator of this checkout and the
collections of requirements.yml, on an ansible-core pinned inside requirements-dev.txt's range.

ansible-pull: a real `ansible-pull` from a file:// clone of this repository checks out the pinned
commit (not the branch tip) and runs playbooks/pull-check.yml (the checkout only with
--skip-tags pull_check_validator; two playbooks in one run); `--only-if-changed` skips the playbook
when the checkout did not move and runs it when the pin moved; `--verify-commit` refuses an
unsigned commit before any playbook runs and accepts one signed by a key in the keyring.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
EE_FILE = ROOT / "ee" / "execution-environment.yml"
PACKAGE = ROOT / "validator" / "src" / "llamafleet"
PULL_CHECK = "playbooks/pull-check.yml"

pytestmark = pytest.mark.skipif(
    not EE_FILE.is_file() or not (ROOT / ".git").exists(),
    reason="run from a git checkout of the whole repository",
)


def _program(name: str, how: str) -> str:
    """A program the tests run: beside the Python running them (the repository's venv), else on
    PATH. Without it the test is skipped, saying why; under CI (CI=true) it fails instead, so CI
    never passes a test it did not run (as conftest.tool does)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    why = f"{name} not found beside {sys.executable} nor on PATH: {how}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


def _ee() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EE_FILE.read_text())
    return data


def _collections(requirements: Any) -> list[tuple[str, str]]:
    """(name, version) of each collection of a Galaxy requirements mapping, sorted."""
    assert isinstance(requirements, dict) and isinstance(requirements.get("collections"), list)
    out = []
    for c in requirements["collections"]:
        entry = {"name": c} if isinstance(c, str) else c
        out.append((str(entry["name"]), str(entry.get("version", "*"))))
    return sorted(out)


def _ee_galaxy() -> Any:
    """The EE's Galaxy requirements: a file beside the EE file, a mapping or a YAML string."""
    galaxy = _ee()["dependencies"]["galaxy"]
    if isinstance(galaxy, str) and "\n" not in galaxy:
        return yaml.safe_load((EE_FILE.parent / galaxy).read_text())
    return yaml.safe_load(galaxy) if isinstance(galaxy, str) else galaxy


def _dev_range(name: str) -> SpecifierSet:
    for raw in (ROOT / "requirements-dev.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and Requirement(line).name == name:
            return Requirement(line).specifier
    raise AssertionError(f"requirements-dev.txt names no {name}")


def _pinned(ref: str) -> Version:
    """The version of a `name==X` pip reference (an EE pin must be exact)."""
    specs = list(Requirement(ref).specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"{ref!r} is not pinned with =="
    return Version(specs[0].version)


# ------------------------------------------------------------------------------ the EE


def test_ee_collections_are_requirements_yml() -> None:
    want = yaml.safe_load((ROOT / "requirements.yml").read_text())
    assert _collections(_ee_galaxy()) == _collections(want)
    assert {n for n, _ in _collections(want)} >= {"ansible.posix", "community.general"}


def test_ee_pins_ansible_core_inside_the_dev_range() -> None:
    deps = _ee()["dependencies"]
    core = _pinned(deps["ansible_core"]["package_pip"])
    assert Requirement(deps["ansible_core"]["package_pip"]).name == "ansible-core"
    dev = _dev_range("ansible-core")
    assert dev.contains(core), f"the EE's ansible-core {core} is outside requirements-dev.txt {dev}"
    _pinned(deps["ansible_runner"]["package_pip"])
    # the interpreter the EE installs runs ansible-core (>= 3.11) and the validator
    m = re.fullmatch(r"/usr/bin/python(\d+)\.(\d+)", deps["python_interpreter"]["python_path"])
    assert m, deps["python_interpreter"]
    python = Version(f"{m[1]}.{m[2]}")
    pyproject = (ROOT / "validator" / "pyproject.toml").read_text()
    needs = re.search(r'^requires-python\s*=\s*"([^"]+)"', pyproject, re.M)
    assert needs and SpecifierSet(needs[1]).contains(python)
    assert python >= Version("3.11")


@pytest.fixture(scope="module")
def context() -> Iterator[Path]:
    """The build context `ansible-builder create` makes of the EE file (no container engine)."""
    how = "pip install ansible-builder (make bootstrap installs it with validator[test])"
    builder = _program("ansible-builder", how)
    with tempfile.TemporaryDirectory(prefix="lf-ee-") as tmp:
        out = Path(tmp) / "context"
        argv = [builder, "create", "-f", str(EE_FILE), "-c", str(out)]
        proc = subprocess.run(
            [*argv, "--output-filename", "Containerfile"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield out


def _final_stage(containerfile: str) -> list[str]:
    lines = containerfile.splitlines()
    start = lines.index("FROM base AS final")
    return lines[start:]


def test_ee_context_installs_this_checkouts_validator(context: Path) -> None:
    final = _final_stage((context / "Containerfile").read_text())
    copies = [ln.split()[1:] for ln in final if ln.startswith("COPY _build/")]
    installs = [ln for ln in final if ln.startswith("RUN ") and " -m pip install " in ln]
    # the directory copied in from the build context is pip-installed in the final image
    target = next(
        (dst for src, dst in copies if any(f" {dst} " in f"{ln} " for ln in installs)), None
    )
    assert target, f"no COPY of the context that a pip install of the final stage uses: {final}"
    src = next(s for s, d in copies if d == target)
    copied = context / src
    project = (copied / "pyproject.toml").read_text()
    assert re.search(r'^name = "llamafleet"$', project, re.M)
    assert project == (ROOT / "validator" / "pyproject.toml").read_text()
    assert (copied / "README.md").read_bytes() == (ROOT / "validator" / "README.md").read_bytes()
    # every file of the package, byte for byte (package data too: catalogue, docs, data)
    for f in PACKAGE.rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            rel = f.relative_to(PACKAGE.parent)
            assert (copied / "src" / rel).read_bytes() == f.read_bytes(), rel
    # and the copy works on its own: the catalogue loads from it
    proc = subprocess.run(
        [sys.executable, "-c", "import llamafleet, sys; print(llamafleet.__file__)"],
        env={**os.environ, "PYTHONPATH": str(copied / "src")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip().startswith(str(copied / "src"))
    rules = subprocess.run(
        [sys.executable, "-m", "llamafleet", "rules"],
        env={**os.environ, "PYTHONPATH": str(copied / "src")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert re.search(r"^LS001\s", rules.stdout, re.M)
    assert any("-m llamafleet --version" in ln for ln in final), "the image checks its validator"


def test_ee_context_installs_the_collections_and_ansible_core(context: Path) -> None:
    containerfile = (context / "Containerfile").read_text()
    assert re.search(
        r"^RUN .*ansible-galaxy collection install .*-r requirements\.yml", containerfile, re.M
    )
    built = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    want = yaml.safe_load((ROOT / "requirements.yml").read_text())
    assert _collections(built) == _collections(want)
    deps = _ee()["dependencies"]
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M)
    assert refs and deps["ansible_core"]["package_pip"] in refs[1].split()
    assert deps["ansible_runner"]["package_pip"] in refs[1].split()
    # the base image is a build argument whose default is the EE file's (--build-arg overrides it)
    base = _ee()["images"]["base_image"]["name"]
    assert f'ARG EE_BASE_IMAGE="{base}"' in containerfile.splitlines()
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile.splitlines()
    assert "openssh-clients" in (context / "_build" / "bindep.txt").read_text()


# ------------------------------------------------------------------------------ ansible-pull


@dataclass
class Origin:
    url: str
    pinned: str  # the commit with this checkout's pull-check.yml
    tip: str  # a later commit: the branch moved on
    env: dict[str, str]
    home: Path


def _git(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=llamafleet test", "-c", "user.email=test@example.invalid", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    """A clone of this repository's HEAD with the working tree's pull-check.yml committed on top
    (the pinned commit), and one more commit after it (the branch tip)."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    with tempfile.TemporaryDirectory(prefix="lf-pull-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "LC_ALL": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        repo = Path(tmp) / "origin"
        _git(env, "clone", "--quiet", str(ROOT), str(repo))
        shutil.copyfile(ROOT / PULL_CHECK, repo / PULL_CHECK)
        _git(env, "-C", str(repo), "add", PULL_CHECK)
        _git(env, "-C", str(repo), "commit", "--quiet", "--allow-empty", "-m", "pinned")
        pinned = _git(env, "-C", str(repo), "rev-parse", "HEAD")
        _git(env, "-C", str(repo), "commit", "--quiet", "--allow-empty", "-m", "later")
        tip = _git(env, "-C", str(repo), "rev-parse", "HEAD")
        yield Origin(f"file://{repo}", pinned, tip, env, home)


def _pull(
    origin: Origin, dest: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    pull = _program("ansible-pull", "it comes with ansible-core (make bootstrap)")
    argv = [
        pull, "-U", origin.url, "-d", str(dest), "-i", "localhost,",
        "-e", f"ansible_python_interpreter={sys.executable}", *args,
    ]  # fmt: skip
    proc = subprocess.run(
        argv, env=env or origin.env, capture_output=True, text=True, timeout=180, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_ansible_pull_runs_the_pinned_commit_and_only_if_changed(
    origin: Origin, tmp_path: Path
) -> None:
    dest = tmp_path / "checkout"
    pin = ["-e", f"pull_check_commit={origin.pinned}"]
    # the first step of a pulling host: the checkout only (its validator is not installed yet)
    rc, out = _pull(origin, dest, "-C", origin.pinned, "--skip-tags", "pull_check_validator",
                    *pin, PULL_CHECK)  # fmt: skip
    assert rc == 0 and f"is {origin.pinned}" in out, out
    assert "TASK [The validator is installed where Ansible runs]" not in out, out
    assert _git(origin.env, "-C", str(dest), "rev-parse", "HEAD") == origin.pinned != origin.tip

    # --only-if-changed: the same pin again does not run the playbook
    rc, out = _pull(origin, dest, "-C", origin.pinned, "--only-if-changed", *pin, PULL_CHECK)
    assert rc == 0 and "Repository has not changed, quitting" in out, out
    assert "PLAY [" not in out

    # two playbooks in one run, as before site.yml: the checkout and the validator both times
    rc, out = _pull(origin, dest, "-C", origin.pinned, *pin, PULL_CHECK, PULL_CHECK)
    assert rc == 0, out
    assert out.count(f"commit {origin.pinned}; llamafleet ") == 2, out

    # a moved pin does run it, and pull-check refuses a checkout that is not the commit it expects
    rc, out = _pull(origin, dest, "-C", origin.tip, "--only-if-changed", *pin, PULL_CHECK)
    assert rc != 0 and "PLAY [" in out, out
    assert f"is {origin.tip}, not" in out and f"pull_check_commit={origin.pinned}" in out, out


def test_pull_check_names_its_fix(tmp_path: Path) -> None:
    """pull-check.yml on its own: a malformed pin, and a Python that cannot import the validator
    (a package of that name that fails to import, first on PYTHONPATH), each fail with the fix."""
    playbook = _program("ansible-playbook", "it comes with ansible-core (make bootstrap)")
    broken = tmp_path / "broken" / "llamafleet"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("not the validator")\n')
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LC_ALL": "C.UTF-8",
    }
    argv = [playbook, "-i", "localhost,", str(ROOT / PULL_CHECK)]
    bad = subprocess.run(
        [*argv, "-e", "pull_check_commit=HEAD"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "give the full 40-hex commit" in bad.stdout, bad.stdout
    missing = subprocess.run(
        argv,
        env={**env, "PYTHONPATH": str(broken.parent)},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = missing.stdout
    assert missing.returncode != 0 and "cannot import llamafleet" in out, out
    assert "not the validator" in out and f"-m pip install {ROOT}/validator" in out, out


def test_ansible_pull_verify_commit_refuses_an_unsigned_commit(
    origin: Origin, tmp_path: Path
) -> None:
    dest = tmp_path / "checkout"
    rc, out = _pull(origin, dest, "-C", origin.pinned, "--verify-commit", PULL_CHECK)
    assert rc != 0 and "Failed to verify GPG signature" in out, out
    assert "PLAY [" not in out


def test_ansible_pull_verify_commit_accepts_a_signed_commit(origin: Origin, tmp_path: Path) -> None:
    gpg = _program("gpg", "install gnupg")
    # short: gpg-agent's socket path must fit in a sockaddr_un
    gnupg = Path(tempfile.mkdtemp(prefix="lfg-"))
    env = {**origin.env, "GNUPGHOME": str(gnupg)}
    try:
        gnupg.chmod(0o700)
        subprocess.run(
            [gpg, "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
             "llamafleet test <test@example.invalid>", "ed25519", "sign", "never"],
            env=env, capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        repo = Path(origin.url.removeprefix("file://"))
        signed = tmp_path / "signed"
        _git(env, "clone", "--quiet", str(repo), str(signed))
        _git(env, "-C", str(signed), "checkout", "--quiet", origin.pinned)
        _git(env, "-C", str(signed), "-c", "user.signingkey=test@example.invalid",
             "commit", "--quiet", "--allow-empty", "-S", "-m", "signed")  # fmt: skip
        commit = _git(env, "-C", str(signed), "rev-parse", "HEAD")
        src = Origin(f"file://{signed}", commit, commit, env, origin.home)
        rc, out = _pull(
            src, tmp_path / "checkout", "-C", commit, "--verify-commit",
            "-e", f"pull_check_commit={commit}", PULL_CHECK,
        )  # fmt: skip
        assert rc == 0 and f"is {commit}" in out, out
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True, check=False)
        shutil.rmtree(gnupg, ignore_errors=True)

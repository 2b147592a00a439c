"""The llama_cpp role's one decision (plugins/modules/llama_cpp_state.py): a host whose `current`
link points at the wanted build, intact, needs no packages, checkout or build; anything that
differs (commit, ref, backend, options, targets, build number, a binary changed or added, files
another account can write, a missing --help text, no build in use) sends the role down its full
path, and the reason names what differs. The build directories are made here as the role's
build.yml writes them (the manifest fields are those of a real manifest of the default
scenario); the module runs as root in CI, as on a host."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, plugin_path

COMMIT = "ef8c15dbd6494e91db171a9be21665d93006d6b0"
OPTIONS = "d750fbbc60ef2bee6b80b9994b80b39786dce8aa97d12cf7b4d272ec43743592"
NAME = f"b9079-{COMMIT[:10]}-cpu-{OPTIONS[:10]}"
BINARY = b"\x7fELF llama-server"
REF = "feature/turboquant-kv-cache"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the build is root's, as on a host")


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llama_cpp_state"))


def _install(prefix: Path, name: str = NAME, **manifest: object) -> Path:
    """A build as tasks/build.yml installs it, and `current` pointing at it."""
    build = prefix / "builds" / name
    (build / "bin").mkdir(parents=True)
    for d in (prefix, prefix / "builds", build, build / "bin"):
        os.chmod(d, 0o755)
    (build / "bin" / "llama-server").write_bytes(BINARY)
    os.chmod(build / "bin" / "llama-server", 0o755)
    (build / "llama-server.help.txt").write_text("----- common params -----\n")
    body: dict[str, object] = {
        "format": 2,
        "name": name,
        "commit": COMMIT,
        "pinned": True,
        "ref": REF,
        "repo": "http://10.131.20.1:8731/git/llama.cpp.git",
        "backend": "cpu",
        "options_hash": OPTIONS,
        "targets": ["llama-server"],
        "build_number": 9079,
        "binaries_sha256": {"llama-server": hashlib.sha256(BINARY).hexdigest()},
        "host": "lf-default-bookworm",
    }
    body.update(manifest)
    (build / "manifest.json").write_text(json.dumps(body, indent=4, sort_keys=True) + "\n")
    (prefix / "current").symlink_to(build)
    return build


def _state(mod: ModuleType, prefix: Path, **kw: object) -> dict[str, object]:
    args: dict[str, object] = {
        "commit": COMMIT,
        "ref": REF,
        "backend": "cpu",
        "options_hash": OPTIONS,
        "targets": ["llama-server"],
    }
    args.update(kw)
    return mod.build_state(str(prefix), **args)  # type: ignore[no-any-return]


def test_the_wanted_build_in_use_is_current(mod: ModuleType, open_tmp: Path) -> None:
    build = _install(open_tmp)
    got = _state(mod, open_tmp)
    assert got["current"] is True, got["reason"]
    assert got["name"] == NAME and got["dir"] == str(build)
    assert got["manifest"]["build_number"] == 9079  # type: ignore[index]
    assert _state(mod, open_tmp, build_number="9079")["current"] is True


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"commit": "e5f4827604fe63c3681edc2a2d2613a42d28bf52"}, "has commit"),
        ({"ref": "test/next"}, "has ref"),
        ({"backend": "cuda"}, "has backend"),
        ({"options_hash": "0" * 64}, "has options_hash"),
        ({"targets": ["llama-server", "llama-cli"]}, "has targets"),
        ({"build_number": "9080"}, "has build_number"),
    ],
)
def test_anything_wanted_that_differs_takes_the_full_path(
    mod: ModuleType, open_tmp: Path, change: dict[str, object], reason: str
) -> None:
    _install(open_tmp)
    got = _state(mod, open_tmp, **change)
    assert got["current"] is False and reason in str(got["reason"]), got["reason"]
    assert got["wanted"] is False


def test_an_unpinned_or_old_manifest_is_not_current(mod: ModuleType, open_tmp: Path) -> None:
    _install(open_tmp, pinned=False)
    assert "has pinned False" in str(_state(mod, open_tmp)["reason"])
    (open_tmp / "current").unlink()
    _install(open_tmp / "old", format=1)
    assert "manifest format 1" in str(_state(mod, open_tmp / "old")["reason"])


def test_a_binary_changed_or_added_after_the_install_is_not_current(
    mod: ModuleType, open_tmp: Path
) -> None:
    build = _install(open_tmp)
    (build / "bin" / "llama-server").write_bytes(b"implant")
    got = _state(mod, open_tmp)
    assert got["current"] is False and "binaries_sha256 says" in str(got["reason"])
    # the wanted build, not intact: the role stops on it instead of taking the full path
    assert got["wanted"] is True and got["intact"] is False
    (build / "bin" / "llama-server").write_bytes(BINARY)
    (build / "bin" / "rt-implant").write_bytes(b"added")
    got = _state(mod, open_tmp)
    assert "bin/rt-implant is not in the manifest" in str(got["reason"])


def test_files_another_account_can_write_are_not_current(mod: ModuleType, open_tmp: Path) -> None:
    build = _install(open_tmp)
    os.chmod(build / "bin", 0o775)
    assert "is not root's alone" in str(_state(mod, open_tmp)["reason"])
    os.chmod(build / "bin", 0o755)
    os.chown(build / "bin" / "llama-server", 65534, 0)
    got = _state(mod, open_tmp)
    assert "llama-server is not root's alone (uid 65534" in str(got["reason"]), got["reason"]


def test_a_linked_manifest_or_missing_help_is_not_current(mod: ModuleType, open_tmp: Path) -> None:
    build = _install(open_tmp)
    (build / "llama-server.help.txt").unlink()
    assert "llama-server.help.txt is missing" in str(_state(mod, open_tmp)["reason"])
    (build / "llama-server.help.txt").write_text("x\n")
    real = open_tmp / "elsewhere.json"
    (build / "manifest.json").rename(real)
    (build / "manifest.json").symlink_to(real)
    assert _state(mod, open_tmp)["current"] is False


def test_no_build_or_a_foreign_link_is_not_current(mod: ModuleType, open_tmp: Path) -> None:
    assert "does not exist" in str(_state(mod, open_tmp)["reason"])
    elsewhere = open_tmp / "elsewhere" / NAME
    elsewhere.mkdir(parents=True)
    (open_tmp / "current").symlink_to(elsewhere)
    assert "not at a directory of" in str(_state(mod, open_tmp)["reason"])


def test_credentials_in_the_checkout_are_found(mod: ModuleType, open_tmp: Path) -> None:
    git = open_tmp / "src" / ".git"
    git.mkdir(parents=True)
    (git / "config").write_text('[remote "origin"]\n\turl = https://example.com/x.git\n')
    assert mod.checkout_has_credentials(str(open_tmp)) is False
    (git / "config").write_text('[remote "origin"]\n\turl = https://bob:tok@example.com/x.git\n')
    assert mod.checkout_has_credentials(str(open_tmp)) is True
    assert mod.checkout_has_credentials(str(open_tmp / "none")) is False


def test_the_module_refuses_the_wanted_build_when_it_is_not_intact(
    mod: ModuleType, open_tmp: Path, tmp_path: Path
) -> None:
    """The role's task (refuse_tampered: true), run as Ansible runs the module: a binary planted
    beside llama-server in the wanted build fails the task, naming it and what to do; the same
    build intact passes."""
    from test_llama_pool_modules import run_module

    build = _install(open_tmp)
    args = {
        "prefix": str(open_tmp),
        "commit": COMMIT,
        "ref": REF,
        "backend": "cpu",
        "options_hash": OPTIONS,
        "targets": ["llama-server"],
        "refuse_tampered": True,
    }
    got = run_module(tmp_path, "llama_cpp_state", args)
    assert got.get("failed") is not True and got["current"] is True, got
    (build / "bin" / "rt-implant").write_bytes(b"added")
    got = run_module(tmp_path, "llama_cpp_state", args)
    assert got["failed"] is True and got["changed"] is False
    assert "bin/rt-implant is not in the manifest" in got["msg"]
    assert f"Nothing was changed. Find out who changed it, then remove {got['dir']}" in got["msg"]
    # without the option the module reports it and leaves the decision to the caller
    got = run_module(tmp_path, "llama_cpp_state", {**args, "refuse_tampered": False})
    assert got.get("failed") is not True and got["wanted"] is True and got["intact"] is False

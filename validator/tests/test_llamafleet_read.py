"""The audit's reader (plugins/modules/llamafleet_read.py): files another account controls are
read as that account, without following links, never blocking, never more than the cap.

These tests run the module's functions directly on throwaway directories under tmp_path owned by an
unused uid (no account is created); the Molecule claude scenario replays the same attacks through
playbooks/audit.yml on a real test host with real accounts."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, plugin_path

MODULE = plugin_path("modules", "llamafleet_read")
UID = 64123
GID = 64123

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(MODULE)


@pytest.fixture
def tmp_path(open_tmp: Path) -> Path:
    # pytest's own tmp_path sits below a 0700 directory the other uid cannot enter
    return open_tmp


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    h = tmp_path / "home"
    (h / ".claude").mkdir(parents=True)
    for p in (h, h / ".claude"):
        os.chown(p, UID, GID)
        os.chmod(p, 0o700)
    yield h


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    d = tmp_path / "rootonly"
    d.mkdir(mode=0o700)
    f = d / "settings.json"
    f.write_text('{"env": {"ROOT_SECRET": "s3cr3t"}}')
    os.chmod(f, 0o600)
    return f


def _read(mod: ModuleType, home: Path, **kw: object) -> dict[str, object]:
    res: dict[str, object] = mod.read_as(
        str(home / ".claude" / "settings.json"),
        str(home),
        UID,
        GID,
        [GID],
        max_size=kw.get("max", 1 << 20),
    )
    return res


def test_reads_a_user_file_as_the_user(mod: ModuleType, home: Path) -> None:
    f = home / ".claude" / "settings.json"
    f.write_text('{"env": {}}')
    os.chown(f, UID, GID)
    os.chmod(f, 0o644)
    res = _read(mod, home)
    assert res["problem"] == ""
    assert res["content"] == b'{"env": {}}'
    assert res["mode"] == "0644"  # the real mode, so CC008 can judge it


def test_linked_claude_dir_is_not_followed(mod: ModuleType, home: Path, secret: Path) -> None:
    (home / ".claude").rmdir()
    (home / ".claude").symlink_to(secret.parent)
    os.lchown(home / ".claude", UID, GID)
    res = _read(mod, home)
    assert res["content"] == b""
    assert "symbolic link" in str(res["problem"])
    assert str(home / ".claude") in str(res["problem"])


def test_linked_settings_file_is_not_followed(mod: ModuleType, home: Path, secret: Path) -> None:
    (home / ".claude" / "settings.json").symlink_to(secret)
    res = _read(mod, home)
    assert res["content"] == b""
    assert "symbolic link" in str(res["problem"])


def test_hard_link_is_refused(mod: ModuleType, home: Path, secret: Path) -> None:
    # a hard link to a root-owned file the user may read: refused for its link count (and owner)
    os.chmod(secret, 0o644)
    os.chmod(secret.parent, 0o755)
    link = home / ".claude" / "settings.json"
    try:
        os.link(secret, link)
    except OSError:
        pytest.skip("hard links to files of others are forbidden here (fs.protected_hardlinks)")
    res = _read(mod, home)
    assert res["content"] == b""
    assert "hard links" in str(res["problem"])


def test_fifo_does_not_block(mod: ModuleType, home: Path) -> None:
    fifo = home / ".claude" / "settings.json"
    os.mkfifo(fifo)
    os.chown(fifo, UID, GID)

    def _timeout(*_: object) -> None:
        raise TimeoutError("the reader blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(5)
    try:
        res = _read(mod, home)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "FIFO" in str(res["problem"])


def test_huge_sparse_file_is_capped(mod: ModuleType, home: Path) -> None:
    f = home / ".claude" / "settings.json"
    with open(f, "wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB, sparse
    os.chown(f, UID, GID)
    res = _read(mod, home)
    assert res["content"] == b""
    assert "more than the" in str(res["problem"])


def test_file_of_another_account_is_refused(mod: ModuleType, home: Path) -> None:
    f = home / ".claude" / "settings.json"
    f.write_text("{}")
    os.chmod(f, 0o644)  # root-owned, readable: still not this user's file
    res = _read(mod, home)
    assert res["content"] == b""
    assert "owned by" in str(res["problem"])


def test_root_mode_requires_root_owned_directories(mod: ModuleType, tmp_path: Path) -> None:
    d = tmp_path / "etc" / "claude-code"
    d.mkdir(parents=True)
    (d / "managed-settings.json").write_text("{}")
    os.chown(d, UID, GID)  # a directory another account controls
    res = mod.read_file(str(d / "managed-settings.json"), "/", None, 1 << 20)
    assert res["content"] == b""
    assert "owned by" in str(res["problem"])
    os.chown(d, 0, 0)
    res = mod.read_file(str(d / "managed-settings.json"), "/", None, 1 << 20)
    assert res["content"] == b"{}"
    assert stat.S_IMODE(os.stat(d / "managed-settings.json").st_mode) == int(str(res["mode"]), 8)


def test_absent_file_is_not_a_problem(mod: ModuleType, home: Path) -> None:
    res = _read(mod, home)
    assert res["exists"] is False
    assert res["problem"] == ""

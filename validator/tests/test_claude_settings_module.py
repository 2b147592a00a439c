"""The claude_settings module (roles/claude_code) writes each user's settings file as that user,
through directory descriptors, and never follows a link: the attacks that made the role root for
any configured user (a ~/.claude or settings.json link, planted or swapped backup and temporary
names, hard links, FIFOs, huge files) are refused and the files they point at stay as they were.

The tests drop to an unused uid in directories they create, so they need root (CI runs as root)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

MODULE = plugin_path("modules", "claude_settings")
UID = 64123  # no account: nothing on the machine belongs to it
GID = 64123
NAME = "eve"
ROOT_SECRET = '{"env": {"ROOT_ONLY": "root-secret"}}\n'
VICTIM = "victim content\n"
BROKEN = '{\n  "env": {"BROKEN_OWN": "1",},\n  "permissions": {}\n}\n'

pytestmark = [
    pytest.mark.skipif(not MODULE.is_file(), reason="run from a checkout of the whole repository"),
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="the tests drop to another uid, which needs root (CI runs them as root)",
    ),
]


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(MODULE)


@dataclass
class Box:
    """A scratch tree: base (root, 0711) / home (the user's, 0700) / .claude / settings.json."""

    base: Path
    home: Path

    @property
    def claude(self) -> Path:
        return self.home / ".claude"

    @property
    def settings(self) -> Path:
        return self.claude / "settings.json"


@pytest.fixture
def box() -> Iterator[Box]:
    base = Path(tempfile.mkdtemp(prefix="claude-settings-test.", dir="/tmp"))
    try:
        os.chmod(base, 0o711)  # the dropped uid must reach its home below it
        home = base / "home"
        home.mkdir(mode=0o700)
        os.chown(home, UID, GID)
        yield Box(base, home)
    finally:
        shutil.rmtree(base)


def _own(path: Path, mode: int, uid: int = UID, gid: int = GID) -> Path:
    os.lchown(path, uid, gid)
    if not path.is_symlink():
        os.chmod(path, mode)
    return path


def _user_dir(path: Path, mode: int = 0o700) -> Path:
    path.mkdir()
    return _own(path, mode)


def _user_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    return _own(path, mode)


def _root_file(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    return _own(path, mode, 0, 0)


def _snapshot(path: Path) -> tuple[Any, ...]:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        body: Any = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        body = sorted(os.listdir(path))
    else:
        body = hashlib.sha256(path.read_bytes()).hexdigest()
    return (body, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_ino)


def _run(
    mod: ModuleType,
    box: Box,
    opts: dict[str, Any] | None = None,
    *,
    check_mode: bool = False,
    want_diff: bool = False,
    timeout: float = 30,
) -> dict[str, Any]:
    """update_settings on the box's settings.json, in a child dropped to UID."""
    result: dict[str, Any] = mod.run_dropped(
        UID,
        GID,
        [GID],
        mod.update_settings,
        str(box.settings),
        opts if opts is not None else mod.options(env={"ANTHROPIC_BASE_URL": "http://new:8080"}),
        mod.Account(NAME, UID, GID, str(box.home)),
        check_mode=check_mode,
        want_diff=want_diff,
        timeout=timeout,
    )
    return result


def _refused(mod: ModuleType, box: Box, **kwargs: Any) -> str:
    with pytest.raises(mod.SettingsError) as err:
        _run(mod, box, **kwargs)
    msg: str = err.value.msg
    return msg


def _ids() -> list[Any]:
    try:
        os.setresuid(0, 0, 0)
        regained = True
    except PermissionError:
        regained = False
    return [os.getresuid(), os.getresgid(), sorted(os.getgroups()), regained]


def _fail(mod: ModuleType) -> None:
    raise mod.SettingsError("refused here", path="/x", line=3)


# --- the worker ------------------------------------------------------------------------------


def test_worker_runs_as_the_uid_for_good(mod: ModuleType) -> None:
    ids = mod.run_dropped(UID, GID, [GID, GID + 1], _ids, timeout=30)
    assert ids == [[UID] * 3, [GID] * 3, [GID, GID + 1], False]


def test_worker_errors_come_back_with_their_message(mod: ModuleType) -> None:
    with pytest.raises(mod.SettingsError) as err:
        mod.run_dropped(UID, GID, [GID], _fail, mod, timeout=30)
    assert err.value.msg == "refused here"
    assert err.value.extra == {"path": "/x", "line": 3}


def test_user_files_are_never_written_as_root(mod: ModuleType, box: Box) -> None:
    """The core refuses to work on a user's file unless it already runs as that user."""
    with pytest.raises(mod.SettingsError, match="must be written as eve"):
        mod.update_settings(
            str(box.settings), mod.options(), mod.Account(NAME, UID, GID, str(box.home))
        )
    assert not box.claude.exists()


# --- (a) ~/.claude is a link ------------------------------------------------------------------


def test_claude_dir_link_to_a_root_directory_is_refused(mod: ModuleType, box: Box) -> None:
    target = box.base / "root-dir"
    target.mkdir(mode=0o755)
    secret = _root_file(target / "settings.json", ROOT_SECRET, 0o600)
    box.claude.symlink_to(target)
    _own(box.claude, 0)
    dir_before, file_before = _snapshot(target), _snapshot(secret)

    msg = _refused(mod, box)

    assert msg == (
        f"{box.claude} is a symbolic link (owned by uid {UID}); refusing to follow it. "
        f"Remove it (or make it a real directory owned by {NAME}) and run again."
    )
    assert _snapshot(target) == dir_before  # still root's, 0755, nothing added
    assert _snapshot(secret) == file_before
    assert secret.read_text() == ROOT_SECRET


def test_claude_dir_owned_by_root_is_refused(mod: ModuleType, box: Box) -> None:
    box.claude.mkdir(mode=0o755)
    before = _snapshot(box.claude)
    msg = _refused(mod, box)
    assert msg.startswith(f"{box.claude} is owned by root, not {NAME}; refusing to use it.")
    assert _snapshot(box.claude) == before


def test_home_owned_by_another_account_is_refused(mod: ModuleType, box: Box) -> None:
    os.chown(box.home, UID + 1, GID)
    os.chmod(box.home, 0o777)
    msg = _refused(mod, box)
    assert msg.startswith(f"{box.home} is owned by uid {UID + 1}, not by {NAME} or root")
    assert not box.claude.exists()


# --- (b) settings.json is a link --------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o600, 0o644], ids=["root-only", "world-readable"])
def test_settings_link_to_a_root_file_is_refused(mod: ModuleType, box: Box, mode: int) -> None:
    _user_dir(box.claude)
    secret = _root_file(box.base / "root-secret.json", ROOT_SECRET, mode)
    box.settings.symlink_to(secret)
    _own(box.settings, 0)
    before = _snapshot(secret)

    msg = _refused(mod, box)

    assert msg.startswith(
        f"{box.settings} is a symbolic link (owned by uid {UID}); refusing to follow it."
    )
    assert _snapshot(secret) == before
    assert box.settings.is_symlink()
    for entry in box.claude.iterdir():  # the root-only content was copied nowhere
        assert entry.is_symlink() or "root-secret" not in entry.read_text()


def test_settings_owned_by_root_is_refused(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    root_file = _root_file(box.settings, ROOT_SECRET, 0o644)
    before = _snapshot(root_file)
    msg = _refused(mod, box)
    assert msg.startswith(f"{box.settings} is owned by root, not {NAME}; refusing to use it.")
    assert _snapshot(root_file) == before
    assert sorted(os.listdir(box.claude)) == ["settings.json"]


# --- (c) planted links at the backup and temporary names ----------------------------------------


@pytest.mark.parametrize("victim_uid", [0, UID], ids=["root-victim", "user-victim"])
def test_planted_links_at_predictable_names_are_not_followed(
    mod: ModuleType, box: Box, monkeypatch: pytest.MonkeyPatch, victim_uid: int
) -> None:
    tokens = iter(["planted", "fresh1", "planted", "fresh2"])
    monkeypatch.setattr(mod, "_random_token", lambda: next(tokens))
    monkeypatch.setattr(mod, "_timestamp", lambda: "2030-01-01@00:00:00")
    _user_dir(box.claude)
    _user_file(box.settings, '{"own": 1}\n')
    victim = box.base / "victim"
    victim.write_text(VICTIM)
    _own(victim, 0o644, victim_uid, victim_uid)
    before = _snapshot(victim)
    links = [
        box.claude / ".settings.json.planted",
        box.claude / "settings.json.2030-01-01@00:00:00.planted~",
    ]
    for link in links:
        link.symlink_to(victim)
        _own(link, 0)

    result = _run(mod, box)

    assert result["changed"] is True
    assert result["backup_file"] == f"{box.settings}.2030-01-01@00:00:00.fresh1~"
    assert _snapshot(victim) == before
    assert victim.read_text() == VICTIM
    for link in links:
        assert link.is_symlink() and os.readlink(link) == str(victim)
    assert json.loads(box.settings.read_text()) == {
        "own": 1,
        "env": {"ANTHROPIC_BASE_URL": "http://new:8080"},
    }
    assert not box.settings.is_symlink()
    assert Path(result["backup_file"]).read_text() == '{"own": 1}\n'


@pytest.mark.parametrize("victim_uid", [0, UID], ids=["root-victim", "user-victim"])
def test_temp_name_swapped_for_a_link_before_the_rename_is_caught(
    mod: ModuleType, box: Box, monkeypatch: pytest.MonkeyPatch, victim_uid: int
) -> None:
    """The rename puts whatever is at the temporary name in place: a link planted there after the
    file was written must not end up as settings.json; the module notices and writes again."""
    _user_dir(box.claude)
    _user_file(box.settings, '{"own": 1}\n')
    victim = box.base / "victim"
    victim.write_text(VICTIM)
    _own(victim, 0o644, victim_uid, victim_uid)
    before = _snapshot(victim)
    real_write_new = mod._write_new
    swapped: list[str] = []

    def write_then_swap(dfd: int, make_name: Any, content: bytes, **kwargs: Any) -> Any:
        name, fd = real_write_new(dfd, make_name, content, **kwargs)
        if name.startswith(".settings.json.") and not swapped:
            swapped.append(name)
            os.unlink(name, dir_fd=dfd)
            os.symlink(victim, name, dir_fd=dfd)
        return name, fd

    monkeypatch.setattr(mod, "_write_new", write_then_swap)

    result = _run(mod, box)

    assert result["changed"] is True
    st = os.lstat(box.settings)
    assert stat.S_ISREG(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (UID, 0o600)
    assert json.loads(box.settings.read_text())["env"] == {"ANTHROPIC_BASE_URL": "http://new:8080"}
    assert _snapshot(victim) == before


# --- (d)-(f) hard links, FIFOs, huge files ----------------------------------------------------


def test_hard_linked_settings_is_refused(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    elsewhere = _user_dir(box.base / "elsewhere")
    other = _user_file(elsewhere / "other.json", '{"other": true}\n')
    os.link(other, box.settings)
    before = _snapshot(other)

    msg = _refused(mod, box)

    assert msg.startswith(f"{box.settings} has 2 hard links")
    assert _snapshot(other) == before
    assert sorted(os.listdir(box.claude)) == ["settings.json"]


def test_fifo_is_refused_without_hanging(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    os.mkfifo(box.settings, 0o600)
    _own(box.settings, 0o600)
    start = time.monotonic()

    msg = _refused(mod, box, timeout=10)

    assert msg.startswith(f"{box.settings} is a FIFO, not a regular file")
    assert time.monotonic() - start < 10
    assert stat.S_ISFIFO(os.lstat(box.settings).st_mode)


def test_oversize_file_is_refused(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    big = '{"pad": "' + "x" * (1024 * 1024) + '"}\n'
    _user_file(box.settings, big)
    before = _snapshot(box.settings)

    msg = _refused(mod, box)

    size = len(big)
    assert msg.startswith(
        f"{box.settings} is {size} bytes, more than the 1048576-byte limit (max_size)"
    )
    assert _snapshot(box.settings) == before
    smaller = mod.options(max_size=1000)
    _user_file(box.settings, '{"pad": "' + "x" * 1000 + '"}\n')
    assert "more than the 1000-byte limit" in _refused(mod, box, opts=smaller)


# --- (g), (h) the normal merge ----------------------------------------------------------------

OLD = {
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999/v1",
    "permissions": {"allow": ["Bash(ls:*)"], "deny": ["Bash(rm:*)"]},
    "env": {"OWN": "mine"},
    "cleanupPeriodDays": 30,
}


def _merge_opts(mod: ModuleType) -> dict[str, Any]:
    opts: dict[str, Any] = mod.options(
        env={"ANTHROPIC_BASE_URL": "http://new:8080", "API_TIMEOUT_MS": 600000},
        settings={"includeGitInstructions": False},
        token="sk-the-key",
        mode=0o600,
    )
    return opts


def test_merge_keeps_keys_and_writes_as_the_user(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude, 0o755)
    old_text = json.dumps(OLD, indent=2) + "\n"
    _user_file(box.settings, old_text, 0o644)

    result = _run(mod, box, _merge_opts(mod), want_diff=True)

    assert result["changed"] is True
    assert result["moved"] == ["ANTHROPIC_BASE_URL"]
    data = json.loads(box.settings.read_text())
    assert data == {
        "permissions": OLD["permissions"],
        "env": {
            "OWN": "mine",
            "ANTHROPIC_BASE_URL": "http://new:8080",
            "API_TIMEOUT_MS": "600000",
            "ANTHROPIC_AUTH_TOKEN": "sk-the-key",
        },
        "cleanupPeriodDays": 30,
        "includeGitInstructions": False,
    }
    st = os.lstat(box.settings)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_nlink) == (UID, GID, 0o600, 1)
    cst = os.lstat(box.claude)
    assert (cst.st_uid, stat.S_IMODE(cst.st_mode)) == (UID, 0o700)
    backup = Path(result["backup_file"])
    assert backup.parent == box.claude
    assert re.fullmatch(
        r"settings\.json\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d\.[0-9a-f]{12}~", backup.name
    )
    bst = os.lstat(backup)
    assert (bst.st_uid, bst.st_gid, stat.S_IMODE(bst.st_mode)) == (UID, GID, 0o600)
    assert backup.read_text() == old_text
    assert sorted(os.listdir(box.claude)) == sorted(["settings.json", backup.name])  # no temp left
    diff = json.dumps(result["diff"])
    assert "sk-the-key" not in diff and "********" in result["diff"]["after"]


def test_window_and_attachment_keys_are_owned_without_clobbering(mod: ModuleType) -> None:
    """The role's CLAUDE_CODE_AUTO_COMPACT_WINDOW and CLAUDE_CODE_DISABLE_ATTACHMENTS: set when on,
    taken out (env_absent) when off; a copy at the top level (ignored by Claude Code) is moved into
    env, and every key the role does not own stays."""
    data: dict[str, Any] = {
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": 90000,
        "env": {"OWN": "mine", "CLAUDE_CODE_DISABLE_ATTACHMENTS": "1"},
        "hooks": {"Stop": []},
    }
    on = mod.options(
        env={"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "148224", "CLAUDE_CODE_DISABLE_ATTACHMENTS": "1"}
    )
    changed, moved = mod.merge_settings(data, on, "/x/settings.json")
    assert moved == ["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]
    assert data == {
        "env": {
            "OWN": "mine",
            "CLAUDE_CODE_DISABLE_ATTACHMENTS": "1",
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "148224",
        },
        "hooks": {"Stop": []},
    }
    assert "env.CLAUDE_CODE_AUTO_COMPACT_WINDOW" in changed
    assert "env.CLAUDE_CODE_DISABLE_ATTACHMENTS" not in changed  # the same value: no change

    off = mod.options(
        env_absent=["CLAUDE_CODE_AUTO_COMPACT_WINDOW", "CLAUDE_CODE_DISABLE_ATTACHMENTS"]
    )
    changed, _ = mod.merge_settings(data, off, "/x/settings.json")
    assert data == {"env": {"OWN": "mine"}, "hooks": {"Stop": []}}
    assert sorted(changed) == [
        "env.CLAUDE_CODE_AUTO_COMPACT_WINDOW",
        "env.CLAUDE_CODE_DISABLE_ATTACHMENTS",
    ]
    changed, _ = mod.merge_settings(data, off, "/x/settings.json")
    assert changed == []


def test_second_run_changes_nothing(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    _user_file(box.settings, json.dumps(OLD) + "\n", 0o644)
    first = _run(mod, box, _merge_opts(mod))
    assert first["changed"] is True
    before = _snapshot(box.settings), os.lstat(box.settings).st_mtime_ns, _snapshot(box.claude)

    second = _run(mod, box, _merge_opts(mod), want_diff=True)

    assert second["changed"] is False
    assert "backup_file" not in second and "diff" not in second
    assert (_snapshot(box.settings), os.lstat(box.settings).st_mtime_ns, _snapshot(box.claude)) == (
        before
    )


def test_missing_claude_dir_is_created_by_the_user(mod: ModuleType, box: Box) -> None:
    result = _run(mod, box, _merge_opts(mod))
    assert result["changed"] is True and "backup_file" not in result
    for path, mode in ((box.claude, 0o700), (box.settings, 0o600)):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (UID, GID, mode)
    assert json.loads(box.settings.read_text())["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-the-key"


def test_check_mode_writes_nothing(mod: ModuleType, box: Box) -> None:
    result = _run(mod, box, _merge_opts(mod), check_mode=True, want_diff=True)
    assert result["changed"] is True
    assert not box.claude.exists()

    _user_dir(box.claude, 0o755)
    _user_file(box.settings, json.dumps(OLD) + "\n", 0o644)
    before = _snapshot(box.settings), _snapshot(box.claude)
    result = _run(mod, box, _merge_opts(mod), check_mode=True, want_diff=True)
    assert result["changed"] is True
    assert "sk-the-key" not in json.dumps(result["diff"])
    assert (_snapshot(box.settings), _snapshot(box.claude)) == before


def test_invalid_json_is_left_unchanged(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    _user_file(box.settings, BROKEN)
    before = _snapshot(box.settings)
    with pytest.raises(mod.SettingsError) as err:
        _run(mod, box)
    assert err.value.msg.startswith(f"{box.settings} is not valid JSON (line 2, column 29: ")
    assert "it was left unchanged" in err.value.msg
    assert err.value.extra == {"settings_path": str(box.settings), "line": 2, "column": 29}
    assert _snapshot(box.settings) == before
    assert sorted(os.listdir(box.claude)) == ["settings.json"]


# --- (i) root mode: the managed file ----------------------------------------------------------


def _managed_tree(box: Box, owner: int = 0, mode: int = 0o755) -> Path:
    etc = box.base / "etc"
    etc.mkdir(mode=0o755)
    managed_dir = etc / "claude-code"
    managed_dir.mkdir()
    _own(managed_dir, mode, owner, 0)
    return managed_dir / "managed-settings.json"


@pytest.mark.parametrize(
    ("owner", "mode", "problem"),
    [
        (UID, 0o755, f"is owned by uid {UID}, not root"),
        (0, 0o775, "is writable by its group or by others (mode 0775)"),
        (0, 0o757, "is writable by its group or by others (mode 0757)"),
    ],
    ids=["foreign-owner", "group-writable", "other-writable"],
)
def test_root_mode_refuses_a_directory_others_control(
    mod: ModuleType, box: Box, owner: int, mode: int, problem: str
) -> None:
    target = _managed_tree(box, owner, mode)
    with pytest.raises(mod.SettingsError) as err:
        mod.update_settings(str(target), mod.options(), anchor=str(box.base))
    assert err.value.msg.startswith(f"{target.parent} {problem}; refusing to write {target}")
    assert not target.exists()
    assert os.listdir(target.parent) == []


def test_root_mode_refuses_links(mod: ModuleType, box: Box) -> None:
    target = _managed_tree(box)
    secret = _root_file(box.base / "shadow", ROOT_SECRET, 0o600)
    target.symlink_to(secret)
    before = _snapshot(secret)
    with pytest.raises(mod.SettingsError, match="is a symbolic link"):
        mod.update_settings(str(target), mod.options(mode=0o644), anchor=str(box.base))
    assert _snapshot(secret) == before

    real = box.base / "real"
    real.mkdir(mode=0o755)
    linked = box.base / "linked"
    linked.symlink_to(real)
    with pytest.raises(mod.SettingsError, match="^" + re.escape(f"{linked} is a symbolic link")):
        mod.update_settings(str(linked / "m.json"), mod.options(), anchor=str(box.base))
    assert os.listdir(real) == []


def test_root_mode_refuses_a_tmp_path(mod: ModuleType) -> None:
    if not os.lstat("/tmp").st_mode & 0o002:
        pytest.skip("/tmp is not world-writable here")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        target = Path(tmp) / "managed-settings.json"
        with pytest.raises(mod.SettingsError, match=r"^/tmp is writable by its group or by others"):
            mod.update_settings(str(target), mod.options())
        assert not target.exists()


def test_root_mode_writes_owner_group_mode(mod: ModuleType, box: Box) -> None:
    target = _managed_tree(box)
    opts = mod.options(env={"ANTHROPIC_BASE_URL": "http://x:1"}, uid=0, gid=GID, mode=0o640)
    result = mod.update_settings(str(target), opts, anchor=str(box.base))
    assert result["changed"] is True
    st = os.lstat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, GID, 0o640)

    assert mod.update_settings(str(target), opts, anchor=str(box.base))["changed"] is False

    ino = st.st_ino
    opts["mode"] = 0o644
    assert mod.update_settings(str(target), opts, anchor=str(box.base))["changed"] is True
    st = os.lstat(target)
    assert (st.st_ino, stat.S_IMODE(st.st_mode)) == (ino, 0o644)  # attributes only: same file

    opts["env"] = {"ANTHROPIC_BASE_URL": "http://y:2"}
    result = mod.update_settings(str(target), opts, anchor=str(box.base))
    backup = os.lstat(result["backup_file"])
    assert (backup.st_uid, backup.st_gid, stat.S_IMODE(backup.st_mode)) == (0, GID, 0o600)
    st = os.lstat(target)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, GID, 0o644)


# --- the race ---------------------------------------------------------------------------------


def _swapper(claude: Path, victims: list[Path], deadline: float, mod: ModuleType) -> None:
    """In a child: as the user, keep replacing every temporary and backup name by a link."""
    status = 0
    try:
        mod.drop_privileges(UID, GID, [GID])
        count = 0
        while time.monotonic() < deadline:
            try:
                names = os.listdir(claude)
            except OSError:
                continue
            for name in names:
                temp = name.startswith(".settings.json.")
                backup = name.startswith("settings.json.") and name.endswith("~")
                if not (temp or backup):
                    continue
                count += 1
                try:
                    os.unlink(claude / name)
                    os.symlink(victims[count % len(victims)], claude / name)
                except OSError:
                    pass
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def test_swapping_names_for_links_during_writes_reaches_nothing(mod: ModuleType, box: Box) -> None:
    root_dir = box.base / "root-only"
    root_dir.mkdir(mode=0o755)
    root_victim = _root_file(root_dir / "victim", VICTIM, 0o644)
    user_victim = _user_file(box.base / "user-victim", VICTIM, 0o644)
    before = _snapshot(root_victim), _snapshot(user_victim)
    _user_dir(box.claude)
    _user_file(box.settings, "{}\n")
    deadline = time.monotonic() + 4.5

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in os._exit
        _swapper(box.claude, [root_victim, user_victim], deadline, mod)
    outcomes: list[str] = []
    try:
        for i in range(20):
            if time.monotonic() > deadline:
                break
            if not (box.settings.is_file() and not box.settings.is_symlink()):
                box.settings.unlink(missing_ok=True)  # a swapped temp name was renamed in
                _user_file(box.settings, "{}\n")
            try:
                _run(mod, box, mod.options(env={"N": str(i)}), timeout=10)
                outcomes.append("written")
            except mod.SettingsError as exc:
                outcomes.append(exc.msg)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

    assert (_snapshot(root_victim), _snapshot(user_victim)) == before
    assert root_victim.read_text() == VICTIM and user_victim.read_text() == VICTIM
    assert outcomes and "written" in outcomes
    for outcome in outcomes:  # a write, or a clean refusal of this file (never anything else)
        assert outcome == "written" or outcome.startswith(str(box.settings)), outcome


# --- the module as Ansible runs it ------------------------------------------------------------


# Runs the module file as Ansible does (arguments from a file), with one extra account in the
# passwd lookups: "eve", uid UID, home argv[2] (so run_as needs no real account).
_WITH_EVE = f"""
import pwd, runpy, sys
real = pwd.getpwnam
eve = pwd.struct_passwd(("eve", "x", {UID}, {GID}, "", sys.argv[2], "/bin/sh"))
pwd.getpwnam = lambda name: eve if name == "eve" else real(name)
sys.argv = [sys.argv[1], sys.argv[3]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _module_run(tmp_path: Path, args: dict[str, Any], home: Path | None = None) -> dict[str, Any]:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    argv = [sys.executable, str(MODULE), str(args_file)]
    if home is not None:
        argv = [sys.executable, "-c", _WITH_EVE, str(MODULE), str(home), str(args_file)]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    start = out.stdout.find("{")
    assert start >= 0, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(out.stdout[start:])
    return result


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"run_as": "no-such-user-64123"}, "run_as: there is no user 'no-such-user-64123'"),
        ({"run_as": "root", "owner": "root"}, "mutually exclusive"),
        ({"mode": "u+rw"}, "is not an octal mode"),
    ],
    ids=["unknown-user", "run_as-and-owner", "symbolic-mode"],
)
def test_module_refuses_bad_arguments(
    tmp_path: Path, args: dict[str, Any], message: str, mod: ModuleType
) -> None:
    target = Path("/nonexistent-claude-settings-test/.claude/settings.json")
    result = _module_run(tmp_path, {"path": str(target), **args})
    assert result.get("failed") is True, result
    assert message in result["msg"]


def test_module_refuses_root_writes_under_tmp(tmp_path: Path, mod: ModuleType) -> None:
    if not os.lstat("/tmp").st_mode & 0o002:
        pytest.skip("/tmp is not world-writable here")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        target = Path(tmp) / "managed-settings.json"
        result = _module_run(tmp_path, {"path": str(target), "owner": "root", "mode": "0644"})
        assert result.get("failed") is True, result
        assert result["msg"].startswith("/tmp is writable by its group or by others (mode 1777)")
        assert not target.exists()


def test_module_run_as_writes_as_the_user(tmp_path: Path, box: Box, mod: ModuleType) -> None:
    _user_dir(box.claude, 0o755)
    _user_file(box.settings, json.dumps(OLD) + "\n", 0o644)
    args = {
        "path": str(box.settings),
        "run_as": "eve",
        "mode": "0600",
        "env": {"ANTHROPIC_BASE_URL": "http://new:8080"},
        "token": "sk-the-key",
        "_ansible_diff": True,
    }
    before = _snapshot(box.settings)
    checked = _module_run(tmp_path, {**args, "_ansible_check_mode": True}, box.home)
    assert checked.get("failed") is not True, checked
    assert checked["changed"] is True and _snapshot(box.settings) == before
    assert "sk-the-key" not in json.dumps(checked)

    result = _module_run(tmp_path, args, box.home)
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["moved"] == ["ANTHROPIC_BASE_URL"]
    assert any("moved ANTHROPIC_BASE_URL" in str(w) for w in result.get("warnings", []))
    assert result["settings_path"] == str(box.settings)
    assert "path" not in result and "mode" not in result  # Ansible did not stat it as root
    assert "sk-the-key" not in json.dumps(result)
    for path in (box.settings, Path(result["backup_file"])):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (UID, GID, 0o600)
    assert stat.S_IMODE(os.lstat(box.claude).st_mode) == 0o700
    assert json.loads(box.settings.read_text())["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-the-key"
    assert _module_run(tmp_path, args, box.home)["changed"] is False

    _user_file(box.settings, BROKEN)
    broken = _module_run(tmp_path, args, box.home)
    assert broken.get("failed") is True
    assert broken["msg"].startswith(f"{box.settings} is not valid JSON (line 2, column 29: ")
    assert broken["msg"].endswith("it was left unchanged. Fix or remove it, then run again.")
    assert box.settings.read_text() == BROKEN

    box.settings.unlink()
    box.settings.symlink_to(_root_file(box.base / "secret", ROOT_SECRET, 0o600))
    linked = _module_run(tmp_path, args, box.home)
    assert linked.get("failed") is True
    assert linked["msg"].startswith(f"{box.settings} is a symbolic link")


def test_parse_mode(mod: ModuleType) -> None:
    assert mod.parse_mode("0600") == 0o600
    assert mod.parse_mode("640") == 0o640
    assert mod.parse_mode(0o644) == 0o644
    assert mod.parse_mode(None) is None
    for bad in ("u+rw", "0999", "17777", True):
        with pytest.raises(mod.SettingsError):
            mod.parse_mode(bad)


def test_read_only_reads_as_the_user_and_changes_nothing(mod: ModuleType, box: Box) -> None:
    # the role's validation reads each file back this way instead of slurping it as root
    _user_dir(box.claude, 0o755)
    _user_file(box.settings, BROKEN, 0o644)
    before = _snapshot(box.settings)
    result = _run(mod, box, mod.options(read_only=True))
    assert result["changed"] is False
    assert base64.b64decode(result["content"]).decode() == BROKEN  # even when not valid JSON
    assert result["file_mode"] == "0644"
    assert _snapshot(box.settings) == before
    assert stat.S_IMODE(os.stat(box.claude).st_mode) == 0o755  # not even the directory mode


def test_read_only_refuses_a_link_swapped_in_after_the_write(mod: ModuleType, box: Box) -> None:
    _user_dir(box.claude)
    secret = _root_file(box.base / "secret.json", ROOT_SECRET, 0o644)
    box.settings.symlink_to(secret)
    msg = _refused(mod, box, opts=mod.options(read_only=True))
    assert "link" in msg


def test_read_only_of_a_missing_file_creates_nothing(mod: ModuleType, box: Box) -> None:
    result = _run(mod, box, mod.options(read_only=True))
    assert result["exists"] is False
    assert not box.claude.exists()


def test_module_read_only_returns_the_content(tmp_path: Path, box: Box, mod: ModuleType) -> None:
    # what the role's validation registers (the key is in it: the task has no_log)
    _user_dir(box.claude)
    _user_file(box.settings, '{"env": {"ANTHROPIC_AUTH_TOKEN": "sk-x"}}\n')
    args = {"path": str(box.settings), "run_as": "eve", "read_only": True}
    result = _module_run(tmp_path, args, box.home)
    assert result.get("failed") is not True, result
    assert result["changed"] is False and result["exists"] is True
    assert json.loads(base64.b64decode(result["content"]))["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-x"
    assert "path" not in result

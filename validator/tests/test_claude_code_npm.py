"""The claude_code_npm module (roles/claude_code) installs Claude Code only from tarballs whose
SHA-512 equals the pins, unpacks the wrapper without links or paths outside package/, puts the
platform package's binary over the stub (what install.cjs does) and is idempotent."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

MODULE = plugin_path("modules", "claude_code_npm")
PKG = "@anthropic-ai/claude-code"
VERSION = "2.1.197"
BINARY = b"\x7fELF fake native claude\n" * 1000

pytestmark = pytest.mark.skipif(
    not MODULE.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(MODULE)


def _tgz(path: Path, members: list[tuple[str, bytes | None, int, str | None]]) -> Path:
    """members: (name, data or None for a directory, mode, symlink target or None)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, mode, link in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _pkg_json(name: str, **extra: Any) -> bytes:
    return json.dumps({"name": name, "version": VERSION, **extra}).encode()


def _wrapper(path: Path, **extra: Any) -> Path:
    meta = {"bin": {"claude": "bin/claude.exe"}, "dependencies": {}, **extra}
    return _tgz(
        path,
        [
            ("package/package.json", _pkg_json(PKG, **meta), 0o644, None),
            ("package/install.cjs", b"// postinstall\n", 0o644, None),
            ("package/bin/claude.exe", b"stub\n", 0o755, None),
        ],
    )


def _platform(path: Path, binary: bytes = BINARY) -> Path:
    return _tgz(
        path,
        [
            ("package/package.json", _pkg_json(PKG + "-linux-x64"), 0o644, None),
            ("package/claude", binary, 0o755, None),
        ],
    )


def _sri(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


class FakeModule:
    def __init__(self, check_mode: bool = False, **params: Any) -> None:
        self.check_mode = check_mode
        self.params = params


@pytest.fixture
def box(tmp_path: Path) -> SimpleNamespace:
    w = _wrapper(tmp_path / "anthropic-ai-claude-code-2.1.197.tgz")
    p = _platform(tmp_path / "anthropic-ai-claude-code-linux-x64-2.1.197.tgz")
    (tmp_path / "usrbin").mkdir()
    params = {
        "prefix": str(tmp_path / "opt"),
        "package": PKG,
        "version": VERSION,
        "platform": "linux-x64",
        "integrity": _sri(w),
        "platform_integrity": _sri(p),
        "wrapper_tarball": str(w),
        "platform_tarball": str(p),
        "link": str(tmp_path / "usrbin" / "claude"),
        "replace_links_into": [str(tmp_path / "old" / "lib" / "node_modules" / PKG)],
    }
    return SimpleNamespace(root=tmp_path, w=w, p=p, params=params)


def test_sri_matches_npm_form(mod: ModuleType, tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"hello")
    assert mod.sri_sha512(str(f)) == (
        "sha512-m3HSJL1i83hdltRq0+o9czGb+8KJDKra4t/3JRlnPKcjI8PZm6XBHXx6zG4UuMXaDEZjR1wuXDre9G9zvN7AQw=="
    )
    assert mod.SRI_RE.match(mod.sri_sha512(str(f)))


def test_tarball_name_is_npm_packs(mod: ModuleType) -> None:
    assert mod.tarball_name(PKG, VERSION) == "anthropic-ai-claude-code-2.1.197.tgz"
    assert mod.tarball_name(PKG + "-linux-x64", VERSION) == (
        "anthropic-ai-claude-code-linux-x64-2.1.197.tgz"
    )


def test_integrity_mismatch_names_package_expected_actual(mod: ModuleType, box: Any) -> None:
    wrong = "sha512-" + base64.b64encode(b"\0" * 64).decode()
    with pytest.raises(mod.InstallError) as exc:
        mod.check_sri(str(box.p), PKG + "-linux-x64", wrong)
    msg = str(exc.value)
    assert PKG + "-linux-x64" in msg and wrong in msg and _sri(box.p) in msg


def test_bad_pin_is_refused_before_anything(mod: ModuleType, box: Any) -> None:
    params = dict(box.params, platform_integrity="sha256-abc")
    with pytest.raises(mod.InstallError, match="not a sha512"):
        mod.run(FakeModule(**params))
    assert not Path(box.params["prefix"]).exists()


def test_member_selection(mod: ModuleType, tmp_path: Path) -> None:
    good = _platform(tmp_path / "good.tgz")
    with tarfile.open(good) as tar:
        assert mod.select_member(tar, "claude").size == len(BINARY)
    dup = _tgz(
        tmp_path / "dup.tgz",
        [("package/claude", b"a", 0o755, None), ("./package/claude", b"b", 0o755, None)],
    )
    with tarfile.open(dup) as tar, pytest.raises(mod.InstallError, match="2 entries"):
        mod.select_member(tar, "claude")
    link = _tgz(tmp_path / "link.tgz", [("package/claude", None, 0o777, "/etc/shadow")])
    with tarfile.open(link) as tar, pytest.raises(mod.InstallError, match="not a regular"):
        mod.select_member(tar, "claude")
    none = _tgz(tmp_path / "none.tgz", [("package/other", b"x", 0o755, None)])
    with tarfile.open(none) as tar, pytest.raises(mod.InstallError, match="0 entries"):
        mod.select_member(tar, "claude")
    assert mod._member_path("package/../etc/passwd") is None
    assert mod._member_path("/package/x") is None
    assert mod._member_path("other/x") is None


def test_install_then_idempotent(mod: ModuleType, box: Any) -> None:
    res = mod.run(FakeModule(**box.params))
    assert res["changed"] and res["installed"] and res["link_changed"]
    binary = Path(box.params["prefix"]) / "lib/node_modules" / PKG / "bin/claude.exe"
    assert binary.read_bytes() == BINARY
    assert oct(binary.stat().st_mode & 0o7777) == "0o755"
    assert res["binary_sha256"] == hashlib.sha256(BINARY).hexdigest()
    assert (binary.parent.parent / "install.cjs").stat().st_mode & 0o777 == 0o644
    link = Path(box.params["link"])
    assert os.readlink(link) == str(Path(box.params["prefix"]) / "bin" / "claude")
    assert link.resolve() == binary.resolve()
    manifest = json.loads((Path(box.params["prefix"]) / mod.MANIFEST).read_text())
    assert manifest["version"] == VERSION and manifest["binary_sha256"] == res["binary_sha256"]
    # second run: nothing to do, tarballs not needed
    again = dict(box.params, wrapper_tarball=None, platform_tarball=None)
    res2 = mod.run(FakeModule(**again))
    assert not res2["changed"] and res2["binary_sha256"] == res["binary_sha256"]
    # a tampered binary is reinstalled (check mode reports it without touching anything)
    binary.write_bytes(b"evil")
    res3 = mod.run(FakeModule(check_mode=True, **again))
    assert res3["changed"] and res3["installed"] and "SHA-256" in res3["reason"]
    assert binary.read_bytes() == b"evil"
    res4 = mod.run(FakeModule(**box.params))
    assert res4["installed"] and binary.read_bytes() == BINARY
    assert not [p for p in binary.parents[2].iterdir() if p.name.startswith(".")]


def test_check_mode_changes_nothing(mod: ModuleType, box: Any) -> None:
    params = dict(box.params, wrapper_tarball=None, platform_tarball=None)
    res = mod.run(FakeModule(check_mode=True, **params))
    assert res["changed"] and res["installed"]
    assert not Path(box.params["prefix"]).exists() and not os.path.lexists(box.params["link"])


def test_wrong_tarball_installs_nothing(mod: ModuleType, box: Any) -> None:
    evil = _platform(box.root / "evil.tgz", b"evil")
    params = dict(box.params, platform_tarball=str(evil))
    with pytest.raises(mod.InstallError, match="integrity mismatch"):
        mod.run(FakeModule(**params))
    assert not (Path(box.params["prefix"]) / "lib").exists()
    assert not os.path.lexists(box.params["link"])


def test_wrapper_with_link_or_dependencies_refused(mod: ModuleType, box: Any) -> None:
    linked = _tgz(
        box.root / "linked.tgz",
        [
            ("package/package.json", _pkg_json(PKG, bin={"claude": "bin/claude.exe"}), 0o644, None),
            ("package/bin/claude.exe", None, 0o777, "/etc/passwd"),
        ],
    )
    params = dict(box.params, wrapper_tarball=str(linked), integrity=_sri(linked))
    with pytest.raises(mod.InstallError, match=r"refused: .*links are refused"):
        mod.run(FakeModule(**params))
    deps = _wrapper(box.root / "deps.tgz", dependencies={"left-pad": "1"})
    params = dict(box.params, wrapper_tarball=str(deps), integrity=_sri(deps))
    with pytest.raises(mod.InstallError, match="dependencies"):
        mod.run(FakeModule(**params))


def test_link_replacement_rules(mod: ModuleType, box: Any) -> None:
    link = Path(box.params["link"])
    old_bin = box.root / "old" / "lib" / "node_modules" / PKG / "bin" / "claude.exe"
    link.symlink_to(os.path.relpath(old_bin, link.parent))  # npm's relative link, dangling
    assert mod.run(FakeModule(**box.params))["link_changed"]
    assert os.readlink(link) == str(Path(box.params["prefix"]) / "bin" / "claude")
    link.unlink()
    link.symlink_to("/somewhere/else/claude")
    with pytest.raises(mod.InstallError, match="left alone"):
        mod.run(FakeModule(**box.params))
    assert os.readlink(link) == "/somewhere/else/claude"
    link.unlink()
    link.write_text("#!/bin/sh\n")
    with pytest.raises(mod.InstallError, match="not a symbolic link"):
        mod.run(FakeModule(**box.params))


def test_wrapper_entry_outside_package_or_a_device_is_refused(mod: ModuleType, box: Any) -> None:
    """The wrapper is unpacked by root: every entry passes the collection's one tar check
    (safetar.member_problem), so a path climbing out of package/ or a FIFO is refused."""
    for name, want in (("package/../../etc/cron.d/x", r"'\.\.' path"), ("other/x", "outside")):
        bad = _tgz(
            box.root / "bad.tgz",
            [
                (
                    "package/package.json",
                    _pkg_json(PKG, bin={"claude": "bin/claude.exe"}),
                    0o644,
                    None,
                ),
                ("package/bin/claude.exe", b"stub\n", 0o755, None),
                (name, b"* * * * * root id\n", 0o644, None),
            ],
        )
        params = dict(box.params, wrapper_tarball=str(bad), integrity=_sri(bad))
        with pytest.raises(mod.InstallError, match=want):
            mod.run(FakeModule(**params))
        assert not (box.root / "etc").exists()

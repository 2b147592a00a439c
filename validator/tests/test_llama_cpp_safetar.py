"""The llama_cpp role's archive handling (plugins/module_utils/safetar.py): a
shipped build is installed only when its sha256 equals the controller's record and every member
is a plain file or directory below the build's own directory; the binaries of a build tree come
as a tar stream that may hold only the expected regular files; the controller's index records the
sha256 it computed itself and refuses build names and platform keys that are not plain names."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import load_ansible_plugin, module_utils, plugin_path

ROLE = Path(__file__).resolve().parents[2] / "roles" / "llama_cpp"
NAME = "b9079-69d8e4be47-cpu-3f2a9c1d0e"
COMMIT = "69d8e4be47243e83b3d0d71e932bc7aa61c644dc"

pytestmark = pytest.mark.skipif(
    not ROLE.is_dir(), reason="run from a checkout of the whole repository"
)


def _utils() -> ModuleType:
    """The role's module_utils, found where Ansible finds a role's."""
    return module_utils("safetar")


@pytest.fixture(scope="module")
def st() -> ModuleType:
    return _utils()


def _module(name: str) -> ModuleType:
    _utils()
    return load_ansible_plugin(plugin_path("modules", name))


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **kw: object
) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.size = len(data) if kind == tarfile.REGTYPE else 0
    ti.mode = int(kw.get("mode", 0o644))  # type: ignore[call-overload]
    ti.linkname = str(kw.get("linkname", ""))
    return ti


BINARY = b"\x7fELF binary"


def _manifest(
    name: str = NAME,
    commit: str = COMMIT,
    binaries: dict[str, bytes] | None = None,
    host: str = "builder",
) -> bytes:
    """The manifest the role writes (the keys these checks read): binaries_sha256 as the role
    records it from the stream the build account produced."""
    listed = {"llama-server": BINARY} if binaries is None else binaries
    return json.dumps(
        {
            "name": name,
            "commit": commit,
            "host": host,
            "binaries_sha256": {k: hashlib.sha256(v).hexdigest() for k, v in listed.items()},
        }
    ).encode()


def make_tarball(
    path: Path,
    members: list[tuple[str, bytes, bytes, dict[str, object]]] | None = None,
    host: str = "builder",
    top: str = NAME,
) -> str:
    """A gzip tarball like the one the role packs; returns its sha256. members: (name, type,
    data, extra) to use instead of the normal build."""
    if members is None:
        members = [
            (top, tarfile.DIRTYPE, b"", {"mode": 0o755}),
            (f"{top}/bin", tarfile.DIRTYPE, b"", {"mode": 0o755}),
            (f"{top}/bin/llama-server", tarfile.REGTYPE, BINARY, {"mode": 0o4755}),
            (f"{top}/llama-server.help.txt", tarfile.REGTYPE, b"--ctx-size N\n", {"mode": 0o666}),
            (f"{top}/manifest.json", tarfile.REGTYPE, _manifest(top, host=host), {"mode": 0o644}),
        ]
    with tarfile.open(path, "w:gz") as tf:
        for name, kind, data, extra in members:
            ti = _info(name, kind, data, **extra)
            tf.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def builds(tmp_path: Path) -> Path:
    d = tmp_path / "builds"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    return d


def _left(builds: Path) -> list[str]:
    return sorted(p.name for p in builds.iterdir())


# --- members ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "extra", "why"),
    [
        ("/etc/cron.d/x", tarfile.REGTYPE, {}, "absolute"),
        (f"{NAME}/../../etc/passwd", tarfile.REGTYPE, {}, "'..'"),
        ("../x", tarfile.REGTYPE, {}, "'..'"),
        (f"{NAME}/bin/llama-server", tarfile.SYMTYPE, {"linkname": "/etc/shadow"}, "symbolic link"),
        (f"{NAME}/bin/x", tarfile.LNKTYPE, {"linkname": "etc/shadow"}, "hard link"),
        (f"{NAME}/dev", tarfile.CHRTYPE, {}, "not a regular file"),
        (f"{NAME}/fifo", tarfile.FIFOTYPE, {}, "not a regular file"),
        ("other/manifest.json", tarfile.REGTYPE, {}, "outside"),
        (f"{NAME}//x", tarfile.REGTYPE, {}, "empty"),
        (f"{NAME}/a\nb", tarfile.REGTYPE, {}, "control"),
    ],
)
def test_unsafe_members_are_named(
    st: ModuleType, name: str, kind: bytes, extra: dict[str, Any], why: str
) -> None:
    problem = st.member_problem(_info(name, kind, **extra), top=NAME)
    assert problem is not None and why in problem


def test_plain_members_pass(st: ModuleType) -> None:
    assert st.member_problem(_info(NAME, tarfile.DIRTYPE), top=NAME) is None
    assert st.member_problem(_info(f"{NAME}/bin/llama-server"), top=NAME) is None
    only = frozenset({"llama-server"})
    assert st.member_problem(_info("llama-server"), allowed=only, dirs=False) is None
    assert "expected names" in st.member_problem(_info("llama-cli"), allowed=only, dirs=False)
    assert "directory" in st.member_problem(_info("bin", tarfile.DIRTYPE), allowed=only, dirs=False)


@pytest.mark.parametrize(
    "name",
    [NAME, "b1-612d3081bf-cuda-0123456789", "b123456789-478b0f0b0a-cpu-ffffffffff"],
)
def test_build_names_accepted(st: ModuleType, name: str) -> None:
    assert st.check_build_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "../../../etc/cron.d/x",
        f"{NAME}/../../x",
        "b1-../../../x-cpu-0123456789",
        "bunknown-612d3081bf-cpu-0123456789",
        "b1-612d3081bf-rocm-0123456789",
        "b1-612D3081BF-cpu-0123456789",
        f"{NAME}\n",
        "",
        None,
    ],
)
def test_build_names_refused(st: ModuleType, name: object) -> None:
    with pytest.raises(ValueError, match="refusing to use it as a path"):
        st.check_build_name(name)


def test_role_regex_equals_the_module_regex(st: ModuleType) -> None:
    """tasks/build.yml asserts the same form before the name becomes a path on the host."""
    import re

    role_re = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_llama_cpp_build_name_re"]
    samples = [
        NAME,
        "b1-612d3081bf-cuda-0123456789",
        "b1-../x-cpu-0123456789",
        "bunknown-x-cpu-y",
        "b1-612d3081bf-cpu-0123456789/..",
        "b0123456789-612d3081bf-cpu-0123456789",
    ]
    for s in samples:
        assert bool(re.match(role_re, s)) == bool(st.BUILD_NAME.match(s)), s


@pytest.mark.parametrize("platform", ["../x", "..", "a/b", "", ".hidden", "a b", "x" * 200])
def test_platform_keys_refused(st: ModuleType, platform: str) -> None:
    with pytest.raises(ValueError):
        st.check_platform(platform)


def test_platform_key_of_the_rollout_accepted(st: ModuleType) -> None:
    assert st.check_platform("debian-bookworm-x86_64-auto-any") == "debian-bookworm-x86_64-auto-any"
    assert st.check_platform("ubuntu-jammy-x86_64-cuda-86_89")


# --- shipped builds ---------------------------------------------------------------------------


def test_unpacks_a_verified_build_with_normalised_modes(
    st: ModuleType, tmp_path: Path, builds: Path
) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = make_tarball(tar)
    result = st.unpack_build(str(tar), str(builds), NAME, digest, COMMIT)
    assert result["changed"] is True and result["sha256"] == digest
    final = builds / NAME
    binary = final / "bin" / "llama-server"
    assert binary.read_bytes() == b"\x7fELF binary"
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755  # set-uid dropped
    assert stat.S_IMODE((final / "llama-server.help.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE(final.stat().st_mode) == 0o755
    assert stat.S_IMODE((final / "bin").stat().st_mode) == 0o755
    assert binary.stat().st_uid == os.geteuid()
    assert _left(builds) == [NAME]
    # a complete build is left alone
    again = st.unpack_build(str(tar), str(builds), NAME, digest, COMMIT)
    assert again["changed"] is False


def test_sha256_mismatch_unpacks_nothing(st: ModuleType, tmp_path: Path, builds: Path) -> None:
    tar = tmp_path / "in.tar.gz"
    make_tarball(tar)
    expected = "0" * 64
    actual = hashlib.sha256(tar.read_bytes()).hexdigest()
    with pytest.raises(st.ChecksumMismatchError) as exc:
        st.unpack_build(str(tar), str(builds), NAME, expected, COMMIT)
    msg = str(exc.value)
    assert NAME in msg and expected in msg and actual in msg and "nothing was unpacked" in msg
    assert _left(builds) == []


def test_tampered_tarball_is_refused(st: ModuleType, tmp_path: Path, builds: Path) -> None:
    """What the controller recorded for the builder's tarball, checked against another file."""
    good = tmp_path / "good.tar.gz"
    recorded = make_tarball(good)
    evil = tmp_path / "evil.tar.gz"
    make_tarball(
        evil,
        [
            (NAME, tarfile.DIRTYPE, b"", {}),
            (f"{NAME}/bin/llama-server", tarfile.REGTYPE, b"#!/bin/sh\nid\n", {"mode": 0o755}),
            (f"{NAME}/manifest.json", tarfile.REGTYPE, _manifest(), {}),
        ],
    )
    with pytest.raises(st.ChecksumMismatchError):
        st.unpack_build(str(evil), str(builds), NAME, recorded, COMMIT)
    assert _left(builds) == []


@pytest.mark.parametrize(
    ("members", "why"),
    [
        (
            [(NAME, tarfile.DIRTYPE, b"", {}), ("/etc/cron.d/evil", tarfile.REGTYPE, b"x", {})],
            "absolute",
        ),
        (
            [(NAME, tarfile.DIRTYPE, b"", {}), (f"{NAME}/../evil", tarfile.REGTYPE, b"x", {})],
            "'..'",
        ),
        (
            [
                (NAME, tarfile.DIRTYPE, b"", {}),
                (f"{NAME}/bin", tarfile.SYMTYPE, b"", {"linkname": "/usr/local/bin"}),
            ],
            "symbolic link",
        ),
        (
            [
                (NAME, tarfile.DIRTYPE, b"", {}),
                (f"{NAME}/shadow", tarfile.LNKTYPE, b"", {"linkname": "/etc/shadow"}),
            ],
            "hard link",
        ),
        (
            [
                (NAME, tarfile.DIRTYPE, b"", {}),
                ("b1-0000000000-cpu-0000000000/x", tarfile.REGTYPE, b"x", {}),
            ],
            "outside",
        ),
        (
            [
                (NAME, tarfile.DIRTYPE, b"", {}),
                (f"{NAME}/bin/llama-server", tarfile.REGTYPE, b"x", {}),
            ],
            "no " + NAME + "/manifest.json",
        ),
    ],
)
def test_unsafe_archives_refused_before_anything_is_written(
    st: ModuleType,
    tmp_path: Path,
    builds: Path,
    members: list[tuple[str, bytes, bytes, dict[str, object]]],
    why: str,
) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = make_tarball(tar, [*members, (f"{NAME}/zz", tarfile.REGTYPE, b"z", {})])
    with pytest.raises(st.UnsafeArchiveError, match=why.replace("(", r"\(")):
        st.unpack_build(str(tar), str(builds), NAME, digest)
    assert _left(builds) == []
    assert not (tmp_path / "evil").exists()


def test_manifest_must_name_the_build_and_commit(
    st: ModuleType, tmp_path: Path, builds: Path
) -> None:
    tar = tmp_path / "in.tar.gz"
    members: list[tuple[str, bytes, bytes, dict[str, object]]] = [
        (NAME, tarfile.DIRTYPE, b"", {}),
        (
            f"{NAME}/manifest.json",
            tarfile.REGTYPE,
            _manifest(name="b1-0000000000-cpu-0000000000"),
            {},
        ),
    ]
    digest = make_tarball(tar, members)
    with pytest.raises(st.UnsafeArchiveError, match="names the build"):
        st.unpack_build(str(tar), str(builds), NAME, digest)
    digest = make_tarball(
        tar, [members[0], (f"{NAME}/manifest.json", tarfile.REGTYPE, _manifest(), {})]
    )
    with pytest.raises(st.UnsafeArchiveError, match="this host checked out"):
        st.unpack_build(str(tar), str(builds), NAME, digest, "1" * 40)
    assert _left(builds) == []


def test_incomplete_build_directory_is_replaced(
    st: ModuleType, tmp_path: Path, builds: Path
) -> None:
    (builds / NAME / "bin").mkdir(parents=True)
    (builds / NAME / "bin" / "stale").write_text("x")
    tar = tmp_path / "in.tar.gz"
    digest = make_tarball(tar)
    assert st.unpack_build(str(tar), str(builds), NAME, digest)["changed"] is True
    assert sorted(p.name for p in (builds / NAME / "bin").iterdir()) == ["llama-server"]
    assert _left(builds) == [NAME]


def test_link_as_source_and_shared_dest_refused(
    st: ModuleType, tmp_path: Path, builds: Path
) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = make_tarball(tar)
    link = tmp_path / "link.tar.gz"
    link.symlink_to(tar)
    with pytest.raises(OSError):
        st.unpack_build(str(link), str(builds), NAME, digest)
    builds.chmod(0o777)
    with pytest.raises(st.UnsafeArchiveError, match="not writable by group or others"):
        st.unpack_build(str(tar), str(builds), NAME, digest)


def test_garbage_is_not_an_archive(st: ModuleType, tmp_path: Path, builds: Path) -> None:
    tar = tmp_path / "in.tar.gz"
    tar.write_bytes(b"not gzip at all")
    digest = hashlib.sha256(tar.read_bytes()).hexdigest()
    with pytest.raises(Exception):  # noqa: B017 - tarfile.ReadError / gzip errors, reported by the module
        st.unpack_build(str(tar), str(builds), NAME, digest)
    assert _left(builds) == []


# --- binaries streamed out of the build tree --------------------------------------------------


def _stream(members: list[tuple[str, bytes, bytes, dict[str, object]]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, kind, data, extra in members:
            tf.addfile(
                _info(name, kind, data, **extra),
                io.BytesIO(data) if kind == tarfile.REGTYPE else None,
            )
    buf.seek(0)
    return buf


@pytest.fixture
def install_dir(tmp_path: Path) -> Path:
    d = tmp_path / "builds" / NAME
    d.mkdir(parents=True)
    for p in (d, d.parent):
        p.chmod(0o755)
    return d


def test_stream_installs_expected_binaries(st: ModuleType, install_dir: Path) -> None:
    stream = _stream([("llama-server", tarfile.REGTYPE, b"ELF", {"mode": 0o700})])
    hashes = st.install_stream(stream, str(install_dir / "bin"), ["llama-server"])
    binary = install_dir / "bin" / "llama-server"
    assert hashes == {"llama-server": hashlib.sha256(b"ELF").hexdigest()}
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755 and binary.read_bytes() == b"ELF"
    assert stat.S_IMODE((install_dir / "bin").stat().st_mode) == 0o755
    assert sorted(p.name for p in install_dir.iterdir()) == ["bin"]


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([("llama-server", tarfile.SYMTYPE, b"", {"linkname": "/etc/shadow"})], "symbolic link"),
        ([("llama-server", tarfile.LNKTYPE, b"", {"linkname": "/etc/shadow"})], "hard link"),
        ([("llama-server", tarfile.DIRTYPE, b"", {})], "directory"),
        ([("../llama-server", tarfile.REGTYPE, b"x", {})], "'..'"),
        ([("bin/llama-server", tarfile.REGTYPE, b"x", {})], "expected names"),
        (
            [("llama-server", tarfile.REGTYPE, b"x", {}), ("llama-cli", tarfile.REGTYPE, b"x", {})],
            "expected names",
        ),
        (
            [
                ("llama-server", tarfile.REGTYPE, b"x", {}),
                ("llama-server", tarfile.REGTYPE, b"y", {}),
            ],
            "appears twice",
        ),
        ([], "lacks"),
    ],
)
def test_stream_refuses_anything_else(
    st: ModuleType,
    install_dir: Path,
    members: list[tuple[str, bytes, bytes, dict[str, object]]],
    why: str,
) -> None:
    with pytest.raises(st.UnsafeArchiveError, match=why):
        st.install_stream(_stream(members), str(install_dir / "bin"), ["llama-server"])
    assert list(install_dir.iterdir()) == []


def test_stream_refused_when_the_producer_failed(st: ModuleType, install_dir: Path) -> None:
    def fail() -> None:
        raise st.UnsafeArchiveError("tar exited 2")

    stream = _stream([("llama-server", tarfile.REGTYPE, b"x", {})])
    with pytest.raises(st.UnsafeArchiveError, match="tar exited 2"):
        st.install_stream(stream, str(install_dir / "bin"), ["llama-server"], before_commit=fail)
    assert list(install_dir.iterdir()) == []


def test_stream_replaces_an_older_bin_directory(st: ModuleType, install_dir: Path) -> None:
    (install_dir / "bin").mkdir()
    (install_dir / "bin" / "old").write_text("x")
    st.install_stream(
        _stream([("llama-server", tarfile.REGTYPE, b"x", {})]),
        str(install_dir / "bin"),
        ["llama-server"],
    )
    assert sorted(p.name for p in (install_dir / "bin").iterdir()) == ["llama-server"]
    assert sorted(p.name for p in install_dir.iterdir()) == ["bin"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (runuser)")
@pytest.mark.skipif(
    not os.path.exists("/usr/sbin/runuser") and not os.path.exists("/sbin/runuser"),
    reason="needs runuser",
)
def test_module_streams_as_the_build_account_and_refuses_a_planted_link(tmp_path: Path) -> None:
    """The real path: `runuser -u nobody -- tar ...` reads the tree; a link the account planted
    at the binary's name arrives as a link and is refused, never followed."""
    import shutil
    import tempfile

    mod = _module("llama_cpp_install_bins")
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    tar = shutil.which("tar") or "/bin/tar"
    top = Path(tempfile.mkdtemp(prefix="llama-cpp-test-"))
    try:
        top.chmod(0o755)
        tree = top / "tree"
        tree.mkdir()
        (tree / "llama-server").write_bytes(b"ELF from the build account")
        os.chown(tree, 65534, 65534)
        os.chown(tree / "llama-server", 65534, 65534)
        dest_parent = top / "builds" / NAME
        dest_parent.mkdir(parents=True)
        for p in (top / "builds", dest_parent):
            p.chmod(0o755)
        user = "nobody"
        argv = mod.stream_command(runuser, tar, user, str(tree), ["llama-server"])
        hashes = mod.run(argv, str(dest_parent / "bin"), ["llama-server"])
        installed = dest_parent / "bin" / "llama-server"
        assert installed.read_bytes() == b"ELF from the build account"
        assert installed.stat().st_uid == 0 and stat.S_IMODE(installed.stat().st_mode) == 0o755
        assert hashes["llama-server"] == hashlib.sha256(b"ELF from the build account").hexdigest()

        # the build account replaces its binary by a link to a root-only file
        secret = top / "secret"
        secret.write_text("root only")
        secret.chmod(0o600)
        (tree / "llama-server").unlink()
        (tree / "llama-server").symlink_to(secret)
        os.lchown(tree / "llama-server", 65534, 65534)
        shutil.rmtree(dest_parent / "bin")
        with pytest.raises(mod.UnsafeArchiveError, match="symbolic link"):
            mod.run(argv, str(dest_parent / "bin"), ["llama-server"])
        assert list(dest_parent.iterdir()) == []

        # a missing binary: tar fails, nothing installed
        (tree / "llama-server").unlink()
        with pytest.raises(mod.UnsafeArchiveError):
            mod.run(argv, str(dest_parent / "bin"), ["llama-server"])
        assert list(dest_parent.iterdir()) == []
    finally:
        shutil.rmtree(top)


# --- the controller's index -------------------------------------------------------------------

PLATFORM = "debian-bookworm-x86_64-cpu-any"


def test_index_records_the_controllers_own_sha256(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    assert st.lookup(str(ship), PLATFORM, NAME)["found"] is False
    incoming = ship / PLATFORM / f".incoming-lf-fleet-1-{NAME}.tar.gz"
    incoming.parent.mkdir(parents=True)
    digest = make_tarball(incoming, host="lf-fleet-1")
    changed, entry = st.record(
        str(ship), PLATFORM, NAME, str(incoming), builder="lf-fleet-1", commit=COMMIT, now=0
    )
    assert changed is True
    assert (
        entry["sha256"] == digest
        and entry["platform"] == PLATFORM
        and entry["builder"] == "lf-fleet-1"
    )
    assert (
        entry["file"] == f"{PLATFORM}/{NAME}.tar.gz"
        and entry["recorded_at"] == "1970-01-01T00:00:00Z"
    )
    assert not incoming.exists()
    found = st.lookup(str(ship), PLATFORM, NAME)
    assert found["found"] and found["tarball_exists"] and found["entry"]["sha256"] == digest
    assert found["tarball"] == str(ship / PLATFORM / f"{NAME}.tar.gz")
    index = json.loads((ship / "index.json").read_text())
    assert index["format"] == 1 and index["builds"][PLATFORM][NAME]["sha256"] == digest
    # another platform does not see it
    assert st.lookup(str(ship), "ubuntu-jammy-x86_64-cpu-any", NAME)["found"] is False


def test_index_keeps_the_first_recorded_tarball(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    first = ship / PLATFORM / "first.tar.gz"
    digest = make_tarball(first, host="a")
    st.record(str(ship), PLATFORM, NAME, str(first), builder="a")
    second = ship / PLATFORM / "second.tar.gz"
    second.write_bytes(b"another build of the same name")
    changed, entry = st.record(str(ship), PLATFORM, NAME, str(second), builder="b")
    assert changed is False and entry["sha256"] == digest and entry["builder"] == "a"
    assert not second.exists()


def test_index_replaces_a_tampered_tarball_on_a_new_record(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    first = ship / PLATFORM / "first.tar.gz"
    make_tarball(first, host="a")
    st.record(str(ship), PLATFORM, NAME, str(first), builder="a")
    (ship / PLATFORM / f"{NAME}.tar.gz").write_bytes(b"tampered")
    fresh = ship / PLATFORM / "fresh.tar.gz"
    digest = make_tarball(fresh, host="b")
    changed, entry = st.record(str(ship), PLATFORM, NAME, str(fresh), builder="b")
    assert changed is True and entry["sha256"] == digest


def test_index_refuses_names_that_would_be_paths(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    for name in ("../../../../tmp/evil", f"{NAME}/../../x", "x"):
        with pytest.raises(ValueError):
            st.lookup(str(ship), PLATFORM, name)
    with pytest.raises(ValueError):
        st.lookup(str(ship), "../..", NAME)
    assert not ship.exists()


def test_index_with_a_broken_entry_is_an_error(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    ship.mkdir()
    (ship / "index.json").write_text(
        json.dumps({"format": 1, "builds": {PLATFORM: {NAME: {"sha256": "x"}}}})
    )
    with pytest.raises(ValueError, match="no valid sha256"):
        st.lookup(str(ship), PLATFORM, NAME)
    (ship / "index.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        st.lookup(str(ship), PLATFORM, NAME)


def test_index_incoming_path_is_inside_the_platform_dir(st: ModuleType, tmp_path: Path) -> None:
    path = st.incoming_path(str(tmp_path), PLATFORM, NAME, "../../evil host")
    assert os.path.dirname(path) == str(tmp_path / PLATFORM)
    assert os.path.basename(path).startswith(".incoming-") and "/" not in os.path.basename(path)


def test_index_finds_the_build_of_a_commit_and_options(st: ModuleType, tmp_path: Path) -> None:
    """A host that installs a shipped build finds its name (and so the builder's build number) by
    commit, backend and options hash; anything ambiguous or unrecorded finds nothing."""
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    options_hash = "3f2a9c1d0e" + "ab" * 27
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash) == ""
    src = ship / PLATFORM / "a.tar.gz"
    make_tarball(src, host="a")
    st.record(str(ship), PLATFORM, NAME, str(src), builder="a", commit=COMMIT)
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash) == NAME
    # other options, another backend, another commit, another platform: nothing
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", "0" * 64) == ""
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cuda", options_hash) == ""
    assert st.find_build(str(ship), PLATFORM, "1" * 40, "cpu", options_hash) == ""
    jammy = "ubuntu-jammy-x86_64-cpu-any"
    assert st.find_build(str(ship), jammy, COMMIT, "cpu", options_hash) == ""
    # malformed inputs find nothing (and raise nothing)
    assert st.find_build(str(ship), PLATFORM, "HEAD", "cpu", options_hash) == ""
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", "../x") == ""
    # its tarball gone: nothing to install, so nothing found
    (ship / PLATFORM / f"{NAME}.tar.gz").rename(ship / "moved.tar.gz")
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash) == ""
    (ship / "moved.tar.gz").rename(ship / PLATFORM / f"{NAME}.tar.gz")
    # the same commit and options under two build numbers (one set by hand): ambiguous, nothing
    other = NAME.replace("b9079-", "b1-")
    src = ship / PLATFORM / "b.tar.gz"
    make_tarball(src, host="b", top=other)
    st.record(str(ship), PLATFORM, other, str(src), builder="b", commit=COMMIT)
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash) == ""
    # an entry recorded without its commit is never found by commit
    ship2 = tmp_path / "ship2"
    (ship2 / PLATFORM).mkdir(parents=True)
    src = ship2 / PLATFORM / "c.tar.gz"
    make_tarball(src, host="c")
    st.record(str(ship2), PLATFORM, NAME, str(src), builder="c")
    assert st.find_build(str(ship2), PLATFORM, COMMIT, "cpu", options_hash) == ""


# --- a compromised builder (issue: one builder implants the fleet) ---------------------------
#
# The builder packs what it likes and the controller records the sha256 of what it sent, so the
# tarball's hash proves nothing about its content. What it cannot fake without also rewriting
# the manifest is the binaries' agreement with the manifest it shipped beside them; what it
# cannot fake at all is its name: only hosts named as builders may ship.


def _builder_tarball(path: Path, bins: dict[str, bytes], host: str = "lf-fleet-1") -> str:
    """The builder's tarball with `bins` in bin/ and the manifest of an honest build (the one
    llama-server it compiled)."""
    members: list[tuple[str, bytes, bytes, dict[str, object]]] = [
        (NAME, tarfile.DIRTYPE, b"", {"mode": 0o755}),
        (f"{NAME}/bin", tarfile.DIRTYPE, b"", {"mode": 0o755}),
        *[
            (f"{NAME}/bin/{b}", tarfile.REGTYPE, data, dict[str, object](mode=0o755))
            for b, data in bins.items()
        ],
        (f"{NAME}/manifest.json", tarfile.REGTYPE, _manifest(host=host), {"mode": 0o644}),
    ]
    return make_tarball(path, members)


@pytest.mark.parametrize(
    ("bins", "why"),
    [
        ({"llama-server": b"\x7fELF modified by root on the builder"}, "binaries_sha256 says"),
        ({"llama-server": BINARY, "rt-implant": b"\x7fELF implant"}, "bin/rt-implant is not in"),
        ({}, "bin/llama-server is in the manifest's binaries_sha256 but not in the archive"),
    ],
)
def test_binaries_that_disagree_with_the_manifest_are_refused(
    st: ModuleType, tmp_path: Path, builds: Path, bins: dict[str, bytes], why: str
) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = _builder_tarball(tar, bins)
    # the controller's own check before it records anything
    problems = st.archive_problems(str(tar), NAME, "lf-fleet-1")
    assert any(why in p for p in problems), problems
    # and the receiving host's, although the sha256 is the one recorded
    with pytest.raises(st.UnsafeArchiveError, match=why) as exc:
        st.unpack_build(str(tar), str(builds), NAME, digest, COMMIT, builder="lf-fleet-1")
    assert "nothing was installed" in str(exc.value)
    assert _left(builds) == []


def test_a_build_from_another_host_than_recorded_is_refused(
    st: ModuleType, tmp_path: Path, builds: Path
) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = _builder_tarball(tar, {"llama-server": BINARY}, host="lf-fleet-3")
    with pytest.raises(st.UnsafeArchiveError, match=r"built on 'lf-fleet-3'.*from 'lf-fleet-1'"):
        st.unpack_build(str(tar), str(builds), NAME, digest, COMMIT, builder="lf-fleet-1")
    assert _left(builds) == []
    # an honest build of the recorded builder installs, and returns what the manifest lists
    tar2 = tmp_path / "ok.tar.gz"
    digest2 = _builder_tarball(tar2, {"llama-server": BINARY})
    result = st.unpack_build(str(tar2), str(builds), NAME, digest2, COMMIT, builder="lf-fleet-1")
    assert result["binaries_sha256"] == {"llama-server": hashlib.sha256(BINARY).hexdigest()}


def test_installed_binaries_are_checked_again(st: ModuleType, tmp_path: Path, builds: Path) -> None:
    tar = tmp_path / "in.tar.gz"
    digest = _builder_tarball(tar, {"llama-server": BINARY})
    st.unpack_build(str(tar), str(builds), NAME, digest, COMMIT, builder="lf-fleet-1")
    manifest = json.loads((builds / NAME / "manifest.json").read_text())
    assert st.installed_binaries_problems(str(builds / NAME), manifest) == []
    (builds / NAME / "bin" / "llama-server").write_bytes(b"changed after the install")
    (builds / NAME / "bin" / "extra").write_bytes(b"added")
    problems = st.installed_binaries_problems(str(builds / NAME), manifest)
    assert len(problems) == 2 and "binaries_sha256 says" in problems[1], problems


def test_only_named_builders_ship(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    src = ship / PLATFORM / "in.tar.gz"
    _builder_tarball(src, {"llama-server": BINARY}, host="lf-fleet-3")
    with pytest.raises(st.UnsafeArchiveError, match="lf-fleet-3 is not one of the builders"):
        st.record(
            str(ship), PLATFORM, NAME, str(src), builder="lf-fleet-3", builders=["lf-fleet-1"]
        )
    assert not src.exists() and not (ship / "index.json").exists()
    # a named builder's tarball that disagrees with its manifest is not recorded either
    _builder_tarball(src, {"llama-server": BINARY, "rt-implant": b"x"})
    with pytest.raises(st.UnsafeArchiveError, match="rt-implant"):
        st.record(
            str(ship), PLATFORM, NAME, str(src), builder="lf-fleet-1", builders=["lf-fleet-1"]
        )
    assert not src.exists() and not (ship / "index.json").exists()


def test_a_builder_taken_off_the_list_no_longer_counts(st: ModuleType, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    src = ship / PLATFORM / "in.tar.gz"
    _builder_tarball(src, {"llama-server": BINARY}, host="old")
    st.record(str(ship), PLATFORM, NAME, str(src), builder="old", commit=COMMIT, builders=["old"])
    assert st.lookup(str(ship), PLATFORM, NAME, ["old"])["found"] is True
    gone = st.lookup(str(ship), PLATFORM, NAME, ["new"])
    assert gone["found"] is False and "old, which is not one of the builders now" in gone["ignored"]
    options_hash = "3f2a9c1d0e" + "ab" * 27
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash, builders=["new"]) == ""
    assert st.find_build(str(ship), PLATFORM, COMMIT, "cpu", options_hash, builders=["old"]) == NAME
    # the new builder's build replaces it (first recorded wins only among builders)
    _builder_tarball(src, {"llama-server": BINARY}, host="new")
    changed, entry = st.record(str(ship), PLATFORM, NAME, str(src), builder="new", builders=["new"])
    assert changed is True and entry["builder"] == "new"

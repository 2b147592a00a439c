"""The gguf_models role's modules (plugins/modules/gguf_*.py, plugins/module_utils/safefs.py) run
as root under a
model directory that the service account owned in earlier versions. These tests replay the
attacks that account could mount and check that root never follows its links, never writes
through its hard links, never blocks on its FIFOs, takes its directories over through their
descriptors, and never trusts a metadata.json field that could inject lines into a unit.

They call the modules' functions directly on throwaway directories; the "service account" is an
unused uid (no account is created). They need root (chown)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

from conftest import ModelServer, gguf_bytes, module_utils

ROLE = Path(__file__).resolve().parents[2] / "roles" / "gguf_models"
UID = 64123  # the old owner (the service account of earlier versions)
OTHER = 64124  # an account that is not the takeover owner

pytestmark = [
    pytest.mark.skipif(not ROLE.is_dir(), reason="run from a checkout of the whole repository"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the modules chown to root"),
]


@pytest.fixture(scope="module")
def fetch_mod() -> ModuleType:
    """The module gguf_fetch's work (module_utils/gguf_place.py)."""
    return module_utils("gguf_place")


@pytest.fixture(scope="module")
def meta_mod() -> ModuleType:
    """The module gguf_metadata's work (module_utils/gguf_describe.py)."""
    return module_utils("gguf_describe")


@pytest.fixture(scope="module")
def utils(meta_mod: ModuleType) -> ModuleType:
    return module_utils("safefs")


MODEL = gguf_bytes()
MODEL_SHA = hashlib.sha256(MODEL).hexdigest()


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    srv = ModelServer()
    srv.files["/tiny.gguf"] = MODEL
    yield srv
    srv.close()


@pytest.fixture
def top(open_tmp: Path) -> Path:
    return open_tmp


@pytest.fixture
def base(top: Path) -> Path:
    return top / "models"


@pytest.fixture
def placed(fetch_mod: ModuleType, server: ModelServer, base: Path) -> Path:
    """A models directory with one model placed (model "m", file tiny.gguf)."""
    place(fetch_mod, server, base)
    return base


def owned(path: Path, uid: int = UID, mode: int = 0o755) -> Path:
    os.chown(path, uid, uid, follow_symlinks=False)
    if not path.is_symlink():
        os.chmod(path, mode)
    return path


def old_install(base: Path, name: str = "m") -> Path:
    """The layout an earlier version of the role left: llama owns the directories."""
    mdir = base / name
    mdir.mkdir(parents=True)
    owned(base)
    owned(mdir)
    return mdir


def victim(top: Path, name: str = "victim", data: bytes = b"precious root data\n") -> Path:
    """A root-only file an attacker wants root to overwrite."""
    f = top / name
    f.write_bytes(data)
    os.chmod(f, 0o600)
    return f


def fingerprint(path: Path) -> tuple[int, int, int, int, bytes]:
    st = os.stat(path)
    data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_nlink, data


def place(
    fetch_mod: ModuleType,
    server: ModelServer,
    base: Path,
    name: str = "m",
    check_mode: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    """What the role does for one downloaded model file: the models directory, the model's
    directory, then the file."""
    take = {"takeover_owner": str(UID)}
    results = [
        fetch_mod.fetch({"state": "directory", "dest": str(base), **take}, check_mode),
        fetch_mod.fetch(
            {"state": "directory", "dest": str(base / name), "base": str(base), **take}, check_mode
        ),
    ]
    params = {
        "dest": str(base / name / "tiny.gguf"),
        "url": server.url + "/tiny.gguf",
        "sha256": MODEL_SHA,
        "base": str(base),
        "min_free_mb": 0,
        **take,
        **kw,
    }
    res: dict[str, Any] = fetch_mod.fetch(params, check_mode)
    res["changed"] = res["changed"] or any(r["changed"] for r in results)
    return res


def assert_root_layout(base: Path, name: str = "m") -> None:
    for d in (base, base / name):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o755), d
    for f in (base / name).iterdir():
        st = os.lstat(f)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, f
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o644), f


class Alarm:
    """Fail instead of hanging (a FIFO opened for reading without O_NONBLOCK blocks forever)."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def ring(signum: int, frame: FrameType | None) -> None:
            raise TimeoutError(f"blocked for {self.seconds} s")

        self.old = signal.signal(signal.SIGALRM, ring)
        signal.alarm(self.seconds)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


# --- the normal path -----------------------------------------------------------------------------


def test_download_verify_and_second_run_unchanged(
    fetch_mod: ModuleType, server: ModelServer, base: Path
) -> None:
    first = place(fetch_mod, server, base)
    assert first["changed"] and first["valid"] and first["sha256"] == MODEL_SHA
    model = base / "m" / "tiny.gguf"
    assert model.read_bytes() == MODEL
    assert (base / "m" / "tiny.gguf.sha256").read_text() == f"{MODEL_SHA}  tiny.gguf\n"
    assert sorted(p.name for p in (base / "m").iterdir()) == ["tiny.gguf", "tiny.gguf.sha256"]
    assert_root_layout(base)
    gets = len(server.gets())
    second = place(fetch_mod, server, base)
    assert not second["changed"] and second["valid"]
    assert len(server.gets()) == gets  # nothing downloaded again
    assert not place(fetch_mod, server, base, check_mode=True)["changed"]


def test_check_mode_changes_nothing(fetch_mod: ModuleType, server: ModelServer, top: Path) -> None:
    base = top / "models"
    res = place(fetch_mod, server, base, check_mode=True)
    assert res["changed"] and not res["valid"]
    assert "absent" in res["diff"]["before"] and str(base / "m") in res["diff"]["after"]
    assert not base.exists()
    mdir = old_install(base)
    before = fingerprint(mdir), fingerprint(base)
    res = place(fetch_mod, server, base, check_mode=True)
    assert res["changed"]
    assert (fingerprint(mdir), fingerprint(base)) == before
    assert list(mdir.iterdir()) == []


def test_wrong_checksum_leaves_nothing(
    fetch_mod: ModuleType, server: ModelServer, base: Path
) -> None:
    with pytest.raises(fetch_mod.FetchError, match=r"sha256 mismatch.*nothing was written"):
        place(fetch_mod, server, base, sha256="0" * 64)
    assert list((base / "m").iterdir()) == []


def test_partial_download_is_resumed(
    fetch_mod: ModuleType, server: ModelServer, base: Path
) -> None:
    mdir = base / "m"
    mdir.mkdir(parents=True)
    (mdir / "tiny.gguf.part").write_bytes(MODEL[:1000])
    res = place(fetch_mod, server, base)
    assert res["resumed_from"] == 1000
    assert server.gets()[-1][2] == "bytes=1000-"
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    assert_root_layout(base)


def test_old_owners_partial_download_is_taken_over_and_resumed(
    fetch_mod: ModuleType, server: ModelServer, base: Path
) -> None:
    mdir = old_install(base)
    part = mdir / "tiny.gguf.part"
    part.write_bytes(MODEL[:2000])
    owned(part, mode=0o644)
    res = place(fetch_mod, server, base)
    assert res["resumed_from"] == 2000 and server.gets()[-1][2] == "bytes=2000-"
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    assert_root_layout(base)


def test_old_owners_model_is_rehashed_and_taken_over(
    fetch_mod: ModuleType, server: ModelServer, base: Path
) -> None:
    mdir = old_install(base)
    model, side = mdir / "tiny.gguf", mdir / "tiny.gguf.sha256"
    model.write_bytes(MODEL)
    side.write_text(f"{MODEL_SHA}  tiny.gguf\n")
    owned(model, mode=0o644)
    owned(side, mode=0o644)
    gets = len(server.gets())
    res = place(fetch_mod, server, base)
    assert res["changed"] and res["valid"] and len(server.gets()) == gets
    assert_root_layout(base)
    assert not place(fetch_mod, server, base)["changed"]
    # a model the old owner changed behind a sidecar that still names the right sum is re-hashed
    shutil.rmtree(base)
    mdir = old_install(base)
    (mdir / "tiny.gguf").write_bytes(b"GGUF tampered")
    (mdir / "tiny.gguf.sha256").write_text(f"{MODEL_SHA}  tiny.gguf\n")
    for f in mdir.iterdir():
        owned(f, mode=0o644)
    res = place(fetch_mod, server, base)
    assert res["sha256"] == MODEL_SHA and len(server.gets()) == gets + 1
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    assert_root_layout(base)


# --- attack 1: a symlinked model directory ------------------------------------------------------


def test_symlinked_model_dir_is_refused(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    base = top / "models"
    base.mkdir()
    owned(base)
    target = top / "rootonly"
    target.mkdir(mode=0o700)
    (target / "secret").write_text("s3cr3t")
    link = base / "m"
    link.symlink_to(target)
    owned(link)  # planted by the service account
    before = fingerprint(target), fingerprint(target / "secret")
    with pytest.raises(fetch_mod.UnsafePathError) as err:
        place(fetch_mod, server, base)
    msg = str(err.value)
    assert str(link) in msg and "symbolic link owned by uid 64123" in msg and "Fix" in msg
    assert (fingerprint(target), fingerprint(target / "secret")) == before
    assert sorted(p.name for p in target.iterdir()) == ["secret"]
    # the file task on its own (dest below the link) is refused as well
    with pytest.raises(fetch_mod.UnsafePathError, match="symbolic link owned by uid 64123"):
        fetch_mod.fetch(
            {
                "dest": str(link / "tiny.gguf"),
                "url": server.url + "/tiny.gguf",
                "sha256": MODEL_SHA,
                "base": str(base),
                "takeover_owner": str(UID),
                "min_free_mb": 0,
            }
        )
    assert (fingerprint(target), fingerprint(target / "secret")) == before
    # the models directory was taken over before its entries were looked at
    assert fingerprint(base)[:3] == (0, 0, 0o755)


def test_links_above_the_models_are_followed_only_when_root_owns_them(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    real = top / "real"
    real.mkdir(mode=0o755)
    link = top / "srv"
    link.symlink_to(real)
    res = place(fetch_mod, server, link / "models")  # root's own link: followed
    assert res["valid"] and (real / "models" / "m" / "tiny.gguf").read_bytes() == MODEL
    owned(link)
    with pytest.raises(fetch_mod.UnsafePathError, match=f"{link} is a symbolic link owned by uid"):
        place(fetch_mod, server, link / "models")


def test_models_dir_through_the_old_owners_link_is_refused(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    """gguf_models_dir set to a path in the service account's own directory, where the models
    directory is that account's link to a root-owned directory."""
    home = top / "llama-home"
    home.mkdir()
    owned(home)
    target = top / "victim-dir"
    target.mkdir(mode=0o750)
    (home / "models").symlink_to(target)
    owned(home / "models")
    before = fingerprint(target)
    with pytest.raises(fetch_mod.UnsafePathError) as err:
        place(fetch_mod, server, home / "models")
    msg = str(err.value)
    assert str(home / "models") in msg and "symbolic link owned by uid 64123" in msg
    assert f"{home} is owned by uid 64123" in msg and "Fix" in msg
    assert fingerprint(target) == before and list(target.iterdir()) == []


def test_directories_of_other_accounts_are_refused(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    # an ancestor another account owns could swap everything below it
    above = top / "srv"
    above.mkdir()
    owned(above)
    with pytest.raises(fetch_mod.UnsafePathError, match=f"{above} is owned by uid 64123"):
        place(fetch_mod, server, above / "models")
    assert not (above / "models").exists()
    # a models directory of an account that is not the takeover owner is left alone
    base = top / "models"
    base.mkdir()
    owned(base, OTHER)
    with pytest.raises(fetch_mod.UnsafePathError, match="owned by uid 64124"):
        place(fetch_mod, server, base)
    assert fingerprint(base)[:3] == (OTHER, OTHER, 0o755)


# --- attack 2: links and FIFOs planted at the role's file names ---------------------------------


def test_planted_temp_links_are_not_followed(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    base = top / "models"
    mdir = old_install(base)
    passwd, shadow = victim(top, "passwd"), victim(top, "shadow")
    before = fingerprint(passwd), fingerprint(shadow)
    for name, target in (("tiny.gguf.part", passwd), ("tiny.gguf.sha256.tmp", shadow)):
        (mdir / name).symlink_to(target)
        owned(mdir / name)
    res = place(fetch_mod, server, base)
    assert res["valid"] and (mdir / "tiny.gguf").read_bytes() == MODEL
    assert (fingerprint(passwd), fingerprint(shadow)) == before
    assert any("removed a symbolic link owned by uid 64123" in a for a in res["actions"])
    assert_root_layout(base)
    assert not place(fetch_mod, server, base)["changed"]


def test_hardlink_at_part_is_not_written(
    fetch_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    base = top / "models"
    mdir = old_install(base)
    target = victim(top, data=MODEL[:100] + b"root's own bytes")  # looks like a partial download
    os.link(target, mdir / "tiny.gguf.part")
    before = fingerprint(target)
    res = place(fetch_mod, server, base)
    assert res["valid"] and res["resumed_from"] == 0
    assert fingerprint(target) == (*before[:3], 1, before[4])  # only the planted name is gone
    assert (mdir / "tiny.gguf").read_bytes() == MODEL
    assert_root_layout(base)


def test_fifo_at_part_does_not_hang(fetch_mod: ModuleType, server: ModelServer, top: Path) -> None:
    base = top / "models"
    mdir = old_install(base)
    os.mkfifo(mdir / "tiny.gguf.part")
    os.mkfifo(mdir / "tiny.gguf.sha256")
    with Alarm(20):
        res = place(fetch_mod, server, base)
    assert res["valid"] and (mdir / "tiny.gguf").read_bytes() == MODEL
    assert_root_layout(base)


def test_probe_clears_temp_names_before_a_copy(fetch_mod: ModuleType, top: Path) -> None:
    """The role copies controller files to <file>.part with ansible.builtin.copy after a probe:
    the probe removes what is planted there, so the copy meets no link or FIFO."""
    base = top / "models"
    mdir = old_install(base)
    target = victim(top)
    (mdir / "tiny.gguf.part").symlink_to(target)
    owned(mdir / "tiny.gguf.part")
    os.mkfifo(mdir / "tiny.gguf.sha256.tmp")
    take = {"takeover_owner": str(UID)}
    fetch_mod.fetch({"state": "directory", "dest": str(base), **take})
    fetch_mod.fetch({"state": "directory", "dest": str(mdir), "base": str(base), **take})
    params = {"dest": str(mdir / "tiny.gguf"), "sha256": MODEL_SHA, "base": str(base), **take}
    with Alarm(20):
        res = fetch_mod.fetch({**params, "state": "probe", "min_free_mb": 0})
    assert res["changed"] and not res["valid"] and list(mdir.iterdir()) == []
    assert fingerprint(target)[4] == b"precious root data\n"
    # what the copy task then does, and the finishing task
    (mdir / "tiny.gguf.part").write_bytes(MODEL)
    os.chmod(mdir / "tiny.gguf.part", 0o600)
    res = fetch_mod.fetch(params)
    assert res["valid"] and res["changed"]
    assert_root_layout(base)


@pytest.mark.parametrize("kind", ["symlink", "fifo", "hardlink"])
def test_final_name_that_is_not_a_plain_file_is_refused(
    fetch_mod: ModuleType, server: ModelServer, top: Path, kind: str
) -> None:
    base = top / "models"
    mdir = old_install(base)
    target = victim(top)
    final = mdir / "tiny.gguf"
    if kind == "symlink":
        final.symlink_to(target)
        owned(final)
    elif kind == "fifo":
        os.mkfifo(final)
    else:
        os.link(target, final)
    before, planted = fingerprint(target), os.lstat(final)
    with Alarm(20), pytest.raises(fetch_mod.UnsafePathError) as err:
        place(fetch_mod, server, base)
    assert str(final) in str(err.value) and "final name" in str(err.value)
    assert fingerprint(target) == before
    assert os.lstat(final).st_ino == planted.st_ino  # refused, not replaced


# --- attack 3: metadata.json fields injected into the unit --------------------------------------

INJECTED = MODEL_SHA + "\n[Service]\nExecStartPre=+/bin/sh -c 'id > /tmp/pwned'"


def saved_doc(path: str) -> dict[str, Any]:
    return {
        "path": path,
        "files": [path],
        "model": "m",
        "sha256": [MODEL_SHA],
        "mmproj": None,
        "architecture": "llama",
        "kv": {"general.license": "line one\nline two"},  # free text in header values is data
    }


def test_saved_metadata_with_a_newline_in_sha256_is_refused(
    placed: Path, meta_mod: ModuleType, utils: ModuleType
) -> None:
    base = placed
    mdir = base / "m"
    saved = mdir / "metadata.json"
    doc = saved_doc(str(mdir / "tiny.gguf"))
    saved.write_text(json.dumps(doc))
    assert utils.read_saved_metadata(str(saved))["sha256"] == [MODEL_SHA]
    bad = {**doc, "sha256": [INJECTED]}
    saved.write_text(json.dumps(bad))
    with pytest.raises(module_utils("safefs").InvalidMetadataError) as err:
        utils.read_saved_metadata(str(saved))
    assert str(saved) in str(err.value) and "field sha256" in str(err.value)
    # the role's own write refuses to build on it (the file was not written by the role)
    with pytest.raises(module_utils("safefs").InvalidMetadataError, match=f"{saved}: field sha256"):
        describe(meta_mod, base)
    assert json.loads(saved.read_text()) == bad
    # and never accepts such a value from its input
    saved.unlink()
    with pytest.raises(module_utils("safefs").InvalidMetadataError, match="field sha256"):
        describe(meta_mod, base, sha256=[INJECTED])
    assert not saved.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("path", "/srv/models/m/tiny.gguf\nExecStartPre=+/bin/sh"),
        ("mmproj", "/srv/models/m/mm.gguf\r\n[Service]"),
        ("model", "m\nx"),
        ("name", "tiny\u2028model"),
        ("files", ["/srv/models/m/a.gguf\n"]),
        ("sha256", MODEL_SHA.upper()),
        ("dir", "relative/dir"),
    ],
)
def test_metadata_fields_are_validated(meta_mod: ModuleType, field: str, value: Any) -> None:
    doc = {**saved_doc("/srv/models/m/tiny.gguf"), field: value}
    with pytest.raises(
        module_utils("safefs").InvalidMetadataError, match=f"/x/metadata.json: field {field}"
    ):
        meta_mod.validate_metadata(doc, "/x/metadata.json")


def describe(meta_mod: ModuleType, base: Path, check_mode: bool = False, **kw: Any) -> Any:
    mdir = base / "m"
    params = {
        "path": str(mdir / "tiny.gguf"),
        "save": str(mdir / "metadata.json"),
        "model": "m",
        "sha256": [MODEL_SHA],
        "base": str(base),
        "takeover_owner": str(UID),
        **kw,
    }
    return meta_mod.describe_model(params, check_mode)


def test_metadata_is_saved_root_owned_and_idempotent(
    fetch_mod: ModuleType, meta_mod: ModuleType, server: ModelServer, top: Path
) -> None:
    base = top / "models"
    mdir = old_install(base)
    old = mdir / "metadata.json"
    old.write_text(json.dumps(saved_doc(str(mdir / "tiny.gguf"))))
    owned(old, mode=0o644)  # from an earlier version: rewritten as a new root-owned file
    place(fetch_mod, server, base)
    assert describe(meta_mod, base, check_mode=True)["changed"]
    assert fingerprint(old)[0] == UID
    res = describe(meta_mod, base)
    assert res["changed"] and res["saved"]
    facts = res["metadata"]
    assert facts["architecture"] == "llama" and facts["context_length"] == 4096
    assert facts["sha256"] == [MODEL_SHA] and facts["model"] == "m"
    assert facts["path"] == str(mdir / "tiny.gguf") and facts["dir"] == str(mdir)
    assert facts["size_bytes"] == len(MODEL)
    saved = json.loads(old.read_text())
    assert saved["sha256"] == [MODEL_SHA] and "dir" not in saved
    assert_root_layout(base)
    assert not describe(meta_mod, base)["changed"]
    assert not describe(meta_mod, base, check_mode=True)["changed"]


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_saved_metadata_that_is_not_a_plain_file_is_refused(
    placed: Path, meta_mod: ModuleType, utils: ModuleType, top: Path, kind: str
) -> None:
    base = placed
    saved = base / "m" / "metadata.json"
    target = victim(top)
    if kind == "symlink":
        saved.symlink_to(target)
        owned(saved)
    else:
        os.mkfifo(saved)
    before = fingerprint(target)
    with Alarm(20), pytest.raises(meta_mod.UnsafePathError, match=str(saved)):
        describe(meta_mod, base)
    with Alarm(20), pytest.raises(meta_mod.UnsafePathError):
        utils.read_saved_metadata(str(saved))
    assert fingerprint(target) == before

"""The cuda_toolkit role's cuda_repo_key module: the apt keyring of the CUDA repository is
installed only when its one primary key has the pinned fingerprint. The fingerprints it computes
are checked against `gpg --show-keys --with-colons` on throwaway keys (skipped without gpg)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

ROLE = Path(__file__).resolve().parents[2] / "roles" / "cuda_toolkit"
NVIDIA = "EB693B3035CD5710E231E123A4B469963BF863CC"

pytestmark = pytest.mark.skipif(not shutil.which("gpg"), reason="needs gpg to make test keys")


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "cuda_repo_key"))


def gpg(home: Path, *args: str) -> bytes:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", *args],
        check=True,
        capture_output=True,
    ).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    d = tmp_path_factory.mktemp("keys")
    home = d / "gnupg"
    home.mkdir(mode=0o700)
    for uid, algo in (
        ("repo <repo@test.invalid>", "ed25519"),
        ("evil <e@test.invalid>", "rsa2048"),
    ):
        gpg(home, "--passphrase", "", "--quick-generate-key", uid, algo, "sign", "1d")
    out = gpg(home, "--with-colons", "--list-keys").decode()
    fprs = [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]
    good, evil = fprs[0], fprs[-1]
    files = {
        "good.asc": gpg(home, "--armor", "--export", good),
        "good.gpg": gpg(home, "--export", good),
        "evil.gpg": gpg(home, "--export", evil),
        "both.gpg": gpg(home, "--export", good, evil),
        "secret.gpg": gpg(
            home, "--pinentry-mode", "loopback", "--passphrase", "", "--export-secret-keys", good
        ),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    yield {"dir": d, "good": good, "evil": evil, "home": home}
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)


def show_keys(path: Path, home: Path) -> list[str]:
    out = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--show-keys", "--with-colons", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    # the fpr line right after each pub line
    return [out[i + 1].split(":")[9] for i, line in enumerate(out) if line.startswith("pub:")]


@pytest.mark.parametrize("name", ["good.asc", "good.gpg", "evil.gpg", "both.gpg"])
def test_fingerprints_agree_with_gpg(mod: ModuleType, keys: dict[str, Any], name: str) -> None:
    path = keys["dir"] / name
    _, found = mod.primary_fingerprints(path.read_bytes())
    assert found == show_keys(path, keys["home"])


def test_install_armoured_key_as_binary_keyring(
    mod: ModuleType, keys: dict[str, Any], tmp_path: Path
) -> None:
    dest = tmp_path / "cuda-archive-keyring.gpg"
    p = {
        "src": str(keys["dir"] / "good.asc"),
        "dest": str(dest),
        "fingerprint": keys["good"],
        "state": "present",
    }
    assert mod.run(p, check_mode=True)["changed"] and not dest.exists()
    res = mod.run(p)
    assert res == {"changed": True, "fingerprints": [keys["good"]]}
    assert dest.read_bytes() == (keys["dir"] / "good.gpg").read_bytes()
    st = dest.stat()
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (0, 0)
    assert st.st_mode & 0o7777 == 0o644
    assert mod.run(p)["changed"] is False
    assert mod.run({**p, "state": "verify", "src": None})["changed"] is False
    asc = tmp_path / "key.asc"
    mod.run({**p, "dest": str(asc)})
    assert asc.read_bytes() == (keys["dir"] / "good.asc").read_bytes()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("evil.gpg", "expected exactly"),
        ("both.gpg", "expected exactly"),
        ("secret.gpg", "secret key"),
    ],
)
def test_wrong_keys_are_refused_and_nothing_written(
    mod: ModuleType, keys: dict[str, Any], tmp_path: Path, name: str, why: str
) -> None:
    dest = tmp_path / "k.gpg"
    p = {
        "src": str(keys["dir"] / name),
        "dest": str(dest),
        "fingerprint": keys["good"],
        "state": "present",
    }
    with pytest.raises(mod.RepoKeyError, match=why):
        mod.run(p)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_installed_keyring_with_another_key_fails_verify(
    mod: ModuleType, keys: dict[str, Any]
) -> None:
    p = {
        "dest": str(keys["dir"] / "good.gpg"),
        "fingerprint": NVIDIA,
        "state": "verify",
        "src": None,
    }
    with pytest.raises(
        mod.RepoKeyError, match=f"expected exactly {NVIDIA}.*cuda_toolkit_repo_key_fingerprint"
    ):
        mod.run(p)


def test_corrupt_or_odd_input_is_refused(
    mod: ModuleType, keys: dict[str, Any], tmp_path: Path
) -> None:
    asc = (keys["dir"] / "good.asc").read_bytes()
    lines = asc.splitlines()
    body = next(i for i, line in enumerate(lines) if len(line) > 60)
    lines[body] = lines[body][:-4] + (b"AAAA" if lines[body][-4:] != b"AAAA" else b"BBBB")
    for bad in (
        b"\n".join(lines) + b"\n",
        b"hello",
        b"",
        (keys["dir"] / "good.gpg").read_bytes()[:-3],
    ):
        with pytest.raises(mod.RepoKeyError):
            mod.primary_fingerprints(bad)
    with pytest.raises(mod.RepoKeyError, match="40 or 64 hex"):
        mod.normalise("EB69 3B30")
    assert mod.normalise("eb69 3b30 35cd 5710 e231  e123 a4b4 6996 3bf8 63cc") == NVIDIA
    link = tmp_path / "link.gpg"
    link.symlink_to(keys["dir"] / "good.gpg")
    with pytest.raises(OSError):
        mod.run({"dest": str(link), "fingerprint": keys["good"], "state": "verify", "src": None})

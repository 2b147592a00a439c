"""testbed/tamper-build.py, the fleet scenario's compromised-builder replay: the tarball it
writes is one the controller's and the receiving host's checks refuse (and, without them, would
install: its sha256 is the one it records)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from test_llama_cpp_safetar import COMMIT, NAME, _utils, make_tarball

TOOL = Path(__file__).resolve().parents[2] / "testbed" / "tamper-build.py"
PLATFORM = "debian-bookworm-x86_64-auto-any"


@pytest.fixture(scope="module")
def st() -> ModuleType:
    return _utils()


def _run(*args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(TOOL), *args], check=True, capture_output=True, text=True
    )
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_the_replay_is_refused_on_the_controller_and_the_receiver(
    st: ModuleType, tmp_path: Path
) -> None:
    ship = tmp_path / "ship"
    honest = tmp_path / "honest.tar.gz"
    make_tarball(honest, host="lf-default-bookworm")
    implanted = tmp_path / "implanted.tar.gz"
    assert _run("implant", str(honest), str(implanted))["build"] == NAME
    problems = st.archive_problems(str(implanted), NAME, "lf-default-bookworm")
    assert any("bin/rt-implant is not in" in p for p in problems), problems
    assert any("bin/llama-server has sha256" in p for p in problems), problems
    rec = _run("force-record", str(ship), PLATFORM, NAME, str(implanted))
    assert rec["builder"] == "lf-default-bookworm"
    index = json.loads((ship / "index.json").read_text())
    entry = index["builds"][PLATFORM][NAME]
    tarball = ship / PLATFORM / f"{NAME}.tar.gz"
    assert entry["sha256"] == rec["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    found = st.lookup(str(ship), PLATFORM, NAME, ["lf-default-bookworm"])
    assert found["found"] and found["tarball_exists"]
    dest = tmp_path / "builds"
    dest.mkdir(mode=0o755)
    dest.chmod(0o755)
    with pytest.raises(st.UnsafeArchiveError, match="rt-implant"):
        st.unpack_build(
            str(tarball), str(dest), NAME, entry["sha256"], COMMIT, builder=entry["builder"]
        )
    assert list(dest.iterdir()) == []

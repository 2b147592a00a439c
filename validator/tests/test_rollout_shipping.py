"""playbooks/rollout.yml ships builds through the llama_cpp role (llama_cpp_ship_dir): no tarball
chosen by mtime, nothing unpacked with `unarchive`, no build name from a host's manifest in a
controller path. The role checks the name and the sha256 (tests/test_llama_cpp_safetar.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLLOUT = REPO / "playbooks" / "rollout.yml"
BUILD = REPO / "roles" / "llama_cpp" / "tasks" / "build.yml"

pytestmark = pytest.mark.skipif(
    not ROLLOUT.is_file(), reason="run from a checkout of the whole repository"
)


def _tasks(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in items or []:
        out.append(t)
        for key in ("block", "rescue", "always", "tasks"):
            out.extend(_tasks(t.get(key, [])))
    return out


def _all(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text())
    return _tasks(data)


def test_rollout_hands_shipping_to_the_role() -> None:
    tasks = _all(ROLLOUT) + _all(ROLLOUT.parent / "tasks" / "rollout-stage.yml")
    includes = [
        t
        for t in tasks
        if (t.get("ansible.builtin.include_role") or {}).get("name") == "llamafleet.fleet.llama_cpp"
    ]
    # staged once per platform (built, or installed as shipped) before the preflight, then
    # converged in the canary-first play where the first did not (tasks/rollout-stage.yml): every
    # include ships through the role, never switches
    assert len(includes) == 3
    for inc in includes:
        shipped = inc["vars"]
        assert "_rollout_distribute" in shipped["llama_cpp_ship_dir"]
        assert "_rollout_platform" in shipped["llama_cpp_ship_platform"]
        assert shipped["llama_cpp_activate"] is False
    text = ROLLOUT.read_text()
    for gone in ("unarchive", "mtime", "llama_cpp_manifest.name", "ansible.builtin.fetch"):
        assert gone not in text, gone


def test_role_never_unarchives_and_verifies_before_unpacking() -> None:
    tasks = _all(BUILD)
    modules = [
        next(k for k in t if k.startswith(("ansible.", "llamafleet.fleet.")) or k == "block")
        for t in tasks
    ]
    assert "ansible.builtin.unarchive" not in modules
    unpack = modules.index("llamafleet.fleet.llama_cpp_unpack")
    copy_in = [
        i
        for i, t in enumerate(tasks)
        if "ansible.builtin.copy" in t
        and "_llama_cpp_shipped.tarball" in str(t["ansible.builtin.copy"].get("src", ""))
    ]
    assert copy_in and copy_in[0] < unpack
    args = tasks[unpack]["llamafleet.fleet.llama_cpp_unpack"]
    assert "_llama_cpp_shipped.entry.sha256" in args["sha256"]
    # the index is the controller's: run there, never with become
    for t in tasks:
        if "llamafleet.fleet.llama_cpp_build_index" in t:
            assert t["delegate_to"] == "localhost" and t["become"] is False

"""The llama_server role's preflight once per run (plugins/filter/llama_server.py,
llamafleet_preflight_current; roles/llama_server/tasks/main.yml): the rollout's first play checks
every host's units, and the converge of the same run reuses that check while the build and the
instances' models are as the check found them. The documents here stand for the metadata.json
the gguf_models role saves (model, sha256, kv) and for its fact, which adds the model's `dir` and
`path`; the filter compares whatever keys they hold."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, plugin_path

BUILD = "b9079-ef8c15dbd6-cpu-d750fbbc60"
SAVED = {"model": "tiny", "sha256": ["a" * 64], "kv": {"general.architecture": "llama"}}
PATH = "/srv/models/tiny/tiny-llama-Q8_0.gguf"
RESOLVED = [{"name": "tiny", "model_name": "tiny", "model_path": PATH, "model_meta": SAVED}]
DESCRIBED = {**SAVED, "dir": "/srv/models/tiny", "path": PATH}


@pytest.fixture(scope="module")
def current() -> Any:
    mod: ModuleType = load_ansible_plugin(plugin_path("filter", "llama_server"))
    return mod.FilterModule().filters()["llamafleet_preflight_current"]


def test_the_same_build_and_models_reuse_the_preflight(current: Any) -> None:
    assert current(BUILD, BUILD, RESOLVED, {}) is True
    # gguf_models ran in between and found the model as it was
    assert current(BUILD, BUILD, RESOLVED, {"tiny": DESCRIBED}) is True
    # a model no instance of this host serves changes nothing the preflight used
    assert current(BUILD, BUILD, RESOLVED, {"other": {"sha256": ["b" * 64]}}) is True
    assert current("", "", RESOLVED, {}) is True  # no build of the llama_cpp role on either side


@pytest.mark.parametrize(
    ("done", "build", "gguf", "why"),
    [
        (None, BUILD, {}, "no preflight ran in this run"),
        (BUILD, "b9079-ef8c15dbd6-cuda-0123456789", {}, "another build"),
        (BUILD, BUILD, {"tiny": {**DESCRIBED, "sha256": ["c" * 64]}}, "the model changed"),
        (BUILD, BUILD, {"tiny": {**DESCRIBED, "path": "/srv/models/tiny/x.gguf"}}, "another file"),
        (BUILD, BUILD, {"tiny": {**DESCRIBED, "mmproj": "/srv/models/tiny/mm.gguf"}}, "new key"),
        (BUILD, BUILD, "not a mapping", "unreadable facts"),
    ],
)
def test_anything_else_runs_it_again(
    current: Any, done: Any, build: str, gguf: Any, why: str
) -> None:
    assert current(done, build, RESOLVED, gguf) is False, why


def test_without_the_instances_the_preflight_resolved_it_runs_again(current: Any) -> None:
    assert current(BUILD, BUILD, None, {}) is False


def test_the_role_asks_before_including_the_preflight() -> None:
    tasks = yaml.safe_load((REPO / "roles/llama_server/tasks/main.yml").read_text())
    includes = [t.get("ansible.builtin.include_tasks", {}) for t in tasks]
    (pre,) = [
        t for t, inc in zip(tasks, includes, strict=True) if inc.get("file") == "preflight.yml"
    ]
    assert pre["when"] == "not _llama_server_preflight_current | bool"
    last = yaml.safe_load((REPO / "roles/llama_server/tasks/preflight.yml").read_text())[-1]
    assert "_llama_server_preflight_done" in last["ansible.builtin.set_fact"]
    rvars = yaml.safe_load((REPO / "roles/llama_server/vars/main.yml").read_text())
    assert "llamafleet_preflight_current" in rvars["_llama_server_preflight_current"]
    assert "_llama_server_resolved" in rvars["_llama_server_preflight_current"]

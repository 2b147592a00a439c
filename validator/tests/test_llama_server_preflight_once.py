"""The llama_server role's preflight once per run (plugins/filter/llama_server.py,
llamafleet_preflight_current; roles/llama_server/tasks/main.yml): the rollout's first play checks
every host's units, and the converge of the same run reuses that check while the build and the
models are as the check found them. The model metadata here stands for the metadata.json the
gguf_models role writes (name, sha256, context length); the filter compares what that role
reports with what the preflight read, whatever the keys are."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, plugin_path

BUILD = "b9079-ef8c15dbd6-cpu-d750fbbc60"
META = {
    "tiny": {"sha256": "a" * 64, "n_ctx_train": 2048, "file": "tiny.gguf"},
    "qwen": {"sha256": "b" * 64, "n_ctx_train": 262144, "file": "qwen.gguf"},
}


@pytest.fixture(scope="module")
def current() -> Any:
    mod: ModuleType = load_ansible_plugin(plugin_path("filter", "llama_server"))
    return mod.FilterModule().filters()["llamafleet_preflight_current"]


def test_the_same_build_and_models_reuse_the_preflight(current: Any) -> None:
    assert current(BUILD, BUILD, META, {}) is True
    # gguf_models ran in between and found the models as they were
    assert current(BUILD, BUILD, META, {"tiny": dict(META["tiny"])}) is True
    assert current("", "", META, {}) is True  # no build of the llama_cpp role on either side


@pytest.mark.parametrize(
    ("done", "build", "gguf", "why"),
    [
        (None, BUILD, {}, "no preflight ran in this run"),
        (BUILD, "b9079-ef8c15dbd6-cuda-0123456789", {}, "another build"),
        (BUILD, BUILD, {"tiny": {**META["tiny"], "sha256": "c" * 64}}, "a model changed"),
        (BUILD, BUILD, {"new": {"sha256": "d" * 64}}, "a model the preflight did not read"),
        (BUILD, BUILD, "not a mapping", "unreadable facts"),
    ],
)
def test_anything_else_runs_it_again(
    current: Any, done: Any, build: str, gguf: Any, why: str
) -> None:
    assert current(done, build, META, gguf) is False, why


def test_without_the_models_the_preflight_read_it_runs_again(current: Any) -> None:
    assert current(BUILD, BUILD, None, {}) is False


def test_the_role_asks_before_including_the_preflight() -> None:
    tasks = yaml.safe_load((REPO / "roles/llama_server/tasks/main.yml").read_text())
    (pre,) = [
        t
        for t in tasks
        if t.get("ansible.builtin.include_tasks", {}).get("file") == "preflight.yml"
    ]
    assert pre["when"] == "not _llama_server_preflight_current | bool"
    last = yaml.safe_load((REPO / "roles/llama_server/tasks/preflight.yml").read_text())[-1]
    assert "_llama_server_preflight_done" in last["ansible.builtin.set_fact"]
    rvars = yaml.safe_load((REPO / "roles/llama_server/vars/main.yml").read_text())
    assert "llamafleet_preflight_current" in rvars["_llama_server_preflight_current"]

"""The llama_server role's preflight once per run (plugins/filter/llama_server.py,
llamafleet_preflight_current and llamafleet_preflight_key; roles/llama_server/tasks/main.yml and
vars/main.yml): the rollout's first play checks every host's units, and the converge of the same
run reuses that check while the build, the role's variables and the instances' models are as the
check found them. The documents here stand for the metadata.json the gguf_models role saves
(model, sha256, kv) and for its fact, which adds the model's `dir` and `path`; the filter compares
whatever keys they hold. The role's own vars/main.yml is templated by the real ansible-playbook
(test_the_role_key_follows_every_variable)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, playbook_results, plugin_path, run_playbook

BUILD = "b9079-ef8c15dbd6-cpu-d750fbbc60"
KEY = "k" * 64
SAVED = {"model": "tiny", "sha256": ["a" * 64], "kv": {"general.architecture": "llama"}}
PATH = "/srv/models/tiny/tiny-llama-Q8_0.gguf"
RESOLVED = [{"name": "tiny", "model_name": "tiny", "model_path": PATH, "model_meta": SAVED}]
DESCRIBED = {**SAVED, "dir": "/srv/models/tiny", "path": PATH}
DONE = {"build": BUILD, "key": KEY}


@pytest.fixture(scope="module")
def filters() -> dict[str, Any]:
    mod: ModuleType = load_ansible_plugin(plugin_path("filter", "llama_server"))
    found: dict[str, Any] = mod.FilterModule().filters()
    return found


@pytest.fixture(scope="module")
def current(filters: dict[str, Any]) -> Any:
    return filters["llamafleet_preflight_current"]


def test_the_same_build_variables_and_models_reuse_the_preflight(current: Any) -> None:
    assert current(DONE, BUILD, RESOLVED, {}, KEY) is True
    # gguf_models ran in between and found the model as it was
    assert current(DONE, BUILD, RESOLVED, {"tiny": DESCRIBED}, KEY) is True
    # a model no instance of this host serves changes nothing the preflight used
    assert current(DONE, BUILD, RESOLVED, {"other": {"sha256": ["b" * 64]}}, KEY) is True
    # no build of the llama_cpp role on either side
    assert current({"build": "", "key": KEY}, "", RESOLVED, {}, KEY) is True


@pytest.mark.parametrize(
    ("done", "build", "gguf", "key", "why"),
    [
        (None, BUILD, {}, KEY, "no preflight ran in this run"),
        (BUILD, BUILD, {}, KEY, "a record of the old form (the build name only)"),
        (DONE, "b9079-ef8c15dbd6-cuda-0123456789", {}, KEY, "another build"),
        (DONE, BUILD, {}, "j" * 64, "another value of a role variable (cache_ram: 0)"),
        (DONE, BUILD, {}, None, "no key of the variables"),
        ({"build": BUILD}, BUILD, {}, KEY, "a record without the variables' key"),
        (DONE, BUILD, {"tiny": {**DESCRIBED, "sha256": ["c" * 64]}}, KEY, "the model changed"),
        (DONE, BUILD, {"tiny": {**DESCRIBED, "path": "/srv/models/tiny/x.gguf"}}, KEY, "file"),
        (DONE, BUILD, {"tiny": {**DESCRIBED, "mmproj": "/srv/models/tiny/mm.gguf"}}, KEY, "key"),
        (DONE, BUILD, "not a mapping", KEY, "unreadable facts"),
    ],
)
def test_anything_else_runs_it_again(
    current: Any, *, done: Any, build: str, gguf: Any, key: Any, why: str
) -> None:
    assert current(done, build, RESOLVED, gguf, key) is False, why


def test_without_the_instances_the_preflight_resolved_it_runs_again(current: Any) -> None:
    assert current(DONE, BUILD, None, {}, KEY) is False


def test_the_key_is_of_the_values(filters: dict[str, Any]) -> None:
    key = filters["llamafleet_preflight_key"]
    one = {"llama_server_instances": [{"name": "main", "args": {"ctx_size": 8192}}], "x": 1}
    same = {"x": 1, "llama_server_instances": [{"args": {"ctx_size": 8192}, "name": "main"}]}
    assert key(one) == key(same)  # the order of keys does not count
    assert len(key(one)) == 64
    changed = {"x": 1, "llama_server_instances": [{"name": "main", "args": {"cache_ram": 0}}]}
    assert key(one) != key(changed)
    assert key({"x": "1"}) != key({"x": 1})  # a string is not the number
    with pytest.raises(Exception, match="expected a mapping"):
        key(["llama_server_instances"])


def test_the_role_asks_before_including_the_preflight() -> None:
    main = yaml.safe_load((REPO / "roles/llama_server/tasks/main.yml").read_text())
    (prepare,) = [
        t for t in main if t.get("ansible.builtin.include_tasks", {}).get("file") == "prepare.yml"
    ]
    assert prepare["when"].startswith("not _llama_server_preflight_current | bool or ")
    tasks = yaml.safe_load((REPO / "roles/llama_server/tasks/prepare.yml").read_text())
    includes = [t.get("ansible.builtin.include_tasks", {}) for t in tasks]
    (pre,) = [
        t for t, inc in zip(tasks, includes, strict=True) if inc.get("file") == "preflight.yml"
    ]
    assert pre["when"] == "not _llama_server_preflight_current | bool"
    last = yaml.safe_load((REPO / "roles/llama_server/tasks/preflight.yml").read_text())[-1]
    done = last["ansible.builtin.set_fact"]["_llama_server_preflight_done"]
    assert set(done) == {"build", "key"}
    assert "_llama_server_preflight_key" in done["key"]


def test_the_key_names_every_variable_of_the_role() -> None:
    rvars = yaml.safe_load((REPO / "roles/llama_server/vars/main.yml").read_text())
    defaults = yaml.safe_load((REPO / "roles/llama_server/defaults/main.yml").read_text())
    assert rvars["_llama_server_input_names"] == sorted(defaults)


def test_the_role_key_follows_every_variable(tmp_path: Path) -> None:
    """The role's vars/main.yml and defaults/main.yml templated by ansible-playbook, as the role
    sees them: the preflight's record holds for the same values and not once the role is included
    again with one instance's args changed (the default scenario's attack test includes it with
    cache_ram: 0 and expects LS001), another threshold, or another instance list."""
    role = REPO / "roles/llama_server"
    instance = {"name": "main", "model": "tiny", "port": 8080, "args": {"ctx_size": 8192}}
    bad = {**instance, "args": {"ctx_size": 8192, "cache_ram": 0}}
    two = [instance, {**instance, "name": "b", "port": 8081}]
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars_files:
        - {role}/defaults/main.yml
        - {role}/vars/main.yml
      vars:
        llama_server_instances: {json.dumps([instance])}
      tasks:
        - name: The resolve task's result (no instance), as tasks/preflight.yml registers it
          ansible.builtin.set_fact:
            _llama_server_resolve: {{instances: []}}
        - name: The preflight's record, as tasks/preflight.yml writes it last
          ansible.builtin.set_fact:
            _llama_server_preflight_done:
              build: ""
              key: "{{{{ _llama_server_preflight_key }}}}"
        - ansible.builtin.debug:
            msg: "RESULT same {{{{ _llama_server_preflight_current | to_json }}}}"
        - ansible.builtin.debug:
            msg: "RESULT cache_ram {{{{ _llama_server_preflight_current | to_json }}}}"
          vars:
            llama_server_instances: {json.dumps([bad])}
        - ansible.builtin.debug:
            msg: "RESULT fail_on {{{{ _llama_server_preflight_current | to_json }}}}"
          vars:
            llama_server_preflight_fail_on: info
        - ansible.builtin.debug:
            msg: "RESULT two {{{{ _llama_server_preflight_current | to_json }}}}"
          vars:
            llama_server_instances: {json.dumps(two)}
        - ansible.builtin.debug:
            msg: "RESULT build {{{{ _llama_server_preflight_current | to_json }}}}"
          vars:
            llama_cpp_build: {{name: "{BUILD}"}}
        - ansible.builtin.debug:
            msg: "RESULT again {{{{ _llama_server_preflight_current | to_json }}}}"
    """
    done = run_playbook(tmp_path, play)
    assert done.returncode == 0, done.stdout + done.stderr
    found = playbook_results(done.stdout)
    assert found == {
        "same": True,
        "cache_ram": False,
        "fail_on": False,
        "two": False,
        "build": False,
        "again": True,
    }, done.stdout

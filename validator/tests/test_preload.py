"""The preload callback (plugins/callback/preload.py): ansible-playbook forks a process for each
task and host, and what a task's process imports is gone when it ends. With the callback, the
collection's filters, action plugins and the validator are loaded once in the main process, so
every task's process starts with them. A filter of the test's own (filter_plugins/probe.py) reports
what the task's process holds before the task loads anything."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_ansible_plugin, playbook_results, run_playbook

pytest.importorskip("ansible")

PROBE = """
import sys

def probe(_):
    return [name in sys.modules for name in (
        "llamafleet.engine",
        "ansible_collections.llamafleet.fleet.plugins.filter.llama_server",
        "ansible_collections.llamafleet.fleet.plugins.action.llamafleet_check",
    )]

class FilterModule:
    def filters(self):
        return {"probe": probe}
"""

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "RESULT held {{ 0 | probe | to_json }}"
"""


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    from conftest import PLUGINS

    return load_ansible_plugin(PLUGINS / "callback" / "preload.py")


def test_every_task_process_starts_with_the_validator_loaded(tmp_path: Path) -> None:
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "filter_plugins" / "probe.py").write_text(textwrap.dedent(PROBE))
    on = run_playbook(tmp_path, PLAY, env={"ANSIBLE_CALLBACKS_ENABLED": "llamafleet.fleet.preload"})
    assert on.returncode == 0, on.stdout[-3000:] + on.stderr[-2000:]
    assert playbook_results(on.stdout)["held"] == [True, True, True]
    # without it, each task's process loads them again where it uses them
    off = run_playbook(tmp_path, PLAY, env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.timer"})
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    assert playbook_results(off.stdout)["held"] == [False, False, False]


WARM_PROBE = """
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        from ansible._internal._templating._jinja_bits import AnsibleEnvironment
        from ansible.plugins.loader import filter_loader, test_loader

        return {"held": [bool(filter_loader._cached_non_collection_wrappers),
                         bool(test_loader._cached_non_collection_wrappers),
                         len(AnsibleEnvironment._lexer_cache) > 0]}
"""

WARM_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - warm_probe:
      register: warm
    - ansible.builtin.debug:
        msg: "RESULT held {{ warm.held | to_json }}"
"""


def test_every_task_process_starts_with_the_jinja_plugins_and_lexer_built(tmp_path: Path) -> None:
    """What a task's process holds before it templates anything (an action plugin of the test's
    own, whose task has no template): the Jinja filter and test wrappers and the lexer, built in
    the main process; without the callback each task's process builds them again."""
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "warm_probe.py").write_text(textwrap.dedent(WARM_PROBE))
    on = run_playbook(
        tmp_path, WARM_PLAY, env={"ANSIBLE_CALLBACKS_ENABLED": "llamafleet.fleet.preload"}
    )
    assert on.returncode == 0, on.stdout[-3000:] + on.stderr[-2000:]
    assert playbook_results(on.stdout)["held"] == [True, True, True]
    off = run_playbook(
        tmp_path, WARM_PLAY, env={"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.timer"}
    )
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    assert playbook_results(off.stdout)["held"] == [False, False, False]


def test_it_loads_every_plugin_and_the_roles_defaults(mod: ModuleType) -> None:
    assert mod.preload() == [] and mod.warm_templating() == []
    from ansible_collections.llamafleet.fleet.plugins.filter import llamafleet_fleet

    assert {"llama_cpp", "gguf_models", "llama_server"} <= set(llamafleet_fleet._DEFAULTS_CACHE)


def test_the_project_and_the_scenarios_enable_it() -> None:
    from conftest import REPO

    assert "llamafleet.fleet.preload" in (REPO / "ansible.cfg").read_text()
    assert "llamafleet.fleet.preload" in (REPO / ".config/molecule/config.yml").read_text()

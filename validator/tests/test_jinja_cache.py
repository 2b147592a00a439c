"""The compiled-template cache (plugins/plugin_utils/jinja_cache.py, installed by the preload
callback): a template compiled by one task's process is taken from the run's directory by the
next one, renders the same, and an entry that is not this user's own regular file, not the key it
is named for, or not code is never loaded (attack tests). The processes here are real: ansible's
own Templar in fresh interpreters, and ansible-playbook with an action plugin of the test's own
that reports what its task's process compiled."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, playbook_results, plugin_path, run_playbook

pytest.importorskip("ansible")

#: templates as the roles write them: filters, conditions, a loop, backslashes in a string
TEMPLATES = [
    "{{ x | string }}",
    "{{ (items | map('upper') | list) + [x | int + 1] }}",
    "{% for i in items %}{{ i }}-{% endfor %}",
    "{{ 'a\\\\1b' | regex_replace('^a', 'c') }}",
    "{{ {'k': x} | to_json }}",
]

RENDER = """
import json, os, sys
sys.path.insert(0, {plugins!r})
from ansible_collections.llamafleet.fleet.plugins.plugin_utils import jinja_cache
why = jinja_cache.install({run_tmp!r}) if {on!r} else "off"
from ansible.template import Templar, trust_as_template
t = Templar(loader=None, variables={{"x": 41, "items": ["a", "b"]}})
out = [t.template(trust_as_template(s)) for s in {templates!r}]
print(json.dumps({{"why": why, "out": out, "stats": jinja_cache.stats()}}, default=str))
"""


@pytest.fixture(scope="module")
def cache() -> ModuleType:
    return load_ansible_plugin(plugin_path("plugin_utils", "jinja_cache"))


def _render(run_tmp: Path, on: bool = True) -> dict[str, Any]:
    from conftest import COLLECTIONS_ROOT

    code = RENDER.format(
        plugins=str(COLLECTIONS_ROOT), run_tmp=str(run_tmp), on=on, templates=TEMPLATES
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_a_second_process_takes_the_code_the_first_compiled(tmp_path: Path) -> None:
    run_tmp = tmp_path / "run"
    run_tmp.mkdir(mode=0o700)
    plain = _render(run_tmp, on=False)
    first = _render(run_tmp)
    second = _render(run_tmp)
    assert first["why"] is None and first["stats"]["compiled"] >= len(TEMPLATES), first
    assert first["stats"]["loaded"] == 0
    assert second["stats"]["compiled"] == 0, second
    assert second["stats"]["loaded"] == first["stats"]["compiled"]
    assert first["out"] == second["out"] == plain["out"]
    assert plain["out"][3] == "c\\\\1b"  # Ansible escapes backslashes in expressions: kept
    entries = sorted(p for p in (run_tmp / "llamafleet-jinja").iterdir())
    assert len(entries) == first["stats"]["compiled"]
    for p in entries:
        assert p.stat().st_mode & 0o777 == 0o600


def test_what_the_code_depends_on_is_in_the_key(cache: ModuleType) -> None:
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment

    env = AnsibleEnvironment()
    plain = cache.settings_key(env, False)
    assert plain != cache.settings_key(env, True)  # Ansible's backslash escaping
    other = env.overlay(variable_start_string="[[", variable_end_string="]]")
    assert cache.settings_key(other, False) != plain
    assert cache.entry_key(plain, "{{ a }}") != cache.entry_key(plain, "{{ b }}")
    env.autoescape = lambda name: True
    assert cache.settings_key(env, False) is None  # not keyed on: compiled as Ansible does


def _entry(cache: ModuleType, directory: Path, key: str, code: Any = None) -> Path:
    cache.write_entry(str(directory), key, code or compile("x = 1", "<t>", "exec"))
    return directory / key


@pytest.mark.skipif(os.geteuid() != 0, reason="an entry owned by another user needs root")
def test_an_entry_that_is_not_this_users_own_regular_file_is_not_loaded(
    cache: ModuleType, tmp_path: Path
) -> None:
    d = tmp_path / "c"
    d.mkdir(mode=0o700)
    key = "a" * 64
    path = _entry(cache, d, key)
    assert cache.read_entry(str(d), key) is not None
    os.chmod(path, 0o620)  # writable by the group
    assert cache.read_entry(str(d), key) is None
    os.chmod(path, 0o600)
    os.chown(path, 65534, 65534)  # another account's
    assert cache.read_entry(str(d), key) is None
    path.unlink()
    _entry(cache, tmp_path, "b" * 64)
    os.symlink(tmp_path / ("b" * 64), path)  # a link to a valid entry
    assert cache.read_entry(str(d), key) is None
    path.unlink()
    # an entry named for one key but holding another (renamed by someone), garbage, too large
    _entry(cache, d, "c" * 64)
    os.rename(d / ("c" * 64), path)
    assert cache.read_entry(str(d), key) is None
    path.write_bytes(b"LFJC1\n" + key.encode() + b"\nnot marshal data")
    os.chmod(path, 0o600)
    assert cache.read_entry(str(d), key) is None
    path.write_bytes(b"LFJC1\n" + key.encode() + b"\n" + marshal.dumps(["not", "code"]))
    assert cache.read_entry(str(d), key) is None
    path.write_bytes(b"LFJC1\n" + key.encode() + b"\n" + b"x" * (cache.MAX_ENTRY + 1))
    assert cache.read_entry(str(d), key) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory owned by another user needs root")
def test_a_run_directory_others_can_write_or_a_link_is_not_used(
    cache: ModuleType, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    assert cache.cache_dir(str(run)) == str(run / "llamafleet-jinja")
    open_run = tmp_path / "open"
    open_run.mkdir()
    os.chmod(open_run, 0o777)
    assert cache.cache_dir(str(open_run)) is None
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "llamafleet-jinja").mkdir(mode=0o700)
    os.chown(other / "llamafleet-jinja", 65534, 65534)
    assert cache.cache_dir(str(other)) is None
    linked = tmp_path / "linked"
    linked.mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", linked / "llamafleet-jinja")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert cache.cache_dir(str(linked)) is None


def test_a_planted_entry_is_compiled_again_in_a_real_run(tmp_path: Path) -> None:
    """Attack: code planted under the right name, but writable by the group, is not run; the
    template renders what it says."""
    run_tmp = tmp_path / "run"
    run_tmp.mkdir(mode=0o700)
    first = _render(run_tmp)
    evil = compile("raise SystemExit('planted code ran')", "<planted>", "exec")
    for p in (run_tmp / "llamafleet-jinja").iterdir():
        key = p.name
        p.write_bytes(b"LFJC1\n" + key.encode() + b"\n" + marshal.dumps(evil))
        os.chmod(p, 0o664)
    again = _render(run_tmp)
    assert again["out"] == first["out"]
    assert again["stats"]["loaded"] == 0 and again["stats"]["compiled"] >= len(TEMPLATES)


PROBE = """
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        from ansible_collections.llamafleet.fleet.plugins.plugin_utils import jinja_cache

        return {"stats": jinja_cache.stats(), "said": self._task.args.get("say")}
"""

PLAY = """
- hosts: all
  connection: local
  gather_facts: false
  serial: 1
  vars:
    words: [a, b]
  tasks:
    - compile_probe:
        say: "{{ words | map('upper') | join('-') }} {{ inventory_hostname | length > 2 }}"
      register: probe
    - ansible.builtin.debug:
        msg: "RESULT {{ inventory_hostname }} {{ [probe.said, probe.stats] | to_json }}"
"""


def test_under_ansible_playbook_the_next_host_compiles_nothing_again(tmp_path: Path) -> None:
    """The real callback and ansible-playbook: the first host's task process compiles its
    arguments' template; the second host's, forked afterwards, loads it; the answer is the same.
    Without the callback each process compiles it."""
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "compile_probe.py").write_text(textwrap.dedent(PROBE))
    (tmp_path / "hosts.ini").write_text("one\ntwo\n")
    on = run_playbook(
        tmp_path,
        PLAY,
        "-i",
        "hosts.ini",
        env={"ANSIBLE_CALLBACKS_ENABLED": "llamafleet.fleet.preload"},
    )
    assert on.returncode == 0, on.stdout[-3000:] + on.stderr[-2000:]
    got = playbook_results(on.stdout)
    assert got["one"][0] == got["two"][0] == "A-B True"
    assert got["one"][1]["installed"] and got["one"][1]["compiled"] >= 1, got
    assert got["two"][1]["compiled"] == 0 and got["two"][1]["loaded"] >= 1, got
    off = run_playbook(
        tmp_path,
        PLAY,
        "-i",
        "hosts.ini",
        env={
            "ANSIBLE_CALLBACKS_ENABLED": "llamafleet.fleet.preload",
            "LLAMAFLEET_JINJA_CACHE": "off",
        },
    )
    assert off.returncode == 0, off.stdout[-3000:] + off.stderr[-2000:]
    got = playbook_results(off.stdout)
    assert got["two"][0] == "A-B True" and not got["two"][1]["installed"]

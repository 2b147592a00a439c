"""Which hosts the rollout's prompt-cache gate sends its requests to (playbooks/rollout.yml, the
second play's `_rollout_gate_instances`): by default only a host whose servers this run changed
(the llama_server role wrote a unit, or started or restarted an instance); with
`rollout_cache_gate: always` every host; with `false` none; never in check mode. The expressions
are the playbook's own, read from the file and templated by the real ansible-playbook; the
registered results stand for what the llama_server role's units and services modules return."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, playbook_results, run_playbook

pytest.importorskip("ansible")

ROLLOUT = REPO / "playbooks" / "rollout.yml"
NAMES = ("_rollout_gate_instances", "_rollout_gate_mode", "_rollout_host_changed")
ENDPOINTS = {"main": {"port": 8080, "connect_host": "127.0.0.1", "alias": "main"}}
#: (label, rollout_cache_gate or None for the default, units changed, services changed)
CASES = [
    ("default_unchanged", None, False, False),
    ("default_unit", None, True, False),
    ("default_restart", None, False, True),
    ("true_unchanged", True, False, False),
    ("always_unchanged", "always", False, False),
    ("false_changed", False, True, True),
    ("string_false_changed", "false", True, True),
]


def _gate_vars() -> dict[str, str]:
    plays = yaml.safe_load(ROLLOUT.read_text())
    converge = next(p for p in plays if p.get("serial"))
    return {name: converge["vars"][name] for name in NAMES}


def test_the_gate_runs_on_changed_hosts_unless_told_otherwise(tmp_path: Path) -> None:
    tasks = []
    for label, gate, units, services in CASES:
        given = {
            "llama_server_endpoints": ENDPOINTS,
            "_llama_server_units": {"changed": units},
            "_llama_server_services": {"changed": services},
            **({} if gate is None else {"rollout_cache_gate": gate}),
        }
        tasks.append(
            {
                "ansible.builtin.debug": {
                    "msg": f"RESULT {label} {{{{ _rollout_gate_instances | length }}}}"
                },
                "vars": given,
            }
        )
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": _gate_vars(),
            "tasks": tasks,
        }
    ]
    text = yaml.safe_dump(play, sort_keys=False)
    done = run_playbook(tmp_path, text)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert found == {
        "default_unchanged": 0,
        "default_unit": 1,
        "default_restart": 1,
        "true_unchanged": 0,
        "always_unchanged": 1,
        "false_changed": 0,
        "string_false_changed": 0,
    }
    # check mode sends no request, whatever changed
    checked = run_playbook(tmp_path, text, "--check")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert set(playbook_results(checked.stdout).values()) == {0}
    # ('always' is never handed to the bool filter, which would warn of a non-boolean)
    assert "DEPRECATION" not in done.stdout + done.stderr, textwrap.shorten(done.stderr, 500)


def _task_with(path: Path, name_start: str) -> dict[str, Any]:
    """The task of this tasks file or playbook whose name starts with name_start."""
    data = yaml.safe_load(path.read_text())
    stack = list(data)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if str(item.get("name", "")).startswith(name_start):
                return item
            for key in ("tasks", "block", "rescue", "always"):
                stack.extend(item.get(key) or [])
    raise AssertionError(f"{path}: no task named {name_start!r}...")


def test_the_gate_and_smoke_timeouts_are_the_variables(tmp_path: Path) -> None:
    """The two requests' timeouts, as the playbook and the role write them, templated by the real
    ansible-playbook: 300 s by default, else the variable's value (a host that processes prompts
    on its CPU needs more)."""
    gate = _task_with(ROLLOUT, "Prompt-cache gate")["llamafleet.fleet.llamafleet_cache_gate"]
    verify = REPO / "roles" / "llama_server" / "tasks" / "verify.yml"
    smoke = _task_with(verify, "Send one Claude-Code-shaped")["ansible.builtin.uri"]
    defaults = yaml.safe_load((REPO / "roles/llama_server/defaults/main.yml").read_text())
    cases = {
        "gate_default": (gate["timeout"], {}),
        "gate_set": (gate["timeout"], {"rollout_cache_gate_timeout": "900"}),
        "smoke_default": (smoke["timeout"], defaults),
        "smoke_set": (smoke["timeout"], {**defaults, "llama_server_smoke_timeout": 1200}),
    }
    tasks = [
        {"ansible.builtin.debug": {"msg": f"RESULT {label} {expr}"}, "vars": given}
        for label, (expr, given) in cases.items()
    ]
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    done = run_playbook(tmp_path, yaml.safe_dump(play, sort_keys=False))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert playbook_results(done.stdout) == {
        "gate_default": 300,
        "gate_set": 900,
        "smoke_default": 300,
        "smoke_set": 1200,
    }

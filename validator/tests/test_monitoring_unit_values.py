"""The monitoring role renders inventory values into systemd units (mtail, the node exporter's and
Prometheus's drop-ins); a control character in one of them would add a line to the unit (the
review: a newline in monitoring_exporter_address added an `ExecStartPre=+` line). The role's
preflight refuses it before anything is written, naming the variable: the real role's "Check the
settings" task, run by the real ansible-playbook on localhost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The monitoring role's settings check
      ansible.builtin.include_role:
        name: monitoring
        tasks_from: preflight.yml
"""


def _check(tmp_path: Path, **values: object) -> str:
    (tmp_path / "vars.json").write_text(json.dumps(values))
    out = run_playbook(tmp_path, PLAY, "-e", "@vars.json")
    text = out.stdout + out.stderr
    # only the first task (the settings check) is under test: its result is what we return
    first = text.split("TASK [monitoring : Resolve the targets", 1)[0]
    assert "TASK [monitoring : Check the settings]" in first, text
    return first


def test_the_defaults_pass(tmp_path: Path) -> None:
    first = _check(tmp_path)
    assert "ok: [localhost]" in first and "fatal:" not in first, first


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("monitoring_exporter_address", "0.0.0.0\nExecStartPre=+/bin/sh -c 'id > /tmp/x'"),
        ("monitoring_listen", "127.0.0.1:9090\rExecStartPre=+/bin/true"),
        ("monitoring_key_dir", "/etc/llamafleet/monitoring/keys\\"),
        ("monitoring_mtail_port", "3903\u2028ExecStartPre=+/bin/true"),
    ],
)
def test_a_control_character_is_refused_naming_the_variable(
    tmp_path: Path, var: str, value: str
) -> None:
    first = _check(tmp_path, **{var: value})
    assert "fatal:" in first and f"{var}: " in first, first
    assert "control character" in first or "backslash" in first, first

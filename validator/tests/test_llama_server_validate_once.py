"""The llama_server role's validate.yml, run by the real ansible-playbook: a host that already
passed exactly this check in the same playbook run (rollout.yml runs the preflight when it stages
the build, and again in its converge) is not checked again; any change to what the check is
handed (a unit, its facts, the threshold) is checked again, and a refused unit still fails.

The instance is the shape the role's preflight resolves (preflight.yml: "Resolve each instance"),
written out by hand here: what this test cannot show is that the resolve step builds the same
mapping on a managed host (the rollout scenarios and testbed/fleet-sim do: their converge skips
the second check, and their logs say so)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, playbook_results, run_playbook

SHA = "0123456789abcdef" * 4


def _instance(extra_args: list[str]) -> dict[str, Any]:
    argv = ["-m", "/srv/models/q/q.gguf", "--host", "127.0.0.1", "--port", "8080"]
    argv += ["--alias", "main", "-c", "65536", "-np", "1", "--jinja", *extra_args]
    return {
        "name": "main",
        "unit": "llama-server-main.service",
        "host": "127.0.0.1",
        "port": 8080,
        "model_path": "/srv/models/q/q.gguf",
        "model_sha256": SHA,
        "model_meta": {},
        "argv": argv,
        "environment": {},
        "api_key": True,
        "client_keys": [],
        "ip_allow": [],
        "tls": False,
        "memlock": False,
        "chat_template": {"path": "", "text": "", "sha256": "", "change": "", "original": ""},
        "ignore": [],
        "gpu": False,
    }


def _recorded() -> str:
    """The preflight's last task (tasks/preflight.yml), which records the check this host passed,
    as it is in the role (run here after validate.yml, whose role vars the include made public)."""
    last = yaml.safe_load((REPO / "roles/llama_server/tasks/preflight.yml").read_text())[-1]
    assert "_llama_server_checked_key" in last["ansible.builtin.set_fact"]
    return json.dumps(last)[:-1] + ', "vars": {"llama_server_preflight_fail_on": "%s"}}'


def _include(label: str, instance: dict[str, Any], fail_on: str = "error") -> str:
    return textwrap.dedent(
        f"""\
        - name: "{label}"
          block:
            - name: "{label}: validate"
              ansible.builtin.include_role:
                name: llama_server
                tasks_from: validate.yml
                public: true
              vars:
                _llama_server_resolved: [{json.dumps(instance)}]
                _llama_server_build_id: b9079-test
                _llama_server_manifest_raw: {{}}
                _llama_server_help_raw: {{}}
                llama_server_preflight_fail_on: {fail_on}
            - {_recorded() % fail_on}
            - name: "{label}: record"
              ansible.builtin.set_fact:
                outcomes: "{{{{ outcomes + [{{'label': '{label}', 'failed': false,
                  'checked': _llama_server_checks is not skipped}}] }}}}"
          rescue:
            - name: "{label}: record the failure"
              ansible.builtin.set_fact:
                outcomes: "{{{{ outcomes + [{{'label': '{label}', 'failed': true,
                  'msg': ansible_failed_result.msg | default('')}}] }}}}"
        """
    )


def test_the_same_check_runs_once_per_host_and_run(tmp_path: Path) -> None:
    pytest.importorskip("ansible")
    good = _instance([])
    other_ctx = _instance([])
    other_ctx["argv"] = [a if a != "65536" else "131072" for a in good["argv"]]
    refused = _instance(["--cache-ram", "0"])
    steps = [
        _include("first", good),
        _include("again", good),
        _include("other threshold", good, fail_on="warning"),
        _include("other unit", other_ctx),
        _include("refused", refused),
        _include("refused again", refused),
    ]
    tasks = "\n".join(textwrap.indent(s, "    ") for s in steps)
    play = (
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  vars:\n"
        "    outcomes: []\n"
        "  tasks:\n"
        f"{tasks}\n"
        "    - name: show\n"
        "      ansible.builtin.debug:\n"
        '        msg: "RESULT outcomes {{ outcomes | to_json }}"\n'
    )
    (tmp_path / ".git").mkdir()
    proc = run_playbook(tmp_path, play)
    results = playbook_results(proc.stdout)
    assert "outcomes" in results, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {o["label"]: o for o in results["outcomes"]}
    assert got["first"] == {"label": "first", "failed": False, "checked": True}
    # exactly what this host passed a moment ago: not checked again
    assert got["again"]["checked"] is False
    # the threshold is part of what the check is handed, and so is the unit
    assert got["other threshold"]["checked"] is True
    assert got["other unit"]["checked"] is True
    # a refused unit fails, and fails again: only a check that passed is remembered
    for label in ("refused", "refused again"):
        assert got[label]["failed"] is True, got[label]
        assert "LS001" in got[label]["msg"] and "b9079-test" in got[label]["msg"]


def test_findings_below_the_threshold_are_one_warning_per_item() -> None:
    """llamafleet_check's ``report: true`` (validate.yml): the findings that did not refuse an
    item become one warning naming it and its rule ids; a refused item is the failure's, not a
    warning; an item without findings says nothing."""
    from conftest import load_ansible_plugin, plugin_path

    check = load_ansible_plugin(plugin_path("action", "llamafleet_check"))
    checks = [
        {"name": "main", "findings": [{"id": "LS010"}, {"id": "LS031"}], "refused": False},
        {"name": "quiet", "findings": [], "refused": False},
        {"name": "bad", "findings": [{"id": "LS001"}], "refused": True},
    ]
    assert check.remaining(checks) == ["main: LS010, LS031 (below fail_on)"]
    # the same texts, threshold, configuration and skipped rules: the same key
    items = [{"name": "main", "text": "[Service]\n", "facts": {"ram_mib": 1}}]
    key = check.check_key(items, "error", "", [])
    assert key == check.check_key([dict(items[0])], "error", "", [])
    assert key != check.check_key(items, "warning", "", [])
    assert key != check.check_key([{**items[0], "text": "[Service]\nX=1\n"}], "error", "", [])

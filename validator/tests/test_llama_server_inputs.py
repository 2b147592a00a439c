"""The llama_server role's checks of its own variables, one task (plugins/action/
llama_server_inputs.py, the first task of roles/llama_server/tasks/preflight.yml): what the
unit could not carry is refused before anything is read from the host, with a message naming the
instance and the value. The playbook test runs the plugin through the real ansible-playbook, as
the role's task calls it; the claude scenario's attacks run the whole role with the same lines."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, playbook_results, plugin_path, run_playbook

DEFAULTS = yaml.safe_load((REPO / "roles/llama_server/defaults/main.yml").read_text())
MAIN = {"name": "main", "model": "qwen", "port": 8080, "environment": {"LLAMA_ARG_THREADS": 8}}
AUX = {"name": "aux", "model": "tiny", "port": 8081, "client_keys": ["workstation/alice"]}


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("action", "llama_server_inputs"))


def _args(**over: Any) -> dict[str, Any]:
    return {
        "instances": [MAIN, AUX],
        "client_keys": DEFAULTS["llama_server_client_keys"],
        "unit_extra": DEFAULTS["llama_server_unit_extra"],
        "tls": {
            "ca_cert": DEFAULTS["llama_server_tls_ca_cert"],
            "ca_key": DEFAULTS["llama_server_tls_ca_key"],
            "sans": DEFAULTS["llama_server_tls_sans"],
            "days": DEFAULTS["llama_server_tls_days"],
        },
    } | over


def _refusal(mod: Any, **over: Any) -> str:
    with pytest.raises((mod.InputError, mod.AnsibleFilterError)) as refused:
        mod.check(_args(**over))
    return str(refused.value)


def test_the_task_hands_over_the_roles_variables(mod: Any) -> None:
    tasks = yaml.safe_load((REPO / "roles/llama_server/tasks/preflight.yml").read_text())
    task = tasks[0]["llamafleet.fleet.llama_server_inputs"]
    assert set(task) == set(mod._ARGS)
    for value in (task["instances"], task["client_keys"], task["unit_extra"]):
        assert value.strip("{} ").removeprefix("llama_server_") in {
            "instances",
            "client_keys",
            "unit_extra",
        }
    assert {v.strip("{} ") for v in task["tls"].values()} == {
        f"llama_server_tls_{n}" for n in ("ca_cert", "ca_key", "sans", "days")
    }


def test_the_defaults_and_a_usual_instance_list_pass(mod: Any) -> None:
    mod.check(_args())
    mod.check(_args(instances=[], unit_extra=["Nice=5", "CPUQuota=80%"]))
    tls = {"ca_cert": "/etc/pki/ca.pem", "ca_key": "/etc/pki/ca.key", "sans": ["a"], "days": 30}
    mod.check(_args(tls=tls))


@pytest.mark.parametrize(
    ("instances", "shown"),
    [
        ([MAIN, MAIN | {"port": 8082}], "names ['main', 'main']"),
        ([MAIN, AUX | {"port": "8080"}], "ports [8080, 8080]"),
        ([MAIN | {"name": "Main"}], "names ['Main']"),
        ([MAIN | {"name": "a" * 42}], "names ['" + "a" * 42 + "']"),
        ([{"name": "main", "port": 8080}], "names ['main']"),
        ([AUX, {"model": "x", "port": 9000}], "names ['aux', '']"),
        ("main", "names [], ports []"),
        ({"main": MAIN}, "names [], ports []"),
    ],
)
def test_an_instance_list_without_unique_names_ports_and_models_is_refused(
    mod: Any, instances: Any, shown: str
) -> None:
    msg = _refusal(mod, instances=instances)
    assert msg.startswith("llama_server_instances: every instance needs a unique `name`")
    assert shown in msg


def test_an_environment_that_is_not_a_mapping_names_its_instance(mod: Any) -> None:
    msg = _refusal(mod, instances=[MAIN, AUX | {"environment": ["LLAMA_ARG_THREADS=8"]}])
    assert "the environment of an instance must be a mapping" in msg
    assert 'instance "aux" has ["LLAMA_ARG_THREADS=8"].' in msg
    assert '"main"' not in msg


@pytest.mark.parametrize(
    ("environment", "why"),
    [
        ({"BAD-NAME": 1}, "'BAD-NAME' is not a variable name"),
        ({"X": "a\nExecStartPre=+/bin/sh"}, "instance 'main': environment: X"),
        ({"X": ["a"]}, "the value of X must be a string or number"),
    ],
)
def test_an_environment_the_unit_cannot_carry_is_refused(
    mod: Any, environment: dict[str, Any], why: str
) -> None:
    assert why in _refusal(mod, instances=[MAIN | {"environment": environment}])


@pytest.mark.parametrize(
    ("own", "default", "why"),
    [
        ({"client_keys": ["a/b", "a__b"]}, [], "would share the key file"),
        ({"client_keys": "alice"}, [], "must be a list of client names"),
        ({}, ["../../etc/passwd x"], "is not a client name"),
        ({}, None, "must be a list of client names"),
    ],
)
def test_client_key_names_a_key_file_cannot_have_are_refused(
    mod: Any, own: dict[str, Any], default: Any, why: str
) -> None:
    msg = _refusal(mod, instances=[MAIN | own], client_keys=default)
    assert "instance 'main': client_keys" in msg and why in msg


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("Nice=5", 'must be a list of [Service] lines such as ["Nice=5"]; got "Nice=5".'),
        ({"Nice": 5}, "must be a list of [Service] lines"),
        (["Nice=5", "[Install]"], "starts a section"),
        (["Nice=5\nExecStartPre=+/bin/touch /tmp/pwned"], "llama_server_unit_extra"),
        (["Nice=5\\"], "llama_server_unit_extra"),
        ([5], "is not a string"),
    ],
)
def test_extra_unit_lines_that_change_the_units_structure_are_refused(
    mod: Any, extra: Any, why: str
) -> None:
    """The attack: a line that opens another section or smuggles a second line (an
    ExecStartPre=+ run as root) into the unit."""
    msg = _refusal(mod, unit_extra=extra)
    assert msg.startswith("llama_server_unit_extra") and why in msg


@pytest.mark.parametrize(
    "tls",
    [
        {"ca_cert": "/etc/pki/ca.pem", "ca_key": "", "sans": [], "days": 825},
        {"ca_cert": "ca.pem", "ca_key": "ca.key", "sans": [], "days": 825},
        {"ca_cert": "", "ca_key": "", "sans": "host.example", "days": 825},
        {"ca_cert": "", "ca_key": "", "sans": [], "days": 0},
        {"ca_cert": "", "ca_key": "", "sans": [], "days": "soon"},
    ],
)
def test_tls_settings_that_do_not_go_together_are_refused(mod: Any, tls: dict[str, Any]) -> None:
    msg = _refusal(mod, tls=tls)
    assert msg.startswith("llama_server_tls_ca_cert and llama_server_tls_ca_key go together")


def test_the_task_through_ansible_playbook(tmp_path: Path) -> None:
    """As the role's task calls it: the role's variables templated into its options; a good list
    passes, changing nothing, and a refusal reaches a rescue with the filter's own message."""
    play = """
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
        instances:
          - {name: main, model: qwen, port: 8080, environment: {LLAMA_ARG_THREADS: "{{ 4 * 2 }}"}}
        tls: {ca_cert: "", ca_key: "", sans: [], days: 825}
      tasks:
        - llamafleet.fleet.llama_server_inputs:
            instances: "{{ instances }}"
            client_keys: []
            unit_extra: ["Nice=5"]
            tls: "{{ tls }}"
          register: good
        - ansible.builtin.debug:
            msg: "RESULT good {{ [good.changed, good.failed | default(false)] | to_json }}"
        - block:
            - llamafleet.fleet.llama_server_inputs:
                instances: "{{ instances }}"
                client_keys: []
                unit_extra: ["ExecStartPre=+/bin/touch /tmp/lf-pwned", "[Install]"]
                tls: "{{ tls }}"
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT refused {{ ansible_failed_result.msg | to_json }}"
    """
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert found["good"] == [False, False]
    assert re.match(r"^llama_server_unit_extra: '\[Install\]' starts a section", found["refused"])

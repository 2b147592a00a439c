"""The llama_server role's instances resolved by one action plugin (plugins/action/
llama_server_resolve.py, roles/llama_server/tasks/preflight.yml) instead of a set_fact loop of
Jinja: a real playbook runs both on the same variables (the role's defaults, the metadata and
--help text the preflight reads, instances of every shape) and wants the same instances. The
loop below is the role's former task, kept here as the reference. The chat template of the
first model is a ChatML loop written here with the official Qwen templates' guard (it raises on
Claude Code's late system message, so the fix runs); the --help texts are the fork's, captured."""

# ruff: noqa: E501 - FORMER is the role's former task, verbatim
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RAISING_CHATML as RAISING
from conftest import REPO, playbook_results, run_playbook

pytest.importorskip("ansible")

ROLE = REPO / "roles" / "llama_server"
HELP = REPO / "validator" / "tests" / "fixtures" / "help"

#: the role's former task (tasks/preflight.yml before the action plugin), registered as _former
FORMER = """
- name: Resolve each instance (model path, argv, memory locking, key)
  ansible.builtin.set_fact:
    _llama_server_one: "{{ _resolved }}"
  register: _former
  loop: "{{ llama_server_instances }}"
  loop_control:
    loop_var: _inst
    label: "{{ _inst.name }}"
  when: _inst.enabled | default(true) | bool
  vars:
    _meta: "{{ _llama_server_models_meta[_inst.model] | default({}) }}"
    _model_path: >-
      {{ _inst.model if _inst.model is abs
         else (_meta.path | default(llama_server_models_dir ~ '/' ~ _inst.model ~ '/' ~ _inst.model ~ '.gguf')) }}
    _planned: "{{ (_llama_server_profile_args | default({}))[_inst.name] | default({}) }}"
    # --no-slots unless llama_server_slots_endpoint, where the build knows it (a --help text
    # without it: an old build that would refuse the flag); the instance's args win.
    _help_text: >-
      {{ (_llama_server_help_raw.content | b64decode) if _llama_server_help_raw.content is defined else '' }}
    _slots: >-
      {{ {} if llama_server_slots_endpoint | bool or (_help_text | length > 0 and '--no-slots' not in _help_text)
         else {'slots': false} }}
    _args_given: "{{ _slots | combine(llama_server_default_args, _planned, _inst.args | default({})) }}"
    # the model's template fixed for Claude Code's late system message, where it raises and the
    # instance brings no template of its own (one bounded render per instance, on the controller)
    _own_template: >-
      {{ ('chat_template' in _args_given) or ('chat_template_file' in _args_given)
         or ((_inst.extra_args | default([]) | select('match', '--chat-template') | list | length) > 0) }}
    _tmpl: >-
      {{ _meta.kv | default({}) | llamafleet.fleet.llamafleet_chat_template_fix(_inst.name,
           (_inst.chat_template_fix | default(llama_server_chat_template_fix)) | bool and not _own_template | bool) }}
    _tmpl_path: "{{ llama_server_chat_template_dir }}/{{ _inst.name }}.jinja"
    # (a fixed template reaches the service as a credential: the unit adds --chat-template-file)
    _args: "{{ _args_given }}"
    _mapping:
      model: "{{ _model_path }}"
      mmproj: "{{ _inst.mmproj | default(_meta.mmproj | default(none)) }}"
      host: "{{ _inst.host | default('127.0.0.1') }}"
      port: "{{ _inst.port | default(8080) }}"
      alias: "{{ _inst.alias | default(_inst.name) }}"
      args: "{{ _args }}"
      extra_args: "{{ _inst.extra_args | default([]) }}"
    _argv: "{{ _mapping | llamafleet.fleet.llamafleet_argv }}"
    _resolved:
      name: "{{ _inst.name }}"
      unit: "llama-server-{{ _inst.name }}.service"
      host: "{{ _mapping.host }}"
      port: "{{ _mapping.port | int }}"
      alias: "{{ _mapping.alias }}"
      # where this host's own requests go (127.0.0.1 for a wildcard address or a name)
      connect_host: "{{ _mapping.host | llamafleet.fleet.llamafleet_connect_host }}"
      model_name: "{{ _inst.model }}"
      model_path: "{{ _model_path }}"
      model_sha256: >-
        {{ _meta | llamafleet.fleet.llamafleet_model_sha256(_inst.name, _inst.model, llama_server_models_dir) }}
      model_meta: "{{ _meta }}"
      argv: "{{ _argv }}"
      environment: "{{ _inst.environment | default({}) }}"
      api_key: "{{ llama_server_api_key | bool }}"
      # names of the clients with their own key (none without llama_server_api_key), the
      # monitoring hosts' key among them while the monitoring group has hosts
      client_keys: >-
        {{ ((_inst.client_keys | default(llama_server_client_keys) | llamafleet.fleet.llamafleet_client_keys(_inst.name)
             + _llama_server_monitoring_clients) | unique | llamafleet.fleet.llamafleet_client_keys(_inst.name))
           if llama_server_api_key | bool else [] }}
      # IPAddressAllow= beside localhost; refused (empty) for an instance beyond loopback
      ip_allow: >-
        {{ _inst.ip_allow | default(llama_server_ip_allow)
           | llamafleet.fleet.llamafleet_ip_allow(_inst.name, _mapping.host) }}
      # TLS: llama_server_tls (auto: not on loopback), the instance's `tls` wins
      tls: >-
        {{ (_inst.tls | bool) if _inst.tls is defined
           else (llama_server_tls | llamafleet.fleet.llamafleet_tls_on(_mapping.host)) }}
      # subjectAltName entries of its certificate (127.0.0.1, ::1 and localhost always)
      tls_sans: >-
        {{ ([_mapping.host, ansible_host | default(''), inventory_hostname,
             ansible_facts['fqdn'] | default(''), ansible_facts['hostname'] | default(''),
             ansible_facts['default_ipv4']['address'] | default('')] + llama_server_tls_sans)
           | llamafleet.fleet.llamafleet_tls_sans(_inst.name) }}
      memlock: "{{ ('--mlock' in _argv) or ((_args.load_mode | default('')) is match('.*mlock$')) }}"
      # the fixed chat template to write beside the unit (path empty: served as the model has it)
      # (one expression: the template is rendered and checked once per instance, not once per key)
      chat_template: >-
        {{ {'path': _tmpl_path if _tmpl.action == 'fixed' else '', 'text': _tmpl.text,
            'sha256': _tmpl.sha256, 'change': _tmpl.change, 'original': _tmpl.kind} }}
      # deliberate choices: `# llamafleet: ignore-file[ID] reason` lines of its unit
      ignore: "{{ _inst.ignore | default({}) | llamafleet.fleet.llamafleet_instance_ignores(_inst.name) }}"
      gpu: "{{ (llama_cpp_build.backend | default('cpu')) == 'cuda' }}"
"""


def _help(name: str) -> dict[str, str]:
    text = (HELP / name).read_bytes()
    return {"content": base64.b64encode(text).decode("ascii")}


INSTANCES: list[dict[str, Any]] = [
    {
        "name": "main",
        "model": "qwen",
        "port": 8080,
        "args": {"ctx_size": 131072, "parallel": 1, "cache_type_k": "q8_0", "flash_attn": "on"},
    },
    {
        "name": "wide",
        "model": "/srv/other/m.gguf",
        "host": "0.0.0.0",
        "port": "8081",
        "alias": "big",
        "tls": True,
        "ip_allow": ["10.0.0.0/8"],
        "client_keys": ["ws/alice", "ws/bob"],
        "extra_args": ["--chat-template-file", "/etc/t.jinja", "--mlock"],
        "environment": {"CUDA_VISIBLE_DEVICES": "0"},
        "ignore": {"LS010": "two slots on purpose"},
        "mmproj": "/srv/other/mmproj.gguf",
        "args": {"load_mode": "mlock", "parallel": 2},
    },
    {"name": "off", "model": "qwen", "port": 8082, "enabled": False},
    {"name": "third", "model": "plain", "port": 8083, "chat_template_fix": False},
]
MODELS_META = {
    "qwen": {
        "path": "/var/lib/llama/models/qwen/qwen.gguf",
        "sha256": ["ab" * 32],
        "kv": {"general.architecture": "qwen3", "tokenizer.chat_template": RAISING},
        "mmproj": "/var/lib/llama/models/qwen/mmproj.gguf",
    },
    "plain": {"sha256": "cd" * 32, "kv": {"tokenizer.chat_template": RAISING}},
}
CASES: dict[str, dict[str, Any]] = {
    "fork_help": {"_llama_server_help_raw": "FORK"},
    "upstream_help_no_key": {"_llama_server_help_raw": "UPSTREAM", "llama_server_api_key": False},
    "no_help_profile": {
        "_llama_server_help_raw": {},
        "_llama_server_profile_args": {"main": {"ctx_size": 65536, "n_cpu_moe": 12}},
        "llama_server_slots_endpoint": True,
        "_llama_server_monitoring_clients": ["monitoring"],
        "llama_cpp_build": {"backend": "cuda"},
        "llama_server_tls": True,
        "llama_server_tls_sans": ["gpu-7.example.org"],
    },
}


def test_the_plugin_resolves_as_the_former_loop(tmp_path: Path) -> None:
    helps = {
        "FORK": _help("fork-b9079-69d8e4be4.help.txt"),
        "UPSTREAM": _help("upstream-b1-0c1e570.help.txt"),
    }
    new = next(
        t
        for t in yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
        if "llamafleet.fleet.llama_server_resolve" in t
    )
    new = {k: v for k, v in new.items() if k != "register"} | {"register": "_new"}
    former = yaml.safe_load(FORMER)[0]
    # the metadata as the preflight has it: read from the host (a module's result is data, never
    # a template; the chat template in it is Jinja text)
    (tmp_path / "meta.json").write_text(json.dumps(MODELS_META))
    tasks: list[dict[str, Any]] = [
        {"ansible.builtin.slurp": {"src": str(tmp_path / "meta.json")}, "register": "_meta_file"}
    ]
    for label, over in CASES.items():
        given = {
            "llama_server_instances": INSTANCES,
            "_llama_server_models_meta": "{{ _meta_file.content | b64decode | from_json }}",
            "_llama_server_profile_args": {},
            "_llama_server_monitoring_clients": [],
            **over,
        }
        if isinstance(given["_llama_server_help_raw"], str):
            given["_llama_server_help_raw"] = helps[given["_llama_server_help_raw"]]
        tasks += [
            {**former, "vars": {**former["vars"], **given}},
            {**new, "vars": given},
            {
                "ansible.builtin.debug": {
                    "msg": (
                        f"RESULT {label} {{{{ [_former.results | selectattr('ansible_facts', "
                        "'defined') | map(attribute='ansible_facts._llama_server_one') | list, "
                        "_new.instances] | to_json }}"
                    )
                }
            },
        ]
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": True,
            "gather_subset": ["!all", "min", "network"],
            "vars_files": [str(ROLE / "defaults" / "main.yml")],
            "vars": {"ansible_host": "192.0.2.7"},
            "tasks": tasks,
        }
    ]
    done = run_playbook(tmp_path, yaml.safe_dump(play, sort_keys=False))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert set(found) == set(CASES)
    for label, (old, now) in found.items():
        assert len(now) == 3, label  # the disabled instance is left out
        for a, b in zip(old, now, strict=True):
            assert a == b, f"{label} {a['name']}: " + json.dumps(
                {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
            )
    main, wide, third = found["fork_help"][1]
    # what the cases are there to show
    assert main["chat_template"]["path"].endswith("/main.jinja")  # the guard was fixed
    assert wide["chat_template"]["path"] == ""  # its own template: not touched
    assert third["chat_template"]["original"] == ""  # the fix is off for it
    assert wide["memlock"] and wide["tls"] and wide["port"] == 8081
    assert wide["client_keys"] == ["ws/alice", "ws/bob"]
    assert "IP:192.0.2.7" in wide["tls_sans"]
    assert found["upstream_help_no_key"][1][0]["client_keys"] == []
    assert found["no_help_profile"][1][0]["gpu"] is True
    # the profile's plan where the instance sets nothing itself (its ctx_size wins)
    profiled = found["no_help_profile"][1][0]["argv"]
    assert "--n-cpu-moe" in profiled and "65536" not in profiled


@pytest.mark.parametrize(
    ("instance", "sha256", "message"),
    [
        # two client names that would share one key file
        (
            {"client_keys": ["a/b", "a__b"]},
            "ab" * 32,
            "instance 'main': client_keys (llama_server_client_keys): 'a__b' and 'a/b' would "
            "share the key file",
        ),
        # a model checksum from a host's metadata.json that would start a new line of the unit
        ({}, "ab\nExecStart=/bin/sh", "instance main: the sha256 of model qwen in"),
    ],
)
def test_a_refused_value_fails_the_task_naming_the_instance(
    tmp_path: Path, instance: dict[str, Any], sha256: str, message: str
) -> None:
    new = next(
        t
        for t in yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
        if "llamafleet.fleet.llama_server_resolve" in t
    )
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults" / "main.yml")],
            "tasks": [
                {
                    # (block variables: a play's vars_files would win over its vars)
                    "vars": {
                        "llama_server_instances": [{**INSTANCES[0], **instance}],
                        "_llama_server_models_meta": {"qwen": {"sha256": sha256}},
                        "_llama_server_help_raw": {},
                        "_llama_server_monitoring_clients": [],
                    },
                    "block": [new],
                    "rescue": [
                        {
                            "ansible.builtin.debug": {
                                "msg": "RESULT refused {{ ansible_failed_result.msg | to_json }}"
                            }
                        }
                    ],
                }
            ],
        }
    ]
    done = run_playbook(tmp_path, yaml.safe_dump(play, sort_keys=False))
    assert done.returncode == 0, done.stdout[-3000:]
    refused = playbook_results(done.stdout)["refused"]
    assert message in refused, refused

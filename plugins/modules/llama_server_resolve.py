#!/usr/bin/python
"""Documentation of the llama_server_resolve action plugin (plugins/action/llama_server_resolve.py),
the llama_server role's instances resolved in one task: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_resolve
short_description: Resolve the llama_server role's instances in one task
description:
  - >-
    For each enabled instance of O(instances): the model's path and saved metadata, the args
    (O(default_args), the GPU profile's plan O(profile_args), the instance's own), the argv
    llama-server is started with, the chat template (fixed where the model's own raises on
    Claude Code's late system message and the instance brings none), the client keys, the IP
    filter, TLS and its certificate names, memory locking and the suppressions its unit carries.
  - >-
    Every value is checked by the role's filters (the same functions): a refused value fails the
    task naming the instance.
  - Runs on the controller only; changes nothing.
version_added: "0.3.0"
options:
  instances:
    description: C(llama_server_instances).
    type: list
    elements: dict
    required: true
  models_meta:
    description: Each model's saved metadata, by the model's name.
    type: dict
    default: {}
  help:
    description: The build's --help text as M(llamafleet.fleet.llama_server_host_files) read
      it (C(content), base64).
    type: dict
    default: {}
  profile_args:
    description: The GPU profile's planned args, by instance.
    type: dict
    default: {}
  models_dir:
    description: C(llama_server_models_dir).
    type: str
    required: true
  default_args:
    description: C(llama_server_default_args).
    type: dict
    default: {}
  slots_endpoint:
    description: C(llama_server_slots_endpoint).
    type: bool
    default: false
  chat_template_fix:
    description: C(llama_server_chat_template_fix).
    type: bool
    default: true
  chat_template_dir:
    description: C(llama_server_chat_template_dir).
    type: str
    required: true
  api_key:
    description: C(llama_server_api_key).
    type: bool
    default: true
  client_keys:
    description: C(llama_server_client_keys).
    type: list
    elements: str
    default: []
  monitoring_clients:
    description: The monitoring hosts' client key, where the monitoring group has hosts.
    type: list
    elements: str
    default: []
  ip_allow:
    description: C(llama_server_ip_allow).
    type: list
    elements: str
    default: []
  tls:
    description: C(llama_server_tls).
    type: raw
    default: auto
  tls_sans:
    description: C(llama_server_tls_sans).
    type: list
    elements: str
    default: []
  host_names:
    description: The host's names and addresses its certificates carry (C(ansible_host), the
      inventory name, the FQDN, the host name, the default IPv4 address).
    type: list
    elements: str
    default: []
  backend:
    description: The backend of the build (C(cuda) marks the instances as GPU ones).
    type: str
    default: cpu
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
# as roles/llama_server/tasks/preflight.yml calls it
- name: Resolve the instances
  llamafleet.fleet.llama_server_resolve:
    instances: "{{ llama_server_instances }}"
    models_meta: "{{ _llama_server_models_meta }}"
    models_dir: "{{ llama_server_models_dir }}"
    chat_template_dir: "{{ llama_server_chat_template_dir }}"
  register: _llama_server_resolve
"""

RETURN = r"""
instances:
  description: One mapping per enabled instance (name, unit, host, port, alias, connect_host,
    model_name, model_path, model_sha256, model_meta, argv, environment, api_key, client_keys,
    ip_allow, tls, tls_sans, memlock, chat_template, ignore, gpu).
  returned: success
  type: list
  elements: dict
"""

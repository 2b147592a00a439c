#!/usr/bin/python
"""Documentation of the llama_server_inputs action plugin (plugins/action/llama_server_inputs.py),
the first check of the llama_server role's preflight: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_inputs
short_description: Check the llama_server role's instances and settings in one task
description:
  - >-
    Refuses an instance list whose names are not unique lower-case names (letters, digits,
    dashes) or whose ports are not unique, an instance without a C(model), an environment that
    is not a mapping or holds a name or value C(Environment=) cannot carry, client key names a
    key file cannot have, extra unit lines that are not a list of C([Service]) lines (a section
    header, a newline or another control character would change the unit's structure) and TLS
    settings that do not go together.
  - Each value goes through the filter that later renders it into the unit
    (the filters C(llamafleet.fleet.llamafleet_unit_environment),
    C(llamafleet.fleet.llamafleet_client_keys) and C(llamafleet.fleet.llamafleet_unit_line)), with
    its message.
  - Runs on the controller; reads nothing from the host and changes nothing.
version_added: "0.2.0"
options:
  instances:
    description: C(llama_server_instances).
    type: raw
    required: true
  client_keys:
    description: C(llama_server_client_keys), the client key names of an instance without its own.
    type: raw
    required: true
  unit_extra:
    description: C(llama_server_unit_extra).
    type: raw
    required: true
  tls:
    description: C(ca_cert), C(ca_key), C(sans) and C(days) (the C(llama_server_tls_*) variables).
    type: dict
    required: true
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
# as roles/llama_server/tasks/preflight.yml calls it
- name: Check the instances and the role's settings
  llamafleet.fleet.llama_server_inputs:
    instances: "{{ llama_server_instances }}"
    client_keys: "{{ llama_server_client_keys }}"
    unit_extra: "{{ llama_server_unit_extra }}"
    tls:
      ca_cert: "{{ llama_server_tls_ca_cert }}"
      ca_key: "{{ llama_server_tls_ca_key }}"
      sans: "{{ llama_server_tls_sans }}"
      days: "{{ llama_server_tls_days }}"
"""

RETURN = r"""
msg:
  description: What was checked, or why it is refused.
  returned: always
  type: str
"""

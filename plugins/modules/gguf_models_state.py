#!/usr/bin/python
"""Ansible module: the gguf_models role's one decision on the host (module_utils/gguf_state.py),
run by the gguf_models_state action plugin (plugins/action/gguf_models_state.py), which first
checks the model list on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_models_state
short_description: Decide in one task whether every GGUF model is in place, verified and described
description:
  - >-
    Asks the code of M(llamafleet.fleet.gguf_fetch) and M(llamafleet.fleet.gguf_metadata), in
    check mode, in one run on the host, what the gguf_models role's placing tasks would do: the
    models directory, each model's directory and each of its files (the sha256 file names the
    expected checksum, root owns the file, one link; with O(verify_existing) it is hashed
    again), and each model's saved C(metadata.json).
  - >-
    When nothing would change, returns C(current=true) and, as C(metadata), what the placing
    tasks would have set as the fact C(gguf_models_metadata) (the role sets it from this).
    Otherwise returns
    C(current=false) and the C(reasons): the role then runs its placing tasks, which change what
    must change or fail with their own message (a refusal by a module is a reason here, not a
    failure).
  - Changes nothing on the host, in check mode or not; never reports C(changed).
version_added: "0.2.0"
options:
  models:
    description: The models (C(gguf_models_list)).
    type: list
    elements: dict
    required: true
  dir:
    description: The models directory (C(gguf_models_dir)).
    type: path
    required: true
  takeover_owner:
    description: See M(llamafleet.fleet.gguf_fetch).
    type: str
    default: ""
  verify_existing:
    description: Hash every file in place again.
    type: bool
    default: false
  inspect_command:
    description: C(gguf_models_inspect_command); when set, the placing tasks always decide.
    type: str
    default: ""
  min_free_mb:
    description: See M(llamafleet.fleet.gguf_fetch).
    type: int
    default: 1024
  allow_insecure_transport:
    description: See M(llamafleet.fleet.gguf_fetch).
    type: bool
    default: false
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Decide whether every model is in place
  llamafleet.fleet.gguf_models_state:
    models: "{{ gguf_models_list }}"
    dir: /srv/models
  register: _state

- name: Place the models
  ansible.builtin.include_tasks: install.yml
  when: not _state.current
"""

RETURN = r"""
current:
  description: Whether every model is in place, verified and described as the role leaves it.
  returned: always
  type: bool
reasons:
  description: Why not (each a path and what would change, or a module's message).
  returned: always
  type: list
  elements: str
metadata:
  description: Each model's description (the value of the fact C(gguf_models_metadata)).
  returned: when current
  type: dict
"""

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_state import (
    StateInputError,
    ask_here,
    decide,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "models": {"type": "list", "elements": "dict", "required": True},
            "dir": {"type": "path", "required": True},
            "takeover_owner": {"type": "str", "default": ""},
            "verify_existing": {"type": "bool", "default": False},
            "inspect_command": {"type": "str", "default": ""},
            "min_free_mb": {"type": "int", "default": 1024},
            "allow_insecure_transport": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        decision = decide(dict(module.params), ask_here)
    except StateInputError as e:
        module.fail_json(msg=f"gguf_models_state: {e}")
    module.exit_json(changed=False, **decision)


if __name__ == "__main__":
    main()

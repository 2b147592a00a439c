#!/usr/bin/python
"""Documentation of the llamafleet_plan action plugin (plugins/action/llamafleet_plan.py), which
runs on the controller: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_plan
short_description: Ask llamafleet's memory planner what fits a GPU for one model
description:
  - >-
    Runs llamafleet's memory planner in-process on the controller (what
    C(llamafleet plan --suggest) prints) for a model described as a mapping: which context, KV
    cache types, offload and slots fit O(vram_mib). Nothing is written and nothing runs on the
    managed host.
  - Needs the llamafleet Python package (C(pip install ./validator)) in the Python that runs
    Ansible.
version_added: "0.1.0"
options:
  name:
    description: Named in the result and in errors.
    type: str
    default: model
  model:
    description: The model's metadata and tensors (the gguf_models role's description).
    type: dict
    required: true
  vram_mib:
    description: The GPU's memory in MiB.
    type: int
    required: true
  ctx_size:
    description: The context wanted (at most the model's training context).
    type: int
    default: 204800
  help_text:
    description:
      - The build's C(--help); its KV cache types say whether the TurboQuant types may be proposed
        (without it they are not).
    type: str
  margin_mib:
    description: Memory to keep free, in MiB (default, the planner's).
    type: int
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Plan the first GPU's instance
  llamafleet.fleet.llamafleet_plan:
    name: main
    model: "{{ gguf_models_described['qwen3.6'] }}"
    vram_mib: 16376
  register: plan
"""

RETURN = r"""
fits:
  description: Whether anything fits.
  returned: always
  type: bool
suggestions:
  description: Best first, each the planner's C(--suggest --format json) entry.
  returned: always
  type: list
  elements: dict
args:
  description: The best suggestion as llama_server instance args; absent when nothing fits.
  returned: when something fits
  type: dict
"""

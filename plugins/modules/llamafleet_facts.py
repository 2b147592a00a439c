#!/usr/bin/python
"""Documentation of the llamafleet_facts action plugin (plugins/action/llamafleet_facts.py), the
llamafleet_common role's one task: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_facts
short_description: Gather the facts the llamafleet roles read, where this run has not
description:
  - >-
    Runs M(ansible.builtin.setup) with O(gather_subset) when the host's facts lack the
    distribution or the CPU count (the play did not gather them, and no earlier play of the run
    did), and M(llamafleet.fleet.llamafleet_gpu_facts) when they lack C(llamafleet_gpus) (one
    C(nvidia-smi) query; read-only, so also in check mode).
  - Where both are known, nothing runs on the host.
  - Sets both as host facts, as the two modules do.
version_added: "0.3.0"
options:
  gather_subset:
    description: The C(gather_subset) of M(ansible.builtin.setup).
    type: list
    elements: str
    default: ["!all", "min", "hardware"]
  filter:
    description:
      - The facts kept of those M(ansible.builtin.setup) gathers (its C(filter) option), as fact
        names or shell patterns, with or without C(ansible_). Empty keeps every fact of
        O(gather_subset).
      - C(distribution), C(processor_vcpus) (what this task decides on), C(gather_subset) and
        C(module_setup) are always kept.
      - Ansible copies a host's facts for every task it runs on that host, so fewer facts cost
        the controller less on every task.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command, looked up on C(PATH) unless it is an absolute path.
    type: str
    default: nvidia-smi
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Gather the facts the roles need and list the GPUs
  llamafleet.fleet.llamafleet_facts:
    gather_subset: ["!all", "min", "hardware", "network"]
"""

RETURN = r"""
gathered:
  description: What ran on the host, C(setup) and C(gpus); empty when both were known.
  returned: always
  type: list
  elements: str
ansible_facts:
  description: The facts M(ansible.builtin.setup) gathered and C(llamafleet_gpus), where they ran.
  returned: always
  type: dict
"""

#!/usr/bin/python
"""Documentation of the llamafleet_check action plugin (plugins/action/llamafleet_check.py), which
runs on the controller: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_check
short_description: Check rendered units and Claude Code settings with the llamafleet validator
description:
  - Runs the llamafleet validator in-process on the controller on texts a role rendered or read
    back (units, scripts, instance mappings, Claude Code settings), with facts and the files the
    texts name handed over as mappings. Nothing is written and nothing runs on the managed host.
  - Fails the task, naming the build, when a text is refused (a finding at or above O(fail_on)
    that no configuration or O(skip) suppresses).
  - Needs the llamafleet Python package (C(pip install ./validator)) in the Python that runs
    Ansible.
version_added: "0.1.0"
options:
  items:
    description:
      - One check per item, each a mapping with C(name), C(path), and C(text), C(texts) or
        C(settings) (any of them together); optionally C(kind) (unit, shell, cmd, mapping,
        settings), C(facts) and C(files) (path to text, in memory).
    type: list
    elements: dict
    required: true
  fail_on:
    description: The lowest severity that refuses an item.
    type: str
    choices: [error, warning, info]
    default: error
  config:
    description:
      - A C(.llamafleet.yaml) on the controller; empty for the nearest one from the directory
        ansible-playbook runs in, upwards to the repository's top.
    type: str
    default: ""
  skip:
    description: Rule ids skipped besides the configuration's (a deliberate choice).
    type: list
    elements: str
    default: []
  what:
    description: The word the refusal uses for an item (instance, user, ...).
    type: str
    default: item
  build:
    description: The build named in the refusal (the build whose C(--help) is in the facts).
    type: str
  hint:
    description: Appended to the refusal (how to suppress a deliberate choice).
    type: str
    default: ""
  written:
    description: The texts are already on the host (the refusal says so).
    type: bool
    default: false
  passed_key:
    description:
      - The RV(key) of a check this host passed in this run. When what the check is handed
        has that same key, it is not run again and the task is skipped.
    type: str
    default: ""
  report:
    description:
      - Report the findings of items that were not refused as one warning per item (C(NAME, rule
        ids)), so that a deliberate choice below O(fail_on) stays visible without a task of its own.
    type: bool
    default: false
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: Check a unit before it is written
  llamafleet.fleet.llamafleet_check:
    what: instance
    items:
      - name: main
        path: llama-server-main.service
        text: "{{ lookup('ansible.builtin.template', 'llama-server.service.j2') }}"
        kind: unit
"""

RETURN = r"""
checks:
  description: Per item, its name, path, findings, suppressed findings and whether it was refused.
  returned: when the check ran
  type: list
  elements: dict
refused:
  description: Whether any item was refused.
  returned: when the check ran
  type: bool
config:
  description: The configuration file read, or null.
  returned: when the check ran
  type: str
key:
  description: A sha256 of what the check was handed (the items, O(fail_on), O(config), O(skip)).
  returned: always
  type: str
"""

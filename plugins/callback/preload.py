# Apache-2.0
# ruff: noqa: E402 - Ansible plugins import after their DOCUMENTATION
"""Callback plugin: load the collection's controller-side code once, in ansible-playbook's main
process, before it forks a worker for each task and host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load the collection's filters, action plugins and validator once per run
description:
  - >-
    Ansible runs each task of each host in a process forked from ansible-playbook's main process,
    and what a task's process imports is gone when it ends. The collection's filters and action
    plugins import the llamafleet validator (and read the roles' defaults); without this callback
    every task that uses one imports it again, for every host (some 20 to 40 ms of the
    controller's CPU each time).
  - >-
    With this callback enabled, the main process imports every filter and action plugin of the
    collection, the validator's rules and catalogue, and reads the roles' defaults once, when the
    run starts; each task's process inherits them. Nothing else changes: a run without it does
    the same, more slowly.
  - >-
    It also builds, once in the main process, what Ansible otherwise builds again in every task's
    process that templates anything - the wrappers of the Jinja filters and tests found outside
    collections (ansible.builtin's among them; Ansible scans every such plugin file the first time
    a process looks one up) and the Jinja lexer of Ansible's default template settings (the
    comment at AnsibleEnvironment.lexer in ansible-core asks for exactly this, "pre-generate the
    default cached lexer before forking").
  - >-
    And it makes each template compile once per run instead of once per task and host
    (ansible-core compiles a template every time it renders one): the compiled code is kept for the
    run's other task processes in a directory of the run (plugin_utils/jinja_cache.py says what is
    kept, where, and how it is trusted). C(LLAMAFLEET_JINJA_CACHE=off) turns that off.
  - >-
    A controller without the llamafleet package is not refused here: the first filter or action
    plugin that needs it says what to install.
requirements:
  - enable it in ansible.cfg (C(callbacks_enabled = llamafleet.fleet.preload)) or with
    C(ANSIBLE_CALLBACKS_ENABLED)
"""

import importlib
import pkgutil
from pathlib import Path

from ansible.plugins.callback import CallbackBase

_PLUGINS = Path(__file__).resolve().parents[1]
_PACKAGE = "ansible_collections.llamafleet.fleet.plugins"


def warm_templating() -> list[str]:
    """Build in this process what each task's process would build again: the Jinja filter and
    test plugin wrappers outside collections (one scan of every such plugin file per process) and
    the Jinja lexer of the default settings. Returns what could not be built (nothing breaks: a
    task's process then builds it itself, as without this callback)."""
    failed: list[str] = []
    try:
        from ansible.plugins.loader import filter_loader, test_loader

        filter_loader.get("ansible.builtin.to_json")
        test_loader.get("ansible.builtin.defined")
    except Exception:  # a task's process scans them itself
        failed.append("the Jinja plugin loaders")
    try:
        from ansible.template import Templar, trust_as_template

        Templar(loader=None, variables={"x": 1}).template(trust_as_template("{{ x | string }}"))
    except Exception:  # a task's process makes its lexer itself
        failed.append("the Jinja lexer")
    return failed


def preload() -> list[str]:
    """Import the collection's filter and action plugins and what they import, build the
    validator's rule plan and read the roles' defaults. Returns what could not be loaded (a
    plugin whose import fails here fails with its own message where a task uses it)."""
    failed: list[str] = []
    for kind in ("plugin_utils", "filter", "action"):
        for info in pkgutil.iter_modules([str(_PLUGINS / kind)]):
            name = f"{_PACKAGE}.{kind}.{info.name}"
            try:
                importlib.import_module(name)
            except Exception:  # reported where a task uses the plugin
                failed.append(name)
    try:
        from llamafleet import engine

        engine._plan()  # the rule registry and the catalogue, built once
    except Exception:  # reported by the plugin that needs the validator
        failed.append("llamafleet.engine")
    try:
        fleet = importlib.import_module(f"{_PACKAGE}.filter.llamafleet_fleet")
        roles = _PLUGINS.parent / "roles"
        for role in sorted(p.name for p in roles.iterdir() if (p / "defaults/main.yml").is_file()):
            fleet.role_defaults_of(role)
    except Exception:  # reported by the filter when a playbook reads them
        failed.append("role defaults")
    return failed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "llamafleet.fleet.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._failed = preload() + warm_templating()
        from ansible_collections.llamafleet.fleet.plugins.plugin_utils import jinja_cache

        why = jinja_cache.install()
        if why:
            self._failed.append(f"the compiled-template cache ({why})")

    def v2_playbook_on_start(self, playbook: object) -> None:
        if self._failed:
            self._display.vvv(f"llamafleet.fleet.preload: not loaded: {', '.join(self._failed)}")

"""Action plugin: the llama_server role's checks of its own variables, one task instead of six:
the instance list (unique names and ports, a model each), each instance's environment and client
key names, the extra unit lines and the TLS settings. Each value goes through the filter that
later renders it into the unit (``llamafleet_unit_environment``, ``llamafleet_client_keys``,
``llamafleet_unit_line``), so what is refused here is exactly what the unit could not carry; the
messages are the ones the role's tasks gave.

    - llamafleet.fleet.llama_server_inputs:
        instances: "{{ llama_server_instances }}"
        client_keys: "{{ llama_server_client_keys }}"
        unit_extra: "{{ llama_server_unit_extra }}"
        tls:
          ca_cert: "{{ llama_server_tls_ca_cert }}"
          ca_key: "{{ llama_server_tls_ca_key }}"
          sans: "{{ llama_server_tls_sans }}"
          days: "{{ llama_server_tls_days }}"

Runs on the controller, reads nothing from the host and changes nothing.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.filter.llama_server import (
    client_keys,
    unit_environment,
    unit_line,
)
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import task_args

#: the task's options (plugins/modules/llama_server_inputs.py documents them)
_ARGS = frozenset({"instances", "client_keys", "unit_extra", "tls"})
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")


class InputError(Exception):
    """What the role refuses: the task fails with this message."""


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _int(value: Any) -> int:
    """Jinja's ``int`` filter: 0 for what is not a number."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(str(value).strip()))
        except ValueError:
            return 0


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def _get(inst: Any, key: str, default: Any) -> Any:
    return inst.get(key, default) if isinstance(inst, Mapping) else default


def check_instances(instances: Any) -> None:
    """Unique names (lower-case letters, digits, dashes) and ports, a model each."""
    items = list(instances) if _is_list(instances) else []
    names = [_get(i, "name", "") for i in items]
    ports = [_int(_get(i, "port", 8080)) for i in items]
    ok = (
        _is_list(instances)
        and len(names) == len(set(map(str, names)))
        and len(ports) == len(set(ports))
        and all(isinstance(n, str) and _NAME.match(n) for n in names)
        and all(isinstance(i, Mapping) and "model" in i for i in items)
    )
    if not ok:
        raise InputError(
            "llama_server_instances: every instance needs a unique `name` (lower-case letters, "
            "digits, dashes), a unique `port` and a `model` "
            f"(names {names}, ports {ports})."
        )


def check_environments(instances: list[Any]) -> None:
    """Each environment a mapping, its names and values ones Environment= can carry."""
    wrong = [i for i in instances if not isinstance(_get(i, "environment", {}), Mapping)]
    if wrong:
        each = " ".join(
            f"instance {_json(_get(i, 'name', '?'))} has {_json(_get(i, 'environment', {}))}."
            for i in wrong
        )
        raise InputError(
            "llama_server_instances: the environment of an instance must be a mapping of "
            "variable names to values, e.g. environment: {LLAMA_ARG_THREADS: 8, "
            f'CUDA_VISIBLE_DEVICES: "0"}}; {each}'
        )
    for inst in instances:
        unit_environment(_get(inst, "environment", {}), _get(inst, "name", "?"))


def check_client_keys(instances: list[Any], default: Any) -> None:
    """Each instance's client_keys, else llama_server_client_keys: names a key file can have."""
    for inst in instances:
        names = inst.get("client_keys", default)
        client_keys(names, _get(inst, "name", "?"))


def check_unit_extra(extra: Any) -> None:
    """A list of [Service] lines, each one the unit can carry (no section, no newline)."""
    if not _is_list(extra):
        raise InputError(
            'llama_server_unit_extra must be a list of [Service] lines such as ["Nice=5"]; got '
            f"{_json(extra)}."
        )
    for line in extra:
        unit_line(line, "llama_server_unit_extra")


def check_tls(tls: Mapping[str, Any]) -> None:
    cert, key = str(tls.get("ca_cert") or ""), str(tls.get("ca_key") or "")
    sans = tls.get("sans")
    ok = (
        bool(cert) == bool(key)
        and (not cert or (posixpath.isabs(cert) and posixpath.isabs(key)))
        and _is_list(sans)
        and _int(tls.get("days")) > 0
    )
    if not ok:
        raise InputError(
            "llama_server_tls_ca_cert and llama_server_tls_ca_key go together (absolute paths on "
            f"the server host; got {_json(tls.get('ca_cert'))} and {_json(tls.get('ca_key'))}); "
            "llama_server_tls_sans is a list of DNS names or addresses; llama_server_tls_days a "
            "positive number."
        )


def check(args: Mapping[str, Any]) -> None:
    """Every check, in the order the role's tasks ran them; raises InputError or the filters'
    AnsibleFilterError with the message."""
    instances = args.get("instances")
    check_instances(instances)
    items = list(instances or [])
    check_environments(items)
    check_client_keys(items, args.get("client_keys", []))
    check_unit_extra(args.get("unit_extra"))
    check_tls(args.get("tls") or {})


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = task_args("llama_server_inputs", self._task.args, _ARGS)
        try:
            check(args)
        except (InputError, AnsibleFilterError) as e:
            result.update(failed=True, msg=str(e))
            return result
        result.update(changed=False, msg="the instances and settings can be rendered")
        return result

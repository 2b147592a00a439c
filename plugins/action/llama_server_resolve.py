"""Action plugin: the llama_server role's instances resolved in one task, in Python: for each
enabled instance of llama_server_instances, the model's path and saved metadata, the args (the
role's defaults, the GPU profile's plan, the instance's own), the argv llama-server is started
with, the chat template (fixed where the model's own raises on Claude Code's late system
message), the client keys, the IP filter, TLS and its names, memory locking and the suppressions
its unit carries.

    - llamafleet.fleet.llama_server_resolve:
        instances: "{{ llama_server_instances }}"
        models_meta: "{{ _llama_server_models_meta }}"
        ...
      register: _llama_server_resolve

Returns ``instances``, one mapping per enabled instance (the role's vars/main.yml reads them as
``_llama_server_resolved``), the same as the role's former set_fact loop made of the same
variables (tests/test_llama_server_resolve.py runs both). Every check is the filter the loop used
(the same function, so the same message): a refused value fails the task naming the instance.
Nothing runs on the host; the chat template is checked on the controller, in a child process with
limits, as before.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.filter.llama_server import (
    client_keys,
    llamafleet_argv,
    llamafleet_chat_template_fix,
    llamafleet_instance_ignores,
    model_sha256,
)
from ansible_collections.llamafleet.fleet.plugins.filter.llamafleet_common import (
    connect_host,
    ip_allow,
    tls_on,
    tls_sans,
)
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import task_args

_ARGS = frozenset(
    {
        "instances",
        "models_meta",
        "help",
        "profile_args",
        "models_dir",
        "default_args",
        "slots_endpoint",
        "chat_template_fix",
        "chat_template_dir",
        "api_key",
        "client_keys",
        "monitoring_clients",
        "ip_allow",
        "tls",
        "tls_sans",
        "host_names",
        "backend",
    }
)
_TRUE = {"yes", "on", "1", "true"}
_MLOCK = re.compile(r".*mlock$")
_CHAT_TEMPLATE_ARG = re.compile(r"--chat-template")


def to_bool(value: Any) -> bool:
    """Ansible's ``bool`` filter: true, yes, on, 1 (any case) and the integer 1."""
    if isinstance(value, str):
        return value.lower() in _TRUE
    if isinstance(value, int):
        return str(value).lower() in {"1", "true"}
    return bool(value == 1)


def to_int(value: Any) -> int:
    """Jinja's ``int`` filter (base 10; "42.23" is 42; 0 for what is not a number)."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _unique(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def help_text(raw: Any) -> str:
    """The build's --help text from what llama_server_host_files read (base64), "" without."""
    if not isinstance(raw, Mapping) or "content" not in raw:
        return ""
    try:
        return base64.b64decode(str(raw["content"])).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""


def resolve(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The enabled instances resolved (see the module docstring). AnsibleFilterError from the
    filter that refuses a value."""
    models_meta = p.get("models_meta") or {}
    profile_args = p.get("profile_args") or {}
    models_dir = str(p.get("models_dir"))
    text = help_text(p.get("help"))
    slots: dict[str, Any] = (
        {}
        if to_bool(p.get("slots_endpoint")) or (len(text) > 0 and "--no-slots" not in text)
        else {"slots": False}
    )
    api_key = to_bool(p.get("api_key"))
    names = list(p.get("host_names") or [])
    out = []
    for inst in p.get("instances") or []:
        if not to_bool(inst.get("enabled", True)):
            continue
        name = inst["name"]
        model = inst["model"]
        meta = models_meta.get(model, {}) if isinstance(model, str) else {}
        meta = meta if isinstance(meta, Mapping) else {}
        if isinstance(model, str) and model.startswith("/"):
            model_path = model
        elif "path" in meta:
            model_path = meta["path"]
        else:
            model_path = f"{models_dir}/{model}/{model}.gguf"
        planned = profile_args.get(name, {}) if isinstance(profile_args, Mapping) else {}
        args = {**slots, **dict(p.get("default_args") or {}), **dict(planned or {})}
        args.update(dict(inst.get("args") or {}))
        extra_args = inst.get("extra_args", [])
        own_template = (
            "chat_template" in args
            or "chat_template_file" in args
            or any(_CHAT_TEMPLATE_ARG.match(str(a)) for a in extra_args or [])
        )
        fix_wanted = to_bool(inst.get("chat_template_fix", p.get("chat_template_fix")))
        template = llamafleet_chat_template_fix(
            meta.get("kv", {}), name, fix_wanted and not own_template
        )
        host = inst.get("host", "127.0.0.1")
        mapping = {
            "model": model_path,
            "mmproj": inst.get("mmproj", meta.get("mmproj")),
            "host": host,
            "port": inst.get("port", 8080),
            "alias": inst.get("alias", name),
            "args": args,
            "extra_args": extra_args,
        }
        argv = llamafleet_argv(mapping)
        keys: list[str] = []
        if api_key:
            own = client_keys(inst.get("client_keys", p.get("client_keys")), name)
            keys = client_keys(_unique(own + list(p.get("monitoring_clients") or [])), name)
        out.append(
            {
                "name": name,
                "unit": f"llama-server-{name}.service",
                "host": host,
                "port": to_int(mapping["port"]),
                "alias": mapping["alias"],
                "connect_host": connect_host(host),
                "model_name": model,
                "model_path": model_path,
                "model_sha256": model_sha256(meta, name, model, models_dir),
                "model_meta": meta,
                "argv": argv,
                "environment": inst.get("environment", {}),
                "api_key": api_key,
                "client_keys": keys,
                "ip_allow": ip_allow(inst.get("ip_allow", p.get("ip_allow")), name, host),
                "tls": (to_bool(inst["tls"]) if "tls" in inst else tls_on(p.get("tls"), host)),
                "tls_sans": tls_sans([host, *names, *list(p.get("tls_sans") or [])], name),
                "memlock": "--mlock" in argv or bool(_MLOCK.match(str(args.get("load_mode", "")))),
                "chat_template": {
                    "path": (
                        f"{p.get('chat_template_dir')}/{name}.jinja"
                        if template["action"] == "fixed"
                        else ""
                    ),
                    "text": template["text"],
                    "sha256": template["sha256"],
                    "change": template["change"],
                    "original": template["kind"],
                },
                "ignore": llamafleet_instance_ignores(inst.get("ignore", {}), name),
                "gpu": p.get("backend") == "cuda",
            }
        )
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = task_args("llama_server_resolve", self._task.args, _ARGS)
        try:
            instances = resolve(args)
        except AnsibleFilterError as e:
            raise AnsibleActionFail(str(e)) from None
        except (KeyError, TypeError, AttributeError) as e:
            raise AnsibleActionFail(
                f"llama_server_resolve: llama_server_instances is not a list of instances "
                f"(each a mapping with a name and a model): {type(e).__name__}: {e}"
            ) from None
        result.update(changed=False, instances=instances)
        return result

"""Filters that render llama-server units with the llamafleet package (one renderer for the unit
file and for the validator's preflight), and that refuse any value that could change the unit's
structure: a newline in a rendered value would start a new line (a `[Service]` section, an
`ExecStartPre=+...` run as root), so every value the template renders goes through one of them.
Also the instance-level facts the validator computes: `ignore:` as suppression comments, the
chat template fixed for Claude Code, the Claude-Code-shaped gate requests, the per-slot context.
The address decisions (IPAddressAllow=, TLS on or off, certificate names) are the llamafleet_common
role's filters, on the validator's address classifier."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.module_utils.api_key import (
    InvalidKeyError,
    check_slurped,
)
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.argv import parse_argv_list
    from llamafleet.chat_template import (
        RAISES,
        TemplateFixError,
        classify,
        fix_late_system,
        jinja2_available,
        model_template,
    )
    from llamafleet.claude_request import gate_bodies
    from llamafleet.errors import InputError
    from llamafleet.preflight import instance_ignores
    from llamafleet.rules.cross import slot_context_of_argv
    from llamafleet.sources import render_argv
    from llamafleet.units import UNIT_CONTROL, unit_value_problem
except ImportError as exc:  # pragma: no cover - reported when the filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _refuse_control(text: str, purpose: str) -> str:
    """``text`` unless it holds a control character or line end (llamafleet.units.UNIT_CONTROL,
    the one definition every role's unit values are checked against)."""
    _need_llamafleet()
    m = UNIT_CONTROL.search(text)
    if m:
        raise AnsibleFilterError(
            f"{purpose}: {text!r} contains the control character {m.group(0)!r}; a value "
            "rendered into a systemd unit must not contain newlines or other control characters "
            "(it would add lines to the unit)"
        )
    return text


def unit_value(value: Any, purpose: str = "a value of the unit") -> str:
    """A value rendered into a unit line (or a comment line) as it is: refused (the task fails)
    when it holds a control character, or ends in a backslash (which would continue the line into
    the next one)."""
    _need_llamafleet()
    text = str(value)
    problem = unit_value_problem(text)
    if problem:
        raise AnsibleFilterError(f"{purpose}: {problem}")
    return text


def unit_line(line: Any, purpose: str = "llama_server_unit_extra") -> str:
    """An extra line for the [Service] section: no control characters, no trailing backslash,
    and no section header (a line starting with `[` would move the lines after it elsewhere)."""
    if not isinstance(line, str):
        raise AnsibleFilterError(
            f"{purpose}: {line!r} is not a string; give unit lines such as 'Nice=5'"
        )
    text = unit_value(line, purpose)
    if text.lstrip().startswith("["):
        raise AnsibleFilterError(
            f"{purpose}: {text!r} starts a section; extra lines belong to [Service] "
            "(put other sections into a drop-in you own)"
        )
    return text


def unit_environment(environment: Any, instance: str = "?") -> list[str]:
    """`Environment=` values of an instance: one double-quoted "KEY=VALUE" per entry of a
    mapping (backslash, double quote and % escaped for systemd)."""
    purpose = f"instance {instance!r}: environment"
    if not isinstance(environment, Mapping):
        raise AnsibleFilterError(
            f"{purpose} must be a mapping of variable names to values, e.g. "
            "{LLAMA_ARG_THREADS: 8, CUDA_VISIBLE_DEVICES: '0'}; got "
            f"{type(environment).__name__} {environment!r}"
        )
    out = []
    for key, value in environment.items():
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            raise AnsibleFilterError(
                f"{purpose}: {key!r} is not a variable name (letters, digits and _, not starting "
                "with a digit)"
            )
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            text = str(value)
        else:
            raise AnsibleFilterError(
                f"{purpose}: the value of {key} must be a string or number, not "
                f"{type(value).__name__} {value!r}"
            )
        pair = _refuse_control(f"{key}={text}", f"{purpose}: {key}")
        out.append('"' + pair.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"')
    return out


_CLIENT_NAME = re.compile(r"[A-Za-z0-9_.@/-]{1,200}\Z")


def client_key_file(name: Any) -> str:
    """The file name of a client key in `<instance>.clients/`: the name with `/` replaced by
    `__`, plus `.key`."""
    return str(name).replace("/", "__") + ".key"


def api_key(content: Any, where: Any = "the key file") -> str:
    """The key of a key file as slurp read it (``content``, base64) on a server host, checked as
    the llama_server role checks its own (module_utils/api_key.py): it goes into a client's
    settings, a credential or an HTTP header here."""
    try:
        key: str = check_slurped(str(content), str(where))
    except InvalidKeyError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return key


def key_instances(resolved: Any) -> list[dict[str, Any]]:
    """What the llama_server_keys module needs of the resolved instances: each one's name and
    client names (not its model metadata or template, which would travel to the host)."""
    return [
        {"name": str(i["name"]), "client_keys": list(i.get("client_keys") or [])} for i in resolved
    ]


def template_files(resolved: Any) -> list[dict[str, Any]]:
    """What the llama_server_units module writes of the instances' fixed chat templates: name,
    path and text of each."""
    return [
        {
            "name": str(i["name"]),
            "path": str(i["chat_template"]["path"]),
            "content": str(i["chat_template"]["text"]),
        }
        for i in resolved
    ]


def client_keys(names: Any, instance: str = "?") -> list[str]:
    """The client names of an instance (`client_keys`, else llama_server_client_keys): a list of
    unique names of letters, digits and `_ . @ / -` (such as `host/user`), each one its own key
    file, so two names may not map to the same file (`a/b` and `a__b`)."""
    purpose = f"instance {instance!r}: client_keys (llama_server_client_keys)"
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise AnsibleFilterError(
            f"{purpose} must be a list of client names such as ['workstation/alice']; got {names!r}"
        )
    out: list[str] = []
    files: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str) or not _CLIENT_NAME.match(name):
            raise AnsibleFilterError(
                f"{purpose}: {name!r} is not a client name (1 to 200 letters, digits and "
                "_ . @ / -, e.g. 'workstation/alice')"
            )
        f = client_key_file(name)
        if files.get(f) == name:
            raise AnsibleFilterError(f"{purpose}: {name!r} is listed twice")
        if f in files:
            raise AnsibleFilterError(
                f"{purpose}: {name!r} and {files[f]!r} would share the key file {f} "
                "(a / becomes __); give each client one distinct name"
            )
        files[f] = name
        out.append(name)
    return out


def _need_llamafleet() -> None:
    """Fail the task, saying how to fix it, when the llamafleet package cannot be imported."""
    require(_IMPORT_ERROR, AnsibleFilterError)


def llamafleet_argv(instance: dict[str, Any]) -> list[str]:
    """Render an instance mapping (model, host, port, args, extra_args) to an argv list."""
    _need_llamafleet()
    return render_argv(instance)


def systemd_quote(argv: Any, purpose: str = "ExecStart=") -> str:
    """Quote words for an ExecStart= line: specifiers (%) and variables ($) are escaped. A word
    with a control character is refused (the task fails), and so is a string instead of a list."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(f"{purpose}: expected a list of words, got {argv!r}")
    out = []
    for word in argv:
        w = _refuse_control(str(word), f"{purpose} word").replace("%", "%%").replace("$", "$$")
        if w and all(c in _SAFE for c in w):
            out.append(w)
        else:
            out.append('"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return " ".join(out)


#: Terminal escapes systemd-analyze prints on a terminal or with SYSTEMD_COLORS set: CSI colour
#: codes (ESC [ ... m) and OSC 8 hyperlinks around the unit name (ESC ] 8;;file://... BEL), whose
#: URL has a ':' of its own.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
#: The summary line of `systemd-analyze security UNIT`, e.g.
#: "→ Overall exposure level for llama-server-x.service: 1.2 OK :-)" (the arrow is "->" without
#: UTF-8, the smiley an emoji with it); a unit name may itself contain ':'.
_EXPOSURE = re.compile(
    r"Overall exposure level for .+?:\s*([0-9]+(?:[.][0-9]+)?)(?:\s+([A-Z][A-Z_]*)\b)?"
)


def llamafleet_exposure_score(text: Any) -> str:
    """The overall exposure score and level that `systemd-analyze security UNIT` prints last:
    "1.2 OK", "5.5 MEDIUM", "7.9 EXPOSED", "9.6 UNSAFE" (with or without the arrow, colour codes
    or the smiley that follow), the score alone when no level word follows it, or "n/a" when the
    output has no such line (the command failed or is missing)."""
    plain = _ANSI.sub("", "" if text is None else str(text))
    found = _EXPOSURE.findall(plain)
    if not found:
        return "n/a"
    score, level = found[-1]
    return f"{score} {level}" if level else score


def llamafleet_instance_ignores(ignore: Any, instance: str = "?") -> list[str]:
    """An instance's ``ignore: {RULE_ID: reason}`` as the validator's suppression comments for its
    unit (ids checked against the catalogue; a reason with a line break is refused: it goes into
    the unit)."""
    _need_llamafleet()
    try:
        return instance_ignores(ignore, instance)
    except InputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def llamafleet_chat_template_fix(
    metadata: Any, instance: str = "?", enabled: bool = True
) -> dict[str, Any]:
    """From a model's GGUF metadata (``kv`` of the gguf_models role): ``{"action": "none"|"fixed"|
    "unfixable", "kind": the original's classification, "detail", "change", "key", "text",
    "sha256"}``. ``text`` is the template to write beside the unit (only when ``fixed``)."""
    _need_llamafleet()
    none = {
        "action": "none",
        "kind": "",
        "detail": "",
        "change": "",
        "key": "",
        "text": "",
        "sha256": "",
    }
    if not isinstance(metadata, Mapping) or not enabled or not jinja2_available():
        return none
    found = model_template(metadata)
    if found is None:
        return none
    template, key = found
    before = classify(template, isolate=True)
    out = dict(none, kind=before.kind, detail=before.detail, key=key)
    if before.kind != RAISES:
        return out
    try:
        fixed, change = fix_late_system(template, isolate=True)
    except TemplateFixError as exc:
        return dict(out, action="unfixable", change=f"instance {instance}: {exc}")
    return dict(
        out,
        action="fixed",
        change=change,
        text=fixed,
        sha256=hashlib.sha256(fixed.encode("utf-8")).hexdigest(),
    )


def llamafleet_claude_code_requests(model: Any, max_tokens: int = 8) -> list[dict[str, Any]]:
    """Claude Code's first request (recorded from the real CLI: system blocks, a few of its tools,
    thinking, the user's prompt and the late system message after it) and the same session's next
    turn, for the instance alias ``model``: the smoke request sends the first, the rollout's
    prompt-cache gate both (llamafleet.claude_request.gate_bodies)."""
    _need_llamafleet()
    try:
        return gate_bodies(str(model), int(max_tokens))
    except InputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def llamafleet_slot_context(argv: Any, model_meta: Any = None) -> int:
    """The tokens one request may use on an instance (llama.cpp's per-slot context) from its argv
    and the gguf_models description of its model; 0 when unknown. Clients size their compaction
    window from it (the claude_code role: ``llama_server_endpoints[...].ctx_per_slot``)."""
    _need_llamafleet()
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(f"llamafleet_slot_context: expected an argv list, got {argv!r}")
    meta = model_meta if isinstance(model_meta, Mapping) and model_meta else None
    return slot_context_of_argv([str(a) for a in argv], meta) or 0


def llamafleet_kv_types(argv: Any) -> dict[str, str]:
    """The KV cache types of an instance's argv, ``{"k": ..., "v": ...}``, as llama-server takes
    them (``--cache-type-k``/``-ctk``, ``--cache-type-v``/``-ctv``, else f16: llama.cpp's
    default)."""
    _need_llamafleet()
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(f"llamafleet_kv_types: expected an argv list, got {argv!r}")
    config = parse_argv_list([str(a) for a in argv])
    return {
        "k": config.value("--cache-type-k") or "f16",
        "v": config.value("--cache-type-v") or "f16",
    }


#: what the gguf_models role's fact holds beside the saved metadata.json document
_DESCRIBED_ONLY = ("dir", "path")


_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


def model_sha256(meta: Any, instance: str = "?", model: str = "?", models_dir: str = "") -> str:
    """The model checksum of one instance from its saved metadata (``sha256``, a string or the
    first of a list; "" when the metadata has none), refused unless it is 64 lower-case hex
    digits: it goes into a comment line of the unit, and a newline in a metadata.json would start
    a new line of it."""
    if not isinstance(meta, Mapping) or meta.get("sha256") is None:
        return ""
    found = meta["sha256"]
    if isinstance(found, list):
        found = found[0] if found else ""
    text = found if isinstance(found, str) else str(found)
    if text and not _SHA256.match(text):
        raise AnsibleFilterError(
            "A model checksum from the saved metadata is not 64 lower-case hex digits (it goes into"
            f" the unit): instance {instance}: the sha256 of model {model} in"
            f" {models_dir}/{model}/metadata.json (or in the gguf_models role's"
            f" gguf_models_metadata fact) must be 64 lower-case hex digits; got {json.dumps(text)}."
        )
    return text


def llamafleet_preflight_key(inputs: Any) -> str:
    """A sha256 of the values the preflight read from the role's variables (``inputs``: a mapping
    of each variable the role documents in meta/argument_specs.yml to its value, templated), so
    that the same role included again in a run with any other value (another instance list, one
    changed flag, another threshold) is resolved and checked again. JSON with sorted keys; a value
    JSON cannot hold (a date, a custom object) goes in by its ``repr``."""
    if not isinstance(inputs, Mapping):
        kind = type(inputs).__name__
        raise AnsibleFilterError(
            f"llamafleet_preflight_key: expected a mapping of variables, got {kind}"
        )
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def llamafleet_preflight_current(
    done: Any, build_name: Any, resolved: Any, gguf_models_metadata: Any, key: Any = None
) -> bool:
    """Whether this host's preflight of this run still holds, so the role need not run it again.

    ``done`` is what the preflight recorded when it finished: ``{"build": llama_cpp_build.name
    ("" when none), "key": llamafleet_preflight_key of the role's variables}``. It holds when

    - the build is the same (``build_name``) and the role's variables are the same (``key``, the
      key of their values now): the same role included again with ``cache_ram: 0`` is checked
      again, and refused;
    - what the gguf_models role has said since about the models of the resolved instances
      (``_llama_server_resolved``; its fact ``gguf_models_metadata``) is what the preflight used:
      each model's saved document as the instance's ``model_meta``, and its file's path as the
      instance's ``model_path``.

    Everything else the preflight reads is the same for the whole run: the build's directory
    (named by its content), the GPU facts (gathered once per run).

    The rollout checks every host's units in a first play and converges them in the next
    (playbooks/rollout.yml): when nothing it read changed in between, the converge reuses the
    first play's resolved instances and check instead of resolving and checking them again."""
    if not isinstance(done, Mapping) or not isinstance(build_name, str):
        return False
    if done.get("build") != build_name:
        return False
    if not isinstance(key, str) or not key or done.get("key") != key:
        return False
    if not isinstance(resolved, list) or not all(isinstance(i, Mapping) for i in resolved):
        return False
    facts = gguf_models_metadata or {}
    if not isinstance(facts, Mapping):
        return False
    for inst in resolved:
        described = facts.get(inst.get("model_name"))
        if described is None:
            continue  # not placed by gguf_models in this run: the preflight read its file
        used = inst.get("model_meta")
        if not isinstance(described, Mapping) or not isinstance(used, Mapping):
            return False
        if "path" in described and described["path"] != inst.get("model_path"):
            return False
        for name, value in described.items():
            if name not in _DESCRIBED_ONLY and used.get(name) != value:
                return False
    return True


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_kv_types": llamafleet_kv_types,
            "llamafleet_preflight_current": llamafleet_preflight_current,
            "llamafleet_preflight_key": llamafleet_preflight_key,
            "llamafleet_argv": llamafleet_argv,
            "llamafleet_systemd_quote": systemd_quote,
            "llamafleet_unit_value": unit_value,
            "llamafleet_unit_line": unit_line,
            "llamafleet_unit_environment": unit_environment,
            "llamafleet_client_keys": client_keys,
            "llamafleet_client_key_file": client_key_file,
            "llamafleet_key_instances": key_instances,
            "llamafleet_api_key": api_key,
            "llamafleet_template_files": template_files,
            "llamafleet_exposure_score": llamafleet_exposure_score,
            "llamafleet_instance_ignores": llamafleet_instance_ignores,
            "llamafleet_chat_template_fix": llamafleet_chat_template_fix,
            "llamafleet_claude_code_requests": llamafleet_claude_code_requests,
            "llamafleet_slot_context": llamafleet_slot_context,
            "llamafleet_model_sha256": model_sha256,
        }

"""Action plugin: run the llamafleet validator in-process on the controller, on texts a role
rendered or read back (units, Claude Code settings), with facts and the files the texts name
handed over as mappings. Nothing is written to disk and nothing runs on the managed host. Fails
the task, naming the build, when a text is refused; this plugin is the one place that words the
refusal.

    - llamafleet_check:
        what: instance              # the word used in the refusal
        build: b9079-...            # named in the refusal (the build whose --help is in the facts)
        items:                      # one check per item; the texts of an item are checked together
          - name: main
            path: llama-server-main.service   # the name findings give the text
            text: "..."             # a unit, script, instance mapping or settings file
            kind: unit              # optional: unit, shell, cmd, mapping, settings (else detected)
            facts: {...}            # the shape of a facts file, every fact inline
            files: {PATH: TEXT}     # files the texts name (a key file, a chat template), in memory
            settings:               # Claude Code settings checked with the text (cross-file rules)
              - {path: /home/a/.claude/settings.json, text: "...", scope: user, mode: "0600"}
        fail_on: error              # error | warning | info
        config: ""                  # a .llamafleet.yaml on the controller; "" = the nearest one
                                    # from the directory ansible-playbook runs in (see the README)
        skip: []                    # rule ids skipped besides the config's (a deliberate choice)
        hint: ""                    # appended to the refusal (how to suppress a deliberate choice)
        written: false              # true: the texts are already on the host (the refusal says so)

An item needs ``text`` or ``settings`` (or both). A settings entry's ``mode`` is the file's
permission bits on its host (an int, or an octal string such as "0644"; absent or null: unknown,
and CC008, a key readable by others, stays silent). Returns ``checks`` (per item: name, path,
findings, suppressed, refused; not ``results``, which Ansible reserves for loops), ``refused``
(whether any item was) and ``config`` (the file read, or null). Check mode changes nothing here:
the check runs the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

_ARGS = frozenset({"items", "fail_on", "config", "skip", "what", "build", "hint", "written"})
_ITEM_KEYS = frozenset({"name", "path", "text", "kind", "facts", "files", "settings"})
_KINDS = frozenset({"unit", "shell", "cmd", "mapping", "settings", "argv"})
_SCOPES = frozenset({"user", "project", "local", "managed"})


class CheckError(Exception):
    """Bad input from the playbook (not a finding): the task fails with this message."""


def _texts_of(name: str, value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise CheckError(f"item {name}: {what} must map paths to texts")
    return dict(value)


def check_items(
    items: Any,
    fail_on: str = "error",
    config_path: str | None = None,
    skip: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Check each item (see the module docstring) on its own with the catalogue; returns one
    ``{name, path, findings, suppressed, refused}`` per item. Raises CheckError on bad input."""
    from llamafleet.catalogue import catalogue
    from llamafleet.engine import Config, load_config
    from llamafleet.errors import SEVERITIES, InputError

    if not isinstance(items, list):
        raise CheckError("items must be a list")
    if fail_on not in SEVERITIES:
        raise CheckError(f"fail_on {fail_on!r}: one of {', '.join(SEVERITIES)}")
    try:
        config = load_config(config_path) if config_path else Config()
    except InputError as exc:
        raise CheckError(str(exc)) from exc
    known = catalogue()
    for rid in skip:
        if rid not in known:
            raise CheckError(
                f"skip: {rid!r} is not a rule id of the catalogue (`llamafleet rules`)"
            )
    config.skip |= set(skip)
    return [_check_item(item, config, fail_on) for item in items]


def _check_item(item: Any, config: Any, fail_on: str) -> dict[str, Any]:
    """One item of check_items: its texts checked together, in memory."""
    from llamafleet.engine import Inputs, add_file, exit_code, run
    from llamafleet.errors import InputError
    from llamafleet.facts import apply_facts
    from llamafleet.refs import NEVER, ReferencedFiles

    name, text, settings, kind, facts_map = _item_parts(item)
    files = _texts_of(name, item.get("files"), "files")
    path = str(item.get("path") or name)
    # the files the texts name (a key, a chat template): read from memory, nothing from disk
    inputs = Inputs(referenced=ReferencedFiles(contents=files) if files else NEVER)
    try:
        facts = apply_facts(facts_map, source=f"facts of {name}")
        if text is not None:
            add_file(inputs, path, text, kind=kind, mode=None)
        for sf in settings:
            scope, where, mode = _settings_entry(name, sf)
            add_file(inputs, where, sf["text"], kind="settings", scope=scope, mode=mode)
        result = run(inputs, facts, config)
    except InputError as exc:
        raise CheckError(f"item {name}: {exc}") from exc
    return {
        "name": name,
        "path": path,
        "findings": [f.as_dict() for f in result.findings],
        "suppressed": result.suppressed,
        "refused": exit_code(result, fail_on) == 1,
    }


def _item_parts(item: Any) -> tuple[str, str | None, list[Any], str | None, Mapping[str, Any]]:
    """(name, text, settings, kind, facts) of an item, checked; CheckError names the item."""
    if not isinstance(item, Mapping):
        raise CheckError(f"each item must be a mapping; got {item!r}")
    name = str(item.get("name") or "?")
    unknown = sorted(set(item) - _ITEM_KEYS)
    if unknown:
        raise CheckError(f"item {name}: unknown key(s) {', '.join(unknown)}")
    text = item.get("text")
    settings = item.get("settings") or []
    if text is not None and not isinstance(text, str):
        raise CheckError(f"item {name}: text must be a string")
    if not isinstance(settings, list):
        raise CheckError(f"item {name}: settings must be a list of {{path, text, scope}}")
    if text is None and not settings:
        raise CheckError(f"item {name}: no text to check (give text or settings)")
    kind = item.get("kind")
    if kind is not None and kind not in _KINDS:
        raise CheckError(f"item {name}: kind {kind!r}: one of {', '.join(sorted(_KINDS))}")
    facts_map = item.get("facts") or {}
    if not isinstance(facts_map, Mapping):
        raise CheckError(f"item {name}: facts must be a mapping")
    return name, text, settings, kind, facts_map


def _settings_entry(name: str, sf: Any) -> tuple[str, str, int | None]:
    """(scope, path, mode) of one settings entry of item `name`, checked."""
    if not isinstance(sf, Mapping) or not isinstance(sf.get("text"), str):
        raise CheckError(f"item {name}: each settings entry needs a text")
    scope = sf.get("scope") or "user"
    if scope not in _SCOPES:
        known_scopes = ", ".join(sorted(_SCOPES))
        raise CheckError(f"item {name}: settings scope {scope!r}: one of {known_scopes}")
    where = str(sf.get("path") or f"{scope} settings")
    return scope, where, _mode(sf.get("mode"), f"item {name}: {where}")


def _mode(value: Any, where: str) -> int | None:
    """A settings file's permission bits: an int, an octal string ("0644"), or None (unknown)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise CheckError(f"{where}: mode {value!r} is not a file mode")
    try:
        mode = value if isinstance(value, int) else int(str(value).strip(), 8)
    except ValueError:
        raise CheckError(
            f"{where}: mode {value!r} is not an octal file mode such as 0600"
        ) from None
    if not 0 <= mode <= 0o7777:
        raise CheckError(f"{where}: mode {value!r} is out of range (0000 to 7777)")
    return mode


def refusal(
    checks: Sequence[Mapping[str, Any]],
    what: str,
    build: str | None = None,
    hint: str = "",
    written: bool = False,
) -> str:
    """The message that stops a play: each refused item, each finding with its place and fix."""
    lines = []
    on = f" for build {build}" if build else ""
    state = (
        "as written on the host: fix it and run again"
        if written
        else "nothing was changed on the host"
    )
    for c in checks:
        if not c["refused"]:
            continue
        lines.append(f"llamafleet check refused {what} {c['name']}{on} ({state}):")
        for f in c["findings"]:
            lines.append(f"- {f['id']} [{f['severity']}] {f['file']}:{f['line']}: {f['message']}")
            if f.get("fix"):
                lines.append(f"    fix: {f['fix']}")
    if lines:
        lines.append("Run `llamafleet explain ID` for details." + (f" {hint}" if hint else ""))
    return "\n".join(lines)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = _ARGS

    def run(self, tmp: Any = None, task_vars: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        try:
            from llamafleet.config_file import find_config
        except ImportError as exc:
            raise AnsibleActionFail(
                "the llamafleet Python package is not importable by the Python that runs Ansible "
                f"(pip install ./validator into it): {exc}"
            ) from exc
        args = self._task.args
        unknown = sorted(set(args) - _ARGS)
        if unknown:
            raise AnsibleActionFail(f"llamafleet_check: unknown option(s) {', '.join(unknown)}")
        skip = args.get("skip") or []
        if isinstance(skip, str) or not isinstance(skip, list):
            raise AnsibleActionFail("llamafleet_check: skip must be a list of rule ids")
        config = str(args.get("config") or "") or find_config(os.getcwd())
        try:
            checks = check_items(
                args.get("items") or [],
                str(args.get("fail_on") or "error"),
                config,
                [str(s).strip().upper() for s in skip],
            )
        except CheckError as exc:
            raise AnsibleActionFail(f"llamafleet_check: {exc}") from exc
        result["changed"] = False
        result["config"] = config
        result["checks"] = checks
        result["refused"] = any(c["refused"] for c in checks)
        msg = refusal(
            checks,
            str(args.get("what") or "item"),
            args.get("build"),
            str(args.get("hint") or ""),
            boolean(args.get("written", False), strict=False),
        )
        if msg:
            result["failed"] = True
            result["msg"] = msg
        return result

"""The validator in-process, for Ansible's action plugins on the controller: check texts the
roles rendered or read back (units, Claude Code settings) with facts and the files they name
handed over as mappings (:func:`check_items`), and word the refusal that stops a play
(:func:`refusal`). The ``llamafleet_check`` action plugin of the llamafleet_common role is
argument checking and one call to these.

One path for every preflight: nothing is written to disk, no subprocess runs, and the facts are
inline (a path in them would name a file of the managed host, not of the controller)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamafleet.errors import SEVERITIES, InputError

_RULE_ID = re.compile(r"[A-Z]{2}[0-9]{3}")
_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


class PreflightError(InputError):
    """Bad input from the playbook (not a finding): the task fails with this message."""


@dataclass
class Checked:
    """The outcome for one rendered text."""

    name: str
    path: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    suppressed: int = 0
    refused: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "findings": self.findings,
            "suppressed": self.suppressed,
            "refused": self.refused,
        }


def instance_ignores(ignore: Any, instance: str = "?") -> list[str]:
    """An instance's ``ignore: {RULE_ID: reason}`` as suppression comment bodies for its unit
    (``llamafleet: ignore-file[LS010] reason``), one per rule, sorted. A rule id the catalogue
    does not know, an empty reason, or a reason with a line break is refused: the text goes into
    a comment line of a systemd unit."""
    from llamafleet.catalogue import catalogue

    where = f"instance {instance}: ignore"
    if ignore is None:
        return []
    if not isinstance(ignore, Mapping):
        raise PreflightError(
            f"{where} must be a mapping of rule id to reason, e.g. "
            f'{{LS010: "mmproj is on the CPU on purpose"}}; got {ignore!r}'
        )
    known = catalogue()
    out = []
    for key in sorted(ignore, key=str):
        rid = str(key).strip().upper()
        reason = ignore[key]
        if not _RULE_ID.fullmatch(rid) or rid not in known:
            raise PreflightError(
                f"{where}: {key!r} is not a rule id of the catalogue "
                "(`llamafleet rules` lists them)"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise PreflightError(
                f"{where}: {rid} needs a reason "
                "(a non-empty string saying why the choice is deliberate)"
            )
        if _CONTROL.search(reason):
            raise PreflightError(
                f"{where}: the reason for {rid} must be one line without control characters"
            )
        out.append(f"llamafleet: ignore-file[{rid}] {reason.strip()}")
    return out


#: The keys of an item (see :func:`check_items`).
ITEM_KEYS = frozenset({"name", "path", "text", "kind", "texts", "facts", "files", "settings"})
#: The kinds a text may be given as (else detected from its path and content).
KINDS = frozenset({"unit", "shell", "cmd", "mapping", "settings", "argv", "haproxy"})
#: The scopes of a Claude Code settings file.
SCOPES = frozenset({"user", "project", "local", "managed"})


def check_items(
    items: Any,
    fail_on: str = "error",
    config_path: str | None = None,
    skip: Sequence[str] = (),
) -> list[Checked]:
    """Check each item on its own with the catalogue; the texts of one item are checked together
    (so the cross-file rules compare a client's settings with the units of its server). An item:

    * ``name``: named in the refusal; ``path``: the name findings give ``text`` (default: name);
    * ``text``, ``kind``: a unit, script, instance mapping or settings file, and its kind (one of
      :data:`KINDS`; else detected);
    * ``texts``: more texts checked with it, each ``{path, text, kind?}`` (the units of the
      server a client points at);
    * ``settings``: Claude Code settings, each ``{path, text, scope?, mode?}``: ``scope`` one of
      :data:`SCOPES` (default user), ``mode`` the file's permission bits on its host (an int or
      an octal string such as "0644"; absent or null: unknown, and CC008 stays silent);
    * ``facts``: a mapping of the shape of a facts file, every fact inline;
    * ``files``: ``{path: text}`` of files the texts name (a key, a chat template), read from
      memory: nothing the texts name is opened.

    An item needs ``text``, ``texts`` or ``settings``. ``config_path``: a ``.llamafleet.yaml``
    (skip, severity, fail_on) on the controller, or ``None``; ``skip``: rule ids skipped besides
    the config's (any case). Bad input raises :class:`PreflightError` naming the item and the
    fix."""
    from llamafleet.catalogue import catalogue
    from llamafleet.engine import Config, load_config

    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise PreflightError("items must be a list")
    if fail_on not in SEVERITIES:
        raise PreflightError(f"fail_on {fail_on!r}: one of {', '.join(SEVERITIES)}")
    try:
        config = load_config(config_path) if config_path else Config()
    except InputError as exc:
        raise PreflightError(str(exc)) from exc
    if isinstance(skip, (str, bytes)):
        raise PreflightError("skip must be a list of rule ids")
    known = catalogue()
    rids = {str(rid).strip().upper() for rid in skip}
    for rid in sorted(rids):
        if rid not in known:
            raise PreflightError(
                f"skip: {rid!r} is not a rule id of the catalogue (`llamafleet rules`)"
            )
    config.skip |= rids
    return [_check_item(item, config, fail_on) for item in items]


def _check_item(item: Any, config: Any, fail_on: str) -> Checked:
    """One item of check_items: its texts checked together, in memory."""
    from llamafleet.engine import Inputs, add_file, exit_code, run
    from llamafleet.facts import apply_facts
    from llamafleet.refs import ReferencedFiles

    name, texts, settings, facts_map = _item_parts(item)
    files = _texts_of(name, item.get("files"), "files")
    path = str(item.get("path") or name)
    # the files the texts name (a key, a chat template): read from memory, nothing from disk
    inputs = Inputs(referenced=ReferencedFiles(contents=files or None, complete=True))
    try:
        facts = apply_facts(facts_map, source=f"facts of {name}")
        for where, text, kind in texts:
            add_file(inputs, where, text, kind=kind, mode=None)
        for scope, where, text, mode in settings:
            add_file(inputs, where, text, kind="settings", scope=scope, mode=mode)
        result = run(inputs, facts, config)
    except InputError as exc:
        raise PreflightError(f"item {name}: {exc}") from exc
    return Checked(
        name=name,
        path=path,
        findings=[f.as_dict() for f in result.findings],
        suppressed=result.suppressed,
        refused=exit_code(result, fail_on) == 1,
    )


_Text = tuple[str, str, str | None]
_Settings = tuple[str, str, str, int | None]


def _item_parts(
    item: Any,
) -> tuple[str, list[_Text], list[_Settings], Mapping[str, Any]]:
    """(name, texts as (path, text, kind), settings as (scope, path, text, mode), facts) of an
    item, checked; PreflightError names the item."""
    if not isinstance(item, Mapping):
        raise PreflightError(f"each item must be a mapping; got {item!r}")
    name = str(item.get("name") or "?")
    unknown = sorted(set(item) - ITEM_KEYS, key=str)
    if unknown:
        raise PreflightError(f"item {name}: unknown key(s) {', '.join(map(str, unknown))}")
    texts: list[_Text] = []
    text = item.get("text")
    if text is not None:
        if not isinstance(text, str):
            raise PreflightError(f"item {name}: text must be a string")
        texts.append((str(item.get("path") or name), text, _kind(name, item.get("kind"))))
    more = item.get("texts") or []
    if not isinstance(more, list):
        raise PreflightError(f"item {name}: texts must be a list of {{path, text, kind}}")
    for entry in more:
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("text"), str)
            or not entry.get("path")
        ):
            raise PreflightError(f"item {name}: each texts entry needs a path and a text")
        texts.append((str(entry["path"]), entry["text"], _kind(name, entry.get("kind"))))
    raw_settings = item.get("settings") or []
    if not isinstance(raw_settings, list):
        raise PreflightError(f"item {name}: settings must be a list of {{path, text, scope}}")
    settings = [_settings_entry(name, sf) for sf in raw_settings]
    if not texts and not settings:
        raise PreflightError(f"item {name}: no text to check (give text, texts or settings)")
    facts_map = item.get("facts") or {}
    if not isinstance(facts_map, Mapping):
        raise PreflightError(f"item {name}: facts must be a mapping")
    return name, texts, settings, facts_map


def _kind(name: str, kind: Any) -> str | None:
    if kind is not None and kind not in KINDS:
        raise PreflightError(f"item {name}: kind {kind!r}: one of {', '.join(sorted(KINDS))}")
    return None if kind is None else str(kind)


def _texts_of(name: str, value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise PreflightError(f"item {name}: {what} must map paths to texts")
    return dict(value)


def _settings_entry(name: str, sf: Any) -> _Settings:
    """(scope, path, text, mode) of one settings entry of item ``name``, checked."""
    if not isinstance(sf, Mapping) or not isinstance(sf.get("text"), str):
        raise PreflightError(f"item {name}: each settings entry needs a text")
    scope = sf.get("scope") or "user"
    if scope not in SCOPES:
        known_scopes = ", ".join(sorted(SCOPES))
        raise PreflightError(f"item {name}: settings scope {scope!r}: one of {known_scopes}")
    where = str(sf.get("path") or f"{scope} settings")
    return str(scope), where, sf["text"], file_mode(sf.get("mode"), f"item {name}: {where}")


def file_mode(value: Any, where: str = "mode") -> int | None:
    """A file's permission bits: an int, an octal string ("0644"), or None/"" (unknown)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise PreflightError(f"{where}: mode {value!r} is not a file mode")
    try:
        mode = value if isinstance(value, int) else int(str(value).strip(), 8)
    except ValueError:
        raise PreflightError(
            f"{where}: mode {value!r} is not an octal file mode such as 0600"
        ) from None
    if not 0 <= mode <= 0o7777:
        raise PreflightError(f"{where}: mode {value!r} is out of range (0000 to 7777)")
    return mode


def refusal(
    checked: Sequence[Checked],
    what: str,
    build: str | None = None,
    hint: str = "",
    written: bool = False,
) -> str:
    """The message that stops a play: each refused item (``what`` and its name, the build when
    given), each finding with its file:line and fix, then ``hint``; "" when nothing was refused.
    ``written``: the texts are already on the host (the message does not claim nothing changed)."""
    lines = []
    on = f" for build {build}" if build else ""
    state = (
        "as written on the host: fix it and run again"
        if written
        else "nothing was changed on the host"
    )
    for c in checked:
        if not c.refused:
            continue
        lines.append(f"llamafleet check refused {what} {c.name}{on} ({state}):")
        for f in c.findings:
            lines.append(f"- {f['id']} [{f['severity']}] {f['file']}:{f['line']}: {f['message']}")
            if f.get("fix"):
                lines.append(f"    fix: {f['fix']}")
    if lines:
        lines.append("Run `llamafleet explain ID` for details." + (f" {hint}" if hint else ""))
    return "\n".join(lines)

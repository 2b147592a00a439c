"""The validator in-process, for Ansible's action plugins on the controller: check texts the
roles rendered (units, settings) with facts handed over as mappings, and word the refusal.

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


def check_texts(
    items: Sequence[Mapping[str, Any]],
    fail_on: str = "error",
    config_path: str | None = None,
) -> list[Checked]:
    """Check each item ``{name, path, text, kind?, facts?, files?}`` on its own with the catalogue.
    ``files``: ``{path: text}`` of files the text names that the caller is about to write (read
    from memory; nothing else the text names is opened).
    ``facts``: a mapping of the shape of a facts file, every fact inline. ``config_path``: a
    ``.llamafleet.yaml`` (skip, severity, fail_on) on the controller, or ``None``."""
    from llamafleet.engine import Config, Inputs, add_file, exit_code, load_config, run
    from llamafleet.facts import apply_facts
    from llamafleet.refs import NEVER, ReferencedFiles

    if fail_on not in SEVERITIES:
        raise PreflightError(f"fail_on {fail_on!r}: one of {', '.join(SEVERITIES)}")
    config = load_config(config_path) if config_path else Config()
    out = []
    for item in items:
        name = str(item.get("name") or "?")
        path = str(item.get("path") or name)
        text = item.get("text")
        if not isinstance(text, str):
            raise PreflightError(f"{name}: no text to check")
        facts_map = item.get("facts") or {}
        if not isinstance(facts_map, Mapping):
            raise PreflightError(f"{name}: facts must be a mapping")
        facts = apply_facts(facts_map, source=f"facts of {name}")
        files = item.get("files") or {}
        if not isinstance(files, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise PreflightError(f"{name}: files must map the paths the text names to their text")
        # the files the role writes beside the text (its chat template): read from memory
        inputs = Inputs(referenced=ReferencedFiles(contents=dict(files)) if files else NEVER)
        add_file(inputs, path, text, kind=item.get("kind"), mode=None)
        result = run(inputs, facts, config)
        out.append(
            Checked(
                name=name,
                path=path,
                findings=[f.as_dict() for f in result.findings],
                suppressed=result.suppressed,
                refused=exit_code(result, fail_on) == 1,
            )
        )
    return out


def refusal(checked: Sequence[Checked], what: str, build: str | None = None, hint: str = "") -> str:
    """The message that stops a play: each refused item, each finding with its fix."""
    lines = []
    on = f" for build {build}" if build else ""
    for c in checked:
        if not c.refused:
            continue
        lines.append(
            f"llamafleet check refused {what} {c.name}{on} (nothing was changed on the host):"
        )
        for f in c.findings:
            lines.append(f"- {f['id']} [{f['severity']}] {f['message']}")
            if f.get("fix"):
                lines.append(f"    fix: {f['fix']}")
    if lines:
        lines.append("Run `llamafleet explain ID` for details." + (f" {hint}" if hint else ""))
    return "\n".join(lines)

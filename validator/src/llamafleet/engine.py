"""Run the catalogue over inputs: load files, call predicates, apply suppressions and config."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from llamafleet.argv import ParseError, ServerConfig, parse_argv_string, parse_mapping, parse_script
from llamafleet.catalogue import RuleInfo, catalogue
from llamafleet.errors import SEVERITIES, InputError
from llamafleet.facts import Facts
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.rules import Context, Hit, load_all
from llamafleet.settings import STAT, FromStat, SettingsFile, group_clients, load_settings
from llamafleet.units import Unit, parse_unit

RANK = {s: i for i, s in enumerate(SEVERITIES)}


class ConfigError(InputError):
    pass


@dataclass
class Finding:
    id: str
    name: str
    severity: str
    message: str
    file: str
    line: int
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "fix": self.fix,
        }


@dataclass
class Config:
    skip: set[str] = field(default_factory=set)
    severity: dict[str, str] = field(default_factory=dict)
    fail_on: str | None = None


def load_config(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with skip/severity/fail_on")
    unknown = set(data) - {"skip", "severity", "fail_on"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: skip, severity, fail_on"
        )
    cat = catalogue()
    cfg = Config()
    for rid in data.get("skip") or []:
        if rid not in cat:
            raise ConfigError(f"{path}: skip: unknown rule id {rid!r} (see `llamafleet rules`)")
        cfg.skip.add(rid)
    for rid, sev in (data.get("severity") or {}).items():
        if rid not in cat:
            raise ConfigError(f"{path}: severity: unknown rule id {rid!r}")
        if sev not in SEVERITIES:
            raise ConfigError(f"{path}: severity of {rid}: {sev!r} is not error|warning|info")
        cfg.severity[rid] = sev
    if data.get("fail_on") is not None:
        if data["fail_on"] not in SEVERITIES:
            raise ConfigError(f"{path}: fail_on: expected error|warning|info")
        cfg.fail_on = data["fail_on"]
    return cfg


# ----------------------------------------------------------------------------- inputs


@dataclass
class Inputs:
    """What is checked together. ``referenced``: which files named inside the inputs
    (``EnvironmentFile=``, ``LoadCredential=``, ``--api-key-file``) may be opened: by default
    none; ``ReferencedFiles(directory=DIR)`` looks them up as ``DIR/<basename>`` only,
    ``ReferencedFiles(as_named=True)`` opens them as named. Set it before adding files."""

    referenced: ReferencedFiles = NEVER
    servers: list[ServerConfig] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    settings: list[SettingsFile] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    problems: list[Hit] = field(default_factory=list)  # LF002


def _detect(path: str, text: str) -> str:
    low = path.lower()
    if low.endswith((".service", ".unit")) or re.search(r"^\[Service\]", text, re.M):
        return "unit"
    if low.endswith((".cmd", ".bat")):
        return "cmd"
    if low.endswith(".json"):
        stripped = text.lstrip()
        if "settings" in os.path.basename(low) or not stripped.startswith("{"):
            return "settings"
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return "settings"
        return "mapping" if _is_mapping_doc(data) else "settings"
    if low.endswith((".yml", ".yaml")):
        return "mapping"
    return "shell"


def _is_mapping_doc(data: Any) -> bool:
    return isinstance(data, dict) and ("llama_server_instances" in data or "args" in data)


def add_file(
    inputs: Inputs,
    path: str,
    text: str,
    kind: str | None = None,
    scope: str | None = None,
    *,
    mode: int | FromStat | None = STAT,
) -> None:
    """Parse ``text`` (of ``path``) into ``inputs``. ``mode``: for a settings file, its
    permission bits when known to the caller (default: from ``os.stat(path)``)."""
    inputs.texts[path] = text
    kind = kind or _detect(path, text)
    try:
        if kind == "unit":
            inputs.units.append(parse_unit(text, path, inputs.referenced))
        elif kind in ("cmd", "shell"):
            inputs.servers.append(parse_script(text, path, windows=kind == "cmd"))
        elif kind == "settings":
            inputs.settings.append(load_settings(path, text, scope, mode=mode))
        elif kind == "mapping":
            inputs.servers.extend(_parse_mapping_doc(text, path))
        elif kind == "argv":
            inputs.servers.append(parse_argv_string(text, path))
        else:  # pragma: no cover - kinds come from this module
            raise ParseError(f"unknown input kind {kind}")
    except ParseError as exc:
        inputs.problems.append(
            Hit(
                path,
                exc.line,
                {
                    "detail": f"cannot read as {_KIND_NAMES.get(kind, kind)}: {exc}",
                    "hint": _KIND_HINTS.get(kind, "Check the file."),
                },
            )
        )


_KIND_NAMES = {
    "unit": "a systemd unit",
    "cmd": "a Windows batch file",
    "shell": "a shell script",
    "settings": "Claude Code settings",
    "mapping": "llama-server instance variables",
    "argv": "a llama-server command line",
}
_KIND_HINTS = {
    "shell": "The script must run llama-server (or server) directly; quotes must be balanced.",
    "cmd": "The batch file must run llama-server.exe; lines are continued with a final ^.",
    "unit": "Use Key=value lines inside [Unit]/[Service]/[Install] sections.",
    "mapping": "Give a mapping with 'args' (and model/host/port/extra_args/environment), or "
    "'llama_server_instances': a list of such mappings.",
    "argv": "Quote values that contain spaces.",
    "settings": "Fix the JSON.",
}


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _strip_lines(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_lines(v) for k, v in value.items() if k != "__line__"}
    if isinstance(value, list):
        return [_strip_lines(v) for v in value]
    return value


def _parse_mapping_doc(text: str, path: str) -> list[ServerConfig]:
    try:
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ParseError(
            f"not valid YAML/JSON: {getattr(exc, 'problem', exc)}",
            mark.line + 1 if mark is not None else 1,
        ) from exc
    if not isinstance(data, dict):
        raise ParseError("expected a mapping", 1)
    instances = data.get("llama_server_instances")
    if instances is None:
        instances = [data]
    if not isinstance(instances, list):
        raise ParseError("llama_server_instances must be a list", int(data.get("__line__", 1)))
    out = []
    for inst in instances:
        if not isinstance(inst, dict):
            raise ParseError("each instance must be a mapping", 1)
        line = int(inst.get("__line__", 1))
        args = inst.get("args")
        line_args = int(args.get("__line__", line)) if isinstance(args, dict) else line
        cfg = parse_mapping(_strip_lines(inst), path, line)
        if isinstance(args, dict):
            # point each option at the line of its key
            for opt in cfg.options:
                key = opt.canonical.lstrip("-").replace("-", "_")
                lines = _key_lines(text, key)
                opt.line = next((ln for ln in lines if ln >= line_args), opt.line)
        out.append(cfg)
    return out


def _key_lines(text: str, key: str) -> list[int]:
    return [
        i
        for i, ln in enumerate(text.splitlines(), 1)
        if re.match(r'\s*"?' + re.escape(key) + r'"?\s*:', ln)
    ]


# ----------------------------------------------------------------------------- suppressions

_SUPPRESS = re.compile(r"llamafleet:\s*ignore(-file)?\[([A-Za-z0-9 ,]+)\]\s*(.*)$")


@dataclass
class Suppressions:
    lines: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    files: dict[str, set[str]] = field(default_factory=dict)
    unreasoned: list[Hit] = field(default_factory=list)

    def covers(self, f: Finding) -> bool:
        if f.id in self.files.get(f.file, set()):
            return True
        return f.id in self.lines.get((f.file, f.line), set())


def scan_suppressions(texts: Mapping[str, str]) -> Suppressions:
    sup = Suppressions()
    for path, text in texts.items():
        for no, line in enumerate(text.splitlines(), 1):
            m = _SUPPRESS.search(line)
            if not m:
                continue
            ids = {i.strip().upper() for i in m.group(2).split(",") if i.strip()}
            reason = m.group(3).strip().strip("\"'").strip()
            if not reason:
                sup.unreasoned.append(Hit(path, no, {"ids": ", ".join(sorted(ids))}))
            if m.group(1):
                sup.files.setdefault(path, set()).update(ids)
            else:  # the comment's own line and the line after it
                sup.lines.setdefault((path, no), set()).update(ids)
                sup.lines.setdefault((path, no + 1), set()).update(ids)
    return sup


# ----------------------------------------------------------------------------- running


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _fmt(template: str, values: Mapping[str, Any]) -> str:
    try:
        return template.format_map(_Blank(values))
    except (ValueError, IndexError, KeyError, AttributeError):
        return template


@dataclass
class Result:
    findings: list[Finding]
    suppressed: int
    files: int


def _finding(info: RuleInfo, hit: Hit, config: Config) -> Finding:
    severity = config.severity.get(info.id) or hit.severity or info.severity
    return Finding(
        id=info.id,
        name=info.name,
        severity=severity,
        message=_fmt(info.message, hit.vars),
        file=hit.file,
        line=hit.line,
        fix=_fmt(info.fix, hit.vars),
    )


def run(
    inputs: Inputs,
    facts: Facts | None = None,
    config: Config | None = None,
    process_env: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None,
) -> Result:
    config = config or Config()
    facts = facts or Facts()
    cat = catalogue()
    registry = load_all()
    ctx = Context(
        servers=inputs.servers,
        units=inputs.units,
        settings=inputs.settings,
        clients=group_clients(inputs.settings, process_env or {}),
        facts=facts,
        referenced=inputs.referenced,
    )
    wanted = set(only) if only is not None else None
    raw: list[Finding] = []
    for rid, info in cat.items():
        if rid in config.skip or (wanted is not None and rid not in wanted):
            continue
        pred = registry.get(rid)
        if pred is None:
            continue
        for hit in pred(ctx):
            raw.append(_finding(info, hit, config))
    sup = scan_suppressions(inputs.texts)
    for hit in inputs.problems:
        if "LF002" not in config.skip:
            raw.append(_finding(cat["LF002"], hit, config))
    for hit in sup.unreasoned:
        if "LF001" not in config.skip:
            raw.append(_finding(cat["LF001"], hit, config))
    kept = [f for f in raw if f.id == "LF001" or not sup.covers(f)]
    seen: set[tuple[str, str, int, str]] = set()
    unique = []
    for f in kept:
        key = (f.id, f.file, f.line, f.message)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    unique.sort(key=lambda f: (f.file, f.line, RANK[f.severity], f.id))
    return Result(findings=unique, suppressed=len(raw) - len(kept), files=len(inputs.texts))


def exit_code(result: Result, fail_on: str) -> int:
    threshold = RANK[fail_on]
    return 1 if any(RANK[f.severity] <= threshold for f in result.findings) else 0

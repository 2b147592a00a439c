"""Run the catalogue over inputs: load files, call predicates, apply suppressions and config."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from functools import cache

from llamafleet.argv import ParseError, ServerConfig
from llamafleet.catalogue import RuleInfo, catalogue
from llamafleet.errors import SEVERITIES, InputError, InternalError
from llamafleet.facts import Facts
from llamafleet.lazyre import lazy
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.rules import Context, Hit, load_all
from llamafleet.settings import (
    STAT,
    FromStat,
    SettingsFile,
    env_settings,
    group_clients,
    load_settings,
)
from llamafleet.units import Unit, parse_unit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from llamafleet.readers.common import Listener, ReadResult
    from llamafleet.readers.haproxy import HAProxyConfig

RANK = {s: i for i, s in enumerate(SEVERITIES)}


class ConfigError(InputError):
    pass


class Finding:
    """One finding: a rule's id and text, where it is and its fix. The message and the fix are
    filled in from the catalogue's templates when first read."""

    __slots__ = (
        "_fix",
        "_message",
        "_templates",
        "_vars",
        "file",
        "id",
        "line",
        "name",
        "severity",
    )

    def __init__(
        self,
        *,
        id: str,
        name: str,
        severity: str,
        file: str,
        line: int,
        message: str | None = None,
        fix: str | None = None,
        templates: tuple[str, str] = ("", ""),
        values: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.name = name
        self.severity = severity
        self.file = file
        self.line = line
        self._message = message
        self._fix = fix
        self._templates = templates
        self._vars = values

    @property
    def message(self) -> str:
        if self._message is None:
            self._message = _fill(self._templates[0], self._vars)
        return self._message

    @property
    def fix(self) -> str:
        if self._fix is None:
            self._fix = _fill(self._templates[1], self._vars)
        return self._fix

    def key(self) -> tuple[Any, ...]:
        """What makes two findings the same (its rule, place and values)."""
        if self._message is None and self._vars is not None:
            key = (self.id, self.file, self.line, *self._vars.values())
            try:
                hash(key)
            except TypeError:
                pass
            else:
                return key
        return (self.id, self.file, self.line, self.message)

    def __repr__(self) -> str:
        return f"Finding({self.id} {self.file}:{self.line} {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finding) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

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


class Config:
    """A ``.llamafleet.yaml``: rules skipped, severities changed, the exit threshold."""

    __slots__ = ("fail_on", "severity", "skip")

    def __init__(
        self,
        skip: set[str] | None = None,
        severity: dict[str, str] | None = None,
        fail_on: str | None = None,
    ) -> None:
        self.skip: set[str] = skip if skip is not None else set()
        self.severity: dict[str, str] = severity if severity is not None else {}
        self.fail_on = fail_on


def load_config(path: str) -> Config:
    from llamafleet import safeyaml
    from llamafleet.textio import read_text

    try:
        data = safeyaml.load(read_text(path)) or {}
    except safeyaml.YAMLInputError as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc}") from exc
    except InputError as exc:
        raise ConfigError(str(exc)) from exc
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


class Inputs:
    """What is checked together. ``referenced``: which files named inside the inputs
    (``EnvironmentFile=``, ``LoadCredential=``, ``--api-key-file``) may be opened: by default
    none; ``ReferencedFiles(directory=DIR)`` looks them up as ``DIR/<basename>`` only,
    ``ReferencedFiles(as_named=True)`` opens them as named. Set it before adding files."""

    __slots__ = (
        "listeners",
        "pools",
        "problems",
        "referenced",
        "servers",
        "settings",
        "texts",
        "units",
    )

    def __init__(self, referenced: ReferencedFiles = NEVER) -> None:
        self.referenced = referenced
        self.servers: list[ServerConfig] = []
        self.units: list[Unit] = []
        self.settings: list[SettingsFile] = []
        self.texts: dict[str, str] = {}
        self.problems: list[Hit] = []  # LF002
        #: proxies and other programs the inputs start that listen where a client may point
        self.listeners: list[Listener] = []
        #: HAProxy configurations: pools in front of llama-server
        self.pools: list[HAProxyConfig] = []


#: a proxy section of an HAProxy configuration
_HAPROXY_SECTION = lazy(r"(?m)^[ \t]*(frontend|backend|listen)[ \t]+\S")


def _detect(path: str, text: str) -> str:
    low = path.lower()
    base = os.path.basename(low)
    if base.rsplit(":", 1)[-1] == "haproxy.cfg" or (
        low.endswith(".cfg") and _HAPROXY_SECTION.search(text)
    ):
        return "haproxy"
    if low.endswith((".service", ".unit")) or (
        "[Service]" in text and re.search(r"^\[Service\]", text, re.M)
    ):
        return "unit"
    if low.endswith((".cmd", ".bat")):
        return "cmd"
    if low.endswith(".ps1"):
        return "powershell"
    if low.endswith(".json"):
        stripped = text.lstrip()
        if "settings" in base or not stripped.startswith("{"):
            return "settings"
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return "settings"
        return "mapping" if _is_mapping_doc(data) else "settings"
    if low.endswith((".yml", ".yaml")):
        return "yaml"
    if base == ".env" or low.endswith(".env"):
        return "env"
    if re.search(r"(?m)`[ \t]*\r?$", text) and re.search(r"(?i)\$env:|\.exe\b|^\s*&\s", text):
        return "powershell"  # backtick continuations: a PowerShell script without its .ps1
    return "shell"


@cache
def _related() -> re.Pattern[str]:
    """What a file about llama-server or its clients names somewhere: the program (any of its
    names, the pre-2024 ``server`` with a model), its environment options, llama.cpp's images, or
    Claude Code's environment (the readers' own prefixes, ``CLIENT_ENV_PREFIXES``)."""
    from llamafleet.readers.common import CLIENT_ENV_PREFIXES

    client = "|".join(re.escape(prefix) for prefix in CLIENT_ENV_PREFIXES)
    return re.compile(
        rf"llama[-_.]?(?:server|cpp)|LLAMA_ARG_|{client}|"
        r"(?:^|[\s/\\'\"])server(?:\.exe)?[\s\"']+(?:[^\n]*\s)?(?:-m|--model)\b",
        re.IGNORECASE | re.MULTILINE,
    )


def is_related(path: str, text: str) -> bool:
    """Whether ``text`` (of ``path``) has anything to do with llama-server or Claude Code: a
    settings file always has; another file when it names one of them (:func:`_related`). A file
    that names llama-server but cannot be read stays LF002; only a file that names neither (a
    JSON file not named like a settings file, without Claude Code's environment) is
    passed over by ``llamafleet check --skip-unrelated`` (what a pre-commit hook over every
    shell script of a repository needs)."""
    base = os.path.basename(path.lower())
    named = base.endswith(".json") and "settings" in base
    return named or _related().search(text) is not None


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
    permission bits when known to the caller (default: from ``os.stat(path)``).

    A file in which nothing could be read (no llama-server command, unit, settings or Claude Code
    environment) is reported (LF002), never passed over. A bug met while reading raises
    :class:`~llamafleet.errors.InternalError` naming the file."""
    inputs.texts[path] = text
    kind = kind or _detect(path, text)
    try:
        _add(inputs, path, text, kind, scope=scope, mode=mode)
    except ParseError as exc:
        _problem(
            inputs, path, exc.line, f"cannot read as {_KIND_NAMES.get(kind, kind)}: {exc}", kind
        )
    except InputError as exc:
        line = getattr(exc, "line", 1)
        _problem(inputs, path, line, f"cannot read as {_KIND_NAMES.get(kind, kind)}: {exc}", kind)
    except (RecursionError, MemoryError) as exc:
        _problem(
            inputs,
            path,
            1,
            f"cannot read: too large or too deeply nested ({type(exc).__name__})",
            kind,
        )
    except Exception as exc:
        raise InternalError(
            f"{path}: internal error while reading it as {_KIND_NAMES.get(kind, kind)}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _problem(inputs: Inputs, path: str, line: int, detail: str, kind: str) -> None:
    inputs.problems.append(
        Hit(path, line, {"detail": detail, "hint": _KIND_HINTS.get(kind, "Check the file.")})
    )


def _add(
    inputs: Inputs,
    path: str,
    text: str,
    kind: str,
    *,
    scope: str | None,
    mode: int | FromStat | None,
) -> None:
    if kind == "unit":
        unit = parse_unit(text, path, inputs.referenced)
        inputs.units.append(unit)
        if unit.server is None:
            exec_start = unit.get("Service", "ExecStart")
            if exec_start is None:
                raise ParseError("no [Service] section with ExecStart= (nothing to check)", 1)
            program = unit.program or exec_start.value
            inputs.problems.append(
                Hit(
                    path,
                    exec_start.line,
                    {
                        "detail": f"cannot read as a systemd unit: ExecStart= runs {program!r}, "
                        "not llama-server (nothing to check here)",
                        "hint": "Check the script it runs together with this unit (llamafleet "
                        "check UNIT SCRIPT).",
                        "program": os.path.basename(program.replace("\\", "/")),
                    },
                )
            )
    elif kind in ("cmd", "shell", "powershell", "env"):
        from llamafleet.readers import read_script

        result = read_script(text, path, kind="shell" if kind == "env" else kind)
        found = _dotenv(inputs, path, text) if kind == "env" else False
        _take(inputs, path, result, kind, found)
    elif kind == "settings":
        inputs.settings.append(load_settings(path, text, scope, mode=mode))
    elif kind in ("mapping", "yaml", "compose"):
        _yaml(inputs, path, text, kind)
    elif kind == "argv":
        from llamafleet.sources import parse_argv_string

        inputs.servers.append(parse_argv_string(text, path))
    elif kind == "haproxy":
        from llamafleet.readers.haproxy import read_haproxy

        inputs.pools.append(read_haproxy(text, path))
    else:  # pragma: no cover - kinds come from this module
        raise ParseError(f"unknown input kind {kind}")


def _take(inputs: Inputs, path: str, result: ReadResult, kind: str, found: bool = False) -> None:
    inputs.servers.extend(result.servers)
    inputs.units.extend(result.units)  # type: ignore[arg-type]
    inputs.listeners.extend(result.listeners)
    for client in result.clients:
        inputs.settings.append(env_settings(path, client.values, client.name))
    if result.empty and not found:
        what = {
            "cmd": "no llama-server.exe command",
            "powershell": "no llama-server command",
            "compose": "no llama-server service",
        }.get(kind, "no llama-server command")
        raise ParseError(f"{what} and no Claude Code environment (ANTHROPIC_*) found", 1)


def _dotenv(inputs: Inputs, path: str, text: str) -> bool:
    """A ``.env`` file: every assignment is an environment variable (Claude Code's)."""
    from llamafleet.readers.common import EnvValue, is_client_key

    values: dict[str, EnvValue] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        s = raw.strip().removeprefix("export ").strip()
        k, eq, v = s.partition("=")
        k = k.strip()
        if not eq or not is_client_key(k) or s.startswith("#"):
            continue
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        values[k] = EnvValue(v, no, "$" in v)
    if values:
        inputs.settings.append(env_settings(path, values))
    return bool(values)


def _yaml(inputs: Inputs, path: str, text: str, kind: str) -> None:
    from llamafleet import safeyaml
    from llamafleet.readers.compose import is_compose

    try:
        data = safeyaml.load(text, yaml12=kind != "mapping")
    except safeyaml.YAMLInputError as exc:
        raise ParseError(str(exc), exc.line) from exc
    if kind != "mapping" and is_compose(data):
        from llamafleet.readers import read_compose

        _take(inputs, path, read_compose(data, text, path), "compose")
        return
    if kind != "mapping" and isinstance(data, dict) and isinstance(data.get("model_list"), list):
        from llamafleet.readers.common import Listener

        # a LiteLLM proxy's config: it listens (on its default port unless told otherwise)
        # in front of the servers it names
        inputs.listeners.append(Listener("0.0.0.0", 4000, "LiteLLM (its default port)", 1))
        return
    if kind != "mapping":
        if not (isinstance(data, dict) and _is_mapping_doc(data)):
            raise ParseError(
                "not a Compose file (services:), llama_server instance variables (args:, "
                "llama_server_instances:) or a LiteLLM config (model_list:)",
                1,
            )
        data = safeyaml.load(text)  # Ansible's variables are YAML 1.1 (yes/no/on/off)
    inputs.servers.extend(_parse_mapping_doc(data, path))


_KIND_NAMES = {
    "unit": "a systemd unit",
    "cmd": "a Windows batch file",
    "powershell": "a PowerShell script",
    "shell": "a shell script",
    "env": "an environment file",
    "settings": "Claude Code settings",
    "mapping": "llama-server instance variables",
    "yaml": "YAML (Compose, instance variables)",
    "compose": "a Compose file",
    "argv": "a llama-server command line",
    "haproxy": "an HAProxy configuration",
}
_KIND_HINTS = {
    "shell": "The script must run llama-server (or server) directly; quotes must be balanced.",
    "cmd": "The batch file must run llama-server.exe; lines are continued with a final ^.",
    "powershell": "The script must run llama-server.exe; lines are continued with a final `.",
    "unit": "Use Key=value lines inside [Unit]/[Service]/[Install] sections, with "
    "ExecStart= running llama-server.",
    "mapping": "Give a mapping with 'args' (and model/host/port/extra_args/environment), or "
    "'llama_server_instances': a list of such mappings.",
    "yaml": "Give a Compose file with a llama-server service, or llama_server instance "
    "variables ('args', 'llama_server_instances').",
    "compose": "Give a service with a llama.cpp server image (ghcr.io/ggml-org/llama.cpp:server) "
    "or a command that runs llama-server.",
    "env": "Give NAME=value lines with ANTHROPIC_* / CLAUDE_CODE_* variables.",
    "argv": "Quote values that contain spaces.",
    "settings": "Fix the JSON.",
    "haproxy": "Give HAProxy's configuration: sections (global, defaults, frontend NAME, "
    "backend NAME, listen NAME) of one statement a line; `haproxy -c -f FILE` shows what HAProxy "
    "itself reads.",
}


def _parse_mapping_doc(data: Any, path: str) -> list[ServerConfig]:
    from llamafleet.safeyaml import YMap, plain
    from llamafleet.sources import parse_mapping

    if not isinstance(data, dict):
        raise ParseError("expected a mapping", 1)
    instances = data.get("llama_server_instances")
    if instances is None:
        instances = [data]
    if not isinstance(instances, list):
        line = data.lines.get("llama_server_instances", 1) if isinstance(data, YMap) else 1
        raise ParseError("llama_server_instances must be a list", line)
    out = []
    for inst in instances:
        if not isinstance(inst, dict):
            raise ParseError("each instance must be a mapping", 1)
        line = inst.line if isinstance(inst, YMap) else 1
        args = inst.get("args")
        cfg = parse_mapping(plain(inst), path, line)
        if isinstance(args, YMap):
            # point each option at the line of its key
            for opt in cfg.options:
                key = opt.canonical.lstrip("-").replace("-", "_")
                if key in args.lines:
                    opt.line = args.lines[key]
        out.append(cfg)
    return out


# ----------------------------------------------------------------------------- suppressions

_SUPPRESS = lazy(r"llamafleet:\s*ignore(-file)?\[([A-Za-z0-9 ,]+)\]\s*(.*)$")


class Suppressions:
    __slots__ = ("files", "lines", "unreasoned")

    def __init__(self) -> None:
        self.lines: dict[tuple[str, int], set[str]] = {}
        self.files: dict[str, set[str]] = {}
        self.unreasoned: list[Hit] = []

    def covers(self, f: Finding) -> bool:
        if f.id in self.files.get(f.file, set()):
            return True
        return f.id in self.lines.get((f.file, f.line), set())


def scan_suppressions(texts: Mapping[str, str]) -> Suppressions:
    sup = Suppressions()
    for path, text in texts.items():
        if "llamafleet" not in text:
            continue
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


class _Blank(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _fmt(template: str, values: Mapping[str, Any]) -> str:
    try:
        return template.format_map(values if isinstance(values, _Blank) else _Blank(values))
    except (ValueError, IndexError, KeyError, AttributeError):
        return template


class Result:
    __slots__ = ("files", "findings", "suppressed")

    def __init__(self, findings: list[Finding], suppressed: int, files: int) -> None:
        self.findings = findings
        self.suppressed = suppressed
        self.files = files


_new_finding = object.__new__


def _finding(info: RuleInfo, hit: Hit, config: Config) -> Finding:
    # (Finding's constructor without its keyword arguments: one per finding of every run)
    f: Finding = _new_finding(Finding)
    f.id = info.id
    f.name = info.name
    f.severity = config.severity.get(info.id) or hit.severity or info.severity
    f.file = hit.file
    f.line = hit.line
    f._message = None
    f._fix = None
    f._templates = info.templates
    f._vars = hit.vars
    return f


def _fill(template: str, values: Mapping[str, Any] | None) -> str:
    if "{" not in template:
        return template
    return _fmt(template, _Blank(values or {}))


_PLAN: list[tuple[str, RuleInfo, Any]] = []


def _plan() -> list[tuple[str, RuleInfo, Any]]:
    """(id, catalogue entry, predicate) of every rule with a predicate, in catalogue order."""
    if not _PLAN:
        registry = load_all()
        _PLAN.extend(
            (rid, info, registry[rid]) for rid, info in catalogue().items() if rid in registry
        )
    return _PLAN


def run(
    inputs: Inputs,
    facts: Facts | None = None,
    config: Config | None = None,
    process_env: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None,
) -> Result:
    config = config or Config()
    ctx = Context(
        servers=inputs.servers,
        units=inputs.units,
        settings=inputs.settings,
        clients=group_clients(inputs.settings, process_env or {}),
        facts=facts or Facts(),
        referenced=inputs.referenced,
        listeners=inputs.listeners,
        pools=inputs.pools,
    )
    raw = _run_rules(ctx, inputs, config, set(only) if only is not None else None)
    sup = scan_suppressions(inputs.texts)
    raw += _own_findings(inputs, sup, config)
    if sup.lines or sup.files:
        kept = [f for f in raw if f.id == "LF001" or not sup.covers(f)]
    else:
        kept = raw
    return Result(findings=_unique(kept), suppressed=len(raw) - len(kept), files=len(inputs.texts))


def _run_rules(
    ctx: Context, inputs: Inputs, config: Config, wanted: set[str] | None
) -> list[Finding]:
    skip = config.skip
    raw: list[Finding] = []
    for rid, info, pred in _plan():
        if rid in skip or (wanted is not None and rid not in wanted):
            continue
        try:
            for hit in pred(ctx):
                raw.append(_finding(info, hit, config))
        except Exception as exc:
            files = ", ".join(inputs.texts) or "<no file>"
            raise InternalError(
                f"{files}: internal error in rule {rid}: {type(exc).__name__}: {exc}"
            ) from exc
    return raw


def _own_findings(inputs: Inputs, sup: Suppressions, config: Config) -> list[Finding]:
    """LF002 for what could not be read, LF001 for suppressions without a reason."""
    cat = catalogue()
    out: list[Finding] = []
    checked = {os.path.basename(p.replace("\\", "/")) for p in inputs.texts if inputs.problems}
    for hit in inputs.problems:
        if hit.vars.get("program") in checked:
            continue  # a unit that runs a script checked with it: read through the script
        if "LF002" not in config.skip:
            out.append(_finding(cat["LF002"], hit, config))
    for hit in sup.unreasoned:
        if "LF001" not in config.skip:
            out.append(_finding(cat["LF001"], hit, config))
    return out


def _unique(kept: list[Finding]) -> list[Finding]:
    """The findings without duplicates, sorted by file, line, severity and id."""
    places = {(f.id, f.file, f.line) for f in kept}
    if len(places) == len(kept):
        findings = list(kept)  # no two at one place: no duplicates
    else:
        unique: dict[tuple[Any, ...], Finding] = {}
        for f in kept:
            unique.setdefault(f.key(), f)
        findings = list(unique.values())
    findings.sort(key=lambda f: (f.file, f.line, RANK[f.severity], f.id))
    return findings


def exit_code(result: Result, fail_on: str) -> int:
    threshold = RANK[fail_on]
    return 1 if any(RANK[f.severity] <= threshold for f in result.findings) else 0

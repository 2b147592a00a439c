"""systemd unit files: sections, and ``ExecStart=`` expanded from ``Environment=`` and
``EnvironmentFile=``.

Files a unit names (``EnvironmentFile=``, ``LoadCredential=NAME:PATH``) are opened only as a
:class:`~llamafleet.refs.ReferencedFiles` policy allows: by default never."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llamafleet.argv import ParseError, ServerConfig, Token, apply_env, parse_tokens
from llamafleet.refs import NEVER, ReferencedFiles


@dataclass
class UnitEntry:
    key: str
    value: str
    line: int


@dataclass
class Unit:
    path: str
    sections: dict[str, list[UnitEntry]] = field(default_factory=dict)
    server: ServerConfig | None = None
    #: every ``[Section]`` header in file order, with its line (a repeated name is kept twice)
    headers: list[tuple[str, int]] = field(default_factory=list)

    def get(self, section: str, key: str) -> UnitEntry | None:
        """Last assignment of `key` in `section` (an empty assignment resets: returns None)."""
        found: UnitEntry | None = None
        for e in self.sections.get(section, []):
            if e.key == key:
                found = None if e.value == "" else e
        return found

    def all(self, section: str, key: str) -> list[UnitEntry]:
        out: list[UnitEntry] = []
        for e in self.sections.get(section, []):
            if e.key == key:
                out = [] if e.value == "" else [*out, e]
        return out


def _logical_lines(text: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    buf = ""
    start = 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (line.lstrip().startswith(("#", ";")) or not line.strip()):
            continue
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        out.append((buf.strip(), start))
        buf = ""
    if buf:
        out.append((buf.strip(), start))
    return out


def split_words(value: str, line: int) -> list[Token]:
    """Split a systemd command line / assignment list (quotes and C escapes)."""
    words: list[Token] = []
    buf: list[str] = []
    have = False
    i = 0
    while i < len(value):
        ch = value[i]
        if ch in " \t":
            if have:
                words.append(Token("".join(buf), line))
            buf, have = [], False
            i += 1
            continue
        if ch in "'\"":
            q = ch
            have = True
            i += 1
            while i < len(value) and value[i] != q:
                if value[i] == "\\" and i + 1 < len(value):
                    buf.append(value[i + 1])
                    i += 2
                    continue
                buf.append(value[i])
                i += 1
            if i >= len(value):
                raise ParseError(f"unterminated {q} quote", line)
            i += 1
            continue
        if ch == "\\" and i + 1 < len(value):
            buf.append(value[i + 1])
            have = True
            i += 2
            continue
        buf.append(ch)
        have = True
        i += 1
    if have:
        words.append(Token("".join(buf), line))
    return words


_CRED = re.compile(r"(?:%d|\$\{?CREDENTIALS_DIRECTORY\}?)/([A-Za-z0-9_.:-]+)")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _read_env_file(path: str, referenced: ReferencedFiles) -> dict[str, str] | None:
    text = referenced.read(path)
    if text is None:
        return None
    env: dict[str, str] = {}
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith(("#", ";")):
            continue
        s = s.removeprefix("export ")
        k, eq, v = s.partition("=")
        if eq:
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            env[k.strip()] = v
    return env


def parse_unit(text: str, path: str, referenced: ReferencedFiles | None = None) -> Unit:
    """Parse a unit. ``referenced``: which files named in it may be opened (default: none, so
    ``EnvironmentFile=`` variables stay unknown and a credential's key is not read)."""
    referenced = referenced or NEVER
    unit = Unit(path=path)
    section = ""
    for line, no in _logical_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            unit.sections.setdefault(section, [])
            unit.headers.append((section, no))
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ParseError(f"not a 'Key=value' line: {line[:60]!r}", no)
        if not section:
            raise ParseError("assignment outside of a [Section]", no)
        unit.sections[section].append(UnitEntry(key.strip(), value.strip(), no))

    exec_start = unit.get("Service", "ExecStart")
    if exec_start is None:
        return unit
    env = _unit_environment(unit, referenced)
    variables = {k: v for k, (v, _) in env.items()}
    credentials = _credentials(unit)
    words = split_words(exec_start.value, exec_start.line)
    if not words:
        return unit
    prog = words[0].text.lstrip("-@:+!")
    expanded: list[Token] = []
    for w in words[1:]:
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w.text)
        if whole and whole.group(1) in variables:
            # systemd splits an unbraced $VAR on whitespace
            expanded += [Token(p, w.line) for p in variables[whole.group(1)].split()]
            continue
        text = _CRED.sub(lambda m: credentials.get(m.group(1), m.group(0)), w.text)
        text = _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)
        expanded.append(Token(text, w.line))
    cfg = ServerConfig(path=path, line=exec_start.line, binary=prog, source="unit")
    parse_tokens(expanded, cfg)
    apply_env(cfg, env)
    unit.server = cfg
    return unit


def _unit_environment(unit: Unit, referenced: ReferencedFiles) -> dict[str, tuple[str, int]]:
    """The service's environment (value, line): ``EnvironmentFile=`` as the policy allows, then
    ``Environment=`` (later assignments win)."""
    env: dict[str, tuple[str, int]] = {}
    for e in unit.all("Service", "EnvironmentFile"):
        fname = e.value.removeprefix("-")
        loaded = _read_env_file(fname, referenced)
        if loaded:
            env.update({k: (v, e.line) for k, v in loaded.items()})
    for e in unit.all("Service", "Environment"):
        for w in split_words(e.value, e.line):
            k, eq, v = w.text.partition("=")
            if eq:
                env[k] = (v, e.line)
    return env


def _credentials(unit: Unit) -> dict[str, str]:
    """systemd credentials: ``LoadCredential=NAME:PATH`` is read by the service as ``%d/NAME``
    (or ``$CREDENTIALS_DIRECTORY/NAME``); the validator names PATH instead (a rule reads it only
    as the referenced-files policy allows)."""
    credentials: dict[str, str] = {}
    for e in unit.all("Service", "LoadCredential"):
        name, colon, src = e.value.partition(":")
        if colon and name:
            credentials[name] = src
    return credentials

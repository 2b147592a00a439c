"""systemd unit files: sections, and ``ExecStart=`` expanded from ``Environment=`` and
``EnvironmentFile=``.

Files a unit names (``EnvironmentFile=``, ``LoadCredential=NAME:PATH``) are opened only as a
:class:`~llamafleet.refs.ReferencedFiles` policy allows: by default never."""

from __future__ import annotations

import re

from llamafleet.argv import ParseError, ServerConfig, Token
from llamafleet.lazyre import lazy
from llamafleet.record import Record
from llamafleet.refs import NEVER, ReferencedFiles


class UnitEntry:
    """One ``Key=value`` of a unit, with its line."""

    __slots__ = ("key", "line", "marks", "value")

    def __init__(
        self, key: str, value: str, line: int, marks: tuple[tuple[int, int], ...] = ()
    ) -> None:
        self.key = key
        self.value = value
        self.line = line
        #: for a value continued over lines: (offset in the value, line) where each line starts
        self.marks = marks

    def line_at(self, offset: int) -> int:
        """The line of the character at ``offset`` of the value."""
        line = self.line
        for off, no in self.marks:
            if off > offset:
                break
            line = no
        return line

    def __repr__(self) -> str:
        return f"UnitEntry(key={self.key!r}, value={self.value!r}, line={self.line})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnitEntry) and (self.key, self.value, self.line) == (
            other.key,
            other.value,
            other.line,
        )

    __hash__ = None  # type: ignore[assignment]


class Unit(Record):
    """A unit file's sections, and the llama-server its ``ExecStart=`` runs. ``headers``: every
    ``[Section]`` header in file order, with its line (a repeated name is kept twice);
    ``program``: the program ``ExecStart=`` runs."""

    _fields = ("path", "sections", "server", "headers", "program")

    def __init__(
        self,
        path: str,
        sections: dict[str, list[UnitEntry]] | None = None,
        server: ServerConfig | None = None,
        headers: list[tuple[str, int]] | None = None,
        program: str | None = None,
    ) -> None:
        self.path = path
        self.sections: dict[str, list[UnitEntry]] = sections if sections is not None else {}
        self.server = server
        self.headers: list[tuple[str, int]] = headers if headers is not None else []
        self.program = program

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


def _logical_lines(text: str) -> list[tuple[str, int, list[tuple[int, int]]]]:
    """(text, first line, (offset, line) where each continuation line starts) of each logical
    line: lines ending in a backslash are joined (systemd.syntax(7))."""
    out: list[tuple[str, int, list[tuple[int, int]]]] = []
    buf = ""
    start = 0
    marks: list[tuple[int, int]] = []

    def close() -> None:
        if not marks:
            out.append((buf.strip(), start, marks))
            return
        lead = len(buf) - len(buf.lstrip())
        out.append((buf.strip(), start, [(off - lead, no) for off, no in marks]))

    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (line.lstrip().startswith(("#", ";")) or not line.strip()):
            continue
        if buf and line.lstrip().startswith(("#", ";")):
            continue  # a comment inside a continued line is skipped (systemd.syntax(7))
        if not buf:
            start = no
            marks = []
        else:
            marks.append((len(buf), no))
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        close()
        buf = ""
    if buf:
        close()
    return out


def _split(value: str, line: int) -> list[tuple[str, bool]]:
    """Split a systemd command line: (word, quoted) pairs (quotes and C escapes)."""
    return [(w, q) for w, q, _ in _split_at(value, line)]


#: One entry of systemd's IPAddressAllow=/IPAddressDeny= as the roles write them: an address, a
#: CIDR range, or one of systemd's names (any, localhost, link-local, multicast).
IP_ALLOW_ENTRY = lazy(r"(any|localhost|link-local|multicast|[0-9a-fA-F.:]+(/[0-9]{1,3})?)\Z")

#: What a value rendered into a unit line must not hold: C0 controls (newline, carriage return,
#: tab, NUL, ...), DEL and the other line ends of str.splitlines() (the validator's line splitter).
UNIT_CONTROL = lazy("[\x00-\x1f\x7f\x85\u2028\u2029]")


def unit_value_problem(value: object) -> str:
    """Why `value` must not be rendered into a systemd unit line ("" when it may): a control
    character or line end would add lines to the unit (an ``ExecStartPre=+`` running as root), a
    trailing backslash would join the next line to this one."""
    text = str(value)
    m = UNIT_CONTROL.search(text)
    if m:
        return (
            f"{text!r} contains the control character {m.group(0)!r} (it would add lines to the "
            "unit); a value rendered into a systemd unit must not contain newlines or other "
            "control characters"
        )
    if text.endswith("\\"):
        return (
            f"{text!r} ends in a backslash, which would join the next line of the unit to this one"
        )
    return ""


_WORD = lazy(r"\S+")


def _split_at(value: str, line: int) -> list[tuple[str, bool, int]]:
    """:func:`_split` with the offset where each word starts."""
    if "'" not in value and '"' not in value and "\\" not in value:
        return [(m.group(0), False, m.start()) for m in _WORD.finditer(value)]
    words: list[tuple[str, bool, int]] = []
    buf: list[str] = []
    have = quoted = False
    at = 0
    i = 0
    while i < len(value):
        ch = value[i]
        if ch in " \t":
            if have:
                words.append(("".join(buf), quoted, at))
            buf, have, quoted = [], False, False
            i += 1
            continue
        if not have:
            at = i
        if ch in "'\"":
            q = ch
            have = quoted = True
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
        words.append(("".join(buf), quoted, at))
    return words


def split_words(value: str, line: int) -> list[Token]:
    """Split a systemd command line / assignment list (quotes and C escapes)."""
    return [Token(w, line) for w, _ in _split(value, line)]


_CRED = lazy(r"(?:%d|\$\{?CREDENTIALS_DIRECTORY\}?)/([A-Za-z0-9_.:-]+)")
_VAR = lazy(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SPECIFIER = lazy(r"%([a-zA-Z%])")


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
    ``EnvironmentFile=`` variables stay unknown and a credential's key is not read).

    ``ExecStart=`` is read as systemd runs it: ``Environment=`` variables expand (an unbraced
    ``$VAR`` alone is split into words), a variable the unit does not set and a specifier such as
    ``%i`` are unknown, and the program may sit behind a shell (``/bin/sh -c '...'``), a wrapper
    or ``docker run``. A line of options cut off from ``ExecStart=`` by a missing ``\\`` is
    kept as detached (systemd ignores it: "Missing '='")."""
    referenced = referenced or NEVER
    unit = Unit(path=path)
    detached = _sections(text, unit)
    exec_start = unit.get("Service", "ExecStart")
    if exec_start is None:
        return unit
    env, unread = _environment(unit, referenced)
    tokens = _exec_tokens(exec_start, {k: v for k, (v, _) in env.items()}, _credentials(unit))
    if not tokens:
        return unit
    from llamafleet.readers.common import Collector, EnvValue

    c = Collector(path, "unit", text)
    c.command(tokens, {k: EnvValue(v, ln) for k, (v, ln) in env.items()})
    unit.program = tokens[0].text
    if not c.result.servers:
        return unit
    cfg = c.result.servers[0]
    cfg.line = exec_start.line
    cfg.detached += detached
    if unread:
        cfg.opaque = True  # an EnvironmentFile= that was not read may set LLAMA_ARG_* options
        cfg.env_opaque = True
    unit.server = cfg
    return unit


def _sections(text: str, unit: Unit) -> list[Token]:
    """Fill ``unit``'s sections; return the option lines cut off from ExecStart=."""
    section = ""
    last_exec: UnitEntry | None = None
    detached: list[Token] = []
    for line, no, marks in _logical_lines(text):
        if not line:
            continue  # a lone continuation
        if line[0] == "[" and line[-1] == "]":
            section = line[1:-1]
            unit.sections.setdefault(section, [])
            unit.headers.append((section, no))
            last_exec = None
            continue
        if last_exec is not None and line[0] == "-" and section == "Service":
            # options cut off from ExecStart= (a missing \\): systemd says "Missing '='" and
            # ignores the line
            detached.append(Token(re.split(r"[\s=]", line, maxsplit=1)[0], no))
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise ParseError(f"not a 'Key=value' line: {line[:60]!r}", no)
        if not section:
            raise ParseError("assignment outside of a [Section]", no)
        if marks:
            start = len(key) + 1 + len(value) - len(value.lstrip())
            moved = tuple((off - start, ln) for off, ln in marks if off > start)
            entry = UnitEntry(key.strip(), value.strip(), no, moved)
        else:
            entry = UnitEntry(key.rstrip(), value.strip(), no)
        unit.sections[section].append(entry)
        last_exec = entry if entry.key == "ExecStart" else None
    return detached


def _environment(
    unit: Unit, referenced: ReferencedFiles
) -> tuple[dict[str, tuple[str, int]], bool]:
    """The service's variables (EnvironmentFile=, then Environment=) with their lines, and
    whether an EnvironmentFile= could not be read."""
    env: dict[str, tuple[str, int]] = {}
    unread = False
    for e in unit.all("Service", "EnvironmentFile"):
        loaded = _read_env_file(e.value.removeprefix("-"), referenced)
        if loaded is None:
            unread = True
        else:
            env.update({k: (v, e.line) for k, v in loaded.items()})
    for e in unit.all("Service", "Environment"):
        for w in split_words(e.value, e.line):
            k, eq, v = w.text.partition("=")
            if eq:
                env[k] = (v, e.line)
    return env, unread


def _credentials(unit: Unit) -> dict[str, str]:
    """systemd credentials: `LoadCredential=NAME:PATH` is read by the service as `%d/NAME` (or
    `$CREDENTIALS_DIRECTORY/NAME`); the validator names PATH instead (a rule reads it only as the
    referenced-files policy allows)."""
    credentials: dict[str, str] = {}
    for e in unit.all("Service", "LoadCredential"):
        name, colon, src = e.value.partition(":")
        if colon and name:
            credentials[name] = src
    return credentials


def _exec_tokens(
    exec_start: UnitEntry, variables: dict[str, str], credentials: dict[str, str]
) -> list[Token]:
    value = exec_start.value
    if not exec_start.marks and not any(c in value for c in "'\"\\$%@"):
        # plain words on one line (most units): the words are the arguments
        plain = value.split()
        if not plain:
            return []
        line = exec_start.line
        prog = plain[0].lstrip("-:+!|")
        return [Token(w, line) for w in ([prog] if prog else []) + plain[1:]]
    words = _split_at(exec_start.value, exec_start.line)
    if not words:
        return []
    prog = words[0][0].lstrip("-@:+!|")
    tokens = [Token(prog, exec_start.line)] if prog else []
    if words[0][0].lstrip("-:+!|").startswith("@") and len(words) > 1:
        words = words[1:]  # @: the next word is argv[0]
    marked = bool(exec_start.marks)
    line = exec_start.line
    for text_, quoted, at in words[1:]:
        if marked:
            line = exec_start.line_at(at)
        if "$" in text_ or "%" in text_:
            tokens += _expand(text_, quoted, line, variables, credentials)
        else:
            tokens.append(Token(text_, line))
    return tokens


def _expand(
    text: str, quoted: bool, line: int, variables: dict[str, str], credentials: dict[str, str]
) -> list[Token]:
    """One ExecStart= word expanded as systemd does."""
    if "$" not in text and "%" not in text:
        return [Token(text, line)]
    whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", text)
    if whole and not quoted:
        name = whole.group(1)
        if name in variables:
            # systemd splits an unbraced $VAR on whitespace
            return [Token(p, line) for p in variables[name].split()]
        return [Token(text, line, True, True)]
    unknown = False

    def var(m: re.Match[str]) -> str:
        nonlocal unknown
        name = m.group(1) or m.group(2)
        if name in variables:
            return variables[name]
        if name == "CREDENTIALS_DIRECTORY":
            return m.group(0)
        unknown = True
        return m.group(0)

    def spec(m: re.Match[str]) -> str:
        nonlocal unknown
        ch = m.group(1)
        if ch == "%":
            return "%"
        if ch == "d":
            return m.group(0)
        unknown = True
        return m.group(0)

    out = _CRED.sub(lambda m: credentials.get(m.group(1), m.group(0)), text)
    out = _VAR.sub(var, out)
    if "%" in out:
        out = _SPECIFIER.sub(spec, out)
    return [Token(out, line, unknown)]

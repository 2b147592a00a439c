"""Parse llama-server command lines from every form users keep them in.

Forms: POSIX shell scripts (``\\`` continuations, ``VAR=value`` assignments, ``export``),
Windows ``.cmd``/``.bat`` files (``^`` continuations, ``set VAR=value``, ``%VAR%``), systemd
``ExecStart=`` lines (see :mod:`llamafleet.units`), structured YAML/JSON argument mappings (the
``llama_server`` role's instance variables, rendered by :func:`render_argv`), and raw argv strings.

Every form ends in the same :class:`ServerConfig`: the options in order, each with the line it
came from, plus the ``LLAMA_ARG_*`` environment equivalents.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llamafleet.flags import CHOICES, INTEGER_STRINGS, FlagSpec, table


class ParseError(ValueError):
    """Input that cannot be read as a llama-server command; carries the line."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Token:
    text: str
    line: int


@dataclass
class Option:
    """One option as given: spelling, canonical name, value and where it came from."""

    written: str
    canonical: str
    value: str | None
    line: int
    spec: FlagSpec | None
    negated: bool = False
    from_env: str | None = None  # the LLAMA_ARG_* variable it came from
    missing_value: bool = False

    @property
    def display(self) -> str:
        if self.from_env:
            return f"{self.from_env}={self.value}"
        if self.value is None:
            return self.written
        return f"{self.written} {self.value}"


@dataclass
class ServerConfig:
    """A llama-server invocation: its options and environment."""

    path: str
    line: int = 1
    binary: str | None = None
    options: list[Option] = field(default_factory=list)
    env: dict[str, tuple[str, int]] = field(default_factory=dict)
    positional: list[Token] = field(default_factory=list)
    source: str = "argv"  # argv | shell | cmd | unit | mapping
    _index: dict[str, Option] = field(default_factory=dict, repr=False)
    _indexed: int = field(default=-1, repr=False)

    # -- lookups (the last occurrence wins, as in llama.cpp; argv wins over LLAMA_ARG_*) --
    def get(self, canonical: str) -> Option | None:
        if self._indexed != len(self.options):
            index: dict[str, Option] = {}
            for opt in self.options:  # environment first, so the command line overrides it
                if opt.from_env is not None:
                    index[opt.canonical] = opt
            for opt in self.options:
                if opt.from_env is None:
                    index[opt.canonical] = opt
            self._index, self._indexed = index, len(self.options)
        return self._index.get(canonical)

    def has(self, canonical: str) -> bool:
        opt = self.get(canonical)
        return opt is not None and not opt.negated

    def value(self, canonical: str) -> str | None:
        opt = self.get(canonical)
        return None if opt is None or opt.negated else opt.value

    def int_value(self, canonical: str) -> int | None:
        v = self.value(canonical)
        if v is None:
            return None
        try:
            return int(v, 0) if v.lower().startswith(("0x", "-0x")) else int(v)
        except ValueError:
            return None

    def bool_value(self, canonical: str) -> bool | None:
        """True/False for on/off style options; None when not given."""
        opt = self.get(canonical)
        if opt is None:
            return None
        if opt.negated:
            return False
        if opt.value is None:
            return True
        return opt.value.lower() in ("1", "true", "on", "yes", "enabled")


# ----------------------------------------------------------------------------- tokenizers


_SEPARATORS = {";", "&&", "||", "|", "&"}


def tokenize_shell(text: str) -> list[list[Token]]:
    """Split shell text into commands of tokens (quotes, escapes, ``\\`` continuations).

    Good enough for the scripts people keep llama-server in: no command substitution is run,
    ``$VAR`` is kept literally (expanded later from static assignments).
    """
    commands: list[list[Token]] = []
    cur: list[Token] = []
    buf: list[str] = []
    have = False
    tok_line = line = 1
    i, n = 0, len(text)

    def flush() -> None:
        nonlocal buf, have
        if have:
            cur.append(Token("".join(buf), tok_line))
        buf, have = [], False

    def end_command() -> None:
        nonlocal cur
        flush()
        if cur:
            commands.append(cur)
        cur = []

    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2
                line += 1
                continue
            if i + 1 < n and text[i + 1] == "\r" and i + 2 < n and text[i + 2] == "\n":
                i += 3
                line += 1
                continue
            if not have:
                tok_line = line
            have = True
            if i + 1 < n:
                buf.append(text[i + 1])
            i += 2
            continue
        if ch in " \t\r":
            flush()
            i += 1
            continue
        if ch == "\n":
            end_command()
            line += 1
            i += 1
            continue
        if ch == "#" and not have:
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch in "'\"":
            if not have:
                tok_line = line
            have = True
            q = ch
            i += 1
            while i < n and text[i] != q:
                if q == '"' and text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$`\n':
                    if text[i + 1] == "\n":
                        line += 1
                    else:
                        buf.append(text[i + 1])
                    i += 2
                    continue
                if text[i] == "\n":
                    line += 1
                buf.append(text[i])
                i += 1
            if i >= n:
                raise ParseError(f"unterminated {q} quote", tok_line)
            i += 1
            continue
        if ch in ";&|":
            flush()
            op = text[i : i + 2] if text[i : i + 2] in ("&&", "||") else ch
            i += len(op)
            end_command()
            continue
        if not have:
            tok_line = line
        have = True
        buf.append(ch)
        i += 1
    end_command()
    return commands


def tokenize_cmd(text: str) -> list[list[Token]]:
    """Split a Windows batch file into commands (``^`` continuations, ``"`` quotes)."""
    commands: list[list[Token]] = []
    cur: list[Token] = []
    buf: list[str] = []
    have = False
    tok_line = line = 1
    i, n = 0, len(text)
    text = text.replace("\r\n", "\n")
    n = len(text)
    at_line_start = True

    def flush() -> None:
        nonlocal buf, have
        if have:
            cur.append(Token("".join(buf), tok_line))
        buf, have = [], False

    while i < n:
        ch = text[i]
        if at_line_start:
            rest = text[i:].lstrip(" \t@")
            low = rest[:4].lower()
            if rest.startswith("::") or low == "rem" or low.startswith("rem ") or low == "rem\n":
                while i < n and text[i] != "\n":
                    i += 1
                continue
            at_line_start = False
        if ch == "^":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2
                line += 1
                continue
            if not have:
                tok_line = line
            have = True
            if i + 1 < n:
                buf.append(text[i + 1])
            i += 2
            continue
        if ch in " \t":
            flush()
            i += 1
            continue
        if ch == "\n":
            flush()
            if cur:
                commands.append(cur)
            cur = []
            line += 1
            i += 1
            at_line_start = True
            continue
        if ch == '"':
            if not have:
                tok_line = line
            have = True
            i += 1
            while i < n and text[i] not in '"\n':
                buf.append(text[i])
                i += 1
            if i < n and text[i] == '"':
                i += 1
            continue
        if ch == "&":
            flush()
            if cur:
                commands.append(cur)
            cur = []
            i += 2 if text[i : i + 2] == "&&" else 1
            continue
        if not have:
            tok_line = line
        have = True
        buf.append(ch)
        i += 1
    flush()
    if cur:
        commands.append(cur)
    return commands


# ----------------------------------------------------------------------------- expansion

_SH_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_CMD_VAR = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)%")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def expand_sh(text: str, variables: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _SH_VAR.sub(sub, text)


def _is_server_binary(word: str) -> bool:
    base = re.split(r"[\\/]", word)[-1].lower()
    return base in ("llama-server", "llama-server.exe", "server", "server.exe") or (
        base.startswith("llama-server") and not base.endswith((".sh", ".cmd", ".bat"))
    )


# ----------------------------------------------------------------------------- argv → options


_NUMBER = re.compile(r"-\d+(\.\d+)?([eE][-+]?\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")


def _looks_like_option(word: str) -> bool:
    if not word.startswith("-") or word in ("-", "--"):
        return False
    return not _NUMBER.fullmatch(word)


def parse_tokens(tokens: list[Token], cfg: ServerConfig) -> ServerConfig:
    """Turn argv tokens (without the program name) into options of `cfg`."""
    t = table()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        word = tok.text
        if not _looks_like_option(word):
            cfg.positional.append(tok)
            i += 1
            continue
        name, eq, inline = word.partition("=")
        found = t.lookup(name)
        if found is None:
            # Unknown option: keep it; take a following non-option word as its value.
            value: str | None = inline if eq else None
            if not eq and i + 1 < len(tokens) and not _looks_like_option(tokens[i + 1].text):
                value = tokens[i + 1].text
                i += 1
            cfg.options.append(Option(name, name, value, tok.line, None))
            i += 1
            continue
        spec, negated = found
        opt = Option(name, spec.canonical, None, tok.line, spec, negated=negated)
        if spec.takes_value and not negated:
            if eq:
                opt.value = inline
            elif i + 1 < len(tokens) and not _value_is_option(spec, tokens[i + 1].text):
                opt.value = tokens[i + 1].text
                i += 1
            else:
                opt.missing_value = True
        elif eq:
            opt.value = inline
        cfg.options.append(opt)
        i += 1
    return cfg


def _value_is_option(spec: FlagSpec, word: str) -> bool:
    """Whether `word` after a value-taking option is really the next option."""
    if not _looks_like_option(word):
        return False
    choices = CHOICES.get(spec.canonical)
    if choices and word in choices:
        return False
    return table().lookup(word.partition("=")[0]) is not None or word.startswith("--")


def apply_env(cfg: ServerConfig, env: Mapping[str, tuple[str, int]]) -> None:
    """Add LLAMA_ARG_* variables as options (they rank below the command line)."""
    t = table()
    for key, (val, line) in env.items():
        cfg.env[key] = (val, line)
        spec = t.by_env.get(key)
        if spec is None:
            continue
        negated = spec.kind in ("bool", "flag") and val.strip().lower() in (
            "0",
            "false",
            "off",
            "no",
            "disabled",
        )
        value = val if spec.takes_value else None
        cfg.options.append(
            Option(key, spec.canonical, value, line, spec, negated=negated, from_env=key)
        )


def _find_server_command(
    commands: list[list[Token]],
    expand: Any,
    variables: dict[str, str],
    env_out: dict[str, tuple[str, int]],
) -> list[Token] | None:
    for cmd in commands:
        words = [Token(expand(t.text, variables), t.line) for t in cmd]
        # assignments: VAR=value, export VAR=value, set VAR=value (cmd)
        j = 0
        local_env: dict[str, tuple[str, int]] = {}
        if words and words[0].text.lower() in ("export", "set", "declare", "local", "readonly"):
            keyword = words[0].text.lower()
            for w in words[1:]:
                m = _ASSIGN.match(w.text)
                if m:
                    variables[m.group(1)] = m.group(2)
                    if keyword in ("export", "set"):
                        env_out[m.group(1)] = (m.group(2), w.line)
            continue
        while j < len(words) and _ASSIGN.match(words[j].text):
            m = _ASSIGN.match(words[j].text)
            assert m
            local_env[m.group(1)] = (m.group(2), words[j].line)
            j += 1
        if j == len(words):
            for k, (v, _) in local_env.items():
                variables[k] = v
            continue
        rest = words[j:]
        while rest and rest[0].text in ("exec", "nohup", "sudo", "time", "env", "call", "start"):
            rest = rest[1:]
            while rest and (_ASSIGN.match(rest[0].text) or rest[0].text.startswith("-")):
                m = _ASSIGN.match(rest[0].text)
                if m:
                    local_env[m.group(1)] = (m.group(2), rest[0].line)
                rest = rest[1:]
        if rest and _is_server_binary(rest[0].text):
            env_out.update(local_env)
            return rest
    return None


def parse_script(text: str, path: str, windows: bool | None = None) -> ServerConfig:
    """Parse a shell script or Windows batch file that starts llama-server."""
    if windows is None:
        windows = path.lower().endswith((".cmd", ".bat"))
    commands = tokenize_cmd(text) if windows else tokenize_shell(text)
    variables: dict[str, str] = {}
    env: dict[str, tuple[str, int]] = {}

    def expand(s: str, v: Mapping[str, str]) -> str:
        if windows:
            return _CMD_VAR.sub(lambda m: v.get(m.group(1), m.group(0)), s)
        return expand_sh(s, v)

    cmd = _find_server_command(commands, expand, variables, env)
    if cmd is None:
        raise ParseError("no llama-server command found (looked for llama-server or server)", 1)
    cfg = ServerConfig(
        path=path, line=cmd[0].line, binary=cmd[0].text, source="cmd" if windows else "shell"
    )
    parse_tokens(cmd[1:], cfg)
    apply_env(cfg, env)
    return cfg


def parse_argv_string(text: str, path: str = "<argv>") -> ServerConfig:
    """Parse a raw command line; the program name is optional."""
    commands = tokenize_shell(text)
    tokens = [t for cmd in commands for t in cmd]
    cfg = ServerConfig(path=path, source="argv")
    if tokens and _is_server_binary(tokens[0].text):
        cfg.binary = tokens[0].text
        tokens = tokens[1:]
    return parse_tokens(tokens, cfg)


def parse_argv_list(argv: Iterable[str], path: str = "<argv>") -> ServerConfig:
    """Parse an argv list as given to exec(); the program name is optional."""
    words = list(argv)
    cfg = ServerConfig(path=path, source="argv")
    if words and _is_server_binary(words[0]):
        cfg.binary = words[0]
        words = words[1:]
    return parse_tokens([Token(w, 1) for w in words], cfg)


# ----------------------------------------------------------------------------- structured args

#: Keys of an instance mapping that are not llama-server options.
INSTANCE_KEYS = (
    "name",
    "model",
    "mmproj",
    "host",
    "port",
    "args",
    "extra_args",
    "environment",
    "binary",
    "enabled",
    "alias",
)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def render_argv(instance: Mapping[str, Any]) -> list[str]:
    """Render a structured instance (the ``llama_server`` role's variables) to an argv list.

    ``model``, ``mmproj``, ``host``, ``port`` and ``alias`` become their options; every key of
    ``args`` becomes ``--key-with-dashes``: ``true`` gives the bare option (or ``on`` for on/off
    options), ``false`` its ``--no-`` form (or ``off``), ``null`` is skipped, a list repeats the
    option. ``extra_args`` is appended verbatim. This function is the only renderer: the role's
    unit file and the validator's preflight both use it.
    """
    t = table()
    argv: list[str] = []
    for key, flag in (
        ("model", "--model"),
        ("mmproj", "--mmproj"),
        ("alias", "--alias"),
        ("host", "--host"),
        ("port", "--port"),
    ):
        if instance.get(key) not in (None, ""):
            argv += [flag, _scalar(instance[key])]
    args = instance.get("args") or {}
    if not isinstance(args, Mapping):
        raise ParseError("'args' must be a mapping of option names to values")
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-").lstrip("-")
        found = t.lookup(flag)
        spec = found[0] if found else None
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, bool) and spec is not None and not spec.takes_value:
                if v:
                    argv.append(flag)
                elif spec.negations:
                    argv.append(
                        next((n for n in spec.negations if n.startswith("--")), spec.negations[0])
                    )
                continue
            if isinstance(v, bool) and spec is None:
                if v:
                    argv.append(flag)
                continue
            argv += [flag, _scalar(v)]
    extra = instance.get("extra_args") or []
    if isinstance(extra, str):
        extra = [t_.text for cmd in tokenize_shell(extra) for t_ in cmd]
    argv += [str(x) for x in extra]
    return argv


def parse_mapping(instance: Mapping[str, Any], path: str, line: int = 1) -> ServerConfig:
    """Parse a structured instance mapping into a ServerConfig (through :func:`render_argv`)."""
    argv = render_argv(instance)
    cfg = ServerConfig(
        path=path, line=line, binary=str(instance.get("binary") or "llama-server"), source="mapping"
    )
    parse_tokens([Token(a, line) for a in argv], cfg)
    env = instance.get("environment") or {}
    if isinstance(env, Mapping):
        apply_env(cfg, {str(k): (_env_str(v), line) for k, v in env.items()})
    return cfg


def _env_str(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def validate_value(opt: Option) -> str | None:
    """Return why an option's value is invalid, or None."""
    spec = opt.spec
    if spec is None or opt.negated:
        return None
    if opt.missing_value:
        hint = f" ({spec.value_hint})" if spec.value_hint else ""
        extra = ""
        if spec.canonical == "--flash-attn":
            extra = "; older builds took a bare -fa, current ones need on|off|auto"
        return f"{opt.written} needs a value{hint}{extra}"
    v = opt.value
    if v is None:
        return None
    choices = CHOICES.get(spec.canonical)
    if choices is not None and v not in choices:
        return f"{opt.written} {v!r} is not one of {', '.join(choices)}"
    if spec.kind == "int" or spec.canonical in INTEGER_STRINGS:
        if spec.canonical == "--gpu-layers" and v in ("auto", "all"):
            return None
        if not _INTEGER.fullmatch(v.strip()):
            return f"{opt.written} {v!r} is not an integer"
    if spec.kind == "float":
        try:
            float(v)
        except ValueError:
            return f"{opt.written} {v!r} is not a number"
    if spec.canonical == "--parallel" and v.strip() == "0":
        return f"{opt.written} 0 is rejected by llama-server (use -1 for auto, or N >= 1)"
    return None


def home_relative(path: str) -> str:
    return path.replace(os.path.expanduser("~"), "~", 1) if path else path

"""llama-server command lines: the options as llama.cpp's own parser reads them.

Every form users keep their flags in (shell scripts, Windows ``.cmd``/``.bat`` and PowerShell
files, systemd units, Docker Compose files and ``docker run``, the ``llama_server`` role's
structured variables, raw argv strings; see :mod:`llamafleet.readers`) ends in the same
:class:`ServerConfig`: the options in order, each with the line it came from, plus the
``LLAMA_ARG_*`` environment equivalents.

The reading follows llama.cpp's ``common/arg.cpp`` (``common_params_parse_ex``):

* every argument must be an option: a word that is not (``model.gguf`` after a flag that takes
  no value, ``true`` after ``--jinja``) stops llama-server with ``error: invalid argument``, and so
  does ``--ctx-size=4096`` (there is no ``=`` form) or ``"--port 8080"`` as one argument;
* a long option may be written with ``_`` for ``-`` (``--ctx_size``): llama.cpp replaces every
  ``_`` of an argument that starts with ``--`` before looking it up;
* an option that takes a value takes the next argument, whatever it is;
* on/off options accept ``on|enabled|true|1``, ``off|disabled|false|0`` and (where the handler
  says so) ``auto|-1``; ``-ngl`` also ``auto`` and ``all``; each option's accepted words come from
  its handler (:mod:`llamafleet.flags`).

A value the validator cannot know (a shell or systemd variable set outside the file) is
*unknown*, never invalid: :attr:`Option.unknown`. An unquoted expansion that may split into
several words (``$EXTRA_ARGS``) may hold options: the config is then *opaque*
(:attr:`ServerConfig.opaque`) and a bare word after it is not called stray.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from llamafleet.flags import FALSEY, TRUTHY, FlagSpec, table
from llamafleet.lazyre import lazy
from llamafleet.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class ParseError(ValueError):
    """Input that cannot be read as a llama-server command; carries the line."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


class Token:
    """One argument as the program receives it, with the line it was written on.

    ``unknown``: its text holds an expansion the validator cannot resolve (the text is what was
    written). ``split``: an unquoted expansion of that kind, which the shell (or systemd) splits
    into zero or more arguments: what follows it may sit at other positions."""

    __slots__ = ("line", "split", "text", "unknown")

    def __init__(self, text: str, line: int, unknown: bool = False, split: bool = False) -> None:
        self.text = text
        self.line = line
        self.unknown = unknown
        self.split = split

    def __repr__(self) -> str:
        flags = "?" if self.unknown else ""
        return f"Token({self.text!r}{flags}, {self.line})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token) and (self.text, self.line, self.unknown, self.split) == (
            other.text,
            other.line,
            other.unknown,
            other.split,
        )

    __hash__ = None  # type: ignore[assignment]


class Option:
    """One option as given: spelling, canonical name, value and where it came from."""

    __slots__ = (
        "canonical",
        "from_env",
        "line",
        "missing_value",
        "negated",
        "spec",
        "unknown",
        "value",
        "written",
    )

    def __init__(  # noqa: PLR0917 - the order the parser has always used
        self,
        written: str,
        canonical: str,
        value: str | None,
        line: int,
        spec: FlagSpec | None,
        negated: bool = False,
        from_env: str | None = None,
        missing_value: bool = False,
        unknown: bool = False,
    ) -> None:
        self.written = written
        self.canonical = canonical
        self.value = value
        self.line = line
        self.spec = spec
        self.negated = negated
        self.from_env = from_env  # the LLAMA_ARG_* variable it came from
        self.missing_value = missing_value
        #: the value is an expansion the validator cannot resolve (``value`` is its text as
        #: written, e.g. ``${CTX}``): rules that need the value stay silent
        self.unknown = unknown

    def __repr__(self) -> str:
        return (
            f"Option({self.written!r} -> {self.canonical}, {self.value!r}, line {self.line}"
            f"{', negated' if self.negated else ''}{', unknown' if self.unknown else ''}"
            f"{', from ' + self.from_env if self.from_env else ''})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Option) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def display(self) -> str:
        if self.from_env:
            return f"{self.from_env}={self.value}"
        if self.value is None:
            return self.written
        return f"{self.written} {self.value}"


class Refusal:
    """An argument llama-server refuses at start-up ("error: invalid argument: ...")."""

    __slots__ = ("after", "kind", "option", "token")

    def __init__(
        self,
        token: Token,
        kind: str,
        option: str | None = None,
        after: Option | None = None,
    ) -> None:
        self.token = token
        self.kind = kind  # positional | equals | joined
        self.option = option  # the option it belongs to, when known
        #: for a positional word: the option right before it when that one takes no value
        self.after = after

    def __repr__(self) -> str:
        return f"Refusal({self.token!r}, {self.kind!r})"


class ServerConfig(Record):
    """A llama-server invocation: its options and environment.

    Fields: ``refused``: arguments llama-server refuses (positional words, --opt=value,
    "--opt value" in one word). ``detached``: option lines cut off from the command by a missing
    line continuation (each: the first argument of the line). ``opaque``: options may hide in an
    expansion the validator cannot resolve. ``env_opaque``: an environment the validator did not
    read (an EnvironmentFile=, a Compose env_file, a docker --env-file) may set LLAMA_ARG_*
    options, the key among them. ``published``: in a container, (host address, host port,
    container port) of each published port; None when not in a container (or with the host's
    network). ``names``: other names the server is reached by (a Compose service name, a
    container name). ``build``: the llama.cpp build number the file itself names (a release
    archive, an image tag). ``memo``: values rules compute once per server (its addresses, ...)."""

    _fields = (
        "path",
        "line",
        "binary",
        "options",
        "env",
        "positional",
        "source",
        "refused",
        "detached",
        "opaque",
        "env_opaque",
        "published",
        "names",
        "build",
        "_index",
        "_indexed",
        "_ints",
        "memo",
    )
    _hidden = frozenset(("_index", "_indexed", "_ints", "memo"))

    def __init__(  # noqa: PLR0917 - the fields, in the order they always had
        self,
        path: str,
        line: int = 1,
        binary: str | None = None,
        options: list[Option] | None = None,
        env: dict[str, tuple[str, int]] | None = None,
        positional: list[Token] | None = None,
        source: str = "argv",  # argv | shell | cmd | powershell | unit | mapping | compose | docker
        refused: list[Refusal] | None = None,
        detached: list[Token] | None = None,
        opaque: bool = False,
        env_opaque: bool = False,
        published: list[tuple[str, int, int]] | None = None,
        names: tuple[str, ...] = (),
        build: int | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.binary = binary
        self.options: list[Option] = options if options is not None else []
        self.env: dict[str, tuple[str, int]] = env if env is not None else {}
        self.positional: list[Token] = positional if positional is not None else []
        self.source = source
        self.refused: list[Refusal] = refused if refused is not None else []
        self.detached: list[Token] = detached if detached is not None else []
        self.opaque = opaque
        self.env_opaque = env_opaque
        self.published = published
        self.names = names
        self.build = build
        self._index: dict[str, Option] = {}
        self._indexed = 0
        self._ints: dict[str, int | None] = {}
        self.memo: dict[str, Any] = {}

    # -- lookups (the last occurrence wins, as in llama.cpp; argv wins over LLAMA_ARG_*) --
    def _reindex(self) -> dict[str, Option]:
        index: dict[str, Option] = {}
        env: dict[str, Option] = {}
        for opt in self.options:
            if opt.from_env is None:
                index[opt.canonical] = opt
            else:
                env[opt.canonical] = opt
        for canonical, opt in env.items():  # the command line overrides the environment
            if canonical not in index:
                index[canonical] = opt
        self._index, self._indexed = index, len(self.options)
        self._ints = {}
        return index

    def get(self, canonical: str) -> Option | None:
        index = self._index if self._indexed == len(self.options) else self._reindex()
        return index.get(canonical)

    def has(self, canonical: str) -> bool:
        index = self._index if self._indexed == len(self.options) else self._reindex()
        opt = index.get(canonical)
        return opt is not None and not opt.negated

    def value(self, canonical: str) -> str | None:
        """The option's value as written; None when absent or negated. An unknown value (an
        expansion the validator cannot resolve) is its text as written: see :meth:`is_unknown`."""
        index = self._index if self._indexed == len(self.options) else self._reindex()
        opt = index.get(canonical)
        return None if opt is None or opt.negated else opt.value

    def is_unknown(self, canonical: str) -> bool:
        """Whether the option is given with a value the validator cannot resolve."""
        index = self._index if self._indexed == len(self.options) else self._reindex()
        opt = index.get(canonical)
        return opt is not None and opt.unknown

    def int_value(self, canonical: str) -> int | None:
        """The value as an integer; None when absent, unknown or not an integer."""
        index = self._index if self._indexed == len(self.options) else self._reindex()
        ints = self._ints
        if canonical in ints:
            return ints[canonical]
        opt = index.get(canonical)
        v = None if opt is None or opt.negated or opt.unknown else opt.value
        n: int | None = None
        if v is not None:
            try:
                n = int(v, 0) if v.lower().startswith(("0x", "-0x")) else int(v)
            except ValueError:
                # `8192.0`: what llama-server's std::stoi reads, where that is what was meant
                read = stoi(v)
                n = read[0] if read and re.fullmatch(r"\.0*", read[1].strip()) else None
        ints[canonical] = n
        return n

    def bool_value(self, canonical: str) -> bool | None:
        """True/False for on/off style options; None when not given or unknown."""
        opt = self.get(canonical)
        if opt is None or opt.unknown:
            return None
        if opt.negated:
            return False
        if opt.value is None:
            return True
        return opt.value.lower() in (*TRUTHY, "yes")


# ----------------------------------------------------------------------------- argv → options


_NUMBER = lazy(r"-\d+(\.\d+)?([eE][-+]?\d+)?")
_INTEGER = lazy(r"\s*[-+]?\d+")
#: what std::stoi reads (llama-server's integer options, common/arg.cpp): blanks, a sign, digits;
#: the rest of the value is ignored
_STOI = lazy(r"\s*([-+]?\d+)")
_INT_MAX = 2**31 - 1
#: what std::stof reads: blanks, a sign, a decimal number (or inf, nan)
_STOF = lazy(r"\s*[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan)", re.I)


def stoi(value: str) -> tuple[int, str] | None:
    """What llama-server's std::stoi makes of ``value``: (the integer, the ignored rest), or None
    where it throws (no leading integer, or outside a 32-bit int): the server refuses those."""
    m = _STOI.match(value)
    if m is None:
        return None
    n = int(m.group(1))
    if not -_INT_MAX - 1 <= n <= _INT_MAX:
        return None
    return n, value[m.end() :]


_SERVER_SUFFIXES = (".sh", ".cmd", ".bat", ".ps1", ".py", ".service", ".log", ".txt", ".gguf")


def is_server_binary(word: str) -> bool:
    """Whether ``word`` names llama-server (a path, ``llama-server.exe``, the old ``server``)."""
    if word.endswith(":"):
        return False  # a make target (`$(PREFIX)/bin/llama-server: deps`) or a label, not a program
    base = word.strip("\"'").rpartition("/")[2].rpartition("\\")[2].lower()
    return base in ("llama-server", "llama-server.exe", "server", "server.exe") or (
        base.startswith("llama-server") and not base.endswith(_SERVER_SUFFIXES)
    )


_is_server_binary = is_server_binary  # the former private name


def _is_option(word: str) -> bool:
    """Whether an argument is an option (``-x``, ``--xx``) and not a number like ``-1``."""
    second = word[1:2]
    if word[:1] != "-" or not second or word == "--":
        return False
    return second.isalpha() or second == "-" or not _NUMBER.fullmatch(word)


def parse_tokens(tokens: list[Token], cfg: ServerConfig) -> ServerConfig:
    """Turn argv tokens (without the program name) into options of ``cfg``, as llama.cpp reads
    them; arguments it refuses go to ``cfg.refused`` (and bare words to ``cfg.positional``)."""
    t = table()
    by_name = t.by_name
    options = cfg.options
    indexed = cfg._indexed == len(options)  # the index is current: keep it so
    first = len(options)
    i = 0
    n = len(tokens)
    uncertain = False  # after an expansion that may hold options: a bare word may be a value
    while i < n:
        tok = tokens[i]
        i += 1
        word = tok.text
        if tok.split:
            # an unresolved unquoted expansion: zero or more arguments, options among them maybe
            cfg.opaque = uncertain = True
            continue
        if word[:1] != "-" or not _is_option(word):
            if tok.unknown:
                cfg.opaque = uncertain = True
            elif not uncertain:
                cfg.positional.append(tok)
                cfg.refused.append(
                    Refusal(tok, "positional", after=_flag_before(tokens, i, options))
                )
            continue
        if "=" in word:
            name, eq, inline = word.partition("=")
        else:
            name, eq, inline = word, "", ""
        if tok.unknown and any(c in name for c in "$%`!"):
            # the option's own name is not known (``--$FLAG``): it may be anything
            cfg.opaque = uncertain = True
            continue
        uncertain = False
        joined = False
        if not eq and (" " in word or "\t" in word) and word.strip():
            # one argument holding an option and its value ("--port 8080" in a YAML list)
            name, _, rest = word.strip().partition(" ")
            inline = rest.strip()
            joined = bool(inline)
        found = by_name.get(name)
        if found is None and "_" in name and name[:2] == "--":
            found = by_name.get(name.replace("_", "-"))
        if eq or joined:
            cfg.refused.append(
                Refusal(tok, "equals" if eq else "joined", found[0].canonical if found else None)
            )
        if found is None:
            # Unknown option: keep it; take a following non-option word as its value.
            value: str | None = inline if (eq or joined) else None
            unknown_value = False
            if not (eq or joined) and i < n and not _is_option(tokens[i].text):
                nxt = tokens[i]
                value, unknown_value = nxt.text, nxt.unknown or nxt.split
                i += 1
            options.append(Option(name, name, value, tok.line, None, unknown=unknown_value))
            continue
        spec, negated = found
        if spec.takes_value and not negated:
            if eq or joined:
                options.append(
                    Option(
                        name,
                        spec.canonical,
                        inline,
                        tok.line,
                        spec,
                        False,
                        None,
                        False,
                        tok.unknown,
                    )
                )
                continue
            if i < n:
                nxt = tokens[i]
                w = nxt.text
                if (
                    nxt.split
                    or w[:1] != "-"
                    or not _is_option(w)
                    or (spec.values is not None and w in spec.values)
                    or not (w in by_name or w.partition("=")[0] in by_name or w[:2] == "--")
                ):
                    i += 1
                    options.append(
                        Option(
                            name,
                            spec.canonical,
                            w,
                            tok.line,
                            spec,
                            False,
                            None,
                            False,
                            nxt.unknown or nxt.split,
                        )
                    )
                    continue
            options.append(Option(name, spec.canonical, None, tok.line, spec, False, None, True))
            continue
        options.append(
            Option(
                name, spec.canonical, inline if (eq or joined) else None, tok.line, spec, negated
            )
        )
    if indexed:  # the command line's options win over what the index holds (the environment)
        index = cfg._index
        for opt in options[first:]:
            index[opt.canonical] = opt
        cfg._indexed = len(options)
        cfg._ints.clear()
    return cfg


def _flag_before(tokens: list[Token], i: int, options: list[Option]) -> Option | None:
    """The option right before ``tokens[i - 1]`` when it takes no value (``--jinja true``)."""
    if not options or i < 2 or tokens[i - 2].text != options[-1].written:
        return None
    prev = options[-1]
    return prev if prev.spec is not None and not prev.spec.takes_value else None


def _value_is_option(
    spec: FlagSpec, tok: Token, by_name: Mapping[str, tuple[FlagSpec, bool]] | None = None
) -> bool:
    """Whether the argument after a value-taking option is really the next option."""
    word = tok.text
    if tok.split or not _is_option(word):
        return False
    if spec.values and word in spec.values:
        return False
    names = by_name if by_name is not None else table().by_name
    return word.partition("=")[0] in names or word.startswith("--")


def apply_env(
    cfg: ServerConfig, env: Mapping[str, tuple[str, int]], unknown: Iterable[str] = ()
) -> None:
    """Add LLAMA_ARG_* variables as options (they rank below the command line). ``unknown``:
    the variables whose values cannot be resolved. ``LLAMA_ARG_NO_X`` (any value) turns an
    on/off option off, as llama.cpp reads it."""
    t = table()
    unresolved = set(unknown)
    indexed = cfg._indexed == len(cfg.options)
    first = len(cfg.options)
    for key, (val, line) in env.items():
        cfg.env[key] = (val, line)
        spec = t.by_env.get(key)
        negated_env = False
        if spec is None and key.startswith("LLAMA_ARG_NO_"):
            spec = t.by_env.get("LLAMA_ARG_" + key[len("LLAMA_ARG_NO_") :])
            negated_env = spec is not None and bool(spec.negations)
            if not negated_env:
                spec = None
        if spec is None:
            continue
        is_unknown = key in unresolved
        text = val.strip()
        negated = negated_env or (
            not is_unknown
            and spec.kind in ("bool", "flag")
            and text.lower() in (*FALSEY, "no", "false")
        )
        value = val if spec.takes_value else None
        cfg.options.append(
            Option(
                key,
                spec.canonical,
                value,
                line,
                spec,
                negated=negated,
                from_env=key,
                unknown=is_unknown and spec.takes_value,
            )
        )
    if indexed:  # an environment variable never wins over the command line
        index = cfg._index
        for opt in cfg.options[first:]:
            held = index.get(opt.canonical)
            if held is None or held.from_env is not None:
                index[opt.canonical] = opt
        cfg._indexed = len(cfg.options)
        cfg._ints.clear()


def parse_argv_list(argv: Iterable[str], path: str = "<argv>") -> ServerConfig:
    """Parse an argv list as given to exec(); the program name is optional."""
    words = list(argv)
    cfg = ServerConfig(path=path, source="argv")
    if words and is_server_binary(words[0]):
        cfg.binary = words[0]
        words = words[1:]
    return parse_tokens([Token(w, 1) for w in words], cfg)


def validate_value(opt: Option) -> str | None:
    """Why llama-server refuses an option's value, or None (an unknown value is never invalid)."""
    spec = opt.spec
    if spec is None or opt.negated or opt.unknown:
        return None
    if opt.missing_value:
        hint = f" ({spec.value_hint})" if spec.value_hint else ""
        extra = ""
        if spec.canonical == "--flash-attn":
            extra = "; older builds took a bare -fa, current ones need on|off|auto"
        return f"{opt.written} needs a value{hint}{extra}"
    v = opt.value
    if v is None or (spec.kind == "str" and spec.values is None):
        return None
    if spec.values is not None:
        if v in spec.values:
            return None
        return f"{opt.written} {v!r} is not one of {', '.join(_shown(spec.values))}"
    if spec.kind == "int":
        if v.isdigit() and not spec.rejects and spec.min_value is None:
            return None
        if v in spec.special:
            return None
        read = stoi(v)
        if read is None:
            also = f" (or {', '.join(spec.special)})" if spec.special else ""
            return f"{opt.written} {v!r} is not an integer{also}"
        n, rest = read
        # std::stoi stops at the first character that is not a digit: `0.0` is 0, as meant, but
        # `200k` is 200 (the server starts, with a value nobody asked for)
        if rest.strip() and not re.fullmatch(r"\.0*", rest.strip()):
            return (
                f"{opt.written} {v!r} is read as {n}: llama-server takes the leading integer "
                f"(std::stoi) and ignores {rest.strip()!r}"
            )
        if n in spec.rejects:
            if spec.canonical == "--parallel":
                return f"{opt.written} {n} is rejected by llama-server (use -1 for auto, or N >= 1)"
            return f"{opt.written} {n} is rejected by llama-server"
        if spec.min_value is not None and n < spec.min_value:
            return f"{opt.written} {n} is rejected by llama-server (the least is {spec.min_value})"
    if spec.kind == "float":
        if v in spec.special:
            return None
        try:
            float(v)
        except ValueError:
            # std::stof (common/arg.cpp) reads a leading number and ignores the rest
            m = _STOF.match(v)
            if m is None:
                return f"{opt.written} {v!r} is not a number"
            return (
                f"{opt.written} {v!r} is read as {m.group(0).strip()}: llama-server takes the "
                f"leading number (std::stof) and ignores {v[m.end() :].strip()!r}"
            )
    return None


def _shown(values: tuple[str, ...]) -> tuple[str, ...]:
    """The accepted words as --help names them: on|off|auto for the on/off family."""
    if set(TRUTHY) <= set(values):
        short = ["on", "off"] + (["auto"] if "auto" in values else [])
        return (*short, *(v for v in values if v not in (*TRUTHY, *FALSEY, "auto", "-1")))
    return values


def home_relative(path: str) -> str:
    return path.replace(os.path.expanduser("~"), "~", 1) if path else path

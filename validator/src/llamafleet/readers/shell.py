"""POSIX shell scripts (sh, bash): every llama-server command, as the shell would run it.

Nothing is executed. The reader follows the script in order: variables and arrays assigned in it
(``CTX=131072``, ``ARGS=(-c 4096 -ngl 99)``, ``ARGS="$ARGS --jinja"``), exported variables
(``LLAMA_ARG_*`` for llama-server, ``ANTHROPIC_*`` for Claude Code), functions (a wrapper
function's body is read where it is called, with the call's arguments as ``$1``, ``"$@"``),
``eval``, ``sh -c``, commands kept in variables (``CMD="llama-server ..."; $CMD``), here-documents
(skipped, except a systemd unit written by one), and every llama-server command of the file,
each with its own lines.

Expansions follow the shell: a quoted ``"$X"`` is one argument; an unquoted ``$X`` is split on
white space. A variable the script does not set is unknown (``$HOME``, ``$1`` at the top level,
``$(nproc)``): its argument is marked so (:class:`~llamafleet.argv.Token`), and an unquoted one
may stand for any number of arguments.
"""

from __future__ import annotations

import re

from llamafleet.argv import ParseError, ServerConfig, Token
from llamafleet.lazyre import lazy
from llamafleet.readers.common import Collector, EnvValue, ReadResult, is_client_key

# ----------------------------------------------------------------------------- tokenizer

#: (kind, text, quoted): kind "lit" (literal text) or "exp" (an expansion as written)
Part = tuple[str, str, bool]


class Word:
    __slots__ = ("array", "line", "parts")

    def __init__(self, parts: list[Part], line: int) -> None:
        self.parts = parts
        self.line = line
        #: the elements of ``NAME=( ... )``
        self.array: list[Word] | None = None

    def literal(self) -> str | None:
        """The word's text when it has no expansion."""
        if len(self.parts) == 1 and self.parts[0][0] == "lit":
            return self.parts[0][1]
        if all(p[0] == "lit" for p in self.parts):
            return "".join(p[1] for p in self.parts)
        return None

    def unquoted_literal(self) -> str | None:
        """The text when the word is one unquoted literal (reserved words, operators)."""
        if len(self.parts) == 1 and self.parts[0][0] == "lit" and not self.parts[0][2]:
            return self.parts[0][1]
        return None

    def __repr__(self) -> str:
        return f"Word({self.parts!r}, {self.line})"


Item = Word | str  # a word, or an operator "(" / ")"


class Command:
    __slots__ = ("end", "heredocs", "items", "line")

    def __init__(
        self,
        items: list[Item],
        line: int,
        end: str = "",
        heredocs: list[tuple[str, str, int, bool]] | None = None,
    ) -> None:
        self.items = items
        self.line = line
        #: what ended it: "\n", ";", "&", "&&", "||", "|", ";;" or "" (end of text)
        self.end = end
        #: here-documents of the command: (delimiter, body, first body line, expands)
        self.heredocs: list[tuple[str, str, int, bool]] = heredocs if heredocs is not None else []

    def __repr__(self) -> str:
        return f"Command({self.items!r}, {self.line}, {self.end!r})"


_SCAN = lazy(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<cont>\\\r?\n)
  | (?P<nl>\n)
  | (?P<heredoc><<-?[ \t]*(?:'[^'\n]*'|"[^"\n]*"|\\?[A-Za-z0-9_.\-]+))
  | (?P<herestr><<<)
  | (?P<redir>(?:[0-9]+|&)?(?:>>|>\||>&|<&|<>|>|<)(?:&?-|&[0-9]+)?)
  | (?P<op>;;&?|;&|&&|\|\||\|&|[;&|()])
  | (?P<sq>')
  | (?P<ansi>\$')
  | (?P<dq>\$?")
  | (?P<dollar>\$)
  | (?P<bq>`)
  | (?P<esc>\\.?)
  | (?P<hash>\#)
  | (?P<lit>[^ \t\r\f\v\n\\'"`$;&|()<>\#]+)
    """,
    re.X | re.S,
)
_VARNAME = lazy(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!\-]")
_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "\\": "\\"}


def _balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the ``close`` that matches the ``open_`` before ``i`` (quotes skipped)."""
    depth = 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'" and open_ != "{":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if ch == '"':
            i = _dq_end(text, i + 1)
            continue
        if ch == "`":
            j = text.find("`", i + 1)
            i = n if j < 0 else j + 1
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ParseError(f"no closing {close!r}")


def _dq_end(text: str, i: int) -> int:
    """Index just past the ``"`` closing a double-quoted string that starts at ``i``."""
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i + 1
        if ch == "$" and i + 1 < n and text[i + 1] in "({":
            i = _balanced(text, i + 2, text[i + 1], ")" if text[i + 1] == "(" else "}")
            continue
        if ch == "`":
            j = text.find("`", i + 1)
            if j < 0:
                break
            i = j + 1
            continue
        i += 1
    raise ParseError('unterminated " quote')


def _dollar(text: str, i: int) -> int:
    """End of the expansion that starts with ``$`` at ``i - 1`` (``i`` is after the ``$``)."""
    if i < len(text):
        ch = text[i]
        if ch == "{":
            return _balanced(text, i + 1, "{", "}")
        if ch == "(":
            return _balanced(text, i + 1, "(", ")")
        m = _VARNAME.match(text, i)
        if m:
            return m.end()
    return i  # a lone $: literal


def _dq_parts(body: str, line: int) -> list[Part]:
    """The parts of a double-quoted string's body (``\\`` escapes, expansions)."""
    parts: list[Part] = []
    buf: list[str] = []
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch == "\\" and i + 1 < n and body[i + 1] in '$`"\\\n':
            if body[i + 1] != "\n":
                buf.append(body[i + 1])
            i += 2
            continue
        if ch == "$":
            end = _dollar(body, i + 1)
            if end > i + 1:
                if buf:
                    parts.append(("lit", "".join(buf), True))
                    buf = []
                parts.append(("exp", body[i:end], True))
                i = end
                continue
        if ch == "`":
            j = body.find("`", i + 1)
            end = n if j < 0 else j + 1
            if buf:
                parts.append(("lit", "".join(buf), True))
                buf = []
            parts.append(("exp", body[i:end], True))
            i = end
            continue
        buf.append(ch)
        i += 1
    if buf or not parts:
        parts.append(("lit", "".join(buf), True))
    return parts


def _ansi(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(_ANSI.get(nxt, nxt if nxt in "'\"?" else "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


#: Anything beyond plain words, ``\\`` line continuations and comments.
_NOT_PLAIN = lazy(r"['\"`$;&|()<>]|\\(?!\r?\n)")


def _plain_tokens(text: str, line: int) -> list[tuple[list[Token], int, str]]:
    """Commands of a text of plain words only (most llama-server scripts): (arguments, first
    line, what ended it), split at the lines that do not end in a backslash."""
    commands: list[tuple[list[Token], int, str]] = []
    items: list[Token] = []
    cmd_line = line
    for raw in text.split("\n"):
        body = raw.rstrip("\r")
        cont = body.endswith("\\")
        if cont:
            body = body[:-1]
        for w in body.split():
            if w[0] == "#":
                break
            if not items:
                cmd_line = line
            items.append(Token(w, line))
        if not cont and items:
            commands.append((items, cmd_line, "\n"))
            items = []
        line += 1
    if items:
        commands.append((items, cmd_line, ""))
    return commands


def _plain(text: str, line: int) -> list[Command]:
    """:func:`tokenize` for text of plain words only."""
    return [
        Command([Word([("lit", t.text, False)], t.line) for t in toks], cmd_line, end)
        for toks, cmd_line, end in _plain_tokens(text, line)
    ]


def tokenize(text: str, line: int = 1) -> list[Command]:
    """Split shell text into commands of words and operators (quotes, escapes, ``\\``
    continuations, expansions kept as written, redirections and here-documents removed)."""
    if not _NOT_PLAIN.search(text):
        return _plain(text, line)
    commands: list[Command] = []
    items: list[Item] = []
    parts: list[Part] = []
    have = False
    word_line = line
    cmd_line = line
    pending: list[tuple[str, bool, bool]] = []  # here-documents waiting for the next line
    heredocs: list[tuple[str, str, int, bool]] = []
    skip_word = False  # the next word is a redirection target
    i, n = 0, len(text)
    scan = _SCAN.match

    def flush() -> None:
        nonlocal parts, have, skip_word
        if have:
            if skip_word:
                skip_word = False
            else:
                items.append(Word(parts, word_line))
        parts, have = [], False

    def end(sep: str) -> None:
        nonlocal items, heredocs, cmd_line
        flush()
        if items or heredocs:
            commands.append(Command(items, cmd_line, sep, heredocs))
        items, heredocs = [], []
        cmd_line = line

    def start() -> None:
        nonlocal have, word_line, cmd_line
        if not have:
            word_line = line
            if not items:
                cmd_line = line
        have = True

    while i < n:
        m = scan(text, i)
        if m is None:  # pragma: no cover - the pattern matches every character
            i += 1
            continue
        kind = m.lastgroup
        j = m.end()
        if kind == "ws":
            flush()
        elif kind == "cont":
            line += 1
        elif kind == "nl":
            end("\n")
            line += 1
            if pending:
                found: list[tuple[str, str, int, bool]] = []
                k = _read_heredocs(text, j, pending, found, line)
                line += text.count("\n", j, k)
                if commands:
                    commands[-1].heredocs.extend(found)
                pending = []
                i = k
                continue
        elif kind == "heredoc":
            flush()
            spec = m.group(0)[2:]
            strip_tabs = spec.startswith("-")
            delim = spec.lstrip("-").strip()
            quoted = delim[:1] in "'\"\\"
            pending.append((delim.strip("'\"\\"), strip_tabs, not quoted))
        elif kind == "herestr":
            flush()
            skip_word = True
        elif kind == "redir":
            flush()
            op = m.group(0)
            if not op.endswith(("-",)) and not re.search(r"&[0-9]+$", op):
                skip_word = True
        elif kind == "op":
            op = m.group(0)
            if op in ("(", ")"):
                if (
                    op == "("
                    and have
                    and parts
                    and parts[-1][0] == "lit"
                    and parts[-1][1].endswith("=")
                ):
                    # NAME=( elements ): an array assignment
                    elems, i, line = _array(text, j, line)
                    w = Word(parts, word_line)
                    w.array = elems
                    items.append(w)
                    parts, have = [], False
                    continue
                flush()
                items.append(op)
            else:
                end(op)
        elif kind == "sq":
            start()
            k = text.find("'", j)
            if k < 0:
                raise ParseError("unterminated ' quote", line)
            body = text[j:k]
            parts.append(("lit", body, True))
            line += body.count("\n")
            j = k + 1
        elif kind == "ansi":
            start()
            k = j
            while k < n and text[k] != "'":
                k += 2 if text[k] == "\\" else 1
            if k >= n:
                raise ParseError("unterminated $' quote", line)
            body = text[j:k]
            parts.append(("lit", _ansi(body), True))
            line += body.count("\n")
            j = k + 1
        elif kind == "dq":
            start()
            try:
                k = _dq_end(text, j)
            except ParseError as exc:
                raise ParseError(str(exc), line) from exc
            body = text[j : k - 1]
            parts.extend(_dq_parts(body, line))
            line += body.count("\n")
            j = k
        elif kind == "dollar":
            start()
            try:
                k = _dollar(text, j)
            except ParseError as exc:
                raise ParseError(f"unterminated expansion ({exc})", line) from exc
            if k == j:
                parts.append(("lit", "$", False))
            else:
                parts.append(("exp", text[i:k], False))
                line += text.count("\n", i, k)
            j = k
        elif kind == "bq":
            start()
            k = text.find("`", j)
            if k < 0:
                raise ParseError("unterminated ` quote", line)
            parts.append(("exp", text[i : k + 1], False))
            line += text.count("\n", i, k)
            j = k + 1
        elif kind == "esc":
            start()
            ch = m.group(0)[1:]
            parts.append(("lit", ch, True))
        elif kind == "hash":
            if have:
                parts.append(("lit", "#", False))
            else:
                k = text.find("\n", j)
                j = n if k < 0 else k
        else:  # lit
            start()
            parts.append(("lit", m.group(0), False))
        i = j
    end("")
    return commands


def _read_heredocs(
    text: str,
    i: int,
    pending: list[tuple[str, bool, bool]],
    out: list[tuple[str, str, int, bool]],
    line: int,
) -> int:
    """Read the bodies of the pending here-documents from ``i`` (the start of a line)."""
    for delim, strip_tabs, expands in pending:
        body: list[str] = []
        start_line = line
        while i < len(text):
            k = text.find("\n", i)
            raw = text[i:] if k < 0 else text[i:k]
            i = len(text) if k < 0 else k + 1
            line += 1
            check = raw.lstrip("\t") if strip_tabs else raw
            if check.rstrip("\r") == delim:
                break
            body.append(raw)
        out.append((delim, "\n".join(body), start_line, expands))
    return i


def _array(text: str, i: int, line: int) -> tuple[list[Word], int, int]:
    """The elements of ``NAME=( ... )`` from ``i`` (after the parenthesis)."""
    depth = 1
    k = i
    n = len(text)
    while k < n:
        ch = text[k]
        if ch == "\\":
            k += 2
            continue
        if ch == "'":
            e = text.find("'", k + 1)
            k = n if e < 0 else e + 1
            continue
        if ch == '"':
            k = _dq_end(text, k + 1)
            continue
        if ch == "$" and k + 1 < n and text[k + 1] in "({":
            k = _dollar(text, k + 1)
            continue
        if ch == "#" and (k == i or text[k - 1] in " \t\n"):
            e = text.find("\n", k)
            k = n if e < 0 else e
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                break
        k += 1
    if k >= n:
        raise ParseError("unterminated ( in an array assignment", line)
    body = text[i:k]
    words: list[Word] = []
    for cmd in tokenize(body, line):
        words += [w for w in cmd.items if isinstance(w, Word)]
    return words, k + 1, line + body.count("\n")


# ----------------------------------------------------------------------------- expansion

#: (text, line) pieces of a value: where each part of it was written
Piece = tuple[str, int]


class Var:
    __slots__ = ("array", "exported", "pieces", "unknown")

    def __init__(
        self,
        pieces: list[Piece] | None = None,
        array: list[list[Piece]] | None = None,
        unknown: bool = False,
        exported: bool = False,
    ) -> None:
        self.pieces = pieces
        self.array = array
        self.unknown = unknown
        self.exported = exported

    def text(self) -> str:
        if self.array is not None:
            return "".join(p[0] for p in self.array[0]) if self.array else ""
        return "".join(p[0] for p in self.pieces or ())


class _Unknown:
    """An expansion whose value cannot be known."""


UNKNOWN = _Unknown()


class _Partial:
    """A variable whose text is known in part (``/media/$USER/bin/llama-server``): its text as
    written, with the unknown parts as they were written."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces


class Field:
    """One argument an expansion gives, as pieces with their lines."""

    __slots__ = ("pieces", "split", "unknown")

    def __init__(
        self, pieces: list[Piece] | None = None, unknown: bool = False, split: bool = False
    ) -> None:
        self.pieces: list[Piece] = pieces if pieces is not None else []
        self.unknown = unknown
        self.split = split

    def token(self, line: int) -> Token:
        text = "".join(p[0] for p in self.pieces)
        first = next((p[1] for p in self.pieces if p[0].strip()), line)
        return Token(text, first, self.unknown, self.split)


_IFS = lazy(r"[ \t\n]+")
_PARAM = lazy(r"^\{(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!\-])(\[[^\]]*\])?(.*)\}$", re.S)


class State:
    def __init__(self) -> None:
        self.vars: dict[str, Var] = {}
        #: $1, $2, ...: None at the top level (the script's arguments: unknown)
        self.positional: list[Field] | None = None
        self.functions: dict[str, list[Command]] = {}
        self.called: set[str] = set()
        self.allexport = False
        self.depth = 0


def _split_pieces(pieces: list[Piece]) -> list[list[Piece]]:
    """Split a value on white space (the shell's IFS), keeping each field's lines."""
    fields: list[list[Piece]] = []
    cur: list[Piece] = []
    for text, line in pieces:
        pos = 0
        for m in _IFS.finditer(text):
            if m.start() > pos:
                cur.append((text[pos : m.start()], line + text.count("\n", 0, pos)))
            if cur:
                fields.append(cur)
                cur = []
            pos = m.end()
        if pos < len(text):
            cur.append((text[pos:], line + text.count("\n", 0, pos)))
    if cur:
        fields.append(cur)
    return fields


def _lines_of(text: str, line: int) -> list[Piece]:
    """A literal as pieces, one a line (a quoted value may span lines)."""
    if "\n" not in text:
        return [(text, line)]
    out: list[Piece] = []
    for k, chunk in enumerate(text.split("\n")):
        out.append(((chunk + "\n") if k < text.count("\n") else chunk, line + k))
    return [p for p in out if p[0]]


class Expander:
    def __init__(self, state: State) -> None:
        self.st = state

    # -- one expansion
    def resolve(
        self, exp: str, line: int
    ) -> list[Piece] | list[list[Piece]] | _Unknown | _Partial | None:
        """A scalar (pieces), an array (fields of pieces: ``"$@"``, ``"${A[@]}"``), UNKNOWN, or
        None when unset (empty)."""
        if exp.startswith("`") or exp.startswith("$(("):
            return self._arith(exp, line) if exp.startswith("$((") else UNKNOWN
        if exp.startswith("$("):
            return UNKNOWN
        body = exp[1:]
        if not body.startswith("{"):
            return self._param(body, "", "", line)
        m = _PARAM.match(body)
        if m is None:
            return UNKNOWN  # ${!x}, ${x/a/b} with unusual syntax...
        length, name, index, op = m.groups()
        if length:
            val = self._param(name, index or "", "", line)
            if isinstance(val, (_Unknown, _Partial)):
                return UNKNOWN
            if val is None:
                return [("0", line)]
            if index and index[1:-1] in ("@", "*"):
                return [(str(len(val)), line)]
            return [(str(sum(len(p[0]) for p in val)), line)]
        return self._param(name, index or "", op, line)

    def _param(
        self, name: str, index: str, op: str, line: int
    ) -> list[Piece] | list[list[Piece]] | _Unknown | _Partial | None:
        st = self.st
        value: list[Piece] | list[list[Piece]] | _Unknown | _Partial | None
        set_ = True
        if name in ("@", "*"):
            if st.positional is None:
                return UNKNOWN
            value = [f.pieces for f in st.positional]
            if any(f.unknown or f.split for f in st.positional):
                return UNKNOWN
            if name == "*":
                value = _join(value)
        elif name == "#":
            value = UNKNOWN if st.positional is None else [(str(len(st.positional)), line)]
        elif name.isdigit():
            k = int(name)
            if k == 0:
                value = [("script", line)]
            elif st.positional is None:
                value = UNKNOWN
            elif k <= len(st.positional):
                f = st.positional[k - 1]
                value = UNKNOWN if f.unknown or f.split else f.pieces
            else:
                value, set_ = None, False
        elif name in ("?", "$", "!", "-"):
            value = UNKNOWN
        else:
            var = st.vars.get(name)
            if var is None:
                value, set_ = UNKNOWN, False  # from the environment, or unset
            elif var.unknown:
                value = _Partial(var.pieces) if var.pieces else UNKNOWN
            elif var.array is not None:
                if index:
                    key = index[1:-1]
                    if key in ("@", "*"):
                        value = var.array if key == "@" else _join(var.array)
                    elif key.isdigit():
                        k = int(key)
                        value = var.array[k] if k < len(var.array) else None
                    else:
                        value = UNKNOWN
                else:
                    value = var.array[0] if var.array else None
            else:
                value = var.pieces
        if not op:
            return value
        # ${NAME:-word} ${NAME-word} ${NAME:=word} ${NAME:+word} ${NAME:?word}, others unknown
        m = re.match(r"(:?)([-=+?])(.*)$", op, re.S)
        if m is None:
            return UNKNOWN if value is not None else None
        colon, kind, word = m.groups()
        empty = value is None or (
            not isinstance(value, (_Unknown, _Partial)) and not any(p[0] for p in _flat(value))
        )
        unset = (not set_) or value is None
        use_default = unset or (colon and empty)
        if isinstance(value, (_Unknown, _Partial)) and set_:
            use_default = False
        if kind in ("-", "="):
            if use_default:
                pieces = self.expand_text(word, line)
                if isinstance(pieces, _Unknown):
                    return UNKNOWN
                if kind == "=" and not name.isdigit():
                    st.vars[name] = Var(pieces=pieces)
                return pieces
            return value
        if kind == "+":
            if isinstance(value, (_Unknown, _Partial)):
                return UNKNOWN
            return None if use_default else self.expand_text(word, line)
        return UNKNOWN if use_default or isinstance(value, (_Unknown, _Partial)) else value

    def _arith(self, exp: str, line: int) -> list[Piece] | _Unknown:
        body = exp[3:-2]

        def sub(m: re.Match[str]) -> str:
            var = self.st.vars.get(m.group(1))
            if var is None or var.unknown or var.array is not None:
                raise ValueError(m.group(1))
            return var.text().strip() or "0"

        try:
            expr = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?", sub, body)
            if not re.fullmatch(r"[\d\s+\-*/%()]*", expr) or not expr.strip():
                return UNKNOWN
            return [(str(_arith_eval(expr)), line)]
        except (ValueError, ZeroDivisionError, SyntaxError, RecursionError):
            return UNKNOWN

    def expand_text(self, word: str, line: int) -> list[Piece] | _Unknown:
        """A default value (``${X:-word}``) or similar: expanded as if double-quoted."""
        if "$" not in word and "`" not in word:
            return [(word.strip("'\"") if word[:1] in "'\"" else word, line)]
        pieces: list[Piece] = []
        for kind, text, _ in _dq_parts(word.strip('"'), line):
            if kind == "lit":
                pieces.append((text, line))
                continue
            val = self.resolve(text, line)
            if isinstance(val, (_Unknown, _Partial)):
                return UNKNOWN
            if val:
                pieces += _flat(val)
        return pieces

    # -- a whole word
    def word(self, w: Word) -> list[Field]:
        """The fields (arguments) a word expands to."""
        lit = w.literal()
        if lit is not None:
            return [Field([(lit, w.line)])]
        fields: list[Field] = []
        cur = Field()
        have = False
        only_exp = len(w.parts) == 1 and w.parts[0][0] == "exp" and not w.parts[0][2]
        for kind, text, quoted in w.parts:
            if kind == "lit":
                cur.pieces.append((text, w.line))
                have = True
                continue
            val = self.resolve(text, w.line)
            if isinstance(val, _Unknown):
                cur.pieces.append((text, w.line))
                cur.unknown = True
                if only_exp:
                    cur.split = True
                have = True
                continue
            if isinstance(val, _Partial):
                # known text around unknown parts: split as known, every field of it unknown
                first = len(fields)
                cur.unknown = True
                val = val.pieces
            else:
                first = -1
            if val is None:
                have = have or quoted
                continue
            arr = _is_array(val)
            if quoted:
                if arr:
                    elems: list[list[Piece]] = val  # type: ignore[assignment]
                    if not elems:
                        continue
                    cur.pieces += elems[0]
                    for e in elems[1:]:
                        fields.append(cur)
                        cur = Field(list(e))
                    have = True
                else:
                    cur.pieces += val  # type: ignore[arg-type]
                    have = True
                continue
            # unquoted: split on white space
            groups = [f for e in val for f in _split_pieces(e)] if arr else _split_pieces(val)  # type: ignore[arg-type]
            if not groups:
                continue
            text0 = "".join(p[0] for p in (_flat(val)))
            lead_ws = bool(text0) and text0[0] in " \t\n"
            if lead_ws and have:
                fields.append(cur)
                cur = Field()
            cur.pieces += groups[0]
            have = True
            for g in groups[1:]:
                fields.append(cur)
                cur = Field(list(g))
            if text0 and text0[-1] in " \t\n":
                fields.append(cur)
                cur = Field()
                have = False
            if first >= 0:
                # a known-in-part value split on white space: the fields that hold an unknown
                # part (kept as written: `${X}`, `$(cmd)`) are unknown, and may be several
                # arguments; the ones that are all known text are known (`CMD="llama-server
                # --host 0.0.0.0 ${OPTS}"; exec ${CMD}`)
                for f in [*fields[first:], cur]:
                    vague = any(("$" in p[0] or "`" in p[0]) for p in f.pieces)
                    f.unknown = vague
                    f.split = f.split or vague
        if have or cur.pieces:
            fields.append(cur)
        return fields

    def words(self, ws: list[Word]) -> list[Token]:
        out: list[Token] = []
        for w in ws:
            parts = w.parts
            if len(parts) == 1 and parts[0][0] == "lit":
                out.append(Token(parts[0][1], w.line))
                continue
            for f in self.word(w):
                out.append(f.token(w.line))
        return out


def _is_array(val: object) -> bool:
    return bool(val) and isinstance(val, list) and isinstance(val[0], list)


def _flat(val: list[Piece] | list[list[Piece]]) -> list[Piece]:
    if _is_array(val):
        return _join(val)  # type: ignore[arg-type]
    return val  # type: ignore[return-value]


def _join(fields: list[list[Piece]]) -> list[Piece]:
    out: list[Piece] = []
    for k, f in enumerate(fields):
        if k:
            out.append((" ", f[0][1] if f else 0))
        out += f
    return out


def _arith_eval(expr: str) -> int:
    import ast

    tree = ast.parse(expr.strip(), mode="eval")

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, (ast.Div, ast.FloorDiv)):
                return int(a / b)
            if isinstance(node.op, ast.Mod):
                return a % b
        raise ValueError("not arithmetic")

    return ev(tree)


# ----------------------------------------------------------------------------- the reader

#: Shell reserved words (and ``!``, ``{``, ``}``) that can start a command.
_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac"}
    | {"!", "{", "}", "time", "coproc", "select", "in"}
)
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
#: Commands the reader looks into (assignments, declarations, ...): the general path.
_GENERAL = (
    _RESERVED
    | _DECLARE
    | {"function", "unset", "read", "mapfile", "readarray", "getopts", "for", "set", "shift"}
    | {"alias", "eval"}
)
_ASSIGN = lazy(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=", re.S)
_OPTION_LINE = lazy(r"^--?[A-Za-z]")


class ShellReader:
    def __init__(self, collector: Collector) -> None:
        self.c = collector
        self.st = State()
        self.x = Expander(self.st)
        self.c.nested_shell = self.nested
        self.last: tuple[ServerConfig, Command] | None = None
        # how many `case ... in` are open: only inside one is `word)` a pattern, elsewhere the
        # `)` closes a subshell, as in `(cd /opt && exec ./llama-server ...)`
        self.cases = 0

    # -- entry points
    def read(self, text: str, line: int = 1) -> None:
        if _NOT_PLAIN.search(text):
            self.run(tokenize(text, line))
        else:
            self._run_plain(text, line)
        self.finish_functions()

    def _run_plain(self, text: str, line: int) -> None:
        """A script of plain words only (no quotes, expansions or operators): its commands are
        their words; only assignments and the shell's own commands take the general path."""
        for toks, cmd_line, end in _plain_tokens(text, line):
            head = toks[0].text
            if "=" in head or head in _GENERAL or head in self.st.functions:
                items: list[Item] = [Word([("lit", t.text, False)], t.line) for t in toks]
                cmd = Command(items, cmd_line, end)
                self.one(cmd, self._strip(items))
                continue
            self.tokens(toks, Command([], cmd_line, end), {})

    def nested(self, text: str, line: int) -> None:
        try:
            commands = tokenize(text, line)
        except ParseError:
            return
        saved, self.last = self.last, None
        self.run(commands)
        self.last = saved

    def finish_functions(self) -> None:
        for name, body in list(self.st.functions.items()):
            if name not in self.st.called:
                self.st.called.add(name)
                saved = self.st.positional
                self.st.positional = None
                self.run(body)
                self.st.positional = saved

    # -- commands in order
    def run(self, commands: list[Command]) -> None:
        i = 0
        while i < len(commands):
            cmd = commands[i]
            items = self._strip(cmd.items)
            fn = self._function(items)
            if fn is not None:
                name, rest = fn
                body, i = self._body(rest, cmd, commands, i)
                self.st.functions[name] = body
                continue
            self.one(cmd, items)
            i += 1

    def _strip(self, items: list[Item]) -> list[Item]:
        """Without leading reserved words, subshell parentheses and ``case`` patterns."""
        k = 0
        while k < len(items):
            it = items[k]
            if it == "(":
                k += 1
                continue
            if isinstance(it, Word) and it.unquoted_literal() in _RESERVED:
                word = it.unquoted_literal()
                if word == "case":
                    self.cases += 1
                elif word == "esac":
                    self.cases = max(0, self.cases - 1)
                elif word == "in":  # `case x in` / `for x in ...`
                    return []
                k += 1
                continue
            break
        rest = items[k:]
        # a case pattern `start)`, inside a `case`: up to the first ")" not opened in the command
        if self.cases and ")" in rest and "(" not in rest[: rest.index(")")]:
            cut = rest.index(")")
            if cut > 0 and all(isinstance(x, Word) for x in rest[:cut]):
                # `f )` is not a case pattern when a function definition (f ( )) is meant
                rest = rest[cut + 1 :]
        while rest and rest[-1] == ")":
            rest = rest[:-1]
        return rest

    def _function(self, items: list[Item]) -> tuple[str, list[Item]] | None:
        if len(items) >= 3 and isinstance(items[0], Word) and items[1] == "(" and items[2] == ")":
            name = items[0].unquoted_literal()
            if name and re.fullmatch(r"[A-Za-z_][\w:.-]*", name):
                return name, items[3:]
        if (
            len(items) >= 2
            and isinstance(items[0], Word)
            and items[0].unquoted_literal() == "function"
        ):
            name_w = items[1]
            if isinstance(name_w, Word) and name_w.unquoted_literal():
                rest = items[2:]
                if rest[:2] == ["(", ")"]:
                    rest = rest[2:]
                return str(name_w.unquoted_literal()), rest
        return None

    def _body(
        self, rest: list[Item], cmd: Command, commands: list[Command], i: int
    ) -> tuple[list[Command], int]:
        """The commands of a function's body ``{ ... }``, and the index after it."""
        body: list[Command] = []
        depth = 0
        if rest and rest[0] == "(":
            return self._subshell_body(rest[1:], cmd, commands, i)
        if rest and isinstance(rest[0], Word) and rest[0].unquoted_literal() == "{":
            depth = 1
            rest = rest[1:]
        if rest:
            body.append(Command(rest, cmd.line, cmd.end))
        i += 1
        if depth == 0 and not rest and i < len(commands):
            # the brace on the next line
            first = commands[i].items
            if first and isinstance(first[0], Word) and first[0].unquoted_literal() == "{":
                depth = 1
                if first[1:]:
                    body.append(Command(first[1:], commands[i].line, commands[i].end))
                i += 1
        if depth == 0:
            return body, i
        while i < len(commands) and depth > 0:
            c = commands[i]
            head = c.items[0] if c.items else None
            lit = head.unquoted_literal() if isinstance(head, Word) else None
            if lit == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            elif lit == "{" or (len(c.items) >= 3 and c.items[1] == "(" and c.items[2] == ")"):
                depth += (
                    1
                    if lit == "{"
                    or any(isinstance(x, Word) and x.unquoted_literal() == "{" for x in c.items)
                    else 0
                )
            body.append(c)
            i += 1
        return body, i

    def _subshell_body(
        self, rest: list[Item], cmd: Command, commands: list[Command], i: int
    ) -> tuple[list[Command], int]:
        """The commands of a function's body in a subshell, ``f() ( ... )``, and the index after
        it: up to the command that closes the parenthesis the body opened."""
        body: list[Command] = []
        depth = 1
        while True:
            depth += rest.count("(") - rest.count(")")
            if depth <= 0:
                while rest and rest[-1] == ")":
                    rest = rest[:-1]
            if rest:
                body.append(Command(rest, cmd.line, cmd.end))
            i += 1
            if depth <= 0 or i >= len(commands):
                return body, i
            cmd = commands[i]
            rest = list(cmd.items)

    # -- one command
    def one(self, cmd: Command, items: list[Item]) -> None:
        words = [it for it in items if isinstance(it, Word)]
        for _delim, body, first_line, expands in cmd.heredocs:
            self._heredoc(body, first_line, expands)
        if not words:
            return
        # NAME=value ... [command]
        k = 0
        prefix: dict[str, EnvValue] = {}
        assigned: list[tuple[str, Word]] = []
        while k < len(words):
            m = _ASSIGN.match(words[k].literal() or _first_lit(words[k]))
            if not m or words[k].parts[0][2]:
                break
            assigned.append((m.group(1), words[k]))
            k += 1
        rest = words[k:]
        if not rest:
            for name, w in assigned:
                self.assign(name, w)
            self.last = None
            return
        for name, w in assigned:
            var = self._value(w)
            text = var.text()
            prefix[name] = EnvValue(text, w.line, var.unknown)
        head = rest[0].unquoted_literal()
        if head in _DECLARE:
            self._declare(head, rest[1:])
            return
        if head == "unset":
            for w in rest[1:]:
                self.st.vars.pop(w.literal() or "", None)
            return
        if head in ("read", "mapfile", "readarray", "getopts"):
            for w in rest[1:]:
                name = w.literal() or ""
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    self.st.vars[name] = Var(unknown=True)
            return
        if head == "for" and len(rest) >= 2:
            name = rest[1].literal() or ""
            self.st.vars[name] = Var(unknown=True)
            return
        if head == "set":
            flags = [w.literal() or "" for w in rest[1:]]
            if "-a" in flags or ("-o" in flags and "allexport" in flags):
                self.st.allexport = True
            if "+a" in flags:
                self.st.allexport = False
            if "--" in flags:
                self.st.positional = [
                    f for w in rest[flags.index("--") + 2 :] for f in self.x.word(w)
                ]
            return
        if head == "shift":
            if self.st.positional:
                n = (
                    int(rest[1].literal() or "1")
                    if len(rest) > 1 and (rest[1].literal() or "").isdigit()
                    else 1
                )
                self.st.positional = self.st.positional[n:]
            return
        if head == "alias":
            for w in rest[1:]:
                lit = self.x.words([w])
                for t in lit:
                    _, eq, value = t.text.partition("=")
                    if eq and value:
                        self.nested(value, t.line)
            return
        if head == "eval":
            toks = self.x.words(rest[1:])
            if toks and not any(t.unknown for t in toks):
                self.nested(" ".join(t.text for t in toks), toks[0].line)
            return
        self.tokens(self.x.words(rest), cmd, prefix)

    def tokens(self, tokens: list[Token], cmd: Command, prefix: dict[str, EnvValue]) -> None:
        """One command's arguments, expanded."""
        if not tokens:
            self.last = None
            return
        # a call of a function the script defines
        fname = tokens[0].text if not tokens[0].unknown else None
        if fname in self.st.functions and self.st.depth < 8:
            self._call(fname, tokens[1:])
            return
        # a detached option line: the line before ended without its continuation
        if self.last is not None and _OPTION_LINE.match(tokens[0].text) and not tokens[0].unknown:
            cfg, prev = self.last
            if prev.end == "\n":
                cfg.detached.append(tokens[0])
                self.last = (cfg, cmd)
                return
        env = {**self._exported(), **prefix}
        started = self.c.command(tokens, env)
        self.last = (started, cmd) if started is not None and cmd.end in ("\n", "&") else None

    def _call(self, name: str, args: list[Token]) -> None:
        st = self.st
        st.called.add(name)
        saved = st.positional
        st.positional = [Field([(a.text, a.line)], a.unknown, a.split) for a in args]
        st.depth += 1
        try:
            self.run(st.functions[name])
        finally:
            st.depth -= 1
            st.positional = saved

    def _exported(self) -> dict[str, EnvValue]:
        out: dict[str, EnvValue] = {}
        for name, var in self.st.vars.items():
            if var.exported and name.startswith("LLAMA_"):
                out[name] = EnvValue(var.text(), _line(var), var.unknown)
        return out

    def _value(self, w: Word) -> Var:
        """The value of ``NAME=value`` (a scalar or an array)."""
        if w.array is not None:
            fields = [f for e in w.array for f in self.x.word(e)]
            if any(f.unknown for f in fields):
                return Var(array=[f.pieces for f in fields], unknown=any(f.split for f in fields))
            return Var(array=[f.pieces for f in fields])
        # the value part of the word, expanded without splitting
        rest = _after_equals(w)
        pieces: list[Piece] = []
        unknown = False
        for kind, text, _ in rest:
            if kind == "lit":
                pieces += _lines_of(text, w.line)
                continue
            val = self.x.resolve(text, w.line)
            if isinstance(val, _Unknown):
                pieces.append((text, w.line))
                unknown = True
            elif isinstance(val, _Partial):
                pieces += val.pieces
                unknown = True
            elif val:
                pieces += _flat(val)
        return Var(pieces=pieces, unknown=unknown)

    def assign(self, name: str, w: Word, exported: bool = False) -> None:
        var = self._value(w)
        old = self.st.vars.get(name)
        lit = _first_lit(w)
        m = _ASSIGN.match(lit)
        if m and m.group(3) == "+" and old is not None:  # NAME+=value
            if old.array is not None and var.array is not None:
                var = Var(array=old.array + var.array, unknown=old.unknown or var.unknown)
            elif old.pieces is not None and var.pieces is not None:
                var = Var(pieces=old.pieces + var.pieces, unknown=old.unknown or var.unknown)
        if m and m.group(2) and old is not None and old.array is not None:  # A[3]=x
            var = Var(array=old.array, unknown=True)
        var.exported = exported or self.st.allexport or (old is not None and old.exported)
        self.st.vars[name] = var
        if var.exported and is_client_key(name):
            self.c.client_var(name, var.text(), w.line, var.unknown)

    def _declare(self, head: str, words: list[Word]) -> None:
        exported = head == "export"
        for w in words:
            lit = w.literal()
            if lit is not None and lit.startswith("-"):
                if "x" in lit:
                    exported = True
                continue
            m = _ASSIGN.match(lit or _first_lit(w))
            if m:
                self.assign(m.group(1), w, exported)
                continue
            name = lit or ""
            var = self.st.vars.get(name)
            if var is not None and exported:
                var.exported = True
                if is_client_key(name):
                    self.c.client_var(name, var.text(), w.line, var.unknown)

    def _heredoc(self, body: str, line: int, expands: bool) -> None:
        """A systemd unit written by the script (``cat > x.service <<EOF``) is read as a unit."""
        if "ExecStart" not in body or "[Service]" not in body:
            return
        from llamafleet.units import parse_unit

        text = "\n" * (line - 1) + body
        try:
            unit = parse_unit(text, self.c.path)
        except ParseError:
            return
        if unit.server is not None:
            self.c.result.units.append(unit)


def _first_lit(w: Word) -> str:
    return w.parts[0][1] if w.parts and w.parts[0][0] == "lit" else ""


def _after_equals(w: Word) -> list[Part]:
    """The parts of ``NAME=value`` after the ``=``."""
    out: list[Part] = []
    found = False
    for kind, text, quoted in w.parts:
        if not found:
            if kind == "lit" and "=" in text:
                found = True
                tail = text.split("=", 1)[1]
                if tail:
                    out.append((kind, tail, quoted))
            continue
        out.append((kind, text, quoted))
    return out


def _line(var: Var) -> int:
    if var.pieces:
        return var.pieces[0][1]
    if var.array and var.array[0]:
        return var.array[0][0][1]
    return 1


def read_shell(text: str, path: str, collector: Collector | None = None) -> ReadResult:
    """Every llama-server command, Claude Code environment and proxy of a shell script."""
    c = collector or Collector(path, "shell", text)
    ShellReader(c).read(text)
    return c.finish()


def split_command_line(text: str) -> list[Token]:
    """A command line split into arguments as the shell would (no variables are known)."""
    st = State()
    x = Expander(st)
    out: list[Token] = []
    for cmd in tokenize(text):
        out += x.words([w for w in cmd.items if isinstance(w, Word)])
    return out

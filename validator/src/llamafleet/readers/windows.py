"""Windows scripts: batch files (``.cmd``/``.bat``) and PowerShell (``.ps1``).

Batch: ``^`` continues a line, ``set NAME=value`` / ``set "NAME=value"`` set environment
variables (``LLAMA_ARG_*`` reach llama-server, ``ANTHROPIC_*`` Claude Code), ``setx`` keeps one for
later sessions, ``%NAME%`` and ``!NAME!`` expand (before the line is split into arguments, as
cmd.exe does), ``%1``, ``%~dp0`` and ``%%i`` are unknown; ``start ["title"] program``, ``call`` and
``cmd /c "..."`` run the command after them.

PowerShell: a backtick at the end of a line continues it, ``'...'`` and ``"..."`` (with ``$var``,
``$env:NAME``, ``$(...)``) quote, ``$name = value`` and ``$name = @('-c', '4096')`` assign,
``$env:NAME = value`` and ``[Environment]::SetEnvironmentVariable('NAME', 'value', ...)`` set the
environment, ``& "C:\\llama\\llama-server.exe" ...`` and ``Start-Process -FilePath ...
-ArgumentList ...`` start programs; an array variable passed to a program gives one argument per
element (``@args`` splats).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llamafleet.argv import ParseError, ServerConfig, Token
from llamafleet.readers.common import Collector, EnvValue, ReadResult, is_client_key

_OPTION_LINE = re.compile(r"^--?[A-Za-z]")

# ----------------------------------------------------------------------------- batch files


@dataclass
class _CmdCommand:
    tokens: list[tuple[str, int, bool]]  # (text, line, quoted)
    line: int
    end: str


def _tokenize_cmd(text: str) -> list[_CmdCommand]:
    """Split a batch file into commands (``^`` continuations, ``"`` quotes, ``&``, ``|``,
    ``&&``, ``||``, redirections, ``REM``/``::`` comments, ``(``/``)`` blocks)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    commands: list[_CmdCommand] = []
    cur: list[tuple[str, int, bool]] = []
    buf: list[str] = []
    have = False
    quoted = False
    tok_line = line = 1
    cmd_line = 1
    i, n = 0, len(text)
    at_start = True
    skip_next = False

    def flush() -> None:
        nonlocal buf, have, quoted, skip_next
        if have:
            if skip_next:
                skip_next = False
            else:
                cur.append(("".join(buf), tok_line, quoted))
        buf, have, quoted = [], False, False

    def end(sep: str) -> None:
        nonlocal cur, at_start, cmd_line
        flush()
        if cur:
            commands.append(_CmdCommand(cur, cmd_line, sep))
        cur = []
        at_start = True

    while i < n:
        ch = text[i]
        if at_start:
            k = i
            while k < n and text[k] in " \t@(":
                k += 1
            rest = text[k : k + 4].lower()
            if text.startswith("::", k) or rest == "rem" or rest.startswith(("rem ", "rem\t")):
                while i < n and text[i] != "\n":
                    i += 1
                continue
            if k < n and text[k] != "\n":
                at_start = False
                cmd_line = line
            if k != i or not at_start:
                i = k
                continue
            ch = text[i] if i < n else "\n"
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
            end("\n")
            line += 1
            i += 1
            continue
        if ch == '"':
            if not have:
                tok_line = line
            have = quoted = True
            i += 1
            while i < n and text[i] not in '"\n':
                buf.append(text[i])
                i += 1
            if i < n and text[i] == '"':
                i += 1
            continue
        if ch in "&|":
            op = text[i : i + 2] if text[i : i + 2] in ("&&", "||") else ch
            end(op)
            i += len(op)
            continue
        if ch in "<>":
            if buf and all(c.isdigit() for c in buf):
                buf, have = [], False
            flush()
            k = i + 1
            if k < n and text[k] == ">":
                k += 1
            if k < n and text[k] == "&":
                k += 2
            else:
                skip_next = True
            i = k
            continue
        if ch == ")" and not have:
            i += 1
            continue
        if not have:
            tok_line = line
        have = True
        buf.append(ch)
        i += 1
    end("")
    return commands


_CMD_VAR = re.compile(
    r"%%|%([A-Za-z_][A-Za-z0-9_#$@.-]*)%|%~?[a-z]*[0-9*]|%%~?[a-z]*[A-Za-z]|!([A-Za-z_][A-Za-z0-9_]*)!"
)


class _Cmd:
    def __init__(self, collector: Collector) -> None:
        self.c = collector
        self.vars: dict[str, EnvValue] = {}
        self.last: tuple[ServerConfig, _CmdCommand] | None = None

    def expand(self, text: str, line: int) -> tuple[str, bool]:
        unknown = False

        def sub(m: re.Match[str]) -> str:
            nonlocal unknown
            if m.group(0) == "%%":
                return "%"
            name = m.group(1) or m.group(2)
            if name:
                v = self.vars.get(name.upper())
                if v is not None and not v.unknown:
                    return v.value
            unknown = True
            return m.group(0)

        return _CMD_VAR.sub(sub, text), unknown

    def tokens(self, raw: list[tuple[str, int, bool]]) -> list[Token]:
        out: list[Token] = []
        for text, line, quoted in raw:
            value, unknown = self.expand(text, line)
            whole = bool(_CMD_VAR.fullmatch(text)) and not quoted
            if whole and not unknown and not quoted and (" " in value or "\t" in value):
                out += [Token(p, line) for p in value.split()]
            elif whole and not value.strip() and not unknown:
                continue
            else:
                out.append(Token(value, line, unknown, whole and unknown))
        return out

    def run(self, commands: list[_CmdCommand]) -> None:
        for cmd in commands:
            self.one(cmd)

    def one(self, cmd: _CmdCommand) -> None:
        raw = cmd.tokens
        head = raw[0][0].lower().lstrip("@")
        if head in ("set", "setx"):
            self._set(head, raw, cmd)
            return
        if head in ("if", "for", "else", "setlocal", "endlocal", "echo", "goto", "pause", "exit"):
            if head == "if":
                self._after_condition(raw, cmd)
            return
        tokens = self.tokens(raw)
        while tokens and tokens[0].text.lower() in ("call", "start", "cmd", "cmd.exe"):
            word = tokens[0].text.lower()
            tokens = tokens[1:]
            if word == "start":
                if tokens and raw[1][2]:  # start "title" program
                    tokens = tokens[1:]
                while tokens and tokens[0].text.startswith("/"):
                    takes = tokens[0].text.lower() in ("/d", "/node", "/affinity")
                    tokens = tokens[2 if takes else 1 :]
            elif word.startswith("cmd"):
                while tokens and tokens[0].text.startswith("/"):
                    flag = tokens[0].text.lower()
                    tokens = tokens[1:]
                    if flag in ("/c", "/k") and tokens:
                        self.run(_tokenize_cmd(" ".join(_q(t.text) for t in tokens)))
                        return
        if not tokens:
            return
        if self.last is not None and _OPTION_LINE.match(tokens[0].text):
            cfg, prev = self.last
            if prev.end == "\n":
                cfg.detached.append(tokens[0])
                self.last = (cfg, cmd)
                return
        env = {k: v for k, v in self.vars.items() if k.startswith("LLAMA_")}
        started = self.c.command(tokens, env)
        self.last = (started, cmd) if started is not None and cmd.end == "\n" else None

    def _after_condition(self, raw: list[tuple[str, int, bool]], cmd: _CmdCommand) -> None:
        # if [not] [exist X | X==Y | errorlevel N | defined X] command
        k = 1
        if k < len(raw) and raw[k][0].lower() == "not":
            k += 1
        if k < len(raw) and raw[k][0].lower() in ("exist", "defined", "errorlevel"):
            k += 2
        elif k < len(raw):
            k += 1 if "==" in raw[k][0] else 3
        if k < len(raw):
            self.one(_CmdCommand(raw[k:], cmd.line, cmd.end))

    def _set(self, head: str, raw: list[tuple[str, int, bool]], cmd: _CmdCommand) -> None:
        if len(raw) < 2:
            return
        line = raw[1][1]
        if head == "setx":
            name = raw[1][0]
            value, unknown = self.expand(raw[2][0], line) if len(raw) > 2 else ("", False)
            if is_client_key(name):
                self.c.client_var(name, value, line, unknown)
            return
        flag = raw[1][0].lower()
        rest = raw[1:]
        prompt = flag == "/p"
        if flag in ("/a", "/p"):
            rest = raw[2:]
        if not rest:
            return
        text = "".join(t[0] for t in rest[:1])
        # `set NAME=value with spaces`: the tokenizer split on '=' and spaces; rebuild from raw
        joined = _set_text(rest)
        name, eq, value = (joined or text).partition("=")
        if not eq:
            return
        name = name.strip()
        val, unknown = self.expand(value, line)
        if prompt:
            val, unknown = value, True
        elif flag == "/a":
            try:
                from llamafleet.readers.shell import _arith_eval

                val = str(_arith_eval(val))
            except (ValueError, SyntaxError, ZeroDivisionError):
                unknown = True
        ev = EnvValue(val, line, unknown)
        self.vars[name.upper()] = ev
        if is_client_key(name):
            self.c.client_var(name, val, line, unknown)


def _set_text(rest: list[tuple[str, int, bool]]) -> str:
    if len(rest) == 1:
        return rest[0][0]
    first = rest[0][0]
    if "=" in first:
        return first + " " + " ".join(t[0] for t in rest[1:])
    return first + "=" + " ".join(t[0] for t in rest[1:])


def _q(text: str) -> str:
    return f'"{text}"' if (" " in text or not text) else text


def read_cmd(text: str, path: str) -> ReadResult:
    """Every llama-server command of a Windows batch file."""
    c = Collector(path, "cmd", text)
    r = _Cmd(c)
    # `set NAME=value` keeps everything after '=' up to the line's end: read those lines whole
    r.run(_tokenize_cmd(_protect_set(text)))
    return c.finish()


_SET_LINE = re.compile(
    r'(?im)^([ \t@]*set[ \t]+(?:/a[ \t]+)?)("?)([^"\r\n=]+)=([^\r\n]*?)\2[ \t]*$'
)


def _protect_set(text: str) -> str:
    """``set NAME=a b c`` as one quoted argument, so the tokenizer keeps the value whole."""

    def sub(m: re.Match[str]) -> str:
        value = m.group(4).replace('"', "")
        return f'{m.group(1)}"{m.group(3).strip()}={value}"'

    return _SET_LINE.sub(sub, text)


# ----------------------------------------------------------------------------- PowerShell


@dataclass
class _PsTok:
    text: str
    line: int
    kind: str  # word | str (expandable string) | lit (verbatim) | var | splat | op | array
    items: list[_PsTok] | None = None


_PS_SCAN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<cont>`\r?\n)
  | (?P<nl>\n)
  | (?P<block><\#.*?\#>)
  | (?P<comment>\#[^\n]*)
  | (?P<here>@(?P<hq>["'])\r?\n.*?\n(?P=hq)@)
  | (?P<sq>'(?:''|[^'])*')
  | (?P<dq>"(?:``|`"|""|[^"])*")
  | (?P<arr>@\()
  | (?P<splat>@[A-Za-z_][A-Za-z0-9_]*)
  | (?P<var>\$(?:\{[^}]*\}|(?i:env:|script:|global:|local:)?[A-Za-z_][A-Za-z0-9_]*|\(|[?$^_]))
  | (?P<op>&&|\|\||[;|&(){},]|=(?!=))
  | (?P<redir>[0-9*]?>>?(?:&[0-9])?)
  | (?P<word>(?:`.|[^\s`'"\#;|&(){},=<>$@])+(?:=(?:`.|[^\s`'"\#;|&(){},<>$])*)?)
  | (?P<other>.)
    """,
    re.X | re.S,
)


def _ps_tokens(text: str) -> list[list[_PsTok]]:
    """PowerShell text as statements of tokens (``@( ... )`` collected as one array token)."""
    statements: list[list[_PsTok]] = []
    cur: list[_PsTok] = []
    stack: list[tuple[list[_PsTok], _PsTok]] = []
    line = 1
    i, n = 0, len(text)
    while i < n:
        m = _PS_SCAN.match(text, i)
        if m is None:  # pragma: no cover
            i += 1
            continue
        kind = m.lastgroup
        s = m.group(0)
        i = m.end()
        if kind in ("ws", "comment"):
            continue
        if kind in ("cont", "block"):
            line += s.count("\n")
            continue
        if kind == "nl":
            if stack:  # inside @( ... ): a new element
                line += 1
                continue
            if cur:
                cur.append(_PsTok("\n", line, "op"))
                statements.append(cur)
            cur = []
            line += 1
            continue
        if kind == "here":
            body = s[2:-2].split("\n", 1)[1] if "\n" in s else ""
            cur.append(
                _PsTok(
                    body.rsplit("\n", 1)[0] if body.endswith("\n") else body,
                    line,
                    "str" if m.group("hq") == '"' else "lit",
                )
            )
            line += s.count("\n")
            continue
        if kind == "sq":
            cur.append(_PsTok(s[1:-1].replace("''", "'"), line, "lit"))
            line += s.count("\n")
            continue
        if kind == "dq":
            cur.append(_PsTok(s[1:-1], line, "str"))
            line += s.count("\n")
            continue
        if kind == "arr":
            tok = _PsTok("@(", line, "array", [])
            cur.append(tok)
            stack.append((cur, tok))
            cur = []
            continue
        if kind == "var" and s == "$(":
            depth, k = 1, i
            while k < n and depth:
                depth += {"(": 1, ")": -1}.get(text[k], 0)
                k += 1
            cur.append(_PsTok(text[m.start() : k], line, "var"))
            line += text.count("\n", i, k)
            i = k
            continue
        if kind == "op" and s == ")" and stack:
            parent, tok = stack.pop()
            tok.items = [t for t in cur if not (t.kind == "op" and t.text in (",", ";"))]
            cur = parent
            continue
        if kind == "op" and s == ";" and not stack:
            if cur:
                cur.append(_PsTok(";", line, "op"))
                statements.append(cur)
            cur = []
            continue
        if kind == "redir":
            cur.append(_PsTok(s, line, "redir"))
            continue
        cur.append(_PsTok(s, line, "op" if kind in ("op", "other") else kind or "word"))
    while stack:
        parent, tok = stack.pop()
        tok.items = cur
        cur = parent
    if cur:
        statements.append(cur)
    return statements


_PS_EXPAND = re.compile(
    r"`(.)|\$\{([^}]*)\}|\$(?i:env:)([A-Za-z_][A-Za-z0-9_]*)|\$([A-Za-z_][A-Za-z0-9_]*)|\$\("
)
_PS_ESC = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "`": "`", '"': '"', "$": "$"}


class _Ps:
    def __init__(self, collector: Collector) -> None:
        self.c = collector
        self.vars: dict[str, list[Token] | Token] = {}
        self.env: dict[str, EnvValue] = {}
        self.last: tuple[ServerConfig, str] | None = None

    # -- values
    def _lookup(self, name: str, line: int) -> list[Token] | Token:
        low = name.lower()
        if low.startswith("env:"):
            v = self.env.get(name[4:].upper())
            return Token(v.value, line, v.unknown) if v else Token("$" + name, line, True)
        found = self.vars.get(low)
        return found if found is not None else Token("$" + name, line, True, True)

    def expand_string(self, text: str, line: int) -> Token:
        unknown = False

        def sub(m: re.Match[str]) -> str:
            nonlocal unknown
            if m.group(1) is not None:
                return _PS_ESC.get(m.group(1), m.group(1))
            name = m.group(2) or (("env:" + m.group(3)) if m.group(3) else m.group(4))
            if name is None:  # $( ... )
                unknown = True
                return m.group(0)
            val = self._lookup(name, line)
            if isinstance(val, list):
                if any(t.unknown for t in val):
                    unknown = True
                return " ".join(t.text for t in val)
            unknown = unknown or val.unknown
            return val.text

        return Token(_PS_EXPAND.sub(sub, text), line, unknown)

    def values(self, toks: list[_PsTok]) -> list[Token]:
        """The arguments tokens give a native program (arrays and splats give one each)."""
        out: list[Token] = []
        for t in toks:
            if t.kind == "lit":
                out.append(Token(t.text, t.line))
            elif t.kind == "str":
                out.append(self.expand_string(t.text, t.line))
            elif t.kind in ("var", "splat"):
                name = t.text[1:].strip("{}")
                if t.text.startswith("$("):
                    out.append(Token(t.text, t.line, True, True))
                    continue
                val = self._lookup(name, t.line)
                out += val if isinstance(val, list) else [val]
            elif t.kind == "array":
                out += self.values(t.items or [])
            elif t.kind == "word":
                out.append(Token(re.sub(r"`(.)", r"\1", t.text), t.line))
        return out

    # -- statements
    def run(self, statements: list[list[_PsTok]]) -> None:
        for st in statements:
            self.one(st)

    def one(self, toks: list[_PsTok]) -> None:
        end = (
            toks[-1].text if toks and toks[-1].kind == "op" and toks[-1].text in ("\n", ";") else ""
        )
        body = [t for t in toks if not (t.kind == "op" and t.text in ("\n", ";"))]
        while body and body[0].kind == "op" and body[0].text in ("{", "}", "("):
            body = body[1:]
        if not body:
            return
        # $name = value / $env:NAME = value
        if len(body) >= 3 and body[0].kind == "var" and body[1].text == "=":
            self._assign(body[0].text[1:].strip("{}"), body[2:])
            self.last = None
            return
        head = body[0].text
        low = head.lower()
        if low.startswith("[environment]::setenvironmentvariable"):
            args = [t for t in body[1:] if t.kind in ("lit", "str", "var")]
            vals = self.values(args)
            if len(vals) >= 2:
                self._set_env(vals[0].text, vals[1])
            return
        if low in (
            "if",
            "elseif",
            "else",
            "foreach",
            "for",
            "while",
            "function",
            "param",
            "write-host",
            "write-output",
            "echo",
            "return",
            "exit",
        ):
            return
        if (
            low in ("set-item", "set-content")
            and len(body) >= 3
            and body[1].text.lower().startswith("env:")
        ):
            vals = self.values(body[2:])
            if vals:
                self._set_env(body[1].text[4:], vals[0])
            return
        if low == "setx" and len(body) >= 3:
            vals = self.values(body[1:3])
            if len(vals) == 2 and is_client_key(vals[0].text):
                self.c.client_var(vals[0].text, vals[1].text, vals[1].line, vals[1].unknown)
            return
        if low == "start-process":
            self._start_process(body[1:])
            return
        if head in ("&", "."):
            body = body[1:]
            if not body:
                return
        args = [t for t in body if t.kind != "redir" and not (t.kind == "op" and t.text == ",")]
        if any(t.kind == "op" and t.text == "|" for t in args):
            args = args[: next(k for k, t in enumerate(args) if t.text == "|")]
        tokens = self.values(args)
        if not tokens:
            return
        if self.last is not None and _OPTION_LINE.match(tokens[0].text):
            cfg, prev_end = self.last
            if prev_end == "\n":
                cfg.detached.append(tokens[0])
                self.last = (cfg, end)
                return
        env = {k: v for k, v in self.env.items() if k.startswith("LLAMA_")}
        started = self.c.command(tokens, env)
        self.last = (started, end) if started is not None else None

    def _assign(self, name: str, value: list[_PsTok]) -> None:
        low = name.lower()
        if value and value[0].kind == "word" and value[0].text.lower() == "join-path":
            # `Join-Path $Root 'bin\llama-server.exe'`: the parts joined with a backslash
            parts = self.values(
                [t for t in value[1:] if not (t.kind == "word" and t.text.startswith("-"))]
            )
            if parts:
                text = "\\".join(p.text.rstrip("\\/") for p in parts)
                self.vars[low] = Token(text, parts[0].line, any(p.unknown for p in parts))
            return
        if (
            value
            and value[0].kind == "word"
            and re.fullmatch(r"[A-Za-z]+-[A-Za-z]+", value[0].text)
        ):
            # the output of another cmdlet (`Split-Path -Parent ...`): not known here
            self.vars[low] = Token("$" + name, value[0].line, True)
            return
        vals = self.values([t for t in value if not (t.kind == "op" and t.text in (",", "(", ")"))])
        is_array = (
            len(vals) != 1
            or any(t.kind == "array" for t in value)
            or any(t.kind == "op" and t.text == "," for t in value)
        )
        if low.startswith("env:"):
            if vals:
                self._set_env(name[4:], vals[0])
            return
        self.vars[low] = vals if is_array else vals[0]

    def _set_env(self, name: str, value: Token) -> None:
        ev = EnvValue(value.text, value.line, value.unknown)
        self.env[name.upper()] = ev
        if is_client_key(name):
            self.c.client_var(name, value.text, value.line, value.unknown)

    def _start_process(self, toks: list[_PsTok]) -> None:
        program: list[Token] = []
        arglist: list[Token] = []
        positional: list[list[Token]] = []
        k = 0
        while k < len(toks):
            t = toks[k]
            if t.kind == "word" and t.text.startswith("-"):
                name = t.text.lower()
                k += 1
                group: list[_PsTok] = []
                while k < len(toks) and not (
                    toks[k].kind == "word" and toks[k].text.startswith("-")
                ):
                    group.append(toks[k])
                    k += 1
                    if group[-1].kind != "op" and not (k < len(toks) and toks[k].text == ","):
                        break
                vals = self.values([g for g in group if g.kind != "op"])
                if name in ("-filepath", "-file", "-path"):
                    program = vals[:1]
                elif name in ("-argumentlist", "-args"):
                    arglist = vals
                continue
            positional.append(self.values([t]))
            k += 1
        if not program and positional:
            program = positional.pop(0)
        if not arglist and positional:
            arglist = [v for p in positional for v in p]
        if not program:
            return
        args: list[Token] = []
        for a in arglist:
            if " " in a.text.strip() and not a.unknown:
                args += [Token(w, a.line) for w in _split_windows(a.text)]
            else:
                args.append(a)
        env = {k: v for k, v in self.env.items() if k.startswith("LLAMA_")}
        self.c.command([*program, *args], env)


def _split_windows(text: str) -> list[str]:
    """A Windows command line split as the C runtime does (quotes group, no escapes)."""
    out: list[str] = []
    buf: list[str] = []
    have = quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            have = True
        elif ch in " \t" and not quoted:
            if have:
                out.append("".join(buf))
            buf, have = [], False
        else:
            buf.append(ch)
            have = True
    if have:
        out.append("".join(buf))
    return out


def read_powershell(text: str, path: str) -> ReadResult:
    """Every llama-server command of a PowerShell script."""
    c = Collector(path, "powershell", text)
    try:
        statements = _ps_tokens(text)
    except re.error as exc:  # pragma: no cover
        raise ParseError(str(exc)) from exc
    _Ps(c).run(statements)
    return c.finish()

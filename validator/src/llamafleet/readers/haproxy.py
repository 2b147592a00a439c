"""HAProxy configuration files (``haproxy.cfg``): a pool in front of llama-server.

What the cross-file rules need from it: where each ``frontend`` (or ``listen``) accepts clients
(``bind`` addresses and ports, ``ssl`` on the bind line: https), the backends it sends them to
(``default_backend``, every ``use_backend`` whatever its condition), the SHA-256 digests of the
API keys it lets in (an ACL ``<fetch>,sha2(256),hex -m str DIGEST ...`` used by the frontend),
and for each ``backend`` (or ``listen``) its ``server`` lines (address, port, ``ssl``:
https to the server, ``disabled``), ``balance``, ``hash-type``, stickiness, and the ``timeout
client``/``timeout server`` in effect (from the section, else from its ``defaults`` section).

The syntax is HAProxy's: one statement a line (no continuation), words separated by blanks,
``#`` outside quotes starts a comment, single quotes keep their text as written, double quotes and
backslashes escape; ``"${VAR}"`` (an environment variable) is unknown to the validator, and what
depends on it is left alone. A proxy takes its settings from the last ``defaults`` section before
it, or from the one it names with ``from NAME``. Sections HAProxy has that say nothing about the
pool (``global``, ``userlist``, ``peers``, ``resolvers``, ``cache``, ...) are read over.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from llamafleet.argv import ParseError

#: Sections that hold a proxy.
PROXY_SECTIONS = ("frontend", "backend", "listen")
#: Sections read over (HAProxy 2.x/3.x): their lines say nothing about the pool.
OTHER_SECTIONS = frozenset(
    {
        "global",
        "userlist",
        "peers",
        "resolvers",
        "mailers",
        "cache",
        "program",
        "http-errors",
        "ring",
        "log-forward",
        "fcgi-app",
        "crt-store",
        "traces",
        "acme",
        "namespace_list",
    }
)

#: HAProxy's time units (a number without one is milliseconds).
_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME = re.compile(r"(\d+)(us|ms|s|m|h|d)?\Z")
#: Load-balancing algorithms that send a conversation's requests to different servers.
NOT_AFFINE = frozenset({"roundrobin", "static-rr", "leastconn", "first", "random"})
#: Address prefixes of sockets that are not TCP (a client of the pool cannot use them).
_NOT_TCP = ("unix@", "abns@", "abnsz@", "fd@", "sockpair@", "udp@", "udp4@", "udp6@", "uxst@")
_TCP = ("ipv4@", "ipv6@", "tcp@", "tcp4@", "tcp6@", "quic4@", "quic6@")
#: the key an ``http-request set-header Authorization "Bearer %[str(NAME),map(FILE)]"`` sends
SENT_KEY_MAP = re.compile(r"%\[str\(([^)]*)\),map\(([^),]+)\)\]")
_DIGEST_FETCH = re.compile(r",sha2\(256\),hex(?:,|$)", re.I)


def parse_time(text: str, line: int) -> int:
    """An HAProxy time (``30s``, ``10m``, ``1h``, ``5000`` = ms) in milliseconds."""
    m = _TIME.match(text)
    if m is None:
        raise ParseError(
            f"{text!r} is not an HAProxy time (a number with us, ms, s, m, h or d, e.g. 10m)",
            line,
        )
    return int(int(m.group(1)) * _TIME_UNITS[m.group(2) or "ms"])


def format_ms(ms: int) -> str:
    """Milliseconds as a person reads them: 45 s, 5 min, 1 h 30 min."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def key_digest(key: str) -> str:
    """A key's SHA-256 as HAProxy's ``sha2(256),hex`` writes it (upper-case hex)."""
    return hashlib.sha256(key.encode()).hexdigest().upper()


# ----------------------------------------------------------------------------- the model


@dataclass
class Setting:
    """A value and where it was written (``section``: the proxy's own name, or ``defaults``)."""

    value: str
    line: int
    section: str


@dataclass(eq=False)
class Bind:
    """One address of a ``bind`` line. ``host``: ``*`` for every address (``*``, empty, 0.0.0.0,
    ``::``), else the address or name as written (without brackets)."""

    host: str
    port_lo: int
    port_hi: int
    ssl: bool
    line: int

    @property
    def port(self) -> int:
        return self.port_lo

    def has_port(self, port: int) -> bool:
        return self.port_lo <= port <= self.port_hi


@dataclass(eq=False)
class Server:
    """A ``server`` line: ``port`` None when not given (the client's port) or relative (``+1``);
    ``known``: the address holds no environment variable."""

    name: str
    host: str
    port: int | None
    ssl: bool
    disabled: bool
    line: int
    address: str  # as written
    known: bool = True


@dataclass
class KeyDigests:
    """The SHA-256 digests of API keys an ACL of the frontend accepts. ``digests`` None: not
    known (read from a file, an environment variable, another match method)."""

    digests: list[str] | None
    line: int
    ignore_case: bool = False


@dataclass(eq=False)
class Proxy:
    kind: str  # frontend, backend, listen
    name: str
    line: int
    mode: str = "tcp"  # HAProxy's default
    binds: list[Bind] = field(default_factory=list)
    default_backend: Setting | None = None
    use_backends: list[Setting] = field(default_factory=list)
    servers: list[Server] = field(default_factory=list)
    balance: Setting | None = None
    hash_type: Setting | None = None
    #: stick on / stick match / cookie: requests of a client kept on one server anyway
    sticky: Setting | None = None
    timeouts: dict[str, Setting] = field(default_factory=dict)
    key_acls: list[KeyDigests] = field(default_factory=list)
    #: a bind address or port the validator cannot know (an environment variable)
    unknown_bind: bool = False
    #: a use_backend with a name computed at run time (%[...])
    dynamic_backend: bool = False
    #: an ``http-request set-header Authorization ...``: the servers behind get the key this
    #: proxy sends, not the client's (a pool that checks its users' keys itself)
    sets_key: bool = False
    #: where the key it sends comes from, when it is ``%[str(NAME),map(FILE)]``: (FILE, NAME)
    sent_key_map: tuple[str, str] | None = None

    @property
    def accepts_clients(self) -> bool:
        return self.kind in ("frontend", "listen")

    @property
    def has_servers(self) -> bool:
        return self.kind in ("backend", "listen")

    def timeout(self, which: str) -> Setting | None:
        return self.timeouts.get(which)


@dataclass(eq=False)
class HAProxyConfig:
    path: str
    proxies: list[Proxy] = field(default_factory=list)

    @property
    def frontends(self) -> list[Proxy]:
        return [p for p in self.proxies if p.accepts_clients]

    def backend(self, name: str) -> Proxy | None:
        for p in self.proxies:
            if p.has_servers and p.name == name:
                return p
        return None

    def backends_of(self, frontend: Proxy) -> list[Proxy]:
        """The backends a frontend sends requests to: its ``default_backend`` and every
        ``use_backend`` (whatever the condition); a ``listen`` section's own servers first."""
        out: list[Proxy] = [frontend] if frontend.kind == "listen" and frontend.servers else []
        names = [s.value for s in frontend.use_backends]
        if frontend.default_backend is not None:
            names.append(frontend.default_backend.value)
        for name in names:
            b = self.backend(name)
            if b is not None and b not in out:
                out.append(b)
        return out

    def frontends_of(self, backend: Proxy) -> list[Proxy]:
        return [f for f in self.frontends if backend in self.backends_of(f)]


# ----------------------------------------------------------------------------- the words


@dataclass
class _Line:
    no: int
    words: list[str]
    unknown: set[int]  # indexes of words holding an environment variable


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", " ": " ", "\\": "\\", "#": "#", "'": "'", '"': '"'}


def split_line(raw: str, no: int) -> _Line:
    """The words of one line as HAProxy splits them."""
    words: list[str] = []
    unknown: set[int] = set()
    cur: list[str] = []
    in_word = False
    has_var = False
    i, n = 0, len(raw)
    quote = ""
    while i < n:
        ch = raw[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            else:
                cur.append(ch)
            i += 1
            continue
        if ch == "\\" and i + 1 < n:
            nxt = raw[i + 1]
            if nxt == "x" and i + 3 < n + 1 and re.match(r"[0-9a-fA-F]{2}", raw[i + 2 : i + 4]):
                cur.append(chr(int(raw[i + 2 : i + 4], 16)))
                i += 4
            else:
                cur.append(_ESCAPES.get(nxt, "\\" + nxt))
                i += 2
            in_word = True
            continue
        if quote == '"':
            if ch == '"':
                quote = ""
            else:
                if ch == "$" and i + 1 < n and (raw[i + 1] == "{" or raw[i + 1].isalpha()):
                    has_var = True
                cur.append(ch)
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            in_word = True
            i += 1
            continue
        if ch == "#":
            break
        if ch in " \t":
            if in_word:
                if has_var:
                    unknown.add(len(words))
                words.append("".join(cur))
                cur, in_word, has_var = [], False, False
            i += 1
            continue
        cur.append(ch)
        in_word = True
        i += 1
    if quote:
        raise ParseError(
            f"unmatched {'single' if quote == chr(39) else 'double'} quote "
            "(HAProxy continues no line: close the quote on the same line)",
            no,
        )
    if in_word:
        if has_var:
            unknown.add(len(words))
        words.append("".join(cur))
    return _Line(no, words, unknown)


# ----------------------------------------------------------------------------- addresses


def _split_address(text: str, line: int, what: str) -> tuple[str, str | None] | None:
    """(host, port text or None) of an HAProxy address; None for a socket that is not TCP."""
    low = text.lower()
    if low.startswith(_NOT_TCP) or text.startswith("/"):
        return None
    for prefix in _TCP:
        if low.startswith(prefix):
            text = text[len(prefix) :]
            break
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ParseError(f"{what} {text!r}: no closing ] after the IPv6 address", line)
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ParseError(f"{what} {text!r}: expected :PORT after ]", line)
        return host, rest[1:] if rest else None
    if ":" not in text:
        return text, None
    host, _, port = text.rpartition(":")
    return host, port


def _any(host: str) -> str:
    return "*" if host in ("", "*", "0.0.0.0", "::") else host


def _binds(addresses: str, ssl: bool, line: int) -> list[Bind]:
    """The TCP addresses of a bind line (comma-separated)."""
    out: list[Bind] = []
    for text in addresses.split(","):
        parts = _split_address(text.strip(), line, "bind")
        if parts is None:
            continue
        host, port = parts
        if port is None or not port:
            raise ParseError(
                f"bind {text!r}: no port (write ADDRESS:PORT, e.g. *:8443 or 0.0.0.0:8443)", line
            )
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", port)
        if m is None:
            raise ParseError(f"bind {text!r}: {port!r} is not a port or a range of ports", line)
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if not (1 <= lo <= hi <= 65535):
            raise ParseError(f"bind {text!r}: port {port} is out of range (1 to 65535)", line)
        out.append(Bind(_any(host), lo, hi, ssl, line))
    return out


def _server(words: list[str], line: _Line, defaults: dict[str, bool]) -> Server:
    if len(words) < 3:
        raise ParseError(
            "server needs a name and an address (server NAME ADDRESS:PORT ...)", line.no
        )
    name, address = words[1], words[2]
    params = words[3:]
    ssl = defaults.get("ssl", False)
    disabled = defaults.get("disabled", False)
    for p in params:
        if p == "ssl":
            ssl = True
        elif p == "no-ssl":
            ssl = False
        elif p == "disabled":
            disabled = True
        elif p == "enabled":
            disabled = False
    known = 2 not in line.unknown
    parts = _split_address(address, line.no, "server") if known else None
    host, port = ("", None) if parts is None else parts
    number: int | None = None
    if port is not None and port.isdigit():
        number = int(port)
        if not 1 <= number <= 65535:
            raise ParseError(f"server {name} {address}: port {port} is out of range", line.no)
    elif port is not None and port and not re.fullmatch(r"[+-]\d+", port):
        raise ParseError(f"server {name} {address}: {port!r} is not a port", line.no)
    return Server(name, host, number, ssl, disabled, line.no, address, known and parts is not None)


def _server_defaults(params: list[str], into: dict[str, bool]) -> None:
    for p in params:
        if p == "ssl":
            into["ssl"] = True
        elif p == "no-ssl":
            into["ssl"] = False
        elif p == "disabled":
            into["disabled"] = True
        elif p == "enabled":
            into["disabled"] = False


# ----------------------------------------------------------------------------- key digests


def _digest_acl(words: list[str], unknown: set[int], first: int, line: int) -> KeyDigests | None:
    """The digests of an ACL's criterion ``words[first:]`` (``FETCH,sha2(256),hex [flags]
    VALUES``), or None when it is not a key-digest test."""
    if first >= len(words) or not _DIGEST_FETCH.search(words[first]):
        return None
    i = first + 1
    ignore_case = False
    known = True
    method = "str"
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        if flag == "--":
            i += 1
            break
        if flag == "-i":
            ignore_case = True
        elif flag == "-m" and i + 1 < len(words):
            method = words[i + 1]
            i += 1
        elif flag in ("-f", "-M") and i + 1 < len(words):
            known = False  # the values come from a file
            i += 1
        i += 1
    values: list[str] = []
    for j in range(i, len(words)):
        if words[j] in ("}", "if", "unless", "||", "or"):
            break
        if j in unknown:
            known = False
        values.append(words[j])
    if method != "str" or not values:
        known = False
    return KeyDigests(values if known else None, line, ignore_case)


def _inline_acls(ln: _Line) -> list[KeyDigests]:
    """Key-digest tests written inside ``{ ... }`` on a rule line."""
    out: list[KeyDigests] = []
    words = ln.words
    for i, w in enumerate(words):
        if w in ("{", "!{"):
            found = _digest_acl(words, ln.unknown, i + 1, ln.no)
            if found is not None:
                out.append(found)
    return out


# ----------------------------------------------------------------------------- the reader


@dataclass
class _Defaults:
    name: str
    line: int
    settings: dict[str, Setting] = field(default_factory=dict)
    timeouts: dict[str, Setting] = field(default_factory=dict)
    server: dict[str, bool] = field(default_factory=dict)


def read_haproxy(text: str, path: str) -> HAProxyConfig:
    """The proxies of an HAProxy configuration. Raises :class:`ParseError` (with the line) for
    text HAProxy would not read as its configuration, or one without a proxy."""
    reader = _Reader(path)
    for no, raw in enumerate(text.splitlines(), 1):
        if "\x00" in raw:
            raise ParseError("a NUL byte: not a text file", no)
        ln = split_line(raw, no)
        if ln.words and not ln.words[0].startswith("."):
            # (.if/.else/.endif/.diag ...: the lines of every branch are read)
            reader.line(ln)
    reader.finish()
    if not reader.cfg.proxies:
        raise ParseError("no frontend, backend or listen section (nothing to check)", 1)
    return reader.cfg


class _Reader:
    """The state of reading one file: the section being read and the defaults sections."""

    def __init__(self, path: str) -> None:
        self.cfg = HAProxyConfig(path)
        self.section = ""
        self.proxy: Proxy | None = None
        self.defaults: _Defaults | None = None
        self.last_defaults = _Defaults("", 0)
        self.named: dict[str, _Defaults] = {}
        self.server_defaults: dict[str, bool] = {}
        #: the key-digest ACLs of the proxy by name, and the words its rules use
        self.acl_digests: dict[str, list[KeyDigests]] = {}
        self.used_words: set[str] = set()

    def finish(self) -> None:
        """The end of a section: the digest ACLs the proxy's rules use are its key checks."""
        if self.proxy is not None:
            for name, found in self.acl_digests.items():
                if name in self.used_words:
                    self.proxy.key_acls.extend(found)
        self.acl_digests, self.used_words = {}, set()

    def line(self, ln: _Line) -> None:
        key = ln.words[0]
        low = key.lower()
        if low in PROXY_SECTIONS or low == "defaults" or low in OTHER_SECTIONS:
            self.finish()
            self.start(low, ln)
        elif not self.section:
            raise ParseError(
                f"{key!r} outside a section: an HAProxy configuration is made of sections "
                "(global, defaults, frontend NAME, backend NAME, listen NAME)",
                ln.no,
            )
        elif self.proxy is not None or self.defaults is not None:
            self.statement(ln)

    def start(self, low: str, ln: _Line) -> None:
        """A section header."""
        no = ln.no
        self.section, self.proxy, self.defaults = low, None, None
        args = ln.words[1:]
        # a proxy takes the last defaults section; a defaults section starts from HAProxy's own
        base = self.last_defaults if low != "defaults" else _Defaults("", 0)
        if "from" in args:
            at = args.index("from")
            if at + 1 >= len(args):
                raise ParseError(f"{low} ... from: the name of a defaults section", no)
            wanted = args[at + 1]
            if wanted not in self.named:
                raise ParseError(
                    f"{low}: no defaults section named {wanted!r} before this line", no
                )
            base = self.named[wanted]
            args = args[:at]
        if low == "defaults":
            self.defaults = _Defaults(
                args[0] if args else "",
                no,
                dict(base.settings),
                dict(base.timeouts),
                dict(base.server),
            )
            self.last_defaults = self.defaults
            if self.defaults.name:
                self.named[self.defaults.name] = self.defaults
            self.server_defaults = self.defaults.server
        elif low in PROXY_SECTIONS:
            if not args:
                raise ParseError(f"{low} needs a name ({low} NAME)", no)
            proxy = self.proxy = Proxy(low, args[0], no)
            mode = base.settings.get("mode")
            if mode is not None:
                proxy.mode = mode.value
            proxy.balance = base.settings.get("balance")
            proxy.hash_type = base.settings.get("hash_type")
            proxy.sticky = base.settings.get("sticky")
            proxy.timeouts = dict(base.timeouts)
            self.server_defaults = dict(base.server)
            self.cfg.proxies.append(proxy)
            if low == "listen" and len(args) > 1:
                # the old form: listen NAME ADDRESS:PORT
                proxy.binds.extend(_binds(args[1], False, no))

    def put(self, name: str, value: str, no: int) -> None:
        """A setting a defaults section passes on (mode, balance, hash-type, stickiness)."""
        proxy = self.proxy
        if proxy is not None:
            setattr(proxy, name, value if name == "mode" else Setting(value, no, proxy.name))
        elif self.defaults is not None:
            self.defaults.settings[name] = Setting(value, no, "defaults")

    def statement(self, ln: _Line) -> None:
        """One line inside a defaults or proxy section."""
        words = ln.words
        key = words[0].lower()
        no = ln.no
        if key == "mode" and len(words) > 1:
            self.put("mode", words[1].lower(), no)
        elif key in ("balance", "hash-type"):
            if len(words) < 2:
                example = "balance roundrobin" if key == "balance" else "hash-type consistent"
                raise ParseError(f"{key} needs a value (e.g. {example})", no)
            self.put(key.replace("-", "_"), " ".join(words[1:]), no)
        elif (key == "stick" and len(words) > 1 and words[1] in ("on", "match")) or key == "cookie":
            self.put("sticky", " ".join(words), no)
        elif key == "timeout" and len(words) >= 2:
            self.timeout(ln)
        elif key == "default-server":
            _server_defaults(words[1:], self.server_defaults)
        elif self.proxy is not None:
            self.proxy_statement(ln, self.proxy)

    def timeout(self, ln: _Line) -> None:
        words = ln.words
        which = words[1].lower()
        if which not in ("client", "server", "connect", "tunnel"):
            return
        if len(words) < 3:
            raise ParseError(f"timeout {which} needs a time (e.g. timeout {which} 1h)", ln.no)
        if 2 in ln.unknown:
            return
        ms = parse_time(words[2], ln.no)
        if self.proxy is not None:
            self.proxy.timeouts[which] = Setting(str(ms), ln.no, self.proxy.name)
        elif self.defaults is not None:
            self.defaults.timeouts[which] = Setting(str(ms), ln.no, "defaults")

    def proxy_statement(self, ln: _Line, proxy: Proxy) -> None:
        """A line of a frontend, backend or listen section that defaults cannot hold."""
        words = ln.words
        key = words[0].lower()
        no = ln.no
        if key == "bind" and proxy.kind != "backend":
            if len(words) < 2:
                raise ParseError("bind needs an address (bind ADDRESS:PORT [ssl crt FILE])", no)
            if 1 in ln.unknown:
                proxy.unknown_bind = True
            else:
                proxy.binds.extend(_binds(words[1], "ssl" in words[2:], no))
        elif key == "default_backend" and len(words) > 1:
            proxy.default_backend = Setting(words[1], no, proxy.name)
        elif key == "use_backend" and len(words) > 1:
            if "%[" in words[1] or 1 in ln.unknown:
                proxy.dynamic_backend = True
            else:
                proxy.use_backends.append(Setting(words[1], no, proxy.name))
            self.used_words.update(w.lstrip("!") for w in words[2:])
        elif key == "server" and proxy.kind != "frontend":
            proxy.servers.append(_server(words, ln, dict(self.server_defaults)))
        elif key == "acl" and len(words) >= 3:
            found = _digest_acl(words, ln.unknown, 2, no)
            if found is not None:
                self.acl_digests.setdefault(words[1], []).append(found)
        else:
            if (
                key == "http-request"
                and len(words) > 3
                and words[1].lower() in ("set-header", "replace-header")
                and words[2].lower() == "authorization"
            ):
                proxy.sets_key = True
                found_map = SENT_KEY_MAP.search(" ".join(words[3:]))
                proxy.sent_key_map = (found_map[2], found_map[1]) if found_map else None
            proxy.key_acls.extend(_inline_acls(ln))
            self.used_words.update(w.lstrip("!") for w in words[1:])

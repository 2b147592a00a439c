"""Rules across a client and the server it points at (XC001-XC003)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence

from llamafleet.argv import ServerConfig, parse_argv_list
from llamafleet.gguf_meta import ModelFacts
from llamafleet.lazyre import lazy
from llamafleet.record import Record
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.rules.base import Context, Hit, rule
from llamafleet.rules.client import _where
from llamafleet.rules.server import is_any_address, is_loopback
from llamafleet.settings import Client, truthy
from llamafleet.slots import SlotContext, request_context
from llamafleet.values import split_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from llamafleet.readers.haproxy import Bind, HAProxyConfig, Proxy, Server

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def server_address(cfg: ServerConfig) -> tuple[str, int]:
    found: tuple[str, int] | None = cfg.memo.get("address")
    if found is None:
        found = cfg.memo["address"] = (
            cfg.value("--host") or DEFAULT_HOST,
            cfg.int_value("--port") or DEFAULT_PORT,
        )
    return found


def _addresses(cfg: ServerConfig) -> list[tuple[str, int]]:
    """Where a client reaches the server: its --host/--port, or for one in a container the host
    ports published for its port and its names on the container network."""
    found: list[tuple[str, int]] | None = cfg.memo.get("addresses")
    if found is not None:
        return found
    host, port = server_address(cfg)
    if cfg.published is None:
        found = [(host, port)]
    else:
        found = [(h or "0.0.0.0", hp) for h, hp, cp in cfg.published if cp == port]
        found += [(name, port) for name in cfg.names]
    cfg.memo["addresses"] = found
    return found


def _matches(url_host: str, url_port: int, cfg: ServerConfig) -> bool:
    for host, port in _addresses(cfg):
        if url_port != port:
            continue
        if is_any_address(host):
            return True  # listens everywhere: any address of the host reaches it
        if is_loopback(host) and is_loopback(url_host):
            return True
        if url_host.strip("[]").lower() == host.strip("[]").lower():
            return True
    return False


def address_unknown(cfg: ServerConfig) -> bool:
    """Whether the server's address is not known: --host/--port set from an unresolved
    variable, or options hidden in one (a --port may be among them)."""
    return (
        cfg.is_unknown("--host")
        or cfg.is_unknown("--port")
        or (cfg.opaque and cfg.get("--port") is None)
    )


#: Default ports of proxies that sit between Claude Code and llama-server (LiteLLM,
#: claude-code-router, claude-code-proxy): a client pointing there talks to the proxy.
PROXY_PORTS = {4000: "LiteLLM", 3456: "claude-code-router", 8082: "claude-code-proxy"}


def behind_proxy(ctx: Context, url: ClientURL) -> bool:
    """Evidence that the client's URL reaches a proxy, not llama-server itself: something the
    inputs start listens there (a LiteLLM or router command, a Compose service, an SSH
    forward), the URL has a path (a reverse proxy's prefix; llama-server serves at its root), or
    its port is a proxy's default and no checked server uses it."""
    for lst in ctx.listeners:
        if lst.port != url.port:
            continue
        h = lst.host.strip("[]").lower()
        if h in ("", url.host) or is_any_address(h) or (is_loopback(h) and is_loopback(url.host)):
            return True
    parts = split_url(url.value)
    if parts is not None and parts.path.strip("/"):
        return True
    used = {p for s in ctx.all_servers for _, p in _addresses(s)}
    return url.port in PROXY_PORTS and url.port not in used


def serves_tls(cfg: ServerConfig) -> bool:
    """llama-server serves https only when given both a key and a certificate (and built with
    OpenSSL); with one of them alone it serves plain http."""
    return bool(cfg.value("--ssl-cert-file")) and bool(cfg.value("--ssl-key-file"))


def server_url(cfg: ServerConfig, host: str | None = None) -> str:
    h, p = server_address(cfg)
    h = host or h
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"{'https' if serves_tls(cfg) else 'http'}://{h}:{p}"


class ClientURL(Record):
    """A client's ANTHROPIC_BASE_URL split up: ``scheme`` "http" or "https" (lower case),
    ``host`` without brackets, lower case, ``port`` the URL's, else 443 for https and 80 for
    http; where it is set, and its text."""

    _fields = ("scheme", "host", "port", "file", "line", "value")

    def __init__(  # noqa: PLR0917 - the fields
        self, scheme: str, host: str, port: int, file: str, line: int, value: str
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.file = file
        self.line = line
        self.value = value


def client_url(c: Client) -> ClientURL | None:
    """The client's ANTHROPIC_BASE_URL split up, or None when it has none, it goes to
    Anthropic's API, or it is not an http(s) URL with a valid port."""
    if "client_url" in c.memo:
        found: ClientURL | None = c.memo["client_url"]
        return found
    c.memo["client_url"] = None
    v = c.base_url()
    if v is None or not isinstance(v.value, str) or not c.is_third_party():
        return None
    parts = c.url_parts()
    if parts is None or parts.scheme not in ("http", "https"):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    file = v.file.path if v.file else "<environment>"
    found = ClientURL(parts.scheme, parts.hostname or "", port, file, v.line, v.value)
    c.memo["client_url"] = found
    return found


def _client_url(c: Client) -> tuple[str, int, str, int, str] | None:
    u = client_url(c)
    return None if u is None else (u.host, u.port, u.file, u.line, u.value)


@rule("XC001")
def client_server_mismatch(ctx: Context) -> Iterator[Hit]:
    servers = ctx.all_servers
    pools = [f for cfg in ctx.pools for f in cfg.frontends if f.binds or f.unknown_bind]
    if not servers and not pools:
        return
    for c in ctx.clients:
        url = client_url(c)
        if url is None:
            continue
        route = pool_route(ctx, c)
        if route is not None:
            # the pool's frontend: the scheme must be the one it serves; the servers behind it
            # are HAProxy's to reach (HP001), not the client's
            want = route.scheme()
            if want is not None and want != url.scheme:
                yield Hit(
                    url.file,
                    url.line,
                    {
                        "base_url": url.value,
                        "servers": route.describe(),
                        "remedy": route.remedy(url),
                    },
                )
            continue
        found = _server_mismatch(ctx, url, servers, pools)
        if found is not None:
            yield found


def _server_mismatch(
    ctx: Context, url: ClientURL, servers: list[ServerConfig], pools: list[Proxy]
) -> Hit | None:
    """XC001 for a client whose URL names no pool frontend: the servers it reaches, else where
    it should point (the pool checked with it, else the first server)."""
    host, port, file, line, base = url.host, url.port, url.file, url.line, url.value
    reached = [s for s in servers if _matches(host, port, s)]
    if any(("https" if serves_tls(s) else "http") == url.scheme for s in reached):
        return None
    if not reached and (
        any(address_unknown(s) for s in servers)
        or behind_proxy(ctx, url)
        or any(f.unknown_bind for f in pools)
    ):
        return None  # it may reach a server at an address not known, or a proxy in between
    if not reached and pools:
        # a pool is checked with it: the client belongs at the pool's frontend
        bound = [f for f in pools if f.binds]
        listed = ", ".join(
            [_frontend_url(ctx, f, url) for f in bound] + [server_url(s) for s in servers]
        )
        remedy = (
            f"Set ANTHROPIC_BASE_URL to {_frontend_url(ctx, bound[0], url)} (no /v1): the pool "
            f"(frontend {bound[0].name} of {_pool_file(ctx, bound[0])}) spreads the clients "
            "over the servers behind it."
        )
        return Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})
    listed = ", ".join(server_url(s) for s in servers)
    if reached:
        # the right address and port, the wrong scheme: TLS handshake against plain http
        # (or plain http against a TLS listener) fails on every request
        s = reached[0]
        want = server_url(s, host if host else None)
        if serves_tls(s):
            remedy = (
                f"The server serves TLS (--ssl-cert-file): set ANTHROPIC_BASE_URL to {want} "
                "(no /v1) and let Claude Code trust the CA that signed its certificate "
                "(env NODE_EXTRA_CA_CERTS=<CA file>; the claude_code role installs it)."
            )
        else:
            remedy = (
                f"The server serves plain http (no --ssl-cert-file/--ssl-key-file): set "
                f"ANTHROPIC_BASE_URL to {want} (no /v1), or give the server a certificate "
                "(llama_server_tls) and keep https."
            )
        return Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})
    h, _ = server_address(servers[0])
    if is_any_address(h):
        h = host
    if not is_loopback(host) and all(is_loopback(server_address(s)[0]) for s in servers):
        # a client on another machine cannot reach a loopback-only server at any URL
        remedy = (
            f"The server listens on {h} only: run Claude Code on the server's host with "
            f"ANTHROPIC_BASE_URL={server_url(servers[0])}, or make the server listen on an "
            "address this client reaches (--host, with --api-key-file) and point "
            "ANTHROPIC_BASE_URL there (no /v1)."
        )
    else:
        remedy = f"Set ANTHROPIC_BASE_URL to {server_url(servers[0], h)} (no /v1)."
    return Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})


def server_keys(
    cfg: ServerConfig, referenced: ReferencedFiles | None = None
) -> tuple[bool, list[str] | None]:
    """(requires a key?, every key it accepts if all can be read). llama-server accepts each
    comma-separated key of ``--api-key`` (or ``LLAMA_API_KEY``) and each non-empty line of an
    ``--api-key-file`` (per-client keys: one a line). The file is opened only as the
    ``referenced`` policy allows (default: never); when it cannot be read the keys are unknown."""
    inline = cfg.value("--api-key") or (cfg.env.get("LLAMA_API_KEY", ("", 0))[0] or None)
    if cfg.is_unknown("--api-key") or cfg.is_unknown("--api-key-file"):
        return True, None  # a key set from a variable: required, its value unknown
    keys = [k for k in inline.split(",") if k] if inline else []
    kf = cfg.value("--api-key-file")
    if kf:
        text = (referenced or NEVER).read(kf)
        lines = [line.strip() for line in text.splitlines()] if text else []
        lines = [line for line in lines if line]
        if not lines:
            return True, None
        keys += lines
    if not inline and not kf:
        return False, None
    return True, keys or None


def server_key(
    cfg: ServerConfig, referenced: ReferencedFiles | None = None
) -> tuple[bool, str | None]:
    """(requires a key?, its first key if it can be read); see server_keys for all of them."""
    required, keys = server_keys(cfg, referenced)
    return required, keys[0] if keys else None


@rule("XC002")
def client_missing_key(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        url = _client_url(c)
        if url is None:
            continue
        _, _, file, line, _ = url
        sent = c.tokens()
        helper = c.setting("apiKeyHelper") is not None
        route = pool_route(ctx, c)
        if route is not None:
            found = route.pool_key_problem(sent, helper)
            if found is not None:
                yield Hit(file, line, {"server": route.describe(), "detail": found})
            if route.frontend.sets_key:
                # the pool sends the servers its own key, not the client's: that one (from its
                # map file, when it may be read) must be one each server accepts
                yield from _pool_sent_key_problems(ctx, c, route, file, line)
                continue
        for s, name in reached_servers(ctx, c):
            required, keys = server_keys(s, ctx.referenced)
            if not required:
                continue
            if not sent and not helper:
                yield Hit(file, line, {"server": name, "detail": "sends none"})
            elif keys is not None and sent and not any(k in sent for k in keys):
                yield Hit(
                    file,
                    line,
                    {"server": name, "detail": "sends a different key (it will get 401)"},
                )


def _pool_sent_key_problems(
    ctx: Context, c: Client, route: PoolRoute, file: str, line: int
) -> Iterator[Hit]:
    """XC002 for the servers behind a pool that replaces the client's key with its own: the key
    its map file holds (``%[str(NAME),map(FILE)]``; not read unless the referenced-file policy
    allows) against each server's keys."""
    where = route.frontend.sent_key_map
    if where is None:
        return
    path, name = where
    text = (ctx.referenced or NEVER).read(path)
    if not text:
        return
    sent = [
        parts[1]
        for parts in (ln.split(None, 1) for ln in text.splitlines())
        if len(parts) == 2 and parts[0] == name
    ]
    if not sent:
        return
    for s, server in reached_servers(ctx, c):
        required, keys = server_keys(s, ctx.referenced)
        if required and keys is not None and not any(k.strip() in keys for k in sent):
            yield Hit(
                file,
                line,
                {
                    "server": server,
                    "detail": "reaches it through the pool, which sends it another key (from "
                    f"its map file {path}): the server will answer 401",
                },
            )


# ----------------------------------------------------------------------------- pools


def _host_marks(path: str) -> tuple[str | None, set[str]]:
    """(the host a checked file comes from as ``HOST:/path``, the names of its directories: a
    file fetched from HOST by Ansible lies under a directory named HOST), lower case."""
    p = path.replace("\\", "/")
    head, colon, rest = p.partition(":")
    explicit = None
    if colon and rest.startswith("/") and len(head) > 1 and "/" not in head:
        explicit = head.lower()
        p = rest
    return explicit, {d.lower() for d in p.split("/")[:-1] if d}


def _is_host(cfg: ServerConfig, srv: Server) -> bool | None:
    """Whether ``cfg`` runs on the host of pool server line ``srv``: True when it listens on the
    line's address or its file names the line's host (``HOST:/path``, a directory named after
    it), False when it names another host or listens on another address, None when nothing
    says."""
    names = {srv.name.lower(), srv.host.lower().strip("[]")}
    explicit, dirs = _host_marks(cfg.path)
    specific = {
        h.strip("[]").lower()
        for h, _ in _addresses(cfg)
        if not is_any_address(h) and not is_loopback(h)
    }
    if names & specific:
        return True
    if explicit is not None:
        return explicit in names
    if names & dirs:
        return True
    return False if specific else None


def pool_backend_servers(ctx: Context, srv: Server) -> list[ServerConfig]:
    """The checked llama-servers a pool's server line reaches: on its host (see
    :func:`_is_host`) and port; a server listening on every address of a host that its file
    does not name matches when it is the only checked server on that port."""
    if srv.port is None or not srv.known:
        return []
    target = srv.host.strip("[]").lower()
    out = []
    for cfg in ctx.all_servers:
        ports = [p for h, p in _addresses(cfg) if p == srv.port]
        if not ports or address_unknown(cfg):
            continue
        same = _is_host(cfg, srv)
        if same is None:
            same = sum(srv.port in {p for _, p in _addresses(s)} for s in ctx.all_servers) == 1
        if not same:
            continue
        # a server that listens on loopback only is reached by a pool on its own host alone
        hosts = [h.strip("[]").lower() for h, p in _addresses(cfg) if p == srv.port]
        if all(is_loopback(h) for h in hosts) and not is_loopback(target):
            continue
        out.append(cfg)
    return out


def _server_name(cfg: ServerConfig, srv: Server | None = None) -> str:
    where = "{}:{}".format(*server_address(cfg))
    if srv is None:
        return f"{cfg.path} ({where})"
    return f"pool server {srv.name} {srv.address} ({cfg.path}, listening on {where})"


def _pool_file(ctx: Context, frontend: Proxy) -> str:
    for cfg in ctx.pools:
        if frontend in cfg.proxies:
            return cfg.path
    return "?"  # pragma: no cover - frontends come from ctx.pools


def _frontend_url(
    ctx: Context, frontend: Proxy, url: ClientURL | None, bind: Bind | None = None
) -> str:
    """The URL a client uses for a pool frontend: its bind's scheme and port, the address it
    binds (else the pool host's name from its file's ``HOST:/path``, else the client's host)."""
    b = bind or frontend.binds[0]
    host = b.host
    if host == "*":
        explicit, _ = _host_marks(_pool_file(ctx, frontend))
        host = explicit or (url.host if url is not None and url.host else "POOL-HOST")
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if b.ssl else 'http'}://{host}:{b.port}"


class PoolRoute(Record):
    """A client's URL at a pool's frontend, and the checked servers behind it: ``servers`` is
    (server line, the checked llama-server behind it) of every enabled server line."""

    _fields = ("ctx", "config", "frontend", "bind", "url", "servers")

    def __init__(  # noqa: PLR0917 - the fields
        self,
        ctx: Context,
        config: HAProxyConfig,
        frontend: Proxy,
        bind: Bind,
        url: ClientURL,
        servers: list[tuple[Server, ServerConfig]],
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.frontend = frontend
        self.bind = bind
        self.url = url
        self.servers = servers

    def scheme(self) -> str | None:
        """The scheme the frontend speaks to clients: https with ``ssl`` on the bind line, http
        in HTTP mode; in TCP mode the client's bytes pass to the servers (None when they do not
        all speak the same)."""
        if self.bind.ssl:
            return "https"
        if self.frontend.mode == "http":
            return "http"
        schemes = {
            "http" if srv.ssl else ("https" if serves_tls(cfg) else "http")
            for srv, cfg in self.servers
        }
        return schemes.pop() if len(schemes) == 1 else None

    def describe(self) -> str:
        return (
            f"the pool (frontend {self.frontend.name} of {self.config.path}, "
            f"{_frontend_url(self.ctx, self.frontend, self.url, self.bind)})"
        )

    def remedy(self, url: ClientURL) -> str:
        want = _frontend_url(self.ctx, self.frontend, url, self.bind)
        if self.scheme() == "https":
            return (
                f"The pool serves TLS (bind ... ssl crt): set ANTHROPIC_BASE_URL to {want} "
                "(no /v1) and let Claude Code trust the CA that signed its certificate "
                "(env NODE_EXTRA_CA_CERTS=<CA file>; the claude_code role installs it)."
            )
        return (
            f"The pool serves plain http (no ssl on its bind line): set ANTHROPIC_BASE_URL to "
            f"{want} (no /v1), or give the bind line a certificate (ssl crt FILE) and keep https."
        )

    def pool_key_problem(self, sent: list[str], helper: bool) -> str | None:
        """What is wrong with the client's key at the frontend's key-digest check, or None."""
        from llamafleet.readers.haproxy import key_digest

        acls = self.frontend.key_acls
        if not acls or any(a.digests is None for a in acls):
            return None  # no check, or digests the validator cannot know
        if not sent:
            return None if helper else "sends none (the pool answers 401)"
        accepted = [(d, a.ignore_case) for a in acls for d in a.digests or []]
        sums = [key_digest(t) for t in sent]
        if any(s == d or (i and s.lower() == d.lower()) for s in sums for d, i in accepted):
            return None
        if any(s.lower() == d.lower() for s in sums for d, _ in accepted):
            return (
                "sends the right key, but the pool's digest is in lower case and HAProxy's hex "
                "converter writes upper case (it will get 401 from the pool: write the digest "
                "in upper case, or add -i)"
            )
        return (
            "sends a key whose SHA-256 is not one the pool accepts (it will get 401 from the pool)"
        )


def _bind_reaches(ctx: Context, cfg: HAProxyConfig, bind: Bind, url: ClientURL) -> bool:
    if not bind.has_port(url.port):
        return False
    h = bind.host.lower()
    explicit, _ = _host_marks(cfg.path)
    if explicit is not None and url.host == explicit:
        return True
    if h == "*":
        # every address of the pool host, not the address of a server behind it
        own = {
            s.host.strip("[]").lower()
            for p in cfg.proxies
            for s in p.servers
            if not is_loopback(s.host)
        }
        return url.host not in own
    if is_loopback(h) and is_loopback(url.host):
        return True
    if h == url.host:
        return True
    # a name against an address (or the other way round) cannot be compared without resolving
    # it: a VIP's or an alias's name is the pool's, unless a checked server listens there
    return _is_ip(h) != _is_ip(url.host) and not any(
        _matches(url.host, url.port, s) for s in ctx.all_servers
    )


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def pool_route(ctx: Context, c: Client) -> PoolRoute | None:
    """The pool frontend the client's URL reaches (address and port of a bind line), with the
    checked servers behind it; None when it reaches none."""
    if not ctx.pools:
        return None
    if "pool_route" in c.memo:
        found: PoolRoute | None = c.memo["pool_route"]
        return found
    c.memo["pool_route"] = None
    url = client_url(c)
    if url is None:
        return None
    for cfg in ctx.pools:
        for f in cfg.frontends:
            bind = next((b for b in f.binds if _bind_reaches(ctx, cfg, b, url)), None)
            if bind is None:
                continue
            behind = [
                (srv, s)
                for b in cfg.backends_of(f)
                for srv in b.servers
                if not srv.disabled
                for s in pool_backend_servers(ctx, srv)
            ]
            route = PoolRoute(ctx, cfg, f, bind, url, behind)
            c.memo["pool_route"] = route
            return route
    return None


def reached_servers(ctx: Context, c: Client) -> list[tuple[ServerConfig, str]]:
    """The checked llama-servers a client's requests reach, each with its name for messages:
    those behind the pool frontend its URL names, else those listening at its URL."""
    route = pool_route(ctx, c)
    if route is not None:
        seen: list[ServerConfig] = []
        out = []
        for srv, s in route.servers:
            if s not in seen:
                seen.append(s)
                out.append((s, _server_name(s, srv)))
        return out
    url = client_url(c)
    if url is None:
        return []
    return [(s, _server_name(s)) for s in ctx.all_servers if _matches(url.host, url.port, s)]


# ----------------------------------------------------------------------------- XC003

#: Claude Code 2.1.332's window for a model it does not know (every llama-server alias) ...
CLAUDE_CODE_DEFAULT_WINDOW = 1_000_000
#: ... and with CLAUDE_CODE_DISABLE_1M_CONTEXT set (2.1.197's window for every such model).
CLAUDE_CODE_SMALL_WINDOW = 200_000
#: Claude Code raises a smaller CLAUDE_CODE_AUTO_COMPACT_WINDOW to this (and ignores an
#: autoCompactWindow setting below it) ...
CLAUDE_CODE_MIN_WINDOW = 100_000
#: ... and takes no window above the model's (1,000,000 for a model it does not know): the largest
#: window the claude_code role writes.
CLAUDE_CODE_MAX_WINDOW = CLAUDE_CODE_DEFAULT_WINDOW
#: Claude Code compacts this many tokens below its window: min(max output, 20000) kept for the
#: summary, plus a 13000-token buffer (for a model it does not know the max output is 32000).
CLAUDE_CODE_COMPACT_MARGIN = 20_000 + 13_000
#: The answer kept free in the slot by the claude_code role's default (claude_code_output_reserve):
#: Claude Code's max_tokens for a model it does not know.
DEFAULT_OUTPUT_RESERVE = 32_000
WINDOW_VAR = "CLAUDE_CODE_AUTO_COMPACT_WINDOW"


def slot_context(cfg: ServerConfig, model: ModelFacts | None = None) -> SlotContext | None:
    """Tokens one request (one slot) may use: :func:`llamafleet.slots.request_context` (the
    planner's ``n_ctx_seq``) with the model's training context as the cap when its metadata is
    known. ``-c 0`` or no ``-c`` is the training context (None when it is not known)."""
    return request_context(cfg, model.context_length if model is not None else None)


def _model_facts(model: Mapping[str, Any] | ModelFacts | None) -> ModelFacts | None:
    """Model facts from a ``llamafleet inspect`` mapping (``metadata``) or the gguf_models role's
    description of a model (``kv``: the GGUF key/values); None when neither is there."""
    if model is None or isinstance(model, ModelFacts):
        return model
    for key in ("metadata", "kv"):
        meta = model.get(key)
        if isinstance(meta, Mapping):
            return ModelFacts(metadata=dict(meta))
    return None


def slot_context_of_argv(
    argv: Sequence[str], model: Mapping[str, Any] | ModelFacts | None = None
) -> int | None:
    """:func:`slot_context` for a llama-server argv list (the program name optional) and the
    model's facts (a ``llamafleet inspect`` mapping, the gguf_models role's description of the
    model with its ``kv``, or None): the number the llama_server role's
    ``llama_server_endpoints`` fact carries as ``ctx_per_slot``. None when it is not known (no
    ``-c`` or ``-c 0``, and no training context in the model's facts)."""
    found = slot_context(parse_argv_list(list(argv)), _model_facts(model))
    return found.tokens if found is not None else None


def _js_parse_int(text: str) -> int | None:
    """JavaScript's parseInt(text, 10): the leading integer, or None (NaN)."""
    m = re.match(r"\s*([+-]?\d+)", text)
    return int(m.group(1)) if m else None


_EXPONENT = lazy(r"^[+-]?(\d+(\.\d*)?|\.\d+)[eE][+-]?\d+$")
_GROUPED = lazy(r"^[+-]?\d{1,3}([_,\u00a0\u202f ])\d{3}(?:\1\d{3})*$")


def window_size(text: str) -> int | None:
    """A window size as Claude Code 2.1.332 reads CLAUDE_CODE_AUTO_COMPACT_WINDOW: a ``k`` or ``m``
    suffix multiplies (``200k``, ``1.5m``), an exponent (``2e5``) or grouped digits (``200,000``,
    ``200_000``) are numbers, anything else goes through parseInt; None when it is not a usable
    size (not a number, below 1). A size below 100,000 is returned as it is (the caller raises
    it)."""
    raw = text.strip()
    if not raw:
        return None
    mult = {"k": 1000, "m": 1_000_000}.get(raw[-1].lower())
    try:
        if mult is not None:
            value: float | None = float(raw[:-1]) * mult
        elif _EXPONENT.match(raw):
            value = float(raw)
        elif _GROUPED.match(raw):
            value = float(re.sub(r"[^\d+-]", "", raw))
        else:
            parsed = _js_parse_int(raw)
            value = float(parsed) if parsed is not None else None
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 1:
        return None
    return round(value)


class CompactWindow(Record):
    """The window Claude Code (2.1.332) compacts at, for a model it does not know: ``tokens``
    (compaction starts CLAUDE_CODE_COMPACT_MARGIN below it), ``how`` it comes from, for messages
    ("" for Claude Code's default), where it is set, what switches auto-compaction ``off`` when
    something does, and the ``model``'s window as Claude Code assumes it."""

    _fields = ("tokens", "how", "file", "line", "off", "model")

    def __init__(  # noqa: PLR0917 - the fields
        self,
        tokens: int,
        how: str,
        file: str,
        line: int,
        off: str = "",
        model: int = CLAUDE_CODE_DEFAULT_WINDOW,
    ) -> None:
        self.tokens = tokens
        self.how = how
        self.file = file
        self.line = line
        self.off = off
        self.model = model


def model_window(c: Client) -> tuple[int, str]:
    """The window Claude Code 2.1.332 assumes for a model it does not know, and why:
    CLAUDE_CODE_MAX_CONTEXT_TOKENS (a positive integer) replaces it, CLAUDE_CODE_DISABLE_1M_CONTEXT
    makes it 200,000, else 1,000,000."""
    v = c.env("CLAUDE_CODE_MAX_CONTEXT_TOKENS")
    if v is not None:
        n = _js_parse_int(str(v.value))
        if n is not None and n > 0:
            return n, f"CLAUDE_CODE_MAX_CONTEXT_TOKENS={v.value}"
    v = c.env("CLAUDE_CODE_DISABLE_1M_CONTEXT")
    if v is not None and truthy(v.value):
        return CLAUDE_CODE_SMALL_WINDOW, f"CLAUDE_CODE_DISABLE_1M_CONTEXT={v.value}"
    return CLAUDE_CODE_DEFAULT_WINDOW, ""


def compact_window(c: Client) -> CompactWindow:
    """Claude Code 2.1.332's compaction window for a client of a model it does not know:
    CLAUDE_CODE_AUTO_COMPACT_WINDOW (:func:`window_size`; not a usable size: ignored; raised to
    100,000), else the autoCompactWindow setting (an integer of at least 100,000, else ignored),
    else the model's window (:func:`model_window`: 1,000,000 by default); never above the model's
    window."""
    file, line = _where(c, WINDOW_VAR)
    model, _ = model_window(c)
    off = ""
    for key in ("DISABLE_COMPACT", "DISABLE_AUTO_COMPACT"):
        v = c.env(key)
        if v is not None and truthy(v.value):
            off = off or f"{key}={v.value}"
    s = c.setting("autoCompactEnabled")
    if s is not None and s.value is False:
        off = off or '"autoCompactEnabled": false'
    v = c.env(WINDOW_VAR)
    if v is not None and str(v.value).strip():
        raw = str(v.value).strip()
        n = window_size(raw)
        if n is not None:
            eff = max(CLAUDE_CODE_MIN_WINDOW, n)
            how = f"{WINDOW_VAR}={raw}"
            if eff != n:
                how += f", which Claude Code takes as {eff}"
            return CompactWindow(min(eff, model), how, file, line, off, model)
    s = c.setting("autoCompactWindow")
    if (
        s is not None
        and isinstance(s.value, int)
        and not isinstance(s.value, bool)
        and s.value >= CLAUDE_CODE_MIN_WINDOW
    ):
        where = (s.file.path, s.line) if s.file is not None else (file, line)
        return CompactWindow(
            min(s.value, model), f'"autoCompactWindow": {s.value}', *where, off=off, model=model
        )
    return CompactWindow(model, "", file, line, off, model)


def min_slot(reserve: int = DEFAULT_OUTPUT_RESERVE) -> int:
    """The smallest slot Claude Code can keep a conversation in with ``reserve`` tokens free for
    the answer: it takes no window below CLAUDE_CODE_MIN_WINDOW (the slot must hold that) and
    compacts CLAUDE_CODE_COMPACT_MARGIN below its window, so never before 67,000 tokens (the
    slot must hold that plus the reserve)."""
    earliest = CLAUDE_CODE_MIN_WINDOW - CLAUDE_CODE_COMPACT_MARGIN
    return max(CLAUDE_CODE_MIN_WINDOW, earliest + reserve)


def window_for_slot(slot: int, reserve: int = DEFAULT_OUTPUT_RESERVE) -> int | None:
    """The CLAUDE_CODE_AUTO_COMPACT_WINDOW for a slot of ``slot`` tokens: the slot less the
    answer's reserve, and at least CLAUDE_CODE_MIN_WINDOW (Claude Code raises a smaller value to
    it anyway: written as it takes it); None when the slot is below :func:`min_slot`."""
    if slot < min_slot(reserve):
        return None
    return max(slot - reserve, CLAUDE_CODE_MIN_WINDOW)


def _window_what(win: CompactWindow) -> str:
    """What Claude Code does with this window, for XC003's message."""
    if win.off:
        return f"never compacts the conversation ({win.off})"
    if not win.how:
        return (
            f"sets no {WINDOW_VAR}: Claude Code assumes {win.tokens} tokens for a model "
            f"it does not know and compacts only {CLAUDE_CODE_COMPACT_MARGIN} below that, or "
            "after the server has refused a request as too long"
        )
    return f"compacts within a window of {win.tokens} tokens ({win.how})"


def _window_remedy(win: CompactWindow, slot: int) -> str:
    """XC003's fix for a window that does not fit a slot of ``slot`` tokens."""
    want = window_for_slot(slot)
    if win.off and win.tokens <= slot and win.model <= slot:
        return f"Turn auto-compaction back on (remove {win.off})."
    if want is not None:
        remedy = (
            f'Set env.{WINDOW_VAR} to "{want}" (the slot less {DEFAULT_OUTPUT_RESERVE} '
            f"tokens kept for the answer, at least {CLAUDE_CODE_MIN_WINDOW}: what the "
            "claude_code role writes with claude_code_auto_compact_window: auto), or give "
            "each slot more context (-c, -np 1, or --kv-unified so one request may use "
            "the whole cache)."
        )
    else:
        floor = CLAUDE_CODE_MIN_WINDOW - CLAUDE_CODE_COMPACT_MARGIN
        remedy = (
            f"Give each slot at least {min_slot()} tokens (-c, -np 1, or --kv-unified so "
            "one request may use the whole cache): Claude Code takes no window below "
            f"{CLAUDE_CODE_MIN_WINDOW} and compacts {CLAUDE_CODE_COMPACT_MARGIN} below "
            f"it, so never before {floor} tokens."
        )
    if win.off:
        first = remedy[0].lower()
        remedy = f"Turn auto-compaction back on (remove {win.off}), then {first}{remedy[1:]}"
    return remedy


@rule("XC003")
def compact_window_above_slot(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        url = _client_url(c)
        if url is None:
            continue
        targets = [
            (s, name, slot)
            for s, name in reached_servers(ctx, c)
            if (slot := slot_context(s, ctx.facts.model)) is not None
        ]
        if pool_route(ctx, c) is not None and targets:
            # behind a pool a conversation may land on any server: the smallest slot counts
            s, name, slot = min(targets, key=lambda t: t[2].tokens)
            if len(targets) > 1:
                name += f", the smallest slot of the {len(targets)} servers behind the pool"
            targets = [(s, name, slot)]
        for _, name, slot in targets:
            win = compact_window(c)
            # without compaction Claude Code stops a conversation itself short of the model's
            # own window (it asks for /compact): enough when the slot holds that window
            if (win.model if win.off else win.tokens) <= slot.tokens:
                continue
            what = _window_what(win)
            remedy = _window_remedy(win, slot.tokens)
            yield Hit(
                win.file,
                win.line,
                {
                    "server": name,
                    "slot": slot.tokens,
                    "slot_detail": slot.detail,
                    "what": what,
                    "remedy": remedy,
                },
            )

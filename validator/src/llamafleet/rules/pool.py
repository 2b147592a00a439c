"""Rules of an HAProxy pool in front of llama-server (HP001-HP003)."""

from __future__ import annotations

from collections.abc import Iterator

from llamafleet.rules.base import Context, Hit, rule
from llamafleet.rules.cross import (
    _addresses,
    _is_host,
    address_unknown,
    pool_backend_servers,
    serves_tls,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from llamafleet.argv import ServerConfig
    from llamafleet.readers.haproxy import HAProxyConfig, Proxy, Server

#: HAProxy timeouts below this cut requests Claude Code still waits for: its own request
#: timeout (API_TIMEOUT_MS) is 600000 ms by default, and a long prompt is evaluated before the
#: first byte of the answer (minutes for 200K tokens on one GPU, more with experts on the CPU).
MIN_POOL_TIMEOUT_MS = 600_000
#: What the fix of HP003 asks for: the llama_pool role's own hashing.
AFFINE_BALANCE = "balance hash req.hdr(x-claude-code-session-id)"


def _checked_port(cfg: ServerConfig) -> bool:
    return not address_unknown(cfg)


@rule("HP001")
def pool_server_mismatch(ctx: Context) -> Iterator[Hit]:
    if not ctx.all_servers:
        return
    for pool in ctx.pools:
        for proxy in pool.proxies:
            for srv in proxy.servers:
                if srv.port is None or not srv.known:
                    continue
                found = _server_line_problem(ctx, proxy, srv)
                if found is not None:
                    detail, remedy = found
                    yield Hit(
                        pool.path,
                        srv.line,
                        {
                            "server": f"{srv.name} {srv.address}",
                            "detail": detail,
                            "remedy": remedy,
                        },
                    )


def _server_line_problem(ctx: Context, proxy: Proxy, srv: Server) -> tuple[str, str] | None:
    """(what is wrong, the fix) of one server line against the llama-servers behind it."""
    behind = pool_backend_servers(ctx, srv)
    for cfg in behind:
        if cfg.is_unknown("--ssl-cert-file") or cfg.is_unknown("--ssl-key-file"):
            continue
        tls = serves_tls(cfg)
        if tls and not srv.ssl and proxy.mode == "http":
            return (
                f"connects with plain http, but the llama-server behind it ({cfg.path}) serves "
                "TLS (--ssl-cert-file): every health check and request fails and the server "
                "stays DOWN",
                f"Add `ssl verify required ca-file <the CA that signed its certificate> "
                f"verifyhost <the name in its certificate>` to server {srv.name} (the llama_pool "
                "role writes them for a backend with TLS).",
            )
        if srv.ssl and not tls:
            return (
                f"connects with TLS (ssl), but the llama-server behind it ({cfg.path}) serves "
                "plain http (no --ssl-cert-file/--ssl-key-file): every health check and request "
                "fails and the server stays DOWN",
                f"Remove ssl (and verify, ca-file, verifyhost) from server {srv.name}, or give "
                "the llama-server a certificate (llama_server_tls).",
            )
    if behind:
        return None
    # a llama-server of that host on another port: HAProxy connects where nothing listens
    hosts = [
        cfg
        for cfg in ctx.all_servers
        if _checked_port(cfg) and _is_host(cfg, srv) and cfg.published is None
    ]
    if not hosts:
        return None
    ports = sorted({p for cfg in hosts for _, p in _addresses(cfg)})
    listed = ", ".join(str(p) for p in ports)
    return (
        f"connects to port {srv.port}, but the llama-server of that host ({hosts[0].path}) "
        f"listens on port {listed}: every health check and request fails and the server "
        "stays DOWN",
        f"Write server {srv.name} with port {ports[0]} ({srv.host}:{ports[0]}), or move the "
        "llama-server to the port of the server line.",
    )


def llama_backends(ctx: Context, pool: HAProxyConfig) -> list[Proxy]:
    """The backends (and listen sections) of a pool that hold llama-servers: those with a server
    line that reaches a checked llama-server; every one with servers when no llama-server is
    checked with the configuration (it was given to a llama-server checker)."""
    with_servers = [p for p in pool.proxies if p.has_servers and p.servers]
    if not ctx.all_servers:
        return with_servers
    return [p for p in with_servers if any(pool_backend_servers(ctx, srv) for srv in p.servers)]


_TIMEOUT_EFFECT = {
    "server": "HAProxy waits that long for the first byte of the answer, which comes only after "
    "the whole prompt is evaluated, and for each pause of a streamed answer: a longer wait "
    "ends in 504 Gateway Timeout while llama-server keeps evaluating a prompt no one reads",
    "client": "HAProxy closes the client's side after that long without activity, and its "
    "manual asks for the same value as timeout server: the client waits as long as the server "
    "evaluates the prompt",
}


@rule("HP002")
def pool_timeout_too_short(ctx: Context) -> Iterator[Hit]:
    if not ctx.pools:
        return  # (the HAProxy reader is imported only for a run that read a pool)
    from llamafleet.readers.haproxy import format_ms

    for pool in ctx.pools:
        backends = llama_backends(ctx, pool)
        frontends = [f for f in pool.frontends if any(b in backends for b in pool.backends_of(f))]
        seen: set[int] = set()
        checks = [("server", b) for b in backends] + [("client", f) for f in frontends]
        for which, proxy in checks:
            t = proxy.timeout(which)
            if t is None or t.line in seen or int(t.value) >= MIN_POOL_TIMEOUT_MS:
                continue
            seen.add(t.line)
            where = "defaults" if t.section == "defaults" else f"{proxy.kind} {t.section}"
            yield Hit(
                pool.path,
                t.line,
                {
                    "which": which,
                    "value": format_ms(int(t.value)),
                    "where": where,
                    "effect": _TIMEOUT_EFFECT[which],
                },
            )


@rule("HP003")
def pool_balance_not_affine(ctx: Context) -> Iterator[Hit]:
    if not ctx.pools:
        return  # (the HAProxy reader is imported only for a run that read a pool)
    from llamafleet.readers.haproxy import NOT_AFFINE

    for pool in ctx.pools:
        for b in llama_backends(ctx, pool):
            if b.sticky is not None or sum(not s.disabled for s in b.servers) < 2:
                continue
            if b.balance is None:
                algo, line, how = "roundrobin", b.line, " (no balance line: HAProxy's default)"
            else:
                algo, line, how = b.balance.value, b.balance.line, ""
                if b.balance.section == "defaults":
                    how = " (from defaults)"
            if algo.split("(")[0].split()[0].lower() not in NOT_AFFINE:
                continue
            yield Hit(
                pool.path,
                line,
                {"backend": f"{b.kind} {b.name}", "balance": f"balance {algo}{how}"},
            )

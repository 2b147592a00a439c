"""Rules across a client and the server it points at (XC001-XC003)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from llamafleet import planner
from llamafleet.argv import ServerConfig, parse_argv_list
from llamafleet.facts import Facts
from llamafleet.gguf_meta import ModelFacts, model_from_dict
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.rules import Context, Hit, rule
from llamafleet.rules.client import _where
from llamafleet.rules.server import context_size, is_loopback, slots
from llamafleet.settings import Client, truthy

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def server_address(cfg: ServerConfig) -> tuple[str, int]:
    host = cfg.value("--host") or DEFAULT_HOST
    port = cfg.int_value("--port") or DEFAULT_PORT
    return host, port


def _matches(url_host: str, url_port: int, cfg: ServerConfig) -> bool:
    host, port = server_address(cfg)
    if url_port != port:
        return False
    if host in ("0.0.0.0", "::", "[::]"):
        return True  # listens everywhere: any address of the host reaches it
    if is_loopback(host) and is_loopback(url_host):
        return True
    return url_host.strip("[]").lower() == host.strip("[]").lower()


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


@dataclass
class ClientURL:
    scheme: str  # "http" or "https" (lower case)
    host: str  # without brackets, lower case
    port: int  # the URL's port, else 443 for https and 80 for http
    file: str
    line: int
    value: str


def client_url(c: Client) -> ClientURL | None:
    """The client's ANTHROPIC_BASE_URL split up, or None when it has none, it goes to
    Anthropic's API, or it is not an http(s) URL with a valid port."""
    v = c.base_url()
    if v is None or not isinstance(v.value, str) or not c.is_third_party():
        return None
    parts = urlsplit(v.value.strip())
    if parts.scheme not in ("http", "https"):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    file = v.file.path if v.file else "<environment>"
    return ClientURL(parts.scheme, parts.hostname or "", port, file, v.line, v.value)


def _client_url(c: Client) -> tuple[str, int, str, int, str] | None:
    u = client_url(c)
    return None if u is None else (u.host, u.port, u.file, u.line, u.value)


@rule("XC001")
def client_server_mismatch(ctx: Context) -> Iterator[Hit]:
    servers = ctx.all_servers
    if not servers:
        return
    for c in ctx.clients:
        url = client_url(c)
        if url is None:
            continue
        host, port, file, line, base = url.host, url.port, url.file, url.line, url.value
        reached = [s for s in servers if _matches(host, port, s)]
        if any(("https" if serves_tls(s) else "http") == url.scheme for s in reached):
            continue
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
            yield Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})
            continue
        h, _ = server_address(servers[0])
        if h in ("0.0.0.0", "::"):
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
        yield Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})


def server_keys(
    cfg: ServerConfig, referenced: ReferencedFiles | None = None
) -> tuple[bool, list[str] | None]:
    """(requires a key?, every key it accepts if all can be read). llama-server accepts each
    comma-separated key of ``--api-key`` (or ``LLAMA_API_KEY``) and each non-empty line of an
    ``--api-key-file`` (per-client keys: one a line). The file is opened only as the
    ``referenced`` policy allows (default: never); when it cannot be read the keys are unknown."""
    inline = cfg.value("--api-key") or (cfg.env.get("LLAMA_API_KEY", ("", 0))[0] or None)
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
    servers = ctx.all_servers
    for c in ctx.clients:
        url = _client_url(c)
        if url is None:
            continue
        host, port, file, line, _ = url
        for s in servers:
            if not _matches(host, port, s):
                continue
            required, keys = server_keys(s, ctx.referenced)
            if not required:
                continue
            sent = c.tokens()
            name = f"{s.path} ({'{}:{}'.format(*server_address(s))})"
            if not sent and c.setting("apiKeyHelper") is None:
                yield Hit(file, line, {"server": name, "detail": "sends none"})
            elif keys is not None and sent and not any(k in sent for k in keys):
                yield Hit(
                    file,
                    line,
                    {"server": name, "detail": "sends a different key (it will get 401)"},
                )

"""Rules across a client and the server it points at (XC001-XC003)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamafleet.argv import ServerConfig, parse_argv_list
from llamafleet.gguf_meta import ModelFacts
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.rules import Context, Hit, rule
from llamafleet.rules.client import _where
from llamafleet.rules.server import is_any_address, is_loopback
from llamafleet.settings import Client, truthy
from llamafleet.slots import SlotContext, request_context
from llamafleet.values import split_url

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
        if not reached and (any(address_unknown(s) for s in servers) or behind_proxy(ctx, url)):
            continue  # it may reach a server at an address not known, or a proxy in between
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
        yield Hit(file, line, {"base_url": base, "servers": listed, "remedy": remedy})


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


# ----------------------------------------------------------------------------- XC003

#: Claude Code 2.1.197's window for a model it does not know (every llama-server alias).
CLAUDE_CODE_DEFAULT_WINDOW = 200_000
#: Claude Code 2.1.197 raises a smaller CLAUDE_CODE_AUTO_COMPACT_WINDOW to this ...
CLAUDE_CODE_MIN_WINDOW = 100_000
#: ... and caps a larger one at this (values of the autoCompactWindow setting outside the two
#: are ignored).
CLAUDE_CODE_MAX_WINDOW = 1_000_000
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


@dataclass
class CompactWindow:
    """The window Claude Code (2.1.197) compacts at, for a model it does not know."""

    tokens: int  # the window; compaction starts CLAUDE_CODE_COMPACT_MARGIN below it
    how: str  # where it comes from, for messages ("" for Claude Code's default)
    file: str
    line: int
    off: str = ""  # what switches auto-compaction off, when something does


def compact_window(c: Client) -> CompactWindow:
    """Claude Code 2.1.197's compaction window for a client of a model it does not know:
    CLAUDE_CODE_AUTO_COMPACT_WINDOW (parseInt; 0, negative or not a number is ignored; raised to
    100,000 and capped at 1,000,000), else the autoCompactWindow setting (an integer from
    100,000 to 1,000,000, else ignored), else 200,000; never above the model's 200,000."""
    file, line = _where(c, WINDOW_VAR)
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
        n = _js_parse_int(raw)
        if n is not None and n > 0:
            eff = max(CLAUDE_CODE_MIN_WINDOW, min(n, CLAUDE_CODE_MAX_WINDOW))
            how = f"{WINDOW_VAR}={raw}"
            if eff != n:
                how += f", which Claude Code takes as {eff}"
            tokens = min(eff, CLAUDE_CODE_DEFAULT_WINDOW)
            return CompactWindow(tokens, how, file, line, off)
    s = c.setting("autoCompactWindow")
    if (
        s is not None
        and isinstance(s.value, int)
        and not isinstance(s.value, bool)
        and CLAUDE_CODE_MIN_WINDOW <= s.value <= CLAUDE_CODE_MAX_WINDOW
    ):
        where = (s.file.path, s.line) if s.file is not None else (file, line)
        return CompactWindow(
            min(s.value, CLAUDE_CODE_DEFAULT_WINDOW),
            f'"autoCompactWindow": {s.value}',
            *where,
            off=off,
        )
    return CompactWindow(CLAUDE_CODE_DEFAULT_WINDOW, "", file, line, off)


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
            "it does not know and compacts only when the API answers 'prompt is too "
            "long', which llama-server never says"
        )
    return f"compacts within a window of {win.tokens} tokens ({win.how})"


def _window_remedy(win: CompactWindow, slot: int) -> str:
    """XC003's fix for a window that does not fit a slot of ``slot`` tokens."""
    want = window_for_slot(slot)
    if win.off and win.tokens <= slot:
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
    servers = ctx.all_servers
    for c in ctx.clients:
        url = _client_url(c)
        if url is None:
            continue
        host, port, _, _, _ = url
        for s in servers:
            if not _matches(host, port, s):
                continue
            slot = slot_context(s, ctx.facts.model)
            if slot is None:
                continue
            win = compact_window(c)
            # without compaction Claude Code stops a conversation itself short of the model's
            # own window (it asks for /compact): enough when the slot holds that window
            if (CLAUDE_CODE_DEFAULT_WINDOW if win.off else win.tokens) <= slot.tokens:
                continue
            name = f"{s.path} ({'{}:{}'.format(*server_address(s))})"
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

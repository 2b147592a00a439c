"""Rules on Claude Code settings (CC001-CC010)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlunsplit

from llamafleet.rules.base import Context, Hit, rule
from llamafleet.rules.server import is_any_address, is_loopback
from llamafleet.settings import TOKEN_KEYS, Client, SettingsFile, truthy
from llamafleet.slots import slots
from llamafleet.values import Unresolved, is_unresolved, split_url, url_problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Keys that only work inside "env" (prefixes).
ENV_ONLY_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")
ENV_ONLY_KEYS = (
    "API_TIMEOUT_MS",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "MAX_THINKING_TOKENS",
)

#: Types of the settings keys llamafleet reads or writes (Claude Code's settings schema).
SETTINGS_TYPES: dict[str, tuple[type, ...]] = {
    "env": (dict,),
    "includeGitInstructions": (bool,),
    "apiKeyHelper": (str,),
    "model": (str,),
    "permissions": (dict,),
    "hooks": (dict,),
    "cleanupPeriodDays": (int,),
}


def _where(c: Client, key: str, setting: bool = False) -> tuple[str, int]:
    v = c.setting(key) if setting else c.env(key)
    if v is not None and v.file is not None:
        return v.file.path, v.line
    p = c.primary
    if p is None:
        return "<environment>", 0
    url = c.base_url()
    if url is not None and url.file is not None:
        return url.file.path, url.line
    return p.path, 1


def _base(c: Client) -> str:
    v = c.base_url()
    return str(v.value) if v is not None else ""


@rule("CC001")
def attribution_header(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        if not c.is_third_party():
            continue
        v = c.env("CLAUDE_CODE_ATTRIBUTION_HEADER")
        if v is not None and str(v.value).strip().lower() in ("0", "false"):
            continue
        file, line = _where(c, "CLAUDE_CODE_ATTRIBUTION_HEADER")
        yield Hit(file, line, {"base_url": _base(c)})


def git_instructions_on(c: Client) -> bool:
    v = c.env("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS")
    if v is not None and str(v.value).strip() != "":
        return not truthy(v.value)  # the variable wins over the setting
    s = c.setting("includeGitInstructions")
    return not (s is not None and s.value is False)


@rule("CC002")
def git_status(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        if not git_instructions_on(c):
            continue
        file, line = _where(c, "includeGitInstructions", setting=True)
        if c.is_third_party():
            yield Hit(
                file,
                line,
                {
                    "detail": f" sent to {_base(c)}: it changes with every repository change, and "
                    "the server's prompt cache stops there (0.1 % reuse measured)",
                },
                severity="error",
            )
        else:
            yield Hit(
                file, line, {"detail": " (harmless against Anthropic's own API)"}, severity="info"
            )


@rule("CC003")
def env_key_top_level(ctx: Context) -> Iterator[Hit]:
    for sf in ctx.settings:
        if sf.data is None:
            continue
        for key in sf.data:
            if key.startswith(ENV_ONLY_PREFIXES) or key in ENV_ONLY_KEYS:
                detail = ""
                if key == "ANTHROPIC_BASE_URL":
                    detail = (
                        ": Claude Code goes to the public Anthropic API and sends your key there"
                    )
                yield Hit(sf.path, sf.line_of(key), {"key": key, "detail": detail})


def _strip_v1(url: str) -> str:
    parts = split_url(url)
    if parts is None:
        return url
    path = re.sub(r"/v1/?$", "", parts.path)
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def _all_base_urls(ctx: Context) -> Iterator[tuple[SettingsFile, str, int]]:
    for sf in ctx.settings:
        v = sf.env().get("ANTHROPIC_BASE_URL")
        if isinstance(v, str):
            yield sf, v, sf.line_of("env", "ANTHROPIC_BASE_URL")
        if sf.data is not None and isinstance(sf.data.get("ANTHROPIC_BASE_URL"), str):
            yield sf, sf.data["ANTHROPIC_BASE_URL"], sf.line_of("ANTHROPIC_BASE_URL")


@rule("CC004")
def base_url_v1(ctx: Context) -> Iterator[Hit]:
    for sf, url, line in _all_base_urls(ctx):
        if "/v1" not in url:
            continue
        parts = split_url(url)
        if parts is not None and re.search(r"/v1/?$", parts.path):
            yield Hit(sf.path, line, {"base_url": url, "suggested": _strip_v1(url.strip())})


@rule("CC005")
def base_url_without_credentials(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        if not c.is_third_party():
            continue
        if c.tokens():
            continue
        if c.setting("apiKeyHelper") is not None:
            continue
        file, line = _where(c, "ANTHROPIC_BASE_URL")
        yield Hit(file, line, {})


def _nonessential(value: Any) -> str:
    return "1" if value is not None and truthy(value) else "unset/0"


@rule("CC006")
def nonessential_differs(ctx: Context) -> Iterator[Hit]:
    key = "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"
    entries: list[tuple[str, int, str]] = []  # (file, line, value)
    for sf in ctx.settings:
        if sf.data is None:
            continue
        if key in sf.env():
            entries.append((sf.path, sf.line_of("env", key), _nonessential(sf.env()[key])))
    if len(ctx.clients) > 1:
        for c in ctx.clients:
            v = c.env(key)
            if v is None:
                p = c.primary
                if p is not None:
                    entries.append((p.path, 1, "unset/0"))
    values = Counter(v for _, _, v in entries)
    if len(values) < 2:
        return
    common = values.most_common(1)[0][0]
    ref = next(e for e in entries if e[2] == common)
    for file, line, value in entries:
        if value != common:
            yield Hit(file, line, {"value": value, "other": common, "other_file": ref[0]})


@rule("CC007")
def settings_invalid(ctx: Context) -> Iterator[Hit]:
    for sf in ctx.settings:
        if sf.error is not None:
            yield Hit(
                sf.path,
                sf.error_line,
                {
                    "detail": f"not valid JSON at line {sf.error_line}, column {sf.error_col}: "
                    f"{sf.error}",
                    "hint": "Fix the JSON syntax (a trailing comma or a missing quote is the usual "
                    "cause); Claude Code ignores the whole file until then.",
                },
            )
            continue
        assert sf.data is not None
        for key, types in SETTINGS_TYPES.items():
            if key in sf.data and not isinstance(sf.data[key], types):
                want = " or ".join("object" if t is dict else t.__name__ for t in types)
                yield Hit(
                    sf.path,
                    sf.line_of(key),
                    {
                        "detail": f'"{key}" must be {want}, not {type(sf.data[key]).__name__}',
                        "hint": f'Give "{key}" a value of type {want}.',
                    },
                )
        url = sf.env().get("ANTHROPIC_BASE_URL")
        problem = url_problem(url) if isinstance(url, str) and not is_unresolved(url) else None
        if problem is not None:
            yield Hit(
                sf.path,
                sf.line_of("env", "ANTHROPIC_BASE_URL"),
                {
                    "detail": f"ANTHROPIC_BASE_URL {url!r} {problem}: Claude Code cannot send a "
                    "request",
                    "hint": "Give the server's root URL, e.g. http://127.0.0.1:8080 (a literal "
                    "IPv6 address in brackets: http://[::1]:8080).",
                },
            )
        for k, v in sf.env().items():
            if not isinstance(v, str):
                yield Hit(
                    sf.path,
                    sf.line_of("env", k),
                    {
                        "detail": f"env.{k} must be a string, not {type(v).__name__}",
                        "hint": f'Quote the value: "{k}": "{v}".',
                    },
                )


@rule("CC008")
def token_file_readable(ctx: Context) -> Iterator[Hit]:
    for sf in ctx.settings:
        if sf.mode is None or sf.data is None or not sf.mode & 0o077:
            continue
        held = [k for k in TOKEN_KEYS if k in sf.env() or k in sf.data]
        if not held:
            continue
        who = (
            "group and others"
            if sf.mode & 0o070 and sf.mode & 0o007
            else ("its group" if sf.mode & 0o070 else "others")
        )
        yield Hit(
            sf.path,
            sf.line_of("env", held[0]) if held[0] in sf.env() else 1,
            {"key": held[0], "who": who, "mode": f"{sf.mode:04o}", "file": sf.path},
        )


@rule("CC009")
def title_request(ctx: Context) -> Iterator[Hit]:
    servers = ctx.all_servers
    single = [s for s in servers if slots(s)[0] == 1]
    for c in ctx.clients:
        if not c.is_third_party():
            continue
        v = c.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
        if v is not None and truthy(v.value):
            continue
        file, line = _where(c, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
        if single:
            yield Hit(
                file,
                line,
                {
                    "base_url": _base(c),
                    "detail": f" and takes the only slot of {single[0].path} (-np 1): the main "
                    "prompt is re-read on every session start",
                },
                severity="error",
            )
        else:
            yield Hit(
                file,
                line,
                {
                    "base_url": _base(c),
                    "detail": "; on a one-slot server it evicts the main prompt",
                },
            )


@rule("CC010")
def key_over_plain_http(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        v = c.base_url()
        if v is None or not isinstance(v.value, str) or not c.is_third_party():
            continue
        parts = c.url_parts()
        if parts is None:
            continue
        host = parts.hostname or ""
        if parts.scheme != "http" or not host or is_loopback(host) or is_any_address(host):
            # (a connection to 0.0.0.0, :: or [::] reaches this host)
            continue
        sent = [k for k in TOKEN_KEYS if (t := c.env(k)) is not None and str(t.value).strip()]
        if not sent and c.setting("apiKeyHelper") is not None:
            sent = ["the apiKeyHelper's key"]
        if not sent:
            continue
        file, line = _where(c, "ANTHROPIC_BASE_URL")
        https = urlunsplit(("https", parts.netloc, parts.path, parts.query, parts.fragment))
        yield Hit(
            file,
            line,
            {"base_url": v.value.strip(), "host": host, "key": sent[0], "https_url": https},
        )


#: Variables that send Claude Code to a cloud provider's API instead of ANTHROPIC_BASE_URL, with
#: the provider and the variable that holds a gateway in front of it.
CLOUD_PROVIDERS = (
    ("CLAUDE_CODE_USE_BEDROCK", "Amazon Bedrock", "ANTHROPIC_BEDROCK_BASE_URL"),
    ("CLAUDE_CODE_USE_VERTEX", "Google Vertex AI", "ANTHROPIC_VERTEX_BASE_URL"),
    ("CLAUDE_CODE_USE_FOUNDRY", "Microsoft Foundry", "ANTHROPIC_FOUNDRY_BASE_URL"),
)


@rule("CC011")
def cloud_provider_overrides_base_url(ctx: Context) -> Iterator[Hit]:
    for c in ctx.clients:
        if not c.is_third_party():
            continue
        for var, provider, gateway in CLOUD_PROVIDERS:
            v = c.env(var)
            if v is None or isinstance(v.value, Unresolved) or not truthy(v.value):
                continue
            file, line = _where(c, var)
            yield Hit(
                file,
                line,
                {
                    "var": var,
                    "value": str(v.value).strip(),
                    "provider": provider,
                    "base_url": _base(c),
                    "gateway": gateway,
                },
            )


SMALL_FAST = "ANTHROPIC_SMALL_FAST_MODEL"
HAIKU = "ANTHROPIC_DEFAULT_HAIKU_MODEL"


@rule("CC012")
def small_fast_model_deprecated(ctx: Context) -> Iterator[Hit]:
    for sf in ctx.settings:
        env = sf.env()
        if SMALL_FAST not in env:
            continue
        value = env[SMALL_FAST]
        detail = ""
        if HAIKU in env:
            detail = f" ({HAIKU} is set here too, to {env[HAIKU]!r}: the old name can go)"
        yield Hit(
            sf.path,
            sf.line_of("env", SMALL_FAST),
            {"value": str(value), "detail": detail},
        )

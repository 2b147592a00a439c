"""A llama-server invocation from each kind of source the rules and the roles hand over: a raw
command line (split as the shell splits it), a script (through the readers), an instance mapping
(the roles' ``llama_server_instances`` entries, rendered to argv). Above :mod:`llamafleet.argv`,
which parses arguments, and the readers, which find commands: neither imports this module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llamafleet.argv import (
    ParseError,
    ServerConfig,
    Token,
    apply_env,
    is_server_binary,
    parse_tokens,
)
from llamafleet.flags import table
from llamafleet.readers import read_script
from llamafleet.readers.shell import split_command_line


def parse_argv_string(text: str, path: str = "<argv>") -> ServerConfig:
    """Parse a raw command line; the program name is optional."""
    tokens = split_command_line(text)
    cfg = ServerConfig(path=path, source="argv")
    if tokens and is_server_binary(tokens[0].text):
        cfg.binary = tokens[0].text
        tokens = tokens[1:]
    return parse_tokens(tokens, cfg)


def parse_script_all(text: str, path: str, windows: bool | None = None) -> list[ServerConfig]:
    """Every llama-server invocation of a shell script, batch or PowerShell file."""
    return read_script(text, path, kind=_script_kind(path, windows)).servers


def _script_kind(path: str, windows: bool | None) -> str:
    low = path.lower()
    if windows is None:
        if low.endswith(".ps1"):
            return "powershell"
        return "cmd" if low.endswith((".cmd", ".bat")) else "shell"
    if windows:
        return "powershell" if low.endswith(".ps1") else "cmd"
    return "shell"


def parse_script(text: str, path: str, windows: bool | None = None) -> ServerConfig:
    """The first llama-server invocation of a shell script, batch or PowerShell file."""
    servers = parse_script_all(text, path, windows)
    if not servers:
        raise ParseError("no llama-server command found (looked for llama-server or server)", 1)
    return servers[0]


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
        extra = [t_.text for t_ in split_command_line(extra)]
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

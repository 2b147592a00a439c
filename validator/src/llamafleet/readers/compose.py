"""Docker Compose files (``compose.yaml``, ``docker-compose.yml``): llama-server services.

A service runs llama-server when its image is a llama.cpp server image (``ghcr.io/ggml-org/
llama.cpp:server``, ``:server-cuda``, ...; the image's entrypoint is llama-server and ``command``
holds its arguments), when its ``entrypoint`` or ``command`` names llama-server, or when it runs a
shell script that does (``["sh", "-c", "llama-server ..."]``). ``command`` and ``entrypoint`` may be
a string (split as Compose splits it) or a list (one argument per item). ``environment`` (a list of
``NAME=value`` or a mapping) gives ``LLAMA_ARG_*`` variables to llama-server and ``ANTHROPIC_*``
variables to a Claude Code service; ``ports`` say where the host reaches the service. Compose's
``${VAR}`` interpolation from a ``.env`` file the validator does not read is unknown (a
``${VAR:-default}`` takes its default); ``$$`` is a ``$``.
"""

from __future__ import annotations

import re

from llamafleet.argv import Token
from llamafleet.readers.common import (
    ClientEnv,
    Collector,
    EnvValue,
    Listener,
    ReadResult,
    basename,
    image_build,
    image_kind,
    is_client_key,
    parse_port,
    runs_server_args,
)
from llamafleet.safeyaml import YList, YMap

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_INTERP = re.compile(
    r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


def interpolate(value: str) -> tuple[str, bool]:
    """Compose's interpolation without its ``.env``: (text, whether a part is unknown)."""
    unknown = False

    def sub(m: re.Match[str]) -> str:
        nonlocal unknown
        if m.group(0) == "$$":
            return "$"
        op, default = m.group(2), m.group(3)
        if op in (":-", "-"):
            return default or ""
        unknown = True
        return m.group(0)

    if "$" not in value:
        return value, False
    return _INTERP.sub(sub, value), unknown


def compose_services(data: Any) -> dict[Any, Any] | None:
    """The services of a Compose file: its ``services:`` mapping, or for a fragment (a README's
    service entries published without their ``services:`` key) the document itself, when every
    value is a mapping and one of them is a service with an ``image`` (and a command, entrypoint,
    environment or ports). None for anything else."""
    if not isinstance(data, dict):
        return None
    services = data.get("services")
    if isinstance(services, dict):
        return services
    if not data or "services" in data or not all(isinstance(v, dict) for v in data.values()):
        return None
    keys = ("command", "entrypoint", "environment", "ports")
    if any(isinstance(v.get("image"), str) and any(k in v for k in keys) for v in data.values()):
        return data
    return None


def is_compose(data: Any) -> bool:
    return compose_services(data) is not None


class _Lines:
    """Finds the line of each argument of a multi-line string in the file's text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def find(self, word: str, start: int) -> int:
        probe = word.strip().strip("\"'")[:40]
        if not probe:
            return start
        for k in range(max(start, 1), min(len(self.lines), start + 200) + 1):
            if probe in self.lines[k - 1]:
                return k
        return start


def _words(value: Any, line: int, lines: _Lines) -> list[Token] | None:
    """A ``command``/``entrypoint`` as arguments (None when absent or of another type)."""
    if isinstance(value, str):
        from llamafleet.readers.shell import split_command_line

        text, _ = interpolate(value)
        try:
            toks = split_command_line(text)
        except ValueError:
            return None
        cur = line
        for t in toks:
            t.line = lines.find(t.text, cur)
            cur = t.line
        return toks
    if isinstance(value, list):
        out: list[Token] = []
        item_lines = value.lines if isinstance(value, YList) else [line] * len(value)
        for item, ln in zip(value, item_lines, strict=False):
            if item is None or isinstance(item, (dict, list)):
                continue
            text, unknown = interpolate(_scalar(item))
            out.append(Token(text, ln, unknown))
        return out
    return None


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _environment(value: Any, line: int) -> dict[str, EnvValue]:
    out: dict[str, EnvValue] = {}
    if isinstance(value, dict):
        lines = value.lines if isinstance(value, YMap) else {}
        for k, v in value.items():
            ln = lines.get(k, line)
            if v is None:  # taken from the host's environment
                out[str(k)] = EnvValue(f"${k}", ln, True)
                continue
            text, unknown = interpolate(_scalar(v))
            out[str(k)] = EnvValue(text, ln, unknown)
    elif isinstance(value, list):
        item_lines = value.lines if isinstance(value, YList) else [line] * len(value)
        for item, ln in zip(value, item_lines, strict=False):
            if not isinstance(item, str):
                continue
            k, eq, v = item.partition("=")
            if not eq:
                out[k] = EnvValue(f"${k}", ln, True)
                continue
            text, unknown = interpolate(v)
            out[k.strip()] = EnvValue(text, ln, unknown)
    return out


def _ports(value: Any) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    if not isinstance(value, list):
        return out
    for item in value:
        if isinstance(item, dict):
            target, published = item.get("target"), item.get("published")
            host = str(item.get("host_ip") or "")
            if target is None or published is None:
                continue
            try:
                out.append((host, int(str(published).split("-")[0]), int(target)))
            except ValueError:
                continue
            continue
        text, unknown = interpolate(_scalar(item))
        if unknown:
            continue
        pub = parse_port(text)
        if pub is not None:
            out.append(pub)
    return out


def read_compose(data: Any, text: str, path: str) -> ReadResult:
    c = Collector(path, "compose", text)
    lines = _Lines(text)
    services = compose_services(data)
    if services is None:
        return c.finish()
    svc_lines = services.lines if isinstance(services, YMap) else {}
    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        line = svc_lines.get(name, 1)
        _service(c, str(name), svc, line, lines)
    return c.finish()


def _service(c: Collector, name: str, svc: dict[str, Any], line: int, lines: _Lines) -> None:
    keys = svc.lines if isinstance(svc, YMap) else {}
    image_text, _ = interpolate(_scalar(svc.get("image") or ""))
    kind = image_kind(image_text) if image_text else "other"
    env = _environment(svc.get("environment"), keys.get("environment", line))
    published = _ports(svc.get("ports"))
    host_network = str(svc.get("network_mode") or "") == "host"
    names = [name]
    for key in ("container_name", "hostname"):
        if isinstance(svc.get(key), str):
            names.append(svc[key])
    nets = svc.get("networks")
    if isinstance(nets, dict):
        for net in nets.values():
            if isinstance(net, dict) and isinstance(net.get("aliases"), list):
                names += [str(a) for a in net["aliases"]]
    # Claude Code in a container: its environment
    client = {k: v for k, v in env.items() if is_client_key(k)}
    if client:
        c.result.clients.append(ClientEnv(name=f"{c.path} (service {name})", values=client))
    entry = _words(svc.get("entrypoint"), keys.get("entrypoint", line), lines)
    cmd = _words(svc.get("command"), keys.get("command", line), lines) or []
    image_line = keys.get("image", line)
    if entry:
        argv = [*entry, *cmd]
    elif entry == [] and "entrypoint" in svc:
        # `entrypoint: ''` (or []) clears the image's entrypoint: the command runs by itself
        argv = list(cmd)
    elif kind == "server":
        argv = [Token("llama-server", image_line), *cmd]
    elif kind == "full" and cmd and cmd[0].text in ("--server", "-s"):
        argv = [Token("llama-server", cmd[0].line), *cmd[1:]]
    elif kind == "other" and runs_server_args(image_text, cmd):
        argv = [Token("llama-server", image_line), *cmd]
    elif not cmd and any(k.startswith("LLAMA_ARG_") for k in env):
        # configured through LLAMA_ARG_* only: the image runs llama-server by itself
        argv = [Token("llama-server", image_line)]
    else:
        argv = list(cmd)
    before = len(c.result.servers)
    if argv:
        c.nested_shell = _nested(c, env)
        base = basename(argv[0].text)
        if c._is_server(argv[0], argv):
            c.server(argv, env)
        elif base in ("sh", "bash", "dash", "ash", "zsh"):
            c._shell_c(argv)
        elif base in ("litellm", "ccr"):
            c._listener(base, argv)
    for cfg in c.result.servers[before:]:
        cfg.source = "compose"
        cfg.published = None if host_network else published
        cfg.names = tuple(names)
        cfg.build = image_build(image_text) or c.build
        if svc.get("env_file"):
            cfg.opaque = cfg.env_opaque = True
        if kind in ("server", "full") and cfg.get("--host") is None:
            from llamafleet.argv import apply_env

            # the image sets LLAMA_ARG_HOST=0.0.0.0 (.devops/*.Dockerfile)
            apply_env(cfg, {"LLAMA_ARG_HOST": ("0.0.0.0", image_line)})
    if len(c.result.servers) == before:
        # not llama-server: whatever it is listens where its ports say (a proxy, maybe)
        what = f"service {name}" + (f" ({image_text})" if image_text else "")
        for host, hport, cport in published:
            c.result.listeners.append(Listener(host or "0.0.0.0", hport, what, line))
            c.result.listeners.append(Listener(name, cport, what, line))
        if host_network or not published:
            expose = svc.get("expose")
            for p in expose if isinstance(expose, list) else []:
                if str(p).split("/")[0].isdigit():
                    c.result.listeners.append(Listener(name, int(str(p).split("/")[0]), what, line))


def _nested(c: Collector, env: dict[str, EnvValue]) -> Any:
    """Reads ``sh -c SCRIPT`` of a service, with the service's environment exported."""

    def run(script: str, line: int) -> None:
        from llamafleet.readers.shell import ShellReader, Var

        reader = ShellReader(c)
        for k, v in env.items():
            reader.st.vars[k] = Var(pieces=[(v.value, v.line)], unknown=v.unknown, exported=True)
        reader.nested(script, line)

    return run

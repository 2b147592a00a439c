"""What every reader finds in a file, and how one command is looked at.

A reader (shell, Windows batch, PowerShell, systemd unit, Docker Compose) turns its file into
commands of :class:`~llamafleet.argv.Token`; :meth:`Collector.command` decides what each one is:

* llama-server itself, also behind wrappers (``exec``, ``nohup``, ``sudo -u llama``, ``env
  VAR=x``, ``nice -n 5``, ``taskset -c 0-7``, ``numactl ...``, ``timeout 1h``, ...);
* a shell running a script (``sh -c '...'``, ``bash -c "..."``, ``tmux new -d '...'``): the
  script is read in turn;
* a container (``docker run``/``podman run [options] IMAGE [args...]``) of a llama.cpp server
  image: its arguments are llama-server's, its ``-p`` ports and ``-e`` variables are kept;
* a proxy that listens for Claude Code in the server's place (LiteLLM, claude-code-router, an SSH
  forward, socat): a :class:`Listener`;
* Claude Code's environment (``ANTHROPIC_*``/``CLAUDE_CODE_*`` variables given to any command).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from llamafleet.argv import ServerConfig, Token, apply_env, is_server_binary, parse_tokens
from llamafleet.lazyre import lazy

#: Environment variables of Claude Code (the client) besides the ANTHROPIC_*/CLAUDE_CODE_* ones.
CLIENT_ENV_KEYS = frozenset(
    {
        "API_TIMEOUT_MS",
        "DISABLE_TELEMETRY",
        "DISABLE_AUTOUPDATER",
        "DISABLE_COMPACT",
        "DISABLE_AUTO_COMPACT",
        "DISABLE_PROMPT_CACHING",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
        "MAX_THINKING_TOKENS",
        "BASH_DEFAULT_TIMEOUT_MS",
        "NODE_EXTRA_CA_CERTS",
    }
)
CLIENT_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_")


def is_client_key(name: str) -> bool:
    return name.startswith(CLIENT_ENV_PREFIXES) or name in CLIENT_ENV_KEYS


#: Options that make llama-server print something and exit instead of serving.
NOT_SERVING = frozenset(
    {
        "--version",
        "-h",
        "--help",
        "--usage",
        "--list-devices",
        "--completion-bash",
        "-cl",
        "--cache-list",
        "--license",
    }
)


# (plain classes, not dataclasses: each dataclass costs every `llamafleet check` run ~0.2 ms)


class EnvValue:
    __slots__ = ("line", "unknown", "value")

    def __init__(self, value: str, line: int, unknown: bool = False) -> None:
        self.value = value
        self.line = line
        self.unknown = unknown

    def __repr__(self) -> str:
        return f"EnvValue({self.value!r}, {self.line}{', unknown' if self.unknown else ''})"


class ClientEnv:
    """Claude Code's environment as a file sets it (exported variables, a Compose service's
    ``environment``): checked as the ``env`` block of a settings file."""

    __slots__ = ("name", "values")

    def __init__(self, name: str, values: dict[str, EnvValue] | None = None) -> None:
        self.name = name  # e.g. the file, or "compose.yaml (service claude-code)"
        self.values: dict[str, EnvValue] = values if values is not None else {}


class Listener:
    """Something other than llama-server that listens on a port of this host (a proxy)."""

    __slots__ = ("host", "line", "port", "what")

    def __init__(self, host: str, port: int, what: str, line: int) -> None:
        self.host = host
        self.port = port
        self.what = what
        self.line = line

    def __repr__(self) -> str:
        return f"Listener({self.host!r}, {self.port}, {self.what!r}, line {self.line})"


class ReadResult:
    __slots__ = ("clients", "listeners", "servers", "units")

    def __init__(self) -> None:
        self.servers: list[ServerConfig] = []
        self.clients: list[ClientEnv] = []
        self.listeners: list[Listener] = []
        #: systemd units written by the file (a here-document), parsed as units
        self.units: list[object] = []

    @property
    def empty(self) -> bool:
        return not (self.servers or self.clients or self.listeners or self.units)


# ----------------------------------------------------------------------------- build numbers

_BUILD = lazy(
    r"(?:releases/download/|llama-|server-|full-|light-|cuda-|vulkan-|rocm-|musa-|intel-|"
    r"checkout\s+|switch\s+|--branch\s+|tags/|[=@:/\s])b(\d{4,5})(?![\w])"
)


_BUILD_HINT = lazy(r"b\d{4}")


def build_in_text(text: str) -> int | None:
    """The llama.cpp build a file names (``llama-b8200-bin-...``, ``.../download/b8200/``, an
    image tag ``server-cuda-b8200``, ``git checkout b8200``), when it names exactly one."""
    if not _BUILD_HINT.search(text):
        return None
    found = {int(m.group(1)) for m in _BUILD.finditer(text)}
    return found.pop() if len(found) == 1 else None


# ----------------------------------------------------------------------------- images


@cache
def _image_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    return (
        re.compile(r"(?:^|/)(?:llama[._-]?cpp[._-]?server|llama[._-]server)(?:$|[:@])", re.I),
        re.compile(r"(?:^|/)llama[._-]?cpp(?:[._-][a-z0-9]+)*$", re.I),
        re.compile(r"(?:^|-)b(\d{4,5})(?:$|-)"),
    )


def image_kind(image: str) -> str:
    """``server`` (its entrypoint is llama-server), ``full`` (``tools.sh``: ``--server`` runs
    llama-server), ``light`` (llama-cli) or ``other``."""
    server_repo, llama_repo, _ = _image_patterns()
    ref = image.strip().split("@", 1)[0]
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    if server_repo.search(repo + ":"):
        return "server"
    if llama_repo.search(repo):
        t = tag.lower()
        if t.startswith("server"):
            return "server"
        if t.startswith("full"):
            return "full"
        if t.startswith("light"):
            return "light"
    return "other"


#: Images with "llama" in their name that are not llama-server.
_NOT_LLAMA_SERVER = ("ollama", "llama-swap", "llamafile", "llama-cpp-python", "llama_cpp_python")
#: Options that say the arguments are llama-server's (a model to serve).
_MODEL_OPTIONS = frozenset({"-m", "--model", "-hf", "--hf-repo", "-mu", "--model-url"})


def runs_server_args(image: str, args: list[Token]) -> bool:
    """Whether an image that is not a known llama.cpp image takes llama-server's arguments: its
    name says llama (a locally built llama.cpp image) and the arguments are options that give a
    model (``localhost/llama-vulkan -m /models/q.gguf ...``)."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[0].lower()
    if "llama" not in name or any(n in name for n in _NOT_LLAMA_SERVER):
        return False
    return (
        bool(args) and args[0].text.startswith("-") and any(a.text in _MODEL_OPTIONS for a in args)
    )


def image_build(image: str) -> int | None:
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    m = _image_patterns()[2].search(tag)
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------- wrappers

#: Programs that run the command after their own options, with the options that take a value.
WRAPPERS: dict[str, frozenset[str]] = {
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-t", "--class", "--classdata"}),
    "taskset": frozenset(),
    "numactl": frozenset({"-m", "-N", "-C", "-i", "-p", "-P", "-l"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "setsid": frozenset(),
    "chrt": frozenset(),
    "unbuffer": frozenset(),
    "caffeinate": frozenset({"-t", "-w"}),
    "prime-run": frozenset(),
    "optirun": frozenset(),
    "systemd-run": frozenset({"-p", "--property", "-u", "--unit", "-M", "--machine", "-E"}),
    "flock": frozenset({"-w", "-E"}),
    "xvfb-run": frozenset(),
    "watchexec": frozenset(),
    "runuser": frozenset({"-u", "-g", "-G"}),
}
#: Wrappers whose first bare word is their own argument (a mask, a priority, a duration, a lock).
_WRAPPER_ARG = frozenset({"taskset", "chrt", "timeout", "flock", "nice"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_ASSIGN = lazy(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_DOCKER = frozenset({"docker", "podman", "nerdctl", "docker.exe", "podman.exe"})
_PROXIES = {"litellm": 4000, "ccr": 3456, "claude-code-router": 3456, "claude-code-proxy": 8082}


def basename(word: str) -> str:
    return word.rpartition("/")[2].rpartition("\\")[2].lower()


Nested = Callable[[str, int], None]

#: the shell reader (:class:`llamafleet.readers.shell.ShellReader`), which reads a unit's or a
#: container's ``sh -c`` for a collector that has no shell of its own. The readers package sets it
#: when it is imported (always before this module is used): the shell reader builds on this
#: module, so this module does not import it.
SHELL_READER: Callable[[Collector], object] | None = None


class Collector:
    """Gathers what one file holds; :meth:`command` looks at one command."""

    def __init__(self, path: str, source: str, text: str = "") -> None:
        self.path = path
        self.source = source
        self.result = ReadResult()
        self._text = text
        self._build: int | bool | None = False  # False: not looked for yet
        self.client = ClientEnv(name=path)
        #: reads a script given as text to a shell (``sh -c``) starting at a line; set by the
        #: reader that knows the script's language
        self.nested_shell: Nested | None = None
        self._depth = 0

    @property
    def build(self) -> int | None:
        """The llama.cpp build the file names (see :func:`build_in_text`)."""
        if self._build is False:
            self._build = build_in_text(self._text) if self._text else None
        return self._build if isinstance(self._build, int) else None

    # -- the client's environment
    def client_var(self, name: str, value: str, line: int, unknown: bool = False) -> None:
        self.client.values[name] = EnvValue(value, line, unknown)

    def finish(self) -> ReadResult:
        if self.client.values and self.client not in self.result.clients:
            self.result.clients.append(self.client)
        return self.result

    # -- one command
    def command(
        self,
        words: list[Token],
        env: dict[str, EnvValue] | None = None,
        *,
        previous_server: ServerConfig | None = None,
    ) -> ServerConfig | None:
        """Look at one command (its words expanded, prefix assignments removed into ``env``).
        Returns the llama-server it starts, if it starts one."""
        env = dict(env or {})
        for name, val in env.items():
            if is_client_key(name):
                self.client_var(name, val.value, val.line, val.unknown)
        words = self._unwrap(words, env)
        if not words:
            return None
        first = words[0]
        base = basename(first.text)
        if base in _SHELLS or base.removesuffix(".exe") in _SHELLS:
            self._shell_c(words)
            return None
        if base in ("tmux", "screen"):
            self._multiplexer(words)
            return None
        if base in _DOCKER:
            return self._docker(words, env)
        if base in _PROXIES or base in {"ssh", "socat"}:
            self._listener(base, words)
            return None
        if self._is_server(first, words):
            return self.server(words, env)
        return None

    def _is_server(self, first: Token, words: list[Token]) -> bool:
        if is_server_binary(first.text):
            return True
        if first.unknown:
            # an unresolved program ($LLAMA_SERVER, ${LLAMA_BIN}): llama-server when its name
            # says so and a llama-server option follows
            name = re.sub(r"[^A-Za-z_]", "", first.text).upper()
            if "LLAMA" in name or "SERVER" in name:
                return any(w.text in ("-m", "--model", "-hf", "--hf-repo") for w in words[1:])
        return False

    def server(
        self,
        words: list[Token],
        env: dict[str, EnvValue] | None = None,
        *,
        source: str | None = None,
    ) -> ServerConfig | None:
        """Record the llama-server of ``words`` (the program first)."""
        if not NOT_SERVING.isdisjoint([w.text for w in words]):
            return None  # prints its version/help and exits
        cfg = ServerConfig(
            path=self.path,
            line=words[0].line,
            binary=words[0].text,
            source=source or self.source,
            build=self.build,
        )
        parse_tokens(words[1:], cfg)
        if env:
            server_env = {k: (v.value, v.line) for k, v in env.items() if k.startswith("LLAMA_")}
            apply_env(cfg, server_env, {k for k, v in env.items() if v.unknown})
        self.result.servers.append(cfg)
        return cfg

    def _unwrap(self, words: list[Token], env: dict[str, EnvValue]) -> list[Token]:
        for _ in range(8):
            if not words:
                return words
            base = basename(words[0].text)
            opts = WRAPPERS.get(base)
            if opts is None or words[0].unknown:
                return words
            i = 1
            took_arg = False
            while i < len(words):
                w = words[i].text
                m = _ASSIGN.match(w) if base in ("env", "sudo", "doas", "systemd-run") else None
                if m:
                    env[m.group(1)] = EnvValue(m.group(2), words[i].line, words[i].unknown)
                    if is_client_key(m.group(1)):
                        self.client_var(m.group(1), m.group(2), words[i].line, words[i].unknown)
                    i += 1
                    continue
                if w == "--":
                    i += 1
                    break
                if w.startswith("-") and len(w) > 1:
                    i += 2 if (w in opts and "=" not in w) else 1
                    continue
                if base in _WRAPPER_ARG and not took_arg and not is_server_binary(w):
                    took_arg = True
                    i += 1
                    continue
                break
            words = words[i:]
        return words

    # -- sh -c SCRIPT, tmux new 'SCRIPT'
    def _shell_c(self, words: list[Token]) -> None:
        for i, w in enumerate(words[1:], 1):
            if w.text.startswith("-") and "c" in w.text[1:] and not w.text.startswith("--"):
                if i + 1 < len(words):
                    self._nested(words[i + 1])
                return
            if not w.text.startswith("-"):
                return  # runs a script file

    def _multiplexer(self, words: list[Token]) -> None:
        # the command is the last argument(s); a single one is a shell command line
        tail = words[-1]
        if len(words) >= 2 and not tail.text.startswith("-"):
            self._nested(tail)

    def _nested(self, tok: Token) -> None:
        if tok.unknown or self._depth > 4:
            return
        if self.nested_shell is None:  # a unit's or a container's `sh -c`
            if SHELL_READER is None:  # pragma: no cover - set by the readers package
                raise RuntimeError("llamafleet.readers did not set its shell reader")
            SHELL_READER(self)  # it reads nested scripts from now on
        assert self.nested_shell is not None
        self._depth += 1
        try:
            self.nested_shell(tok.text, tok.line)
        finally:
            self._depth -= 1

    # -- proxies
    def _listener(self, base: str, words: list[Token]) -> None:
        texts = [w.text for w in words]
        line = words[0].line
        if base == "ssh":
            for i, w in enumerate(texts):
                spec = texts[i + 1] if w == "-L" and i + 1 < len(texts) else None
                if spec is None and w.startswith("-L") and len(w) > 2:
                    spec = w[2:]
                if spec:
                    parts = spec.split(":")
                    if len(parts) >= 3 and parts[-3].isdigit():
                        host = parts[-4] if len(parts) >= 4 else "127.0.0.1"
                        self.result.listeners.append(
                            Listener(host, int(parts[-3]), "an SSH forward", line)
                        )
            return
        if base == "socat":
            for w in texts[1:]:
                m = re.match(r"(?i)tcp6?-listen:(\d+)", w)
                if m:
                    self.result.listeners.append(
                        Listener("0.0.0.0", int(m.group(1)), "socat", line)
                    )
            return
        port = _PROXIES[base]
        host = "0.0.0.0"
        for i, w in enumerate(texts):
            if w == "--port" and i + 1 < len(texts) and texts[i + 1].isdigit():
                port = int(texts[i + 1])
            elif w.startswith("--port=") and w[7:].isdigit():
                port = int(w[7:])
            elif w == "--host" and i + 1 < len(texts):
                host = texts[i + 1]
        self.result.listeners.append(Listener(host, port, base, line))

    # -- docker run
    def _docker(self, words: list[Token], env: dict[str, EnvValue]) -> ServerConfig | None:
        i = 1
        while i < len(words) and words[i].text.startswith("-"):  # docker's own options
            i += 2 if words[i].text in ("-H", "--host", "--context", "-c", "--config") else 1
        if i < len(words) and words[i].text == "container":
            i += 1
        if i >= len(words) or words[i].text not in ("run", "create"):
            return None
        return self.container(words[i + 1 :], env, line=words[0].line)

    def container(
        self, args: list[Token], env: dict[str, EnvValue], *, line: int
    ) -> ServerConfig | None:
        """``docker run`` options, IMAGE and the command's arguments."""
        run = parse_run_options(args)
        if run.image is None:
            return None
        for name, val in run.env.items():
            if is_client_key(name):
                self.client_var(name, val.value, val.line, val.unknown)
        kind = image_kind(run.image.text)
        cmd = run.command
        argv: list[Token] | None = None
        if run.entrypoint is not None:
            argv = [*run.entrypoint, *cmd]
        elif kind == "server":
            argv = [Token("llama-server", run.image.line), *cmd]
        elif kind == "full" and cmd and cmd[0].text in ("--server", "-s"):
            argv = [Token("llama-server", cmd[0].line), *cmd[1:]]
        elif kind == "other" and runs_server_args(run.image.text, cmd):
            argv = [Token("llama-server", run.image.line), *cmd]
        else:
            argv = list(cmd)
        if not argv:
            return None
        base = basename(argv[0].text)
        if base in _SHELLS:
            self._shell_c(argv)
            return None
        if not is_server_binary(argv[0].text):
            return None
        cfg = self.server(argv, {**env, **run.env}, source="docker")
        if cfg is None:
            return None
        cfg.published = None if run.host_network else run.published
        cfg.names = tuple(run.names)
        cfg.build = image_build(run.image.text) or self.build
        if run.env_file or run.unknown_env:
            cfg.opaque = cfg.env_opaque = True
        if kind in ("server", "full") and cfg.get("--host") is None:
            # the image sets LLAMA_ARG_HOST=0.0.0.0 (.devops/*.Dockerfile): it listens on every
            # address of the container
            apply_env(cfg, {"LLAMA_ARG_HOST": ("0.0.0.0", run.image.line)})
        return cfg


class RunOptions:
    """What ``docker run`` options say."""

    __slots__ = (
        "command",
        "entrypoint",
        "env",
        "env_file",
        "host_network",
        "image",
        "names",
        "published",
        "unknown_env",
    )

    def __init__(self) -> None:
        self.image: Token | None = None
        self.command: list[Token] = []
        self.entrypoint: list[Token] | None = None
        self.env: dict[str, EnvValue] = {}
        self.env_file = False
        self.unknown_env = False
        self.published: list[tuple[str, int, int]] = []
        self.host_network = False
        self.names: list[str] = []


#: ``docker run``/``podman run`` options that take a value (the rest are switches).
RUN_VALUE_OPTS = frozenset(
    [
        "-a",
        "--attach",
        "--add-host",
        "--annotation",
        "--blkio-weight",
        "--blkio-weight-device",
        "--cap-add",
        "--cap-drop",
        "--cgroup-parent",
        "--cgroupns",
        "--cidfile",
        "--cpu-period",
        "--cpu-quota",
        "--cpu-rt-period",
        "--cpu-rt-runtime",
        "-c",
        "--cpu-shares",
        "--cpus",
        "--cpuset-cpus",
        "--cpuset-mems",
        "--device",
        "--device-cgroup-rule",
        "--device-read-bps",
        "--device-read-iops",
        "--device-write-bps",
        "--device-write-iops",
        "--dns",
        "--dns-option",
        "--dns-opt",
        "--dns-search",
        "--domainname",
        "--entrypoint",
        "-e",
        "--env",
        "--env-file",
        "--expose",
        "--gpus",
        "--group-add",
        "--health-cmd",
        "--health-interval",
        "--health-retries",
        "--health-start-period",
        "--health-start-interval",
        "--health-timeout",
        "-h",
        "--hostname",
        "--ip",
        "--ip6",
        "--ipc",
        "--isolation",
        "--kernel-memory",
        "-l",
        "--label",
        "--label-file",
        "--link",
        "--link-local-ip",
        "--log-driver",
        "--log-opt",
        "--mac-address",
        "-m",
        "--memory",
        "--memory-reservation",
        "--memory-swap",
        "--memory-swappiness",
        "--mount",
        "--name",
        "--network",
        "--net",
        "--network-alias",
        "--net-alias",
        "--oom-score-adj",
        "--pid",
        "--pids-limit",
        "--platform",
        "-p",
        "--publish",
        "--pull",
        "--restart",
        "--runtime",
        "--security-opt",
        "--shm-size",
        "--stop-signal",
        "--stop-timeout",
        "--storage-opt",
        "--sysctl",
        "--tmpfs",
        "--ulimit",
        "-u",
        "--user",
        "--userns",
        "--uts",
        "-v",
        "--volume",
        "--volume-driver",
        "--volumes-from",
        "-w",
        "--workdir",
        "--pod",
        "--secret",
        "--hooks-dir",
        "--authfile",
        "--cgroup-conf",
        "--cgroups",
        "--decryption-key",
        "--gidmap",
        "--uidmap",
        "--init-path",
        "--passwd-entry",
        "--preserve-fds",
        "--requires",
        "--sdnotify",
        "--seccomp-policy",
        "--subgidname",
        "--subuidname",
        "--timeout",
        "--tz",
        "--umask",
        "--variant",
        "--chrootdirs",
        "--image-volume",
        "--arch",
        "--os",
        "--cpu-count",
        "--cpu-percent",
        "--io-maxbandwidth",
        "--io-maxiops",
        "--device-read",
        "--group-entry",
        "--health-log-destination",
        "--health-max-log-count",
        "--health-max-log-size",
        "--health-on-failure",
        "--label-file",
        "--log-level",
        "--pidfile",
        "--personality",
        "--rdt-class",
        "--retry",
        "--retry-delay",
        "--shm-size-systemd",
        "--stop-timeout",
        "--systemd",
        "--userns",
    ]
)
_RUN_VALUE_SHORT = frozenset("acehlmpuvw")


def parse_run_options(args: list[Token]) -> RunOptions:
    out = RunOptions()
    i = 0
    n = len(args)

    def value(k: int, w: str, name: str) -> tuple[str | None, Token | None, int]:
        if "=" in w and w.startswith("--"):
            return w.partition("=")[2], args[k], k + 1
        if name != w:  # -p8080:8080 / -eX=1
            return w[len(name) :], args[k], k + 1
        if k + 1 < n:
            return args[k + 1].text, args[k + 1], k + 2
        return None, None, k + 1

    while i < n:
        tok = args[i]
        w = tok.text
        if w == "--":
            i += 1
            break
        if not w.startswith("-") or w == "-":
            break
        if w.startswith("--"):
            name = w.partition("=")[0]
            if name not in RUN_VALUE_OPTS:
                i += 1
                continue
        else:
            # short options, combined (-it, -dp 8080:8080, -e VAR=1, -eVAR=1)
            j = 1
            name = ""
            while j < len(w):
                if w[j] in _RUN_VALUE_SHORT:
                    name = w[: j + 1] if j == 1 else "-" + w[j]
                    if j > 1:
                        w = "-" + w[j:]
                    break
                j += 1
            if not name:
                i += 1
                continue
        val, vtok, i = value(i, w, name)
        if val is None or vtok is None:
            continue
        _run_option(out, name, val, vtok)
    if i < n:
        out.image = args[i]
        out.command = args[i + 1 :]
    return out


def _run_option(out: RunOptions, name: str, val: str, tok: Token) -> None:
    if name in ("-e", "--env"):
        k, eq, v = val.partition("=")
        if eq:
            out.env[k] = EnvValue(v, tok.line, tok.unknown)
        else:
            out.env[k] = EnvValue(f"${k}", tok.line, True)  # from the caller's environment
            out.unknown_env = True
    elif name == "--env-file":
        out.env_file = True
    elif name in ("-p", "--publish"):
        pub = parse_port(val)
        if pub is not None:
            out.published.append(pub)
    elif name in ("--network", "--net"):
        out.host_network = val == "host"
    elif name == "--entrypoint":
        out.entrypoint = [Token(val, tok.line, tok.unknown)]
    elif name in ("--name", "-h", "--hostname", "--network-alias", "--net-alias"):
        out.names.append(val)


def parse_port(spec: str) -> tuple[str, int, int] | None:
    """``[IP:]HOST_PORT:CONTAINER_PORT[/proto]`` as (host address, host port, container port);
    None for a container port alone (a random host port), a range or an unknown value."""
    s = spec.strip().split("/", 1)[0]
    if s.startswith("["):  # [::1]:8080:8080
        host, _, rest = s[1:].partition("]")
        parts = [host, *rest.lstrip(":").split(":")]
    else:
        parts = s.split(":")
    if len(parts) == 2:
        parts = ["", *parts]
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])

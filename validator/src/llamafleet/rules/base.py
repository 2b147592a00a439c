"""What a rule module needs: the :class:`Context` a predicate reads, the :class:`Hit` it yields
and the :func:`rule` decorator that registers it by catalogue id (``REGISTRY``). The rule modules
import this module, never the package that loads them (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from llamafleet.argv import ServerConfig
from llamafleet.facts import Facts
from llamafleet.readers.common import Listener
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.settings import Client, SettingsFile
from llamafleet.units import Unit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from llamafleet.readers.haproxy import HAProxyConfig

# Plain classes, not dataclasses: every `llamafleet check` creates them (and the classes) anew.


class Hit:
    """What a predicate found: where, the values for the catalogue's message, and a severity
    that overrides the catalogue's default."""

    __slots__ = ("file", "line", "severity", "vars")

    def __init__(
        self,
        file: str,
        line: int,
        vars: dict[str, Any] | None = None,
        severity: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.vars: dict[str, Any] = vars if vars is not None else {}
        self.severity = severity

    def __repr__(self) -> str:
        return f"Hit({self.file!r}, {self.line}, {self.vars!r}, severity={self.severity!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hit) and (self.file, self.line, self.vars, self.severity) == (
            other.file,
            other.line,
            other.vars,
            other.severity,
        )

    __hash__ = None  # type: ignore[assignment]


class Context:
    """Everything the predicates look at: the inputs, the clients they form and the facts."""

    __slots__ = (
        "all_servers",
        "clients",
        "facts",
        "listeners",
        "pools",
        "referenced",
        "servers",
        "settings",
        "units",
    )

    def __init__(
        self,
        *,
        servers: list[ServerConfig] | None = None,
        units: list[Unit] | None = None,
        settings: list[SettingsFile] | None = None,
        clients: list[Client] | None = None,
        facts: Facts | None = None,
        referenced: ReferencedFiles = NEVER,
        listeners: list[Listener] | None = None,
        pools: list[HAProxyConfig] | None = None,
    ) -> None:
        self.servers: list[ServerConfig] = servers if servers is not None else []
        self.units: list[Unit] = units if units is not None else []
        self.settings: list[SettingsFile] = settings if settings is not None else []
        self.clients: list[Client] = clients if clients is not None else []
        self.facts: Facts = facts if facts is not None else Facts()
        #: which files named inside the inputs a rule may open (default: none)
        self.referenced = referenced
        #: programs other than llama-server that listen where a client may point (proxies)
        self.listeners: list[Listener] = listeners if listeners is not None else []
        #: HAProxy configurations: pools that spread clients over llama-server hosts
        self.pools: list[HAProxyConfig] = pools if pools is not None else []
        #: every llama-server command checked: scripts, argv, mappings and units' ExecStart
        #: (of the servers and units given here)
        self.all_servers: list[ServerConfig] = self.servers + [
            u.server for u in self.units if u.server is not None
        ]


Predicate = Callable[[Context], Iterator[Hit]]
REGISTRY: dict[str, Predicate] = {}


def rule(rule_id: str) -> Callable[[Predicate], Predicate]:
    def deco(fn: Predicate) -> Predicate:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        REGISTRY[rule_id] = fn
        return fn

    return deco

"""Rule predicates, registered by catalogue id. Each predicate reads a :class:`Context` and
yields :class:`Hit` objects; the engine turns them into findings with the catalogue's text."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llamafleet.argv import ServerConfig
from llamafleet.facts import Facts
from llamafleet.readers.common import Listener
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.settings import Client, SettingsFile
from llamafleet.units import Unit


@dataclass
class Hit:
    file: str
    line: int
    vars: dict[str, Any] = field(default_factory=dict)
    severity: str | None = None  # overrides the catalogue's default


@dataclass
class Context:
    servers: list[ServerConfig] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    settings: list[SettingsFile] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    #: which files named inside the inputs a rule may open (default: none)
    referenced: ReferencedFiles = NEVER
    #: programs other than llama-server that listen where a client may point (proxies)
    listeners: list[Listener] = field(default_factory=list)
    _all: tuple[int, int, list[ServerConfig]] | None = field(default=None, repr=False)

    @property
    def all_servers(self) -> list[ServerConfig]:
        """Every llama-server command checked: scripts, argv, mappings and units' ExecStart."""
        cached = self._all
        if cached is not None and cached[0] == len(self.servers) and cached[1] == len(self.units):
            return cached[2]
        found = self.servers + [u.server for u in self.units if u.server is not None]
        self._all = (len(self.servers), len(self.units), found)
        return found


Predicate = Callable[[Context], Iterator[Hit]]
REGISTRY: dict[str, Predicate] = {}


def rule(rule_id: str) -> Callable[[Predicate], Predicate]:
    def deco(fn: Predicate) -> Predicate:
        if rule_id in REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        REGISTRY[rule_id] = fn
        return fn

    return deco


def load_all() -> dict[str, Predicate]:
    from llamafleet.rules import build, client, cross, server, unit  # noqa: F401

    return REGISTRY

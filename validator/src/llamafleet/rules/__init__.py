"""Rule predicates, registered by catalogue id. Each predicate reads a :class:`Context` and
yields :class:`Hit` objects; the engine turns them into findings with the catalogue's text. The
types and the registry are in :mod:`llamafleet.rules.base`; :func:`load_all` imports the rule
modules, which register themselves there."""

from __future__ import annotations

from llamafleet.rules.base import REGISTRY, Context, Hit, Predicate, rule

__all__ = ["REGISTRY", "Context", "Hit", "Predicate", "load_all", "rule"]


def load_all() -> dict[str, Predicate]:
    from llamafleet.rules import build, client, cross, pool, server, start, unit  # noqa: F401

    return REGISTRY

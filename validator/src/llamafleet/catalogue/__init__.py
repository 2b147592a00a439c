"""The pitfall catalogue: rules as data (``rules.yaml``), validated by ``schema.json``.

``llamafleet check`` reads the catalogue from ``compiled.json``, generated from ``rules.yaml`` by
``tools/gen_catalogue.py`` (validated against the schema there; a test keeps the two equal), so a
check neither parses YAML nor validates a schema. When ``rules.yaml`` was edited and not compiled
again (its checksum differs from the one recorded), the YAML itself is read and validated.
"""

from __future__ import annotations

import json
import os
import zlib
from functools import cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


class RuleInfo:
    """A rule's catalogue entry as the engine uses it."""

    __slots__ = (
        "fix",
        "id",
        "message",
        "name",
        "needs",
        "references",
        "scope",
        "severity",
        "templates",
        "why",
    )

    def __init__(
        self,
        *,
        id: str,
        name: str,
        severity: str,
        scope: str,
        message: str,
        why: str,
        fix: str,
        references: tuple[str, ...],
        needs: tuple[str, ...] = (),
    ) -> None:
        self.id = id
        self.name = name
        self.severity = severity
        self.scope = scope
        self.message = message
        self.why = why
        self.fix = fix
        self.references = references
        self.needs = needs
        #: (message, fix): the texts a finding fills in
        self.templates = (message, fix)

    def __repr__(self) -> str:
        return f"RuleInfo({self.id} {self.name})"


def _text(name: str) -> str:
    with open(os.path.join(_HERE, name), encoding="utf-8") as fh:
        return fh.read()


def source_checksum() -> tuple[int, int]:
    """(size, CRC-32) of ``rules.yaml`` as it is on disk."""
    with open(os.path.join(_HERE, "rules.yaml"), "rb") as fh:
        data = fh.read()
    return len(data), zlib.crc32(data)


def raw_catalogue() -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(_text("rules.yaml"))
    return data


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_text("schema.json"))
    return data


def compiled() -> dict[str, Any] | None:
    """The compiled catalogue when it is current (compiled from ``rules.yaml`` as it is now)."""
    try:
        doc = json.loads(_text("compiled.json"))
    except (OSError, ValueError):  # pragma: no cover - shipped with the package
        return None
    if (doc.get("source_size"), doc.get("source_crc32")) != source_checksum():
        return None
    data: dict[str, Any] = doc["catalogue"]
    return data


def _validated() -> dict[str, Any]:
    import jsonschema

    data = raw_catalogue()
    jsonschema.validate(data, schema())
    return data


@cache
def catalogue() -> dict[str, RuleInfo]:
    """All rules by id, in catalogue order. Raises if the catalogue breaks its schema."""
    data = compiled() or _validated()
    out: dict[str, RuleInfo] = {}
    for r in data["rules"]:
        if r["id"] in out:
            raise ValueError(f"duplicate rule id {r['id']} in the catalogue")
        out[r["id"]] = RuleInfo(
            id=r["id"],
            name=r["name"],
            severity=r["severity"],
            scope=r["scope"],
            message=r["message"],
            why=" ".join(r["why"].split()),
            fix=r["fix"],
            references=tuple(r["references"]),
            needs=tuple(r.get("needs", ())),
        )
    return out


def docs_page(rule_id: str) -> str | None:
    """The rule's documentation page (Markdown), or None."""
    path = os.path.join(_HERE, "docs", f"{rule_id}.md")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read()

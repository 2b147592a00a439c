"""The pitfall catalogue: rules as data (``rules.yaml``), validated by ``schema.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml


@dataclass(frozen=True)
class RuleInfo:
    id: str
    name: str
    severity: str
    scope: str
    message: str
    why: str
    fix: str
    references: tuple[str, ...]
    needs: tuple[str, ...] = ()


def _text(name: str) -> str:
    return resources.files("llamafleet.catalogue").joinpath(name).read_text(encoding="utf-8")


def raw_catalogue() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(_text("rules.yaml"))
    return data


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_text("schema.json"))
    return data


@cache
def catalogue() -> dict[str, RuleInfo]:
    """All rules by id, in catalogue order. Raises if the catalogue breaks its schema."""
    data = raw_catalogue()
    jsonschema.validate(data, schema())
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
    res = resources.files("llamafleet.catalogue").joinpath("docs").joinpath(f"{rule_id}.md")
    if not res.is_file():
        return None
    return res.read_text(encoding="utf-8")

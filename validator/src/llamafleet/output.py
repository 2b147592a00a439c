"""Report formats: human, JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
import re
from collections import Counter
from urllib.parse import quote

from llamafleet import __version__
from llamafleet.catalogue import catalogue
from llamafleet.engine import Result

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
DOCS_URI = "https://llamafleet.readthedocs.io/en/latest/rules/{id}.html"


def summary(result: Result) -> dict[str, int]:
    counts = Counter(f.severity for f in result.findings)
    return {
        "error": counts["error"],
        "warning": counts["warning"],
        "info": counts["info"],
        "files": result.files,
        "suppressed": result.suppressed,
    }


def human(result: Result) -> str:
    lines = []
    for f in result.findings:
        where = f"{f.file}:{f.line}" if f.line else f.file
        lines.append(f"{where}: {f.id} [{f.severity}] {f.message}")
        lines.append(f"    fix: {f.fix}")
    s = summary(result)
    tail = (
        f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info in "
        f"{s['files']} file(s)"
    )
    if s["suppressed"]:
        tail += f", {s['suppressed']} suppressed"
    if result.findings:
        lines.append("")
        lines.append("Run `llamafleet explain ID` for the full story of a rule.")
    lines.append(tail)
    return "\n".join(lines) + "\n"


def as_json(result: Result) -> str:
    doc = {"findings": [f.as_dict() for f in result.findings], "summary": summary(result)}
    return json.dumps(doc, indent=2) + "\n"


def _uri(path: str) -> str:
    p = path.replace("\\", "/")
    if p.startswith("/"):
        return "file://" + quote(p)
    return quote(p.removeprefix("./"))


def _rule_help(rule_id: str, fix: str) -> str:
    """A rule's fix without the finding's values: `{x}` shows as `<x>`; a fix that is only a
    placeholder (it depends on the finding) points at the docs."""
    generic = re.sub(r"\{(\w+)\}", r"<\1>", fix)
    if re.fullmatch(r"<\w+>", generic):
        return f"Depends on the finding (see its message); `llamafleet explain {rule_id}`."
    return generic


def sarif(result: Result) -> str:
    cat = catalogue()
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for i, info in enumerate(cat.values()):
        index[info.id] = i
        rules.append(
            {
                "id": info.id,
                "name": info.name,
                "shortDescription": {
                    "text": info.message.split(":")[0].replace("{", "").replace("}", "")
                },
                "fullDescription": {"text": info.why},
                "help": {
                    "text": _rule_help(info.id, info.fix),
                    "markdown": _rule_help(info.id, info.fix),
                },
                "helpUri": DOCS_URI.format(id=info.id),
                "defaultConfiguration": {"level": SARIF_LEVEL[info.severity]},
                "properties": {"scope": info.scope, "tags": [info.scope]},
            }
        )
    results: list[dict[str, Any]] = []
    for f in result.findings:
        loc: dict[str, Any] = {"artifactLocation": {"uri": _uri(f.file)}}
        if f.line > 0:
            loc["region"] = {"startLine": f.line}
        results.append(
            {
                "ruleId": f.id,
                "ruleIndex": index[f.id],
                "level": SARIF_LEVEL[f.severity],
                "message": {"text": f"{f.message}. Fix: {f.fix}"},
                "locations": [{"physicalLocation": loc}],
            }
        )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "llamafleet",
                        "version": __version__,
                        "informationUri": "https://llamafleet.readthedocs.io/",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


FORMATTERS = {"human": human, "json": as_json, "sarif": sarif}

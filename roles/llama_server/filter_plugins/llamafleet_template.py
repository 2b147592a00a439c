"""Filter: the chat template an instance is to be served with, fixed for Claude Code's late system
message when the model's own template rejects it (llamafleet.chat_template: the template is
rendered with a Claude-Code-shaped conversation in a bounded child process; the fix rewrites only
the guard that raises, and is verified by rendering again)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def llamafleet_chat_template_fix(
    metadata: Any, instance: str = "?", enabled: bool = True
) -> dict[str, Any]:
    """From a model's GGUF metadata (``kv`` of the gguf_models role): ``{"action": "none"|"fixed"|
    "unfixable", "kind": the original's classification, "detail", "change", "key", "text",
    "sha256"}``. ``text`` is the template to write beside the unit (only when ``fixed``)."""
    try:
        from llamafleet.chat_template import (
            RAISES,
            TemplateFixError,
            classify,
            fix_late_system,
            jinja2_available,
            model_template,
        )
    except ImportError as exc:  # pragma: no cover - reported when the filter is used
        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller (pip install ./validator): "
            + str(exc)
        ) from exc
    none = {
        "action": "none",
        "kind": "",
        "detail": "",
        "change": "",
        "key": "",
        "text": "",
        "sha256": "",
    }
    if not isinstance(metadata, Mapping) or not enabled or not jinja2_available():
        return none
    found = model_template(metadata)
    if found is None:
        return none
    template, key = found
    before = classify(template, isolate=True)
    out = dict(none, kind=before.kind, detail=before.detail, key=key)
    if before.kind != RAISES:
        return out
    try:
        fixed, change = fix_late_system(template, isolate=True)
    except TemplateFixError as exc:
        return dict(out, action="unfixable", change=f"instance {instance}: {exc}")
    return dict(
        out,
        action="fixed",
        change=change,
        text=fixed,
        sha256=hashlib.sha256(fixed.encode("utf-8")).hexdigest(),
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamafleet_chat_template_fix": llamafleet_chat_template_fix}

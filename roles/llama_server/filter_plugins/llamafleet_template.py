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
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(exc)
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


def llamafleet_claude_code_requests(model: Any, max_tokens: int = 8) -> list[dict[str, Any]]:
    """Two requests shaped like Claude Code's (recorded from the real CLI: system blocks, 24 tools,
    thinking, the user's prompt and the late system message after it), differing only in the
    prompt, for the instance alias ``model``: the smoke request sends the first, the rollout's
    Claude Code gate both."""
    try:
        from llamafleet.claude_request import gate_bodies
        from llamafleet.errors import InputError
    except ImportError as exc:  # pragma: no cover - reported when the filter is used
        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(exc)
        ) from exc
    try:
        return gate_bodies(str(model), int(max_tokens))
    except InputError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def llamafleet_slot_context(argv: Any, model_meta: Any = None) -> int:
    """The tokens one request may use on an instance (llama.cpp's per-slot context) from its argv
    and the gguf_models description of its model; 0 when unknown. Clients size their compaction
    window from it (the claude_code role: ``llama_server_endpoints[...].ctx_per_slot``)."""
    try:
        from llamafleet.rules.cross import slot_context_of_argv
    except ImportError as exc:  # pragma: no cover - reported when the filter is used
        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(exc)
        ) from exc
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(f"llamafleet_slot_context: expected an argv list, got {argv!r}")
    meta = model_meta if isinstance(model_meta, Mapping) and model_meta else None
    return slot_context_of_argv([str(a) for a in argv], meta) or 0


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_chat_template_fix": llamafleet_chat_template_fix,
            "llamafleet_claude_code_requests": llamafleet_claude_code_requests,
            "llamafleet_slot_context": llamafleet_slot_context,
        }

"""Filters for the rollout's prompt-cache gate: how many tokens two requests share, counted on the
token lists the server itself produced (its chat template, its tokenizer), so the share of the
prefix read from cache is measured against what the server could reuse."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible.errors import AnsibleFilterError


def _ids(tokens: Any, what: str) -> list[int]:
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise AnsibleFilterError(f"llamafleet_common_prefix: {what} must be a list of token ids")
    out = []
    for t in tokens:
        # /tokenize answers ids, or {id, piece} objects with with_pieces
        tid = t.get("id") if isinstance(t, dict) else t
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise AnsibleFilterError(f"llamafleet_common_prefix: {what} holds {t!r}, not a token id")
        out.append(tid)
    return out


def llamafleet_common_prefix(first: Any, second: Any) -> int:
    """The number of leading tokens two tokenized prompts have in common."""
    a, b = _ids(first, "the first"), _ids(second, "the second")
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"llamafleet_common_prefix": llamafleet_common_prefix}

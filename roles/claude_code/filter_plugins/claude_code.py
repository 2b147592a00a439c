"""Filters of the claude_code role: Claude Code's compaction window for the llama-server instance a
user is pointed at (CLAUDE_CODE_AUTO_COMPACT_WINDOW), from that instance's per-slot context; and
what `llamafleet_check` gets to check a settings file with the unit of its server.

The arithmetic is the validator's (llamafleet.rules.cross, rule XC003): the slot as llama.cpp and
the planner count it, Claude Code 2.1.197's window limits, and the window the rule accepts, so the
role never writes a window `llamafleet check` then reports."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from llamafleet.rules.cross import (
        CLAUDE_CODE_COMPACT_MARGIN,
        CLAUDE_CODE_MAX_WINDOW,
        CLAUDE_CODE_MIN_WINDOW,
        DEFAULT_OUTPUT_RESERVE,
        min_slot,
        slot_context,
        window_for_slot,
    )
    from llamafleet.units import parse_unit
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

OFF_WORDS = ("off", "no", "false", "none", "0", "")


def _need_llamafleet() -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            "the llamafleet Python package is not installed on the controller "
            "(pip install ./validator): " + str(_IMPORT_ERROR)
        )


def _count(value: Any) -> int | None:
    """A whole number of tokens from an int or a string of digits; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def compact_window(ctx_per_slot: Any, setting: Any = "auto", reserve: Any = None) -> dict[str, Any]:
    """The window to write for one settings file.

    ``setting`` is claude_code_auto_compact_window: "auto" (the slot ``ctx_per_slot`` less
    ``reserve``, default 32000, and at least the 100,000 Claude Code takes anyway), a number of
    tokens, or 0 / "off" / false (YAML's bare ``off``): not set. Returns ``{"window": N,
    "problem": "", "unknown": false}`` (N = 0: not set), or a ``problem`` (why, and the fix) when
    the window cannot be set; ``unknown`` is true when that is only because the slot is unknown
    (``ctx_per_slot`` 0, None or "")."""
    _need_llamafleet()
    out: dict[str, Any] = {"window": 0, "problem": "", "unknown": False}
    if setting is None or setting is False or str(setting).strip().lower() in OFF_WORDS:
        return out
    earliest = CLAUDE_CODE_MIN_WINDOW - CLAUDE_CODE_COMPACT_MARGIN
    if str(setting).strip().lower() != "auto":
        n = _count(setting)
        if n is None or n < 0:
            out["problem"] = (
                f"claude_code_auto_compact_window: {setting!r} is not auto, off (0) or a number "
                "of tokens."
            )
        elif not CLAUDE_CODE_MIN_WINDOW <= n <= CLAUDE_CODE_MAX_WINDOW:
            out["problem"] = (
                f"claude_code_auto_compact_window: {n} is outside {CLAUDE_CODE_MIN_WINDOW} to "
                f"{CLAUDE_CODE_MAX_WINDOW}, the windows Claude Code 2.1.197 takes (it raises a "
                f"smaller one to {CLAUDE_CODE_MIN_WINDOW}, compacting {CLAUDE_CODE_COMPACT_MARGIN} "
                f"tokens below it, never before {earliest}, and caps a larger one). Use auto, a "
                "number in that range, or off."
            )
        else:
            out["window"] = n
        return out
    keep = _count(DEFAULT_OUTPUT_RESERVE if reserve is None else reserve)
    if keep is None or keep < 0:
        out["problem"] = (
            f"claude_code_output_reserve: {reserve!r} is not a number of tokens (0 or more)."
        )
        return out
    slot = _count(ctx_per_slot)
    if not slot:
        out["unknown"] = True
        out["problem"] = (
            "its context per slot is unknown (no ctx_per_slot in the server's "
            "llama_server_endpoints fact, and no readable unit with --ctx-size). Run the "
            "llama_server role on the server in the same play (site.yml does), or set "
            "claude_code_auto_compact_window to a number of tokens, or to off."
        )
        return out
    window = window_for_slot(slot, keep)
    if window is None:
        out["problem"] = (
            f"it gives each request {slot} tokens, which leaves a compaction window of "
            f"{slot - keep} after the {keep} tokens kept for the answer "
            "(claude_code_output_reserve); Claude Code 2.1.197 takes no window below "
            f"{CLAUDE_CODE_MIN_WINDOW} tokens and compacts {CLAUDE_CODE_COMPACT_MARGIN} below "
            f"it (never before {earliest}), so a conversation would outgrow the slot. Give the "
            f"instance at least {min_slot(keep)} tokens per slot (args ctx_size; parallel 1, or "
            "kv_unified so one request may use the whole cache), or lower "
            "claude_code_output_reserve, or set claude_code_auto_compact_window: off (and "
            "/clear sessions before they reach the slot)."
        )
        return out
    out["window"] = window
    return out


def unit_slot_context(text: Any, path: str = "llama-server.service") -> int:
    """Tokens one request may use on the llama-server of a systemd unit's ExecStart (as
    llamafleet counts llama.cpp's n_ctx_seq); 0 when the unit has no ExecStart, does not parse
    or leaves the context to the model (no --ctx-size, or 0)."""
    _need_llamafleet()
    if not isinstance(text, str) or not text.strip():
        return 0
    try:
        unit = parse_unit(text, path)
    except ValueError:  # the unit's or the command line's parse errors: unknown
        return 0
    if unit.server is None:
        return 0
    found = slot_context(unit.server)
    return found.tokens if found is not None else 0


def _b64_text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return None


def _read_back(files: Sequence[Any], name: str) -> tuple[str, str] | None:
    """(path, text) of the settings file read back for the target ``name`` (claude_settings
    read_only results), or None when it does not exist or was not read."""
    for r in files:
        t = r.get("_t") if isinstance(r, Mapping) else None
        if isinstance(t, Mapping) and t.get("name") == name and r.get("exists"):
            text = _b64_text(r.get("content"))
            if text is not None:
                return str(t.get("path") or name), text
    return None


def credential_path(unit: str, name: str = "api-key") -> str:
    """Where systemd hands a service its credential ``name`` (what ``%d/<name>`` stands for)."""
    return f"/run/credentials/{unit}/{name}"


def check_item(
    target: Any,
    files: Any,
    units: Any = None,
    keys: Any = None,
    managed: Any = False,
) -> dict[str, Any]:
    """The llamafleet_check item of one settings file (``target``, an entry of the role's resolved
    list): the settings Claude Code reads (the user's file, and the managed file that wins over
    it; a managed target alone: the managed file), read back as the user (``files``: the results of
    claude_settings read_only), and the unit of the server instance it points at (``units``: the
    slurped units, matched by key_id), all in memory. The unit's API key credential (``%d/api-key``)
    names ``/run/credentials/<unit>/api-key``, and ``files`` of the item maps that path to the
    keys this settings file may hold (its own key, plus the instance key when the user has a key of
    its own, as the server's credential lists them), so that XC002 compares keys. ``settings`` is
    empty when neither file exists yet (check mode on a new host). Carries keys: use with no_log."""
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(
            f"claude_code_check_item: expected a target mapping, got {target!r}"
        )
    name = str(target.get("name"))
    results = list(files or [])
    settings = []
    if managed and str(managed).lower() not in OFF_WORDS:
        found = _read_back(results, "(managed)")
        if found:
            settings.append({"path": found[0], "text": found[1], "scope": "managed"})
    if not target.get("managed"):
        found = _read_back(results, name)
        if found:
            settings.append({"path": found[0], "text": found[1], "scope": "user"})
    key_id = str(target.get("key_id") or "")
    unit = str(target.get("unit") or "")
    item: dict[str, Any] = {"name": name, "settings": settings}
    for r in units or []:
        t = r.get("_t") if isinstance(r, Mapping) else None
        text = _b64_text(r.get("content")) if isinstance(t, Mapping) else None
        if text is None or not isinstance(t, Mapping) or str(t.get("key_id")) != key_id:
            continue
        cred = credential_path(unit)
        item["path"] = f"{target.get('server')}:/etc/systemd/system/{unit}"
        item["text"] = text.replace("%d/api-key", cred)
        keys = keys if isinstance(keys, Mapping) else {}
        if key_id in keys:
            inst_id = "/".join(key_id.split("/")[:2])
            inst_key = keys.get(inst_id, "") if key_id != inst_id else ""
            item["files"] = {cred: f"{keys[key_id]}\n{inst_key}\n"}
        break
    return item


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "claude_code_compact_window": compact_window,
            "claude_code_unit_slot_context": unit_slot_context,
            "claude_code_check_item": check_item,
        }

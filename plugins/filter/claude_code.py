"""Filters of the claude_code role: Claude Code's compaction window for the llama-server instance a
user is pointed at (CLAUDE_CODE_AUTO_COMPACT_WINDOW), from that instance's per-slot context; what
`llamafleet_check` gets to check a settings file with the unit of its server; and, for a team
served from a pool (the llama_pool role: HAProxy in front of several llama-server hosts), which
pool a user goes through, where it is reached, its CA and key, and the smallest slot behind it.

The arithmetic is the validator's (llamafleet.rules.cross, rule XC003): the slot as llama.cpp and
the planner count it, Claude Code 2.1.332's window limits, and the window the rule accepts, so the
role never writes a window `llamafleet check` then reports."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

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
    from llamafleet.rules.server import address_kind
    from llamafleet.units import parse_unit
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

OFF_WORDS = ("off", "no", "false", "none", "0", "")


def _need_llamafleet() -> None:
    require(_IMPORT_ERROR, AnsibleFilterError)


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
                f"{CLAUDE_CODE_MAX_WINDOW}, the windows Claude Code 2.1.332 takes (it raises a "
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
            "(claude_code_output_reserve); Claude Code 2.1.332 takes no window below "
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


# ------------------------------------------------------------------------------ pools

#: the inventory group of the pool hosts (the llama_pool role's llama_pool_pools_group default)
POOLS_GROUP = "llama_pools"
#: HAProxy's configuration on a pool host (the llama_pool role writes it, root-only)
HAPROXY_CFG = "/etc/haproxy/haproxy.cfg"
#: the llama_server role's key directory when a backend's inventory does not set one
DEFAULT_KEY_DIR = "/etc/llamafleet/keys"
_TRUE = ("true", "yes", "on", "1")


def haproxy_kind_supported(_: Any = None) -> bool:
    """The switch that puts the pool's HAProxy configuration into the check of a pool user's
    settings: true when the installed validator reads texts of kind ``haproxy``
    (``llamafleet.preflight.KINDS``). Without it the validator cannot follow the pool's URL to
    its backends (XC001 would report the backends' units as not reached), so a pool user's
    settings are then checked on their own (CC rules: CC010 for plain http, the header, the
    token), without the backends' units."""
    try:
        from llamafleet.preflight import KINDS
    except ImportError:  # pragma: no cover - the check itself reports the missing package
        return False
    return "haproxy" in KINDS


def _hv(hostvars: Any, host: str) -> Mapping[str, Any]:
    try:
        found = hostvars[host]
    except (KeyError, TypeError):
        return {}
    return found if isinstance(found, Mapping) or hasattr(found, "get") else {}


def _var(hv: Any, name: str, defaults: Mapping[str, Any] | None = None) -> Any:
    """A host's variable (``hostvars[host][name]``), else the role default from ``defaults``."""
    try:
        value = hv[name]
    except (KeyError, TypeError):
        value = None
    if value is None and defaults is not None:
        value = defaults.get(name)
    return value


def _need(hv: Any, name: str, defaults: Mapping[str, Any], host: str) -> Any:
    value = _var(hv, name, defaults)
    if value is None:
        raise AnsibleFilterError(
            f"pool {host}: {name} is not set and the llama_pool role's defaults were not found "
            "beside this role; set it in the pool host's inventory"
        )
    return value


def _on(value: Any) -> bool:
    return value is True or str(value).strip().lower() in _TRUE


def _group(groups: Mapping[str, Any], name: str) -> list[str]:
    members = groups.get(name) if hasattr(groups, "get") else None
    return [str(h) for h in members or []]


def pool_of(  # noqa: PLR0917 - a filter: Jinja passes its arguments by position
    user: Any,
    setting: Any,
    server: str,
    instance: str,
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    pool_defaults: Mapping[str, Any] | None = None,
) -> str:
    """The pool host a settings file points at, or "" for the server directly.

    ``setting`` is claude_code_pool, which a user's own ``pool`` entry overrides: ``auto`` (the
    default) is the first host of the group llama_pools whose backends (its
    llama_pool_backends_group) hold ``server`` and that serves ``instance`` (its
    llama_pool_instance), else ""; ``""`` (or none, false, off) is the server directly; anything
    else names the pool host, which must be in the inventory."""
    defaults = pool_defaults or {}
    if isinstance(user, Mapping) and "pool" in user:
        setting = user.get("pool")
    who = f"claude_code_users entry {user.get('name')!r}" if isinstance(user, Mapping) else "?"
    if setting is None or setting is False or str(setting).strip().lower() in OFF_WORDS:
        return ""
    text = str(setting).strip()
    if text.lower() == "auto":
        for pool in _group(groups, POOLS_GROUP):
            hv = _hv(hostvars, pool)
            backends_group = str(_var(hv, "llama_pool_backends_group", defaults) or "")
            pool_instance = str(_var(hv, "llama_pool_instance", defaults) or "")
            if server in _group(groups, backends_group) and instance == pool_instance:
                return pool
        return ""
    if text not in _group(groups, "all"):
        raise AnsibleFilterError(
            f"{who}: pool {text!r} (claude_code_pool or the user's pool) is not an inventory "
            f"host; name a host of the {POOLS_GROUP} group, auto (the pool of the user's "
            "server, if any) or '' (the server directly)"
        )
    return text


def _instance(hv: Any, instance: str) -> Mapping[str, Any]:
    for inst in _var(hv, "llama_server_instances") or []:
        if isinstance(inst, Mapping) and str(inst.get("name", "")) == instance:
            return inst
    return {}


def _url_host(address: str) -> str:
    bare = address.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def pool_target(
    pool: str,
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    pool_defaults: Mapping[str, Any] | None,
    client: str,
) -> dict[str, Any]:
    """Where the users of ``client`` (an inventory host) reach the pool host ``pool``, and what
    is behind it: the fields of the role's resolved target that differ from a direct one.

    The pool's facts (``llama_pool_endpoint``, set by the llama_pool role in the same run) give
    the scheme, port and CA; without them its inventory does (llama_pool_port, llama_pool_tls
    with auto = https unless llama_pool_bind is loopback, the CA file llama_pool_tls_ca_cert or
    llama_pool_tls_dir/ca.crt, read on the pool host). The address: 127.0.0.1 (or the bind
    address) from the pool host itself, the pool host's ansible_host for a wildcard bind, else
    the bind address; a pool bound to loopback is refused from another host. The backends are
    the hosts of its llama_pool_backends_group whose instance llama_pool_instance is enabled, each
    with its unit, the pool key's file and its per-slot context from its llama_server_endpoints
    fact (0: unknown, read from its unit). ``pool_key``: whether the users get the pool key
    (llama_pool_api_key); without it they keep their own key of their server, and the backends
    decide."""
    _need_llamafleet()
    defaults = pool_defaults or {}
    hv = _hv(hostvars, pool)
    fact = _var(hv, "llama_pool_endpoint") or {}
    if not isinstance(fact, Mapping):
        fact = {}
    bind = str(_need(hv, "llama_pool_bind", defaults, pool)).strip()
    kind = address_kind(bind)
    if kind == "socket":
        raise AnsibleFilterError(f"pool {pool}: llama_pool_bind {bind!r} is not an address")
    if fact.get("scheme"):
        scheme = str(fact["scheme"])
    else:
        tls = str(_need(hv, "llama_pool_tls", defaults, pool)).strip().lower()
        scheme = "https" if (kind != "loopback" if tls == "auto" else _on(tls)) else "http"
    port = int(fact.get("port") or _need(hv, "llama_pool_port", defaults, pool))
    if client == pool:
        address = "127.0.0.1" if kind in ("any", "loopback") else bind.strip("[]")
    elif kind == "any":
        address = str(_var(hv, "ansible_host") or pool)
    elif kind == "loopback":
        raise AnsibleFilterError(
            f"pool {pool} listens on {bind} (llama_pool_bind) only, so {client} cannot reach "
            "it: let it listen on an address of the pool host (0.0.0.0), or set the user's "
            "pool (claude_code_pool) to '' to use the server directly"
        )
    else:
        address = bind.strip("[]")
    ca_cert = str(_var(hv, "llama_pool_tls_ca_cert", defaults) or "")
    tls_dir = str(_var(hv, "llama_pool_tls_dir", defaults) or "/etc/llamafleet/pool")
    instance = str(fact.get("instance") or _need(hv, "llama_pool_instance", defaults, pool))
    pool_key = _on(_need(hv, "llama_pool_api_key", defaults, pool))
    key_name = str(_need(hv, "llama_pool_client_key_name", defaults, pool))
    group = str(_need(hv, "llama_pool_backends_group", defaults, pool))
    listed = fact.get("backends")
    names = [str(b) for b in listed] if isinstance(listed, list) and listed else None
    backends = []
    alias = ""
    for name in sorted(names if names is not None else _group(groups, group)):
        bhv = _hv(hostvars, name)
        inst = _instance(bhv, instance)
        endpoint = (_var(bhv, "llama_server_endpoints") or {}).get(instance) or {}
        if not inst and not endpoint:
            raise AnsibleFilterError(
                f"pool {pool}: backend {name} has no instance {instance!r} "
                "(llama_pool_instance) in its llama_server_instances"
            )
        if names is None and inst and not _on(inst.get("enabled", True)):
            continue  # the pool does not list a disabled instance
        alias = alias or str(endpoint.get("alias") or inst.get("alias") or instance)
        key_dir = str(_var(bhv, "llama_server_key_dir") or DEFAULT_KEY_DIR)
        backends.append(
            {
                "name": name,
                "unit": str(endpoint.get("unit") or f"llama-server-{instance}.service"),
                "key_file": f"{key_dir}/{instance}.clients/{key_name.replace('/', '__')}.key",
                "ctx_per_slot": _count(endpoint.get("ctx_per_slot")) or 0,
            }
        )
    if not backends:
        raise AnsibleFilterError(
            f"pool {pool}: no backend serves instance {instance!r} (its "
            f"llama_pool_backends_group {group!r} has no host with it enabled)"
        )
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in pool)
    https = scheme == "https"
    return {
        "pool": pool,
        "pool_key": pool_key,
        "key_name": key_name if pool_key else "",
        "instance": instance,
        "declared": True,
        "address": address,
        "port": port,
        "scheme": scheme,
        "base_url": f"{scheme}://{_url_host(address)}:{port}",
        "ca_pem": str(fact.get("ca_pem") or "") if https else "",
        "ca_file": "",
        "ca_host": pool,
        "ca_src": (ca_cert or f"{tls_dir}/ca.crt") if https else "",
        "ca_path": f"/etc/llamafleet/ca/{safe}-pool.pem" if https else "",
        "model": alias,
        "unit": backends[0]["unit"],
        "ctx_per_slot": 0,
        "backends": backends,
        # each user of the pool gets a key of their own (the preflight sets its key_id)
        **({"key_id": f"pool:{pool}"} if pool_key else {}),
    }


def unit_reads(targets: Any) -> list[dict[str, Any]]:
    """The units to read for the targets: each target's server instance, or every backend of its
    pool; each ``{name, key_id, host, unit, slot_known}`` (name and key_id are the target's)."""
    out: list[dict[str, Any]] = []
    for t in targets or []:
        if not isinstance(t, Mapping):
            continue
        base = {"name": t.get("name"), "key_id": t.get("key_id")}
        if t.get("pool"):
            for b in t.get("backends") or []:
                out.append(
                    {
                        **base,
                        "host": b["name"],
                        "unit": b["unit"],
                        "slot_known": bool(_count(b.get("ctx_per_slot"))),
                    }
                )
        else:
            out.append(
                {
                    **base,
                    "host": t.get("server"),
                    "unit": t.get("unit"),
                    "slot_known": bool(_count(t.get("ctx_per_slot"))),
                }
            )
    return out


def _unit_text(units: Any, name: Any, host: Any) -> str | None:
    """The text of the unit read for target ``name`` on ``host`` (a unit_reads loop's results)."""
    for r in units or []:
        t = r.get("_t") if isinstance(r, Mapping) else None
        if not isinstance(t, Mapping) or t.get("name") != name:
            continue
        if host is not None and t.get("host", t.get("server")) != host:
            continue
        text = _b64_text(r.get("content"))
        if text is not None:
            return text
    return None


def target_slot(target: Any, units: Any = None) -> dict[str, Any]:
    """The per-slot context a target's compaction window is computed from: its instance's
    (``ctx_per_slot`` of the server's fact, else counted from its unit in ``units``, the results
    of the unit_reads loop); for a pool, the smallest among its backends, each from its fact or
    unit, as a conversation may land on any of them. ``{"slot": N, "unknown": [hosts]}``: N = 0
    when no slot is known; ``unknown`` names the backends whose slot could not be learned (their
    host not reached, no fact and no readable unit) when others were."""
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"claude_code_target_slot: expected a target, got {target!r}")
    name = target.get("name")
    if target.get("pool"):
        hosts = [
            (b["name"], b.get("unit"), _count(b.get("ctx_per_slot"))) for b in target["backends"]
        ]
    else:
        hosts = [(target.get("server"), target.get("unit"), _count(target.get("ctx_per_slot")))]
    slots: list[int] = []
    unknown: list[str] = []
    for host, unit, known in hosts:
        slot = known or 0
        if not slot:
            text = _unit_text(units, name, host)
            slot = unit_slot_context(text, str(unit or "llama-server.service")) if text else 0
        if slot:
            slots.append(slot)
        else:
            unknown.append(str(host))
    return {"slot": min(slots) if slots else 0, "unknown": unknown if slots else []}


def _key_read(reads: Any, host: str) -> str:
    for r in reads or []:
        t = r.get("_b") if isinstance(r, Mapping) else None
        if isinstance(t, Mapping) and t.get("name") == host and not r.get("unreachable"):
            text = _b64_text(r.get("content"))
            if text and text.strip():
                return text.strip()
    return ""


def pool_keys(targets: Any, hostvars: Mapping[str, Any], reads: Any = None) -> dict[str, str]:
    """The pool keys of the pool targets, for ``_claude_code_keys``: each backend's client key
    ``llama_pool_client_key_name`` as ``BACKEND/INSTANCE/NAME`` (its llama_server_client_api_keys
    fact when the llama_server role ran in this play, else its key file as read in ``reads``,
    the results of a slurp loop over pool_key_reads), and as the target's key_id the user's own
    key of the pool, derived from the first backend's (in name order) pool key and the user's
    ``pool_client`` name (llamafleet.poolkeys.user_key). A backend not reached or without the key
    is left out. Carries keys: use with no_log."""
    out: dict[str, str] = {}
    for t in targets or []:
        if not isinstance(t, Mapping) or not t.get("pool") or not t.get("pool_key"):
            continue
        instance, name = str(t["instance"]), str(t["key_name"])
        for b in t.get("backends") or []:
            host = str(b["name"])
            exposed = (_var(_hv(hostvars, host), "llama_server_client_api_keys") or {}).get(
                instance
            ) or {}
            key = str(exposed.get(name) or "").strip() or _key_read(reads, host)
            if key:
                out[f"{host}/{instance}/{name}"] = key
                out.setdefault(f"pool-key:{t['pool']}", key)
                if str(t["key_id"]) not in out:
                    out[str(t["key_id"])] = _pool_user_key(key, t)
    return out


def _pool_user_key(pool_key: str, target: Mapping[str, Any]) -> str:
    """The user's own key of the pool (llamafleet.poolkeys: derived from the pool key and the
    user's pool client name, as the llama_pool role derives the digests it accepts)."""
    _need_llamafleet()
    from llamafleet.poolkeys import user_key

    client = str(target.get("pool_client") or "")
    try:
        return user_key(pool_key, client)
    except ValueError as exc:
        raise AnsibleFilterError(f"{target.get('name')}: {exc}") from None


def pool_key_reads(targets: Any, hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The backends whose pool key file must be read (their llama_server_client_api_keys fact
    does not hold it): ``{name, key_file}`` once per backend."""
    out: dict[str, dict[str, Any]] = {}
    for t in targets or []:
        if not isinstance(t, Mapping) or not t.get("pool") or not t.get("pool_key"):
            continue
        for b in t.get("backends") or []:
            exposed = (_var(_hv(hostvars, b["name"]), "llama_server_client_api_keys") or {}).get(
                t["instance"]
            ) or {}
            if not exposed.get(t["key_name"]):
                out.setdefault(
                    f"{b['name']}:{b['key_file']}", {"name": b["name"], "key_file": b["key_file"]}
                )
    return list(out.values())


def _haproxy_text(haproxy: Any, pool: str) -> str | None:
    for r in haproxy or []:
        p = r.get("_p") if isinstance(r, Mapping) else None
        if p == pool or (isinstance(p, Mapping) and p.get("pool") == pool):
            return _b64_text(r.get("content"))
    return None


def _pool_item(
    item: dict[str, Any],
    target: Mapping[str, Any],
    units: Any,
    keys: Mapping[str, Any],
    haproxy: Any,
) -> dict[str, Any]:
    """check_item's part for a pool target: the pool's HAProxy configuration and every backend's
    unit, each as HOST:PATH, with the key each backend's credential holds for this settings file
    (its copy of the pool key; without the pool key, the user's own keys for their own server)."""
    pool = str(target["pool"])
    cfg = _haproxy_text(haproxy, pool)
    if cfg is None or not haproxy_kind_supported():
        return item
    item["path"] = f"{pool}:{HAPROXY_CFG}"
    files: dict[str, str] = {}
    # the key the pool sends the backends in place of the user's, from its map file on the pool
    # host: the pool key as the backends hold it (the first one's, as the llama_pool role writes it)
    # HAProxy's "Bearer %[str(NAME),map(FILE)]", as the validator's reader finds it
    from llamafleet.readers.haproxy import SENT_KEY_MAP

    sent = SENT_KEY_MAP.search(cfg)
    pool_key = str(keys.get(f"pool-key:{pool}") or "")
    if sent and target.get("pool_key") and pool_key:
        where = f"{pool}:{sent[2]}"
        cfg = cfg[: sent.start(2)] + where + cfg[sent.end(2) :]
        files[where] = f"{sent[1]} {pool_key}\n"
    texts = [{"path": item["path"], "text": cfg, "kind": "haproxy"}]
    instance = str(target.get("instance"))
    for b in target.get("backends") or []:
        host, unit = str(b["name"]), str(b["unit"])
        text = _unit_text(units, target.get("name"), host)
        if text is None:
            continue
        # one credential path per backend: the units share their name, not their keys
        cred = f"{host}:{credential_path(unit)}"
        texts.append(
            {
                "path": f"{host}:/etc/systemd/system/{unit}",
                "text": text.replace("%d/api-key", cred),
                "kind": "unit",
            }
        )
        if target.get("pool_key"):
            key = keys.get(f"{host}/{instance}/{target.get('key_name')}")
            if key:
                files[cred] = f"{key}\n"
        elif host == target.get("server"):
            key_id = str(target.get("key_id") or "")
            if key_id in keys:
                inst_id = "/".join(key_id.split("/")[:2])
                inst_key = keys.get(inst_id, "") if key_id != inst_id else ""
                files[cred] = f"{keys[key_id]}\n{inst_key}\n"
    item["texts"] = texts
    if files:
        item["files"] = files
    return item


def check_item(  # noqa: PLR0917 - a filter: Jinja passes its arguments by position
    target: Any,
    files: Any,
    units: Any = None,
    keys: Any = None,
    managed: Any = False,
    haproxy: Any = None,
) -> dict[str, Any]:
    """The llamafleet_check item of one settings file (``target``, an entry of the role's resolved
    list): the settings Claude Code reads (the user's file, and the managed file that wins over
    it; a managed target alone: the managed file), read back as the user (``files``: the results of
    claude_settings read_only), and the unit of the server instance it points at (``units``: the
    units read, matched by the target's name), all in memory. The unit's API key credential
    (``%d/api-key``) names ``/run/credentials/<unit>/api-key``, and ``files`` of the item maps that
    path to the keys this settings file may hold (its own key, plus the instance key when the user
    has a key of its own, as the server's credential lists them), so that XC002 compares keys.

    A pool target (``pool`` set) is checked with the pool's HAProxy configuration (``haproxy``:
    the configurations read on the pool hosts, kind ``haproxy``, as POOL:/etc/haproxy/haproxy.cfg)
    and every backend's unit (BACKEND:/etc/systemd/system/UNIT), each backend's credential under
    its own name BACKEND:/run/credentials/UNIT/api-key; only when the validator reads HAProxy
    configurations (haproxy_kind_supported), else its settings alone.

    ``settings`` is empty when neither file exists yet (check mode on a new host). Carries keys:
    use with no_log."""
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
    keys = keys if isinstance(keys, Mapping) else {}
    item: dict[str, Any] = {"name": name, "settings": settings}
    if target.get("pool"):
        return _pool_item(item, target, units, keys, haproxy)
    key_id = str(target.get("key_id") or "")
    unit = str(target.get("unit") or "")
    text = _unit_text(units, name, None)
    if text is not None:
        cred = credential_path(unit)
        item["path"] = f"{target.get('server')}:/etc/systemd/system/{unit}"
        item["text"] = text.replace("%d/api-key", cred)
        if key_id in keys:
            inst_id = "/".join(key_id.split("/")[:2])
            inst_key = keys.get(inst_id, "") if key_id != inst_id else ""
            item["files"] = {cred: f"{keys[key_id]}\n{inst_key}\n"}
    return item


#: What the role publishes of each settings file it writes (claude_code_settings_files): where
#: it is and what it points at; never a key.
PUBLIC_TARGET_KEYS = ("name", "managed", "path", "server", "instance", "base_url", "model", "pool")


def public_target(target: Any) -> dict[str, Any]:
    """One entry of claude_code_settings_files: the keys of PUBLIC_TARGET_KEYS of one of the
    role's settings-file targets."""
    if not isinstance(target, Mapping):
        raise AnsibleFilterError(f"claude_code_public_target: not a target: {target!r}")
    return {k: target[k] for k in PUBLIC_TARGET_KEYS if k in target}


def _usage(run: Any) -> tuple[int, int]:
    """(tokens the server evaluated, tokens it read from its cache) of one ``claude -p
    --output-format json`` result (its stdout, or the parsed object)."""
    if isinstance(run, str):
        try:
            run = json.loads(run)
        except ValueError as exc:
            raise AnsibleFilterError(f"claude -p printed no JSON result: {run[:200]!r}") from exc
    if not isinstance(run, Mapping):
        raise AnsibleFilterError(f"not a claude -p JSON result: {run!r}")
    if run.get("is_error"):
        raise AnsibleFilterError(f"claude -p answered an error: {str(run.get('result'))[:300]}")
    usage = run.get("usage")
    if not isinstance(usage, Mapping):
        raise AnsibleFilterError("the claude -p result has no usage")
    evaluated = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens"))
    return evaluated, int(usage.get("cache_read_input_tokens") or 0)


def session_reuse(run: Any) -> dict[str, Any]:
    """What a ``claude -p --output-format json`` run's prompt took from the server's cache:
    ``{"prompt": tokens, "reused": tokens read from the cache, "ratio": reused / prompt}``."""
    evaluated, reused = _usage(run)
    prompt = evaluated + reused
    return {"prompt": prompt, "reused": reused, "ratio": reused / prompt if prompt else 0.0}


def summary(  # noqa: PLR0917 - a filter: Jinja passes its arguments by position
    settings: Any,
    endpoint: Any,
    user: Any,
    settings_path: Any,
    turns: Any,
    host: Any = "",
    key_dir: Any = "",
) -> list[str]:
    """The lines a person reads after the site is up, for one Claude Code user: where the server
    is, what it serves, where the key is, and how much of a second turn came from the cache.
    ``settings``: the user's effective settings (their file, the managed file over it);
    ``endpoint``: the server's ``llama_server_endpoints`` entry for the instance (may be empty);
    ``turns``: the ``claude -p --output-format json`` results of a session's first and second
    turn; ``key_dir``: where the server keeps its keys."""
    env = settings.get("env", {}) if isinstance(settings, Mapping) else {}
    env = env if isinstance(env, Mapping) else {}
    ep = endpoint if isinstance(endpoint, Mapping) else {}
    url = str(env.get("ANTHROPIC_BASE_URL") or "?")
    kv_found = ep.get("kv_types")
    kv: Mapping[str, Any] = kv_found if isinstance(kv_found, Mapping) else {}
    slot = _count(ep.get("ctx_per_slot"))
    window = _count(env.get("CLAUDE_CODE_AUTO_COMPACT_WINDOW"))
    if not isinstance(turns, Sequence) or isinstance(turns, str) or len(turns) < 2:
        raise AnsibleFilterError("claude_code_summary: give the results of two turns")
    first, second = session_reuse(turns[0]), session_reuse(turns[1])
    managed = env.get("ANTHROPIC_AUTH_TOKEN") is None
    token_where = "in the managed settings" if managed else f"in {settings_path}"
    model = env.get("ANTHROPIC_MODEL") or ep.get("alias") or "?"
    lines = [
        f"Claude Code for {user} on {host}: working",
        f"  server       {url}"
        + (f" (CA: {env['NODE_EXTRA_CA_CERTS']})" if env.get("NODE_EXTRA_CA_CERTS") else ""),
        f"  model        {ep.get('model') or '?'} as {model}",
        f"  context      {slot:,} tokens per slot" if slot else "  context      unknown",
        f"  KV cache     K {kv.get('k', '?')}, V {kv.get('v', '?')}",
        f"  compaction   at a window of {window:,} tokens"
        if window
        else "  compaction   not set (CLAUDE_CODE_AUTO_COMPACT_WINDOW)",
        f"  key          {token_where} (env ANTHROPIC_AUTH_TOKEN, readable by {user} only)"
        + (f"; the server's copy under {key_dir} (root only)" if key_dir else ""),
        f"  settings     {settings_path}",
        f"  first turn   {first['prompt']:,} prompt tokens, {first['reused']:,} from the cache",
        f"  second turn  {second['prompt']:,} prompt tokens, {second['reused']:,} from the cache "
        f"({second['ratio'] * 100:.1f} %)",
    ]
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "claude_code_public_target": public_target,
            "claude_code_session_reuse": session_reuse,
            "claude_code_summary": summary,
            "claude_code_compact_window": compact_window,
            "claude_code_unit_slot_context": unit_slot_context,
            "claude_code_check_item": check_item,
            "claude_code_pool_of": pool_of,
            "claude_code_pool_target": pool_target,
            "claude_code_unit_reads": unit_reads,
            "claude_code_target_slot": target_slot,
            "claude_code_pool_keys": pool_keys,
            "claude_code_pool_key_reads": pool_key_reads,
            "claude_code_haproxy_supported": haproxy_kind_supported,
        }

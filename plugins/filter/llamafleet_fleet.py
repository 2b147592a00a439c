"""Filters for the fleet playbooks (rollout.yml, audit.yml): what those playbooks compute, as
tested Python; the playbooks only gather, call and write.

rollout.yml: which configured directories lack free space (`llamafleet_short_of_space`).

audit.yml, per host: the users whose settings are read (`llamafleet_audit_users`), the server each
user's Claude Code talks to (`llamafleet_audit_fleet`, `llamafleet_audit_clients`), the items of the
one `llamafleet_check` task (`llamafleet_audit_items`: each unit with its facts; each user's
settings with the managed settings and every unit of their server) and the host's part of the report
(`llamafleet_audit_host_report`); per pool host (llama_pools): its URL and each backend's state
in HAProxy (`llamafleet_audit_pool`); for the fleet: the report (`llamafleet_audit_report`) and
what `audit_fail_on` fails on (`llamafleet_audit_failing`).

The texts come from managed hosts: nothing they name is opened on the controller."""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.rules.server import is_loopback
except ImportError as exc:  # pragma: no cover - reported when a filter needs it
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

UNIT_DIR = "/etc/systemd/system"
SEVERITY_LEVELS = {
    "error": ("error",),
    "warning": ("error", "warning"),
    "info": ("error", "warning", "info"),
    "none": (),
}
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)
_NOBODY = 65534
_UNITS: ModuleType | None = None


def _units_plugin() -> ModuleType:
    """The sibling filter file llamafleet_units.py (the validator's unit and settings readers);
    Ansible loads each filter file on its own, so it is loaded here by its path."""
    global _UNITS  # noqa: PLW0603 - loaded once
    if _UNITS is None:
        path = Path(__file__).with_name("llamafleet_units.py")
        spec = importlib.util.spec_from_file_location("llamafleet_units_for_fleet", path)
        if spec is None or spec.loader is None:  # pragma: no cover - the file is beside this one
            _fail(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _UNITS = module
    return _UNITS


def _fail(msg: str) -> NoReturn:
    from ansible.errors import AnsibleFilterError

    raise AnsibleFilterError(msg)


def _need_llamafleet() -> None:
    require(_IMPORT_ERROR, AnsibleFilterError)


def _decode(read: Any) -> str:
    """The text of a slurp/llamafleet_read result ("" when it has none)."""
    content = read.get("content") if isinstance(read, Mapping) else None
    if not content:
        return ""
    try:
        return base64.b64decode(str(content)).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return ""


def _json_doc(text: str) -> dict[str, Any]:
    """A JSON object, or {} for no text, broken JSON or another type."""
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _results(registered: Any) -> list[Any]:
    """The per-item results of a registered loop (a list given as is)."""
    if isinstance(registered, Mapping):
        registered = registered.get("results")
    return list(registered) if isinstance(registered, (list, tuple)) else []


# ------------------------------------------------------------------------------ role defaults


#: the collection's own roles: the roles its playbooks run (by FQCN, llamafleet.fleet.ROLE)
_ROLES = Path(__file__).resolve().parents[2] / "roles"


#: each role's parsed defaults, by role, with the (mtime, size) of the file they were read from:
#: the playbooks evaluate `_rollout_defaults` in many tasks, and a worker (or, with the preload
#: callback, the controller's main process before it forks them) parses each file once
_DEFAULTS_CACHE: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}


def role_defaults_of(role: str) -> dict[str, Any]:
    """One role's literal defaults (roles/ROLE/defaults/main.yml without the templated ones),
    read again only when the file changed."""
    import yaml

    path = _ROLES / str(role) / "defaults" / "main.yml"
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not path.is_file():
        _fail(f"role {role}: no {path} (not a role of the llamafleet.fleet collection)")
    stamp = (st.st_mtime_ns, st.st_size)
    held = _DEFAULTS_CACHE.get(str(role))
    if held is not None and held[0] == stamp:
        return held[1]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
    except (OSError, yaml.YAMLError) as exc:
        _fail(f"{path}: {exc}")
    if not isinstance(data, dict):
        _fail(f"{path}: not a mapping of variables")
    found = {k: v for k, v in data.items() if not _templated(v)}
    _DEFAULTS_CACHE[str(role)] = (stamp, found)
    return found


def llamafleet_role_defaults(roles: Iterable[str]) -> dict[str, Any]:
    """The defaults of the named roles of this collection (roles/ROLE/defaults/main.yml), for a
    playbook that needs a role's setting before or without running the role:
    ``llama_cpp_prefix | default(_defaults.llama_cpp_prefix)`` is the inventory's value when it
    sets one, else the role's own default (never a copy of it). A default that is a template
    (it depends on facts or other variables) is left out."""
    out: dict[str, Any] = {}
    for role in roles or []:
        out.update(role_defaults_of(str(role)))
    return out


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_templated(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_templated(v) for v in value)
    return False


# ------------------------------------------------------------------------------------ rollout


def llamafleet_short_of_space(
    dirs: Iterable[str], mounts: Iterable[Mapping[str, Any]], min_free_mb: int | str
) -> list[str]:
    """Each directory (it need not exist yet) on a mount with less than ``min_free_mb`` MiB free,
    as "DIR (on MOUNT): N MiB free". A directory's mount is the longest mount point (from the
    gathered ``mounts`` facts) that is the directory or a parent of it; a directory on no mount
    with a known size is not reported."""
    need = int(min_free_mb)
    mounted = [m for m in mounts or [] if m.get("size_available") is not None and m.get("mount")]
    out = []
    for d in dict.fromkeys(str(x) for x in dirs or []):
        best: Mapping[str, Any] | None = None
        for m in mounted:
            point = str(m["mount"])
            inside = d == point or d.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(str(best["mount"]))):
                best = m
        if best is None:
            continue
        free = int(int(best["size_available"]) / 1048576)
        if free < need:
            out.append(f"{d} (on {best['mount']}): {free} MiB free")
    return out


def llamafleet_rollout_builder(
    key: str, hosts: Iterable[str], hostvars: Mapping[str, Any], builders: Iterable[str] = ()
) -> str:
    """The host that compiles for the platform ``key``: the first of ``hosts`` (the play's, in
    inventory order) that is one of ``builders`` (the inventory's ``llama_cpp_builders``) and
    whose inventory names ``key`` as the platform it builds for (``rollout_builder_platform``).
    What a host reports about itself (its facts) never makes it a builder. "" when no host is:
    then every host of that platform compiles for itself and nothing is shipped."""
    named = {str(b) for b in builders or []}
    for host in hosts or []:
        declared = str((hostvars.get(host) or {}).get("rollout_builder_platform", "")).strip()
        if str(host) in named and declared == key.strip():
            return str(host)
    return ""


def llamafleet_rollback_summary(
    old_link: Any, new_link: Any, restored: Any, added: Iterable[str], health: Any
) -> dict[str, str]:
    """What the rollback did, in words: ``build`` (the ``current`` link before the rollout and
    now: ``stat`` results), ``units`` (the units written back that differed, the units the
    rollout added and the rollback removed) and ``serving`` (each unit used before and what its
    /health answered: a ``llamafleet_wait`` loop)."""
    old = (old_link or {}).get("stat") or {}
    new = (new_link or {}).get("stat") or {}
    if old.get("islnk") and new.get("lnk_source", "") != old.get("lnk_source"):
        build = (
            f"current -> {old.get('lnk_source')} (the new build {new.get('lnk_source') or '?'} "
            "stays installed)"
        )
    elif old.get("islnk"):
        build = f"unchanged ({old.get('lnk_source') or 'none'})"
    else:
        build = "none before this rollout: left as is"
    changed = [_basename(str(r["_u"]["source"])) for r in _results(restored) if r.get("changed")]
    units = (", ".join(changed) or "none changed") + " restored"
    removed = [_basename(str(f)) for f in added or []]
    if removed:
        units += ", removed " + ", ".join(removed)
    answers = [
        f"{_basename(str(r['_u']['source']))} /health {r.get('status', 'no answer')}"
        for r in _results(health)
    ]
    return {
        "build": build,
        "units": units,
        "serving": ", ".join(answers) or "no unit was running before this rollout",
    }


# ------------------------------------------------------------------------------ audit: hosts


def llamafleet_audit_users(
    passwd: Mapping[str, Any], min_uid: int | str = 1000
) -> list[dict[str, str]]:
    """The accounts whose Claude Code settings are read, from the ``getent_passwd`` facts (name:
    [password, uid, gid, gecos, home, shell]): root and every uid from ``min_uid`` on except
    nobody (65534), sorted by name, as {name, home}."""
    lowest = int(min_uid)
    out = []
    for name in sorted(passwd or {}):
        fields = list(passwd[name] or [])
        try:
            uid = int(fields[1])
        except (IndexError, TypeError, ValueError):
            continue
        if name == "root" or (uid >= lowest and uid != _NOBODY):
            out.append({"name": name, "home": str(fields[4]) if len(fields) > 4 else ""})
    return out


def llamafleet_audit_fleet(servers: Iterable[str], hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """For each llama-server host of the inventory: the names a client's URL may use for it
    (inventory name, ansible_host, the gathered hostname and fqdn) and the units the audit read
    there (``_audit_units``: {path, text}; none for a host not reached)."""
    out: dict[str, Any] = {}
    for host in servers or []:
        hv = hostvars.get(host) or {}
        facts = hv.get("ansible_facts") or {}
        names = [host, hv.get("ansible_host") or host, facts.get("hostname"), facts.get("fqdn")]
        units = [
            {"path": str(u.get("source") or ""), "text": _decode(u)}
            for u in _results(hv.get("_audit_units"))
            if isinstance(u, Mapping) and u.get("content")
        ]
        out[host] = {"names": [str(n) for n in dict.fromkeys(names) if n], "units": units}
    return out


def _url_host(url: str) -> str:
    from urllib.parse import urlsplit

    if not _URL.match(url):
        return ""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def llamafleet_audit_server_of(url: str, host: str, fleet: Mapping[str, Any]) -> str:
    """The inventory host a base URL names: ``host`` itself for a loopback address, else the
    first llama-server host (inventory order) one of whose names is the URL's host; "" for none."""
    _need_llamafleet()
    name = _url_host(url)
    if not name:
        return ""
    if is_loopback(name):
        return host
    for server, info in (fleet or {}).items():
        if name in (str(n).lower() for n in info.get("names") or []):
            return str(server)
    return ""


def llamafleet_audit_clients(
    reads: Any, managed: Any, host: str, fleet: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each user's settings that were read (a ``llamafleet_read`` loop over
    ``llamafleet_audit_users``) as {user, path, text, mode, base_url, server}: the base URL their
    Claude Code uses (the managed settings win) and the inventory host it names."""
    base_url = _units_plugin().llamafleet_client_base_url
    managed_text = _managed_text(managed)
    out = []
    for r in _results(reads):
        if not r.get("exists") or r.get("problem"):
            continue
        user = r.get("item") or {}
        text = _decode(r)
        url = base_url(text, managed_text or None)
        out.append(
            {
                "user": str(user.get("name", "?")),
                "path": f"{user.get('home', '')}/.claude/settings.json",
                "text": text,
                "mode": str(r.get("mode") or ""),
                "base_url": url,
                "server": llamafleet_audit_server_of(url, host, fleet),
            }
        )
    return out


def _managed_text(managed: Any) -> str:
    """The managed settings' text when they exist and were read, else ""."""
    if not isinstance(managed, Mapping) or not managed.get("exists") or managed.get("problem"):
        return ""
    return _decode(managed)


def _mode(mode: Any) -> int | None:
    try:
        return int(str(mode), 8) if mode not in (None, "") else None
    except ValueError:
        return None


def llamafleet_audit_facts(seen: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The facts of each unit read on a host (the shape of a facts file, every fact inline): the
    build's manifest, --version and --help, CPU cores, RAM, the first GPU and the metadata of the
    unit's model when the model's directory has a metadata.json."""
    manifest = _json_doc(_decode(seen.get("manifest")))
    hardware = seen.get("hardware") or {}
    common: dict[str, Any] = {
        "build_manifest": {
            "version_text": str(manifest.get("version_output") or ""),
            "help_text": _decode(seen.get("help")),
            "cuda_architectures": list(manifest.get("cuda_architectures") or []),
            "backend": str(manifest.get("backend") or ""),
        },
        "cpu_cores": int(hardware.get("processor_cores") or 0)
        * int(hardware.get("processor_count") or 1),
        "ram_mib": int(hardware.get("memtotal_mb") or 0),
    }
    gpus = list(seen.get("gpus") or [])
    if gpus:
        g = gpus[0]
        common["gpu"] = {
            "name": str(g.get("name") or ""),
            "vram_mib": int(g.get("memory_mib") or 0),
            "compute_capability": str(g.get("compute_cap") or ""),
        }
    out = []
    metas = _results(seen.get("metas"))
    for n, _unit in enumerate(_results(seen.get("units"))):
        facts = dict(common)
        meta = _json_doc(_decode(metas[n])) if n < len(metas) else {}
        if isinstance(meta.get("kv"), dict):
            facts["model"] = {"metadata": meta["kv"], "tensors": meta.get("tensors") or []}
        out.append(facts)
    return out


def _client_name(n: int) -> str:
    return f"client-{n}"


def llamafleet_audit_items(
    seen: Mapping[str, Any], fleet: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The items of the host's ``llamafleet_check``: each unit (named by its file) with the host's
    facts, then each user's settings (named ``client-N``) checked together with the managed
    settings and every unit of the server their base URL names (``texts``, each as
    ``SERVER:/etc/systemd/system/UNIT``): the cross-file rules match the URL's address and port
    to the unit it reaches, or report that none does. Every file keeps its own path, so findings
    name the file on its host."""
    items: list[dict[str, Any]] = []
    facts = llamafleet_audit_facts(seen)
    for unit, unit_facts in zip(_results(seen.get("units")), facts, strict=True):
        path = str(unit.get("source") or "")
        items.append(
            {"name": _basename(path), "path": path, "text": _decode(unit), "facts": unit_facts}
        )
    managed = seen.get("managed") or {}
    managed_text = _managed_text(managed)
    host = str(seen.get("host") or "")
    own = [{"path": str(i["path"]), "text": str(i["text"])} for i in items]
    for n, c in enumerate(seen.get("clients") or []):
        # mode: the file's permission bits on its host (CC008: a key readable by others)
        settings = [
            {
                "path": str(c["path"]),
                "text": str(c["text"]),
                "scope": "user",
                "mode": _mode(c.get("mode")),
            }
        ]
        if managed_text:
            settings.append(
                {
                    "path": str(seen.get("managed_path") or ""),
                    "text": managed_text,
                    "scope": "managed",
                    "mode": _mode(managed.get("mode")),
                }
            )
        item: dict[str, Any] = {"name": _client_name(n), "settings": settings}
        server = str(c.get("server") or "")
        # a loopback URL: this host's own units, in the llama_servers group or not
        units = own if server == host else (fleet.get(server) or {}).get("units") or []
        if units:
            # every unit of the server: the check finds the one the URL reaches (or says none does)
            item["texts"] = [
                {
                    "path": f"{server}:{UNIT_DIR}/{_basename(str(u['path']))}",
                    "text": str(u["text"]),
                    "kind": "unit",
                }
                for u in units
            ]
        items.append(item)
    return items


def _by_name(checks: Any) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("name")): c for c in checks or [] if isinstance(c, Mapping)}


def _health(result: Any) -> str:
    """What a unit's /health answered: its status word, else the HTTP status; "no answer" when
    it was not asked (no port) or did not answer."""
    if not isinstance(result, Mapping):
        return "no answer"
    status = result.get("status", -1)
    if status in (-1, None):
        return "no answer"
    doc = result.get("json")
    if isinstance(doc, Mapping) and doc.get("status") is not None:
        return str(doc["status"])
    return str(status)


def _refused(seen: Mapping[str, Any]) -> list[str]:
    """The files not read (a link, a FIFO, too large, another account's): settings, the managed
    settings, model metadata."""
    reads = [*_results(seen.get("settings")), seen.get("managed"), *_results(seen.get("metas"))]
    return [str(r["problem"]) for r in reads if isinstance(r, Mapping) and r.get("problem")]


def llamafleet_audit_host_report(seen: Mapping[str, Any], checks: Any) -> dict[str, Any]:
    """One host's part of the fleet report: GPU, RAM, build, each llama-server unit (state,
    /health, model, context, findings) and each user's settings (base URL, server, the findings
    on their settings: those in their file or the managed one, and the client and cross rules
    CC/XC), and the files not read. ``checks``: the ``checks`` of the host's
    ``llamafleet_check`` on ``llamafleet_audit_items``."""
    by_name = _by_name(checks)
    manifest = _json_doc(_decode(seen.get("manifest")))
    servers = list(seen.get("servers") or [])
    metas = _results(seen.get("metas"))
    active = _results(seen.get("active"))
    health = _results(seen.get("health"))
    instances = []
    for n, unit in enumerate(_results(seen.get("units"))):
        name = _basename(str(unit.get("source") or ""))
        srv = servers[n] if n < len(servers) and isinstance(servers[n], Mapping) else {}
        meta = _json_doc(_decode(metas[n])) if n < len(metas) else {}
        model = meta.get("model") or _basename(str(srv.get("model") or "?")) or "?"
        state = str(active[n].get("stdout") or "") if n < len(active) else ""
        findings = list((by_name.get(name) or {}).get("findings") or [])
        instances.append(
            {
                "unit": name,
                "active": state or "unknown",
                "health": _health(health[n] if n < len(health) else None),
                "model": str(model),
                "ctx": str(srv.get("ctx_size") or "default"),
                "findings": [f["id"] for f in findings],
                "findings_detail": findings,
            }
        )
    managed_path = str(seen.get("managed_path") or "")
    has_managed = bool(_managed_text(seen.get("managed")))
    clients = []
    for n, c in enumerate(seen.get("clients") or []):
        own = (str(c["path"]), managed_path)
        found = list((by_name.get(_client_name(n)) or {}).get("findings") or [])
        mine = [f for f in found if f.get("file") in own] + [
            f
            for f in found
            if f.get("file") not in own and str(f.get("id", "")).startswith(("CC", "XC"))
        ]
        clients.append(
            {
                "user": str(c["user"]),
                "settings": str(c["path"]),
                "managed": has_managed,
                "base_url": str(c.get("base_url") or ""),
                "server": str(c.get("server") or "") or "?",
                "findings": [f["id"] for f in mine],
                "findings_detail": mine,
            }
        )
    gpus = list(seen.get("gpus") or [])
    gpu = gpus[0] if gpus else {}
    version = re.search(r"version: .*", str(manifest.get("version_output") or ""))
    return {
        "host": str(seen.get("host") or "?"),
        "gpu": str(gpu.get("name") or "none").strip(),
        "compute_capability": str(gpu.get("compute_cap") or "").strip(),
        "vram_mib": int(gpu.get("memory_mib") or 0),
        "ram_mib": int((seen.get("hardware") or {}).get("memtotal_mb") or 0),
        "build": str(manifest.get("name") or "none"),
        "build_version": version.group(0).strip() if version else "",
        # the host that compiled it (its manifest): with shipped builds, one of llama_cpp_builders
        "built_on": str(manifest.get("host") or ""),
        "instances": instances,
        "clients": clients,
        "refused": _refused(seen),
    }


# ------------------------------------------------------------------------------ audit: pools


def _pool_url(seen: Mapping[str, Any]) -> str:
    """The pool's URL as its clients use it: the bind address, or the pool host's ansible_host
    (else its name) for a wildcard bind; 127.0.0.1 for a loopback bind."""
    _need_llamafleet()
    from llamafleet.rules.server import address_kind

    bind = str(seen.get("bind") or "").strip()
    kind = address_kind(bind)
    if kind == "any":
        address = str(seen.get("ansible_host") or seen.get("host") or "?")
    elif kind == "loopback":
        address = "127.0.0.1"
    else:
        address = bind.strip("[]")
    if ":" in address:
        address = f"[{address}]"
    scheme = "https" if seen.get("tls") else "http"
    return f"{scheme}://{address}:{seen.get('port')}"


def llamafleet_audit_pool(seen: Mapping[str, Any]) -> dict[str, Any]:
    """One pool host's part of the fleet report. ``seen``: ``host``, ``bind``, ``port``,
    ``tls``, ``ansible_host`` (the llama_pool settings of the host), ``backends`` (the
    llama_pool role's resolved backends: name, address, port), ``states`` (a loop of the
    read-only llama_pool_server module over them: status, admin, scur, check, found) and
    ``health`` (the pool's own /health, a uri result). Each backend: its HAProxy status (UP,
    DOWN, MAINT, DRAIN, ... as ``show stat`` says it), admin state (ready, drain, maint), current
    sessions, last check, and ``up``: whether it takes requests (status UP and admin ready);
    ``not_up`` names the others."""
    states = {}
    for r in _results(seen.get("states")):
        b = r.get("_b") if isinstance(r, Mapping) else None
        if isinstance(b, Mapping):
            states[str(b.get("name"))] = r
    backends = []
    for b in seen.get("backends") or []:
        name = str(b.get("name"))
        r = states.get(name) or {}
        found = bool(r.get("found")) and not r.get("failed")
        status = str(r.get("status") or "") if found else ""
        admin = str(r.get("admin") or "") if found else ""
        if not found:
            status = "not in HAProxy" if r.get("found") is False else "unknown"
        backends.append(
            {
                "name": name,
                "address": f"{b.get('address')}:{b.get('port')}",
                "status": status or "unknown",
                "admin": admin or "-",
                "sessions": int(r.get("scur") or 0) if found else 0,
                "check": str(r.get("check") or r.get("msg") or ""),
                "up": found and status.startswith("UP") and admin == "ready",
            }
        )
    return {
        "host": str(seen.get("host") or "?"),
        "url": _pool_url(seen),
        "health": _health(seen.get("health")),
        "backends": backends,
        "not_up": [b["name"] for b in backends if not b["up"]],
    }


# ------------------------------------------------------------------------------ audit: fleet


def llamafleet_audit_report(
    hostvars: Mapping[str, Any],
    servers: Iterable[str],
    clients: Iterable[str],
    pools: Iterable[str] = (),
) -> dict[str, Any]:
    """The fleet report: ``hosts`` (each reached host's ``audit_host_report``, the llama-server
    hosts first, in inventory order), ``pools`` (each reached pool host's
    ``audit_pool_report``) and ``unreached`` (the hosts without one)."""
    everyone = list(dict.fromkeys([*(servers or []), *(clients or [])]))
    hosts, unreached, pool_reports = [], [], []
    for name in everyone:
        report = (hostvars.get(name) or {}).get("audit_host_report")
        if isinstance(report, Mapping):
            hosts.append(dict(report))
        else:
            unreached.append(name)
    for name in pools or []:
        report = (hostvars.get(name) or {}).get("audit_pool_report")
        if isinstance(report, Mapping):
            pool_reports.append(dict(report))
        elif name not in unreached:
            unreached.append(name)
    return {"hosts": hosts, "pools": pool_reports, "unreached": unreached}


def llamafleet_audit_failing(report: Mapping[str, Any], fail_on: str = "none") -> list[str]:
    """What ``audit_fail_on`` fails the audit on, one line each: a unit that does not answer
    /health with ok, a finding of that severity or worse, a file not read, a pool whose /health
    is not ok or a backend of it that does not take requests (not UP, or drained, in
    maintenance), a host not reached. ``none``: nothing."""
    if fail_on not in SEVERITY_LEVELS:
        _fail(f"audit_fail_on={fail_on}: use error, warning, info or none.")
    levels = SEVERITY_LEVELS[fail_on]
    if not levels:
        return []
    out = []
    for h in report.get("hosts") or []:
        host = h["host"]
        for i in h.get("instances") or []:
            if i["health"] != "ok":
                out.append(f"{host} {i['unit']}: {i['active']}, /health {i['health']}")
            out += [
                f"{host} {i['unit']}: {f['id']} [{f['severity']}]"
                for f in i["findings_detail"]
                if f["severity"] in levels
            ]
        for c in h.get("clients") or []:
            out += [
                f"{host} {f['file']}:{f['line']}: {f['id']} [{f['severity']}]"
                for f in c["findings_detail"]
                if f["severity"] in levels
            ]
        out += [f"{host}: {r}" for r in h.get("refused") or []]
    for p in report.get("pools") or []:
        if p.get("health") != "ok":
            out.append(f"pool {p['host']} {p['url']}: /health {p['health']}")
        out += [
            f"pool {p['host']} backend {b['name']}: {b['status']}, admin {b['admin']}"
            + (f", check {b['check']}" if b.get("check") else "")
            for b in p.get("backends") or []
            if not b.get("up")
        ]
    out += [f"{u}: not reached" for u in report.get("unreached") or []]
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_role_defaults": llamafleet_role_defaults,
            "llamafleet_short_of_space": llamafleet_short_of_space,
            "llamafleet_rollout_builder": llamafleet_rollout_builder,
            "llamafleet_rollback_summary": llamafleet_rollback_summary,
            "llamafleet_audit_users": llamafleet_audit_users,
            "llamafleet_audit_fleet": llamafleet_audit_fleet,
            "llamafleet_audit_clients": llamafleet_audit_clients,
            "llamafleet_audit_items": llamafleet_audit_items,
            "llamafleet_audit_host_report": llamafleet_audit_host_report,
            "llamafleet_audit_pool": llamafleet_audit_pool,
            "llamafleet_audit_report": llamafleet_audit_report,
            "llamafleet_audit_failing": llamafleet_audit_failing,
        }

"""Filters of the llama_pool role: the backend list of a pool from the inventory (address, port,
TLS, the certificate name HAProxy checks, a stable server id), the pools a backend belongs to (for
tasks/drain.yml and tasks/ready.yml), the pool key (one value on every backend, the pool host gets
its SHA-256), the unit's client networks and the HAProxy bind address."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.poolkeys import user_key as _user_key
    from llamafleet.rules.server import address_kind
    from llamafleet.units import IP_ALLOW_ENTRY as _IP_ALLOW
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

#: HAProxy server names (and the inventory names they come from)
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}\Z")
#: a DNS name: what HAProxy 2.6's verifyhost compares with a certificate (it does not match IP
#: addresses against the certificate's IP entries)
_LABEL = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}"
_DNS_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?\Z")
#: client names of the llama_server role's client keys
_CLIENT_NAME = re.compile(r"[A-Za-z0-9_.@/-]{1,200}\Z")
#: pool users: client names, and HOST/(managed) for a host's managed settings file
_POOL_CLIENT = re.compile(r"[A-Za-z0-9_.@-]{1,100}/(?:[A-Za-z0-9_.@-]{1,100}|\(managed\))\Z")
#: what the role accepts as a pool key read from a backend: printable, no blank, 16+ characters
_KEY = re.compile(r"[\x21-\x7e]{16,512}\Z")
#: server ids stay below this, so HAProxy's consistent-hash node keys (id * 4096 + n) fit 32 bits
MAX_SERVER_ID = 1_000_000
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _fail(msg: str) -> NoReturn:
    raise AnsibleFilterError(msg)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _kind(host: str) -> str:
    """loopback, socket, any (a wildcard) or address: the validator's own address classifier,
    the one its rules use (empty is llama-server's default, 127.0.0.1)."""
    require(_IMPORT_ERROR, AnsibleFilterError)
    kind: str = address_kind(host)
    return kind


def _is_loopback(host: str) -> bool:
    """Loopback or a Unix socket: beyond the reach of other hosts."""
    return _kind(host) in ("loopback", "socket")


def _bool(value: Any, purpose: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    _fail(f"{purpose} must be true or false; got {value!r}")


def _get(hv: Any, name: str, default: Any) -> Any:
    """A variable of a host (hostvars[host]), else the default."""
    try:
        value = hv[name]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def client_key_file(name: Any) -> str:
    """The file name of a client key in the llama_server role's ``<instance>.clients/``: the name
    with ``/`` replaced by ``__``, plus ``.key`` (as that role's llamafleet_client_key_file)."""
    text = str(name)
    if not _CLIENT_NAME.match(text):
        _fail(
            f"llama_pool_client_key_name: {text!r} is not a client name (1 to 200 letters, "
            "digits and _ . @ / -, e.g. 'pool')"
        )
    return text.replace("/", "__") + ".key"


def server_ids(names: Iterable[str]) -> dict[str, int]:
    """A stable HAProxy server id per name: derived from the name alone (SHA-256), so that a
    backend that joins or leaves does not renumber the others (HAProxy places a server on the
    consistent-hash ring by its id: renumbering would move every conversation), and every pool
    host of the same backends gets the same ring. Two names on the same id (about one pair in a
    million): the later in sorted order takes the next free id."""
    out: dict[str, int] = {}
    used: set[int] = set()
    for name in sorted(set(names)):
        digest = hashlib.sha256(name.encode()).digest()
        sid = 1 + int.from_bytes(digest[:4], "big") % (MAX_SERVER_ID - 1)
        while sid in used:
            sid = sid % (MAX_SERVER_ID - 1) + 1
        used.add(sid)
        out[name] = sid
    return out


def _instance_of(host: str, hv: Any, instance: str) -> Mapping[str, Any] | None:
    instances = _get(hv, "llama_server_instances", [])
    if not isinstance(instances, (list, tuple)):
        _fail(f"{host}: llama_server_instances must be a list; got {instances!r}")
    for inst in instances:
        if isinstance(inst, Mapping) and str(inst.get("name", "")) == instance:
            return inst
    return None


def _reached_at(host: str, hv: Any, inst: Mapping[str, Any], instance: str) -> tuple[str, str, int]:
    """Where the pool reaches a backend's instance, where the backend host's own requests go, and
    the port."""
    listen = str(inst.get("host") or "127.0.0.1").strip()
    if _is_loopback(listen):
        _fail(
            f"{host}: instance {instance!r} listens on {listen}, which the pool cannot reach; "
            "give it host: 0.0.0.0 (or an address of its own) and ip_allow with the pool "
            "host's address"
        )
    if _kind(listen) == "any":
        address = str(_get(hv, "ansible_host", host))
        connect_host = "127.0.0.1"
    else:
        address = listen.strip("[]")
        connect_host = f"[{address}]" if ":" in address else address
    try:
        port = int(inst.get("port", 8080))
    except (TypeError, ValueError):
        _fail(f"{host}: port of instance {instance!r} is not a number: {inst.get('port')!r}")
    return address, connect_host, port


def _backend(
    host: str,
    hv: Any,
    *,
    group: str,
    instance: str,
    api_key: bool,
    key_name: str,
    server_defaults: Mapping[str, Any],
) -> dict[str, Any] | None:
    """One backend of ``backends`` (None for a disabled instance)."""
    if not _SERVER_NAME.match(host):
        _fail(
            f"{host}: an inventory name of letters, digits, '.', '_' and '-' is needed for "
            "the HAProxy server name of a backend"
        )
    inst = _instance_of(host, hv, instance)
    if inst is None:
        _fail(
            f"{host} (group {group}): no instance named {instance!r} in its "
            "llama_server_instances; llama_pool_instance names the instance each backend "
            "serves the pool with"
        )
    if not _bool(inst.get("enabled", True), f"{host}: enabled of instance {instance!r}"):
        return None
    address, connect_host, port = _reached_at(host, hv, inst, instance)
    tls_setting = inst.get("tls")
    if tls_setting is None:
        tls_setting = _get(hv, "llama_server_tls", server_defaults.get("llama_server_tls"))
    text = str(tls_setting).strip().lower()
    # auto: TLS beyond loopback, which a pool backend always is
    tls = True if text == "auto" else _bool(tls_setting, f"{host}: llama_server_tls")
    if tls and _is_ip(host):
        _fail(
            f"{host}: HAProxy 2.6 checks a backend's certificate against a DNS name only; "
            "name the host by a DNS name in the inventory (the llama_server role puts the "
            "inventory name in its certificate) and keep its address in ansible_host"
        )
    has_key = _bool(
        _get(hv, "llama_server_api_key", server_defaults.get("llama_server_api_key", True)),
        f"{host}: llama_server_api_key",
    )
    clients = inst.get("client_keys")
    if clients is None:
        clients = _get(
            hv, "llama_server_client_keys", server_defaults.get("llama_server_client_keys", [])
        )
    if api_key and (not has_key or key_name not in list(clients or [])):
        _fail(
            f"{host}: instance {instance!r} does not accept the pool key: list "
            f"{key_name!r} in its client_keys (or in llama_server_client_keys) and keep "
            "llama_server_api_key on; or set llama_pool_api_key: false to let the backends "
            "check the clients' own keys"
        )
    key_dir = str(_get(hv, "llama_server_key_dir", server_defaults.get("llama_server_key_dir")))
    ca_cert = str(_get(hv, "llama_server_tls_ca_cert", "") or "")
    tls_dir = str(_get(hv, "llama_server_tls_dir", server_defaults.get("llama_server_tls_dir")))
    return {
        "name": host,
        "address": address,
        "port": port,
        "tls": tls,
        "verifyhost": host,
        "ca_file": ca_cert or f"{tls_dir}/ca.crt",
        "connect_host": connect_host,
        "key_file": f"{key_dir}/{instance}.key",
        "key_dir": key_dir,
        "key_dirs": [key_dir, f"{key_dir}/{instance}.clients"],
        "pool_key_dir": f"{key_dir}/{instance}.clients",
        "pool_key_file": f"{key_dir}/{instance}.clients/{client_key_file(key_name)}",
        "unit": f"llama-server-{instance}.service",
        "instance": instance,
    }


def backends(
    pool: Mapping[str, Any],
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    server_defaults: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The backends of a pool, sorted by name, from the inventory alone (the pool is configured
    on its own host, before or without the servers' facts).

    ``pool``: ``backends_group``, ``instance``, ``api_key``, ``client_key_name`` (the llama_pool
    variables); ``server_defaults``: the llama_server role's defaults (what a backend's inventory
    leaves unset). Each backend: ``name`` (inventory name = HAProxy server name), ``id``,
    ``address`` and ``port`` (where the pool connects), ``tls``, ``verifyhost`` (the DNS name
    HAProxy checks its certificate for), ``ca_file`` (its CA certificate on the backend host),
    ``connect_host`` (where the backend host's own requests go), ``key_file`` (the instance key),
    ``pool_key_dir``/``pool_key_file`` (the pool key's place among its client keys), ``unit``."""
    group = str(pool.get("backends_group", ""))
    instance = str(pool.get("instance", ""))
    api_key = _bool(pool.get("api_key", True), "llama_pool_api_key")
    key_name = str(pool.get("client_key_name", ""))
    members = groups.get(group)
    if not members:
        _fail(
            f"llama_pool_backends_group: the inventory group {group!r} has no hosts; name the "
            "group of the llama-server hosts behind the pool (default llama_servers)"
        )
    found: list[dict[str, Any]] = []
    for host in sorted(members):
        hv = hostvars.get(host) if hasattr(hostvars, "get") else hostvars[host]
        backend = _backend(
            host,
            hv,
            group=group,
            instance=instance,
            api_key=api_key,
            key_name=key_name,
            server_defaults=server_defaults,
        )
        if backend is not None:
            found.append(backend)
    if not found:
        _fail(f"llama_pool_backends_group {group!r}: every instance {instance!r} is disabled")
    ids = server_ids(b["name"] for b in found)
    for b in found:
        b["id"] = ids[b["name"]]
    return found


def pools_of(
    backend: str,
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    settings: Mapping[str, Any],
    server_defaults: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The pools a backend host belongs to (for tasks/drain.yml and tasks/ready.yml, which run for
    the backend): each host of the pools group whose backends group holds ``backend``.
    ``settings`` holds what a pool host's inventory leaves unset (``pools_group`` and the
    llama_pool defaults ``backends_group``, ``instance``, ``api_key``, ``client_key_name``,
    ``stats_socket``, ``drain_timeout``, ``ready_timeout``). Each: ``host``, ``socket``, ``proxy``
    (the HAProxy backend section), ``server``, ``drain_timeout``, ``ready_timeout`` and
    ``backend``, this host as that pool sees it (see ``backends``)."""
    out: list[dict[str, Any]] = []
    for pool in groups.get(str(settings.get("pools_group", "llama_pools"))) or []:
        hv = hostvars.get(pool) if hasattr(hostvars, "get") else hostvars[pool]

        def var(name: str, hv: Any = hv) -> Any:
            return _get(hv, f"llama_pool_{name}", settings.get(name))

        group = str(var("backends_group"))
        if backend not in (groups.get(group) or []):
            continue
        pool_settings = {
            k: var(k) for k in ("backends_group", "instance", "api_key", "client_key_name")
        }
        mine = [
            b
            for b in backends(pool_settings, groups, hostvars, server_defaults)
            if b["name"] == backend
        ]
        if not mine:
            continue  # its instance is disabled: the pool does not list it
        out.append(
            {
                "host": pool,
                "socket": str(var("stats_socket")),
                "proxy": "llama",
                "server": backend,
                "drain_timeout": int(var("drain_timeout")),
                "ready_timeout": int(var("ready_timeout")),
                "backend": mine[0],
            }
        )
    return out


def leader(host: str, hosts: Iterable[str], hostvars: Mapping[str, Any], default_group: str) -> str:
    """The pool host that makes the pool key for ``host``'s backends: the first of ``hosts`` (the
    play's) with the same backends group, so that two pools of the same servers never write two
    different keys at once."""

    def group_of(name: str) -> str:
        hv = hostvars.get(name) if hasattr(hostvars, "get") else hostvars[name]
        return str(_get(hv, "llama_pool_backends_group", default_group))

    mine = group_of(host)
    for other in hosts:
        if group_of(other) == mine:
            return str(other)
    return host


def _key_text(read: Mapping[str, Any]) -> str | None:
    content = read.get("content")
    if not content:
        return None
    return base64.b64decode(content).decode("utf-8", "replace").strip()


def key_plan(reads: Iterable[Mapping[str, Any]], fresh: str) -> dict[str, Any]:
    """One pool key for every backend. ``reads``: per backend its pool key file as slurp read it
    (``content``, base64; none when missing) with the backend's name (``host``, or the loop's
    ``_b.name``); a backend that did not answer (``unreachable``) is left out. The key is the one
    the backends hold (the first in order when they differ: the llama_server role made one per
    host for the name before the pool existed); when none holds one, ``fresh``. ``write`` lists
    the backends that lack it or hold another (``differ``); ``digest`` is its SHA-256 in
    upper-case hex, as HAProxy's ``sha2(256),hex`` writes it."""
    seen: list[tuple[str, str | None]] = []
    unreachable: list[str] = []
    for read in reads:
        host = str(read.get("host") or (read.get("_b") or {}).get("name"))
        if read.get("unreachable"):
            unreachable.append(host)
            continue
        text = _key_text(read)
        if text is not None and not _KEY.match(text):
            _fail(
                f"{host}: its pool key file is not a key (16 to 512 printable characters without "
                "blanks); remove it, and the role writes the pool's key there"
            )
        seen.append((host, text))
    if not seen:
        _fail(
            "no backend of the pool answered ("
            + ", ".join(unreachable)
            + "): the pool key is read from and written to the backends"
        )
    held = [text for _, text in seen if text]
    key = held[0] if held else str(fresh).strip()
    if not _KEY.match(key):
        _fail("the new pool key is not 16 to 512 printable characters")
    return {
        "key": key,
        "digest": digest(key),
        "write": [host for host, text in seen if text != key],
        "differ": [host for host, text in seen if text and text != key],
        "unreachable": unreachable,
        "new": not held,
    }


def digest(key: Any) -> str:
    """The SHA-256 of a key as HAProxy's ``sha2(256),hex`` writes it (upper-case hex)."""
    return hashlib.sha256(str(key).strip().encode()).hexdigest().upper()


def _need_llamafleet() -> None:
    require(_IMPORT_ERROR, AnsibleFilterError)


def _users_of(hv: Any) -> list[Mapping[str, Any]]:
    users = _get(hv, "claude_code_users", []) or []
    out: list[Mapping[str, Any]] = [u for u in users if isinstance(u, Mapping) and u.get("name")]
    if _truthy(_get(hv, "claude_code_managed", False)):
        out.insert(0, {"name": "(managed)"})
    return out


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in _TRUE


def clients(  # noqa: PLR0917 - a filter: Jinja passes its arguments by position
    setting: Any,
    pool: str,
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    group: str,
    backends_group: str,
    instance: str,
) -> list[str]:
    """The pool's users, each ``HOST/USER`` (the claude_code role's client names; a managed
    settings file is ``HOST/(managed)``), sorted. ``setting``: a list of such names, or ``auto``:
    every claude_code_users entry (and managed file) of the hosts of ``group`` whose pool is this
    one: their own ``pool`` or the host's claude_code_pool names ``pool``, or is auto and their
    server (``server`` or claude_code_server) is one of ``backends_group``'s hosts with the
    pool's ``instance`` (``instance`` or claude_code_instance, default main)."""
    if isinstance(setting, str) and setting.strip().lower() == "auto":
        members = set(groups.get(backends_group) or [])
        out: set[str] = set()
        for host in groups.get(group) or []:
            hv = hostvars.get(host) if hasattr(hostvars, "get") else hostvars[host]
            host_pool = _get(hv, "claude_code_pool", "auto")
            for user in _users_of(hv):
                choice = user.get("pool", host_pool)
                text = "" if choice in (None, False) else str(choice).strip()
                if text.lower() in ("", *_FALSE, "none"):
                    continue
                if text.lower() == "auto":
                    server = str(user.get("server") or _get(hv, "claude_code_server", "") or "")
                    inst = str(user.get("instance") or _get(hv, "claude_code_instance", "main"))
                    # the role's own default server (this host, else the first llama server)
                    if not server or "{{" in server:
                        server = host if host in members else next(iter(members), "")
                    if server not in members or inst != instance:
                        continue
                elif text != pool:
                    continue
                out.add(f"{host}/{user['name']}")
        return sorted(out)
    if not isinstance(setting, (list, tuple)):
        _fail(f"llama_pool_clients must be auto or a list of HOST/USER names, got {setting!r}")
    names = []
    for item in setting:
        name = str(item).strip()
        if not _POOL_CLIENT.match(name):
            _fail(
                f"llama_pool_clients entry {item!r} is not HOST/USER (the client host's "
                "inventory name, a slash, the user's name)"
            )
        names.append(name)
    return sorted(set(names))


def client_digests(pool_key: Any, names: Iterable[str]) -> dict[str, str]:
    """Each pool user's key digest (upper-case hex SHA-256 of llamafleet.poolkeys.user_key):
    what HAProxy accepts for them. Carries no key."""
    _need_llamafleet()
    out: dict[str, str] = {}
    for name in names or []:
        try:
            out[str(name)] = digest(_user_key(str(pool_key), str(name)))
        except ValueError as exc:
            _fail(str(exc))
    return out


def ip_allow(networks: Any, bind: Any, pool_backends: Iterable[Mapping[str, Any]]) -> list[str]:
    """The IPAddressAllow= entries of HAProxy's unit besides localhost: ``networks``
    (llama_pool_ip_allow), then each backend's address. A pool bound beyond loopback must name its
    clients' networks; a backend reached by name needs ``any`` (the unit filters by address)."""
    purpose = "llama_pool_ip_allow"
    if isinstance(networks, (str, bytes)) or not isinstance(networks, (list, tuple)):
        _fail(f"{purpose} must be a list such as ['10.0.0.0/8']; got {networks!r}")
    out: list[str] = []
    for net in networks:
        text = str(net)
        if not _IP_ALLOW.match(text):
            _fail(
                f"{purpose}: {text!r} is not an address, a CIDR range (10.0.0.0/8, fd00::/8) "
                "or one of any, localhost, link-local, multicast"
            )
        out.append(text)
    if not out and not _is_loopback(str(bind)):
        _fail(
            f"{purpose}: the pool listens on {bind} but names no client networks; its unit drops "
            "every packet except from localhost and the backends (IPAddressDeny=any). List the "
            "networks of its clients (e.g. ['10.0.0.0/8']), or ['any'] to serve every address."
        )
    for b in pool_backends:
        address = str(b["address"])
        if _is_ip(address):
            text = address.strip("[]")
            if text not in out:
                out.append(text)
        elif "any" not in out:
            _fail(
                f"{b['name']}: reached at {address!r}, a name: HAProxy's unit lets packets in by "
                "address; set ansible_host to the backend's IP address, or llama_pool_ip_allow: "
                "['any']"
            )
    return out


def scrapers(names: Any, hostvars: Mapping[str, Any]) -> list[str]:
    """The addresses of the hosts ``names`` (the monitoring group) that may read HAProxy's
    Prometheus exporter: each host's ``ansible_host``, else its gathered default IPv4 address,
    else its inventory name. Names are refused: the unit and the exporter's ACL filter by
    address."""
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        _fail(f"the monitoring hosts must be a list of inventory names; got {names!r}")
    out: list[str] = []
    for name in names:
        hv = hostvars.get(str(name), {})
        # (the gathered fact through ansible_facts: top-level injected facts are deprecated and
        # off where inject_facts_as_vars is false)
        gathered = (hv.get("ansible_facts") or {}).get("default_ipv4") or {}
        address = str(hv.get("ansible_host") or gathered.get("address") or name)
        if not _is_ip(address):
            _fail(
                f"{name}: reached at {address!r}, a name: HAProxy's exporter lets scrapers in by "
                "address; set ansible_host to the monitoring host's IP address, or list the "
                "scrapers' addresses in llama_pool_prometheus_allow"
            )
        text = address.strip("[]")
        if text not in out:
            out.append(text)
    return out


def prometheus_allow(networks: Any) -> list[str]:
    """llama_pool_prometheus_allow checked: addresses or CIDR ranges (the exporter frontend's
    ``src`` ACL and IPAddressAllow= of the unit)."""
    if isinstance(networks, (str, bytes)) or not isinstance(networks, (list, tuple)):
        _fail(f"llama_pool_prometheus_allow must be a list such as ['10.0.0.7']; got {networks!r}")
    out: list[str] = []
    for net in networks:
        text = str(net).strip().strip("[]")
        if text in ("any", "localhost", "link-local", "multicast") or not _IP_ALLOW.match(text):
            _fail(
                f"llama_pool_prometheus_allow: {net!r} is not an address or a CIDR range "
                "(10.0.0.7, 10.0.0.0/24, fd00::/8)"
            )
        if text not in out:
            out.append(text)
    return out


def bind_address(bind: Any, port: Any) -> str:
    """HAProxy's ``bind`` address: ``ADDR:PORT`` (IPv6 without brackets: ``:::8443``)."""
    text = str(bind).strip().strip("[]")
    if not text or any(c.isspace() for c in text) or "," in text:
        _fail(f"llama_pool_bind: {bind!r} is not an address")
    try:
        number = int(port)
    except (TypeError, ValueError):
        _fail(f"llama_pool_port: {port!r} is not a port number")
    if not 1 <= number <= 65535:
        _fail(f"llama_pool_port: {port!r} is not a port number")
    return f"{text}:{number}"


def server_address(address: Any, port: Any) -> str:
    """A server line's ``ADDR:PORT`` (an IPv6 address in HAProxy's ``ipv6@`` form)."""
    text = str(address).strip().strip("[]")
    if not text or any(c.isspace() for c in text) or "," in text or "#" in text:
        _fail(f"backend address {address!r} is not an address or host name")
    if ":" in text:
        return f"ipv6@{text}:{int(port)}"
    return f"{text}:{int(port)}"


def tls_on(setting: Any, bind: Any) -> bool:
    """Whether the pool serves https: auto = beyond loopback."""
    if str(setting).strip().lower() == "auto":
        return not _is_loopback(str(bind))
    return _bool(setting, "llama_pool_tls")


_EXPOSURE = re.compile(r"Overall exposure level for \S+:\s*([0-9]+(?:\.[0-9]+)?)")


def exposure_score(text: Any) -> float | None:
    """The overall exposure level of ``systemd-analyze security UNIT``'s output."""
    m = _EXPOSURE.search(str(text))
    return float(m.group(1)) if m else None


def ca_copies(reads: Any) -> list[dict[str, Any]]:
    """The backends' CA certificates as the llamafleet_copies module keeps them (``<name>.crt``),
    from the role's reads on each TLS backend (slurp results, the backend in ``_b``): one not read
    (a backend that is down) keeps the copy from before, and where there is none the task fails
    with ``missing``."""
    out: list[dict[str, Any]] = []
    for r in reads or []:
        b = r["_b"]
        entry: dict[str, Any] = {
            "name": f"{b['name']}.crt",
            "missing": (
                f"{b['name']}: its CA certificate {b['ca_file']} could not be read "
                f"({r.get('msg') or 'host not reached'}) and the pool has no copy of it. "
                "Converge the servers first (the llama_server role makes the CA), then the pool."
            ),
        }
        if "content" in r:
            entry["content"] = base64.b64decode(r["content"]).decode("utf-8", errors="replace")
        out.append(entry)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llama_pool_backends": backends,
            "llama_pool_pools_of": pools_of,
            "llama_pool_leader": leader,
            "llama_pool_key_plan": key_plan,
            "llama_pool_digest": digest,
            "llama_pool_clients": clients,
            "llama_pool_client_digests": client_digests,
            "llama_pool_client_key_file": client_key_file,
            "llama_pool_ip_allow": ip_allow,
            "llama_pool_bind_address": bind_address,
            "llama_pool_scrapers": scrapers,
            "llama_pool_prometheus_allow": prometheus_allow,
            "llama_pool_server_address": server_address,
            "llama_pool_tls_on": tls_on,
            "llama_pool_exposure_score": exposure_score,
            "llama_pool_ca_copies": ca_copies,
        }

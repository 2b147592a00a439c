"""Filters of the monitoring role: the scrape targets from the inventory (every enabled
llama-server instance of every host of llama_servers with its address, scheme, CA and client key;
the mtail and node exporters of those hosts; HAProxy's exporter on the pool hosts), Prometheus'
configuration built from them, and the networks the units let in."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.module_utils.api_key import (
    InvalidKeyError,
    check_slurped,
)
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.rules.server import address_kind
    from llamafleet.units import IP_ALLOW_ENTRY as _IP_ALLOW
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None

#: inventory names become file, credential and label names
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}\Z")
_INSTANCE = re.compile(r"[a-z0-9][a-z0-9-]{0,40}\Z")
_CLIENT_NAME = re.compile(r"[A-Za-z0-9_.@/-]{1,200}\Z")
_DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+\Z")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _fail(msg: str) -> NoReturn:
    raise AnsibleFilterError(msg)


def _kind(host: str) -> str:
    """loopback, socket, any (a wildcard) or address: the validator's address classifier."""
    require(_IMPORT_ERROR, AnsibleFilterError)
    kind: str = address_kind(host)
    return kind


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _bool(value: Any, purpose: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    _fail(f"{purpose} must be true or false; got {value!r}")


def _int(value: Any, purpose: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        _fail(f"{purpose} must be a number; got {value!r}")
    return number


def _port(value: Any, purpose: str) -> int:
    number = _int(value, purpose)
    if not 0 < number < 65536:
        _fail(f"{purpose} must be a port number (1-65535); got {value!r}")
    return number


def _get(hv: Any, name: str, default: Any) -> Any:
    """A variable of a host (hostvars[host]), else the default."""
    try:
        value = hv[name]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def _hv(hostvars: Mapping[str, Any], host: str) -> Any:
    return hostvars.get(host) if hasattr(hostvars, "get") else hostvars[host]


def _url_host(address: str) -> str:
    bare = address.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def _reach(host: str, hv: Any, monitoring_host: str) -> str:
    """Where the monitoring host reaches ``host``: loopback when it is the same host, else the
    host's ansible_host (its inventory name without one)."""
    if host == monitoring_host:
        return "127.0.0.1"
    return str(_get(hv, "ansible_host", host)).strip().strip("[]")


def client_key_file(name: Any) -> str:
    """The file name of a client key in the llama_server role's ``<instance>.clients/``."""
    return str(name).replace("/", "__") + ".key"


def _tls(
    host: str, hv: Any, inst: Mapping[str, Any], server_defaults: Mapping[str, Any], kind: str
) -> tuple[bool, str]:
    """Whether an instance serves https, and its CA certificate when the llama_server role ran
    in this run (its llama_server_endpoints fact), else "": the fact wins, then the instance's
    ``tls``, then llama_server_tls (auto: https beyond loopback)."""
    name = str(inst.get("name"))
    endpoints = _get(hv, "llama_server_endpoints", {})
    endpoint = endpoints.get(name) if isinstance(endpoints, Mapping) else None
    if isinstance(endpoint, Mapping) and endpoint.get("scheme"):
        tls = str(endpoint["scheme"]) == "https"
        return tls, str(endpoint.get("ca_pem") or "") if tls else ""
    setting = inst.get("tls")
    if setting is None:
        setting = _get(hv, "llama_server_tls", server_defaults.get("llama_server_tls", "auto"))
    if str(setting).strip().lower() == "auto":
        return kind in ("any", "address"), ""
    return _bool(setting, f"{host}: tls of instance {name!r} (llama_server_tls)"), ""


def _instance_target(
    host: str,
    hv: Any,
    inst: Mapping[str, Any],
    server_defaults: Mapping[str, Any],
    monitoring_host: str,
) -> dict[str, Any]:
    name = str(inst.get("name", ""))
    if not _INSTANCE.match(name):
        _fail(f"{host}: llama_server_instances has an instance without a valid name: {inst!r}")
    listen = str(inst.get("host") or "127.0.0.1").strip()
    kind = _kind(listen)
    if kind == "socket":
        _fail(
            f"{host}: instance {name!r} listens on the Unix socket {listen}, which Prometheus "
            "does not scrape; give it an address (host: 0.0.0.0 and ip_allow), or enabled: false"
        )
    if kind == "loopback" and host != monitoring_host:
        _fail(
            f"{host}: instance {name!r} listens on {listen}, which the monitoring host "
            f"{monitoring_host} cannot reach; give it host: 0.0.0.0 (or an address of its own) "
            "and the monitoring host's address in its ip_allow (llama_server_ip_allow), or put "
            "the monitoring role on that host"
        )
    if host == monitoring_host and kind in ("loopback", "any"):
        address = "127.0.0.1"
    elif kind == "any":
        address = _reach(host, hv, monitoring_host)
    else:
        address = listen.strip("[]")
    port = _port(inst.get("port", 8080), f"{host}: port of instance {name!r}")
    tls, ca_pem = _tls(host, hv, inst, server_defaults, kind)
    own_ca = str(_get(hv, "llama_server_tls_ca_cert", "") or "")
    tls_dir = str(_get(hv, "llama_server_tls_dir", server_defaults.get("llama_server_tls_dir")))
    has_key = _bool(
        _get(hv, "llama_server_api_key", server_defaults.get("llama_server_api_key", True)),
        f"{host}: llama_server_api_key",
    )
    key_file = ""
    if has_key:
        client = str(
            _get(
                hv,
                "llama_server_monitoring_client_key",
                server_defaults.get("llama_server_monitoring_client_key", ""),
            )
        )
        if not _CLIENT_NAME.match(client):
            _fail(
                f"{host}: instance {name!r} requires an API key, and "
                f"llama_server_monitoring_client_key is {client!r}: name the client key the "
                "monitoring hosts scrape /metrics with (default 'monitoring')"
            )
        key_dir = str(_get(hv, "llama_server_key_dir", server_defaults.get("llama_server_key_dir")))
        key_file = f"{key_dir}/{name}.clients/{client_key_file(client)}"
    return {
        "host": host,
        "instance": name,
        "id": f"{host}_{name}",
        "address": address,
        "port": port,
        "target": f"{_url_host(address)}:{port}",
        "scheme": "https" if tls else "http",
        "tls": tls,
        "ca_pem": ca_pem,
        "ca_file": own_ca or f"{tls_dir}/ca.crt",
        "key_file": key_file,
    }


def targets(
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    settings: Mapping[str, Any],
    server_defaults: Mapping[str, Any],
    monitoring_host: str,
) -> dict[str, list[dict[str, Any]]]:
    """What ``monitoring_host`` scrapes, from the inventory: ``llama`` (each enabled instance of
    each host of ``settings.servers_group``: ``host``, ``instance``, ``id`` (host_instance, the
    name of its key and CA files), ``address``, ``port``, ``target``, ``scheme``, ``ca_pem`` (the
    llama_server_endpoints fact's CA, when that role ran in this run), ``ca_file`` (the CA on the
    server host, read otherwise), ``key_file`` (the monitoring client key on the server host, ""
    for an instance without keys)), ``mtail`` and ``node`` (each server host with that exporter,
    by its own monitoring_mtail / monitoring_node_exporter), ``haproxy`` (each host of
    ``settings.pools_group`` when ``settings.haproxy_port`` is not 0)."""
    if not _HOST_NAME.match(str(monitoring_host)):
        _fail(f"{monitoring_host!r}: a monitoring host needs an inventory name of [A-Za-z0-9_.-]")
    out: dict[str, list[dict[str, Any]]] = {"llama": [], "mtail": [], "node": [], "haproxy": []}
    group = str(settings.get("servers_group", "llama_servers"))
    for host in sorted(groups.get(group) or []):
        if not _HOST_NAME.match(host):
            _fail(f"{host}: an inventory name of letters, digits, '.', '_' and '-' is needed")
        hv = _hv(hostvars, host)
        instances = _get(hv, "llama_server_instances", [])
        if not isinstance(instances, (list, tuple)):
            _fail(f"{host}: llama_server_instances must be a list; got {instances!r}")
        for inst in instances:
            if not isinstance(inst, Mapping):
                _fail(f"{host}: llama_server_instances holds {inst!r}, not a mapping")
            if not _bool(inst.get("enabled", True), f"{host}: enabled of {inst.get('name')!r}"):
                continue
            out["llama"].append(
                _instance_target(host, hv, inst, server_defaults, str(monitoring_host))
            )
        address = _reach(host, hv, str(monitoring_host))
        for kind, flag, port_var in (
            ("mtail", "monitoring_mtail", "monitoring_mtail_port"),
            ("node", "monitoring_node_exporter", "monitoring_node_exporter_port"),
        ):
            if not _bool(_get(hv, flag, settings.get(kind)), f"{host}: {flag}"):
                continue
            port = _port(_get(hv, port_var, settings.get(f"{kind}_port")), f"{host}: {port_var}")
            out[kind].append(
                {
                    "host": host,
                    "address": address,
                    "port": port,
                    "target": f"{_url_host(address)}:{port}",
                }
            )
    haproxy_port = _int(settings.get("haproxy_port", 0), "monitoring_haproxy_port")
    if haproxy_port:
        _port(haproxy_port, "monitoring_haproxy_port")
        for host in sorted(groups.get(str(settings.get("pools_group", "llama_pools"))) or []):
            address = _reach(host, _hv(hostvars, host), str(monitoring_host))
            out["haproxy"].append(
                {
                    "host": host,
                    "address": address,
                    "port": haproxy_port,
                    "target": f"{_url_host(address)}:{haproxy_port}",
                }
            )
    return out


def _duration(value: Any, purpose: str) -> str:
    text = str(value).strip()
    if not _DURATION.match(text):
        _fail(f"{purpose} must be a Prometheus duration such as 15s, 1m or 15d; got {value!r}")
    return text


def prometheus_config(found: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """prometheus.yml as data: one scrape job per llama-server instance (its own key, as the
    bearer token from the unit's credentials directory, and CA), labelled llama_host and
    llama_instance with job llama_server; llama_mtail, node and haproxy jobs labelled llama_host;
    Prometheus itself. ``settings``: scrape_interval, evaluation_interval, scrape_timeout,
    rules_file, listen, credentials_dir, ca_dir."""
    interval = _duration(settings.get("scrape_interval"), "monitoring_scrape_interval")
    timeout = _duration(settings.get("scrape_timeout"), "monitoring_scrape_timeout")
    creds = str(settings.get("credentials_dir", "/run/credentials/prometheus.service"))
    ca_dir = str(settings.get("ca_dir"))
    listen = str(settings.get("listen"))
    jobs: list[dict[str, Any]] = [
        {"job_name": "prometheus", "static_configs": [{"targets": [_self_target(listen)]}]}
    ]
    for t in found.get("llama", []):
        job: dict[str, Any] = {
            "job_name": f"llama_server_{t['id']}",
            "scheme": t["scheme"],
            "metrics_path": "/metrics",
        }
        if t["key_file"]:
            job["authorization"] = {"credentials_file": f"{creds}/{t['id']}"}
        if t["tls"]:
            job["tls_config"] = {"ca_file": f"{ca_dir}/{t['id']}.crt"}
        job["static_configs"] = [
            {
                "targets": [t["target"]],
                "labels": {"llama_host": t["host"], "llama_instance": t["instance"]},
            }
        ]
        # one job per instance (each its own key and CA), all of them job="llama_server"
        job["relabel_configs"] = [{"target_label": "job", "replacement": "llama_server"}]
        jobs.append(job)
    for kind, job_name in (("mtail", "llama_mtail"), ("node", "node"), ("haproxy", "haproxy")):
        group = [
            {"targets": [t["target"]], "labels": {"llama_host": t["host"]}}
            for t in found.get(kind, [])
        ]
        if group:
            jobs.append({"job_name": job_name, "static_configs": group})
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": timeout,
            "evaluation_interval": _duration(
                settings.get("evaluation_interval"), "monitoring_evaluation_interval"
            ),
        },
        "rule_files": [str(settings.get("rules_file"))],
        "scrape_configs": jobs,
    }


def _self_target(listen: str) -> str:
    """Where Prometheus scrapes itself: its listen address (a wildcard as loopback)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        _fail(f"monitoring_listen must be ADDRESS:PORT such as 127.0.0.1:9090; got {listen!r}")
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0", "::"):
        bare = "127.0.0.1"
    return f"{_url_host(bare)}:{port}"


def _networks(networks: Any, purpose: str) -> list[str]:
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
        if text not in out:
            out.append(text)
    return out


def ip_allow(networks: Any, listen: Any, found: Mapping[str, Any]) -> list[str]:
    """IPAddressAllow= of prometheus.service besides localhost: ``networks``
    (monitoring_ip_allow, the web UI's clients), then every target's address (Prometheus
    connects to them). Listening beyond loopback needs the clients named; a target reached by
    name needs ``any`` (the unit filters by address)."""
    out = _networks(networks, "monitoring_ip_allow")
    host = str(listen).rpartition(":")[0].strip("[]")
    if not out and _kind(host) not in ("loopback", "socket"):
        _fail(
            f"monitoring_ip_allow: Prometheus listens on {listen} but names no client networks; "
            "its unit drops every packet except from localhost and the targets "
            "(IPAddressDeny=any). List the networks of its users (e.g. ['10.0.0.0/8']), or "
            "listen on 127.0.0.1:9090"
        )
    for kind in ("llama", "mtail", "node", "haproxy"):
        for t in found.get(kind, []):
            address = str(t["address"])
            if _is_ip(address):
                if _kind(address) != "loopback" and address not in out:
                    out.append(address)
            elif "any" not in out:
                _fail(
                    f"{t['host']}: scraped at {address!r}, a name: prometheus.service lets "
                    "packets through by address; set ansible_host to the host's IP address, or "
                    "monitoring_ip_allow: ['any']"
                )
    return out


def exporter_allow(
    networks: Any,
    monitoring_hosts: Iterable[str],
    hostvars: Mapping[str, Any],
    this_host: str,
) -> list[str]:
    """IPAddressAllow= of an exporter's unit on a server host besides localhost:
    ``networks`` (monitoring_exporter_ip_allow), then the address of each monitoring host (its
    ansible_host, else its default IPv4 address from gathered facts); this host itself is
    localhost."""
    out = _networks(networks, "monitoring_exporter_ip_allow")
    for host in sorted(monitoring_hosts):
        if host == this_host:
            continue
        hv = _hv(hostvars, host)
        address = str(_get(hv, "ansible_host", "")).strip("[]")
        if not _is_ip(address):
            facts = _get(hv, "ansible_facts", {})
            ipv4 = facts.get("default_ipv4", {}) if isinstance(facts, Mapping) else {}
            address = str(ipv4.get("address", "")) if isinstance(ipv4, Mapping) else ""
        if _is_ip(address):
            if address not in out:
                out.append(address)
        elif "any" not in out:
            _fail(
                f"monitoring host {host}: no IP address known (ansible_host is not one and its "
                "facts were not gathered): the exporters' units let packets in by address; set "
                "ansible_host to its IP address, or list its network in "
                "monitoring_exporter_ip_allow"
            )
    return out


def key_copies(reads: Any) -> list[dict[str, Any]]:
    """The monitoring keys as the llamafleet_copies module keeps them (``<id>.key``), from the
    role's reads of each instance's key file on its server host (slurp results, the target in
    ``_t``): each key checked as the llama_server role checks its own; a key not read keeps the
    copy from before, and where there is none the task fails with ``missing``."""
    out: list[dict[str, Any]] = []
    for r in reads or []:
        t = r["_t"]
        entry: dict[str, Any] = {
            "name": f"{t['id']}.key",
            "missing": (
                f"{t['host']}: the monitoring key of instance {t['instance']} ({t['key_file']}) "
                f"could not be read ("
                f"{'host not reached' if r.get('unreachable') else 'no such file'}) and this "
                "host has no copy of it. Converge the servers with this host in the inventory "
                "group monitoring (site.yml or playbooks/rollout.yml: the llama_server role adds "
                "the client key llama_server_monitoring_client_key to every instance and "
                "restarts it once), then run this again."
            ),
        }
        if "content" in r:
            try:
                key = check_slurped(r["content"], f"{t['host']}: {t['key_file']}")
            except InvalidKeyError as exc:
                _fail(str(exc))
            entry["content"] = key + "\n"
        out.append(entry)
    return out


def ca_copies(tls: Any, reads: Any) -> list[dict[str, Any]]:
    """The CA certificates of the https instances as llamafleet_copies keeps them
    (``<id>.crt``): the llama_server_endpoints fact's when the servers ran in this run, else what
    the role read on the server host; one not read keeps the copy from before."""
    import base64

    read = {
        r["_t"]["id"]: base64.b64decode(r["content"]).decode("utf-8", errors="replace")
        for r in reads or []
        if "content" in r
    }
    failed = {r["_t"]["id"]: r.get("msg") or "host not reached" for r in reads or []}
    out: list[dict[str, Any]] = []
    for t in tls or []:
        entry: dict[str, Any] = {
            "name": f"{t['id']}.crt",
            "missing": (
                f"{t['host']}: the CA certificate of instance {t['instance']} ({t['ca_file']}) "
                f"could not be read ({failed.get(t['id'], 'not read')}) and this host has no copy "
                "of it. Converge the servers first (the llama_server role makes the CA), then "
                "the monitoring."
            ),
        }
        pem = t.get("ca_pem") or read.get(t["id"])
        if pem:
            entry["content"] = pem
        out.append(entry)
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "monitoring_targets": targets,
            "monitoring_prometheus_config": prometheus_config,
            "monitoring_ip_allow": ip_allow,
            "monitoring_exporter_allow": exporter_allow,
            "monitoring_key_copies": key_copies,
            "monitoring_ca_copies": ca_copies,
        }

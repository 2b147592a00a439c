"""Filters every llamafleet role shares: what kind of address a llama-server listens on, decided by
the validator's own classifier (llamafleet.rules.server: address_kind, is_loopback and the
wildcard addresses, the ones the rules LS007, CC010 and the cross-file checks use), and the
decisions that follow from it: where the host's own requests go, whether an instance serves TLS,
the names of its certificate, the networks its unit lets in."""

from __future__ import annotations

import ipaddress
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llamafleet.fleet.plugins.module_utils.tls_names import (
    DNS_NAME as _DNS_NAME,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.tls_names import san_problem
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.validator import require

try:
    from llamafleet.rules.cross import DEFAULT_HOST
    from llamafleet.rules.server import address_kind as _address_kind
    from llamafleet.units import IP_ALLOW_ENTRY as _IP_ALLOW
    from llamafleet.units import unit_value_problem as _unit_value_problem
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _need_llamafleet() -> None:
    require(_IMPORT_ERROR, AnsibleFilterError)


def address_kind(host: Any) -> str:
    """What a llama-server ``--host`` (or a client's server address) is: ``socket``,
    ``loopback`` (the default too), ``any`` (0.0.0.0, ::) or ``address``, as the validator's
    cross-file checks see it (llamafleet.rules.server.address_kind)."""
    _need_llamafleet()
    return _address_kind(None if host is None else str(host))


def connect_host(host: Any) -> str:
    """Where the host's own requests to an instance listening on ``host`` go, as the host part of
    a URL: 127.0.0.1 for a wildcard address, the default and a loopback name such as
    ``localhost`` (names are not resolved); an IPv6 address in brackets (``[::1]``); anything else
    as given (a socket path too)."""
    kind = address_kind(host)
    text = "" if host is None else str(host).strip()
    if kind == "socket":
        return text
    if kind == "any" or not text:
        return DEFAULT_HOST
    bare = text.strip("[]")
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        return DEFAULT_HOST if kind == "loopback" else bare
    return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def tls_on(setting: Any, host: Any = "127.0.0.1", purpose: str = "llama_server_tls") -> bool:
    """Whether an instance serves TLS: ``setting`` is llama_server_tls (auto, true, false) or an
    instance's ``tls``; auto means TLS for an instance that listens beyond loopback (not on a
    loopback address, nor on a Unix socket)."""
    if isinstance(setting, bool):
        return setting
    text = str(setting).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text == "auto":
        return address_kind(host) in ("any", "address")
    raise AnsibleFilterError(f"{purpose} must be auto, true or false; got {setting!r}")


#: in every instance certificate: the role's own requests go to 127.0.0.1 (connect_host)
TLS_LOOPBACK_SANS = ("IP:127.0.0.1", "IP:::1", "DNS:localhost")


def tls_sans(names: Any, instance: str = "?") -> list[str]:
    """The subjectAltName entries of an instance certificate: 127.0.0.1, ::1 and localhost (the
    role's own requests), then each of ``names`` (listen address, ansible_host, FQDN, ...) as
    ``IP:`` or ``DNS:``, without duplicates, in order. Empty names, wildcard addresses and socket
    paths are skipped; anything that is neither an IP address nor a DNS name is refused."""
    purpose = f"instance {instance!r}: TLS certificate name"
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise AnsibleFilterError(f"{purpose}s: expected a list, got {names!r}")
    out = list(TLS_LOOPBACK_SANS)
    for name in names:
        if name is None:
            continue
        text = str(name).strip().strip("[]")
        if not text or address_kind(text) in ("any", "socket"):
            continue
        try:
            entry = f"IP:{ipaddress.ip_address(text).compressed}"
        except ValueError:
            if not _DNS_NAME.match(text):
                raise AnsibleFilterError(
                    f"{purpose}: {text!r} is neither an IP address nor a DNS name "
                    "(llama_server_tls_sans, ansible_host, the listen address)"
                ) from None
            entry = "DNS:" + text.rstrip(".").lower()
        if entry not in out:
            out.append(entry)
    return out


def unit_values(values: Any) -> dict[str, Any]:
    """Return `values` ({variable: value}, each rendered into a systemd unit by the calling role)
    unchanged, or fail naming the first variable whose value holds a control character or line
    end, or ends in a backslash (llamafleet.units.unit_value_problem, the check the validator and
    every role apply to what they render into a unit)."""
    _need_llamafleet()
    if not isinstance(values, dict):
        raise AnsibleFilterError(f"unit values: expected a mapping of variables, got {values!r}")
    for name, value in values.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            problem = _unit_value_problem(item)
            if problem:
                raise AnsibleFilterError(f"{name}: {problem}")
    return dict(values)


def name_constraints(sans: Any) -> str:
    """The nameConstraints extension of a CA that signs only certificates for the DNS names of
    ``sans`` (the subjectAltName entries of tls_sans, or lists of them):
    ``critical,permitted;DNS:<name>`` for each DNS name (which also permits its subdomains, as
    X.509 defines it). A certificate this CA signs for any other name (say, api.anthropic.com)
    fails verification in OpenSSL, Node and Claude Code's own TLS stack: a client that trusts the
    CA for one server trusts it for no other site it reaches by name.

    ``IP:`` entries are checked but not constrained: Claude Code's TLS stack refuses every
    certificate of a CA with an IP address constraint ("UNSUPPORTED_CONSTRAINT_TYPE"), and with
    no IP subtree the CA's certificates for addresses verify as before. Without a DNS name (tls_sans
    always adds localhost) the only permitted name is ``invalid`` (RFC 6761: never resolves)."""
    flat: list[str] = []
    for item in sans if isinstance(sans, (list, tuple)) else [sans]:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    out: list[str] = []
    for entry in flat:
        text = str(entry).strip()
        problem = san_problem(text)
        if problem:
            raise AnsibleFilterError(f"name constraints: {problem}")
        kind, _, value = text.partition(":")
        if kind == "IP":
            continue
        item = f"permitted;DNS:{value.lower()}"
        if item not in out:
            out.append(item)
    if not flat:
        raise AnsibleFilterError("name constraints: no names to permit")
    return "critical," + ",".join(out or ["permitted;DNS:invalid"])


def ip_allow(networks: Any, instance: str = "?", host: Any = "127.0.0.1") -> list[str]:
    """The IPAddressAllow= entries of an instance besides localhost: a list of addresses, CIDR
    ranges or systemd's names (any, localhost, link-local, multicast). An instance that listens
    beyond loopback must name its client networks (the unit drops every other packet); one that
    listens on a single address of its own also lets that address in (the role's health check)."""
    purpose = f"instance {instance!r}: ip_allow (llama_server_ip_allow)"
    if isinstance(networks, (str, bytes)) or not isinstance(networks, (list, tuple)):
        raise AnsibleFilterError(
            f"{purpose} must be a list such as ['10.0.0.0/8', '192.168.1.0/24']; got {networks!r}"
        )
    out = []
    for net in networks:
        text = str(net)
        if not _IP_ALLOW.match(text):
            raise AnsibleFilterError(
                f"{purpose}: {text!r} is not an address, a CIDR range (10.0.0.0/8, fd00::/8) "
                "or one of any, localhost, link-local, multicast"
            )
        out.append(text)
    kind = address_kind(host)
    listen = str(host).strip("[]")
    if out and kind == "address" and _IP_ALLOW.match(listen):
        out.append(listen)  # the host's own requests to that address (the role's health check)
    if not out and kind in ("any", "address"):
        raise AnsibleFilterError(
            f"{purpose}: the instance listens on {host} but names no client networks; its unit "
            "drops every packet except from localhost (IPAddressDeny=any). List the networks of "
            "its clients (e.g. ip_allow: ['10.0.0.0/8']), or ['any'] to serve every address."
        )
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llamafleet_address_kind": address_kind,
            "llamafleet_connect_host": connect_host,
            "llamafleet_tls_on": tls_on,
            "llamafleet_tls_sans": tls_sans,
            "llamafleet_name_constraints": name_constraints,
            "llamafleet_unit_values": unit_values,
            "llamafleet_ip_allow": ip_allow,
        }

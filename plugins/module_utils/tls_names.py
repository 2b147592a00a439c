# Apache-2.0
"""The names a llamafleet certificate may carry, checked the same way where a role computes them
(the llamafleet_tls_sans and llamafleet_name_constraints filters) and where the llamafleet_tls
module writes them into an OpenSSL extension file: a DNS name holds nothing that could end an
entry of that file (comma, blank, newline), so a value cannot add a name or a line."""

from __future__ import annotations

import ipaddress
import re

#: one label of a DNS name (underscores allowed: some internal names have them)
LABEL = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}"
#: a DNS name, an optional final dot
DNS_NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*\.?\Z")


def san_problem(entry: object) -> str | None:
    """None when ``entry`` is a subjectAltName entry ``DNS:<name>`` or ``IP:<address>``, else
    what is wrong with it."""
    kind, _, value = str(entry).partition(":")
    if kind == "DNS" and DNS_NAME.match(value):
        return None
    if kind == "IP":
        try:
            ipaddress.ip_address(value)
            return None
        except ValueError:
            return f"{entry!r} is not an address"
    return f"{entry!r} is neither DNS:<name> nor IP:<address>"

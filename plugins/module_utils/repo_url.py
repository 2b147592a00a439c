# Apache-2.0
"""Repository URLs as the llama_cpp role judges them: the parts of a scheme://authority URL and
whether it carries a secret. One definition for the role's filters (llama_cpp_repo_problem,
repo_scrub, llama_cpp_repo_has_credentials) and its state module (llama_cpp_state reads the
checkout's .git/config remotes with it)."""

from __future__ import annotations

import re
from typing import Any

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
#: a remote's url line of a .git/config
CONFIG_URL = re.compile(r"^\s*url\s*=\s*(\S+)", re.MULTILINE)


def authority(url: str) -> tuple[str, str, str, str] | None:
    """(scheme, userinfo or "", host part, rest) of a scheme://authority/... URL, else None."""
    m = SCHEME.match(url)
    if not m:
        return None
    rest = url[m.end() :]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, _, host = authority.rpartition("@")
    return m.group(1), userinfo if "@" in authority else "", host, tail


def has_credentials(url: Any) -> bool:
    """Whether a URL carries a secret in its userinfo: any userinfo of an http(s) URL (a token is
    often given as the user name), a password for other schemes."""
    parts = authority(str(url))
    if parts is None or not parts[1]:
        return False
    if parts[0].lower() in ("http", "https"):
        return True
    return ":" in parts[1]


def config_has_credentials(text: str) -> bool:
    """Whether a .git/config (its text) has a remote whose URL carries a secret."""
    return any(has_credentials(m.group(1)) for m in CONFIG_URL.finditer(text))

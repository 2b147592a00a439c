"""Per-user keys of an HAProxy pool (the llama_pool and claude_code roles).

Each user of a pool gets a key of their own, derived from the pool key (the key the backends
accept, kept root-only on them) and the user's client name (``HOST/USER``, as the claude_code role
names them): ``HMAC-SHA256(pool key, "llamafleet pool user\\0" + name)`` in hex. HAProxy accepts
the SHA-256 of each listed user's key (and of the pool key itself, for the operators' tools), and
sends the backends the pool key in their place. So every pool host of the same backends accepts
the same user keys without any copy of them, a user who leaves the list is refused at once (their
digest is gone), and one user's key says nothing about another's without the pool key."""

from __future__ import annotations

import hashlib
import hmac
import re

#: pool users: HOST/USER, or HOST/(managed) for a host's managed settings file
CLIENT_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}/(?:[A-Za-z0-9_.@-]{1,100}|\(managed\))\Z")
_CONTEXT = b"llamafleet pool user\x00"


def user_key(pool_key: str, client: str) -> str:
    """The key of pool user ``client`` (``HOST/USER``) for a pool whose key is ``pool_key``."""
    key = str(pool_key).strip()
    name = str(client).strip()
    if len(key) < 16:
        raise ValueError("the pool key is shorter than 16 characters")
    if not CLIENT_NAME.match(name):
        raise ValueError(
            f"pool user {client!r}: a pool user is HOST/USER (letters, digits and _.@-)"
        )
    return hmac.new(key.encode(), _CONTEXT + name.encode(), hashlib.sha256).hexdigest()


def digest(key: str) -> str:
    """A key's SHA-256 as HAProxy's ``sha2(256),hex`` writes it (readers.haproxy.key_digest)."""
    from llamafleet.readers.haproxy import key_digest

    return key_digest(str(key).strip())

# Apache-2.0
"""One API key as the collection's roles accept it, wherever they read one (the llama_server
role's key files, and the copies other roles read from a server host): what a host hands over
goes into a credential, a client's settings and HTTP headers on other machines, so it is checked
before it is used."""

from __future__ import annotations

import re

MAX_KEY = 4096
#: one key: printable ASCII without blanks (what llama-server's --api-key-file reads as one key
#: per line, and what a client may send in an HTTP header)
KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY}}}\Z")
WHAT = f"one line of 1 to {MAX_KEY} printable ASCII characters without blanks"


class InvalidKeyError(ValueError):
    """A key file that does not hold one key; the message names it and the fix."""


def check_key(text: str, where: str) -> str:
    """The key ``text`` holds (blanks around it dropped), or InvalidKeyError naming ``where``."""
    key = text.strip()
    if not KEY.match(key):
        raise InvalidKeyError(
            f"{where} does not hold one key ({WHAT}): a second line would be a second key the "
            "server accepts, and clients send the key in an HTTP header. Write one key there, or "
            "remove the file and the llama_server role makes a new one"
        )
    return key


def check_slurped(content: str, where: str) -> str:
    """The key of a key file as the slurp module returns it (base64), checked as check_key does;
    InvalidKeyError names ``where`` (a file that is not base64 too)."""
    import base64
    import binascii

    try:
        text = base64.b64decode(str(content), validate=True).decode("ascii", errors="replace")
    except (binascii.Error, ValueError) as exc:
        raise InvalidKeyError(f"{where}: not base64 (as slurp returns it): {exc}") from exc
    return check_key(text, where)

"""Small value helpers shared by the readers and the rules: unresolved values and safe URLs."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import SplitResult, urlsplit


class Unresolved(str):
    """A value the validator cannot know: it holds a shell or systemd variable that is set outside
    the file (``$MODEL_CTX``, ``${HOST}``, ``$(nproc)``, ``%i``). Its text is what was written.
    Rules that need the value stay silent; the value is never "invalid"."""

    __slots__ = ()


def is_unresolved(value: object) -> bool:
    return isinstance(value, Unresolved)


@lru_cache(maxsize=512)
def split_url(url: str) -> SplitResult | None:
    """``urlsplit`` of ``url``, or None when it is not a URL Python can split (``http://[::1:8080``
    raises in urlsplit) or its port is not a number in 0..65535."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return None
    return parts


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable base URL (``http(s)://host[:port]``), or None."""
    text = url.strip()
    if not text:
        return None
    parts = split_url(text)
    if parts is None:
        try:
            parts = urlsplit(text)
        except ValueError as exc:
            return f"is not a valid URL ({exc})"
        try:
            parts.port  # noqa: B018
        except ValueError as exc:
            return f"has an invalid port ({exc})"
    if parts.scheme not in ("http", "https"):
        return "does not start with http:// or https://"
    if not parts.hostname:
        return "has no host name"
    return None

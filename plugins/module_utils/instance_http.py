# Apache-2.0
"""A request to a llama-server instance of this host (its /health, /metrics, /slots, or a POST
to /v1/messages), as the modules that wait for an instance, watch it drain or gate its prompt
cache send it: through Ansible's open_url, the
certificate and host name checked against the instance's CA (the system's CAs without one),
never through a proxy of the environment, never with ~/.netrc's credentials, and no redirect
followed, so an instance key in `headers` goes to the instance and nowhere else."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.urls import ConnectionError as UrlsError
from ansible.module_utils.urls import open_url

__all__ = ["UrlsError", "open_instance"]


def open_instance(
    url: str,
    ca_path: str | None,
    timeout: float,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> Any:
    """The open response to a GET of `url` (a POST of `data` when given; a context manager);
    raises urllib's HTTPError for an HTTP error status, URLError or UrlsError when there is no
    answer."""
    return open_url(
        url,
        data=data,
        method="POST" if data is not None else "GET",
        headers=headers or {},
        timeout=timeout,
        ca_path=ca_path or None,
        validate_certs=True,
        use_proxy=False,
        use_netrc=False,
        follow_redirects="none",
    )

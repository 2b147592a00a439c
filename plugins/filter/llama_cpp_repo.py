# Apache-2.0
"""Filters of the llama_cpp role: which repository URLs are accepted (transport, credentials), a
URL without its credentials, and the git configuration that hands a token to git."""

from __future__ import annotations

import base64
import re
from typing import Any

from ansible_collections.llamafleet.fleet.plugins.module_utils.repo_url import (
    SCHEME,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.repo_url import (
    authority as _authority,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.repo_url import (
    has_credentials as _has_credentials,
)

SECURE_SCHEMES = ("https", "ssh", "git+ssh", "ssh+git", "file")
INSECURE_SCHEMES = ("http", "git")
# git's scp-like syntax: [user@]host:path, where no slash comes before the first colon
SCP_LIKE = re.compile(
    r"(?:(?P<user>[A-Za-z0-9._~-]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?!//)"
)

ACCEPTED = "https://, ssh://, git@host:path, file:// or an absolute local path"


def repo_scrub(url: Any) -> str:
    """The URL without the secret in its userinfo (all of it for http(s), the password
    otherwise), for logs, manifests and a .git/config written by earlier versions."""
    text = str(url)
    if not _has_credentials(text):
        return text
    parts = _authority(text)
    if parts is None:
        raise AssertionError("expected parts is not None")
    scheme, userinfo, host, tail = parts
    keep = "" if scheme.lower() in ("http", "https") else userinfo.split(":", 1)[0] + "@"
    return f"{scheme}://{keep}{host}{tail}"


def repo_problem(repo: Any, allow_insecure: Any = False, token: Any = "") -> str:
    """Why llama_cpp_repo is refused ("" when it is accepted)."""
    if not isinstance(repo, str) or not repo.strip():
        return "llama_cpp_repo is empty"
    if any(ord(c) < 33 or ord(c) == 127 or c in "\"\\'" for c in repo):
        return "llama_cpp_repo contains whitespace, quotes, backslashes or control characters"
    shown = repo_scrub(repo)
    m = SCHEME.match(repo)
    if m:
        scheme = m.group(1).lower()
        if _has_credentials(repo):
            return (
                f"llama_cpp_repo ({shown}) carries credentials in the URL; they would be written "
                "into the checkout's .git/config and the logs. Give the URL without them and put "
                "the token in llama_cpp_repo_token (kept out of logs, handed to git only for the "
                "clone and fetch), or use an ssh:// URL with a deploy key"
            )
        if scheme in INSECURE_SCHEMES:
            if not _truthy(allow_insecure):
                return (
                    f"llama_cpp_repo ({shown}) uses {scheme}://, which neither encrypts nor "
                    "authenticates: anyone on the path can hand the build other source code, "
                    "compiled and installed for every host. Use https:// or ssh://, or set "
                    "llama_cpp_allow_insecure_transport: true (test networks only)"
                )
        elif scheme not in SECURE_SCHEMES:
            return f"llama_cpp_repo ({shown}): the scheme {scheme}:// is not accepted ({ACCEPTED})"
        if token and scheme != "https":
            return (
                f"llama_cpp_repo_token is only sent over https:// (llama_cpp_repo is {shown}); "
                "use a deploy key for ssh://"
            )
        return ""
    if "::" in repo.split("/", 1)[0]:
        return f"llama_cpp_repo ({repo}): git remote helpers (transport::address) are not accepted"
    if repo.startswith("/"):
        return "llama_cpp_repo_token is not used with a local path" if token else ""
    if SCP_LIKE.match(repo):
        return "llama_cpp_repo_token is only sent over https://" if token else ""
    return f"llama_cpp_repo ({repo}) is not accepted: use {ACCEPTED}"


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def repo_auth_config(repo: Any, token: Any, user: Any = "x-access-token") -> str:
    """A git config file that sends the token as HTTP Basic authentication (user:token) with every
    request to the repository's URL, and to nothing else:

        [http "https://host/owner/repo.git"]
            extraHeader = "Authorization: Basic base64(user:token)"
    """
    url = str(repo)
    if repo_problem(url, True, token) or not SCHEME.match(url):
        raise ValueError("llama_cpp_repo is not an https:// URL that a token can be sent to")
    secret = f"{user}:{token}".encode()
    if any(c in f"{user}:{token}" for c in "\n\r\0"):
        raise ValueError("llama_cpp_repo_token or llama_cpp_repo_token_user holds a line break")
    header = "Authorization: Basic " + base64.b64encode(secret).decode("ascii")
    return f'[http "{url}"]\n\textraHeader = "{header}"\n'


def repo_local_path(repo: Any) -> str:
    """The directory of a local repository (an absolute path or a file:// URL), else "": git
    refuses to read a repository another account owns unless it is listed in safe.directory."""
    text = str(repo)
    if text.startswith("/"):
        path = text
    elif text.lower().startswith("file://"):
        rest = text[len("file://") :]
        path = rest if rest.startswith("/") else "/" + rest.split("/", 1)[-1]
    else:
        return ""
    return path.rstrip("/") or "/"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llama_cpp_repo_problem": repo_problem,
            "llama_cpp_repo_scrub": repo_scrub,
            "llama_cpp_repo_has_credentials": _has_credentials,
            "llama_cpp_repo_auth_config": repo_auth_config,
            "llama_cpp_repo_local_path": repo_local_path,
        }

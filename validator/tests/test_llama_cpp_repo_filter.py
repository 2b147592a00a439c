"""The llama_cpp role's repository checks (plugins/filter/llama_cpp_repo.py):
which transports are accepted, that credentials in the URL are refused (and never echoed), how
an old .git/config URL is scrubbed, and the git configuration that carries a token."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from conftest import load_ansible_plugin, plugin_path

PLUGIN = plugin_path("filter", "llama_cpp_repo")

pytestmark = pytest.mark.skipif(
    not PLUGIN.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def f() -> dict[str, Any]:
    filters: dict[str, Any] = load_ansible_plugin(PLUGIN).FilterModule().filters()
    return filters


@pytest.mark.parametrize(
    "repo",
    [
        "https://github.com/TheTom/llama-cpp-turboquant.git",
        "https://gitlab.example.com:8443/group/llama.cpp.git",
        "ssh://git@github.com/ggml-org/llama.cpp.git",
        "ssh://git@[2001:db8::1]:2222/llama.cpp.git",
        "git+ssh://git@host/x.git",
        "git@github.com:ggml-org/llama.cpp.git",
        "github.com:ggml-org/llama.cpp.git",
        "/srv/git/llama.cpp.git",
        "file:///srv/git/llama.cpp.git",
    ],
)
def test_accepted(f: dict[str, Any], repo: str) -> None:
    assert f["llama_cpp_repo_problem"](repo) == ""


@pytest.mark.parametrize(
    "repo", ["http://10.131.7.1:8731/git/llama.cpp.git", "git://github.com/ggml-org/llama.cpp.git"]
)
def test_insecure_transport_needs_the_opt_in(f: dict[str, Any], repo: str) -> None:
    problem = f["llama_cpp_repo_problem"](repo)
    assert "llama_cpp_allow_insecure_transport" in problem and "neither encrypts" in problem
    assert f["llama_cpp_repo_problem"](repo, True) == ""
    assert f["llama_cpp_repo_problem"](repo, "true") == ""
    assert f["llama_cpp_repo_problem"](repo, "false") != ""


@pytest.mark.parametrize(
    "repo",
    [
        "https://user:ghp_SECRETTOKEN@github.com/org/repo.git",
        "https://ghp_SECRETTOKEN@github.com/org/repo.git",
        "http://oauth2:ghp_SECRETTOKEN@gitlab.local/org/repo.git",
        "ssh://git:ghp_SECRETTOKEN@host/repo.git",
    ],
)
def test_credentials_in_the_url_refused_without_echoing_them(f: dict[str, Any], repo: str) -> None:
    problem = f["llama_cpp_repo_problem"](repo, True)
    assert "llama_cpp_repo_token" in problem and "credentials" in problem
    assert "SECRETTOKEN" not in problem


@pytest.mark.parametrize(
    ("repo", "why"),
    [
        ("ext::sh -c touch% /tmp/pwned", "whitespace"),
        ("ext::ssh", "remote helpers"),
        ("fd::3", "remote helpers"),
        ("ftp://host/repo.git", "scheme ftp"),
        ("relative/path", "not accepted"),
        ("", "empty"),
        ('https://host/x"y', "quotes"),
        ("https://host/x\ny", "control"),
    ],
)
def test_other_urls_refused(f: dict[str, Any], repo: str, why: str) -> None:
    assert why in f["llama_cpp_repo_problem"](repo, True)


def test_token_only_over_https(f: dict[str, Any]) -> None:
    problem = f["llama_cpp_repo_problem"]
    assert problem("https://github.com/org/repo.git", False, True) == ""
    assert "only sent over https" in problem("http://host/repo.git", True, True)
    assert "only sent over https" in problem("ssh://git@host/repo.git", False, True)
    assert "only sent over https" in problem("git@host:repo.git", False, True)
    assert "local path" in problem("/srv/git/repo.git", False, True)


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("https://user:tok@github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("https://tok@github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("http://a:b@10.0.0.1:8731/git/x.git", "http://10.0.0.1:8731/git/x.git"),
        ("ssh://git:pw@host/repo.git", "ssh://git@host/repo.git"),
        ("ssh://git@host/repo.git", "ssh://git@host/repo.git"),
        ("https://github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
        ("https://github.com/org/a@b.git", "https://github.com/org/a@b.git"),
    ],
)
def test_scrub(f: dict[str, Any], url: str, clean: str) -> None:
    assert f["llama_cpp_repo_scrub"](url) == clean
    assert f["llama_cpp_repo_has_credentials"](url) == (url != clean)


def test_auth_config_is_a_basic_header_for_the_repository_url_only(f: dict[str, Any]) -> None:
    conf = f["llama_cpp_repo_auth_config"]("https://github.com/org/repo.git", "s3cret")
    assert conf.startswith('[http "https://github.com/org/repo.git"]\n')
    value = base64.b64encode(b"x-access-token:s3cret").decode()
    assert f'extraHeader = "Authorization: Basic {value}"' in conf
    assert "s3cret" not in conf
    gitlab = f["llama_cpp_repo_auth_config"]("https://gitlab.local/g/r.git", "t", "oauth2")
    assert base64.b64encode(b"oauth2:t").decode() in gitlab


@pytest.mark.parametrize(
    ("repo", "token"),
    [
        ("ssh://git@host/repo.git", "t"),
        ("/srv/git/repo.git", "t"),
        ("https://u:p@host/repo.git", "t"),
        ("https://host/repo.git", "t\n[core]\n\tsshCommand = evil"),
    ],
)
def test_auth_config_refused(f: dict[str, Any], repo: str, token: str) -> None:
    with pytest.raises(ValueError):
        f["llama_cpp_repo_auth_config"](repo, token)


@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="needs git")
def test_git_reads_the_header_from_the_included_file(f: dict[str, Any], tmp_path: Path) -> None:
    """The role hands git the file as GIT_CONFIG_COUNT=1 include.path=<file> (git >= 2.31)."""
    import os
    import subprocess

    url = "https://git.example.com/org/repo.git"
    conf = tmp_path / "auth.conf"
    conf.write_text(f["llama_cpp_repo_auth_config"](url, "s3cret"))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "include.path",
        "GIT_CONFIG_VALUE_0": str(conf),
    }
    out = subprocess.run(
        ["git", "config", "--get-urlmatch", "http.extraHeader", url + "/info/refs"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    value = base64.b64encode(b"x-access-token:s3cret").decode()
    assert out.stdout.strip() == f"Authorization: Basic {value}"
    other = subprocess.run(
        ["git", "config", "--get-urlmatch", "http.extraHeader", "https://elsewhere.example.com/x"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert other.stdout.strip() == ""


@pytest.mark.parametrize(
    ("repo", "path"),
    [
        ("/srv/git/llama.cpp.git", "/srv/git/llama.cpp.git"),
        ("/srv/git/llama.cpp/", "/srv/git/llama.cpp"),
        ("file:///srv/git/llama.cpp.git", "/srv/git/llama.cpp.git"),
        ("file://localhost/srv/git/x.git", "/srv/git/x.git"),
        ("https://github.com/org/repo.git", ""),
        ("git@github.com:org/repo.git", ""),
    ],
)
def test_local_path(f: dict[str, Any], repo: str, path: str) -> None:
    assert f["llama_cpp_repo_local_path"](repo) == path

"""ansible-test units for the repository-URL judgement the llama_cpp role's filters and its state
module share (plugins/module_utils/repo_url.py). The .git/config text is git's own format as
`git remote add` writes it."""

from __future__ import annotations

import pytest
from ansible_collections.llamafleet.fleet.plugins.module_utils import repo_url


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://github.com/TheTom/llama-cpp-turboquant.git", False),
        ("https://ghp_abc123@github.com/o/r.git", True),  # a token as the user name
        ("https://user:token@git.example.org/o/r", True),
        ("http://u@198.51.100.7/o/r", True),
        ("ssh://git@github.com/o/r.git", False),  # a user name is not a secret over ssh
        ("ssh://git:hunter2@github.com/o/r.git", True),
        ("git@github.com:o/r.git", False),  # scp-like: no authority
        ("file:///srv/mirror/llama.cpp", False),
        ("https://github.com/o/r@v1", False),  # @ after the authority
    ],
)
def test_has_credentials(url, secret):
    assert repo_url.has_credentials(url) is secret


def test_config_with_a_token_remote():
    clean = (
        "[core]\n\trepositoryformatversion = 0\n"
        '[remote "origin"]\n\turl = https://github.com/TheTom/llama-cpp-turboquant.git\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    )
    assert not repo_url.config_has_credentials(clean)
    leaked = clean + '[remote "mirror"]\n\turl = https://oauth2:glpat-x@gitlab.example.org/m.git\n'
    assert repo_url.config_has_credentials(leaked)
    assert not repo_url.config_has_credentials(clean.replace("https://", "ssh://git@"))


def test_authority_parts():
    assert repo_url.authority("https://u:p@h:8443/a/b?c") == ("https", "u:p", "h:8443", "/a/b?c")
    assert repo_url.authority("/srv/llama.cpp") is None

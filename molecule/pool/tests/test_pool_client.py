"""Verify the pool's Claude Code user (dev on lf-pool-lb, configured by the claude_code role with
claude_code_pool auto): its settings name the pool's URL, the pool's CA and dev's own key of the
pool (derived from the pool key and dev's name, not the pool key itself), and a
request and a real `claude -p` run with those settings are served through the pool."""

import json
import os
import shlex

import pytest
import testinfra

SETTINGS = "/home/dev/.claude/settings.json"
POOL_CA = "/etc/llamafleet/pool/ca.crt"
BACKENDS = ["lf-pool-1", "lf-pool-2", "lf-pool-3"]

testinfra_hosts = ["ansible://lf-pool-lb"]


@pytest.fixture(scope="module")
def pool_key():
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    backend = testinfra.get_host(f"ansible://lf-pool-2?ansible_inventory={inv}")
    return backend.check_output("cat /etc/llamafleet/keys/main.clients/pool.key").strip()


@pytest.fixture(scope="module")
def env(host):
    return json.loads(host.file(SETTINGS).content_string)["env"]


def test_the_settings_point_at_the_pool(host, env, pool_key):
    f = host.file(SETTINGS)
    assert f.user == "dev" and f.mode == 0o600
    # the pool host's own user: the pool on loopback (its certificate names 127.0.0.1)
    assert env["ANTHROPIC_BASE_URL"] == "https://127.0.0.1:8443"
    from llamafleet.poolkeys import user_key

    assert env["ANTHROPIC_AUTH_TOKEN"] == user_key(pool_key, "lf-pool-lb/dev") != pool_key
    ca = host.file(env["NODE_EXTRA_CA_CERTS"])
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/llamafleet/ca/lf-pool-lb-pool.pem"
    assert ca.user == "root" and ca.mode == 0o644
    assert ca.content_string == host.file(POOL_CA).content_string
    # the instance's alias; the window from the backends' slot (131072 tokens, -np auto with a
    # unified cache): 131072 less the 32000 kept for the answer, raised to Claude Code's 100000
    for k in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[k] == "main"
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "100000"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"


def _post(url, token, cafile, model):
    body = {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"content-type": "application/json", "Authorization": f"Bearer {token}"}
    return (
        "import json, ssl, urllib.request\n"
        f"req = urllib.request.Request({url + '/v1/messages'!r},"
        f" data={json.dumps(body)!r}.encode(), headers={headers!r})\n"
        f"ctx = ssl.create_default_context(cafile={cafile!r})\n"
        "r = urllib.request.urlopen(req, timeout=120, context=ctx)\n"
        "print(r.status, r.headers.get('X-Llamafleet-Backend', ''), json.load(r)['type'])\n"
    )


def test_a_request_with_the_settings_goes_through_the_pool(host, env):
    code = _post(
        env["ANTHROPIC_BASE_URL"],
        env["ANTHROPIC_AUTH_TOKEN"],
        env["NODE_EXTRA_CA_CERTS"],
        env["ANTHROPIC_MODEL"],
    )
    status, backend, kind = host.check_output(
        "runuser -u dev -- python3 -c " + shlex.quote(code)
    ).split()
    assert status == "200" and backend in BACKENDS and kind == "message"


def test_claude_code_through_the_pool(host):
    """A real `claude -p` run as dev, with nothing but the settings the role wrote."""
    run = host.run(
        "runuser -u dev -- bash -c "
        + shlex.quote(
            "cd ~ && timeout 300 claude --output-format json -p 'Reply with OK.' </dev/null"
        )
    )
    assert run.rc == 0, run.stdout + run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["is_error"] is False, out
    usage = out["usage"]
    # Claude Code's whole prompt (system text, tools) reached a backend through the pool
    assert usage["input_tokens"] + usage.get("cache_read_input_tokens", 0) > 5000, usage

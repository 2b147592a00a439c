"""A Claude Code client of the llama_pool role's HAProxy, checked with the pool's configuration and
the units of the llama-servers behind it, as the roles render them: through
``llamafleet.preflight.check_items`` (what the claude_code role sends: the pool's configuration and
each backend's unit as texts named ``HOST:/path``, the key files the units name as files) and
through the command line. What the role renders with its defaults comes out clean; a client with
another key gets XC002, a window above the smallest slot behind the pool XC003."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from test_llama_pool import HELD, POOL_DEFAULTS, ROLE, _render
from test_unit_template import render as render_unit

from conftest import load_ansible_plugin, plugin_path, run_cli
from llamafleet.preflight import check_items

KEYS = "/etc/llamafleet/keys/main.keys"
POOL_PATH = "lb:/etc/haproxy/haproxy.cfg"
#: the llama-server instance every backend serves the pool with (TLS, the pool key as a client
#: key), each with its own slot size
SLOTS = {"gpu1": 204800, "gpu2": 131072, "gpu3": 163840}


@pytest.fixture(scope="module")
def pool() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "llama_pool"))


def _unit(server_filters: ModuleType, ctx_size: int, tls: bool = True) -> str:
    argv = server_filters.llamafleet_argv(
        {
            "model": "/srv/models/q/q.gguf",
            "host": "0.0.0.0",
            "port": 8080,
            "alias": "main",
            "args": {"ctx_size": ctx_size, "parallel": 1, "jinja": True},
        }
    )
    inst = {
        "name": "main",
        "model_path": "/srv/models/q/q.gguf",
        "model_sha256": "",
        "argv": argv,
        "environment": {},
        "api_key": True,
        "client_keys": ["pool"],
        "tls": tls,
        "memlock": False,
        "gpu": False,
        "ip_allow": ["10.0.0.2"],
    }
    return render_unit(server_filters, inst, llama_server_tls_dir="/etc/llamafleet/tls")


def _settings(key: str = HELD, window: int = 99072) -> str:
    """What the claude_code role writes for a user of the pool."""
    return json.dumps(
        {
            "includeGitInstructions": False,
            "env": {
                "ANTHROPIC_BASE_URL": "https://lb:8443",
                "ANTHROPIC_AUTH_TOKEN": key,
                "ANTHROPIC_MODEL": "main",
                "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window),
                "NODE_EXTRA_CA_CERTS": "/usr/local/share/ca-certificates/llamafleet-pool.crt",
                "API_TIMEOUT_MS": "3600000",
            },
        },
        indent=2,
    )


def _item(
    pool: ModuleType, server_filters: ModuleType, settings: str, **over: Any
) -> dict[str, Any]:
    texts = [
        {"path": POOL_PATH, "text": _render(pool, "haproxy.cfg.j2", **over), "kind": "haproxy"}
    ]
    texts += [
        {
            "path": f"{host}:/etc/systemd/system/llama-server-main.service",
            "text": _unit(server_filters, ctx),
            "kind": "unit",
        }
        for host, ctx in SLOTS.items()
    ]
    return {
        "name": "alice",
        "texts": texts,
        "settings": [
            {"path": "alice:/home/alice/.claude/settings.json", "text": settings, "mode": "0600"}
        ],
        # the instance key, then the client keys (the pool's among them)
        "files": {KEYS: f"instance-key-0123456789\n{HELD}\n"},
    }


def _ids(checked: Any) -> list[tuple[str, str]]:
    return [(f["id"], f["message"]) for c in checked for f in c.findings]


def test_what_the_roles_render_is_clean(pool: ModuleType, server_filters: ModuleType) -> None:
    (checked,) = check_items([_item(pool, server_filters, _settings())], fail_on="info")
    assert checked.findings == [], checked.findings
    assert not checked.refused


def test_a_client_with_another_key_gets_401_from_the_pool(
    pool: ModuleType, server_filters: ModuleType
) -> None:
    item = _item(pool, server_filters, _settings(key="not-the-pool-key-0123456789"))
    (checked,) = check_items([item])
    found = [f for f in checked.findings if f["id"] == "XC002"]
    assert checked.refused
    messages = [f["message"] for f in found]
    assert any(
        "the pool (frontend llama of lb:/etc/haproxy/haproxy.cfg, https://lb:8443)" in m
        and "SHA-256 is not one the pool accepts" in m
        for m in messages
    ), messages
    # the servers behind never see it: the pool sends them its own key (checked below)
    assert not any("pool server" in m for m in messages), messages
    assert {f["file"] for f in found} == {"alice:/home/alice/.claude/settings.json"}


def test_the_key_the_pool_sends_must_be_one_every_server_accepts(
    pool: ModuleType, server_filters: ModuleType
) -> None:
    """The pool replaces a user's key with the pool key from its map file: when the check may
    read that file, a key the servers do not hold is reported on each of them; theirs is clean.
    The user's own key (llamafleet.poolkeys) is what the pool's ACL accepts."""
    from llamafleet.poolkeys import user_key

    mine = user_key(HELD, "ws/alice")
    over = {
        "_llama_pool_backend_key_map": "lb:/etc/llamafleet/pool/backend-key.map",
        "_llama_pool_user_digests": [pool.digest(mine)],
    }
    item = _item(pool, server_filters, _settings(key=mine), **over)
    item["files"]["lb:/etc/llamafleet/pool/backend-key.map"] = "pool not-what-the-servers-hold\n"
    (checked,) = check_items([item])
    messages = [f["message"] for f in checked.findings if f["id"] == "XC002"]
    for host in SLOTS:
        assert any(f"pool server {host} " in m and "sends it another key" in m for m in messages)
    assert not any("SHA-256 is not one the pool accepts" in m for m in messages), messages
    item["files"]["lb:/etc/llamafleet/pool/backend-key.map"] = f"pool {HELD}\n"
    (checked,) = check_items([item])
    assert not [f for f in checked.findings if f["id"] == "XC002"], checked.findings


def test_a_window_above_the_smallest_slot(pool: ModuleType, server_filters: ModuleType) -> None:
    (checked,) = check_items([_item(pool, server_filters, _settings(window=150000))])
    found = [f for f in checked.findings if f["id"] == "XC003"]
    assert len(found) == 1, checked.findings
    assert "pool server gpu2 10.0.0.11:8080" in found[0]["message"]
    assert "131072 tokens" in found[0]["message"]
    assert "the smallest slot of the 3 servers behind the pool" in found[0]["message"]
    assert '"100000"' in found[0]["fix"]  # 131072 less the 32000 reserve, at least 100000


def test_http_to_the_pool_names_its_url(pool: ModuleType, server_filters: ModuleType) -> None:
    text = _settings().replace("https://lb:8443", "http://lb:8443")
    (checked,) = check_items([_item(pool, server_filters, text)])
    found = [f for f in checked.findings if f["id"] == "XC001"]
    assert len(found) == 1 and "https://lb:8443" in found[0]["fix"], checked.findings


def test_the_roles_roundrobin_is_reported(pool: ModuleType, server_filters: ModuleType) -> None:
    item = _item(pool, server_filters, _settings(), llama_pool_balance="roundrobin")
    (checked,) = check_items([item], fail_on="warning")
    assert [f["id"] for f in checked.findings] == ["HP003"], checked.findings
    assert checked.findings[0]["file"] == POOL_PATH


def test_a_backend_without_tls_behind_ssl_server_lines(
    pool: ModuleType, server_filters: ModuleType
) -> None:
    """The role writes `ssl` for a backend with TLS: a unit that serves plain http behind such a
    line fails every health check (HP001, on each server line of the pool's configuration)."""
    item = _item(pool, server_filters, _settings())
    for entry in item["texts"][1:]:
        entry["text"] = _unit(server_filters, 131072, tls=False)
    (checked,) = check_items([item])
    found = [f for f in checked.findings if f["id"] == "HP001"]
    assert [f["message"].split()[2] for f in found] == ["gpu1", "gpu2", "gpu3"], found
    assert all(f["file"] == POOL_PATH and "serves plain http" in f["message"] for f in found)
    assert checked.refused


def test_the_kind_is_checked(pool: ModuleType) -> None:
    from llamafleet.preflight import KINDS, PreflightError

    assert "haproxy" in KINDS
    with pytest.raises(PreflightError, match="kind 'nginx'"):
        check_items([{"name": "x", "text": "server {}", "kind": "nginx"}])


def test_the_command_line(pool: ModuleType, server_filters: ModuleType, tmp_path: Path) -> None:
    """`llamafleet check haproxy.cfg UNIT settings.json`: the kind from the file name, the unit's
    key file read from --referenced-dir, the one unit the template for every server line."""
    (tmp_path / "haproxy.cfg").write_text(_render(pool, "haproxy.cfg.j2"))
    unit = tmp_path / "llama-server-main.service"
    unit.write_text(_unit(server_filters, 131072))
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "main.keys").write_text(f"instance-key-0123456789\n{HELD}\n")
    settings = tmp_path / "settings.json"
    settings.write_text(_settings())
    settings.chmod(0o600)
    args = ["check", "haproxy.cfg", unit.name, settings.name, "--referenced-dir", str(keys)]
    res = run_cli([*args, "--format", "json", "--fail-on", "info"], cwd=tmp_path)
    assert res.code == 0, res.out + res.err
    assert res.json()["findings"] == []

    settings.write_text(_settings(key="not-the-pool-key-0123456789", window=150000))
    res = run_cli([*args, "--format", "json"], cwd=tmp_path)
    assert res.code == 1
    ids = sorted({f["id"] for f in res.json()["findings"]})
    assert ids == ["XC002", "XC003"], res.out


def test_the_defaults_the_test_renders_with_are_the_roles() -> None:
    """The rendering above uses the role's own defaults (an hour on both sides, hashing)."""
    role = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert role == POOL_DEFAULTS
    assert role["llama_pool_balance"] == "session"
    assert role["llama_pool_timeout_server"] == "1h" and role["llama_pool_timeout_client"] == "1h"


def _check(*texts: tuple[str, str]) -> list[tuple[str, str]]:
    from llamafleet.engine import Inputs, add_file, run

    inputs = Inputs()
    for path, text in texts:
        add_file(inputs, path, text)
    return [(f.id, f.message) for f in run(inputs).findings if f.id[:2] in ("XC", "HP")]


_POOL_AT = """\
defaults
    mode http
frontend llama
    bind {bind} ssl crt /etc/pool.pem
    default_backend llama
backend llama
    balance hash req.hdr(x-claude-code-session-id)
    server gpu1 {server} ssl verify required ca-file /etc/ca.crt verifyhost gpu1
"""
_TLS_UNIT = """\
[Service]
User=llama
Restart=on-failure
ExecStart=/opt/llama.cpp/current/bin/llama-server -m /srv/m.gguf --host {host} --port 8080 \
--ssl-key-file /k --ssl-cert-file /c --api-key k
"""


def _client(url: str) -> str:
    return json.dumps({"env": {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "k"}})


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # the pool's name as its file gives it, a VIP's name against a bound address
        ("https://lb:8443", []),
        ("https://llama.example:8443", []),
        # another address of the bound one's kind: not the pool (XC001 names the pool's URL)
        ("https://10.0.0.3:8443", ["XC001"]),
        # the address of the server behind the pool, at its own port: that server itself
        ("https://10.0.0.10:8080", []),
    ],
)
def test_which_urls_reach_a_pool_bound_to_one_address(url: str, expected: list[str]) -> None:
    found = _check(
        ("lb:/etc/haproxy/haproxy.cfg", _POOL_AT.format(bind="10.0.0.2:8443", server="gpu1:8080")),
        ("gpu1:/etc/systemd/system/llama-server-main.service", _TLS_UNIT.format(host="10.0.0.10")),
        ("settings.json", _client(url)),
    )
    assert [i for i, _ in found] == expected, found


def test_a_unit_on_its_own_address_named_by_the_line_s_host_name() -> None:
    """`server gpu1 gpu1:8080` (a name) in front of a unit of gpu1 listening on its address: the
    file's host says it is that server; a unit of another host is not."""
    pool = ("lb:/etc/haproxy/haproxy.cfg", _POOL_AT.format(bind="*:8443", server="gpu1:8080"))
    plain = _TLS_UNIT.replace(" --ssl-key-file /k --ssl-cert-file /c", "")
    found = _check(
        pool,
        ("gpu1:/etc/systemd/system/llama-server-main.service", plain.format(host="10.0.0.10")),
    )
    assert [i for i, _ in found] == ["HP001"], found
    found = _check(
        pool,
        ("gpu2:/etc/systemd/system/llama-server-main.service", plain.format(host="10.0.0.11")),
    )
    assert found == []

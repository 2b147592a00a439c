"""The claude_code role through a pool (its filter plugin): which pool a user goes through, the
pool's URL, CA and key worked out from its facts or its inventory, the smallest slot among the
backends, the pool keys, and the check item (the pool's HAProxy configuration with every
backend's unit and its copy of the pool key)."""

from __future__ import annotations

import base64
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from conftest import load_ansible_plugin, plugin_path

REPO = Path(__file__).resolve().parents[2]
PLUGIN = plugin_path("filter", "claude_code")
POOL_DEFAULTS = REPO / "roles" / "llama_pool" / "defaults" / "main.yml"

pytestmark = pytest.mark.skipif(
    not PLUGIN.is_file(), reason="run from a checkout of the whole repository"
)

UNIT = """[Service]
LoadCredential=api-key:/etc/llamafleet/keys/main.keys
ExecStart=/opt/llama.cpp/current/bin/llama-server --model /srv/models/m.gguf --host 0.0.0.0 \\
--port 8080 -c {ctx} -np 1 --api-key-file %d/api-key
"""
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def cc() -> ModuleType:
    return load_ansible_plugin(PLUGIN)


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(POOL_DEFAULTS.read_text())
    return data


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _server(alias: str = "qwen", enabled: bool = True, **more: Any) -> dict[str, Any]:
    inst = {"name": "main", "host": "0.0.0.0", "port": 8080, "alias": alias, "enabled": enabled}
    return {"llama_server_instances": [inst], "llama_server_client_keys": ["pool"], **more}


def _inventory(**pool_vars: Any) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    groups = {
        "all": ["pool1", "gpu1", "gpu2", "gpu3", "ws", "lone"],
        "llama_pools": ["pool1"],
        "llama_servers": ["gpu1", "gpu2", "gpu3", "lone"],
        "team": ["gpu1", "gpu2", "gpu3"],
        "claude_clients": ["ws"],
    }
    hostvars: dict[str, dict[str, Any]] = {
        "pool1": {"ansible_host": "10.0.0.5", "llama_pool_backends_group": "team", **pool_vars},
        "gpu1": {"ansible_host": "10.0.0.11", **_server()},
        "gpu2": {"ansible_host": "10.0.0.12", **_server()},
        "gpu3": {"ansible_host": "10.0.0.13", **_server()},
        "ws": {"ansible_host": "10.0.0.50"},
        "lone": {"ansible_host": "10.0.0.20", **_server()},
    }
    return groups, hostvars


# ----------------------------------------------------------------------------- which pool


@pytest.mark.parametrize(
    "case",
    [
        ({"name": "a"}, "auto", "gpu2", "main", "pool1"),  # its server is a backend
        ({"name": "a"}, "auto", "lone", "main", ""),  # not behind the pool
        ({"name": "a"}, "auto", "gpu2", "other", ""),  # the pool serves another instance
        ({"name": "a", "pool": ""}, "auto", "gpu2", "main", ""),  # the user's own choice wins
        ({"name": "a", "pool": "pool1"}, "", "lone", "main", "pool1"),
        ({"name": "a"}, "", "gpu2", "main", ""),  # claude_code_pool: '' = direct
        ({"name": "a"}, None, "gpu2", "main", ""),
        ({"name": "a"}, "pool1", "gpu2", "main", "pool1"),
    ],
)
def test_pool_of(cc: ModuleType, defaults: dict[str, Any], case: tuple[Any, ...]) -> None:
    user, setting, server, instance, want = case
    groups, hostvars = _inventory()
    assert cc.pool_of(user, setting, server, instance, groups, hostvars, defaults) == want


def test_pool_of_the_default_group(cc: ModuleType, defaults: dict[str, Any]) -> None:
    """A pool host that leaves llama_pool_backends_group unset serves llama_servers (the role's
    default, read from its defaults file); a site without llama_pools has no pool."""
    groups, hostvars = _inventory()
    del hostvars["pool1"]["llama_pool_backends_group"]
    assert cc.pool_of({"name": "a"}, "auto", "lone", "main", groups, hostvars, defaults) == "pool1"
    del groups["llama_pools"]
    assert cc.pool_of({"name": "a"}, "auto", "gpu1", "main", groups, hostvars, defaults) == ""


def test_pool_of_an_unknown_host(cc: ModuleType, defaults: dict[str, Any]) -> None:
    groups, hostvars = _inventory()
    with pytest.raises(AnsibleFilterError, match=r"'a'.*'pool9'.*not an inventory host"):
        cc.pool_of({"name": "a", "pool": "pool9"}, "auto", "gpu1", "main", groups, hostvars)


# ----------------------------------------------------------------------------- the pool target


def test_target_from_the_inventory(cc: ModuleType, defaults: dict[str, Any]) -> None:
    """No facts (clients.yml alone): https (auto beyond loopback), port 8443, the pool host's
    ansible_host for the wildcard bind, its CA read from llama_pool_tls_dir on the pool host, the
    backends in name order with their pool key files, the instance's alias."""
    groups, hostvars = _inventory()
    t = cc.pool_target("pool1", groups, hostvars, defaults, "ws")
    assert t["base_url"] == "https://10.0.0.5:8443"
    assert (t["scheme"], t["address"], t["port"]) == ("https", "10.0.0.5", 8443)
    assert (t["ca_host"], t["ca_src"], t["ca_pem"]) == ("pool1", "/etc/llamafleet/pool/ca.crt", "")
    assert t["ca_path"] == "/etc/llamafleet/ca/pool1-pool.pem"
    assert t["model"] == "qwen" and t["instance"] == "main"
    assert t["pool_key"] is True and t["key_name"] == "pool" and t["key_id"] == "pool:pool1"
    assert [b["name"] for b in t["backends"]] == ["gpu1", "gpu2", "gpu3"]
    assert t["backends"][0] == {
        "name": "gpu1",
        "unit": "llama-server-main.service",
        "key_file": "/etc/llamafleet/keys/main.clients/pool.key",
        "ctx_per_slot": 0,
    }


def test_target_on_the_pool_host_itself(cc: ModuleType, defaults: dict[str, Any]) -> None:
    groups, hostvars = _inventory()
    assert cc.pool_target("pool1", groups, hostvars, defaults, "pool1")["base_url"] == (
        "https://127.0.0.1:8443"
    )


@pytest.mark.parametrize(
    ("pool_vars", "url"),
    [
        ({"llama_pool_bind": "10.0.0.6", "llama_pool_port": 443}, "https://10.0.0.6:443"),
        ({"llama_pool_bind": "fd00::6"}, "https://[fd00::6]:8443"),
        ({"llama_pool_tls": False}, "http://10.0.0.5:8443"),
        ({"llama_pool_tls": "true", "llama_pool_bind": "::"}, "https://10.0.0.5:8443"),
    ],
)
def test_target_address_and_scheme(
    cc: ModuleType, defaults: dict[str, Any], pool_vars: dict[str, Any], url: str
) -> None:
    groups, hostvars = _inventory(**pool_vars)
    assert cc.pool_target("pool1", groups, hostvars, defaults, "ws")["base_url"] == url


def test_a_loopback_pool_from_another_host(cc: ModuleType, defaults: dict[str, Any]) -> None:
    groups, hostvars = _inventory(llama_pool_bind="127.0.0.1")
    with pytest.raises(AnsibleFilterError, match=r"pool1 listens on 127.0.0.1.*ws cannot reach"):
        cc.pool_target("pool1", groups, hostvars, defaults, "ws")
    # on the pool host itself it is reached, over plain http (auto: no TLS on loopback)
    t = cc.pool_target("pool1", groups, hostvars, defaults, "pool1")
    assert t["base_url"] == "http://127.0.0.1:8443" and t["ca_path"] == ""


def test_target_from_the_facts(cc: ModuleType, defaults: dict[str, Any]) -> None:
    """After the llama_pool and llama_server roles ran in the same play: the pool's scheme, port,
    CA and backend list from llama_pool_endpoint (whose url is the pool host's own view,
    127.0.0.1 for a wildcard bind: not used for another host), the slots from the servers'
    llama_server_endpoints."""
    groups, hostvars = _inventory()
    hostvars["pool1"]["llama_pool_endpoint"] = {
        "url": "https://127.0.0.1:9443",
        "host": "127.0.0.1",
        "port": 9443,
        "scheme": "https",
        "ca_pem": CA,
        "ca_file": "/etc/llamafleet/pool/ca.crt",
        "backends": ["gpu2", "gpu1"],
        "instance": "main",
        "client_key_name": "pool",
    }
    for n, host in enumerate(["gpu1", "gpu2"]):
        hostvars[host]["llama_server_endpoints"] = {
            "main": {
                "alias": "qwen-fact",
                "unit": "llama-server-main.service",
                "ctx_per_slot": 150000 + n,
            }
        }
    t = cc.pool_target("pool1", groups, hostvars, defaults, "ws")
    assert t["base_url"] == "https://10.0.0.5:9443" and t["ca_pem"] == CA
    assert [b["name"] for b in t["backends"]] == ["gpu1", "gpu2"]  # gpu3 is not in the pool
    assert [b["ctx_per_slot"] for b in t["backends"]] == [150000, 150001]
    assert t["model"] == "qwen-fact"


def test_target_backends(cc: ModuleType, defaults: dict[str, Any]) -> None:
    groups, hostvars = _inventory(
        llama_pool_api_key=False, llama_pool_tls_ca_cert="/etc/ssl/team-ca.pem"
    )
    hostvars["gpu2"] = {**hostvars["gpu2"], **_server(enabled=False)}
    hostvars["gpu3"]["llama_server_key_dir"] = "/srv/keys"
    t = cc.pool_target("pool1", groups, hostvars, defaults, "ws")
    # a disabled instance is not in the pool; each backend's own key directory
    assert [(b["name"], b["key_file"]) for b in t["backends"]] == [
        ("gpu1", "/etc/llamafleet/keys/main.clients/pool.key"),
        ("gpu3", "/srv/keys/main.clients/pool.key"),
    ]
    # without the pool key the users keep their own key id (set by the role for the server)
    assert t["pool_key"] is False and t["key_name"] == "" and "key_id" not in t
    assert t["ca_src"] == "/etc/ssl/team-ca.pem"
    hostvars["gpu1"]["llama_server_instances"] = [{"name": "other"}]
    with pytest.raises(AnsibleFilterError, match=r"backend gpu1 has no instance 'main'"):
        cc.pool_target("pool1", groups, hostvars, defaults, "ws")


# ----------------------------------------------------------------------------- slots


def _targets(cc: ModuleType, defaults: dict[str, Any]) -> list[dict[str, Any]]:
    groups, hostvars = _inventory()
    hostvars["gpu2"]["llama_server_endpoints"] = {"main": {"ctx_per_slot": 180224}}
    pool = {
        "name": "alice",
        "key_id": "x",
        **cc.pool_target("pool1", groups, hostvars, defaults, "ws"),
    }
    direct = {
        "name": "bob",
        "key_id": "lone/main/ws/bob",
        "server": "lone",
        "unit": "llama-server-main.service",
        "ctx_per_slot": 0,
    }
    return [pool, direct]


def test_unit_reads(cc: ModuleType, defaults: dict[str, Any]) -> None:
    reads = cc.unit_reads(_targets(cc, defaults))
    assert [(r["name"], r["host"], r["slot_known"]) for r in reads] == [
        ("alice", "gpu1", False),
        ("alice", "gpu2", True),
        ("alice", "gpu3", False),
        ("bob", "lone", False),
    ]
    assert {r["unit"] for r in reads} == {"llama-server-main.service"}


def test_the_smallest_slot_of_the_backends(cc: ModuleType, defaults: dict[str, Any]) -> None:
    """A conversation may land on any backend: the window comes from the smallest slot (gpu2's
    fact 180224, gpu1's unit 131072, gpu3's unit 204800)."""
    alice, bob = _targets(cc, defaults)
    reads = cc.unit_reads([alice, bob])
    units = {"gpu1": 131072, "gpu3": 204800, "lone": 122880}
    results = [
        {"_t": r, "content": _b64(UNIT.format(ctx=units[r["host"]]))}
        for r in reads
        if r["host"] in units
    ]
    assert cc.target_slot(alice, results) == {"slot": 131072, "unknown": []}
    assert cc.target_slot(bob, results) == {"slot": 122880, "unknown": []}
    # gpu1 not reached: the others decide, and it is named
    partial = [r for r in results if r["_t"]["host"] != "gpu1"]
    assert cc.target_slot(alice, partial) == {"slot": 180224, "unknown": ["gpu1"]}
    # nothing known: 0 (the window's own refusal names the fix)
    alice["backends"] = [b for b in alice["backends"] if b["name"] != "gpu2"]
    assert cc.target_slot(alice, []) == {"slot": 0, "unknown": []}


# ----------------------------------------------------------------------------- keys


def test_pool_keys(cc: ModuleType, defaults: dict[str, Any]) -> None:
    """Each backend's copy of the pool key (its fact, else its file as read); the pool key is the
    first backend's that holds one, and the user's token is derived from it and the user's name;
    a backend not reached is left out."""
    groups, hostvars = _inventory()
    target = {
        "name": "alice",
        "pool_client": "ws/alice",
        **cc.pool_target("pool1", groups, hostvars, defaults, "ws"),
    }
    hostvars["gpu2"]["llama_server_client_api_keys"] = {
        "main": {"pool": "k-pool-0123456789abc", "ws/x": "k-x"}
    }
    assert [r["name"] for r in cc.pool_key_reads([target], hostvars)] == ["gpu1", "gpu3"]
    reads = [
        {"_b": {"name": "gpu1"}, "unreachable": True, "msg": "no route"},
        {"_b": {"name": "gpu3"}, "content": _b64("k-other\n")},
    ]
    from llamafleet.poolkeys import user_key

    assert cc.pool_keys([target], hostvars, reads) == {
        "gpu2/main/pool": "k-pool-0123456789abc",
        "gpu3/main/pool": "k-other",
        "pool-key:pool1": "k-pool-0123456789abc",
        # the user's own key of the pool, derived from the first backend's pool key
        "pool:pool1": user_key("k-pool-0123456789abc", "ws/alice"),
    }
    # a direct target, or a pool without the pool key: nothing here
    assert (
        cc.pool_keys([{**target, "pool_key": False}, {"name": "b", "pool": ""}], hostvars, reads)
        == {}
    )


# ----------------------------------------------------------------------------- the check item


def _pool_item_inputs(cc: ModuleType, defaults: dict[str, Any]) -> tuple[Any, ...]:
    groups, hostvars = _inventory()
    target = {
        "name": "alice",
        "managed": False,
        "server": "gpu1",
        "path": "/home/alice/.claude/settings.json",
        **cc.pool_target("pool1", groups, hostvars, defaults, "ws"),
    }
    files = [{"_t": target, "exists": True, "content": _b64('{"env": {}}')}]
    units = [
        {"_t": r, "content": _b64(UNIT.format(ctx=131072))}
        for r in cc.unit_reads([target])
        if r["host"] != "gpu3"  # not reached
    ]
    keys = {"gpu1/main/pool": "k-pool", "gpu2/main/pool": "k-pool", "pool:pool1": "k-pool"}
    haproxy = [{"_p": "pool1", "content": _b64("frontend llama\n  bind :8443\n")}]
    return target, files, units, keys, haproxy


def test_check_item_of_a_pool_user(
    cc: ModuleType, defaults: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, files, units, keys, haproxy = _pool_item_inputs(cc, defaults)
    monkeypatch.setattr(cc, "haproxy_kind_supported", lambda _=None: True)
    item = cc.check_item(target, files, units, keys, False, haproxy)
    assert item["path"] == "pool1:/etc/haproxy/haproxy.cfg"
    assert [(t["path"], t["kind"]) for t in item["texts"]] == [
        ("pool1:/etc/haproxy/haproxy.cfg", "haproxy"),
        ("gpu1:/etc/systemd/system/llama-server-main.service", "unit"),
        ("gpu2:/etc/systemd/system/llama-server-main.service", "unit"),
    ]
    # each backend's credential under its own name (the units share theirs), its pool key in it
    cred = "/run/credentials/llama-server-main.service/api-key"
    assert f"--api-key-file gpu1:{cred}" in item["texts"][1]["text"]
    assert item["files"] == {f"gpu1:{cred}": "k-pool\n", f"gpu2:{cred}": "k-pool\n"}
    assert [s["path"] for s in item["settings"]] == ["/home/alice/.claude/settings.json"]


def test_check_item_of_a_pool_user_without_the_pool_key(
    cc: ModuleType, defaults: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama_pool_api_key false: the user's own key and the instance key of their own server
    (gpu1); the other backends' keys are not known (not compared)."""
    target, files, units, _, haproxy = _pool_item_inputs(cc, defaults)
    target = {**target, "pool_key": False, "key_name": "", "key_id": "gpu1/main/ws/alice"}
    keys = {"gpu1/main/ws/alice": "k-alice", "gpu1/main": "k-inst"}
    monkeypatch.setattr(cc, "haproxy_kind_supported", lambda _=None: True)
    item = cc.check_item(target, files, units, keys, False, haproxy)
    cred = "/run/credentials/llama-server-main.service/api-key"
    assert item["files"] == {f"gpu1:{cred}": "k-alice\nk-inst\n"}


def test_check_item_of_a_pool_user_before_the_validator_reads_haproxy(
    cc: ModuleType, defaults: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the kind haproxy (or without the configuration read) the settings are checked on
    their own: the backends' units alone would make XC001 report the pool's URL."""
    target, files, units, keys, haproxy = _pool_item_inputs(cc, defaults)
    monkeypatch.setattr(cc, "haproxy_kind_supported", lambda _=None: False)
    item = cc.check_item(target, files, units, keys, False, haproxy)
    assert set(item) == {"name", "settings"}
    monkeypatch.setattr(cc, "haproxy_kind_supported", lambda _=None: True)
    assert set(cc.check_item(target, files, units, keys, False, [])) == {"name", "settings"}


def test_the_switch_follows_the_validator(cc: ModuleType) -> None:
    from llamafleet.preflight import KINDS

    assert cc.haproxy_kind_supported() is ("haproxy" in KINDS)


# ----------------------------------------------------------------------------- with the validator


def _e2e(
    cc: ModuleType, pool: ModuleType, server_filters: ModuleType, pool_keys: dict[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pool user's check item as the role builds it, from what the roles render: the
    llama_pool role's haproxy.cfg, the llama_server role's units (slots of 131072 to 204800
    tokens), each backend's copy of the pool key, and the settings the role writes."""
    import json

    from test_llama_pool import _inventory as pool_inventory
    from test_llama_pool import _render
    from test_pool_check import SLOTS, _unit

    groups, hostvars = pool_inventory(3)
    groups["all"] = [*groups["llama_servers"], "lb"]
    target = {
        "name": "alice",
        "managed": False,
        "server": "gpu1",
        "path": "/home/alice/.claude/settings.json",
        **cc.pool_target("lb", groups, hostvars, POOL_DEFAULTS_DATA, "ws"),
    }
    slot = min(SLOTS.values())
    window = cc.compact_window(slot, "auto", 32000)["window"]
    settings = {
        "includeGitInstructions": False,
        "env": {
            "ANTHROPIC_BASE_URL": target["base_url"],
            "ANTHROPIC_AUTH_TOKEN": pool_keys["pool:lb"],
            "ANTHROPIC_MODEL": target["model"],
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window),
            "NODE_EXTRA_CA_CERTS": target["ca_path"],
            "API_TIMEOUT_MS": "3600000",
        },
    }
    files = [{"_t": target, "exists": True, "content": _b64(json.dumps(settings, indent=2))}]
    units = [
        {"_t": r, "content": _b64(_unit(server_filters, SLOTS[r["host"]]))}
        for r in cc.unit_reads([target])
    ]
    # the pool accepts the user's own key (derived from the pool key the backends hold)
    from llamafleet.poolkeys import user_key

    user_digest = pool.digest(user_key(str(pool_keys["pool-key:lb"]), "ws/alice"))
    cfg = _render(pool, "haproxy.cfg.j2", _llama_pool_user_digests=[user_digest])
    haproxy = [{"_p": "lb", "content": _b64(cfg)}]
    item = cc.check_item(target, files, units, pool_keys, False, haproxy)
    return item, [target]


POOL_DEFAULTS_DATA: dict[str, Any] = yaml.safe_load(POOL_DEFAULTS.read_text())


@pytest.fixture(scope="module")
def pool_filters() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "llama_pool"))


def test_what_the_role_writes_for_a_pool_user_checks_clean(
    cc: ModuleType, pool_filters: ModuleType, server_filters: ModuleType
) -> None:
    from test_llama_pool import HELD

    from llamafleet.poolkeys import user_key
    from llamafleet.preflight import check_items

    keys = {f"gpu{i}/main/pool": HELD for i in (1, 2, 3)} | {
        "pool-key:lb": HELD,
        "pool:lb": user_key(HELD, "ws/alice"),
    }
    item, _ = _e2e(cc, pool_filters, server_filters, keys)
    assert [t["kind"] for t in item["texts"]] == ["haproxy", "unit", "unit", "unit"]
    (checked,) = check_items([item], "info")
    assert checked.findings == [], checked.findings


def test_a_backend_without_the_pool_key_is_reported(
    cc: ModuleType, pool_filters: ModuleType, server_filters: ModuleType
) -> None:
    """gpu2 holds another key (the pool role has not copied the pool key there yet): XC002 names
    it, and only it."""
    from test_llama_pool import HELD

    from llamafleet.poolkeys import user_key
    from llamafleet.preflight import check_items

    keys = {f"gpu{i}/main/pool": HELD for i in (1, 3)} | {
        "gpu2/main/pool": "another-key-of-gpu2-0123456789",
        "pool-key:lb": HELD,
        "pool:lb": user_key(HELD, "ws/alice"),
    }
    item, _ = _e2e(cc, pool_filters, server_filters, keys)
    (checked,) = check_items([item], "error")
    messages = [f["message"] for f in checked.findings if f["id"] == "XC002"]
    assert checked.refused and messages, checked.findings
    assert any("gpu2" in m for m in messages), messages
    assert not any("gpu1" in m or "gpu3" in m for m in messages), messages

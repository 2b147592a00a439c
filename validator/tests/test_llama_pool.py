"""The llama_pool role's filters: the backend list from the inventory (address, port, TLS, the
certificate name HAProxy checks, stable server ids), the pools of a backend (drain, ready), the
pool key (one value on every backend, its SHA-256 as HAProxy writes it), the unit's networks; and
its templates rendered as Ansible renders them (HAProxy's configuration holds the key's digest,
never the key; `haproxy -c` accepts it where HAProxy is installed)."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import fqcn_filters, load_ansible_plugin, plugin_path, tool

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_pool"
SERVER_DEFAULTS = yaml.safe_load(
    (REPO / "roles" / "llama_server" / "defaults" / "main.yml").read_text()
)
POOL_DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


@pytest.fixture(scope="module")
def pool() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "llama_pool"))


def _settings(**over: Any) -> dict[str, Any]:
    values = {
        "backends_group": "llama_servers",
        "instance": "main",
        "api_key": True,
        "client_key_name": "pool",
    }
    values.update(over)
    return values


def _server(**over: Any) -> dict[str, Any]:
    inst: dict[str, Any] = {"name": "main", "model": "m", "host": "0.0.0.0", "port": 8080}
    inst.update(over)
    return inst


def _inventory(n: int = 3, **inst: Any) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    names = [f"gpu{i}" for i in range(1, n + 1)]
    hostvars: dict[str, dict[str, Any]] = {
        name: {
            "ansible_host": f"10.0.0.{10 + i}",
            "llama_server_client_keys": ["pool"],
            "llama_server_instances": [_server(**inst)],
        }
        for i, name in enumerate(names)
    }
    hostvars["lb"] = {"ansible_host": "10.0.0.2"}
    return {"llama_servers": names, "llama_pools": ["lb"]}, hostvars


# --- the backends ------------------------------------------------------------------------------


def test_backends_from_the_inventory(pool: ModuleType) -> None:
    groups, hostvars = _inventory()
    found = pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)
    assert [b["name"] for b in found] == ["gpu1", "gpu2", "gpu3"]
    first = found[0]
    assert first["address"] == "10.0.0.10" and first["port"] == 8080
    # a wildcard listener: the pool reaches it at ansible_host; the host's own requests at 127.0.0.1
    assert first["connect_host"] == "127.0.0.1"
    # beyond loopback: TLS (auto), verified against the inventory name in its certificate
    assert first["tls"] is True and first["verifyhost"] == "gpu1"
    assert first["ca_file"] == "/etc/llamafleet/tls/ca.crt"
    assert first["key_file"] == "/etc/llamafleet/keys/main.key"
    assert first["pool_key_file"] == "/etc/llamafleet/keys/main.clients/pool.key"
    assert first["unit"] == "llama-server-main.service"


def test_an_instance_on_its_own_address_is_reached_there(pool: ModuleType) -> None:
    groups, hostvars = _inventory(1, host="192.168.5.7", port=9000, tls=False)
    (b,) = pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)
    assert (b["address"], b["port"], b["connect_host"], b["tls"]) == (
        "192.168.5.7",
        9000,
        "192.168.5.7",
        False,
    )


@pytest.mark.parametrize("listen", ["0.0.0.0", "::", "[::]"])
def test_a_wildcard_listener_is_reached_at_ansible_host(pool: ModuleType, listen: str) -> None:
    groups, hostvars = _inventory(1, host=listen)
    (b,) = pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)
    assert (b["address"], b["connect_host"]) == ("10.0.0.10", "127.0.0.1")


def test_the_backends_own_key_dir_and_ca_are_used(pool: ModuleType) -> None:
    groups, hostvars = _inventory(1)
    hostvars["gpu1"]["llama_server_key_dir"] = "/srv/keys"
    hostvars["gpu1"]["llama_server_tls_ca_cert"] = "/etc/pki/ours.crt"
    hostvars["gpu1"]["llama_server_client_keys"] = ["pool/team"]
    (b,) = pool.backends(_settings(client_key_name="pool/team"), groups, hostvars, SERVER_DEFAULTS)
    assert b["pool_key_file"] == "/srv/keys/main.clients/pool__team.key"
    assert b["key_dirs"] == ["/srv/keys", "/srv/keys/main.clients"]
    assert b["ca_file"] == "/etc/pki/ours.crt"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"host": "127.0.0.1"}, "listens on 127.0.0.1, which the pool cannot reach"),
        ({"host": "::1"}, "which the pool cannot reach"),
        ({"host": "/run/llama.sock"}, "which the pool cannot reach"),
        ({"name": "other"}, "no instance named 'main'"),
        ({"client_keys": ["gpu1/alice"]}, "does not accept the pool key"),
        ({"port": "eighty"}, "is not a number"),
    ],
)
def test_a_backend_the_pool_cannot_use_is_refused(
    pool: ModuleType, filter_error: type[Exception], change: dict[str, Any], message: str
) -> None:
    groups, hostvars = _inventory(2)
    hostvars["gpu2"]["llama_server_instances"] = [_server(**change)]
    with pytest.raises(filter_error, match=message):
        pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)


def test_a_backend_without_keys_is_refused_unless_the_pool_checks_none(
    pool: ModuleType, filter_error: type[Exception]
) -> None:
    groups, hostvars = _inventory(1)
    hostvars["gpu1"]["llama_server_api_key"] = False
    with pytest.raises(filter_error, match="keep llama_server_api_key on"):
        pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)
    assert pool.backends(_settings(api_key=False), groups, hostvars, SERVER_DEFAULTS)


def test_an_empty_group_and_an_ip_named_tls_backend_are_refused(
    pool: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="has no hosts"):
        pool.backends(_settings(), {"llama_servers": []}, {}, SERVER_DEFAULTS)
    hostvars = {
        "10.0.0.9": {"llama_server_client_keys": ["pool"], "llama_server_instances": [_server()]}
    }
    with pytest.raises(filter_error, match="DNS name only"):
        pool.backends(_settings(), {"llama_servers": ["10.0.0.9"]}, hostvars, SERVER_DEFAULTS)


def test_disabled_instances_are_left_out(pool: ModuleType, filter_error: type[Exception]) -> None:
    groups, hostvars = _inventory(2)
    hostvars["gpu2"]["llama_server_instances"] = [_server(enabled=False)]
    assert [b["name"] for b in pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)] == [
        "gpu1"
    ]
    hostvars["gpu1"]["llama_server_instances"] = [_server(enabled=False)]
    with pytest.raises(filter_error, match="every instance 'main' is disabled"):
        pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS)


def test_server_ids_depend_on_the_name_alone(pool: ModuleType) -> None:
    """HAProxy places a server on the consistent-hash ring by its id: a backend that joins or
    leaves must not renumber the others (that would move every conversation)."""
    three = pool.server_ids(["gpu1", "gpu2", "gpu3"])
    two = pool.server_ids(["gpu1", "gpu3"])
    assert two == {"gpu1": three["gpu1"], "gpu3": three["gpu3"]}
    many = pool.server_ids([f"host-{i}" for i in range(2000)])
    assert len(set(many.values())) == 2000
    assert all(1 <= v < pool.MAX_SERVER_ID for v in many.values())


def test_server_ids_that_collide_take_the_next_free(pool: ModuleType, monkeypatch: Any) -> None:
    real = hashlib.sha256
    monkeypatch.setattr(pool.hashlib, "sha256", lambda data: real(b"same"))
    ids = pool.server_ids(["b", "a", "c"])
    assert ids["b"] == ids["a"] + 1 and ids["c"] == ids["a"] + 2


# --- the pools of a backend (drain, ready) -----------------------------------------------------


def _side(**over: Any) -> dict[str, Any]:
    values = {
        "pools_group": "llama_pools",
        "backends_group": "llama_servers",
        "instance": "main",
        "api_key": True,
        "client_key_name": "pool",
        "stats_socket": "/run/haproxy/admin.sock",
        "drain_timeout": 900,
        "ready_timeout": 300,
    }
    values.update(over)
    return values


def test_the_pools_of_a_backend(pool: ModuleType) -> None:
    groups, hostvars = _inventory(2)
    groups["llama_pools"] = ["lb", "lb2", "other"]
    hostvars["lb2"] = {"llama_pool_drain_timeout": 60, "llama_pool_stats_socket": "/run/h/s.sock"}
    groups["gpu_only"] = ["gpu2"]
    hostvars["other"] = {"llama_pool_backends_group": "gpu_only"}
    mine = pool.pools_of("gpu1", groups, hostvars, _side(), SERVER_DEFAULTS)
    assert [(p["host"], p["socket"], p["drain_timeout"], p["server"]) for p in mine] == [
        ("lb", "/run/haproxy/admin.sock", 900, "gpu1"),
        ("lb2", "/run/h/s.sock", 60, "gpu1"),
    ]
    assert mine[0]["backend"]["address"] == "10.0.0.10"
    assert [
        p["host"] for p in pool.pools_of("gpu2", groups, hostvars, _side(), SERVER_DEFAULTS)
    ] == [
        "lb",
        "lb2",
        "other",
    ]
    assert (
        pool.pools_of("gpu1", {"llama_servers": ["gpu1"]}, hostvars, _side(), SERVER_DEFAULTS) == []
    )


def test_a_pool_host_of_another_instance_is_read_with_its_own_settings(pool: ModuleType) -> None:
    groups, hostvars = _inventory(1)
    hostvars["gpu1"]["llama_server_instances"].append(_server(name="big", port=8090))
    hostvars["lb"]["llama_pool_instance"] = "big"
    (mine,) = pool.pools_of("gpu1", groups, hostvars, _side(), SERVER_DEFAULTS)
    assert mine["backend"]["port"] == 8090 and mine["backend"]["key_file"].endswith("/big.key")


def test_the_key_leader_is_the_first_pool_host_of_the_same_servers(pool: ModuleType) -> None:
    hostvars = {"a": {"llama_pool_backends_group": "g2"}, "b": {}, "c": {}}
    assert pool.leader("c", ["a", "b", "c"], hostvars, "llama_servers") == "b"
    assert pool.leader("a", ["a", "b", "c"], hostvars, "llama_servers") == "a"


# --- the pool key ------------------------------------------------------------------------------


def _read(host: str, key: str | None) -> dict[str, Any]:
    read: dict[str, Any] = {"_b": {"name": host}, "changed": False}
    if key is None:
        read["failed"] = True
        read["msg"] = "file not found"
    else:
        read["content"] = base64.b64encode((key + "\n").encode()).decode()
    return read


FRESH = "F" * 48
HELD = "k3yHeldByTheBackends0123456789abcdefghijklmnop"


def test_a_new_pool_gets_the_fresh_key_on_every_backend(pool: ModuleType) -> None:
    plan = pool.key_plan([_read("a", None), _read("b", None)], FRESH)
    assert (
        plan["key"] == FRESH
        and plan["new"]
        and plan["write"] == ["a", "b"]
        and plan["differ"] == []
    )
    assert plan["digest"] == hashlib.sha256(FRESH.encode()).hexdigest().upper()


def test_the_key_the_backends_hold_is_kept_and_copied_to_a_new_backend(pool: ModuleType) -> None:
    plan = pool.key_plan([_read("a", HELD), _read("b", None), _read("c", HELD)], FRESH)
    assert plan["key"] == HELD and not plan["new"] and plan["write"] == ["b"]
    assert pool.key_plan([_read("a", HELD), _read("b", HELD)], FRESH)["write"] == []


def test_backends_that_hold_other_keys_get_the_first_one(pool: ModuleType) -> None:
    other = "another-key-made-by-llama-server-0123456789"
    plan = pool.key_plan([_read("a", HELD), _read("b", other)], FRESH)
    assert plan["key"] == HELD and plan["write"] == ["b"] and plan["differ"] == ["b"]


def test_unreachable_backends_are_left_out_and_all_unreachable_fails(
    pool: ModuleType, filter_error: type[Exception]
) -> None:
    down = {"_b": {"name": "b"}, "unreachable": True}
    plan = pool.key_plan([_read("a", HELD), down], FRESH)
    assert plan["write"] == [] and plan["unreachable"] == ["b"]
    with pytest.raises(filter_error, match="no backend of the pool answered"):
        pool.key_plan([down], FRESH)


def test_a_key_file_that_holds_no_key_is_refused(
    pool: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="is not a key"):
        pool.key_plan([_read("a", "short")], FRESH)
    with pytest.raises(filter_error, match="is not a key"):
        pool.key_plan([_read("a", "has a blank inside it, 0123456789")], FRESH)


def test_the_key_file_name_is_the_llama_server_roles(
    pool: ModuleType, server_filters: ModuleType
) -> None:
    for name in ("pool", "pool/team-a", "a.b@c"):
        assert pool.client_key_file(name) == server_filters.client_key_file(name)


def test_a_client_key_name_with_odd_characters_is_refused(
    pool: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="is not a client name"):
        pool.client_key_file("../../etc/passwd key")


# --- addresses and networks --------------------------------------------------------------------


def test_the_units_networks(pool: ModuleType, filter_error: type[Exception]) -> None:
    backends = [{"name": "gpu1", "address": "10.0.0.10"}, {"name": "gpu2", "address": "fd00::5"}]
    assert pool.ip_allow(["10.1.0.0/16"], "0.0.0.0", backends) == [
        "10.1.0.0/16",
        "10.0.0.10",
        "fd00::5",
    ]
    # on loopback no client network is needed
    assert pool.ip_allow([], "127.0.0.1", backends) == ["10.0.0.10", "fd00::5"]
    with pytest.raises(filter_error, match="names no client networks"):
        pool.ip_allow([], "0.0.0.0", backends)
    with pytest.raises(filter_error, match="is not an address"):
        pool.ip_allow(["10.0.0.0/8\nIPAddressAllow=any"], "0.0.0.0", backends)
    named = [{"name": "gpu3", "address": "gpu3.example.org"}]
    with pytest.raises(filter_error, match="set ansible_host to the backend's IP address"):
        pool.ip_allow(["10.0.0.0/8"], "0.0.0.0", named)
    assert pool.ip_allow(["any"], "0.0.0.0", named) == ["any"]


def test_the_scrapers_of_the_exporter(pool: ModuleType, filter_error: type[Exception]) -> None:
    """The monitoring hosts that may read HAProxy's Prometheus exporter: by address only (the
    frontend's src ACL and the unit's IPAddressAllow= both filter by address)."""
    hostvars = {
        "mon1": {"ansible_host": "10.0.0.7"},
        "mon2": {"ansible_facts": {"default_ipv4": {"address": "10.0.0.8"}}},
        "mon3": {"ansible_host": "10.0.0.7"},
    }
    assert pool.scrapers(["mon1", "mon2", "mon3"], hostvars) == ["10.0.0.7", "10.0.0.8"]
    assert pool.scrapers([], hostvars) == []
    with pytest.raises(filter_error, match=r"mon4: reached at 'mon4\.example\.org', a name"):
        pool.scrapers(["mon4"], {"mon4": {"ansible_host": "mon4.example.org"}})
    assert pool.prometheus_allow(["10.0.0.7", "10.0.0.0/24", "[fd00::9]"]) == [
        "10.0.0.7",
        "10.0.0.0/24",
        "fd00::9",
    ]
    for bad in ("any", "10.0.0.7 10.0.0.8", "mon.example.org"):
        with pytest.raises(filter_error, match="llama_pool_prometheus_allow"):
            pool.prometheus_allow([bad])


def test_haproxy_addresses(pool: ModuleType, filter_error: type[Exception]) -> None:
    assert pool.bind_address("0.0.0.0", 8443) == "0.0.0.0:8443"
    assert pool.bind_address("::", "8443") == ":::8443"
    assert pool.server_address("10.0.0.5", 8080) == "10.0.0.5:8080"
    assert pool.server_address("[fd00::5]", 8080) == "ipv6@fd00::5:8080"
    with pytest.raises(filter_error, match="not a port number"):
        pool.bind_address("0.0.0.0", 70000)
    with pytest.raises(filter_error, match="is not an address"):
        pool.server_address("10.0.0.5 backup", 8080)


@pytest.mark.parametrize(
    ("setting", "bind", "want"),
    [
        ("auto", "0.0.0.0", True),
        ("auto", "127.0.0.1", False),
        ("auto", "::1", False),
        (False, "0.0.0.0", False),
        ("true", "127.0.0.1", True),
    ],
)
def test_tls_on(pool: ModuleType, setting: Any, bind: str, want: bool) -> None:
    assert pool.tls_on(setting, bind) is want


def test_the_exposure_score(pool: ModuleType) -> None:
    text = (
        "  NAME  DESCRIPTION  EXPOSURE\n→ Overall exposure level for haproxy.service: 2.1 OK 🙂\n"
    )
    assert pool.exposure_score(text) == 2.1
    assert pool.exposure_score("nothing") is None


# --- the templates -----------------------------------------------------------------------------


def _render(pool: ModuleType, template: str, **over: Any) -> str:
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters.update(fqcn_filters(pool))
    env.filters["bool"] = bool
    env.filters["int"] = int
    groups, hostvars = _inventory(3)
    values: dict[str, Any] = dict(POOL_DEFAULTS)
    values.update(
        {
            "ansible_managed": "Ansible managed",
            "_llama_pool_backends": pool.backends(_settings(), groups, hostvars, SERVER_DEFAULTS),
            "_llama_pool_bind_address": "0.0.0.0:8443",
            "_llama_pool_tls": True,
            "_llama_pool_cert": "/etc/llamafleet/pool/pool.pem",
            "_llama_pool_backend_ca_dir": "/etc/llamafleet/pool/backends",
            "_llama_pool_key_digest": pool.digest(HELD),
            "_llama_pool_user_digests": [],
            "_llama_pool_backend_key_map": "/etc/llamafleet/pool/backend-key.map",
            "_llama_pool_allow": ["10.0.0.0/24"],
        }
    )
    values.update(over)
    text: str = env.from_string((ROLE / "templates" / template).read_text()).render(values)
    return text


def test_haproxy_cfg_holds_the_keys_digest_not_the_key(pool: ModuleType) -> None:
    text = _render(pool, "haproxy.cfg.j2")
    assert HELD not in text
    assert f"sha2(256),hex -m str {hashlib.sha256(HELD.encode()).hexdigest().upper()}" in text
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin" in text
    assert "balance hash var(txn.llama_affinity)" in text and "hash-type consistent" in text
    assert "req.hdr(x-claude-code-session-id)" in text
    # the answering backend's name only to a request that carried an accepted key
    assert "http-request set-var(txn.llama_keyed) bool(true) if llama_key_ok\n" in text
    assert (
        "http-response set-header X-Llamafleet-Backend %s if { var(txn.llama_keyed) -m bool }\n"
    ) in text
    # the backends get the pool key from the root-only map file, never from the configuration
    assert (
        'http-request set-header Authorization "Bearer '
        '%[str(pool),map(/etc/llamafleet/pool/backend-key.map)]" if llama_key_ok'
    ) in text
    servers = [line.split() for line in text.splitlines() if line.strip().startswith("server ")]
    assert [s[1] for s in servers] == ["gpu1", "gpu2", "gpu3"]
    first = servers[0]
    assert first[2] == "10.0.0.10:8080"
    assert first[first.index("ca-file") + 1] == "/etc/llamafleet/pool/backends/gpu1.crt"
    assert first[first.index("verifyhost") + 1] == "gpu1"
    assert "bind 0.0.0.0:8443 ssl crt /etc/llamafleet/pool/pool.pem alpn http/1.1" in text


def test_roundrobin_and_no_key(pool: ModuleType) -> None:
    text = _render(
        pool,
        "haproxy.cfg.j2",
        llama_pool_balance="roundrobin",
        llama_pool_api_key=False,
        llama_pool_backend_header="",
    )
    assert "balance roundrobin" in text and "hash-type" not in text
    assert "sha2" not in text and "status 401" not in text
    assert "set-header" not in text


def test_haproxy_accepts_the_configuration(pool: ModuleType, tmp_path: Path) -> None:
    """`haproxy -c` (the role's validate:) on the rendered file, with real certificates; HAProxy
    2.6 from the Debian package the role installs (testbed/unit-tools.sh)."""
    haproxy = tool("haproxy")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=t",
            "-keyout",
            str(tmp_path / "pool.pem.key"),
            "-out",
            str(tmp_path / "pool.pem"),
            "-days",
            "2",
        ],
        check=True,
        capture_output=True,
    )
    for name in ("gpu1", "gpu2", "gpu3"):
        shutil.copy(tmp_path / "pool.pem", tmp_path / f"{name}.crt")
    text = _render(
        pool,
        "haproxy.cfg.j2",
        _llama_pool_cert=str(tmp_path / "pool.pem"),
        _llama_pool_backend_ca_dir=str(tmp_path),
        llama_pool_stats_socket=str(tmp_path / "s"),
        # the Prometheus exporter frontend too (HAProxy's use-service prometheus-exporter)
        _llama_pool_prometheus_bind="127.0.0.1:8405",
        _llama_pool_scrapers=["10.0.0.9", "fd00::9"],
        _llama_pool_backend_key_map=str(tmp_path / "backend-key.map"),
        _llama_pool_user_digests=[pool.digest("a-user-key-0123456789")],
    )
    (tmp_path / "backend-key.map").write_text(f"pool {HELD}\n")
    assert "use-service prometheus-exporter" in text
    cfg = tmp_path / "haproxy.cfg"
    # (the chroot directory and the haproxy account come with the package; not needed to check)
    lines = [
        line
        for line in text.splitlines()
        if line.split()[:1] not in (["chroot"], ["user"], ["group"])
    ]
    cfg.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [haproxy, "-c", "-f", str(cfg)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_drop_in_hardens_and_lets_in_clients_and_backends(pool: ModuleType) -> None:
    text = _render(pool, "llamafleet.conf.j2")
    lines = text.splitlines()
    for want in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateDevices=yes",
        "IPAddressDeny=any",
        "IPAddressAllow=10.0.0.0/24",
        "RuntimeDirectoryMode=0700",
        "UMask=0077",
        "SystemCallFilter=@system-service @setuid chroot",
    ):
        assert want in lines, want
    caps = next(line for line in lines if line.startswith("CapabilityBoundingSet="))
    assert set(caps.split("=", 1)[1].split()) == {
        "CAP_NET_BIND_SERVICE",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
    }
    assert "LimitNOFILE=9216" in lines
    off = _render(pool, "llamafleet.conf.j2", llama_pool_hardening=False)
    assert "ProtectSystem" not in off and "RuntimeDirectory=haproxy" in off


def test_the_backend_name_goes_only_to_requests_with_the_key(
    pool: ModuleType, tmp_path: Path
) -> None:
    """The real HAProxy in front of stand-in backends (_LoopbackPool; they answer what
    llama-server answers /v1/models without a key): an answer to a client without an accepted key
    carries no X-Llamafleet-Backend; one to a client with the pool key names the backend."""
    lp = _LoopbackPool(pool, tmp_path)
    try:
        lp.start([])
        status, backend = lp.ask(HELD, "", path="/v1/models")
        assert status == 200 and backend in ("gpu1", "gpu2", "gpu3")
        assert lp.ask("", "", path="/v1/models") == (200, None)
        assert lp.ask("not-the-pool-key", "", path="/v1/models") == (200, None)
    finally:
        lp.close()


# ----------------------------------------------------------------------------- users' own keys


def test_pool_users_from_the_inventory(pool: ModuleType, filter_error: type[Exception]) -> None:
    """auto: the claude_code users of the clients group whose pool is this one (their own pool,
    the host's claude_code_pool, or auto with a server behind it); a list: those names."""
    groups = {"claude_clients": ["ws", "lap", "other"], "llama_servers": ["gpu1", "gpu2"]}
    hostvars: dict[str, Any] = {
        "ws": {
            "claude_code_server": "gpu1",
            "claude_code_users": [{"name": "alice"}, {"name": "bob", "pool": ""}],
        },
        "lap": {
            "claude_code_pool": "lb",
            "claude_code_managed": True,
            "claude_code_users": [{"name": "carol", "server": "elsewhere"}],
        },
        # auto, but their server is not behind the pool, or another instance
        "other": {
            "claude_code_server": "gpu9",
            "claude_code_users": [
                {"name": "dave"},
                {"name": "erin", "server": "gpu2", "instance": "small"},
            ],
        },
    }
    got = pool.clients("auto", "lb", groups, hostvars, "claude_clients", "llama_servers", "main")
    assert got == ["lap/(managed)", "lap/carol", "ws/alice"]
    assert pool.clients(
        ["ws/zed", "ws/alice", "ws/zed"], "lb", groups, hostvars, "x", "y", "z"
    ) == [
        "ws/alice",
        "ws/zed",
    ]
    for bad in (["alice"], ["ws/a b"], "everyone", [["ws/alice"]]):
        with pytest.raises(filter_error, match="llama_pool_clients"):
            pool.clients(bad, "lb", groups, hostvars, "claude_clients", "llama_servers", "main")


def test_each_user_key_is_its_own(pool: ModuleType) -> None:
    from llamafleet.poolkeys import user_key

    alice, bob = user_key(HELD, "ws/alice"), user_key(HELD, "ws/bob")
    assert len({alice, bob, HELD}) == 3 and HELD not in alice
    # another pool key: other user keys; the same inputs: the same key on every pool host
    assert user_key(HELD + "x", "ws/alice") != alice == user_key(HELD, "ws/alice")
    digests = pool.client_digests(HELD, ["ws/alice", "ws/bob"])
    assert digests == {"ws/alice": pool.digest(alice), "ws/bob": pool.digest(bob)}


class _LoopbackPool:
    """The real HAProxy on loopback with the rendered configuration (plain http) in front of three
    local HTTP servers standing in for llama-server's backends: each records the Authorization
    and x-api-key it gets (what they cannot show: llama-server's own key check, which the pool
    scenario runs)."""

    def __init__(self, pool: ModuleType, tmp_path: Path) -> None:
        import http.server
        import socket
        import threading

        self.pool, self.tmp = pool, tmp_path
        self.seen: dict[str, list[str]] = {}
        self.servers = []
        for n in (1, 2, 3):
            srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler(f"gpu{n}"))
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            self.servers.append(srv)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.front = s.getsockname()[1]
        self.keymap = tmp_path / "backend-key.map"
        self.keymap.write_text(f"pool {HELD}\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def _handler(self, name: str) -> type[Any]:
        import http.server

        seen = self.seen

        class Backend(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                got = (
                    self.headers.get("Authorization", "") + "|" + self.headers.get("x-api-key", "")
                )
                seen.setdefault(name, []).append(got)
                body = b'{"status":"ok"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Backend

    def start(self, users: list[str]) -> None:
        """HAProxy on a configuration rendered for these pool users."""
        import time
        import urllib.error

        self.stop()
        backends = [
            {"name": f"gpu{n}", "address": "127.0.0.1", "port": srv.server_address[1], "id": n,
             "tls": False, "verifyhost": ""}
            for n, srv in enumerate(self.servers, 1)
        ]  # fmt: skip
        text = _render(
            self.pool,
            "haproxy.cfg.j2",
            _llama_pool_tls=False,
            _llama_pool_bind_address=f"127.0.0.1:{self.front}",
            _llama_pool_backends=backends,
            llama_pool_stats_socket=str(self.tmp / "s"),
            _llama_pool_backend_key_map=str(self.keymap),
            _llama_pool_user_digests=list(self.pool.client_digests(HELD, users).values()),
        )
        lines = [
            x for x in text.splitlines() if x.split()[:1] not in (["chroot"], ["user"], ["group"])
        ]
        (self.tmp / "haproxy.cfg").write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen(
            [tool("haproxy"), "-db", "-f", str(self.tmp / "haproxy.cfg")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                self.ask(HELD, "probe")
                return
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.2)

    def ask(
        self, key: str, session: str, header: str = "Authorization", path: str = "/v1/messages"
    ) -> tuple[int, str | None]:
        """(status, X-Llamafleet-Backend) of a request with ``key`` in ``header`` (none: "")."""
        import urllib.error
        import urllib.request

        headers = {header: f"Bearer {key}" if header == "Authorization" else key} if key else {}
        if session:
            headers["X-Claude-Code-Session-Id"] = session
        req = urllib.request.Request(f"http://127.0.0.1:{self.front}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.headers.get("X-Llamafleet-Backend")
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("X-Llamafleet-Backend")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def close(self) -> None:
        self.stop()
        for srv in self.servers:
            srv.shutdown()


def test_real_haproxy_takes_each_users_key_refuses_a_removed_one_and_hashes_on_the_key(
    pool: ModuleType, tmp_path: Path
) -> None:
    """The real HAProxy in front of three stand-in backends (_LoopbackPool). Each listed user's
    own key is let in and the backends get the pool key in its place; a key of no listed user is
    refused; the same session id sent with two users' keys is hashed apart (one user cannot steer
    onto another user's session); after the user is taken off the list and HAProxy started on
    the new configuration, their old key is refused."""
    from llamafleet.poolkeys import user_key

    lp = _LoopbackPool(pool, tmp_path)
    alice, bob = user_key(HELD, "ws/alice"), user_key(HELD, "ws/bob")
    try:
        lp.start(["ws/alice", "ws/bob"])
        lp.seen.clear()
        status, where = lp.ask(alice, "s-alice")
        assert status == 200 and where in ("gpu1", "gpu2", "gpu3")
        # the backend got the pool key, not alice's
        assert lp.seen[where] == [f"Bearer {HELD}|"]
        lp.seen.clear()
        status, where = lp.ask(bob, "s-bob", header="x-api-key")
        assert status == 200 and where and lp.seen[where] == [f"Bearer {HELD}|"]
        assert lp.ask("not-a-listed-key", "s-x") == (401, None)
        assert lp.ask(alice[:-1] + ("1" if alice[-1] == "0" else "0"), "s-x")[0] == 401
        # a conversation stays on one backend; bob sending alice's session ids lands elsewhere
        # for some of them (a fixed list of ids: the outcome does not depend on chance)
        sessions = [f"session-{n}" for n in range(30)]
        placed = {(k, sid): lp.ask(k, sid)[1] for k in (alice, bob) for sid in sessions}
        assert all(lp.ask(alice, sid)[1] == placed[(alice, sid)] for sid in sessions[:5])
        apart = [sid for sid in sessions if placed[(alice, sid)] != placed[(bob, sid)]]
        assert apart, "the session id alone decides the backend"
        # bob taken off the list: HAProxy on the new configuration refuses his old key
        lp.start(["ws/alice"])
        assert lp.ask(bob, "s-bob")[0] == 401
        assert lp.ask(alice, "s-alice")[0] == 200
    finally:
        lp.close()

"""The monitoring role's Prometheus side: the scrape targets from the inventory (every enabled
instance with its address, scheme, CA and monitoring key; the exporters; HAProxy), prometheus.yml
built from them and accepted by the real promtool (the key only as a credentials file), the units'
networks, and the recording and alerting rules checked and unit-tested with `promtool check rules`
and `promtool test rules` (series in, alerts out: tests/fixtures/monitoring/rules-tests.yml).

promtool comes from PATH or from ``$LLAMAFLEET_CACHE/tools/bin`` (testbed/unit-tools.sh, run by
``make unit``); without it the promtool tests are skipped, except under CI (CI=true), where they
fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import load_ansible_plugin, plugin_path, tool

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "monitoring"
FIXTURES = Path(__file__).parent / "fixtures" / "monitoring"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
SERVER_DEFAULTS = yaml.safe_load(
    (REPO / "roles" / "llama_server" / "defaults" / "main.yml").read_text()
)
SETTINGS = {
    "servers_group": "llama_servers",
    "pools_group": "llama_pools",
    "mtail": True,
    "mtail_port": 3903,
    "node": True,
    "node_port": 9100,
    "haproxy_port": 0,
}
PROM_SETTINGS = {
    "scrape_interval": "15s",
    "scrape_timeout": "10s",
    "evaluation_interval": "15s",
    "rules_file": "/etc/prometheus/llamafleet-rules.yml",
    "listen": "127.0.0.1:9090",
    "credentials_dir": "/run/credentials/prometheus.service",
    "ca_dir": "/etc/prometheus/llamafleet-ca",
}


@pytest.fixture(scope="module")
def mon() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "monitoring"))


def _inventory() -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    groups = {
        "llama_servers": ["srv-b", "srv-a", "mon"],
        "monitoring": ["mon"],
        "llama_pools": ["lb"],
    }
    hostvars: dict[str, dict[str, Any]] = {
        "srv-a": {
            "ansible_host": "10.0.0.11",
            "llama_server_instances": [
                {"name": "main", "model": "m", "host": "0.0.0.0", "port": 8080},
                {"name": "small", "model": "m", "host": "10.0.0.11", "port": 8081, "tls": False},
                {"name": "off", "model": "m", "host": "0.0.0.0", "port": 8082, "enabled": False},
            ],
            # the llama_server role ran in this run: its fact gives the scheme and the CA
            "llama_server_endpoints": {
                "main": {"scheme": "https", "ca_pem": "-----BEGIN CERTIFICATE-----\nA\n"},
            },
        },
        "srv-b": {
            "ansible_host": "10.0.0.12",
            "llama_server_key_dir": "/etc/keys",
            "llama_server_tls_ca_cert": "/etc/own/ca.crt",
            "monitoring_mtail": False,
            "llama_server_instances": [{"name": "main", "model": "m", "host": "0.0.0.0"}],
        },
        # the monitoring host serves too, on loopback: scraped on 127.0.0.1, no TLS (auto)
        "mon": {
            "ansible_host": "10.0.0.5",
            "llama_server_api_key": False,
            "llama_server_instances": [{"name": "main", "model": "m", "port": 8080}],
        },
        "lb": {"ansible_host": "10.0.0.20"},
    }
    return groups, hostvars


def _targets(mon: ModuleType, **over: Any) -> dict[str, list[dict[str, Any]]]:
    groups, hostvars = _inventory()
    settings = dict(SETTINGS, **over)
    found: dict[str, list[dict[str, Any]]] = mon.targets(
        groups, hostvars, settings, SERVER_DEFAULTS, "mon"
    )
    return found


def test_every_enabled_instance_is_a_target(mon: ModuleType) -> None:
    found = _targets(mon)
    by_id = {t["id"]: t for t in found["llama"]}
    assert sorted(by_id) == ["mon_main", "srv-a_main", "srv-a_small", "srv-b_main"]
    a = by_id["srv-a_main"]
    assert (a["target"], a["scheme"], a["ca_pem"]) == (
        "10.0.0.11:8080",
        "https",
        "-----BEGIN CERTIFICATE-----\nA\n",
    )
    assert a["key_file"] == "/etc/llamafleet/keys/main.clients/monitoring.key"
    small = by_id["srv-a_small"]
    assert (small["target"], small["scheme"]) == ("10.0.0.11:8081", "http")
    b = by_id["srv-b_main"]
    # no fact: TLS from llama_server_tls (auto, beyond loopback), the CA read on the host
    assert (b["scheme"], b["ca_pem"], b["ca_file"]) == ("https", "", "/etc/own/ca.crt")
    assert b["key_file"] == "/etc/keys/main.clients/monitoring.key"
    own = by_id["mon_main"]
    assert (own["target"], own["scheme"], own["key_file"]) == ("127.0.0.1:8080", "http", "")


def test_exporters_and_haproxy(mon: ModuleType) -> None:
    found = _targets(mon)
    assert [t["target"] for t in found["mtail"]] == ["127.0.0.1:3903", "10.0.0.11:3903"]
    assert [t["target"] for t in found["node"]] == [
        "127.0.0.1:9100",
        "10.0.0.11:9100",
        "10.0.0.12:9100",
    ]
    assert found["haproxy"] == []
    with_pool = _targets(mon, haproxy_port=8405)
    assert [t["target"] for t in with_pool["haproxy"]] == ["10.0.0.20:8405"]


def test_a_loopback_instance_of_another_host_is_refused(mon: ModuleType) -> None:
    groups, hostvars = _inventory()
    hostvars["srv-b"]["llama_server_instances"] = [{"name": "main", "model": "m"}]
    with pytest.raises(Exception, match=r"srv-b: instance 'main' listens on 127.0.0.1.*ip_allow"):
        mon.targets(groups, hostvars, SETTINGS, SERVER_DEFAULTS, "mon")


def test_a_keyed_instance_needs_the_monitoring_key_name(mon: ModuleType) -> None:
    groups, hostvars = _inventory()
    hostvars["srv-b"]["llama_server_monitoring_client_key"] = ""
    with pytest.raises(Exception, match="llama_server_monitoring_client_key"):
        mon.targets(groups, hostvars, SETTINGS, SERVER_DEFAULTS, "mon")


def test_prometheus_config_holds_no_key(mon: ModuleType) -> None:
    config = mon.prometheus_config(_targets(mon), PROM_SETTINGS)
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    a = jobs["llama_server_srv-a_main"]
    assert a["authorization"] == {
        "credentials_file": "/run/credentials/prometheus.service/srv-a_main"
    }
    assert a["tls_config"] == {"ca_file": "/etc/prometheus/llamafleet-ca/srv-a_main.crt"}
    assert a["static_configs"][0]["labels"] == {"llama_host": "srv-a", "llama_instance": "main"}
    assert a["relabel_configs"] == [{"target_label": "job", "replacement": "llama_server"}]
    assert "authorization" not in jobs["llama_server_mon_main"]
    assert [g["targets"] for g in jobs["llama_mtail"]["static_configs"]] == [
        ["127.0.0.1:3903"],
        ["10.0.0.11:3903"],
    ]
    assert config["rule_files"] == ["/etc/prometheus/llamafleet-rules.yml"]
    with pytest.raises(Exception, match="monitoring_scrape_interval"):
        mon.prometheus_config({}, dict(PROM_SETTINGS, scrape_interval="15 seconds"))


def test_promtool_accepts_the_rendered_config(mon: ModuleType, tmp_path: Path) -> None:
    """The role's template with the filter's data, checked as the role's validate: does (the
    syntax: the credentials exist only inside the running service), then fully with the
    credentials, CA and rules files put in place, as Prometheus loads it."""
    promtool = tool("promtool")
    jinja2 = pytest.importorskip("jinja2")
    config = mon.prometheus_config(
        _targets(mon),
        dict(
            PROM_SETTINGS,
            credentials_dir=str(tmp_path / "creds"),
            ca_dir=str(tmp_path / "ca"),
            rules_file=str(tmp_path / "rules.yml"),
        ),
    )
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_nice_yaml"] = lambda v, indent=2, sort_keys=True: yaml.safe_dump(
        v, indent=indent, sort_keys=sort_keys, default_flow_style=False
    )
    text = env.from_string((ROLE / "templates" / "prometheus.yml.j2").read_text()).render(
        ansible_managed="Ansible managed",
        _monitoring_config=config,
        monitoring_servers_group="llama_servers",
        _monitoring_credentials_dir="/run/credentials/prometheus.service",
    )
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(text)
    syntax = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(cfg)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    (tmp_path / "rules.yml").write_text("groups: []\n")
    full = subprocess.run(
        [promtool, "check", "config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert full.returncode != 0 and "credentials" in full.stdout + full.stderr
    (tmp_path / "creds").mkdir()
    (tmp_path / "ca").mkdir()
    for t in _targets(mon)["llama"]:
        (tmp_path / "creds" / t["id"]).write_text("k\n")
        (tmp_path / "ca" / f"{t['id']}.crt").write_text("")
    full = subprocess.run(
        [promtool, "check", "config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert full.returncode == 0, full.stdout + full.stderr


def test_networks_of_the_units(mon: ModuleType) -> None:
    found = _targets(mon)
    assert mon.ip_allow([], "127.0.0.1:9090", found) == ["10.0.0.11", "10.0.0.12"]
    with pytest.raises(Exception, match="names no client networks"):
        mon.ip_allow([], "0.0.0.0:9090", found)
    groups, hostvars = _inventory()
    hostvars["srv-a"]["ansible_host"] = "srv-a.example"
    named = mon.targets(groups, hostvars, SETTINGS, SERVER_DEFAULTS, "mon")
    with pytest.raises(Exception, match=r"srv-a: scraped at 'srv-a\.example', a name"):
        mon.ip_allow([], "127.0.0.1:9090", named)
    assert mon.ip_allow(["any"], "127.0.0.1:9090", named)[0] == "any"
    # the exporters: the monitoring hosts by ansible_host, else by their gathered address
    assert mon.exporter_allow([], ["mon"], hostvars, "srv-a") == ["10.0.0.5"]
    assert mon.exporter_allow([], ["mon"], hostvars, "mon") == []
    hostvars["mon"]["ansible_host"] = "mon.example"
    with pytest.raises(Exception, match="monitoring host mon: no IP address known"):
        mon.exporter_allow([], ["mon"], hostvars, "srv-a")
    hostvars["mon"]["ansible_facts"] = {"default_ipv4": {"address": "10.0.0.6"}}
    assert mon.exporter_allow(["10.1.0.0/16"], ["mon"], hostvars, "srv-a") == [
        "10.1.0.0/16",
        "10.0.0.6",
    ]


def render_rules(**over: Any) -> str:
    """The role's rules template with its defaults (and ``over``), as Ansible renders it."""
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True
    )
    env.filters["bool"] = bool
    values = dict(DEFAULTS, ansible_managed="Ansible managed")
    values.update(over)
    text: str = env.from_string(
        (ROLE / "templates" / "llamafleet-rules.yml.j2").read_text()
    ).render(values)
    return text


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    promtool = tool("promtool")
    rules = tmp_path / "rules.yml"
    rules.write_text(render_rules())
    out = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 25 rules found" in out.stdout
    names = [
        r.get("record") or r.get("alert")
        for g in yaml.safe_load(rules.read_text())["groups"]
        for r in g["rules"]
    ]
    assert {
        "LlamaServerDown",
        "LlamaCacheHitRatioLow",
        "LlamaRequestsDeferred",
        "ModelDiskNearlyFull",
        "llama_instance:prompt_cache_hit_ratio:rate",
        "llama_fleet:prompt_cache_hit_ratio:rate",
    } <= set(names)
    # without the node exporter there is no disk metric to alert on
    rules.write_text(render_rules(monitoring_node_exporter=False))
    assert "ModelDiskNearlyFull" not in rules.read_text()
    out = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_of_the_rules(tmp_path: Path) -> None:
    """Each alert fires on the series it is for and stays silent on the others (and the
    recording rules give the expected values); a changed threshold makes the cases fail."""
    promtool = tool("promtool")
    shutil.copy(FIXTURES / "rules-tests.yml", tmp_path / "rules-tests.yml")
    (tmp_path / "rules.yml").write_text(render_rules())
    out = subprocess.run(
        [promtool, "test", "rules", "rules-tests.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (tmp_path / "rules.yml").write_text(render_rules(monitoring_cache_ratio_threshold=0.95))
    out = subprocess.run(
        [promtool, "test", "rules", "rules-tests.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert out.returncode != 0 and "LlamaCacheHitRatioLow" in out.stdout + out.stderr

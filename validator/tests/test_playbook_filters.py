"""The fleet playbooks' filters. llamafleet_units.py reads deployed units with the validator's unit
parser: variables from Environment=, quoted paths, short flags and the defaults the rollout and
audit rely on. llamafleet_fleet.py holds what rollout.yml and audit.yml compute: the free-space
check, the rollback summary, the audit's users, servers, check items, host and fleet report, and
what audit_fail_on fails on; the Markdown report is rendered from templates/fleet-audit.md.j2."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, plugin_path

PLUGIN = plugin_path("filter", "llamafleet_units")


def _load() -> ModuleType:
    return load_ansible_plugin(PLUGIN)


def _server(text: str) -> dict[str, Any]:
    result: dict[str, Any] = _load().FilterModule().filters()["llamafleet_unit_server"](text)
    return result


def test_reads_environment_quotes_and_short_flags() -> None:
    unit = (
        "[Service]\nEnvironment=PORT=8089\n"
        'ExecStart=/opt/llama.cpp/current/bin/llama-server -m "/srv/models/a b/x.gguf" '
        "--host 0.0.0.0 --port ${PORT} -c 4096\n"
    )
    assert _server(unit) == {
        "host": "0.0.0.0",
        "port": 8089,
        "model": "/srv/models/a b/x.gguf",
        "ctx_size": 4096,
    }


def test_defaults_and_a_specific_address() -> None:
    unit = "[Service]\nExecStart=/usr/bin/llama-server --model m.gguf --host 10.0.0.5\n"
    s = _server(unit)
    assert (s["host"], s["port"]) == ("10.0.0.5", 8080)
    assert s["ctx_size"] is None


def test_unit_without_execstart_is_empty() -> None:
    assert _server("[Service]\nType=simple\n") == {}


def _base_url(user: str, managed: str | None = None) -> str:
    result: str = _load().FilterModule().filters()["llamafleet_client_base_url"](user, managed)
    return result


def test_base_url_from_user_settings_managed_wins() -> None:
    user = '{"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.5:8080"}}'
    managed = '{"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.9:8081"}}'
    assert _base_url(user) == "http://10.0.0.5:8080"
    assert _base_url(user, managed) == "http://10.0.0.9:8081"
    assert _base_url(user, '{"env": {}}') == "http://10.0.0.5:8080"


def test_base_url_unset_or_broken_is_empty() -> None:
    assert _base_url('{"model": "x"}') == ""
    assert _base_url("{not json") == ""


# ---------------------------------------------------------------- llamafleet_fleet.py

FLEET = PLUGIN.with_name("llamafleet_fleet.py")
TEMPLATE = REPO / "playbooks" / "templates" / "fleet-audit.md.j2"

OPS_SETTINGS = json.dumps(
    {
        "env": {
            "ANTHROPIC_BASE_URL": "http://10.0.0.41:8080",
            "ANTHROPIC_AUTH_TOKEN": "sk-local-not-the-servers-key",
        }
    }
)
LOOPBACK_UNIT = (
    "[Service]\nExecStart=/opt/llama.cpp/current/bin/llama-server --model /srv/models/tiny/m.gguf "
    "--host 127.0.0.1 --port 8080 --ctx-size 65536\n"
)


def _f(name: str) -> Any:
    return load_ansible_plugin(FLEET).FilterModule().filters()[name]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_short_of_space_uses_the_longest_mount_point() -> None:
    mounts = [
        {"mount": "/", "size_available": 10 * 2**30},
        {"mount": "/opt/llama", "size_available": 100 * 2**20},  # not a parent of /opt/llama.cpp
        {"mount": "/srv", "size_available": 512 * 2**20},
        {"mount": "/proc"},  # no size: never chosen
    ]
    short = _f("llamafleet_short_of_space")
    dirs = ["/opt/llama.cpp", "/var/cache/llama.cpp", "/srv/models", "/srv/models"]
    assert short(dirs, mounts, 1024) == ["/srv/models (on /srv): 512 MiB free"]
    assert short(dirs, mounts, "20480") == [
        "/opt/llama.cpp (on /): 10240 MiB free",
        "/var/cache/llama.cpp (on /): 10240 MiB free",
        "/srv/models (on /srv): 512 MiB free",
    ]
    assert short(["/srv"], mounts, 1024) == ["/srv (on /srv): 512 MiB free"]
    assert short(dirs, [], 1024) == []


def test_rollout_builder_is_the_first_named_builder_of_the_platform() -> None:
    """Builders by name: the inventory's group and the platform it gives each builder; a host's
    own facts (its _rollout_platform_key) never make it a builder."""
    hostvars = {
        "a": {"rollout_builder_platform": "debian-bookworm-x86_64-cuda-89"},
        "b": {"_rollout_platform_key": "debian-bookworm-x86_64-cpu-any"},
        "c": {"rollout_builder_platform": "debian-bookworm-x86_64-cpu-any"},
        "d": {"rollout_builder_platform": "debian-bookworm-x86_64-cpu-any"},
    }
    builder = _f("llamafleet_rollout_builder")
    hosts = ["a", "b", "c", "d"]
    assert builder("debian-bookworm-x86_64-cpu-any ", hosts, hostvars, ["a", "c", "d"]) == "c"
    assert builder("debian-bookworm-x86_64-cuda-89", hosts, hostvars, ["a", "c"]) == "a"
    # b reports the platform but is no builder; d declares it but is not in the group
    assert builder("debian-bookworm-x86_64-cpu-any", ["a", "b", "d"], hostvars, ["a", "b"]) == ""
    assert builder("debian-bookworm-x86_64-cpu-any", hosts, hostvars) == ""
    assert builder("other", hosts, hostvars, hosts) == ""


def test_rollback_summary() -> None:
    summary = _f("llamafleet_rollback_summary")
    old = {"stat": {"islnk": True, "lnk_source": "/opt/llama.cpp/builds/b1"}}
    new = {"stat": {"islnk": True, "lnk_source": "/opt/llama.cpp/builds/b2"}}
    restored = {
        "results": [
            {"_u": {"source": "/etc/systemd/system/llama-server-main.service"}, "changed": True},
            {"_u": {"source": "/etc/systemd/system/llama-server-b.service"}, "changed": False},
        ]
    }
    health = {
        "results": [
            {"_u": {"source": "/etc/systemd/system/llama-server-main.service"}, "status": 200},
            {"_u": {"source": "/etc/systemd/system/llama-server-b.service"}, "skipped": True},
        ]
    }
    added = ["/etc/systemd/system/llama-server-new.service"]
    assert summary(old, new, restored, added, health) == {
        "build": "current -> /opt/llama.cpp/builds/b1 (the new build /opt/llama.cpp/builds/b2 "
        "stays installed)",
        "units": "llama-server-main.service restored, removed llama-server-new.service",
        "serving": (
            "llama-server-main.service /health 200, llama-server-b.service /health no answer"
        ),
    }
    same = summary(old, old, {"results": []}, [], {"results": []})
    assert same == {
        "build": "unchanged (/opt/llama.cpp/builds/b1)",
        "units": "none changed restored",
        "serving": "no unit was running before this rollout",
    }
    assert summary({"stat": {"exists": False}}, {}, {}, [], {})["build"] == (
        "none before this rollout: left as is"
    )


def test_audit_users_are_root_and_real_accounts() -> None:
    passwd = {
        "root": ["x", "0", "0", "root", "/root", "/bin/bash"],
        "daemon": ["x", "1", "1", "", "/usr/sbin", "/usr/sbin/nologin"],
        "ops": ["x", "1001", "1001", "", "/home/ops", "/bin/bash"],
        "dev": ["x", "1000", "1000", "", "/home/dev", "/bin/bash"],
        "nobody": ["x", "65534", "65534", "", "/nonexistent", "/usr/sbin/nologin"],
    }
    users = _f("llamafleet_audit_users")
    assert users(passwd) == [
        {"name": "dev", "home": "/home/dev"},
        {"name": "ops", "home": "/home/ops"},
        {"name": "root", "home": "/root"},
    ]
    assert [u["name"] for u in users(passwd, "1001")] == ["ops", "root"]


def _unit_read(name: str, text: str) -> dict[str, Any]:
    return {"source": f"/etc/systemd/system/{name}", "content": _b64(text)}


FLEET_HOSTVARS: dict[str, Any] = {
    "srv-1": {
        "ansible_host": "10.0.0.41",
        "ansible_facts": {"hostname": "srv1", "fqdn": "srv1.example.net"},
        "_audit_units": {"results": [_unit_read("llama-server-main.service", LOOPBACK_UNIT)]},
    },
    "srv-2": {"ansible_facts": {"hostname": "gpu2"}},
    "down": {},
}


def test_audit_fleet_and_the_server_a_url_names() -> None:
    fleet = _f("llamafleet_audit_fleet")(["srv-1", "srv-2", "down"], FLEET_HOSTVARS)
    assert fleet["srv-1"]["names"] == ["srv-1", "10.0.0.41", "srv1", "srv1.example.net"]
    assert fleet["srv-1"]["units"] == [
        {"path": "/etc/systemd/system/llama-server-main.service", "text": LOOPBACK_UNIT}
    ]
    assert fleet["down"] == {"names": ["down"], "units": []}
    server_of = _load_fleet().llamafleet_audit_server_of
    assert server_of("http://10.0.0.41:8080", "client-1", fleet) == "srv-1"
    assert server_of("https://SRV1.example.net", "client-1", fleet) == "srv-1"
    assert server_of("http://gpu2:8080/v1", "client-1", fleet) == "srv-2"
    # loopback: the client's own host, listed or not
    assert server_of("http://127.0.0.2:8080", "client-1", fleet) == "client-1"
    assert server_of("http://[::1]:8080", "client-1", fleet) == "client-1"
    assert server_of("http://localhost:8080", "client-1", fleet) == "client-1"
    assert server_of("http://elsewhere:8080", "client-1", fleet) == ""
    assert server_of("not a url", "client-1", fleet) == ""
    assert server_of("", "client-1", fleet) == ""


def _load_fleet() -> ModuleType:
    return load_ansible_plugin(FLEET)


def _settings_reads() -> dict[str, Any]:
    return {
        "results": [
            {
                "item": {"name": "ops", "home": "/home/ops"},
                "exists": True,
                "problem": "",
                "content": _b64(OPS_SETTINGS),
                "mode": "0644",
            },
            {"item": {"name": "root", "home": "/root"}, "exists": False, "problem": ""},
            {
                "item": {"name": "eve", "home": "/home/eve"},
                "exists": True,
                "problem": "/home/eve/.claude/settings.json: a symbolic link, not read",
                "content": "",
            },
        ]
    }


def test_audit_clients_match_users_to_servers() -> None:
    fleet = _f("llamafleet_audit_fleet")(["srv-1"], FLEET_HOSTVARS)
    clients = _f("llamafleet_audit_clients")(_settings_reads(), {"exists": False}, "cl-1", fleet)
    assert clients == [
        {
            "user": "ops",
            "path": "/home/ops/.claude/settings.json",
            "text": OPS_SETTINGS,
            "mode": "0644",
            "base_url": "http://10.0.0.41:8080",
            "server": "srv-1",
        }
    ]
    # the managed settings win: a loopback URL names the user's own host
    managed = {
        "exists": True,
        "problem": "",
        "content": _b64('{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}}'),
    }
    clients = _f("llamafleet_audit_clients")(_settings_reads(), managed, "cl-1", fleet)
    assert (clients[0]["base_url"], clients[0]["server"]) == ("http://127.0.0.1:8080", "cl-1")


def _seen(**over: Any) -> dict[str, Any]:
    manifest = {
        "name": "b9079-ef8c15dbd6-cpu-x86_64",
        "version_output": "version: 9079 (ef8c15dbd)\nbuilt with cc",
        "host": "builder-1",
        "backend": "cpu",
        "cuda_architectures": [],
    }
    meta = {"model": "tiny-llama.gguf", "kv": {"general.architecture": "llama"}, "tensors": []}
    seen: dict[str, Any] = {
        "host": "srv-1",
        "hardware": {"processor_cores": 4, "processor_count": 2, "memtotal_mb": 16000},
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA GeForce RTX 4080 SUPER",
                "uuid": "GPU-1",
                "memory_mib": 16376,
                "compute_cap": "8.9",
                "arch": "89",
                "driver_version": "570.1",
            }
        ],
        "units": [_unit_read("llama-server-main.service", LOOPBACK_UNIT)],
        "manifest": {"content": _b64(json.dumps(manifest))},
        "help": {"content": _b64("--model FNAME\n--ctx-size N\n")},
        "metas": [{"content": _b64(json.dumps(meta)), "exists": True, "problem": ""}],
        "servers": [_server(LOOPBACK_UNIT)],
        "active": [{"stdout": "active"}],
        "health": [{"status": 200, "json": {"status": "ok"}}],
        "settings": _settings_reads()["results"],
        "managed": {"exists": False, "problem": ""},
        "managed_path": "/etc/claude-code/managed-settings.json",
        "clients": [
            {
                "user": "ops",
                "path": "/home/ops/.claude/settings.json",
                "text": OPS_SETTINGS,
                "mode": "0644",
                "base_url": "http://10.0.0.41:8080",
                "server": "srv-1",
            }
        ],
    }
    seen.update(over)
    return seen


def test_audit_facts_of_each_unit() -> None:
    facts = _load_fleet().llamafleet_audit_facts(_seen())
    assert facts == [
        {
            "build_manifest": {
                "version_text": "version: 9079 (ef8c15dbd)\nbuilt with cc",
                "help_text": "--model FNAME\n--ctx-size N\n",
                "cuda_architectures": [],
                "backend": "cpu",
            },
            "cpu_cores": 8,
            "ram_mib": 16000,
            "gpu": {
                "name": "NVIDIA GeForce RTX 4080 SUPER",
                "vram_mib": 16376,
                "compute_capability": "8.9",
            },
            "model": {"metadata": {"general.architecture": "llama"}, "tensors": []},
        }
    ]
    # no GPU, no manifest, no metadata: only what is known
    bare = _load_fleet().llamafleet_audit_facts(
        _seen(gpus=[], manifest={"failed": True}, help={}, metas=[{"exists": False}])
    )
    assert "gpu" not in bare[0] and "model" not in bare[0]
    assert bare[0]["build_manifest"]["version_text"] == ""


ANY_UNIT = (
    "[Service]\nExecStart=/opt/llama.cpp/current/bin/llama-server --model /srv/models/m.gguf "
    "--host 0.0.0.0 --port 8081 --api-key-file /etc/llamafleet/keys/b.key\n"
)


def test_audit_items_check_each_unit_and_each_users_settings_with_their_server() -> None:
    fleet = _f("llamafleet_audit_fleet")(["srv-1"], FLEET_HOSTVARS)
    managed = {"exists": True, "problem": "", "content": _b64("{}"), "mode": "0644"}
    items = _f("llamafleet_audit_items")(_seen(managed=managed), fleet)
    assert [i["name"] for i in items] == ["llama-server-main.service", "client-0"]
    unit, client = items
    assert unit["path"] == "/etc/systemd/system/llama-server-main.service"
    assert unit["text"] == LOOPBACK_UNIT
    assert unit["facts"]["gpu"]["vram_mib"] == 16376
    assert client == {
        "name": "client-0",
        "texts": [
            {
                "path": "srv-1:/etc/systemd/system/llama-server-main.service",
                "text": LOOPBACK_UNIT,
                "kind": "unit",
            }
        ],
        "settings": [
            {
                "path": "/home/ops/.claude/settings.json",
                "text": OPS_SETTINGS,
                "scope": "user",
                "mode": 0o644,
            },
            {
                "path": "/etc/claude-code/managed-settings.json",
                "text": "{}",
                "scope": "managed",
                "mode": 0o644,
            },
        ],
    }
    # a loopback URL on a host outside llama_servers: its own units, not the fleet's
    own = _seen(host="ws-1", clients=[{**_seen()["clients"][0], "server": "ws-1"}])
    mine = _f("llamafleet_audit_items")(own, fleet)[1]
    assert [(t["path"], t["text"]) for t in mine["texts"]] == [
        ("ws-1:/etc/systemd/system/llama-server-main.service", LOOPBACK_UNIT)
    ]
    # a user whose URL names no known server: the settings alone
    lost = _seen(clients=[{**_seen()["clients"][0], "server": ""}])
    assert "texts" not in _f("llamafleet_audit_items")(lost, fleet)[1]


def _two_unit_fleet() -> dict[str, Any]:
    """srv-1 with two units: main on 127.0.0.1:8080 and b on 0.0.0.0:8081 (with a key)."""
    units = {
        "results": [
            _unit_read("llama-server-main.service", LOOPBACK_UNIT),
            _unit_read("llama-server-b.service", ANY_UNIT),
        ]
    }
    hostvars = {**FLEET_HOSTVARS, "srv-1": {**FLEET_HOSTVARS["srv-1"], "_audit_units": units}}
    fleet: dict[str, Any] = _f("llamafleet_audit_fleet")(["srv-1"], hostvars)
    return fleet


def test_audit_items_hold_every_unit_of_the_users_server() -> None:
    """A user of a server with several units is checked with all of them (as the audit did before
    it checked in-process), whichever port their URL names."""
    fleet = _two_unit_fleet()
    for url in ("http://10.0.0.41:8081", "http://10.0.0.41:8080", "http://10.0.0.41:9999"):
        seen = _seen(host="cl-1", clients=[{**_seen()["clients"][0], "base_url": url}])
        client = _f("llamafleet_audit_items")(seen, fleet)[1]
        assert [(t["path"], t["kind"]) for t in client["texts"]] == [
            ("srv-1:/etc/systemd/system/llama-server-main.service", "unit"),
            ("srv-1:/etc/systemd/system/llama-server-b.service", "unit"),
        ], url
        assert [t["text"] for t in client["texts"]] == [LOOPBACK_UNIT, ANY_UNIT]


def _check_items() -> Any:
    """The validator's item checker, the one the llamafleet_check action plugin calls; its
    ``checks`` as the plugin returns them."""
    from llamafleet.preflight import check_items

    def run(items: Any) -> list[dict[str, Any]]:
        return [c.as_dict() for c in check_items(items)]

    return run


def test_audit_items_through_the_validator_name_each_file_on_its_host() -> None:
    """The blog-recipe user of the fleet scenario: their settings point at another machine's
    server, which listens on loopback only, with the key over plain http. The findings name the
    user's own file; the unit was checked with the host's facts."""
    fleet = _f("llamafleet_audit_fleet")(["srv-1"], FLEET_HOSTVARS)
    seen = _seen(host="cl-1")
    checks = _check_items()(_f("llamafleet_audit_items")(seen, fleet))
    assert [c["name"] for c in checks] == ["llama-server-main.service", "client-0"]
    client = checks[1]["findings"]
    ids = {f["id"] for f in client}
    assert {"XC001", "CC010"} <= ids, client
    settings = "/home/ops/.claude/settings.json"
    assert {f["file"] for f in client if f["id"] in ("XC001", "CC010")} == {settings}
    report = _f("llamafleet_audit_host_report")(seen, checks)
    ops = report["clients"][0]
    assert {"XC001", "CC010"} <= set(ops["findings"])
    assert {f["file"] for f in ops["findings_detail"]} == {settings}
    assert "sk-local-not-the-servers-key" not in json.dumps(report)


def test_audit_of_a_user_of_the_second_unit_through_the_validator() -> None:
    """The user's URL reaches the server's second unit (0.0.0.0:8081): with every unit in the
    check, XC001 stays silent; a port no unit listens on is reported, naming both units."""
    fleet = _two_unit_fleet()
    check = _check_items()

    def xc001(url: str) -> list[dict[str, Any]]:
        seen = _seen(host="cl-1", clients=[{**_seen()["clients"][0], "base_url": url}])
        settings = json.dumps({"env": {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "k"}})
        seen["clients"][0]["text"] = settings
        client = check(_f("llamafleet_audit_items")(seen, fleet))[1]
        return [f for f in client["findings"] if f["id"] == "XC001"]

    assert xc001("http://10.0.0.41:8081") == []
    (miss,) = xc001("http://10.0.0.41:9999")
    assert ":8080" in miss["message"] and ":8081" in miss["message"], miss


def _checks() -> list[dict[str, Any]]:
    unit_finding = {
        "id": "LS001",
        "name": "x",
        "severity": "warning",
        "message": "m",
        "file": "/etc/systemd/system/llama-server-main.service",
        "line": 2,
        "fix": "f",
    }
    client_findings = [
        {
            "id": "CC001",
            "name": "x",
            "severity": "error",
            "message": "attribution header",
            "file": "/home/ops/.claude/settings.json",
            "line": 3,
            "fix": "f",
        },
        # the server's own finding in a client check: not the user's
        {**unit_finding, "file": "srv-1:/etc/systemd/system/llama-server-main.service"},
        # a cross-file finding on the server's unit: the user's
        {
            "id": "XC002",
            "name": "x",
            "severity": "error",
            "message": "key",
            "file": "srv-1:/etc/systemd/system/llama-server-main.service",
            "line": 2,
            "fix": "f",
        },
    ]
    return [
        {"name": "llama-server-main.service", "findings": [unit_finding]},
        {"name": "client-0", "findings": client_findings},
    ]


def test_audit_host_report() -> None:
    report = _f("llamafleet_audit_host_report")(_seen(), _checks())
    assert {k: v for k, v in report.items() if k not in ("instances", "clients")} == {
        "host": "srv-1",
        "gpu": "NVIDIA GeForce RTX 4080 SUPER",
        "compute_capability": "8.9",
        "vram_mib": 16376,
        "ram_mib": 16000,
        "build": "b9079-ef8c15dbd6-cpu-x86_64",
        "build_version": "version: 9079 (ef8c15dbd)",
        "built_on": "builder-1",
        "refused": ["/home/eve/.claude/settings.json: a symbolic link, not read"],
    }
    (inst,) = report["instances"]
    assert {k: v for k, v in inst.items() if k != "findings_detail"} == {
        "unit": "llama-server-main.service",
        "active": "active",
        "health": "ok",
        "model": "tiny-llama.gguf",
        "ctx": "65536",
        "findings": ["LS001"],
    }
    (ops,) = report["clients"]
    assert {k: v for k, v in ops.items() if k != "findings_detail"} == {
        "user": "ops",
        "settings": "/home/ops/.claude/settings.json",
        "managed": False,
        "base_url": "http://10.0.0.41:8080",
        "server": "srv-1",
        "findings": ["CC001", "XC002"],
    }


def test_audit_host_report_without_gpu_build_or_answers() -> None:
    seen = _seen(
        gpus=[],
        manifest={"failed": True},
        metas=[{"exists": False}],
        servers=[{}],
        active=[{"stdout": ""}],
        health=[{"skipped": True}],
        clients=[],
        settings=[],
    )
    report = _f("llamafleet_audit_host_report")(seen, [])
    assert (report["gpu"], report["compute_capability"], report["vram_mib"]) == ("none", "", 0)
    assert (report["build"], report["build_version"]) == ("none", "")
    inst = report["instances"][0]
    assert (inst["active"], inst["health"], inst["model"], inst["ctx"]) == (
        "unknown",
        "no answer",
        "?",
        "default",
    )
    health = _load_fleet()._health
    assert health({"status": -1, "msg": "refused"}) == "no answer"
    assert health({"status": 503, "json": {"status": "loading model"}}) == "loading model"
    assert health({"status": 200}) == "200"


def _fleet_report() -> dict[str, Any]:
    hostvars = {
        "srv-1": {"audit_host_report": _f("llamafleet_audit_host_report")(_seen(), _checks())},
        "srv-2": {},
        "cl-1": {
            "audit_host_report": _f("llamafleet_audit_host_report")(
                _seen(host="cl-1", units=[], servers=[], metas=[], active=[], health=[]), []
            )
        },
    }
    report: dict[str, Any] = _f("llamafleet_audit_report")(hostvars, ["srv-1", "srv-2"], ["cl-1"])
    return report


def test_audit_report_and_what_fails_it() -> None:
    report = _fleet_report()
    assert [h["host"] for h in report["hosts"]] == ["srv-1", "cl-1"]
    assert report["unreached"] == ["srv-2"]
    failing = _f("llamafleet_audit_failing")
    assert failing(report, "error") == [
        "srv-1 /home/ops/.claude/settings.json:3: CC001 [error]",
        "srv-1 srv-1:/etc/systemd/system/llama-server-main.service:2: XC002 [error]",
        "srv-1: /home/eve/.claude/settings.json: a symbolic link, not read",
        "cl-1: /home/eve/.claude/settings.json: a symbolic link, not read",
        "srv-2: not reached",
    ]
    assert "srv-1 llama-server-main.service: LS001 [warning]" in failing(report, "warning")
    assert failing(report, "none") == []
    report["hosts"][0]["instances"][0]["health"] = "no answer"
    assert "srv-1 llama-server-main.service: active, /health no answer" in failing(report, "error")
    with pytest.raises(Exception, match="audit_fail_on=fatal"):
        failing(report, "fatal")


def test_markdown_report_template() -> None:
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    template = env.from_string(TEMPLATE.read_text())
    text = template.render(_audit_report=_fleet_report(), _audit_server_group=["srv-1", "srv-2"])
    lines = text.splitlines()
    assert (
        "| srv-1 | NVIDIA GeForce RTX 4080 SUPER | 16376 | llama-server-main.service | "
        "tiny-llama.gguf | 65536 | b9079-ef8c15dbd6-cpu-x86_64 | builder-1 | active | ok | LS001 |"
    ) in lines
    assert "| srv-2 | ? | ? | ? | ? | ? | ? | ? | ? | unreachable | - |" in lines
    # a client-only host without units is not a llama-server row
    assert not [x for x in lines if x.startswith("| cl-1 | NVIDIA")]
    assert (
        "| srv-1 | ops | /home/ops/.claude/settings.json | http://10.0.0.41:8080 | srv-1 | "
        "CC001, XC002 |"
    ) in lines
    assert "- **srv-1** /home/eve/.claude/settings.json: a symbolic link, not read" in lines
    assert (
        "- **srv-1** `/home/ops/.claude/settings.json:3` CC001 [error]: attribution header" in lines
    )
    assert "  Fix: f" in lines
    assert not [x for x in lines if "{%" in x or "{{" in x]


def test_role_defaults_are_the_roles_own(tmp_path: Path) -> None:
    """The playbooks read the roles' defaults instead of repeating them: the inventory's value
    when it sets one, else the role's own."""
    repo = REPO
    defaults = _f("llamafleet_role_defaults")
    got = defaults(["llama_cpp", "gguf_models"])
    for role in ("llama_cpp", "gguf_models"):
        own = yaml.safe_load((repo / "roles" / role / "defaults" / "main.yml").read_text())
        literal = {k: v for k, v in own.items() if "{{" not in json.dumps(v)}
        assert {k: got[k] for k in literal} == literal
    # a default that is a template (facts, other variables) is left out, not handed over raw
    assert "llama_cpp_ccache_dir" not in got
    # only the collection's own roles: a role of the same name elsewhere is not what runs
    with pytest.raises(Exception, match=r"role no_such_role: no .*defaults/main\.yml"):
        defaults(["no_such_role"])

"""Verify the fleet after the rollouts: every host serves config v2 from the same build."""

import json
import os
import re
from pathlib import Path

UNIT = "llama-server-main.service"


def test_service_runs_config_v2(host):
    assert host.service(UNIT).is_running
    unit = host.file(f"/etc/systemd/system/{UNIT}").content_string
    assert "--ctx-size 65536" in unit
    assert "--n-predict 8" in unit
    assert "truncated" not in unit


def test_health(host):
    out = host.run("python3 -c %s", "import urllib.request; print(urllib.request.urlopen("
                   "'http://127.0.0.1:8080/health', timeout=10).read().decode())")
    assert out.rc == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "ok"


def test_build_links(host):
    current = host.file("/opt/llama.cpp/current")
    assert current.is_symlink
    manifest = json.loads(host.file("/opt/llama.cpp/current/manifest.json").content_string)
    assert manifest["backend"] == "cpu"
    # built once and shipped to every host: the builder the controller's index records for it
    # (the default scenario's host in `make test`, the canary lf-fleet-1 when this runs alone)
    builds = Path(os.environ.get("LLAMAFLEET_BUILDS", "/var/tmp/llamafleet-testhosts/builds"))
    index = json.loads((builds / "index.json").read_text())
    builders = {
        entry.get("builder")
        for per_platform in index["builds"].values()
        for name, entry in per_platform.items()
        if name == manifest["name"]
    }
    assert builders == {manifest["host"]}
    assert manifest["host"] in ("lf-fleet-1", "lf-default-bookworm")


def test_kv_cache_types_from_the_journal(host):
    """The KV types the rollout configured are really in use: llama-server's own log line, read
    from the journal (q8_0 both; the default scenario checks the fork's turbo3 the same way)."""
    log = "journalctl -u llama-server-main.service -o cat --no-pager | grep -F "
    size = host.run(log + "'llama_kv_cache: size' | tail -n 1").stdout
    m = re.search(r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB", size)
    assert m, size
    assert (m.group(1), m.group(3)) == ("q8_0", "q8_0"), m.group(0)

"""testbed/fleet-sim.py: the parts that run without test hosts (variants, recap, inventory, the
memory sampler, the table and the plot). The simulation itself runs with `make fleet-sim`."""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "testbed" / "fleet-sim.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_sim", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    # dataclasses look their module up by name
    sys.modules["fleet_sim"] = mod
    spec.loader.exec_module(mod)
    return mod


sim = load()


def test_builtin_variant_and_added_settings() -> None:
    v = sim.parse_variant("fast:ANSIBLE_FORKS=100,e.rollout_batch=100%")
    assert v.name == "fast"
    # the built-in settings, one of them replaced, and an extra variable
    assert v.env["ANSIBLE_GATHERING"] == "smart"
    assert v.env["ANSIBLE_FORKS"] == "100"
    assert v.extra_vars == {"rollout_batch": "100%"}
    facts = Path("/run/facts")
    assert sim.parse_variant("forks").resolved_env(25, facts) == {"ANSIBLE_FORKS": "25"}
    assert sim.parse_variant("facts").resolved_env(5, facts)["ANSIBLE_CACHE_PLUGIN_CONNECTION"] == (
        "/run/facts"
    )
    assert sim.parse_variant("baseline").env == {}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mine", "not built in"),
        ("mine:ANSIBLE_FORKS", "not KEY=VALUE"),
        ("mine:forks=5", "neither an environment variable"),
        ("mine:e.1x=5", "not a variable name"),
        ("bad name:ANSIBLE_FORKS=5", "the name must be"),
        ("old:ref=$(rm -rf x)", "not a git commit or ref"),
        ("poll:cfg.internal-poll=1", "not cfg.SETTING=VALUE"),
        ("poll:cfg.x=$(id)", "not cfg.SETTING=VALUE"),
    ],
)
def test_bad_variants_are_refused(spec: str, message: str) -> None:
    with pytest.raises(sim.SimError, match=message):
        sim.parse_variant(spec)


def test_a_variant_can_set_what_only_ansible_cfg_sets(tmp_path: Path) -> None:
    """internal_poll_interval has no environment variable: the variant's run reads a copy of the
    tree's ansible.cfg with the setting, beside it (its relative paths still the tree's)."""
    v = sim.parse_variant("poll:cfg.internal_poll_interval=0.01,ANSIBLE_FORKS=5")
    assert (v.cfg, v.env) == ({"internal_poll_interval": "0.01"}, {"ANSIBLE_FORKS": "5"})
    (tmp_path / "ansible.cfg").write_text((ROOT / "ansible.cfg").read_text())
    path = sim.config_with(tmp_path, v.cfg, tmp_path / "n5-poll")
    assert path.parent == tmp_path
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path)
    assert parser.get("defaults", "internal_poll_interval") == "0.01"
    # everything else as the tree's own
    assert parser.get("defaults", "forks") == "50"
    assert parser.get("defaults", "collections_path") == ".ansible/collections"


def test_a_variant_can_run_the_playbooks_of_another_commit(tmp_path: Path) -> None:
    v = sim.parse_variant("before:ref=HEAD~1,ANSIBLE_FORKS=5")
    assert (v.ref, v.env) == ("HEAD~1", {"ANSIBLE_FORKS": "5"})
    assert sim.parse_variant("baseline").ref == ""
    tree = sim.tree_of("HEAD", tmp_path / "tree")
    # the committed playbooks and roles, the commit named, the collections of this checkout
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert (tree / "COMMIT").read_text().strip() == head
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:playbooks/rollout.yml"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (tree / "playbooks" / "rollout.yml").read_text() == committed
    assert (tree / "ansible.cfg").is_file()
    # that commit's own collection, installed into the tree (not this checkout's)
    installed = tree / ".ansible" / "collections"
    assert not installed.is_symlink()
    assert (installed / "ansible_collections" / "llamafleet" / "fleet" / "MANIFEST.json").is_file()
    with pytest.raises(sim.SimError, match="not a commit"):
        sim.tree_of("no-such-ref-anywhere", tmp_path / "other")


def test_sizes() -> None:
    assert sim.parse_sizes("5, 10,25") == [5, 10, 25]
    for bad in ("0", "x", f"{sim.MAX_HOSTS + 1}", "5,,10"):
        with pytest.raises(sim.SimError, match="--sizes"):
            sim.parse_sizes(bad)


RECAP = """
PLAY RECAP *********************************************************************
lfsim-1                    : ok=12   changed=3    unreachable=0    failed=0    skipped=4    rescued=0    ignored=0
lfsim-2                    : ok=9    changed=0    unreachable=1    failed=0    skipped=4    rescued=0    ignored=0
"""  # noqa: E501


def test_recap_is_read_from_the_last_play_recap() -> None:
    text = "PLAY RECAP ***\nlfsim-1 : ok=1 changed=1 unreachable=0 failed=1\n" + RECAP
    recap = sim.parse_recap(text)
    assert recap == {
        "lfsim-1": {"ok": 12, "changed": 3, "unreachable": 0, "failed": 0},
        "lfsim-2": {"ok": 9, "changed": 0, "unreachable": 1, "failed": 0},
    }
    assert sim.parse_recap("no recap here") == {}


def test_tasks_are_counted_per_host_and_role_from_real_output() -> None:
    """A real excerpt of the default scenario's converge (fixtures/ansible-output/README.md): 15
    task headers, a loop with two items counted once, skipped tasks counted."""
    text = (ROOT / "validator/tests/fixtures/ansible-output/converge-excerpt.log").read_text()
    got = sim.tasks_per_role(text, ["lf-default-bookworm"])
    assert got == {"llama_cpp": 14.0, "llamafleet_common": 1.0}
    assert sim.tasks_per_role(text, ["lf-default-bookworm", "other"]) == {
        "llama_cpp": 7.0,
        "llamafleet_common": 0.5,
    }
    assert sim.tasks_per_role(text, ["nobody"]) == {}
    ms = [_measurement(5, "baseline", {"first": 200.0, "rerun": 100.0})]
    ms[0]["runs"][1].update(tasks_per_host=15.0, tasks_by_role=got)
    ms[0]["runs"][0].update(tasks_per_host=120.0)
    row = sim.table(ms).splitlines()[2]
    assert row.endswith("| 120 / 15 | llama_cpp 14, llamafleet_common 1 |"), row


def _role_defaults() -> set[str]:
    names: set[str] = set()
    for f in ROOT.glob("roles/*/defaults/main.yml"):
        names |= set(yaml.safe_load(f.read_text()) or {})
    return names


def test_inventory_sets_only_variables_the_roles_or_the_rollout_read() -> None:
    hosts = [(n, sim.host_address("10.131.9", i)) for i, n in enumerate(sim.host_names(3), start=1)]
    inv = sim.inventory(
        hosts, key="/k", net="10.131.9", build_cache=Path("/c/builds"), model_sha="ab" * 32
    )
    assert inv["all"]["children"]["llama_servers"]["hosts"] == {
        "lfsim-1": {"ansible_host": "10.131.9.101"},
        "lfsim-2": {"ansible_host": "10.131.9.102"},
        "lfsim-3": {"ansible_host": "10.131.9.103"},
    }
    known = _role_defaults()
    rollout = (ROOT / "playbooks" / "rollout.yml").read_text()
    unknown = [
        k
        for k in inv["all"]["vars"]
        if not k.startswith("ansible_") and k not in known and k not in rollout
    ]
    assert unknown == []
    first = inv["all"]["vars"]["llama_server_instances"]
    good = sim.GOOD_CONFIG["llama_server_instances"]
    # the good rollout changes every unit
    assert [i["name"] for i in good] == [i["name"] for i in first]
    assert good[0]["args"]["ctx_size"] != first[0]["args"]["ctx_size"]
    assert inv["all"]["vars"]["llama_cpp_commit"] == sim.LLAMA_CPP_COMMIT


def test_the_pinned_commit_is_the_scenarios() -> None:
    config = yaml.safe_load((ROOT / ".config" / "molecule" / "config.yml").read_text())
    assert config["provisioner"]["inventory"]["group_vars"]["all"]["llama_cpp_commit"] == (
        sim.LLAMA_CPP_COMMIT
    )


def test_build_index_lookup(tmp_path: Path) -> None:
    assert sim.builds_of_commit(tmp_path) == []
    (tmp_path / "index.json").write_text("{not json")
    assert sim.builds_of_commit(tmp_path) == []
    index = {
        "format": 1,
        "builds": {
            "debian-bookworm-x86_64-auto-any": {
                "b9079-ef8c15dbd6-cpu-d750fbbc60": {"commit": sim.LLAMA_CPP_COMMIT},
                "b9000-0123456789-cpu-0000000000": {"commit": "0123456789" * 4},
            }
        },
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert sim.builds_of_commit(tmp_path) == ["b9079-ef8c15dbd6-cpu-d750fbbc60"]


def test_sampler_sees_the_whole_process_tree() -> None:
    # a shell that starts a Python child holding 64 MiB: the tree's memory includes the grandchild
    code = "b = bytearray(64 * 1024 * 1024); import time; time.sleep(30)"
    proc = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c '{code}'; true"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            tree = sim.process_tree(proc.pid)
            if len(tree) >= 2 and sum(sim.pss_kib(p) for p in tree) > 64 * 1024:
                break
            time.sleep(0.2)
        assert tree[0] == proc.pid and len(tree) >= 2
        sampler = sim.Sampler(proc.pid, interval=0.1)
        sampler.sample()
        assert sampler.peak_kib > 64 * 1024
        assert sampler.min_available_kib > 0
    finally:
        proc.kill()
        subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
        proc.wait()
    assert sim.pss_kib(2**22 + 12345) == 0


def _measurement(
    n: int, variant: str, seconds: dict[str, float], rc: int = 0, cpu: float | None = None
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = [
        {
            "kind": kind,
            "seconds": s,
            "rc": rc if kind == "good" else 0,
            "peak_controller_mib": 100.0 + n,
            "min_mem_available_mib": 1.0,
            "host_rx_mib": 5.25,
            "host_tx_mib": 0.5,
            "changed_hosts": n if kind != "rerun" else 0,
            "failed_hosts": 0,
            "log": "x",
        }
        for kind, s in seconds.items()
    ]
    if cpu is not None:
        for r in runs:
            r["controller_cpu_s"] = cpu * (1 if r["kind"] == "first" else 0.25)
    return {"n": n, "variant": variant, "runs": runs, "compiled_during_run": False}


def test_table_rows_and_failed_runs() -> None:
    ms = [
        _measurement(10, "fast", {"first": 125.0, "rerun": 30.0, "good": 61.0}, cpu=80.0),
        _measurement(5, "baseline", {"first": 200.0, "rerun": 100.0, "good": 90.0}, rc=2),
        _measurement(5, "fast", {"first": 100.0}),
    ]
    rows = sim.table(ms).splitlines()
    assert rows[0].startswith("| N | variant | first rollout (shipped build) |")
    assert rows[2] == (
        "| 5 | baseline | 3 min 20 s | 1 min 40 s | 1 min 30 s (failed, rc 2) "
        "| 40.0 s / 20.0 s | — / — | 105 | 5.2 | 0/5 | — / — | — |"
    )
    assert rows[3] == (
        "| 5 | fast | 1 min 40 s | — | — | 20.0 s / — | — / — | 105 | 5.2 | — | — / — | — |"
    )
    assert rows[4].startswith(
        "| 10 | fast | 2 min 05 s | 30 s | 1 min 01 s | 12.5 s / 3.0 s | 80 / 20 | 110 |"
    )


def test_report_writes_the_table_and_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ms = [
        _measurement(5, "baseline", {"first": 200.0, "rerun": 100.0, "good": 90.0}),
        _measurement(10, "baseline", {"first": 300.0, "rerun": 150.0, "good": 140.0}),
    ]
    (tmp_path / "results.json").write_text(json.dumps({"machine": {}, "measurements": ms}))
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--report", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| 10 | baseline | 5 min 00 s | 2 min 30 s | 2 min 20 s |" in out
    assert (tmp_path / "table.md").read_text() in out
    assert (tmp_path / "fleet-sim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> ModuleType:
        raise ImportError(name)

    monkeypatch.setattr(sim.importlib, "import_module", missing)
    msg = sim.plot([_measurement(5, "baseline", {"first": 1.0})], tmp_path / "p.png")
    assert msg.startswith("no plot: matplotlib is not installed")
    assert not (tmp_path / "p.png").exists()


def test_cli_refuses_bad_input_before_touching_hosts() -> None:
    for args, message in (
        (["--sizes", "0"], "--sizes"),
        (["--variant", "nope"], "not built in"),
        (["--variant", "fast", "--variant", "fast"], "its own name"),
    ):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 1
        assert message in proc.stderr


def test_results_of_several_sittings_are_merged(tmp_path: Path) -> None:
    def m(n: int, variant: str, seconds: float) -> Any:
        run = sim.RunResult("first", seconds, 0, 1.0, 1.0, 1.0, 1.0, n, 0, "log")
        return sim.Measurement(n, variant, {}, [run], 1.0, False)

    sim.save(tmp_path, [m(5, "baseline", 10.0), m(5, "fast", 5.0)], {"cpus": 2})
    sim.save(tmp_path, [m(10, "baseline", 20.0), m(5, "fast", 4.0)], {"cpus": 2})
    got = json.loads((tmp_path / "results.json").read_text())["measurements"]
    assert sorted((x["n"], x["variant"], x["runs"][0]["seconds"]) for x in got) == [
        (5, "baseline", 10.0),
        (5, "fast", 4.0),
        (10, "baseline", 20.0),
    ]


def test_each_host_gets_its_own_apt_archive(tmp_path: Path) -> None:
    """testhost.sh gives every host its own archive: hosts installing at once never share apt's
    archive lock (a 10-host rollout failed on 'Could not get lock /var/cache/apt/archives/lock'),
    and what a host downloaded goes back into the cache when it is removed."""
    env = {**os.environ, "LLAMAFLEET_CACHE": str(tmp_path / "cache")}
    shared = tmp_path / "cache" / "apt" / "bookworm"
    (shared / "partial").mkdir(parents=True)
    (shared / "lock").write_text("")
    (shared / "gcc_12.deb").write_bytes(b"deb")
    own = tmp_path / "hosts" / "lfsim-1" / "apt"
    testhost = str(ROOT / "testbed" / "testhost.sh")
    subprocess.run([testhost, "apt-archive", "bookworm", str(own)], env=env, check=True)
    # the packages (the same inode: nothing copied), an empty partial/, and no shared lock
    assert sorted(p.name for p in own.iterdir()) == ["gcc_12.deb", "partial"]
    assert (own / "gcc_12.deb").stat().st_ino == (shared / "gcc_12.deb").stat().st_ino
    # the host downloads a package (and leaves a partial one): the complete one is kept
    (own / "git_2.deb").write_bytes(b"new")
    (own / "partial" / "curl_8.deb").write_bytes(b"half")
    (own / "gcc_12.deb").unlink()
    (own / "gcc_12.deb").write_bytes(b"other")  # a name the cache has: the cache's stays
    subprocess.run([testhost, "apt-keep", str(own), "bookworm"], env=env, check=True)
    assert sorted(p.name for p in shared.iterdir()) == [
        "gcc_12.deb",
        "git_2.deb",
        "lock",
        "partial",
    ]
    assert (shared / "gcc_12.deb").read_bytes() == b"deb"
    assert (shared / "git_2.deb").stat().st_ino == (own / "git_2.deb").stat().st_ino
    assert not (shared / "partial" / "curl_8.deb").exists()


def test_plot_draws_time_and_time_per_host(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ms = [
        _measurement(5, "baseline", {"first": 90.0, "rerun": 55.0}),
        _measurement(10, "baseline", {"first": 150.0, "rerun": 80.0}),
    ]
    msg = sim.plot(ms, tmp_path / "p.png")
    assert msg == f"plot: {tmp_path / 'p.png'}"
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_series_of_wall_time_and_controller_cpu_per_host() -> None:
    ms = [
        _measurement(10, "baseline", {"first": 150.0, "rerun": 80.0}, cpu=40.0),
        _measurement(5, "baseline", {"first": 90.0, "rerun": 55.0}, cpu=30.0),
        _measurement(5, "before", {"first": 95.0, "rerun": 60.0}),
        _measurement(20, "baseline", {"first": 300.0, "good": 10.0}, rc=2, cpu=40.0),
    ]
    assert sim.series(ms, "baseline", "rerun") == [(5, 55.0), (10, 80.0)]
    # controller CPU per host: the first run's 30 CPU s over 5 hosts, the re-run's quarter of 40
    assert sim.series(ms, "baseline", "first", per_host_cpu=True) == [
        (5, 6.0),
        (10, 4.0),
        (20, 2.0),
    ]
    assert sim.series(ms, "baseline", "rerun", per_host_cpu=True) == [(5, 1.5), (10, 1.0)]
    # a failed run is not drawn; a run without a CPU figure has no CPU point
    assert sim.series(ms, "baseline", "good") == []
    assert sim.series(ms, "before", "first") == [(5, 95.0)]
    assert sim.series(ms, "before", "first", per_host_cpu=True) == []

"""The llamafleet_common role: the GPU fact (nvidia-smi's answer parsed, the module against stand-in
nvidia-smi programs, among them the cuda scenario's), the planner and validator action plugins
(in memory, the same answers as the command line), the address classifier (the validator's
loopback test), the claude_code check's input, and the role as every role's dependency (once per
play, with --tags too)."""

from __future__ import annotations

import base64
import json
import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import load_ansible_plugin, playbook_results, plugin_path, run_cli, run_playbook
from llamafleet import planner
from llamafleet.gguf_meta import load_model_meta
from llamafleet.preflight import check_items, refusal
from llamafleet.rules.server import ANY_ADDRESSES, is_loopback

REPO = Path(__file__).resolve().parents[2]
COMMON = REPO / "roles" / "llamafleet_common"
QWEN36 = Path(__file__).parent / "fixtures" / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"
FORK_HELP = Path(__file__).parent / "fixtures" / "help" / "fork-b9079-69d8e4be4.help.txt"
UPSTREAM_HELP = Path(__file__).parent / "fixtures" / "help" / "upstream-b1-0c1e570.help.txt"


@pytest.fixture(scope="module")
def gpu() -> ModuleType:
    return load_ansible_plugin(plugin_path("modules", "llamafleet_gpu_facts"))


@pytest.fixture(scope="module")
def filters() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "llamafleet_common"))


@pytest.fixture(scope="module")
def plan() -> ModuleType:
    return load_ansible_plugin(plugin_path("action", "llamafleet_plan"))


@pytest.fixture(scope="module")
def claude() -> ModuleType:
    return load_ansible_plugin(plugin_path("filter", "claude_code"))


# --- nvidia-smi's answer ----------------------------------------------------------------------

TWO_GPUS = """\
0, GPU-5b1f0c3e-8d2a-4e1b-9c7d-111111111111, NVIDIA GeForce RTX 4080 SUPER, 16376, 8.9, 570.133.07
1, GPU-00000000-0000-0000-0000-222222222222, NVIDIA H100 80GB HBM3, 81559, 9.0, 570.133.07
"""


def test_two_gpus(gpu: ModuleType) -> None:
    found, other = gpu.parse_gpus(TWO_GPUS)
    assert other == []
    assert found == [
        {
            "index": 0,
            "name": "NVIDIA GeForce RTX 4080 SUPER",
            "uuid": "GPU-5b1f0c3e-8d2a-4e1b-9c7d-111111111111",
            "memory_mib": 16376,
            "compute_cap": "8.9",
            "arch": "89",
            "driver_version": "570.133.07",
        },
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-00000000-0000-0000-0000-222222222222",
            "memory_mib": 81559,
            "compute_cap": "9.0",
            "arch": "90",
            "driver_version": "570.133.07",
        },
    ]
    assert gpu.query_argv("nvidia-smi") == [
        "nvidia-smi",
        "--query-gpu=index,uuid,name,memory.total,compute_cap,driver_version",
        "--format=csv,noheader,nounits",
    ]


@pytest.mark.parametrize(
    ("stdout", "want"),
    [
        # a name with a comma keeps it; the other fields are counted from both ends
        (
            "0, GPU-a, Tesla, rev. B, 40960, 8.0, 550.1\n",
            {"name": "Tesla, rev. B", "memory_mib": 40960, "arch": "80"},
        ),
        # values nvidia-smi cannot give; memory with its unit (nounits ignored)
        (
            "0, [N/A], NVIDIA A100-SXM4-40GB MIG 3g.20gb, [Not Supported], [N/A], 570.1\n",
            {"uuid": "", "memory_mib": 0, "compute_cap": "", "arch": ""},
        ),
        ("0, GPU-a, NVIDIA RTX PRO 6000, 97887 MiB, 12.0, 575.51\n", {"memory_mib": 97887}),
        # Blackwell: two-digit major
        ("0, GPU-a, NVIDIA B200, 183359, 10.0, 575.51\n", {"arch": "100", "compute_cap": "10.0"}),
        # blank lines and CRLF
        ("\r\n0, GPU-a, NVIDIA L4, 23034, 8.9, 570.1\r\n\r\n", {"name": "NVIDIA L4"}),
    ],
)
def test_odd_rows(gpu: ModuleType, stdout: str, want: dict[str, Any]) -> None:
    found, other = gpu.parse_gpus(stdout)
    assert other == [] and len(found) == 1
    assert {k: found[0][k] for k in want} == want


def test_warning_lines_are_set_apart(gpu: ModuleType) -> None:
    found, other = gpu.parse_gpus(
        "WARNING: infoROM is corrupted at gpu 0000:01:00.0\n"
        "0, GPU-a, NVIDIA GeForce RTX 3090, 24576, 8.6, 550.54.15\n"
    )
    assert [g["arch"] for g in found] == ["86"]
    assert other == ["WARNING: infoROM is corrupted at gpu 0000:01:00.0"]


def test_no_devices(gpu: ModuleType) -> None:
    assert gpu.parse_gpus("No devices were found\n") == ([], [])
    assert gpu.parse_gpus("") == ([], [])


def test_fewer_fields_take_the_position_as_index(gpu: ModuleType) -> None:
    """An nvidia-smi asked without index and uuid (an older one, or the cuda scenario's fake)."""
    fields = ["name", "memory.total", "compute_cap", "driver_version"]
    found, _ = gpu.parse_gpus("GPU A, 8192, 7.5, 535.1\nGPU B, 16384, 8.6, 535.1\n", fields)
    assert [(g["index"], g["uuid"], g["arch"]) for g in found] == [(0, "", "75"), (1, "", "86")]


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("x, GPU-a, NVIDIA L4, 23034, 8.9, 570.1\n", "index 'x' is not a number"),
        ("0, GPU-a, NVIDIA L4, 22 GB, 8.9, 570.1\n", "memory.total '22 GB' is not a number"),
    ],
)
def test_wrong_values_are_refused(gpu: ModuleType, stdout: str, message: str) -> None:
    with pytest.raises(gpu.GpuQueryError, match=message):
        gpu.parse_gpus(stdout)


def test_the_refused_field_is_named(gpu: ModuleType) -> None:
    err = 'Field "compute_cap" is not a valid field to query.\n\n'
    assert gpu.unknown_field(err) == "compute_cap"
    assert gpu.unknown_field("NVIDIA-SMI has failed because it couldn't communicate") is None


# --- the module against stand-in nvidia-smi programs ------------------------------------------


def _stand_in(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_module_on_stand_ins(tmp_path: Path) -> None:
    pytest.importorskip("ansible")
    # the cuda scenario's FAKE nvidia-smi, reading its configuration from here: as the scenario
    # configures it, and without index and uuid (an nvidia-smi that does not know them)
    fake = (REPO / "molecule" / "cuda" / "fake-nvidia-smi").read_text()
    assert '"/etc/llamafleet-fake-nvidia-smi.conf"' in fake
    gpu_conf = (
        "name=NVIDIA GeForce RTX 4080 SUPER\nmemory.total=16376\ncompute_cap=8.9\n"
        "driver_version=570.133.07\n"
    )
    for name, conf in (
        ("scenario", "index=0\nuuid=GPU-00000000-0000-4000-8000-000000000001\n" + gpu_conf),
        ("older", gpu_conf),
    ):
        (tmp_path / f"{name}.conf").write_text(conf)
        (tmp_path / name).write_text(
            fake.replace(
                '"/etc/llamafleet-fake-nvidia-smi.conf"', json.dumps(str(tmp_path / f"{name}.conf"))
            )
        )
        (tmp_path / name).chmod(0o755)
    broken = _stand_in(
        tmp_path / "broken",
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' "
        ">&2\nexit 9\n",
    )
    none = _stand_in(tmp_path / "none", "echo 'No devices were found'\nexit 6\n")
    proc = run_playbook(
        tmp_path,
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: the cuda scenario's fake
              llamafleet.fleet.llamafleet_gpu_facts:
                nvidia_smi: {tmp_path / "scenario"}
              register: scenario
            - name: the fake without index and uuid
              llamafleet.fleet.llamafleet_gpu_facts:
                nvidia_smi: {tmp_path / "older"}
              register: older
            - name: no devices
              llamafleet.fleet.llamafleet_gpu_facts:
                nvidia_smi: {none}
              register: nodev
            - name: not installed
              llamafleet.fleet.llamafleet_gpu_facts:
                nvidia_smi: {tmp_path / "absent"}
              register: absent
            - name: installed but failing
              llamafleet.fleet.llamafleet_gpu_facts:
                nvidia_smi: {broken}
              register: failing
              ignore_errors: true
            - name: show
              ansible.builtin.debug:
                msg: "RESULT {{{{ item.0 }}}} {{{{ item.1 | to_json }}}}"
              loop: "{{{{ [['scenario', scenario], ['older', older], ['nodev', nodev],
                          ['absent', absent], ['failing', failing]] }}}}"
        """,
    )
    got = playbook_results(proc.stdout)
    assert set(got) == {"scenario", "older", "nodev", "absent", "failing"}, proc.stdout
    want = {
        "index": 0,
        "name": "NVIDIA GeForce RTX 4080 SUPER",
        "uuid": "GPU-00000000-0000-4000-8000-000000000001",
        "memory_mib": 16376,
        "compute_cap": "8.9",
        "arch": "89",
        "driver_version": "570.133.07",
    }
    assert got["scenario"]["ansible_facts"]["llamafleet_gpus"] == [want]
    assert got["older"]["ansible_facts"]["llamafleet_gpus"] == [want | {"uuid": ""}]
    assert got["nodev"]["ansible_facts"]["llamafleet_gpus"] == []
    assert got["absent"]["ansible_facts"]["llamafleet_gpus"] == []
    assert got["absent"]["nvidia_smi"] is None
    assert got["failing"]["failed"] is True
    assert "cannot list the GPUs (exit code 9)" in got["failing"]["msg"]
    assert "could not communicate" in got["failing"]["msg"]


def test_the_role_runs_once_per_play_and_with_tags(tmp_path: Path) -> None:
    """Two roles that both depend on llamafleet_common: the GPUs are listed once, before the
    first, also when --tags selects only the second role's tasks."""
    pytest.importorskip("ansible")
    smi = _stand_in(
        tmp_path / "nvidia-smi",
        f"echo call >> {tmp_path / 'calls'}\n"
        "echo '0, GPU-a, NVIDIA GeForce RTX 4080 SUPER, 16376, 8.9, 570.133.07'\n",
    )
    for role in ("one", "two"):
        (tmp_path / "roles" / role / "meta").mkdir(parents=True)
        (tmp_path / "roles" / role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / role / "meta" / "main.yml").write_text(
            "dependencies:\n  - role: llamafleet_common\n"
        )
        (tmp_path / "roles" / role / "tasks" / "main.yml").write_text(
            textwrap.dedent(
                f"""\
                - name: {role}
                  ansible.builtin.debug:
                    msg: "RESULT {role} {{{{ llamafleet_gpus | to_json }}}}"
                  tags: [{role}]
                """
            )
        )
    play = f"""\
        - hosts: localhost
          gather_facts: false
          vars:
            llamafleet_common_nvidia_smi: {smi}
          roles: [one, two]
        """
    proc = run_playbook(tmp_path, play)
    got = playbook_results(proc.stdout)
    assert got["one"] == got["two"] and got["one"][0]["memory_mib"] == 16376, proc.stdout
    assert (tmp_path / "calls").read_text() == "call\n"
    (tmp_path / "calls").unlink()
    proc = run_playbook(tmp_path, play, "--tags", "two")
    got = playbook_results(proc.stdout)
    assert set(got) == {"two"} and got["two"][0]["arch"] == "89", proc.stdout
    assert (tmp_path / "calls").read_text() == "call\n"


def test_the_facts_the_roles_read_are_gathered_once_where_the_play_did_not(
    tmp_path: Path,
) -> None:
    """A play without gather_facts and two roles that read the distribution and the CPU count:
    llamafleet_common gathers them once, also with --tags selecting only the second role; a play
    that gathered its facts does not gather them again."""
    pytest.importorskip("ansible")
    smi = _stand_in(tmp_path / "nvidia-smi", "exit 0\n")
    for role in ("one", "two"):
        (tmp_path / "roles" / role / "meta").mkdir(parents=True)
        (tmp_path / "roles" / role / "tasks").mkdir(parents=True)
        (tmp_path / "roles" / role / "meta" / "main.yml").write_text(
            "dependencies:\n  - role: llamafleet_common\n"
        )
        (tmp_path / "roles" / role / "tasks" / "main.yml").write_text(
            textwrap.dedent(
                f"""\
                - name: {role}
                  ansible.builtin.debug:
                    msg: >-
                      RESULT {role} {{{{ [ansible_facts['distribution'],
                      ansible_facts['processor_vcpus'] > 0, _llamafleet_common_facts.gathered]
                      | to_json }}}}
                  tags: [{role}]
                """
            )
        )

    def play(gather: bool) -> str:
        return f"""\
        - hosts: localhost
          gather_facts: {str(gather).lower()}
          vars:
            llamafleet_common_nvidia_smi: {smi}
          roles: [one, two]
        """

    for args in ([], ["--tags", "two"]):
        proc = run_playbook(tmp_path, play(False), *args)
        got = playbook_results(proc.stdout)
        assert got["two"][0] and got["two"][1] is True, proc.stdout[-3000:]
        assert got["two"][2] == ["setup", "gpus"], proc.stdout[-3000:]
        gathered = re.findall(
            r"^(ok|skipping): \[localhost\]",
            _after(proc.stdout, "Gather the facts the roles need"),
            re.M,
        )
        assert gathered[:1] == ["ok"], proc.stdout[-3000:]
        assert proc.stdout.count("Gather the facts the roles need") == 1
    # a play that gathered its facts: only the GPUs are listed
    proc = run_playbook(tmp_path, play(True))
    assert playbook_results(proc.stdout)["one"][2] == ["gpus"], proc.stdout[-3000:]


def test_the_facts_kept_are_those_the_roles_read(tmp_path: Path) -> None:
    """The gathered facts are filtered (llamafleet_common_gather_filter): what the roles read is
    there, what they do not (the environment, the devices, the date) is not, and Ansible's own
    marks of a gathering stay; [] keeps every fact of the subset."""
    pytest.importorskip("ansible")
    smi = _stand_in(tmp_path / "nvidia-smi", "exit 0\n")

    def play(keep: str) -> str:
        return f"""\
        - hosts: localhost
          gather_facts: false
          vars:
            llamafleet_common_nvidia_smi: {smi}
            {keep}
          tasks:
            - ansible.builtin.include_role:
                name: llamafleet.fleet.llamafleet_common
            - ansible.builtin.debug:
                msg: "RESULT facts {{{{ ansible_facts.keys() | sort | to_json }}}}"
        """

    proc = run_playbook(tmp_path, play(""))
    kept = set(playbook_results(proc.stdout)["facts"])
    for name in (
        "distribution",
        "distribution_release",
        "architecture",
        "os_family",
        "hostname",
        "processor_vcpus",
        "processor_cores",
        "processor_count",
        "memtotal_mb",
        "mounts",
        "gather_subset",
        "module_setup",
        "llamafleet_gpus",
    ):
        assert name in kept, (name, sorted(kept))
    assert not kept & {"env", "devices", "date_time", "cmdline", "python", "memory_mb"}, kept
    proc = run_playbook(tmp_path, play("llamafleet_common_gather_filter: []"))
    every = set(playbook_results(proc.stdout)["facts"])
    assert kept < every and {"env", "date_time", "memory_mb"} <= every, every


def test_a_filter_that_is_not_a_list_of_names_is_refused() -> None:
    facts = load_ansible_plugin(plugin_path("action", "llamafleet_facts"))
    assert facts.setup_args(None, []) == {"gather_subset": ["!all", "min", "hardware"]}
    got = facts.setup_args(["min"], ["mounts"])
    assert got["filter"] == [
        "mounts",
        "distribution",
        "processor_vcpus",
        "gather_subset",
        "module_setup",
    ]
    for bad in ("mounts", ["mounts", ""], [3]):
        with pytest.raises(ValueError, match="filter must be a list"):
            facts.setup_args(["min"], bad)


def _after(text: str, title: str) -> str:
    """What follows the task header ``title`` in ansible-playbook's output."""
    return text[text.index(title) :]


# --- the planner in memory ----------------------------------------------------------------------


def _qwen_description() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(QWEN36.read_text())
    return {"metadata": data["metadata"], "tensors": data["tensors"]}


def test_plan_is_what_the_command_line_suggests(plan: ModuleType, tmp_path: Path) -> None:
    """The action plugin's suggestions equal `llamafleet plan --suggest --format json`'s."""
    out = plan.plan("main", _qwen_description(), 16376, help_text=FORK_HELP.read_text())
    cli = run_cli(
        [
            "plan",
            "--model-meta",
            str(QWEN36),
            "--gpu-vram",
            "16376",
            "--suggest",
            "--format",
            "json",
        ]
    )
    assert cli.code == 0
    assert out["fits"] is True and out["turbo"] is True
    assert out["suggestions"] == json.loads(cli.out)
    best = out["suggestions"][0]
    assert out["args"]["ctx_size"] == best["ctx"]
    assert (out["args"]["cache_type_k"], out["args"]["cache_type_v"]) == (
        best["cache_type_k"],
        best["cache_type_v"],
    )


def test_plan_without_turbo_for_an_upstream_build(plan: ModuleType) -> None:
    upstream = {v for _, v in planner.KV_CHOICES_UPSTREAM}
    for help_text in (UPSTREAM_HELP.read_text(), ""):  # no --help: no TurboQuant types either
        out = plan.plan("main", _qwen_description(), 24564, ctx_size=131072, help_text=help_text)
        assert out["turbo"] is False
        assert out["args"]["ctx_size"] == 131072
        assert all(s["cache_type_v"] in upstream for s in out["suggestions"])


def test_plan_nothing_fits(plan: ModuleType) -> None:
    out = plan.plan("main", _qwen_description(), 1024)
    assert out["fits"] is False and out["suggestions"] == [] and "args" not in out


def test_plan_args_of_a_small_gpu(plan: ModuleType) -> None:
    """8 GB: the experts of some layers on the host (the model is 12.6 GB)."""
    out = plan.plan("main", _qwen_description(), 8188, help_text=FORK_HELP.read_text())
    qwen = load_model_meta(str(QWEN36))
    best = planner.suggest(qwen, 8188)[0]
    assert best.n_cpu_moe > 0
    assert out["args"] == plan.instance_args(best)
    assert out["args"]["n_cpu_moe"] == best.n_cpu_moe and out["args"]["gpu_layers"] == 99


class _Plan:
    def __init__(self, kv_unified: bool) -> None:
        self.kv_unified = kv_unified


class _Suggestion:
    def __init__(self, **kw: Any) -> None:
        base: dict[str, Any] = {
            "ctx": 204800,
            "cache_type_k": "q8_0",
            "cache_type_v": "turbo3",
            "n_gpu_layers": None,
            "n_cpu_moe": 0,
            "cpu_moe": False,
            "n_parallel": -1,
            "plan": _Plan(True),
        }
        base.update(kw)
        self.__dict__.update(base)


@pytest.mark.parametrize(
    ("suggestion", "want"),
    [
        # all on the GPU, llama-server's unified slots: -np and the MoE flags left unset
        (
            _Suggestion(),
            {"gpu_layers": 99, "n_cpu_moe": None, "cpu_moe": None, "parallel": None},
        ),
        # one slot of its own
        (_Suggestion(n_parallel=1, plan=_Plan(False)), {"parallel": 1}),
        # the experts of 12 layers on the host
        (_Suggestion(n_cpu_moe=12), {"n_cpu_moe": 12, "cpu_moe": None, "gpu_layers": 99}),
        # all experts on the host, then 20 layers on the GPU (a dense model: layers only)
        (_Suggestion(cpu_moe=True, n_gpu_layers=20), {"cpu_moe": True, "gpu_layers": 20}),
    ],
)
def test_plan_instance_args(plan: ModuleType, suggestion: Any, want: dict[str, Any]) -> None:
    args = plan.instance_args(suggestion)
    assert set(args) == {
        "ctx_size",
        "cache_type_k",
        "cache_type_v",
        "gpu_layers",
        "n_cpu_moe",
        "cpu_moe",
        "parallel",
    }
    assert {k: args[k] for k in want} == want
    assert (args["ctx_size"], args["cache_type_k"], args["cache_type_v"]) == (
        204800,
        "q8_0",
        "turbo3",
    )


@pytest.mark.parametrize(
    ("model", "vram", "ctx", "message"),
    [
        ({"metadata": {}}, 16376, None, "no tensors"),
        ("model.gguf", 16376, None, "must be a mapping with metadata"),
        (None, 0, None, "must be a mapping"),
        ("qwen", 0, None, "vram_mib must be above 0"),
        ("qwen", "16 GB", None, "vram_mib '16 GB' is not a number"),
        ("qwen", 16376, "lots", "ctx_size 'lots' is not a number"),
    ],
)
def test_plan_refuses_bad_input(
    plan: ModuleType, model: Any, vram: Any, ctx: Any, message: str
) -> None:
    if model == "qwen":
        model = _qwen_description()
    with pytest.raises(plan.PlanInputError, match=message):
        plan.plan("main", model, vram, ctx_size=ctx)


# --- the address classifier -----------------------------------------------------------------

KINDS = [
    ("127.0.0.1", "loopback"),
    ("127.0.0.2", "loopback"),
    ("::1", "loopback"),
    ("[::1]", "loopback"),
    ("localhost", "loopback"),
    ("", "loopback"),  # llama-server's default, 127.0.0.1
    (None, "loopback"),
    ("/run/llama/main.sock", "socket"),
    ("0.0.0.0", "any"),
    ("::", "any"),
    ("[::]", "any"),
    ("10.0.0.5", "address"),
    ("fd00::1", "address"),
    ("gpu1.example.org", "address"),
]


@pytest.mark.parametrize(("host", "kind"), KINDS)
def test_address_kind(filters: ModuleType, host: Any, kind: str) -> None:
    assert filters.address_kind(host) == kind
    # the validator's own loopback test decides: what it calls loopback is loopback or a socket
    if host:
        assert (kind in ("loopback", "socket")) == is_loopback(host)
    # the validator's wildcard addresses, the ones its cross-file rules treat as every address
    assert (kind == "any") == (host in ANY_ADDRESSES)


def test_every_wildcard_address_of_the_validator_is_any(filters: ModuleType) -> None:
    assert {"0.0.0.0", "::", "[::]"} == ANY_ADDRESSES
    assert {filters.address_kind(h) for h in ANY_ADDRESSES} == {"any"}
    assert filters.address_kind(" 0.0.0.0 ") == "any"


@pytest.mark.parametrize(
    ("host", "want"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("::", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("127.0.0.2", "127.0.0.2"),
        ("::1", "[::1]"),
        ("[::1]", "[::1]"),
        ("10.0.0.5", "10.0.0.5"),
        ("fd00::1", "[fd00::1]"),
        ("gpu1.example.org", "gpu1.example.org"),
        ("/run/llama/main.sock", "/run/llama/main.sock"),
    ],
)
def test_connect_host_is_ready_for_a_url(filters: ModuleType, host: str, want: str) -> None:
    assert filters.connect_host(host) == want


def test_a_socket_needs_no_networks_and_no_tls(filters: ModuleType) -> None:
    assert filters.ip_allow([], "main", "/run/llama/main.sock") == []
    assert filters.tls_on("auto", "/run/llama/main.sock") is False
    assert filters.tls_sans(["/run/llama/main.sock", "::"], "main") == list(
        filters.TLS_LOOPBACK_SANS
    )


def test_the_filters_are_registered(filters: ModuleType) -> None:
    assert set(filters.FilterModule().filters()) == {
        "llamafleet_address_kind",
        "llamafleet_connect_host",
        "llamafleet_tls_on",
        "llamafleet_tls_sans",
        "llamafleet_name_constraints",
        "llamafleet_unit_values",
        "llamafleet_ip_allow",
    }


# --- llamafleet_check with settings, and the claude_code check's input --------------------------

UNIT = """\
[Service]
LoadCredential=api-key:/etc/llamafleet/keys/main.keys
ExecStart=/opt/llama.cpp/current/bin/llama-server --model /srv/models/m.gguf --host 0.0.0.0 \
--port 8080 --api-key-file %d/api-key
"""


def _settings(key: str) -> str:
    return json.dumps(
        {
            "env": {
                "ANTHROPIC_BASE_URL": "http://10.0.0.5:8080",
                "ANTHROPIC_AUTH_TOKEN": key,
                "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            }
        },
        indent=2,
    )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _target(name: str = "alice", managed: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "managed": managed,
        "server": "gpu1",
        "instance": "main",
        "unit": "llama-server-main.service",
        "key_id": "gpu1/main" if managed else f"gpu1/main/ws/{name}",
        "path": "/etc/claude-code/managed-settings.json"
        if managed
        else f"/home/{name}/.claude/settings.json",
    }


def _read_back(*files: tuple[dict[str, Any], str | None]) -> list[dict[str, Any]]:
    return [
        {"_t": t, "exists": text is not None, "content": _b64(text) if text is not None else ""}
        for t, text in files
    ]


KEYS = {"gpu1/main/ws/alice": "k-alice", "gpu1/main": "k-instance"}


def test_check_item_of_a_user(claude: ModuleType) -> None:
    alice = _target()
    item = claude.check_item(
        alice,
        _read_back((alice, _settings("k-alice"))),
        [{"_t": alice, "content": _b64(UNIT)}],
        KEYS,
        False,
    )
    cred = "/run/credentials/llama-server-main.service/api-key"
    assert item["name"] == "alice"
    assert item["path"] == "gpu1:/etc/systemd/system/llama-server-main.service"
    assert f"--api-key-file {cred}" in item["text"] and "%d/api-key" not in item["text"]
    # the user's own key and the instance key, as the server's credential lists them
    assert item["files"] == {cred: "k-alice\nk-instance\n"}
    assert item["settings"] == [
        {"path": "/home/alice/.claude/settings.json", "text": _settings("k-alice"), "scope": "user"}
    ]


def test_check_item_with_the_managed_file(claude: ModuleType) -> None:
    alice, managed = _target(), _target("(managed)", managed=True)
    files = _read_back((managed, '{"env": {}}'), (alice, None))
    item = claude.check_item(alice, files, [], KEYS, True)
    # alice's file does not exist yet: the managed file alone; no unit read: no text
    assert [s["scope"] for s in item["settings"]] == ["managed"]
    assert "text" not in item and "files" not in item
    # the managed target: the managed file only, its key the instance key
    item = claude.check_item(managed, files, [{"_t": managed, "content": _b64(UNIT)}], KEYS, True)
    assert [s["scope"] for s in item["settings"]] == ["managed"]
    assert list(item["files"].values()) == ["k-instance\n\n"]
    # nothing written yet (check mode on a new host): nothing to check
    assert claude.check_item(alice, _read_back((alice, None)), [], KEYS, False)["settings"] == []


@pytest.mark.parametrize(
    ("sent", "keys", "want"),
    [
        ("k-alice", KEYS, None),  # the user's own key
        ("k-instance", KEYS, None),  # the instance key, listed beside it
        ("k-other", KEYS, "sends a different key"),
        ("k-other", {}, None),  # the server's keys unknown: not compared
    ],
)
def test_check_compares_keys_in_memory(
    claude: ModuleType, sent: str, keys: dict[str, str], want: str | None
) -> None:
    alice = _target()
    item = claude.check_item(
        alice,
        _read_back((alice, _settings(sent))),
        [{"_t": alice, "content": _b64(UNIT)}],
        keys,
        False,
    )
    (checked,) = check_items([item], "error", None, ["CC010"])
    xc002 = [f for f in checked.findings if f["id"] == "XC002"]
    if want is None:
        assert xc002 == [], xc002
    else:
        assert len(xc002) == 1 and want in xc002[0]["message"]
        assert xc002[0]["file"] == "/home/alice/.claude/settings.json"
        assert "gpu1:/etc/systemd/system/llama-server-main.service" in xc002[0]["message"]
        assert checked.refused is True
        msg = refusal([checked], "the Claude Code settings of", written=True)
        assert msg.startswith(
            "llamafleet check refused the Claude Code settings of alice (as written on the host"
        )
        assert "- XC002 [error] /home/alice/.claude/settings.json:" in msg
        assert "k-alice" not in msg and "k-instance" not in msg


def test_the_check_plugin_has_no_checker_of_its_own() -> None:
    """The plugin calls the validator's check_items and refusal: one implementation of each."""
    source = plugin_path("action", "llamafleet_check").read_text()
    assert "from llamafleet.preflight import PreflightError, check_items, refusal" in source
    for name in ("check_items", "refusal", "_check_item", "_settings_entry"):
        assert f"def {name}(" not in source, name


def test_every_role_depends_on_the_common_role() -> None:
    import yaml

    for role in sorted((REPO / "roles").iterdir()):
        if role.name == "llamafleet_common" or not (role / "meta" / "main.yml").is_file():
            continue
        meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
        deps = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
        assert "llamafleet.fleet.llamafleet_common" in deps, role.name


def _tasks(tasks: Any) -> Any:
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def test_no_role_runs_the_validator_command_or_writes_scratch_files() -> None:
    """One path: the roles call the validator and the planner in-process: no `llamafleet`
    command, no scratch directory or file written on the controller."""
    import yaml

    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        text = path.read_text()
        for word in ("'-m', 'llamafleet'", "--referenced-dir", "--model-meta"):
            assert word not in text, f"{path.relative_to(REPO)}: {word}"
        for task in _tasks(yaml.safe_load(text)):
            writes = any(
                k in task
                for k in (
                    "ansible.builtin.tempfile",
                    "ansible.builtin.copy",
                    "ansible.builtin.file",
                )
            )
            on_controller = task.get("delegate_to") in ("localhost", "127.0.0.1")
            assert not (writes and on_controller), f"{path.relative_to(REPO)}: {task.get('name')}"


def test_the_llama_server_profile_plans_in_memory(plan: ModuleType, tmp_path: Path) -> None:
    """roles/llama_server/tasks/profile.yml as it runs: the first GPU of llamafleet_gpus, the
    model's saved description, the build's --help; the planned args per instance (an instance's
    own ctx_size is the context wanted; one without a model description is left as given)."""
    pytest.importorskip("ansible")
    qwen = _qwen_description()
    variables = {
        "llama_server_profile_vram_mib": 0,
        # the llamafleet_common role's fact, set as a fact below (cacheable set_fact: ansible_facts)
        "_test_gpus": [
            {"index": 0, "name": "NVIDIA GeForce RTX 4080 SUPER", "memory_mib": 16376},
            {"index": 1, "name": "NVIDIA GeForce RTX 3060", "memory_mib": 12288},
        ],
        "_llama_server_models_meta": {"qwen": {"kv": qwen["metadata"], "tensors": qwen["tensors"]}},
        "_llama_server_help_raw": {"content": _b64(FORK_HELP.read_text())},
        "llama_server_instances": [
            {"name": "main", "model": "qwen"},
            {"name": "short", "model": "qwen", "args": {"ctx_size": 65536}},
            {"name": "other", "model": "/srv/models/unknown.gguf"},
        ],
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    profile = REPO / "roles" / "llama_server" / "tasks" / "profile.yml"
    proc = run_playbook(
        tmp_path,
        f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: the GPUs as the llamafleet_common role leaves them
              ansible.builtin.set_fact:
                llamafleet_gpus: "{{{{ _test_gpus }}}}"
                cacheable: true
            - name: profile
              ansible.builtin.import_tasks: {profile}
            - name: show
              ansible.builtin.debug:
                msg: "RESULT args {{{{ _llama_server_profile_args | to_json }}}}"
        """,
        "-e",
        "@vars.json",
    )
    got = playbook_results(proc.stdout)
    assert "args" in got, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert set(got["args"]) == {"main", "short"}
    fork = FORK_HELP.read_text()
    assert got["args"]["main"] == plan.plan("main", qwen, 16376, help_text=fork)["args"]
    want = plan.plan("short", qwen, 16376, ctx_size=65536, help_text=fork)["args"]
    assert got["args"]["short"] == want
    assert got["args"]["short"]["ctx_size"] == 65536

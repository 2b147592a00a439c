"""The cuda_toolkit role's preflight as one decision (plugins/action/cuda_toolkit_plan.py,
roles/cuda_toolkit/tasks/main.yml). The `plan` tests hand it the role's defaults and GPU lists
shaped like llamafleet_gpus (the llamafleet_gpu_facts module's fact: name, compute_cap, arch,
driver_version); they stand for nvidia-smi's answer on hosts this machine does not have. The
cuda scenario runs the same decisions against the FAKE nvidia-smi and the real apt install; the
playbook test here runs the real role on this machine, which has no NVIDIA GPU."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, playbook_results, plugin_path, run_playbook

ROLE = REPO / "roles" / "cuda_toolkit"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
ROLE_VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEBIAN12 = yaml.safe_load((ROLE / "vars" / "debian12.yml").read_text())
FACTS = {
    "distribution": "Debian",
    "distribution_major_version": "12",
    "distribution_version": "12.8",
    "architecture": "x86_64",
}
GPU = {
    "index": 0,
    "name": "NVIDIA GeForce RTX 4090",
    "compute_cap": "8.9",
    "arch": "89",
    "driver_version": "570.133.07",
}


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("action", "cuda_toolkit_plan"))


def _vars(**over: Any) -> dict[str, Any]:
    names = [n for n in DEFAULTS if n.startswith("cuda_toolkit_")]
    found = {n.removeprefix("cuda_toolkit_"): DEFAULTS[n] for n in names}
    wanted = set(load_ansible_plugin(plugin_path("action", "cuda_toolkit_plan")).VARS)
    found = {k: v for k, v in found.items() if k in wanted}
    found["version"] = str(found["version"])
    found |= {
        "min_driver": ROLE_VARS["_cuda_toolkit_min_driver"],
        "arch_map": ROLE_VARS["_cuda_toolkit_arch_map"],
    }
    return found | over


def _plan(mod: Any, v: dict[str, Any], gpus: list[Any], pci: list[str] | None = None) -> Any:
    asked: list[bool] = []

    def scan() -> list[str]:
        asked.append(True)
        return list(pci or [])

    found = mod.plan(v, {**FACTS, "llamafleet_gpus": gpus}, DEBIAN12, "gpu-1", scan)
    found["asked_pci"] = bool(asked)
    return found


def test_every_variable_the_plan_reads_is_one_of_the_role(mod: Any) -> None:
    roles = {n.removeprefix("cuda_toolkit_") for n in DEFAULTS} | {"min_driver", "arch_map"}
    assert set(mod.VARS) <= roles
    main = (ROLE / "tasks" / "main.yml").read_text()
    for name in mod.VARS:  # the role hands every one over
        assert re.search(rf"^\s+{name}: ", main, re.M), name


def test_a_gpu_host_installs_from_its_repository(mod: Any) -> None:
    found = _plan(mod, _vars(), [GPU])
    facts = found["facts"]
    assert facts["_cuda_toolkit_wanted"] is True and facts["_cuda_toolkit_skip_reason"] == ""
    assert facts["_cuda_toolkit_repo"].endswith("/debian12/x86_64")
    assert facts["_cuda_toolkit_driver_min"] == "570.26"
    assert facts["_cuda_toolkit_driver_pkg"] == "cuda-drivers-570"
    assert facts["cuda_toolkit_gpu_archs"] == ["89"] and facts["cuda_toolkit_gpus"] == [GPU]
    assert found["msg"] == (
        "GPUs: NVIDIA GeForce RTX 4090; compute capability 8.9; driver 570.133.07"
    )
    assert found["asked_pci"] is False  # nvidia-smi listed a GPU: the bus is not read


def test_a_host_without_a_gpu_skips_the_toolkit_and_says_why(mod: Any) -> None:
    found = _plan(mod, _vars(), [])
    assert found["asked_pci"] is True
    assert found["facts"]["_cuda_toolkit_wanted"] is False
    assert "nvidia-smi is not installed or lists no GPU" in found["msg"]
    assert found["msg"].endswith("the CUDA toolkit is not installed on this host")
    forced = _plan(mod, _vars(install_without_gpu=True), [])
    assert forced["facts"]["_cuda_toolkit_wanted"] is True
    assert forced["msg"].startswith("no GPU; installing the CUDA toolkit anyway")


@pytest.mark.parametrize(
    ("over", "gpus", "pci", "needles"),
    [
        (
            {},
            [{**GPU, "driver_version": "550.54.15"}],
            None,
            ["550.54.15", "too old for CUDA 12.8", ">= 570.26", "apt install cuda-drivers-570"],
        ),
        (
            {"require_gpu": True},
            [],
            None,
            ["cuda_toolkit_require_gpu is set", "nvidia-smi is not installed or lists no GPU"],
        ),
        (
            {"require_gpu": True},
            [],
            ["0000:01:00.0"],
            ["NVIDIA devices on the PCI bus: 0000:01:00.0", "apt install cuda-drivers-570"],
        ),
        ({}, [], ["0000:01:00.0"], ["driver is missing or not loaded", "0000:01:00.0"]),
        (
            {"repo_url": "http://mirror.example/cuda"},
            [GPU],
            None,
            ["Refused: cuda_toolkit_repo_url (http://mirror.example/cuda)", "must be https://"],
        ),
        ({"repo_key_fingerprint": "abc"}, [GPU], None, ["must be 40 (or 64) hex digits"]),
        ({"method": "snap"}, [GPU], None, ["Invalid cuda_toolkit_* variables"]),
        ({"version": "13.9"}, [GPU], None, ["No minimum driver is known for CUDA 13.9"]),
    ],
)
def test_what_the_role_refuses_is_refused_with_its_message(
    mod: Any, over: dict[str, Any], gpus: list[Any], pci: list[str] | None, needles: list[str]
) -> None:
    with pytest.raises(mod.PlanError) as err:
        _plan(mod, _vars(**over), gpus, pci)
    for needle in needles:
        assert needle in str(err.value)


def test_a_driver_being_installed_is_not_checked_against_the_one_there(mod: Any) -> None:
    old = [{**GPU, "driver_version": "550.54.15"}]
    assert _plan(mod, _vars(install_driver=True), old)["facts"]["_cuda_toolkit_wanted"]
    # a GPU whose driver is missing, with the driver to be installed: the toolkit is wanted
    found = _plan(mod, _vars(install_driver=True), [], ["0000:01:00.0"])
    assert found["facts"]["_cuda_toolkit_wanted"] is True
    assert found["facts"]["_cuda_toolkit_pci_gpus"] == ["0000:01:00.0"]


def test_a_distribution_without_a_repository_is_refused_when_it_would_install(mod: Any) -> None:
    facts = {
        **FACTS,
        "distribution": "Fedora",
        "distribution_version": "41",
        "llamafleet_gpus": [GPU],
    }
    with pytest.raises(mod.PlanError, match="No CUDA repository path for Fedora 41"):
        mod.plan(_vars(), facts, {}, "gpu-1", list)
    given = mod.plan(_vars(repo_distro="fedora41"), facts, {}, "gpu-1", list)
    assert given["facts"]["_cuda_toolkit_repo"].endswith("/fedora41/x86_64")
    assert mod.plan(_vars(method="existing"), facts, {}, "gpu-1", list)["facts"][
        "_cuda_toolkit_wanted"
    ]


@pytest.mark.parametrize(
    ("facts", "name"),
    [
        ({"distribution": "Debian", "distribution_major_version": "13"}, "debian13"),
        ({"distribution": "Ubuntu", "distribution_version": "24.04"}, "ubuntu2404"),
    ],
)
def test_the_distribution_names_its_vars_file(mod: Any, facts: dict[str, str], name: str) -> None:
    assert mod.distro_id(facts) == name
    assert (ROLE / "vars" / f"{name}.yml").is_file()


def test_the_role_on_a_host_without_a_gpu(tmp_path: Path) -> None:
    """The real role, on this machine (no NVIDIA GPU), in check mode: its argument check (the
    facts it needs gathered by its dependency llamafleet_common), the decision, its record (the
    export with it), the skipped install (and with it the GPU report, which says with -v what
    the facts say); the toolkit not installed and the reason in its facts; with
    cuda_toolkit_require_gpu it fails saying why."""
    play = """
    - hosts: localhost
      connection: local
      gather_facts: false
      tasks:
        - ansible.builtin.include_role:
            name: llamafleet.fleet.cuda_toolkit
        - ansible.builtin.debug:
            msg: "RESULT facts {{ cuda_toolkit_facts | to_json }}"
        - block:
            - ansible.builtin.include_role:
                name: llamafleet.fleet.cuda_toolkit
              vars:
                cuda_toolkit_require_gpu: true
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT refused {{ ansible_failed_result.msg | to_json }}"
    """
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    facts = found["facts"]
    assert facts["gpu_present"] is False and facts["installed"] is False
    assert "nvidia-smi is not installed or lists no GPU" in facts["skipped_reason"]
    assert "cuda_toolkit_require_gpu is set but localhost has no NVIDIA GPU" in found["refused"]
    own = re.findall(r"^TASK \[llamafleet\.fleet\.cuda_toolkit : (.*?)\] \*", done.stdout, re.M)
    first = own[: own.index("Install and verify the toolkit") + 1]
    assert first[0].startswith("Validating arguments against arg spec 'main'")
    assert first[1:] == [
        "Decide whether to install the toolkit (GPUs, driver, distribution)",
        "Record the decision",
        "Install and verify the toolkit",
    ]
    assert "Report the GPUs" not in own
    assert "Export the result as facts" not in own
    # the facts it reads come from its dependency, gathered once for every role
    common = re.findall(
        r"^TASK \[llamafleet\.fleet\.llamafleet_common : (.*?)\] \*", done.stdout, re.M
    )
    assert "Gather the facts the roles need and list the NVIDIA GPUs (llamafleet_gpus)" in common


@pytest.mark.parametrize(
    ("found", "wanted", "ok"),
    [
        ("570.133.07", "570.26", True),  # 133 > 26: numbers, not text
        ("570.26", "570.26", True),
        ("550.54.15", "570.26", False),
        ("580.65.06", "570.26", True),
        ("570.9", "570.26", False),
        ("", "570.26", False),
    ],
)
def test_driver_versions_compare_as_ansibles_version_test(
    mod: Any, found: str, wanted: str, ok: bool
) -> None:
    assert mod._at_least(found, wanted) is ok

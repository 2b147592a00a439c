"""The llama_cpp role's preflight as one decision (plugins/action/llama_cpp_plan.py,
roles/llama_cpp/tasks/preflight.yml). The `plan` tests hand it the role's defaults; their GPU
lists are shaped like llamafleet_gpus (the llamafleet_gpu_facts module's fact) and their `nvcc`
answers stand for the toolkit's nvcc on hosts this machine does not have. The playbook tests run
the real role's preflight on this machine; the nvcc there is a two-line script that stands for
NVIDIA's (it shows how the release is read and refused, not that a real toolkit reports it so;
the cuda scenario and the GPU check run the real one)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from conftest import REPO, load_ansible_plugin, playbook_results, plugin_path, run_playbook

ROLE = REPO / "roles" / "llama_cpp"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
GPU = {"index": 0, "name": "NVIDIA GeForce RTX 4090", "compute_cap": "8.9", "arch": "89"}
NVCC_128 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
#: the variables that are not the role's own (whether there is a token; the toolkit's release)
DERIVED = {"has_token", "cuda_version"}


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    return load_ansible_plugin(plugin_path("action", "llama_cpp_plan"))


def _vars(mod: Any, **over: Any) -> dict[str, Any]:
    found = {n: DEFAULTS[f"llama_cpp_{n}"] for n in mod.VARS - DERIVED}
    found |= {
        "version": str(found["version"]),
        "build_number": str(found["build_number"]),
        "ccache_dir": "/var/cache/llama.cpp/ccache",
        "cuda_home": "/usr/local/cuda-12.8",
        "ship_platform": "",
        "has_token": False,
        "cuda_version": "12.8",
    }
    return found | over


def _plan(mod: Any, v: dict[str, Any], gpus: list[Any] | None = None, out: str = NVCC_128) -> Any:
    asked: list[str] = []

    def nvcc(path: str) -> dict[str, Any]:
        asked.append(path)
        return {"rc": 0 if out else 127, "stdout": out, "stderr": "" if out else "not found"}

    found = mod.plan(v, gpus or [], nvcc)
    return found, asked


def test_the_task_hands_over_every_variable_the_plan_reads(mod: Any) -> None:
    """preflight.yml names exactly the plan's variables; each but the two derived ones is a role
    variable with a default."""
    task = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())[0]
    given = task["llamafleet.fleet.llama_cpp_plan"]["vars"]
    assert set(given) == set(mod.VARS)
    assert {f"llama_cpp_{n}" for n in mod.VARS - DERIVED} <= set(DEFAULTS)
    # the token is never handed over, only whether there is one
    assert "llama_cpp_repo_token |" in given["has_token"] and "length > 0" in given["has_token"]


def test_the_defaults_on_a_host_without_a_gpu_build_for_the_cpu(mod: Any) -> None:
    found, asked = _plan(mod, _vars(mod))
    assert found == {
        "backend": "cpu",
        "cuda_archs": [],
        "pin": DEFAULTS["llama_cpp_commit"],
        "nvcc": {},
    }
    assert asked == []  # no nvcc without the cuda backend


def test_a_gpu_chooses_cuda_its_architectures_and_reads_nvcc(mod: Any) -> None:
    second = GPU | {"index": 1, "name": "RTX 5090", "compute_cap": "12.0", "arch": "120"}
    found, asked = _plan(mod, _vars(mod), [GPU, second, GPU | {"index": 2}])
    assert found["backend"] == "cuda" and found["cuda_archs"] == ["120", "89"]
    assert asked == ["/usr/local/cuda-12.8/bin/nvcc"]
    assert found["nvcc"]["rc"] == 0 and found["nvcc"]["stdout_lines"][-1].endswith("V12.8.93")
    # architectures given by hand win; cpu by hand ignores the GPU
    found, _ = _plan(mod, _vars(mod, cuda_architectures=[86]), [GPU])
    assert found["cuda_archs"] == ["86"]
    found, asked = _plan(mod, _vars(mod, backend="cpu"), [GPU])
    assert found["backend"] == "cpu" and asked == []


def test_a_commit_as_the_version_is_the_pin(mod: Any) -> None:
    commit = "ef8c15dbd6494e91db171a9be21665d93006d6b0"
    found, _ = _plan(mod, _vars(mod, version=commit.upper(), commit=""))
    assert found["pin"] == commit
    found, _ = _plan(mod, _vars(mod, version="v1", commit="", allow_unpinned=True))
    assert found["pin"] == ""


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"version": "master"},
            r"llama_cpp_version 'master' of https://github.com/TheTom/llama-cpp-turboquant.git is"
            r" refused: The TurboQuant fork's master branch has no TurboQuant code",
        ),
        (
            {"repo": "http://git.example/llama.cpp.git"},
            r"uses http://, which neither encrypts nor authenticates",
        ),
        ({"repo": "ext::sh -c evil"}, r"whitespace, quotes"),
        ({"repo": "ext::evil"}, r"git remote helpers"),
        ({"repo": "ssh://git@host/x.git", "has_token": True}, r"only sent over https://"),
        ({"commit": "abc123"}, r'llama_cpp_commit must be a full commit \(40 hex digits\), not "'),
        (
            {"version": "a" * 40, "commit": "b" * 40},
            r"llama_cpp_version is the commit a{40} but llama_cpp_commit pins b{40}",
        ),
        (
            {"commit": ""},
            r"is a branch or tag and no commit is pinned: .* \(git ls-remote "
            r"https://github.com/TheTom/llama-cpp-turboquant.git feature/turboquant-kv-cache\)",
        ),
        ({"build_user": "root"}, r"\(root:llama-build\) must name an unprivileged account"),
        ({"build_group": "0"}, r"must name an unprivileged account"),
        ({"build_user": "Bad User"}, r"must name an unprivileged account"),
        (
            {"ship_dir": "/srv/ship", "ship_platform": "../../etc"},
            r"llama_cpp_ship_platform '../../etc' must be letters, digits",
        ),
        ({"backend": "rocm"}, r"^Invalid llama_cpp_\* variables"),
        ({"prefix": "opt/llama.cpp"}, r"^Invalid llama_cpp_\* variables"),
        ({"keep_builds": 0}, r"^Invalid llama_cpp_\* variables"),
        ({"keep_builds": "three"}, r"^Invalid llama_cpp_\* variables"),
        ({"build_number": "12a"}, r"^Invalid llama_cpp_\* variables"),
        ({"targets": ["llama-server", "x; rm -rf /"]}, r"^Invalid llama_cpp_\* variables"),
        ({"targets": []}, r"^Invalid llama_cpp_\* variables"),
        ({"ship_dir": "relative/ship"}, r"^Invalid llama_cpp_\* variables"),
        ({"nonsense": 1}, r"^unknown vars: nonsense"),
    ],
)
def test_what_the_role_refuses_is_refused_with_its_message(
    mod: Any, over: dict[str, Any], message: str
) -> None:
    with pytest.raises(mod.PlanError, match=message):
        _plan(mod, _vars(mod, **over))


def test_credentials_in_the_repository_url_are_refused_without_being_shown(mod: Any) -> None:
    """A token pasted into the URL would land in .git/config and every log: refused, and the
    message (which the play prints) does not carry it either, nor does a refused version's."""
    secret = "ghp_0123456789abcdefSECRET"
    with pytest.raises(mod.PlanError) as refused:
        _plan(mod, _vars(mod, repo=f"https://{secret}@github.com/TheTom/llama-cpp-turboquant.git"))
    assert "carries credentials in the URL" in str(refused.value)
    assert secret not in str(refused.value)
    with pytest.raises(mod.PlanError) as refused:
        _plan(
            mod,
            _vars(
                mod,
                repo=f"https://x:{secret}@github.com/TheTom/llama-cpp-turboquant.git",
                version="master",
            ),
        )
    assert "is refused" in str(refused.value) and secret not in str(refused.value)


@pytest.mark.parametrize(
    ("out", "gpus", "archs", "why"),
    [
        ("Cuda compilation tools, release 12.9, V12.9.41\n", [GPU], [], "another release"),
        ("", [GPU], [], "no nvcc"),
        (NVCC_128, [{"index": 0, "name": "old", "arch": ""}], [], "no architecture"),
    ],
)
def test_a_cuda_build_needs_the_toolkits_release_and_an_architecture(
    mod: Any, out: str, gpus: list[Any], archs: list[str], why: str
) -> None:
    v = _vars(mod, backend="cuda", cuda_architectures=archs)
    with pytest.raises(mod.PlanError, match=r"needs /usr/local/cuda-12.8/bin/nvcc reporting"):
        _plan(mod, v, gpus, out)


def test_the_role_preflight_on_this_machine(tmp_path: Path) -> None:
    """The real role's preflight (tasks_from: preflight.yml) in check mode: the defaults pass as
    one task and name the cpu backend on this machine (no GPU in llamafleet_gpus); a cuda build
    reads the release from the nvcc under llama_cpp_cuda_home (a stand-in script) and refuses
    another; an unpinned branch is refused with the role's message."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      tasks:
        - ansible.builtin.include_role:
            name: llamafleet.fleet.llama_cpp
            tasks_from: preflight.yml
            public: true
        - ansible.builtin.debug:
            msg: >-
              RESULT cpu {{{{ [_llama_cpp_backend, _llama_cpp_pin, _llama_cpp_nvcc] | to_json }}}}
        - ansible.builtin.include_role:
            name: llamafleet.fleet.llama_cpp
            tasks_from: preflight.yml
          vars:
            llama_cpp_backend: cuda
            llama_cpp_cuda_architectures: ["89"]
            llama_cpp_cuda_home: {home}
        # (the role's names, public since the first include, read the latest decision)
        - ansible.builtin.debug:
            msg: >-
              RESULT cuda {{{{ [_llama_cpp_backend, _llama_cpp_cuda_archs, _llama_cpp_nvcc.stdout]
              | to_json }}}}
        - block:
            - ansible.builtin.include_role:
                name: llamafleet.fleet.llama_cpp
                tasks_from: preflight.yml
              vars:
                llama_cpp_backend: cuda
                llama_cpp_cuda_architectures: ["89"]
                llama_cpp_cuda_home: {home}
                cuda_toolkit_facts: {{version: "12.9"}}
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT release {{{{ ansible_failed_result.msg | to_json }}}}"
        - block:
            - ansible.builtin.include_role:
                name: llamafleet.fleet.llama_cpp
                tasks_from: preflight.yml
              vars:
                llama_cpp_commit: ""
          rescue:
            - ansible.builtin.debug:
                msg: "RESULT unpinned {{{{ ansible_failed_result.msg | to_json }}}}"
    """
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert found["cpu"] == ["cpu", DEFAULTS["llama_cpp_commit"], {}]
    assert found["cuda"] == ["cuda", ["89"], "Cuda compilation tools, release 12.8, V12.8.93\n"]
    assert f"needs {home}/bin/nvcc reporting release 12.9" in found["release"]
    assert "is a branch or tag and no commit is pinned" in found["unpinned"]
    own = re.findall(r"^TASK \[llamafleet\.fleet\.llama_cpp : (.*?)\] \*", done.stdout, re.M)
    assert own == ["Check the variables and choose the backend"] * 4

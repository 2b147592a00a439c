"""The llama_cpp role's preflight as one decision (plugins/action/llama_cpp_plan.py,
roles/llama_cpp/tasks/preflight.yml). The `plan` tests hand it the role's defaults; their GPU
lists are shaped like llamafleet_gpus (the llamafleet_gpu_facts module's fact) and their `nvcc`
answers stand for the toolkit's nvcc on hosts this machine does not have. The playbook tests run
the real role's preflight on this machine; the nvcc there is a two-line script that stands for
NVIDIA's (it shows how the release is read and refused, not that a real toolkit reports it so;
the cuda scenario and the GPU check run the real one)."""

from __future__ import annotations

import json
import os
import re
import textwrap
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
#: the variables that are not the role's own (whether there is a token; the toolkit's release;
#: the role's fixed CMake options, from its vars/main.yml)
DERIVED = {"has_token", "cuda_version", "fixed_cmake_options"}
FIXED = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_llama_cpp_fixed_cmake_options"]


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
        "fixed_cmake_options": FIXED,
        "ship_builders": [],
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
    options = found.pop("hashed_options")
    assert re.fullmatch(r"[0-9a-f]{64}", found.pop("options_sha256"))
    assert found == {
        "backend": "cpu",
        "cuda_archs": [],
        "pin": DEFAULTS["llama_cpp_commit"],
        "nvcc": {},
        "indexed": {},  # no shipped builds: the index is not read
    }
    assert options == FIXED | {
        "CMAKE_BUILD_TYPE": "Release",
        "GGML_NATIVE": "ON",
        "GGML_CUDA": "OFF",
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


PLATFORM = "debian-bookworm-x86_64-cpu-any"


def _ship(tmp_path: Path, options_hash: str, commit: str, builder: str = "b1") -> tuple[Path, str]:
    """An index of shipped builds with one build of `commit` (its tarball in place)."""
    ship = tmp_path / "ship"
    (ship / PLATFORM).mkdir(parents=True)
    name = f"b9079-{commit[:10]}-cpu-{options_hash[:10]}"
    (ship / PLATFORM / f"{name}.tar.gz").write_bytes(b"tarball")
    entry = {"sha256": "ab" * 32, "size": 7, "commit": commit, "builder": builder}
    index = {"format": 1, "builds": {PLATFORM: {name: entry}}}
    (ship / "index.json").write_text(json.dumps(index))
    return ship, name


def test_with_shipped_builds_the_plan_reads_the_index_for_this_hosts_build(
    mod: Any, tmp_path: Path
) -> None:
    """The lookup the role made with a module on the controller (one task and one Python process
    per host): the build of the pinned commit with this host's options, recorded by a builder
    the inventory names, its tarball in place; its name carries the builder's build number."""
    pin = DEFAULTS["llama_cpp_commit"]
    shipping = {"ship_dir": "", "ship_platform": PLATFORM, "ship_builders": ["b1"]}
    options_hash = _plan(mod, _vars(mod, **shipping))[0]["options_sha256"]
    ship, name = _ship(tmp_path, options_hash, pin)
    found = _plan(mod, _vars(mod, **(shipping | {"ship_dir": str(ship)})))[0]["indexed"]
    assert found["name"] == name and found["found"] and found["tarball_exists"]
    assert found["entry"]["sha256"] == "ab" * 32
    assert found["tarball"] == str(ship / PLATFORM / f"{name}.tar.gz")
    assert found["incoming"] == str(ship / PLATFORM / f".incoming-host-{name}.tar.gz")
    # not read without a pin or with a build number set by hand
    by_hand = _vars(mod, **(shipping | {"ship_dir": str(ship)}), build_number="9079")
    assert _plan(mod, by_hand)[0]["indexed"] == {}
    # the same options on another platform, or other options: nothing found, the host builds
    other = _vars(mod, **(shipping | {"ship_dir": str(ship)}), native=False)
    assert _plan(mod, other)[0]["indexed"]["name"] == ""


def test_a_build_recorded_by_a_host_that_is_not_a_builder_is_not_taken(
    mod: Any, tmp_path: Path
) -> None:
    """Attack: a compromised host that once shipped (or wrote an entry naming itself) does not
    decide what another host runs once the inventory no longer names it as a builder."""
    pin = DEFAULTS["llama_cpp_commit"]
    shipping = {"ship_platform": PLATFORM, "ship_builders": ["b1"]}
    options_hash = _plan(mod, _vars(mod, ship_dir="", **shipping))[0]["options_sha256"]
    ship, _ = _ship(tmp_path, options_hash, pin, builder="gpu-7")
    v = _vars(mod, ship_dir=str(ship), **shipping)
    assert _plan(mod, v)[0]["indexed"]["name"] == ""
    assert _plan(mod, v | {"ship_builders": []})[0]["indexed"]["name"] == ""
    assert _plan(mod, v | {"ship_builders": ["gpu-7"]})[0]["indexed"]["found"]


def test_a_broken_index_fails_the_plan_naming_it(mod: Any, tmp_path: Path) -> None:
    ship = tmp_path / "ship"
    ship.mkdir()
    (ship / "index.json").write_text("{")
    v = _vars(mod, ship_dir=str(ship), ship_platform=PLATFORM, ship_builders=["b1"])
    with pytest.raises(mod.PlanError, match=rf"shipped builds index {ship}: .*not valid JSON"):
        _plan(mod, v)


#: vars/main.yml's definition of the build's options and their sha256 before the plan computed
#: them (kept here as the reference: a build installed before must keep its name)
_FORMER_HASH = """
    _cuda_options:
      GGML_CUDA: "ON"
      CMAKE_CUDA_ARCHITECTURES: "{{ _llama_cpp_cuda_archs | join(';') }}"
      CMAKE_CUDA_COMPILER: "{{ llama_cpp_cuda_home }}/bin/nvcc"
      CUDAToolkit_ROOT: "{{ llama_cpp_cuda_home }}"
    _hashed: >-
      {{ _llama_cpp_fixed_cmake_options
         | combine({'CMAKE_BUILD_TYPE': llama_cpp_build_type,
                    'GGML_NATIVE': 'ON' if llama_cpp_native | bool else 'OFF'})
         | combine(_cuda_options if _llama_cpp_backend == 'cuda' else {'GGML_CUDA': 'OFF'})
         | combine(llama_cpp_cmake_options) }}
    _sha: >-
      {{ {'cmake': _hashed, 'targets': llama_cpp_targets, 'backend': _llama_cpp_backend,
          'cuda': (_llama_cpp_nvcc.stdout | default('') | regex_search('release [0-9.]+, V[0-9.]+'))
                  if _llama_cpp_backend == 'cuda' else none}
         | to_json(sort_keys=true) | hash('sha256') }}
"""


def test_the_options_hash_is_the_one_the_role_computed_before(tmp_path: Path) -> None:
    """A real playbook: for the defaults, a cuda build and options of every YAML type, the plan's
    options and sha256 are exactly what the role's former Jinja made of the same variables, so an
    installed build keeps its name (a new name would rebuild every host)."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    cases = {
        "defaults": {},
        "options": {
            "llama_cpp_native": "no",
            "llama_cpp_build_type": "RelWithDebInfo",
            "llama_cpp_targets": ["llama-server", "llama-bench"],
            "llama_cpp_cmake_options": {
                "GGML_CUDA_FA_ALL_QUANTS": True,
                "GGML_AVX512": "OFF",
                "N": 3,
                "GGML_CUDA": "OFF",
            },
        },
        "cuda": {
            "llama_cpp_backend": "cuda",
            "llama_cpp_cuda_architectures": ["89", "120"],
            "llama_cpp_cuda_home": str(home),
        },
    }
    tasks = ""
    for label, over in cases.items():
        tasks += f"""
        - ansible.builtin.include_role:
            name: llamafleet.fleet.llama_cpp
            tasks_from: preflight.yml
            public: true
          vars: {json.dumps(over)}
        - ansible.builtin.debug:
            msg: >-
              RESULT {label} {{{{ [_llama_cpp_options_sha256, _sha,
              _llama_cpp_hashed_options, _hashed] | to_json }}}}
          vars: {json.dumps(over)}
"""
    former = textwrap.indent(textwrap.dedent(_FORMER_HASH), " " * 8)
    play = f"""
    - hosts: localhost
      connection: local
      gather_facts: false
      vars:
{former}
      tasks:
{tasks}
    """
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    found = playbook_results(done.stdout)
    assert set(found) == set(cases)
    for label, (sha, former_sha, options, former_options) in found.items():
        assert re.fullmatch(r"[0-9a-f]{64}", sha), label
        assert (sha, options) == (former_sha, former_options), label
    assert len({v[0] for v in found.values()}) == len(cases)  # each case names another build
    assert found["cuda"][2]["CMAKE_CUDA_ARCHITECTURES"] == "89;120"


@pytest.mark.skipif(os.geteuid() != 0, reason="the build in use is root's, as on a host")
def test_the_preflight_task_reads_the_build_in_use_and_refuses_an_implant(
    mod: Any, open_tmp: Path, tmp_path: Path
) -> None:
    """One task for the plan and the decision (`state`): the real role's preflight, in check mode
    as in a real run, reads the build `current` points at with the plan's pin, backend and
    options hash (llama_cpp_state on the host). The wanted build installed as build.yml installs
    it is current; a binary planted beside llama-server fails the same task with the module's
    refusal (nothing changed); an unpinned plan reads nothing."""
    from test_llama_cpp_state import _install

    found = _plan(mod, _vars(mod))[0]
    pin, opts = found["pin"], found["options_sha256"]
    prefix = open_tmp / "opt"
    prefix.mkdir(mode=0o755)
    build = _install(
        prefix,
        f"b9079-{pin[:10]}-cpu-{opts[:10]}",
        commit=pin,
        options_hash=opts,
        ref=str(DEFAULTS["llama_cpp_version"]),
        targets=DEFAULTS["llama_cpp_targets"],
    )

    def include(name: str, indent: int, **over: Any) -> str:
        task = {
            "name": name,
            "ansible.builtin.include_role": {
                "name": "llamafleet.fleet.llama_cpp",
                "tasks_from": "preflight.yml",
            },
            "vars": {
                "llama_cpp_prefix": str(prefix),
                "llama_cpp_work_dir": str(tmp_path / "work"),
                **over,
            },
        }
        return textwrap.indent(yaml.safe_dump([task], sort_keys=False), " " * indent)

    play = f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
{include("intact", 4)}
    - ansible.builtin.debug:
        msg: "RESULT intact {{{{ _llama_cpp_plan.state | to_json }}}}"
    - ansible.builtin.file:
        path: {build}/bin/rt-implant
        state: touch
        mode: "0755"
      check_mode: false
    - block:
{include("implanted", 8)}
      rescue:
        - ansible.builtin.debug:
            msg: "RESULT implanted {{{{ ansible_failed_result.msg | to_json }}}}"
{include("unpinned", 4, llama_cpp_commit="", llama_cpp_allow_unpinned=True)}
    - ansible.builtin.debug:
        msg: "RESULT unpinned {{{{ [_llama_cpp_plan.pin, _llama_cpp_plan.state] | to_json }}}}"
"""
    done = run_playbook(tmp_path, play, "--check")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    got = playbook_results(done.stdout)
    assert got["intact"]["current"] is True, got["intact"]
    assert got["intact"]["name"] == build.name and got["intact"]["intact"] is True
    assert "bin/rt-implant is not in the manifest" in got["implanted"]
    assert "Nothing was changed" in got["implanted"]
    assert got["unpinned"] == ["", {}]
    own = re.findall(r"^TASK \[llamafleet\.fleet\.llama_cpp : (.*?)\] \*", done.stdout, re.M)
    assert own == ["Check the variables and choose the backend"] * 3

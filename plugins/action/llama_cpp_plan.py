"""Action plugin: the llama_cpp role's preflight as one decision: check the role's variables
(refused repository/ref combinations, the repository's transport and credentials, the commit pin,
the build account, the shipped builds' platform key), choose the backend and the CUDA
architectures from the host's GPUs (``llamafleet_gpus``) and, for the cuda backend, ask the
toolkit's nvcc for its release. What the role must refuse is refused with the messages its tasks
gave, before anything is touched.

    - llamafleet.fleet.llama_cpp_plan:
        vars:                          # the llama_cpp_* variables the preflight reads
          repo: "{{ llama_cpp_repo }}"
          ...
        gpus: "{{ ansible_facts['llamafleet_gpus'] | default([]) }}"
      register: _llama_cpp_plan

With ``state`` (the llama_cpp_state module's options other than those the plan decides:
``commit``, ``backend`` and ``options_hash``), the same task also reads the host's build in use:
when the plan pins a commit, the module ``llamafleet.fleet.llama_cpp_state`` runs on the host with
the pin, the backend and the options' sha256 the plan chose, and its result is ``state`` (a module
failure, such as a tampered build with ``refuse_tampered``, fails the task with its message);
without a pin ``state`` is {}. One task, one decision: what the role did with two tasks.

Returns ``backend``, ``cuda_archs``, ``pin`` (the commit the checkout must resolve to, "" when
unpinned), ``nvcc`` (rc, stdout, stdout_lines, stderr of ``nvcc --version``; {} unless the
backend is cuda), ``hashed_options`` and ``options_sha256`` (the CMake options a build of them is
configured with and the sha256 that names it) and ``indexed``: with shipped builds
(``ship_dir``), a pin and an automatic build number, the controller's index entry of the build of
the pinned commit with these options for this platform (as the module ``llama_cpp_build_index``
returns it for a query; its ``name`` is "" when there is none), else {}. Changes nothing: nvcc
runs in check mode too, as the task it replaces did, and the index is only read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.filter.llama_cpp_repo import (
    repo_problem,
    repo_scrub,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safetar import (
    UnsafeArchiveError,
    query,
)
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import task_args

#: the task's options (plugins/modules/llama_cpp_plan.py documents them)
_ARGS = frozenset({"vars", "gpus", "state"})
#: the llama_cpp_state options the task hands over (the others are the plan's answer)
_STATE_ARGS = frozenset({"prefix", "ref", "targets", "build_number", "work_dir", "refuse_tampered"})
#: the role's variables the plan reads, by their names without llama_cpp_ (has_token: whether
#: llama_cpp_repo_token is set, never the token; cuda_version: the release nvcc must report;
#: fixed_cmake_options: the role's own CMake options, vars/main.yml)
VARS = frozenset(
    {
        "repo",
        "version",
        "commit",
        "refused_versions",
        "backend",
        "targets",
        "keep_builds",
        "build_number",
        "prefix",
        "work_dir",
        "ccache_dir",
        "ship_dir",
        "ship_platform",
        "allow_insecure_transport",
        "has_token",
        "allow_unpinned",
        "build_user",
        "build_group",
        "cuda_architectures",
        "cuda_home",
        "cuda_version",
        "build_type",
        "native",
        "cmake_options",
        "fixed_cmake_options",
        "ship_builders",
    }
)
_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_ACCOUNT = re.compile(r"^[a-z_][a-z0-9_-]*[$]?$")
_PLATFORM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class PlanError(Exception):
    """What the role refuses: the task fails with this message."""


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on", "y", "t"}
    return bool(value)


def _int(value: Any) -> int:
    """Jinja's ``int`` filter: 0 for what is not an integer."""
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _jinja_bool(value: Any) -> bool:
    """Ansible's ``bool`` filter: true, yes, on, 1 (any case) and the integer 1."""
    if isinstance(value, str):
        return value.lower() in {"yes", "on", "1", "true"}
    if isinstance(value, int):
        return str(value).lower() in {"1", "true"}
    return bool(value == 1)


_NVCC_RELEASE = re.compile(r"release [0-9.]+, V[0-9.]+")


def build_options(
    v: Mapping[str, Any], backend: str, archs: list[str], nvcc_stdout: str
) -> tuple[dict[str, Any], str]:
    """The CMake options a build is configured with (before its build number and ccache) and
    the sha256 of everything that makes two builds of one commit differ, which names the build:
    the role's fixed options, the build type, native, the CUDA options or GGML_CUDA=OFF, the
    user's llama_cpp_cmake_options (each later one wins), the targets, the backend and, for
    cuda, nvcc's release. The same JSON (sorted keys, Ansible's ``to_json``) and sha256 as the
    role's Jinja computed before this plugin did, so no installed build is renamed."""
    cuda = (
        {
            "GGML_CUDA": "ON",
            "CMAKE_CUDA_ARCHITECTURES": ";".join(archs),
            "CMAKE_CUDA_COMPILER": f"{_text(v.get('cuda_home'))}/bin/nvcc",
            "CUDAToolkit_ROOT": _text(v.get("cuda_home")),
        }
        if backend == "cuda"
        else {"GGML_CUDA": "OFF"}
    )
    given = v.get("cmake_options") or {}
    if not isinstance(given, Mapping):
        raise PlanError("llama_cpp_cmake_options must be a mapping of CMake options to values.")
    options: dict[str, Any] = {
        **dict(v.get("fixed_cmake_options") or {}),
        "CMAKE_BUILD_TYPE": v.get("build_type"),
        "GGML_NATIVE": "ON" if _jinja_bool(v.get("native")) else "OFF",
        **cuda,
        **dict(given),
    }
    release = _NVCC_RELEASE.search(nvcc_stdout) if backend == "cuda" else None
    key = {
        "cmake": options,
        "targets": v.get("targets"),
        "backend": backend,
        "cuda": release.group(0) if release else None,
    }
    text = json.dumps(key, sort_keys=True)
    return options, hashlib.sha256(text.encode("utf-8")).hexdigest()


def shipped_build(
    v: Mapping[str, Any], pin: str, backend: str, options_hash: str
) -> dict[str, Any]:
    """The controller's index entry of the build of ``pin`` with these options for this platform,
    as the module llama_cpp_build_index answers a query without a name ({} where the role does not
    look: no ship_dir, no pin or a build number set by hand). Only read."""
    ship_dir = _text(v.get("ship_dir"))
    if not ship_dir or not _COMMIT.match(pin) or _text(v.get("build_number")) != "auto":
        return {}
    directory = os.path.expanduser(os.path.expandvars(ship_dir))
    builders = v.get("ship_builders")
    try:
        found: dict[str, Any] = query(
            directory,
            _text(v.get("ship_platform")),
            commit=pin,
            backend=backend,
            options_hash=options_hash,
            builders=None if builders is None else [_text(b) for b in builders],
        )
    except (ValueError, OSError, UnsafeArchiveError) as exc:
        raise PlanError(f"shipped builds index {directory}: {exc}") from None
    return found


def check_variables(v: Mapping[str, Any]) -> None:
    """The role's variable checks (the first two asserts of the old preflight, their
    messages)."""
    repo, version = _text(v.get("repo")), _text(v.get("version"))
    for item in v.get("refused_versions") or []:
        if re.search(_text(item.get("repo")), repo) and version == _text(item.get("version")):
            shown = re.sub(r"://[^/@]+@", "://", repo)
            raise PlanError(
                f"llama_cpp_version '{version}' of {shown} is refused: "
                f"{_text(item.get('reason')).strip()}"
            )
    targets = v.get("targets")
    targets = list(targets) if isinstance(targets, (list, tuple)) else [targets] if targets else []
    build_number = _text(v.get("build_number"))
    ship_dir = _text(v.get("ship_dir"))
    ok = (
        len(repo) > 0
        and len(version) > 0
        and v.get("backend") in ("auto", "cpu", "cuda")
        and len(targets) > 0
        and all(_TARGET.match(_text(t)) for t in targets)
        and _int(v.get("keep_builds")) >= 1
        and (build_number == "auto" or re.match(r"^[0-9]{1,9}$", build_number) is not None)
        and all(_text(v.get(k)).startswith("/") for k in ("prefix", "work_dir", "ccache_dir"))
        and (not ship_dir or ship_dir.startswith("/"))
    )
    if not ok:
        raise PlanError("Invalid llama_cpp_* variables; see the role's meta/argument_specs.yml.")


def commit_pin(v: Mapping[str, Any]) -> str:
    """The commit the checkout must resolve to: llama_cpp_commit, else llama_cpp_version when it
    is a full commit itself, else "" (vars/main.yml's _llama_cpp_pin); refuses a malformed pin
    and a commit version that disagrees with the pin."""
    commit = _text(v.get("commit") or "").strip().lower()
    version = _text(v.get("version")).strip().lower()
    if commit and not _COMMIT.match(commit):
        raise PlanError(
            "llama_cpp_commit must be a full commit (40 hex digits), "
            f'not "{_text(v.get("commit"))}".'
        )
    if _COMMIT.match(version) and commit and commit != version:
        raise PlanError(
            f"llama_cpp_version is the commit {version} but llama_cpp_commit pins {commit}: "
            f"set llama_cpp_commit to {version} (or empty)."
        )
    return commit or (version if _COMMIT.match(version) else "")


def plan(
    v: Mapping[str, Any], gpus: list[Any], nvcc: Callable[[str], Mapping[str, Any]]
) -> dict[str, Any]:
    """The preflight (see the module docstring). ``nvcc`` runs ``<cuda_home>/bin/nvcc
    --version`` on the host (called only for the cuda backend) and returns its rc, stdout and
    stderr. Raises PlanError with the role's message."""
    unknown = set(v) - VARS
    if unknown:
        raise PlanError(f"unknown vars: {', '.join(sorted(unknown))}")
    check_variables(v)
    repo = _text(v.get("repo"))
    problem = repo_problem(repo, v.get("allow_insecure_transport"), _truthy(v.get("has_token")))
    if problem:
        raise PlanError(problem)
    pin = commit_pin(v)
    if not pin and not _truthy(v.get("allow_unpinned")):
        shown, version = repo_scrub(repo), _text(v.get("version"))
        raise PlanError(
            f"llama_cpp_version '{version}' of {shown} is a branch or tag and no commit is "
            "pinned: whatever it points at when the play runs would be compiled and installed. "
            "Set llama_cpp_commit to the commit you reviewed (git ls-remote "
            f"{shown} {version}), or set llama_cpp_allow_unpinned: true to build the current one "
            "(recorded in the manifest with pinned: false)."
        )
    user, group = _text(v.get("build_user")), _text(v.get("build_group"))
    if not (
        user not in ("", "root", "0")
        and group not in ("", "root", "0")
        and _ACCOUNT.match(user)
        and _ACCOUNT.match(group)
    ):
        raise PlanError(
            f"llama_cpp_build_user/llama_cpp_build_group ({user}:{group}) must name an "
            "unprivileged account and group (not root): configure and compile run as that "
            "account."
        )
    platform = _text(v.get("ship_platform"))
    if _text(v.get("ship_dir")) and not (_PLATFORM.match(platform) and ".." not in platform):
        raise PlanError(
            f"llama_cpp_ship_platform '{platform}' must be letters, digits, '.', '_' and '-' "
            "(it is a directory name on the controller)."
        )

    wanted = _text(v.get("backend"))
    backend = wanted if wanted != "auto" else ("cuda" if gpus else "cpu")
    given = v.get("cuda_architectures") or []
    if given:
        archs = [_text(a) for a in given]
    else:
        archs = sorted({_text(g.get("arch")) for g in gpus if g.get("arch")})
    found: dict[str, Any] = {}
    if backend == "cuda":
        home = _text(v.get("cuda_home"))
        release = _text(v.get("cuda_version") or "12.8")
        done = nvcc(f"{home}/bin/nvcc")
        out = _text(done.get("stdout"))
        found = {
            "rc": int(done.get("rc", 1)),
            "stdout": out,
            "stdout_lines": out.splitlines(),
            "stderr": _text(done.get("stderr")),
        }
        if not (found["rc"] == 0 and archs and f"release {release}," in out):
            said = _text(done.get("msg") or found["stderr"]).strip()
            raise PlanError(
                f"The cuda backend needs {home}/bin/nvcc reporting release {release} (install "
                "the toolkit, e.g. with the cuda_toolkit role, or set llama_cpp_cuda_home) and "
                "at least one CUDA architecture (llama_cpp_cuda_architectures, or a GPU with a "
                f"compute capability in llamafleet_gpus). nvcc said: {said}"
            )
    hashed, options_hash = build_options(v, backend, archs, _text(found.get("stdout")))
    return {
        "backend": backend,
        "cuda_archs": archs,
        "pin": pin,
        "nvcc": found,
        "hashed_options": hashed,
        "options_sha256": options_hash,
        "indexed": shipped_build(v, pin, backend, options_hash),
    }


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = task_args("llama_cpp_plan", self._task.args, _ARGS)

        def nvcc(path: str) -> Mapping[str, Any]:
            # read-only, also in check mode, as the task it replaces (check_mode: false)
            done: Mapping[str, Any] = self._low_level_execute_command(
                f"{shlex.quote(path)} --version"
            )
            return done

        try:
            found = plan(args.get("vars") or {}, list(args.get("gpus") or []), nvcc)
            state = args.get("state")
            if state is not None:
                found["state"] = self._read_state(state, found, task_vars or {})
        except PlanError as e:
            result.update(failed=True, msg=str(e))
            return result
        result.update(found, changed=False)
        return result

    def _read_state(
        self, state: Any, found: Mapping[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any]:
        """The build in use, as the module llama_cpp_state reads it on the host, for the plan's
        pin, backend and options hash; {} without a pin (nothing to compare with)."""
        if not isinstance(state, Mapping) or set(state) - _STATE_ARGS:
            raise PlanError(
                "llama_cpp_plan: state must be a mapping of the llama_cpp_state options "
                f"{', '.join(sorted(_STATE_ARGS))}"
            )
        if not _COMMIT.match(_text(found.get("pin"))):
            return {}
        module_args = {
            **state,
            "commit": found["pin"],
            "backend": found["backend"],
            "options_hash": found["options_sha256"],
        }
        done: dict[str, Any] = self._execute_module(
            module_name="llamafleet.fleet.llama_cpp_state",
            module_args=module_args,
            task_vars=task_vars,
        )
        if done.get("failed"):
            raise PlanError(_text(done.get("msg")) or "llama_cpp_state failed")
        return {k: v for k, v in done.items() if not k.startswith("_ansible")}

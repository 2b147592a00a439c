"""Action plugin: the cuda_toolkit role's preflight as one decision: check the role's variables,
name this host's NVIDIA repository path and driver package, read its GPUs (``llamafleet_gpus``)
and decide whether the toolkit is installed here, refusing what the role must refuse with the
same messages its tasks gave. On a host without a GPU it looks once at the PCI bus (a GPU whose
driver is missing or broken); nothing else runs on the host.

    - llamafleet.fleet.cuda_toolkit_plan:
        vars:                        # every cuda_toolkit_* variable the preflight reads
          method: "{{ cuda_toolkit_method }}"
          ...
        facts: "{{ ansible_facts }}"   # distribution, version, architecture, llamafleet_gpus
        vars_dir: "{{ role_path }}/vars"
        host: "{{ inventory_hostname }}"
      register: _cuda_toolkit_plan

Returns ``facts`` (the role's internal facts: the names its other task files read, set by the
role with set_fact) and ``msg`` (the GPU report). Changes nothing; check mode is the same run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.llamafleet.fleet.plugins.plugin_utils.action import task_args

#: the NVIDIA display devices on the PCI bus (a GPU whose driver is missing or broken)
PCI_SCAN = r"""for d in /sys/bus/pci/devices/*; do
  [ -r "$d/vendor" ] && [ "$(cat "$d/vendor")" = 0x10de ] || continue
  case "$(cat "$d/class")" in 0x03*) echo "${d##*/}" ;; esac
done
true"""

_NO_GPU = "no NVIDIA GPU (llamafleet_gpus is empty: nvidia-smi is not installed or lists no GPU)"
#: the task's options (plugins/modules/cuda_toolkit_plan.py documents them)
_ARGS = frozenset({"vars", "facts", "vars_dir", "host"})
#: the role's variables the plan reads (by their names without cuda_toolkit_)
VARS = frozenset(
    {
        "method",
        "version",
        "home",
        "keyring_path",
        "env_file",
        "profile_script",
        "repo_url",
        "allow_insecure_transport",
        "keyring_url",
        "repo_key_fingerprint",
        "keyring_sha256",
        "repo_distro",
        "repo_arch",
        "driver_min_version",
        "driver_package",
        "install_without_gpu",
        "install_driver",
        "require_gpu",
        "driver_check",
        "min_driver",
        "arch_map",
    }
)


class PlanError(Exception):
    """What the role refuses: the task fails with this message."""


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on", "y", "t"}
    return bool(value)


def distro_id(facts: Mapping[str, Any]) -> str:
    """The name of this host's vars/<distro>.yml: debian12, ubuntu2404."""
    name = str(facts.get("distribution", "")).lower()
    if facts.get("distribution") == "Debian":
        return name + str(facts.get("distribution_major_version", ""))
    return name + str(facts.get("distribution_version", "")).replace(".", "")


def check_variables(v: Mapping[str, Any]) -> None:
    """The role's variable checks (preflight.yml's first two asserts, their messages)."""
    ok = (
        v.get("method") in ("apt", "existing")
        and re.match(r"^[0-9]+\.[0-9]+$", str(v.get("version", ""))) is not None
        and all(str(v.get(k, "")).startswith("/") for k in ("home", "keyring_path", "env_file"))
        and re.match(r"^/etc/profile\.d/.+\.sh$", str(v.get("profile_script", ""))) is not None
        and re.match(r"^[a-z]+://", str(v.get("repo_url", ""))) is not None
    )
    if not ok:
        raise PlanError("Invalid cuda_toolkit_* variables; see the role's meta/argument_specs.yml.")
    insecure = _truthy(v.get("allow_insecure_transport"))
    repo_url = str(v.get("repo_url", ""))
    keyring_url = str(v.get("keyring_url") or "")
    https = repo_url.startswith("https://") and (
        not keyring_url or keyring_url.startswith("https://")
    )
    sums = v.get("keyring_sha256")
    pins = (
        re.match(
            r"^([0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})$",
            re.sub(r"\s", "", str(v.get("repo_key_fingerprint", ""))),
        )
        is not None
        and isinstance(sums, Mapping)
        and all(re.match(r"^[0-9A-Fa-f]{64}$", str(s)) for s in sums.values())
    )
    if (https or insecure) and pins:
        return
    if not https and not insecure:
        raise PlanError(
            f"Refused: cuda_toolkit_repo_url ({repo_url}) and cuda_toolkit_keyring_url must be "
            "https:// (plain http lets anyone on the path swap the repository key and packages; "
            "set cuda_toolkit_allow_insecure_transport: true only for a trusted local mirror)."
        )
    raise PlanError(
        "cuda_toolkit_repo_key_fingerprint must be 40 (or 64) hex digits and "
        'cuda_toolkit_keyring_sha256 a mapping of "<distro>/<arch>" to 64 hex digits.'
    )


def plan(
    v: Mapping[str, Any],
    facts: Mapping[str, Any],
    distro_vars: Mapping[str, Any],
    host: str,
    pci_scan: Callable[[], list[str]],
) -> dict[str, Any]:
    """The preflight (see the module docstring). ``distro_vars`` is vars/<distro>.yml ({} when
    there is none); ``pci_scan`` lists the NVIDIA display devices, called only without a GPU.
    Returns {"facts": ..., "msg": ...}; raises PlanError with the role's message."""
    unknown = set(v) - VARS
    if unknown:
        raise PlanError(f"unknown vars: {', '.join(sorted(unknown))}")
    check_variables(v)
    version = str(v["version"])
    arch_map = v.get("arch_map") or {}
    min_driver = v.get("min_driver") or {}
    repo_distro = str(v.get("repo_distro") or distro_vars.get("_cuda_toolkit_distro") or "")
    repo_arch = str(v.get("repo_arch") or arch_map.get(str(facts.get("architecture", "")), ""))
    repo = f"{str(v['repo_url']).rstrip('/')}/{repo_distro}/{repo_arch}"
    driver_min = str(v.get("driver_min_version") or min_driver.get(version, ""))
    driver_pkg = str(
        v.get("driver_package")
        or (f"cuda-drivers-{driver_min.split('.', 1)[0]}" if driver_min else "cuda-drivers")
    )
    gpus = list(facts.get("llamafleet_gpus") or [])
    archs = sorted({str(g.get("arch")) for g in gpus if g.get("arch")})
    pci = [] if gpus else pci_scan()
    install_driver = _truthy(v.get("install_driver"))
    wanted = bool(gpus) or _truthy(v.get("install_without_gpu")) or (install_driver and bool(pci))
    skip_reason = "" if wanted else _NO_GPU

    if gpus:
        names = ", ".join(str(g.get("name")) for g in gpus)
        caps = ", ".join(dict.fromkeys(str(g.get("compute_cap")) for g in gpus))
        msg = f"GPUs: {names}; compute capability {caps}; driver {gpus[0].get('driver_version')}"
    elif not wanted:
        msg = f"{skip_reason}: the CUDA toolkit is not installed on this host"
    else:
        msg = (
            "no GPU; installing the CUDA toolkit anyway"
            " (cuda_toolkit_install_without_gpu or driver install)"
        )

    if _truthy(v.get("require_gpu")) and not gpus:
        extra = (
            f"NVIDIA devices on the PCI bus: {', '.join(pci)}; install the driver (apt install "
            f"{driver_pkg}) and reboot."
            if pci
            else ""
        )
        reason = skip_reason or "no NVIDIA GPU"
        raise PlanError(f"cuda_toolkit_require_gpu is set but {host} has {reason}. {extra}".strip())
    driver_check = _truthy(v.get("driver_check"))
    if not gpus and pci and driver_check and not install_driver:
        raise PlanError(
            f"{host} has NVIDIA GPUs on the PCI bus ({', '.join(pci)}) but nvidia-smi does not "
            f"list them: the driver is missing or not loaded. CUDA {version} needs driver >= "
            f"{driver_min}: install {driver_pkg} (apt install {driver_pkg}, or set "
            "cuda_toolkit_install_driver) and reboot."
        )
    if gpus and driver_check and not install_driver:
        if not driver_min:
            raise PlanError(
                f"No minimum driver is known for CUDA {version}; "
                "set cuda_toolkit_driver_min_version."
            )
        old = [g for g in gpus if not _at_least(str(g.get("driver_version", "")), driver_min)]
        if old:
            found = ", ".join(dict.fromkeys(str(g.get("driver_version")) for g in old))
            raise PlanError(
                f"The NVIDIA driver {found} on {host} is too old for CUDA {version} (needs >= "
                f"{driver_min}). Install the package {driver_pkg} (apt install {driver_pkg} from "
                "the CUDA repository, or set cuda_toolkit_install_driver: true) and reboot."
            )
    if wanted and v.get("method") == "apt":
        known = (
            v.get("repo_arch")
            or v.get("repo_distro")
            or repo_arch in (distro_vars.get("_cuda_toolkit_repo_arches") or [])
        )
        if not repo_distro or not repo_arch or not known:
            raise PlanError(
                f"No CUDA repository path for {facts.get('distribution')} "
                f"{facts.get('distribution_version')} on {facts.get('architecture')} "
                "(known: Ubuntu 22.04/24.04, Debian 12/13 on x86_64 and sbsa). "
                "Set cuda_toolkit_repo_distro and "
                "cuda_toolkit_repo_arch, or use cuda_toolkit_method: existing."
            )
    return {
        "msg": msg,
        "facts": {
            "cuda_toolkit_gpus": gpus,
            "cuda_toolkit_gpu_archs": archs,
            "_cuda_toolkit_repo_distro": repo_distro,
            "_cuda_toolkit_repo_arch": repo_arch,
            "_cuda_toolkit_repo": repo,
            "_cuda_toolkit_driver_min": driver_min,
            "_cuda_toolkit_driver_pkg": driver_pkg,
            "_cuda_toolkit_pci_gpus": pci,
            "_cuda_toolkit_wanted": wanted,
            "_cuda_toolkit_skip_reason": skip_reason,
        },
    }


def _loose(version: str) -> list[int | str]:
    """A version's parts as Ansible's loose versions compare them: runs of digits as numbers,
    runs of letters as words, dots dropped (570.133.07 -> [570, 133, 7])."""
    parts = re.split(r"(\d+|[a-z]+|\.)", version)
    return [int(p) if p.isdigit() else p for p in parts if p and p != "."]


def _at_least(found: str, wanted: str) -> bool:
    """Ansible's ``version(wanted, '>=')`` test (loose versions); False when the two do not
    compare (a number against a word)."""
    try:
        return bool(_loose(found) >= _loose(wanted))
    except TypeError:
        return False


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = task_args("cuda_toolkit_plan", self._task.args, _ARGS)
        facts = args.get("facts") or {}
        distro_vars: Mapping[str, Any] = {}
        path = os.path.join(str(args.get("vars_dir", "")), distro_id(facts) + ".yml")
        if args.get("vars_dir") and os.path.isfile(path):
            loaded = self._loader.load_from_file(path)
            distro_vars = loaded if isinstance(loaded, Mapping) else {}

        def pci_scan() -> list[str]:
            # read-only (sysfs), also in check mode, as the task it replaces
            done = self._low_level_execute_command(PCI_SCAN, executable="/bin/sh")
            if done.get("rc", 1) != 0:
                return []
            return [line for line in str(done.get("stdout", "")).splitlines() if line.strip()]

        try:
            found = plan(
                args.get("vars") or {}, facts, distro_vars, str(args.get("host", "")), pci_scan
            )
        except PlanError as e:
            result.update(failed=True, msg=str(e))
            return result
        result.update(found, changed=False)
        return result

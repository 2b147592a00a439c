#!/usr/bin/python
# Apache-2.0
"""Ansible module: the host's NVIDIA GPUs from one nvidia-smi query, as the fact llamafleet_gpus."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamafleet_gpu_facts
short_description: List the host's NVIDIA GPUs (fact llamafleet_gpus)
description:
  - Runs C(nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap,driver_version
    --format=csv,noheader,nounits) once and sets the fact C(llamafleet_gpus), a list with one
    mapping per GPU, in nvidia-smi's order.
  - Without nvidia-smi on the host, or when it finds no device (C(No devices were found)), the
    list is empty. When nvidia-smi is there but fails otherwise (a driver that is not loaded, a
    library version mismatch after a driver upgrade), the task fails with its message.
  - An older nvidia-smi that does not know C(index), C(uuid) or C(compute_cap) is asked again
    without that field; the GPU's position stands in for its index, the others stay empty.
  - Never changes anything; runs in check mode too.
options:
  nvidia_smi:
    type: str
    default: nvidia-smi
    description: The nvidia-smi command, looked up on C(PATH) unless it is an absolute path.
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
- name: List the GPUs
  llamafleet.fleet.llamafleet_gpu_facts:

- name: Use the first GPU's memory
  ansible.builtin.debug:
    msg: "{{ (llamafleet_gpus | first).memory_mib }} MiB"
  when: llamafleet_gpus | length > 0
"""

RETURN = r"""
ansible_facts:
  description: C(llamafleet_gpus).
  returned: always
  type: dict
  contains:
    llamafleet_gpus:
      description:
        - One mapping per GPU, C(index) (int), C(name), C(uuid), C(memory_mib) (int),
          C(compute_cap) (C(8.9)), C(arch) (C(89), as CMake's CUDA_ARCHITECTURES),
          C(driver_version).
      type: list
      elements: dict
nvidia_smi:
  description: The nvidia-smi that answered, or null without one.
  returned: always
  type: str
"""

# imports after the module's documentation (Ansible's layout)
import os  # noqa: E402
import re  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

#: The query, in order. nvidia-smi prints the values of one GPU per line, comma-separated.
FIELDS = ("index", "uuid", "name", "memory.total", "compute_cap", "driver_version")
#: Fields an older nvidia-smi may not know: asked again without them.
OPTIONAL = frozenset({"index", "uuid", "compute_cap"})
#: What nvidia-smi prints for a value it cannot give.
_NOT_AVAILABLE = frozenset({"[n/a]", "n/a", "[not supported]", "[unknown error]", ""})
_UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_CC = re.compile(r"([0-9]+)\.([0-9]+)\Z")
_MIB = re.compile(r"([0-9]+)(?:\s*MiB)?\Z", re.IGNORECASE)
_NO_DEVICES = "no devices were found"


class GpuQueryError(Exception):
    """nvidia-smi's answer cannot be read as the query's rows."""


def query_argv(nvidia_smi: str, fields: Sequence[str] = FIELDS) -> list[str]:
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def unknown_field(stderr: str, stdout: str = "") -> str | None:
    """The field nvidia-smi refused (``Field "uuid" is not a valid field to query.``), if any."""
    m = _UNKNOWN_FIELD.search(stderr) or _UNKNOWN_FIELD.search(stdout)
    return m.group(1) if m else None


def _value(text: str) -> str:
    text = text.strip()
    return "" if text.lower() in _NOT_AVAILABLE else text


def _mib(text: str, line: str) -> int:
    value = _value(text)
    if not value:
        return 0
    m = _MIB.match(value)
    if not m:
        raise GpuQueryError(f"memory.total {text.strip()!r} is not a number of MiB in {line!r}")
    return int(m.group(1))


def parse_gpus(
    stdout: str, fields: Sequence[str] = FIELDS
) -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUs of nvidia-smi's ``--format=csv,noheader,nounits`` answer to ``fields``, and the
    lines that are no GPU's row.

    One GPU a line; blank lines and ``No devices were found`` are skipped. A line with fewer
    values than fields (a warning such as ``WARNING: infoROM is corrupted at gpu ...`` among the
    rows) is returned apart. A name with a comma in it keeps it (the fields around the name are
    counted from both ends). A value nvidia-smi cannot give (``[N/A]``, ``[Not Supported]``) is
    empty (memory: 0). Fields not in ``fields`` are empty; the index is then the GPU's position.
    A value of the wrong form (an index or memory that is no number) raises GpuQueryError."""
    fields = list(fields)
    name_at = fields.index("name")
    gpus: list[dict[str, Any]] = []
    other: list[str] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line or line.lower().rstrip(".") == _NO_DEVICES:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(fields):
            other.append(line)
            continue
        extra = len(parts) - len(fields)
        # the name is the only field that may hold a comma
        name = ", ".join(parts[name_at : name_at + extra + 1])
        row = dict(
            zip(fields, [*parts[:name_at], name, *parts[name_at + extra + 1 :]], strict=True)
        )
        index = _value(row.get("index", ""))
        if index and not index.isdigit():
            raise GpuQueryError(f"index {index!r} is not a number in {line!r}")
        m = _CC.match(_value(row.get("compute_cap", "")))
        gpus.append(
            {
                "index": int(index) if index else len(gpus),
                "name": _value(row["name"]),
                "uuid": _value(row.get("uuid", "")),
                "memory_mib": _mib(row.get("memory.total", ""), line),
                "compute_cap": f"{int(m.group(1))}.{int(m.group(2))}" if m else "",
                "arch": f"{int(m.group(1))}{int(m.group(2))}" if m else "",
                "driver_version": _value(row.get("driver_version", "")),
            }
        )
    return gpus, other


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}},
        supports_check_mode=True,
    )
    wanted = module.params["nvidia_smi"] or "nvidia-smi"
    if os.path.isabs(wanted):
        binary = wanted if os.access(wanted, os.X_OK) else None
    else:
        binary = module.get_bin_path(wanted)
    if binary is None:
        module.exit_json(changed=False, nvidia_smi=None, ansible_facts={"llamafleet_gpus": []})
        return
    fields = list(FIELDS)
    while True:
        argv = query_argv(binary, fields)
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        refused = unknown_field(err, out) if rc != 0 else None
        if refused in OPTIONAL and refused in fields:
            fields.remove(refused)  # an older nvidia-smi: ask again without it
            continue
        break
    text = (err.strip() or out.strip()).splitlines()
    if rc != 0 and _NO_DEVICES in (err + out).lower():
        gpus: list[dict[str, Any]] = []
    elif rc != 0:
        module.fail_json(
            msg=f"{binary} is installed but cannot list the GPUs (exit code {rc}): "
            f"{' '.join(text[:3]) or 'no message'}. Load or repair the NVIDIA driver (after a "
            "driver upgrade: reboot), or remove nvidia-smi from a host without a GPU.",
            rc=rc,
            cmd=argv,
            stdout=out,
            stderr=err,
        )
    else:
        try:
            gpus, other = parse_gpus(out, fields)
        except GpuQueryError as exc:
            module.fail_json(msg=f"{' '.join(argv)}: {exc}", cmd=argv, stdout=out, stderr=err)
        if other and not gpus:
            module.fail_json(
                msg=f"{' '.join(argv)} printed no GPU row: {' '.join(other[:3])}",
                cmd=argv,
                stdout=out,
                stderr=err,
            )
        for line in other:
            module.warn(f"nvidia-smi printed a line that is no GPU row: {line}")
    module.exit_json(changed=False, nvidia_smi=binary, ansible_facts={"llamafleet_gpus": gpus})


if __name__ == "__main__":
    main()

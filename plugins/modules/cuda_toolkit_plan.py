#!/usr/bin/python
"""Documentation of the cuda_toolkit_plan action plugin (plugins/action/cuda_toolkit_plan.py),
the cuda_toolkit role's preflight: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit_plan
short_description: Decide in one task whether and from where the CUDA toolkit is installed on a host
description:
  - >-
    Checks the cuda_toolkit role's variables (the repository must be C(https://) unless
    C(allow_insecure_transport), the key fingerprint and keyring checksums must be pinned), names
    this host's NVIDIA repository path from the role's C(vars/<distro>.yml) and the driver package,
    reads the host's GPUs (C(llamafleet_gpus)) and decides whether the toolkit is installed.
  - >-
    Refuses, before anything is touched, a driver older than the toolkit needs, NVIDIA devices on
    the PCI bus that nvidia-smi does not list (the driver is missing or not loaded), a missing GPU
    with O(vars.require_gpu), and a host for which NVIDIA publishes no repository.
  - Without a GPU it reads the PCI bus once (sysfs, read-only); it changes nothing, in check mode
    or not.
version_added: "0.2.0"
options:
  vars:
    description: The role's variables, by their names without C(cuda_toolkit_) (method, version,
      home, keyring_path, env_file, profile_script, repo_url, allow_insecure_transport,
      keyring_url, repo_key_fingerprint, keyring_sha256, repo_distro, repo_arch,
      driver_min_version, driver_package, install_without_gpu, install_driver, require_gpu,
      driver_check), and the role's C(min_driver) and C(arch_map).
    type: dict
    required: true
  facts:
    description: C(distribution), C(distribution_major_version), C(distribution_version),
      C(architecture) and C(llamafleet_gpus) of the host.
    type: dict
    required: true
  vars_dir:
    description: The role's C(vars) directory (C(<distro>.yml) files).
    type: path
    required: true
  host:
    description: The host's name, for the messages.
    type: str
    required: true
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
# as roles/cuda_toolkit/tasks/main.yml calls it (every variable of the role under vars)
- name: Decide whether to install the toolkit
  llamafleet.fleet.cuda_toolkit_plan:
    vars:
      method: "{{ cuda_toolkit_method }}"
      version: "{{ cuda_toolkit_version | string }}"
      home: "{{ cuda_toolkit_home }}"
    facts: "{{ ansible_facts }}"
    vars_dir: "{{ role_path }}/vars"
    host: "{{ inventory_hostname }}"
  register: _plan
"""

RETURN = r"""
facts:
  description: The role's facts (cuda_toolkit_gpus, cuda_toolkit_gpu_archs and the internal
    _cuda_toolkit_* names its task files read), set by the role with set_fact.
  returned: success
  type: dict
msg:
  description: The GPU report.
  returned: always
  type: str
"""

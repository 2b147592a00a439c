#!/usr/bin/python
"""Documentation of the llama_cpp_plan action plugin (plugins/action/llama_cpp_plan.py), the
llama_cpp role's preflight: this file has no code of its own."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_plan
short_description: Check the llama_cpp role's variables and choose the backend in one task
description:
  - >-
    Checks the llama_cpp role's variables and refuses, before anything is touched, a refused
    repository and ref (the TurboQuant fork's master branch), a repository reached over a
    transport that neither encrypts nor authenticates unless O(vars.allow_insecure_transport),
    credentials in the repository URL, a token for anything but C(https://), a commit pin that is
    not 40 hex digits or disagrees with a commit given as the version, a branch or tag without a
    pin unless O(vars.allow_unpinned), root as the build account and a platform key of shipped
    builds that is not a plain directory name.
  - >-
    Chooses the backend (C(auto) is C(cuda) when O(gpus) lists a GPU, else C(cpu)) and the CUDA
    architectures (O(vars.cuda_architectures), else those of the GPUs); for C(cuda) it runs
    C(<cuda_home>/bin/nvcc --version) on the host and refuses a toolkit that does not report
    O(vars.cuda_version) or a build without an architecture.
  - >-
    Computes the CMake options a build is configured with and their sha256, which names the build
    (RV(hashed_options), RV(options_sha256)): the same JSON and sha256 the role computed in Jinja
    before, so no installed build is renamed.
  - >-
    With shipped builds (O(vars.ship_dir)), a pin and O(vars.build_number=auto), reads the
    controller's index of shipped builds for the one build of the pinned commit with these
    options for this platform (RV(indexed), as M(llamafleet.fleet.llama_cpp_build_index) answers
    a query without a name); O(vars.ship_builders) limits it to builds those hosts recorded.
  - Changes nothing, in check mode or not (nvcc runs in check mode too; the index is only read).
version_added: "0.2.0"
options:
  vars:
    description: The role's variables, by their names without C(llama_cpp_) (repo, version,
      commit, refused_versions, backend, targets, keep_builds, build_number, prefix, work_dir,
      ccache_dir, ship_dir, ship_platform, allow_insecure_transport, allow_unpinned, build_user,
      build_group, cuda_architectures, cuda_home, build_type, native, cmake_options,
      ship_builders), C(has_token) (whether llama_cpp_repo_token is set; never the token),
      C(cuda_version) (the release nvcc must report) and C(fixed_cmake_options) (the role's own
      CMake options).
    type: dict
    required: true
  gpus:
    description: The host's GPUs, as the C(llamafleet_gpus) fact lists them (C(arch) read).
    type: list
    elements: dict
    required: true
  state:
    description:
      - The options of M(llamafleet.fleet.llama_cpp_state) other than those the plan decides
        (C(prefix), C(ref), C(targets), C(build_number), C(work_dir), C(refuse_tampered)).
      - When given and the plan pins a commit, the same task runs that module on the host with
        the plan's pin, backend and options hash and returns its result as RV(state); a failure
        of the module (a tampered build with C(refuse_tampered)) fails the task with its message.
      - Read-only, also in check mode.
    type: dict
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check
"""

EXAMPLES = r"""
# as roles/llama_cpp/tasks/preflight.yml calls it (every variable it reads under vars)
- name: Check the variables and choose the backend
  llamafleet.fleet.llama_cpp_plan:
    vars:
      repo: "{{ llama_cpp_repo }}"
      version: "{{ llama_cpp_version | string }}"
      backend: "{{ llama_cpp_backend }}"
    gpus: "{{ ansible_facts['llamafleet_gpus'] | default([]) }}"
  register: _llama_cpp_plan
"""

RETURN = r"""
backend:
  description: The backend to build, C(cpu) or C(cuda).
  returned: success
  type: str
cuda_archs:
  description: The CUDA architectures to build for (C(89), C(120)); empty for C(cpu) without
    GPUs.
  returned: success
  type: list
  elements: str
pin:
  description: The commit the checkout must resolve to; empty when unpinned.
  returned: success
  type: str
nvcc:
  description: C(rc), C(stdout), C(stdout_lines) and C(stderr) of C(nvcc --version); empty
    unless the backend is C(cuda).
  returned: success
  type: dict
hashed_options:
  description: The CMake options of the build, before its build number and ccache.
  returned: success
  type: dict
options_sha256:
  description: The sha256 of the options, the targets, the backend and nvcc's release (its
    first 10 hex digits end the build's name).
  returned: success
  type: str
indexed:
  description: The controller's index entry of the build of the pinned commit with these
    options (C(name), C(found), C(entry), C(tarball), C(tarball_exists), C(incoming), C(ignored);
    C(name) is empty when there is none); empty where the index is not read.
  returned: success
  type: dict
state:
  description: With O(state) and a pinned commit, the result of M(llamafleet.fleet.llama_cpp_state)
    (C(current), C(wanted), C(intact), C(reason), C(name), C(dir), C(manifest),
    C(checkout_credentials)); empty otherwise.
  returned: success
  type: dict
"""

#!/usr/bin/python
# Apache-2.0
"""Ansible module: read a GGUF file's header (metadata key/values) without loading tensors."""

from __future__ import annotations

# ruff: noqa: E402 - Ansible modules import after their DOCUMENTATION

DOCUMENTATION = r"""
---
module: gguf_metadata
short_description: Read the metadata of a GGUF model and save it as metadata.json
description:
  - Reads the header of the first file of a model (magic, version, key/value metadata) and sums the
    sizes of all its files (split models). Tensor data is not read.
  - Returns the architecture, training context length, layer/head/expert counts and every scalar
    metadata value (arrays such as the vocabulary are summarised by their length).
  - With O(save), writes the document (plus O(model), O(sha256) and O(mmproj)) as JSON, root:root
    C(0644), through a fresh temporary file (O_EXCL) renamed over the old one with directory
    descriptors; an unchanged document is not rewritten.
  - Every document is validated before it is written or returned, and so is a saved one that is
    read back; C(sha256) must hold 64 lower-case hex digits, names and paths must not contain
    control characters or newlines (a bad value fails naming the file and the field). A saved file
    with a bad field is replaced (with a warning naming them).
  - Files are opened like M(gguf_fetch) opens them (directory descriptors from C(/), no link another
    account owns, O_NOFOLLOW|O_NONBLOCK, one hard link), see there for O(base) and
    O(takeover_owner).
  - Must run as root.
options:
  path:
    description: First (or only) file of the model.
    type: path
    required: true
  parts:
    description: All files of a split model (for the size and the tensors).
    type: list
    elements: path
    default: []
  metadata:
    description: Use this document (e.g. the output of an inspect command) instead of reading the
      header. Empty; read the header.
    type: dict
  save:
    description: Write the document as JSON to this file (C(metadata.json) beside the model).
    type: path
  model:
    description: The model's name, saved and returned as C(model).
    type: str
  sha256:
    description: The checksums of the model's files, saved and returned as C(sha256).
    type: list
    elements: str
    default: []
  mmproj:
    description: Path of the model's multimodal projector, saved and returned as C(mmproj).
    type: path
  base:
    description: The models directory (see M(gguf_fetch)). Default the directory of O(path).
    type: path
  takeover_owner:
    description: Account whose directories and files below O(base) are taken over by root (see
      M(gguf_fetch)).
    type: str
author: llamafleet
extends_documentation_fragment:
  - llamafleet.fleet.attributes.check_diff
"""

EXAMPLES = r"""
- name: Describe a model and save metadata.json beside it
  llamafleet.fleet.gguf_metadata:
    path: /srv/models/tiny/tiny.gguf
    save: /srv/models/tiny/metadata.json
    model: tiny
    sha256: [07a5e2f0c1d3b4a59687e8f90a1b2c3d4e5f60718293a4b5c6d7e8f901a2b3c4]
    base: /srv/models
  register: tiny
"""

RETURN = r"""
metadata:
  description: The validated document (as saved) plus C(dir) and C(path); the value of the role's
    fact C(gguf_models_metadata[<name>]). Keys, from the header, C(architecture), C(name),
    C(context_length), C(block_count), C(embedding_length), C(head_count), C(head_count_kv),
    C(key_length), C(value_length), C(expert_count), C(expert_used_count), C(file_type),
    C(split_count), C(vocab_size), C(chat_template_sha256), C(size_bytes), C(gguf_version),
    C(tensor_count), C(files), C(kv) (all scalar values) and C(tensors) (name, type, shape); and
    C(model), C(sha256) (a list), C(mmproj), C(dir), C(path). Only the last five in check mode when
    the model is not there yet.
  returned: always
  type: dict
saved:
  description: Whether metadata.json was (in check mode, would be) written.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llamafleet.fleet.plugins.module_utils.gguf_describe import (
    ARGUMENT_SPEC,
    MetadataError,
    describe_model,
)
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    InvalidMetadataError,
    UnsafePathError,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if os.geteuid() != 0:
        module.fail_json(msg="gguf_metadata must run as root (become: true)")
    try:
        result = describe_model(module.params, module.check_mode)
    except UnsafePathError as e:
        module.fail_json(msg=f"Refused: {e}")
    except (MetadataError, InvalidMetadataError, OSError, ValueError) as e:
        module.fail_json(msg=str(e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

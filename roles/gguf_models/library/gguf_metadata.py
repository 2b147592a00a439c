#!/usr/bin/python
# Apache-2.0
"""Ansible module: read a GGUF file's header (metadata key/values) without loading tensors."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_metadata
short_description: Read the metadata of a GGUF model
description:
  - Reads the header of the first file of a model (magic, version, key/value metadata) and sums the
    sizes of all its files (split models). Tensor data is not read. Never changes anything.
  - Returns the architecture, training context length, layer/head/expert counts and every scalar
    metadata value (arrays such as the vocabulary are summarised by their length).
options:
  path: {type: path, required: true, description: First (or only) file of the model.}
  parts: {type: list, elements: path, default: [], description: All files of a split model (for the size).}
"""

RETURN = r"""
metadata: {description: Summary (architecture, context_length, size_bytes, ...) and C(kv) with all scalar values.}
"""

import hashlib
import os
import struct

from ansible.module_utils.basic import AnsibleModule

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, f):
        self.f = f

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise ValueError("truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(self):
        n = self.unpack("<Q")
        if n > 1 << 30:
            raise ValueError(f"implausible string length {n}")
        return self.f.read(n).decode("utf-8", errors="replace")

    def value(self, vtype):
        if vtype in SCALAR:
            return self.unpack(SCALAR[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            itype = self.unpack("<I")
            count = self.unpack("<Q")
            if itype in SCALAR and count > 16:
                self.f.seek(struct.calcsize(SCALAR[itype]) * count, os.SEEK_CUR)
                return {"array_length": count}
            items = [self.value(itype) for _ in range(count)]
            return items if count <= 16 else {"array_length": count}
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_header(path):
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (bad magic)")
        r = Reader(f)
        version = r.unpack("<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported")
        tensor_count = r.unpack("<Q")
        kv_count = r.unpack("<Q")
        kv = {}
        for _ in range(kv_count):
            key = r.string()
            kv[key] = r.value(r.unpack("<I"))
    return version, tensor_count, kv


def main():
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "parts": {"type": "list", "elements": "path", "default": []}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    files = module.params["parts"] or [path]
    if module.check_mode and not os.path.exists(path):
        module.exit_json(changed=False, metadata={}, msg=f"{path} is not there yet (check mode)")
    try:
        version, tensor_count, kv = read_header(path)
    except (OSError, ValueError) as e:
        module.fail_json(msg=str(e))
    arch = kv.get("general.architecture")

    def a(key):
        return kv.get(f"{arch}.{key}")

    template = kv.pop("tokenizer.chat_template", None)
    meta = {
        "path": path,
        "files": files,
        "size_bytes": sum(os.path.getsize(p) for p in files if os.path.exists(p)),
        "gguf_version": version,
        "tensor_count": tensor_count,
        "architecture": arch,
        "name": kv.get("general.name"),
        "file_type": kv.get("general.file_type"),
        "context_length": a("context_length"),
        "block_count": a("block_count"),
        "embedding_length": a("embedding_length"),
        "head_count": a("attention.head_count"),
        "head_count_kv": a("attention.head_count_kv"),
        "key_length": a("attention.key_length"),
        "value_length": a("attention.value_length"),
        "expert_count": a("expert_count"),
        "expert_used_count": a("expert_used_count"),
        "split_count": kv.get("split.count", 1),
        "vocab_size": (kv.get("tokenizer.ggml.tokens") or {}).get("array_length")
        if isinstance(kv.get("tokenizer.ggml.tokens"), dict) else None,
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
        "kv": kv,
    }
    module.exit_json(changed=False, metadata=meta)


if __name__ == "__main__":
    main()

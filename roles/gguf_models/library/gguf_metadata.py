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
metadata: {description: Summary (architecture, context_length, size_bytes, ...), C(kv) with all scalar values and C(tensors) (name, type, shape).}
"""

import hashlib
import os
import struct

from ansible.module_utils.basic import AnsibleModule

MAX_NUMERIC = 4096
# ggml_type numbers (ggml.h) -> names, as `llamafleet inspect` writes them
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
    24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0", 39: "MXFP4",
}
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
            # numeric arrays up to MAX_NUMERIC (per-layer values of hybrid models) are kept
            if itype in SCALAR and count > MAX_NUMERIC:
                self.f.seek(struct.calcsize(SCALAR[itype]) * count, os.SEEK_CUR)
                return {"array_length": count}
            items = [self.value(itype) for _ in range(count)]
            return items if count <= 16 or itype in SCALAR else {"array_length": count}
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
        tensors = []
        for _ in range(tensor_count):
            name = r.string()
            n_dims = r.unpack("<I")
            shape = [r.unpack("<Q") for _ in range(n_dims)]
            ttype = r.unpack("<I")
            r.unpack("<Q")  # offset of the data
            tensors.append({"name": name, "type": GGML_TYPES.get(ttype, str(ttype)), "shape": shape})
    return version, tensor_count, kv, tensors


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
        version, tensor_count, kv, tensors = read_header(path)
        for part in files[1:]:  # the tensors of a split model's other files
            tensors += read_header(part)[3]
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
        # name, type and shape of every tensor (the sizes follow from them): what the planner
        # (`llamafleet plan`, rule LS016) needs besides the key/values
        "tensors": tensors,
    }
    module.exit_json(changed=False, metadata=meta)


if __name__ == "__main__":
    main()

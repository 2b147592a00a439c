# Apache-2.0
"""A model described from its GGUF header and saved as metadata.json beside it, root-owned, through
directory descriptors (see safefs.py): the work of the module gguf_metadata, shared with the module
gguf_models_state, which asks it in check mode for every model of a host in one run on the host."""

from __future__ import annotations

import hashlib
import os
from typing import Any, BinaryIO

from ansible_collections.llamafleet.fleet.plugins.module_utils import gguf_header
from ansible_collections.llamafleet.fleet.plugins.module_utils.safefs import (
    UnsafePathError,
    check_name,
    dump_metadata,
    is_clean,
    load_metadata_fd,
    open_regular,
    replace_file,
    resolve_uid,
    validate_metadata,
    walk_dir,
)

#: Numeric arrays up to this length are kept (per-layer values), longer ones summarised.
MAX_NUMERIC = 4096
#: String arrays up to this length are kept, longer ones (the vocabulary) summarised.
MAX_STRINGS = 16

# The header is read by gguf_header (a copy of the validator's llamafleet/gguf_header.py), within
# its limits (MAX_KV_COUNT, ...): models come from the internet and this module runs as root.


def _keep(key: str, strings: bool, count: int) -> bool:
    """String arrays up to MAX_STRINGS, numeric ones up to MAX_NUMERIC are read into values."""
    return count <= (MAX_STRINGS if strings else MAX_NUMERIC)


def read_header(path: str) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]]:
    """Read a header by path (for tools and tests on files of their own; the module itself reads
    through `parse_header` on a file opened by `open_model_file`)."""
    with open(path, "rb") as f:
        return parse_header(f, path)


def parse_header(f: BinaryIO, path: str) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]]:
    """(version, tensor count, key/values, tensors) of the header of `f`; raises ValueError naming
    `path` for a damaged header or one beyond the limits (MAX_KV_COUNT, ...)."""
    header: tuple[int, int, dict[str, Any], list[dict[str, Any]]]
    header = gguf_header.parse_header(f, path, _keep, ValueError)
    return header


def open_model_file(
    path: str, base: str | None, takeover_uid: int | None, modify: bool
) -> tuple[int, os.stat_result] | None:
    """(fd, stat) of a model file, opened through directory descriptors (see gguf_fetch), or None
    when it (or its directory) is not there."""
    dpath, name = os.path.split(path)
    with walk_dir(
        dpath, base or dpath, takeover_uid=takeover_uid, modify=modify, create=False
    ) as w:
        if not w.exists:
            return None
        opened: tuple[int, os.stat_result] | None = open_regular(
            w.fd, w.path, name, os.O_RDONLY, owners=(0, takeover_uid)
        )
        return opened


class MetadataError(Exception):
    pass


def summarize(
    files: list[str],
    headers: list[tuple[int, int, dict[str, Any], list[dict[str, Any]]]],
    sizes: list[int],
) -> dict[str, Any]:
    """The metadata document of a model from its files' headers."""
    path = files[0]
    version, tensor_count, kv, tensors = headers[0]
    for extra in headers[1:]:  # the tensors of a split model's other files
        tensors = tensors + extra[3]
    arch = kv.get("general.architecture")

    def a(key: str) -> Any:
        return kv.get(f"{arch}.{key}")

    template = kv.get("tokenizer.chat_template")
    return {
        "path": path,
        "files": files,
        "size_bytes": sum(sizes),
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
        if isinstance(kv.get("tokenizer.ggml.tokens"), dict)
        else None,
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
        "kv": kv,
        # name, type and shape of every tensor (the sizes follow from them): what the planner
        # (`llamafleet plan`, rule LS016) needs besides the key/values
        "tensors": tensors,
    }


def read_model(
    files: list[str], base: str | None, takeover_uid: int | None, modify: bool
) -> dict[str, Any] | None:
    """The document of a model's files, or None when the first is not there (check mode)."""
    headers: list[tuple[int, int, dict[str, Any], list[dict[str, Any]]]] = []
    sizes: list[int] = []
    for i, path in enumerate(files):
        opened = open_model_file(path, base, takeover_uid, modify)
        if opened is None:
            if i == 0 and not modify:
                return None
            raise MetadataError(f"{path} is not there")
        fd, st = opened
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                headers.append(parse_header(f, path))
        finally:
            os.close(fd)
        sizes.append(st.st_size)
    return summarize(files, headers, sizes)


def _diff(path: str, before: str, after: str) -> dict[str, str]:
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def save_document(
    save: str, doc: dict[str, Any], base: str | None, takeover_uid: int | None, modify: bool
) -> tuple[bool, dict[str, str] | None]:
    """Write metadata.json unless it holds `doc` already (root:root 0644, one link). Returns
    (changed, diff). A saved file that is a link, a FIFO, hard-linked, another account's or has a
    bad field is refused: it was not written by this role."""
    dpath, name = os.path.split(save)
    check_name(name)
    owners = (0, takeover_uid)
    new: bytes = dump_metadata(doc)
    with walk_dir(
        dpath, base or dpath, takeover_uid=takeover_uid, modify=modify, create=False
    ) as w:
        if not w.exists:
            return True, _diff(save, "", new.decode())
        old, clean = b"", False
        try:
            opened = open_regular(w.fd, w.path, name, os.O_RDONLY, owners)
        except UnsafePathError as e:
            raise UnsafePathError(
                f"{e}. The saved metadata was not written by this role (the service account could "
                f"write there before). Fix: look at it, remove {save} and rerun."
            ) from e
        if opened is not None:
            fd, st = opened
            try:
                load_metadata_fd(fd, save)  # refuses a bad field, naming the file and the field
                os.lseek(fd, 0, os.SEEK_SET)
                old = os.read(fd, len(new) + 1) if st.st_size == len(new) else b"?"
            finally:
                os.close(fd)
            clean = is_clean(st)
        if old == new and clean:
            return False, None
        if modify:
            replace_file(w.fd, w.path, name, new)
        before = old.decode("utf-8", "replace") if old != b"?" else "(another document)\n"
        return True, _diff(save, before, new.decode())


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "path": {"type": "path", "required": True},
    "parts": {"type": "list", "elements": "path", "default": []},
    "metadata": {"type": "dict"},
    "save": {"type": "path"},
    "model": {"type": "str"},
    "sha256": {"type": "list", "elements": "str", "default": []},
    "mmproj": {"type": "path"},
    "base": {"type": "path"},
    "takeover_owner": {"type": "str"},
}
DEFAULTS = {k: v.get("default") for k, v in ARGUMENT_SPEC.items()}


def describe_model(p: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """The module's work, without AnsibleModule. Returns the result; raises MetadataError,
    InvalidMetadataError, UnsafePathError or ValueError (a damaged header)."""
    p = {**DEFAULTS, **p}
    modify = not check_mode
    path = os.path.normpath(p["path"])
    files = [os.path.normpath(f) for f in (p["parts"] or [path])]
    if not all(os.path.isabs(f) for f in [path, *files]):
        raise MetadataError("path and parts must be absolute paths")
    takeover_uid = resolve_uid(p["takeover_owner"])
    fields: dict[str, Any] = {"mmproj": p["mmproj"]}
    if p["model"] is not None:
        fields["model"] = p["model"]
    if p["sha256"]:
        fields["sha256"] = [s.strip().lower() for s in p["sha256"]]
    meta: dict[str, Any] | None
    if p["metadata"]:
        meta = dict(p["metadata"])
        source = f"the metadata given for {path} (gguf_models_inspect_command)"
    else:
        meta = read_model(files, p["base"], takeover_uid, modify)
        source = f"the metadata read from {path}"
    result: dict[str, Any] = {"changed": False, "saved": False}
    if meta:
        doc = validate_metadata({**meta, **fields}, source)
        if p["save"]:
            changed, diff = save_document(
                os.path.normpath(p["save"]), doc, p["base"], takeover_uid, modify
            )
            result.update(changed=changed, saved=changed)
            if diff:
                result["diff"] = diff
    else:
        doc = fields
    facts = {**doc, "dir": os.path.dirname(path), "path": path, "mmproj": p["mmproj"]}
    result["metadata"] = validate_metadata(facts, source)
    if not meta:
        result["msg"] = f"{path} is not there yet (check mode)"
    return result

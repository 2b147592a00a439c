"""Read GGUF metadata and the tensor list without loading tensor data (``llamafleet inspect``)."""

from __future__ import annotations

import json

from llamafleet.errors import InputError
from llamafleet.gguf_header import parse_header
from llamafleet.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from llamafleet.argv import ServerConfig
    from llamafleet.refs import ReferencedFiles

#: Metadata arrays that are large and say nothing about memory: summarised by their length.
_SKIPPED_ARRAYS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.added_tokens",
    "tokenizer.ggml.precompiled_charsmap",
)

#: Architectures whose layers are (partly) recurrent: state per sequence, no KV on those layers.
RECURRENT_ARCHS = frozenset(
    {
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "mamba",
        "mamba2",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
        "jamba",
        "falcon-h1",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "plamo2",
        "kimi_linear",
    }
)


class GGUFError(InputError):
    pass


def inspect_gguf(path: str) -> dict[str, Any]:
    """Return ``{"path", "metadata", "tensors"}`` for a GGUF file: its header as
    :func:`read_gguf` reads it (within the limits, arrays longer than 4096 elements and the
    tokenizer's summarised by their length), every tensor with its size in bytes. Tensor data is
    not read. (The gguf package's reader builds numpy views for every element of every array: for
    a real 250,000-token vocabulary that is close to a GiB, and a crafted header multiplies it.)"""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
        if magic != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        data = read_gguf(path)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror}") from exc
    for t in data["tensors"]:
        if "bytes" not in t:
            t.update(_tensor_size(path, t))
    return data


def _tensor_size(path: str, tensor: dict[str, Any]) -> dict[str, Any]:
    """Type name and size of a tensor :func:`read_gguf` gives no size for: one of no dimension
    (one value), or of a ggml type newer than gguf_header.GGML_TYPE_NAMES (the gguf package's
    tables)."""
    shape = tensor["shape"] or [1]
    tname = str(tensor["type"])
    n = tensor_nbytes(tname, shape)
    if n is None:
        try:
            from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

            qtype = GGMLQuantizationType(int(tname))
            blk, size = GGML_QUANT_SIZES[qtype]
        except (ImportError, ValueError, KeyError) as exc:
            raise GGUFError(
                f"{path}: damaged GGUF file: tensor {tensor['name']!r} has the unknown ggml "
                f"type {tname}"
            ) from exc
        tname, n = qtype.name, -(-shape[0] // blk) * size
        for d in shape[1:]:
            n *= d
    return {"type": tname, "bytes": n}


# GGUF value types (gguf-py GGUFValueType) and ggml tensor types (ggml.h), for the fast reader.
#: Arrays longer than this are summarised by their length (per-layer arrays are far shorter).
_MAX_NUMERIC = 4096
# The header's limits (MAX_KV_COUNT, ...) are gguf_header's, the same on the hosts: the
# collection's gguf_metadata module reads headers with a copy of that module.

# ggml weight types: (values per block, bytes per block), for tensors without a "bytes" field.
GGML_WEIGHT_SIZES: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "F64": (1, 8),
    "I8": (1, 1),
    "I16": (1, 2),
    "I32": (1, 4),
    "I64": (1, 8),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q8_1": (32, 40),
    "Q2_K": (256, 84),
    "Q3_K": (256, 110),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "Q8_K": (256, 292),
    "IQ2_XXS": (256, 66),
    "IQ2_XS": (256, 74),
    "IQ3_XXS": (256, 98),
    "IQ1_S": (256, 50),
    "IQ4_NL": (32, 18),
    "IQ3_S": (256, 110),
    "IQ2_S": (256, 82),
    "IQ4_XS": (256, 136),
    "IQ1_M": (256, 56),
    "TQ1_0": (256, 54),
    "TQ2_0": (256, 66),
    "MXFP4": (32, 17),
}


def tensor_nbytes(ttype: str, shape: list[int]) -> int | None:
    """Bytes of a tensor's data from its ggml type and shape (None for an unknown type)."""
    if ttype not in GGML_WEIGHT_SIZES or not shape:
        return None
    blk, size = GGML_WEIGHT_SIZES[ttype]
    n = -(-shape[0] // blk) * size
    for d in shape[1:]:
        n *= d
    return n


def _keep(key: str, strings: bool, count: int) -> bool:
    """Arrays of up to 4096 elements are read into values, but not the tokenizer's."""
    return count <= _MAX_NUMERIC and key not in _SKIPPED_ARRAYS


def read_gguf(path: str) -> dict[str, Any]:
    """Like :func:`inspect_gguf` but in plain Python (no numpy), skipping the tokenizer arrays:
    fast enough for every `plan` and `check`. Tensor sizes follow from type and shape. Arrays
    longer than 4096 elements, and the tokenizer's, are summarised as ``{"array_length": N}``; a
    header beyond the limits (:data:`MAX_KV_COUNT`, ...) raises :class:`GGUFError`."""
    with open(path, "rb") as fh:
        _version, _count, meta, tensors = parse_header(fh, path, _keep, GGUFError)
    for entry in tensors:
        nbytes = tensor_nbytes(entry["type"], entry["shape"])
        if nbytes is not None:
            entry["bytes"] = nbytes
    return {"path": path, "metadata": meta, "tensors": tensors}


class ModelFacts(Record):
    """What the rules need to know about a model."""

    _fields = ("metadata", "tensors", "path")

    def __init__(
        self,
        metadata: dict[str, Any],
        tensors: list[dict[str, Any]] | None = None,
        path: str | None = None,
    ) -> None:
        self.metadata = metadata
        self.tensors: list[dict[str, Any]] = tensors if tensors is not None else []
        self.path = path

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return str(arch) if arch is not None else None

    def arch_key(self, key: str) -> Any:
        arch = self.architecture
        return self.metadata.get(f"{arch}.{key}") if arch else None

    @property
    def context_length(self) -> int | None:
        v = self.arch_key("context_length")
        return int(v) if isinstance(v, (int, float)) else None

    @property
    def is_recurrent(self) -> bool:
        """Hybrid or recurrent: has SSM/linear-attention state, so ``--swa-full`` does nothing."""
        arch = self.architecture or ""
        if arch in RECURRENT_ARCHS or arch.startswith("rwkv"):
            return True
        return any(k.startswith(f"{arch}.ssm.") for k in self.metadata)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path or "model")


def load_model_meta(path: str) -> ModelFacts:
    """Load facts from an ``inspect`` JSON file or directly from a GGUF file."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"GGUF":
        data = read_gguf(path)
    else:
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise GGUFError(
                    f"{path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); expected the output "
                    "of `llamafleet inspect MODEL.gguf --format json`"
                ) from exc
    return model_from_dict(data, path)


def model_from_dict(data: Any, path: str | None = None) -> ModelFacts:
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        raise GGUFError(
            f"{path or 'model facts'}: expected an object with 'metadata' (and 'tensors'), as "
            "written by `llamafleet inspect MODEL.gguf --format json`"
        )
    tensors = data.get("tensors") or []
    return ModelFacts(metadata=data["metadata"], tensors=list(tensors), path=data.get("path", path))


def mmproj_bytes(cfg: ServerConfig, referenced: ReferencedFiles) -> int | None:
    """The size of the ``--mmproj`` file the flags name, when ``referenced`` allows looking at it
    (None: no projector, not allowed, or not a regular file). The planner takes the number
    (:func:`llamafleet.planner.estimate`'s ``mmproj_bytes``) and reads no file itself."""
    named = cfg.value("--mmproj")
    return referenced.size(named) if named else None

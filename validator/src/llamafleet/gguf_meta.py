"""Read GGUF metadata and the tensor list without loading tensor data (``llamafleet inspect``)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from llamafleet.errors import InputError

if TYPE_CHECKING:
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
    """Return ``{"path", "metadata", "tensors"}`` for a GGUF file (memory-mapped, not loaded)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror}") from exc
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # the gguf package raises bare ValueError/IndexError on damage
        raise GGUFError(f"{path}: damaged GGUF file: {exc}") from exc
    meta: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if name in _SKIPPED_ARRAYS:
            meta[name] = {"array_length": len(fld.data)}
            continue
        try:
            value = fld.contents()
        except Exception:  # unknown value type in a newer file: keep going
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        meta[name] = value
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    return {"path": path, "metadata": meta, "tensors": tensors}


# GGUF value types (gguf-py GGUFValueType) and ggml tensor types (ggml.h), for the fast reader.
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
#: Numeric arrays longer than this are summarised (per-layer arrays are far shorter).
_MAX_NUMERIC = 4096
GGML_TYPE_NAMES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
    29: "IQ1_M",
    30: "BF16",
    34: "TQ1_0",
    35: "TQ2_0",
    39: "MXFP4",
}


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


class _Header:
    def __init__(self, fh: BinaryIO, path: str) -> None:
        self.fh, self.path = fh, path

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.fh.read(size)
        if len(data) != size:
            raise GGUFError(f"{self.path}: truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > 1 << 30:
            raise GGUFError(f"{self.path}: damaged GGUF header (string of {n} bytes)")
        return self.fh.read(n).decode("utf-8", "replace")

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            raise GGUFError(f"{self.path}: unknown GGUF value type {vtype} for {key}")
        itype, count = self.unpack("<I"), self.unpack("<Q")
        if itype in _SCALARS and (count > _MAX_NUMERIC or key in _SKIPPED_ARRAYS):
            self.fh.seek(struct.calcsize(_SCALARS[itype]) * count, 1)
            return {"array_length": count}
        if itype == _STRING and key in _SKIPPED_ARRAYS:
            for _ in range(count):
                self.fh.seek(self.unpack("<Q"), 1)
            return {"array_length": count}
        return [self.value(itype, key) for _ in range(count)]


def read_gguf(path: str) -> dict[str, Any]:
    """Like :func:`inspect_gguf` but in plain Python (no numpy), skipping the tokenizer arrays:
    fast enough for every `plan` and `check`. Tensor sizes follow from type and shape."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (expected the magic b'GGUF')")
        r = _Header(fh, path)
        version = r.unpack("<I")
        if version < 2:
            raise GGUFError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.unpack("<I"), key)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            shape = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
            ttype = r.unpack("<I")
            r.unpack("<Q")  # data offset
            tname = GGML_TYPE_NAMES.get(ttype, str(ttype))
            entry: dict[str, Any] = {"name": name, "type": tname, "shape": shape}
            nbytes = tensor_nbytes(tname, shape)
            if nbytes is not None:
                entry["bytes"] = nbytes
            tensors.append(entry)
    return {"path": path, "metadata": meta, "tensors": tensors}


@dataclass
class ModelFacts:
    """What the rules need to know about a model."""

    metadata: dict[str, Any]
    tensors: list[dict[str, Any]] = field(default_factory=list)
    path: str | None = None

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

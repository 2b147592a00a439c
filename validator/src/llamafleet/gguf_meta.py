"""Read GGUF metadata and the tensor list without loading tensor data (``llamafleet inspect``)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

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
    (one value), or of a ggml type newer than :data:`GGML_TYPE_NAMES` (the gguf package's
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
#: Arrays longer than this are summarised by their length (per-layer arrays are far shorter).
_MAX_NUMERIC = 4096
_U64 = struct.Struct("<Q")
#: Bytes read at a time while skipping the strings of a summarised array.
_CHUNK = 1 << 20

# Limits on one GGUF header (its key/value metadata and tensor list), far above what real models
# hold, so that a damaged or crafted header (models come from the internet) costs at most a few
# seconds and a few tens of MiB to read; beyond one, the file is refused with an error naming it,
# the key and the limit. A real model: under 100 keys, a few thousand tensors, a vocabulary of
# ~250,000 tokens with as many token types and merges (under a million array elements, ~10 MiB),
# a chat template of a few KiB. The Ansible module gguf_metadata (roles/gguf_models) reads headers
# on the hosts within the same limits.

#: Key/value pairs in one header.
MAX_KV_COUNT = 1 << 16
#: Tensors in one file (each file of a split model has its own).
MAX_TENSOR_COUNT = 1 << 16
#: Dimensions of a tensor (ggml's GGML_MAX_DIMS; llama.cpp refuses more).
MAX_TENSOR_DIMS = 4
#: Elements of all metadata arrays of one header together.
MAX_ARRAY_ELEMENTS = 1 << 22
#: Bytes of all keys and values of one header together, as stored (strings and arrays).
MAX_METADATA_BYTES = 64 << 20
#: Array elements read into values, all arrays together (the others are only counted).
MAX_KEPT_ELEMENTS = 1 << 16
#: Bytes of text kept: keys, string values, the elements of kept arrays, tensor names.
MAX_KEPT_BYTES = 8 << 20
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
    """A GGUF header read within the limits (:data:`MAX_KV_COUNT`, ...): no Python value is built
    for an element of a summarised array, and every count is checked before it is read."""

    def __init__(self, fh: BinaryIO, path: str) -> None:
        self.fh, self.path = fh, path
        self.elements = 0  # array elements so far
        self.stored = 0  # bytes of keys and values so far
        self.kept_elements = 0
        self.kept_bytes = 0

    def refuse(self, where: str, what: str, limit: int, name: str) -> NoReturn:
        raise GGUFError(
            f"{self.path}: {where}: {what} more than {limit:,} ({name}); refused: no real model "
            "comes near it (a damaged or crafted GGUF header)"
        )

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        data = self.fh.read(size)
        if len(data) != size:
            raise GGUFError(f"{self.path}: truncated GGUF header")
        return struct.unpack(fmt, data)[0]

    def read(self, size: int) -> bytes:
        data = self.fh.read(size)
        if len(data) != size:
            raise GGUFError(f"{self.path}: truncated GGUF header")
        return data

    def add_stored(self, where: str, size: int) -> None:
        self.stored += size
        if self.stored > MAX_METADATA_BYTES:
            self.refuse(
                where, "the keys and values hold", MAX_METADATA_BYTES, "bytes, MAX_METADATA_BYTES"
            )

    def add_kept(self, where: str, elements: int = 0, size: int = 0) -> None:
        self.kept_elements += elements
        self.kept_bytes += size
        if self.kept_elements > MAX_KEPT_ELEMENTS:
            self.refuse(
                where,
                "the arrays read as values hold",
                MAX_KEPT_ELEMENTS,
                "elements, MAX_KEPT_ELEMENTS",
            )
        if self.kept_bytes > MAX_KEPT_BYTES:
            self.refuse(where, "the texts hold", MAX_KEPT_BYTES, "bytes, MAX_KEPT_BYTES")

    def string(self, where: str, stored: bool = True) -> str:
        """A string kept as text (a key, a value, a tensor name: ``stored`` False)."""
        n = self.unpack("<Q")
        if stored:
            self.add_stored(where, 8 + n)
        self.add_kept(where, size=n)
        return self.read(n).decode("utf-8", "replace")

    def skip_strings(self, key: str, count: int) -> None:
        """Step over ``count`` strings, reading ahead in chunks (no value per element)."""
        unpack_from = _U64.unpack_from
        left = MAX_METADATA_BYTES - self.stored  # what the strings may take
        buf, off, size = b"", 0, 0
        for _ in range(count):
            if len(buf) - off < 8:
                buf, off = buf[off:] + self.fh.read(_CHUNK), 0
                if len(buf) < 8:
                    raise GGUFError(f"{self.path}: truncated GGUF header")
            n = 8 + unpack_from(buf, off)[0]
            size += n
            if size > left:
                self.add_stored(key, size)  # refused
            off += n
            if off > len(buf):
                self.fh.seek(off - len(buf), 1)
                buf, off = b"", 0
        self.stored += size
        self.fh.seek(off - len(buf), 1)  # give back what was read ahead

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            size = struct.calcsize(_SCALARS[vtype])
            self.add_stored(key, size)
            return struct.unpack(_SCALARS[vtype], self.read(size))[0]
        if vtype == _STRING:
            return self.string(key)
        if vtype != _ARRAY:
            raise GGUFError(f"{self.path}: unknown GGUF value type {vtype} for {key}")
        itype, count = self.unpack("<I"), self.unpack("<Q")
        self.add_stored(key, 12)
        if itype == _ARRAY:
            raise GGUFError(
                f"{self.path}: {key}: an array of arrays, which llama.cpp does not load "
                "(a damaged or crafted GGUF header)"
            )
        if itype not in _SCALARS and itype != _STRING:
            raise GGUFError(f"{self.path}: unknown GGUF value type {itype} for {key}")
        self.elements += count
        if self.elements > MAX_ARRAY_ELEMENTS:
            self.refuse(
                key,
                "the metadata arrays hold",
                MAX_ARRAY_ELEMENTS,
                "elements in all, MAX_ARRAY_ELEMENTS",
            )
        keep = count <= _MAX_NUMERIC and key not in _SKIPPED_ARRAYS
        if itype == _STRING:
            if not keep:
                self.skip_strings(key, count)
                return {"array_length": count}
            self.add_kept(key, elements=count)
            return [self.string(key) for _ in range(count)]
        fmt = _SCALARS[itype]
        size = struct.calcsize(fmt) * count
        self.add_stored(key, size)
        if not keep:
            self.fh.seek(size, 1)
            return {"array_length": count}
        self.add_kept(key, elements=count)
        return list(struct.unpack(f"<{count}{fmt[1:]}", self.read(size)))


def read_gguf(path: str) -> dict[str, Any]:
    """Like :func:`inspect_gguf` but in plain Python (no numpy), skipping the tokenizer arrays:
    fast enough for every `plan` and `check`. Tensor sizes follow from type and shape. Arrays
    longer than 4096 elements, and the tokenizer's, are summarised as ``{"array_length": N}``; a
    header beyond the limits (:data:`MAX_KV_COUNT`, ...) raises :class:`GGUFError`."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (expected the magic b'GGUF')")
        r = _Header(fh, path)
        version = r.unpack("<I")
        if version < 2:
            raise GGUFError(f"{path}: GGUF version {version} is not supported")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        if n_kv > MAX_KV_COUNT:
            r.refuse("header", f"{n_kv:,} key/value pairs,", MAX_KV_COUNT, "MAX_KV_COUNT")
        if n_tensors > MAX_TENSOR_COUNT:
            r.refuse("header", f"{n_tensors:,} tensors,", MAX_TENSOR_COUNT, "MAX_TENSOR_COUNT")
        meta: dict[str, Any] = {}
        for i in range(n_kv):
            key = r.string(f"key #{i}")
            meta[key] = r.value(r.unpack("<I"), key)
        tensors = []
        for i in range(n_tensors):
            name = r.string(f"tensor #{i}", stored=False)
            n_dims = r.unpack("<I")
            if n_dims > MAX_TENSOR_DIMS:
                r.refuse(
                    f"tensor {name!r}", f"{n_dims} dimensions,", MAX_TENSOR_DIMS, "GGML_MAX_DIMS"
                )
            shape = list(struct.unpack(f"<{n_dims}Q", r.read(8 * n_dims)))
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

"""The GGUF header reader, in plain Python within fixed limits: the one implementation of both the
validator (llamafleet.gguf_meta) and the collection's gguf_metadata module, which runs on the
managed hosts. The collection's plugins/module_utils/gguf_header.py is this file, copied by
``validator/tools/gen_module_utils.py`` (a test fails when the copy differs): standard library only.

Limits on one header (its key/value metadata and tensor list), far above what real models hold, so
that a damaged or crafted header (models come from the internet) costs at most a few seconds and a
few tens of MiB to read; beyond one, the file is refused with an error naming it, the key and the
limit. A real model: under 100 keys, a few thousand tensors, a vocabulary of ~250,000 tokens with
as many token types and merges (under a million array elements, ~10 MiB), a chat template of a few
KiB."""

from __future__ import annotations

import struct
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, NoReturn

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
#: Bytes read at a time while skipping the strings of a summarised array.
CHUNK = 1 << 20
U64 = struct.Struct("<Q")
#: ggml tensor types by number (ggml.h)
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
#: GGUF value types: the scalars, by their struct format
SCALARS = {
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
STRING, ARRAY = 8, 9

#: keep(key, is_string_array, count): whether an array is read into a value (else it is
#: summarised as {"array_length": count})
Keep = Callable[[str, bool, int], bool]


class HeaderReader:
    """A GGUF header read within the limits (MAX_KV_COUNT, ...): no Python value is built for an
    element of a summarised array, and every count is checked before it is read. Errors are
    ``error`` (a ValueError subclass of the caller's) with a message naming ``path``."""

    def __init__(
        self, fh: BinaryIO, path: str, keep: Keep, error: type[ValueError] = ValueError
    ) -> None:
        self.fh, self.path, self.keep, self.error = fh, path, keep, error
        self.elements = 0  # array elements so far
        self.stored = 0  # bytes of keys and values so far
        self.kept_elements = 0
        self.kept_bytes = 0

    def refuse(self, where: str, what: str, limit: int, name: str) -> NoReturn:
        raise self.error(
            f"{self.path}: {where}: {what} more than {limit:,} ({name}); refused: no real model "
            "comes near it (a damaged or crafted GGUF header)"
        )

    def read(self, size: int) -> bytes:
        data = self.fh.read(size)
        if len(data) != size:
            raise self.error(f"{self.path}: truncated GGUF header")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

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
        n: int = self.unpack("<Q")
        if stored:
            self.add_stored(where, 8 + n)
        self.add_kept(where, size=n)
        return self.read(n).decode("utf-8", "replace")

    def skip_strings(self, key: str, count: int) -> None:
        """Step over ``count`` strings, reading ahead in chunks (no value per element)."""
        unpack_from = U64.unpack_from
        left = MAX_METADATA_BYTES - self.stored  # what the strings may take
        buf, off, size = b"", 0, 0
        for _ in range(count):
            if len(buf) - off < 8:
                buf, off = buf[off:] + self.fh.read(CHUNK), 0
                if len(buf) < 8:
                    raise self.error(f"{self.path}: truncated GGUF header")
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
        if vtype in SCALARS:
            size = struct.calcsize(SCALARS[vtype])
            self.add_stored(key, size)
            return struct.unpack(SCALARS[vtype], self.read(size))[0]
        if vtype == STRING:
            return self.string(key)
        if vtype != ARRAY:
            raise self.error(f"{self.path}: unknown GGUF value type {vtype} for {key}")
        itype = self.unpack("<I")
        count: int = self.unpack("<Q")
        self.add_stored(key, 12)
        if itype == ARRAY:
            raise self.error(
                f"{self.path}: {key}: an array of arrays, which llama.cpp does not load "
                "(a damaged or crafted GGUF header)"
            )
        if itype not in SCALARS and itype != STRING:
            raise self.error(f"{self.path}: unknown GGUF value type {itype} for {key}")
        self.elements += count
        if self.elements > MAX_ARRAY_ELEMENTS:
            self.refuse(
                key,
                "the metadata arrays hold",
                MAX_ARRAY_ELEMENTS,
                "elements in all, MAX_ARRAY_ELEMENTS",
            )
        keep = self.keep(key, itype == STRING, count)
        if itype == STRING:
            if not keep:
                self.skip_strings(key, count)
                return {"array_length": count}
            self.add_kept(key, elements=count)
            return [self.string(key) for _ in range(count)]
        fmt = SCALARS[itype]
        size = struct.calcsize(fmt) * count
        self.add_stored(key, size)
        if not keep:
            self.fh.seek(size, 1)
            return {"array_length": count}
        self.add_kept(key, elements=count)
        return list(struct.unpack(f"<{count}{fmt[1:]}", self.read(size)))


def parse_header(
    fh: BinaryIO, path: str, keep: Keep, error: type[ValueError] = ValueError
) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]]:
    """(version, tensor count, key/values, tensors) of the header of ``fh``; each tensor is
    {"name", "type", "shape"}. Raises ``error`` naming ``path`` for a file that is not GGUF, a
    damaged header or one beyond the limits (MAX_KV_COUNT, ...)."""
    if fh.read(4) != b"GGUF":
        raise error(f"{path}: not a GGUF file (expected the magic b'GGUF')")
    r = HeaderReader(fh, path, keep, error)
    version: int = r.unpack("<I")
    if version < 2:
        raise error(f"{path}: GGUF version {version} is not supported")
    tensor_count: int = r.unpack("<Q")
    kv_count: int = r.unpack("<Q")
    if kv_count > MAX_KV_COUNT:
        r.refuse("header", f"{kv_count:,} key/value pairs,", MAX_KV_COUNT, "MAX_KV_COUNT")
    if tensor_count > MAX_TENSOR_COUNT:
        r.refuse("header", f"{tensor_count:,} tensors,", MAX_TENSOR_COUNT, "MAX_TENSOR_COUNT")
    kv: dict[str, Any] = {}
    for i in range(kv_count):
        key = r.string(f"key #{i}")
        kv[key] = r.value(r.unpack("<I"), key)
    tensors: list[dict[str, Any]] = []
    for i in range(tensor_count):
        name = r.string(f"tensor #{i}", stored=False)
        n_dims = r.unpack("<I")
        if n_dims > MAX_TENSOR_DIMS:
            r.refuse(f"tensor {name!r}", f"{n_dims} dimensions,", MAX_TENSOR_DIMS, "GGML_MAX_DIMS")
        shape = list(struct.unpack(f"<{n_dims}Q", r.read(8 * n_dims)))
        ttype = r.unpack("<I")
        r.unpack("<Q")  # offset of the data
        tensors.append(
            {"name": name, "type": GGML_TYPE_NAMES.get(ttype, str(ttype)), "shape": shape}
        )
    return version, tensor_count, kv, tensors

"""The gguf_models role reads GGUF headers on the target host without the gguf package (plain
Python there); its tensor list must equal `llamafleet inspect`'s, which the planner reads, and both
equal what the gguf package itself reads. Both readers refuse a crafted header beyond their limits
quickly and in little memory."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from conftest import COLLECTION, COLLECTIONS_ROOT, load_ansible_plugin, plugin_path
from llamafleet import gguf_meta
from llamafleet.gguf_meta import GGUFError, inspect_gguf, read_gguf
from llamafleet.planner import tensor_bytes

MODULE = plugin_path("modules", "gguf_metadata")
GGUF_MODULE = "plugins.modules.gguf_metadata"


def _module() -> ModuleType:
    """The module gguf_metadata's work (module_utils/gguf_describe.py)."""
    return load_ansible_plugin(plugin_path("module_utils", "gguf_describe"))


def _gguf_package(path: Path) -> dict[str, Any]:
    """The header as the gguf package reads it (the reference): metadata (the tokenizer arrays by
    their length) and tensors."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path), "r")
    meta: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if name in gguf_meta._SKIPPED_ARRAYS:
            meta[name] = {"array_length": len(fld.data)}
            continue
        value = fld.contents()
        meta[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    return {"path": str(path), "metadata": meta, "tensors": tensors}


@pytest.mark.skipif(not MODULE.is_file(), reason="run from a checkout of the whole repository")
def test_host_reader_equals_inspect(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_context_length(262144)
    w.add_block_count(2)
    w.add_array("qwen35moe.attention.head_count_kv", [0, 2])  # per-layer values stay numeric
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    w.add_tensor("blk.0.ffn_gate_exps.weight", np.zeros((4, 32, 64), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros((64,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _, count, kv, tensors = _module().read_header(str(path))
    ins = inspect_gguf(str(path))
    assert ins == _gguf_package(path)
    assert count == 3
    assert tensors == [{k: t[k] for k in ("name", "type", "shape")} for t in ins["tensors"]]
    assert [tensor_bytes(t) for t in tensors] == [t["bytes"] for t in ins["tensors"]]
    assert kv["qwen35moe.attention.head_count_kv"] == [0, 2]
    assert kv["qwen35moe.context_length"] == ins["metadata"]["qwen35moe.context_length"]


def test_fast_reader_equals_inspect(tmp_path: Path) -> None:
    """plan/check read GGUF headers without numpy; the result equals the gguf package's."""
    import gguf

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(131072)
    w.add_array("llama.some_per_layer", [1, 2, 3])
    w.add_token_list([f"t{i}" for i in range(50)])
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros((64,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    fast, ref = read_gguf(str(path)), _gguf_package(path)
    assert fast["metadata"] == ref["metadata"]
    assert fast["tensors"] == ref["tensors"]
    assert inspect_gguf(str(path)) == ref


def test_documents_pass_the_metadata_validation(tmp_path: Path) -> None:
    """What the role saves as metadata.json (from its reader or from `llamafleet inspect` as the
    inspect command) passes the validation every saved document goes through."""
    import gguf

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_context_length(262144)
    w.add_array("qwen35moe.attention.head_count_kv", [0, 2])
    w.add_token_list([f"t{i}" for i in range(50)])
    w.add_string("general.license", "line one\nline two")
    w.add_chat_template("{{ messages }}\n")
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    mod = _module()
    doc = mod.summarize([str(path)], [mod.read_header(str(path))], [path.stat().st_size])
    doc.update(model="m", sha256=["0" * 64], mmproj=None)
    assert mod.validate_metadata(doc, "m.json") is doc
    assert doc["head_count_kv"] == [0, 2] and doc["chat_template_sha256"]
    # the template itself stays in kv: the validator renders it (LS021-LS023)
    assert doc["kv"]["tokenizer.chat_template"] == "{{ messages }}\n"
    ins = json.loads(json.dumps(inspect_gguf(str(path)), default=str))
    assert mod.validate_metadata({**ins, "model": "m", "sha256": ["0" * 64]}, "m.json")


# ----------------------------------------------------------------------------- crafted headers
#
# The headers below are written byte by byte here (GGUF v3: magic, version, tensor count, key/value
# count, then each key, its type and value). They stand for a model file from the internet made to
# cost its reader unbounded work: the reader runs on the controller (`llamafleet check`, `plan`,
# `inspect`, `template`) and as root on the hosts (the gguf_models role's gguf_metadata module).

U8, F32, STR, ARR = 0, 6, 8, 9


def _str(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _str(key.encode()) + struct.pack("<I", vtype) + payload


def _array(itype: int, count: int, data: bytes = b"") -> bytes:
    return struct.pack("<IQ", itype, count) + data


def _header(kvs: list[bytes], n_tensors: int = 0, tail: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)) + b"".join(kvs) + tail


ARCH = _kv("general.architecture", STR, _str(b"llama"))

#: name: (the header, the key the refusal names, the limit it names)
CRAFTED: dict[str, tuple[bytes, str, str]] = {
    # what the review measured: 4,000 keys, each an array of 4,096 bytes (16.4 MB); the readers
    # built a Python value per byte (~20x the file in memory, seconds of CPU)
    "4,000 arrays of 4,096 values": (
        _header(
            [ARCH]
            + [_kv(f"k{i}", ARR, _array(U8, 4096, bytes(range(256)) * 16)) for i in range(4000)]
        ),
        "k16",
        "65,536 (elements, MAX_KEPT_ELEMENTS)",
    ),
    # arrays that are only counted, 4.2 million elements in all (16.8 MB)
    "1,024 arrays of 4,097 values": (
        _header(
            [ARCH] + [_kv(f"a{i}", ARR, _array(F32, 4097, bytes(4 * 4097))) for i in range(1024)]
        ),
        "a1023",
        "4,194,304 (elements in all, MAX_ARRAY_ELEMENTS)",
    ),
    "an array claiming 2^40 elements": (
        _header([ARCH, _kv("tokenizer.ggml.scores", ARR, _array(F32, 1 << 40))]),
        "tokenizer.ggml.scores",
        "MAX_ARRAY_ELEMENTS",
    ),
    "a chat template claiming 9 MiB": (
        _header([ARCH, _kv("tokenizer.chat_template", STR, struct.pack("<Q", 9 << 20))]),
        "tokenizer.chat_template",
        "8,388,608 (bytes, MAX_KEPT_BYTES)",
    ),
    "a vocabulary of 5,000 strings, the first claiming 100 MiB": (
        _header(
            [
                ARCH,
                _kv("tokenizer.ggml.tokens", ARR, _array(STR, 5000, struct.pack("<Q", 100 << 20))),
            ]
        ),
        "tokenizer.ggml.tokens",
        "67,108,864 (bytes, MAX_METADATA_BYTES)",
    ),
    "a key claiming a TiB": (
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40),
        "key #0",
        "67,108,864 (bytes, MAX_METADATA_BYTES)",
    ),
    "2^40 key/value pairs": (
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40),
        "header",
        "65,536 (MAX_KV_COUNT)",
    ),
    "2^40 tensors": (_header([ARCH], 1 << 40), "header", "65,536 (MAX_TENSOR_COUNT)"),
    "a tensor of 2^31 dimensions": (
        _header([ARCH], 1, _str(b"t") + struct.pack("<I", 1 << 31)),
        "tensor 't'",
        "4 (GGML_MAX_DIMS)",
    ),
    "an array of arrays": (
        _header([ARCH, _kv("x", ARR, _array(ARR, 1_000_000, _array(U8, 0) * 1000))]),
        "x: an array of arrays",
        "llama.cpp does not load",
    ),
}


def _host_reader() -> Any:
    pytest.importorskip("ansible")
    return _module().read_header


@pytest.mark.skipif(not MODULE.is_file(), reason="run from a checkout of the whole repository")
@pytest.mark.parametrize("reader", ["read_gguf", "inspect_gguf", "gguf_metadata module"])
@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_header_is_refused_naming_file_key_and_limit(
    tmp_path: Path, name: str, reader: str
) -> None:
    header, key, limit = CRAFTED[name]
    path = tmp_path / "crafted.gguf"
    path.write_bytes(header)
    if reader == "gguf_metadata module":
        read, error = _host_reader(), ValueError
    else:
        read, error = getattr(gguf_meta, reader), GGUFError
    with pytest.raises(error) as info:
        read(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: {key}"), message
    assert limit in message, message
    assert "crafted" in message, message


#: Run in a child process: read one file with one reader; print the outcome, the seconds and the
#: peak memory (resident set) the reading added.
_MEASURE = r"""
import importlib, json, resource, sys, time
reader, path, module, utils = sys.argv[1:5]
if reader == "gguf_metadata module":
    sys.path.insert(0, utils)
    mod = importlib.import_module(module)
    read, error = mod.read_header, ValueError
else:
    from llamafleet import gguf_meta
    read, error = getattr(gguf_meta, reader), gguf_meta.GGUFError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
try:
    read(path)
    outcome = "read"
except error as exc:
    outcome = str(exc)
seconds = time.monotonic() - t0
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"outcome": outcome, "seconds": seconds, "mib": grown}))
"""


def _measure(reader: str, path: Path) -> dict[str, Any]:
    if reader == "gguf_metadata module":
        pytest.importorskip("ansible")
    utils = COLLECTIONS_ROOT
    src = str(Path(gguf_meta.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _MEASURE,
            reader,
            str(path),
            COLLECTION + ".plugins.module_utils.gguf_describe",
            str(utils),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


#: Generous for a slow, busy machine; the readers take well under a second on these files (the
#: readers before the limits: 7-12 s and 100-340 MiB for the first).
MAX_SECONDS = 5.0
MAX_MIB = 32.0


@pytest.mark.skipif(not MODULE.is_file(), reason="run from a checkout of the whole repository")
@pytest.mark.parametrize("reader", ["read_gguf", "inspect_gguf", "gguf_metadata module"])
@pytest.mark.parametrize("name", ["4,000 arrays of 4,096 values", "1,024 arrays of 4,097 values"])
def test_crafted_header_costs_little_time_and_memory(
    tmp_path: Path, name: str, reader: str
) -> None:
    header, _key, limit = CRAFTED[name]
    path = tmp_path / "crafted.gguf"
    path.write_bytes(header)
    got = _measure(reader, path)
    assert limit in got["outcome"], got
    assert got["seconds"] < MAX_SECONDS, got
    assert got["mib"] < MAX_MIB, got


@pytest.mark.skipif(not MODULE.is_file(), reason="run from a checkout of the whole repository")
def test_a_real_sized_vocabulary_still_reads(tmp_path: Path) -> None:
    """A Qwen3.5-sized tokenizer (248,320 tokens and token types, 247,587 merges, written by the
    gguf package as llama.cpp's converter writes them) and a chat template: both readers read it,
    the tokenizer arrays summarised by their length, in little time and memory."""
    import gguf

    path = tmp_path / "qwen-vocab.gguf"
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_context_length(262144)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"\u0120tok{i}" for i in range(248_320)])
    w.add_token_types([1] * 248_320)
    w.add_token_merges([f"\u0120a{i} b{i}" for i in range(247_587)])
    w.add_array("qwen35moe.attention.head_count_kv", [0, 0, 0, 2] * 10)
    w.add_chat_template("{{ messages }}" * 1000)
    w.add_tensor("token_embd.weight", np.zeros((4, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = read_gguf(str(path))["metadata"]
    assert meta["tokenizer.ggml.tokens"] == {"array_length": 248_320}
    assert meta["tokenizer.ggml.merges"] == {"array_length": 247_587}
    assert meta["tokenizer.ggml.token_type"] == {"array_length": 248_320}
    assert meta["qwen35moe.attention.head_count_kv"] == [0, 0, 0, 2] * 10
    assert meta["tokenizer.chat_template"] == "{{ messages }}" * 1000
    mod = _module()
    doc = mod.summarize([str(path)], [mod.read_header(str(path))], [path.stat().st_size])
    assert doc["vocab_size"] == 248_320 and doc["kv"]["tokenizer.ggml.merges"]["array_length"]
    assert doc["chat_template_sha256"] and doc["head_count_kv"] == [0, 0, 0, 2] * 10
    for reader in ("read_gguf", "inspect_gguf", "gguf_metadata module"):
        got = _measure(reader, path)
        assert got["outcome"] == "read", got
        assert got["seconds"] < MAX_SECONDS and got["mib"] < MAX_MIB, (reader, got)

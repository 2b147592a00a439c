"""The gguf_models role reads GGUF headers on the target host without the gguf package (plain
Python there); its tensor list must equal `llamafleet inspect`'s, which the planner reads."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from conftest import load_ansible_plugin
from llamafleet.gguf_meta import inspect_gguf
from llamafleet.planner import tensor_bytes

MODULE = (
    Path(__file__).resolve().parents[2] / "roles" / "gguf_models" / "library" / "gguf_metadata.py"
)


def _module() -> ModuleType:
    return load_ansible_plugin(MODULE)


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
    assert count == 3
    assert tensors == [{k: t[k] for k in ("name", "type", "shape")} for t in ins["tensors"]]
    assert [tensor_bytes(t) for t in tensors] == [t["bytes"] for t in ins["tensors"]]
    assert kv["qwen35moe.attention.head_count_kv"] == [0, 2]
    assert kv["qwen35moe.context_length"] == ins["metadata"]["qwen35moe.context_length"]


def test_fast_reader_equals_inspect(tmp_path: Path) -> None:
    """plan/check read GGUF headers without numpy; the result equals inspect's (gguf package)."""
    import gguf

    from llamafleet.gguf_meta import read_gguf

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
    fast, ref = read_gguf(str(path)), inspect_gguf(str(path))
    assert fast["metadata"] == ref["metadata"]
    assert fast["tensors"] == ref["tensors"]


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

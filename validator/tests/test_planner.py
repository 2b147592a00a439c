"""The GPU memory planner: the seed guide's logged numbers, each rule of the arithmetic, the CLI."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamafleet import plan_cli, planner
from llamafleet.argv import parse_argv_list
from llamafleet.gguf_meta import ModelFacts, load_model_meta
from llamafleet.planner import MIB, estimate, fits, suggest

FIXTURES = Path(__file__).parent / "fixtures" / "models"
QWEN36 = FIXTURES / "qwen3.6-35b-a3b-ud-iq3_s.json"
SEED_FLAGS = "-c 204800 -ctk turbo3 -ctv turbo3 -ngl 99"

# The seed guide's log (Qwen3.6-35B-A3B UD-IQ3_S, RTX 4080 SUPER), see the knowledge notes.
SEED_LOG = {
    "kv_k_mib": 390.62,
    "kv_v_mib": 390.62,
    "recurrent_mib": 251.25,
    "weights_gpu_mib": 12634.81,
    "weights_host_mib": 397.85,
}
SEED_OBSERVED_TOTAL_MIB = 14860.0


_QWEN_FOR_HYPOTHESIS = load_model_meta(str(QWEN36))


@pytest.fixture(scope="module")
def qwen() -> ModelFacts:
    return load_model_meta(str(QWEN36))


def plan_for(model: ModelFacts, flags: str, **kw: Any) -> planner.Plan:
    return estimate(model, parse_argv_list(flags.split()), **kw)


# ----------------------------------------------------------------------------- seed


@pytest.mark.parametrize("key", sorted(SEED_LOG))
def test_seed_component_within_1_percent(qwen: ModelFacts, key: str) -> None:
    got = plan_for(qwen, SEED_FLAGS).as_dict()[key]
    assert isinstance(got, float)
    assert got == pytest.approx(SEED_LOG[key], rel=0.01), key


def test_seed_total_within_5_percent(qwen: ModelFacts) -> None:
    p = plan_for(qwen, SEED_FLAGS)
    assert p.total_gpu_mib == pytest.approx(SEED_OBSERVED_TOTAL_MIB, rel=0.05)
    # conservative side: the estimate should not be far below what was observed
    assert p.total_gpu_mib >= SEED_OBSERVED_TOTAL_MIB * 0.98


def test_seed_components_exact(qwen: ModelFacts) -> None:
    p = plan_for(qwen, SEED_FLAGS)
    assert p.kv_k_mib == 390.625  # 10 x 204800 x 2 x 256 x 3.125 / 8
    assert p.kv_k_mib + p.kv_v_mib == 781.25  # the log rounds each buffer: 781.38
    assert round(p.weights_gpu_mib, 2) == 12634.81
    assert round(p.weights_host_mib, 2) == 397.85
    assert p.n_parallel == 4 and p.kv_unified and p.n_ctx == 204800
    assert p.n_attention_layers == 10 and p.n_recurrent_layers == 30


def test_seed_fits_a_16_gb_card(qwen: ModelFacts) -> None:
    p = plan_for(qwen, SEED_FLAGS)
    assert fits(p, 16376)  # nvidia-smi's size of a 16 GB RTX 4080 SUPER
    assert not fits(p, 12282)


def test_recurrent_state_derived_from_ssm_keys(qwen: ModelFacts) -> None:
    geo = planner.geometry(qwen)
    # conv: (4-1) x (4096 + 2 x 16 x 128) floats, state: 128 x 4096 floats, f32, 30 layers
    assert geo.rs_bytes_per_layer == 4 * (3 * (4096 + 2 * 16 * 128) + 128 * 4096)
    assert geo.recurrent_bytes_per_seq / MIB == pytest.approx(62.8125)
    meta = dict(qwen.metadata)
    meta["qwen35moe.ssm.inner_size"] = 2048
    smaller = planner.geometry(ModelFacts(meta, qwen.tensors))
    assert smaller.recurrent_bytes_per_seq < geo.recurrent_bytes_per_seq


def test_auto_asymmetric_is_flagged_and_optional(qwen: ModelFacts) -> None:
    p = plan_for(qwen, SEED_FLAGS)
    assert p.turbo_auto_asymmetric
    assert p.cache_type_k == "turbo3"
    assert any("q8_0" in n and "1062.50" in n for n in p.notes)
    p2 = plan_for(qwen, SEED_FLAGS, auto_asymmetric=True)
    assert p2.cache_type_k == "q8_0"
    assert p2.kv_k_mib == pytest.approx(1062.5)  # FACTS: 390.6 -> 1062.5 MiB at 204800
    # asymmetric pairs are not rewritten
    p3 = plan_for(qwen, "-c 204800 -ctk q8_0 -ctv turbo3")
    assert not p3.turbo_auto_asymmetric


# ----------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("ctype", "bits"),
    [
        ("turbo2", 2.125),
        ("turbo3", 3.125),
        ("turbo4", 4.25),
        ("tq5_0", 5.125),
        ("tq6_0", 6.125),
        ("q8_0", 8.5),
        ("q4_0", 4.5),
        ("q4_1", 5.0),
        ("q5_0", 5.5),
        ("q5_1", 6.0),
        ("iq4_nl", 4.5),
        ("f16", 16.0),
        ("bf16", 16.0),
        ("f32", 32.0),
    ],
)
def test_kv_bits(ctype: str, bits: float) -> None:
    assert planner.kv_bits(ctype) == bits


def test_turbo_pads_head_dim_to_128() -> None:
    # head_dim 64: a turbo row costs as much as head_dim 128; q8_0 does not pad
    assert planner.kv_row_bytes("turbo3", 2, 64) == planner.kv_row_bytes("turbo3", 2, 128)
    assert planner.kv_row_bytes("turbo3", 2, 128) == 2 * 128 * 3.125 / 8
    assert planner.kv_row_bytes("q8_0", 2, 64) == 2 * 64 * 34 // 32
    assert planner.kv_row_bytes("turbo4", 1, 192) == 256 * 4.25 / 8


def test_unknown_cache_type_is_an_error(qwen: ModelFacts) -> None:
    with pytest.raises(planner.PlanError, match="turbo9"):
        plan_for(qwen, "-c 4096 -ctk turbo9")


def test_np_auto_is_4_unified_slots(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 65536")
    assert (p.n_parallel, p.kv_unified, p.n_ctx_seq) == (4, True, 65536)
    assert p.recurrent_mib == pytest.approx(4 * 62.8125)


def test_explicit_np_without_kv_unified_splits_context(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 204800 -np 4 --no-kv-unified")
    assert (p.n_parallel, p.kv_unified, p.n_ctx_seq, p.n_ctx) == (4, False, 51200, 204800)
    assert any("51200" in n for n in p.notes)
    # not divisible: each slot is padded to 256 and n_ctx follows (llama-context.cpp)
    p = plan_for(qwen, "-c 10000 -np 3")
    assert (p.n_ctx_seq, p.n_ctx) == (3584, 3 * 3584)
    # total KV cells equal the unified case when divisible
    unified = plan_for(qwen, "-c 204800 -np 4 --kv-unified")
    split = plan_for(qwen, "-c 204800 -np 4")
    assert unified.kv_k_mib == split.kv_k_mib and unified.n_ctx_seq == 204800


def test_ctx_is_padded_to_256(qwen: ModelFacts) -> None:
    assert plan_for(qwen, "-c 1000 -np 1").n_ctx == 1024


def test_ctx_default_is_training_context(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-np 1")
    assert p.n_ctx == 262144
    assert any("training context" in n for n in p.notes)


def test_np_zero_is_rejected(qwen: ModelFacts) -> None:
    with pytest.raises(planner.PlanError, match="-np 0"):
        plan_for(qwen, "-c 4096 -np 0")


def test_checkpoints_are_host_memory(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 65536")
    assert p.n_checkpoints == 32
    assert p.checkpoint_each_mib == pytest.approx(62.8125)  # one recurrent-state snapshot
    assert p.checkpoints_mib == pytest.approx(4 * 32 * 62.8125)
    none = plan_for(qwen, "-c 65536 --ctx-checkpoints 0")
    assert none.checkpoints_mib == 0
    assert none.total_gpu_mib == p.total_gpu_mib  # not on the GPU
    assert p.total_host_mib - none.total_host_mib == pytest.approx(p.checkpoints_mib)


def _expert_bytes(model: ModelFacts, layers: range | None = None) -> int:
    total = 0
    for t in model.tensors:
        name = t["name"]
        if "_exps" in name and (layers is None or int(name.split(".")[1]) in layers):
            total += int(t["bytes"])
    return total


def test_n_cpu_moe_moves_experts_of_first_layers(qwen: ModelFacts) -> None:
    full = plan_for(qwen, "-c 4096 -ngl 99")
    p = plan_for(qwen, "-c 4096 -ngl 99 --n-cpu-moe 10")
    moved = _expert_bytes(qwen, range(10)) / MIB
    assert full.weights_gpu_mib - p.weights_gpu_mib == pytest.approx(moved)
    assert p.weights_host_mib - full.weights_host_mib == pytest.approx(moved)
    assert p.kv_host_mib == 0 and p.recurrent_host_mib == 0  # attention/state stay on GPU


def test_cpu_moe_moves_all_experts(qwen: ModelFacts) -> None:
    full = plan_for(qwen, "-c 4096")
    p = plan_for(qwen, "-c 4096 --cpu-moe")
    assert full.weights_gpu_mib - p.weights_gpu_mib == pytest.approx(_expert_bytes(qwen) / MIB)
    assert p.weights_gpu_mib < 1500


def test_ngl_moves_first_layers_and_output(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 8192 -ngl 20 -np 1")
    on_host = (
        sum(
            int(t["bytes"])
            for t in qwen.tensors
            if t["name"].startswith("blk.") and int(t["name"].split(".")[1]) < 20
        )
        / MIB
    )
    out = sum(int(t["bytes"]) for t in qwen.tensors if t["name"].startswith("output")) / MIB
    assert p.weights_host_mib == pytest.approx(397.8515625 + on_host + out)
    assert p.kv_host_mib == pytest.approx((p.kv_k_mib + p.kv_v_mib) / 2)  # 5 of 10 layers
    assert p.recurrent_host_mib == pytest.approx(p.recurrent_mib / 2)  # 15 of 30
    assert p.compute_logits_mib == 0  # output layer on the host
    assert plan_for(qwen, "-c 8192 -ngl 40").weights_host_mib == pytest.approx(
        397.85 + out, abs=0.01
    )


def test_override_tensor_to_cpu(qwen: ModelFacts) -> None:
    p = plan_for(qwen, r"-c 4096 -ot blk\.(0|1)\.ffn_.*_exps=CPU")
    assert plan_for(qwen, "-c 4096 --n-cpu-moe 2").weights_gpu_mib == p.weights_gpu_mib


def test_no_kv_offload_keeps_kv_on_host(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 65536 -nkvo")
    assert p.kv_host_mib == pytest.approx(p.kv_k_mib + p.kv_v_mib)


def _swa_model() -> ModelFacts:
    meta = {
        "general.architecture": "gemma2",
        "gemma2.block_count": 4,
        "gemma2.embedding_length": 1024,
        "gemma2.attention.head_count": 8,
        "gemma2.attention.head_count_kv": 4,
        "gemma2.attention.key_length": 128,
        "gemma2.attention.value_length": 128,
        "gemma2.attention.sliding_window": 4096,
        "gemma2.context_length": 8192,
        "gemma2.vocab_size": 1000,
    }
    return ModelFacts(meta, [])


def test_swa_layers_hold_only_the_window() -> None:
    m = _swa_model()
    geo = planner.geometry(m)
    assert geo.swa == (True, False, True, False)  # gemma2: every 2nd layer is full
    p = plan_for(m, "-c 65536 -np 1 -ctk f16 -ctv f16")
    row = 4 * 128 * 2  # bytes per token and layer
    swa_cells = 4096 + 512  # window + ubatch, padded to 256
    assert p.kv_k_mib * MIB == 2 * 65536 * row + 2 * swa_cells * row
    full = plan_for(m, "-c 65536 -np 1 --swa-full")
    assert full.kv_k_mib * MIB == 4 * 65536 * row
    # unified with 4 slots: the window is per sequence
    p4 = plan_for(m, "-c 65536")
    assert p4.kv_k_mib * MIB == 2 * 65536 * row + 2 * (4 * 4096 + 512) * row
    # checkpoints of SWA models hold the window
    assert p.checkpoint_each_mib * MIB == 2 * (4096 + 512) * row * 2


def test_flash_attn_off(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 32768 -fa off -np 1")
    assert not p.flash_attn and p.compute_kq_mib == 32768 * 512 * 16 * 4 / MIB
    t = plan_for(qwen, "-c 32768 -fa off -ctk turbo3 -ctv turbo3")
    assert t.flash_attn and any("overridden" in n for n in t.notes)
    q = plan_for(qwen, "-c 32768 -fa off -ctv q8_0")
    assert any("refused" in n for n in q.notes)


def test_quantized_upstream_kv_adds_f16_staging(qwen: ModelFacts) -> None:
    p = plan_for(qwen, "-c 65536 -ctk q8_0 -ctv q8_0")
    assert p.compute_fa_staging_mib == pytest.approx(2 * 65536 * 2 * 256 * 2 / MIB)
    assert plan_for(qwen, "-c 65536").compute_fa_staging_mib == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=262144), st.integers(min_value=1, max_value=8192))
def test_total_grows_with_context(qwen_ctx: int, extra: int) -> None:
    m = _QWEN_FOR_HYPOTHESIS
    a = plan_for(m, f"-c {qwen_ctx} -ctk q8_0 -ctv turbo3")
    b = plan_for(m, f"-c {qwen_ctx + extra} -ctk q8_0 -ctv turbo3")
    assert b.total_gpu_mib >= a.total_gpu_mib
    assert b.kv_k_mib >= a.kv_k_mib


def test_as_dict_keys(qwen: ModelFacts) -> None:
    d = plan_for(qwen, SEED_FLAGS).as_dict()
    for key in (
        "weights_gpu_mib",
        "weights_host_mib",
        "kv_k_mib",
        "kv_v_mib",
        "recurrent_mib",
        "checkpoints_mib",
        "compute_mib",
        "total_gpu_mib",
        "n_ctx",
        "n_parallel",
        "kv_unified",
    ):
        assert key in d
    assert "vram_mib" not in d and "fits" not in d
    d2 = planner.with_vram(plan_for(qwen, SEED_FLAGS), 16376).as_dict()
    assert d2["vram_mib"] == 16376 and d2["fits"] is True
    assert all(isinstance(v, (float, int, bool, str)) for v in d2.values())


# ----------------------------------------------------------------------------- suggest


def test_suggest_table(qwen: ModelFacts) -> None:
    rows = planner.suggestion_table(qwen)
    print("\n" + planner.format_table(rows))
    by = dict(rows)
    for label, s in rows:
        assert s is not None, label
        assert s.plan.fits and fits(s.plan, planner.GPU_SIZES_MIB[label])
        # the suggestion's own flags give the same plan
        again = estimate(qwen, parse_argv_list(s.args()))
        assert again.total_gpu_mib == pytest.approx(s.plan.total_gpu_mib)
    ctxs = [s.ctx for _, s in rows if s]
    assert ctxs == sorted(ctxs) or ctxs[-1] >= ctxs[0]
    assert by["8 GB"] is not None and by["8 GB"].n_cpu_moe > 0  # the model is 12.6 GB
    assert by["16 GB"] is not None and by["16 GB"].n_cpu_moe == 0
    for big in ("24 GB", "80 GB"):
        s = by[big]
        assert s is not None and s.ctx == 204800 and s.n_cpu_moe == 0
        assert (s.cache_type_k, s.cache_type_v) == ("f16", "f16")


def test_suggest_respects_wanted_context_and_upstream(qwen: ModelFacts) -> None:
    found = suggest(qwen, 24564, 131072, turbo=False)
    assert found[0].ctx == 131072
    upstream = {v for _, v in planner.KV_CHOICES_UPSTREAM}
    assert all(s.cache_type_v in upstream for s in found)


def test_suggest_nothing_fits(qwen: ModelFacts) -> None:
    assert suggest(qwen, 1024) == []


def test_suggest_never_proposes_turbo_k_by_default(qwen: ModelFacts) -> None:
    for vram in (8188.0, 16376.0):
        assert all(s.cache_type_k not in planner.TURBO_KV_TYPES for s in suggest(qwen, vram))


# ----------------------------------------------------------------------------- tiny GGUF


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama GGUF with random f16/f32 weights (n_embd 256, 2 heads of 128)."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    n_embd, n_ff, n_vocab, n_layer = 256, 512, 1024, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_block_count(n_layer)
    w.add_context_length(131072)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    rng = np.random.default_rng(0)

    def t(name: str, *shape: int, f16: bool = True) -> None:
        arr = rng.standard_normal(shape[::-1]).astype(np.float16 if f16 else np.float32)
        w.add_tensor(name, arr)

    t("token_embd.weight", n_embd, n_vocab)
    t("output_norm.weight", n_embd, f16=False)
    t("output.weight", n_embd, n_vocab)
    for il in range(n_layer):
        b = f"blk.{il}."
        t(b + "attn_norm.weight", n_embd, f16=False)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(b + name + ".weight", n_embd, n_embd)
        t(b + "ffn_norm.weight", n_embd, f16=False)
        t(b + "ffn_gate.weight", n_embd, n_ff)
        t(b + "ffn_up.weight", n_embd, n_ff)
        t(b + "ffn_down.weight", n_ff, n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_tiny_gguf_plan(tiny_gguf: Path) -> None:
    m = load_model_meta(str(tiny_gguf))
    p = plan_for(m, "-c 8192 -ctk turbo3 -ctv turbo3 -np 1")
    # the knowledge notes' CPU run: 2 layers x 8192 x 2 heads x 128 at turbo3 = 1.56 MiB
    assert p.kv_k_mib == pytest.approx(1.5625)
    assert not p.turbo_auto_asymmetric  # head ratio 1
    assert p.recurrent_mib == 0 and p.checkpoints_mib == 0  # plain attention model
    embd = 256 * 1024 * 2 / MIB
    assert p.weights_host_mib == pytest.approx(embd)
    assert p.weights_gpu_mib == pytest.approx(sum(int(t["bytes"]) for t in m.tensors) / MIB - embd)
    # dense model: suggestions move layers with -ngl, never experts
    assert all(s.n_cpu_moe == 0 and not s.cpu_moe for s in suggest(m, 2048, 8192, margin_mib=0))


def test_tied_embeddings_are_loaded_twice() -> None:
    meta = {
        "general.architecture": "llama",
        "llama.block_count": 1,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 1,
        "llama.context_length": 4096,
    }
    tensors = [{"name": "token_embd.weight", "type": "F16", "shape": [64, 100]}]
    p = plan_for(ModelFacts(meta, tensors), "-c 256 -np 1")
    assert p.weights_host_mib == p.weights_gpu_mib == 64 * 100 * 2 / MIB


# ----------------------------------------------------------------------------- CLI


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="llamafleet")
    sub = parser.add_subparsers(dest="command", required=True)
    plan_cli.register(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_cli_json_seed(capsys: pytest.CaptureFixture[str]) -> None:
    code = _cli(
        [
            "plan",
            "--model-meta",
            str(QWEN36),
            "--gpu-vram",
            "16376",
            "--format",
            "json",
            "--",
            *SEED_FLAGS.split(),
        ]
    )
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv_k_mib"] == 390.625 and d["fits"] is True and d["vram_mib"] == 16376


def test_cli_does_not_fit_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        _cli(["plan", "--model-meta", str(QWEN36), "--gpu-vram", "8G", "--", *SEED_FLAGS.split()])
        == 1
    )
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_cli_without_vram_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["plan", "--model-meta", str(QWEN36), "--", *SEED_FLAGS.split()]) == 0
    out = capsys.readouterr().out
    assert "390.62" in out and "251.25" in out and "12634.81" in out


def test_cli_input_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert _cli(["plan", "--model-meta", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert _cli(["plan", "--model-meta", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    nometa = tmp_path / "empty.json"
    nometa.write_text('{"metadata": {}}', encoding="utf-8")
    assert _cli(["plan", "--model-meta", str(nometa)]) == 2
    assert "architecture" in capsys.readouterr().err
    assert _cli(["plan"]) == 2
    assert "--model-meta" in capsys.readouterr().err
    script = tmp_path / "run.sh"
    script.write_text("echo hello\n", encoding="utf-8")
    assert _cli(["plan", "--model-meta", str(QWEN36), "--config-file", str(script)]) == 2
    assert str(script) in capsys.readouterr().err


def test_cli_config_file_script_and_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(
        "#!/bin/sh\nCTX=204800\nexec llama-server -m model.gguf \\\n"
        "  -c $CTX -ctk turbo3 -ctv turbo3 \\\n  -ngl 99\n",
        encoding="utf-8",
    )
    assert (
        _cli(
            ["plan", "--model-meta", str(QWEN36), "--config-file", str(script), "--format", "json"]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["kv_k_mib"] == 390.625
    unit = tmp_path / "llama.service"
    unit.write_text(
        "[Unit]\nDescription=x\n[Service]\nEnvironment=LLAMA_ARG_N_PARALLEL=1\n"
        "ExecStart=/opt/llama-server -c 65536 -ctk q8_0 -ctv q8_0\n",
        encoding="utf-8",
    )
    assert (
        _cli(
            [
                "plan",
                "--model-meta",
                str(QWEN36),
                "--config-file",
                str(unit),
                "--format",
                "json",
                "--",
                "-c",
                "131072",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["n_ctx"] == 131072 and d["n_parallel"] == 1 and d["cache_type_k"] == "q8_0"


def test_cli_gguf_and_suggest(tiny_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["plan", "--gguf", str(tiny_gguf), "--format", "json", "--", "-c", "8192"]) == 0
    assert json.loads(capsys.readouterr().out)["n_ctx"] == 8192
    assert _cli(["plan", "--model-meta", str(QWEN36), "--suggest", "--gpu-vram", "16376"]) == 0
    out = capsys.readouterr().out
    assert "best for 16376 MiB" in out and "-ngl 99" in out
    assert _cli(["plan", "--model-meta", str(QWEN36), "--suggest", "--gpu-vram", "1024"]) == 1
    assert _cli(["plan", "--model-meta", str(QWEN36), "--suggest"]) == 2


def test_cli_auto_asymmetric_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        _cli(
            [
                "plan",
                "--model-meta",
                str(QWEN36),
                "--turbo-auto-asymmetric",
                "--format",
                "json",
                "--",
                *SEED_FLAGS.split(),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["kv_k_mib"] == 1062.5


def test_fixture_is_reproducible() -> None:
    """The committed JSON equals what its generator writes (types documented there)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", FIXTURES / "gen_qwen36_fixture.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    data = json.loads(QWEN36.read_text(encoding="utf-8"))
    assert data["tensors"] == gen.solve()
    assert data["metadata"] == gen.METADATA
    assert os.path.getsize(QWEN36) < 200_000


# ----------------------------------------------------------------------------- real server logs
#
# Measured with the TurboQuant fork's llama-server, build 9079 (69d8e4be4), on CPU, by
# tools/planner_vs_log.py with the three models of testbed/make-tiny-model.py. The
# metadata below are those models' (only the keys the planner reads). Each row is the server's
# `llama_kv_cache: size = ... K (T): X MiB, V (T): Y MiB` line and, for the hybrid model, its
# `llama_memory_recurrent: size = Z MiB (...), R (f32): ... MiB, S (f32): ... MiB` line; the log
# prints two decimals, so the planner must be within 0.005 MiB.


def _tiny_llama(gqa_ratio: int = 1) -> ModelFacts:
    """make-tiny-model.py [--gqa-ratio N]: 2 layers, n_embd 64, 2 KV heads of 32, 2*N Q heads."""
    meta = {
        "general.architecture": "llama",
        "general.name": f"tiny llama gqa {gqa_ratio}",
        "llama.block_count": 2,
        "llama.context_length": 131072,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 128,
        "llama.attention.head_count": 2 * gqa_ratio,
        "llama.attention.head_count_kv": 2,
        "llama.attention.key_length": 32,
        "llama.attention.value_length": 32,
        "llama.vocab_size": 38331,
    }
    return ModelFacts(meta, [])


def _tiny_qwen35moe() -> ModelFacts:
    """make-tiny-model.py --arch qwen35moe: 8 blocks, full attention every 4th (16/2 heads of
    64), 6 gated-delta-net layers (conv 4, state 128, 2 groups, 4 value heads, inner 512)."""
    a = "qwen35moe."
    meta: dict[str, Any] = {
        "general.architecture": "qwen35moe",
        "general.name": "tiny qwen35moe",
        a + "block_count": 8,
        a + "context_length": 131072,
        a + "embedding_length": 64,
        a + "attention.head_count": 16,
        a + "attention.head_count_kv": 2,
        a + "attention.key_length": 64,
        a + "attention.value_length": 64,
        a + "full_attention_interval": 4,
        a + "ssm.conv_kernel": 4,
        a + "ssm.state_size": 128,
        a + "ssm.group_count": 2,
        a + "ssm.time_step_rank": 4,
        a + "ssm.inner_size": 512,
        a + "expert_count": 4,
        a + "expert_used_count": 2,
        a + "expert_feed_forward_length": 32,
        a + "expert_shared_feed_forward_length": 32,
        a + "vocab_size": 38331,
    }
    return ModelFacts(meta, [])


_TINY = {"llama": _tiny_llama(), "gqa6": _tiny_llama(6), "qwen35moe": _tiny_qwen35moe()}

# (model, flags, logged K type, K MiB, V type, V MiB, K/V cells, recurrent R+S MiB or None)
REAL_LOG = [
    ("llama", "-c 4096 -np 1 -ctk f16 -ctv f16", "f16", 1.00, "f16", 1.00, 4096, None),
    ("llama", "-c 8192 -np 2 -ctk q8_0 -ctv q8_0", "q8_0", 1.06, "q8_0", 1.06, 8192, None),
    ("llama", "-c 16384 -np 4 --kv-unified -ctk q4_0 -ctv q4_0", "q4_0", 1.12, "q4_0", 1.12,
     16384, None),
    ("llama", "-c 131072 -np 1 -fa on -ctk q8_0 -ctv turbo3", "q8_0", 17.00, "turbo3", 25.00,
     131072, None),
    ("llama", "-c 32768 -np 1 -fa on -ctk turbo3 -ctv turbo3", "turbo3", 6.25, "turbo3", 6.25,
     32768, None),
    ("llama", "-c 65536 -np 2 --kv-unified -fa on -ctk turbo4 -ctv turbo4", "turbo4", 17.00,
     "turbo4", 17.00, 65536, None),
    ("llama", "-c 32768 -np 4 -fa on -ctk turbo2 -ctv turbo2", "turbo2", 4.25, "turbo2", 4.25,
     32768, None),
    ("llama", "-c 10000 -np 3 -ctk f16 -ctv f16", "f16", 2.62, "f16", 2.62, 10752, None),
    ("llama", "-c 8192 -ctk q8_0 -ctv q8_0", "q8_0", 1.06, "q8_0", 1.06, 8192, None),
    ("llama", "-c 5000 -np 2 --kv-unified -ctk bf16 -ctv q5_1", "bf16", 1.25, "q5_1", 0.47,
     5120, None),
    ("llama", "-c 0 -np 1 -ctk q5_0 -ctv iq4_nl", "q5_0", 11.00, "iq4_nl", 9.00, 131072, None),
    ("llama", "-c 12288 -np 1 -fa off -ctk q4_1 -ctv f32", "q4_1", 0.94, "f32", 6.00, 12288,
     None),
    ("gqa6", "-c 65536 -np 1 -fa on -ctk turbo3 -ctv turbo3", "q8_0", 8.50, "turbo3", 12.50,
     65536, None),
    ("gqa6", "-c 16384 -np 2 -fa on -ctk turbo2 -ctv turbo2", "q8_0", 2.12, "turbo2", 2.12,
     16384, None),
    ("gqa6", "-c 32768 -np 1 -fa on -ctk q8_0 -ctv turbo4", "q8_0", 4.25, "turbo4", 8.50,
     32768, None),
    ("qwen35moe", "-c 4096 -np 1 -ctk f16 -ctv f16", "f16", 2.00, "f16", 2.00, 4096, 1.57),
    ("qwen35moe", "-c 131072 -np 4 -fa on -ctk q8_0 -ctv turbo3", "q8_0", 34.00, "turbo3",
     25.00, 131072, 6.28),
    ("qwen35moe", "-c 65536 -np 2 --kv-unified -fa on -ctk turbo3 -ctv turbo3", "q8_0", 17.00,
     "turbo3", 12.50, 65536, 3.14),
    ("qwen35moe", "-c 32768 -np 1 -fa on -ctk turbo2 -ctv turbo2", "q8_0", 8.50, "turbo2", 6.38,
     32768, 1.57),
    ("qwen35moe", "-c 16384 -ctk q8_0 -ctv q8_0", "q8_0", 4.25, "q8_0", 4.25, 16384, 6.28),
    ("qwen35moe", "-c 20000 -np 3 -fa on -ctk turbo4 -ctv turbo4", "q8_0", 5.38, "turbo4",
     5.38, 20736, 4.71),
    ("qwen35moe", "-c 8192 -np 2 -fa on -ctk q8_0 -ctv turbo2", "q8_0", 2.12, "turbo2", 1.59,
     8192, 3.14),
]  # fmt: skip


@pytest.mark.parametrize("row", REAL_LOG, ids=[f"{r[0]} {r[1]}" for r in REAL_LOG])
def test_matches_the_fork_server_log(row: tuple[Any, ...]) -> None:
    model, flags, tk, k_mib, tv, v_mib, cells, rs_mib = row
    # auto_asymmetric=True: build 9079 rewrites a symmetric turbo K to q8_0 at head ratio >= 6
    p = plan_for(_TINY[model], flags, auto_asymmetric=True)
    assert (p.cache_type_k, p.cache_type_v) == (tk, tv)
    assert abs(p.kv_k_mib - k_mib) <= 0.005 + 1e-9
    assert abs(p.kv_v_mib - v_mib) <= 0.005 + 1e-9
    assert p.n_ctx_seq * (1 if p.kv_unified else p.n_parallel) == cells
    if rs_mib is None:
        assert p.recurrent_mib == 0
    else:
        assert abs(p.recurrent_mib - rs_mib) <= 0.005 + 1e-9


def test_boundary_v_keeps_first_and_last_two_layers_q8_0() -> None:
    """Fix: a turbo2 V on a model with >= 8 layers is q8_0 on layers 0, 1, n-2, n-1.

    Log (tiny qwen35moe, `-c 32768 -np 1 -fa on -ctk turbo2 -ctv turbo2`):
    `llama_kv_cache: Boundary V auto-enabled for turbo2-V (opt-out: TURBO_LAYER_ADAPTIVE=0)`,
    `llama_kv_cache: size =   14.88 MiB ( 32768 cells,   2 layers,  1/1 seqs),
    K (q8_0):    8.50 MiB, V (turbo2):    6.38 MiB`: attention layers 3 and 7 of 8; layer 7 is a
    boundary layer, so its V is q8_0 although the log names the cache turbo2.
    """
    m = _tiny_qwen35moe()
    p = plan_for(m, "-c 32768 -np 1 -fa on -ctk turbo2 -ctv turbo2", auto_asymmetric=True)
    turbo2_layer = 32768 * 2 * 128 * 34 / 128  # head 64 padded to 128, 2.125 bit
    q8_layer = 32768 * 2 * 64 * 34 / 32
    assert p.kv_v_mib * MIB == turbo2_layer + q8_layer  # = 6.375 MiB
    assert p.cache_type_v == "turbo2"
    assert any("Boundary V" in n for n in p.notes)
    # log: `-c 8192 -np 2 -fa on -ctk q8_0 -ctv turbo2` -> `V (turbo2):    1.59 MiB` (K q8_0 too)
    p2 = plan_for(m, "-c 8192 -np 2 -fa on -ctk q8_0 -ctv turbo2")
    assert p2.kv_v_mib == pytest.approx(1.59375)
    # fewer than 8 layers: no boundary (tiny llama, `V (turbo2):    4.25 MiB` at 32768 x 4 seqs)
    assert plan_for(_tiny_llama(), "-c 32768 -np 4 -ctk turbo2 -ctv turbo2").kv_v_mib == 4.25
    # only turbo2 is affected
    assert planner.layer_cache_type_v("turbo3", 7, 8) == "turbo3"
    assert [planner.layer_cache_type_v("turbo2", il, 8) for il in range(8)] == [
        "q8_0", "q8_0", "turbo2", "turbo2", "turbo2", "turbo2", "q8_0", "q8_0",
    ]  # fmt: skip


def test_boundary_v_on_the_seed_model(qwen: ModelFacts) -> None:
    """Arithmetic for Qwen3.6 (40 blocks, attention at 3, 7, ..., 39): layer 39 is a boundary
    layer, so -ctv turbo2 costs 9 turbo2 layers + 1 q8_0 layer, not 10 turbo2 layers."""
    p = plan_for(qwen, "-c 204800 -ctk q8_0 -ctv turbo2")
    turbo2 = 204800 * 2 * 256 * 2.125 / 8 / MIB  # 26.5625 MiB per layer
    q8 = 204800 * 2 * 256 * 8.5 / 8 / MIB  # 106.25 MiB
    assert p.kv_v_mib == pytest.approx(9 * turbo2 + q8)  # 345.31, was planned as 265.63


def test_auto_asymmetric_uses_the_ratio_of_layer_0() -> None:
    """Fix: the fork tests `n_head(0) / n_head_kv(0)` (integers; 1 when layer 0 has no KV heads),
    not the largest ratio of any attention layer.

    Log (tiny llama --gqa-ratio 6, `-c 65536 -np 1 -fa on -ctk turbo3 -ctv turbo3`):
    `auto-asymmetric: GQA ratio 6:1 (n_head=12, n_head_kv=2) — upgrading K from turbo3 to q8_0`,
    `K (q8_0):    8.50 MiB, V (turbo3):   12.50 MiB`.
    """
    p = plan_for(_tiny_llama(6), "-c 65536 -np 1 -fa on -ctk turbo3 -ctv turbo3")
    assert p.turbo_auto_asymmetric
    q8 = plan_for(
        _tiny_llama(6), "-c 65536 -np 1 -fa on -ctk turbo3 -ctv turbo3", auto_asymmetric=True
    )
    assert (q8.cache_type_k, q8.kv_k_mib, q8.kv_v_mib) == ("q8_0", 8.5, 12.5)
    # 13 / 2 = 6 in integers: rewritten; 11 / 2 = 5: not
    m13 = _tiny_llama(6)
    m13.metadata["llama.attention.head_count"] = 13
    assert planner.geometry(m13).turbo_gqa_ratio == 6
    assert plan_for(m13, "-c 4096 -ctk turbo4 -ctv turbo4").turbo_auto_asymmetric
    m13.metadata["llama.attention.head_count"] = 11
    assert not plan_for(m13, "-c 4096 -ctk turbo4 -ctv turbo4").turbo_auto_asymmetric
    # a hybrid whose layer 0 is recurrent (head_count_kv 0 there): the fork sees ratio 1
    meta = {
        "general.architecture": "jamba",
        "jamba.block_count": 4,
        "jamba.embedding_length": 256,
        "jamba.context_length": 8192,
        "jamba.attention.head_count": 16,
        "jamba.attention.head_count_kv": [0, 0, 0, 2],
        "jamba.attention.key_length": 128,
        "jamba.attention.value_length": 128,
        "jamba.vocab_size": 1000,
    }
    hy = ModelFacts(meta, [])
    assert planner.geometry(hy).max_gqa_ratio == 8
    assert planner.geometry(hy).turbo_gqa_ratio == 1
    p_hy = plan_for(hy, "-c 8192 -ctk turbo3 -ctv turbo3", auto_asymmetric=True)
    assert not p_hy.turbo_auto_asymmetric and p_hy.cache_type_k == "turbo3"


def test_recurrent_state_split_and_checkpoint_match_the_log() -> None:
    """Log (tiny qwen35moe, `-c 131072 -np 4 -fa on -ctk q8_0 -ctv turbo3`):
    `llama_memory_recurrent: size =    6.28 MiB (     4 cells,   8 layers,  4 seqs),
    R (f32):    0.28 MiB, S (f32):    6.00 MiB`: one state per sequence (4 slots, not unified),
    and `created context checkpoint 1 of 32 (... size = 1.570 MiB)`: one sequence's state."""
    m = _tiny_qwen35moe()
    geo = planner.geometry(m)
    assert geo.rs_conv_bytes_per_layer == 4 * 3 * (512 + 2 * 2 * 128)
    assert geo.rs_bytes_per_layer - geo.rs_conv_bytes_per_layer == 4 * 128 * 512
    p = plan_for(m, "-c 131072 -np 4 -fa on -ctk q8_0 -ctv turbo3")
    assert p.recurrent_mib == pytest.approx(6 * 4 * (3072 + 65536) * 4 / MIB)  # 6.28
    assert 6 * 4 * geo.rs_conv_bytes_per_layer / MIB == pytest.approx(0.28, abs=0.005)
    assert p.checkpoint_each_mib == pytest.approx(1.570, abs=0.0005)
    assert p.n_ctx_seq == 32768 and not p.kv_unified  # `n_ctx_seq = 32768`, `kv_unified = false`

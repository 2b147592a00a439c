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

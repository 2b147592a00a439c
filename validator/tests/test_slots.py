"""Slots and context (llamafleet.slots): one layout for the planner, LS003/LS004 and XC003."""

from __future__ import annotations

import itertools

import pytest

from conftest import FIXTURES, run_cli
from llamafleet import planner
from llamafleet.argv import parse_argv_list
from llamafleet.gguf_meta import ModelFacts, load_model_meta
from llamafleet.planner import MIB
from llamafleet.rules.cross import slot_context
from llamafleet.slots import SlotLayout, request_context, slot_layout, slots

QWEN36 = FIXTURES / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"
CONTEXTS = ["", "-c 0", "-c 8192", "-c 30000", "-c 65536", "-c 100000", "-c 204800", "-c 300000"]
SLOTS = ["", "-np 1", "-np 3", "-np 4", "-np 4 --kv-unified", "-np -1 --no-kv-unified"]


@pytest.fixture(scope="module")
def qwen() -> ModelFacts:
    return load_model_meta(str(QWEN36))


def test_layout_pads_the_context_then_each_share() -> None:
    assert slot_layout(204800, 4, True) == SlotLayout(4, True, 204800, 204800)
    assert slot_layout(204800, 4, False) == SlotLayout(4, False, 204800, 51200)
    # 100000 -> 100096 cells; / 3 = 33365 -> 33536 per slot; 3 x 33536 in all
    assert slot_layout(100000, 3, False) == SlotLayout(3, False, 100608, 33536)
    assert slot_layout(100000, 3, False).n_stream == 3
    assert slot_layout(100000, 3, True).n_stream == 1


def test_slots_as_llama_server_resolves_them() -> None:
    assert slots(parse_argv_list([])) == (4, True, False)  # auto: 4 slots, unified
    assert slots(parse_argv_list(["-np", "2"])) == (2, False, True)
    assert slots(parse_argv_list(["-np", "2", "-kvu"])) == (2, True, True)
    assert slots(parse_argv_list(["-np", "-1", "--no-kv-unified"])) == (4, False, False)


@pytest.mark.parametrize(("ctx", "np_"), list(itertools.product(CONTEXTS, SLOTS)))
def test_planner_and_rules_agree_on_the_slot(qwen: ModelFacts, ctx: str, np_: str) -> None:
    cfg = parse_argv_list(["-m", "q.gguf", *f"{ctx} {np_}".split()])
    plan = planner.estimate(qwen, cfg)
    n_train = qwen.context_length
    assert n_train is not None
    found = request_context(cfg, n_train)
    assert found is not None
    assert found.tokens == min(plan.n_ctx_seq, n_train)
    # XC003's slot is the same function
    cross = slot_context(cfg, qwen)
    assert cross is not None and cross.tokens == found.tokens and cross.detail == found.detail


def test_request_context_unknown_without_c_or_model() -> None:
    assert request_context(parse_argv_list(["-np", "1"])) is None
    assert request_context(parse_argv_list(["-c", "0"])) is None
    found = request_context(parse_argv_list(["-c", "300000"]))
    assert found is not None and found.tokens == 300032  # padded; no cap known


def test_ls004_reports_the_padded_share() -> None:
    # -c 120000 over 4 slots: 120064 cells / 4 = 30016 -> 30208 per slot (LS004 said 30016)
    res = run_cli(["check", "--format", "json", "--", "-m", "q.gguf", "-c", "120000", "-np", "4"])
    found = [f for f in res.json()["findings"] if f["id"] == "LS004"]
    assert len(found) == 1, res.out
    assert "each request gets 30208 tokens" in found[0]["message"]
    assert "split over 4 slots without a unified KV cache" in found[0]["message"]
    unified = run_cli(["check", "--format", "json", "--", "-m", "q.gguf", "-c", "16384"])
    msg = next(f["message"] for f in unified.json()["findings"] if f["id"] == "LS004")
    assert "-c 16384, 4 slots sharing a unified KV cache" in msg


def test_kv_cache_bytes_is_the_plans_kv(qwen: ModelFacts) -> None:
    flags = "-c 65536 -np 2 -ctk q8_0 -ctv turbo2"
    plan = planner.estimate(qwen, parse_argv_list(flags.split()))
    geo = planner.geometry(qwen)
    kv = planner.kv_cache_bytes(geo, "q8_0", "turbo2", cells=2 * 32768, swa_cells=2 * 32768)
    assert kv.k / MIB == plan.kv_k_mib and kv.v / MIB == plan.kv_v_mib and kv.host == 0
    all_host = planner.kv_cache_bytes(
        geo, "q8_0", "turbo2", cells=65536, swa_cells=65536, first_gpu_layer=geo.n_layer
    )
    assert all_host.host == all_host.k + all_host.v

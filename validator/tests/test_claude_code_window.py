"""The compaction window the claude_code role writes (CLAUDE_CODE_AUTO_COMPACT_WINDOW, its filter
plugin) and the slot it is computed from: the slot is the planner's, the window is one XC003
accepts, and the refusals name the fix."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import FIXTURES, load_ansible_plugin, plugin_path, run_cli
from llamafleet import planner
from llamafleet.argv import parse_argv_list
from llamafleet.gguf_meta import ModelFacts, load_model_meta
from llamafleet.rules.cross import (
    CLAUDE_CODE_DEFAULT_WINDOW,
    CLAUDE_CODE_MIN_WINDOW,
    min_slot,
    slot_context,
    slot_context_of_argv,
    window_for_slot,
)

PLUGIN = plugin_path("filter", "claude_code")
QWEN36 = FIXTURES / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"

pytestmark = pytest.mark.skipif(
    not PLUGIN.is_file(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def filters() -> ModuleType:
    return load_ansible_plugin(PLUGIN)


@pytest.fixture(scope="module")
def qwen() -> ModelFacts:
    return load_model_meta(str(QWEN36))


# ----------------------------------------------------------------------------- the slot


@pytest.mark.parametrize(
    ("argv", "tokens"),
    [
        (["-c", "131072", "-np", "1"], 131072),
        (["-c", "180224"], 180224),  # the 16 GB plan: 4 auto slots sharing the cache
        (["-c", "180224", "-np", "4", "--kv-unified"], 180224),
        (["-c", "204800", "-np", "4"], 51200),  # no unified cache: ctx / np
        (["-c", "100000", "-np", "3"], 33536),  # padded to 256, then / 3, padded again
        (["-c", "0", "-np", "1"], 262144),  # the training context
        (["-np", "2", "--no-kv-unified"], 131072),
        (["-c", "300000", "-np", "1"], 262144),  # capped at the training context
    ],
)
def test_slot_is_the_planners(qwen: ModelFacts, argv: list[str], tokens: int) -> None:
    cfg = parse_argv_list(["-m", "q.gguf", *argv])
    plan = planner.estimate(qwen, cfg)
    assert qwen.context_length is not None
    assert min(plan.n_ctx_seq, qwen.context_length) == tokens
    found = slot_context(cfg, qwen)
    assert found is not None and found.tokens == tokens
    assert slot_context_of_argv(["llama-server", "-m", "q.gguf", *argv], qwen) == tokens


def test_slot_without_model_facts() -> None:
    assert slot_context_of_argv(["-m", "q.gguf", "-c", "204800", "-np", "4"]) == 51200
    assert slot_context_of_argv(["-m", "q.gguf", "-c", "300000"]) == 300032  # no cap known
    assert slot_context_of_argv(["-m", "q.gguf", "-np", "1"]) is None  # -c from the model
    kv = {"general.architecture": "llama", "llama.context_length": 65536}
    assert slot_context_of_argv(["-m", "q.gguf"], {"metadata": kv}) == 65536  # inspect's JSON
    described = {"context_length": 65536, "kv": kv, "tensors": []}  # the gguf_models role's
    assert slot_context_of_argv(["-m", "q.gguf", "-c", "131072", "-np", "1"], described) == 65536
    assert slot_context_of_argv(["-m", "q.gguf"], {"sha256": "0" * 64}) is None


def test_slot_from_a_unit(filters: ModuleType) -> None:
    unit = (
        "[Service]\nUser=llama\nExecStart=/opt/llama.cpp/current/bin/llama-server "
        "--model /srv/m.gguf --port 8080 {args}\n"
    )
    slot = filters.unit_slot_context
    assert slot(unit.format(args="--ctx-size 131072 --parallel 1")) == 131072
    assert slot(unit.format(args="--ctx-size 204800 --parallel 4")) == 51200
    assert slot(unit.format(args="--ctx-size 180224")) == 180224
    assert slot(unit.format(args="")) == 0  # the model's context: unknown here
    assert slot("[Service]\nUser=llama\n") == 0
    assert slot("not a unit") == 0
    assert slot("") == 0 and slot(None) == 0


# ----------------------------------------------------------------------------- the window


@pytest.mark.parametrize(
    ("slot", "window"),
    [
        (180224, 148224),  # the 16 GB plan
        (204800, 172800),
        (262144, 230144),
        (131072, 100000),  # 99072, written as the 100000 Claude Code takes
        (100000, 100000),  # the smallest slot
        ("131072", 100000),
    ],
)
def test_auto_window(filters: ModuleType, slot: Any, window: int) -> None:
    assert filters.compact_window(slot, "auto", 32000) == {
        "window": window,
        "problem": "",
        "unknown": False,
    }
    assert filters.compact_window(slot) == filters.compact_window(slot, "AUTO", None)


@pytest.mark.parametrize("slot", [99999, 65536, 51200, 32768])
def test_auto_refuses_a_slot_below_claude_codes_smallest_window(
    filters: ModuleType, slot: int
) -> None:
    out = filters.compact_window(slot, "auto", 32000)
    assert out["window"] == 0 and not out["unknown"]
    assert f"gives each request {slot} tokens" in out["problem"]
    assert "at least 100000 tokens per slot" in out["problem"]
    assert "ctx_size" in out["problem"] and "claude_code_auto_compact_window: off" in out["problem"]


def test_a_large_reserve_needs_a_larger_slot(filters: ModuleType) -> None:
    assert min_slot(50000) == 117000
    assert filters.compact_window(117000, "auto", 50000)["window"] == CLAUDE_CODE_MIN_WINDOW
    out = filters.compact_window(110000, "auto", 50000)
    assert "at least 117000 tokens per slot" in out["problem"]
    assert filters.compact_window(110000, "auto", 0)["window"] == 110000


@pytest.mark.parametrize("slot", [0, None, "", "0"])
def test_auto_with_an_unknown_slot(filters: ModuleType, slot: Any) -> None:
    out = filters.compact_window(slot, "auto", 32000)
    assert out["window"] == 0 and out["unknown"] is True
    assert "unknown" in out["problem"] and "llama_server role" in out["problem"]


@pytest.mark.parametrize("setting", [0, "0", "off", "OFF", False, None, "", "no"])
def test_off(filters: ModuleType, setting: Any) -> None:
    assert filters.compact_window(131072, setting, 32000) == {
        "window": 0,
        "problem": "",
        "unknown": False,
    }
    assert filters.compact_window(0, setting, "nonsense")["problem"] == ""


@pytest.mark.parametrize(("setting", "window"), [(150000, 150000), ("120000", 120000)])
def test_a_number_is_that_window(filters: ModuleType, setting: Any, window: int) -> None:
    out = filters.compact_window(0, setting, 32000)  # no slot needed
    assert out == {"window": window, "problem": "", "unknown": False}


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (50000, "outside 100000 to 1000000"),
        (2000000, "outside 100000 to 1000000"),
        (-1, "not auto, off (0) or a number"),
        ("lots", "not auto, off (0) or a number"),
        (True, "not auto, off (0) or a number"),
        (1.5, "not auto, off (0) or a number"),
    ],
)
def test_bad_settings_are_refused(filters: ModuleType, setting: Any, says: str) -> None:
    out = filters.compact_window(131072, setting, 32000)
    assert out["window"] == 0 and says in out["problem"]


@pytest.mark.parametrize("reserve", [-1, "x", True])
def test_bad_reserve_is_refused(filters: ModuleType, reserve: Any) -> None:
    out = filters.compact_window(131072, "auto", reserve)
    assert "claude_code_output_reserve" in out["problem"]


def test_the_filter_is_the_rules_window(filters: ModuleType) -> None:
    for slot in (100000, 120000, 131072, 180224, 204800, 262144, 1048576):
        assert filters.compact_window(slot, "auto", 32000)["window"] == window_for_slot(slot)
    assert window_for_slot(99999) is None


@pytest.mark.parametrize("ctx", [100000, 131072, 180224, 204800, 262144])
def test_what_the_role_writes_passes_xc003(filters: ModuleType, tmp_path: Path, ctx: int) -> None:
    window = filters.compact_window(ctx, "auto", 32000)["window"]
    env = {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080",
        "ANTHROPIC_AUTH_TOKEN": "k",
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(window),
    }
    (tmp_path / ".git").mkdir()  # no configuration from above tmp_path
    (tmp_path / "settings.json").write_text(json.dumps({"env": env}))
    (tmp_path / "run.sh").write_text(f"llama-server -m q.gguf -c {ctx} -np 1 --api-key k\n")
    res = run_cli(["check", "settings.json", "run.sh", "--format", "json"], cwd=tmp_path)
    assert res.code in (0, 1), res.err
    assert [f for f in res.json()["findings"] if f["id"] == "XC003"] == []
    del env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]
    (tmp_path / "settings.json").write_text(json.dumps({"env": env}))
    res = run_cli(["check", "settings.json", "run.sh", "--format", "json"], cwd=tmp_path)
    fired = [f for f in res.json()["findings"] if f["id"] == "XC003"]
    # Claude Code 2.1.332 assumes 1,000,000 tokens for a model it does not know
    assert fired if ctx < CLAUDE_CODE_DEFAULT_WINDOW else not fired


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("200k", 200000),
        ("1.5m", 1500000),
        ("200,000", 200000),
        ("200_000", 200000),
        ("2e5", 200000),
        ("200000abc", 200000),  # parseInt
        ("99072", 99072),  # raised to 100,000 by the caller
        ("0", None),
        ("-5", None),
        ("abc", None),
        ("nan", None),
    ],
)
def test_window_size_as_claude_code_reads_it(text: str, tokens: int | None) -> None:
    """CLAUDE_CODE_AUTO_COMPACT_WINDOW as Claude Code 2.1.332 parses it (its bundled source)."""
    from llamafleet.rules.cross import window_size

    assert window_size(text) == tokens

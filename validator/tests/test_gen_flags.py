"""tools/gen_flags.py reads the value forms of each option from its handler in common/arg.cpp."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ARG_CPP = r"""
    add_opt(common_arg({ "-fa", "--flash-attn" }, "[on|off|auto]",
                       "set Flash Attention use",
                       [](common_params & params, const std::string & value) {
                           if (is_truthy(value)) {
                               params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
                           } else if (is_falsey(value)) {
                               params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
                           } else if (is_autoy(value)) {
                               params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
                           } else {
                               throw std::runtime_error("error: unknown value");
                           }
                       }).set_env("LLAMA_ARG_FLASH_ATTN"));
    add_opt(common_arg(
        {"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N",
        "max. number of layers to store in VRAM",
        [](common_params & params, const std::string & value) {
            if (value == "auto") {
                params.n_gpu_layers = -1;
            } else if (value == "all") {
                params.n_gpu_layers = -2;
            } else {
                params.n_gpu_layers = std::stoi(value);
            }
        }
    ).set_env("LLAMA_ARG_N_GPU_LAYERS"));
    add_opt(common_arg(
        {"-np", "--parallel"}, "N",
        "number of server slots",
        [](common_params & params, int value) {
            if (value == 0) {
                throw std::invalid_argument("error: invalid value for n_parallel\n");
            }
            params.n_parallel = value;
        }
    ).set_env("LLAMA_ARG_N_PARALLEL").set_examples({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"--temp"}, "N",
        "temperature",
        [](common_params & params, const std::string & value) {
            params.sampling.temp = std::stof(value);
        }
    ));
"""


@pytest.fixture(scope="module")
def gen_flags() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "tools" / "gen_flags.py"
    spec = importlib.util.spec_from_file_location("gen_flags", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_value_forms_from_the_handlers(gen_flags: ModuleType) -> None:
    flags = {f["names"][-1]: f for f in gen_flags.parse(ARG_CPP)}
    fa = flags["--flash-attn"]
    assert fa["values"] == [
        "on", "enabled", "true", "1", "off", "disabled", "false", "0", "auto", "-1",
    ]  # fmt: skip
    ngl = flags["--n-gpu-layers"]
    assert ngl["kind"] == "int" and ngl["special"] == ["auto", "all"]
    assert flags["--parallel"]["rejects"] == [0]
    assert flags["--temp"]["kind"] == "float"


def test_the_fork_table_is_generated_with_them() -> None:
    """data/flags_fork.json carries what the handlers accept: the parser and LS020 use it."""
    from llamafleet.flags import table

    t = table()
    assert t.by_canonical["--flash-attn"].values is not None
    assert "enabled" in (t.by_canonical["--flash-attn"].values or ())
    assert t.by_canonical["--gpu-layers"].special == ("auto", "all")
    assert (
        t.by_canonical["--fit"].values is not None and "auto" not in t.by_canonical["--fit"].values
    )

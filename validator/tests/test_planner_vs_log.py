"""The planner against a real llama-server: runs ``tools/planner_vs_log.py``.

Needs a llama-server binary of the TurboQuant fork (the grid uses turbo cache types): set
``LLAMAFLEET_LLAMA_SERVER=/path/to/llama-server``. Without it the test is skipped. The tiny
models are generated into a temporary directory by ``testbed/make-tiny-model.py``
(the tool does that itself when they are missing), or taken from ``LLAMAFLEET_TINY_MODELS``
when that names a directory holding them. Run with ``pytest -s`` to see the table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "planner_vs_log.py"
SERVER = os.environ.get("LLAMAFLEET_LLAMA_SERVER", "")


def _tool() -> ModuleType:
    name = "llamafleet_tools_planner_vs_log"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TOOL)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


def test_parse_log_lines() -> None:
    """The parser reads the fork's lines (copied from a build 9079 log); no server needed."""
    tool = _tool()
    log = tool.parse_log(
        "llama_context: n_ctx         = 32768\n"
        "llama_kv_cache: auto-asymmetric: GQA ratio 8:1 (n_head=16, n_head_kv=2) — upgrading K "
        "from turbo2 to q8_0 to prevent quality degradation. Disable with TURBO_AUTO_ASYMMETRIC=0\n"
        "llama_kv_cache: size =   14.88 MiB ( 32768 cells,   2 layers,  1/1 seqs), "
        "K (q8_0):    8.50 MiB, V (turbo2):    6.38 MiB\n"
        "llama_memory_recurrent: size =    1.57 MiB (     1 cells,   8 layers,  1 seqs), "
        "R (f32):    0.07 MiB, S (f32):    1.50 MiB\n"
        "slot create_check: id  0 | task 0 | created context checkpoint 1 of 32 "
        "(pos_min = 0, pos_max = 151, n_tokens = 152, size = 1.570 MiB)\n"
    )
    assert log.kv[0]["tk"] == "q8_0" and float(log.kv[0]["v"]) == 6.38
    assert log.kv[0]["cells"] == "32768" and log.kv[0]["streams"] == "1"
    assert float(log.rs[0]["r"]) == 0.07 and float(log.rs[0]["s"]) == 1.5
    assert log.checkpoint_mib == 1.57 and log.checkpoint_max == 32
    assert log.ctx["n_ctx"] == "32768"
    assert any("auto-asymmetric" in n for n in log.notes)
    # the tolerance: 1 %, or what the log's two decimals hide
    assert tool.close_enough(0.0703, 0.07) and tool.close_enough(101.0, 100.0)
    assert not tool.close_enough(4.25, 6.38)


def test_grid_is_large_enough() -> None:
    tool = _tool()
    assert len(tool.GRID) >= 12
    flags = [" ".join(c.args) for c in tool.GRID]
    for pair in (
        "-ctk f16 -ctv f16",
        "-ctk q8_0 -ctv q8_0",
        "-ctk q4_0 -ctv q4_0",
        "-ctk q8_0 -ctv turbo3",
        "-ctk turbo3 -ctv turbo3",
        "-ctk turbo4 -ctv turbo4",
        "-ctk turbo2 -ctv turbo2",
    ):
        assert any(pair in f for f in flags), pair
    assert {c.model for c in tool.GRID} == {"llama", "gqa6", "qwen35moe"}
    assert any("--kv-unified" in f for f in flags)
    for n in ("-np 1", "-np 2", "-np 4"):
        assert any(n in f for f in flags)
    assert any("-c 4096" in f for f in flags) and any("-c 131072" in f for f in flags)


@pytest.mark.skipif(
    not SERVER,
    reason="set LLAMAFLEET_LLAMA_SERVER to a TurboQuant-fork llama-server binary to compare the "
    "planner with its log",
)
def test_planner_agrees_with_the_server_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = _tool()
    models = os.environ.get("LLAMAFLEET_TINY_MODELS") or str(tmp_path / "models")
    out = tmp_path / "rows.json"
    code = tool.main(["--server", SERVER, "--models-dir", models, "--json", str(out)])
    captured = capsys.readouterr()
    with capsys.disabled():
        print()
        print(captured.err, end="")
        print(captured.out)
    assert code == 0, "the planner disagrees with the server log (see the table above)"
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["ok"] and len(data["configs"]) >= 12

"""Print how long ``llamafleet plan`` takes on the Qwen3.6 fixture and on a tiny GGUF.

Not a test: timings depend on the machine. Run ``python tools/bench_plan.py`` from ``validator/``.
Prints, the best of N runs each: the in-process time to load the model facts, the time of
``planner.estimate`` alone (model loaded), and the wall time of the whole ``llamafleet plan``
command in a fresh interpreter (import included); then the time of the ``--suggest`` table for five
GPU sizes. To compare two trees, run it twice with ``PYTHONPATH`` pointing at each ``src``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FIXTURE = HERE / "tests" / "fixtures" / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"
SEED = ["-c", "204800", "-ctk", "turbo3", "-ctv", "turbo3", "-ngl", "99"]


def tiny_gguf(path: Path) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    for add, val in (
        (w.add_block_count, 2),
        (w.add_context_length, 131072),
        (w.add_embedding_length, 256),
        (w.add_feed_forward_length, 512),
        (w.add_head_count, 2),
        (w.add_head_count_kv, 2),
    ):
        add(val)
    w.add_layer_norm_rms_eps(1e-5)
    shapes = {
        "token_embd.weight": (1024, 256),
        "output_norm.weight": (256,),
        "output.weight": (1024, 256),
    }
    for il in range(2):
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            shapes[f"blk.{il}.{n}.weight"] = (256, 256)
        for n in ("attn_norm", "ffn_norm"):
            shapes[f"blk.{il}.{n}.weight"] = (256,)
        shapes[f"blk.{il}.ffn_gate.weight"] = (512, 256)
        shapes[f"blk.{il}.ffn_up.weight"] = (512, 256)
        shapes[f"blk.{il}.ffn_down.weight"] = (256, 512)
    for name, shape in shapes.items():
        dtype = np.float16 if len(shape) == 2 else np.float32
        w.add_tensor(name, rng.standard_normal(shape).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def best_ms(fn: Callable[[], object], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def in_process(path: Path, runs: int = 20) -> tuple[float, float]:
    """(load ms, estimate ms): the model facts loaded, then planned with the seed's flags."""
    from llamafleet.argv import parse_argv_list
    from llamafleet.gguf_meta import load_model_meta
    from llamafleet.planner import estimate

    model = load_model_meta(str(path))
    cfg = parse_argv_list(SEED)
    return (
        best_ms(lambda: load_model_meta(str(path)), runs),
        best_ms(lambda: estimate(model, cfg), runs * 10),
    )


def command(flag: str, path: Path, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "llamafleet",
                "plan",
                flag,
                str(path),
                "--format",
                "json",
                "--",
                *SEED,
            ],
            check=True,
            capture_output=True,
        )
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.gguf"
        tiny_gguf(tiny)
        rows = [
            ("Qwen3.6 fixture (inspect JSON)", "--model-meta", FIXTURE),
            (f"tiny GGUF ({os.path.getsize(tiny) / 1e6:.1f} MB)", "--gguf", tiny),
        ]
        print(f"{'model':<34}{'load ms':>10}{'estimate ms':>13}{'whole command ms':>18}")
        for label, flag, path in rows:
            load, plan = in_process(path)
            print(f"{label:<34}{load:>10.2f}{plan:>13.3f}{command(flag, path):>18.1f}")
        from llamafleet.gguf_meta import load_model_meta
        from llamafleet.planner import suggestion_table

        model = load_model_meta(str(FIXTURE))
        ms = best_ms(lambda: suggestion_table(model), 5)
        print(f"suggest for 5 GPU sizes on the Qwen3.6 fixture: {ms:.0f} ms")


if __name__ == "__main__":
    main()

"""Print how long ``llamafleet plan`` takes on the Qwen3.6 fixture and on a tiny GGUF.

Not a test: timings depend on the machine. Run ``python tools/bench_plan.py`` from ``validator/``.
Prints the in-process time (load the model facts + estimate), the best of N runs, and the wall
time of the whole ``llamafleet plan`` command in a fresh interpreter (import included).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
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


def in_process(flag: str, path: Path, runs: int = 20) -> float:
    from llamafleet.argv import parse_argv_list
    from llamafleet.gguf_meta import load_model_meta
    from llamafleet.planner import estimate

    del flag
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        estimate(load_model_meta(str(path)), parse_argv_list(SEED))
        best = min(best, time.perf_counter() - t)
    return best * 1000


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
        print(f"{'model':<34}{'load+estimate ms':>18}{'whole command ms':>18}")
        for label, flag, path in rows:
            print(f"{label:<34}{in_process(flag, path):>18.1f}{command(flag, path):>18.1f}")
        from llamafleet.gguf_meta import load_model_meta
        from llamafleet.planner import suggestion_table

        model = load_model_meta(str(FIXTURE))
        t = time.perf_counter()
        suggestion_table(model)
        print(
            f"suggest for 5 GPU sizes on the Qwen3.6 fixture: "
            f"{(time.perf_counter() - t) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()

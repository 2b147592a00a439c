"""``llamafleet plan``: GPU memory per component for a model and llama-server flags.

::

    llamafleet plan (--gguf FILE | --model-meta FILE.json) [--gpu-vram MiB] [--margin MiB]
                    [--suggest] [--format human|json] [--config-file SCRIPT_OR_UNIT]
                    [--referenced-dir DIR | --read-referenced] [-- llama-server flags...]

A unit's ``EnvironmentFile=`` is read only with ``--referenced-dir``/``--read-referenced`` (as in
``llamafleet check``); the model and ``--mmproj`` named in the flags are the files planned for.

Exit codes: 0 fine, 1 does not fit (only with ``--gpu-vram``; with ``--suggest``: nothing fits),
2 usage or input error (the message names the file).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from llamafleet import planner
from llamafleet.argv import ParseError, ServerConfig, parse_argv_list
from llamafleet.gguf_meta import GGUFError, ModelFacts, load_model_meta, mmproj_bytes
from llamafleet.planner import DEFAULT_MARGIN_MIB, Plan, PlanError, Suggestion
from llamafleet.refs import AS_NAMED, ReferencedFiles
from llamafleet.sources import parse_script
from llamafleet.units import parse_unit

EXIT_OK, EXIT_NO_FIT, EXIT_USAGE = 0, 1, 2


class _InputError(Exception):
    pass


def register(subparsers: Any) -> None:
    """Add the ``plan`` subcommand to an argparse ``add_subparsers()`` object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        help="estimate GPU memory for a model and llama-server flags",
        description="Estimate GPU and host memory per component (weights, K/V cache, recurrent "
        "state, context checkpoints, compute) for a model and llama-server flags, "
        "and optionally propose flags that fit a GPU (--suggest). llama-server "
        "flags follow --, or come from --config-file.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--gguf", metavar="FILE", help="the GGUF model")
    src.add_argument(
        "--model-meta",
        metavar="FILE",
        help="`llamafleet inspect --format json` output of the model",
    )
    p.add_argument(
        "--gpu-vram",
        metavar="MIB",
        type=_mib,
        help="GPU memory in MiB (suffix G/GiB for GiB), e.g. 16376 or 16G",
    )
    p.add_argument(
        "--margin",
        metavar="MIB",
        type=_mib,
        default=DEFAULT_MARGIN_MIB,
        help=f"memory to keep free (default {DEFAULT_MARGIN_MIB:g} MiB, as "
        "llama.cpp's --fit-target)",
    )
    p.add_argument(
        "--suggest",
        action="store_true",
        help="propose ctx, cache types, -ngl/--n-cpu-moe and -np that fit --gpu-vram "
        "(-c in the flags is the wanted context; default 204800)",
    )
    p.add_argument(
        "--no-turbo",
        action="store_true",
        help="with --suggest: the build has no TurboQuant cache types (upstream)",
    )
    p.add_argument(
        "--turbo-auto-asymmetric",
        action="store_true",
        help="model the TurboQuant fork's 2026-05 build, which rewrites a symmetric "
        "turbo K to q8_0 when query/KV heads >= 6 (default: the seed's older "
        "build, which keeps turbo K)",
    )
    p.add_argument("--format", choices=("human", "json"), default="human")
    p.add_argument(
        "--config-file",
        metavar="FILE",
        help="shell/.cmd script or systemd unit that starts llama-server; flags after "
        "-- are added after it (and win)",
    )
    from llamafleet.cli_options import add_referenced_options

    add_referenced_options(p)
    p.add_argument(
        "server_args",
        nargs=argparse.REMAINDER,
        metavar="-- FLAGS",
        help="llama-server flags, e.g. -- -c 204800 -ctk q8_0 -ctv turbo3 -ngl 99",
    )
    p.set_defaults(func=run)


def _mib(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(mib|m|gib|g|gb)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in MiB (or with G/GiB)")
    value = float(m.group(1))
    unit = (m.group(2) or "").lower()
    return value * 1024 if unit in ("g", "gib", "gb") else value


def _load_config(args: argparse.Namespace) -> ServerConfig:
    extra = list(args.server_args or [])
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.config_file:
        path = args.config_file
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as exc:
            raise _InputError(f"{path}: cannot read: {exc.strerror}") from exc
        try:
            if path.endswith((".service", ".unit")) or re.search(r"^\s*\[Service\]", text, re.M):
                unit = parse_unit(text, path, _referenced(args))
                if unit.server is None:
                    raise _InputError(f"{path}: no ExecStart= line in [Service]")
                cfg = unit.server
            else:
                cfg = parse_script(text, path)
        except ParseError as exc:
            raise _InputError(f"{path}:{exc.line}: {exc}") from exc
        if extra:
            cfg.options += parse_argv_list(extra, path="<command line>").options
        return cfg
    return parse_argv_list(extra, path="<command line>")


def _referenced(args: argparse.Namespace) -> ReferencedFiles:
    from llamafleet.cli_options import UsageError, referenced_policy

    try:
        return referenced_policy(args)
    except UsageError as exc:
        raise _InputError(str(exc)) from exc


def _load_model(args: argparse.Namespace, cfg: ServerConfig) -> ModelFacts:
    path = args.gguf or args.model_meta or cfg.value("--model")
    if not path:
        raise _InputError(
            "give the model: --gguf FILE or --model-meta FILE.json (or -m FILE in "
            "the llama-server flags)"
        )
    if not os.path.isfile(path):
        raise _InputError(f"{path}: no such file")
    try:
        return load_model_meta(path)
    except (GGUFError, OSError, UnicodeDecodeError) as exc:
        raise _InputError(str(exc) if str(exc).startswith(path) else f"{path}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    """Handler of ``llamafleet plan``; returns the exit code."""
    try:
        cfg = _load_config(args)
        model = _load_model(args, cfg)
        if args.suggest:
            return _run_suggest(args, model, cfg)
        plan = planner.estimate(
            model,
            cfg,
            auto_asymmetric=args.turbo_auto_asymmetric,
            mmproj_bytes=mmproj_bytes(cfg, AS_NAMED),
        )
    except (_InputError, PlanError) as exc:
        sys.stderr.write(f"llamafleet plan: error: {exc}\n")
        return EXIT_USAGE
    if args.gpu_vram is not None:
        plan = planner.with_vram(plan, args.gpu_vram, args.margin)
    if args.format == "json":
        sys.stdout.write(json.dumps(plan.as_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(format_plan(plan))
    return EXIT_NO_FIT if plan.fits is False else EXIT_OK


def _run_suggest(args: argparse.Namespace, model: ModelFacts, cfg: ServerConfig) -> int:
    if args.gpu_vram is None:
        raise _InputError("--suggest needs --gpu-vram MiB")
    want = cfg.int_value("--ctx-size")
    rest = [
        a
        for o in cfg.options
        if o.canonical in _PASS_THROUGH
        for a in ([o.written] + ([o.value] if o.value is not None else []))
    ]
    found = planner.suggest(
        model,
        args.gpu_vram,
        want if want and want > 0 else None,
        margin_mib=args.margin,
        turbo=not args.no_turbo,
        extra_args=rest,
        mmproj_bytes=mmproj_bytes(cfg, AS_NAMED),
    )
    if args.format == "json":
        sys.stdout.write(json.dumps([s.as_dict() for s in found], indent=2) + "\n")
    else:
        sys.stdout.write(format_suggestions(found, args.gpu_vram, args.margin))
    return EXIT_OK if found else EXIT_NO_FIT


#: Flags a suggestion keeps from the given command line (they change the arithmetic).
_PASS_THROUGH = frozenset(
    {
        "--ubatch-size",
        "--batch-size",
        "--ctx-checkpoints",
        "--swa-full",
        "--flash-attn",
        "--kv-offload",
        "--cache-ram",
        "--mmproj",
        "--mmproj-offload",
    }
)


def format_plan(plan: Plan) -> str:
    """The human report of one plan."""
    slots = (
        f"{plan.n_parallel} slots, unified KV"
        if plan.kv_unified
        else f"{plan.n_parallel} slots x {plan.n_ctx_seq} tokens"
    )
    offload = f"-ngl {plan.n_gpu_layers}"
    if plan.cpu_moe:
        offload += " --cpu-moe"
    elif plan.n_cpu_moe:
        offload += f" --n-cpu-moe {plan.n_cpu_moe}"
    lines = [
        f"{plan.model} ({plan.arch}): {plan.n_attention_layers} attention layers"
        + (f" ({plan.n_swa_layers} SWA)" if plan.n_swa_layers else "")
        + (f", {plan.n_recurrent_layers} recurrent" if plan.n_recurrent_layers else ""),
        f"context {plan.n_ctx} ({slots}), K {plan.cache_type_k}, V {plan.cache_type_v}, "
        f"flash attention {'on' if plan.flash_attn else 'off'}, {offload}",
        "",
        f"{'component':<34}{'GPU MiB':>12}{'host MiB':>12}",
    ]

    def row(name: str, gpu: float, host: float = 0.0) -> None:
        lines.append(f"{name:<34}{gpu:>12.2f}{host:>12.2f}")

    row("weights", plan.weights_gpu_mib, plan.weights_host_mib)
    k_host = plan.kv_host_mib * (plan.kv_k_mib / max(plan.kv_k_mib + plan.kv_v_mib, 1e-9))
    v_host = plan.kv_host_mib - k_host
    row(f"K cache ({plan.cache_type_k})", plan.kv_k_mib - k_host, k_host)
    row(f"V cache ({plan.cache_type_v})", plan.kv_v_mib - v_host, v_host)
    if plan.recurrent_mib:
        row(
            f"recurrent state ({plan.n_parallel} x {plan.recurrent_per_slot_mib:.2f})",
            plan.recurrent_mib - plan.recurrent_host_mib,
            plan.recurrent_host_mib,
        )
    if plan.checkpoints_mib:
        row(
            f"checkpoints (max {plan.n_parallel} x {plan.n_checkpoints} x "
            f"{plan.checkpoint_each_mib:.2f})",
            0.0,
            plan.checkpoints_mib,
        )
    if plan.mmproj_mib:
        row("multimodal projector", plan.mmproj_mib)
    row("compute (estimate)", plan.compute_mib)
    lines.append(
        f"{'  logits / mask / activations':<34}"
        f"{plan.compute_logits_mib:>8.0f} / {plan.compute_mask_mib:.0f} / "
        f"{plan.compute_activations_mib:.0f}"
    )
    if plan.compute_kq_mib or plan.compute_fa_staging_mib:
        lines.append(
            f"{'  KQ / f16 staging of K,V':<34}{plan.compute_kq_mib:>8.0f} / "
            f"{plan.compute_fa_staging_mib:.0f}"
        )
    lines.append(f"{'  CUDA context and pool':<34}{plan.cuda_overhead_mib:>8.0f}")
    if plan.cache_ram_mib > 0:
        row("prompt cache (--cache-ram limit)", 0.0, plan.cache_ram_mib)
    lines.append("-" * 58)
    row("total", plan.total_gpu_mib, plan.total_host_mib)
    if plan.vram_mib is not None:
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines.append(
            f"GPU {plan.vram_mib:.0f} MiB - margin {plan.margin_mib:.0f} MiB = "
            f"{plan.vram_mib - plan.margin_mib:.0f} MiB available: {verdict} "
            f"({plan.vram_mib - plan.margin_mib - plan.total_gpu_mib:+.0f} MiB)"
        )
    for note in plan.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def format_suggestions(found: list[Suggestion], vram_mib: float, margin_mib: float) -> str:
    if not found:
        return (
            f"nothing fits in {vram_mib:.0f} MiB with a {margin_mib:.0f} MiB margin, even "
            "with all experts/layers on the host\n"
        )
    best = found[0]
    lines = [
        f"best for {vram_mib:.0f} MiB (margin {margin_mib:.0f} MiB):",
        "  " + " ".join(best.args()),
        f"  GPU total {best.plan.total_gpu_mib:.0f} MiB, free {(best.plan.free_mib or 0):.0f} MiB",
    ]
    lines += [f"  note: {n}" for n in best.notes]
    if len(found) > 1:
        lines.append("alternatives (one per cache-type pair):")
        for s in found[1:]:
            lines.append(f"  {' '.join(s.args()):<64} GPU {s.plan.total_gpu_mib:.0f} MiB")
    return "\n".join(lines) + "\n"

"""Rules on llama-server options (LS001-LS020) and its chat template (LS021-LS023)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from llamafleet.argv import Option, ServerConfig, validate_value
from llamafleet.facts import Facts
from llamafleet.flags import TURBO_CACHE_TYPES, UNQUANTIZED_CACHE_TYPES, table
from llamafleet.gguf_meta import mmproj_bytes
from llamafleet.rules.base import Context, Hit, rule
from llamafleet.slots import context_size as _context_size
from llamafleet.slots import request_context, slot_layout, slots

TYPE_CHECKING = False
if TYPE_CHECKING:  # the template machinery loads only for a server that has a template
    from llamafleet.chat_template import Classification, TemplateSource

#: Per-request context Claude Code needs (system prompt + tools are ~20K tokens alone).
CLAUDE_CODE_MIN_CTX = 32768
#: First build where --mmproj keeps context checkpoints and the RAM prompt cache.
MMPROJ_SAFE_BUILD = 8153


def context_size(cfg: ServerConfig, facts: Facts) -> tuple[int | None, str]:
    """Configured context (0/absent = the model's training context) and how it was found."""
    return _context_size(cfg, facts.model.context_length if facts.model else None)


@rule("LS001")
def cache_ram_disabled(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--cache-ram")
        if opt and opt.value is not None and opt.value.strip() == "0":
            yield Hit(cfg.path, opt.line, {"option": opt.display})


@rule("LS002")
def cache_ram_unbounded(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--cache-ram")
        if opt and opt.value is not None and opt.value.strip() == "-1":
            yield Hit(cfg.path, opt.line, {"option": opt.display})


@rule("LS003")
def parallel_splits_context(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        n, unified, explicit = slots(cfg)
        opt = cfg.get("--parallel")
        if not explicit or n <= 1 or opt is None:
            continue
        total, how = context_size(cfg, ctx.facts)
        if unified:
            detail = f"{n} slots share one unified KV cache" + (
                f" of {total} tokens" if total else ""
            )
        elif total:
            per = slot_layout(total, n, unified).n_ctx_seq
            detail = f"without --kv-unified each of the {n} slots gets {per} tokens ({how} / {n})"
        else:
            detail = f"without --kv-unified each of the {n} slots gets 1/{n} of the context"
        if ctx.facts.model is not None and ctx.facts.model.is_recurrent:
            per_state = _recurrent_state_mib(ctx)
            state = f" (~{per_state:.1f} MiB each)" if per_state else ""
            detail += (
                f"; {ctx.facts.model.architecture} is hybrid: {n} recurrent states{state}"
                " plus their context checkpoints"
            )
        else:
            detail += "; hybrid models also keep one recurrent state per slot"
        yield Hit(cfg.path, opt.line, {"option": opt.display, "detail": detail})


def _recurrent_state_mib(ctx: Context) -> float | None:
    """Recurrent state per slot from the model's metadata (the planner's arithmetic)."""
    if ctx.facts.model is None:
        return None
    from llamafleet import planner

    try:
        per_seq = planner.geometry(ctx.facts.model).recurrent_bytes_per_seq
    except planner.PlanError:
        return None
    return per_seq / 2**20 if per_seq else None


@rule("LS004")
def request_context_too_small(ctx: Context) -> Iterator[Hit]:
    n_train = ctx.facts.model.context_length if ctx.facts.model else None
    for cfg in ctx.all_servers:
        slot = request_context(cfg, n_train)
        if slot is None or slot.tokens >= CLAUDE_CODE_MIN_CTX:
            continue
        opt = cfg.get("--ctx-size") or cfg.get("--parallel")
        line = opt.line if opt else cfg.line
        found = {"per_slot": slot.tokens, "detail": slot.detail, "needed": CLAUDE_CODE_MIN_CTX}
        yield Hit(cfg.path, line, found)


@rule("LS005")
def mmproj_breaks_cache(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--mmproj")
        if opt is None or opt.negated:
            continue
        # the target build's --version, else the build the file itself names (a release
        # archive, an image tag); unknown: only a note, most builds in use are newer
        build = ctx.facts.build_number or cfg.build
        if build is None:
            yield Hit(
                cfg.path,
                opt.line,
                {"option": opt.display, "build": "a build of unknown number"},
                severity="info",
            )
        elif build < MMPROJ_SAFE_BUILD:
            yield Hit(cfg.path, opt.line, {"option": opt.display, "build": f"build b{build}"})


@rule("LS006")
def cache_reuse_zero(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--cache-reuse")
        if opt and opt.value is not None and opt.value.strip() == "0":
            yield Hit(cfg.path, opt.line, {"option": opt.display})


@lru_cache(maxsize=512)
def is_loopback(host: str) -> bool:
    h = host.strip().strip("[]")
    if h in ("localhost", "ip6-localhost", "::1") or h.endswith(".sock") or h.startswith("/"):
        return True
    if h[:1].isdigit() and h.replace(".", "").isdigit():
        return h.count(".") == 3 and h.startswith("127.")  # an IPv4 address
    if not h or (h[0].isalpha() and ":" not in h):
        return False  # a host name
    import ipaddress

    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


#: The wildcard addresses of --host: llama-server listens on every address of the host, so any
#: address of the host reaches it (and a connection to one reaches the host itself).
ANY_ADDRESSES = frozenset({"0.0.0.0", "::", "[::]"})
#: What :func:`address_kind` returns.
ADDRESS_KINDS = ("loopback", "socket", "any", "address")


def is_any_address(host: str) -> bool:
    """Whether ``host`` (a --host value or a URL's host) is a wildcard address: 0.0.0.0 or ::."""
    return host.strip() in ANY_ADDRESSES


def address_kind(host: str | None) -> str:
    """What a llama-server ``--host`` (or a client's server address) is, one of
    :data:`ADDRESS_KINDS`:

    * ``socket``: a Unix socket path (llama-server listens on a socket when the value ends in
      ``.sock``);
    * ``loopback``: 127.0.0.0/8, ::1 (bracketed or not), localhost, or empty/None (llama-server's
      default, 127.0.0.1);
    * ``any``: 0.0.0.0 or :: (every address of the host);
    * ``address``: anything else (an address or name other hosts may reach)."""
    text = (host or "").strip()
    if not text:
        return "loopback"
    if text.endswith(".sock"):
        return "socket"
    if is_any_address(text):
        return "any"
    return "loopback" if is_loopback(text) else "address"


def has_api_key(cfg: ServerConfig) -> bool:
    return any(cfg.value(k) for k in ("--api-key", "--api-key-file")) or bool(
        cfg.env.get("LLAMA_API_KEY")
    )


@rule("LS007")
def exposed_without_api_key(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--host")
        if opt is None or opt.value is None or opt.unknown or is_loopback(opt.value):
            continue
        # an environment not read may set LLAMA_ARG_API_KEY; an unresolved expansion in the
        # command line is taken as what it is when the script runs as written: empty
        if not has_api_key(cfg) and not cfg.env_opaque:
            yield Hit(cfg.path, opt.line, {"host": opt.value})


def _is_off(opt: Option | None) -> bool:
    return opt is not None and (opt.negated or (opt.value or "").lower() in ("off", "0", "false"))


@rule("LS008")
def quantized_v_without_fa(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        fa = cfg.get("--flash-attn")
        vtype = cfg.value("--cache-type-v")
        if not _is_off(fa) or vtype is None or fa is None or cfg.is_unknown("--cache-type-v"):
            continue
        # turbo types switch flash attention on by themselves (with a warning) in the fork
        if vtype in UNQUANTIZED_CACHE_TYPES or vtype in TURBO_CACHE_TYPES:
            continue
        yield Hit(cfg.path, fa.line, {"vtype": vtype, "option": fa.display})


@rule("LS009")
def turbo_unsupported(ctx: Context) -> Iterator[Hit]:
    has_turbo = ctx.facts.has_turbo
    for cfg in ctx.all_servers:
        for name in ("--cache-type-k", "--cache-type-v"):
            opt = cfg.get(name)
            if opt is None or opt.value not in TURBO_CACHE_TYPES:
                continue
            if has_turbo is None:
                yield Hit(
                    cfg.path,
                    opt.line,
                    {
                        "option": opt.display,
                        "detail": "TurboQuant cache type on a build whose --help is unknown; only "
                        "the fork's feature branch has it",
                    },
                    severity="warning",
                )
            elif (
                ctx.facts.help
                and ctx.facts.help.cache_types is not None
                and (opt.value not in ctx.facts.help.cache_types)
            ):
                allowed = ", ".join(ctx.facts.help.cache_types)
                yield Hit(
                    cfg.path,
                    opt.line,
                    {
                        "option": opt.display,
                        "detail": f"this build does not have {opt.value} "
                        f"(its --help allows {allowed})",
                    },
                )


@rule("LS010")
def symmetric_turbo_k(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--cache-type-k")
        if opt and opt.value and opt.value.startswith("turbo"):
            yield Hit(cfg.path, opt.line, {"option": opt.display})


@rule("LS011")
def fit_silently_disabled(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        fit = cfg.get("--fit")
        if _is_off(fit):
            continue
        for name in (
            "--gpu-layers",
            "--tensor-split",
            "--override-tensor",
            "--cpu-moe",
            "--n-cpu-moe",
        ):
            opt = cfg.get(name)
            if opt is None or opt.negated or opt.unknown or _leaves_placement(opt):
                continue
            state = "on" if fit is not None else "on (the default)"
            yield Hit(cfg.path, opt.line, {"option": opt.written, "fit_state": state})
            break


def _leaves_placement(opt: Option) -> bool:
    """Values that leave the placement to --fit: ``-ngl -1``/``auto`` is llama.cpp's default
    (common/fit.cpp aborts only when n_gpu_layers differs from it), ``--n-cpu-moe 0`` adds no
    tensor override."""
    v = (opt.value or "").strip()
    if opt.canonical == "--gpu-layers":
        return v in ("-1", "auto")
    return opt.canonical == "--n-cpu-moe" and v == "0"


@rule("LS012")
def ctx_above_training(ctx: Context) -> Iterator[Hit]:
    model = ctx.facts.model
    n_train = model.context_length if model else None
    if not n_train:
        return
    for cfg in ctx.all_servers:
        opt = cfg.get("--ctx-size")
        c = cfg.int_value("--ctx-size")
        if opt is not None and c is not None and c > n_train:
            yield Hit(cfg.path, opt.line, {"option": opt.display, "n_ctx_train": n_train})


@rule("LS013")
def batch_below_ubatch(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        b, ub = cfg.int_value("--batch-size"), cfg.int_value("--ubatch-size")
        if b is None and ub is None:
            continue
        detail = ""
        if b is None:
            b, detail = 2048, " (-b not set: default 2048)"
        if ub is None:
            ub, detail = 512, " (-ub not set: default 512)"
        if b < ub:
            opt = cfg.get("--ubatch-size") or cfg.get("--batch-size")
            assert opt is not None
            yield Hit(cfg.path, opt.line, {"batch": b, "ubatch": ub, "detail": detail})


@rule("LS014")
def unknown_flag(ctx: Context) -> Iterator[Hit]:
    t = table()
    helpfacts = ctx.facts.help
    for cfg in ctx.all_servers:
        for opt in cfg.options:
            if opt.from_env:
                continue
            if opt.spec is None:
                if helpfacts is not None and opt.written in helpfacts.names:
                    continue  # not in the flag table, but the target build's --help lists it
                yield Hit(
                    cfg.path,
                    opt.line,
                    {
                        "option": opt.written,
                        "detail": "is not an option of any known llama-server build",
                        "hint": "Remove it, or check the spelling against `llama-server --help`.",
                    },
                )
                continue
            if helpfacts is None:
                continue
            if opt.written in helpfacts.names:
                continue
            spellings = set(opt.spec.names) | set(opt.spec.negations)
            if spellings & helpfacts.names:
                continue  # another spelling of the same option is there: a spelling change
            if opt.spec.successor:
                hint = f"This build replaced it: use {opt.spec.successor}."
            elif opt.spec.canonical in t.predecessors:
                hint = f"This build predates it: use {t.predecessors[opt.spec.canonical]}."
            else:
                hint = "Remove it, or upgrade the build (see `llama-server --help`)."
            yield Hit(
                cfg.path,
                opt.line,
                {
                    "option": opt.written,
                    "detail": "is not accepted by the target build (its --help does not list it)",
                    "hint": hint,
                },
            )


@rule("LS015")
def swa_full_on_hybrid(ctx: Context) -> Iterator[Hit]:
    model = ctx.facts.model
    if model is None or not model.is_recurrent:
        return
    for cfg in ctx.all_servers:
        opt = cfg.get("--swa-full")
        if opt is not None and not opt.negated:
            yield Hit(cfg.path, opt.line, {"arch": model.architecture})


#: The first fork build known to rewrite a symmetric turbo K to q8_0 on GQA >= 6 (its log:
#: "auto-asymmetric: GQA ratio 6:1"; validator/tools/planner_vs_log.py measures it).
FORK_AUTO_ASYMMETRIC_BUILD = 9079


def _rewrites_turbo_k(ctx: Context) -> bool:
    """Whether the build in the facts is a TurboQuant fork build that rewrites symmetric turbo K."""
    f = ctx.facts
    return bool(f.has_turbo) and (f.build_number or 0) >= FORK_AUTO_ASYMMETRIC_BUILD


@rule("LS016")
def does_not_fit(ctx: Context) -> Iterator[Hit]:
    model, vram = ctx.facts.model, ctx.facts.gpu_vram_mib
    if model is None or vram is None or not model.tensors:
        return  # the estimate needs the tensor list (`llamafleet inspect` JSON or the GGUF)
    from llamafleet import planner

    for cfg in ctx.all_servers:
        if cfg.opaque or any(o.unknown for o in cfg.options):
            continue  # a value the validator cannot know: no estimate
        try:
            plan = planner.estimate(
                model,
                cfg,
                auto_asymmetric=_rewrites_turbo_k(ctx),
                mmproj_bytes=mmproj_bytes(cfg, ctx.referenced),
            )
        except planner.PlanError:
            continue  # invalid values are LS020's; missing metadata means no estimate
        margin = planner.DEFAULT_MARGIN_MIB
        if planner.fits(plan, vram, margin):
            continue
        d = plan.as_dict()
        detail = ", ".join(
            f"{label} {float(d[key]):.0f}"
            for key, label in (
                ("weights_gpu_mib", "weights"),
                ("kv_k_mib", "K"),
                ("kv_v_mib", "V"),
                ("recurrent_mib", "recurrent"),
                ("checkpoints_mib", "checkpoints"),
                ("compute_mib", "compute"),
            )
            if key in d and float(d[key]) > 0
        )
        opt = cfg.get("--ctx-size")
        yield Hit(
            cfg.path,
            opt.line if opt else cfg.line,
            {
                "total_mib": float(d["total_gpu_mib"]),
                "vram_mib": vram,
                "margin_mib": margin,
                "detail": detail + " MiB",
            },
        )


@rule("LS017")
def threads_above_cores(ctx: Context) -> Iterator[Hit]:
    cores = ctx.facts.cpu_cores
    if not cores:
        return
    for cfg in ctx.all_servers:
        for name in ("--threads", "--threads-batch"):
            opt = cfg.get(name)
            n = cfg.int_value(name)
            if opt is not None and n is not None and n > cores:
                yield Hit(cfg.path, opt.line, {"option": opt.display, "cores": cores})


@rule("LS018")
def mmproj_offload_without_mmproj(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        opt = cfg.get("--mmproj-offload")
        if opt is not None and opt.negated and not cfg.has("--mmproj") and not cfg.opaque:
            yield Hit(cfg.path, opt.line, {"option": opt.display})


@rule("LS019")
def turbo_env(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        if "LLAMA_KV_CACHE_TURBO" in cfg.env:
            yield Hit(cfg.path, cfg.env["LLAMA_KV_CACHE_TURBO"][1], {})


@rule("LS020")
def invalid_value(ctx: Context) -> Iterator[Hit]:
    help_types = ctx.facts.help.cache_types if ctx.facts.help else None
    for cfg in ctx.all_servers:
        for opt in cfg.options:
            if opt.spec is None or not (opt.spec.checked or opt.missing_value):
                continue  # an unknown option is LS014's; a free-text value is never invalid
            why = validate_value(opt)
            if why is None:
                continue
            hint = "Give a valid value; see `llama-server --help`."
            if opt.spec and opt.spec.canonical in ("--cache-type-k", "--cache-type-v"):
                types = help_types or ("f16", "bf16", "q8_0", "q4_0", "q5_0", "iq4_nl", "...")
                hint = f"Use one of: {', '.join(types)}."
            yield Hit(cfg.path, opt.line, {"detail": why, "hint": hint})


# ----------------------------------------------------------------------------- chat template


def _late_system(
    ctx: Context, kinds: tuple[str, ...]
) -> Iterator[tuple[ServerConfig, TemplateSource, Classification]]:
    """(server, template source, classification) for each server whose chat template (see
    llamafleet.chat_template.template_of) does one of ``kinds`` with Claude Code's late system
    message. Every client the validator knows is Claude Code, so this holds whether clients were
    checked with the server or not."""
    servers = ctx.all_servers
    if ctx.facts.model is None and not any(
        cfg.get("--chat-template") or cfg.get("--chat-template-file") for cfg in servers
    ):
        return  # no template to render (and its machinery is not loaded)
    from llamafleet.chat_template import classify, template_of

    for cfg in servers:
        source = template_of(cfg, ctx.facts, ctx.referenced)
        if source is None:
            continue
        result = classify(source.text)
        if result.kind in kinds:
            yield cfg, source, result


@rule("LS021")
def chat_template_rejects_late_system(ctx: Context) -> Iterator[Hit]:
    for cfg, source, result in _late_system(ctx, ("raises",)):
        yield Hit(cfg.path, source.line, {"origin": source.origin, "exception": result.detail})


@rule("LS022")
def chat_template_drops_late_system(ctx: Context) -> Iterator[Hit]:
    for cfg, source, result in _late_system(ctx, ("drops", "moves")):
        if result.kind == "drops":
            detail = (
                "it is left out: the model never sees the agent types and the skills list, and "
                "cache reuse measured with this template overstates (99.8 % for a new session "
                "where a template that renders the message gets 92.1 %)"
            )
        else:
            detail = (
                f"{result.detail}: the model reads the agent list out of order, and cache reuse "
                "measured with this template does not hold for one that renders it in place"
            )
        yield Hit(cfg.path, source.line, {"origin": source.origin, "detail": detail})


@rule("LS023")
def chat_template_unrenderable(ctx: Context) -> Iterator[Hit]:
    for cfg, source, result in _late_system(ctx, ("unrenderable",)):
        yield Hit(cfg.path, source.line, {"origin": source.origin, "reason": result.detail})


@rule("LF003")
def referenced_file_not_read(ctx: Context) -> Iterator[Hit]:
    """Once per server command: the named files its checks need, when the run opens none."""
    if ctx.referenced.enabled or ctx.referenced.complete:
        return
    for cfg in ctx.all_servers:
        named: list[tuple[str, str, int]] = []
        template = cfg.get("--chat-template-file")
        if template is not None and template.value and not template.unknown:
            named.append((f"--chat-template-file {template.value}", "LS021/LS023", template.line))
        key = cfg.get("--api-key-file")
        if key is not None and key.value and not key.unknown and ctx.clients:
            named.append((f"--api-key-file {key.value}", "XC002", key.line))
        if named:
            what = ", ".join(sorted({n[1] for n in named}))
            yield Hit(
                cfg.path,
                named[0][2],
                {
                    "files": "; ".join(n[0] for n in named),
                    "what": f"{what} {'is' if '/' not in what and ',' not in what else 'are'}",
                },
            )

"""GPU memory planner for llama-server: what a model + server flags need, per component.

Pure arithmetic over GGUF metadata (:class:`~llamafleet.gguf_meta.ModelFacts`) and a parsed
llama-server command line (:class:`~llamafleet.argv.ServerConfig`). Every formula follows
llama.cpp's own allocation code; the page ``docs/planner.md`` walks through each one with the
seed guide's logged numbers (Qwen3.6-35B-A3B, ``-c 204800 -ctk turbo3 -ctv turbo3 -ngl 99``).

Components (MiB = 2**20 bytes, as llama.cpp prints them):

* weights on GPU / host: the GGUF tensor bytes by placement (``token_embd`` always on the host;
  ``-ngl``, ``--n-cpu-moe``, ``--cpu-moe`` and ``-ot ...=CPU`` move tensors to the host);
* K and V cache: attention layers x cells x ``ggml_row_size(type, n_head_kv x head_dim)``;
  SWA layers hold only the window; recurrent layers hold none;
* recurrent state: f32 conv + SSM state per recurrent layer per sequence (slot);
* context checkpoints: host RAM, one recurrent-state (+ SWA window) snapshot each, per slot;
* compute: a documented estimate (logits, attention mask, activations, f16 staging of a
  quantized K/V for flash attention, CUDA context).

:func:`estimate` adds up one small function per component (``plan_context``,
``plan_cache_types``, ``weights_split``, ``kv_cache_bytes``, ``recurrent_state_bytes``,
``plan_checkpoints``, ``plan_mmproj``, ``plan_compute``). Slots and context padding are
:mod:`llamafleet.slots`, shared with the server rules. No file is read here: the size of a
``--mmproj`` file comes from the caller (:func:`llamafleet.gguf_meta.mmproj_bytes`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from llamafleet.argv import ServerConfig, parse_argv_list
from llamafleet.errors import InputError
from llamafleet.gguf_meta import GGML_WEIGHT_SIZES as _GGML_WEIGHT_SIZES
from llamafleet.gguf_meta import ModelFacts
from llamafleet.slots import (
    AUTO_SLOTS,
    CTX_PAD,
    SlotLayout,
    context_size,
    pad,
    slot_layout,
    slots,
)

MIB = 1024 * 1024

#: Safety margin kept free on the GPU. llama.cpp's own ``--fit`` keeps ``--fit-target``
#: (default 1024 MiB) free per device; the planner uses the same figure so that a plan that
#: "fits" leaves what llama.cpp itself would leave.
DEFAULT_MARGIN_MIB: float = 1024.0

#: CUDA context, cuBLAS workspace and the memory pool's baseline: not listed in llama.cpp's
#: buffer lines. Calibrated on the seed's observed total (RTX 4080 SUPER, CUDA 12.8: 14860 MiB
#: used vs 13667 MiB of listed buffers, minus the estimated compute buffer); typically 300-500.
CUDA_OVERHEAD_MIB: float = 400.0

#: llama-server defaults (common/common.h, tools/server).
DEFAULT_N_PARALLEL_AUTO = AUTO_SLOTS
DEFAULT_CTX_CHECKPOINTS = 32
DEFAULT_N_BATCH = 2048
DEFAULT_N_UBATCH = 512
DEFAULT_CACHE_RAM_MIB = 8192
TURBO_BLOCK = 128  # TurboQuant blocks; head_dim is zero-padded to a multiple of this

#: KV cache types: (values per block, bytes per block). Upstream ggml types (their sizes are the
#: weight table's, ggml-common.h); TurboQuant fork types (blocks of 128): turbo2 2.125, turbo3
#: 3.125, turbo4 4.25 bit/value (the fork's 2026-05 head; later heads use 4.125 for turbo4), tq5_0
#: 5.125, tq6_0 6.125 (K only, CUDA only: 164/196-byte rows for head_dim 256).
KV_TYPES: dict[str, tuple[int, int]] = {
    **{
        t.lower(): _GGML_WEIGHT_SIZES[t]
        for t in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL")
    },
    "turbo2": (TURBO_BLOCK, 34),
    "turbo3": (TURBO_BLOCK, 50),
    "turbo4": (TURBO_BLOCK, 68),
    "tq5_0": (TURBO_BLOCK, 82),
    "tq6_0": (TURBO_BLOCK, 98),
}
TURBO_KV_TYPES = frozenset({"turbo2", "turbo3", "turbo4", "tq5_0", "tq6_0"})
UNQUANTIZED_KV_TYPES = frozenset({"f32", "f16", "bf16"})
#: Query/KV head ratio from which the fork (2026-05 head) rewrites a symmetric turbo K to q8_0.
#: The fork computes it from layer 0 only, ``n_head(0) / n_head_kv(0)`` in integers (1 when
#: layer 0 has no KV heads), and only for turbo2/turbo3/turbo4 (src/llama-kv-cache.cpp).
TURBO_AUTO_ASYMMETRIC_RATIO = 6
TURBO_AUTO_ASYMMETRIC_TYPES = frozenset({"turbo2", "turbo3", "turbo4"})
#: "Boundary V": with a turbo2 V cache on a model of at least this many layers (all layers,
#: recurrent ones included), the fork (2026-05 head) keeps V of the first 2 and the last 2
#: layers in q8_0 (``TURBO_LAYER_ADAPTIVE`` mode 7, auto-enabled; ``TURBO_LAYER_ADAPTIVE=0``
#: turns it off). The log still labels the cache ``V (turbo2)``.
TURBO_BOUNDARY_V_MIN_LAYERS = 8
TURBO_BOUNDARY_V_LAYERS = 2
TURBO_BOUNDARY_V_TYPE = "q8_0"

#: Architectures whose layers are all recurrent (no KV cache at all).
_PURE_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: Architectures with a fixed SWA pattern in llama-model.cpp (every n-th layer is full).
_SWA_PATTERN_DEFAULTS = {
    "gemma2": 2,
    "gemma3": 6,
    "gemma3n": 5,
    "cohere2": 4,
    "gpt-oss": 2,
    "exaone4": 4,
    "llama4": 4,
}
_EXPERT_RE = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch)?exps")
_BLK_RE = re.compile(r"^blk\.(\d+)\.")


class PlanError(InputError):
    """The model metadata or the flags cannot be planned (missing keys, bad values)."""


# ----------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Geometry:
    """What the arithmetic needs from a model's metadata, per layer where it varies."""

    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int | None
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_k: int
    head_v: int
    attention: tuple[bool, ...]  # layer has a KV cache
    swa: tuple[bool, ...]  # ... limited to the sliding window
    recurrent: tuple[bool, ...]  # layer has recurrent state
    n_swa: int
    rs_bytes_per_layer: int  # recurrent state bytes per layer per sequence (f32)
    ffn_per_token: int  # FFN width one token touches (experts used x expert width + shared)
    ssm_width: int
    notes: tuple[str, ...] = ()
    rs_conv_bytes_per_layer: int = 0  # the conv (R) part of rs_bytes_per_layer

    @property
    def n_attention_layers(self) -> int:
        return sum(self.attention)

    @property
    def n_swa_layers(self) -> int:
        return sum(map(operator.and_, self.attention, self.swa))

    @property
    def n_recurrent_layers(self) -> int:
        return sum(self.recurrent)

    @property
    def recurrent_bytes_per_seq(self) -> int:
        return self.rs_bytes_per_layer * self.n_recurrent_layers

    @property
    def turbo_gqa_ratio(self) -> int:
        """The head ratio the fork's auto-asymmetric rule looks at: layer 0's, in integers."""
        kv0 = self.n_head_kv[0] if self.n_head_kv else 0
        return self.n_head[0] // kv0 if kv0 > 0 else 1

    @property
    def max_gqa_ratio(self) -> float:
        ratios = [
            h / kv
            for h, kv, a in zip(self.n_head, self.n_head_kv, self.attention, strict=True)
            if a and kv > 0
        ]
        return max(ratios, default=1.0)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _per_layer(model: ModelFacts, key: str, n_layer: int, default: int | None) -> list[int]:
    """A key that is a scalar or a per-layer array (e.g. head_count_kv of hybrid models)."""
    v = model.arch_key(key)
    if isinstance(v, list) and v:
        vals = [_int(x) for x in v]
        if any(x is None for x in vals):
            raise PlanError(f"{model.name}: {model.architecture}.{key} is not an integer array")
        out = [int(x) for x in vals if x is not None]
        return (out + [out[-1]] * n_layer)[:n_layer]
    iv = _int(v)
    if iv is None:
        if default is None:
            raise PlanError(
                f"{model.path or model.name}: metadata key {model.architecture}.{key} is missing"
            )
        iv = default
    return [iv] * n_layer


def geometry(model: ModelFacts) -> Geometry:
    """Read layer counts, head sizes, layer kinds and recurrent-state sizes from metadata."""
    arch = model.architecture
    where = model.path or model.name
    if not arch:
        raise PlanError(f"{where}: metadata has no general.architecture")
    n_layer = _int(model.arch_key("block_count"))
    n_embd = _int(model.arch_key("embedding_length"))
    if not n_layer or not n_embd:
        raise PlanError(f"{where}: metadata lacks {arch}.block_count / {arch}.embedding_length")
    n_head = _per_layer(model, "attention.head_count", n_layer, 0)
    n_head_kv = _per_layer(model, "attention.head_count_kv", n_layer, max(n_head))
    n_head0 = max(n_head) or 1
    recurrent, attention, kind_notes = _layer_kinds(model, arch, n_layer, n_head_kv)
    n_swa, swa, swa_notes = _swa_layers(model, arch, n_layer)
    rs_bytes, rs_conv_bytes, ssm_width = _recurrent_state(model, n_embd)
    notes = [*kind_notes, *swa_notes]
    if any(recurrent) and rs_bytes == 0:
        notes.append(
            f"{arch}: recurrent layers but no ssm.*/wkv.* sizes in the metadata; "
            "recurrent state counted as 0"
        )
    if arch in ("deepseek2", "glm4moe_lite", "kimi_k2") or model.arch_key("attention.kv_lora_rank"):
        notes.append(
            f"{arch}: MLA attention is not modelled; K/V use key_length/value_length "
            "(an over-estimate)"
        )
    return Geometry(
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=_n_vocab(model),
        n_ctx_train=model.context_length,
        n_head=tuple(n_head),
        n_head_kv=tuple(n_head_kv),
        head_k=_int(model.arch_key("attention.key_length")) or n_embd // n_head0,
        head_v=_int(model.arch_key("attention.value_length")) or n_embd // n_head0,
        attention=attention,
        swa=swa,
        recurrent=recurrent,
        n_swa=n_swa,
        rs_bytes_per_layer=rs_bytes,
        ffn_per_token=_ffn_per_token(model, n_embd),
        ssm_width=ssm_width,
        notes=tuple(notes),
        rs_conv_bytes_per_layer=rs_conv_bytes,
    )


def _n_vocab(model: ModelFacts) -> int:
    """Vocabulary size: the metadata key, else the embedding's shape, else the token list."""
    n_vocab = _int(model.arch_key("vocab_size")) or 0
    if n_vocab:
        return n_vocab
    for t in model.tensors:
        if t.get("name") in ("token_embd.weight", "output.weight") and t.get("shape"):
            return int(t["shape"][-1])
    toks = model.metadata.get("tokenizer.ggml.tokens")
    if isinstance(toks, dict):
        return int(toks.get("array_length") or 0)
    if isinstance(toks, list):
        return len(toks)
    return 0


def _layer_kinds(
    model: ModelFacts, arch: str, n_layer: int, n_head_kv: list[int]
) -> tuple[tuple[bool, ...], tuple[bool, ...], tuple[str, ...]]:
    """(recurrent layers as llama.cpp's recurrent_layer_arr, layers with a KV cache, notes)."""
    if arch in _PURE_RECURRENT or arch.startswith("rwkv"):
        return (True,) * n_layer, (False,) * n_layer, ()
    attention = tuple(kv > 0 for kv in n_head_kv)
    if not model.is_recurrent:
        return (False,) * n_layer, attention, ()
    interval = _int(model.arch_key("full_attention_interval"))
    if interval:
        recurrent = tuple((il + 1) % interval != 0 for il in range(n_layer))
        return recurrent, tuple(not r for r in recurrent), ()
    if any(kv == 0 for kv in n_head_kv):
        return tuple(kv == 0 for kv in n_head_kv), attention, ()
    note = (
        f"{arch}: layer kinds unknown; counted every layer as both attention and "
        "recurrent (conservative)"
    )
    return (True,) * n_layer, attention, (note,)


def _swa_layers(
    model: ModelFacts, arch: str, n_layer: int
) -> tuple[int, tuple[bool, ...], tuple[str, ...]]:
    """(sliding window, which layers use it, notes)."""
    n_swa = _int(model.arch_key("attention.sliding_window")) or 0
    none = (False,) * n_layer
    if n_swa <= 0:
        return n_swa, none, ()
    pattern = model.arch_key("attention.sliding_window_pattern")
    if isinstance(pattern, list) and pattern:
        flags = [bool(x) for x in pattern]
        return n_swa, tuple((flags * (n_layer // len(flags) + 1))[:n_layer]), ()
    p = _int(pattern) or _SWA_PATTERN_DEFAULTS.get(arch)
    if p:
        return n_swa, tuple(il % p < p - 1 for il in range(n_layer)), ()
    note = (
        f"{arch}: sliding_window set but no layer pattern known; counted "
        "every layer as full attention (conservative)"
    )
    return n_swa, none, (note,)


def _recurrent_state(model: ModelFacts, n_embd: int) -> tuple[int, int, int]:
    """(recurrent state bytes per layer per sequence, the conv part of it, SSM width): f32
    conv (R) and SSM (S) state, llama_hparams::n_embd_r / n_embd_s."""
    d_conv = _int(model.arch_key("ssm.conv_kernel")) or 0
    d_inner = _int(model.arch_key("ssm.inner_size")) or 0
    d_state = _int(model.arch_key("ssm.state_size")) or 0
    n_group = _int(model.arch_key("ssm.group_count")) or 0
    wkv = _int(model.arch_key("wkv.head_size")) or 0
    shortconv = _int(model.arch_key("shortconv.l_cache")) or 0
    if wkv:
        shift = _int(model.arch_key("token_shift_count")) or 2
        n_r, n_s = shift * n_embd, n_embd * wkv
    elif shortconv:
        n_r, n_s = n_embd * (shortconv - 1), 0
    else:
        n_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        n_s = d_state * d_inner
    return 4 * (n_r + n_s), 4 * n_r, d_inner + 2 * n_group * d_state


def _ffn_per_token(model: ModelFacts, n_embd: int) -> int:
    """FFN width one token touches: experts used x expert width + shared, else the FFN."""
    n_expert_used = _int(model.arch_key("expert_used_count")) or 0
    n_ff_exp = _int(model.arch_key("expert_feed_forward_length")) or 0
    n_ff_sh = _int(model.arch_key("expert_shared_feed_forward_length")) or 0
    ff = model.arch_key("feed_forward_length")
    n_ff = max(ff) if isinstance(ff, list) and ff else (_int(ff) or 4 * n_embd)
    return n_expert_used * n_ff_exp + n_ff_sh if n_expert_used and n_ff_exp else n_ff


# ----------------------------------------------------------------------------- KV arithmetic


def kv_bits(cache_type: str) -> float:
    """Bits per stored value of a KV cache type (without head padding)."""
    blk, size = _kv_type(cache_type)
    return size * 8 / blk


def _kv_type(cache_type: str) -> tuple[int, int]:
    try:
        return KV_TYPES[cache_type.lower()]
    except KeyError:
        raise PlanError(
            f"unknown KV cache type {cache_type!r} (known: {', '.join(KV_TYPES)})"
        ) from None


def layer_cache_type_v(cache_type_v: str, il: int, n_layer: int) -> str:
    """The V cache type the fork gives layer ``il`` when ``-ctv cache_type_v`` is asked for.

    Only a turbo2 V changes: "Boundary V" (see ``TURBO_BOUNDARY_V_MIN_LAYERS``) stores the first
    two and the last two layers in q8_0 on models with at least 8 layers.
    """
    if (
        cache_type_v.lower() == "turbo2"
        and n_layer >= TURBO_BOUNDARY_V_MIN_LAYERS
        and (il < TURBO_BOUNDARY_V_LAYERS or il >= n_layer - TURBO_BOUNDARY_V_LAYERS)
    ):
        return TURBO_BOUNDARY_V_TYPE
    return cache_type_v


def kv_row_bytes(cache_type: str, n_head_kv: int, head_dim: int) -> int:
    """Bytes of one token's K (or V) row in one layer: ``ggml_row_size`` of the type.

    TurboQuant types work on blocks of 128 values inside each head, so a head_dim that is not a
    multiple of 128 is zero-padded (``turbo zero-padding K head_dim 64 -> 128``).
    """
    blk, size = _kv_type(cache_type)
    if cache_type.lower() in TURBO_KV_TYPES:
        head_dim = -(-head_dim // TURBO_BLOCK) * TURBO_BLOCK
    n = n_head_kv * head_dim
    return -(-n // blk) * size


@dataclass
class KVBytes:
    """K and V cache bytes over all layers, and the part of them kept on the host."""

    k: int
    v: int
    host: int = 0


def kv_cache_bytes(
    geo: Geometry,
    type_k: str,
    type_v: str,
    *,
    cells: int,
    swa_cells: int,
    first_gpu_layer: int = 0,
) -> KVBytes:
    """K and V bytes of the attention layers: ``cells`` cells per full-attention layer and
    ``swa_cells`` per sliding-window layer (all streams together); the layers below
    ``first_gpu_layer`` keep theirs on the host. V follows the fork's per-layer rule
    (:func:`layer_cache_type_v`). The one K/V loop of the planner: the cache itself, the SWA part
    of a context checkpoint and the alternative K of the auto-asymmetric note all use it."""
    k = v = host = 0
    for il in range(geo.n_layer):
        if not geo.attention[il]:
            continue
        n = swa_cells if geo.swa[il] else cells
        kb = kv_row_bytes(type_k, geo.n_head_kv[il], geo.head_k) * n
        vt = layer_cache_type_v(type_v, il, geo.n_layer)
        vb = kv_row_bytes(vt, geo.n_head_kv[il], geo.head_v) * n
        k += kb
        v += vb
        if il < first_gpu_layer:
            host += kb + vb
    return KVBytes(k, v, host)


# ----------------------------------------------------------------------------- weights


def tensor_bytes(t: dict[str, Any]) -> int:
    """A tensor's data size: its ``bytes`` field, else computed from type and shape."""
    b = t.get("bytes")
    if isinstance(b, int) and b >= 0:
        return b
    ttype = str(t.get("type", "")).upper()
    shape = [int(x) for x in t.get("shape") or []]
    if ttype not in _GGML_WEIGHT_SIZES or not shape:
        raise PlanError(f"tensor {t.get('name')!r}: no 'bytes' and unknown type {ttype!r}")
    blk, size = _GGML_WEIGHT_SIZES[ttype]
    return pad(shape[0], blk) // blk * size * math.prod(shape[1:])


@dataclass(frozen=True)
class Offload:
    """Where tensors go: ``-ngl``, ``--n-cpu-moe``/``--cpu-moe`` and ``-ot`` host patterns."""

    n_gpu_layers: int | None = None  # None/negative: all layers and the output layer
    n_cpu_moe: int = 0  # experts of the first N layers on the host
    cpu_moe: bool = False  # all experts on the host
    host_patterns: tuple[str, ...] = ()  # -ot regexes whose buffer type is CPU
    gpu_patterns: tuple[str, ...] = ()  # -ot regexes pinned to a GPU buffer


def _placement(
    name: str, n_layer: int, i_gpu_start: int, output_on_gpu: bool, off: Offload
) -> bool:
    """True when a tensor is stored on the GPU."""
    for pat in off.gpu_patterns:
        if re.search(pat, name):
            return True
    for pat in off.host_patterns:
        if re.search(pat, name):
            return False
    m = _BLK_RE.match(name)
    if m:
        il = int(m.group(1))
        if (off.cpu_moe or il < off.n_cpu_moe) and _EXPERT_RE.search(name):
            return False
        return i_gpu_start <= il < n_layer or (il >= n_layer and output_on_gpu)
    if name.startswith(("token_embd", "position_embd", "token_types")):
        return False  # the input layer always stays on the host
    return output_on_gpu


@dataclass(frozen=True)
class Weights:
    gpu_bytes: int
    host_bytes: int
    n_gpu_layers: int  # effective, 0..n_layer+1


def weights_split(model: ModelFacts, geo: Geometry, off: Offload) -> Weights:
    n_layer = geo.n_layer
    ngl = (
        n_layer + 1
        if off.n_gpu_layers is None or off.n_gpu_layers < 0
        else min(off.n_gpu_layers, n_layer + 1)
    )
    i_gpu_start = max(n_layer - ngl, 0)
    output_on_gpu = ngl > n_layer
    gpu = host = 0
    names = set()
    for t in model.tensors:
        name = str(t.get("name", ""))
        names.add(name)
        b = tensor_bytes(t)
        if _placement(name, n_layer, i_gpu_start, output_on_gpu, off):
            gpu += b
        else:
            host += b
    # Tied embeddings: without output.weight llama.cpp loads token_embd a second time as the
    # output matrix, on the output layer's device.
    if "output.weight" not in names and output_on_gpu:
        for t in model.tensors:
            if t.get("name") == "token_embd.weight":
                gpu += tensor_bytes(t)
    return Weights(gpu, host, ngl)


# ----------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    """Memory per component in MiB, plus the settings it was computed for."""

    model: str
    arch: str
    n_ctx: int  # total KV cells (padded), as llama.cpp's n_ctx
    n_ctx_seq: int  # context per slot
    n_parallel: int
    kv_unified: bool
    cache_type_k: str  # effective (after the fork's auto-asymmetric rewrite, if modelled)
    cache_type_v: str
    flash_attn: bool
    n_gpu_layers: int
    n_cpu_moe: int
    cpu_moe: bool
    n_ubatch: int
    weights_gpu_mib: float
    weights_host_mib: float
    kv_k_mib: float
    kv_v_mib: float
    kv_host_mib: float  # part of K+V kept on the host (-nkvo, layers not offloaded)
    recurrent_mib: float
    recurrent_per_slot_mib: float
    recurrent_host_mib: float
    checkpoints_mib: float  # host RAM, worst case
    checkpoint_each_mib: float
    n_checkpoints: int
    mmproj_mib: float
    compute_logits_mib: float
    compute_mask_mib: float
    compute_activations_mib: float
    compute_kq_mib: float
    compute_fa_staging_mib: float
    cuda_overhead_mib: float
    compute_mib: float  # all of the compute_* above plus the CUDA overhead
    total_gpu_mib: float
    cache_ram_mib: float  # --cache-ram limit (host); -1 = no limit
    total_host_mib: float
    n_attention_layers: int
    n_swa_layers: int
    n_recurrent_layers: int
    turbo_auto_asymmetric: bool  # the fork would rewrite K to q8_0 (see notes)
    notes: list[str] = field(default_factory=list)
    vram_mib: float | None = None
    margin_mib: float = DEFAULT_MARGIN_MIB
    fits: bool | None = None

    def as_dict(self) -> dict[str, float | int | bool | str]:
        out: dict[str, float | int | bool | str] = {}
        for k, v in self.__dict__.items():
            if k == "notes":
                out[k] = "; ".join(self.notes)
            elif v is None:
                continue
            elif isinstance(v, float):
                out[k] = round(v, 3)
            else:
                out[k] = v
        return out

    @property
    def free_mib(self) -> float | None:
        return None if self.vram_mib is None else self.vram_mib - self.total_gpu_mib


def fits(plan: Plan, vram_mib: float, margin_mib: float = DEFAULT_MARGIN_MIB) -> bool:
    """Whether the plan's GPU total stays below ``vram_mib - margin_mib``."""
    return plan.total_gpu_mib <= vram_mib - margin_mib


def with_vram(plan: Plan, vram_mib: float, margin_mib: float = DEFAULT_MARGIN_MIB) -> Plan:
    """The plan with ``vram_mib``, ``margin_mib`` and ``fits`` filled in."""
    return replace(
        plan,
        vram_mib=float(vram_mib),
        margin_mib=float(margin_mib),
        fits=fits(plan, vram_mib, margin_mib),
    )


def _gpu_layers(cfg: ServerConfig) -> int | None:
    v = cfg.value("--gpu-layers")
    if v is None or v.strip().lower() in ("auto", "all"):
        return None
    try:
        return int(v)
    except ValueError:
        raise PlanError(f"{cfg.path}: -ngl {v!r} is not an integer, 'auto' or 'all'") from None


def offload_from_config(cfg: ServerConfig) -> Offload:
    host: list[str] = []
    gpu: list[str] = []
    for opt in cfg.options:
        if opt.canonical != "--override-tensor" or not opt.value or opt.negated:
            continue
        for item in opt.value.split(","):
            pat, eq, buft = item.partition("=")
            if not eq:
                continue
            (host if buft.strip().upper().startswith("CPU") else gpu).append(pat.strip())
    return Offload(
        n_gpu_layers=_gpu_layers(cfg),
        n_cpu_moe=max(cfg.int_value("--n-cpu-moe") or 0, 0),
        cpu_moe=cfg.has("--cpu-moe"),
        host_patterns=tuple(host),
        gpu_patterns=tuple(gpu),
    )


# ----------------------------------------------------------------------------- the sections


@dataclass
class ContextPlan:
    """Slots and context: how ``-c``/``-np``/``--kv-unified`` lay out the KV cells."""

    layout: SlotLayout
    ctx_requested: int  # -c, or the training context
    n_ubatch: int
    notes: tuple[str, ...] = ()


def plan_context(cfg: ServerConfig, geo: Geometry) -> ContextPlan:
    """The :func:`~llamafleet.slots.slot_layout` of the flags; errors name ``cfg.path``."""
    where = cfg.path
    if cfg.int_value("--parallel") == 0:
        raise PlanError(f"{where}: -np 0 is rejected by llama-server (use -1 for auto or N >= 1)")
    n_parallel, unified, _ = slots(cfg)
    notes: list[str] = []
    ctx_req, _ = context_size(cfg, geo.n_ctx_train)
    if ctx_req is None:
        raise PlanError(f"{where}: no -c given and the model has no context_length")
    ctx_flag = cfg.int_value("--ctx-size")
    if ctx_flag is None or ctx_flag <= 0:
        notes.append(
            f"-c not set: llama-server uses the training context {ctx_req}"
            + (" (--fit may shrink it)" if ctx_flag is None else "")
        )
    layout = slot_layout(ctx_req, n_parallel, unified)
    if not unified:
        if layout.n_ctx_seq == 0:
            raise PlanError(f"{where}: -c {ctx_req} split over {n_parallel} slots gives 0")
        if n_parallel > 1:
            notes.append(
                f"--no-kv-unified with {n_parallel} slots: each request gets "
                f"{layout.n_ctx_seq} tokens, not {ctx_req}"
            )
    if geo.n_ctx_train and layout.n_ctx_seq > geo.n_ctx_train:
        notes.append(
            f"slot context {layout.n_ctx_seq} exceeds the training context "
            f"{geo.n_ctx_train}: llama-server caps each slot at it (memory is still "
            "allocated for the full -c)"
        )
    n_batch = cfg.int_value("--batch-size") or DEFAULT_N_BATCH
    n_ubatch = min(cfg.int_value("--ubatch-size") or DEFAULT_N_UBATCH, n_batch)
    return ContextPlan(layout, ctx_req, n_ubatch, tuple(notes))


def swa_cells(geo: Geometry, ctx: ContextPlan, swa_full: bool) -> int:
    """KV cells per stream of an SWA layer (llama-kv-cache-iswa.cpp)."""
    n_ctx_seq = ctx.layout.n_ctx_seq
    if not geo.n_swa or swa_full:
        return n_ctx_seq
    n_seq = ctx.layout.n_parallel if ctx.layout.unified else 1
    return min(n_ctx_seq, pad(geo.n_swa * n_seq + ctx.n_ubatch, CTX_PAD))


@dataclass
class CacheTypes:
    """K/V cache types and flash attention, as the server will run them."""

    k: str  # effective K (after the fork's auto-asymmetric rewrite, when modelled)
    v: str
    v_layers: frozenset[str]  # V types over the attention layers (Boundary V adds q8_0)
    flash_attn: bool
    auto_asymmetric: bool  # the fork would rewrite K to q8_0 (modelled or not: see notes)
    notes: tuple[str, ...] = ()


def plan_cache_types(
    cfg: ServerConfig, geo: Geometry, ctx: ContextPlan, *, auto_asymmetric: bool
) -> CacheTypes:
    """``-ctk``/``-ctv``/``-fa`` and the fork's rules on them (auto-asymmetric K, Boundary V)."""
    type_k = (cfg.value("--cache-type-k") or "f16").lower()
    type_v = (cfg.value("--cache-type-v") or "f16").lower()
    _kv_type(type_k)
    _kv_type(type_v)
    flash_attn, notes = _flash_attn(cfg, type_k, type_v)
    if type_v in ("tq5_0", "tq6_0"):
        notes.append(f"{type_v} is a K-only TurboQuant type; the fork rejects it for V")
    rewrites = (
        type_k == type_v
        and type_k in TURBO_AUTO_ASYMMETRIC_TYPES
        and geo.turbo_gqa_ratio >= TURBO_AUTO_ASYMMETRIC_RATIO
        and geo.n_attention_layers > 0
    )
    eff_k = "q8_0" if rewrites and auto_asymmetric else type_k
    if rewrites:
        notes.append(_auto_asymmetric_note(cfg, geo, ctx, type_k, modelled=auto_asymmetric))
    notes += _head_dim_notes(geo, eff_k, type_v)
    v_layers = frozenset(
        layer_cache_type_v(type_v, il, geo.n_layer)
        for il in range(geo.n_layer)
        if geo.attention[il]
    )
    if len(v_layers) > 1:
        notes.append(_boundary_v_note(geo, type_v))
    return CacheTypes(eff_k, type_v, v_layers, flash_attn, rewrites, tuple(notes))


def _flash_attn(cfg: ServerConfig, type_k: str, type_v: str) -> tuple[bool, list[str]]:
    """Whether flash attention runs (auto: on for CUDA builds that support the head size)."""
    fa_flag = (cfg.value("--flash-attn") or "auto").lower()
    if fa_flag not in ("off", "0", "false", "disabled"):
        return True, []
    if type_k in TURBO_KV_TYPES or type_v in TURBO_KV_TYPES:
        return True, ["turbo cache types switch flash attention on (-fa off is overridden)"]
    if type_v not in UNQUANTIZED_KV_TYPES:
        return False, [f"-fa off with a quantized V cache ({type_v}) is refused by llama.cpp"]
    return False, []


def _auto_asymmetric_note(
    cfg: ServerConfig, geo: Geometry, ctx: ContextPlan, type_k: str, *, modelled: bool
) -> str:
    head = f"symmetric {type_k} K with head ratio {geo.turbo_gqa_ratio} >= 6: the fork's 2026-05 "
    if modelled:
        return head + "build rewrites K to q8_0 (TURBO_AUTO_ASYMMETRIC); modelled as q8_0"
    n_stream = ctx.layout.n_stream
    alt = kv_cache_bytes(
        geo,
        "q8_0",
        "q8_0",
        cells=ctx.layout.n_ctx_seq * n_stream,
        swa_cells=swa_cells(geo, ctx, cfg.has("--swa-full")) * n_stream,
    ).k
    return head + (
        f"build silently uses q8_0 K instead (K {alt / MIB:.2f} MiB; TURBO_AUTO_ASYMMETRIC=0 "
        f"keeps {type_k}); planned as the seed's older build"
    )


def _head_dim_notes(geo: Geometry, type_k: str, type_v: str) -> list[str]:
    notes = []
    for t, which, hd in ((type_k, "K", geo.head_k), (type_v, "V", geo.head_v)):
        blk = _kv_type(t)[0]
        if t in TURBO_KV_TYPES and hd % TURBO_BLOCK:
            notes.append(
                f"{which} head_dim {hd} is zero-padded to {pad(hd, TURBO_BLOCK)} for "
                f"{t}: the saving shrinks"
            )
        elif t not in TURBO_KV_TYPES and blk > 1 and (hd % blk):
            notes.append(
                f"{which} head_dim {hd} is not a multiple of {blk}: llama.cpp cannot "
                f"use {t} for this model"
            )
    return notes


def _boundary_v_note(geo: Geometry, type_v: str) -> str:
    n_boundary = sum(
        1
        for il in range(geo.n_layer)
        if geo.attention[il] and layer_cache_type_v(type_v, il, geo.n_layer) != type_v
    )
    return (
        f"{type_v} V on a model with {geo.n_layer} >= {TURBO_BOUNDARY_V_MIN_LAYERS} layers: "
        f"the fork keeps V of the first/last {TURBO_BOUNDARY_V_LAYERS} layers in "
        f"{TURBO_BOUNDARY_V_TYPE} (Boundary V; {n_boundary} of "
        f"{geo.n_attention_layers} attention layers here; TURBO_LAYER_ADAPTIVE=0 turns it off)"
    )


@dataclass
class StateBytes:
    """Recurrent state (one per slot) and the part of it kept on the host."""

    total: int
    host: int


def recurrent_state_bytes(geo: Geometry, n_parallel: int, first_gpu_layer: int) -> StateBytes:
    """Recurrent state of all slots, on the device of its layer."""
    per_layer = geo.rs_bytes_per_layer * max(1, n_parallel)
    on_host = sum(geo.recurrent[:first_gpu_layer])
    return StateBytes(per_layer * geo.n_recurrent_layers, per_layer * on_host)


@dataclass
class Checkpoints:
    """Context checkpoints (host RAM): each a snapshot of one sequence's recurrent state and
    SWA window, taken while a prompt is processed; at most ``count`` per slot."""

    count: int
    each: int  # bytes
    total: int  # bytes, worst case


def plan_checkpoints(
    cfg: ServerConfig, geo: Geometry, ctx: ContextPlan, types: CacheTypes, swa_full: bool
) -> Checkpoints:
    n = cfg.int_value("--ctx-checkpoints")
    n = DEFAULT_CTX_CHECKPOINTS if n is None else max(n, 0)
    swa_seq = 0
    if geo.n_swa_layers and not swa_full:
        window = min(ctx.layout.n_ctx_seq, geo.n_swa + ctx.n_ubatch)
        kv = kv_cache_bytes(geo, types.k, types.v, cells=0, swa_cells=window)
        swa_seq = kv.k + kv.v
    each = geo.recurrent_bytes_per_seq + swa_seq
    return Checkpoints(n, each, each * n * ctx.layout.n_parallel)


def plan_mmproj(cfg: ServerConfig, mmproj_bytes: int | None) -> tuple[int, tuple[str, ...]]:
    """GPU bytes of the multimodal projector (its file size, given by the caller) and notes."""
    mmproj = cfg.value("--mmproj")
    if not mmproj:
        return 0, ()
    if cfg.bool_value("--mmproj-offload") is False:
        return 0, ("--no-mmproj-offload: the projector stays on the host",)
    if mmproj_bytes is None:
        return 0, (f"--mmproj {mmproj}: file not readable here; its size is not counted",)
    return mmproj_bytes, ()


@dataclass
class Compute:
    """The compute buffers (an estimate) and the CUDA context, in bytes."""

    logits: int = 0
    mask: int = 0
    kq: int = 0
    activations: int = 0
    fa_staging: int = 0
    cuda_overhead: float = 0
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return (
            self.logits
            + self.mask
            + self.kq
            + self.activations
            + self.fa_staging
            + self.cuda_overhead
        )


def plan_compute(
    geo: Geometry, ctx: ContextPlan, types: CacheTypes, swa: int, n_gpu_layers: int
) -> Compute:
    """Logits, attention mask, KQ (without flash attention), activations and the f16 staging of
    a quantized K/V, for one ubatch; nothing but the note when no layer is on the GPU.
    ``swa``: the cells per stream of an SWA layer."""
    n_ubatch = ctx.n_ubatch
    # the mask spans one slot's cells (with a unified KV cache that is all of them)
    cells = ctx.layout.n_ctx_seq
    mask_elt = 2 if types.flash_attn else 4
    mask = 0
    if geo.n_attention_layers > geo.n_swa_layers:
        mask += cells * pad(n_ubatch, 64) * mask_elt
    if geo.n_swa_layers:
        mask += swa * pad(n_ubatch, 64) * mask_elt
    kq = 0
    notes: tuple[str, ...] = ()
    if not types.flash_attn and geo.n_attention_layers:
        kq = cells * n_ubatch * max(geo.n_head) * 4
        notes = (f"flash attention off: the KQ matrix takes {kq / MIB:.0f} MiB per layer pass",)
    if n_gpu_layers <= 0:
        return Compute(notes=notes)
    q_width = max(geo.n_head) * geo.head_k * 2
    rs_width = 3 * geo.ssm_width if geo.n_recurrent_layers else 0
    acts = n_ubatch * 4 * (4 * geo.n_embd + 2 * q_width + 3 * geo.ffn_per_token + rs_width)
    staging = 0
    if types.flash_attn and geo.n_attention_layers:
        # upstream CUDA flash attention converts a quantized K/V (one layer's view) to f16 in
        # its pool for prompt batches; the fork's turbo kernels read their blocks directly
        for kinds, hd in (({types.k}, geo.head_k), (types.v_layers, geo.head_v)):
            if any(t not in UNQUANTIZED_KV_TYPES and t not in TURBO_KV_TYPES for t in kinds):
                staging += cells * max(geo.n_head_kv) * hd * 2
    return Compute(
        logits=n_ubatch * geo.n_vocab * 4 if n_gpu_layers > geo.n_layer else 0,
        mask=mask,
        kq=kq,
        activations=acts,
        fa_staging=staging,
        cuda_overhead=CUDA_OVERHEAD_MIB * MIB,
        notes=notes,
    )


# ----------------------------------------------------------------------------- the estimate


def estimate(
    model: ModelFacts,
    cfg: ServerConfig,
    *,
    auto_asymmetric: bool = False,
    geo: Geometry | None = None,
    weights: Weights | None = None,
    mmproj_bytes: int | None = None,
) -> Plan:
    """Memory needed by llama-server for ``model`` started with the flags in ``cfg``.

    ``auto_asymmetric``: model the TurboQuant fork's 2026-05 behaviour that rewrites a symmetric
    turbo K to q8_0 when the query/KV head ratio is >= 6 (``TURBO_AUTO_ASYMMETRIC``). Off by
    default: the seed guide's build honoured turbo K. Either way the plan carries a note.
    ``geo``/``weights`` let callers (``suggest``) reuse work that does not depend on ``cfg``.
    ``mmproj_bytes``: the size of the ``--mmproj`` file, looked up by the caller
    (:func:`llamafleet.gguf_meta.mmproj_bytes`); None: not known, not counted (a note says so).
    """
    geo = geo or geometry(model)
    ctx = plan_context(cfg, geo)
    types = plan_cache_types(cfg, geo, ctx, auto_asymmetric=auto_asymmetric)
    off = offload_from_config(cfg)
    w = weights or weights_split(model, geo, off)
    first_gpu_layer = max(geo.n_layer - w.n_gpu_layers, 0)
    swa_full = cfg.has("--swa-full")
    swa = swa_cells(geo, ctx, swa_full)
    n_stream = ctx.layout.n_stream
    kv_offload = cfg.bool_value("--kv-offload") is not False
    kv = kv_cache_bytes(
        geo,
        types.k,
        types.v,
        cells=ctx.layout.n_ctx_seq * n_stream,
        swa_cells=swa * n_stream,
        first_gpu_layer=first_gpu_layer if kv_offload else geo.n_layer,
    )
    rs = recurrent_state_bytes(geo, ctx.layout.n_parallel, first_gpu_layer)
    ckpt = plan_checkpoints(cfg, geo, ctx, types, swa_full)
    mmproj, mmproj_notes = plan_mmproj(cfg, mmproj_bytes)
    compute = plan_compute(geo, ctx, types, swa, w.n_gpu_layers)
    cache_ram = cfg.int_value("--cache-ram")
    cache_ram = DEFAULT_CACHE_RAM_MIB if cache_ram is None else cache_ram
    notes = [*geo.notes, *ctx.notes, *types.notes]
    if geo.n_swa_layers and swa_full:
        notes.append("--swa-full: SWA layers hold the full context")
    notes += [*mmproj_notes, *compute.notes]
    if cache_ram < 0:
        notes.append(
            "--cache-ram -1: no limit upstream (half of free RAM in the fork); not "
            "counted in total_host_mib"
        )
    if off.n_gpu_layers is None and not (off.cpu_moe or off.n_cpu_moe or off.host_patterns):
        notes.append("-ngl not set: planned with every layer on the GPU (--fit may move some)")
    total_gpu = (
        w.gpu_bytes + (kv.k + kv.v - kv.host) + (rs.total - rs.host) + mmproj + compute.total
    )
    total_host = w.host_bytes + kv.host + rs.host + ckpt.total + max(cache_ram, 0) * MIB
    return Plan(
        model=model.name,
        arch=geo.arch,
        n_ctx=ctx.layout.n_ctx,
        n_ctx_seq=ctx.layout.n_ctx_seq,
        n_parallel=ctx.layout.n_parallel,
        kv_unified=ctx.layout.unified,
        cache_type_k=types.k,
        cache_type_v=types.v,
        flash_attn=types.flash_attn,
        n_gpu_layers=w.n_gpu_layers,
        n_cpu_moe=off.n_cpu_moe,
        cpu_moe=off.cpu_moe,
        n_ubatch=ctx.n_ubatch,
        weights_gpu_mib=w.gpu_bytes / MIB,
        weights_host_mib=w.host_bytes / MIB,
        kv_k_mib=kv.k / MIB,
        kv_v_mib=kv.v / MIB,
        kv_host_mib=kv.host / MIB,
        recurrent_mib=rs.total / MIB,
        recurrent_per_slot_mib=geo.recurrent_bytes_per_seq / MIB,
        recurrent_host_mib=rs.host / MIB,
        checkpoints_mib=ckpt.total / MIB,
        checkpoint_each_mib=ckpt.each / MIB,
        n_checkpoints=ckpt.count,
        mmproj_mib=mmproj / MIB,
        compute_logits_mib=compute.logits / MIB,
        compute_mask_mib=compute.mask / MIB,
        compute_activations_mib=compute.activations / MIB,
        compute_kq_mib=compute.kq / MIB,
        compute_fa_staging_mib=compute.fa_staging / MIB,
        cuda_overhead_mib=compute.cuda_overhead / MIB,
        compute_mib=compute.total / MIB,
        total_gpu_mib=total_gpu / MIB,
        cache_ram_mib=float(cache_ram),
        total_host_mib=total_host / MIB,
        n_attention_layers=geo.n_attention_layers,
        n_swa_layers=geo.n_swa_layers,
        n_recurrent_layers=geo.n_recurrent_layers,
        turbo_auto_asymmetric=types.auto_asymmetric,
        notes=notes,
    )


def estimate_argv(model: ModelFacts, argv: Sequence[str], **kw: Any) -> Plan:
    """:func:`estimate` for a plain list of llama-server flags."""
    return estimate(model, parse_argv_list(list(argv)), **kw)


# ----------------------------------------------------------------------------- suggest

#: (K, V) pairs from best quality to cheapest. Turbo K is left out by default: the fork warns
#: against it and its 2026-05 build rewrites a symmetric turbo K to q8_0 on large-GQA models.
KV_CHOICES_TURBO: tuple[tuple[str, str], ...] = (
    ("f16", "f16"),
    ("q8_0", "q8_0"),
    ("q8_0", "turbo4"),
    ("q8_0", "turbo3"),
    ("q8_0", "turbo2"),
)
KV_CHOICES_UPSTREAM: tuple[tuple[str, str], ...] = (
    ("f16", "f16"),
    ("q8_0", "q8_0"),
    ("q8_0", "q4_0"),
    ("q4_0", "q4_0"),
)
#: Typical memory (MiB, as nvidia-smi reports it) of common GPU sizes, for the docs table.
GPU_SIZES_MIB: dict[str, float] = {
    "8 GB": 8188.0,
    "12 GB": 12282.0,
    "16 GB": 16376.0,
    "24 GB": 24564.0,
    "80 GB": 81559.0,
}
CTX_STEP = 16384
#: Context a suggestion aims for unless told: Claude Code's 200K-token window (200 x 1024).
DEFAULT_WANT_CTX = 204800


@dataclass
class Suggestion:
    """One proposed server configuration and its plan (``plan.fits`` is set)."""

    ctx: int
    cache_type_k: str
    cache_type_v: str
    n_gpu_layers: int | None  # None = all (printed as -ngl 99)
    n_cpu_moe: int
    cpu_moe: bool
    n_parallel: int  # -1 = auto (4 slots, unified KV)
    plan: Plan
    notes: list[str] = field(default_factory=list)

    def args(self) -> list[str]:
        out = [
            "-c",
            str(self.ctx),
            "-ctk",
            self.cache_type_k,
            "-ctv",
            self.cache_type_v,
            "-ngl",
            "99" if self.n_gpu_layers is None else str(self.n_gpu_layers),
        ]
        if self.cpu_moe:
            out.append("--cpu-moe")
        elif self.n_cpu_moe:
            out += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if self.n_parallel > 0:
            out += ["-np", str(self.n_parallel)]
        return out

    def as_dict(self) -> dict[str, float | int | bool | str]:
        d: dict[str, float | int | bool | str] = {
            "ctx": self.ctx,
            "cache_type_k": self.cache_type_k,
            "cache_type_v": self.cache_type_v,
            "n_gpu_layers": -1 if self.n_gpu_layers is None else self.n_gpu_layers,
            "n_cpu_moe": self.n_cpu_moe,
            "cpu_moe": self.cpu_moe,
            "n_parallel": self.n_parallel,
            "args": " ".join(self.args()),
            "suggestion_notes": "; ".join(self.notes),
        }
        d.update(self.plan.as_dict())
        return d


def _offload_ladder(geo: Geometry, model: ModelFacts) -> list[Offload]:
    """Offload settings from most to least on the GPU."""
    has_experts = any(_EXPERT_RE.search(str(t.get("name", ""))) for t in model.tensors)
    ladder = [Offload(None)]
    if has_experts:
        ladder += [Offload(None, n_cpu_moe=n) for n in range(1, geo.n_layer)]
        ladder.append(Offload(None, cpu_moe=True))
        base = Offload(None, cpu_moe=True)
    else:
        base = Offload(None)
    # down to one layer: a CPU-only run is not a GPU plan
    ladder += [replace(base, n_gpu_layers=n) for n in range(geo.n_layer, 0, -1)]
    return ladder


#: One configuration tried by :func:`suggest`: (K type, V type, -np).
_Choice = tuple[str, str, int]


@dataclass
class _Search:
    """What one :func:`suggest` call searches over."""

    model: ModelFacts
    geo: Geometry
    vram_mib: float
    margin_mib: float
    choices: tuple[tuple[str, str], ...]  # (K, V) pairs, best first
    slot_choices: tuple[int, ...]
    grid: tuple[int, ...]  # contexts tried, ascending
    extra_args: tuple[str, ...]
    mmproj_bytes: int | None

    @property
    def budget(self) -> float:
        return self.vram_mib - self.margin_mib

    def config(self, ctx: int, choice: _Choice, off: Offload) -> ServerConfig:
        k, v, np_ = choice
        argv = ["-c", str(ctx), "-ctk", k, "-ctv", v, "-np", str(np_)]
        argv += ["-ngl", "99" if off.n_gpu_layers is None else str(off.n_gpu_layers)]
        if off.cpu_moe:
            argv.append("--cpu-moe")
        elif off.n_cpu_moe:
            argv += ["--n-cpu-moe", str(off.n_cpu_moe)]
        return parse_argv_list([*argv, *self.extra_args])

    def plan(self, ctx: int, choice: _Choice, off: Offload, w: Weights) -> Plan:
        cfg = self.config(ctx, choice, off)
        return estimate(self.model, cfg, geo=self.geo, weights=w, mmproj_bytes=self.mmproj_bytes)

    def largest_ctx(self, choice: _Choice, off: Offload, w: Weights) -> int | None:
        """The largest context of the grid that fits (binary search), or None."""

        def ok(i: int) -> bool:
            return self.plan(self.grid[i], choice, off, w).total_gpu_mib <= self.budget

        if not ok(0):
            return None
        lo, hi = 0, len(self.grid) - 1  # ok(lo) holds; find the last index that fits
        if ok(hi):
            lo = hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return self.grid[lo]

    def best_for(self, off: Offload, w: Weights) -> list[Suggestion]:
        """For one offload setting: the best fit of each KV pair, best first."""
        found: list[Suggestion] = []
        for k, v in self.choices:
            for np_ in self.slot_choices:
                ctx = self.largest_ctx((k, v, np_), off, w)
                if ctx is None:
                    continue
                plan = self.plan(ctx, (k, v, np_), off, w)
                plan = with_vram(plan, self.vram_mib, self.margin_mib)
                found.append(
                    Suggestion(ctx, k, v, off.n_gpu_layers, off.n_cpu_moe, off.cpu_moe, np_, plan)
                )
        # largest context first, then the better KV pair, then more slots (list orders)
        kv_rank = {kv: i for i, kv in enumerate(self.choices)}
        np_rank = {n: i for i, n in enumerate(self.slot_choices)}
        found.sort(
            key=lambda s: (-s.ctx, kv_rank[(s.cache_type_k, s.cache_type_v)], np_rank[s.n_parallel])
        )
        # one entry per KV pair: its best slot choice
        seen: set[tuple[str, str]] = set()
        unique: list[Suggestion] = []
        for sg in found:
            if (sg.cache_type_k, sg.cache_type_v) not in seen:
                seen.add((sg.cache_type_k, sg.cache_type_v))
                unique.append(sg)
        return unique


def suggest(
    model: ModelFacts,
    vram_mib: float,
    want_ctx: int | None = None,
    *,
    margin_mib: float = DEFAULT_MARGIN_MIB,
    turbo: bool = True,
    allow_turbo_k: bool = False,
    min_ctx: int = 32768,
    slot_choices: Sequence[int] = (-1, 1),
    extra_args: Sequence[str] = (),
    ctx_step: int = CTX_STEP,
    geo: Geometry | None = None,
    mmproj_bytes: int | None = None,
) -> list[Suggestion]:
    """Propose configurations that fit ``vram_mib`` with ``margin_mib`` free, best first.

    Preference, in order: (1) full GPU offload; (2) the largest context up to ``want_ctx``
    (default 204800 tokens, Claude Code's 200K window, capped at the training context), on a grid
    of ``ctx_step`` tokens plus ``want_ctx`` itself; (3) better KV types before cheaper ones;
    (4) the default 4 auto slots before a single slot. Full offload wins as long as it reaches
    ``min_ctx``; otherwise experts move to the host one layer at a time (MoE models:
    ``--n-cpu-moe``), or layers do (dense models: ``-ngl``), until ``want_ctx`` fits.
    ``turbo``: the build has the TurboQuant types. The list holds the winner first, then the
    best fit for each other KV pair. ``mmproj_bytes``: as for :func:`estimate`.
    """
    geo = geo or geometry(model)
    want = want_ctx or min(geo.n_ctx_train or DEFAULT_WANT_CTX, DEFAULT_WANT_CTX)
    choices = list(KV_CHOICES_TURBO if turbo else KV_CHOICES_UPSTREAM)
    if turbo and allow_turbo_k:
        choices += [("turbo4", "turbo4"), ("turbo3", "turbo3"), ("turbo2", "turbo2")]
    search = _Search(
        model=model,
        geo=geo,
        vram_mib=vram_mib,
        margin_mib=margin_mib,
        choices=tuple(choices),
        slot_choices=tuple(slot_choices),
        grid=tuple(sorted({*range(ctx_step, want, ctx_step), want})),
        extra_args=tuple(extra_args),
        mmproj_bytes=mmproj_bytes,
    )
    target = min(want, max(min_ctx, 0))
    chosen: list[Suggestion] = []
    fallback: list[Suggestion] = []
    for i, off in enumerate(_offload_ladder(geo, model)):
        w = weights_split(model, geo, off)
        if w.gpu_bytes / MIB > search.budget:
            continue
        found = search.best_for(off, w)
        if not found:
            continue
        if not fallback:
            fallback = found
        top = found[0].ctx
        if (i == 0 and top >= target) or top >= want:
            chosen = found
            break
    result = chosen or fallback
    for s in result:
        if s.n_parallel == 1:
            s.notes.append(
                "1 slot: keep --cache-ram > 0 so side requests do not evict the main prompt"
            )
        if s.cache_type_k in TURBO_KV_TYPES or s.cache_type_v in TURBO_KV_TYPES:
            s.notes.append("needs the TurboQuant fork")
    return result


def suggestion_table(
    model: ModelFacts, sizes: dict[str, float] | None = None, want_ctx: int | None = None, **kw: Any
) -> list[tuple[str, Suggestion | None]]:
    """The best suggestion for each GPU size (``GPU_SIZES_MIB`` by default)."""
    geo = geometry(model)
    rows: list[tuple[str, Suggestion | None]] = []
    for label, mib in (sizes or GPU_SIZES_MIB).items():
        found = suggest(model, mib, want_ctx, geo=geo, **kw)
        rows.append((label, found[0] if found else None))
    return rows


def format_table(rows: Iterable[tuple[str, Suggestion | None]]) -> str:
    """A Markdown table of :func:`suggestion_table` rows."""
    lines = [
        "| GPU | VRAM MiB | ctx | -ctk / -ctv | offload | -np | GPU total MiB | free MiB |",
        "|---|---:|---:|---|---|---|---:|---:|",
    ]
    for label, s in rows:
        if s is None:
            lines.append(f"| {label} | | does not fit | | | | | |")
            continue
        p = s.plan
        if s.cpu_moe:
            offl = "-ngl 99 --cpu-moe"
        elif s.n_cpu_moe:
            offl = f"-ngl 99 --n-cpu-moe {s.n_cpu_moe}"
        elif s.n_gpu_layers is not None:
            offl = f"-ngl {s.n_gpu_layers}"
        else:
            offl = "-ngl 99 (all)"
        npd = "auto (4, unified)" if s.n_parallel < 0 else str(s.n_parallel)
        lines.append(
            f"| {label} | {p.vram_mib:.0f} | {s.ctx} | {s.cache_type_k} / {s.cache_type_v} | "
            f"{offl} | {npd} | {p.total_gpu_mib:.0f} | {p.free_mib or 0:.0f} |"
        )
    return "\n".join(lines)

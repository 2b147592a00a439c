"""Slots and context as llama-server resolves them: one place for the planner and the rules.

``-np`` (``--parallel``) is the number of slots: requests served at the same time. Auto (absent,
or negative) is 4 slots sharing one *unified* KV cache, so each request may use all of it; an
explicit ``-np N`` turns the unified cache off unless ``--kv-unified`` is given, and each slot
then gets its own stream of ``n_ctx / N`` cells. llama.cpp pads the context to 256 cells
(``GGML_PAD(n_ctx, 256)`` in ``src/llama-context.cpp``) and, without a unified cache, pads each
slot's share to 256 again and makes the total ``N`` times that.

Used by :func:`llamafleet.planner.estimate` (memory), LS003/LS004 (the server's slots) and XC003
(Claude Code's compaction window against the slot).
"""

from __future__ import annotations

from llamafleet.argv import ServerConfig
from llamafleet.record import Record

#: Slots of an auto ``-np`` (llama-server's default), sharing a unified KV cache.
AUTO_SLOTS = 4
#: llama.cpp pads the context (and, without a unified cache, each slot's share) to this.
CTX_PAD = 256


def pad(n: int, to: int) -> int:
    """``n`` rounded up to a multiple of ``to`` (``GGML_PAD``)."""
    return -(-n // to) * to


def slots(cfg: ServerConfig) -> tuple[int, bool, bool]:
    """(number of slots, KV unified?, -np given explicitly?) as llama-server resolves them."""
    n = cfg.int_value("--parallel")
    explicit = n is not None and n > 0
    slots_n = n if explicit and n is not None else AUTO_SLOTS
    unified = cfg.bool_value("--kv-unified")
    if unified is None:
        unified = not explicit  # on by default only when -np is auto
    return slots_n, unified, explicit


def context_size(cfg: ServerConfig, n_ctx_train: int | None) -> tuple[int | None, str]:
    """Configured context (``-c``; 0 or absent = the model's training context ``n_ctx_train``)
    and how it was found, for messages; (None, "") when neither is known."""
    c = cfg.int_value("--ctx-size")
    if c is not None and c > 0:
        return c, f"-c {c}"
    if n_ctx_train:
        return n_ctx_train, f"the model's training context {n_ctx_train}"
    return None, ""


class SlotLayout(Record):
    """How llama.cpp lays out the KV cells of ``-c`` over the slots: ``n_parallel`` slots,
    ``unified`` (one KV stream shared by all slots), ``n_ctx`` KV cells in all (llama.cpp's
    n_ctx, padded), ``n_ctx_seq`` cells one slot, i.e. one request, may use."""

    _fields = ("n_parallel", "unified", "n_ctx", "n_ctx_seq")

    def __init__(self, n_parallel: int, unified: bool, n_ctx: int, n_ctx_seq: int) -> None:
        self.n_parallel = n_parallel
        self.unified = unified
        self.n_ctx = n_ctx
        self.n_ctx_seq = n_ctx_seq

    @property
    def n_stream(self) -> int:
        """KV streams: one unified stream, else one per slot."""
        return 1 if self.unified else self.n_parallel


def slot_layout(ctx_tokens: int, n_parallel: int, unified: bool) -> SlotLayout:
    """The cells of a context of ``ctx_tokens`` over ``n_parallel`` slots (llama-context.cpp)."""
    n_ctx = pad(ctx_tokens, CTX_PAD)
    if unified:
        return SlotLayout(n_parallel, True, n_ctx, n_ctx)
    per = pad(n_ctx // n_parallel, CTX_PAD)
    return SlotLayout(n_parallel, False, per * n_parallel, per)


class SlotContext(Record):
    """The context one request may use on a server: llama.cpp's ``n_ctx_seq`` (``tokens``), and
    how it follows from the flags, for messages (``detail``)."""

    _fields = ("tokens", "detail")

    def __init__(self, tokens: int, detail: str) -> None:
        self.tokens = tokens
        self.detail = detail


def request_context(cfg: ServerConfig, n_ctx_train: int | None = None) -> SlotContext | None:
    """Tokens one request (one slot) may use: the :func:`slot_layout` of the flags'
    ``n_ctx_seq``, capped at the model's training context ``n_ctx_train`` when it is known
    (upstream llama-server caps a slot there; the TurboQuant fork keeps the larger slot and
    relies on rope scaling). ``-c 0`` or no ``-c`` is the training context (None when it is not
    known)."""
    total, how = context_size(cfg, n_ctx_train)
    if total is None or total <= 0:
        return None
    n, unified, _ = slots(cfg)
    layout = slot_layout(total, n, unified or n <= 1)
    if unified or n <= 1:
        detail = how if n <= 1 else f"{how}, {n} slots sharing a unified KV cache"
    else:
        detail = f"{how} split over {n} slots without a unified KV cache"
    if cfg.int_value("--ctx-size") is None:
        detail += "; --fit may shrink it"
    per = layout.n_ctx_seq
    if n_ctx_train and per > n_ctx_train:
        per = n_ctx_train
        detail += f", capped at the model's training context {n_ctx_train}"
    return SlotContext(per, detail)

"""Read GGUF metadata and the tensor list without loading tensor data (``llamafleet inspect``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llamafleet.errors import InputError

#: Metadata arrays that are large and say nothing about memory: summarised by their length.
_SKIPPED_ARRAYS = (
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.added_tokens",
    "tokenizer.ggml.precompiled_charsmap",
)

#: Architectures whose layers are (partly) recurrent: state per sequence, no KV on those layers.
RECURRENT_ARCHS = frozenset(
    {
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "mamba",
        "mamba2",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
        "jamba",
        "falcon-h1",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "plamo2",
        "kimi_linear",
    }
)


class GGUFError(InputError):
    pass


def inspect_gguf(path: str) -> dict[str, Any]:
    """Return ``{"path", "metadata", "tensors"}`` for a GGUF file (memory-mapped, not loaded)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise GGUFError(f"{path}: cannot read: {exc.strerror}") from exc
    if magic != b"GGUF":
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # the gguf package raises bare ValueError/IndexError on damage
        raise GGUFError(f"{path}: damaged GGUF file: {exc}") from exc
    meta: dict[str, Any] = {}
    for name, fld in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        if name in _SKIPPED_ARRAYS:
            meta[name] = {"array_length": len(fld.data)}
            continue
        try:
            value = fld.contents()
        except Exception:  # unknown value type in a newer file: keep going
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        meta[name] = value
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    return {"path": path, "metadata": meta, "tensors": tensors}


@dataclass
class ModelFacts:
    """What the rules need to know about a model."""

    metadata: dict[str, Any]
    tensors: list[dict[str, Any]] = field(default_factory=list)
    path: str | None = None

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return str(arch) if arch is not None else None

    def arch_key(self, key: str) -> Any:
        arch = self.architecture
        return self.metadata.get(f"{arch}.{key}") if arch else None

    @property
    def context_length(self) -> int | None:
        v = self.arch_key("context_length")
        return int(v) if isinstance(v, (int, float)) else None

    @property
    def is_recurrent(self) -> bool:
        """Hybrid or recurrent: has SSM/linear-attention state, so ``--swa-full`` does nothing."""
        arch = self.architecture or ""
        if arch in RECURRENT_ARCHS or arch.startswith("rwkv"):
            return True
        return any(k.startswith(f"{arch}.ssm.") for k in self.metadata)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path or "model")


def load_model_meta(path: str) -> ModelFacts:
    """Load facts from an ``inspect`` JSON file or directly from a GGUF file."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == b"GGUF":
        data = inspect_gguf(path)
    else:
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise GGUFError(
                    f"{path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); expected the output "
                    "of `llamafleet inspect MODEL.gguf --format json`"
                ) from exc
    return model_from_dict(data, path)


def model_from_dict(data: Any, path: str | None = None) -> ModelFacts:
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        raise GGUFError(
            f"{path or 'model facts'}: expected an object with 'metadata' (and 'tensors'), as "
            "written by `llamafleet inspect MODEL.gguf --format json`"
        )
    tensors = data.get("tensors") or []
    return ModelFacts(metadata=data["metadata"], tensors=list(tensors), path=data.get("path", path))

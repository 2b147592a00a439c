"""Optional facts about the target: the build (``--help``, ``--version``, manifest), the model,
the GPU, CPU and RAM. Every fact is optional; rules that need a missing one stay silent."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from llamafleet.errors import InputError
from llamafleet.flags import HelpFacts, parse_help
from llamafleet.gguf_meta import ModelFacts, load_model_meta, model_from_dict
from llamafleet.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class FactsError(InputError):
    pass


class Facts(Record):
    """What is known about the target; every fact is optional (None: not known)."""

    _fields = (
        "help",
        "version_text",
        "build_number",
        "commit",
        "model",
        "gpu_name",
        "gpu_vram_mib",
        "gpu_cc",
        "cpu_cores",
        "ram_mib",
        "cuda_architectures",
        "backend",
    )

    def __init__(  # noqa: PLR0917 - the fields, in the order they always had
        self,
        help: HelpFacts | None = None,
        version_text: str | None = None,
        build_number: int | None = None,
        commit: str | None = None,
        model: ModelFacts | None = None,
        gpu_name: str | None = None,
        gpu_vram_mib: float | None = None,
        gpu_cc: str | None = None,
        cpu_cores: int | None = None,
        ram_mib: float | None = None,
        cuda_architectures: list[str] | None = None,
        backend: str | None = None,
    ) -> None:
        self.help = help
        self.version_text = version_text
        self.build_number = build_number
        self.commit = commit
        self.model = model
        self.gpu_name = gpu_name
        self.gpu_vram_mib = gpu_vram_mib
        self.gpu_cc = gpu_cc
        self.cpu_cores = cpu_cores
        self.ram_mib = ram_mib
        self.cuda_architectures = cuda_architectures
        self.backend = backend

    def set_version(self, text: str) -> None:
        self.version_text = text
        # "version: 9079 (69d8e4be)" (the fork, older upstream) or
        # "version: 0.5.0-dev (build 1, commit 612d308)" (upstream of 2026-10)
        m = re.search(r"version:\s*(\d+)\s*\(([0-9a-fA-F]+)\)", text) or re.search(
            r"version:\s*\S+\s*\(build\s+(\d+),\s*commit\s+([0-9a-fA-F]+)\)", text
        )
        if m:
            number = int(m.group(1))
            # A build from a source tree without git history reports build 1: unknown.
            self.build_number = number if number > 1 else None
            self.commit = m.group(2)

    def set_help(self, text: str) -> None:
        self.help = parse_help(text)

    @property
    def has_turbo(self) -> bool | None:
        """Whether the build knows TurboQuant cache types; None when unknown."""
        if self.help is None or self.help.cache_types is None:
            return None
        return any(t.startswith("turbo") for t in self.help.cache_types)


def _read(path: str, base: str) -> str:
    """A file the facts name: a regular file of at most 2 MiB (llamafleet.textio)."""
    from llamafleet.textio import read_text

    p = path if os.path.isabs(path) else os.path.join(base, path)
    try:
        return read_text(p)
    except InputError as exc:
        raise FactsError(str(exc)) from exc


def _cc(value: Any) -> str:
    s = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+", s):
        raise FactsError(f"GPU compute capability {s!r}: expected MAJOR.MINOR, e.g. 8.9")
    return s


def apply_manifest(facts: Facts, manifest: Mapping[str, Any], base: str) -> None:
    """Read a build manifest written by the ``llama_cpp`` role."""
    version = manifest.get("version_text") or manifest.get("version_output")
    if version:
        facts.set_version(str(version))
    if manifest.get("help_text"):
        facts.set_help(str(manifest["help_text"]))
    elif manifest.get("help_file"):
        facts.set_help(_read(str(manifest["help_file"]), base))
    archs = manifest.get("cuda_architectures")
    if archs:
        if isinstance(archs, str):
            archs = re.split(r"[;, ]+", archs)
        facts.cuda_architectures = [str(a) for a in archs if str(a)]
    if manifest.get("backend"):
        facts.backend = str(manifest["backend"])
    if manifest.get("build_number") and facts.build_number is None:
        n = int(manifest["build_number"])
        facts.build_number = n if n > 1 else None


def load_facts_file(path: str, facts: Facts | None = None) -> Facts:
    """Load a JSON/YAML facts file, as the roles gather them."""
    facts = facts or Facts()
    base = os.path.dirname(os.path.abspath(path))
    text = _read(path, ".")
    from llamafleet import safeyaml
    from llamafleet.safeyaml import plain

    try:
        data = plain(safeyaml.load(text))
    except safeyaml.YAMLInputError as exc:
        raise FactsError(f"{path}:{exc.line}: {exc}") from exc
    if not isinstance(data, dict):
        raise FactsError(f"{path}: expected a mapping of facts")
    return apply_facts(data, facts, path, base)


KNOWN_FACTS = frozenset(
    {
        "help_text",
        "help_file",
        "version_text",
        "build_manifest",
        "model_meta",
        "model",
        "gguf",
        "gpu",
        "gpu_vram_mib",
        "gpu_cc",
        "cpu_cores",
        "ram_mib",
    }
)


def apply_facts(
    data: Mapping[str, Any],
    facts: Facts | None = None,
    source: str = "<facts>",
    base: str | None = None,
) -> Facts:
    """Apply a mapping of facts (the shape of a facts file) to ``facts``. ``base``: the directory
    relative paths in it are read from; ``None`` (facts handed over in-process, e.g. by an Ansible
    action plugin on the controller): every fact must be inline, a path is refused (it would name
    a file of the managed host, not of the controller)."""
    facts = facts or Facts()
    known = KNOWN_FACTS
    unknown = sorted(set(data) - known)
    if unknown:
        raise FactsError(
            f"{source}: unknown fact(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    inline = base is None
    if base is None:
        _refuse_paths(data, source)
        base = "."
    _apply_build_facts(data, facts, base, inline)
    _apply_model_facts(data, facts, base, source)
    _apply_hardware_facts(data, facts)
    return facts


def _refuse_paths(data: Mapping[str, Any], source: str) -> None:
    """Facts handed over in-process may not name files (of the managed host, not this one)."""
    named = [k for k in ("help_file", "gguf") if data.get(k)]
    named += [k for k in ("build_manifest", "model_meta", "model") if isinstance(data.get(k), str)]
    if named:
        raise FactsError(
            f"{source}: {', '.join(named)} name files; give the facts inline here "
            "(help_text, a build_manifest mapping, a model mapping)"
        )


def _apply_build_facts(data: Mapping[str, Any], facts: Facts, base: str, inline: bool) -> None:
    """The build: its manifest, --help and --version."""
    if data.get("build_manifest"):
        bm = data["build_manifest"]
        if isinstance(bm, str):
            bm_path = bm if os.path.isabs(bm) else os.path.join(base, bm)
            apply_manifest(facts, json.loads(_read(bm_path, ".")), os.path.dirname(bm_path))
        elif isinstance(bm, dict):
            if inline and not bm.get("help_text"):
                # its help_file is a path on the managed host
                bm = {k: v for k, v in bm.items() if k != "help_file"}
            apply_manifest(facts, bm, base)
    if data.get("help_text"):
        facts.set_help(str(data["help_text"]))
    if data.get("help_file"):
        facts.set_help(_read(str(data["help_file"]), base))
    if data.get("version_text"):
        facts.set_version(str(data["version_text"]))


def _apply_model_facts(data: Mapping[str, Any], facts: Facts, base: str, source: str) -> None:
    """The model: inline metadata, or a facts/GGUF file (``gguf`` wins)."""
    model = data.get("model_meta") or data.get("model")
    if isinstance(model, str):
        facts.model = load_model_meta(model if os.path.isabs(model) else os.path.join(base, model))
    elif isinstance(model, dict):
        facts.model = model_from_dict(model, source)
    if data.get("gguf"):
        g = str(data["gguf"])
        facts.model = load_model_meta(g if os.path.isabs(g) else os.path.join(base, g))


def _apply_hardware_facts(data: Mapping[str, Any], facts: Facts) -> None:
    """GPU, CPU and RAM (the flat keys win over the ``gpu`` mapping)."""
    gpu = data.get("gpu") or {}
    if isinstance(gpu, dict):
        facts.gpu_name = gpu.get("name", facts.gpu_name)
        if gpu.get("vram_mib") is not None:
            facts.gpu_vram_mib = float(gpu["vram_mib"])
        if gpu.get("compute_capability") is not None:
            facts.gpu_cc = _cc(gpu["compute_capability"])
    if data.get("gpu_vram_mib") is not None:
        facts.gpu_vram_mib = float(data["gpu_vram_mib"])
    if data.get("gpu_cc") is not None:
        facts.gpu_cc = _cc(data["gpu_cc"])
    if data.get("cpu_cores") is not None:
        facts.cpu_cores = int(data["cpu_cores"])
    if data.get("ram_mib") is not None:
        facts.ram_mib = float(data["ram_mib"])

"""The llama-server option table: names, aliases, negations, value kinds and LLAMA_ARG_* variables.

The table is generated from llama.cpp's ``common/arg.cpp`` (``tools/gen_flags.py``) and extended
with options that older builds and the TurboQuant fork still have (``data/flags_legacy.json``).
Whether a given *build* accepts an option is decided from that build's ``--help`` text (facts).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

#: KV cache types of upstream llama.cpp.
UPSTREAM_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: KV cache types added by the TurboQuant fork (tq5_0/tq6_0: K only, CUDA only).
TURBO_CACHE_TYPES = ("turbo2", "turbo3", "turbo4", "tq5_0", "tq6_0")
ALL_CACHE_TYPES = UPSTREAM_CACHE_TYPES + TURBO_CACHE_TYPES
UNQUANTIZED_CACHE_TYPES = ("f32", "f16", "bf16")

#: Closed value sets of options whose value is a keyword.
CHOICES: dict[str, tuple[str, ...]] = {
    "--flash-attn": ("on", "off", "auto"),
    "--fit": ("on", "off"),
    "--load-mode": ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
    "--cache-type-k": ALL_CACHE_TYPES,
    "--cache-type-v": ALL_CACHE_TYPES,
    "--cache-type-k-draft": ALL_CACHE_TYPES,
    "--cache-type-v-draft": ALL_CACHE_TYPES,
}

#: Options whose value is an integer even though arg.cpp parses it as a string.
INTEGER_STRINGS = frozenset({"--gpu-layers"})


@dataclass(frozen=True)
class FlagSpec:
    """One llama-server option with all its spellings."""

    canonical: str
    names: tuple[str, ...]
    negations: tuple[str, ...] = ()
    kind: str = "flag"  # flag | bool | int | float | str | pair
    env: str | None = None
    value_hint: str | None = None
    legacy: bool = False
    successor: str | None = None

    @property
    def takes_value(self) -> bool:
        return self.kind in ("int", "float", "str", "pair")


@dataclass
class FlagTable:
    specs: list[FlagSpec] = field(default_factory=list)
    by_name: dict[str, tuple[FlagSpec, bool]] = field(default_factory=dict)
    by_env: dict[str, FlagSpec] = field(default_factory=dict)
    by_canonical: dict[str, FlagSpec] = field(default_factory=dict)
    predecessors: dict[str, str] = field(default_factory=dict)

    def add(self, spec: FlagSpec) -> None:
        self.specs.append(spec)
        for n in spec.names:
            self.by_name.setdefault(n, (spec, False))
        for n in spec.negations:
            self.by_name.setdefault(n, (spec, True))
        if spec.env:
            self.by_env.setdefault(spec.env, spec)
        self.by_canonical.setdefault(spec.canonical, spec)

    def lookup(self, name: str) -> tuple[FlagSpec, bool] | None:
        """Return (spec, negated) for any spelling of an option, or None."""
        return self.by_name.get(name)


def _canonical(names: list[str]) -> str:
    longs = [n for n in names if n.startswith("--")]
    return longs[0] if longs else names[0]


def _load(name: str) -> dict[str, Any]:
    text = resources.files("llamafleet").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def table() -> FlagTable:
    t = FlagTable()
    for legacy, fname in ((False, "flags_upstream.json"), (True, "flags_legacy.json")):
        data = _load(fname)
        for f in data["flags"]:
            t.add(
                FlagSpec(
                    canonical=_canonical(f["names"]),
                    names=tuple(f["names"]),
                    negations=tuple(f.get("negations", ())),
                    kind=f["kind"],
                    env=f.get("env"),
                    value_hint=f.get("value"),
                    legacy=legacy,
                    successor=f.get("successor"),
                )
            )
        t.predecessors.update(data.get("predecessors", {}))
    return t


_HELP_NAME = re.compile(r"(?:^|,)\s*(--?[A-Za-z][\w+.-]*[\w+])")


@dataclass(frozen=True)
class HelpFacts:
    """What a build's ``--help`` output says: its option names and its KV cache types."""

    names: frozenset[str]
    cache_types: tuple[str, ...] | None


_LIST_CONTINUATION = re.compile(r"^[A-Za-z0-9_.]+(?:,\s*[A-Za-z0-9_.]+)*,?$")


def _value_list(first: str, following: list[str]) -> tuple[str, ...]:
    """A comma-separated value list that ``--help`` may wrap over several lines: the TurboQuant
    fork's build 9079 prints ``... q5_0, q5_1,`` and then ``turbo2, turbo3, turbo4`` on a
    continuation line. A line continues the list when the text so far ends with a comma or when it
    is itself a bare list of names; ``(default: ...)`` and option lines end it."""
    text = first.strip()
    for raw in following:
        nxt = raw.strip()
        if not nxt or nxt.startswith(("(", "-")):
            break
        if text.endswith(",") or _LIST_CONTINUATION.match(nxt):
            text = f"{text.rstrip(',')}, {nxt}"
            continue
        break
    return tuple(v.strip() for v in text.split(",") if v.strip())


def parse_help(text: str) -> HelpFacts:
    """Extract the option spellings and the allowed KV cache types from ``llama-server --help``.

    Option lines start with ``-`` and list comma-separated spellings (``-ctk,  --cache-type-k
    TYPE``) before the value hint and the description.
    """
    names: set[str] = set()
    cache_types: tuple[str, ...] | None = None
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("-"):
            # spellings start the line or follow a comma; the value hint and text come after
            found = _HELP_NAME.findall(line)
            names.update(found)
            if "--cache-type-k" in found and cache_types is None:
                for j in range(i, min(i + 6, len(lines))):
                    m2 = re.search(r"allowed values:\s*(.+)", lines[j])
                    if m2:
                        cache_types = _value_list(m2.group(1), lines[j + 1 :])
                        break
    return HelpFacts(frozenset(names), cache_types)

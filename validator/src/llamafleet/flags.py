"""The llama-server option table: names, aliases, negations, value kinds and LLAMA_ARG_* variables.

The table is generated from llama.cpp's ``common/arg.cpp`` (``tools/gen_flags.py``) and extended
with options that older builds and the TurboQuant fork still have (``data/flags_legacy.json``) and
the fork's own table (``data/flags_fork.json``, generated the same way from its ``common/arg.cpp``).
Whether a given *build* accepts an option is decided from that build's ``--help`` text (facts).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache

from llamafleet.lazyre import lazy
from llamafleet.record import FrozenRecord, Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: KV cache types of upstream llama.cpp.
UPSTREAM_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: KV cache types added by the TurboQuant fork (tq5_0/tq6_0: K only, CUDA only).
TURBO_CACHE_TYPES = ("turbo2", "turbo3", "turbo4", "tq5_0", "tq6_0")
ALL_CACHE_TYPES = UPSTREAM_CACHE_TYPES + TURBO_CACHE_TYPES
UNQUANTIZED_CACHE_TYPES = ("f32", "f16", "bf16")

#: Closed value sets the generated tables cannot give: the cache types come from ggml's type
#: names (arg.cpp lists GGML_TYPE_* constants), --load-mode from a helper function. The other
#: closed sets (``-fa``, ``--fit``, ``-sm``, ...) are in the tables, read from arg.cpp's handlers.
CHOICES: dict[str, tuple[str, ...]] = {
    "--load-mode": ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
    "--cache-type-k": ALL_CACHE_TYPES,
    "--cache-type-v": ALL_CACHE_TYPES,
    "--cache-type-k-draft": ALL_CACHE_TYPES,
    "--cache-type-v-draft": ALL_CACHE_TYPES,
}

#: The words llama.cpp reads as on / off / auto (common/arg.cpp: is_truthy, is_falsey, is_autoy).
TRUTHY = ("on", "enabled", "true", "1")
FALSEY = ("off", "disabled", "false", "0")
AUTOY = ("auto", "-1")


class FlagSpec:
    """One llama-server option with all its spellings and the values its handler accepts."""

    __slots__ = (
        "canonical",
        "checked",
        "env",
        "kind",
        "legacy",
        "min_value",
        "names",
        "negations",
        "rejects",
        "special",
        "successor",
        "takes_value",
        "value_hint",
        "values",
    )

    def __init__(
        self,
        canonical: str,
        names: tuple[str, ...],
        *,
        negations: tuple[str, ...] = (),
        kind: str = "flag",  # flag | bool | int | float | str | pair
        env: str | None = None,
        value_hint: str | None = None,
        legacy: bool = False,
        successor: str | None = None,
        values: tuple[str, ...] | None = None,
        special: tuple[str, ...] = (),
        rejects: tuple[int, ...] = (),
        min_value: int | None = None,
    ) -> None:
        self.canonical = canonical
        self.names = names
        self.negations = negations
        self.kind = kind
        self.env = env
        self.value_hint = value_hint
        self.legacy = legacy
        self.successor = successor
        #: the closed set of words the option accepts (None: any value of its kind)
        self.values = values if values is not None else CHOICES.get(canonical)
        #: words accepted besides a number (-ngl auto/all)
        self.special = special
        #: numbers the handler refuses (-np 0) and the smallest it accepts (--n-cpu-moe 0)
        self.rejects = rejects
        self.min_value = min_value
        self.takes_value = kind in ("int", "float", "str", "pair")
        #: whether a value can be refused (a closed set, a number)
        self.checked = self.values is not None or kind in ("int", "float")

    def __repr__(self) -> str:
        return f"FlagSpec({self.canonical!r}, kind={self.kind!r})"


class FlagTable(Record):
    """Every option of a build, by spelling, by LLAMA_ARG_* variable and by canonical name."""

    _fields = ("specs", "by_name", "by_env", "by_canonical", "predecessors")

    def __init__(
        self,
        specs: list[FlagSpec] | None = None,
        by_name: dict[str, tuple[FlagSpec, bool]] | None = None,
        by_env: dict[str, FlagSpec] | None = None,
        by_canonical: dict[str, FlagSpec] | None = None,
        predecessors: dict[str, str] | None = None,
    ) -> None:
        self.specs: list[FlagSpec] = specs if specs is not None else []
        self.by_name: dict[str, tuple[FlagSpec, bool]] = by_name if by_name is not None else {}
        self.by_env: dict[str, FlagSpec] = by_env if by_env is not None else {}
        self.by_canonical: dict[str, FlagSpec] = by_canonical if by_canonical is not None else {}
        self.predecessors: dict[str, str] = predecessors if predecessors is not None else {}

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
        """Return (spec, negated) for any spelling of an option, or None. A long option may be
        written with ``_`` for ``-`` (``--ctx_size``): llama.cpp replaces every ``_`` of an
        argument that starts with ``--`` before it looks the argument up (common/arg.cpp)."""
        found = self.by_name.get(name)
        if found is None and "_" in name and name.startswith("--"):
            found = self.by_name.get(name.replace("_", "-"))
        return found


def normalise(name: str) -> str:
    """An option as llama.cpp looks it up: ``--ctx_size`` is ``--ctx-size``."""
    return name.replace("_", "-") if name.startswith("--") else name


def _canonical(names: list[str]) -> str:
    longs = [n for n in names if n.startswith("--")]
    return longs[0] if longs else names[0]


_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _load(name: str) -> dict[str, Any]:
    with open(os.path.join(_DATA, name), encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


#: Value sets that do not change between builds: the on/off/auto words of common_arg_utils.
_STABLE_WORDS = frozenset((*TRUTHY, *FALSEY, *AUTOY))


def _spec(f: Mapping[str, Any], legacy: bool) -> FlagSpec:
    values = f.get("values")
    if values is not None and not set(values) <= _STABLE_WORDS:
        # a list of modes (--spec-type, -sm, --pooling): newer builds add modes, so a word the
        # table does not list is not taken as invalid (a build's --help says what it accepts)
        values = None
    return FlagSpec(
        canonical=_canonical(f["names"]),
        names=tuple(f["names"]),
        negations=tuple(f.get("negations", ())),
        kind=f["kind"],
        env=f.get("env"),
        value_hint=f.get("value"),
        legacy=legacy,
        successor=f.get("successor"),
        values=tuple(values) if values is not None else None,
        special=tuple(f.get("special", ())),
        rejects=tuple(f.get("rejects", ())),
        min_value=f.get("min"),
    )


#: What the fork's table (generated with the value forms) adds to an upstream option of the same
#: name that the upstream table was generated without.
_VALUE_FORMS = ("values", "special", "rejects", "min")


@cache
def table() -> FlagTable:
    t = FlagTable()
    # upstream's current options, then those it dropped that older builds and the fork keep, then
    # the fork's own table (generated by tools/gen_flags.py from its common/arg.cpp, build 9079)
    upstream = _load("flags_upstream.json")
    legacy = _load("flags_legacy.json")
    fork = _load("flags_fork.json")
    forms: dict[str, Mapping[str, Any]] = {}
    for f in fork["flags"]:
        if any(k in f for k in _VALUE_FORMS):
            forms[_canonical(f["names"])] = f
    for entry in upstream["flags"]:
        f = entry
        extra = forms.get(_canonical(entry["names"]))
        if extra is not None and not any(k in entry for k in _VALUE_FORMS):
            f = {**entry, **{k: extra[k] for k in _VALUE_FORMS if k in extra}}
            if "special" in extra and f["kind"] == "str":
                f["kind"] = extra.get("kind", "int")
        t.add(_spec(f, False))
    for f in legacy["flags"]:
        t.add(_spec(f, True))
    for f in fork["flags"]:
        if any(n in t.by_name for n in (*f["names"], *f.get("negations", ()))):
            continue  # known from upstream's table: only the fork's own options are added
        t.add(_spec(f, True))
    t.predecessors.update(upstream.get("predecessors", {}))
    t.predecessors.update(legacy.get("predecessors", {}))
    t.predecessors.update(fork.get("predecessors", {}))
    return t


#: One spelling at the start of an option line, and each further one after a comma.
#: (``-c`` and ``-h`` are spellings too: one letter is enough.)
_HELP_FIRST = lazy(r"(--?[A-Za-z](?:[\w+.-]*[\w+])?)(?=[\s,]|$)")
_HELP_NEXT = lazy(r",\s*(--?[A-Za-z](?:[\w+.-]*[\w+])?)(?=[\s,]|$)")
_ALLOWED = lazy(r"allowed values:\s*(.+)")


class HelpFacts(FrozenRecord):
    """What a build's ``--help`` output says: its option names, its KV cache types and the
    ``allowed values:`` list of each option that prints one (keyed by every spelling)."""

    _fields = ("names", "cache_types", "allowed_values")
    names: frozenset[str]
    cache_types: tuple[str, ...] | None
    allowed_values: Mapping[str, tuple[str, ...]]

    def __init__(
        self,
        names: frozenset[str],
        cache_types: tuple[str, ...] | None,
        allowed_values: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._set("names", names)
        self._set("cache_types", cache_types)
        self._set("allowed_values", allowed_values if allowed_values is not None else {})


_LIST_CONTINUATION = lazy(r"^[A-Za-z0-9_.]+(?:,\s*[A-Za-z0-9_.]+)*,?$")


def _value_list(first: str, following: list[str]) -> tuple[str, ...]:
    """A comma-separated value list that ``--help`` may wrap over several lines: the TurboQuant
    fork's build 9079 prints ``... q5_0, q5_1,`` and then ``turbo2, turbo3, turbo4`` on a
    continuation line. A line continues the list when the text so far ends with a comma or when it
    is itself a bare list of names; ``(default: ...)`` and option lines end it."""
    text = first.strip()
    for raw in following:
        nxt = raw.strip()
        if not nxt or nxt.startswith(("(", "-")) or not raw[:1].isspace():
            break
        if text.endswith(",") or _LIST_CONTINUATION.match(nxt):
            text = f"{text.rstrip(',')}, {nxt}"
            continue
        break
    return tuple(v.strip() for v in text.split(",") if v.strip())


def help_option_names(line: str) -> list[str]:
    """The spellings an option line of ``--help`` starts with: ``-ctk,  --cache-type-k TYPE ...``
    gives ``-ctk`` and ``--cache-type-k``; the value hint and the description after them are not
    read (a description may mention other options)."""
    m = _HELP_FIRST.match(line)
    if not m:
        return []
    names = [m.group(1)]
    pos = m.end()
    while True:
        m = _HELP_NEXT.match(line, pos)
        if not m:
            return names
        names.append(m.group(1))
        pos = m.end()


def parse_help(text: str) -> HelpFacts:
    """Extract the option spellings, the ``allowed values:`` lists and the KV cache types from
    ``llama-server --help``.

    An option line starts in the first column with ``-`` and lists comma-separated spellings
    (``-ctk,  --cache-type-k TYPE``) before the value hint and the description; the description
    and its continuation lines are indented. Indented lines are never option lines, even when
    they start with an option name (upstream's ``--spec-ngram-*-size-n or ...``). A value list
    after ``allowed values:`` may be wrapped over several description lines (the TurboQuant fork).
    A text indented as a whole (pasted into another file) is read as if it were not.
    """
    names: set[str] = set()
    allowed: dict[str, tuple[str, ...]] = {}
    import textwrap

    lines = textwrap.dedent(text).splitlines()
    i = 0
    while i < len(lines):
        found = help_option_names(lines[i]) if lines[i].startswith("-") else []
        # the option's block: its own line and the indented description lines after it
        end = i + 1
        while end < len(lines) and (not lines[end] or lines[end][:1].isspace()):
            end += 1
        if found:
            names.update(found)
            for j in range(i, end):
                m = _ALLOWED.search(lines[j])
                if m:
                    values = _value_list(m.group(1), lines[j + 1 : end])
                    for name in found:
                        allowed.setdefault(name, values)
                    break
        i = end
    return HelpFacts(frozenset(names), allowed.get("--cache-type-k"), allowed)

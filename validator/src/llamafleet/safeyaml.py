"""YAML for untrusted input: bounded nesting and alias expansion, and every value's line.

:func:`load` reads a document in two passes. The first walks the parser's events (no recursion)
and refuses a document nested deeper than :data:`MAX_DEPTH` or whose aliases would expand to more
than :data:`MAX_NODES` nodes (a "billion laughs" alias bomb is a few hundred bytes); the second
builds mappings and lists that remember the line of each value (:class:`YMap`, :class:`YList`).
Aliases share one object, so nothing is copied. ``yaml12=True`` reads scalars as YAML 1.2 (what
Docker Compose reads): ``on``/``yes`` stay strings, ``3000:30`` is not a base-60 number.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from llamafleet.errors import InputError

#: Deepest nesting of mappings and sequences accepted (a configuration has fewer than 10 levels).
MAX_DEPTH = 100
#: Most nodes a document may have once every alias is expanded.
MAX_NODES = 200_000

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YAMLInputError(InputError):
    """A document that is not YAML or is refused; ``line`` is 1-based."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


class YMap(dict[Any, Any]):
    """A mapping with the line of each value (``lines``) and its scalar style (``styles``)."""

    __slots__ = ("line", "lines", "styles")

    def __init__(self) -> None:
        super().__init__()
        self.line = 1
        self.lines: dict[Any, int] = {}
        self.styles: dict[Any, str | None] = {}


class YList(list[Any]):
    """A sequence with the line of each item (``lines``) and its scalar style (``styles``)."""

    __slots__ = ("line", "lines", "styles")

    def __init__(self) -> None:
        super().__init__()
        self.line = 1
        self.lines: list[int] = []
        self.styles: list[str | None] = []


def _style(node: Any) -> str | None:
    return getattr(node, "style", None) if isinstance(node, yaml.ScalarNode) else None


def _map(loader: Any, node: yaml.MappingNode) -> YMap:
    loader.flatten_mapping(node)
    out = YMap()
    out.line = node.start_mark.line + 1
    for knode, vnode in node.value:
        key = loader.construct_object(knode, deep=True)
        try:
            hash(key)
        except TypeError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key that is itself a mapping or a list", knode.start_mark
            ) from exc
        out[key] = loader.construct_object(vnode, deep=True)
        out.lines[key] = vnode.start_mark.line + 1
        out.styles[key] = _style(vnode)
    return out


def _seq(loader: Any, node: yaml.SequenceNode) -> YList:
    out = YList()
    out.line = node.start_mark.line + 1
    for item in node.value:
        out.append(loader.construct_object(item, deep=True))
        out.lines.append(item.start_mark.line + 1)
        out.styles.append(_style(item))
    return out


class _Loader11(_Base):  # type: ignore[misc]
    """YAML 1.1 as PyYAML's SafeLoader reads it (Ansible's variables)."""


class _Loader12(_Base):  # type: ignore[misc]
    """YAML 1.2 core schema (Docker Compose)."""


for _cls in (_Loader11, _Loader12):
    _cls.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _map)
    _cls.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _seq)
    # timestamps stay text (a date is never a llama-server value)
    _cls.add_constructor("tag:yaml.org,2002:timestamp", _Base.construct_yaml_str)

_Loader12.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (
        "tag:yaml.org,2002:int",
        r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$",
        "-+0123456789",
    ),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN"),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", "<"),
):
    _Loader12.add_implicit_resolver(_tag, re.compile(_regexp), list(_first) or [""])
_Loader12.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])


def _check_events(text: str) -> None:
    depth = 0
    counts: list[int] = [0]
    anchors: dict[str, int] = {}
    stack_anchor: list[str | None] = []
    try:
        for ev in yaml.parse(text, Loader=_Base):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YAMLInputError(
                        f"nested deeper than {MAX_DEPTH} levels (refused: a configuration is "
                        "never that deep)",
                        _line(ev),
                    )
                counts.append(1)
                stack_anchor.append(ev.anchor)
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                size = counts.pop()
                anchor = stack_anchor.pop()
                if anchor is not None:
                    anchors[anchor] = size
                counts[-1] += size
            elif isinstance(ev, yaml.ScalarEvent):
                counts[-1] += 1
                if ev.anchor is not None:
                    anchors[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                counts[-1] += anchors.get(ev.anchor or "", 1)
            else:
                continue
            if counts[-1] > MAX_NODES or sum(counts) > MAX_NODES:
                raise YAMLInputError(
                    f"its aliases expand to more than {MAX_NODES} nodes (refused: an alias "
                    "bomb, or not a configuration)",
                    _line(ev),
                )
    except yaml.YAMLError as exc:
        raise _error(exc) from exc


def _line(ev: Any) -> int:
    mark = getattr(ev, "start_mark", None)
    return mark.line + 1 if mark is not None else 1


def _error(exc: yaml.YAMLError) -> YAMLInputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return YAMLInputError(f"not valid YAML: {problem}", mark.line + 1 if mark is not None else 1)


def load(text: str, *, yaml12: bool = False) -> Any:
    """The first document of ``text`` (None when empty), with :class:`YMap`/:class:`YList`
    containers; YAMLInputError (with the line) when it is not YAML or is refused."""
    _check_events(text)
    loader = (_Loader12 if yaml12 else _Loader11)(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise _error(exc) from exc
    except RecursionError as exc:  # pragma: no cover - bounded by MAX_DEPTH
        raise YAMLInputError("nested too deeply") from exc
    finally:
        loader.dispose()


def plain(value: Any) -> Any:
    """``value`` with plain dicts and lists (for code that compares with ``==`` or dumps it)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value

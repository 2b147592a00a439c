"""No new import cycle inside the llamafleet package. Every import counts, a deferred one inside
a function too: it is the same dependency, only hidden from the interpreter. There is none; a
new one fails, naming its modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import llamafleet

PACKAGE = Path(llamafleet.__file__).resolve().parent

#: the cycles still to break, each as the set of its modules: none. The last three went with
#: llamafleet.rules.base (the rule modules no longer import the package that loads them),
#: llamafleet.cli_options (plan_cli no longer imports cli) and llamafleet.sources (the argument
#: parser no longer calls the readers; the shell reader is handed to readers.common by the
#: readers package)
KNOWN: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Which of the package's modules each module imports, anywhere in its body."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                found = {f"{base}.{a.name}" for a in node.names} & mods.keys()
                graph[name] |= (found or ({base} & mods.keys())) - {name}
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & mods.keys() - {name}
    return graph


def cycles(graph: dict[str, set[str]], nodes: set[str]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def test_no_new_import_cycle() -> None:
    mods = _modules()
    found = cycles(imports(mods), set(mods))
    new = [sorted(c) for c in found if c not in KNOWN]
    assert not new, f"a new import cycle (or a module joined a known one): {new}"
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert not gone, f"broken, so remove it from KNOWN: {gone}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph, {"a", "b", "c", "d"}) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}, {"a", "b"}) == []

"""llamafleet.lazyre: a pattern compiled on first use behaves as the compiled one, and every
module-level lazy pattern of the package compiles (a typo fails here, not in a user's check)."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import llamafleet
from llamafleet.lazyre import _Lazy, lazy


def test_a_lazy_pattern_matches_as_the_compiled_one() -> None:
    source = r"(?P<n>-?\d+)(\.\d+)?"
    p, q = lazy(source), re.compile(source)
    for text in ("12", "-3.5", "x", "7.", ""):
        m, n = p.fullmatch(text), q.fullmatch(text)
        assert (m and m.groups()) == (n and n.groups())
        assert p.sub("#", text) == q.sub("#", text)
        assert [x.span() for x in p.finditer(text)] == [x.span() for x in q.finditer(text)]
    assert p.pattern == source and p.groupindex == {"n": 1}
    assert lazy("a", re.I).match("A") is not None


def test_it_compiles_once_and_then_hands_out_the_compiled_methods() -> None:
    p = lazy(r"\d+")
    assert "match" not in vars(p)  # nothing compiled yet
    p.search("a1")
    bound = vars(p)["match"]
    assert isinstance(bound.__self__, re.Pattern)
    p.findall("1 2")
    assert vars(p)["match"] is bound  # not compiled again


def test_a_bad_pattern_fails_on_first_use() -> None:
    p = lazy("(unclosed")
    with pytest.raises(re.error):
        p.match("x")


def _modules() -> list[str]:
    names = [llamafleet.__name__]
    for info in pkgutil.walk_packages(llamafleet.__path__, llamafleet.__name__ + "."):
        names.append(info.name)
    return [n for n in names if n != "llamafleet.__main__"]


def test_every_lazy_pattern_of_the_package_compiles() -> None:
    found = 0
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional dependency (the planner's) is missing
            continue
        for value in list(vars(module).values()):
            if isinstance(value, _Lazy):
                re.compile(*value._source)
                found += 1
    assert found >= 30  # the readers', rules' and parsers' patterns

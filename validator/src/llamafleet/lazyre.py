"""Regular expressions compiled where they are first used.

A ``llamafleet check`` process loads the readers and rules of every kind of input, and with them
some forty patterns, but a given check uses a few of them: compiling the others (about a tenth of a
three-file check's instructions, measured with ``valgrind --tool=callgrind``) bought nothing. A
pattern made with :func:`lazy` compiles on its first use and from then on hands out the compiled
pattern's own methods, so using it costs what a compiled pattern costs."""

from __future__ import annotations

import re

#: what a compiled pattern offers and the code here calls
_FORWARDED = (
    "match",
    "fullmatch",
    "search",
    "sub",
    "subn",
    "split",
    "finditer",
    "findall",
    "scanner",
    "pattern",
    "flags",
    "groups",
    "groupindex",
)


class _Lazy:
    def __init__(self, pattern: str, flags: int) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, name: str) -> object:
        # called only while an attribute is missing: the first use binds them all
        compiled = re.compile(*self._source)
        for attr in _FORWARDED:
            self.__dict__[attr] = getattr(compiled, attr)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy({self._source[0]!r}, {self._source[1]!r})"


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, done on first use; its typos still fail a test (the tests
    use every pattern)."""
    found: re.Pattern[str] = _Lazy(pattern, flags)  # type: ignore[assignment]
    return found

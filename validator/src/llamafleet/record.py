"""Plain record classes: what ``@dataclass`` gave the classes every ``llamafleet check`` loads
(``__repr__``, ``__eq__``, and for frozen ones immutability and ``__hash__``), without it.

Importing :mod:`dataclasses` (and :mod:`inspect` through it) and generating each class's methods
took about 9 ms of a 52 ms ``llamafleet check`` process (``python -X importtime``; the figures
are in docs/corpus.md). A record class writes its own ``__init__`` and names its fields in
``_fields`` (those left out of ``repr`` in ``_hidden``); the methods here read them."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar


class Record:
    """``repr`` and ``==`` over the fields a subclass names, in that order."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    #: fields left out of ``repr`` (still compared, as a dataclass's ``repr=False`` fields are)
    _hidden: ClassVar[frozenset[str]] = frozenset()

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in self._fields if name not in self._hidden
        )
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable, as a dataclass


class FrozenRecord(Record):
    """A record that cannot change once made (``@dataclass(frozen=True)``): hashable over the
    fields it compares; ``_uncompared`` fields take part in neither."""

    __slots__ = ()
    _uncompared: ClassVar[frozenset[str]] = frozenset()

    def _set(self, name: str, value: Any) -> None:
        """For the subclass's ``__init__``: set a field once."""
        object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self._fields if n not in self._uncompared)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, FrozenRecord)
        return self._key() == other._key()

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._key())

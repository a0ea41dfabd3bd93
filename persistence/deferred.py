"""`Deferred`: a sequence built on first use, so capturing a state shares its payload (P-09).

A state captured after a publish holds each source's payload arrays and tuples as they are;
their stored form (expiries in microseconds) is built once, by whoever first reads an element
(the writer or the digest, on the persister's thread), not by the capture. The length is known
up front, so counting never builds anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

__all__ = ["Deferred", "built"]

T = TypeVar("T")


class Deferred(Sequence[T]):
    """A read-only sequence of ``length`` items that ``build`` returns when first needed."""

    __slots__ = ("_build", "_items", "_length")

    def __init__(self, length: int, build: Callable[[], Sequence[T]]) -> None:
        self._length = length
        self._build: Callable[[], Sequence[T]] | None = build
        self._items: Sequence[T] | None = None

    def items(self) -> Sequence[T]:
        """The built items (built now if they were not yet; idempotent, thread-safe)."""
        items = self._items
        if items is None:
            build = self._build
            if build is None:  # another thread finished in between
                items = self._items
                assert items is not None
                return items
            items = build()
            if len(items) != self._length:
                raise ValueError(f"deferred sequence built {len(items)} items, not {self._length}")
            self._items = items
            self._build = None
        return items

    @property
    def is_built(self) -> bool:
        """Whether the items were built (by a read of an element) already."""
        return self._items is not None

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        return self.items()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self.items())

    def __bool__(self) -> bool:
        return self._length > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Deferred):
            other = other.items()
        if not isinstance(other, Sequence):
            return NotImplemented
        mine = self.items()
        if type(mine) is type(other):
            return bool(mine == other)
        return len(mine) == len(other) and all(a == b for a, b in zip(mine, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Deferred({self.items()!r})"

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Sequence[T]]]:
        # A copy in another process gets the built items themselves.
        return _same, (self.items(),)


def _same(value: Any) -> Any:
    return value


def built(values: Sequence[T]) -> Sequence[T]:
    """``values`` itself, or the built items of a `Deferred`."""
    return values.items() if isinstance(values, Deferred) else values

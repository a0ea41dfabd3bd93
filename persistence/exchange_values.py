"""The exchange writer's budgeted output and its scalar values (integers, strings, kind lists).

`Out` collects the document's text and counts its UTF-8 octets against the export budget
(`LimitExceededError` at the first value that would exceed it, naming its path); the
``write_*`` functions check one value's type and range and write its canonical JSON text, or
raise `ExchangeFormatError` naming the path. Strings are JSON-escaped as `json.dumps` with
``ensure_ascii=False`` does (RFC 8785's rules) and must be valid Unicode.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

from persistence.kinds import KIND_BITS
from persistence.limits import LimitExceededError

__all__ = [
    "AFI_TEXT",
    "CHUNK_BYTES",
    "INT64_MAX",
    "INT64_MIN",
    "KIND_ORDER",
    "RECORD_FAST_PATH_BYTES",
    "ExchangeFormatError",
    "Out",
    "string_text",
    "write_bool",
    "write_int",
    "write_kinds",
    "write_opt_int",
    "write_opt_str",
    "write_str",
]

#: A raw record whose conservative encoded size is at most this is formatted in one go.
RECORD_FAST_PATH_BYTES: Final = 64 * 1024
#: Chunks of about this size are yielded (their boundaries mean nothing).
CHUNK_BYTES: Final = 64 * 1024
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
#: Kind names in the contract's ``present`` bit order: the order of every kind list.
KIND_ORDER: Final = tuple(sorted(KIND_BITS, key=KIND_BITS.__getitem__))
#: The ``afi`` member of an ASPA by its stored value (0: both families).
AFI_TEXT: Final = ("null", "1", "2")


class ExchangeFormatError(ValueError):
    """A value that has no exchange encoding, or a document that is not a valid one.

    ``path`` names the place in the document (``$.sources[0].vrps[3][0]``).
    """

    def __init__(self, path: str, problem: str) -> None:
        """``problem``: what is wrong at ``path``."""
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class Out:
    """The octets written and not yet yielded, counted against the budget."""

    __slots__ = ("limit", "parts", "pending", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.pending = 0
        self.parts: list[str] = []

    def fits(self, octets: int) -> bool:
        return self.size + octets <= self.limit

    def put(self, text: str, octets: int, path: str) -> None:
        """Append ``text`` (``octets`` long in UTF-8), or raise once over the budget."""
        if self.size + octets > self.limit:
            raise LimitExceededError(
                f"the exchange document exceeds max_export_bytes={self.limit} at {path}"
            )
        self.size += octets
        self.pending += octets
        self.parts.append(text)

    def ascii(self, text: str, path: str) -> None:
        self.put(text, len(text), path)

    def take(self) -> bytes:
        data = "".join(self.parts).encode()
        self.parts.clear()
        self.pending = 0
        return data


# ---------------------------------------------------------------------- field-by-field values
def write_int(
    out: Out, value: object, path: str, low: int = INT64_MIN, high: int = INT64_MAX
) -> None:
    if type(value) is not int:  # never a bool, never an int subclass of another spelling
        raise ExchangeFormatError(path, f"expected an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise ExchangeFormatError(path, f"{value} out of range {low}..{high}")
    out.ascii(str(value), path)


def write_opt_int(
    out: Out, value: object, path: str, low: int = INT64_MIN, high: int = INT64_MAX
) -> None:
    if value is None:
        out.ascii("null", path)
    else:
        write_int(out, value, path, low, high)


def write_bool(out: Out, value: object, path: str) -> None:
    if type(value) is not bool:
        raise ExchangeFormatError(path, f"expected a boolean, not {type(value).__name__}")
    out.ascii("true" if value else "false", path)


def string_text(value: object, path: str) -> tuple[str, int]:
    """The JSON string text of ``value`` and its UTF-8 length; a str subclass counts as its text."""
    if not isinstance(value, str):
        raise ExchangeFormatError(path, f"expected a string, not {type(value).__name__}")
    native = value if type(value) is str else str.__str__(value)
    text = json.dumps(native, ensure_ascii=False)
    if text.isascii():
        return text, len(text)
    try:
        return text, len(text.encode())
    except UnicodeEncodeError as exc:
        raise ExchangeFormatError(path, f"not valid Unicode ({exc.reason})") from None


def write_str(out: Out, value: object, path: str) -> None:
    text, octets = string_text(value, path)
    out.put(text, octets, path)


def write_opt_str(out: Out, value: object, path: str) -> None:
    if value is None:
        out.ascii("null", path)
    else:
        write_str(out, value, path)


def write_kinds(
    out: Out, kinds: Iterable[str], path: str, order: tuple[str, ...] = KIND_ORDER
) -> None:
    names = set(kinds)
    unknown = names.difference(order)
    if unknown:
        raise ExchangeFormatError(path, f"unknown kinds {sorted(unknown)}")
    out.ascii("[" + ",".join(f'"{k}"' for k in order if k in names) + "]", path)

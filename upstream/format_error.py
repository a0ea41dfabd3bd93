"""The errors of input that is not a valid export: `FormatError` and its size-cap case."""

from __future__ import annotations

__all__ = ["FormatError", "SizeLimitError"]


class FormatError(ValueError):
    """Raised when an export is malformed or holds an invalid entry; the message names it."""


class SizeLimitError(FormatError):
    """Raised when decompressed data would exceed the size cap."""

    def __init__(self, kind: str, limit: int) -> None:
        super().__init__(f"decompressed {kind} data exceeds the limit of {limit} bytes")
        self.kind = kind
        self.limit = limit

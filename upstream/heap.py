"""`trim_heap`: hand the heap memory a large read freed back to the system (glibc only).

Reading an export frees tens of megabytes of small objects (the pieces' structs and parts); the
C allocator keeps such memory for reuse, so the process would go on holding it as resident
memory. glibc's ``malloc_trim(0)`` returns the whole free pages to the system (a few ms). On
other C libraries this does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

__all__ = ["trim_heap"]


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes  # only here: the state's readers import no compiled module (P-38)

        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (ImportError, OSError, AttributeError):
        return None
    return trim


def trim_heap() -> None:
    """Return free heap pages to the system where the C library can (glibc's malloc_trim)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

"""`upstream.heap.trim_heap`: free heap pages go back to the system after a large read."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from upstream.heap import _malloc_trim, trim_heap

PROBE = """
import sys
sys.path[:0] = {path!r}
from upstream.heap import trim_heap
def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])
held = [bytes(3000) for _ in range(30_000)]  # ~90 MB of small blocks from the C heap
keep = held[-1]
del held
before = rss()
trim_heap()
print(before - rss())
"""


def test_trim_heap_is_safe_to_call() -> None:
    trim_heap()
    trim_heap()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_memory_leaves_the_process() -> None:
    assert _malloc_trim() is not None
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(path=sys.path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert int(out.stdout) > 50_000  # KiB given back

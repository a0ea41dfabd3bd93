"""The byte budget a client shares among its HTTP sources: bodies held until cleanup and parse.

Contract:

* **One owner, many sources.** A `ByteBudget` of ``limit`` bytes is made by the owner of the
  sources (the `Client`: `ByteBudget.share` hands it to each of its HTTP sources) and given to
  every `upstream.http_source.HttpSource` it runs; its limit is at least the largest
  ``max_bytes`` of those sources (`ByteBudget.cover`), so any body within its source's own cap
  can fit, and all their buffered bodies together stay within it. A source made without one
  gets a budget of its own of
  ``max_bytes`` (then only its own polls count in it).
* **What is counted, and until when.** A poll counts through the source's `ByteQuota` (its lease
  on the budget) every raw body byte it buffers, from the first one as it arrives. All of them
  are given back at once by `ByteQuota.release`, which the source calls only after the response
  was closed and its raw iterator unrolled and closed, and after the parse of the body (a worker
  thread that is never abandoned) ended — on success, failure and cancellation alike.
* **Bounded, never deadlocked.** The bytes held by all leases together never exceed ``limit``.
  A lease that holds nothing yet waits (cancellable; the poll's ``total_timeout`` bounds it) until
  its chunk fits, so that poll reads no more from its socket meanwhile (TCP flow control holds
  the peer back; at most the one chunk already read waits in memory). A lease that already
  holds bytes never waits — two polls each holding part of the budget could otherwise wait for
  each other forever — and fails at once with `BudgetExhaustedError`. A chunk that would take one
  lease past ``limit`` on its own can never fit (`BudgetExhaustedError.never_fits`).
* Single event loop: every method is called from the tasks of the loop the owner runs on.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

__all__ = ["DEFAULT_SHARED_BYTES", "BudgetExhaustedError", "ByteBudget", "ByteQuota"]

#: The smallest budget a `Client` shares among its HTTP sources (grown to the largest
#: ``max_bytes`` among them): two default-sized bodies (256 MiB each) at once.
DEFAULT_SHARED_BYTES = 512 * 1024 * 1024


class BudgetExhaustedError(Exception):
    """A chunk did not fit in the shared budget; ``never_fits``: not even with the budget free."""

    def __init__(self, limit: int, *, never_fits: bool) -> None:
        self.limit = limit
        self.never_fits = never_fits
        if never_fits:
            message = f"body exceeds the shared byte budget of {limit} bytes"
        else:
            message = f"the shared byte budget of {limit} bytes is held by other polls"
        super().__init__(message)


class ByteBudget:
    """``limit`` bytes shared by every lease (`ByteQuota`) taken on it."""

    def __init__(self, limit: int) -> None:
        """A budget of ``limit`` (> 0) bytes, none held."""
        if limit <= 0:
            raise ValueError("a byte budget must be positive")
        self.limit = limit
        #: Bytes held by all leases now.
        self.held = 0
        #: The most held at once since creation (what a test or an operator can check).
        self.peak = 0
        #: Leases waiting for room now.
        self.waiting = 0
        self._freed: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"ByteBudget(limit={self.limit}, held={self.held})"

    def quota(self) -> ByteQuota:
        """A new lease on this budget (one per source: its polls are serial)."""
        return ByteQuota(self)

    def share(self, sources: Iterable[object]) -> None:
        """Give this budget to every HTTP source in ``sources`` (others are left alone).

        A source keeps bytes it holds on its old lease until that poll ends; its next poll
        counts here.
        """
        for source in sources:
            adopt = getattr(source, "use_budget", None)
            if adopt is not None:
                adopt(self)

    def cover(self, size: int) -> None:
        """Grow the limit to at least ``size`` (a source's own ``max_bytes``), never shrink it.

        So a body within its source's own cap can always fit once the others gave theirs back.
        """
        if size > self.limit:
            self.limit = size
            self._shrink(0)  # a lease waiting for room may fit now

    def _grow(self, count: int) -> None:
        self.held += count
        self.peak = max(self.peak, self.held)

    def _shrink(self, count: int) -> None:
        self.held -= count
        freed, self._freed = self._freed, None
        if freed is not None:
            freed.set()

    async def _room(self) -> None:
        """Wait until some lease gives bytes back."""
        if self._freed is None:
            self._freed = anyio.Event()
        freed = self._freed
        self.waiting += 1
        try:
            await freed.wait()
        finally:
            self.waiting -= 1


class ByteQuota:
    """One source's lease on a `ByteBudget`: the bytes its current poll buffered."""

    def __init__(self, budget: ByteBudget | None = None, *, limit: int | None = None) -> None:
        """A lease on ``budget`` (or on a budget of its own of ``limit`` bytes)."""
        if budget is None:
            if limit is None:
                raise ValueError("give a budget or a limit")
            budget = ByteBudget(limit)
        self.budget = budget
        #: Bytes this lease holds now.
        self.held = 0
        #: The most this lease held at once since creation.
        self.peak = 0

    async def take(self, count: int) -> None:
        """Count ``count`` more buffered bytes; wait or fail as the module says.

        Raises:
            BudgetExhaustedError: the chunk can never fit, or this lease holds bytes and there is no
                room for more now.
        """
        budget = self.budget
        if self.held + count > budget.limit:
            raise BudgetExhaustedError(budget.limit, never_fits=True)
        while budget.held + count > budget.limit:
            if self.held:
                raise BudgetExhaustedError(budget.limit, never_fits=False)
            await budget._room()  # noqa: SLF001 — the budget's own helper for its leases
        budget._grow(count)  # noqa: SLF001
        self.held += count
        self.peak = max(self.peak, self.held)

    def release(self) -> None:
        """Give every held byte back (waking the leases that wait for room)."""
        held, self.held = self.held, 0
        if held:
            self.budget._shrink(held)  # noqa: SLF001

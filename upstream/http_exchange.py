"""Who owns one HTTP exchange: the request's worker task, the response's close, its raw frames.

Contract:

* **Worker task.** `in_worker` runs the whole request of the built-in (owned) transport in a
  managed worker task of a task group opened in the caller's task, and waits for it. A native
  ``asyncio.Task.cancel()`` of the caller becomes that group's AnyIO cancellation, the caller
  waits until the worker ended (httpcore's own cleanup in it is not interrupted), then the
  native cancellation propagates. An ordinary exception of the work is re-raised as it is.
* **Release order.** `ResponseHolder.release` (called in the owner's ``finally``) first closes
  the raw response — for the built-in transport in a managed child task that the caller waits
  for, shielded from AnyIO cancellation — then unrolls the raw byte iterator the consumer
  started (`ResponseHolder.raw`) to its end, in the consumer's task, discarding what it yields
  without decoding it, and finally closes that iterator. After a successful built-in close only
  the transport's bounded receive buffer is left, so the unrolling has no time or step limit;
  an injected transport (which may share its connection) or a failed close gets at most
  `RECOVERY_SECONDS` and `RECOVERY_STEPS` steps, each with a cancellation checkpoint, the
  deadline judged by AnyIO itself (a native cancellation meanwhile is not swallowed).
* **Secondary errors.** `release` never raises an ordinary exception: a close or unrolling
  error is logged as fixed text (no exception text) and never replaces the original failure or
  cancellation; control exceptions (cancellation, KeyboardInterrupt) propagate after it.
* **Byte quota.** The body bytes a poll has buffered count in its source's
  `upstream.http_budget.ByteQuota` (a lease on the budget its owner shares); the source
  releases it only after this cleanup and the parse finished.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, TypeVar, cast

import anyio
import anyio.lowlevel
import httpx

__all__ = [
    "RECOVERY_SECONDS",
    "RECOVERY_STEPS",
    "ResponseHolder",
    "close_in_child",
    "in_worker",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The bounded recovery of an injected transport or a failed close: seconds ...
RECOVERY_SECONDS: Final = 1.0
#: ... and iterator steps.
RECOVERY_STEPS: Final = 65_536


async def in_worker(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` in a managed worker task of a task group in the caller's task; its result."""
    results: list[T] = []
    failures: list[Exception] = []

    async def worker() -> None:
        try:
            results.append(await work())
        except Exception as exc:  # noqa: BLE001 — handed to the caller unwrapped
            failures.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
    if failures:
        raise failures[0]
    return results[0]


async def close_in_child(response: httpx.Response) -> None:
    """Close ``response`` in a managed child task, shielded; return once that task ended.

    An ordinary close error is re-raised here (after the child ended); a cancellation of the
    caller propagates only after the child ended too.
    """
    failures: list[Exception] = []

    async def closer() -> None:
        with anyio.CancelScope(shield=True):
            try:
                await response.aclose()
            except Exception as exc:  # noqa: BLE001 — re-raised in the caller
                failures.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(closer)
    if failures:
        raise failures[0]


class ResponseHolder:
    """The raw response of one exchange and the raw iterator its consumer started."""

    def __init__(self, response: httpx.Response, *, built_in: bool, name: str) -> None:
        self.response = response
        self.built_in = built_in
        self.name = name
        self._raw: AsyncIterator[bytes] | None = None
        #: Raw bytes discarded by the unrolling (never decoded).
        self.discarded = 0

    def raw(self) -> AsyncIterator[bytes]:
        """The raw (still encoded) body iterator, started once; the holder closes it."""
        if self._raw is None:
            stream = cast(httpx.AsyncByteStream, self.response.stream)
            self._raw = stream.__aiter__()
        return self._raw

    async def release(self) -> None:
        """Close the response, then unroll and close the raw iterator (see the module)."""
        if self.built_in:
            # In the worker task: native cancellations do not reach it, AnyIO's are held off.
            with anyio.CancelScope(shield=True):
                closed = await self._close(close_in_child)
                await self._unroll(bounded=not closed)
        else:
            await self._close(_close_here)
            with anyio.CancelScope(shield=True):
                await self._unroll(bounded=True)

    async def _close(self, how: Callable[[httpx.Response], Awaitable[None]]) -> bool:
        try:
            await how(self.response)
        except Exception:  # noqa: BLE001 — secondary: the original outcome stays
            log.warning("source %s: closing the HTTP response failed", self.name)
            return False
        return True

    async def _unroll(self, *, bounded: bool) -> None:
        raw = self._raw
        if raw is None:
            return
        try:
            if bounded:
                with anyio.move_on_after(RECOVERY_SECONDS):
                    await self._drain(raw, RECOVERY_STEPS)
            else:
                await self._drain(raw, None)
        finally:
            await self._close_iterator(raw)

    async def _drain(self, raw: AsyncIterator[bytes], steps: int | None) -> None:
        taken = 0
        while steps is None or taken < steps:
            taken += 1
            try:
                data = await raw.__anext__()
            except StopAsyncIteration:
                return
            except Exception:  # noqa: BLE001 — the closed connection ends the iteration with an error
                log.debug("source %s: the closed HTTP response ended its raw body", self.name)
                return
            self.discarded += len(data)
            await anyio.lowlevel.checkpoint()

    async def _close_iterator(self, raw: AsyncIterator[bytes]) -> None:
        aclose = getattr(raw, "aclose", None)
        if aclose is None:
            return
        try:
            await aclose()
        except Exception:  # noqa: BLE001 — secondary: the original outcome stays
            log.warning("source %s: closing the HTTP body iterator failed", self.name)


async def _close_here(response: httpx.Response) -> None:
    await response.aclose()

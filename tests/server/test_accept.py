"""`accept_forever`: accept errors are counted, paused on with a growing backoff, never fatal."""

from __future__ import annotations

import errno
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketListener, SocketStream

from rtr_server.accept import accept_forever

pytestmark = pytest.mark.anyio


class FailingFirst(SocketListener):
    """A real loopback listener whose first ``failures`` accepts fail as if out of descriptors."""

    def __init__(self, inner: SocketListener, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.closed = False

    async def accept(self) -> SocketStream:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return await self.inner.accept()

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()

    @property
    def _raw_socket(self) -> Any:
        return self.inner._raw_socket

    @property
    def extra_attributes(self) -> Any:
        return self.inner.extra_attributes

    async def serve(self, handler: Any, task_group: Any = None) -> None:
        raise NotImplementedError


async def test_accept_errors_are_survived_with_a_growing_pause() -> None:
    multi = await anyio.create_tcp_listener(local_host="127.0.0.1")
    (inner,) = multi.listeners
    assert isinstance(inner, SocketListener)
    port = inner.extra(SocketAttribute.local_port)
    listener = FailingFirst(inner, failures=4)
    admitted: list[SocketStream] = []
    arrived = anyio.Event()
    errors = 0

    def admit(stream: SocketStream) -> None:
        admitted.append(stream)
        arrived.set()

    def failed() -> None:
        nonlocal errors
        errors += 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            started = anyio.current_time()
            tg.start_soon(lambda: accept_forever(listener, admit, what="test", failed=failed))
            async with await anyio.connect_tcp("127.0.0.1", port):
                await arrived.wait()
            took = anyio.current_time() - started
            tg.cancel_scope.cancel()
    assert errors == 4
    assert took >= 0.01 + 0.02 + 0.04 + 0.08  # paused, doubling: it never spins
    assert listener.closed  # cancelling the loop closes its listener
    for stream in admitted:
        await stream.aclose()

"""`ResponseCache`: every full and delta response is encoded once, its bytes shared by all.

Full responses are keyed by (session id, serial, version) and deltas by (session id, from
serial, to serial, version).

Encoding is lazy and single-flight: the first session that needs a response encodes it (in a
worker thread when it is large) while later ones wait for the same result; `ready` encodes a
small one at once for a caller that cannot wait (a parked session, `rtr_server.parking`). The
cache is bounded in bytes; a session still writing an evicted response keeps only its own
reference alive.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

import anyio

from rtr_protocol import Timers, encode_delta_response, encode_full_response
from rtr_protocol.actions import SendDelta, SendFull

#: Responses with more records than this are encoded in a worker thread.
THREAD_THRESHOLD = 20_000

Chunks = tuple[bytes, ...]


def _key(action: SendFull | SendDelta) -> Hashable:
    """A response's cache key: ``full`` or ``delta``, the session, the serial(s), the version."""
    serial = action.state.serial.value
    if isinstance(action, SendFull):
        return ("full", action.session_id, serial, action.version)
    return ("delta", action.session_id, action.from_serial.value, serial, action.version)


class _Pending:
    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Chunks | None = None


class ResponseCache:
    """Shared, bounded cache of encoded responses."""

    def __init__(self, timers: Timers, max_bytes: int) -> None:
        """Responses carry ``timers`` in End of Data; at most ``max_bytes`` are kept."""
        self.timers = timers
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Chunks] = OrderedDict()
        self._pending: dict[Hashable, _Pending] = {}
        self.bytes = 0
        self.encodes = 0
        self.hits = 0

    def ready(self, action: SendFull | SendDelta) -> Chunks | None:
        """The encoded chunks for ``action`` without waiting: held, or small and encoded now.

        None when it is large (encoded in a worker thread by `response`) or being encoded.
        """
        key = _key(action)
        cached = self._entries.get(key)
        if cached is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return cached
        size, encode = self._encoder(action)
        if size > THREAD_THRESHOLD or key in self._pending:
            return None
        result = encode()
        self.encodes += 1
        self._store(key, result)
        return result

    async def response(self, action: SendFull | SendDelta) -> Chunks:
        """The encoded chunks for ``action``."""
        size, encode = self._encoder(action)
        return await self._get(_key(action), encode, threaded=size > THREAD_THRESHOLD)

    def _encoder(self, action: SendFull | SendDelta) -> tuple[int, Callable[[], Chunks]]:
        """The records of ``action``'s response and the function that encodes it."""
        state = action.state
        session_id = action.session_id
        if isinstance(action, SendFull):
            snap = state.snapshot
            size = snap.vrp_count + len(snap.aspas) + len(snap.router_keys)

            def encode() -> Chunks:
                return tuple(
                    encode_full_response(
                        snap, action.version, session_id, state.serial, self.timers
                    )
                )

            return size, encode
        delta = action.delta
        size = sum(delta.counts().values())  # records of every kind, both ways

        def encode_delta() -> Chunks:
            return tuple(
                encode_delta_response(delta, action.version, session_id, state.serial, self.timers)
            )

        return size, encode_delta

    async def _get(self, key: Hashable, encode: Callable[[], Chunks], *, threaded: bool) -> Chunks:
        while True:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return cached
            pending = self._pending.get(key)
            if pending is None:
                break
            await pending.done.wait()
            if pending.result is not None:
                self.hits += 1
                return pending.result
            # The encoding session was cancelled or failed: try again ourselves.
        pending = self._pending[key] = _Pending()
        try:
            result = await anyio.to_thread.run_sync(encode) if threaded else encode()
            pending.result = result
        finally:
            del self._pending[key]
            pending.done.set()
        self.encodes += 1
        self._store(key, result)
        return result

    def retain_serial(self, serial: int) -> None:
        """Drop every response that does not lead to ``serial`` (called on publish)."""
        for key in [k for k in self._entries if isinstance(k, tuple) and k[-2] != serial]:
            self.bytes -= sum(len(c) for c in self._entries.pop(key))

    def _store(self, key: Hashable, result: Chunks) -> None:
        size = sum(len(c) for c in result)
        if size > self.max_bytes:
            return
        self._entries[key] = result
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= sum(len(c) for c in old)

    def clear(self) -> None:
        """Drop every cached response."""
        self._entries.clear()
        self.bytes = 0

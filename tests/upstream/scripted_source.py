"""`ScriptedSource`: a `Source` whose deliveries and health the test sets by hand.

The aggregator's rules (groups, time, trust) are what the tests exercise; the real sources have
tests of their own. This one only does what the test says, through the real `Source` protocol.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio

from snapshot.kinds import ALL_KINDS, PayloadKind
from tests.upstream.helpers import export
from upstream.json_format import parse_export
from upstream.payload import SourcePayload
from upstream.source import Delivery, DeliverySink, payload_identity
from upstream.status import SourceState, SourceStatus


def payload(vrps: Iterable[tuple[str, int, int]], *, expires: int | None = None) -> SourcePayload:
    """The payload of a small export of ``(prefix, maxLength, asn)`` triples."""
    return parse_export(export(vrps, expires=expires))


class ScriptedSource:
    """A source that delivers when told; ``healthy`` and ``capabilities`` are set by the test."""

    def __init__(self, name: str, *, kind: str = "file", online: bool = False) -> None:
        self.name = name
        self.kind = kind
        self.online = online
        self.status = SourceStatus(name, kind, f"scripted:{name}")
        self.capabilities: frozenset[PayloadKind] = ALL_KINDS
        self.healthy = True
        self.resyncs = 0
        self._sink: DeliverySink | None = None

    def refreshing(self) -> bool:
        return not self.status.attempted or self.healthy

    def resync(self) -> None:
        self.resyncs += 1

    async def run(self, sink: DeliverySink) -> None:
        self._sink = sink
        await anyio.sleep_forever()

    @property
    def running(self) -> bool:
        return self._sink is not None

    def deliver(
        self,
        data: SourcePayload,
        *,
        identity: bytes | None = None,
        expires_at: float | None = None,
    ) -> None:
        """Hand ``data`` over as raw input (by default with the identity an export has)."""
        assert self._sink is not None, f"source {self.name} is not running"
        self.status.attempted = True
        self.status.state = SourceState.OK
        self.healthy = True
        self._sink(Delivery(data, identity or payload_identity(data), expires_at=expires_at))

    def withdraw(self) -> None:
        """Withdraw the data (as the protocol does after a fatal error)."""
        assert self._sink is not None
        self._sink(Delivery.withdrawal())

    def fail(self) -> None:
        """The last attempt failed: it can no longer refresh."""
        self.status.attempted = True
        self.status.failed("environment", "scripted failure", 0.0)
        self.healthy = False

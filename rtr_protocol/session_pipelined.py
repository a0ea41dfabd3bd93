"""`PipelinedQueries`: a Serial Query the router sent before it could read our last answer.

OpenBGPD (``rtr_proto.c``, 7.7 and 8.8) sets its session id to -1 on a Cache Reset and waits up
to 9 s before its Reset Query. A Serial Notify that comes during that wait arms its refresh
timer, which sends a Serial Query with that id (65535) and its old serial. When both timers end
in the same second it sends the two queries back to back. The Serial Query reaches us after our
answer to the Reset Query gave a session id, and the session-id rule (a mismatch within a
session is Corrupt Data, RFC 8210 §5.1) would close the session: OpenBGPD then drops the table it
has just loaded and redials.

Every octet of a PDU that was already buffered when we began our last answer was received
before we wrote any of that answer, so the router sent it without knowing what the answer says.
This is certain from the order of the bytes, without a clock. TCP delivers in order, so when
the router reads our reply to such a query it holds what the answer before gave: our session
id at that answer's serial. A Serial Query of this kind that names another session id is
answered as one from that serial: a delta, empty when nothing was published in between. A
query read after our answer began keeps the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtr_protocol.actions import SendCacheReset, SendDelta
from rtr_protocol.encoder import encode_cache_reset
from rtr_protocol.session_handover import HandoverAdoption

if TYPE_CHECKING:
    from rtr_protocol.framer import PduFramer
    from rtr_protocol.pdu import SerialQuery
    from snapshot import PublishedState, Serial

__all__ = ["PipelinedQueries"]


class PipelinedQueries(HandoverAdoption):
    """The pipelining part of `ServerSession` (on top of `HandoverAdoption`: one slot layout).

    ``_ahead``: octets that were buffered, unread, when the last SendFull/SendDelta began;
    ``_sent_early``: the PDU being handled was among them.
    """

    __slots__ = ("_ahead", "_sent_early")

    _framer: PduFramer
    _session_id: int | None
    _last_serial: Serial | None

    def _answer_began(self) -> None:
        """A SendFull/SendDelta is handed out: what is buffered now was sent before it."""
        self._ahead = self._framer.buffered

    def _pdu_taken(self) -> None:
        """The framer gave the next PDU: note whether it was sent before our last answer."""
        size = len(self._framer.last_pdu_bytes)
        self._sent_early = 0 < size <= self._ahead
        self._ahead = max(0, self._ahead - size)

    def _early_serial_query(
        self, pdu: SerialQuery, state: PublishedState
    ) -> SendDelta | SendCacheReset | None:
        """The answer to an early Serial Query naming another session id, or None.

        A delta from our last answer's serial (Cache Reset when that cannot be served). None
        when the query came after our last answer began, or there was no answer yet.
        """
        given, serial = self._session_id, self._last_serial
        if not self._sent_early or given is None or serial is None:
            return None
        version = pdu.version
        delta = state.delta_since(serial)
        if state.session_ids.for_version(version) != given or delta is None:
            return SendCacheReset(version, encode_cache_reset(version))
        return SendDelta(version, state, serial, delta, named_session=pdu.session_id)

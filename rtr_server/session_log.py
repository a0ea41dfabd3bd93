"""`log_close` and `log_response`: the lines a router's session leaves (close, each response)."""

from __future__ import annotations

import logging

from rtr_protocol import SendDelta, SendFull
from rtr_server.connection import RtrConnection
from rtr_server.serving import HeldAnswer

__all__ = ["log_close", "log_response"]


def log_close(log: logging.Logger, connection: RtrConnection, duration: float) -> None:
    """The one line per closed session (event ``session_close``)."""
    session = connection.session
    stats = connection.stats
    serial = None if session.last_serial is None else int(session.last_serial.value)
    log.info(
        "router %s closed: %s (version %s, session %s, serial %s, %d reset + %d serial queries, "
        "%d notifies, %d bytes sent, %d bytes received, %.1f s)",
        connection.peer,
        connection.close_detail,
        session.version,
        session.session_id,
        serial,
        stats.reset_queries,
        stats.serial_queries,
        stats.notifies,
        stats.bytes_sent,
        stats.bytes_received,
        duration,
        extra={
            "event": "session_close",
            "peer": connection.peer,
            "reason": connection.close_detail,
            "reason_class": connection.close_reason.value,
            "version": session.version,
            "session_id": session.session_id,
            "serial": serial,
            "reset_queries": stats.reset_queries,
            "serial_queries": stats.serial_queries,
            "notifies": stats.notifies,
            "errors_sent": {str(code): n for code, n in stats.errors_sent.items()},
            "bytes_sent": stats.bytes_sent,
            "bytes_received": stats.bytes_received,
            "duration_s": round(duration, 3),
        },
    )


def log_response(
    log: logging.Logger,
    peer: str,
    action: SendFull | SendDelta,
    size: int,
    held: HeldAnswer | None = None,
) -> None:
    """The line a full or delta response of ``size`` octets written to ``peer`` leaves."""
    state = action.state
    after = ""
    if held is not None:
        after = (
            f", held {held.held:.1f} s, then encoded {held.encoded:.2f} s"
            f" and written {held.written:.2f} s"
        )
    if isinstance(action, SendFull):
        log.info(
            "router %s: reset query v%d -> full table, serial %s (%d bytes%s)",
            peer,
            action.version,
            state.serial,
            size,
            after,
        )
    else:
        if action.named_session is not None:
            log.info(
                "router %s: serial query for session %d sent before it read our answer "
                "(session %d, serial %s): answered from that serial",
                peer,
                action.named_session,
                action.session_id,
                action.from_serial,
            )
        counts = action.delta.counts()
        # Only what this version carries: no router keys on v0, no ASPA below v2.
        if action.version < 1:
            counts["router_key_announce"] = counts["router_key_withdraw"] = 0
        if action.version < 2:
            counts["aspa_announce"] = counts["aspa_withdraw"] = 0
        log.info(
            "router %s: serial query v%d from serial %s -> delta to serial %s "
            "(+%d/-%d VRPs, +%d/-%d router keys, %d/%d ASPA announce/withdraw; %d bytes%s)",
            peer,
            action.version,
            action.from_serial,
            state.serial,
            counts["vrp_announce"],
            counts["vrp_withdraw"],
            counts["router_key_announce"],
            counts["router_key_withdraw"],
            counts["aspa_announce"],
            counts["aspa_withdraw"],
            size,
            after,
        )

"""`log_close`: the one line (event ``session_close``) a router's closed session leaves."""

from __future__ import annotations

import logging

from rtr_server.connection import RtrConnection

__all__ = ["log_close"]


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

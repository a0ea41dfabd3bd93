"""What a re-executed rtr-serve continues of the image before it: session ids and serial.

At ``kill -USR2`` the old image puts what it served last into the environment
(``RTR_SERVE_SERVED``, beside ``LISTEN_FDS``): the wire format it encodes, its three session
ids, the serial and the content digest (`snapshot.Snapshot.digest`). The new image's publisher
takes them up only for a first snapshot with that very digest (`snapshot.Continuation`): a
router kept through the restart then still holds exactly what this image serves under the same
session and serial, and nothing is sent again. Any other content gets new session ids, drawn
away from the old ones. Only the process that ``LISTEN_PID`` names reads it; a value it cannot
read is logged and ignored (the new ids are always safe).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable, Mapping

from snapshot import Continuation, PublishedState, Serial, SessionIds

__all__ = [
    "SERVED_ENV",
    "WIRE_FORMAT",
    "continuation_from_env",
    "fresh_session_ids",
    "served_token",
]

log = logging.getLogger("rtr_server.server")

#: The environment variable the old image sets for the exec.
SERVED_ENV = "RTR_SERVE_SERVED"
#: What routers decode from our PDUs; raise it when the same snapshot would be encoded with
#: another meaning, so that no router keeps data decoded from the earlier encoding.
WIRE_FORMAT = 1


def served_token(state: PublishedState) -> str:
    """``FORMAT:ID0,ID1,ID2:SERIAL:DIGEST`` for ``state`` (the value of `SERVED_ENV`)."""
    ids = state.session_ids
    digest = state.snapshot.digest().hex()
    return f"{WIRE_FORMAT}:{ids.v0},{ids.v1},{ids.v2}:{int(state.serial)}:{digest}"


def _parse(token: str) -> Continuation:
    parts = token.split(":")
    if len(parts) != 4:
        raise ValueError("expected FORMAT:ID0,ID1,ID2:SERIAL:DIGEST")
    wire, ids_text, serial_text, digest_text = parts
    if wire != str(WIRE_FORMAT):
        raise ValueError(f"wire format {wire!r} is not ours ({WIRE_FORMAT})")
    ids = ids_text.split(",")
    if len(ids) != 3 or not all(i.isdigit() for i in ids) or not serial_text.isdigit():
        raise ValueError("session ids and serial must be decimal")
    digest = bytes.fromhex(digest_text)
    if len(digest) != 32:
        raise ValueError("the digest must be 32 octets")
    session_ids = SessionIds(int(ids[0]), int(ids[1]), int(ids[2]))
    return Continuation(session_ids, Serial(int(serial_text)), digest)


def continuation_from_env(
    environ: Mapping[str, str] | None = None, pid: int | None = None
) -> Continuation | None:
    """What the previous image served, if it handed over to this process; else None."""
    env = os.environ if environ is None else environ
    token = env.get(SERVED_ENV)
    if token is None or env.get("LISTEN_PID") != str(os.getpid() if pid is None else pid):
        return None
    try:
        return _parse(token)
    except ValueError as exc:
        log.warning("restart: %s=%r is not usable (%s): new session ids", SERVED_ENV, token, exc)
        return None


def fresh_session_ids(avoid: Iterable[int] = ()) -> SessionIds:
    """Random session ids, none of them in ``avoid``."""
    taken = set(avoid)
    while True:
        ids = SessionIds.from_random(secrets.token_bytes(2))
        if not set(ids.values) & taken:
            return ids

"""`rtr_server.continuity`: the token the old image hands to the exec, read back only by the
process ``LISTEN_PID`` names; a token it cannot use is logged and gives new session ids."""

from __future__ import annotations

import hashlib
import logging

import pytest

from rtr_protocol import Timers, encode_full_response
from rtr_server.continuity import (
    SERVED_ENV,
    WIRE_FORMAT,
    continuation_from_env,
    fresh_session_ids,
    served_token,
)
from snapshot import Aspa, Publisher, RouterKey, Serial, SessionIds, Snapshot, Vrp


def _state() -> tuple[Snapshot, str]:
    snap = Snapshot.build(vrps=[Vrp.parse("192.0.2.0/24", 24, 64496)])
    publisher = Publisher(SessionIds(10, 20, 30), initial_serial=Serial(5))
    state = publisher.publish(snap)
    assert state is not None
    return snap, served_token(state)


def test_the_token_round_trips_for_the_named_process() -> None:
    snap, token = _state()
    assert token.startswith(f"{WIRE_FORMAT}:10,20,30:5:")
    got = continuation_from_env({SERVED_ENV: token, "LISTEN_PID": "77"}, pid=77)
    assert got is not None
    assert (got.session_ids, got.serial, got.digest) == (
        SessionIds(10, 20, 30),
        Serial(5),
        snap.digest(),
    )
    assert continuation_from_env({SERVED_ENV: token, "LISTEN_PID": "78"}, pid=77) is None
    assert continuation_from_env({SERVED_ENV: token}, pid=77) is None
    assert continuation_from_env({"LISTEN_PID": "77"}, pid=77) is None


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        f"{WIRE_FORMAT + 1}:10,20,30:5:" + "00" * 32,
        f"{WIRE_FORMAT}:10,20:5:" + "00" * 32,
        f"{WIRE_FORMAT}:10,20,30:-5:" + "00" * 32,
        f"{WIRE_FORMAT}:10,20,30:5:" + "00" * 31,
        f"{WIRE_FORMAT}:10,20,30:5:xyz",
        f"{WIRE_FORMAT}:10,10,30:5:" + "00" * 32,
        f"{WIRE_FORMAT}:10,20,70000:5:" + "00" * 32,
        f"{WIRE_FORMAT}:10,20,30:4294967296:" + "00" * 32,
    ],
)
def test_an_unusable_token_is_logged_and_ignored(
    token: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rtr_server.server"):
        assert continuation_from_env({SERVED_ENV: token, "LISTEN_PID": "9"}, pid=9) is None
    assert f"{SERVED_ENV}=" in caplog.text
    assert "new session ids" in caplog.text


def test_fresh_ids_avoid_what_they_are_told() -> None:
    avoid = set(range(0x4000))  # a quarter of all ids
    for _ in range(20):
        ids = fresh_session_ids(avoid)
        assert not {ids.v0, ids.v1, ids.v2} & avoid


#: SHA-256 of the full responses below at versions 0, 1 and 2, encoded under WIRE_FORMAT 1.
WIRE_DIGESTS = {
    0: "69338fc9bfa4e3ddd931c1abf6bcdfffa84759ba2cf176975cb9e4e74660e47a",
    1: "14dea3b155f0c574cbaa010298e0922b96eb8cdd7a5e8cbf183b8ab17ec3652f",
    2: "deb5040b4bc703b1d023476e4c7ad79f6a75d0a2fa22bd3de0e46272863cd8a7",
}


def test_the_wire_format_is_raised_when_the_encoding_changes() -> None:
    """A router kept in a continued session holds what it decoded from the old image's PDUs:
    when the same content is encoded otherwise, `WIRE_FORMAT` must change (and this record)."""
    snap = Snapshot.build(
        vrps=[Vrp.parse("192.0.2.0/24", 24, 64496), Vrp.parse("2001:db8::/32", 48, 64497)],
        aspas=[Aspa(64496, (64497, 64498))],
        router_keys=[RouterKey(bytes(range(20)), 64496, b"\x30\x01\x00")],
    )
    got = {
        version: hashlib.sha256(
            b"".join(encode_full_response(snap, version, 7, Serial(9), Timers(3600, 600, 7200)))
        ).hexdigest()
        for version in (0, 1, 2)
    }
    assert (WIRE_FORMAT, got) == (1, WIRE_DIGESTS), (
        "the PDUs of the same content changed: raise rtr_server.continuity.WIRE_FORMAT and "
        "record the new digests here"
    )

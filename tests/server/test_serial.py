"""Serial Query over real TCP: net deltas after a file change, Cache Reset cases, and an invalid
update that leaves the old serial serving."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import anyio
import pytest

from rtr_protocol import (
    AspaPdu,
    CacheReset,
    CacheResponse,
    EndOfData,
    Ipv4Prefix,
    Ipv6Prefix,
    RouterKeyPdu,
)
from tests.server.helpers import (
    TIMERS,
    RouterState,
    app_config,
    assert_in_order,
    base_export,
    expected_state,
    port_of,
    publish_and_wait,
    roa,
    running_app,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import Response, RtrClient, reset_query, serial_query
from upstream.status import SourceState

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_serial_query_returns_net_delta(tmp_path: Path, version: int) -> None:
    path = tmp_path / "export.json"
    old_doc, new_doc = base_export(), updated_export()
    write_export(path, old_doc)
    async with (
        running_app(app_config(path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        full = await client.reset(version)
        old = RouterState().apply(full.payload)
        assert old == expected_state(old_doc, version)
        session, old_serial = full.cache_response.session_id, full.end_of_data.serial

        new_serial = await publish_and_wait(app, path, new_doc)
        assert new_serial == (old_serial + 1) % 2**32
        delta = await client.serial(version, session, old_serial)
        assert isinstance(delta, Response), delta

    new = expected_state(new_doc, version)
    assert delta.cache_response == CacheResponse(version, session)
    assert delta.end_of_data == EndOfData(
        version, session, new_serial, None if version == 0 else TIMERS
    )
    # Applying the delta to the old set gives the new set (strict: no duplicate announce, no
    # unknown withdraw).
    assert old.copy().apply(delta.payload) == new

    # Exactly the net delta: nothing that did not change, nothing twice.
    prefix_pdus = [p for p in delta.payload if isinstance(p, Ipv4Prefix | Ipv6Prefix)]
    announced = {(int(p.TYPE), p.prefix, p.prefix_length, p.max_length, p.asn) for p in prefix_pdus
                 if p.announce}  # fmt: skip
    withdrawn = {(int(p.TYPE), p.prefix, p.prefix_length, p.max_length, p.asn) for p in prefix_pdus
                 if not p.announce}  # fmt: skip
    assert announced == new.prefixes - old.prefixes
    assert withdrawn == old.prefixes - new.prefixes
    assert len(prefix_pdus) == len(announced) + len(withdrawn) == 6
    keys = [p for p in delta.payload if isinstance(p, RouterKeyPdu)]
    assert {(k.ski, k.asn, k.spki) for k in keys} == new.keys ^ old.keys
    assert len(keys) == (1 if version >= 1 else 0)
    assert all(k.announce for k in keys)
    aspas = [p for p in delta.payload if isinstance(p, AspaPdu)]
    if version < 2:
        assert aspas == []
    else:
        # A changed provider set is ONE announce (a replace), a gone customer one withdraw.
        assert aspas == [
            AspaPdu(2, 1, 64499, (64496, 64497)),
            AspaPdu(2, 1, 64530, (64531,)),
            AspaPdu(2, 0, 64510, ()),
        ]
    # Announcements then withdrawals per type, types ascending, §8.1 order inside.
    assert_in_order(delta.payload)
    assert {p.version for p in delta.payload} <= {version}


async def test_cache_reset_cases(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with running_app(app_config(path, history=1)) as app:
        port = port_of(app)
        assert app.state is not None
        s0 = app.state.serial.value
        session = app.state.session_ids.for_version(1)
        async with await RtrClient.connect(port) as client:
            first = await client.reset(1)
            assert first.end_of_data.serial == s0

            # Two changes with a history of one: s0 falls out of the window.
            doc1 = copy.deepcopy(doc)
            doc1["roas"].append(roa("198.18.0.0/15", 24, 64511))
            s1 = await publish_and_wait(app, path, doc1)
            doc2 = copy.deepcopy(doc1)
            doc2["roas"].append(roa("198.18.0.0/16", 16, 64512))
            s2 = await publish_and_wait(app, path, doc2)

            assert isinstance(await client.serial(1, session, s0), CacheReset)
            # The session stays usable: s1 is still in the window.
            one = await client.serial(1, session, s1)
            assert isinstance(one, Response)
            assert one.payload == [Ipv4Prefix(1, 1, 16, 16, 0xC612_0000, 64512)]
            assert one.end_of_data.serial == s2
            # A serial ahead of the current one.
            assert isinstance(await client.serial(1, session, (s2 + 5) % 2**32), CacheReset)
            # The current serial: Cache Response and End of Data with nothing between.
            current = await client.serial(1, session, s2)
            assert isinstance(current, Response)
            assert current.payload == []
            assert current.cache_response == CacheResponse(1, session)
            assert current.end_of_data == EndOfData(1, session, s2, TIMERS)
            # And a Reset Query after all that gets the current data.
            full = await client.reset(1)
            assert RouterState().apply(full.payload) == expected_state(doc2, 1)

        # A Serial Query as the first PDU of a fresh connection, with a known session.
        async with await RtrClient.connect(port) as client:
            fresh = await client.serial(1, session, s1)
            assert isinstance(fresh, Response)
            assert fresh.payload == one.payload
            assert fresh.end_of_data == EndOfData(1, session, s2, TIMERS)

        # An unknown session id on a fresh connection: Cache Reset, not an error, and the
        # connection stays usable.
        async with await RtrClient.connect(port) as client:
            unknown = (session + 1) & 0xFFFF
            assert isinstance(await client.serial(1, unknown, s2), CacheReset)
            await client.expect_silence(0.05)
            assert (await client.reset(1)).end_of_data.serial == s2
        # The session id of another version on a fresh connection is unknown too.
        async with await RtrClient.connect(port) as client:
            v2_session = app.state.session_ids.for_version(2)
            assert isinstance(await client.serial(1, v2_session, s2), CacheReset)


async def test_invalid_update_keeps_old_serial(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with running_app(app_config(path)) as app:
        assert app.state is not None
        serial = app.state.serial.value
        status = app.sources[0].status
        assert status.state is SourceState.OK

        bad = copy.deepcopy(doc)
        bad["roas"].append(roa("198.51.100.1/24", 24, 64496))  # host bits set
        bad["roas"].append(roa("100.64.0.0/10", 24, 64501))  # valid, but the export is rejected
        write_export(path, bad)
        await wait_until(lambda: status.state is SourceState.ERROR, what="the rejection")
        assert status.last_error is not None
        assert "198.51.100.1/24" in status.last_error
        assert "host bits" in status.last_error
        assert status.errors.get("format") == 1

        await anyio.sleep(0.2)  # several poll intervals: no publish follows
        assert app.state.serial.value == serial
        async with await RtrClient.connect(port_of(app)) as client:
            response = await client.reset(2)
            assert response.end_of_data.serial == serial
            assert RouterState().apply(response.payload) == expected_state(doc, 2)
            assert client.notifies == []

            # A valid export afterwards is taken up again.
            good = copy.deepcopy(doc)
            good["roas"].append(roa("100.64.0.0/10", 24, 64501))
            new_serial = await publish_and_wait(app, path, good)
            assert status.state is SourceState.OK
            assert new_serial == (serial + 1) % 2**32


async def test_a_serial_query_sent_with_the_reset_query_gets_the_empty_delta(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenBGPD's shape: a Reset Query and, in the same write, a Serial Query with its "no
    session" id 65535. The second answer is the empty delta in the session the first gave."""
    caplog.set_level(logging.INFO)
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with (
        running_app(app_config(path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        await client.send(reset_query(1), serial_query(1, 0xFFFF, 41))
        full = await client.read_response()
        assert RouterState().apply(full.payload) == expected_state(doc, 1)
        empty = await client.read_response()
        given = (full.cache_response.session_id, full.end_of_data.serial)
        assert (empty.cache_response.session_id, empty.end_of_data.serial) == given
        assert empty.payload == []
        # The connection stays: an ordinary Serial Query in that session is answered.
        again = await client.serial(1, *given)
        assert isinstance(again, Response)
        assert again.payload == []
    assert "serial query for session 65535 sent before it read our answer" in caplog.text

"""Serial Notify over real TCP: sent to idle negotiated sessions after a change, never before the
first query and never inside a Cache Response .. End of Data sequence."""

from __future__ import annotations

import copy
from pathlib import Path

import anyio
import pytest

from rtr_protocol import Ipv4Prefix, SerialNotify, SessionState
from rtr_server.server import RtrServer
from tests.server.helpers import (
    app_config,
    base_export,
    big_response,
    big_states,
    port_of,
    publish_and_wait,
    roa,
    running_app,
    running_server,
    settings,
    updated_export,
    wait_until,
    write_export,
)
from tests.server.rtr_client import Response, RtrClient, reset_query

pytestmark = pytest.mark.anyio


async def test_notify_on_idle_sessions_only_after_negotiation(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_app(app_config(path)) as app:
        port = port_of(app)
        async with (
            await RtrClient.connect(port) as v0,
            await RtrClient.connect(port) as v1,
            await RtrClient.connect(port) as v2,
            await RtrClient.connect(port) as silent,
        ):
            first0, first1, first2 = await v0.reset(0), await v1.reset(1), await v2.reset(2)
            await wait_until(lambda: len(app.server.connections) == 4, what="four connections")
            await v1.expect_silence(0.1)  # no change, no notify

            serial = await publish_and_wait(app, path, updated_export())
            assert app.state is not None
            for client, version, first in ((v0, 0, first0), (v1, 1, first1), (v2, 2, first2)):
                notify = await client.receive_pdu()
                assert notify == SerialNotify(
                    version, app.state.session_ids.for_version(version), serial
                )
                assert notify.session_id == first.cache_response.session_id

            # The connection that never queried got nothing (not even when it queries now).
            await silent.expect_silence(0.1)
            response = await silent.reset(0)
            assert silent.notifies == []
            assert response.end_of_data.serial == serial

            # Once up to date, a session gets no further notify.
            delta = await v1.serial(1, first1.cache_response.session_id, first1.end_of_data.serial)
            assert isinstance(delta, Response)
            assert delta.end_of_data.serial == serial
            await v1.expect_silence(0.2)
            assert v1.notifies == []


async def test_notify_never_inside_responses_under_churn(tmp_path: Path) -> None:
    """Back-to-back Reset Queries of a 40 kB table while the file changes every 60 ms: every
    reply is contiguous (the client fails on any other PDU inside one)."""
    path = tmp_path / "export.json"
    doc = base_export()
    doc["roas"] += [roa(f"10.{i >> 8}.{i & 255}.0/24", 24, 65001) for i in range(2000)]
    write_export(path, doc)
    changes = 5
    async with (
        running_app(app_config(path, chunk_size=4096)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        assert app.state is not None
        first_serial = app.state.serial.value

        done = anyio.Event()

        async def churn() -> None:
            for i in range(changes):
                await anyio.sleep(0.03)
                changed = copy.deepcopy(doc)
                changed["roas"].append(roa(f"172.16.{i}.0/24", 24, 65002))
                await publish_and_wait(app, path, changed)
            done.set()

        responses = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(churn)
            with anyio.fail_after(10):
                while not done.is_set():
                    response = await client.reset(1)
                    responses += 1
                    assert len(response.payload) > 2000
        last = app.state.serial.value
        if response.end_of_data.serial == last:
            # The last response already carried the last serial: nothing to announce.
            await client.expect_silence(0.1)
        else:
            # The last change is announced to the now idle session, after its last response.
            while not client.notifies or client.notifies[-1].serial != last:
                pdu = await client.receive_pdu()
                assert isinstance(pdu, SerialNotify)
                client.notifies.append(pdu)
        assert app.state.serial.value == first_serial + changes
        assert responses >= changes
        assert {n.version for n in client.notifies} == {1}


async def test_notify_waits_for_a_stalled_response_to_end() -> None:
    """A change published while a large reply is stuck half-written (the router does not read)
    is announced after its End of Data, not inside it."""
    first, second = big_states()
    server = RtrServer(settings(write_timeout=60))
    server.publish(first)
    async with running_server(server) as port, await RtrClient.connect(port) as client:
        await client.send(reset_query(1))
        await wait_until(lambda: len(server.connections) == 1, what="the connection")
        (conn,) = server.connections
        await wait_until(lambda: conn.stats.bytes_sent > 0, what="the reply to start")
        await anyio.sleep(0.2)
        expected = big_response(1, first.session_ids.v1, first.serial.value)
        assert conn.session.state is SessionState.RESPONDING
        assert conn.stats.bytes_sent < len(expected), "the reply must be stalled mid-way"

        rounds = server.stats.notify_rounds
        server.publish(second)
        await wait_until(lambda: server.stats.notify_rounds > rounds, what="a notify round")

        # The whole reply, byte for byte, and only then the notify.
        assert await client.receive_raw(len(expected)) == expected
        notify = await client.receive_pdu()
        assert notify == SerialNotify(1, second.session_ids.v1, second.serial.value)
        delta = await client.serial(1, first.session_ids.v1, first.serial.value)
        assert isinstance(delta, Response)
        assert delta.payload == [Ipv4Prefix(1, 1, 24, 24, 0, 64496)]
        assert delta.end_of_data.serial == second.serial.value


async def test_the_notify_interval_is_kept_per_session(tmp_path: Path) -> None:
    """A session notified less than ``notify_interval`` ago waits for its interval to end; a
    session never notified (or notified long ago) is notified at once, after the same publish."""
    interval = 1.5
    path = tmp_path / "export.json"
    write_export(path, base_export())
    async with running_app(app_config(path, notify_interval=interval)) as app:
        port = port_of(app)
        async with await RtrClient.connect(port) as early:
            await early.reset(1)
            await wait_until(lambda: len(app.server.connections) == 1, what="one connection")
            first = await publish_and_wait(app, path, updated_export())
            notify = await early.receive_pdu(within=1.0)  # never notified: at once
            assert isinstance(notify, SerialNotify)
            assert notify.serial == first
            notified = anyio.current_time()
            async with await RtrClient.connect(port) as late:
                response = await late.reset(1)
                assert response.end_of_data.serial == first
                second = await publish_and_wait(app, path, base_export())
                published = anyio.current_time()
                notify = await late.receive_pdu(within=1.0)  # its first notify: at once
                assert isinstance(notify, SerialNotify)
                assert notify.serial == second
                assert anyio.current_time() - published < 1.0
                # The early session waits until its interval since the last notify ends.
                notify = await early.receive_pdu(within=interval + 2.0)
                assert isinstance(notify, SerialNotify)
                assert notify.serial == second
                assert anyio.current_time() - notified >= interval - 0.05

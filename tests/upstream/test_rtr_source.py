"""RtrSource over real loopback TCP: rtr-serve core -> edge, a scripted cache, StayRTR 0.5."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import anyio
import anyio.abc
import pytest

from rtr_protocol import (
    CacheResponse,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    ResetQuery,
    SerialNotify,
    SerialQuery,
    encode,
)
from rtr_server.app_config import AppConfig
from rtr_server.settings import ListenAddress
from snapshot.publisher import SessionIds
from snapshot.snapshot import Snapshot
from tests.clock import FakeClock
from tests.protocol.test_client import STAYRTR_V2
from tests.server.helpers import (
    TIMERS,
    RouterState,
    app_config,
    base_export,
    expected_state,
    export,
    port_of,
    roa,
    updated_export,
    wait_until,
    write_export,
)
from tests.upstream.rtr_source_helpers import (
    CacheConnection,
    ScriptedCache,
    quick,
    rtr_source_of,
    running_core,
    running_edge,
    running_source,
    running_stayrtr,
    served,
    snapshot_of,
)
from upstream.payload import NO_EXPIRY
from upstream.rtr_address import parse_rtr_url
from upstream.rtr_source import RtrSource, payload_of
from upstream.status import SourceState

pytestmark = pytest.mark.anyio

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
LOGGER = "upstream.rtr_source"


def is_connected(source: RtrSource) -> bool:
    return source.connected


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING
    ]


# ------------------------------------------------------------------------------ URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("rtr://127.0.0.1:8323", ("127.0.0.1", 8323)),
        ("rtr://cache.example.net:323", ("cache.example.net", 323)),
        ("rtr://cache.example.net", ("cache.example.net", 323)),
        ("rtr://[2001:db8::1]:3323", ("2001:db8::1", 3323)),
        ("rtr://[2001:DB8:0::1]", ("2001:db8::1", 323)),
        ("rtr://rpki-1.example/", ("rpki-1.example", 323)),
    ],
)
def test_parse_rtr_url(url: str, expected: tuple[str, int]) -> None:
    assert parse_rtr_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8323",
        "rtr://",
        "rtr://:8323",
        "rtr://127.0.0.1:",
        "rtr://127.0.0.1:0",
        "rtr://127.0.0.1:65536",
        "rtr://127.0.0.1:port",
        "rtr://2001:db8::1:323",
        "rtr://[192.0.2.1]:323",
        "rtr://[not-v6]:323",
        "rtr://user@127.0.0.1:323",
        "rtr://127.0.0.1:323/path",
        "rtr://127.0.0.1:323?x=1",
        "rtr://127.0.0.1:323#frag",
        "rtr://bad host:323",
        "rtr://-bad.example:323",
    ],
)
def test_parse_rtr_url_rejects(url: str) -> None:
    with pytest.raises(ValueError, match=r"rtr|port|host|address|IPv6"):
        parse_rtr_url(url)


def test_app_config_checks_rtr_urls_without_io() -> None:
    AppConfig(sources=("rtr://127.0.0.1:1",))
    with pytest.raises(ValueError, match="port"):
        AppConfig(sources=("rtr://127.0.0.1:99999",))


@pytest.mark.parametrize(
    "kwargs",
    [{"connect_timeout": 0}, {"retry_initial": 0}, {"retry_initial": 5, "retry_max": 1}],
)
def test_constructor_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"retry|connect"):
        RtrSource("rtr://127.0.0.1:1", **kwargs)  # type: ignore[arg-type]


def test_payload_of_has_no_expiry() -> None:
    snap = Snapshot.build()
    assert payload_of(snap).counts() == {"vrp_v4": 0, "vrp_v6": 0, "router_key": 0, "aspa": 0}
    payload = payload_of(Snapshot(v4=bytes(10), v6=bytes(22)))
    assert list(payload.v4_expires) == [NO_EXPIRY]
    assert list(payload.v6_expires) == [NO_EXPIRY]


# ------------------------------------------------------------------------------ core -> edge


async def test_edge_serves_the_core_set_at_every_version(tmp_path: Path) -> None:
    path = tmp_path / "core.json"
    write_export(path, base_export())
    async with running_core(app_config(path)) as core, running_edge(core.port) as edge:
        source = rtr_source_of(edge)
        assert snapshot_of(edge) == snapshot_of(core.app)
        for version in (0, 1, 2):
            want = expected_state(base_export(), version)
            assert await served(core.port, version) == want
            assert await served(port_of(edge), version) == want
        assert (source.session.version, source.connections) == (2, 1)
        assert source.connected
        status = source.status
        assert (status.state, status.attempted, status.last_error) == (SourceState.OK, True, None)
        assert status.records == snapshot_of(core.app).counts()
        assert status.bytes_read > 0
        assert status.last_success_wall is not None


async def test_edge_follows_an_update_by_notify_and_serial_query(tmp_path: Path) -> None:
    path = tmp_path / "core.json"
    write_export(path, base_export())
    async with running_core(app_config(path)) as core, running_edge(core.port) as edge:
        state = core.app.state
        assert state is not None
        write_export(path, updated_export())
        await wait_until(lambda: core.app.state is not state, what="the core's new serial")
        published = time.monotonic()
        # Refresh is 1800 s: only Serial Notify -> Serial Query brings the edge along this fast.
        await wait_until(
            lambda: snapshot_of(edge) == snapshot_of(core.app), within=2.0, what="the edge"
        )
        assert time.monotonic() - published < 2.0
        stats = core.app.server.stats
        assert (stats.reset_queries, stats.serial_queries) == (1, 1)
        for version in (0, 1, 2):
            assert await served(port_of(edge), version) == expected_state(updated_export(), version)


def connected_of(source: RtrSource) -> bool | None:
    """Read afresh (mypy keeps an assert's narrowing of the attribute)."""
    return source.status.connected


def state_of(source: RtrSource) -> SourceState:
    """Read afresh (mypy would keep an earlier assert's narrowing of the attribute)."""
    return source.status.state


async def test_core_loss_keeps_data_until_expire_then_withdraws(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "core.json"
    write_export(path, base_export())
    clock = FakeClock(wall="real", monotonic="real")
    async with running_core(app_config(path)) as core, running_edge(core.port, clock=clock) as edge:
        source = rtr_source_of(edge)
        held = snapshot_of(edge)
        assert held == snapshot_of(core.app)
        assert connected_of(source) is True
        await core.kill()
        await wait_until(lambda: not source.connected, what="the edge to notice")
        assert connected_of(source) is False
        await wait_until(lambda: source.status.errors.get("connect", 0) >= 3, what="reconnects")
        assert source.status.state is SourceState.ERROR
        assert "cannot connect" in (source.status.last_error or "")
        # Still serving what the core last said.
        assert snapshot_of(edge) == held
        assert await served(port_of(edge), 2) == expected_state(base_export(), 2)
        clock.advance(TIMERS.expire - 60)
        await anyio.sleep(0.1)
        assert snapshot_of(edge) == held
        assert not any("withdrawn" in m for m in warnings_of(caplog))
        clock.advance(120)  # past Expire (3600 s after the last End of Data)
        await wait_until(lambda: snapshot_of(edge).is_empty(), what="the withdrawal")
        assert await served(port_of(edge), 2) == RouterState()
        assert any("withdrawn" in m and "expired" in m for m in warnings_of(caplog))
        assert source.status.records == {}
        # Expired (the source's own life ended), not "ok but empty"; later failed reconnects
        # keep saying so.
        assert state_of(source) is SourceState.EXPIRED
        assert not source.has_data
        errors = source.status.errors.get("connect", 0)
        await wait_until(
            lambda: source.status.errors.get("connect", 0) > errors, what="another reconnect"
        )
        assert state_of(source) is SourceState.EXPIRED


async def test_core_restart_with_new_session_makes_the_edge_reset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "core.json"
    write_export(path, base_export())
    first_ids, second_ids = SessionIds(0x1111, 0x2222, 0x3333), SessionIds(0x4444, 0x5555, 0x6666)
    async with running_core(app_config(path), session_ids=first_ids) as core:
        port = core.port
        async with running_edge(port) as edge:
            source = rtr_source_of(edge)
            assert source.session.session_id == first_ids.v2
            await core.kill()
            write_export(path, updated_export())
            again = app_config(path, listen=(ListenAddress("127.0.0.1", port),))
            async with running_core(again, session_ids=second_ids) as restarted:
                await wait_until(
                    lambda: snapshot_of(edge) == snapshot_of(restarted.app),
                    what="the edge to converge",
                )
                assert source.session.session_id == second_ids.v2
                stats = restarted.app.server.stats
                # Serial Query with the old session -> Cache Reset -> Reset Query.
                assert (stats.cache_resets, stats.reset_queries) == (1, 1)
                assert source.emitted == 2  # the first sync and the new data; never withdrawn
                assert not any("withdrawn" in m for m in warnings_of(caplog))
                assert await served(port_of(edge), 2) == expected_state(updated_export(), 2)


async def test_edge_waits_through_no_data_and_follows_the_first_publish(tmp_path: Path) -> None:
    path = tmp_path / "core.json"  # does not exist yet: the core has no data
    async with (
        running_core(app_config(path, arrival_hold=0), wait_for_data=False) as core,
        running_edge(core.port, wait_for_data=False) as edge,
    ):
        source = rtr_source_of(edge)
        await wait_until(lambda: source.status.state is SourceState.WAITING, what="No Data")
        assert source.status.attempted
        assert edge.state is None
        write_export(path, base_export())
        await wait_until(lambda: edge.state is not None, within=2.0, what="the edge's data")
        assert snapshot_of(edge) == snapshot_of(core.app)
        assert core.app.server.stats.errors_sent.get(ErrorCode.NO_DATA_AVAILABLE, 0) >= 1
        assert source.connections == 1


async def test_edge_query_held_by_the_core_is_answered_at_its_first_publish(
    tmp_path: Path,
) -> None:
    path = tmp_path / "core.json"  # does not exist yet: the core has no data
    async with (
        running_core(app_config(path), wait_for_data=False) as core,
        running_edge(core.port, wait_for_data=False) as edge,
    ):
        server = core.app.server
        await wait_until(lambda: server.held_now == 1, what="the edge's query held")
        write_export(path, base_export())
        await wait_until(lambda: edge.state is not None, within=2.0, what="the edge's data")
        assert snapshot_of(edge) == snapshot_of(core.app)
        assert server.stats.errors_sent.get(ErrorCode.NO_DATA_AVAILABLE, 0) == 0
        assert (server.stats.held_queries, server.stats.hold_timeouts, server.held_now) == (1, 0, 0)
        assert rtr_source_of(edge).connections == 1


# ------------------------------------------------------------------------------ scripted cache

SID = 0x1234
VRP_A = encode(Ipv4Prefix(2, 1, 24, 24, 0xC000_0200, 64496))


def reply(version: int, *payload: bytes, serial: int = 1, session_id: int = SID) -> bytes:
    timers = None if version == 0 else TIMERS
    return b"".join(
        [
            encode(CacheResponse(version, session_id)),
            *payload,
            encode(EndOfData(version, session_id, serial, timers)),
        ]
    )


def at(version: int, pdu: bytes) -> bytes:
    return bytes([version]) + pdu[1:]


async def test_legacy_aspa_cache_is_followed_at_v1_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    legacy_seen: list[ErrorReport] = []

    async def first(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(STAYRTR_V2)
        report = await conn.receive()
        assert isinstance(report, ErrorReport)
        legacy_seen.append(report)
        assert await conn.receive() is None  # then the router closes

    async def later(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(1)
        await conn.send(reply(1, at(1, VRP_A)))

    async with ScriptedCache([first, later]).serving() as cache:
        source = quick(RtrSource(f"rtr://127.0.0.1:{cache.port}", name="legacy"))
        async with running_source(source) as sink:
            await wait_until(lambda: source.status.state is SourceState.OK, what="the v1 sync")
            await anyio.sleep(0.3)  # time enough for a reconnect loop to show
            assert len(cache.connections) == 2
        assert source.session.version == 1
        assert source.session.legacy_aspa
        assert sink.last.counts()["vrp_v4"] == 1
        (report,) = legacy_seen
        assert report.code == ErrorCode.CORRUPT_DATA
        (warning,) = warnings_of(caplog)
        assert "pre-standard" in warning
        assert f"127.0.0.1:{cache.port}" in warning


async def test_error_4_reconnects_at_once_at_the_version_named() -> None:
    async def v2(conn: CacheConnection) -> None:
        query = await conn.receive()
        await conn.send(encode(ErrorReport(1, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, conn.raw[0])))
        assert query == ResetQuery(2)
        await conn.stream.aclose()  # like StayRTR 0.6: error, then close

    async def v1(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(1)
        await conn.send(reply(1, at(1, VRP_A)))

    async with ScriptedCache([v2, v1]).serving() as cache:
        source = RtrSource(f"rtr://127.0.0.1:{cache.port}", retry_initial=30, retry_max=60)
        started = time.monotonic()
        async with running_source(source) as sink:
            await wait_until(lambda: bool(sink.payloads), what="the v1 data")
        assert time.monotonic() - started < 2.0  # no 15..30 s backoff
        assert source.session.version == 1


async def test_duplicate_announce_is_reported_data_withdrawn_and_reset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(reply(2, VRP_A, serial=1))
        await conn.send(encode(SerialNotify(2, SID, 2)))
        assert await conn.receive() == SerialQuery(2, SID, 1)
        await conn.send(reply(2, VRP_A, serial=2))  # announces what the router holds
        report = await conn.receive()
        assert isinstance(report, ErrorReport)
        assert (report.code, report.pdu) == (ErrorCode.DUPLICATE_ANNOUNCEMENT, VRP_A)
        assert await conn.receive() is None

    async def fixed(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)  # the data was dropped: no Serial Query
        await conn.send(reply(2, VRP_A, serial=3))

    async with ScriptedCache([broken, fixed]).serving() as cache:
        source = quick(RtrSource(f"rtr://127.0.0.1:{cache.port}"))
        async with running_source(source) as sink:
            await wait_until(lambda: len(sink.payloads) == 3, what="data, withdrawal, data")
        assert [p.counts()["vrp_v4"] for p in sink.payloads] == [1, 0, 1]
        assert source.status.errors == {"protocol": 1}
        assert any("withdrawn" in m for m in warnings_of(caplog))


async def test_unanswered_query_ends_the_connection() -> None:
    async def silent(conn: CacheConnection) -> None:
        await conn.receive()

    async with ScriptedCache([silent]).serving() as cache:
        source = quick(RtrSource(f"rtr://127.0.0.1:{cache.port}"))
        source.response_timeout = 0.1
        async with running_source(source):
            await wait_until(lambda: len(cache.connections) >= 2, what="a second connection")
        assert source.status.errors.get("timeout", 0) >= 1
        assert "unanswered" in (source.status.last_error or "")


async def test_cancelling_the_source_closes_its_connection() -> None:
    async def serve(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(reply(2, VRP_A))

    async with ScriptedCache([serve]).serving() as cache:
        source = RtrSource(f"rtr://127.0.0.1:{cache.port}")
        async with running_source(source) as sink:
            await wait_until(lambda: bool(sink.payloads), what="the data")
            assert is_connected(source)
        assert not is_connected(source)
        assert await cache.connections[0].receive() is None  # EOF: the socket is closed


async def test_refused_connection_is_an_attempt_with_an_error() -> None:
    async with ScriptedCache([]).serving() as cache:
        port = cache.port
    source = quick(RtrSource(f"rtr://127.0.0.1:{port}"))
    async with running_source(source) as sink:
        await wait_until(lambda: source.status.errors.get("connect", 0) >= 2, what="retries")
    assert source.status.attempted
    assert source.status.state is SourceState.ERROR
    assert "cannot connect" in (source.status.last_error or "")
    assert (source.connections, sink.payloads) == (0, [])


# ------------------------------------------------------------------------------ StayRTR 0.5


def stayrtr_doc() -> dict[str, object]:
    """rpki-client's 2022-23 JSON, which StayRTR 0.5 reads (ASPA per AFI)."""
    far = 4_070_908_800
    return {
        "metadata": {"buildtime": "2025-07-20T09:31:35Z"},
        "roas": [
            roa("192.0.2.0/24", 24, 64496),
            roa("198.51.100.0/22", 24, 64497),
            roa("2001:db8::/32", 48, 64498),
            roa("2001:db8:1000::/36", 36, 64499),
        ],
        "provider_authorizations": {
            "ipv4": [{"customer_asid": 64500, "providers": [64501, 64502], "expires": far}],
            "ipv6": [{"customer_asid": 64500, "providers": [64503], "expires": far}],
        },
    }


async def test_stayrtr_edge_ends_at_v1_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    doc = stayrtr_doc()
    cache_file = tmp_path / "stayrtr.json"
    cache_file.write_text(json.dumps(doc))
    want = expected_state(export(roas=doc["roas"]), 0)  # type: ignore[arg-type]
    async with (
        running_stayrtr(cache_file, tmp_path / "stayrtr.log") as port,
        running_edge(port) as edge,
    ):
        source = rtr_source_of(edge)
        await wait_until(
            lambda: source.session.version == 1 and source.status.state is SourceState.OK,
            what="v1 sync",
        )
        await anyio.sleep(1.0)  # a reconnect loop would show as more connections
        assert source.connections == 2
        assert source.session.legacy_aspa
        for version in (0, 1, 2):
            got = await served(port_of(edge), version)
            assert got.prefixes == want.prefixes
            assert not got.aspas
    (warning,) = warnings_of(caplog)
    assert "pre-standard" in warning
    assert f"127.0.0.1:{port}" in warning


# ------------------------------------------------------------------------------ the real table

TABLE = DATA / "rpkilog" / "rpkiclient_summary_20250720T093135Z.json.bz2"
NEXT_TABLE = DATA / "rpkilog" / "rpkiclient_summary_20250720T100145Z.json.bz2"
#: The first export's build time (2025-07-20T09:31:33Z): every entry is valid then.
REFERENCE_TIME = 1_753_003_893
TABLE_VRPS = 723_521


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_real_table_through_an_rtr_chain(tmp_path: Path, anyio_backend: str) -> None:
    """The 723,521-VRP table core -> edge over RTR v2: equal sets, timings printed."""
    path = tmp_path / "table.json.bz2"
    shutil.copyfile(TABLE, path)
    config = app_config(path, reference_time=REFERENCE_TIME)
    async with running_core(config, within=300) as core:
        assert snapshot_of(core.app).vrp_count == TABLE_VRPS
        started = time.monotonic()
        async with running_edge(core.port, wait_for_data=False) as edge:
            await wait_until(
                lambda: edge.state is not None and snapshot_of(edge).vrp_count == TABLE_VRPS,
                within=120,
                what="the edge to serve the whole table",
            )
            start_to_serve = time.monotonic() - started
            assert snapshot_of(edge) == snapshot_of(core.app)
            assert snapshot_of(edge).counts() == {
                "vrp_v4": 580_366,
                "vrp_v6": 143_155,
                "router_key": 2,
                "aspa": 100,
            }
            state = core.app.state
            await anyio.to_thread.run_sync(shutil.copyfile, NEXT_TABLE, tmp_path / "next.tmp")
            await anyio.Path(tmp_path / "next.tmp").replace(path)
            await wait_until(lambda: core.app.state is not state, within=300, what="the update")
            published = time.monotonic()
            await wait_until(
                lambda: snapshot_of(edge) == snapshot_of(core.app), within=60, what="the edge"
            )
            propagation = time.monotonic() - published
            new = core.app.state
            assert new is not None
            assert new.last_delta is not None
            changes = new.last_delta.counts()
            assert rtr_source_of(edge).connections == 1
    print(
        f"\nRTR chain, 723,521 VRPs, {anyio_backend}: edge start-to-serve {start_to_serve:.2f} s; "
        f"propagation core publish -> edge publish {propagation:.3f} s "
        f"(delta +{changes['vrp_announce']}/-{changes['vrp_withdraw']} VRPs)"
    )


async def test_a_reconnect_without_end_of_data_does_not_count_as_refreshing(
    tmp_path: Path,
) -> None:
    """Contract L-66: a source that reconnects but gets no End of Data has not recovered: once
    the cache's Retry interval after the loss has passed it can no longer refresh."""
    path = tmp_path / "core.json"
    write_export(path, base_export())
    clock = FakeClock(wall="real", monotonic="real")

    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await anyio.sleep_forever()  # accepts, never answers

    async with running_core(app_config(path)) as core, running_edge(core.port, clock=clock) as edge:
        source = rtr_source_of(edge)
        assert source.refreshing()
        port = core.port
        await core.kill()
        await wait_until(lambda: not source.connected, what="the edge to notice")
        assert source.refreshing()  # within Retry of the loss: it may come back
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, silent)
            before = source.connections
            await wait_until(lambda: source.connections > before, what="a reconnect")
            assert source.connected
            clock.advance(TIMERS.retry + 1)
            assert not source.refreshing()  # connected, but no End of Data since the loss
            tg.cancel_scope.cancel()


async def test_a_sync_is_stamped_in_the_shared_effective_time() -> None:
    """Contract L-44: an End of Data marks its generation time and its deadline (End of Data +
    Expire) with the shared effective time, which a set-back wall clock does not pull back."""
    from upstream.timekeeper import TimeKeeper

    async def cache(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(reply(2, VRP_A))
        assert await conn.receive() is None

    clock = FakeClock(wall="real", monotonic="real")
    keeper = TimeKeeper(clock)
    ahead = time.time() + 5000
    keeper.observe(ahead)  # e.g. a recovered state written under a clock since set back
    async with ScriptedCache([cache]).serving() as server:
        source = quick(RtrSource(f"rtr://127.0.0.1:{server.port}", name="c", clock=keeper))
        async with running_source(source) as sink:
            await wait_until(lambda: bool(sink.deliveries), what="the sync")
    (delivery,) = sink.deliveries
    generated = delivery.payload.generated
    assert generated is not None
    assert generated >= int(ahead)
    assert delivery.expires_at is not None
    assert abs(delivery.expires_at - (ahead + TIMERS.expire)) < 5
    assert source.status.last_success_wall is not None
    assert source.status.last_success_wall >= ahead
    assert (delivery.rtr_session, delivery.rtr_serial) == (SID, 1)

"""An RTR source renegotiated from version 2 to 1 is stored in the retained shape of the ASPA
revocation (P-33): no ASPA, coverage or capability, `NOT_INCREMENTAL_METADATA`, protocol 2,
the v2 sync's own times; recovery keeps the VRPs' remaining life and starts with a Reset."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from persistence.location import StateLocation
from persistence.sqlite_backend import SQLiteBackend
from persistence.state import NOT_INCREMENTAL_METADATA, PersistedState, SourceRecord
from rtr_protocol import (
    AspaPdu,
    CacheResponse,
    EndOfData,
    ErrorCode,
    ErrorReport,
    Ipv4Prefix,
    ResetQuery,
    SerialQuery,
    encode,
)
from tests.server.helpers import TIMERS, wait_until
from tests.upstream.rtr_source_helpers import CacheConnection, ScriptedCache
from upstream import Client, ClientConfig, SourceConfig
from upstream.rtr_source import RtrSource

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
SID = 0x2345
V2_REPLY = b"".join(
    [
        encode(CacheResponse(2, SID)),
        encode(Ipv4Prefix(2, 1, 24, 24, 0xC000_0200, 64496)),
        encode(AspaPdu(2, 1, 64500, (64502, 64503))),
        encode(EndOfData(2, SID, 1, TIMERS)),
    ]
)


def config(port: int, db: Path) -> ClientConfig:
    return ClientConfig(
        (SourceConfig("cache", f"rtr://127.0.0.1:{port}", retry_initial=0.05, retry_max=0.2),),
        state=StateLocation("sqlite", db),
        flush_timeout=5.0,
    )


def aspas_of(client: Client) -> int:
    current = client.get_snapshot()
    assert current is not None
    return current.snapshot.counts()["aspa"]


def stored_source(db: Path) -> tuple[PersistedState, SourceRecord]:
    backend = SQLiteBackend(db, read_only=True)
    backend.open()
    try:
        state = backend.read_state()
    finally:
        backend.close()
    assert state is not None
    (record,) = state.sources
    return state, record


async def test_a_v2_to_v1_renegotiation_is_stored_as_the_revoked_shape(tmp_path: Path) -> None:
    db = tmp_path / "state.db"

    async def v2(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(2)
        await conn.send(V2_REPLY)
        await conn.stream.aclose()  # the cache goes away; it comes back speaking v1 only

    async def v1_only(conn: CacheConnection) -> None:
        query = await conn.receive()
        assert query == SerialQuery(2, SID, 1)
        await conn.send(encode(ErrorReport(1, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, conn.raw[0])))
        await conn.stream.aclose()

    async def v1_silent(conn: CacheConnection) -> None:
        assert await conn.receive() == ResetQuery(1)  # never answered: no v1 End of Data

    async with ScriptedCache([v2, v1_only, v1_silent]).serving() as cache:
        port = cache.port
        client = Client(config(port, db))
        async with client, anyio.create_task_group() as tg:
            await tg.start(client.run)
            source = client._sources["cache"][1]
            assert isinstance(source, RtrSource)
            with anyio.fail_after(TIMEOUT):
                first = await client.wait_ready()
            assert first.snapshot.counts()["aspa"] == 1
            synced = await client.flush()
            _, v2_record = stored_source(db)
            await wait_until(lambda: len(cache.connections) >= 3, what="the v1 reconnection")
            await wait_until(lambda: not aspas_of(client), what="the ASPAs revoked")
            with anyio.fail_after(TIMEOUT):
                trimmed = await client.flush()
            assert trimmed.snapshot_id.generation > synced.snapshot_id.generation
            assert source.session.version == 1
            await client.aclose()
            tg.cancel_scope.cancel()
    assert v2_record.protocol == 2
    assert v2_record.incremental_usable
    assert v2_record.rtr_session == SID
    assert "aspa" in v2_record.capabilities
    state, record = stored_source(db)
    assert record.metadata_json == NOT_INCREMENTAL_METADATA
    assert not record.incremental_usable
    assert record.protocol == 2  # the version its data was received at
    assert not record.aspas
    assert record.aspa_families == 0
    assert "aspa" not in record.capabilities | record.selected | record.present
    assert record.vrp_count == 1  # the VRPs keep their remaining life
    # The v2 sync's own times, never a new v1 End of Data.
    assert record.accepted_at == v2_record.accepted_at
    assert record.generated_at == v2_record.generated_at
    assert record.expires_at == v2_record.expires_at
    assert state.config_epoch == state.state_id.epoch

    # The next life recovers the VRPs but has no incremental base: it starts with a Reset.
    again = Client(config(port, db))  # entering recovers; nothing connects before run
    async with again:
        assert again.keeping is not None
        plan = again.keeping.recovery
        assert plan is not None
        assert "cache" in plan.recovered, plan.notes
        recovered = plan.recovered["cache"]
        assert (recovered.rtr_session, recovered.rtr_serial) == (None, None)
        assert recovered.rtr_version == 2
        assert any("starts with a Reset" in note for note in plan.notes)
        assert plan.snapshot is not None
        assert plan.snapshot.vrp_count == 1

"""Reset Query at v0, v1 and v2 over real TCP: content per version, session ids, End of Data,
§8.1 order; pipelined and split queries."""

from __future__ import annotations

import struct
from pathlib import Path

import anyio
import pytest

from rtr_protocol import AspaPdu, CacheResponse, EndOfData, RouterKeyPdu
from tests.server.helpers import (
    TIMERS,
    RouterState,
    app_config,
    assert_in_order,
    base_export,
    expected_state,
    payload_types,
    port_of,
    running_app,
    write_export,
)
from tests.server.rtr_client import Response, RtrClient, reset_query, serial_query

pytestmark = pytest.mark.anyio


async def test_full_dump_per_version(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with running_app(app_config(path)) as app:
        assert app.state is not None
        serial = app.state.serial.value
        responses: dict[int, Response] = {}
        for version in (0, 1, 2):
            async with await RtrClient.connect(port_of(app)) as client:
                responses[version] = await client.reset(version)
                assert client.notifies == []

    session_ids = set()
    for version, resp in responses.items():
        # Every PDU carries the query's version.
        assert resp.cache_response.version == version
        assert resp.end_of_data.version == version
        assert {p.version for p in resp.payload} <= {version}
        # Cache Response and End of Data name the same session; End of Data the serial.
        session_id = resp.cache_response.session_id
        assert resp.end_of_data.session_id == session_id
        assert resp.end_of_data.serial == serial
        session_ids.add(session_id)
        # Content equals the source, filtered by version.
        held = RouterState().apply(resp.payload)
        assert held == expected_state(doc, version)
        # 8210bis order, checked against an independent sort.
        assert_in_order(resp.payload)

    assert len(session_ids) == 3, "session ids must differ per version"

    v0, v1, v2 = responses[0], responses[1], responses[2]
    # v0: only prefixes, 12-octet End of Data without timers.
    assert payload_types(v0.payload) == [4, 6]
    assert len(v0.raw_end_of_data) == 12
    assert v0.raw_end_of_data[4:8] == b"\x00\x00\x00\x0c"
    assert v0.end_of_data.timers is None
    # v1: adds router keys, no ASPA; 24-octet End of Data with the configured timers.
    assert payload_types(v1.payload) == [4, 6, 9]
    assert not any(isinstance(p, AspaPdu) for p in v1.payload)
    # v2: prefixes, router keys, ASPA in type order.
    assert payload_types(v2.payload) == [4, 6, 9, 11]
    for resp in (v1, v2):
        raw = resp.raw_end_of_data
        assert len(raw) == 24
        assert struct.unpack(">III", raw[12:24]) == (TIMERS.refresh, TIMERS.retry, TIMERS.expire)
        assert resp.end_of_data.timers == TIMERS
        keys = [p for p in resp.payload if isinstance(p, RouterKeyPdu)]
        assert len(keys) == 3
        assert all(k.announce for k in keys)
    # Same prefixes in every version.
    assert v0.payload == [
        type(p)(0, p.flags, p.prefix_length, p.max_length, p.prefix, p.asn)
        for p in v1.payload
        if not isinstance(p, RouterKeyPdu | AspaPdu)
    ]

    # ASPA in the current layout: flags in octet 2, zero octet 3, length 12 + 4N, no AFI.
    aspas = [
        (p, raw)
        for p, raw in zip(v2.payload, v2.raw_payload, strict=True)
        if isinstance(p, AspaPdu)
    ]
    assert [p.customer for p, _ in aspas] == [64499, 64500, 64510, 4_200_000_001]
    for pdu, raw in aspas:
        version, pdu_type, flags, zero, length, customer = struct.unpack(">BBBBII", raw[:12])
        assert (version, pdu_type, flags, zero) == (2, 11, 1, 0)
        assert length == len(raw) == 12 + 4 * len(pdu.providers)
        providers = struct.unpack(f">{len(pdu.providers)}I", raw[12:])
        assert customer == pdu.customer
        assert providers == pdu.providers
    by_customer = {p.customer: p.providers for p, _ in aspas}
    assert by_customer[64500] == (64501, 64502, 64503)  # two objects, one PDU
    assert by_customer[4_200_000_001] == (65000,)  # AS0 dropped
    assert by_customer[64510] == (0,)


async def test_pipelined_queries_in_one_segment(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with running_app(app_config(path)) as app:
        assert app.state is not None
        session = app.state.session_ids.for_version(1)
        serial = app.state.serial.value
        async with await RtrClient.connect(port_of(app)) as client:
            await client.send(reset_query(1), serial_query(1, session, serial), reset_query(1))
            full = await client.read_response()
            empty = await client.read_response()
            again = await client.read_response()
            await client.expect_silence(0.1)
    assert RouterState().apply(full.payload) == expected_state(doc, 1)
    assert empty.payload == []
    assert empty.cache_response == CacheResponse(1, session)
    assert empty.end_of_data == EndOfData(1, session, serial, TIMERS)
    assert again.payload == full.payload


async def test_query_split_across_segments(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = base_export()
    write_export(path, doc)
    async with (
        running_app(app_config(path)) as app,
        await RtrClient.connect(port_of(app)) as client,
    ):
        query = reset_query(2)
        for i in range(len(query)):
            await client.send(query[i : i + 1])
            await anyio.sleep(0.01)
        response = await client.read_response()
    assert RouterState().apply(response.payload) == expected_state(doc, 2)

"""The `Client`'s construction, entering and home: no I/O before entering, set-up on entering
(a source's trust store read off the loop, a bad one refused before any network, re-entering
while that runs refused), and one event loop and thread per client (lifecycle contract L-01,
L-02, L-03, L-31)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.upstream.helpers import export, write_atomically
from upstream import ClientConfig, SourceConfig
from upstream.client import Client, ClientState
from upstream.http_source import HttpSource
from upstream.source import SourceSetupError

pytestmark = pytest.mark.anyio

A = [("192.0.2.0/24", 24, 64496)]
#: A URL nothing listens on: these tests never get as far as a request.
URL = "https://127.0.0.1:9/rpki.json"


def http_config(ca_file: Path, *extra: SourceConfig, revision: int = 0) -> ClientConfig:
    return ClientConfig(
        (SourceConfig("https", URL, ca_file=str(ca_file)), *extra), revision=revision
    )


async def test_construction_reads_no_ca_file_and_entering_refuses_a_bad_one(
    tmp_path: Path,
) -> None:
    """The constructor only stores and checks; the CA file is read when the client is
    entered, which raises before any network and leaves the client CREATED to try again."""
    pem = tmp_path / "ca.pem"  # does not exist yet: constructing must not notice
    client = Client(http_config(pem))
    source = client.sources[0]
    assert isinstance(source, HttpSource)
    with pytest.raises(SourceSetupError, match="cannot use CA file"):
        await client.__aenter__()
    assert client.state is ClientState.CREATED
    pem.write_text("not a certificate\n")
    with pytest.raises(SourceSetupError, match="cannot use CA file"):
        await client.__aenter__()
    assert client.state is ClientState.CREATED
    pem.unlink()
    with pytest.raises(SourceSetupError):
        await source.prepare()  # the source alone: the same check, retried


async def test_entering_again_while_the_first_entry_prepares_is_refused(
    tmp_path: Path,
) -> None:
    """A CA file that is a FIFO holds the first entry in its worker thread until written."""
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    client = Client(http_config(fifo))
    failures: list[BaseException] = []

    async def enter() -> None:
        try:
            await client.__aenter__()
        except SourceSetupError as exc:
            failures.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(enter)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(RuntimeError, match="being opened"):
                await client.__aenter__()
            assert client.state is ClientState.CREATED
            # Release the reader: an invalid certificate ends the first entry with a refusal.
            await anyio.to_thread.run_sync(fifo.write_text, "not a certificate\n")
    assert len(failures) == 1
    assert client.state is ClientState.CREATED


async def test_a_close_during_the_preparation_cancels_it_and_waits_for_its_thread(
    tmp_path: Path,
) -> None:
    """L-04: the CA read blocks in its worker thread; a concurrent close cancels the entry,
    stays CLOSING until that thread ended and only then reports CLOSED."""
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    client = Client(http_config(fifo))
    entered: list[BaseException] = []
    closed = anyio.Event()

    async def enter() -> None:
        try:
            await client.__aenter__()
        except RuntimeError as exc:
            entered.append(exc)

    async def close() -> None:
        await client.aclose()
        closed.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(enter)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(close)
            await anyio.wait_all_tasks_blocked()
            await anyio.sleep(0.2)
            assert client.state is ClientState.CLOSING  # the thread still reads
            assert not closed.is_set()
            await anyio.to_thread.run_sync(fifo.write_text, "not a certificate\n")
    assert closed.is_set()
    assert client.state is ClientState.CLOSED
    assert [str(e) for e in entered] == ["the client was closed while it was being opened"]


async def test_apply_config_refuses_a_source_that_cannot_be_prepared(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    first = ClientConfig((SourceConfig("a", str(path)),), poll_interval=0.05)
    async with Client(first) as client:
        bad = http_config(tmp_path / "missing.pem", SourceConfig("a", str(path)), revision=1)
        with pytest.raises(SourceSetupError, match="cannot use CA file"):
            await client.apply_config(bad)
        assert client.config is first
        assert [s.name for s in client.sources] == ["a"]


async def test_a_client_is_refused_on_another_loop_or_thread(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    client = Client(ClientConfig((SourceConfig("a", str(path)),), poll_interval=0.05))
    async with client:
        seen: list[str] = []

        def in_another_thread() -> None:
            try:
                client.watch()
            except RuntimeError as exc:
                seen.append(f"thread: {exc}")

            async def on_another_loop() -> None:
                for call in (client.wait_ready, client.aclose, client.run):
                    try:
                        await call()
                    except RuntimeError as exc:
                        seen.append(f"loop: {exc}")

            anyio.run(on_another_loop)

        worker = threading.Thread(target=in_another_thread)
        worker.start()
        await anyio.to_thread.run_sync(worker.join, 10.0)
        assert not worker.is_alive()
        assert len(seen) == 4, seen
        assert all("belongs to the event loop" in line for line in seen), seen
        assert client.state is ClientState.OPEN  # nothing of it was touched
        with client.watch():
            pass  # and on its own loop it still works


async def test_a_client_that_failed_to_enter_may_enter_on_another_loop(tmp_path: Path) -> None:
    """A refused entry binds nothing: the same client enters on a second loop."""
    path = tmp_path / "a.json"
    write_atomically(path, export(A))
    pem = tmp_path / "ca.pem"
    client = Client(http_config(pem, SourceConfig("a", str(path))))
    with pytest.raises(SourceSetupError):
        await client.__aenter__()
    result: dict[str, Any] = {}

    async def enter_elsewhere() -> None:
        async with client:
            result["state"] = client.state

    pem.write_text(_self_signed_pem())
    await anyio.to_thread.run_sync(anyio.run, enter_elsewhere)
    assert result["state"] is ClientState.OPEN
    assert client.state is ClientState.CLOSED


def _self_signed_pem() -> str:
    """A valid CA certificate (PEM) made on the spot."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


async def test_reference_time_is_the_public_way_to_freeze_the_clock(tmp_path: Path) -> None:
    """Contract L-47: no public clock API; an offline evaluation is `reference_time`."""
    path = tmp_path / "a.json"
    write_atomically(path, export(A, expires=1_700_000_000))
    for reference, served in ((1_699_999_000.0, 1), (1_700_000_500.0, 0)):
        config = ClientConfig(
            (SourceConfig("a", str(path)),), poll_interval=0.05, reference_time=reference
        )
        async with Client(config) as client, anyio.create_task_group() as tg:
            await tg.start(client.run)
            with anyio.fail_after(5):
                ready = await client.wait_ready()
            assert ready.snapshot.vrp_count == served
            assert abs(client.keeper.wall() - reference) < 1e-6
            await client.aclose()
    import upstream

    assert "Clock" not in upstream.__all__
    assert "SystemClock" not in upstream.__all__

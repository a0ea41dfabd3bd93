"""The shared reader beside an owner in another process, and what importing it pulls in (P-62)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from persistence.shared import SharedReaderConfig, SharedSnapshotClient
from tests.persistence.helpers import ROOT

TIMEOUT = 20.0


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


async def _line(lines: TextReceiveStream, buffer: list[str]) -> str:
    """The next whole line of the owner's stdout."""
    with anyio.fail_after(TIMEOUT):
        while "\n" not in buffer[0]:
            buffer[0] += await lines.receive()
    line, buffer[0] = buffer[0].split("\n", 1)
    return line


@pytest.mark.anyio
async def test_follows_an_owner_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    command = [sys.executable, "-m", "tests.persistence.shared_owner", str(path)]
    process: Process = await anyio.open_process(command, env=_env(), cwd=ROOT)
    async with process:
        assert process.stdout is not None
        assert process.stdin is not None
        lines, buffer = TextReceiveStream(process.stdout), [""]
        word, store_id = (await _line(lines, buffer)).split()
        assert word == "ready"
        config = SharedReaderConfig(path=path, poll_interval=0.02, recheck=0.02)
        async with SharedSnapshotClient(config) as reader, anyio.create_task_group() as tg:
            snap = reader.get_snapshot()
            assert snap is not None
            assert (snap.store_id, snap.generation) == (store_id, 1)
            watch = reader.watch()
            await tg.start(reader.run)
            for generation in (2, 3):
                await process.stdin.send(b"commit\n")
                assert await _line(lines, buffer) == f"committed {generation}"
                with anyio.fail_after(TIMEOUT):
                    event = await watch.__anext__()
                    while event.end != (1, generation):  # the initial event comes first
                        event = await watch.__anext__()
                assert {v.asn for v in event.snapshot.snapshot.vrps()} == {64496 + generation}
            status = reader.get_status()
            assert (status.store_id, status.generation, status.persistence_error) == (
                store_id,
                3,
                None,
            )
            await reader.aclose()
        await process.stdin.aclose()
        with anyio.fail_after(TIMEOUT):
            assert await process.wait() == 0


def test_importing_the_reader_pulls_in_no_writer_or_upper_layer() -> None:
    code = (
        "import sys, persistence.shared\n"
        "bad = sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in {'duckdb', 'upstream', 'rtr_server', 'filelock'})\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
    )
    assert result.stdout.strip() == "[]"

"""Real global table (723,521 VRPs) then its successor, into every Debian 12 client at once."""

from __future__ import annotations

import multiprocessing
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from rtrclients import checks, summary
from rtrclients.lab import (
    DAEMONS,
    Lab,
    daemons_running,
    replace_atomically,
    run_root,
    timelines,
)
from rtrclients.serverlog import published_at
from rtrclients.vrps import Expected, expected_from_export
from rtrserve import REAL_REFERENCE_TIME, REAL_TABLE, REAL_TABLE_NEXT, start_rtr_serve

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

#: Measured: 5-25 s for the full table into each daemon on 2 cores; bounded far above that.
HOLD_TIMEOUT = 300.0
#: After "published serial 1": < 1 s, OpenBGPD 0-9 s (random wait after a Serial Notify).
UPDATE_TIMEOUT = 240.0
REFERENCE = datetime.fromisoformat(REAL_REFERENCE_TIME.replace("Z", "+00:00")).timestamp()


@dataclass
class RealTable:
    """The lab plus the independently computed sets of both files."""

    lab: Lab
    before_future: Future[Expected]
    after_future: Future[Expected]
    dump_sessions: dict[int, int] = field(default_factory=dict)

    @property
    def before(self) -> Expected:
        """What REAL_TABLE must give."""
        return self.before_future.result(timeout=600)

    @property
    def after(self) -> Expected:
        """What REAL_TABLE_NEXT must give."""
        return self.after_future.result(timeout=600)


@dataclass
class Update:
    """The swap to REAL_TABLE_NEXT: when rtr-serve published serial 1."""

    published: float


@pytest.fixture(scope="module")
def real() -> Iterator[RealTable]:
    """rtr-serve on a copy of REAL_TABLE (started first, G1), then all five daemons."""
    run_dir = run_root() / "real"
    run_dir.mkdir()
    served = run_dir / "served.json.bz2"
    shutil.copyfile(REAL_TABLE, served)
    # The reference sets are computed in another process (no GIL shared with the pollers),
    # while rtr-serve loads the same file.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        before = pool.submit(expected_from_export, REAL_TABLE, not_expired_at=REFERENCE)
        after = pool.submit(expected_from_export, REAL_TABLE_NEXT, not_expired_at=REFERENCE)
        with start_rtr_serve(served, run_dir, reference_time=REAL_REFERENCE_TIME) as server:
            server.wait_log(r"published serial 0 ", 300)
            with (
                daemons_running(run_dir, server.port, DAEMONS) as clients,
                timelines(clients) as polls,
            ):
                lab = Lab("real", server, clients, served, run_dir, timelines=polls)
                yield RealTable(lab, before, after)


@pytest.fixture(scope="module")
def real_update(real: RealTable) -> Update:
    """Swap in REAL_TABLE_NEXT once every daemon shows the full table (deltas start at 0)."""
    lab = real.lab
    before = real.before
    deadline = time.monotonic() + HOLD_TIMEOUT
    for client in lab.clients.values():  # so that every delta starts at serial 0
        checks.wait_counts(client, before, max(1.0, deadline - time.monotonic()))
    replace_atomically(REAL_TABLE_NEXT, lab.served)
    lab.server.wait_log(r"published serial 1[ :]", 300)
    published = published_at(lab.server, 1)
    assert published is not None
    return Update(published)


def test_expected_sets(real: RealTable) -> None:
    """The independent computation agrees with SOURCES.md (guards the reference itself)."""
    assert real.before.counts == (580_366, 143_155)
    assert real.before.prefix_counts == (512_044, 128_671)
    assert real.after.counts == (580_367, 143_157)
    assert real.after.prefix_counts == (512_046, 128_671)
    assert len(real.after.vrps - real.before.vrps) == 9
    assert len(real.before.vrps - real.after.vrps) == 6
    assert len(real.before.router_keys) == 2


@pytest.mark.parametrize("name", DAEMONS)
def test_full_table(real: RealTable, name: str) -> None:
    """(a) The daemon holds exactly the real table after one Reset Query at its version."""
    load = checks.full_load(real.lab, name, real.before, HOLD_TIMEOUT)
    checks.record_full(real.lab, name, real.before, load)


@pytest.mark.parametrize("version", [0, 1])
def test_rtrdump_full_table(real: RealTable, version: int) -> None:
    """(a) rtrdump -rtr.version 0/1 dumps exactly the real table (router keys only at v1)."""
    started = time.time()
    result = checks.rtrdump_full(real.lab, version, real.before)
    assert result.session_id is not None
    real.dump_sessions[version] = result.session_id
    keys = f" +{len(result.router_keys)} keys"
    summary.record(
        f"rtrdump-v{version}",
        version=f"v{result.version}",
        full=f"{len(result.vrps):,}{keys}",
        load_s=f"{time.time() - started:.2f} (dump)",
    )


@pytest.mark.parametrize("name", DAEMONS)
def test_update(real: RealTable, real_update: Update, name: str) -> None:
    """(b) Serial Notify -> Serial Query -> delta +9/-6 on the same connection, new set held."""
    result = checks.update(
        real.lab,
        name,
        real.after,
        real_update.published,
        from_serial=0,
        to_serial=1,
        vrp_changes=(9, 6),
        timeout=UPDATE_TIMEOUT,
        before=real.before,
    )
    d = result.delta
    summary.record(
        name,
        update=checks.shown(real.lab, name, real.after),
        delta=f"v{d.version} {d.from_serial}->{d.to_serial} +{d.vrps[0]}/-{d.vrps[1]}",
        sent_s=result.sent_s,
        held_s=result.held,
    )


@pytest.mark.parametrize("version", [0, 1])
def test_rtrdump_serial_query(real: RealTable, real_update: Update, version: int) -> None:
    """(b) rtrdump's Serial Query from serial 0 gets exactly the 9 announcements, 6 withdrawals."""
    delta = checks.rtrdump_serial(
        real.lab, version, real.before, real.after, from_serial=0, to_serial=1
    )
    assert delta.vrps == (9, 6)
    if version in real.dump_sessions:
        assert checks.session_ids(real.lab)[version] == real.dump_sessions[version]
    summary.record(
        f"rtrdump-v{version}",
        update="(one-shot) delta applied = new set",
        delta=f"v{delta.version} 0->1 +9/-6",
    )


def test_version_and_one_session_per_daemon(real: RealTable, real_update: Update) -> None:
    """Item 3: every daemon kept one connection at its version (no reconnect loop), then closes.

    Stopping each daemon makes rtr-serve log the session's totals: version, final serial,
    queries and the number of Serial Notifies it was sent.
    """
    lab = real.lab
    for name in DAEMONS:
        result = checks.close_and_check(lab, name, final_serial=1)
        summary.record(name, sessions=result["cell"])
    assert lab.stray_connections() == []
    assert lab.server.count(r"refused router") == 0

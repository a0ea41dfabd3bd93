"""Black-box: a real ``rtr-serve`` whose wall clock is moved while it runs (libfaketime).

What is checked is what a router gets from a fresh RTR Reset Query over loopback: an entry past
its ``expires`` by the process's effective time (which never moves back, whatever the wall
clock does) is never served, and an unchanged answer, new content, a restart or a follower
never revive it (lifecycle contract "时间与到期", persistence contract "启动和恢复"; issue 12
items 1, 2, 3, 10 and 12). The clock tolerance is the default 300 s; the jumps are 3600 s.
Real entry lifetimes are short (20-60 s) so the module stays within a few minutes. The
processes run on asyncio or trio in turn (each case once).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from rtr_protocol import ErrorReport, Ipv4Prefix, Ipv6Prefix
from tests.blackbox.faketime import (
    TREE,
    Process,
    WallClock,
    require_libfaketime,
    rtr_serve,
    timestamp,
)
from tests.server.helpers import FAR, PAST, Doc, export, roa, write_export
from tests.server.rtr_client import Response, RtrClient, reset_query
from tests.upstream.http_server import Reply, ScriptedServer

X = "192.0.2.0/24-24 AS64496"
Y = "198.51.100.0/24-24 AS64497"
Z = "203.0.113.0/24-24 AS64498"
Z2 = "203.0.113.0/25-25 AS64498"
#: A jump well beyond the 300 s clock tolerance.
JUMP = 3600
Served = frozenset[str] | None


@pytest.fixture(autouse=True)
def _libfaketime() -> None:
    require_libfaketime()


# ------------------------------------------------------------------------------ exports


def entry(vrp: str, expires: int | None = None) -> dict[str, Any]:
    """The rpki-client ``roas`` entry of ``vrp`` ("prefix-maxlen ASn"); no ``expires``: never."""
    prefix, rest = vrp.split("-")
    max_length, asn = rest.split(" AS")
    item = roa(prefix, int(max_length), int(asn), FAR if expires is None else expires)
    if expires is None:
        del item["expires"]
    return item


def document(*entries: dict[str, Any]) -> Doc:
    """An export of these ``roas``."""
    return export(roas=entries)


# ------------------------------------------------------------------------------ what is served


def _text(pdu: Ipv4Prefix | Ipv6Prefix) -> str:
    network = ipaddress.IPv4Network if isinstance(pdu, Ipv4Prefix) else ipaddress.IPv6Network
    return f"{network((pdu.prefix, pdu.prefix_length))}-{pdu.max_length} AS{pdu.asn}"


async def _reset(port: int) -> Served:
    async with await RtrClient.connect(port) as client:
        await client.send(reset_query(2))
        reply = await client.read_reply(within=10)  # lenient: the machine may be loaded
    if isinstance(reply, ErrorReport) and reply.code == 2:
        return None
    assert isinstance(reply, Response), f"unexpected reply to a Reset Query: {reply!r}"
    return frozenset(_text(p) for p in reply.payload if isinstance(p, Ipv4Prefix | Ipv6Prefix))


def served(process: Process) -> Served:
    """The VRPs a fresh RTR v2 Reset Query gets; None for No Data Available."""
    assert process.proc.poll() is None, f"{process.name} exited"
    try:
        return anyio.run(_reset, process.port)
    except TimeoutError:
        raise AssertionError(f"{process.name}: no answer to a Reset Query in time") from None


def show(now: Served) -> str:
    return "No Data Available" if now is None else "{" + ", ".join(sorted(now)) + "}"


def real(when: float) -> str:
    """A real time as the log's ``ts`` would read it (the log itself shows the faked clock)."""
    return datetime.fromtimestamp(when, UTC).strftime("%H:%M:%S.%f")[:-5] + "Z (real)"


def wait_served(
    process: Process, predicate: Callable[[Served], bool], within: float, what: str
) -> Served:
    """Ask every 0.2 s until what is served satisfies ``predicate``; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        now = served(process)
        if predicate(now):
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:.1f} s; served: {show(now)}")
        time.sleep(0.2)


def has(*vrps: str) -> Callable[[Served], bool]:
    return lambda now: now is not None and set(vrps) <= now


def lacks(vrp: str) -> Callable[[Served], bool]:
    return lambda now: now is None or vrp not in now


def fail_if(condition: bool, message: str) -> None:
    """Fail with just ``message`` (the served sets say it all; no assert introspection)."""
    if condition:
        raise AssertionError(message)


def watch(process: Process, seconds: float) -> Iterator[tuple[float, Served]]:
    """(real time, what is served) every 0.25 s for ``seconds`` seconds."""
    end = time.monotonic() + seconds
    while True:
        yield time.time(), served(process)
        if time.monotonic() >= end:
            return
        time.sleep(0.25)


def assert_never(process: Process, vrp: str, seconds: float, why: str) -> None:
    """``vrp`` is not in any answer for ``seconds`` seconds."""
    for when, now in watch(process, seconds):
        fail_if(not lacks(vrp)(now), f"{why}: {vrp} served at {real(when)}: {show(now)}")


def persisted(serial: int | None = None) -> Callable[[dict[str, Any]], bool]:
    """The owner's log line saying a state (of ``serial``, if given) was committed."""

    def match(line: dict[str, Any]) -> bool:
        text = str(line.get("msg", ""))
        return "persisted state" in text and (serial is None or f"serial {serial}," in text)

    return match


def before_real_expiry(expires: int) -> None:
    """The checks so far ran before the entry's real expiry (otherwise they prove nothing)."""
    assert time.time() < expires - 0.5, "too slow: the entry's real expiry was reached"


# ------------------------------------------------------------------------------ control


def test_harness_moves_only_the_wall_clock(tmp_path: Path) -> None:
    """A child started like rtr-serve: this tree's code, wall clock offset, monotonic real,
    and time.sleep working (the libfaketime 0.9.10 EINVAL worked around)."""
    library = require_libfaketime()
    clock = WallClock(tmp_path / "clock", offset=-JUMP)
    probe = (
        "import json, time, rtr_server; time.sleep(0.05); "
        "print(json.dumps([rtr_server.__file__, time.time(), time.monotonic()]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=clock.environ(library),
        cwd=tmp_path,  # so only PYTHONPATH can lead to this tree
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    module, wall, mono = json.loads(result.stdout)
    assert Path(module).resolve().is_relative_to(TREE)
    assert abs(wall - (time.time() - JUMP)) < 10
    assert abs(mono - time.monotonic()) < 10


#: A child whose event loop sleeps 1 ms at a time while another thread keeps the GIL busy,
#: printing the worst wake-up delay in seconds (the GIL hands over every 5 ms or so).
BUSY_THREAD_PROBE = """
import threading, time, anyio
async def main():
    done = threading.Event()
    def busy():
        while not done.is_set():
            sum(range(1000))
    worker = threading.Thread(target=busy)
    worker.start()
    worst = 0.0
    try:
        for _ in range(300):
            started = time.monotonic()
            await anyio.sleep(0.001)
            worst = max(worst, time.monotonic() - started)
    finally:
        done.set()
        worker.join()
    print(worst)
anyio.run(main)
"""


def test_harness_keeps_thread_switching_prompt(tmp_path: Path) -> None:
    """Under the fake clock a busy worker thread never starves the event loop: libfaketime's
    pthread_cond_timedwait "monotonic fix" (off in `WallClock.environ`) held the loop for
    0.6-0.8 s at a time on a loaded machine, longer than the waits these tests allow."""
    library = require_libfaketime()
    clock = WallClock(tmp_path / "clock", offset=JUMP)
    result = subprocess.run(
        [sys.executable, "-c", BUSY_THREAD_PROBE],
        env=clock.environ(library),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    worst = float(result.stdout)
    assert worst < 0.3, f"the event loop waited {worst:.3f} s for a busy thread to let go"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_control_moved_clock_is_seen_and_future_entries_served(
    tmp_path: Path, backend: str
) -> None:
    """Passes today: the process logs at the moved clock, a set back or forward clock serves
    entries whose ``expires`` lies ahead, never one in the past."""
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, FAR), entry(Y), entry(Z, PAST)))
    clock = WallClock(tmp_path / "clock", offset=-JUMP)
    with rtr_serve(clock, "--source", str(path), "--poll-interval", "1", backend=backend) as p:
        for offset in (-JUMP, JUMP):
            clock.set(offset)
            before = len(p.lines())
            assert wait_served(p, has(X, Y), 10, "the export served") == frozenset((X, Y))
            line = p.wait_line(lambda e: e.get("event") == "session_open", after=before)
            seen = timestamp(line) - time.time()
            assert abs(seen - offset) < 10, f"the process's clock is {seen:+.0f} s off"


def test_control_restart_far_behind_an_honest_write_time_trusts_nothing(tmp_path: Path) -> None:
    """Passes today (the other half of item 10): a state written at the real clock, a restart
    3600 s behind it serves nothing from it and logs why."""
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, FAR), entry(Y)))
    clock = WallClock(tmp_path / "clock")
    args = ("--source", str(path), "--poll-interval", "1", "--state", f"sqlite:{tmp_path / 's.db'}")
    with rtr_serve(clock, *args, name="owner") as p:
        wait_served(p, has(X, Y), 10, "the export served")
        p.wait_line(persisted(), what="a commit")
    path.rename(tmp_path / "moved-away.json")
    clock.set(-JUMP)
    with rtr_serve(clock, *args, name="restart, clock 3600 s behind", backend="trio") as p:
        for when, now in watch(p, 1):
            fail_if(bool(now), f"a restart {JUMP} s behind served {show(now)} at {real(when)}")
        why = [e for e in p.messages("tolerance") if "clock" in str(e["msg"])]
        assert why, "the restart did not log why the state was not trusted"


# ------------------------------------------------------------------------------ item 1


def test_unchanged_http_answer_after_clock_set_back_revives_nothing(tmp_path: Path) -> None:
    """Item 1: after a set-back clock distrusts the HTTP source, its 304 answers restore no
    trust and re-anchor nothing: X, past its expiry by the effective time, never returns."""
    x_expires = int(time.time()) + 20
    body = json.dumps(document(entry(X, x_expires), entry(Y))).encode()
    clock = WallClock(tmp_path / "clock")
    with closing(ScriptedServer()) as http:
        http.script(Reply(200, body, etag='"v1"'))
        with rtr_serve(clock, "--source", http.url(), "--poll-interval", "1") as p:
            wait_served(p, has(X, Y), 10, "the export served")
            clock.move(-JUMP)
            set_back, asked = time.time(), len(http.requests)
            samples = list(watch(p, x_expires + 9 - time.time()))
    revived = [(when, now) for when, now in samples if when > x_expires + 1 and not lacks(X)(now)]
    assert not revived, (
        f"X served again after its expiry ({x_expires}) under the set-back clock, at "
        + ", ".join(f"{when - x_expires:+.1f} s: {show(now)}" for when, now in revived[:3])
    )
    # Every answer is unchanged: 304 to its If-None-Match, else the identical body.
    assert len(http.requests) - asked >= 5, "the HTTP source stopped asking"
    untrusted = [now for when, now in samples if when < set_back + 5 and lacks(Y)(now)]
    assert untrusted, "the set-back clock did not withdraw the HTTP source's data within 5 s"


# ------------------------------------------------------------------------------ item 2


def test_new_content_under_set_back_clock_does_not_revive_an_expired_entry(
    tmp_path: Path,
) -> None:
    """Item 2: new content re-listing X with its past (by the effective time) ``expires`` does
    not give X a new life, though the set-back wall clock says X is still valid."""
    x_expires = int(time.time()) + 20
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, x_expires), entry(Y)))
    clock = WallClock(tmp_path / "clock")
    with rtr_serve(clock, "--source", str(path), "--poll-interval", "1", backend="trio") as p:
        wait_served(p, has(X, Y), 10, "the export served")
        clock.move(-JUMP)
        wait_served(p, lacks(X), x_expires + 5 - time.time(), "X withdrawn at its expiry")
        write_export(path, document(entry(X, x_expires), entry(Y), entry(Z)))
        now = wait_served(p, has(Z), 10, "the new content served")
        fail_if(not lacks(X)(now), f"X revived by the new content: {show(now)}")
        assert_never(p, X, 2, "X revived by the new content")


# ------------------------------------------------------------------------------ item 3


def test_forward_jump_withdraws_at_once_without_a_source_change(tmp_path: Path) -> None:
    """Item 3: a wall clock set forward past X's ``expires`` withdraws X within ~2 s, on the
    expiry schedule of the effective time (no source changes)."""
    x_expires = int(time.time()) + 30
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, x_expires), entry(Y)))
    clock = WallClock(tmp_path / "clock")
    with rtr_serve(clock, "--source", str(path), "--poll-interval", "1") as p:
        wait_served(p, has(X, Y), 10, "the export served")
        clock.move(JUMP)
        now = wait_served(p, lacks(X), 2.5, f"X withdrawn after the clock jumped +{JUMP} s")
        before_real_expiry(x_expires)
        assert now is not None
        assert Y in now, f"Y (never expiring) must stay: {show(now)}"


def test_entries_withdrawn_by_a_forward_jump_stay_withdrawn_after_it_is_undone(
    tmp_path: Path,
) -> None:
    """Item 3: once the effective time passed X's expiry (clock forward, and a source change so
    that even today's code rebuilds), setting the clock back to real time never brings X back:
    not by itself, and not with new content that still lists X."""
    x_expires = int(time.time()) + 30
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, x_expires), entry(Y)))
    clock = WallClock(tmp_path / "clock")
    with rtr_serve(clock, "--source", str(path), "--poll-interval", "1", backend="trio") as p:
        wait_served(p, has(X, Y), 10, "the export served")
        clock.move(JUMP)
        write_export(path, document(entry(X, x_expires), entry(Y), entry(Z)))
        now = wait_served(p, has(Z), 8, "the changed export served")
        fail_if(not lacks(X)(now), f"X served after the clock jumped past its expiry: {show(now)}")
        clock.set(0)
        assert_never(p, X, 3, "X back after the clock returned to real time")
        write_export(path, document(entry(X, x_expires), entry(Y), entry(Z2)))
        now = wait_served(p, has(Z2), 8, "new content after the clock returned")
        fail_if(not lacks(X)(now), f"X back with new content after the clock returned: {show(now)}")
        assert_never(p, X, 2, "X back with new content after the clock returned")
        before_real_expiry(x_expires)


# ------------------------------------------------------------------------------ item 10


@pytest.mark.parametrize(
    "behind", [(JUMP, 200), (200,)], ids=["3600-then-200-behind", "200-behind"]
)
def test_restart_after_set_back_clock_revives_nothing(
    tmp_path: Path, behind: tuple[int, ...]
) -> None:
    """Item 10: the state's write time is the effective time, not the bare set-back clock. X
    expired (by the effective time) under a set-back clock; then restarts, in turn, with the
    clock that many seconds behind real time: beyond the tolerance nothing is trusted from the
    file (and the log says why); within it X is still not served, though the restart's wall
    clock says X is valid. The export is moved away first, so only the state could serve X."""
    x_expires = int(time.time()) + 20
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, x_expires), entry(Y)))
    state = f"sqlite:{tmp_path / 'state.db'}"
    clock = WallClock(tmp_path / "clock")
    args = ("--source", str(path), "--poll-interval", "1", "--state", state)
    with rtr_serve(clock, *args, name="owner") as p:
        wait_served(p, has(X, Y), 10, "the export served")
        clock.move(-JUMP)
        wait_served(p, lacks(X), x_expires + 5 - time.time(), "X withdrawn at its expiry")
        serial = p.wait_line(
            lambda e: e.get("event") == "publish" and e["counts"]["vrp_v4"] == 1,
            what="the publish withdrawing X",
        )["serial"]
        p.wait_line(persisted(serial), what=f"the commit of serial {serial}")
    path.rename(tmp_path / "moved-away.json")

    for seconds in behind:
        clock.set(-seconds)
        with rtr_serve(clock, *args, name=f"restart, clock {seconds} s behind") as p:
            if seconds > 300:
                for when, now in watch(p, 2):
                    fail_if(
                        bool(now),
                        f"a restart {seconds} s behind served {show(now)} at {real(when)}",
                    )
                why = [e for e in p.messages("tolerance") if "clock" in str(e["msg"])]
                assert why, "the restart did not log why the state was not trusted"
            else:
                assert_never(p, X, 2, f"a restart {seconds} s behind served X again")


# ------------------------------------------------------------------------------ item 12


def test_follower_expires_on_its_own_clock_and_never_revives(tmp_path: Path) -> None:
    """Item 12 (a, b): with the owner stopped, a follower whose clock jumps past X's expiry
    withdraws X within ~2 s; after its clock is set back X stays withdrawn, even when the
    owner (restarted, real clock) writes a new state that still lists X."""
    x_expires = int(time.time()) + 60
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, x_expires), entry(Y)))
    state = tmp_path / "state.db"
    owner_clock = WallClock(tmp_path / "owner-clock")
    owner_args = ("--source", str(path), "--poll-interval", "1", "--state", f"sqlite:{state}")
    follower_clock = WallClock(tmp_path / "follower-clock")
    follower_args = ("--state-reader", f"sqlite:{state}")
    with ExitStack() as stack:
        first_owner = stack.enter_context(ExitStack())
        owner = first_owner.enter_context(rtr_serve(owner_clock, *owner_args, name="owner"))
        owner.wait_line(persisted(), what="a commit")
        follower = stack.enter_context(
            rtr_serve(follower_clock, *follower_args, name="follower", backend="trio")
        )
        wait_served(follower, has(X, Y), 10, "the follower serves the owner's state")
        first_owner.close()

        follower_clock.move(JUMP)
        now = wait_served(follower, lacks(X), 2.5, f"X withdrawn after a +{JUMP} s jump")
        assert now is not None
        assert Y in now, f"Y (never expiring) must stay: {show(now)}"
        follower_clock.set(0)
        assert_never(follower, X, 2, "X back on the follower after its clock was set back")

        write_export(path, document(entry(X, x_expires), entry(Y), entry(Z)))
        stack.enter_context(rtr_serve(owner_clock, *owner_args, name="owner, restarted"))
        now = wait_served(follower, has(Z), 10, "the follower serves the owner's new state")
        fail_if(
            not lacks(X)(now), f"X back on the follower with the owner's new state: {show(now)}"
        )
        assert_never(follower, X, 2, "X back on the follower with the owner's new state")
        before_real_expiry(x_expires)


def test_follower_far_behind_the_write_time_serves_nothing(tmp_path: Path) -> None:
    """Item 12 (c): a follower whose wall clock is more than the tolerance behind the state's
    write time trusts nothing from it."""
    path = tmp_path / "export.json"
    write_export(path, document(entry(X, int(time.time()) + 60), entry(Y)))
    state = tmp_path / "state.db"
    owner_args = ("--source", str(path), "--poll-interval", "1", "--state", f"sqlite:{state}")
    with rtr_serve(WallClock(tmp_path / "owner-clock"), *owner_args, name="owner") as owner:
        owner.wait_line(persisted(), what="a commit")
        wait_served(owner, has(X, Y), 10, "the owner serves the export")
        behind = WallClock(tmp_path / "follower-clock", offset=-JUMP)
        with rtr_serve(behind, "--state-reader", f"sqlite:{state}", name="follower") as follower:
            follower.wait_line(
                lambda e: e.get("logger") == "persistence.shared.client" and "behind" in e["msg"],
                what="the follower's word on the state it found",
            )
            for when, now in watch(follower, 3):
                fail_if(bool(now), f"a follower {JUMP} s behind served {show(now)} at {real(when)}")

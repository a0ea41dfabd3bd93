"""What the shared reader tells its watchers and its log when it publishes a new view.

Contract (persistence contract, shared reading): the first view is an ``initial`` event; a
change of the writer's publish identity fails every watch with a sticky `ResyncRequiredError`;
otherwise each view is one event diffing against the view published last (``changed``, or
``coalesced`` when generations were skipped; ``expired``, ``policy``; ``refused`` when the
state is not trusted, ``trusted`` when the same state is trusted again), carrying the
complete endpoint diff's counts and its conservative impact (`snapshot.impact.impact_of`, per
the reader's event size limit), computed once per event and only when someone watches. A
refusal is logged once as a warning with both times, a return to trust once as information.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from persistence.shared.judging import ReaderTime
from persistence.shared.types import SharedEvent, SharedSnapshot, SharedWatch
from persistence.state import US_PER_SECOND, PersistedState, StateHeader
from snapshot.delta import Delta, compute_delta
from snapshot.impact import EVERYTHING, impact_of
from snapshot.queries import ResyncRequiredError

__all__ = [
    "count_delta",
    "event_kind",
    "initial_event",
    "local_epoch",
    "log_read",
    "log_trust",
    "notify",
    "utc",
]

log = logging.getLogger("persistence.shared.client")


def utc(seconds: float) -> str:
    """``seconds`` (Unix time) as an ISO 8601 UTC time to the second."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def event_kind(old: SharedSnapshot | None, new: SharedSnapshot, why: str) -> str:
    """The event kind of publishing ``new`` after ``old`` for the reason ``why``."""
    if new.refused:
        return "refused"
    if old is not None and old.refused:
        return "trusted" if old.version == new.version else why
    return why


def initial_event(current: SharedSnapshot) -> SharedEvent:
    """The first event of a subscription: all of ``current`` is new to it."""
    return SharedEvent("initial", current, None, current.version, changes=EVERYTHING)


def local_epoch(old: SharedSnapshot | None, store_id: str, epoch: int) -> int:
    """The reader's own epoch of a view of the writer's ``store_id``/``epoch`` after ``old``.

    1 for the first view; one more at each change of the writer's publish identity (where
    every watch must resynchronise), the same otherwise.
    """
    if old is None:
        return 1
    return old.local_epoch + int((old.store_id, old.epoch) != (store_id, epoch))


def count_delta(delta: Delta) -> tuple[int, int]:
    """Records added and removed by ``delta`` (an ASPA record replaced: one of each)."""
    counts = delta.counts()
    added = counts["vrp_announce"] + counts["router_key_announce"]
    removed = counts["vrp_withdraw"] + counts["router_key_withdraw"]
    added += sum(1 for c in delta.aspa if c.new is not None)
    removed += sum(1 for c in delta.aspa if c.old is not None)
    return added, removed


def notify(
    watches: Iterable[SharedWatch],
    old: SharedSnapshot | None,
    new: SharedSnapshot,
    why: str,
    limit: int,
) -> None:
    """Offer the event of ``new`` (after ``old``, of kind ``why``) to each watch.

    ``limit``: the changes per kind an event lists (beyond: a full revalidation of the kind).
    """
    targets = list(watches)
    if not targets:
        return  # nobody to tell: no diff computed
    if old is None:
        for watch in targets:
            watch.offer(initial_event(new))
        return
    if (old.store_id, old.epoch) != (new.store_id, new.epoch):
        error = ResyncRequiredError(
            f"the writer's publish identity changed ({old.store_id} epoch {old.epoch} -> "
            f"{new.store_id} epoch {new.epoch}): resynchronise"
        )
        for watch in targets:
            watch.fail(error)
        return
    kind = why
    if why == "changed" and new.generation - old.generation > 1:
        kind = "coalesced"
    delta = compute_delta(old.snapshot, new.snapshot)
    added, removed = count_delta(delta)
    changes = impact_of(delta, limit)
    event = SharedEvent(kind, new, old.version, new.version, added, removed, changes)
    for watch in targets:
        watch.offer(event)


def log_read(header: StateHeader, state: PersistedState) -> None:
    """Log a complete state read."""
    log.info(
        "shared reader: read state %s (owner serial %d, %d VRPs, written %s)",
        header.state_id,
        state.serial,
        state.vrp_count(),
        utc(header.written_at / US_PER_SECOND),
    )


def log_trust(
    time: ReaderTime, old: SharedSnapshot | None, new: SharedSnapshot, header: StateHeader
) -> None:
    """Log a refusal of ``header``'s state, or its trust again after one."""
    written = header.written_at / US_PER_SECOND
    wall = time.wall()
    if new.refused:
        log.warning(
            "shared reader: the wall clock (%s) is %.0f s behind the write time (%s) of "
            "state %s, beyond the %.0f s clock tolerance: nothing of it is served%s until "
            "the clock is within the tolerance or a newer state passes",
            utc(wall),
            written - wall,
            utc(written),
            header.state_id,
            time.tolerance,
            ", what was served is withdrawn" if old is not None and not old.refused else "",
        )
    elif old is not None and old.refused:
        log.info(
            "shared reader: the wall clock (%s) is within the %.0f s tolerance of the write "
            "time (%s) of state %s: serving it",
            utc(wall),
            time.tolerance,
            utc(written),
            header.state_id,
        )

"""One build of the aggregator: what it was admitted under, its worker-thread part, its re-check.

A `BuildJob` runs in a worker thread and only returns a value (contracts L-34, L-35): it merges,
applies the SLURM policy and prepares the snapshot's query structures (`Snapshot.prepare`, so
no query on a published snapshot writes anything, L-32). When it is back, the aggregator (the
one owner, on the event loop) asks its `Admissions` whether what the build was started from, an
`Admission`, still holds, and drops the result when:

* the configuration changed while it ran (`Aggregator.reconfigure`): a result is published only
  under the configuration it was admitted under, even when none of its sources changed;
* a chosen source incarnation left: removed or replaced by a configuration change (a source ID
  deleted and re-added is a new incarnation; the old one's results never count again);
* a withdrawal was decided for a chosen source (a protocol revocation, a distrust after a clock
  jump), even when the source delivered usable data again since: the withdrawn data never goes
  out after the withdrawal was decided;
* a chosen source's data changed and is no longer usable now, or data in the result expired
  while it ran.

A chosen source that only delivered newer usable data meanwhile does not make the result stale:
the result is still the state admitted before, publications are serial, and the next round
publishes the newer data after it (so a source that delivers faster than a build takes never
starves publishing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snapshot.kinds import PayloadKind
from snapshot.slurm import SlurmPolicy
from snapshot.snapshot import Snapshot
from upstream.merge import Built, Chosen, MergeCache
from upstream.payload import SourcePayload
from upstream.source import Delivery
from upstream.source_entry import SourceEntry

__all__ = ["Admission", "Admissions", "BuildJob"]


@dataclass(frozen=True, slots=True)
class Admission:
    """What one build started from: the configuration epoch, each chosen entry's state."""

    config_epoch: int
    #: (entry, its version, its withdrawal count) when the build started.
    entries: tuple[tuple[SourceEntry, int, int], ...]


class Admissions:
    """The owner's record of what makes a running build stale: configuration changes, withdrawals.

    Written only by the aggregator on its event loop.
    """

    def __init__(self) -> None:
        """No configuration change and no withdrawal yet."""
        #: Bumped by every configuration change (`Aggregator.reconfigure`).
        self.config_epoch = 0
        self._withdrawals: dict[SourceEntry, int] = {}

    def reconfigured(self, entries: Iterable[SourceEntry]) -> None:
        """The configuration changed; ``entries`` are the current ones (the rest are retired)."""
        self.config_epoch += 1
        kept = set(entries)  # forget the withdrawals of retired entries
        self._withdrawals = {e: n for e, n in self._withdrawals.items() if e in kept}

    def delivered(self, entry: SourceEntry, delivery: Delivery) -> None:
        """``entry`` admitted ``delivery``: a revocation is a withdrawal."""
        if delivery.revoked:
            self.withdrawn(entry)

    def withdrawn(self, entry: SourceEntry) -> None:
        """A withdrawal (a protocol revocation, a distrust) was decided for ``entry``."""
        self._withdrawals[entry] = self._withdrawals.get(entry, 0) + 1

    def admit(self, entries: Iterable[SourceEntry]) -> Admission:
        """The admission of a build of ``entries`` starting now."""
        unique = {id(e): e for e in entries}.values()
        counts = self._withdrawals
        return Admission(self.config_epoch, tuple((e, e.version, counts.get(e, 0)) for e in unique))

    def stale(self, admission: Admission, now: float) -> str | None:
        """Why a build admitted as ``admission`` may not be published at effective time ``now``.

        None when it may (see the module docstring for the rules).
        """
        if admission.config_epoch != self.config_epoch:
            return "the configuration changed while it ran"
        for entry, version, withdrawn in admission.entries:
            if not entry.current:
                return f"source {entry.name} was removed or replaced while it ran"
            if self._withdrawals.get(entry, 0) != withdrawn:
                return f"source {entry.name} was withdrawn while it ran"
            if entry.version != version and not entry.availability(now).usable:
                return f"source {entry.name} is no longer usable"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildJob:
    """One build: what the worker thread reads (never written while it runs) and its admission."""

    admission: Admission
    parts: Chosen
    everything: tuple[tuple[SourcePayload | None, float | None], ...]
    policy: SlurmPolicy
    judged: float
    cache: MergeCache
    #: The snapshot published last: the new one's origin index reuses its unchanged families.
    published: Snapshot | None
    #: Prepare the snapshot for queries (`Snapshot.prepare`: ~0.4 s and ~75 MB for the 723k-VRP
    #: global table); off for an owner that never queries (an RTR server only serves the sets).
    prepare: bool = True
    #: `upstream.merge.build_snapshot` (given by the aggregator, so tests can slow it down).
    build: Callable[..., Built]

    @classmethod
    def of(
        cls,
        chosen: Mapping[PayloadKind, Sequence[SourceEntry]],
        entries: Iterable[SourceEntry],
        admissions: Admissions,
        **settings: Any,
    ) -> BuildJob:
        """The job building ``chosen`` (every entry in ``entries`` is scanned for its expiry).

        ``settings`` are the other fields (``policy``, ``judged``, ``cache``, ``published``,
        ``build``).
        """
        return cls(
            admission=admissions.admit(e for es in chosen.values() for e in es),
            parts={
                kind: [(e.payload, e.expires_at) for e in es if e.payload is not None]
                for kind, es in chosen.items()
            },
            everything=tuple((e.payload, e.expires_at) for e in entries),
            **settings,
        )

    def run(self) -> Built:
        """Merge, apply the policy, prepare the snapshot (in a worker thread)."""
        built = self.build(self.parts, self.everything, self.policy, self.judged, self.cache)
        if self.prepare:
            built.snapshot.prepare(like=self.published)
        return built

    def stale(self, built: Built, admissions: Admissions, now: float) -> str | None:
        """Why ``built`` may not be published at effective time ``now`` (None: it may)."""
        if any(t is not None and t <= now for t in built.usable_until.values()):
            return "data in it expired while it ran"
        return admissions.stale(self.admission, now)

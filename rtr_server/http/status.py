"""The /status document: one JSON picture of the running app (built from `observe`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rtr_server import __version__
from rtr_server.http import observe
from rtr_server.http.export import iso_time
from rtr_server.http.router_history import RouterHistory
from rtr_server.http.view import AppView

#: Routers listed in /status (counts stay exact beyond it).
MAX_LISTED_ROUTERS = 1000


def status_document(
    app: AppView, stale_after: float, router_history: RouterHistory | None = None
) -> dict[str, Any]:
    """Health, snapshot, groups, sources, sessions, publishes, router history, persistence."""
    now = app.clock.wall()

    def when(wall: float | None) -> str | None:
        return None if wall is None else iso_time(wall)

    def age(wall: float | None) -> float | None:
        return None if wall is None else round(now - wall, 3)

    snap = observe.snapshot(app)
    snapshot_doc: dict[str, Any] | None = None
    if snap is not None:
        snapshot_doc = {
            "serial": snap.serial,
            "session_ids": snap.session_ids,
            "counts": snap.counts,
            "published": when(snap.published_wall),
            "age_seconds": age(snap.published_wall),
            "next_expiry": when(snap.next_expiry_wall),
            "seconds_to_next_expiry": (
                None if snap.next_expiry_wall is None else round(snap.next_expiry_wall - now, 3)
            ),
            "publishes": snap.publishes,
        }
    sessions = observe.sessions(app)
    routers = [asdict(r) for r in sessions.routers[:MAX_LISTED_ROUTERS]]
    persistence = observe.persistence(app)
    persistence_doc: dict[str, Any] | None = None
    if persistence is not None:
        persistence_doc = asdict(persistence)
        persistence_doc["last_commit"] = when(persistence.last_commit_wall)
    return {
        "version": __version__,
        "generated": iso_time(now),
        "health": asdict(observe.health(app, now, stale_after)),
        "snapshot": snapshot_doc,
        "active": observe.active_groups(app),
        "groups": [asdict(g) for g in observe.groups(app)],
        "sources": [
            {
                **asdict(s),
                "last_success": when(s.last_success_wall),
                "last_success_age_seconds": age(s.last_success_wall),
                "last_error_at": when(s.last_error_wall),
            }
            for s in observe.sources(app)
        ],
        "sessions": {
            "connected": len(sessions.routers),
            "by_version": sessions.by_version,
            "routers": routers,
            "accepted": sessions.accepted,
            "rejected": sessions.rejected,
            "evicted": sessions.evicted,
            "admission_pressure": sessions.admission_pressure,
            "pressure_episodes": sessions.pressure_episodes,
            "silent": sessions.silent,
            "rejected_not_allowed_by_listener": sessions.rejected_not_allowed_by_listener,
            "limits": sessions.limits,
            "reset_queries": sessions.reset_queries,
            "serial_queries": sessions.serial_queries,
            "cache_resets": sessions.cache_resets,
            "notifies": sessions.notifies,
            "bytes_sent": sessions.bytes_sent,
            "errors_sent": {str(k): v for k, v in sorted(sessions.errors_sent.items())},
            "disconnects": sessions.disconnects,
            "held_now": sessions.held_now,
            "held_queries": sessions.held_queries,
            "hold_timeouts": sessions.hold_timeouts,
        },
        "publishes": [
            {
                "serial": p.serial,
                "time": iso_time(p.wall),
                "duration_seconds": round(p.duration, 3),
                "counts": p.counts,
                "delta": p.delta,
                "delta_size": p.delta_size,
            }
            for p in reversed(list(app.publishes))
        ],
        "router_history": [
            {
                "time": iso_time(r.wall),
                "connected": r.connected,
                "by_version": r.by_version,
                "max_lag": r.max_lag,
                "lagging": r.lagging,
            }
            for r in (router_history or ())
        ],
        "persistence": persistence_doc,
    }

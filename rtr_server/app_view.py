"""The client-side facts of `rtr_server.http.view.AppView`, read off the upstream `Client`."""

from __future__ import annotations

from rtr_server.http.view import KINDS, GroupView, SourceView
from upstream.client import Client

__all__ = ["active_groups", "group_views", "source_views"]


def source_views(client: Client | None) -> tuple[SourceView, ...]:
    """Every configured source with its status (none for a state follower)."""
    if client is None:
        return ()
    group_of = {s.name: s.group for s in client.config.sources}
    out: list[SourceView] = []
    for source in client.sources:
        st = source.status
        out.append(
            SourceView(
                name=st.name,
                kind=st.kind,
                location=st.location,
                group=group_of.get(st.name, ""),
                state=st.state.value,
                connected=st.connected,
                last_success_wall=st.last_success_wall,
                last_error=st.last_error,
                last_error_wall=st.last_error_wall,
                records=dict(st.records),
                bytes_read=st.bytes_read,
                errors=dict(st.errors),
                syncs=st.syncs,
                watching=st.watching,
            )
        )
    return tuple(out)


def active_groups(client: Client | None) -> dict[str, str | None]:
    """The active group per payload kind (None: no group is ready for it)."""
    if client is None:
        return dict.fromkeys(KINDS)
    active = client.get_status().active
    by_kind = {kind.value: group for kind, group in active.items()}
    return {kind: by_kind.get(kind) for kind in KINDS}


def group_views(client: Client | None) -> tuple[GroupView, ...]:
    """Every group in priority order (none for a state follower)."""
    if client is None:
        return ()
    status = client.get_status()
    started = set(status.started_groups)
    active = active_groups(client)
    config = client.config
    return tuple(
        GroupView(
            name=g.name,
            priority=g.priority,
            started=g.name in started,
            active_for=tuple(k for k in KINDS if active[k] == g.name),
            sources=tuple(s.name for s in config.sources if s.group == g.name),
        )
        for g in sorted(config.effective_groups(), key=lambda g: g.priority)
    )

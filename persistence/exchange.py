"""The schema-2 exchange payload of a `PersistedState`: its canonical bytes, streamed; its digest.

`encode` yields the canonical JSON document (docs/exchange-format.md fixes every byte) in
chunks, counting its octets against `Limits.max_export_bytes` as it goes: `LimitExceededError`
once the document would be larger, before a chunk beyond the bound is yielded. Nothing but
references is sorted (the sources by name); the raw records are written in their stored order,
one at a time, and never collected into a tree. A raw record whose conservative encoded size
is at most `RECORD_FAST_PATH_BYTES` is formatted in one go; larger ones, and any record with a
value the fast path does not vouch for, take the field-by-field path, which gives the same
bytes and raises the error of the first failing field in document order. `state_digest` is
the SHA-256 of exactly these bytes (the state digest of contract P-35).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Final

from persistence.exchange_records import write_records
from persistence.exchange_values import (
    INT64_MAX,
    RECORD_FAST_PATH_BYTES,
    ExchangeFormatError,
    Out,
    write_bool,
    write_int,
    write_kinds,
    write_opt_int,
    write_opt_str,
    write_str,
)
from persistence.limits import Limits
from persistence.state import PersistedState, SourceRecord

__all__ = [
    "ACTIVE_KINDS",
    "FORMAT",
    "RECORD_FAST_PATH_BYTES",
    "SOURCE_KEYS",
    "SOURCE_KEYS_V1",
    "STATE_KEYS",
    "VERSION",
    "ExchangeFormatError",
    "encode",
    "encode_version_1",
    "state_digest",
]

#: The ``format`` member of every exchange document.
FORMAT: Final = "rtr-serve-exchange"
VERSION: Final = 2
#: The members of the document and of each source, in their fixed order.
STATE_KEYS: Final = (
    "format",
    "version",
    "package_version",
    "store_id",
    "epoch",
    "generation",
    "config_store_id",
    "config_epoch",
    "config_revision",
    "config_identity",
    "serial",
    "session_ids",
    "published_at",
    "mode",
    "reference_time",
    "upstream",
    "policy_id",
    "policy",
    "groups",
    "active_groups",
    "sources",
)
SOURCE_KEYS: Final = (
    "name",
    "group_id",
    "group",
    "kind",
    "location",
    "identity",
    "complete",
    "capabilities",
    "selected",
    "present",
    "protocol",
    "invalidated",
    "aspa_families",
    "accepted_at",
    "expires_at",
    "generated_at",
    "rtr_session",
    "rtr_serial",
    "metadata",
    "vrps",
    "vrp_duplicates",
    "router_keys",
    "router_key_duplicates",
    "aspas",
    "aspa_duplicates",
)
#: Version 1 had no ASPA address families (nor ASPA afis, nor per-family active groups).
SOURCE_KEYS_V1: Final = tuple(key for key in SOURCE_KEYS if key != "aspa_families")
GROUP_KEYS: Final = ("id", "name", "kinds", "sources")
UPSTREAM_KEYS: Final = ("store_id", "epoch", "generation")
#: The kinds of ``active_groups`` entries in version 2 (ASPAs per address family).
ACTIVE_KINDS: Final[tuple[str, ...]] = ("vrp", "aspa_v4", "aspa_v6", "router_key")
ACTIVE_KINDS_V1: Final = ("vrp", "aspa", "router_key")


def _source(out: Out, s: SourceRecord, path: str, version: int, fast: bool) -> Iterator[bytes]:
    keys = SOURCE_KEYS if version == 2 else SOURCE_KEYS_V1
    out.ascii("{", path)
    for n, key in enumerate(keys):
        at = f"{path}.{key}"
        out.ascii(f'{"," if n else ""}"{key}":', at)
        if key in {"name", "group", "kind", "location"}:
            write_str(out, getattr(s, key), at)
        elif key in {"identity", "metadata"}:
            write_opt_str(out, s.identity if key == "identity" else s.metadata_json, at)
        elif key in {"complete", "invalidated"}:
            write_bool(out, getattr(s, key), at)
        elif key in {"capabilities", "selected", "present"}:
            write_kinds(out, getattr(s, key), at)
        elif key == "group_id":
            write_int(out, s.group_id, at, 0, INT64_MAX)
        elif key == "protocol":
            write_opt_int(out, s.protocol, at, 0, 2)
        elif key == "aspa_families":
            write_int(out, s.aspa_families, at, 0, 3)
        elif key in {"accepted_at", "expires_at"}:
            write_int(out, getattr(s, key), at)
        elif key == "generated_at":
            write_opt_int(out, s.generated_at, at)
        elif key == "rtr_session":
            write_opt_int(out, s.rtr_session, at, 0, 0xFFFF)
        elif key == "rtr_serial":
            write_opt_int(out, s.rtr_serial, at, 0, 0xFFFF_FFFF)
        else:
            yield from write_records(out, s, key, at, version, fast)
    out.ascii("}", path)


def _header(out: Out, state: PersistedState, key: str, at: str, version: int) -> None:
    if key == "format":
        out.ascii(f'"{FORMAT}"', at)
    elif key == "version":
        out.ascii(str(version), at)
    elif key in {"package_version", "store_id", "mode"}:
        write_str(out, getattr(state, key), at)
    elif key in {"config_store_id", "config_identity", "policy_id"}:
        write_opt_str(out, getattr(state, key), at)
    elif key == "policy":
        write_opt_str(out, state.policy_json, at)
    elif key in {"epoch", "generation"}:
        write_int(out, getattr(state.state_id, key), at, 0, INT64_MAX)
    elif key == "config_epoch":
        write_opt_int(out, state.config_epoch, at, 0, INT64_MAX)
    elif key == "config_revision":
        write_int(out, state.config_revision, at, 0, INT64_MAX)
    elif key == "serial":
        write_int(out, state.serial, at, 0, 0xFFFF_FFFF)
    elif key == "session_ids":
        out.ascii("[", at)
        for i, session in enumerate(state.session_ids):
            out.ascii("," if i else "", at)
            write_int(out, session, f"{at}[{i}]", 0, 0xFFFF)
        out.ascii("]", at)
    elif key == "published_at":
        write_int(out, state.published_at, at)
    elif key == "reference_time":
        write_opt_int(out, state.reference_time, at)
    elif key == "upstream":
        up = state.upstream
        if up is None:
            out.ascii("null", at)
            return
        out.ascii('{"store_id":', at)
        write_str(out, up.store_id, f"{at}.store_id")
        out.ascii(',"epoch":', at)
        write_int(out, up.epoch, f"{at}.epoch", 0, INT64_MAX)
        out.ascii(',"generation":', at)
        write_int(out, up.generation, f"{at}.generation", 0, INT64_MAX)
        out.ascii("}", at)
    elif key == "groups":
        out.ascii("[", at)
        for i, group in enumerate(state.groups):
            g = f"{at}[{i}]"
            out.ascii(f'{"," if i else ""}{{"id":', g)
            write_int(out, group.group_id, f"{g}.id", 0, INT64_MAX)
            out.ascii(',"name":', g)
            write_str(out, group.name, f"{g}.name")
            out.ascii(',"kinds":', g)
            write_kinds(out, group.kinds, f"{g}.kinds")
            out.ascii(',"sources":[', g)
            for j, name in enumerate(group.source_names):
                out.ascii("," if j else "", g)
                write_str(out, name, f"{g}.sources[{j}]")
            out.ascii("]}", g)
        out.ascii("]", at)
    elif key == "active_groups":
        _active_groups(out, state, at, version)


def _active_groups(out: Out, state: PersistedState, at: str, version: int) -> None:
    active = dict(state.active_groups)
    if len(active) != len(state.active_groups):
        raise ExchangeFormatError(at, "a kind has two active groups")
    order: tuple[str, ...] = ACTIVE_KINDS
    if version == 1:
        v4, v6 = active.pop("aspa_v4", None), active.pop("aspa_v6", None)
        if v4 != v6:
            raise ExchangeFormatError(at, "version 1 has no per-family ASPA groups")
        if v4 is not None:
            active["aspa"] = v4
        order = ACTIVE_KINDS_V1
    unknown = set(active).difference(order)
    if unknown:
        raise ExchangeFormatError(at, f"unknown kinds {sorted(unknown)}")
    out.ascii("[", at)
    for i, kind in enumerate(k for k in order if k in active):
        out.ascii(f'{"," if i else ""}["{kind}",', f"{at}[{i}]")
        write_str(out, active[kind], f"{at}[{i}][1]")
        out.ascii("]", f"{at}[{i}]")
    out.ascii("]", at)


def _document(
    state: PersistedState, limits: Limits | None, version: int, *, fast: bool = True
) -> Iterator[bytes]:
    out = Out((limits or Limits()).max_export_bytes)
    out.ascii("{", "$")
    for n, key in enumerate(STATE_KEYS):
        at = f"$.{key}"
        out.ascii(f'{"," if n else ""}"{key}":', at)
        if key != "sources":
            _header(out, state, key, at, version)
            continue
        out.ascii("[", at)
        for i, source in enumerate(sorted(state.sources, key=lambda s: s.name)):
            out.ascii("," if i else "", f"{at}[{i}]")
            yield from _source(out, source, f"{at}[{i}]", version, fast)
        out.ascii("]", at)
    out.ascii("}", "$")
    yield out.take()


def encode(
    state: PersistedState, *, limits: Limits | None = None, record_fast_path: bool = True
) -> Iterator[bytes]:
    """The canonical version-2 exchange document of ``state``, in chunks.

    Raises `LimitExceededError` once the document would exceed ``limits.max_export_bytes``
    (default `Limits()`), `ExchangeFormatError` for a value it cannot encode (e.g. a string
    that is not valid Unicode): whichever comes first in document order.
    ``record_fast_path=False`` writes every raw record field by field: the same bytes, slower
    (for tests of the two paths).
    """
    return _document(state, limits, VERSION, fast=record_fast_path)


def encode_version_1(state: PersistedState, *, limits: Limits | None = None) -> Iterator[bytes]:
    """The version-1 document of a state that version 1 can express (no per-family ASPA data).

    What `persistence.exchange_import.import_version_1` reads: for tests and interchange with
    tools that only know version 1; our own files are version 2.
    """
    return _document(state, limits, 1)


def state_digest(state: PersistedState, *, limits: Limits | None = None) -> bytes:
    """SHA-256 of the canonical version-2 exchange document of ``state`` (the state digest)."""
    h = hashlib.sha256()
    for chunk in encode(state, limits=limits):
        h.update(chunk)
    return h.digest()

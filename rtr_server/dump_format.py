"""What ``rtr-serve dump`` prints: a cache's answer as rpki-client-shaped JSON or as CSV.

JSON (a full dump)::

    {"metadata": {"generator": "rtr-serve 0.1.0", "buildtime": "...", "cache": "rtr://...",
                  "version": 2, "session_id": 7, "serial": 42,
                  "refresh": 3600, "retry": 600, "expire": 7200,
                  "vrps": N, "vaps": A, "bgpsec_pubkeys": K},
     "roas": [{"asn": 64496, "prefix": "192.0.2.0/24", "maxLength": 24}, ...],
     "aspas": [{"customer_asid": 64496, "providers": [64497]}, ...],
     "bgpsec_keys": [{"asn": 64496, "ski": "<hex>", "pubkey": "<base64 SPKI>"}, ...]}

which `upstream.json_format.parse_export` reads back. An incremental answer has the same
metadata (plus ``"serial_query"``) and ``"announced"`` / ``"withdrawn"``, each holding the three
lists. CSV has one header line and one line per record:
``action,kind,asn,prefix,max_length,providers,ski,pubkey`` (providers space-separated; action
``announce`` for a full dump). Timers are absent (null) for version 0.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

from rtr_server import __version__
from rtr_server.http.export import iso_time
from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.snapshot import Snapshot

__all__ = ["CSV_HEADER", "dump_csv", "dump_json", "iter_csv", "iter_json", "record_json"]

CSV_HEADER = ("action", "kind", "asn", "prefix", "max_length", "providers", "ski", "pubkey")

Record = Vrp | Aspa | RouterKey


def record_json(record: Record, *, withdrawn: bool = False) -> tuple[str, dict[str, Any]]:
    """``(section, entry)`` of one record in rpki-client's shape."""
    if isinstance(record, Vrp):
        return "roas", {
            "asn": record.asn,
            "prefix": str(record.prefix),
            "maxLength": record.max_length,
        }
    if isinstance(record, Aspa):
        entry: dict[str, Any] = {"customer_asid": record.customer}
        if not withdrawn:
            entry["providers"] = list(record.providers)
        return "aspas", entry
    return "bgpsec_keys", {
        "asn": record.asn,
        "ski": record.ski.hex(),
        "pubkey": base64.b64encode(record.spki).decode("ascii"),
    }


def _vrps(snapshot: Snapshot) -> Iterator[Vrp]:
    # The packed keys are sorted descending: each family backwards is ascending, IPv4 first.
    for packed, width in ((snapshot.v4, V4_KEY_SIZE), (snapshot.v6, V6_KEY_SIZE)):
        for end in range(len(packed), 0, -width):
            yield Vrp.from_key(packed[end - width : end])


def _records(snapshot: Snapshot) -> Iterator[Record]:
    yield from _vrps(snapshot)
    yield from snapshot.aspas
    yield from snapshot.router_keys


def _section_lines(
    name: str, records: Iterable[Record], *, withdrawn: bool, indent: str, last: bool
) -> Iterator[str]:
    """``"name": [`` then one compact entry per line (no list of the whole table is built)."""
    yield f'{indent}"{name}": ['
    sep = "\n"
    for record in records:
        yield sep + indent + " " + json.dumps(record_json(record, withdrawn=withdrawn)[1])
        sep = ",\n"
    yield ("\n" + indent if sep != "\n" else "") + ("]\n" if last else "],\n")


def _group(records: Iterable[Record], *, withdrawn: bool, indent: str) -> Iterator[str]:
    """The three sections (``roas``, ``aspas``, ``bgpsec_keys``) of ``records``."""
    by_section: dict[str, list[Record]] = {"roas": [], "aspas": [], "bgpsec_keys": []}
    for record in records:
        by_section[record_json(record)[0]].append(record)
    for i, (name, items) in enumerate(by_section.items()):
        yield from _section_lines(name, items, withdrawn=withdrawn, indent=indent, last=i == 2)


def iter_json(
    metadata: dict[str, Any],
    snapshot: Snapshot | None,
    changes: Iterable[tuple[bool, Record]] = (),
) -> Iterator[str]:
    """The JSON document of a full dump (``snapshot``) or of an incremental answer, in pieces.

    A full table is written one entry per line straight from the snapshot, so the output never
    exists whole in memory (the 723,521-VRP table is about 40 MB of text).
    """
    meta: dict[str, Any] = {
        "generator": f"rtr-serve {__version__}",
        "buildtime": iso_time(time.time()),
    }
    meta |= metadata
    if snapshot is not None:
        meta.update(
            vrps=snapshot.vrp_count,
            vaps=len(snapshot.aspas),
            bgpsec_pubkeys=len(snapshot.router_keys),
        )
    head = json.dumps(meta, indent=1).replace("\n", "\n ")
    yield '{\n "metadata": ' + head + ",\n"
    if snapshot is not None:
        yield from _section_lines("roas", _vrps(snapshot), withdrawn=False, indent=" ", last=False)
        yield from _section_lines("aspas", snapshot.aspas, withdrawn=False, indent=" ", last=False)
        yield from _section_lines(
            "bgpsec_keys", snapshot.router_keys, withdrawn=False, indent=" ", last=True
        )
    else:
        listed = list(changes)
        yield ' "announced": {\n'
        yield from _group([r for a, r in listed if a], withdrawn=False, indent="  ")
        yield ' },\n "withdrawn": {\n'
        yield from _group([r for a, r in listed if not a], withdrawn=True, indent="  ")
        yield " }\n"
    yield "}\n"


def dump_json(
    metadata: dict[str, Any],
    snapshot: Snapshot | None,
    changes: Iterable[tuple[bool, Record]] = (),
) -> str:
    """`iter_json` joined."""
    return "".join(iter_json(metadata, snapshot, changes))


def _csv_row(announce: bool, record: Record) -> list[str]:
    action = "announce" if announce else "withdraw"
    if isinstance(record, Vrp):
        return [action, "vrp", str(record.asn), str(record.prefix), str(record.max_length)]
    if isinstance(record, Aspa):
        providers = " ".join(map(str, record.providers)) if announce else ""
        return [action, "aspa", str(record.customer), "", "", providers]
    spki = base64.b64encode(record.spki).decode("ascii")
    return [action, "router_key", str(record.asn), "", "", "", record.ski.hex(), spki]


def iter_csv(
    snapshot: Snapshot | None, changes: Iterable[tuple[bool, Record]] = ()
) -> Iterator[str]:
    """CSV lines of a full dump (every record announced) or of an incremental answer."""
    rows: Iterable[tuple[bool, Record]] = (
        ((True, r) for r in _records(snapshot)) if snapshot is not None else changes
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for announce, record in rows:
        row = _csv_row(announce, record)
        writer.writerow(row + [""] * (len(CSV_HEADER) - len(row)))
        if out.tell() > 65536:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


def dump_csv(snapshot: Snapshot | None, changes: Iterable[tuple[bool, Record]] = ()) -> str:
    """`iter_csv` joined."""
    return "".join(iter_csv(snapshot, changes))

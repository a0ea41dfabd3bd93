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
from collections.abc import Iterable
from typing import Any

from rtr_server import __version__
from rtr_server.http.export import iso_time
from snapshot.model import Aspa, RouterKey, Vrp
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from snapshot.snapshot import Snapshot

__all__ = ["CSV_HEADER", "dump_csv", "dump_json", "record_json", "snapshot_json"]

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


def _sections(records: Iterable[Record], *, withdrawn: bool = False) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"roas": [], "aspas": [], "bgpsec_keys": []}
    for record in records:
        section, entry = record_json(record, withdrawn=withdrawn)
        out[section].append(entry)
    return out


def _records(snapshot: Snapshot) -> Iterable[Record]:
    # The packed keys are sorted descending: each family backwards is ascending, IPv4 first.
    for packed, width in ((snapshot.v4, V4_KEY_SIZE), (snapshot.v6, V6_KEY_SIZE)):
        for end in range(len(packed), 0, -width):
            yield Vrp.from_key(packed[end - width : end])
    yield from snapshot.aspas
    yield from snapshot.router_keys


def snapshot_json(snapshot: Snapshot) -> dict[str, list[Any]]:
    """The ``roas``, ``aspas`` and ``bgpsec_keys`` lists of ``snapshot``."""
    return _sections(_records(snapshot))


def dump_json(
    metadata: dict[str, Any],
    snapshot: Snapshot | None,
    changes: Iterable[tuple[bool, Record]] = (),
) -> str:
    """The JSON document of a full dump (``snapshot``) or of an incremental answer."""
    head = {"generator": f"rtr-serve {__version__}", "buildtime": iso_time(time.time())}
    doc: dict[str, Any] = {"metadata": head | metadata}
    if snapshot is not None:
        doc["metadata"].update(
            vrps=snapshot.vrp_count,
            vaps=len(snapshot.aspas),
            bgpsec_pubkeys=len(snapshot.router_keys),
        )
        doc.update(snapshot_json(snapshot))
    else:
        listed = list(changes)
        doc["announced"] = _sections(r for a, r in listed if a)
        doc["withdrawn"] = _sections((r for a, r in listed if not a), withdrawn=True)
    return json.dumps(doc, indent=1) + "\n"


def _csv_row(announce: bool, record: Record) -> list[str]:
    action = "announce" if announce else "withdraw"
    if isinstance(record, Vrp):
        return [action, "vrp", str(record.asn), str(record.prefix), str(record.max_length)]
    if isinstance(record, Aspa):
        providers = " ".join(map(str, record.providers)) if announce else ""
        return [action, "aspa", str(record.customer), "", "", providers]
    spki = base64.b64encode(record.spki).decode("ascii")
    return [action, "router_key", str(record.asn), "", "", "", record.ski.hex(), spki]


def dump_csv(snapshot: Snapshot | None, changes: Iterable[tuple[bool, Record]] = ()) -> str:
    """CSV of a full dump (every record announced) or of an incremental answer."""
    rows: Iterable[tuple[bool, Record]] = (
        ((True, r) for r in _records(snapshot)) if snapshot is not None else changes
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for announce, record in rows:
        row = _csv_row(announce, record)
        writer.writerow(row + [""] * (len(CSV_HEADER) - len(row)))
    return out.getvalue()

"""The served set as rpki-client ``-j`` JSON, encoded once per serial (in a worker thread).

Shape (what `upstream.json_format.parse_export` and rpki-client consumers read)::

    {"metadata": {"buildmachine": "rtr-serve", "buildtime": "2026-01-01T00:00:00Z",
                  "generator": "rtr-serve 0.1.0", "serial": 7,
                  "session_ids": {"v0": 1, "v1": 2, "v2": 3},
                  "vrps": N, "uniquevrps": N, "vaps": A, "uniquevaps": A, "bgpsec_pubkeys": K},
     "roas": [{"asn": 64496, "prefix": "192.0.2.0/24", "maxLength": 24}, ...],
     "bgpsec_keys": [{"asn": 64496, "ski": "<40 hex digits>", "pubkey": "<base64 SPKI>"}, ...],
     "aspas": [{"customer_asid": 64496, "providers": [64497, 64498]}, ...]}

VRPs are in ascending order (IPv4 first), one per line like rpki-client writes them. Entries
carry no ``ta`` and no ``expires``: the served set is a merge of sources, and rtr-serve itself
withdraws (and republishes without) an entry when it expires. Everything written is a number,
an address, hex or base64, so the lines are formatted directly; the metadata goes through
`json.dumps`.
"""

from __future__ import annotations

import base64
import json
import socket
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from rtr_server import __version__
from snapshot.packed import V4, V6
from snapshot.publisher import PublishedState
from snapshot.snapshot import Snapshot

#: gzip level for the compressed representation (6: ~0.5 s and ~7 % of the size for 723k VRPs).
GZIP_LEVEL = 6


def iso_time(wall: float) -> str:
    """``2026-01-01T00:00:00Z`` for Unix seconds ``wall``."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _roa_lines(snapshot: Snapshot) -> list[str]:
    ntop = socket.inet_ntop
    af4, af6 = socket.AF_INET, socket.AF_INET6
    lines: list[str] = []
    add = lines.append
    # The packed keys are sorted descending; walk each family backwards for ascending output.
    for family, layout, packed in ((af6, V6, snapshot.v6), (af4, V4, snapshot.v4)):
        for address, max_length, length, asn in layout.fields.iter_unpack(packed):
            prefix = f"{ntop(family, address)}/{length}"
            add(f'\t\t{{ "asn": {asn}, "prefix": "{prefix}", "maxLength": {max_length} }}')
    lines.reverse()
    return lines


def _numbers(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def encode_export(state: PublishedState, *, buildtime: float) -> bytes:
    """The rpki-client JSON document of ``state``'s snapshot (see the module docstring)."""
    snapshot = state.snapshot
    ids = state.session_ids
    vrps = snapshot.vrp_count
    metadata = {
        "buildmachine": "rtr-serve",
        "buildtime": iso_time(buildtime),
        "generator": f"rtr-serve {__version__}",
        "serial": state.serial.value,
        "session_ids": {"v0": ids.v0, "v1": ids.v1, "v2": ids.v2},
        "vrps": vrps,
        "uniquevrps": vrps,
        "vaps": len(snapshot.aspas),
        "uniquevaps": len(snapshot.aspas),
        "bgpsec_pubkeys": len(snapshot.router_keys),
    }
    keys = [
        f'\t\t{{ "asn": {k.asn}, "ski": "{k.ski.hex().upper()}", '
        f'"pubkey": "{base64.b64encode(k.spki).decode("ascii")}" }}'
        for k in snapshot.router_keys
    ]
    aspas = [
        f'\t\t{{ "customer_asid": {a.customer}, "providers": [ {_numbers(a.providers)} ] }}'
        for a in snapshot.aspas
    ]
    parts = [
        '{\n\t"metadata": ',
        json.dumps(metadata, indent="\t").replace("\n", "\n\t"),
        ',\n\t"roas": [\n',
        ",\n".join(_roa_lines(snapshot)),
        '\n\t],\n\t"bgpsec_keys": [\n',
        ",\n".join(keys),
        '\n\t],\n\t"aspas": [\n',
        ",\n".join(aspas),
        "\n\t]\n}\n",
    ]
    return "".join(parts).encode("ascii")


def gzip_etag(etag: str) -> str:
    """The gzip representation's tag: the same value, weak (RFC 9110 §8.8.3.3)."""
    return "W/" + etag


@dataclass(frozen=True, slots=True)
class EncodedExport:
    """One serial's export, with its entity tag and how long it took to make."""

    etag: str
    body: bytes
    seconds: float


class ExportCache:
    """The current serial's export (plain and gzip), each encoded at most once.

    Concurrent requests for a representation that is being encoded wait for that one
    encoding. Only the newest serial is kept; an older one is dropped when a newer is asked
    for.
    """

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        """Encode in worker threads under ``limiter``."""
        self.limiter = limiter
        self._key: tuple[int, int] | None = None
        self._entries: dict[bool, EncodedExport] = {}
        self._lock = anyio.Lock()
        self.encodes = 0

    @staticmethod
    def etag(state: PublishedState) -> str:
        """``"<session>-<serial>"`` (the v2 session id), quoted as an entity tag."""
        return f'"{state.session_ids.v2}-{state.serial.value}"'

    async def get(self, state: PublishedState, *, buildtime: float, gzip: bool) -> EncodedExport:
        """The export of ``state``, gzip-compressed when ``gzip``."""
        key = (state.session_ids.v2, state.serial.value)
        async with self._lock:
            if key != self._key:
                self._key = key
                self._entries = {}
            entry = self._entries.get(gzip)
            if entry is None:
                made = await anyio.to_thread.run_sync(
                    _encode, state, buildtime, gzip, self._entries.get(False), limiter=self.limiter
                )
                self.encodes += 1
                self._entries.update(made)
                entry = made[gzip]
            return entry

    @property
    def cached(self) -> dict[str, EncodedExport]:
        """The representations held now, by encoding (``identity``, ``gzip``)."""
        return {"gzip" if z else "identity": e for z, e in self._entries.items()}


def _encode(
    state: PublishedState, buildtime: float, gzip: bool, plain: EncodedExport | None
) -> dict[bool, EncodedExport]:
    """The plain export (unless given) and, when ``gzip``, its compressed form."""
    made: dict[bool, EncodedExport] = {}
    if plain is None:
        started = time.perf_counter()
        body = encode_export(state, buildtime=buildtime)
        plain = made[False] = EncodedExport(
            ExportCache.etag(state), body, time.perf_counter() - started
        )
    if gzip:
        started = time.perf_counter()
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        body = compressor.compress(plain.body) + compressor.flush()
        made[True] = EncodedExport(gzip_etag(plain.etag), body, time.perf_counter() - started)
    return made

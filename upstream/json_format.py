"""Parse validator JSON exports into a `SourcePayload`; one invalid entry rejects the whole export.

Accepted shapes (unknown keys are ignored):

* rpki-client ``-j``: ``roas`` (int ``asn``, ``expires``), ``bgpsec_keys`` (hex ``ski``, base64
  ``pubkey``), ASPA as current ``aspas: [{customer_asid, providers, expires}]`` or the 2022–23
  per-AFI ``provider_authorizations: {ipv4: [...], ipv6: [...]}`` (each entry keeps its afi, 1
  or 2, as its own support; served merged per customer);
* Routinator ``json``/``jsonext`` (``"AS123"`` strings, ``routerKeys``, ``aspas`` with
  ``customer``; jsonext ``source`` validity dates give the per-entry expiry);
* StayRTR / GoRTR ``roas`` (``asn`` as number or ``"AS123"``).

A VRP or router key listed more than once (several trust anchors, any expiries) is one entry
with the latest expiry plus its other supports as extras (`SourcePayload.vrp_duplicates`,
``router_key_duplicates``; contract P-27); every ASPA entry is its own support.

Speed and memory: the ``roas`` of an export of the common shape given as bytes are read in
pieces (`upstream.piece_reader`: msgspec decodes each piece of the array straight into small
structs, packed at once into keys without ``ipaddress`` objects; unchanged pieces of the
source's previous export come from its `PieceMemo`); its other sections (small) go through the
hooked read below, or come from the memo when their bytes are unchanged. Otherwise the document
is decoded whole: by msgspec into the same structs, else by the C JSON scanner with an
``object_hook`` that turns each payload object into a packed key on the spot, so no per-entry
dict survives the parse. The hook's result is checked afterwards; a document whose payload
objects are not where expected is re-read the slow way, which names the entry, the field and
the value. All of them give the same payload.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from snapshot.model import Aspa, PayloadError, RouterKey
from snapshot.packed import V4_KEY_SIZE, V6_KEY_SIZE
from upstream.format_error import FormatError
from upstream.json_fields import (
    aspa_entry,
    expires_of,
    router_key_entry,
    time_value,
    vrp_key,
)
from upstream.packed_vrp import ABSENT, packed_key
from upstream.payload import SourcePayload
from upstream.pieces import PieceMemo, Sections, VrpTables, add_support, assemble

if TYPE_CHECKING:
    from upstream.json_typed import Roa
    from upstream.piece_reader import PieceRead

__all__ = [
    "DEFAULT_MAX_ASPA_PROVIDERS",
    "parse_entries",
    "parse_export",
    "pieced_payload",
]

#: rpki-client and OpenBGPD drop provider sets above this size; so do we by default.
DEFAULT_MAX_ASPA_PROVIDERS: Final = 10_000


# ---------------------------------------------------------------- the parse


class _Marker:
    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind}>"


_VRP: Final = _Marker("vrp")
_KEY: Final = _Marker("router_key")


class _AspaAt:
    """Where the hook left an ASPA entry: its position in `_Collector.aspas`."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


#: The afi (0 both, 1 IPv4, 2 IPv6) of the ASPA entries of a section, by its label.
_SECTION_AFI: Final = {"provider_authorizations.ipv4": 1, "provider_authorizations.ipv6": 2}


class _Collector:
    """Receives entries (from the hook or the slow path) and keeps them compactly."""

    def __init__(self, max_providers: int) -> None:
        self.max_providers = max_providers
        self.vrps: dict[bytes, int] = {}
        self.router_keys: dict[RouterKey, int] = {}
        #: The other supports of a VRP or router key already held (P-27), its latest expiry
        #: staying in ``vrps`` / ``router_keys``.
        self.vrp_extras: list[tuple[bytes, int]] = []
        self.key_extras: list[tuple[RouterKey, int]] = []
        self.aspas: list[tuple[Aspa, int]] = []
        #: The afi of each entry of ``aspas`` (set by section once the hook's parse is done).
        self.aspa_afis = bytearray()
        self.counts = {"vrp": 0, "router_key": 0, "aspa": 0}
        #: The VRP tables when they were read in pieces (`upstream.piece_reader`), not here.
        self.tables: VrpTables | None = None

    def add_vrp(self, entry: dict[str, Any]) -> None:
        self.counts["vrp"] += 1
        self._vrp(vrp_key(entry), expires_of(entry))

    def _vrp(self, key: bytes, expires: int) -> None:
        add_support(self.vrps, self.vrp_extras, key, expires)

    def add_router_key(self, entry: dict[str, Any]) -> None:
        self.counts["router_key"] += 1
        key, expires = router_key_entry(entry)
        old = self.router_keys.get(key)
        if old is None:
            self.router_keys[key] = expires
        elif expires > old:
            self.router_keys[key] = expires
            self.key_extras.append((key, old))
        else:
            self.key_extras.append((key, expires))

    def add_aspa(self, entry: dict[str, Any], afi: int = 0) -> None:
        self.counts["aspa"] += 1
        self.aspas.append(aspa_entry(entry, self.max_providers))
        self.aspa_afis.append(afi)

    def hook(self, obj: dict[str, Any]) -> object:
        prefix = obj.get("prefix")
        if prefix is not None and "asn" in obj:
            if not self._fast_vrp(obj, prefix):
                self.add_vrp(obj)
            return _VRP
        if ("ski" in obj or "SKI" in obj) and (
            "pubkey" in obj or "routerPublicKey" in obj or "spki" in obj
        ):
            self.add_router_key(obj)
            return _KEY
        if ("customer_asid" in obj or "customer" in obj) and "providers" in obj:
            self.add_aspa(obj)
            return _AspaAt(len(self.aspas) - 1)
        return obj

    def _fast_vrp(self, obj: dict[str, Any], prefix: object) -> bool:
        """The common case (int ASN, int expires, valid) inline; False means take the slow path."""
        asn = obj["asn"]
        expires = obj.get("expires")
        if type(asn) is not int or type(expires) is not int or type(prefix) is not str:
            return False
        return self.add_packed(prefix, asn, obj.get("maxLength", ABSENT), expires)

    def add_typed(self, roas: list[Roa], unset: object) -> bool:
        """Pack every typed entry (`upstream.json_typed`, ``unset`` its absent ``maxLength``).

        ``roas`` is emptied.

        False at the first entry that needs a look: the caller then reads the document the
        general way. The structs are taken from the end, each freed once packed (the order
        is immaterial).
        """
        vrps, again, packed, pop = self.vrps, self._vrp, packed_key, roas.pop
        count = len(roas)
        while roas:
            roa = pop()
            key = packed(roa.prefix, roa.asn, roa.maxLength, unset)
            if key is None:
                return False
            if key in vrps:
                again(key, roa.expires)
            else:
                vrps[key] = roa.expires
        self.counts["vrp"] += count
        return True

    def add_packed(self, prefix: str, asn: int, max_length: object, expires: int) -> bool:
        """A VRP of the common shape, valid; False (and nothing added) otherwise."""
        key = packed_key(prefix, asn, max_length)
        if key is None:
            return False
        self.counts["vrp"] += 1
        vrps = self.vrps
        if key in vrps:
            self._vrp(key, expires)
        else:
            vrps[key] = expires
        return True

    def payload(self, generated: int | None) -> SourcePayload:
        tables = self.tables if self.tables is not None else self._vrp_tables()
        return _payload(tables, self.sections(), generated)

    def sections(self) -> Sections:
        """What the router key and ASPA sections held."""
        return Sections(
            tuple(sorted(self.router_keys.items(), key=lambda kv: kv[0].sort_key())),
            tuple(sorted(self.key_extras, key=lambda ke: (ke[0].sort_key(), -ke[1]))),
            tuple(self.aspas),
            bytes(self.aspa_afis) if any(self.aspa_afis) else b"",
        )

    def _vrp_tables(self) -> VrpTables:
        v4 = sorted((k for k in self.vrps if len(k) == V4_KEY_SIZE), reverse=True)
        v6 = sorted((k for k in self.vrps if len(k) == V6_KEY_SIZE), reverse=True)
        get = self.vrps.__getitem__
        return VrpTables(
            b"".join(v4),
            array("q", map(get, v4)),
            b"".join(v6),
            array("q", map(get, v6)),
            tuple(
                (4 if len(k) == V4_KEY_SIZE else 6, k, e)
                for k, e in sorted(self.vrp_extras, key=_extra_order, reverse=True)
            ),
        )


def _payload(tables: VrpTables, sections: Sections, generated: int | None) -> SourcePayload:
    return SourcePayload(
        tables.v4,
        tables.v4_expires,
        tables.v6,
        tables.v6_expires,
        sections.router_keys,
        sections.aspas,
        generated,
        tables.duplicates,
        sections.router_key_duplicates,
        sections.aspa_afis,
    )


def _extra_order(extra: tuple[bytes, int]) -> tuple[bool, bytes, int]:
    """IPv4 first, then as the unique keys (descending), the later expiry first."""
    key, expires = extra
    return len(key) == V4_KEY_SIZE, key, expires


Section = tuple[str, str, list[Any]]  # (kind, label as written in the document, entries)


def _list(doc: dict[str, Any], name: str, label: str) -> list[Any] | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, list):
        raise FormatError(f"'{label}' must be a list")
    return value


def _sections(doc: dict[str, Any]) -> list[Section]:
    """The payload arrays of a document, whatever shape it has, labelled as written.

    Every export format names its VRPs ``roas``: a document without that section (``{}``, a
    proxy's ``{"error": ...}``) is not an export, and never an empty one.
    """
    roas = _list(doc, "roas", "roas")
    if roas is None:
        names = ", ".join(repr(k)[:40] for k in list(doc)[:5]) or "none"
        raise FormatError(f"not an export: no 'roas' section (top-level keys: {names})")
    out: list[Section] = [("vrp", "roas", roas)]
    for name in ("bgpsec_keys", "routerKeys", "router-keys"):
        keys = _list(doc, name, name)
        if keys is not None:
            out.append(("router_key", name, keys))
    aspas = _list(doc, "aspas", "aspas")
    if aspas is not None:
        out.append(("aspa", "aspas", aspas))
    legacy = doc.get("provider_authorizations")
    if legacy is not None:
        if not isinstance(legacy, dict):
            raise FormatError("'provider_authorizations' must be an object")
        for afi in ("ipv4", "ipv6"):
            label = f"provider_authorizations.{afi}"
            out.append(("aspa", label, _list(legacy, afi, label) or []))
    fort = doc.get("aspa")
    if isinstance(fort, dict):
        # FORT: {"aspa": {"64496": [64497, 64498]}}, a map keyed by customer ASN.
        out.append(("aspa", "aspa", [{"customer": c, "providers": p} for c, p in fort.items()]))
    return out


def _generated(doc: dict[str, Any]) -> int | None:
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return None
    for name in ("generated", "buildtime", "generatedTime"):
        value = meta.get(name)
        if value is not None:
            try:
                return time_value(value, f"metadata.{name}")
            except PayloadError:
                return None
    return None


def parse_export(
    data: bytes | str,
    *,
    max_aspa_providers: int = DEFAULT_MAX_ASPA_PROVIDERS,
    memo: PieceMemo | None = None,
) -> SourcePayload:
    """Parse one export (already decompressed).

    ``memo`` holds the pieces of the source's previous export (`upstream.pieces`): unchanged
    pieces are taken from it, and it is replaced by this export's pieces (or emptied, when the
    export is read another way; a refused export leaves it as it was).

    Raises:
        FormatError: the document is not JSON of a known shape, or an entry is invalid; the
            message names the entry (section[index]), the field and the value.
    """
    if isinstance(data, bytes):
        pieced = _from_pieces(data, memo, max_aspa_providers)
        if pieced is not None:
            return pieced
    payload = _whole(data, max_aspa_providers)
    if memo is not None:
        memo.clear()  # kept through a refused export, emptied by one read otherwise
    return payload


def _whole(data: bytes | str, max_aspa_providers: int) -> SourcePayload:
    """The export read as one document: typed, else hooked, else walked entry by entry."""
    # msgspec is compiled: loaded at the first parse, not by every importer of the package
    # (the state's readers under other interpreters need only pure-Python dependencies, P-38).
    from upstream import json_typed

    typed = json_typed.decode_typed(data)
    if typed is not None:
        fast = _Collector(max_aspa_providers)
        count = len(typed.roas)
        if fast.add_typed(typed.roas, json_typed.UNSET):
            payload = _hooked(typed.rest, fast, count)
            if payload is not None:
                return payload
        del typed
    payload = _hooked(data, _Collector(max_aspa_providers), 0)
    if payload is not None:
        return payload
    # Payload-shaped objects were not all where expected (or some entry is incomplete):
    # decode again without the hook and walk the payload sections one entry at a time.
    return _slow_path(_loads(data, None), max_aspa_providers)


def _from_pieces(
    data: bytes, memo: PieceMemo | None, max_aspa_providers: int
) -> SourcePayload | None:
    """The export read in pieces (`upstream.piece_reader`); None when it cannot be read so."""
    from upstream import piece_reader

    read = piece_reader.read_pieces(data, memo)
    return None if read is None else pieced_payload(read, memo, max_aspa_providers)


def pieced_payload(
    read: PieceRead, memo: PieceMemo | None, max_aspa_providers: int
) -> SourcePayload | None:
    """The payload of an export whose ``roas`` were read in pieces; None when it is not one.

    The array cut out must be the document's own top-level ``roas``: with it replaced by a mark
    nobody can write in advance, the document must decode with that mark as its ``roas``. Its
    other sections are read as always (taken from ``memo`` when their bytes are unchanged), and
    ``memo`` then holds this export's pieces.
    """
    from upstream import json_typed

    mark = b'"' + os.urandom(12).hex().encode() + b'"'
    rest = json_typed.decode_frame(read.frame(mark), mark)
    if rest is None:
        return None
    raw_sections, metadata = rest
    # The metadata alone: no payload object may hide in it (the general read would not take
    # the export then either); its build time is read as always.
    meta = _hooked(metadata, _Collector(max_aspa_providers), 0)
    if meta is None:
        return None
    digest = hashlib.sha256(raw_sections).digest()
    known = memo.sections if memo is not None else None
    if known is not None and known[:2] == (digest, max_aspa_providers):
        sections = known[2]
    else:
        fast = _Collector(max_aspa_providers)
        if _hooked(raw_sections, fast, 0) is None:
            return None
        sections = fast.sections()
    tables = assemble([p.v4 for p in read.pieces], [p.v6 for p in read.pieces])
    if memo is not None:  # the pieces as views of the tables: the memo holds no second copy
        pieces, v4_at, v6_at = read.pieces, tables.v4_at, tables.v6_at
        memo.replace([p.placed(tables, v4_at[i], v6_at[i]) for i, p in enumerate(pieces)])
        memo.sections = digest, max_aspa_providers, sections
    return _payload(tables, sections, meta.generated)


def _hooked(data: bytes | str, fast: _Collector, typed: int) -> SourcePayload | None:
    """The document read with ``fast``'s hook, which holds ``typed`` VRPs already.

    None when a payload object was not where expected or needs the slow path's look.
    """

    def hook(obj: dict[str, Any]) -> object:
        try:
            return fast.hook(obj)
        except (PayloadError, KeyError, TypeError, AttributeError, ValueError):
            # Leave it be: if it sits in a payload section the check below sends the document
            # down the slow path, which names the entry; anywhere else it is ignored.
            return obj

    doc = _loads(data, hook)
    sections = _sections(doc)
    markers = {"vrp": _VRP, "router_key": _KEY}
    seen = {"vrp": typed, "router_key": 0, "aspa": 0}
    for kind, _, items in sections:
        seen[kind] += len(items)
    if seen != fast.counts or not all(
        all(type(item) is _AspaAt for item in items)
        if kind == "aspa"
        else items.count(markers[kind]) == len(items)
        for kind, _, items in sections
    ):
        return None
    for kind, label, items in sections:
        afi = _SECTION_AFI.get(label, 0)
        if kind == "aspa" and afi:
            for item in items:
                fast.aspa_afis[item.index] = afi
    return fast.payload(_generated(doc))


def _loads(data: bytes | str, hook: Callable[[dict[str, Any]], object] | None) -> dict[str, Any]:
    if isinstance(data, bytes):
        try:
            # Decoding here (not inside json.loads) lets the caller drop its bytes first.
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise FormatError(f"export is not UTF-8: {exc}") from None
    try:
        doc = json.loads(data, object_hook=hook)
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise FormatError("JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise FormatError("top level must be a JSON object")
    return doc


def _slow_path(doc: dict[str, Any], max_aspa_providers: int) -> SourcePayload:
    slow = _Collector(max_aspa_providers)
    adders: dict[str, Callable[[dict[str, Any]], None]] = {
        "vrp": slow.add_vrp,
        "router_key": slow.add_router_key,
    }
    required = {"vrp": ("prefix", "asn"), "router_key": ("asn",), "aspa": ("providers",)}
    for kind, label, items in _sections(doc):
        add = (
            partial(slow.add_aspa, afi=_SECTION_AFI.get(label, 0))
            if kind == "aspa"
            else adders[kind]
        )
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not all(f in item for f in required[kind]):
                raise FormatError(
                    f"{label}[{index}]: missing {' or '.join(required[kind])}: {item!r:.200}"
                )
            try:
                add(item)
            except PayloadError as exc:
                raise FormatError(f"{label}[{index}]: {exc}") from None
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise FormatError(f"{label}[{index}]: malformed entry: {exc}") from None
    return slow.payload(_generated(doc))


def parse_entries(entries: Iterable[dict[str, Any]]) -> SourcePayload:
    """Build a payload from already-decoded ``roas`` entries (tests and tools)."""
    return _slow_path({"roas": list(entries)}, DEFAULT_MAX_ASPA_PROVIDERS)

"""Reading exchange documents back into a `PersistedState`: version 2, and version 1 explicitly.

`decode` reads a version-2 document and nothing else; `import_version_1` is the separate,
explicit path for a version-1 document (no ASPA address families, the legacy hexadecimal
spelling of IPv4-mapped IPv6 prefixes): the only way a version-1 document's ASPAs become
afi 0 (both families). Both are strict: bytes that are not UTF-8, JSON that is not the
canonical form, unknown or missing members, wrong types, invalid Unicode and values out of
range are refused with `ExchangeFormatError` naming the place in the document. Neither
changes a time: every expiry, deadline and acceptance time is kept as written (nothing is
refreshed, so an import never extends validity).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from persistence.exchange import (
    ACTIVE_KINDS,
    FORMAT,
    SOURCE_KEYS,
    SOURCE_KEYS_V1,
    STATE_KEYS,
    VERSION,
    encode,
    encode_version_1,
)
from persistence.exchange_values import INT64_MAX, INT64_MIN, KIND_ORDER, ExchangeFormatError
from persistence.kinds import MODES
from persistence.limits import LimitExceededError, Limits
from persistence.state import GroupRecord, PersistedState, SourceRecord, StateId, UpstreamRef
from persistence.supports import supported
from snapshot.model import Aspa, PayloadError, RouterKey, pack_v4, pack_v6
from snapshot.packed import V4, V6
from snapshot.prefix_text import parse_prefix

__all__ = ["decode", "import_version_1"]

ASN_MAX: Final = 0xFFFF_FFFF
T = TypeVar("T")
_HEX = frozenset("0123456789abcdef")
_LOW64 = (1 << 64) - 1


def decode(data: bytes, *, limits: Limits | None = None) -> PersistedState:
    """The state of a canonical version-2 document (a version-1 one is refused: see below)."""
    return _read(data, VERSION, limits)


def import_version_1(data: bytes, *, limits: Limits | None = None) -> PersistedState:
    """The state of a canonical version-1 document; a version-2 one is refused.

    Every ASPA becomes afi 0 (both families, as version 1 meant), a source that could deliver
    ASPAs covers both families (``aspa_families`` 3) and a version-1 ``aspa`` active group
    stays the aggregate ``aspa`` active group (of both families). Times are kept as written.
    """
    return _read(data, 1, limits)


def _read(data: bytes, version: int, limits: Limits | None) -> PersistedState:
    bound = (limits or Limits()).max_export_bytes
    if len(data) > bound:
        raise LimitExceededError(
            f"the exchange document has {len(data)} octets, more than max_export_bytes={bound}"
        )
    document = _load(data)
    state = _Reader(version).state(document)
    again = b"".join(
        (encode if version == VERSION else encode_version_1)(state, limits=Limits(1 << 62))
    )
    if again != data:
        at = next((i for i, (a, b) in enumerate(zip(again, data, strict=False)) if a != b), None)
        at = min(len(again), len(data)) if at is None else at
        raise ExchangeFormatError(
            "$", f"not the canonical encoding (first difference at byte {at})"
        )
    return state


def _load(data: bytes) -> object:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ExchangeFormatError("$", f"not UTF-8 at byte {exc.start}") from None

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise ExchangeFormatError("$", f"member {key!r} appears twice in one object")
            result[key] = value
        return result

    def no_float(value: str) -> object:
        raise ExchangeFormatError("$", f"{value} is not an integer (numbers are integers only)")

    try:
        return json.loads(
            text, object_pairs_hook=pairs, parse_float=no_float, parse_constant=no_float
        )
    except json.JSONDecodeError as exc:
        raise ExchangeFormatError("$", f"not JSON: {exc.msg} at character {exc.pos}") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        if isinstance(exc, ExchangeFormatError):
            raise
        raise ExchangeFormatError("$", f"not a valid document: {exc}") from None


# ---------------------------------------------------------------------- typed values
def _obj(value: object, path: str, keys: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ExchangeFormatError(path, f"expected an object, not {_type(value)}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise ExchangeFormatError(f"{path}.{unknown[0]}", "unknown member")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ExchangeFormatError(f"{path}.{missing[0]}", "missing member")
    if list(value) != list(keys):
        raise ExchangeFormatError(path, f"members out of the fixed order {list(keys)}")
    return value


def _list(value: object, path: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise ExchangeFormatError(path, f"expected an array, not {_type(value)}")
    if length is not None and len(value) != length:
        raise ExchangeFormatError(path, f"expected {length} elements, not {len(value)}")
    return value


def _int(value: object, path: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    if type(value) is not int:
        raise ExchangeFormatError(path, f"expected an integer, not {_type(value)}")
    if not low <= value <= high:
        raise ExchangeFormatError(path, f"{value} out of range {low}..{high}")
    return value


def _opt_int(value: object, path: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int | None:
    return None if value is None else _int(value, path, low, high)


def _bool(value: object, path: str) -> bool:
    if type(value) is not bool:
        raise ExchangeFormatError(path, f"expected true or false, not {_type(value)}")
    return value


def _str(value: object, path: str) -> str:
    if type(value) is not str:
        raise ExchangeFormatError(path, f"expected a string, not {_type(value)}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate written as a \\u escape
        raise ExchangeFormatError(path, f"not valid Unicode ({exc.reason})") from None
    return value


def _opt_str(value: object, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _hex(value: object, path: str, length: int | None = None) -> bytes:
    text = _str(value, path)
    if len(text) % 2 or not _HEX.issuperset(text):
        raise ExchangeFormatError(path, "expected lowercase hexadecimal octets")
    if length is not None and len(text) != 2 * length:
        raise ExchangeFormatError(path, f"expected {length} octets, not {len(text) // 2}")
    return bytes.fromhex(text)


def _ordered(names: list[Any], path: str, order: Sequence[str]) -> list[str]:
    """Names from ``order``, each once, in that order."""
    for i, name in enumerate(names):
        if _str(name, f"{path}[{i}]") not in order:
            raise ExchangeFormatError(f"{path}[{i}]", f"unknown kind {name!r}")
    if names != [k for k in order if k in names]:
        raise ExchangeFormatError(path, f"expected distinct names in the order {list(order)}")
    return names


def _kinds(value: object, path: str) -> frozenset[str]:
    return frozenset(_ordered(_list(value, path), path, KIND_ORDER))


def _type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if type(value) is int:
        return "an integer"
    return names.get(type(value), type(value).__name__)


def _model(path: str, build: Callable[[], T]) -> T:
    """``build()``; the model's own refusal (ValueError) as an error at ``path``."""
    try:
        return build()
    except ExchangeFormatError:
        raise
    except ValueError as exc:
        raise ExchangeFormatError(path, str(exc)) from None


class _Reader:
    """Builds the state of one document of ``version``."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.legacy = version == 1

    def state(self, value: object) -> PersistedState:
        if not isinstance(value, dict):
            raise ExchangeFormatError("$", f"expected an object, not {_type(value)}")
        if value.get("format") != FORMAT:
            raise ExchangeFormatError("$.format", f"expected {FORMAT!r}")
        found = value.get("version")
        if found != self.version:
            hint = (
                "import it with the explicit version-1 path (import_version_1; rtr-serve state"
                " import --version-1)"
                if found == 1
                else "the version-1 import reads version 1 only"
                if found == VERSION
                else "unknown version"
            )
            raise ExchangeFormatError("$.version", f"a version {found!r} document: {hint}")
        d = _obj(value, "$", STATE_KEYS)
        names = [
            _str(_obj(s, f"$.sources[{i}]", self._source_keys)["name"], f"$.sources[{i}].name")
            for i, s in enumerate(_list(d["sources"], "$.sources"))
        ]
        if names != sorted(set(names)):
            raise ExchangeFormatError("$.sources", "sources not in strictly ascending name order")
        up = d["upstream"]
        upstream = None
        if up is not None:
            u = _obj(up, "$.upstream", ("store_id", "epoch", "generation"))
            upstream = UpstreamRef(
                _str(u["store_id"], "$.upstream.store_id"),
                _int(u["epoch"], "$.upstream.epoch", 0),
                _int(u["generation"], "$.upstream.generation", 0),
            )
        mode = _str(d["mode"], "$.mode")
        if mode not in MODES:
            raise ExchangeFormatError("$.mode", f"expected one of {list(MODES)}")
        sessions = _list(d["session_ids"], "$.session_ids", 3)
        return _model(
            "$",
            lambda: PersistedState(
                store_id=_str(d["store_id"], "$.store_id"),
                state_id=StateId(
                    _int(d["epoch"], "$.epoch", 0), _int(d["generation"], "$.generation", 0)
                ),
                config_revision=_int(d["config_revision"], "$.config_revision", 0),
                serial=_int(d["serial"], "$.serial", 0, ASN_MAX),
                session_ids=(
                    _int(sessions[0], "$.session_ids[0]", 0, 0xFFFF),
                    _int(sessions[1], "$.session_ids[1]", 0, 0xFFFF),
                    _int(sessions[2], "$.session_ids[2]", 0, 0xFFFF),
                ),
                published_at=_int(d["published_at"], "$.published_at"),
                package_version=_str(d["package_version"], "$.package_version"),
                sources=tuple(
                    self.source(s, f"$.sources[{i}]") for i, s in enumerate(d["sources"])
                ),
                groups=self.groups(d["groups"]),
                active_groups=self.active_groups(d["active_groups"]),
                policy_id=_opt_str(d["policy_id"], "$.policy_id"),
                policy_json=_opt_str(d["policy"], "$.policy"),
                mode=mode,
                reference_time=_opt_int(d["reference_time"], "$.reference_time"),
                upstream=upstream,
                config_store_id=_opt_str(d["config_store_id"], "$.config_store_id"),
                config_epoch=_opt_int(d["config_epoch"], "$.config_epoch", 0),
                config_identity=_opt_str(d["config_identity"], "$.config_identity"),
            ),
        )

    @property
    def _source_keys(self) -> tuple[str, ...]:
        return SOURCE_KEYS_V1 if self.legacy else SOURCE_KEYS

    def groups(self, value: object) -> tuple[GroupRecord, ...]:
        groups = []
        for i, item in enumerate(_list(value, "$.groups")):
            at = f"$.groups[{i}]"
            g = _obj(item, at, ("id", "name", "kinds", "sources"))
            if _int(g["id"], f"{at}.id", 0) != i:
                raise ExchangeFormatError(f"{at}.id", f"expected {i} (its position)")
            members = _list(g["sources"], f"{at}.sources")
            names = tuple(_str(n, f"{at}.sources[{j}]") for j, n in enumerate(members))
            kinds = _kinds(g["kinds"], f"{at}.kinds")
            name = _str(g["name"], f"{at}.name")
            try:
                groups.append(GroupRecord(i, name, kinds, names))
            except ValueError as exc:
                raise ExchangeFormatError(at, str(exc)) from None
        return tuple(groups)

    def active_groups(self, value: object) -> tuple[tuple[str, str], ...]:
        items = _list(value, "$.active_groups")
        pairs = [_list(p, f"$.active_groups[{i}]", 2) for i, p in enumerate(items)]
        order = ("vrp", "aspa", "router_key") if self.legacy else ACTIVE_KINDS
        kinds = _ordered([p[0] for p in pairs], "$.active_groups", order)
        return tuple(
            (kind, _str(pair[1], f"$.active_groups[{i}][1]"))
            for i, (kind, pair) in enumerate(zip(kinds, pairs, strict=True))
        )

    def source(self, value: object, at: str) -> SourceRecord:
        s = _obj(value, at, self._source_keys)
        v4, v4_exp, v6, v6_exp = self.vrps(_list(s["vrps"], f"{at}.vrps"), f"{at}.vrps")
        dups = tuple(
            self.vrp(r, f"{at}.vrp_duplicates[{i}]")
            for i, r in enumerate(_list(s["vrp_duplicates"], f"{at}.vrp_duplicates"))
        )
        keys = self.router_keys(s["router_keys"], f"{at}.router_keys")
        key_dups = self.router_keys(s["router_key_duplicates"], f"{at}.router_key_duplicates")
        aspas = self.aspas(s["aspas"], f"{at}.aspas")
        aspa_dups = self.aspas(s["aspa_duplicates"], f"{at}.aspa_duplicates")
        afis = bytes(afi for _, afi, _ in aspas)
        fields: dict[str, Any] = {}
        if not self.legacy:
            fields["aspa_families"] = _int(s["aspa_families"], f"{at}.aspa_families", 0, 3)
        accepted_at = _int(s["accepted_at"], f"{at}.accepted_at")
        return _model(
            at,
            lambda: supported(
                SourceRecord(
                    name=_str(s["name"], f"{at}.name"),
                    group=_str(s["group"], f"{at}.group"),
                    kind=_str(s["kind"], f"{at}.kind"),
                    complete=_bool(s["complete"], f"{at}.complete"),
                    capabilities=_kinds(s["capabilities"], f"{at}.capabilities"),
                    selected=_kinds(s["selected"], f"{at}.selected"),
                    accepted_at=accepted_at,
                    location=_str(s["location"], f"{at}.location"),
                    # Not in the document (no part of the digest): no later than it was accepted.
                    evaluated_at=accepted_at,
                    expires_at=_int(s["expires_at"], f"{at}.expires_at"),
                    rtr_session=_opt_int(s["rtr_session"], f"{at}.rtr_session", 0, 0xFFFF),
                    rtr_serial=_opt_int(s["rtr_serial"], f"{at}.rtr_serial", 0, ASN_MAX),
                    generated_at=_opt_int(s["generated_at"], f"{at}.generated_at"),
                    identity=_opt_str(s["identity"], f"{at}.identity"),
                    v4=v4,
                    v4_expires=v4_exp,
                    v6=v6,
                    v6_expires=v6_exp,
                    router_keys=keys,
                    aspas=tuple((aspa, expires) for aspa, _, expires in aspas),
                    group_id=_int(s["group_id"], f"{at}.group_id", 0),
                    protocol=_opt_int(s["protocol"], f"{at}.protocol", 0, 2),
                    present=_kinds(s["present"], f"{at}.present"),
                    invalidated=_bool(s["invalidated"], f"{at}.invalidated"),
                    aspa_afis=afis if any(afis) else b"",
                    metadata_json=_opt_str(s["metadata"], f"{at}.metadata"),
                    vrp_duplicates=dups,
                    router_key_duplicates=key_dups,
                    aspa_duplicates=aspa_dups,
                    **fields,
                )
            ),
        )

    def vrp(self, value: object, at: str) -> tuple[int, bytes, int]:
        """(family, packed key, expiry) of one VRP record."""
        r = _list(value, at, 4)
        try:
            family, address, length = parse_prefix(
                _str(r[0], f"{at}[0]"), legacy_mapped=self.legacy
            )
        except ValueError as exc:
            raise ExchangeFormatError(f"{at}[0]", str(exc)) from None
        max_length = _int(r[1], f"{at}[1]", length, 32 if family == 4 else 128)
        asn = _int(r[2], f"{at}[2]", 0, ASN_MAX)
        pack = pack_v4 if family == 4 else pack_v6
        return family, pack(address, length, max_length, asn), _int(r[3], f"{at}[3]")

    def quick_vrp(self, r: object) -> tuple[int, bytes, int] | None:
        """`vrp` of a valid record, without building paths; None: let `vrp` say what is wrong."""
        if type(r) is not list or len(r) != 4:
            return None
        text, max_length, asn, expires = r
        if type(text) is not str or type(max_length) is not int or type(asn) is not int:
            return None
        if type(expires) is not int or not INT64_MIN <= expires <= INT64_MAX:
            return None
        try:
            family, address, length = parse_prefix(text, legacy_mapped=self.legacy)
        except ValueError:
            return None
        if not length <= max_length <= (32 if family == 4 else 128) or not 0 <= asn <= ASN_MAX:
            return None
        if family == 4:
            return family, V4.numbers.pack(address, max_length, length, asn), expires
        return (
            family,
            V6.numbers.pack(address >> 64, address & _LOW64, max_length, length, asn),
            expires,
        )

    def vrps(self, records: list[Any], at: str) -> tuple[bytes, array[int], bytes, array[int]]:
        """The packed tables: IPv4 then IPv6, each strictly descending (the stored order)."""
        keys: dict[int, list[bytes]] = {4: [], 6: []}
        expiries: dict[int, array[int]] = {4: array("q"), 6: array("q")}
        for i, record in enumerate(records):
            checked = self.quick_vrp(record)
            family, key, expires = checked or self.vrp(record, f"{at}[{i}]")
            previous = keys[family][-1] if keys[family] else None
            if (family == 4 and keys[6]) or (previous is not None and key >= previous):
                raise ExchangeFormatError(
                    f"{at}[{i}]", "VRPs not IPv4 then IPv6, each in strictly descending key order"
                )
            keys[family].append(key)
            expiries[family].append(expires)
        return b"".join(keys[4]), expiries[4], b"".join(keys[6]), expiries[6]

    def router_keys(self, value: object, at: str) -> tuple[tuple[RouterKey, int], ...]:
        result = []
        for i, item in enumerate(_list(value, at)):
            r = _list(item, f"{at}[{i}]", 4)
            ski = _hex(r[0], f"{at}[{i}][0]", 20)
            asn = _int(r[1], f"{at}[{i}][1]", 0, ASN_MAX)
            spki = _hex(r[2], f"{at}[{i}][2]")
            expires = _int(r[3], f"{at}[{i}][3]")
            try:
                result.append((RouterKey(ski, asn, spki), expires))
            except PayloadError as exc:
                raise ExchangeFormatError(f"{at}[{i}]", str(exc)) from None
        return tuple(result)

    def aspas(self, value: object, at: str) -> tuple[tuple[Aspa, int, int], ...]:
        """(ASPA, stored afi 0/1/2, expiry) of each record."""
        result = []
        for i, item in enumerate(_list(value, at)):
            r = _list(item, f"{at}[{i}]", 3 if self.legacy else 4)
            customer = _int(r[0], f"{at}[{i}][0]", 1, ASN_MAX)
            afi = 0
            if not self.legacy:
                afi = 0 if r[1] is None else _int(r[1], f"{at}[{i}][1]", 1, 2)
            p = len(r) - 2
            listed = _list(r[p], f"{at}[{i}][{p}]")
            providers = tuple(
                _int(n, f"{at}[{i}][{p}][{j}]", 0, ASN_MAX) for j, n in enumerate(listed)
            )
            try:
                aspa = Aspa(customer, providers)
            except PayloadError as exc:
                raise ExchangeFormatError(f"{at}[{i}][{p}]", str(exc)) from None
            if aspa.providers != providers:
                raise ExchangeFormatError(
                    f"{at}[{i}][{p}]", "providers not in normal form (ascending, once each)"
                )
            result.append((aspa, afi, _int(r[p + 1], f"{at}[{i}][{p + 1}]")))
        return tuple(result)

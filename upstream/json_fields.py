"""Field readers of validator JSON entries: AS numbers, times, expiries, prefixes, keys, ASPAs.

Each raises `snapshot.model.PayloadError` naming the field and the value; `upstream.json_format`
adds the entry's section and index.
"""

from __future__ import annotations

import base64
import binascii
import socket
from datetime import datetime
from typing import Any

from snapshot.model import SKI_LENGTH, Aspa, PayloadError, RouterKey, check_asn, pack_v4, pack_v6
from upstream.payload import NO_EXPIRY

__all__ = [
    "asn_value",
    "aspa_entry",
    "expires_of",
    "router_key_entry",
    "time_value",
    "vrp_key",
]


def asn_value(value: object, name: str) -> int:
    if isinstance(value, str):
        text = value[2:] if value[:2].upper() == "AS" else value
        if not (text.isascii() and text.isdigit()):
            raise PayloadError(name, value, "not an AS number")
        value = int(text)
    if type(value) is not int:
        raise PayloadError(name, value, "not an AS number")
    return check_asn(value, name)


def time_value(value: object, name: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
        except ValueError:
            pass
    raise PayloadError(name, value, "not a Unix time or ISO 8601 date")


def expires_of(entry: dict[str, Any]) -> int:
    value = entry.get("expires")
    if value is not None:
        return time_value(value, "expires")
    sources = entry.get("source")
    if isinstance(sources, list) and sources:
        # Routinator jsonext: an entry lives while any of its sources does; a source lives
        # until the first of its validity end, chain validity end and stale time.
        best = None
        for src in sources:
            if not isinstance(src, dict):
                continue
            ends = [
                time_value(v, "source")
                for v in (
                    (src.get("validity") or {}).get("notAfter"),
                    (src.get("chainValidity") or {}).get("notAfter"),
                    src.get("stale"),
                )
                if v is not None
            ]
            end = min(ends, default=NO_EXPIRY)
            best = end if best is None else max(best, end)
        if best is not None:
            return best
    return NO_EXPIRY


_INET_PTON = socket.inet_pton
_AF_INET = socket.AF_INET
_AF_INET6 = socket.AF_INET6


def vrp_key(entry: dict[str, Any]) -> bytes:
    prefix = entry["prefix"]
    if not isinstance(prefix, str):
        raise PayloadError("prefix", prefix, "must be a string")
    address, slash, length_text = prefix.partition("/")
    if not (slash and length_text.isascii() and length_text.isdigit() and len(length_text) < 4):
        raise PayloadError("prefix", prefix, "not a prefix in address/length form")
    length = int(length_text)
    max_length = entry.get("maxLength", length)
    if type(max_length) is not int:
        raise PayloadError("maxLength", max_length, "must be an integer")
    asn = asn_value(entry["asn"], "asn")
    try:
        if ":" in address:
            raw = _INET_PTON(_AF_INET6, address)
            return pack_v6(int.from_bytes(raw, "big"), length, max_length, asn)
        raw = _INET_PTON(_AF_INET, address)
    except OSError:
        raise PayloadError("prefix", prefix, "not a valid IP address") from None
    return pack_v4(int.from_bytes(raw, "big"), length, max_length, asn)


def _b64(value: object, name: str) -> bytes:
    if not isinstance(value, str):
        raise PayloadError(name, value, "must be a base64 string")
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    raw = padded.encode("ascii", "replace")
    for alphabet in (None, b"-_"):
        try:
            return base64.b64decode(raw, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise PayloadError(name, value, "not valid base64")


def router_key_entry(entry: dict[str, Any]) -> tuple[RouterKey, int]:
    ski_text = entry.get("ski", entry.get("SKI"))
    if not isinstance(ski_text, str):
        raise PayloadError("ski", ski_text, "must be a hex string")
    try:
        ski = bytes.fromhex(ski_text.replace(":", ""))
    except ValueError:
        # FORT writes the SKI in base64url (27 or 28 characters for 20 octets).
        if len(ski_text) not in (27, 28):
            raise PayloadError("ski", ski_text, "not hexadecimal") from None
        ski = _b64(ski_text, "ski")
    if len(ski) != SKI_LENGTH:
        raise PayloadError("ski", ski_text, "must be 20 octets (40 hex digits)")
    spki_name = next((n for n in ("pubkey", "routerPublicKey", "spki") if n in entry), "pubkey")
    spki = _b64(entry.get(spki_name), spki_name)
    return RouterKey(ski, asn_value(entry.get("asn"), "asn"), spki), expires_of(entry)


def aspa_entry(entry: dict[str, Any], max_providers: int) -> tuple[Aspa, int]:
    name = "customer_asid" if "customer_asid" in entry else "customer"
    customer = asn_value(entry.get(name), name)
    providers = entry.get("providers")
    if not isinstance(providers, list):
        raise PayloadError("providers", providers, "must be a list of ASNs")
    if len(providers) > max_providers:
        raise PayloadError("providers", f"<{len(providers)} ASNs>", f"more than {max_providers}")
    asns = [asn_value(p, "providers") for p in providers]
    return Aspa(customer, tuple(asns)), expires_of(entry)

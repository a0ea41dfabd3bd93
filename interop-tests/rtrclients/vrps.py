"""VRP and router-key sets: expected ones from an export (stdlib only), parsed ones, diffs."""

from __future__ import annotations

import base64
import bz2
import functools
import gzip
import ipaddress
import json
import lzma
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: (packed network address, prefix length, max length, origin ASN)
Vrp = tuple[bytes, int, int, int]
#: (ASN, SKI as lower-case hex, SubjectPublicKeyInfo as lower-case hex)
RouterKey = tuple[int, str, str]


def vrp(address: str, length: int | str, max_length: int | str, asn: int | str) -> Vrp:
    """A VRP from a daemon's text output (any valid address spelling)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.inet_pton(family, address), int(length), int(max_length), int(asn)


def vrp_from_prefix(prefix: str, max_length: int | str, asn: int | str) -> Vrp:
    """A VRP from "address/length" text."""
    address, _, length = prefix.partition("/")
    return vrp(address, length, max_length, asn)


def is_v6(item: Vrp) -> bool:
    """True for an IPv6 VRP."""
    return len(item[0]) == 16


def counts(vrps: Iterable[Vrp]) -> tuple[int, int]:
    """(IPv4, IPv6) VRP counts."""
    v4 = v6 = 0
    for item in vrps:
        if is_v6(item):
            v6 += 1
        else:
            v4 += 1
    return v4, v6


def prefix_counts(vrps: Iterable[Vrp]) -> tuple[int, int]:
    """(IPv4, IPv6) counts of distinct prefixes, the basis OpenBGPD's `show sets` counts on."""
    prefixes = {(item[0], item[1]) for item in vrps}
    v6 = sum(1 for address, _ in prefixes if len(address) == 16)
    return len(prefixes) - v6, v6


def fmt(item: Vrp) -> str:
    """Readable VRP."""
    address = ipaddress.ip_address(item[0])
    return f"{address}/{item[1]}-{item[2]} AS{item[3]}"


def diff(got: set[Vrp], want: set[Vrp] | frozenset[Vrp], limit: int = 8) -> str:
    """What is missing and what is extra, shortened."""
    missing = sorted(want - got)
    extra = sorted(got - want)
    parts = [f"held {len(got)}, expected {len(want)}"]
    if missing:
        parts.append(f"missing {len(missing)}: " + ", ".join(fmt(v) for v in missing[:limit]))
    if extra:
        parts.append(f"extra {len(extra)}: " + ", ".join(fmt(v) for v in extra[:limit]))
    return "; ".join(parts)


def router_key(asn: int | str, ski: str, spki: bytes) -> RouterKey:
    """A router key, normalised (SKI hex without separators, SPKI as hex)."""
    return int(asn), ski.replace(":", "").strip().lower(), spki.hex()


@dataclass(frozen=True)
class Expected:
    """What a correct cache serves for an export: VRPs and router keys, de-duplicated."""

    vrps: frozenset[Vrp]
    router_keys: frozenset[RouterKey]

    @property
    def counts(self) -> tuple[int, int]:
        """(IPv4, IPv6) VRP counts."""
        return counts(self.vrps)

    @property
    def prefix_counts(self) -> tuple[int, int]:
        """(IPv4, IPv6) distinct prefix counts."""
        return prefix_counts(self.vrps)


def read_json(path: Path) -> Any:
    """Load a plain, .gz, .bz2 or .xz JSON file."""
    if path.suffix == ".bz2":
        data = bz2.decompress(path.read_bytes())
    elif path.suffix == ".gz":
        data = gzip.decompress(path.read_bytes())
    elif path.suffix == ".xz":
        data = lzma.decompress(path.read_bytes())
    else:
        data = path.read_bytes()
    return json.loads(data)


@functools.cache
def _network(prefix: str) -> tuple[bytes, int, int]:
    """(packed address, length, family's max length) of a strict prefix.

    Memoised: the two real files share almost every prefix.
    """
    net = ipaddress.ip_network(prefix, strict=True)
    return net.network_address.packed, net.prefixlen, net.max_prefixlen


def expected_from_export(path: Path, *, not_expired_at: float | None = None) -> Expected:
    """The set a cache must serve for an rpki-client export, computed with json + ipaddress.

    Entries are de-duplicated on (prefix, maxLength, asn) whatever their trust anchor.
    ``not_expired_at``: fail if any entry has expired at that time (the tests do not model
    expiry; they pick a reference time at which everything is valid).
    """
    doc = read_json(path)
    vrps: set[Vrp] = set()
    for roa in doc["roas"]:
        asn = roa["asn"]
        if isinstance(asn, str):
            asn = int(asn.upper().removeprefix("AS"))
        address, length, max_prefixlen = _network(roa["prefix"])
        max_length = int(roa["maxLength"])
        assert length <= max_length <= max_prefixlen, roa
        if not_expired_at is not None and "expires" in roa:
            assert roa["expires"] > not_expired_at, f"expired entry {roa}"
        vrps.add((address, length, max_length, int(asn)))
    keys = {
        router_key(key["asn"], key["ski"], base64.b64decode(key["pubkey"]))
        for key in doc.get("bgpsec_keys") or []
    }
    return Expected(frozenset(vrps), frozenset(keys))


def v0_full_bytes(expected: Expected) -> int:
    """Octets of a v0 full response: Cache Response, prefixes, End of Data (no router keys)."""
    v4, v6 = expected.counts
    return 8 + 20 * v4 + 32 * v6 + 12


def v1_full_bytes(expected: Expected) -> int:
    """Octets of a v1 full response: as v0 plus router keys, and a 24-octet End of Data."""
    v4, v6 = expected.counts
    keys = sum(32 + len(bytes.fromhex(spki)) for _, _, spki in expected.router_keys)
    return 8 + 20 * v4 + 32 * v6 + keys + 24


def delta_bytes(before: Expected, after: Expected, version: int) -> int:
    """Octets of the delta response before -> after at ``version`` (router keys from v1 on)."""
    v4, v6 = counts(before.vrps ^ after.vrps)
    size = 8 + 20 * v4 + 32 * v6 + (12 if version == 0 else 24)
    if version >= 1:
        size += sum(32 + len(spki) // 2 for _, _, spki in before.router_keys ^ after.router_keys)
    return size

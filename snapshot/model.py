"""Payload value types (VRP, ASPA, router key), their validation, and their packed sort keys.

Every source builds these (or the packed keys directly through `SnapshotBuilder`) and every rule
that makes a record invalid lives here: host bits set, max length outside [prefix length, 32/128],
ASN outside 0..2^32-1, ASPA customer 0, SKI not 20 octets, empty SPKI. ASPA provider sets are
normalised (sorted, unique, AS0 dropped when any other provider exists).

Packed keys are what `Snapshot` stores; `pack_v4`/`pack_v6` validate and pack, `Vrp.from_key`
unpacks. Their layout (and its sort order, the 8210bis §11.2 wire order) is `snapshot.packed`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from snapshot.packed import V4, V4_KEY_SIZE, V6, V6_KEY_SIZE
from snapshot.prefix_text import network_text

__all__ = [
    "ASN_MAX",
    "MAX_ASPA_PROVIDERS",
    "MAX_SPKI_LENGTH",
    "SKI_LENGTH",
    "Aspa",
    "IPNetwork",
    "PayloadError",
    "RouterKey",
    "Vrp",
    "check_asn",
    "normalise_providers",
    "pack_v4",
    "pack_v6",
]

ASN_MAX = 0xFFFF_FFFF
SKI_LENGTH = 20
#: A v2 PDU is at most 65,535 octets; an ASPA PDU is 12 + 4·N octets.
MAX_ASPA_PROVIDERS = 16_380
#: A Router Key PDU is 32 octets plus the SPKI; keep it under the 65,535-octet v2 cap.
MAX_SPKI_LENGTH = 65_535 - 32

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class PayloadError(ValueError):
    """Raised when a payload record is invalid; names the field, the value and the rule broken."""

    def __init__(self, field_name: str, value: object, reason: str) -> None:
        super().__init__(f"{field_name}={value!r}: {reason}")
        self.field = field_name
        self.value = value
        self.reason = reason


def check_asn(value: int, field_name: str = "asn") -> int:
    """Return ``value`` if it is a 32-bit ASN, else raise `PayloadError`."""
    if type(value) is not int or not 0 <= value <= ASN_MAX:
        raise PayloadError(field_name, value, "ASN must be an integer in 0..4294967295")
    return value


def pack_v4(address: int, prefix_length: int, max_length: int, asn: int) -> bytes:
    """Validate one IPv4 VRP given as integers and return its 10-octet packed key."""
    if type(prefix_length) is not int or not 0 <= prefix_length <= 32:
        raise PayloadError("prefix_length", prefix_length, "must be 0..32 for IPv4")
    if type(max_length) is not int or not prefix_length <= max_length <= 32:
        raise PayloadError("max_length", max_length, f"must be in {prefix_length}..32")
    if type(address) is not int or not 0 <= address <= 0xFFFF_FFFF:
        raise PayloadError("address", address, "IPv4 address must be in 0..2^32-1")
    if address & ((1 << (32 - prefix_length)) - 1):
        raise PayloadError("prefix", _v4_text(address, prefix_length), "host bits are set")
    check_asn(asn)
    return V4.numbers.pack(address, max_length, prefix_length, asn)


def pack_v6(address: int, prefix_length: int, max_length: int, asn: int) -> bytes:
    """Validate one IPv6 VRP given as integers and return its 22-octet packed key."""
    if type(prefix_length) is not int or not 0 <= prefix_length <= 128:
        raise PayloadError("prefix_length", prefix_length, "must be 0..128 for IPv6")
    if type(max_length) is not int or not prefix_length <= max_length <= 128:
        raise PayloadError("max_length", max_length, f"must be in {prefix_length}..128")
    if type(address) is not int or not 0 <= address < 1 << 128:
        raise PayloadError("address", address, "IPv6 address must be in 0..2^128-1")
    if address & ((1 << (128 - prefix_length)) - 1):
        raise PayloadError("prefix", _v6_text(address, prefix_length), "host bits are set")
    check_asn(asn)
    return V6.fields.pack(address.to_bytes(16, "big"), max_length, prefix_length, asn)


def _v4_text(address: int, prefix_length: int) -> str:
    return f"{ipaddress.IPv4Address(address & ASN_MAX)}/{prefix_length}"


def _v6_text(address: int, prefix_length: int) -> str:
    return f"{ipaddress.IPv6Address(address & ((1 << 128) - 1))}/{prefix_length}"


@dataclass(frozen=True, slots=True)
class Vrp:
    """A Validated ROA Payload: prefix, max length and origin ASN (RFC 6811)."""

    prefix: IPNetwork
    max_length: int
    asn: int

    def __post_init__(self) -> None:
        # pack_* performs every check; the result is discarded here.
        self.key()

    @classmethod
    def parse(cls, prefix: str, max_length: int | None, asn: int) -> Vrp:
        """Build from text, e.g. ``Vrp.parse("192.0.2.0/24", 24, 64496)``; host bits are errors."""
        try:
            network = ipaddress.ip_network(prefix, strict=True)
        except ValueError as exc:
            raise PayloadError("prefix", prefix, str(exc)) from None
        return cls(network, network.prefixlen if max_length is None else max_length, asn)

    @property
    def is_ipv4(self) -> bool:
        """True for an IPv4 prefix."""
        return self.prefix.version == 4

    def key(self) -> bytes:
        """The packed key (10 octets for IPv4, 22 for IPv6); see the module docstring."""
        net = self.prefix
        if net.version == 4:
            return pack_v4(int(net.network_address), net.prefixlen, self.max_length, self.asn)
        return pack_v6(int(net.network_address), net.prefixlen, self.max_length, self.asn)

    @classmethod
    def from_key(cls, key: bytes) -> Vrp:
        """Inverse of `key`; raises `PayloadError` for a malformed key."""
        try:
            return cls._from_key(key)
        except ValueError as exc:
            if isinstance(exc, PayloadError):
                raise
            raise PayloadError("key", key.hex(), str(exc)) from None

    @classmethod
    def _from_key(cls, key: bytes) -> Vrp:
        if len(key) == V4_KEY_SIZE:
            address, max_length, length, asn = V4.numbers.unpack(key)
            net: IPNetwork = ipaddress.IPv4Network((address, length))
            return cls(net, max_length, asn)
        if len(key) == V6_KEY_SIZE:
            raw, max_length, length, asn = V6.fields.unpack(key)
            net = ipaddress.IPv6Network((int.from_bytes(raw, "big"), length))
            return cls(net, max_length, asn)
        raise PayloadError("key", key, "packed VRP key must be 10 or 22 octets")

    def __str__(self) -> str:
        return f"{network_text(self.prefix)}-{self.max_length} AS{self.asn}"


def normalise_providers(providers: object) -> tuple[int, ...]:
    """Sort and de-duplicate an ASPA provider set; drop AS0 when any other provider exists."""
    if isinstance(providers, str | bytes) or not hasattr(providers, "__iter__"):
        raise PayloadError("providers", providers, "must be a list of ASNs")
    unique = sorted({check_asn(p, "providers") for p in providers})
    if not unique:
        raise PayloadError("providers", [], "an ASPA needs at least one provider (AS0 for none)")
    if len(unique) > 1 and unique[0] == 0:
        del unique[0]
    if len(unique) > MAX_ASPA_PROVIDERS:
        raise PayloadError(
            "providers", f"<{len(unique)} ASNs>", f"more than {MAX_ASPA_PROVIDERS} providers"
        )
    return tuple(unique)


@dataclass(frozen=True, slots=True)
class Aspa:
    """An ASPA record: a customer ASN and its normalised, non-empty provider set."""

    customer: int
    providers: tuple[int, ...] = field()

    def __post_init__(self) -> None:
        check_asn(self.customer, "customer")
        if self.customer == 0:
            raise PayloadError("customer", 0, "AS0 cannot be an ASPA customer")
        normal = normalise_providers(self.providers)
        if normal != self.providers:
            object.__setattr__(self, "providers", normal)

    def merged(self, other: Aspa) -> Aspa:
        """Union of two records for the same customer (several ASPA objects, one PDU)."""
        if other.customer != self.customer:
            raise ValueError("can only merge ASPAs of the same customer")
        return Aspa(self.customer, self.providers + other.providers)

    def __str__(self) -> str:
        return f"AS{self.customer} -> {', '.join(f'AS{p}' for p in self.providers)}"


@dataclass(frozen=True, slots=True)
class RouterKey:
    """A BGPsec router key: Subject Key Identifier (20 octets), ASN and DER SubjectPublicKeyInfo."""

    ski: bytes
    asn: int
    spki: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.ski, bytes) or len(self.ski) != SKI_LENGTH:
            raise PayloadError("ski", self.ski, "Subject Key Identifier must be 20 octets")
        check_asn(self.asn)
        if not isinstance(self.spki, bytes) or not self.spki:
            raise PayloadError("spki", self.spki, "SubjectPublicKeyInfo must not be empty")
        if len(self.spki) > MAX_SPKI_LENGTH:
            raise PayloadError("spki", f"<{len(self.spki)} octets>", "too long for one PDU")

    def sort_key(self) -> bytes:
        """Bytes whose ascending order is the §11.2 order: SKI, SPKI length, SPKI, ASN."""
        return (
            self.ski + len(self.spki).to_bytes(2, "big") + self.spki + self.asn.to_bytes(4, "big")
        )

    def __str__(self) -> str:
        return f"SKI {self.ski.hex().upper()} AS{self.asn}"

"""SLURM local exceptions: the bytes of one file to a validated `SlurmPolicy` (RFC 8416, ASPA).

Formats: RFC 8416 (``"slurmVersion": 1``: prefix and BGPsec filters and assertions) and
draft-ietf-sidrops-aspa-slurm-03 (``"slurmVersion": 2``, which adds ``aspaFilters`` with
``customerAsn`` and ``aspaAssertions`` with ``customerAsn`` + ``providerAsns``; Routinator's
spellings ``customerAsid`` and ``providerSet`` are accepted as aliases). Every member the format
names is required where the format says so and nothing else is accepted: a misspelt key is an
error, not a silently ignored filter. Each error names the file, the member path and the
reason, e.g. ``a.json: locallyAddedAssertions.prefixAssertions[2].maxPrefixLength: 33 is
outside 24..32``.

Joining the policies of several files is `snapshot.slurm_combine`, applying a policy to a
snapshot `snapshot.slurm_apply`. Pure: no I/O, standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from snapshot.model import (
    SKI_LENGTH,
    Aspa,
    IPNetwork,
    PayloadError,
    RouterKey,
    Vrp,
    check_asn,
)

FILTERS = "validationOutputFilters"
ASSERTIONS = "locallyAddedAssertions"
#: The members of the two sections, by ``slurmVersion``.
SECTION_MEMBERS: Final[dict[int, dict[str, tuple[str, ...]]]] = {
    1: {
        FILTERS: ("prefixFilters", "bgpsecFilters"),
        ASSERTIONS: ("prefixAssertions", "bgpsecAssertions"),
    },
    2: {
        FILTERS: ("prefixFilters", "bgpsecFilters", "aspaFilters"),
        ASSERTIONS: ("prefixAssertions", "bgpsecAssertions", "aspaAssertions"),
    },
}


T = TypeVar("T")


class SlurmError(ValueError):
    """Raised for an invalid SLURM file or conflicting files; the message says where and why."""


# ---------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class PrefixFilter:
    """RFC 8416 §3.3.1: removes VRPs covered by ``prefix`` and/or originated by ``asn``."""

    prefix: IPNetwork | None
    asn: int | None
    comment: str | None = field(default=None, compare=False)
    #: ``file: member path`` of the entry (for messages).
    origin: str = field(default="", compare=False)

    def matches(self, vrp: Vrp) -> bool:
        """True when ``vrp`` is removed by this filter."""
        if self.asn is not None and vrp.asn != self.asn:
            return False
        return self.prefix is None or covers(self.prefix, vrp.prefix)


@dataclass(frozen=True, slots=True)
class BgpsecFilter:
    """RFC 8416 §3.3.2: removes router keys of ``asn`` and/or with key identifier ``ski``."""

    asn: int | None
    ski: bytes | None
    comment: str | None = field(default=None, compare=False)
    origin: str = field(default="", compare=False)

    def matches(self, key: RouterKey) -> bool:
        """True when ``key`` is removed by this filter."""
        return (self.asn is None or key.asn == self.asn) and (
            self.ski is None or key.ski == self.ski
        )


@dataclass(frozen=True, slots=True)
class AspaFilter:
    """draft-ietf-sidrops-aspa-slurm §3.1: removes the ASPA of customer ``customer``."""

    customer: int
    comment: str | None = field(default=None, compare=False)
    origin: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class PrefixAssertion:
    """RFC 8416 §3.4.1: a VRP added to the output."""

    vrp: Vrp
    comment: str | None = field(default=None, compare=False)
    origin: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class BgpsecAssertion:
    """RFC 8416 §3.4.2: a router key added to the output."""

    key: RouterKey
    comment: str | None = field(default=None, compare=False)
    origin: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class AspaAssertion:
    """draft-ietf-sidrops-aspa-slurm §3.2: providers added to a customer's ASPA (union)."""

    aspa: Aspa
    comment: str | None = field(default=None, compare=False)
    origin: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class SlurmPolicy:
    """The filters and assertions of one SLURM file, or of several combined by `combine`."""

    prefix_filters: tuple[PrefixFilter, ...] = ()
    bgpsec_filters: tuple[BgpsecFilter, ...] = ()
    aspa_filters: tuple[AspaFilter, ...] = ()
    prefix_assertions: tuple[PrefixAssertion, ...] = ()
    bgpsec_assertions: tuple[BgpsecAssertion, ...] = ()
    aspa_assertions: tuple[AspaAssertion, ...] = ()

    def is_empty(self) -> bool:
        """True when the policy changes nothing."""
        return not any(self.counts().values())

    def counts(self) -> dict[str, int]:
        """Entries by kind, named as in the file (for logs)."""
        return {
            "prefixFilters": len(self.prefix_filters),
            "bgpsecFilters": len(self.bgpsec_filters),
            "aspaFilters": len(self.aspa_filters),
            "prefixAssertions": len(self.prefix_assertions),
            "bgpsecAssertions": len(self.bgpsec_assertions),
            "aspaAssertions": len(self.aspa_assertions),
        }

    def identity(self) -> str:
        """The SHA-256 (hex) of the policy's entries in order: equal policies, equal ids."""
        return hashlib.sha256(repr(self).encode()).hexdigest()

    def summary(self) -> str:
        """``prefixFilters=2, aspaAssertions=1`` (non-zero counts only), or ``empty``."""
        parts = [f"{k}={v}" for k, v in self.counts().items() if v]
        return ", ".join(parts) or "empty"


EMPTY_POLICY: Final = SlurmPolicy()


def covers(outer: IPNetwork, inner: IPNetwork) -> bool:
    """True when ``inner`` equals ``outer`` or is more specific (same address family)."""
    if outer.version != inner.version or inner.prefixlen < outer.prefixlen:
        return False
    shift = outer.max_prefixlen - outer.prefixlen
    return int(inner.network_address) >> shift == int(outer.network_address) >> shift


# ---------------------------------------------------------------- parsing


def parse_slurm(data: bytes | str, name: str = "SLURM") -> SlurmPolicy:
    """Parse and validate one SLURM file; ``name`` (e.g. its path) starts every error message.

    Raises:
        SlurmError: the file is not valid JSON or breaks a rule of RFC 8416 / the ASPA draft.
    """
    try:
        doc = json.loads(data, object_pairs_hook=_unique_members, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, SlurmError):
            raise SlurmError(f"{name}: {exc}") from None
        raise SlurmError(f"{name}: not valid JSON: {exc}") from None
    return _Parser(name).document(doc)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise SlurmError(f"member {key!r} appears twice in one object")
        result[key] = value
    return result


def _no_constant(text: str) -> None:
    raise SlurmError(f"{text} is not a JSON number")


class _Parser:
    """Walks one document, keeping the file name for messages."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, path: str, reason: str) -> SlurmError:
        return SlurmError(f"{self.name}: {path}: {reason}")

    def members(
        self, value: object, path: str, required: Iterable[str], optional: Iterable[str] = ()
    ) -> dict[str, Any]:
        """``value`` as an object with exactly the ``required`` members and some ``optional``."""
        if not isinstance(value, dict):
            raise self.fail(path, f"must be an object, got {_kind(value)}")
        required = tuple(required)
        known = (*required, *optional)
        for key in value:
            if key not in known:
                raise self.fail(_join(path, key), f"unknown member (known: {', '.join(known)})")
        for key in required:
            if key not in value:
                raise self.fail(_join(path, key), "missing")
        return value

    def document(self, doc: object) -> SlurmPolicy:
        if not isinstance(doc, dict):
            raise SlurmError(f"{self.name}: the document must be a JSON object")
        top = self.members(doc, "", ("slurmVersion", FILTERS, ASSERTIONS))
        version = top["slurmVersion"]
        if type(version) is not int or version not in SECTION_MEMBERS:
            raise self.fail(
                "slurmVersion", f"must be 1 (RFC 8416) or 2 (with ASPA), got {version!r}"
            )
        sections = SECTION_MEMBERS[version]
        filters = self.members(top[FILTERS], FILTERS, sections[FILTERS])
        assertions = self.members(top[ASSERTIONS], ASSERTIONS, sections[ASSERTIONS])
        return SlurmPolicy(
            prefix_filters=tuple(self.each(filters, FILTERS, "prefixFilters", self.prefix_filter)),
            bgpsec_filters=tuple(self.each(filters, FILTERS, "bgpsecFilters", self.bgpsec_filter)),
            aspa_filters=tuple(self.each(filters, FILTERS, "aspaFilters", self.aspa_filter)),
            prefix_assertions=tuple(
                self.each(assertions, ASSERTIONS, "prefixAssertions", self.prefix_assertion)
            ),
            bgpsec_assertions=tuple(
                self.each(assertions, ASSERTIONS, "bgpsecAssertions", self.bgpsec_assertion)
            ),
            aspa_assertions=tuple(
                self.each(assertions, ASSERTIONS, "aspaAssertions", self.aspa_assertion)
            ),
        )

    def each(
        self,
        section: dict[str, Any],
        where: str,
        member: str,
        parse: Callable[[object, str], T],
    ) -> list[T]:
        """Parse every entry of the array ``section[member]`` (absent in version 1: none)."""
        if member not in section:
            return []
        path = f"{where}.{member}"
        entries = section[member]
        if not isinstance(entries, list):
            raise self.fail(path, f"must be an array, got {_kind(entries)}")
        return [parse(entry, f"{path}[{i}]") for i, entry in enumerate(entries)]

    # -------------------------------------------------------------- field types
    def asn(self, entry: dict[str, Any], path: str, key: str) -> int:
        value = entry[key]
        if type(value) is not int:
            raise self.fail(f"{path}.{key}", f"must be a number (an ASN), got {value!r}")
        try:
            return check_asn(value, key)
        except PayloadError as exc:
            raise self.fail(f"{path}.{key}", exc.reason) from None

    def prefix(self, entry: dict[str, Any], path: str) -> IPNetwork:
        value = entry["prefix"]
        if not isinstance(value, str) or "/" not in value or "%" in value:
            raise self.fail(
                f"{path}.prefix", f"must be a prefix such as '192.0.2.0/24', got {value!r}"
            )
        try:
            return ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise self.fail(f"{path}.prefix", f"{value!r}: {exc}") from None

    def comment(self, entry: dict[str, Any], path: str) -> str | None:
        value = entry.get("comment")
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{path}.comment", f"must be a string, got {_kind(value)}")
        return value

    def base64(self, entry: dict[str, Any], path: str, key: str) -> bytes:
        value = entry[key]
        if not isinstance(value, str):
            raise self.fail(f"{path}.{key}", f"must be a base64 string, got {_kind(value)}")
        try:
            return decode_base64(value)
        except ValueError as exc:
            raise self.fail(f"{path}.{key}", str(exc)) from None

    def ski(self, entry: dict[str, Any], path: str) -> bytes:
        ski = self.base64(entry, path, "SKI")
        if len(ski) != SKI_LENGTH:
            raise self.fail(f"{path}.SKI", f"decodes to {len(ski)} octets; an SKI has 20")
        return ski

    # -------------------------------------------------------------- entries
    def prefix_filter(self, value: object, path: str) -> PrefixFilter:
        entry = self.members(value, path, (), ("prefix", "asn", "comment"))
        if "prefix" not in entry and "asn" not in entry:
            raise self.fail(path, "a prefix filter needs 'prefix', 'asn' or both")
        return PrefixFilter(
            self.prefix(entry, path) if "prefix" in entry else None,
            self.asn(entry, path, "asn") if "asn" in entry else None,
            self.comment(entry, path),
            f"{self.name}: {path}",
        )

    def bgpsec_filter(self, value: object, path: str) -> BgpsecFilter:
        entry = self.members(value, path, (), ("asn", "SKI", "comment"))
        if "SKI" not in entry and "asn" not in entry:
            raise self.fail(path, "a BGPsec filter needs 'asn', 'SKI' or both")
        return BgpsecFilter(
            self.asn(entry, path, "asn") if "asn" in entry else None,
            self.ski(entry, path) if "SKI" in entry else None,
            self.comment(entry, path),
            f"{self.name}: {path}",
        )

    def either(self, entry: dict[str, Any], path: str, name: str, alias: str) -> str:
        """The member name used: the draft's ``name`` or Routinator's ``alias``, not both."""
        if name in entry and alias in entry:
            raise self.fail(f"{path}.{alias}", f"give {name!r} or {alias!r}, not both")
        if name not in entry and alias not in entry:
            raise self.fail(f"{path}.{name}", "missing")
        return name if name in entry else alias

    def aspa_filter(self, value: object, path: str) -> AspaFilter:
        entry = self.members(value, path, (), ("customerAsn", "customerAsid", "comment"))
        key = self.either(entry, path, "customerAsn", "customerAsid")
        return AspaFilter(
            self.asn(entry, path, key), self.comment(entry, path), f"{self.name}: {path}"
        )

    def prefix_assertion(self, value: object, path: str) -> PrefixAssertion:
        entry = self.members(value, path, ("prefix", "asn"), ("maxPrefixLength", "comment"))
        net = self.prefix(entry, path)
        asn = self.asn(entry, path, "asn")
        max_length = entry.get("maxPrefixLength", net.prefixlen)
        top = net.max_prefixlen
        if type(max_length) is not int or not net.prefixlen <= max_length <= top:
            raise self.fail(
                f"{path}.maxPrefixLength", f"{max_length!r} is outside {net.prefixlen}..{top}"
            )
        return PrefixAssertion(
            Vrp(net, max_length, asn), self.comment(entry, path), f"{self.name}: {path}"
        )

    def bgpsec_assertion(self, value: object, path: str) -> BgpsecAssertion:
        entry = self.members(value, path, ("asn", "SKI", "routerPublicKey"), ("comment",))
        asn = self.asn(entry, path, "asn")
        ski = self.ski(entry, path)
        spki = self.base64(entry, path, "routerPublicKey")
        try:
            key = RouterKey(ski, asn, spki)
        except PayloadError as exc:
            raise self.fail(f"{path}.routerPublicKey", exc.reason) from None
        return BgpsecAssertion(key, self.comment(entry, path), f"{self.name}: {path}")

    def aspa_assertion(self, value: object, path: str) -> AspaAssertion:
        names = ("customerAsn", "customerAsid", "providerAsns", "providerSet", "comment")
        entry = self.members(value, path, (), names)
        key = self.either(entry, path, "customerAsn", "customerAsid")
        customer = self.asn(entry, path, key)
        if customer == 0:
            raise self.fail(f"{path}.{key}", "AS0 cannot be an ASPA customer")
        key = self.either(entry, path, "providerAsns", "providerSet")
        providers = entry[key]
        where = f"{path}.{key}"
        if not isinstance(providers, list) or not providers:
            raise self.fail(where, f"must be a non-empty array of ASNs, got {providers!r}")
        for i, provider in enumerate(providers):
            if type(provider) is not int or not 0 <= provider <= 0xFFFF_FFFF:
                raise self.fail(f"{where}[{i}]", f"must be an ASN, got {provider!r}")
            if provider == customer:
                raise self.fail(f"{where}[{i}]", f"the customer AS{customer} cannot be a provider")
            if i and provider <= providers[i - 1]:
                raise self.fail(
                    f"{where}[{i}]",
                    f"{provider} after {providers[i - 1]}: providers must be unique and ascending",
                )
        try:
            aspa = Aspa(customer, tuple(providers))
        except PayloadError as exc:
            raise self.fail(where, exc.reason) from None
        return AspaAssertion(aspa, self.comment(entry, path), f"{self.name}: {path}")


def decode_base64(text: str) -> bytes:
    """Base64 of RFC 4648 §5 (URL-safe) or §4, trailing ``=`` optional; raises ValueError."""
    if "-" in text or "_" in text:
        if "+" in text or "/" in text:
            raise ValueError("mixes the base64 and base64url alphabets")
        text = text.replace("-", "+").replace("_", "/")
    stripped = text.rstrip("=")
    if not stripped:
        raise ValueError("is empty")
    try:
        return base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"{text!r} is not base64: {exc}") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), f"{value!r}")

"""Our own text of IP prefixes (exchange format, SLURM, logs, HTTP), never `ipaddress` str().

IPv4 ``a.b.c.d/len``; IPv6 the RFC 5952 text (lowercase hex, no leading zeros, the first
longest run of two or more zero groups as ``::``), except that an IPv4-mapped address
(``::ffff:0:0/96``) is spelled ``::ffff:a.b.c.d/len`` whatever the interpreter (CPython 3.13
changed `ipaddress`'s text of mapped addresses). Version 1 documents used the legacy
hexadecimal spelling of mapped addresses (``::ffff:c000:201/128``): `v6_text` gives it with
``legacy_mapped=True``. Parsing is strict: only the canonical text of a network (no host bits)
is accepted, so each prefix has exactly one spelling.
"""

from __future__ import annotations

import struct
from ipaddress import IPv4Network, IPv6Network

__all__ = ["network_text", "parse_prefix", "v4_text", "v6_groups_text", "v6_text"]

_MAPPED_PREFIX = 0xFFFF << 32
_GROUPS = struct.Struct(">8H")
#: ":0:0:...:" of 8 down to 2 zero groups (RFC 5952: "::" never stands for one group).
_ZERO_RUNS = tuple(":0" * n + ":" for n in range(8, 1, -1))


def v4_text(address: int) -> str:
    """``a.b.c.d`` of a 32-bit address."""
    return f"{address >> 24}.{address >> 16 & 255}.{address >> 8 & 255}.{address & 255}"


def v6_text(address: int, *, legacy_mapped: bool = False) -> str:
    """The canonical text of a 128-bit address (mapped ones dotted unless ``legacy_mapped``)."""
    return v6_groups_text(_GROUPS.unpack(address.to_bytes(16, "big")), legacy_mapped=legacy_mapped)


def v6_groups_text(groups: tuple[int, ...], *, legacy_mapped: bool = False) -> str:
    """`v6_text` of an address given as its eight 16-bit groups."""
    if not legacy_mapped and groups[5] == 0xFFFF and not any(groups[:5]):
        low = groups[6] << 16 | groups[7]
        return "::ffff:" + v4_text(low)
    padded = ":%x:%x:%x:%x:%x:%x:%x:%x:" % groups  # noqa: UP031 - one C-level format
    for run in _ZERO_RUNS:  # the longest run of zero groups first, the leftmost of equal ones
        at = padded.find(run)
        if at >= 0:
            return padded[1:at] + "::" + padded[at + len(run) : -1]
    return padded[1:-1]


def _parse_v4(text: str) -> int:
    """The address of dotted-quad text; the caller compares the canonical spelling."""
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"{text!r} is not an IPv4 address")
    a, b, c, d = map(int, parts)  # lenient (" 1", "+1", "01"): the spelling check refuses them
    if not (0 <= a <= 255 and 0 <= b <= 255 and 0 <= c <= 255 and 0 <= d <= 255):
        raise ValueError(f"{text!r} is not an IPv4 address")
    return a << 24 | b << 16 | c << 8 | d


def _parse_v6(text: str) -> int:
    """The address of IPv6 text; the caller compares the canonical spelling."""
    if text.startswith("::ffff:") and "." in text:
        return _MAPPED_PREFIX | _parse_v4(text[7:])
    halves = text.split("::")
    if len(halves) > 2:
        raise ValueError(f"{text!r} is not an IPv6 address")
    words = halves[0].split(":") if halves[0] else []
    if len(halves) == 2:
        tail = halves[1].split(":") if halves[1] else []
        words += ["0"] * (8 - len(words) - len(tail)) + tail
    if len(words) != 8:
        raise ValueError(f"{text!r} is not an IPv6 address")
    address = 0
    for word in words:
        group = int(word, 16)  # lenient ("0x1", "00ff"): the spelling check refuses them
        if not 0 <= group <= 0xFFFF:
            raise ValueError(f"{text!r} is not an IPv6 address")
        address = address << 16 | group
    return address


def parse_prefix(text: str, *, legacy_mapped: bool = False) -> tuple[int, int, int]:
    """(family 4/6, address, prefix length) of canonical prefix text; ValueError otherwise.

    ``legacy_mapped``: mapped IPv6 addresses are expected in the hexadecimal spelling (version 1).
    """
    address_text, _, length_text = text.partition("/")
    try:
        length = int(length_text)
        if ":" in address_text:
            family, bits, address = 6, 128, _parse_v6(address_text)
            canonical = v6_text(address, legacy_mapped=legacy_mapped)
        else:
            family, bits, address = 4, 32, _parse_v4(address_text)
            canonical = v4_text(address)
    except ValueError:
        raise ValueError(f"{text!r} is not prefix/length") from None
    if canonical != address_text or str(length) != length_text:
        expected = f"{canonical}/{length}"
        raise ValueError(f"{text!r} is not spelled canonically (expected {expected!r})")
    if length > bits:
        raise ValueError(f"{text!r}: the length exceeds {bits}")
    if address & ((1 << (bits - length)) - 1):
        raise ValueError(f"{text!r} has host bits set")
    return family, address, length


def network_text(network: IPv4Network | IPv6Network) -> str:
    """``address/length`` of a network in our spelling (mapped IPv6 dotted on every interpreter)."""
    address = int(network.network_address)
    text = v4_text(address) if network.version == 4 else v6_text(address)
    return f"{text}/{network.prefixlen}"

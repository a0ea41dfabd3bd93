"""The small edge-case exports A and B (AS0, 32-bit ASNs, /0, host routes, keys, duplicates)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rtrserve import REPO

EXPIRES = 4_070_908_800  # 2099-01-01

#: The two P-256 lab keys of examples/make_example.py, as (SKI, base64 SPKI).
KEYS = [
    (k["ski"], k["pubkey"])
    for k in json.loads((REPO / "examples" / "rpki-client-example.json").read_text())[
        "bgpsec_keys"
    ][:2]
]

Roa = tuple[str, int, int, str]  # prefix, maxLength, asn, trust anchor

ROAS_A: list[Roa] = [
    ("0.0.0.0/0", 0, 0, "ta-a"),  # AS0 over all of IPv4
    ("0.0.0.0/0", 32, 64496, "ta-a"),  # /0 with max length 32
    ("::/0", 0, 0, "ta-a"),
    ("::/0", 128, 64497, "ta-a"),  # /0 with max length 128
    ("192.0.2.1/32", 32, 64496, "ta-a"),  # host routes
    ("2001:db8::1/128", 128, 64496, "ta-a"),
    ("192.0.2.0/24", 24, 0, "ta-a"),  # AS0
    ("2001:db8::/32", 48, 0, "ta-a"),
    ("198.51.100.0/24", 24, 4_200_000_000, "ta-a"),  # 32-bit (private use) ASN
    ("198.51.100.0/24", 32, 4_294_967_295, "ta-a"),  # the largest ASN
    ("2001:db8:1000::/36", 128, 4_200_000_000, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-b"),  # the same VRP from another TA: served once
    ("203.0.113.0/24", 24, 64497, "ta-b"),  # same prefix, another origin
    ("203.0.113.0/24", 26, 64496, "ta-b"),  # same prefix and origin, another max length
    ("2001:db8:2000::/48", 64, 65551, "ta-a"),
    ("2001:db8:2000::/48", 64, 65551, "ta-c"),  # duplicate across TAs (IPv6)
    ("10.0.0.0/8", 32, 64501, "ta-c"),  # max length 32 on a short prefix
    ("2001:db8:3000::/36", 128, 64501, "ta-c"),  # max length 128
]
REMOVED_IN_B = {
    ("0.0.0.0/0", 0, 0, "ta-a"),
    ("::/0", 128, 64497, "ta-a"),
    ("192.0.2.0/24", 24, 0, "ta-a"),
    ("203.0.113.0/24", 24, 64496, "ta-b"),  # its ta-a twin stays: nothing to withdraw
}
ADDED_IN_B: list[Roa] = [  # new prefixes, so OpenBGPD's prefix counts change as well
    ("192.0.2.0/25", 32, 4_200_000_001, "ta-a"),
    ("192.0.2.128/25", 25, 64496, "ta-b"),
    ("198.51.100.0/24", 24, 4_200_000_001, "ta-c"),  # one more origin: VRP counts change too
    ("2001:db8:ffff::/48", 48, 65535, "ta-c"),
]
ROAS_B = [r for r in ROAS_A if r not in REMOVED_IN_B] + ADDED_IN_B
KEYS_A = [(64496, *KEYS[0]), (4_200_000_000, *KEYS[1])]
KEYS_B = [(64496, *KEYS[0]), (65000, *KEYS[0])]  # one withdrawn; one key under a 2nd ASN
ASPAS_A = [(64496, [64497, 64498])]  # v2 only: none of these clients may get it
ASPAS_B = [(64496, [64497])]


def write_export(
    path: Path,
    roas: Sequence[Roa],
    keys: Sequence[tuple[int, str, str]],
    aspas: Sequence[tuple[int, list[int]]],
) -> None:
    """An rpki-client style export with a trust anchor per ROA, written atomically."""
    doc = {
        "metadata": {"buildmachine": "interop-tests", "buildtime": "2026-01-01T00:00:00Z"},
        "roas": [
            {"prefix": p, "maxLength": m, "asn": a, "ta": ta, "expires": EXPIRES}
            for p, m, a, ta in roas
        ],
        "bgpsec_keys": [
            {"asn": a, "ski": ski, "pubkey": spki, "ta": "ta-a", "expires": EXPIRES}
            for a, ski, spki in keys
        ],
        "aspas": [{"customer_asid": c, "providers": ps, "expires": EXPIRES} for c, ps in aspas],
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def write_a(path: Path) -> None:
    """Export A."""
    write_export(path, ROAS_A, KEYS_A, ASPAS_A)


def write_b(path: Path) -> None:
    """Export B: A with /0, AS0 and one router key withdrawn, new prefixes and a key added."""
    write_export(path, ROAS_B, KEYS_B, ASPAS_B)

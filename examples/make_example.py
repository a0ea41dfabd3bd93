"""Write examples/rpki-client-example.json: a small rpki-client style export for `make run`.

Only documentation prefixes (RFC 5737, RFC 3849) and private/documentation ASNs are used; every
entry expires in 2099 so the example keeps serving. Deterministic: run it again, same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

EXPIRES = 4_070_908_800  # 2099-01-01T00:00:00Z
KEYS = [
    # (SKI, SPKI): P-256 keys derived from fixed private scalars 1000 and 1001, lab use only.
    (
        "F0E666EA0DFBA2676135D03D466FFDEA41FD3214",
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEuPoaSsvZALeI/x+FJMz/8d0qPWyRfkAJr2BPvUBttwKaXMMtFPyD"
        "cmaERSdIH38Gy0+zRzOyTKkuhh9yzHyuNw==",
    ),
    (
        "51D41DA1E9BAE78A40615568C04D19D4EDE00533",
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEzPeoe+XKFurACJI9qx4ouBIxBao8zZkYcFIiyl06fMa7Jy6o5VMI"
        "+QJSyWoulWvotjbleOMtNmP/W2/+Xp1ssg==",
    ),
]


def build() -> dict[str, object]:
    """The example document."""
    roas: list[dict[str, object]] = []
    for i, net in enumerate(("192.0.2", "198.51.100", "203.0.113")):
        asn = 64496 + i
        roas.append({"asn": asn, "prefix": f"{net}.0/24", "maxLength": 24, "ta": "example"})
        for j in range(4):
            roas.append(
                {"asn": asn, "prefix": f"{net}.{64 * j}/26", "maxLength": 28, "ta": "example"}
            )
    roas.append({"asn": 0, "prefix": "192.0.2.128/25", "maxLength": 32, "ta": "example"})
    roas.append({"asn": 4200000000, "prefix": "198.51.100.0/24", "maxLength": 24, "ta": "other"})
    for k in range(8):
        roas.append(
            {"asn": 64500 + k, "prefix": f"2001:db8:{k:x}00::/40", "maxLength": 48, "ta": "example"}
        )
    roas.append({"asn": 64511, "prefix": "2001:db8::/32", "maxLength": 128, "ta": "example"})
    # The same VRP from a second trust anchor is served once.
    roas.append({"asn": 64496, "prefix": "192.0.2.0/24", "maxLength": 24, "ta": "other"})
    for roa in roas:
        roa["expires"] = EXPIRES
    return {
        "metadata": {"buildmachine": "example", "buildtime": "2026-01-01T00:00:00Z"},
        "roas": roas,
        "bgpsec_keys": [
            {"asn": 64496 + i, "ski": ski, "pubkey": spki, "ta": "example", "expires": EXPIRES}
            for i, (ski, spki) in enumerate(KEYS)
        ],
        "aspas": [
            {"customer_asid": 64496, "expires": EXPIRES, "providers": [64497, 64498]},
            {"customer_asid": 64499, "expires": EXPIRES, "providers": [0]},
            {"customer_asid": 4200000000, "expires": EXPIRES, "providers": [64496, 4200000001]},
        ],
    }


def main() -> None:
    """Write the file next to this script."""
    out = Path(__file__).with_name("rpki-client-example.json")
    out.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

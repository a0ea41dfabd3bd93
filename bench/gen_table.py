"""Scale a real rpki-client export to N VRPs and M ASPAs in unused space, keeping its shapes.

The real table (``../shared/data``) is the template: its VRPs are kept as they are, and extra
VRPs are copies of real ones moved into address space the RPKI does not use, each keeping its
prefix length, maxLength, ASN, trust anchor and expiry:

* IPv4 copies replace the top four address bits: round 1 with ``1111`` (240.0.0.0/4, reserved),
  round 2 with ``1110`` (224.0.0.0/4, multicast);
* IPv6 copies replace the top eight bits with ``0x3r`` for round r (3000::/4 is unallocated;
  the real table lies in 2000::/4).

The IPv4/IPv6 mix of the real table is kept. Extra ASPAs are copies of real ones (providers and
their count per customer kept) for customers from the private-use range 4,200,000,000 and up.
Router keys are kept. A table with copies is written in rpki-client's order (by address), like
the real one. ``--next OUT`` also writes the table a validator would export a little
later: ``--add`` VRPs announced and ``--remove`` withdrawn (the real 30-minute pair has 9 and 6),
for the propagation benchmarks. ``--shift-to-now`` moves every time so that the build time is now
(what ``../shared/tools/shift_times.py`` does), so a cache that honours ``expires`` keeps all.

    .venv/bin/python bench/gen_table.py --vrps 1000000 --aspas 3000 OUT.json [--next OUT2.json]

Deterministic for the same arguments. Prints the counts it wrote.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import ipaddress
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared/data/rpkilog/rpkiclient_summary_20250720T093135Z.json.bz2"
PRIVATE_ASN = 4_200_000_000
V4_ROUNDS = (0xF, 0xE)  # new top four bits per round
V6_ROUNDS = tuple(0x30 + r for r in range(1, 16))  # new top eight bits per round

__all__ = ["main", "scale"]


def _open(path: Path) -> IO[str]:
    if path.suffix == ".bz2":
        return bz2.open(path, "rt")
    if path.suffix == ".gz":
        return gzip.open(path, "rt")
    return path.open()


def _moved(prefix: str, round_: int) -> str:
    """``prefix`` with its top bits replaced for copy round ``round_`` (1-based)."""
    net = ipaddress.ip_network(prefix)
    address = int(net.network_address)
    if net.version == 4:
        if net.prefixlen < 4:
            raise ValueError(f"{prefix}: too short to move")
        address = (V4_ROUNDS[round_ - 1] << 28) | (address & 0x0FFF_FFFF)
        return f"{ipaddress.IPv4Address(address)}/{net.prefixlen}"
    if net.prefixlen < 8:
        raise ValueError(f"{prefix}: too short to move")
    address = (V6_ROUNDS[round_ - 1] << 120) | (address & ((1 << 120) - 1))
    return f"{ipaddress.IPv6Address(address)}/{net.prefixlen}"


def _copies(roas: list[dict[str, Any]], rounds: int) -> Iterator[dict[str, Any]]:
    """Moved copies of ``roas``, round after round, in table order."""
    for round_ in range(1, rounds + 1):
        for roa in roas:
            yield {**roa, "prefix": _moved(roa["prefix"], round_)}


def _vrp_key(roa: dict[str, Any]) -> tuple[str, int, int]:
    return roa["prefix"], int(roa["maxLength"]), int(roa["asn"])


def _family(roas: list[dict[str, Any]], want: int, rounds: int) -> list[dict[str, Any]]:
    """``want`` VRPs of one family: the real ones first, then moved copies (no two equal)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    source = iter(roas) if want <= len(roas) else _chain(roas, _copies(roas, rounds))
    for roa in source:
        if len(out) == want:
            break
        key = _vrp_key(roa)
        if key not in seen:
            seen.add(key)
            out.append(roa)
    if len(out) < want:
        raise SystemExit(f"gen_table: only {len(out)} distinct VRPs of a family (asked {want})")
    return out


def _order(roa: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """rpki-client's order of VRPs: family, address, prefix length, max length, ASN."""
    net = ipaddress.ip_network(roa["prefix"])
    return (
        net.version,
        int(net.network_address),
        net.prefixlen,
        int(roa["maxLength"]),
        int(roa["asn"]),
    )


def _in_order(roas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``roas`` in rpki-client's order (the moved copies among the real ones)."""
    return sorted(roas, key=_order)


def _chain(first: list[dict[str, Any]], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield from first
    yield from rest


def _aspas(real: list[dict[str, Any]], want: int) -> list[dict[str, Any]]:
    if want <= len(real) or not real:
        return real[:want]
    extra = [
        {**real[i % len(real)], "customer_asid": PRIVATE_ASN + i} for i in range(want - len(real))
    ]
    return real + extra


def scale(table: dict[str, Any], vrps: int, aspas: int) -> dict[str, Any]:
    """``table`` scaled to ``vrps`` VRPs (real IPv4/IPv6 mix) and ``aspas`` ASPAs."""
    roas: list[dict[str, Any]] = table["roas"]
    v4 = [r for r in roas if ":" not in r["prefix"]]
    v6 = [r for r in roas if ":" in r["prefix"]]
    want_v4 = round(vrps * len(v4) / len(roas))
    out = dict(table)
    out["roas"] = _family(v4, want_v4, len(V4_ROUNDS)) + _family(v6, vrps - want_v4, len(V6_ROUNDS))
    if vrps > len(roas):
        out["roas"] = _in_order(out["roas"])
    out["aspas"] = _aspas(list(table.get("aspas") or []), aspas)
    metadata = dict(table.get("metadata") or {})
    metadata.update(vrps=len(out["roas"]), uniquevrps=len(out["roas"]), aspas=len(out["aspas"]))
    out["metadata"] = metadata
    return out


def changed(table: dict[str, Any], add: int, remove: int) -> dict[str, Any]:
    """``table`` a little later: ``remove`` VRPs withdrawn (spread out), ``add`` announced in 0/8."""
    roas: list[dict[str, Any]] = table["roas"]
    step = max(1, len(roas) // max(1, remove))
    dropped = set(range(0, step * remove, step)) if remove else set()
    kept = [r for i, r in enumerate(roas) if i not in dropped]
    template = roas[0]
    new = [
        {**template, "prefix": f"{ipaddress.IPv4Address(i << 8)}/24", "maxLength": 24}
        for i in range(add)
    ]
    out = dict(table)
    out["roas"] = new + kept  # 0.0.x.0/24 come first in rpki-client's order
    metadata = dict(table.get("metadata") or {})
    metadata.update(vrps=len(out["roas"]), uniquevrps=len(out["roas"]))
    out["metadata"] = metadata
    return out


def shift_to(table: dict[str, Any], now: int) -> dict[str, Any]:
    """Every time in ``table`` moved so that its build time is ``now`` (Unix seconds)."""
    metadata = dict(table.get("metadata") or {})
    built = metadata.get("buildtime") or metadata.get("generated")
    if isinstance(built, str):
        start = int(datetime.fromisoformat(built.replace("Z", "+00:00")).timestamp())
    else:
        start = int(built or now)
    delta = now - start
    metadata["buildtime"] = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(metadata.get("generated"), int):
        metadata["generated"] += delta
    out = dict(table, metadata=metadata)
    for kind in ("roas", "aspas", "bgpsec_keys"):
        out[kind] = [
            {**e, "expires": e["expires"] + delta} if isinstance(e.get("expires"), int) else e
            for e in table.get(kind) or []
        ]
    return out


def write(table: dict[str, Any], path: Path) -> None:
    """rpki-client's layout: one entry per line, written to a temporary name then renamed."""
    part = path.with_name(path.name + ".part")
    with part.open("w") as f:
        f.write('{\n"metadata": ' + json.dumps(table.get("metadata") or {}))
        for kind in ("roas", "aspas", "bgpsec_keys"):
            entries = table.get(kind) or []
            f.write(f',\n"{kind}": [\n')
            f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in entries))
            f.write("\n]")
        f.write("\n}\n")
    part.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the scaled table (rpki-client JSON)")
    parser.add_argument("--source", type=Path, default=REAL, help="the real export to scale")
    parser.add_argument("--vrps", type=int, default=1_000_000)
    parser.add_argument("--aspas", type=int, default=3_000, help="-1: the real ones as they are")
    parser.add_argument("--next", type=Path, help="also write the table a little later here")
    parser.add_argument("--add", type=int, default=9, help="VRPs announced in --next")
    parser.add_argument("--remove", type=int, default=6, help="VRPs withdrawn in --next")
    parser.add_argument("--shift-to-now", action="store_true", help="build time becomes now")
    args = parser.parse_args(argv)
    began = time.monotonic()
    with _open(args.source) as f:
        real = json.load(f)
    aspas = len(real.get("aspas") or []) if args.aspas < 0 else args.aspas
    table = scale(real, args.vrps, aspas)
    del real
    if args.shift_to_now:
        table = shift_to(table, int(time.time()))
    write(table, args.out)
    print(
        f"{args.out}: {len(table['roas'])} VRPs, {len(table['aspas'])} ASPAs, "
        f"{len(table.get('bgpsec_keys') or [])} router keys"
    )
    if args.next is not None:
        later = changed(table, args.add, args.remove)
        write(later, args.next)
        print(f"{args.next}: {len(later['roas'])} VRPs (+{args.add} -{args.remove})")
    print(f"gen_table: {time.monotonic() - began:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The query API's documents: parameters parsed and checked, answers shaped (no I/O).

Validity answers follow Routinator's ``/api/v1/validity`` shape (``validated_route`` with
``route`` and ``validity``: ``state``, ``reason`` for Invalid, ``description``, ``VRPs``
matched / unmatched_as / unmatched_length). ASPA answers carry the verdict of
`snapshot.queries.verify_as_path`, the ramp bounds and each hop's provider authorization.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict
from typing import Any

from snapshot.model import Vrp, check_asn
from snapshot.prefix_text import network_text
from snapshot.queries import (
    Direction,
    OriginState,
    OriginValidation,
    PathElement,
    hop_check,
    ramp_bounds,
    verify_as_path,
)
from snapshot.snapshot import Snapshot

#: Elements accepted in an AS path query.
MAX_PATH_LENGTH = 512

_ASN = re.compile(r"(?:AS)?([0-9]{1,10})", re.IGNORECASE)


def parse_asn(text: str, name: str = "asn") -> int:
    """``AS64496``, ``as64496`` or ``64496`` as an integer; raises ValueError naming ``name``."""
    match = _ASN.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{name}: {text!r} is not an AS number")
    return check_asn(int(match.group(1)), name)


def parse_path(text: str) -> list[PathElement]:
    """An AS path as received, neighbour first: ``AS3,AS2,AS1`` with AS_SETs as ``{AS4 AS5}``.

    Elements are separated by commas; members of a set by spaces, semicolons or commas.
    """
    elements: list[PathElement] = []
    rest = text.strip()
    while rest:
        if rest.startswith("{"):
            end = rest.find("}")
            if end < 0:
                raise ValueError("path: an AS_SET '{' is not closed")
            members = [m for m in re.split(r"[\s;,]+", rest[1:end]) if m]
            if not members:
                raise ValueError("path: empty AS_SET")
            elements.append(frozenset(parse_asn(m, "path") for m in members))
            rest = rest[end + 1 :].lstrip()
            if rest and not rest.startswith(","):
                raise ValueError("path: expected ',' after an AS_SET")
            rest = rest[1:].lstrip()
        else:
            element, _, rest = rest.partition(",")
            elements.append(parse_asn(element, "path"))
            rest = rest.lstrip()
        if len(elements) > MAX_PATH_LENGTH:
            raise ValueError(f"path: more than {MAX_PATH_LENGTH} elements")
    return elements


def aspa_parameters(query: dict[str, str]) -> tuple[list[PathElement], Direction, int | None]:
    """``path``, ``direction`` (default upstream) and ``neighbor`` of an ASPA query."""
    path = parse_path(query.get("path", ""))
    if not path:
        raise ValueError("path: missing (e.g. ?path=AS64502,AS64501,AS64500)")
    try:
        direction = Direction(query.get("direction", "upstream").lower())
    except ValueError:
        raise ValueError("direction: must be upstream or downstream") from None
    neighbor = query.get("neighbor")
    return path, direction, parse_asn(neighbor, "neighbor") if neighbor else None


def _asn_text(asn: int) -> str:
    return f"AS{asn}"


def _vrp_document(vrp: Vrp) -> dict[str, Any]:
    return {
        "asn": _asn_text(vrp.asn),
        "prefix": network_text(vrp.prefix),
        "max_length": vrp.max_length,
    }


_DESCRIPTIONS = {
    OriginState.VALID: "At least one VRP matches the route prefix and origin AS",
    OriginState.NOT_FOUND: "No VRP covers the route prefix",
}


def validity_document(result: OriginValidation) -> dict[str, Any]:
    """The Routinator-style ``validity`` object of one route."""
    validity: dict[str, Any] = {"state": result.state.value}
    if result.state is OriginState.INVALID:
        if result.unmatched_length:
            validity["reason"] = "length"
            validity["description"] = (
                "At least one VRP covers the route prefix and has its origin AS, but the "
                "route is more specific than that VRP's max length allows"
            )
        else:
            validity["reason"] = "as"
            validity["description"] = (
                "At least one VRP covers the route prefix, but no VRP has the route's origin AS"
            )
    else:
        validity["description"] = _DESCRIPTIONS[result.state]
    validity["VRPs"] = {
        "matched": [_vrp_document(v) for v in result.matched],
        "unmatched_as": [_vrp_document(v) for v in result.unmatched_as],
        "unmatched_length": [_vrp_document(v) for v in result.unmatched_length],
    }
    origin = None if result.origin_asn is None else _asn_text(result.origin_asn)
    return {
        "route": {"origin_asn": origin, "prefix": network_text(result.prefix)},
        "validity": validity,
    }


def aspa_document(
    snapshot: Snapshot, path: list[PathElement], direction: Direction, neighbor_as: int | None
) -> dict[str, Any]:
    """The verdict on ``path`` with, for a path of plain ASNs, its ramps and hops."""
    result = verify_as_path(snapshot, path, direction, neighbor_as=neighbor_as)
    document: dict[str, Any] = {
        "path": [
            _asn_text(e) if isinstance(e, int) else sorted(_asn_text(a) for a in e) for e in path
        ],
        "direction": direction.value,
        "neighbor_as": None if neighbor_as is None else _asn_text(neighbor_as),
        "state": result.value,
    }
    plain = [e for e in path if isinstance(e, int)]
    if plain and len(plain) == len(path):
        document["ramps"] = asdict(ramp_bounds(snapshot, plain))
        collapsed = [a for i, a in enumerate(plain) if i == 0 or plain[i - 1] != a]
        origin_first = collapsed[::-1]
        document["hops"] = [
            {
                "customer": _asn_text(c),
                "provider": _asn_text(p),
                "up": hop_check(snapshot, c, p).value,
                "down": hop_check(snapshot, p, c).value,
            }
            for c, p in itertools.pairwise(origin_first)
        ]
    return document

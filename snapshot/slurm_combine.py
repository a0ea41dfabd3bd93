"""`combine`: the SLURM policies of several files as one, after the RFC 8416 §4.2 overlap checks.

Pure: no I/O, standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

from snapshot.model import IPNetwork
from snapshot.slurm import SlurmError, SlurmPolicy

__all__ = ["combine"]


def combine(policies: Sequence[SlurmPolicy]) -> SlurmPolicy:
    """One policy from the policies of several files (one per file), in the given order.

    RFC 8416 §4.2: files conflict when a prefix of one file's prefix filters or assertions
    overlaps (equals, covers or is covered by) one of another file's, or when an ASN appears in
    the BGPsec filters or assertions of two files. The same rule is applied to ASPA customers
    (aspaFilters/aspaAssertions). Conflicting files are not used at all.

    Raises:
        SlurmError: naming the two conflicting entries.
    """
    if len(policies) == 1:
        return policies[0]
    _check_prefix_overlaps(policies)
    _check_asn_overlaps(
        policies,
        "BGPsec ASN",
        lambda p: (
            [(f.asn, f.origin) for f in p.bgpsec_filters if f.asn is not None]
            + [(a.key.asn, a.origin) for a in p.bgpsec_assertions]
        ),
    )
    _check_asn_overlaps(
        policies,
        "ASPA customer",
        lambda p: (
            [(f.customer, f.origin) for f in p.aspa_filters]
            + [(a.aspa.customer, a.origin) for a in p.aspa_assertions]
        ),
    )
    return SlurmPolicy(
        *(
            tuple(entry for p in policies for entry in getattr(p, f.name))
            for f in fields(SlurmPolicy)
        )
    )


def _check_prefix_overlaps(policies: Sequence[SlurmPolicy]) -> None:
    # Two prefixes overlap exactly when one contains the other. Sorted by (family, first
    # address, widest first), the prefixes containing the current one are a stack.
    spans: list[tuple[int, int, int, int, str, IPNetwork]] = []
    for index, policy in enumerate(policies):
        nets = [(f.prefix, f.origin) for f in policy.prefix_filters if f.prefix is not None]
        nets += [(a.vrp.prefix, a.origin) for a in policy.prefix_assertions]
        for net, origin in nets:
            first = int(net.network_address)
            spans.append((net.version, first, first + net.num_addresses - 1, index, origin, net))
    spans.sort(key=lambda s: (s[0], s[1], -s[2]))
    stack: list[tuple[int, int, int, int, str, IPNetwork]] = []
    for span in spans:
        while stack and (stack[-1][0] != span[0] or stack[-1][2] < span[1]):
            stack.pop()
        for outer in stack:
            if outer[3] != span[3]:
                raise SlurmError(
                    f"SLURM files overlap (RFC 8416 §4.2): {outer[4]} ({outer[5]}) and "
                    f"{span[4]} ({span[5]})"
                )
        stack.append(span)


def _check_asn_overlaps(
    policies: Sequence[SlurmPolicy],
    what: str,
    used: Callable[[SlurmPolicy], list[tuple[int, str]]],
) -> None:
    seen: dict[int, tuple[int, str]] = {}
    for index, policy in enumerate(policies):
        for asn, origin in used(policy):
            first = seen.setdefault(asn, (index, origin))
            if first[0] != index:
                raise SlurmError(
                    f"SLURM files overlap (RFC 8416 §4.2): {what} {asn} is used in {first[1]} "
                    f"and in {origin}"
                )

"""A SLURM policy as its canonical stored document: read back equal, canonical bytes, the
mapped IPv6 spelling (persistence contract: the owner's policy travels with its state)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json

import pytest

from snapshot.model import Vrp
from snapshot.slurm import EMPTY_POLICY, PrefixAssertion, PrefixFilter, SlurmError, SlurmPolicy
from snapshot.slurm_combine import combine
from snapshot.slurm_document import policy_document, read_policy_document
from tests.slurm_docs import slurm_document
from tests.snapshot.test_slurm import full_document, parse


def comments(policy: SlurmPolicy) -> list[str | None]:
    return [e.comment for f in dataclasses.fields(policy) for e in getattr(policy, f.name)]


def test_every_entry_and_comment_reads_back_equal() -> None:
    policy = parse(full_document())
    text = policy_document(policy)
    again = read_policy_document(text)
    assert again == policy
    assert comments(again) == comments(policy)
    assert policy_document(again) == text  # canonical: a second round gives the same bytes


def test_a_combined_policy_reads_back_in_its_order() -> None:
    first = parse(slurm_document(prefixFilters=[{"asn": 64496}]), "a.json")
    second = parse(slurm_document(prefixFilters=[{"prefix": "192.0.2.0/24"}]), "b.json")
    policy = combine([first, second])
    assert read_policy_document(policy_document(policy)).prefix_filters == (
        PrefixFilter(None, 64496),
        PrefixFilter(ipaddress.ip_network("192.0.2.0/24"), None),
    )


def test_the_canonical_bytes_of_a_small_policy() -> None:
    policy = SlurmPolicy(
        prefix_filters=(PrefixFilter(None, 64496, "ünïcode kept"),),
        prefix_assertions=(PrefixAssertion(Vrp.parse("2001:db8::/32", 48, 64497)),),
    )
    assert policy_document(policy) == (
        '{"slurmVersion":2,"validationOutputFilters":{"prefixFilters":[{"asn":64496,'
        '"comment":"ünïcode kept"}],"bgpsecFilters":[],"aspaFilters":[]},'
        '"locallyAddedAssertions":{"prefixAssertions":[{"asn":64497,"prefix":"2001:db8::/32",'
        '"maxPrefixLength":48}],"bgpsecAssertions":[],"aspaAssertions":[]}}'
    )
    assert read_policy_document(policy_document(EMPTY_POLICY)) == EMPTY_POLICY


def test_a_mapped_ipv6_prefix_is_spelt_with_its_ipv4_address() -> None:
    net = ipaddress.ip_network("::ffff:c000:200/120")
    policy = SlurmPolicy(prefix_filters=(PrefixFilter(net, None),))
    document = json.loads(policy_document(policy))
    assert document["validationOutputFilters"]["prefixFilters"] == [
        {"prefix": "::ffff:192.0.2.0/120"}
    ]
    assert read_policy_document(policy_document(policy)) == policy


def test_a_bad_document_names_where_it_came_from() -> None:
    with pytest.raises(SlurmError, match=r"^the stored SLURM policy: "):
        read_policy_document('{"slurmVersion": 3}')

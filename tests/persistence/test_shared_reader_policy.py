"""The owner's SLURM policy stored with its state (P-66): a reader without a policy of its own
reads and applies it; one with its own applies its own; an unreadable one is refused."""

from __future__ import annotations

import dataclasses
import time

import pytest

from persistence.shared.convert import judge_state, owner_policy
from persistence.shared.judging import prepare
from persistence.state import PersistedState, StateId
from snapshot.model import Aspa
from snapshot.slurm import AspaAssertion, PrefixFilter, SlurmError, SlurmPolicy
from snapshot.slurm_document import policy_document
from tests.persistence.shared_states import state

#: Drops every VRP of AS64496 (the test state's) and asserts an ASPA.
OWNERS = SlurmPolicy(
    prefix_filters=(PrefixFilter(None, 64496),),
    aspa_assertions=(AspaAssertion(Aspa(64999, (64998,))),),
)


def stored(policy: SlurmPolicy | None) -> PersistedState:
    held = state("store", StateId(1, 1), time.time())
    text = None if policy is None else policy_document(policy)
    return dataclasses.replace(held, policy_id="p" if text else None, policy_json=text)


def test_the_owners_stored_policy_is_read_and_applied() -> None:
    held = stored(OWNERS)
    policy = owner_policy(held)
    assert policy == OWNERS
    snapshot, _ = judge_state(held, time.time(), policy=policy)
    assert snapshot.vrp_count == 0  # filtered as the owner filtered it
    assert {a.customer for a in snapshot.aspas} == {64496, 64999}
    bare, _ = judge_state(held, time.time())
    assert bare.vrp_count == 1  # the stored payload is before SLURM


def test_a_state_without_a_stored_policy_has_none() -> None:
    assert owner_policy(stored(None)) is None


def test_a_reader_with_its_own_policy_does_not_read_the_owners() -> None:
    broken = dataclasses.replace(stored(OWNERS), policy_json='{"slurmVersion": 9}')
    digests, policy = prepare(broken, owner=False)
    assert policy is None
    assert set(digests) == {"main"}
    with pytest.raises(SlurmError, match="owner's stored SLURM policy"):
        prepare(broken, owner=True)

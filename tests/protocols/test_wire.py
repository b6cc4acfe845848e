"""Tests that bite: each one fails on a bug that the rest of the suite let through (issue 14).

docs/testing.md lists the planted bug each test was checked against.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from finite_field import AuthenticationError, PeerError
from protocols import SessionParameters, run_memory_session
from protocols._crypto import EphemeralKey, PairKeys
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import pack, packed_view, unpack
from protocol_helpers import Session, random_data

#: run by .ci/run on the lowest and the highest protobuf too (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.protobuf_matrix]

PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8)

# -- AES-GCM: the associated data binds every documented field -----------------------------

#: A share chunk sent by "alice" to "bob" (round, prime index, chunk index).
SENT = dict(round_=0, prime_index=1, chunk_index=2)

#: The roster digest both ends accepted, and the one of another roster.
ROSTER, OTHER_ROSTER = hashlib.sha256(b"roster 1").digest(), hashlib.sha256(b"roster 2").digest()


def _pair(session="s1", roster=ROSTER):
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    return (PairKeys.derive(a, b.public_bytes, session_id=session, me="alice", peer="bob",
                            roster_digest=roster),
            PairKeys.derive(b, a.public_bytes, session_id=session, me="bob", peer="alice",
                            roster_digest=roster))


def _aad(keys, *, session=None, roster=None, sender="alice", receiver="bob", round_=0,
         prime_index=1, chunk_index=2):
    """The AAD ``keys`` would bind for these fields (one changed at a time below)."""
    if session is not None:
        keys = dataclasses.replace(keys, session_id=session)
    if roster is not None:
        keys = dataclasses.replace(keys, roster_digest=roster)
    return keys._aad(sender, receiver, round_, prime_index, chunk_index)


#: One field of the AAD changed; the nonce (direction, round, prime, chunk) is NOT changed.
ALTERED = {"session": dict(session="s2"), "roster digest": dict(roster=OTHER_ROSTER),
           "sender": dict(sender="mallory"),
           "receiver": dict(receiver="carol"), "swapped ends": dict(sender="bob",
                                                                     receiver="alice"),
           "round": dict(round_=1), "prime index": dict(prime_index=0),
           "chunk index": dict(chunk_index=3)}


@pytest.mark.parametrize("field", list(ALTERED))
def test_aad_binds_each_field_even_with_the_same_nonce(field):
    # The existing round-trip test changes fields that also change the nonce, so it holds
    # even without any AAD. Here the ciphertext is made under the right key and the right
    # nonce, and only the AAD differs in one field: the receiver must refuse it.
    ka, kb = _pair()
    nonce = ka.nonce("alice", SENT["round_"], SENT["prime_index"], SENT["chunk_index"])
    honest = AESGCM(ka.encryption_key).encrypt(nonce, b"share", _aad(ka))
    assert kb.decrypt(honest, sender="alice", **SENT) == b"share"  # the forgery recipe works
    assert _aad(ka, **ALTERED[field]) != _aad(ka), f"the AAD does not contain the {field}"
    forged = AESGCM(ka.encryption_key).encrypt(nonce, b"share", _aad(ka, **ALTERED[field]))
    with pytest.raises(AuthenticationError):
        kb.decrypt(forged, sender="alice", **SENT)


def test_ciphertext_opens_only_under_its_own_aad():
    # encrypt() really uses the AAD (not None): the box opens with the AAD of its fields and
    # with no other, under the receiver's key and the documented nonce.
    ka, kb = _pair()
    box = ka.encrypt(b"share", **SENT)
    nonce = kb.nonce("alice", SENT["round_"], SENT["prime_index"], SENT["chunk_index"])
    assert AESGCM(kb.encryption_key).decrypt(nonce, box, _aad(kb, sender="alice",
                                                              receiver="bob")) == b"share"
    for aad in [None, b"", *(_aad(ka, **change) for change in ALTERED.values())]:
        with pytest.raises(InvalidTag):
            AESGCM(kb.encryption_key).decrypt(nonce, box, aad)


# -- unpack: the only range check of a received share -------------------------------------

@pytest.mark.parametrize("p", [13, 2147483647])
def test_unpack_rejects_values_equal_to_or_above_p(p):
    good = np.array([0, 1, p - 1], dtype=np.int64)
    assert unpack(pack(good), 3, p, party="a", phase="shares").tolist() == good.tolist()
    for bad in (p, p + 1, 2**32 - 1):
        values = np.array([0, bad, 1], dtype=np.uint64)
        with pytest.raises(PeerError, match=f">= p = {p}") as info:
            unpack(values.astype("<u4").tobytes(), 3, p, party="a", phase="shares")
        assert (info.value.party, info.value.phase) == ("a", "shares")


def test_unpack_and_packed_view_reject_a_wrong_size():
    data = pack(np.arange(4))
    for count in (3, 5):
        with pytest.raises(PeerError, match="expected"):
            unpack(data, count, 13, party="a", phase="shares")
        with pytest.raises(PeerError, match="expected"):
            packed_view(data, count, party="a", phase="evaluation")


# -- roster: a malicious coordinator lists a party twice ----------------------------------

def _roster_for(session, name):
    hellos = session.hellos()
    out = []
    for sender, hello in hellos.items():
        out += session.coordinator.receive(sender, hello)
    return next(env for dest, env in out if dest == name and env.HasField("roster"))


def _with_entries(env, entries, parties):
    """The roster with these (hello, offset-recomputed) entries and parameters for
    ``parties`` parties, so that only the duplicate is wrong."""
    roster = pb.Roster()
    roster.CopyFrom(env.roster)
    del roster.parties[:]
    offset = 0
    for entry in entries:
        new = roster.parties.add()
        new.CopyFrom(entry)
        new.row_offset = offset
        offset += entry.hello.n_rows
    plan = PARAMS.plan(parties)
    roster.parameters.CopyFrom(PARAMS.to_proto(plan))
    out = pb.Envelope()
    out.roster.CopyFrom(roster)
    return out


@pytest.mark.parametrize("layout", ["appended", "replacing another"])
def test_party_rejects_a_roster_that_lists_a_party_twice(layout):
    session = Session(random_data([2, 3, 2], 3), PARAMS)
    env = _roster_for(session, "party-0")
    entries = list(env.roster.parties)
    entries = entries + [entries[1]] if layout == "appended" else [entries[0], entries[1],
                                                                    entries[1]]
    party = session.parties["party-0"]
    with pytest.raises(PeerError, match="roster") as info:
        list(party.receive(_with_entries(env, entries, len(entries))))
    assert (info.value.party, info.value.phase) == ("coordinator", "join")
    assert party.phase == "failed"


def test_the_roster_recipe_of_the_test_above_is_accepted_when_honest():
    # Guards the test above: with the honest entries, the rebuilt roster passes.
    session = Session(random_data([2, 3, 2], 3), PARAMS)
    env = _roster_for(session, "party-0")
    out = list(session.parties["party-0"].receive(
        _with_entries(env, list(env.roster.parties), 3)))
    assert [e.WhichOneof("body") for e in out] == ["confirmation"]
    assert session.parties["party-0"].phase == "confirm"


# -- RoundStart replay --------------------------------------------------------------------

def test_party_rejects_a_replayed_round_start():
    session = Session(random_data([3, 2, 4], 3), PARAMS)
    queue = session.run_until("evaluation")
    starts = [(dest, env) for dest, _, env in queue
              if dest == "party-0" and env.HasField("round_start")]
    assert len(starts) == 1
    dest, start = starts[0]
    party = session.parties[dest]
    tiles = list(party.receive(start))
    assert tiles and all(e.HasField("tile") for e in tiles)
    with pytest.raises(PeerError, match="replayed") as info:
        list(party.receive(start))  # the very same RoundStart again
    assert (info.value.party, info.value.phase) == ("coordinator", "evaluation")
    assert party.phase == "failed"


def test_party_rejects_a_round_start_that_goes_back():
    session = Session(random_data([3, 2, 4], 3), PARAMS)
    queue = session.run_until("evaluation")
    dest, _, start = next(item for item in queue
                          if item[0] == "party-1" and item[2].HasField("round_start"))
    party = session.parties[dest]
    later = pb.Envelope()
    later.CopyFrom(start)
    later.round_start.round = start.round_start.round + 1
    assert list(party.receive(later))
    with pytest.raises(PeerError, match="replayed"):
        list(party.receive(start))


# -- ephemeral keys: fresh per party and per session --------------------------------------

def _ephemeral_keys(transcript):
    return {m.sender: m.envelope().hello.ephemeral_public_key
            for m in transcript.of_kind("hello")}


def test_ephemeral_keys_are_fresh_and_independent_across_parties_and_sessions():
    data = random_data([2, 2, 2], 2, seed=3)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8)
    keys = []
    for _ in range(2):
        _, transcript = run_memory_session(data, params, record=True)
        per_party = _ephemeral_keys(transcript)
        assert sorted(per_party) == sorted(data)
        keys += list(per_party.values())
    assert all(len(k) == 32 for k in keys)
    assert len(set(keys)) == len(keys) == 6, "an ephemeral key repeats"
    # Independent: no key is a fixed function of the others (a constant key, or two
    # parties sharing one); and a pair's secret differs across sessions.
    assert len({EphemeralKey.generate().public_bytes for _ in range(8)}) == 8


def test_pair_keys_differ_across_two_sessions_of_the_same_parties():
    data = random_data([2, 2, 2], 2, seed=4)
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8)
    secrets = []
    for _ in range(2):
        _, transcript = run_memory_session(data, params, session_id="same-id", record=True)
        party = transcript.parties["party-0"]
        secrets.append({peer: (k.encryption_key, k.mask_key) for peer, k in party.keys.items()})
    for peer in secrets[0]:
        assert secrets[0][peer][0] != secrets[1][peer][0]
        assert secrets[0][peer][1] != secrets[1][peer][1]

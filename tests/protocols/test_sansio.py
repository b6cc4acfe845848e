"""Message-level tests of the coordinator and party state machines (no transport)."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import DeadlineError, InputError, AuthenticationError, PeerError, ProtocolError
from protocols import Coordinator, Party, SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import envelope
from protocol_helpers import Session, random_data

#: run by .ci/run on the lowest and the highest protobuf too (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.protobuf_matrix]

PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8)


@pytest.fixture
def session():
    return Session(random_data([4, 3, 5], 3), PARAMS)


def test_a_full_session_by_hand_is_exact(session):
    session.run_until("done")
    assert session.coordinator.outcome is not None and session.coordinator.outcome.round == 1


def test_unknown_party_is_rejected(session):
    hello = session.hellos()["party-0"]
    with pytest.raises(ProtocolError, match="unknown party 'mallory'"):
        session.coordinator.receive("mallory", hello)


def test_hello_claiming_another_identity_is_rejected(session):
    hello = session.hellos()["party-0"]
    with pytest.raises(PeerError, match="claims to be 'party-0'") as info:
        session.coordinator.receive("party-1", hello)
    assert info.value.party == "party-1" and info.value.phase == "join"


def test_duplicate_hello_is_rejected(session):
    hello = session.hellos()["party-0"]
    session.coordinator.receive("party-0", hello)
    with pytest.raises(PeerError, match="duplicate hello") as info:
        session.coordinator.receive("party-0", hello)
    assert (info.value.party, info.value.phase) == ("party-0", "join")
    # The coordinator is now failed and says so to everyone.
    reports = session.coordinator.abort()
    assert {d for d, _ in reports} == set(session.names)
    assert all(e.error.phase == "join" for _, e in reports)


def test_out_of_order_message_names_party_and_phase(session):
    hellos = session.hellos()
    tile = envelope(tile=pb.EvaluationTile(session_id="test-session", round=1,
                                           sender="party-0"))
    session.coordinator.receive("party-0", hellos["party-0"])
    with pytest.raises(PeerError, match="out-of-order") as info:
        session.coordinator.receive("party-0", tile)
    assert (info.value.party, info.value.phase) == ("party-0", "join")


def test_party_rejects_out_of_order_messages(session):
    session.hellos()
    start = envelope(round_start=pb.RoundStart(session_id="test-session", round=1,
                                               responders=session.names))
    with pytest.raises(PeerError, match="out-of-order") as info:
        list(session.parties["party-0"].receive(start))
    assert info.value.party == "coordinator" and info.value.phase == "join"
    assert session.parties["party-0"].phase == "failed"


def test_message_from_another_session_is_rejected(session):
    other = Session(random_data([2, 2, 2], 3), PARAMS, session_id="other-session")
    replayed = other.hellos()["party-0"]
    session.hellos()
    with pytest.raises(PeerError, match="session 'other-session'.*replayed") as info:
        session.coordinator.receive("party-0", replayed)
    assert info.value.party == "party-0"


def test_hello_signed_with_a_key_that_is_not_pinned_is_rejected():
    data = random_data([2, 2, 2], 3)
    s = Session(data, PARAMS)
    hello = s.hellos()["party-1"]
    hello.hello.signature = Ed25519PrivateKey.generate().sign(b"whatever")
    with pytest.raises(AuthenticationError) as info:
        s.coordinator.receive("party-1", hello)
    assert (info.value.party, info.value.phase) == ("party-1", "join")


def test_party_refuses_an_identity_key_that_is_not_pinned():
    data = random_data([2], 3)
    pinned = {"party-0": Ed25519PrivateKey.generate().public_key().public_bytes_raw()}
    with pytest.raises(AuthenticationError):
        Party("party-0", data["party-0"], session_id="s", parameters=PARAMS,
              identity_key=Ed25519PrivateKey.generate(), pinned=pinned)


def test_party_detects_a_substituted_key_in_the_roster(session):
    hellos = session.hellos()
    roster_msgs = []
    for name, hello in hellos.items():
        roster_msgs = session.coordinator.receive(name, hello) or roster_msgs
    dest, roster = roster_msgs[0]
    # A malicious coordinator swaps party-2's ephemeral key for its own.
    roster.roster.parties[2].hello.ephemeral_public_key = bytes(32)
    with pytest.raises(AuthenticationError) as info:
        list(session.parties[dest].receive(roster))
    assert info.value.party == "party-2"


def test_party_rejects_roster_parameters_that_differ_from_its_config(session):
    hellos = session.hellos()
    out = []
    for name, hello in hellos.items():
        out = session.coordinator.receive(name, hello) or out
    dest, roster = out[0]
    roster.roster.parameters.scale_bits = 4
    with pytest.raises(PeerError, match="scale_bits"):
        list(session.parties[dest].receive(roster))


@pytest.mark.parametrize("change", [False, True], ids=["identical", "different"])
def test_a_second_copy_of_a_tile_is_refused(session, change):
    """No tile twice: an honest party re-sends only the tiles a resume does not list as
    held, so a second copy, identical (a replay) or not (a tamper), fails naming the
    sender."""
    sender, tile = session.tiles()[0]
    session.coordinator.receive(sender, tile)
    again = pb.Envelope()
    again.CopyFrom(tile)
    if change:
        again.tile.values = bytes([tile.tile.values[0] ^ 1]) + tile.tile.values[1:]
    with pytest.raises(PeerError, match="a second copy of evaluation tile") as info:
        session.coordinator.receive(sender, again)
    assert (info.value.party, info.value.phase) == (sender, "evaluation")


@pytest.mark.parametrize("corrupt, match", [
    (lambda t: setattr(t, "values", t.values[:-4]), "expected"),
    (lambda t: setattr(t, "values", b"\xff\xff\xff\xff" + t.values[4:]), "value >= p"),
    (lambda t: setattr(t, "row_stop", t.row_stop + 1), "schedule"),
    (lambda t: setattr(t, "round", 7), "round 7"),
])
def test_malformed_tiles_name_party_and_phase(session, corrupt, match):
    sender, tile = session.tiles()[0]
    corrupt(tile.tile)
    with pytest.raises(PeerError, match=match) as info:
        session.coordinator.receive(sender, tile)
    assert (info.value.party, info.value.phase) == (sender, "evaluation")


def test_tampered_share_fails_authentication_at_the_receiver(session):
    hellos = session.hellos()
    out = []
    for name, hello in hellos.items():
        out = session.coordinator.receive(name, hello) or out
    chunks = session.deliver_all(session.confirm(out))
    sender, chunk = next((s, e) for s, e in chunks if e.HasField("share"))
    [(receiver, relayed)] = session.coordinator.receive(sender, chunk)
    data = bytearray(relayed.share.ciphertext)
    data[10] ^= 0x01
    relayed.share.ciphertext = bytes(data)
    party = session.parties[receiver]
    with pytest.raises(AuthenticationError) as info:
        list(party.receive(relayed))
    assert (info.value.party, info.value.phase) == (sender, "shares")
    report = party.error_report(info.value)
    assert (report.error.party, report.error.kind) == (sender, "authentication")
    with pytest.raises(PeerError) as blamed:  # only the authenticated reporter is blamed
        session.coordinator.receive(receiver, report)
    assert blamed.value.party == receiver and f"names {sender!r}" in str(blamed.value)


def test_share_chunk_of_wrong_size_is_rejected_by_the_relay(session):
    hellos = session.hellos()
    out = []
    for name, hello in hellos.items():
        out = session.coordinator.receive(name, hello) or out
    sender, chunk = next((s, e) for s, e in session.deliver_all(session.confirm(out))
                         if e.HasField("share"))
    chunk.share.ciphertext += b"x"
    with pytest.raises(PeerError, match="bytes, expected") as info:
        session.coordinator.receive(sender, chunk)
    assert info.value.phase == "shares"


def test_deadline_in_join_names_the_missing_party(session):
    hellos = session.hellos()
    for name in ["party-0", "party-2"]:
        session.coordinator.receive(name, hellos[name])
    assert session.coordinator.waiting_for() == ["party-1"]
    with pytest.raises(DeadlineError) as info:
        session.coordinator.expire()
    assert (info.value.party, info.value.phase) == ("party-1", "join")


@pytest.mark.parametrize("data, match", [
    (np.array([[0.0, np.nan, 1.0]]), "finite"),
    (np.zeros((2, 4)), "d must be equal"),
    (np.zeros((0, 3)), "empty"),
])
def test_inconsistent_inputs_are_refused_before_anything_is_sent(data, match):
    key = Ed25519PrivateKey.generate()
    with pytest.raises(InputError, match=match) as info:
        Party("p", data, session_id="s", parameters=PARAMS, identity_key=key,
              pinned={"p": key.public_key().public_bytes_raw()})
    assert info.value.party == "p"


def test_coordinator_rejects_a_hello_with_another_dimension():
    key = Ed25519PrivateKey.generate()
    pinned = {"a": key.public_key().public_bytes_raw(), "b": bytes(32), "c": bytes(32)}
    other = SessionParameters(dim=4, bound=1.0, scale_bits=8)
    party = Party("a", np.zeros((2, 4)), session_id="s", parameters=other, identity_key=key,
                  pinned=pinned)
    coordinator = Coordinator("s", PARAMS, ["a", "b", "c"], pinned)
    with pytest.raises(PeerError, match="sent d=4, expected 3"):
        coordinator.receive("a", party.start()[0])

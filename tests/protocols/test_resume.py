"""Reconnect and resume through the real state machines (docs/protocol.md, "Reconnect").

A message-level driver breaks one party's link at a chosen point (what that party sent
after it is lost in flight, what the coordinator sends it meanwhile never arrives), then
runs the resume handshake: the party re-sends what the coordinator did not receive (tiles
computed again), the coordinator re-sends what the party did not receive, and the session
must end with the exact D (Python-integer oracle on the plaintext quantized rows).
Refused handshakes (another identity key, another run's nonce, a replayed challenge, no
proof of the run's ephemeral key) get nothing and change nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import AuthenticationError, PeerError
from protocols import Party, SessionParameters
from protocols._crypto import EphemeralKey
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import envelope
from protocols._resume import Outlog, resume_proof, resume_transcript
from protocol_helpers import (Link, Session, random_data,
                              resume_oracle, resume_parameters)

pytestmark = pytest.mark.timeout(120)

SIZES = (30, 25, 35, 20)  # n = 110: about a dozen tiles per prime at 4 KiB


_params, _exact = resume_parameters, resume_oracle


def _tile_break(name, after_tiles):
    state = {"done": False}

    def when(sender, env, sent):
        if state["done"] or sender != name or not env.HasField("tile"):
            return False
        if env.tile.tile_index + 0 >= 0:
            state.setdefault("count", 0)
            state["count"] += 1
            if state["count"] > after_tiles:
                state["done"] = True
                return True
        return False
    return when


@pytest.mark.parametrize("integrity", ["detect", "off"])
@pytest.mark.parametrize("after_tiles", [0, 1, 3])
def test_a_link_broken_mid_evaluation_resumes_and_d_is_exact(integrity, after_tiles):
    data = random_data(list(SIZES), 3, seed=11)
    session = Session(data, _params(integrity=integrity))
    link = Link(session)
    link.start()
    link.run(_tile_break("party-1", after_tiles))
    assert "party-1" in link.down and link.c.outcome is None
    assert link.c.away == {"party-1"} and not link.c.lost
    accepted = link.resume("party-1")
    assert accepted.round == 1
    held = {i for t in accepted.held for i in t.indices}
    assert len(held) <= after_tiles
    link.run()
    outcome = link.c.outcome
    assert link.c.error is None and outcome is not None
    assert np.array_equal(outcome.integer, _exact(session, data))
    assert outcome.round == 1 and outcome.lost == [] and link.c.resumes == 1
    assert all(p.done for p in session.parties.values())


def test_a_link_broken_in_the_shares_phase_gets_the_held_chunks_on_resume():
    data = random_data(list(SIZES), 3, seed=12)
    session = Session(data, _params())
    link = Link(session)
    link.start()
    state = {"done": False}

    def when(sender, env, sent):  # party-2 breaks after its second share chunk
        if not state["done"] and sender == "party-2" and env.HasField("share") and sent == 2:
            state["done"] = True
            return True
        return False
    link.run(when)
    assert "party-2" in link.down
    # the others' chunks for party-2 are held while it is away
    assert link.c._outlogs["party-2"].bytes > 0
    accepted = link.resume("party-2")
    assert accepted.replayed > 0
    link.run()
    assert link.c.error is None
    assert np.array_equal(link.c.outcome.integer, _exact(session, data))


def test_a_resent_tile_is_identical_to_the_first():
    data = random_data(list(SIZES), 3, seed=13)
    for integrity in ("detect", "off"):
        session = Session(data, _params(integrity=integrity))
        first = [e for s, e in session.tiles() if s == "party-0"]
        party = session.parties["party-0"]
        for env in first:
            t = env.tile
            again = party._tile_envelope(t.round, party._responders, t.prime_index,
                                         t.tile_index)
            assert again.SerializeToString() == env.SerializeToString()


# -- refused handshakes -------------------------------------------------------------------

def _broken_session(seed=14):
    data = random_data(list(SIZES), 3, seed=seed)
    session = Session(data, _params(adversaries=0))  # 3 of 4 decode: a dropout is survived
    link = Link(session)
    link.start()
    link.run(_tile_break("party-1", 1))
    assert link.c.away == {"party-1"}
    return session, link, data


def _forged_resume(link, name, *, identity=None, run_nonce=None, ephemeral=None,
                   challenge=None):
    """A Resume made with what an attacker holds instead of the party's own secrets."""
    party = link.s.parties[name]
    challenge = challenge or link.c.resume_challenge(name).resume_challenge
    nonce = party._run_nonce if run_nonce is None else run_nonce
    eph = party._ephemeral if ephemeral is None else ephemeral
    message = resume_transcript(party.session_id, name, nonce,
                                link.c.hellos[name].ephemeral_public_key,
                                challenge.challenge, challenge.ephemeral_public_key,
                                party.received)
    identity = party._identity if identity is None else identity
    return envelope(resume=pb.Resume(
        session_id=party.session_id, party_id=name, run_nonce=nonce,
        challenge=challenge.challenge, received=party.received,
        proof=resume_proof(eph, challenge.ephemeral_public_key, message),
        signature=identity.sign(message)))


def _refused(link, name, env, reason):
    before = (set(link.c.away), set(link.c.lost), link.c.phase, link.c.resumes)
    with pytest.raises(AuthenticationError) as info:
        link.c.resume(name, env)
    assert info.value.reason == reason
    assert (info.value.party, info.value.phase) == (name, "evaluation")
    assert str(info.value) == f"message failed authentication from party {name!r} in " \
                              "phase 'evaluation'"
    # nothing changed: still away, not failed, nothing re-sent
    assert (set(link.c.away), set(link.c.lost), link.c.phase, link.c.resumes) == before
    assert link.c.error is None


@pytest.mark.parametrize("attack, reason", [
    ("identity", "the identity signature does not verify"),
    ("nonce", "the run nonce is not this run's"),
    ("ephemeral", "no proof of possession of the run's ephemeral key"),
])
def test_a_forged_resume_is_refused_and_the_real_party_still_resumes(attack, reason):
    session, link, data = _broken_session()
    forged = {"identity": dict(identity=Ed25519PrivateKey.generate()),
              "nonce": dict(run_nonce=bytes(32)),
              "ephemeral": dict(ephemeral=EphemeralKey.generate())}[attack]
    _refused(link, "party-1", _forged_resume(link, "party-1", **forged), reason)
    link.resume("party-1")
    link.run()
    assert np.array_equal(link.c.outcome.integer, _exact(session, data))


def test_another_runs_resume_is_refused():
    # the same party of the same session config in an earlier run: its own (valid)
    # identity key, but that run's nonce and ephemeral key
    session, link, data = _broken_session()
    earlier = Party("party-1", data["party-1"], session_id="test-session",
                    parameters=_params(adversaries=0), identity_key=session.keys["party-1"],
                    pinned=session.pinned)
    forged = _forged_resume(link, "party-1", run_nonce=earlier._run_nonce,
                            ephemeral=earlier._ephemeral)
    _refused(link, "party-1", forged, "the run nonce is not this run's")


def test_a_replayed_handshake_is_refused():
    session, link, data = _broken_session()
    challenge = link.c.resume_challenge("party-1").resume_challenge
    good = _forged_resume(link, "party-1", challenge=challenge)
    link.c.resume("party-1", good)          # the real party resumed with it
    link.cut("party-1")                     # and its stream broke again
    _refused(link, "party-1", good, "unknown or used resume challenge (a replayed "
             "handshake)")
    # a challenge issued for another party does not fit either
    other = link.c.resume_challenge("party-2").resume_challenge
    _refused(link, "party-1", _forged_resume(link, "party-1", challenge=other),
             "unknown or used resume challenge (a replayed handshake)")


def test_a_dropout_cannot_resume():
    session, link, data = _broken_session()
    for d, e in link.c.party_lost("party-1", "did not reconnect within reconnect_grace = 5 s"):
        link.queue.append((d, "coordinator", e))
    assert "party-1" in link.c.lost and link.c.round == 2
    with pytest.raises(PeerError, match="cannot resume: it is a dropout") as info:
        link.c.resume("party-1", _forged_resume(link, "party-1"))
    assert info.value.party == "party-1"
    link.run()
    assert link.c.outcome.lost == ["party-1"]
    assert np.array_equal(link.c.outcome.integer, _exact(session, data))


def test_without_a_grace_period_a_broken_stream_is_a_dropout_at_once():
    data = random_data(list(SIZES), 3, seed=15)
    session = Session(data, _params(reconnect_grace=0.0, adversaries=0))
    link = Link(session)
    link.start()
    link.run(_tile_break("party-1", 1))
    assert "party-1" in link.c.lost and not link.c.away
    assert session.parties["party-1"].can_resume is False
    link.run()
    assert link.c.outcome.lost == ["party-1"]


# -- the hold bound ------------------------------------------------------------------------

def _held_for(seed=16):
    """Bytes of share chunks the coordinator holds for party-2 when it breaks at once."""
    data = random_data(list(SIZES), 3, seed=seed)
    return data


def _run_with_budget(budget, data):
    session = Session(data, _params())
    from protocols import Coordinator
    session.coordinator = Coordinator("test-session", session.parameters, session.names,
                                      session.pinned, memory_budget=budget)
    link = Link(session)
    link.start()
    state = {"done": False}

    def when(sender, env, sent):  # party-2 breaks after its first share chunk
        if not state["done"] and sender == "party-2" and env.HasField("share") and sent == 1:
            state["done"] = True
            return True
        return False
    link.run(when)
    return session, link


def test_held_share_chunks_up_to_memory_budget_are_delivered_and_one_byte_more_is_refused():
    data = _held_for()
    session, link = _run_with_budget(2**30, data)
    # every chunk the others relay to party-2, all held (nothing acknowledged before Ready)
    held = sum(o.bytes for o in link.c._outlogs.values())
    assert link.c.error is None and held > 0
    last = link.last_share_to  # the chunk that reached that total
    # exactly that budget: held, delivered on resume, exact D
    session, link = _run_with_budget(held, data)
    assert link.c.error is None
    link.resume("party-2")
    link.run()
    assert np.array_equal(link.c.outcome.integer, _exact(session, data))
    # one byte less: the last chunk relayed does not fit. For party-2 (away) the session
    # fails naming it; for a connected party, that party can no longer resume
    session, link = _run_with_budget(held - 1, data)
    error = link.c.error
    text = (f"holding the relayed share chunks for {last!r} until it resumes would exceed "
            f"memory_budget = {held - 1} bytes")
    if last == "party-2":
        assert type(error) is PeerError and error.party == "party-2"
        assert text in str(error)
    else:
        assert error is None and list(link.c._unresumable) == [last]
        assert link.c._unresumable[last].startswith(text)
        assert not link.c.resumable(last) and link.c.resumable("party-2")


def test_outlog_since_refuses_a_count_beyond_what_was_sent():
    log = Outlog()
    for i in range(3):
        log.append(i)
    assert log.since(1, party="x", phase="p") == [1, 2]
    assert log.since(3, party="x", phase="p") == []
    with pytest.raises(PeerError, match="claims to have received 4 envelopes, but only 3"):
        log.since(4, party="x", phase="p")


@pytest.mark.parametrize("value, ok", [(0, True), (0.0, True), (3600, True), (3600.001, False),
                                       (-0.001, False), (float("nan"), False), (True, False),
                                       ("30", False)])
def test_reconnect_grace_is_0_to_3600_seconds(value, ok):
    from finite_field import ParameterError
    if ok:
        assert _params(reconnect_grace=value).reconnect_grace == float(value)
        return
    with pytest.raises(ParameterError, match=r"reconnect_grace must be a number of seconds "
                       r"in \[0, 3600\] \(0: no reconnect\), got "):
        _params(reconnect_grace=value)


def test_reconnect_grace_defaults_to_30_s_and_travels_in_the_roster():
    assert SessionParameters(dim=3, bound=1.0).reconnect_grace == 30.0
    params = _params(reconnect_grace=0.0)
    msg = params.to_proto(params.plan(4))
    assert msg.HasField("reconnect_grace") and msg.reconnect_grace == 0.0
    assert SessionParameters.from_proto(msg).reconnect_grace == 0.0
    msg.ClearField("reconnect_grace")
    assert SessionParameters.from_proto(msg).reconnect_grace == 30.0


def test_the_grace_period_holds_at_exactly_grace_and_ends_one_step_past_it():
    from protocols._grpc_coordinator import Absences
    clock = [100.0]
    away = Absences(2.0, clock=lambda: clock[0])
    away.mark("party-1")
    clock[0] = 101.0
    away.mark("party-1")  # a second report of the same break keeps the first time
    clock[0] = 102.0
    assert away.expired() == [] and "party-1" in away
    clock[0] = 102.001
    assert away.expired() == ["party-1"]
    away.clear("party-1")
    assert away.expired() == [] and "party-1" not in away


def test_a_party_told_the_session_failed_when_it_reconnects_stops_with_that_cause():
    session, link, data = _broken_session()
    party = session.parties["party-1"]
    report = envelope(error=pb.ErrorReport(session_id="test-session", reporter="coordinator",
                                           party="party-3", phase="evaluation", kind="peer",
                                           message="its stream ended"))
    with pytest.raises(PeerError, match="party 'party-3' failed in phase 'evaluation', so "
                       "it aborted the session: its stream ended") as info:
        party.answer_challenge(report)
    assert info.value.party == "party-3" and party.phase == "failed"
    assert not party.can_resume

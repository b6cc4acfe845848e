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


def _party_2_broken_after_two_share_chunks():
    """A session run until party-2's link breaks after its second share chunk."""
    data = random_data(list(SIZES), 3, seed=12)
    session = Session(data, _params())
    link = Link(session)
    link.start()
    state = {"done": False}

    def when(sender, env, sent):
        if not state["done"] and sender == "party-2" and env.HasField("share") and sent == 2:
            state["done"] = True
            return True
        return False
    link.run(when)
    return data, session, link


def test_a_link_broken_in_the_shares_phase_gets_the_held_chunks_on_resume():
    data, session, link = _party_2_broken_after_two_share_chunks()
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


# -- the coordinator's side in detail: structured refusals, challenges, logs, counters ----

def _peer_refusal(call, party, phase, pattern):
    """``call()`` raises a PeerError blaming ``party`` in ``phase`` whose text (after the
    prefix naming them) matches ``pattern``."""
    import re
    prefix = re.escape(f"party {party!r} in phase {phase!r}: ")
    with pytest.raises(PeerError, match=f"^{prefix}{pattern}") as info:
        call()
    assert type(info.value) is PeerError
    assert (info.value.party, info.value.phase) == (party, phase)
    return info.value


def test_every_refusal_of_a_resume_names_the_stream_and_the_phase():
    session, link, data = _broken_session()
    c = link.c
    good = _forged_resume(link, "party-1")
    tile = envelope(resume_request=pb.ResumeRequest(session_id="test-session",
                                                    party_id="party-1"))
    _peer_refusal(lambda: c.resume("party-1", tile), "party-1", "evaluation",
                  r"expected a resume on the new stream, got 'resume_request'$")
    other = pb.Envelope()
    other.CopyFrom(good)
    other.resume.party_id = "party-2"  # party-2's resume on party-1's stream
    _peer_refusal(lambda: c.resume("party-1", other), "party-1", "evaluation",
                  r"resume of 'party-2' for session 'test-session' on the stream of "
                  r"'party-1'$")
    other.resume.party_id, other.resume.session_id = "party-1", "another-session"
    _peer_refusal(lambda: c.resume("party-1", other), "party-1", "evaluation",
                  r"resume of 'party-1' for session 'another-session' on the stream of "
                  r"'party-1'$")
    stranger = pb.Envelope()
    stranger.CopyFrom(good)
    stranger.resume.party_id = "stranger"  # a name outside the roster, consistently
    _peer_refusal(lambda: c.resume("stranger", stranger), "stranger", "evaluation",
                  r"resume of 'stranger' for session 'test-session' on the stream of "
                  r"'stranger'$")
    # a resume that claims more than the coordinator ever sent it
    greedy = pb.Envelope()
    greedy.CopyFrom(_forged_resume(link, "party-1"))
    party = session.parties["party-1"]
    party.received += 10**6
    try:
        greedy = _forged_resume(link, "party-1")  # signed with the inflated count
    finally:
        party.received -= 10**6
    _peer_refusal(lambda: c.resume("party-1", greedy), "party-1", "evaluation",
                  r"claims to have received \d+ envelopes, but only")
    assert c.error is None and c.away == {"party-1"} and c.resumes == 0
    link.resume("party-1")
    link.run()
    assert np.array_equal(c.outcome.integer, _exact(session, data))


def test_a_resume_before_the_partys_hello_or_after_the_failure_is_refused():
    data = random_data(list(SIZES), 3, seed=17)
    session = Session(data, _params())
    c = session.coordinator
    hellos = session.hellos()
    c.receive("party-0", hellos["party-0"])
    link = Link(session)
    bare = envelope(resume=pb.Resume(session_id="test-session", party_id="party-1",
                                     challenge=c.resume_challenge("party-1")
                                     .resume_challenge.challenge))
    _peer_refusal(lambda: c.resume("party-1", bare), "party-1",
                  "join", r"no hello of this party arrived in this run: nothing to resume$")
    with pytest.raises(PeerError):  # lost in join: the session fails at once
        c.party_lost("party-2", "its process ended")
    assert c.error is not None
    _peer_refusal(lambda: c.resume("party-0", _forged_resume(link, "party-0")), "party-0",
                  c.phase, r"session 'test-session' failed; no resume$")


def test_a_dropout_is_told_why_it_cannot_resume():
    session, link, data = _broken_session()
    link.c.party_lost("party-1", "did not reconnect within reconnect_grace = 5 s")
    _peer_refusal(lambda: link.c.resume("party-1", _forged_resume(link, "party-1")),
                  "party-1", "evaluation", r"cannot resume: it is a dropout \(its grace "
                  r"period ended, or it was lost\)$")


def test_a_party_over_the_hold_budget_is_told_that_cause_when_it_resumes():
    # a budget below one share chunk: every party a chunk is relayed to can no longer
    # resume (its log is dropped); when its stream breaks it is a dropout, and a resume is
    # refused with that cause, not the generic one
    data = random_data(list(SIZES), 3, seed=19)
    session = Session(data, _params(adversaries=0))
    from protocols import Coordinator
    session.coordinator = Coordinator("test-session", session.parameters, session.names,
                                      session.pinned, memory_budget=1)
    link = Link(session)
    link.start()
    link.run(_tile_break("party-1", 1))
    c = link.c
    assert "party-1" in c.lost and "party-1" in c._unresumable
    assert c.phase == "done"  # the other three finished the session meanwhile
    _peer_refusal(lambda: c.resume("party-1", _forged_resume(link, "party-1")), "party-1",
                  "done", r"cannot resume: holding the relayed share chunks for "
                  r"'party-1' until it resumes would exceed memory_budget = ")


class _Counting:
    """A ByteSource stand-in: the bytes 0, 1, 2, ... in order."""

    def __init__(self):
        self.at = 0

    def bytes(self, n):
        out = bytes((self.at + i) % 256 for i in range(n))
        self.at += n
        return out


def test_a_challenge_from_a_given_source_takes_its_bytes_then_the_key():
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    session, link, data = _broken_session()
    env = link.c.resume_challenge("party-1", _Counting())
    key = X25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
    assert env.resume_challenge.challenge == bytes(range(32))
    assert env.resume_challenge.ephemeral_public_key == key.public_key().public_bytes_raw()
    assert env.resume_challenge.session_id == "test-session"


def test_a_party_has_at_most_four_outstanding_challenges_and_others_keep_theirs():
    session, link, data = _broken_session()
    c = link.c
    theirs = [c.resume_challenge("party-2").resume_challenge for _ in range(4)]
    mine = [c.resume_challenge("party-1").resume_challenge for _ in range(5)]
    with pytest.raises(AuthenticationError):  # the fifth retired the oldest
        c.resume("party-1", _forged_resume(link, "party-1", challenge=mine[0]))
    out = c.resume("party-1", _forged_resume(link, "party-1", challenge=mine[1]))
    assert out[0][1].HasField("resume_accepted")
    out = c.resume("party-2", _forged_resume(link, "party-2", challenge=theirs[0]))
    assert out[0][1].HasField("resume_accepted")


def test_a_short_grace_period_still_makes_a_broken_stream_away(caplog):
    import logging
    data = random_data(list(SIZES), 3, seed=18)
    session = Session(data, _params(reconnect_grace=0.25, adversaries=0))
    link = Link(session)
    link.start()
    with caplog.at_level(logging.WARNING, logger="protocols"):
        link.run(_tile_break("party-1", 1))
    assert link.c.away == {"party-1"} and not link.c.lost
    assert "party 'party-1' away in phase 'evaluation' (its stream broke); it may resume " \
        "within 0.25 s" in [r.getMessage() for r in caplog.records]


def test_without_a_grace_period_the_break_is_logged_as_the_loss_with_its_reason(caplog):
    import logging
    data = random_data(list(SIZES), 3, seed=15)
    session = Session(data, _params(reconnect_grace=0.0, adversaries=0))
    link = Link(session)
    link.start()
    with caplog.at_level(logging.WARNING, logger="protocols"):
        link.run(_tile_break("party-1", 1))  # the link calls party_away with no reason
    assert "party-1" in link.c.lost and not link.c.away
    assert "party 'party-1' lost in phase 'evaluation': its stream broke" in \
        [r.getMessage() for r in caplog.records]


def test_a_resume_clears_away_counts_and_logs_and_the_next_resume_counts_afresh(caplog):
    import logging
    session, link, data = _broken_session()
    c = link.c
    with caplog.at_level(logging.WARNING, logger="protocols"):
        first = link.resume("party-1")
    assert "party-1" not in c.away and c.resumes == 1
    assert (f"party 'party-1' resumed in phase 'evaluation': {first.replayed} envelope(s) "
            f"re-sent to it, it had sent {first.received}") in \
        [r.getMessage() for r in caplog.records]
    # what the coordinator receives on the new stream is counted from zero
    arrived = []
    inner = c.receive

    def receive(sender, env):
        if sender == "party-1":
            arrived.append(env)
        return inner(sender, env)
    c.receive = receive
    for _ in range(50):  # a few envelopes of party-1 arrive, then its stream breaks again
        if len(arrived) >= 2 or not link.queue:
            break
        link.step()
    assert arrived, "party-1 sent nothing after its resume"
    link.cut("party-1")
    second = link.resume("party-1")
    assert second.received == len(arrived) and c.resumes == 2
    link.run()
    assert np.array_equal(c.outcome.integer, _exact(session, data))


def test_the_replayed_share_chunks_count_against_the_hold_budget_again():
    # what is re-sent on the new stream is held again until acknowledged, with the bytes
    # of every share chunk in it (what memory_budget bounds); other envelopes hold none
    data, session, link = _party_2_broken_after_two_share_chunks()
    c, party = link.c, session.parties["party-2"]
    party.resume_request()
    out = c.resume("party-2", party.answer_challenge(c.resume_challenge("party-2")))
    replayed = [e for _, e in out[1:]]
    chunks = sum(len(e.share.ciphertext) for e in replayed if e.HasField("share"))
    assert chunks > 0 and len(replayed) == out[0][1].resume_accepted.replayed
    assert c._outlogs["party-2"].bytes == chunks
    link.down.discard("party-2")
    for e in party.resumed(out[0][1]):
        link.queue.append(("coordinator", "party-2", e))
    link.queue += [("party-2", "coordinator", e) for e in replayed]
    link.run()
    assert np.array_equal(c.outcome.integer, _exact(session, data))


def test_a_party_outside_b_that_resumes_in_evaluation_is_told_no_held_tiles():
    data = random_data(list(SIZES), 3, seed=20)
    session = Session(data, _params(integrity="off"))  # any 3 of the 4 decode
    from protocols import Coordinator
    session.coordinator = Coordinator("test-session", session.parameters, session.names,
                                      session.pinned, responders=session.names[:3])
    link = Link(session)
    link.start()
    for _ in range(100_000):
        if link.c.phase == "evaluation" or not link.queue:
            break
        link.step()
    assert link.c.phase == "evaluation" and "party-3" not in link.c.responders
    link.cut("party-3")  # what is in flight to it is lost with the stream
    link.queue = [item for item in link.queue if item[0] != "party-3"]
    accepted = link.resume("party-3")
    assert len(accepted.held) == 0 and accepted.round == 1
    # the RoundStart it missed is re-sent and held again: no share chunk, so no bytes
    assert accepted.replayed >= 1 and link.c._outlogs["party-3"].bytes == 0
    link.run()
    assert np.array_equal(link.c.outcome.integer, _exact(session, data))


# -- the party's side in detail -----------------------------------------------------------

def _party_refusal(call, party, pattern):
    """``call()`` fails ``party`` with a PeerError blaming the coordinator in phase
    'evaluation' whose text (after the prefix) matches ``pattern``."""
    error = _peer_refusal(call, "coordinator", "evaluation", pattern)
    assert party.phase == "failed" and party.error is error
    return error


def test_a_party_that_cannot_resume_says_why_and_one_that_can_names_itself():
    data = random_data(list(SIZES), 3, seed=15)
    session = Session(data, _params(reconnect_grace=0.0, adversaries=0))
    link = Link(session)
    link.start()
    link.run(_tile_break("party-1", 1))
    from finite_field import ProtocolError
    with pytest.raises(ProtocolError, match=r"^party 'party-1' cannot resume in phase "
                       r"'evaluation' \(reconnect_grace = 0 s\)$"):
        session.parties["party-1"].resume_request()
    session, link, data = _broken_session()
    request = session.parties["party-1"].resume_request()
    assert request.HasField("resume_request")
    assert (request.resume_request.session_id, request.resume_request.party_id) == \
        ("test-session", "party-1")


def _challenge(session_id="test-session", challenge=bytes(32), key=bytes(range(32))):
    return envelope(resume_challenge=pb.ResumeChallenge(
        session_id=session_id, challenge=challenge, ephemeral_public_key=key))


@pytest.mark.parametrize("env, pattern", [
    (envelope(resume_accepted=pb.ResumeAccepted(session_id="test-session")),
     r"expected a resume challenge on the new stream, got 'resume_accepted'$"),
    (_challenge(session_id="another-session"),
     r"message for session 'another-session', expected 'test-session' \(replayed or "
     r"misrouted\)$"),
    (_challenge(challenge=bytes(31)),
     r"the resume challenge must hold a 32-byte challenge and a 32-byte key$"),
    (_challenge(key=bytes(31)),
     r"the resume challenge must hold a 32-byte challenge and a 32-byte key$"),
])
def test_a_party_refuses_a_wrong_challenge_and_fails_closed(env, pattern):
    session, link, data = _broken_session()
    party = session.parties["party-1"]
    _party_refusal(lambda: party.answer_challenge(env), party, pattern)


def _accepted(session_id="test-session", received=0):
    return envelope(resume_accepted=pb.ResumeAccepted(session_id=session_id,
                                                      received=received, round=1))


@pytest.mark.parametrize("env, pattern", [
    (_challenge(), r"expected the resume's acceptance, got 'resume_challenge'$"),
    (_accepted(session_id="another-session"),
     r"message for session 'another-session', expected 'test-session'"),
    (_accepted(received=10**6), r"claims to have received 1000000 envelopes, but only "),
])
def test_a_party_refuses_a_wrong_acceptance_and_fails_closed(env, pattern):
    session, link, data = _broken_session()
    party = session.parties["party-1"]
    _party_refusal(lambda: party.resumed(env), party, pattern)


def test_a_party_told_the_session_failed_instead_of_an_acceptance_stops_with_that_cause():
    session, link, data = _broken_session()
    party = session.parties["party-1"]
    report = envelope(error=pb.ErrorReport(session_id="test-session", reporter="coordinator",
                                           party="party-3", phase="evaluation", kind="peer",
                                           message="its stream ended"))
    with pytest.raises(PeerError, match="party 'party-3' failed in phase 'evaluation', so "
                       "it aborted the session: its stream ended$") as info:
        party.resumed(report)
    assert info.value.party == "party-3" and party.phase == "failed"
    assert party.error is info.value


def test_a_resumed_party_logs_what_it_re_sends_and_what_is_to_come(caplog):
    import logging
    session, link, data = _broken_session()
    party, c = session.parties["party-1"], link.c
    party.resume_request()
    out = c.resume("party-1", party.answer_challenge(c.resume_challenge("party-1")))
    accepted = out[0][1]
    with caplog.at_level(logging.INFO, logger="protocols"):
        again = party.resumed(accepted)
    assert (f"party 'party-1' resumed: {len(again)} envelope(s) re-sent, "
            f"{accepted.resume_accepted.replayed} to come from the coordinator") in \
        [r.getMessage() for r in caplog.records]
    assert len(again) >= 1  # the tile lost in flight at least


@pytest.mark.parametrize("step", ["answer_challenge", "resumed"])
def test_an_unexpected_failure_in_the_handshake_is_wrapped_naming_party_and_phase(
        step, monkeypatch):
    # fault injection: the session check raises something no check raises
    from finite_field import ProtocolError
    session, link, data = _broken_session()
    party, c = session.parties["party-1"], link.c

    def broken(*args):
        raise RuntimeError("injected")
    party.resume_request()
    challenge = c.resume_challenge("party-1")
    if step == "resumed":
        accepted = c.resume("party-1", party.answer_challenge(challenge))[0][1]
    monkeypatch.setattr(party, "_expect_session", broken)
    with pytest.raises(ProtocolError, match=r"^party 'party-1' failed in phase 'evaluation': "
                       r"unexpected RuntimeError$") as info:
        if step == "resumed":
            party.resumed(accepted)
        else:
            party.answer_challenge(challenge)
    assert isinstance(info.value.__cause__, RuntimeError) and party.phase == "failed"

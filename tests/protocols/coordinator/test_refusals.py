"""protocols/_coordinator.py pinned down: what a lying or confused party's message is
refused with (error class, the party blamed, the phase, the exact text), that a refusal
changes nothing but the failure, and the exact messages the coordinator sends back.
Found by mutation testing (docs/testing.md, "protocols/_coordinator.py").
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from finite_field import AuthenticationError, DeadlineError, IntegrityError, PeerError, ProtocolError
from protocols import Coordinator, SessionParameters, sign
from protocols._crypto import PROTOCOL_VERSION, RUN_NONCE_BYTES
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import chunk_rows
from protocols._party import hello_transcript
from protocol_helpers import Session, random_data

pytestmark = pytest.mark.timeout(120)

# adversaries=0 (best effort): these tests pin the round and dropout mechanics; the
# declared bound A has its own tests (tests/protocols/test_adversary_bound.py)
PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
SID = "test-session"


def _session(sizes=(4, 3, 5), params=PARAMS, seed=0, dim=3):
    return Session(random_data(list(sizes), dim, seed=seed), params)


def _says(error, party, phase, text, kind=PeerError):
    """``error`` is exactly a ``kind``, blames ``party`` in ``phase`` and says ``text``."""
    assert type(error) is kind
    assert (error.party, error.phase) == (party, phase)
    assert str(error) == f"party {party!r} in phase {phase!r}: {text}"


def _refused(coordinator, sender, env, kind=PeerError):
    """The coordinator refuses ``env`` with a ``kind`` and is failed in the phase it was
    in; returns the error."""
    phase = coordinator.phase
    with pytest.raises(ProtocolError) as info:
        coordinator.receive(sender, env)
    assert type(info.value) is kind
    assert coordinator.error is info.value
    assert (coordinator.phase, coordinator.failed_in) == ("failed", phase)
    return info.value


def _copy(env, **fields):
    out = pb.Envelope()
    out.CopyFrom(env)
    kind = out.WhichOneof("body")
    body = getattr(out, kind)
    for name, value in fields.items():
        if isinstance(value, list):
            body.ClearField(name)
            getattr(body, name).extend(value)
        else:
            setattr(body, name, value)
    return out


def _hello(session, hellos, name, **fields):
    """``name``'s hello with ``fields`` changed, validly signed again with its key."""
    env = _copy(hellos[name], **fields)
    env.hello.signature = sign(session.keys[name], hello_transcript(env.hello))
    return env


def _envelope(**body):
    env = pb.Envelope()
    for name, value in body.items():
        getattr(env, name).CopyFrom(value)
    return env


# -- join -------------------------------------------------------------------------------------

def test_every_valid_hello_gives_the_roster_in_config_order_with_exact_offsets():
    session = _session(sizes=(4, 3, 5))
    hellos = session.hellos()
    coordinator = session.coordinator
    out = []
    for name in ["party-2", "party-0", "party-1"]:  # arrival order is not roster order
        assert out == []
        out = coordinator.receive(name, hellos[name])
        assert coordinator.phase == ("shares" if name == "party-1" else "join")
    assert [d for d, _ in out] == ["party-0", "party-1", "party-2"]
    roster = out[0][1].roster
    assert all(e.roster == roster for _, e in out)
    assert (roster.session_id, roster.protocol_version) == (SID, PROTOCOL_VERSION)
    assert [e.hello for e in roster.parties] == [hellos[n].hello for n in session.names]
    assert [e.row_offset for e in roster.parties] == [0, 4, 7]
    assert roster.parameters == PARAMS.to_proto(PARAMS.plan(3))
    assert (coordinator.row_offsets, coordinator.rows, coordinator.n_total) == \
        ([0, 4, 7], [4, 3, 5], 12)
    assert coordinator.waiting_for() == ["party-0", "party-1", "party-2"]  # their Ready


def test_d_is_taken_from_the_hellos_when_the_config_leaves_it_open():
    params = SessionParameters(dim=0, bound=1.0, scale_bits=8)
    session = Session(random_data([2, 3, 2], 5, seed=1), params)
    hellos = session.hellos()
    out = []
    for name in session.names:
        out = session.coordinator.receive(name, hellos[name])
    roster = out[0][1].roster
    expected = SessionParameters(dim=5, bound=1.0, scale_bits=8)
    assert roster.parameters == expected.to_proto(expected.plan(3))
    assert session.coordinator.parameters.dim == 5 and session.coordinator.plan is not None


def test_a_hello_after_the_roster_is_refused_as_out_of_order():
    session = _session()
    hellos = session.hellos()
    for name in session.names:
        session.coordinator.receive(name, hellos[name])
    error = _refused(session.coordinator, "party-1", hellos["party-1"])
    _says(error, "party-1", "shares", "out-of-order hello in phase 'shares'")


def test_a_hello_claiming_another_party_is_refused_and_not_recorded():
    session = _session()
    hellos = session.hellos()
    error = _refused(session.coordinator, "party-1", hellos["party-0"])
    _says(error, "party-1", "join", "hello claims to be 'party-0'")
    assert session.coordinator.hellos == {}


def test_a_duplicate_hello_is_refused():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    error = _refused(session.coordinator, "party-0", hellos["party-0"])
    _says(error, "party-0", "join", "duplicate hello (rejected)")
    assert list(session.coordinator.hellos) == ["party-0"]


def test_a_hello_of_another_protocol_version_is_refused():
    session = _session()
    hellos = session.hellos()
    env = _hello(session, hellos, "party-0", protocol_version=PROTOCOL_VERSION + 1)
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join",
          f"protocol version {PROTOCOL_VERSION + 1}, expected {PROTOCOL_VERSION}")
    assert session.coordinator.hellos == {}


def test_a_hello_with_a_bad_signature_is_an_authentication_error_naming_sender_and_join():
    session = _session()
    hellos = session.hellos()
    env = _copy(hellos["party-1"], n_rows=4)  # not signed again
    error = _refused(session.coordinator, "party-1", env, kind=AuthenticationError)
    assert (error.party, error.phase) == ("party-1", "join")
    assert session.coordinator.hellos == {}


@pytest.mark.parametrize("key, nonce", [(31, RUN_NONCE_BYTES), (32, RUN_NONCE_BYTES - 1),
                                        (33, RUN_NONCE_BYTES + 1)])
def test_a_hello_with_a_wrong_key_or_nonce_length_is_refused(key, nonce):
    session = _session()
    hellos = session.hellos()
    env = _hello(session, hellos, "party-2", ephemeral_public_key=bytes(range(key)),
                 run_nonce=bytes(nonce))
    error = _refused(session.coordinator, "party-2", env)
    _says(error, "party-2", "join",
          f"hello carries a {key}-byte ephemeral key and a {nonce}-byte run nonce, expected "
          f"32 and {RUN_NONCE_BYTES}")
    assert session.coordinator.hellos == {}


def test_a_hello_with_another_d_than_the_config_is_refused():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    env = _hello(session, hellos, "party-1", dim=4)
    error = _refused(session.coordinator, "party-1", env)
    _says(error, "party-1", "join", "d must be equal for all parties; sent d=4, expected 3 "
          "(from the session config)")
    assert list(session.coordinator.hellos) == ["party-0"]


def test_without_a_configured_d_the_first_hello_sets_it_for_the_others():
    params = SessionParameters(dim=0, bound=1.0, scale_bits=8)
    session = Session(random_data([2, 3, 2], 5, seed=1), params)
    hellos = session.hellos()
    session.coordinator.receive("party-1", hellos["party-1"])  # the first to arrive
    session.coordinator.receive("party-2", hellos["party-2"])
    env = _hello(session, hellos, "party-0", dim=6)
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "d must be equal for all parties; sent d=6, expected 5 "
          "(from party 'party-1')")


def test_without_a_configured_d_a_first_hello_with_d_0_is_refused():
    params = SessionParameters(dim=0, bound=1.0, scale_bits=8)
    session = Session(random_data([2, 3, 2], 5, seed=1), params)
    hellos = session.hellos()
    env = _hello(session, hellos, "party-2", dim=0)
    error = _refused(session.coordinator, "party-2", env)
    _says(error, "party-2", "join", "d must be equal for all parties; sent d=0, expected 0 "
          "(from party 'party-2')")
    assert session.coordinator.hellos == {}


def test_a_hello_with_zero_rows_is_refused():
    session = _session()
    hellos = session.hellos()
    env = _hello(session, hellos, "party-0", n_rows=0)
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "sent n_rows=0, expected at least 1")


def _sum_session(rows=2, dim=3, n=3):
    params = SessionParameters(dim=dim, bound=1.0, scale_bits=8, kind="sum", rows=rows)
    return Session(random_data([rows] * n, dim, seed=2), params)


@pytest.mark.parametrize("n_rows", [1, 3])
def test_a_sum_hello_with_another_row_count_is_refused(n_rows):
    session = _sum_session(rows=2)
    hellos = session.hellos()
    env = _hello(session, hellos, "party-1", n_rows=n_rows)
    error = _refused(session.coordinator, "party-1", env)
    _says(error, "party-1", "join", f"sent n_rows={n_rows}, expected 2")


def test_a_sum_session_accepts_hellos_with_its_row_count():
    session = _sum_session(rows=2)
    hellos = session.hellos()
    out = []
    for name in session.names:
        out = session.coordinator.receive(name, hellos[name])
    assert [d for d, _ in out] == session.names and session.coordinator.phase == "shares"
    assert session.coordinator.rows == [2, 2, 2]


def test_a_hello_over_the_per_party_cap_is_refused_blaming_its_sender():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, max_rows_per_party=4)
    session = _session(sizes=(4, 3, 4), params=params)
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])  # exactly the cap: accepted
    env = _hello(session, hellos, "party-1", n_rows=5)
    error = _refused(session.coordinator, "party-1", env)
    _says(error, "party-1", "join", "'party-1' announces 5 rows, more than the session's "
          "max_rows_per_party = 4")
    assert list(session.coordinator.hellos) == ["party-0"]


def test_the_hello_that_passes_the_total_cap_is_refused_blaming_its_sender():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, max_rows_total=11)
    session = _session(sizes=(4, 3, 5), params=params)
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    session.coordinator.receive("party-2", hellos["party-2"])
    error = _refused(session.coordinator, "party-1", hellos["party-1"])
    _says(error, "party-1", "join", "the parties announce 12 rows in total, more than the "
          "session's max_rows_total = 11")
    assert list(session.coordinator.hellos) == ["party-0", "party-2"]


# -- entry points -----------------------------------------------------------------------------

def test_a_message_from_an_unknown_sender_fails_the_session_as_a_protocol_error():
    session = _session()
    hellos = session.hellos()
    error = _refused(session.coordinator, "mallory", hellos["party-0"], kind=ProtocolError)
    assert str(error) == ("unknown party 'mallory'; the session's parties are "
                          "['party-0', 'party-1', 'party-2']")
    reports = session.coordinator.abort()
    assert [d for d, _ in reports] == session.names
    for _, env in reports:
        assert env.error == pb.ErrorReport(session_id=SID, reporter="coordinator", party="",
                                           phase="join", kind="protocol", message=str(error))


def test_nothing_is_accepted_once_the_session_failed():
    session = _session()
    hellos = session.hellos()
    _refused(session.coordinator, "party-0", _copy(hellos["party-0"], party_id="party-2"))
    error = session.coordinator.error
    with pytest.raises(ProtocolError) as info:
        session.coordinator.receive("party-1", hellos["party-1"])
    assert type(info.value) is ProtocolError
    assert str(info.value) == "session 'test-session' is over; message from 'party-1' ignored"
    assert session.coordinator.error is error and session.coordinator.hellos == {}
    assert session.coordinator.failed_in == "join"
    assert session.coordinator.party_lost("party-1") == []
    assert session.coordinator.expire() == []


def test_nothing_is_accepted_once_the_session_is_done():
    session = _session()
    session.run_until("done")
    assert session.coordinator.outcome is not None
    with pytest.raises(ProtocolError) as info:
        session.coordinator.receive("party-0", _envelope(ready=pb.Ready(session_id=SID,
                                                                        party_id="party-0")))
    assert str(info.value) == "session 'test-session' is over; message from 'party-0' ignored"
    assert session.coordinator.error is None and session.coordinator.phase == "done"
    assert session.coordinator.party_lost("party-0") == [] and not session.coordinator.lost
    assert session.coordinator.expire() == []


def test_a_message_the_coordinator_never_receives_is_refused_naming_its_kind():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    env = _envelope(roster=pb.Roster(session_id=SID))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "unexpected message 'roster' (the coordinator never "
          "receives it)")


def test_a_message_before_the_hello_is_refused_as_out_of_order():
    session = _session()
    session.hellos()
    env = _envelope(ready=pb.Ready(session_id=SID, party_id="party-0"))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "out-of-order message 'ready' before the hello")


def test_an_error_report_before_the_hello_is_taken_as_a_report():
    session = _session()
    env = _envelope(error=pb.ErrorReport(session_id=SID, reporter="party-0", phase="join",
                                         kind="input", message="bad rows"))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "reported by 'party-0': input: bad rows")


def test_a_message_of_another_session_is_refused_in_the_phase_of_its_kind():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    env = _envelope(ready=pb.Ready(session_id="other", party_id="party-0"))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "shares", "message for session 'other', expected 'test-session' "
          "(replayed or misrouted)")


def test_a_hello_of_another_session_is_refused_in_join():
    session = _session()
    hellos = session.hellos()
    env = _hello(session, hellos, "party-0", session_id="other")
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "message for session 'other', expected 'test-session' "
          "(replayed or misrouted)")


def test_an_empty_envelope_fails_the_session_naming_the_party():
    session = _session()
    error = _refused(session.coordinator, "party-0", pb.Envelope())
    _says(error, "party-0", "join", "unexpected message None (the coordinator never "
          "receives it)")


# -- error reports ----------------------------------------------------------------------------

@pytest.mark.parametrize("report, text, phase", [
    (dict(phase="shares", kind="integrity", message="tag"), "integrity: tag", "shares"),
    (dict(phase="", kind="", message="m"), "error: m", "join"),
    (dict(phase="join", kind="peer", party="party-0", message="x"), "peer: x", "join"),
    (dict(phase="join", kind="peer", party="party-2", message="y"),
     "peer: y", "join"),
])
def test_an_error_report_blames_only_its_authenticated_sender(report, text, phase):
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    env = _envelope(error=pb.ErrorReport(session_id=SID, reporter="party-0", **report))
    error = _refused(session.coordinator, "party-0", env)
    claim = "" if report.get("party", "party-0") == "party-0" else \
        f" (its report names {report['party']!r})"
    _says(error, "party-0", phase, f"reported by 'party-0'{claim}: {text}")


def test_an_error_report_message_is_cut_at_500_characters():
    session = _session()
    env = _envelope(error=pb.ErrorReport(session_id=SID, phase="join", kind="peer",
                                         message="a" * 500 + "b" * 100))
    error = _refused(session.coordinator, "party-1", env)
    _says(error, "party-1", "join", "reported by 'party-1': peer: " + "a" * 500)


# -- abort ------------------------------------------------------------------------------------

def test_abort_tells_every_connected_party_who_failed_in_which_phase():
    session = _session()
    hellos = session.hellos()
    for name in session.names:
        session.coordinator.receive(name, hellos[name])
    error = _refused(session.coordinator, "party-2",
                     _envelope(ready=pb.Ready(session_id=SID, party_id="party-0")))
    reports = session.coordinator.abort()
    assert [d for d, _ in reports] == session.names
    for _, env in reports:
        assert env.error == pb.ErrorReport(
            session_id=SID, reporter="coordinator", party="party-2", phase="confirm",
            kind="peer", message=error.detail)  # who and where are the report's fields
    assert str(error) == f"party 'party-2' in phase 'confirm': {error.detail}"


def test_a_party_that_connects_after_the_abort_gets_the_same_report():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    _refused(session.coordinator, "party-2",
             _envelope(ready=pb.Ready(session_id=SID, party_id="party-0")))
    everyone = session.coordinator.abort()
    late = session.coordinator.abort(names=["party-1"])
    assert [d for d, _ in late] == ["party-1"]
    assert late[0][1] == dict(everyone)["party-1"]


def test_abort_of_a_deadline_skips_the_lost_party_and_says_deadline():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    session.coordinator.receive("party-2", hellos["party-2"])
    with pytest.raises(DeadlineError) as info:
        session.coordinator.expire()
    _says(info.value, "party-1", "join", "missed the deadline (still waiting for "
          "['party-1'])", kind=DeadlineError)
    reports = session.coordinator.abort()
    assert [d for d, _ in reports] == session.names  # expire does not mark anyone lost
    assert {(e.error.kind, e.error.party, e.error.phase) for _, e in reports} == \
        {("deadline", "party-1", "join")}


def test_abort_of_an_authentication_error_says_authentication():
    session = _session()
    hellos = session.hellos()
    _refused(session.coordinator, "party-1", _copy(hellos["party-1"], n_rows=9),
             kind=AuthenticationError)
    reports = session.coordinator.abort()
    assert {(e.error.kind, e.error.party, e.error.phase) for _, e in reports} == \
        {("authentication", "party-1", "join")}


def test_abort_without_a_failure_says_the_session_was_aborted():
    session = _session()
    reports = session.coordinator.abort()
    assert [d for d, _ in reports] == session.names
    assert {(e.error.kind, e.error.party, e.error.phase, e.error.message)
            for _, e in reports} == {("protocol", "", "join", "session aborted")}


def test_a_party_lost_in_join_fails_the_session_and_is_not_told():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    with pytest.raises(PeerError) as info:
        session.coordinator.party_lost("party-1", "stream closed")
    _says(info.value, "party-1", "join", "stream closed")
    assert session.coordinator.lost == {"party-1"}
    assert session.coordinator.failed_in == "join" and session.coordinator.phase == "failed"
    assert [d for d, _ in session.coordinator.abort()] == ["party-0", "party-2"]
    assert session.coordinator.party_lost("party-0") == []  # over: nothing more happens
    assert session.coordinator.lost == {"party-1"}


def test_a_party_lost_in_shares_fails_the_session_with_the_default_reason():
    session = _session()
    session.run_until("shares")
    with pytest.raises(PeerError) as info:
        session.coordinator.party_lost("party-2")
    _says(info.value, "party-2", "shares", "connection lost")


# -- shares -----------------------------------------------------------------------------------

def _in_shares(session):
    """Hellos and roster confirmations delivered; returns the share chunks the parties
    send (sender, envelope)."""
    hellos = session.hellos()
    out = []
    for name in session.names:
        out = session.coordinator.receive(name, hellos[name]) or out
    return [(s, e) for s, e in session.deliver_all(session.confirm(out)) if e.HasField("share")]


def test_a_share_chunk_is_relayed_unchanged_to_its_receiver_only():
    session = _session()
    chunks = _in_shares(session)
    sender, env = chunks[0]
    out = session.coordinator.receive(sender, env)
    assert out == [(env.share.receiver, env)]
    assert env.share.receiver != sender


def test_a_share_chunk_before_the_roster_is_refused_as_out_of_order():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    env = _envelope(share=pb.ShareChunk(session_id=SID, sender="party-0",
                                        receiver="party-1"))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "join", "out-of-order share chunk in phase 'join'")


def test_a_share_chunk_in_a_sum_session_is_refused_as_out_of_order():
    session = _sum_session()
    hellos = session.hellos()
    out = []
    for name in session.names:
        out = session.coordinator.receive(name, hellos[name]) or out
    session.confirm(out)
    assert session.coordinator.phase == "shares" and session.coordinator.confirmed
    env = _envelope(share=pb.ShareChunk(session_id=SID, sender="party-0",
                                        receiver="party-1"))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "shares", "out-of-order share chunk in phase 'shares'")


@pytest.mark.parametrize("field", ["sender", "receiver to itself", "receiver unknown"])
def test_a_misaddressed_share_chunk_is_refused(field):
    session = _session()
    chunks = _in_shares(session)
    sender, env = next((s, e) for s, e in chunks if s == "party-0")
    changes = {"sender": {"sender": "party-2"},
               "receiver to itself": {"receiver": "party-0"},
               "receiver unknown": {"receiver": "mallory"}}[field]
    bad = _copy(env, **changes)
    error = _refused(session.coordinator, "party-0", bad)
    _says(error, "party-0", "shares", f"share chunk from {bad.share.sender!r} to "
          f"{bad.share.receiver!r} sent by 'party-0'")


@pytest.mark.parametrize("field, value", [("round", 1), ("prime_index", None),
                                          ("total_chunks", 2), ("chunk_index", 1)])
def test_a_share_chunk_that_does_not_fit_the_schedule_is_refused(field, value):
    session = _session()
    chunks = _in_shares(session)
    sender, env = next((s, e) for s, e in chunks if s == "party-1")
    primes = len(session.coordinator.plan.primes)
    assert env.share.total_chunks == 1 and env.share.round == 0
    bad = _copy(env, **{field: primes if value is None else value})
    s = bad.share
    error = _refused(session.coordinator, "party-1", bad)
    _says(error, "party-1", "shares", f"share chunk (round {s.round}, prime {s.prime_index}, "
          f"chunk {s.chunk_index}/{s.total_chunks}) does not fit the schedule (round 0, 1 "
          "chunks per prime)")


def test_the_last_prime_and_chunk_of_the_schedule_are_relayed():
    # several chunks per prime: a party with more rows than one chunk holds
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)
    session = _session(sizes=(700, 3, 4), params=params)
    chunks = _in_shares(session)
    width = session.coordinator.plan.segment_length
    expected = chunk_rows(700, width, 4096)
    assert len(expected) > 1
    mine = [e for s, e in chunks if s == "party-0" and e.share.receiver == "party-1"]
    primes = len(session.coordinator.plan.primes)
    assert sorted((e.share.prime_index, e.share.chunk_index) for e in mine) == \
        [(k, c) for k in range(primes) for c in range(len(expected))]
    for env in mine:
        a, b = expected[env.share.chunk_index]
        assert len(env.share.ciphertext) == 4 * (b - a) * width + 16
        assert env.share.total_chunks == len(expected)
        assert session.coordinator.receive("party-0", env) == [("party-1", env)]
    last = _copy(mine[-1], chunk_index=len(expected))
    error = _refused(session.coordinator, "party-0", last)
    assert "does not fit the schedule" in str(error)


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_share_chunk_of_the_wrong_size_is_refused_with_both_sizes(delta):
    session = _session()
    chunks = _in_shares(session)
    sender, env = next((s, e) for s, e in chunks if s == "party-2")
    width = session.coordinator.plan.segment_length
    expected = 4 * 5 * width + 16
    assert len(env.share.ciphertext) == expected
    data = env.share.ciphertext
    bad = _copy(env, ciphertext=data[:-1] if delta < 0 else data + b"\0")
    error = _refused(session.coordinator, "party-2", bad)
    _says(error, "party-2", "shares", f"share chunk holds {expected + delta} bytes, expected "
          f"{expected}")


def test_a_duplicate_share_chunk_is_refused():
    session = _session()
    chunks = _in_shares(session)
    sender, env = chunks[0]
    session.coordinator.receive(sender, env)
    error = _refused(session.coordinator, sender, env)
    _says(error, sender, "shares", f"duplicate share chunk {env.share.chunk_index} "
          "(rejected)")


def test_the_same_chunk_index_to_another_receiver_or_prime_is_not_a_duplicate():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16)  # two primes
    session = _session(params=params)
    chunks = _in_shares(session)
    mine = [e for s, e in chunks if s == "party-0"]
    keys = {(e.share.receiver, e.share.prime_index, e.share.chunk_index) for e in mine}
    assert len(keys) == len(mine) == 4
    assert {e.share.chunk_index for e in mine} == {0}
    for env in mine:
        assert session.coordinator.receive("party-0", env) == [(env.share.receiver, env)]


# -- ready ------------------------------------------------------------------------------------

def _ready(name):
    return _envelope(ready=pb.Ready(session_id=SID, party_id=name))


def test_a_ready_in_join_is_refused_as_out_of_order():
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    error = _refused(session.coordinator, "party-0", _ready("party-0"))
    _says(error, "party-0", "join", "out-of-order ready in phase 'join'")


def test_a_ready_for_another_party_is_refused():
    session = _session()
    _in_shares(session)
    error = _refused(session.coordinator, "party-1", _ready("party-0"))
    _says(error, "party-1", "shares", "out-of-order ready in phase 'shares'")
    assert session.coordinator.ready == set()


def test_a_duplicate_ready_is_refused():
    session = _session()
    _in_shares(session)
    assert session.coordinator.receive("party-1", _ready("party-1")) == []
    error = _refused(session.coordinator, "party-1", _ready("party-1"))
    _says(error, "party-1", "shares", "duplicate ready (rejected)")
    assert session.coordinator.ready == {"party-1"}


def test_the_last_ready_starts_round_1_with_every_party_in_config_order():
    session = _session()
    _in_shares(session)
    coordinator = session.coordinator
    for name in ["party-2", "party-0"]:
        assert coordinator.receive(name, _ready(name)) == []
        assert coordinator.phase == "shares"
    assert coordinator.waiting_for() == ["party-1"]
    out = coordinator.receive("party-1", _ready("party-1"))
    start = pb.RoundStart(session_id=SID, round=1, responders=session.names)
    assert out == [(n, _envelope(round_start=start)) for n in session.names]
    assert (coordinator.phase, coordinator.round, coordinator.responders) == \
        ("evaluation", 1, session.names)


def test_a_chosen_responding_set_is_announced_in_config_order():
    data = random_data([2, 3, 2, 2], 3, seed=5)
    session = Session(data, PARAMS)
    session.coordinator = Coordinator(SID, PARAMS, session.names, session.pinned,
                                      responders=["party-3", "party-0", "party-1"])
    _in_shares(session)
    out = []
    for name in session.names:
        out = session.coordinator.receive(name, _ready(name))
    start = pb.RoundStart(session_id=SID, round=1,
                          responders=["party-0", "party-1", "party-3"])
    assert out == [(n, _envelope(round_start=start)) for n in session.names]
    assert session.coordinator.waiting_for() == ["party-0", "party-1", "party-3"]


# -- evaluation: rounds, dropouts, deadlines, group seeds -------------------------------------

FIVE = [f"party-{i}" for i in range(5)]


def _evaluation(sizes=(3, 2, 4, 3, 2), seed=7, params=PARAMS):
    """A session run by hand until round 1 started at the coordinator; returns it and the
    queue of (destination, sender, envelope) still to deliver."""
    session = Session(random_data(list(sizes), 3, seed=seed), params)
    return session, session.run_until("evaluation")


def _pump(session, queue, hold=lambda sender, env: False):
    """Deliver the queue in FIFO order until it is empty. Messages to the coordinator for
    which ``hold(sender, env)`` is true are kept back and returned; nothing is delivered to
    a party the coordinator counts as lost."""
    held = []
    for _ in range(100_000):
        if not queue:
            return held
        dest, sender, env = queue.pop(0)
        if dest == "coordinator":
            if hold(sender, env):
                held.append((sender, env))
                continue
            queue += [(d, "coordinator", e) for d, e in session.coordinator.receive(sender, env)]
        elif dest not in session.coordinator.lost:
            queue += [("coordinator", dest, e) for e in session.parties[dest].receive(env)]
    raise AssertionError("the session did not settle")


def _tiles_of(name):
    return lambda sender, env: sender == name and env.HasField("tile")


def _exact(session, x):
    from protocol_helpers import plaintext_sq_distances
    data = np.vstack([x[n] for n in session.names])
    return plaintext_sq_distances(data, 1.0, 8)


def _start(round_, responders):
    return _envelope(round_start=pb.RoundStart(session_id=SID, round=round_,
                                               responders=responders))


@pytest.mark.parametrize("how", ["lost", "deadline"])
def test_a_responder_missing_its_tiles_starts_round_2_without_it(how):
    data = random_data([3, 2, 4, 3, 2], 3, seed=7)
    session = Session(data, PARAMS)
    queue = session.run_until("evaluation")
    held = _pump(session, queue, hold=_tiles_of("party-4"))
    coordinator = session.coordinator
    assert held and coordinator.waiting_for() == ["party-4"] and coordinator.round == 1
    out = coordinator.party_lost("party-4") if how == "lost" else coordinator.expire()
    if how == "deadline":  # told why first (its stream may still carry it); not when gone
        dropped = _envelope(error=pb.ErrorReport(
            session_id=SID, reporter="coordinator", party="party-4", phase="evaluation",
            kind="dropped", message="missed the deadline of phase 'evaluation'; the "
            "session goes on without this party from round 2"))
        assert out[0] == ("party-4", dropped)
        with pytest.raises(PeerError) as info:
            list(session.parties["party-4"].receive(dropped))
        assert str(info.value) == (
            "coordinator reports: dropped this party in phase 'evaluation': missed the "
            "deadline of phase 'evaluation'; the session goes on without this party from "
            "round 2")
        assert (info.value.party, info.value.phase) == ("party-4", "evaluation")
        out = out[1:]
    assert out == [(n, _start(2, FIVE[:4])) for n in FIVE[:4]]
    assert (coordinator.round, coordinator.responders, coordinator.lost) == \
        (2, FIVE[:4], {"party-4"})
    assert coordinator.phase == "evaluation" and coordinator.error is None
    assert coordinator.waiting_for() == FIVE[:4]
    for sender, env in held:  # round 1's tiles still in flight: ignored
        assert coordinator.receive(sender, env) == []
    assert coordinator.waiting_for() == FIVE[:4] and coordinator.error is None
    _pump(session, [(d, "coordinator", e) for d, e in out])
    outcome = coordinator.outcome
    assert (outcome.round, outcome.responders, outcome.lost) == (2, FIVE[:4], ["party-4"])
    np.testing.assert_array_equal(outcome.integer, _exact(session, data))


def test_a_responder_lost_after_its_last_tile_changes_nothing():
    session, queue = _evaluation()
    held = _pump(session, queue, hold=_tiles_of("party-3"))
    coordinator = session.coordinator
    assert coordinator.waiting_for() == ["party-3"]
    assert coordinator.party_lost("party-4", "gone") == []  # it delivered everything
    assert (coordinator.round, coordinator.lost, coordinator.error) == (1, {"party-4"}, None)
    assert coordinator.party_lost("party-4", "again") == []
    out = []
    for sender, env in held:
        out = coordinator.receive(sender, env)
    assert [d for d, _ in out] == FIVE[:4]  # the results: not to the lost party
    assert coordinator.outcome.round == 1 and coordinator.outcome.lost == ["party-4"]


def test_a_party_outside_the_responding_set_lost_in_evaluation_changes_nothing():
    data = random_data([2, 3, 2, 2, 3], 3, seed=5)
    session = Session(data, PARAMS)
    session.coordinator = Coordinator(SID, PARAMS, session.names, session.pinned,
                                      responders=FIVE[:4])
    session.run_until("evaluation")
    coordinator = session.coordinator
    assert coordinator.responders == FIVE[:4]
    assert coordinator.party_lost("party-4") == []
    assert (coordinator.round, coordinator.phase, coordinator.error) == (1, "evaluation", None)


@pytest.mark.parametrize("reason, kind", [("connection lost", PeerError),
                                          ("missed the deadline", DeadlineError),
                                          ("stream reset", PeerError)])
def test_a_dropout_that_leaves_too_few_responders_fails_with_its_kind(reason, kind):
    session, queue = _evaluation(sizes=(3, 2, 4))
    held = _pump(session, queue, hold=_tiles_of("party-1"))
    coordinator = session.coordinator
    assert held and coordinator.waiting_for() == ["party-1"]
    with pytest.raises(PeerError) as info:
        coordinator.party_lost("party-1", reason)
    _says(info.value, "party-1", "evaluation", f"{reason}; only 2 parties remain "
          "(['party-0', 'party-2']) and decoding needs 3", kind=kind)
    assert coordinator.round == 1 and coordinator.failed_in == "evaluation"


def test_a_deadline_in_evaluation_with_too_few_left_names_the_first_missing_party():
    session, queue = _evaluation(sizes=(3, 2, 4, 2))
    held = _pump(session, queue, hold=lambda s, e: s in ("party-1", "party-3")
                 and e.HasField("tile"))
    coordinator = session.coordinator
    assert held and coordinator.waiting_for() == ["party-1", "party-3"]
    with pytest.raises(DeadlineError) as info:
        coordinator.expire()
    _says(info.value, "party-1", "evaluation", "missed the deadline; only 2 parties remain "
          "(['party-0', 'party-2']) and decoding needs 3", kind=DeadlineError)
    # not dropped (there is no session to go on with): told of the abort like the rest
    assert coordinator.lost == set()
    assert [name for name, _ in coordinator.abort()] == ["party-0", "party-1", "party-2",
                                                          "party-3"]


def test_a_deadline_in_shares_names_the_first_party_without_ready():
    session = _session()
    _in_shares(session)
    session.coordinator.receive("party-1", _ready("party-1"))
    with pytest.raises(DeadlineError) as info:
        session.coordinator.expire()
    _says(info.value, "party-0", "shares", "missed the deadline (still waiting for "
          "['party-0', 'party-2'])", kind=DeadlineError)


def test_an_unchecked_round_is_announced_once_and_a_checked_one_not(caplog):
    with caplog.at_level(logging.WARNING, logger="protocols"):
        session, _ = _evaluation(sizes=(3, 2, 4))
    unchecked = [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
    assert len(unchecked) == 1
    assert unchecked[0].getMessage() == (
        "session 'test-session': NO INTEGRITY CHECK in round 1: 3 responders leave r = 0 "
        "redundant evaluations (decoding needs 3), so a party that computes or shares "
        "wrongly would go undetected")
    assert session.coordinator.checks is None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="protocols"):
        session, _ = _evaluation(sizes=(3, 2, 4, 3))
        off = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="off")
        _evaluation(sizes=(3, 2, 4), params=off)
    assert not [r for r in caplog.records if "NO INTEGRITY CHECK" in r.getMessage()]
    assert session.coordinator.checks is not None


def _seeding(seed=7):
    """Round 1 of five parties started; returns the session and every group seed the
    parties sent, as (sender, envelope), not yet delivered."""
    session, queue = _evaluation(seed=seed)
    held = _pump(session, queue, hold=lambda s, e: e.HasField("group_seed"))
    assert held and all(e.HasField("group_seed") for _, e in held)
    return session, held


def test_every_group_seed_is_relayed_to_its_receiver_once():
    session, seeds = _seeding()
    coordinator = session.coordinator
    sets = coordinator.checks.member_sets
    for sender, env in seeds:
        members = tuple(env.group_seed.members)
        assert members in sets and members[0] == sender == env.group_seed.sender
        assert coordinator.receive(sender, env) == [(env.group_seed.receiver, env)]
    sender, env = seeds[-1]
    members = list(env.group_seed.members)
    error = _refused(coordinator, sender, env)
    _says(error, sender, "evaluation", f"duplicate group seed for {members} to "
          f"{env.group_seed.receiver!r}")


def _misfit(session, sender, env):
    msg = env.group_seed
    error = _refused(session.coordinator, sender, env)
    _says(error, sender, "evaluation", f"group seed (round {msg.round}, group "
          f"{list(msg.members)}, to {msg.receiver!r}, {len(msg.ciphertext)} bytes) does not "
          "fit round 1's groups")


@pytest.mark.parametrize("change", ["claimed sender", "round", "unknown group",
                                    "not the leader", "receiver is the leader",
                                    "receiver outside the group", "short", "long"])
def test_a_group_seed_that_does_not_fit_the_round_is_refused(change):
    session, seeds = _seeding()
    sender, env = seeds[0]
    members = list(env.group_seed.members)
    outsider = next(n for n in FIVE if n not in members)
    box = env.group_seed.ciphertext
    assert len(box) == 48
    if change == "not the leader":  # a member resends it as its own, to a member
        sender = members[1]
        env = _copy(env, sender=sender, receiver=members[2])
    else:
        env = _copy(env, **{"claimed sender": {"sender": members[1]},
                            "round": {"round": 2},
                            "unknown group": {"members": members[:1] + [outsider]
                                              + members[2:]},
                            "receiver is the leader": {"receiver": members[0]},
                            "receiver outside the group": {"receiver": outsider},
                            "short": {"ciphertext": box[:-1]},
                            "long": {"ciphertext": box + b"\0"}}[change])
    _misfit(session, sender, env)


def test_a_group_seed_of_an_abandoned_round_is_ignored():
    session, seeds = _seeding()
    coordinator = session.coordinator
    sender, env = next((s, e) for s, e in seeds if s != "party-4")
    out = coordinator.party_lost("party-4")
    assert coordinator.round == 2 and [d for d, _ in out] == FIVE[:4]
    assert coordinator.receive(sender, env) == []
    assert coordinator.error is None and coordinator._seeds_relayed == set()


def test_a_group_seed_of_a_round_not_yet_started_is_refused():
    session, seeds = _seeding()
    sender, env = seeds[0]
    session.coordinator.party_lost("party-4")
    _misfit_round = _copy(env, round=3)
    error = _refused(session.coordinator, sender, _misfit_round)
    assert "does not fit round 2's groups" in str(error)


# -- construction and bookkeeping -------------------------------------------------------------

def _pins(names):
    return {n: bytes([i + 1]) * 32 for i, n in enumerate(names)}


def test_a_coordinator_starts_in_join_waiting_for_every_party():
    names = ["c", "a", "b"]
    pins = _pins(names) | {"extra": bytes(32)}
    coordinator = Coordinator(7, PARAMS, iter(names), pins)
    assert coordinator.session_id == "7" and coordinator.names == names
    assert coordinator.identities == {n: bytes([i + 1]) * 32 for i, n in enumerate(names)}
    assert (coordinator.phase, coordinator.round, coordinator.error, coordinator.outcome) == \
        ("join", 0, None, None)
    assert coordinator.waiting_for() == names and coordinator.alive == names
    assert coordinator.min_responders == 3 and coordinator.plan == PARAMS.plan(3)
    assert coordinator.parameters == PARAMS.with_plan(PARAMS.plan(3))
    assert coordinator.stats == {p: [0.0, 0] for p in ("join", "shares", "evaluation",
                                                       "decode", "result")}
    open_d = Coordinator("s", SessionParameters(dim=0, bound=1.0), names, pins)
    assert open_d.plan is None


def test_a_coordinator_refuses_duplicate_names_and_unpinned_parties():
    with pytest.raises(ValueError) as info:
        Coordinator("s", PARAMS, ["a", "b", "a"], _pins(["a", "b"]))
    assert str(info.value) == "party names must be unique, got ['a', 'b', 'a']"
    with pytest.raises(ValueError) as info:
        Coordinator("s", PARAMS, ["a", "b", "c", "d"], _pins(["a", "c"]))
    assert str(info.value) == "no pinned identity key for parties ['b', 'd']"


@pytest.mark.parametrize("responders, text", [
    (["a", "x", "b"], "responders must be distinct parties of ['a', 'b', 'c', 'd'], got "
                      "['a', 'x', 'b']"),
    (["a", "b", "a"], "responders must be distinct parties of ['a', 'b', 'c', 'd'], got "
                      "['a', 'b', 'a']"),
    (["d", "a"], "the responding set needs at least 3 parties, got 2"),
])
def test_a_coordinator_refuses_a_responding_set_that_cannot_work(responders, text):
    from finite_field import ParameterError
    names = ["a", "b", "c", "d"]
    with pytest.raises(ParameterError) as info:
        Coordinator("s", PARAMS, names, _pins(names), responders=responders)
    assert str(info.value) == text


def test_the_smallest_responding_set_is_accepted():
    names = ["a", "b", "c", "d"]
    coordinator = Coordinator("s", PARAMS, names, _pins(names), responders=("d", "b", "a"))
    assert coordinator._first_responders == ["d", "b", "a"]


def test_transparent_mode_is_announced_loudly(caplog):
    names = ["a", "b", "c"]
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, mode="transparent")
    with caplog.at_level(logging.WARNING, logger="protocols"):
        Coordinator("s", params, names, _pins(names))
        Coordinator("s", PARAMS, names, _pins(names))
    assert [r.getMessage() for r in caplog.records] == [
        "session 's' runs in TRANSPARENT mode: the coordinator learns every per-segment "
        "distance matrix, not only D"]


_PHASE = {"hello": "join", "roster": "join", "confirmation": "shares",
          "confirmations": "shares", "share": "shares", "ready": "shares",
          "round_start": "evaluation", "tile": "evaluation", "group_seed": "evaluation",
          "result": "result"}


def test_the_stats_count_every_byte_received_and_sent_in_its_phase():
    session = Session(random_data([3, 2, 4, 3], 3, seed=7), PARAMS)
    coordinator = session.coordinator
    counted = {p: 0 for p in ("join", "shares", "evaluation", "decode", "result")}
    queue = [("coordinator", n, e) for n, e in session.hellos().items()]
    while queue:
        dest, sender, env = queue.pop(0)
        if dest == "coordinator":
            counted[_PHASE[env.WhichOneof("body")]] += env.ByteSize()
            for d, e in coordinator.receive(sender, env):
                counted[_PHASE[e.WhichOneof("body")]] += e.ByteSize()
                queue.append((d, "coordinator", e))
        else:
            queue += [("coordinator", dest, e) for e in session.parties[dest].receive(env)]
    stats = coordinator.outcome.stats
    assert {p: b for p, (_, b) in stats.items()} == counted
    assert all(counted[p] > 0 for p in ("join", "shares", "evaluation", "result"))
    assert all(seconds > 0 for p, (seconds, _) in stats.items())  # every phase was passed
    assert coordinator.phase == "done"


# -- integrity: what a detected deviation does ------------------------------------------------

def _plus_one(env, entries, n):
    """``env`` (a tile of an n x n matrix) with the entries (i, j) one higher modulo p: an
    in-range lie about those evaluations."""
    a = env.tile.row_start
    values = np.frombuffer(env.tile.values, dtype="<u4").copy().reshape(-1, n - a)
    for i, j in entries:
        assert a <= i < env.tile.row_stop and int(values[i - a, j - a]) + 1 < 2**31 - 1
        values[i - a, j - a] += 1
    return _copy(env, values=values.tobytes())


# rows of the five parties of (3, 2, 4, 3, 2): 0-2, 3-4, 5-8, 9-11, 12-13; an evaluator
# is named when its wrong entries have owners no single other party shares
SPREAD = [(0, 5), (9, 12)]


#: The liars' tests declare A = 1 (one deviator: location within radius min(s/2, s - 1)).
LIE_PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=1)


def _lying(sizes, liars, params=LIE_PARAMS, lose=None, seed=7):
    """Round 1 with every tile of ``liars`` (party -> entry) held back, then delivered with
    one entry of its first tile one higher; ``lose`` is lost first, after it delivered
    everything. Returns the session, the messages the last tile produced (or the error
    it raised) and every tile of round 1."""
    data = random_data(list(sizes), 3, seed=seed)
    session = Session(data, params)
    queue = session.run_until("evaluation")
    held = _pump(session, queue, hold=lambda s, e: s in liars and e.HasField("tile"))
    for name in [lose] if isinstance(lose, str) else lose or []:
        assert session.coordinator.party_lost(name) == []
    seen, lied = set(), []
    for sender, env in held:
        if sender not in seen:
            seen.add(sender)
            env = _plus_one(env, liars[sender], sum(sizes))
        lied.append((sender, env))
    out, error = None, None
    try:
        for sender, env in lied:
            out = session.coordinator.receive(sender, env)
    except ProtocolError as raised:
        error = raised
    return session, data, out, error, lied


def test_a_located_lie_under_detect_is_excluded_and_the_rerun_is_exact(caplog):
    with caplog.at_level(logging.WARNING, logger="protocols"):
        session, data, out, error, lied = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD})
    coordinator = session.coordinator
    assert error is None
    rest = ["party-0", "party-2", "party-3", "party-4"]
    assert out == [(n, _start(2, rest)) for n in FIVE]
    assert (coordinator.round, coordinator.phase, coordinator.responders) == \
        (2, "evaluation", rest)
    what = ("2 entries failed the parity checks in round 1 (0 could not be located within "
            "radius 1 of s = 2 checks)")
    who = "party 'party-1' deviated (evaluator)"
    assert coordinator.deviations == [{"round": 1, "named": ["party-1"],
                                       "suspects": [["party-1"]],
                                       "description": f"{what}: {who}",
                                       "action": "excluded"}]
    messages = [r.getMessage() for r in caplog.records]
    assert f"session 'test-session': integrity: {what}: {who}" in messages
    assert ("round 1 rejected by the integrity checks; rerunning without ['party-1'] with "
            f"{rest}") in messages
    sender, env = lied[-1]  # a replay of the rejected round: ignored
    assert coordinator.receive(sender, env) == [] and coordinator.error is None
    _pump(session, [(d, "coordinator", e) for d, e in out])
    outcome = coordinator.outcome
    assert (outcome.round, outcome.responders) == (2, rest)
    np.testing.assert_array_equal(outcome.integer, _exact(session, data))


def test_a_located_lie_under_correct_is_corrected_in_round_1():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="correct")
    session, data, out, error, _ = _lying((3, 2, 4, 3, 2), {"party-2": [(0, 3), (9, 12)]},
                                              params=params)
    outcome = session.coordinator.outcome
    assert error is None and [d for d, _ in out] == FIVE
    assert (outcome.round, outcome.responders) == (1, FIVE)
    assert [d["action"] for d in outcome.deviations] == ["corrected"]
    assert outcome.deviations[0]["named"] == ["party-2"]
    np.testing.assert_array_equal(outcome.integer, _exact(session, data))


def test_a_located_lie_that_leaves_too_few_for_a_checked_rerun_names_the_liar():
    session, data, out, error, _ = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD},
                                             lose="party-4")
    assert type(error).__name__ == "DeviationError" and session.coordinator.outcome is None
    assert (error.named, error.suspects, error.party, error.phase) == \
        (("party-1",), (("party-1",),), "party-1", "decode")
    assert str(error) == (
        "integrity check failed in phase 'decode': 2 entries failed the parity checks in "
        "round 1 (0 could not be located within radius 1 of s = 2 checks): party 'party-1' "
        "deviated (evaluator); excluding ['party-1'] leaves 3 responders, a rerun checked "
        "against the deviators left needs 4, so the session returns nothing")
    assert session.coordinator.failed_in == "decode"


def test_a_rerun_needs_a_check_for_every_deviator_left_not_just_one():
    # m = 9, A = 3 (s = 6, radius 3): party-1 lies on four disjoint owner pairs, so only it
    # explains them with <= 3 parties and it is named. Four parties are lost after their
    # uploads: 4 remain, and the deviators left (A' = 2) need K + 2 = 5 for a checked rerun
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=3)
    session, data, out, error, _ = _lying(
        (1,) * 9, {"party-1": [(0, 2), (3, 4), (5, 6), (7, 8)]}, params=params,
        lose=[f"party-{i}" for i in range(5, 9)])
    assert type(error).__name__ == "DeviationError" and session.coordinator.outcome is None
    assert error.named == ("party-1",)
    assert str(error).endswith("excluding ['party-1'] leaves 4 responders, a rerun checked "
                               "against the deviators left needs 5, so the session returns "
                               "nothing")


def test_a_lie_one_check_cannot_locate_excludes_nobody():
    session, data, out, error, _ = _lying((3, 2, 4, 3), {"party-2": [(0, 0)]})
    assert type(error).__name__ == "DeviationError"
    assert (error.named, error.suspects, error.party) == ((), (), None)
    assert str(error) == (
        "integrity check failed in phase 'decode': 1 entries failed the parity checks in "
        "round 1 (1 could not be located within radius 0 of s = 1 checks): no error could "
        "be located; nobody can be excluded, so the session returns nothing")


def test_more_liars_than_the_checks_can_place_excludes_nobody():
    session, data, out, error, _ = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD,
                                                           "party-3": [(0, 6), (3, 12)]})
    assert type(error).__name__ == "DeviationError"
    assert (error.named, error.suspects) == ((), ())
    assert str(error) == (
        "integrity check failed in phase 'decode': 4 entries failed the parity checks in "
        "round 1 (0 could not be located within radius 1 of s = 2 checks): more than the "
        "declared A = 1 parties deviate (no explanation of the errors is that small); nobody "
        "can be excluded, so the session returns nothing")


def test_rounds_and_dropouts_are_logged_once_each(caplog):
    session, queue = _evaluation()
    assert _pump(session, queue, hold=_tiles_of("party-4"))
    coordinator = session.coordinator
    with caplog.at_level(logging.INFO, logger="protocols"):
        coordinator.party_lost("party-4", "stream closed")
        assert coordinator.party_lost("party-4", "stream closed") == []  # known: no news
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "party 'party-4' lost in phase 'evaluation': stream closed"),
        ("WARNING", "round 1 abandoned without unmasking (['party-4']: stream closed); "
                    f"retrying with {FIVE[:4]}"),
        ("INFO", f"session 'test-session': round 2 with responders {FIVE[:4]}")]


@pytest.mark.parametrize("where", ["shares", "unchecked round"])
def test_a_group_seed_without_groups_is_refused(where):
    if where == "shares":
        session = _session()
        _in_shares(session)
        round_ = 0
    else:
        session, _ = _evaluation(sizes=(3, 2, 4))
        assert session.coordinator.checks is None
        round_ = 1
    env = _envelope(group_seed=pb.GroupSeed(session_id=SID, round=round_, sender="party-0",
                                            receiver="party-1",
                                            members=["party-0", "party-1", "party-2"],
                                            ciphertext=bytes(48)))
    error = _refused(session.coordinator, "party-0", env)
    _says(error, "party-0", "evaluation", f"group seed (round {round_}, group ['party-0', "
          f"'party-1', 'party-2'], to 'party-1', 48 bytes) does not fit round {round_}'s "
          "groups")


@pytest.mark.parametrize("sizes, params, status", [
    ((3, 2, 4, 3, 2), LIE_PARAMS,
     "checked: s = 2 parity check(s) over 5 responders, radius 1, A = 1"),
    ((3, 2, 4, 3, 2), SessionParameters(dim=3, bound=1.0, scale_bits=8),  # default A = r
     "checked: s = 2 parity check(s) over 5 responders, radius 0, A = 2"),
    ((3, 2, 4, 3), PARAMS, "checked: s = 1 parity check(s) over 4 responders, radius 0, A = 0"),
    ((3, 2, 4), PARAMS, "unchecked: r = 0 redundant responders"),
    ((3, 2, 4, 3, 2), SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="off"),
     "off"),
])
def test_every_result_says_what_the_checks_covered(sizes, params, status):
    session, queue = _evaluation(sizes=sizes, params=params)
    _pump(session, queue)
    assert session.coordinator.outcome.integrity == status
    assert {p.result.integrity for p in session.parties.values()} == {status}


def test_a_sum_result_says_integrity_off():
    session = _sum_session()
    session.run_until("done")
    assert session.coordinator.outcome.integrity == "off"


def test_every_party_is_told_the_exact_deviation_record():
    session, data, out, error, lied = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD})
    _pump(session, [(d, "coordinator", e) for d, e in out])
    [record] = session.coordinator.outcome.deviations
    expected = pb.Deviation(round=1, named=["party-1"],
                            suspects=[pb.Suspects(parties=["party-1"])], action="excluded",
                            description=record["description"])
    assert record["description"].endswith(": party 'party-1' deviated (evaluator)")
    for name in FIVE:
        assert list(session.parties[name].result.deviations) == [expected]


def _lie_again(session, out, liar, entries):
    """Deliver the rerun's RoundStarts ``out``; hold ``liar``'s tiles of the new round,
    then deliver them with ``entries`` of its first tile one higher. Returns the messages
    the last tile produced, or the error it raised."""
    n = session.coordinator.n_total
    held = _pump(session, [(d, "coordinator", e) for d, e in out],
                 hold=lambda s, e: s == liar and e.HasField("tile"))
    assert held, f"{liar} uploaded nothing in round {session.coordinator.round}"
    out, error = None, None
    try:
        for index, (sender, env) in enumerate(held):
            out = session.coordinator.receive(sender, _plus_one(env, entries, n)
                                              if index == 0 else env)
    except ProtocolError as raised:
        error = raised
    return out, error


#: nine parties of one row each (row i is party-i's), A = 2: a rerun without one liar is
#: still checked against the one left
NINE = [f"party-{i}" for i in range(9)]
TWO_LIARS = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=2)


def test_a_second_liar_in_the_rerun_is_excluded_with_the_first_counted_against_a():
    # round 1: party-1 lies on three disjoint owner pairs: no two other parties explain
    # them, so it is named and excluded. Round 2: party-2 lies on (0, 3) and (4, 5). With
    # party-1 known, one deviator is left to explain them (A - 1 = 1): only {party-2}
    # does, so it is named. (Not counting party-1 would leave 2, and {party-0, party-4}
    # would explain them as well: nobody named.)
    session, data, out, error, _ = _lying((1,) * 9, {"party-1": [(0, 2), (3, 4), (5, 6)]},
                                          params=TWO_LIARS)
    assert error is None and session.coordinator.round == 2
    out, error = _lie_again(session, out, "party-2", [(0, 3), (4, 5)])
    coordinator = session.coordinator
    assert error is None
    rest = [p for p in NINE if p not in ("party-1", "party-2")]
    assert (coordinator.round, coordinator.responders) == (3, rest)
    first, second = coordinator.deviations
    assert (first["round"], first["named"], first["action"]) == (1, ["party-1"], "excluded")
    assert (second["round"], second["named"], second["suspects"], second["action"]) == \
        (2, ["party-2"], [["party-2"]], "excluded")
    assert second["description"].startswith("2 entries failed the parity checks in round 2 ")
    assert second["description"].endswith(
        ": party 'party-2' deviated (evaluator) (already excluded: 'party-1')")
    _pump(session, [(d, "coordinator", e) for d, e in out])
    outcome = coordinator.outcome
    assert (outcome.round, outcome.responders) == (3, rest)
    np.testing.assert_array_equal(outcome.integer, _exact(session, data))


def test_a_third_liar_past_a_ends_the_session_naming_the_two_excluded():
    # A = 2: party-1 and party-2 are excluded in rounds 1 and 2; party-3 lies in round 3,
    # where no deviator is left to explain it: more than A deviate, the session fails closed
    session, data, out, error, _ = _lying((1,) * 9, {"party-1": [(0, 2), (3, 4), (5, 6)]},
                                          params=TWO_LIARS)
    out, error = _lie_again(session, out, "party-2", [(0, 3), (4, 5)])
    assert error is None and session.coordinator.round == 3
    out, error = _lie_again(session, out, "party-3", [(0, 4), (5, 6)])
    assert type(error).__name__ == "DeviationError" and session.coordinator.outcome is None
    assert (error.named, error.suspects) == (("party-1", "party-2"), ())
    assert str(error).endswith(
        ": more than the declared A = 2 parties deviate (no explanation of the errors is "
        "that small) (already excluded: 'party-1', 'party-2'); nobody can be excluded, so "
        "the session returns nothing")


def test_errors_the_excluded_parties_explain_name_nobody_and_end_the_session():
    # round 2's lies all touch party-1's row; party-1, excluded in round 1, explains every
    # one of them (it counts against A and explains what it can), so nobody beyond it is
    # named, nobody is excluded and the session fails closed
    session, data, out, error, _ = _lying((1,) * 9, {"party-1": [(0, 2), (3, 4), (5, 6)]},
                                          params=TWO_LIARS)
    assert error is None
    out, error = _lie_again(session, out, "party-2", [(1, 3), (1, 6)])
    assert type(error).__name__ == "DeviationError" and session.coordinator.outcome is None
    assert (error.named, error.suspects) == (("party-1",), ())
    assert str(error).startswith("integrity check failed in phase 'decode': 2 entries "
                                 "failed the parity checks in round 2 ")
    assert str(error).endswith(": the parties already excluded ('party-1') explain every "
                               "located error; nobody can be excluded, so the session "
                               "returns nothing")


def test_more_liars_than_the_checks_can_place_are_not_corrected_either():
    # every wrong entry alone is within the radius, but no one set of at most radius
    # parties explains them all: fail closed, never a "corrected" result
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="correct",
                               adversaries=1)
    session, data, out, error, _ = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD,
                                                           "party-3": [(0, 6), (3, 12)]},
                                          params=params)
    assert type(error).__name__ == "DeviationError" and session.coordinator.outcome is None
    assert "more than the declared A = 1 parties deviate (no explanation of the errors is " \
        "that small); nobody can be excluded" in str(error)
    assert session.coordinator.deviations == []


# -- failures that are not a party's protocol violation ---------------------------------------

def test_a_failure_outside_the_protocol_is_wrapped_naming_the_coordinator_and_phase(caplog):
    # d open in the config, every hello agrees on a d no prime plan can hold: the plan
    # fails when the roster is built (a ParameterError, not a ProtocolError)
    from finite_field import ParameterError
    params = SessionParameters(dim=0, bound=1.0, scale_bits=16)
    session = Session(random_data([2, 3, 2], 3, seed=1), params)
    original = session.hellos()
    signed = {n: _hello(session, original, n, dim=2**32 - 1) for n in session.names}
    coordinator = session.coordinator
    coordinator.receive("party-0", signed["party-0"])
    coordinator.receive("party-1", signed["party-1"])
    with caplog.at_level(logging.WARNING, logger="protocols"):
        with pytest.raises(ProtocolError) as info:
            coordinator.receive("party-2", signed["party-2"])
    error = info.value
    assert type(error) is ProtocolError and isinstance(error.__cause__, ParameterError)
    assert str(error) == f"the coordinator failed in phase 'join': {error.__cause__}"
    assert error.phase == "join" and coordinator.failed_in == "join"
    assert [r.getMessage() for r in caplog.records] == [
        f"session 'test-session' failed in phase 'join': {error}"]
    assert {(e.error.kind, e.error.party, e.error.phase) for _, e in coordinator.abort()} == \
        {("protocol", "", "join")}


def test_abort_reports_the_phase_the_error_names():
    # a Ready of another session refused in join names phase "shares" (its kind's phase)
    session = _session()
    hellos = session.hellos()
    session.coordinator.receive("party-0", hellos["party-0"])
    _refused(session.coordinator, "party-0",
             _envelope(ready=pb.Ready(session_id="other", party_id="party-0")))
    assert session.coordinator.failed_in == "join"
    assert {(e.error.party, e.error.phase) for _, e in session.coordinator.abort()} == \
        {("party-0", "shares")}


def test_a_session_with_several_tiles_and_primes_waits_for_every_tile():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, chunk_bytes=4096)
    data = random_data([20, 15, 10], 3, seed=3)
    session = Session(data, params)
    queue = session.run_until("evaluation")
    coordinator = session.coordinator
    assert len(coordinator.tiles) > 1 and len(coordinator.plan.primes) == 2
    held = _pump(session, queue, hold=_tiles_of("party-1"))
    assert len(held) == 2 * len(coordinator.tiles)
    for sender, env in held[:-1]:
        assert coordinator.receive(sender, env) == []
        assert coordinator.waiting_for() == ["party-1"]
    out = coordinator.receive(*held[-1])
    assert [d for d, _ in out] == session.names and coordinator.waiting_for() == []
    from protocol_helpers import plaintext_sq_distances
    np.testing.assert_array_equal(coordinator.outcome.integer, plaintext_sq_distances(
        np.vstack([data[n] for n in session.names]), 1.0, 16))


def test_a_later_share_chunk_of_the_wrong_size_says_its_own_expected_size():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)
    session = _session(sizes=(700, 3, 4), params=params)
    chunks = _in_shares(session)
    width = session.coordinator.plan.segment_length
    a, b = chunk_rows(700, width, 4096)[1]
    assert a > 0
    env = next(e for s, e in chunks if s == "party-0" and e.share.chunk_index == 1)
    expected = 4 * (b - a) * width + 16
    bad = _copy(env, ciphertext=env.share.ciphertext + b"\0")
    error = _refused(session.coordinator, "party-0", bad)
    _says(error, "party-0", "shares", f"share chunk holds {expected + 1} bytes, expected "
          f"{expected}")


def test_a_corrupted_unchecked_upload_fails_the_decode_as_an_integrity_error():
    # r = 0: nothing checks the uploads; a lie far off the polynomial decodes outside the
    # no-wrap bound, and the decode refuses it (fail closed, nothing returned)
    session, queue = _evaluation(sizes=(3, 2, 4))
    held = _pump(session, queue, hold=_tiles_of("party-1"))
    sender, env = held[0]
    values = np.frombuffer(env.tile.values, dtype="<u4").copy()
    values[1] = (int(values[1]) + (2**31 - 1) // 2) % (2**31 - 1)
    with pytest.raises(IntegrityError) as info:
        session.coordinator.receive(sender, _copy(env, values=values.tobytes()))
    error = info.value
    assert type(error) is IntegrityError and (error.party, error.phase) == (None, "decode")
    assert str(error).startswith("the decoded result failed its integrity check in phase "
                                 "'decode': every decoded squared distance must lie in [0, ")
    assert session.coordinator.outcome is None and session.coordinator.failed_in == "decode"
    assert not isinstance(error, AuthenticationError)
    assert {(e.error.kind, e.error.phase) for _, e in session.coordinator.abort()} == \
        {("integrity", "decode")}


def test_a_sum_session_needs_every_party_to_the_end():
    session = _sum_session(rows=2)
    queue = session.run_until("evaluation")
    coordinator = session.coordinator
    assert coordinator.min_responders == 3
    held = _pump(session, queue, hold=_tiles_of("party-2"))
    assert held and coordinator.waiting_for() == ["party-2"]
    with pytest.raises(PeerError) as info:
        coordinator.party_lost("party-2")
    _says(info.value, "party-2", "evaluation", "connection lost; only 2 parties remain "
          "(['party-0', 'party-1']) and decoding needs 3")


def test_the_clustering_callback_labels_every_row_and_each_party_gets_its_own():
    data = random_data([4, 3, 5], 3, seed=0)
    session = Session(data, PARAMS)
    seen = []

    def cluster(values):
        seen.append(values.copy())
        return np.arange(values.shape[0]) % 3

    session.coordinator = Coordinator(SID, PARAMS, session.names, session.pinned,
                                      cluster=cluster)
    _pump(session, session.run_until("evaluation"))
    outcome = session.coordinator.outcome
    [values] = seen
    np.testing.assert_array_equal(values, _exact(session, data) / 4.0**8)
    np.testing.assert_array_equal(outcome.labels, np.arange(12) % 3)
    for name, rows in zip(session.names, [range(0, 4), range(4, 7), range(7, 12)]):
        np.testing.assert_array_equal(session.parties[name].labels,
                                      np.array(list(rows)) % 3)


def test_each_phase_is_timed_over_every_stay_in_it(monkeypatch):
    # a clock that advances one second per reading: every stay in a phase lasts exactly
    # one second, and a phase entered twice (evaluation and decode around an exclusion
    # rerun) is timed twice
    import itertools
    import protocols._coordinator as module

    class Clock:
        ticks = itertools.count(1000)

        def perf_counter(self):
            return float(next(self.ticks))

    monkeypatch.setattr(module, "time", Clock())
    session, data, out, error, _ = _lying((3, 2, 4, 3, 2), {"party-1": SPREAD})
    assert error is None and session.coordinator.round == 2
    _pump(session, [(d, "coordinator", e) for d, e in out])
    stats = session.coordinator.outcome.stats
    assert {p: s for p, (s, _) in stats.items()} == {"join": 1.0, "shares": 1.0,
                                                      "evaluation": 2.0, "decode": 2.0,
                                                      "result": 1.0}

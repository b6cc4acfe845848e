"""protocols/_party.py pinned down: checks a malicious coordinator could slip past, each
found by planting a bug or by mutation testing (docs/testing.md lists which).
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import PeerError
from protocols import Party, SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import Session, random_data
from dataclasses import replace
from finite_field import OmniFCError, ProtocolError
from protocols._crypto import MaskView

PARAMS = SessionParameters(dim=3, bound=1.0, scale_bits=8)


def _roster_for(session, name):
    out = []
    for sender, hello in session.hellos().items():
        out += session.coordinator.receive(sender, hello)
    return next(env for dest, env in out if dest == name and env.HasField("roster"))


def _rebuilt(env, hellos):
    """The roster ``env`` with these hellos, offsets recomputed and the parameters of
    ``len(hellos)`` parties, so that every check but the one under test passes."""
    out = pb.Envelope()
    out.roster.CopyFrom(env.roster)
    del out.roster.parties[:]
    offset = 0
    for hello in hellos:
        entry = out.roster.parties.add()
        entry.hello.CopyFrom(hello)
        entry.row_offset = offset
        offset += hello.n_rows
    out.roster.parameters.CopyFrom(PARAMS.to_proto(PARAMS.plan(len(hellos))))
    return out


def _second_hello(session, name, data):
    """A second, validly signed hello of ``name`` (another run of the same session config:
    same identity key, fresh run nonce and ephemeral key)."""
    again = Party(name, data, session_id="test-session", parameters=PARAMS,
                  identity_key=session.keys[name], pinned=session.pinned)
    return again.start()[0].hello


@pytest.mark.parametrize("where", ["appended", "replacing another"])
def test_a_party_listed_twice_with_two_valid_hellos_is_refused(where):
    # The duplicate is not a byte copy (which the nonce-uniqueness check would also
    # catch): it is another signed hello of party-1, so only the roster-order check
    # (exactly the pinned parties, each once, in the config's order) refuses it.
    data = random_data([2, 3, 2], 3, seed=3)
    session = Session(data, PARAMS)
    env = _roster_for(session, "party-0")
    hellos = [e.hello for e in env.roster.parties]
    twin = _second_hello(session, "party-1", data["party-1"])
    assert twin.run_nonce != hellos[1].run_nonce
    hellos = hellos + [twin] if where == "appended" else [hellos[0], hellos[1], twin]
    party = session.parties["party-0"]
    with pytest.raises(PeerError, match="in this order") as info:
        list(party.receive(_rebuilt(env, hellos)))
    assert (info.value.party, info.value.phase) == ("coordinator", "join")
    assert party.phase == "failed" and not hasattr(party, "keys")


def test_the_rebuilt_roster_of_the_test_above_is_accepted_when_honest():
    data = random_data([2, 3, 2], 3, seed=3)
    session = Session(data, PARAMS)
    env = _roster_for(session, "party-0")
    party = session.parties["party-0"]
    out = list(party.receive(_rebuilt(env, [e.hello for e in env.roster.parties])))
    assert [e.WhichOneof("body") for e in out] == ["confirmation"]
    assert party.phase == "confirm" and party.names == ["party-0", "party-1", "party-2"]


# -- every refusal names who is to blame, the phase, and says expected vs seen ----------------
# (mutation testing: the message, the party and the phase of these errors were unobserved)

def _in_phase(phase, sizes=(3, 2, 4, 3, 2), seed=4):
    """A 5-party session driven by hand until party-0 is in ``phase``; returns the session
    and what is queued for the parties at that point."""
    session = Session(random_data(list(sizes), 3, seed=seed), PARAMS)
    if phase == "join":
        session.hellos()
        return session, []
    queue = session.run_until("shares" if phase == "shares" else "evaluation")
    return session, queue


def _says(error, party, phase, text):
    """``error`` blames ``party`` in ``phase`` and says exactly ``text``."""
    assert (error.party, error.phase) == (party, phase)
    assert str(error) == f"party {party!r} in phase {phase!r}: {text}"


def _refusal(party, env):
    with pytest.raises(PeerError) as info:
        list(party.receive(env))
    assert party.phase == "failed"
    return info.value


@pytest.mark.parametrize("kind, phase, allowed", [
    ("round_start", "join", ["ready", "evaluation"]),
    ("group_seed", "join", ["evaluation"]),
    ("result", "join", ["ready", "evaluation"]),
])
def test_an_out_of_order_message_is_refused_naming_its_kind_and_the_phases(kind, phase,
                                                                            allowed):
    session, _ = _in_phase(phase)
    party = session.parties["party-0"]
    body = {"round_start": pb.RoundStart(session_id="test-session", round=1),
            "group_seed": pb.GroupSeed(session_id="test-session", round=1),
            "result": pb.Result(session_id="test-session", party_id="party-0")}[kind]
    env = pb.Envelope()
    getattr(env, kind).CopyFrom(body)
    error = _refusal(party, env)
    _says(error, "coordinator", phase, f"out-of-order message {kind!r}: party 'party-0' is "
          f"in phase {phase!r}, expected one of {allowed}")


def test_a_share_chunk_in_the_wrong_phase_is_refused_naming_its_kind():
    session, queue = _in_phase("evaluation")
    party = session.parties["party-0"]
    error = _refusal(party, _envelope(share=pb.ShareChunk(session_id="test-session")))
    _says(error, "coordinator", "ready", "out-of-order message 'share': party 'party-0' is in "
          "phase 'ready', expected one of ['shares']")


def _envelope(**body):
    env = pb.Envelope()
    for name, value in body.items():
        getattr(env, name).CopyFrom(value)
    return env


def test_a_result_in_phase_ready_is_accepted():
    # A coordinator may end a session right after the shares (e.g. when no round could
    # run); "ready" is one of the two phases in which a Result is accepted.
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    assert party.phase == "ready"
    assert list(party.receive(_envelope(result=pb.Result(session_id="test-session",
                                                         party_id="party-0")))) == []
    assert party.phase == "done" and party.labels is None


@pytest.mark.parametrize("kind, phase", [("round_start", "evaluation"),
                                         ("result", "result")])
def test_a_message_of_another_session_is_refused_in_its_phase(kind, phase):
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    body = {"round_start": pb.RoundStart(session_id="other", round=1,
                                         responders=session.names),
            "result": pb.Result(session_id="other", party_id="party-0")}[kind]
    error = _refusal(party, _envelope(**{kind: body}))
    _says(error, "coordinator", phase, "message for session 'other', expected 'test-session' "
          "(replayed or misrouted)")


def _sharing(seed=5):
    """party-0 has accepted the roster (phase 'shares'); returns the session, party-0 and
    the share chunks addressed to party-0 by the others (sender, envelope)."""
    session = Session(random_data([3, 2, 4], 3, seed=seed), PARAMS)
    queue = session.run_until("shares")
    chunks = []
    for dest, _, env in queue:
        for out in session.parties[dest].receive(env):
            if out.HasField("share") and out.share.receiver == "party-0":
                chunks.append(out)
    party = session.parties["party-0"]
    assert party.phase == "shares" and chunks
    return session, party, chunks


def _changed(env, **fields):
    out = pb.Envelope.FromString(env.SerializeToString())
    kind = out.WhichOneof("body")
    for name, value in fields.items():
        setattr(getattr(out, kind), name, value)
    return out


def test_a_share_chunk_of_another_session_is_refused_in_phase_shares():
    _, party, chunks = _sharing()
    _says(_refusal(party, _changed(chunks[0], session_id="other")), "coordinator", "shares",
          "message for session 'other', expected 'test-session' (replayed or misrouted)")


@pytest.mark.parametrize("change, sender, receiver", [
    ("to another party", "party-1", "party-2"),
    ("from an unknown party", "mallory", "party-0"),
    ("from the receiver itself", "party-0", "party-0"),
])
def test_a_misrouted_share_chunk_is_blamed_on_the_coordinator(change, sender, receiver):
    # Each one alone is refused as misrouted (the coordinator routes chunks), not left to
    # the schedule or the AES-GCM check to reject with the sender blamed.
    _, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-1")
    error = _refusal(party, _changed(chunk, sender=sender, receiver=receiver))
    _says(error, "coordinator", "shares", f"share chunk from {sender!r} to {receiver!r} "
          "delivered to 'party-0'")


def test_a_share_chunk_of_a_later_round_is_blamed_on_its_sender():
    _, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-2")
    _says(_refusal(party, _changed(chunk, round=3)), "party-2", "shares",
          "share chunk for round 3, expected 0")


def _starting(seed=6):
    """Five parties in phase 'ready'; returns the session and party-0's RoundStart."""
    session, queue = _in_phase("evaluation", seed=seed)
    start = next(env for dest, _, env in queue if dest == "party-0")
    assert start.HasField("round_start") and session.parties["party-0"].phase == "ready"
    return session, start


NAMES = [f"party-{i}" for i in range(5)]


@pytest.mark.parametrize("responders", [
    NAMES + ["party-0"],                  # a party twice, enough distinct ones
    NAMES[:4] + ["mallory"],              # a party not in the roster, enough of them
    NAMES[:2],                            # too few, all known and distinct
])
def test_a_responding_set_that_is_not_enough_distinct_roster_parties_is_refused(responders):
    session, start = _starting()
    need = PARAMS.min_responders(5)
    assert need == 3
    party = session.parties["party-0"]
    start.round_start.ClearField("responders")
    start.round_start.responders.extend(responders)
    _says(_refusal(party, start), "coordinator", "evaluation",
          f"responding set {responders} must hold at least 3 distinct parties of {NAMES}")


def test_a_round_that_does_not_shrink_the_set_is_refused_with_the_round_cap():
    session, start = _starting()
    party = session.parties["party-0"]
    list(party.receive(start))
    again = _changed(start, round=start.round_start.round + 1)
    _says(_refusal(party, again), "coordinator", "evaluation",
          f"round 2 responding set {NAMES} is not a strict subset of the previous round's "
          f"{NAMES} (a session has at most m - (2l+2t-1) + 1 = 3 rounds)")


def test_a_replayed_round_start_is_refused_with_both_round_numbers():
    session, start = _starting()
    party = session.parties["party-0"]
    list(party.receive(start))
    _says(_refusal(party, start), "coordinator", "evaluation",
          "round 1 does not follow round 1 (replayed)")


# -- group seeds (integrity checks in masked mode) --------------------------------------------

def _seeding(seed=7):
    """Round 1 started at all five parties; returns the session, the RoundStart of party-1
    and the group seeds party-0 (the leader of its groups) sent to party-1."""
    session, queue = _in_phase("evaluation", seed=seed)
    seeds, start = [], None
    for dest, _, env in queue:
        if dest == "party-1":
            start = env
        for out in session.parties[dest].receive(env):
            if out.HasField("group_seed") and out.group_seed.receiver == "party-1":
                seeds.append(out)
    assert start is not None and seeds and all(s.group_seed.sender == "party-0" for s in seeds)
    assert session.parties["party-1"]._seed_wait  # waits for them
    return session, start, seeds


def test_a_seed_of_an_abandoned_round_is_ignored():
    session, start, seeds = _seeding()
    party = session.parties["party-1"]
    later = _changed(start, round=2)
    later.round_start.ClearField("responders")
    later.round_start.responders.extend(NAMES[:4])
    list(party.receive(later))
    assert party.phase == "evaluation"
    assert list(party.receive(seeds[0])) == []  # sent for round 1, still in flight
    assert party.phase == "evaluation"


@pytest.mark.parametrize("change", ["sender is not the group's leader", "another receiver"])
def test_a_seed_that_does_not_fit_is_refused(change):
    session, _, seeds = _seeding()
    party = session.parties["party-1"]
    waiting = sorted(party._seed_wait)
    seed = seeds[0]
    members = list(seed.group_seed.members)
    fields = ({"sender": members[2]} if change.startswith("sender")
              else {"receiver": next(m for m in members if m not in ("party-0", "party-1"))})
    sender = fields.get("sender", "party-0")
    _says(_refusal(party, _changed(seed, **fields)), "coordinator", "evaluation",
          f"group seed from {sender!r} for round 1 and group {members} does not fit this "
          f"round (round 1, waiting for {waiting})")


def test_a_seed_of_another_session_is_refused_in_phase_evaluation():
    session, _, seeds = _seeding()
    _says(_refusal(session.parties["party-1"], _changed(seeds[0], session_id="other")),
          "coordinator", "evaluation",
          "message for session 'other', expected 'test-session' (replayed or misrouted)")


# -- results and error reports ----------------------------------------------------------------

def _result(**fields):
    return _envelope(result=pb.Result(session_id="test-session", **fields))


def test_a_result_for_another_party_is_refused():
    session, _ = _in_phase("evaluation")
    _says(_refusal(session.parties["party-0"], _result(party_id="party-3")), "coordinator",
          "result", "result addressed to 'party-3'")


def test_a_result_with_a_wrong_number_of_labels_is_refused():
    session, _ = _in_phase("evaluation")   # party-0 holds 3 rows
    _says(_refusal(session.parties["party-0"], _result(party_id="party-0", labels=[0, 1])),
          "coordinator", "result", "result holds 2 labels, expected 3 (one per own row) or none")


def test_a_result_keeps_the_labels_and_logs_every_deviation(caplog):
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    deviation = pb.Deviation(round=2, action="excluded", description="party-4 deviated")
    with caplog.at_level("WARNING", logger="protocols"):
        list(party.receive(_result(party_id="party-0", labels=[2, 0, 2],
                                   deviations=[deviation])))
    assert party.phase == "done" and party.done
    assert party.labels.dtype == np.int64 and party.labels.tolist() == [2, 0, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "party 'party-0': the integrity checks of round 2 found a deviation (excluded): "
        "party-4 deviated"]


@pytest.mark.parametrize("named, blamed, who", [
    ("", "coordinator", "the session"), ("party-2", "party-2", "party 'party-2'"),
    ("party-0", "party-0", "party 'party-0' (this party)")])
def test_an_error_report_is_raised_blaming_the_party_it_names(named, blamed, who):
    # said as the coordinator's report, never as if this party's own check had failed
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    report = pb.ErrorReport(session_id="test-session", reporter="coordinator", party=named,
                            phase="shares", kind="peer", message="it went wrong")
    error = _refusal(party, _envelope(error=report))
    assert (error.party, error.phase, error.reporter) == (blamed, "shares", "coordinator")
    assert str(error) == (f"coordinator reports: {who} failed in phase 'shares', so it "
                          "aborted the session: it went wrong")


# -- roster entries: each field checked on its own ------------------------------------------

def _signed(session, hello, **fields):
    """``hello`` with ``fields`` changed and signed again with its party's identity key (a
    party running other software or another session config; the coordinator cannot)."""
    from protocols._identity import sign
    from protocols._party import hello_transcript
    out = pb.Hello()
    out.CopyFrom(hello)
    for name, value in fields.items():
        setattr(out, name, value)
    out.signature = sign(session.keys[out.party_id], hello_transcript(out))
    return out


@pytest.mark.parametrize("fields, says", [
    ({"session_id": "other"}, "session 'other', d=3 and protocol version {v}"),
    ({"dim": 4}, "session 'test-session', d=4 and protocol version {v}"),
    ({"protocol_version": 99}, "session 'test-session', d=3 and protocol version 99"),
])
def test_a_roster_entry_of_another_session_dimension_or_version_is_refused(fields, says):
    from protocols._crypto import PROTOCOL_VERSION
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    env = _roster_for(session, "party-0")
    hellos = [e.hello for e in env.roster.parties]
    hellos[2] = _signed(session, hellos[2], **fields)
    error = _refusal(session.parties["party-0"], _rebuilt(env, hellos))
    _says(error, "coordinator", "join", "roster entry of 'party-2' has "
          + says.format(v=PROTOCOL_VERSION)
          + f", expected 'test-session', d=3 and {PROTOCOL_VERSION}")


@pytest.mark.parametrize("fields, nonce, key", [
    ({"run_nonce": bytes(16)}, 16, 32),
    ({"ephemeral_public_key": bytes(31)}, 32, 31),
])
def test_a_roster_entry_with_a_short_nonce_or_key_is_refused(fields, nonce, key):
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    env = _roster_for(session, "party-0")
    hellos = [e.hello for e in env.roster.parties]
    hellos[1] = _signed(session, hellos[1], **fields)
    _says(_refusal(session.parties["party-0"], _rebuilt(env, hellos)), "coordinator", "join",
          f"roster entry of 'party-1' carries a {nonce}-byte run nonce and a {key}-byte "
          "ephemeral key, expected 32 and 32")


def test_a_roster_of_another_session_is_refused_in_phase_join():
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    env = _roster_for(session, "party-0")
    env.roster.session_id = "other"
    _says(_refusal(session.parties["party-0"], env), "coordinator", "join",
          "message for session 'other', expected 'test-session' (replayed or misrouted)")


# -- share chunks: schedule, duplicates, nonce, range ------------------------------------------

@pytest.mark.parametrize("fields, says", [
    ({"total_chunks": 2}, "share chunk (prime 0, chunk 0/2) does not fit the schedule "
                          "(1 chunks per prime)"),
    ({"prime_index": 7}, "share chunk (prime 7, chunk 0/1) does not fit the schedule "
                         "(1 chunks per prime)"),
    ({"chunk_index": 1}, "share chunk (prime 0, chunk 1/1) does not fit the schedule "
                         "(1 chunks per prime)"),
])
def test_a_share_chunk_off_the_schedule_is_blamed_on_its_sender(fields, says):
    _, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-1" and c.share.prime_index == 0)
    _says(_refusal(party, _changed(chunk, **fields)), "party-1", "shares", says)


def test_a_duplicate_share_chunk_is_blamed_on_its_sender():
    _, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-2" and c.share.prime_index == 0)
    list(party.receive(chunk))
    _says(_refusal(party, chunk), "party-2", "shares", "duplicate share chunk 0 for prime 0")


def test_a_share_chunk_with_another_nonce_on_the_wire_is_refused():
    from finite_field import AuthenticationError
    _, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-1")
    with pytest.raises(AuthenticationError) as info:
        list(party.receive(_changed(chunk, nonce=bytes(12))))
    assert (info.value.party, info.value.phase) == ("party-1", "shares")


def test_a_share_value_of_p_or_more_is_blamed_on_its_sender():
    session, party, chunks = _sharing()
    chunk = next(c for c in chunks if c.share.sender == "party-1" and c.share.prime_index == 0)
    p = party.plan.primes[0]
    count = len(np.frombuffer(party.keys["party-1"].decrypt(
        chunk.share.ciphertext, sender="party-1", round_=0, prime_index=0, chunk_index=0),
        dtype="<u4"))
    bad = np.full(count, p, dtype="<u4").tobytes()
    forged = _changed(chunk, ciphertext=session.parties["party-1"].keys["party-0"].encrypt(
        bad, round_=0, prime_index=0, chunk_index=0))
    error = _refusal(party, forged)
    assert (error.party, error.phase) == ("party-1", "shares") and f">= p = {p}" in str(error)


@pytest.mark.slow
def test_shares_of_several_chunks_are_placed_where_they_belong():
    # 700 rows of 3 columns at 4096-byte chunks: the first party's shares arrive in 3
    # chunks; D must be exact (a chunk placed or sized wrongly breaks it).
    from protocols import run_memory_session
    from protocol_helpers import plaintext_sq_distances
    data = random_data([700, 3, 2], 3, seed=11)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)
    outcome, _ = run_memory_session(data, params)
    rows = np.concatenate(list(data.values()))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows, 1.0, 8))


def test_a_second_roster_is_refused_as_out_of_order():
    _, party, _ = _sharing()
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    env = _roster_for(session, "party-0")
    env.roster.session_id = "test-session"
    _says(_refusal(party, env), "coordinator", "shares",
          "out-of-order message 'roster': party 'party-0' is in phase 'shares', expected one "
          "of ['join']")


# -- folded in from test_party_bites_more.py ----------------------------------------------
# protocols/_party.py pinned down, continued (mutation testing, docs/testing.md): the
# remaining roster checks each on its own, what a party does after a session ended, the
# message kinds a party never receives, and the warnings it logs.
#
# Every refusal is checked for its class, the party blamed, the phase and the exact text,
# and that the refused message changed nothing a later step relies on.

def _three():
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    env = _roster_for(session, "party-0")
    return session, env, [e.hello for e in env.roster.parties]


def _untouched(party):
    """A refused roster left nothing behind that a later step would use."""
    assert party.phase == "failed" and party.failed_in == "join"
    assert not hasattr(party, "keys") and not hasattr(party, "names")


# -- roster: row offsets, unique nonces and keys, own hello, parameters -----------------------

@pytest.mark.parametrize("entry, offset, expected", [(0, 1, 0), (1, 0, 2), (2, 4, 5)])
def test_a_roster_with_a_wrong_row_offset_is_refused(entry, offset, expected):
    session, env, hellos = _three()
    forged = _rebuilt(env, hellos)
    forged.roster.parties[entry].row_offset = offset
    party = session.parties["party-0"]
    _says(_refusal(party, forged), "coordinator", "join",
          f"row offset of 'party-{entry}' is {offset}, expected {expected}")
    _untouched(party)


@pytest.mark.parametrize("shared", ["run_nonce", "ephemeral_public_key"])
def test_two_roster_entries_sharing_only_a_nonce_or_only_a_key_are_refused(shared):
    # party-2's hello, validly signed by party-2, copies one field of party-1's hello:
    # each of the two uniqueness conditions must hold on its own.
    session, env, hellos = _three()
    hellos[2] = _signed(session, hellos[2], **{shared: getattr(hellos[1], shared)})
    other = "ephemeral_public_key" if shared == "run_nonce" else "run_nonce"
    assert getattr(hellos[2], other) != getattr(hellos[1], other)
    party = session.parties["party-0"]
    _says(_refusal(party, _rebuilt(env, hellos)), "coordinator", "join",
          "two roster entries share a run nonce or an ephemeral key")
    _untouched(party)


def test_a_roster_without_this_partys_own_hello_is_refused():
    # Another validly signed hello of party-0 (same identity key, another run): every
    # other check passes, only "this party's own hello, unchanged" refuses it.
    session, env, hellos = _three()
    again = Party("party-0", random_data([2], 3, seed=9)["party-0"], session_id="test-session",
                  parameters=PARAMS, identity_key=session.keys["party-0"],
                  pinned=session.pinned)
    hellos[0] = again.start()[0].hello
    party = session.parties["party-0"]
    _says(_refusal(party, _rebuilt(env, hellos)), "coordinator", "join",
          "the roster does not carry this party's own hello")
    _untouched(party)


@pytest.mark.parametrize("change, diff", [
    ({"scale_bits": 9}, ["scale_bits"]),
    ({"bound": 2.0, "nonnegative": True}, ["bound", "nonnegative"]),
])
def test_a_roster_with_other_parameters_is_refused_naming_the_fields(change, diff):
    session, env, hellos = _three()
    forged = _rebuilt(env, hellos)
    other = replace(PARAMS, **change)
    forged.roster.parameters.CopyFrom(other.to_proto(other.plan(3)))
    party = session.parties["party-0"]
    _says(_refusal(party, forged), "coordinator", "join",
          f"roster parameters differ from the session config in {diff}")
    _untouched(party)


# -- after the end, and messages a party never receives --------------------------------------

def test_a_message_after_the_result_is_refused_and_the_result_kept():
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    list(party.receive(_result(party_id="party-0", labels=[1, 0, 1])))
    with pytest.raises(ProtocolError) as info:
        list(party.receive(_result(party_id="party-0", labels=[0, 0, 0])))
    assert type(info.value) is ProtocolError
    assert str(info.value) == ("party 'party-0' received a message after the session ended "
                               "(phase 'done')")
    assert party.phase == "done" and party.labels.tolist() == [1, 0, 1]


def test_a_message_after_a_failure_is_refused_and_the_first_error_kept():
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    first = _refusal(party, _result(party_id="party-3"))
    with pytest.raises(ProtocolError) as info:
        list(party.receive(_result(party_id="party-0")))
    assert str(info.value) == ("party 'party-0' received a message after the session ended "
                               "(phase 'failed')")
    assert party.error is first and party.failed_in == "ready"


@pytest.mark.parametrize("kind, body", [
    ("hello", pb.Hello(session_id="test-session", party_id="party-1")),
    ("tile", pb.EvaluationTile(session_id="test-session", sender="party-1")),
    ("ready", pb.Ready(session_id="test-session", party_id="party-1")),
])
def test_a_message_a_party_never_receives_is_blamed_on_the_coordinator(kind, body):
    session, _ = _in_phase("evaluation")
    party = session.parties["party-0"]
    _says(_refusal(party, _envelope(**{kind: body})), "coordinator", "ready",
          f"unexpected message {kind!r} (a party never receives it)")
    assert party.failed_in == "ready"


def test_a_roster_whose_parameters_cannot_be_built_fails_naming_party_and_phase():
    # An invalid parameter set raises ParameterError (not a ProtocolError) inside the
    # handler: fail closed, wrapped in a ProtocolError that names the party and phase.
    session, env, hellos = _three()
    forged = _rebuilt(env, hellos)
    forged.roster.parameters.mode = "bogus"
    party = session.parties["party-0"]
    with pytest.raises(ProtocolError) as info:
        list(party.receive(forged))
    error = info.value
    assert type(error) is ProtocolError and error.phase == "join"
    assert str(error).startswith("party 'party-0' failed in phase 'join': ")
    assert isinstance(error.__cause__, OmniFCError) and "bogus" in str(error)
    _untouched(party)


# -- rounds: the unchecked-round warning -------------------------

def test_an_unchecked_round_is_warned_about_once_with_the_figures(caplog):
    # 3 parties, l=1, t=1: 2l+2t-1 = 3 = m, so r = 0 and the round is unchecked.
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    queue = session.run_until("evaluation")
    party = session.parties["party-1"]
    start = next(env for dest, _, env in queue if dest == "party-1")
    from protocols._log_once import restore
    restore(())  # as in a party's own process: the coordinator's line was not said here
    with caplog.at_level("WARNING", logger="protocols"):
        list(party.receive(start))
    need = party.plan.min_responders
    assert [r.getMessage() for r in caplog.records if r.module == "_party"] == [
        f"party 'party-1': NO INTEGRITY CHECK in round 1: |B| = 3 responders leave r = 0 "
        f"redundant evaluations (decoding needs {need}), so a party that computes or shares "
        "wrongly goes undetected"]


def test_the_round_view_lists_the_responders_in_roster_order_not_by_name():
    # docs/protocol.md: masks and seeds are bound to "the exact B in roster order". With
    # names whose alphabetical order is not the roster order, a RoundStart listing B
    # shuffled must give the roster order (sorting by name would still agree among
    # honest parties of this implementation, but not with the documented view).
    rng = np.random.default_rng(12)
    names = ["party-e", "party-c", "party-a", "party-d", "party-b"]
    session = Session({n: rng.uniform(-1, 1, (2, 3)) for n in names}, PARAMS)
    queue = session.run_until("evaluation")
    start = next(env for dest, _, env in queue if dest == "party-c")
    start.round_start.ClearField("responders")
    start.round_start.responders.extend(["party-b", "party-a", "party-e", "party-d"])
    party = session.parties["party-c"]
    assert list(party.receive(start)) == []  # not a responder: sends nothing
    assert party._view(1, party._responders) == MaskView(
        "test-session", 1, party.roster_digest, ("party-e", "party-a", "party-d", "party-b"))


# -- evaluation blocks: several tiles per kernel call, bounded memory ------------------------

def _block_reference(tiles, first, n, limit):
    """The furthest tile end b (tiles from ``tiles[first]`` on) whose block, rows [start, b)
    against columns [start, n), holds at most ``limit`` elements and at most 1/8 of the
    remaining columns as rows (the wasted lower triangle stays under 1/16); the first
    tile's end when none does (a block holds at least one tile, whatever its size)."""
    start = tiles[first][0]
    fitting = [b for _, b in tiles[first + 1:]
               if (b - start) * (n - start) <= limit and 8 * (b - start) <= n - start]
    return max(fitting, default=tiles[first][1])


@pytest.mark.parametrize("n, bounds", [
    (4096, [0, 1000, 1024, 2000, 3000, 4096]),   # 1/8 of the columns binds: one tile each
    (4096, [0, 256, 512, 600, 4096]),            # 512 rows = 4096 / 8 exactly
    (60000, [0, 40, 69, 70, 200, 60000]),        # 69 x 60000 <= 2^22 < 70 x 60000
    (6000, [0, 10, 500, 699, 700, 701, 2000, 6000]),
    (300, [0, 100, 200, 300]),                   # everything fits in one block
    (9000, [0, 8000, 9000]),                     # a first tile above the limit alone
])
def test_a_block_ends_where_the_next_tile_would_pass_the_element_limit(n, bounds):
    from protocols._party import _BLOCK_ELEMENTS, _block_stop
    assert _BLOCK_ELEMENTS == 1 << 22  # 32 MB of int64 (documented next to it)
    tiles = list(zip(bounds[:-1], bounds[1:]))
    for first in range(len(tiles)):
        expected = _block_reference(tiles, first, n, 1 << 22)
        assert _block_stop(tiles, first, n) == expected, (first, expected)
    # the exact boundaries are included (<=), one row more is not
    if bounds == [0, 256, 512, 600, 4096]:
        assert _block_stop(tiles, 0, n) == 512   # 8 x 512 = 4096; 8 x 600 is more
    if n == 60000:
        assert _block_stop(tiles, 0, n) == 69    # 69 x 60000 <= 2^22; 70 x 60000 is more


# -- fail closed inside the lazily produced messages ------------------------------------------

def _roster_accepted(monkeypatch):
    """party-0 accepts its roster and every roster confirmation; share encoding then
    raises an unexpected MemoryError (fault injection: the out-of-memory a huge party
    could hit)."""
    import protocols._party as party_module
    session = Session(random_data([2, 3, 2], 3, seed=3), PARAMS)
    queue = session.run_until("shares")  # the confirmations relayed, not yet delivered
    env = next(e for dest, _, e in queue if dest == "party-0")
    assert env.HasField("confirmations")
    party = session.parties["party-0"]
    shares = party.receive(env)  # lazy: nothing encoded yet
    assert party.phase == "shares"

    def out_of_memory(*args, **kwargs):
        raise MemoryError("no room for 12345")
    monkeypatch.setattr(party_module, "encode_row_blocks", out_of_memory)
    return party, shares


def test_an_unexpected_error_while_sending_fails_closed_naming_party_and_phase(monkeypatch):
    party, shares = _roster_accepted(monkeypatch)
    with pytest.raises(ProtocolError) as info:
        list(shares)
    error = info.value
    assert type(error) is ProtocolError and error.phase == "shares"
    assert str(error) == "party 'party-0' failed in phase 'shares': unexpected MemoryError"
    assert isinstance(error.__cause__, MemoryError)
    assert party.phase == "failed" and party.failed_in == "shares" and party.error is error


def test_a_second_failure_keeps_the_phase_of_the_first(monkeypatch):
    party, shares = _roster_accepted(monkeypatch)
    first = _refusal(party, _envelope(result=pb.Result(session_id="test-session",
                                                       party_id="party-0")))
    assert party.failed_in == "shares" and party.error is first
    with pytest.raises(ProtocolError):
        list(shares)  # the earlier output, iterated after the failure, fails again
    assert party.phase == "failed" and party.failed_in == "shares"

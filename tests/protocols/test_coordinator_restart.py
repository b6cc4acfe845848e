"""A coordinator that dies in evaluation and is restarted from its journal (docs/protocol.md,
"Coordinator restart"), through the real state machines.

The first coordinator is killed (nothing of it runs after: no finalizer, no message in
flight arrives), a new one is made from the same parameters with the journal reopened
and :meth:`Coordinator.restore`, and every party resumes: D must be exact (the Python
integer oracle on the quantized rows), no tile is added twice, and the work redone is
only the tiles the journal did not hold. Every refusal the docs promise (another config,
another B, a changed journal or result file, a death in the decode) is tried.
"""

from __future__ import annotations

import base64
import json
import logging
import struct

import numpy as np
import pytest

from finite_field import IntegrityError, ParameterError, PeerError, ProtocolError
from protocols import Coordinator
from protocols._generated import omnifc_pb2 as pb
from protocols._journal import JOURNAL_MAGIC, Journal, read_journal
from protocol_helpers import (Link, Session, plaintext_sq_distances, random_data,
                              resume_oracle, resume_parameters)

pytestmark = pytest.mark.timeout(120)

SIZES = (30, 25, 35, 20)  # n = 110: a dozen tiles per prime at 4 KiB
KEY = bytes(range(32))


_params, _exact = resume_parameters, resume_oracle


def _journaled(session, tmp_path, parameters=None, responders=None):
    """A fresh coordinator of ``session`` with its result at ``tmp_path`` and a journal."""
    return Coordinator("test-session", parameters or session.parameters, session.names,
                       session.pinned, out=tmp_path / "result.npy", responders=responders,
                       journal=Journal.create(tmp_path / "session.journal", KEY))


def _kill(coordinator):
    """The process died: nothing of it runs again (its files stay as they are)."""
    acc = coordinator._acc
    if acc is not None:
        acc._finalizer.detach()
    coordinator.journal.close()
    coordinator.journal = None


def _restarted(session, tmp_path, parameters=None, responders=None, records=None):
    journal, read = Journal.reopen(tmp_path / "session.journal", KEY)
    c = Coordinator("test-session", parameters or session.parameters, session.names,
                    session.pinned, out=tmp_path / "result.npy", responders=responders,
                    journal=journal)
    c.restore(read if records is None else records)
    return c


class Counted:
    """Counts the tiles a coordinator receives (and refuses none silently)."""

    def __init__(self, coordinator):
        self.c, self.tiles = coordinator, 0
        self.receive_inner = coordinator.receive

        def receive(sender, env):
            if env.HasField("tile"):
                self.tiles += 1
            return self.receive_inner(sender, env)
        coordinator.receive = receive


def _run_to_crash(session, tmp_path, crash_after, *, parameters=None, responders=None):
    """Run a journaled session until its coordinator has received ``crash_after`` tiles,
    then kill it; returns the link (every party cut off) and the dead coordinator."""
    session.coordinator = _journaled(session, tmp_path, parameters, responders)
    link = Link(session)
    link.start()
    counted = Counted(link.c)
    for _ in range(100_000):
        if (counted.tiles >= crash_after and link.c.phase == "evaluation") or \
                not link.queue:
            break
        link.step()
    assert counted.tiles == crash_after and link.c.outcome is None, \
        "the session ended before the crash point"
    dead = link.c
    _kill(dead)
    link.queue = []  # everything in flight, both ways, is lost with the process
    link.down = set(session.names)
    return link, dead


def _resume_all(link, coordinator, session):
    link.c = session.coordinator = coordinator
    return {name: link.resume(name) for name in session.names}


def _total_tiles(coordinator):
    return len(coordinator.plan.primes) * len(coordinator.tiles) * len(coordinator.responders)


@pytest.mark.parametrize("integrity", ["detect", "off"])
@pytest.mark.parametrize("crash_after", [0, 5, 17, 30])
def test_a_coordinator_killed_in_evaluation_is_restored_and_d_is_exact(tmp_path, integrity,
                                                                      crash_after):
    data = random_data(list(SIZES), 3, seed=31)
    session = Session(data, _params(integrity=integrity))
    link, dead = _run_to_crash(session, tmp_path, crash_after)
    journaled = [r for r in read_journal(tmp_path / "session.journal", KEY)
                 if r["kind"] == "tile"]
    new = _restarted(session, tmp_path)
    counted = Counted(new)
    accepted = _resume_all(link, new, session)
    assert all(a.restarted and a.round == 1 for a in accepted.values())
    link.run()
    assert new.error is None, new.error
    outcome = new.outcome
    assert np.array_equal(outcome.integer, _exact(session, data))
    assert outcome.round == 1 and outcome.lost == []
    assert all(p.done for p in session.parties.values())
    # the work redone: exactly the uploads of the tiles the journal did not hold
    per_tile = len(new.responders)
    assert counted.tiles == _total_tiles(new) - per_tile * len(journaled)
    assert not (tmp_path / "session.journal").exists()  # done: nothing to resume


def test_the_journal_holds_every_finished_tile_in_order_and_they_are_not_received_again(
        tmp_path):
    data = random_data(list(SIZES), 3, seed=32)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 30)
    records = read_journal(tmp_path / "session.journal", KEY)
    assert [r["kind"] for r in records[:2]] == ["begin", "round"]
    tiles = [(r["prime"], r["tile"]) for r in records if r["kind"] == "tile"]
    assert tiles and len(set(tiles)) == len(tiles)
    finished = {key for key, count in dead._tile_count.items()
                if count == len(dead.responders)}
    assert set(tiles) == finished  # journaled exactly when all of B's uploads were in
    new = _restarted(session, tmp_path)
    accepted = _resume_all(link, new, session)
    for a in accepted.values():
        held = {(k, i) for k, t in enumerate(a.held) for i in t.indices}
        assert held == set(tiles)
    seen = []
    inner = new.receive

    def receive(sender, env):
        if env.HasField("tile"):
            seen.append((env.tile.prime_index, env.tile.tile_index))
        return inner(sender, env)
    new.receive = receive
    link.run()
    assert new.error is None and not set(seen) & set(tiles)


def test_a_tile_journaled_as_held_but_received_again_is_refused(tmp_path):
    # the guard against a double add: a party (or a planted bug) that re-sends a held
    # tile is a second copy, refused naming the sender; nothing is added twice
    data = random_data(list(SIZES), 3, seed=33)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 30)
    new = _restarted(session, tmp_path)
    _resume_all(link, new, session)
    k, index = sorted(new.delivered["party-0"])[0]
    replay = session.parties["party-0"]._tile_envelope(1, session.names, k, index)
    with pytest.raises(PeerError, match="second copy") as caught:
        new.receive("party-0", replay)
    assert caught.value.party == "party-0"


def test_the_regions_not_journaled_are_zeroed_whatever_a_cut_write_left(tmp_path):
    data = random_data(list(SIZES), 3, seed=34)
    session = Session(data, _params(integrity="off"))
    link, dead = _run_to_crash(session, tmp_path, 9)
    records = read_journal(tmp_path / "session.journal", KEY)
    held = {(r["prime"], r["tile"]) for r in records if r["kind"] == "tile"}
    tiles = dead.tiles
    free = next((0, i) for i in range(len(tiles)) if (0, i) not in held)
    a, b = tiles[free[1]]
    result = np.load(tmp_path / "result.npy", mmap_mode="r+")
    result[a:b, a:] = 12345  # a write the process's death cut short
    result.flush()
    del result
    new = _restarted(session, tmp_path)
    _resume_all(link, new, session)
    link.run()
    assert new.error is None
    assert np.array_equal(new.outcome.integer, _exact(session, data))


# -- refusals ------------------------------------------------------------------------
def _refused_restore(session, tmp_path, **kwargs):
    journal, read = Journal.reopen(tmp_path / "session.journal", KEY)
    records = kwargs.pop("records", read)
    c = Coordinator("test-session", kwargs.pop("parameters", session.parameters),
                    session.names, session.pinned, out=tmp_path / "result.npy",
                    journal=journal, **kwargs)
    c.restore(records)


def test_a_resume_with_a_changed_config_is_refused_and_keeps_the_files(tmp_path):
    data = random_data(list(SIZES), 3, seed=35)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 10)
    before = (tmp_path / "result.npy").read_bytes()
    for changed in (_params(scale_bits=7), _params(integrity="off"), _params(mask_degree=3)):
        with pytest.raises(ParameterError, match=r"^the session config changed since the "
                           r"journal was written \(parameters, parties, keys or responders "
                           r"differ\); refusing to resume$"):
            _refused_restore(session, tmp_path, parameters=changed)
    assert (tmp_path / "result.npy").read_bytes() == before
    assert (tmp_path / "session.journal").exists()
    new = _restarted(session, tmp_path)  # the unchanged config still resumes
    assert new.error is None and new.phase == "evaluation"


def test_a_resume_with_a_changed_b_is_refused(tmp_path):
    data = random_data(list(SIZES), 3, seed=36)
    session = Session(data, _params(integrity="off"))  # any 3 of the 4 may be B
    _run_to_crash(session, tmp_path, 10)
    with pytest.raises(ParameterError, match="config changed"):
        _refused_restore(session, tmp_path, responders=session.names[:3])
    records = read_journal(tmp_path / "session.journal", KEY)
    forged = dict(records[1], responders=session.names[:3])
    # records forged as if the MAC had passed still fail the B check
    with pytest.raises(ParameterError, match=r"first responding set .* is not this "
                       r"config's; refusing to resume$"):
        _refused_restore(session, tmp_path, records=[records[0], forged] + records[2:])
    # B written into the journal by hand: the MAC refuses it before anything is read
    path = tmp_path / "session.journal"
    raw = path.read_bytes()
    body = json.dumps(records[1], sort_keys=True, separators=(",", ":")).encode()
    forged_body = json.dumps(forged, sort_keys=True, separators=(",", ":")).encode()
    start = raw.index(body)
    path.write_bytes(raw[:start - 4] + struct.pack(">I", len(forged_body))
                     + forged_body + raw[start + len(body):])
    with pytest.raises(IntegrityError, match="does not verify at record 2"):
        Journal.reopen(path, KEY)


@pytest.mark.parametrize("where", ["magic", "first", "middle", "last-mac"])
def test_a_tampered_journal_is_refused(tmp_path, where):
    data = random_data(list(SIZES), 3, seed=37)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 20)
    path = tmp_path / "session.journal"
    raw = bytearray(path.read_bytes())
    at = {"magic": 3, "first": len(JOURNAL_MAGIC) + 10, "middle": len(raw) // 2,
          "last-mac": len(raw) - 1}[where]
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises((IntegrityError, ParameterError)) as caught:
        Journal.reopen(path, KEY)
    assert isinstance(caught.value, ParameterError if where == "magic" else IntegrityError)


def test_a_journal_of_another_key_is_refused(tmp_path):
    data = random_data(list(SIZES), 3, seed=37)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 8)
    with pytest.raises(IntegrityError, match="does not verify at record 1"):
        Journal.reopen(tmp_path / "session.journal", bytes(32))


def test_a_torn_last_record_is_dropped_and_its_tile_received_again(tmp_path):
    data = random_data(list(SIZES), 3, seed=38)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 25)
    path = tmp_path / "session.journal"
    records = read_journal(path, KEY)
    raw = path.read_bytes()
    path.write_bytes(raw[:-7])  # the last record cut by the process's death
    new = _restarted(session, tmp_path)
    held = new.delivered["party-0"]
    last = records[-1]
    assert (last["prime"], last["tile"]) not in held and len(held) == sum(
        r["kind"] == "tile" for r in records) - 1
    _resume_all(link, new, session)
    link.run()
    assert np.array_equal(new.outcome.integer, _exact(session, data))


def test_a_changed_result_file_is_refused(tmp_path):
    data = random_data(list(SIZES), 3, seed=39)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 30)
    records = read_journal(tmp_path / "session.journal", KEY)
    k, index = next((r["prime"], r["tile"]) for r in records if r["kind"] == "tile")
    assert k == 0
    coordinator = Session(data, _params()).coordinator
    del coordinator
    result = np.load(tmp_path / "result.npy", mmap_mode="r+")
    a = _tile_rows(session, index)[0]
    result[a, a + 1] ^= 1
    result.flush()
    del result
    with pytest.raises(IntegrityError, match=rf"recorded tile {index} of prime 0 \(its "
                       r"digest differs\); refusing to resume$"):
        _refused_restore(session, tmp_path)


def _tile_rows(session, index):
    n = sum(SIZES)
    from protocols._plans import session_plan
    plan = session.parameters.plan(len(session.names))
    return session_plan(plan, session.parameters).tiles(n)[index]


def test_a_coordinator_that_died_before_evaluation_or_in_the_decode_has_nothing_to_resume(
        tmp_path):
    data = random_data(list(SIZES), 3, seed=40)
    session = Session(data, _params())
    with pytest.raises(ParameterError, match=r"^the journal holds no evaluation round: the "
                       r"coordinator died before evaluation started; nothing to resume$"):
        Journal.create(tmp_path / "session.journal", KEY).close()
        _refused_restore(session, tmp_path)
    (tmp_path / "session.journal").unlink()
    link, dead = _run_to_crash(session, tmp_path, 10)
    journal, records = Journal.reopen(tmp_path / "session.journal", KEY)
    journal.append("decode", round=1)
    journal.close()
    with pytest.raises(ParameterError, match=r"died while decoding round 1 .*; nothing to "
                       r"resume: run the session again$"):
        _refused_restore(session, tmp_path)


def test_another_sessions_journal_is_refused(tmp_path):
    data = random_data(list(SIZES), 3, seed=41)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 10)
    journal, records = Journal.reopen(tmp_path / "session.journal", KEY)
    c = Coordinator("another-session", session.parameters, session.names, session.pinned,
                    out=tmp_path / "result.npy", journal=journal)
    with pytest.raises(ParameterError, match="journal is of session 'test-session'"):
        c.restore(records)


# -- what a restarted coordinator may and may not make a party accept ---------------------
def test_a_party_accepts_only_an_identical_repeat_of_the_round_start(tmp_path):
    data = random_data(list(SIZES), 3, seed=42)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 10)
    new = _restarted(session, tmp_path)
    link.c = session.coordinator = new
    party = session.parties["party-1"]
    party.resume_request()
    answer = party.answer_challenge(new.resume_challenge("party-1"))
    out = new.resume("party-1", answer)
    party.resumed(out[0][1])
    start = out[1][1]
    assert start.HasField("round_start") and list(party.receive(start)) == []
    start.round_start.responders.pop()  # the same round with another B: refused
    with pytest.raises(PeerError, match="replayed"):
        list(party.receive(start))


def test_without_the_restart_flag_a_repeated_round_start_is_still_refused():
    data = random_data(list(SIZES), 3, seed=43)
    session = Session(data, _params())
    link = Link(session)
    link.start()
    starts = []
    inner = session.coordinator.receive

    def receive(sender, env):
        out = inner(sender, env)
        starts.extend(e for d, e in out if e.HasField("round_start") and d == "party-0")
        return out
    session.coordinator.receive = receive
    while not starts:
        link.step()
    party = session.parties["party-0"]
    list(party.receive(starts[0]))
    with pytest.raises(PeerError, match="replayed"):
        list(party.receive(starts[0]))


def test_parties_not_back_within_the_grace_period_are_dropouts_of_the_restored_round(
        tmp_path):
    # the transport calls party_lost when a party's grace period ends (Absences, tested
    # at its exact bound in test_resume.py); a restored coordinator is no different
    data = random_data(list(SIZES), 3, seed=44)
    session = Session(data, _params(integrity="off"))
    link, dead = _run_to_crash(session, tmp_path, 12)
    new = _restarted(session, tmp_path)
    assert new.away == set(session.names)
    link.c = session.coordinator = new
    for name in session.names[1:]:
        link.resume(name)
    out = new.party_lost("party-0", "its grace period ended")
    assert new.error is None and new.round == 2  # B' = the three that came back
    assert sorted(new.responders) == session.names[1:]
    link.queue += [(d, "coordinator", e) for d, e in out]
    link.run()
    assert new.error is None
    exact = plaintext_sq_distances(np.vstack([data[n] for n in session.names]), 1.0, 8)
    assert np.array_equal(new.outcome.integer, exact) and new.outcome.lost == ["party-0"]


def test_with_nobody_back_within_the_grace_period_the_restored_session_fails_closed(
        tmp_path):
    data = random_data(list(SIZES), 3, seed=45)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 12)
    new = _restarted(session, tmp_path)
    with pytest.raises(PeerError, match="parties remain"):
        for name in session.names:
            new.party_lost(name, "its grace period ended")
            if new.error is not None:
                raise new.error
    assert not (tmp_path / "result.npy").exists()
    assert not (tmp_path / "session.journal").exists()  # nothing to resume


# -- the journal's first record, the restore's preconditions and its log line -------------
def test_the_begin_record_holds_the_session_its_rows_primes_and_signed_messages(tmp_path):
    data = random_data(list(SIZES), 3, seed=46)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 3)
    begin = read_journal(tmp_path / "session.journal", KEY)[0]
    assert begin["kind"] == "begin" and begin["session_id"] == "test-session"
    assert begin["parties"] == session.names and begin["n"] == sum(SIZES)
    assert begin["primes"] == [int(p) for p in session.parameters.plan(4).primes]
    for name, raw in zip(session.names, begin["hellos"]):
        hello = pb.Hello.FromString(base64.b64decode(raw))
        assert hello.party_id == name and hello.n_rows == SIZES[session.names.index(name)]
    for name, raw in zip(session.names, begin["confirmations"]):
        assert pb.RosterConfirmation.FromString(base64.b64decode(raw)).party_id == name


def test_only_a_new_journaled_coordinator_restores(tmp_path):
    data = random_data(list(SIZES), 3, seed=47)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 5)
    journal, records = Journal.reopen(tmp_path / "session.journal", KEY)
    plain = Coordinator("test-session", session.parameters, session.names, session.pinned)
    with pytest.raises(ProtocolError, match="^restore a new coordinator that keeps a journal$"):
        plain.restore(records)  # no journal
    late = Coordinator("test-session", session.parameters, session.names, session.pinned,
                       out=tmp_path / "result.npy", journal=journal)
    from protocols._messages import envelope
    hello = envelope(hello=dead.hellos["party-0"])  # the first run's, signed: accepted
    assert late.receive("party-0", hello) == [] and late.phase == "join" and late.hellos
    with pytest.raises(ProtocolError, match="^restore a new coordinator that keeps a journal$"):
        late.restore(records)  # a hello arrived: it is running a session of its own
    journal.close()


def test_a_refused_restore_fails_the_new_coordinator_with_the_cause(tmp_path):
    data = random_data(list(SIZES), 3, seed=48)
    session = Session(data, _params())
    _run_to_crash(session, tmp_path, 5)
    journal, records = Journal.reopen(tmp_path / "session.journal", KEY)
    c = Coordinator("test-session", _params(scale_bits=7), session.names, session.pinned,
                    out=tmp_path / "result.npy", journal=journal)
    with pytest.raises(ParameterError) as caught:
        c.restore(records)
    # the journal's hellos and confirmations are checked again first (phase shares), then
    # the fingerprint of the parameters refuses
    assert (c.phase, c.failed_in) == ("failed", "shares")
    assert isinstance(c.error, ProtocolError) and c.error.__cause__ is caught.value
    assert "config changed" in str(c.error)
    assert (tmp_path / "session.journal").exists()  # kept for another try


def test_a_restore_logs_the_round_the_tiles_held_and_who_must_resume(tmp_path, caplog):
    data = random_data(list(SIZES), 3, seed=49)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 17)
    records = read_journal(tmp_path / "session.journal", KEY)
    held = sum(r["kind"] == "tile" for r in records)
    total = len(dead.plan.primes) * len(_tile_list(session))
    with caplog.at_level(logging.WARNING, logger="protocols"):
        _restarted(session, tmp_path)
    assert f"session 'test-session' restored from its journal in round 1: {held} of " \
        f"{total} tiles held; waiting for {sorted(session.names)} to resume" in \
        [r.getMessage() for r in caplog.records]


def _tile_list(session):
    from protocols._plans import session_plan
    plan = session.parameters.plan(len(session.names))
    return session_plan(plan, session.parameters).tiles(sum(SIZES))


def test_a_restored_partys_second_resume_is_an_ordinary_one(tmp_path):
    # the first resume after the restore replays from the start of the restored round
    # (restarted); a later break of the same party resumes from what it received
    data = random_data(list(SIZES), 3, seed=50)
    session = Session(data, _params())
    link, dead = _run_to_crash(session, tmp_path, 10)
    new = _restarted(session, tmp_path)
    accepted = _resume_all(link, new, session)
    assert all(a.restarted for a in accepted.values())
    for _ in range(5):
        link.step()
    link.cut("party-0")
    again = link.resume("party-0")
    assert again.restarted is False and new.resumes == 5
    link.run()
    assert np.array_equal(new.outcome.integer, _exact(session, data))

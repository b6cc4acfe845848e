"""protocols/_party.py pinned down, continued (mutation testing, docs/testing.md): the
remaining roster checks each on its own, what a party does after a session ended, the
message kinds a party never receives, and the warnings it logs.

Every refusal is checked for its class, the party blamed, the phase and the exact text,
and that the refused message changed nothing a later step relies on.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from finite_field import OmniFCError, ProtocolError
from protocols import Party
from protocols._crypto import MaskView
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import Session, random_data
from test_party_bites import (PARAMS, _envelope, _in_phase, _rebuilt, _refusal,
                              _result, _roster_for, _says, _signed)


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
    monkeypatch.setattr(party_module, "encode_rows", out_of_memory)
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

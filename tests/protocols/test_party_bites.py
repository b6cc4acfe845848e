"""protocols/_party.py pinned down: checks a malicious coordinator could slip past, each
found by planting a bug or by mutation testing (docs/testing.md lists which).
"""

from __future__ import annotations

import pytest

from finite_field import PeerError
from protocols import Party, SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import Session, random_data

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
    assert list(party.receive(_rebuilt(env, [e.hello for e in env.roster.parties])))
    assert party.phase == "shares" and party.names == ["party-0", "party-1", "party-2"]

"""Every party checks the pair list of each ``pairs`` session in full before it computes
anything: the roster of one round of a list split at the public cap
(omnifc._secure_knn.pair_rounds), with its list replaced by a coordinator that does not
check it (duplicate, reversed duplicate, cap + 1 pairs, a row out of range, a row with
itself, another list than the parties' configs), is refused by every party before it
confirms the roster (no key, no share)."""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import ParameterError, PeerError, ProtocolError
from protocols import SessionParameters
from protocol_helpers import Session

pytestmark = pytest.mark.timeout(60)

# -- every party refuses a bad list in a round's roster ------------------------------------

CAP = 6
ROUND = ((1, 2), (1, 3), (2, 3), (4, 6), (4, 7), (6, 7))  # one round: exactly the cap


def _round_session(rows=ROUND):
    rng = np.random.default_rng(3)
    data = {f"p{i}": rng.uniform(-1, 1, (3, 2)) for i in range(3)}
    params = SessionParameters(dim=2, bound=1.0, scale_bits=8, layout="pairs",
                               layout_rows=rows, max_pairs=CAP)
    return Session(data, params)


def _tampered_rosters(session, rows):
    """The coordinator's roster broadcast with its pair list replaced by ``rows``."""
    out = []
    for name, env in session.hellos().items():
        out = session.coordinator.receive(name, env) or out
    assert out and all(env.HasField("roster") for _, env in out)
    for _, env in out:
        del env.roster.parameters.layout_rows[:]
        env.roster.parameters.layout_rows.extend(int(v) for v in np.ravel(rows))
    return out


def test_an_honest_round_at_the_cap_is_confirmed_by_every_party():
    session = _round_session()
    out = _tampered_rosters(session, ROUND)  # unchanged
    for name, env in out:
        replies = list(session.parties[name].receive(env))
        assert replies and replies[0].HasField("confirmation")


@pytest.mark.parametrize("rows, match", [
    (ROUND[:-1] + ((1, 2),), r"\{1, 2\} is listed 2 times"),                  # duplicate
    (ROUND[:-1] + ((2, 1),), r"\{1, 2\} is listed 2 times"),                  # reversed
    (ROUND + ((0, 8),), r"7 pairs, more than the public cap max_pairs = 6"),  # cap + 1
    (ROUND[:-1] + ((5, 5),), r"a row with itself"),
    (ROUND[:-1] + ((0, 8),), r"roster parameters differ .*'layout_rows'"),    # another list
])
def test_every_party_refuses_a_bad_round_list_before_confirming(rows, match):
    session = _round_session()
    session.coordinator.session.bind = lambda *args, **kwargs: None  # careless coordinator
    for name, env in _tampered_rosters(session, rows):
        party = session.parties[name]
        with pytest.raises((ProtocolError, PeerError, ParameterError), match=match):
            list(party.receive(env))
        assert party.phase == "failed" and party.failed_in == "join"
        assert not hasattr(party, "keys") and not hasattr(party, "held")


def test_every_party_refuses_a_round_list_out_of_the_rosters_range():
    # every config carries the list (a row is checked against n only once the roster is
    # known), and the coordinator does not check it: each party does
    bad = ROUND[:-1] + ((6, 9),)
    session = _round_session(bad)
    session.coordinator.session.bind = lambda *args, **kwargs: None
    for name, env in _tampered_rosters(session, bad):
        party = session.parties[name]
        with pytest.raises(ProtocolError, match=r"lists row 9, but the roster has n = 9"):
            list(party.receive(env))
        assert party.phase == "failed" and party.failed_in == "join"
        assert not hasattr(party, "keys") and not hasattr(party, "held")

"""The layout parameters (protocols/_layouts.py): what every party refuses, and when.

A layout is checked twice before anything is computed: when the parameters are made
(duplicates, caps, a pair of a row with itself, rows given to the full layout), and when the
roster is known, by every party before it confirms the roster (so before any key, share or
evaluation) and by the coordinator before it sends the roster (a row index at or above the
roster's n, more landmarks drawn than there are rows). A pair list that differs between a
party's config and the roster is refused like any other parameter, and the session
fingerprint covers it.
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import ParameterError, PeerError, ProtocolError
from protocols import (ConfigParameters, Party, PartyEntry, SessionConfig, SessionParameters,
                       TLSSettings, dump_session_config, load_session_config,
                       parameters_from_config, session_fingerprint)
from protocols._generated import omnifc_pb2 as pb
from protocols._layouts import draw_landmarks, resolve_layout
from protocol_helpers import Session, random_data

pytestmark = pytest.mark.timeout(60)


def params(**layout) -> SessionParameters:
    return SessionParameters(dim=3, bound=1.0, scale_bits=8, **layout)


# -- refused when the parameters are made -------------------------------------------------

@pytest.mark.parametrize("layout, match", [
    (dict(layout="landmarks", layout_rows=(3, 1, 3)), "row 3 is listed twice"),
    (dict(layout="landmarks", layout_rows=(0, 1, 2), max_landmarks=2),
     "3 landmarks, more than the public cap max_landmarks = 2"),
    (dict(layout="landmarks", n_landmarks=5, max_landmarks=4),
     "5 landmarks, more than the public cap"),
    (dict(layout="landmarks"), "needs the landmark rows"),
    (dict(layout="landmarks", layout_rows=(0, 1), n_landmarks=3), "n_landmarks must be 0 or"),
    (dict(layout="landmarks", layout_rows=(-1,)), r"integers in \[0, 2\^40\)"),
    (dict(layout="landmarks", layout_rows=(1 << 40,)), r"integers in \[0, 2\^40\)"),
    (dict(layout="pairs", layout_rows=(0, 1), max_pairs=(1 << 19) + 1), "max_pairs must be <="),
    (dict(layout="landmarks", n_landmarks=2, max_landmarks=(1 << 18) + 1),
     "max_landmarks must be <="),
    (dict(layout="pairs", layout_rows=((0, 1), (2, 2))), r"pair 1 is \(2, 2\): a row with"),
    (dict(layout="pairs", layout_rows=((0, 1), (5, 4), (1, 0))), r"\{0, 1\} is listed 2"),
    (dict(layout="pairs", layout_rows=(0, 1, 2)), "an even count"),
    (dict(layout="pairs", layout_rows=((0, 1), (1, 2), (2, 3)), max_pairs=2),
     "3 pairs, more than the public cap max_pairs = 2"),
    (dict(layout="pairs", layout_rows=(0, 1), n_landmarks=1), "draws no landmarks"),
    (dict(layout="full", layout_rows=(0, 1)), "layout_rows must be empty"),
    (dict(layout="full", n_landmarks=2), "n_landmarks 0"),
    (dict(layout="dense"), "layout must be one of"),
    (dict(layout="landmarks", n_landmarks=1025, max_landmarks=2000, chunk_bytes=4096),
     "more than chunk_bytes = 4096"),
])
def test_bad_layouts_are_refused_when_the_parameters_are_made(layout, match):
    with pytest.raises(ParameterError, match=match):
        params(**layout)


def test_a_layout_needs_a_distance_session():
    with pytest.raises(ParameterError, match="for distance sessions"):
        SessionParameters(dim=3, bound=1.0, kind="sum", layout="landmarks", n_landmarks=2)


def test_pairs_are_accepted_as_pairs_or_flat_and_stored_flat():
    assert params(layout="pairs", layout_rows=[(0, 1), (3, 2)]).layout_rows == (0, 1, 3, 2)
    assert params(layout="pairs", layout_rows=(0, 1, 3, 2)).layout_rows == (0, 1, 3, 2)


def _config(**values) -> SessionConfig:
    parties = tuple(PartyEntry(f"p{i}", bytes([i + 1]) * 32) for i in range(3))
    return SessionConfig("ab" * 16, "127.0.0.1:50051", parties,
                         tls=TLSSettings(enabled=False),
                         parameters=ConfigParameters(**values))


def test_the_config_refuses_bad_layouts_naming_the_table():
    with pytest.raises(ParameterError, match=r"^\[parameters\] pairs must be distinct"):
        ConfigParameters(layout="pairs", layout_rows=(0, 1, 1, 0))
    with pytest.raises(ParameterError, match=r"^\[parameters\] layout must be one of"):
        ConfigParameters(layout="dense")
    with pytest.raises(ParameterError, match=r"^\[parameters\] max_pairs must be >= 1"):
        ConfigParameters(max_pairs=0)


def test_a_pair_list_in_toml_round_trips_and_reaches_session_parameters(tmp_path):
    config = _config(layout="pairs", layout_rows=(0, 5, 2, 3), max_pairs=10)
    path = dump_session_config(config, tmp_path / "session.toml")
    assert "\nlayout_rows = [0, 5, 2, 3]" in path.read_text()
    again = load_session_config(path)
    assert again == config
    p = parameters_from_config(again)
    assert (p.layout, p.layout_rows, p.max_pairs) == ("pairs", (0, 5, 2, 3), 10)
    # pairs written as a TOML list of [i, j] lists are read as the same flat list
    text = path.read_text().replace("layout_rows = [0, 5, 2, 3]",
                                    "layout_rows = [[0, 5], [2, 3]]")
    (tmp_path / "nested.toml").write_text(text)
    assert load_session_config(tmp_path / "nested.toml").parameters == config.parameters


def test_the_fingerprint_binds_the_pair_list_and_leaves_old_configs_alone():
    base = _config(layout="pairs", layout_rows=(0, 1, 2, 3))
    assert session_fingerprint(base) != session_fingerprint(
        _config(layout="pairs", layout_rows=(0, 1, 2, 4)))
    assert session_fingerprint(base) != session_fingerprint(
        _config(layout="pairs", layout_rows=(2, 3, 0, 1)))  # order is the result's order
    assert session_fingerprint(base) != session_fingerprint(
        _config(layout="pairs", layout_rows=(0, 1, 2, 3), max_pairs=7))
    from protocols._config import canonical_session
    assert not {"layout", "layout_rows", "n_landmarks", "max_landmarks", "max_pairs"} & \
        set(canonical_session(_config())["parameters"])


def test_layout_parameters_round_trip_through_the_proto():
    for p in (params(layout="pairs", layout_rows=(4, 1, 0, 2), max_pairs=9),
              params(layout="landmarks", n_landmarks=3, max_landmarks=11)):
        plan = p.plan(3)
        back = SessionParameters.from_proto(
            pb.Parameters.FromString(p.to_proto(plan).SerializeToString()))
        assert back == p.with_plan(plan)
        assert (back.layout, back.layout_rows, back.n_landmarks, back.max_landmarks,
                back.max_pairs) == (p.layout, p.layout_rows, p.n_landmarks,
                                    p.max_landmarks, p.max_pairs)


# -- refused when the roster is known -----------------------------------------------------

def _roster(session: Session):
    """The coordinator's roster broadcast once every hello is in: [(party, envelope)]."""
    out = []
    for name, env in session.hellos().items():
        out = session.coordinator.receive(name, env) or out
    assert out and all(env.HasField("roster") for _, env in out)
    return out


def _unchecked(session: Session) -> Session:
    """The coordinator sends its roster without checking the layout (a careless or
    malicious coordinator): each party must refuse on its own."""
    session.coordinator.session.bind = lambda *args, **kwargs: None
    return session


@pytest.mark.parametrize("layout, match", [
    (dict(layout="landmarks", layout_rows=(2, 9)), r"lists row 9, but the roster has n = 9"),
    (dict(layout="pairs", layout_rows=(0, 8, 3, 12)), r"lists row 12, but the roster has"),
    (dict(layout="landmarks", n_landmarks=10), r"n_landmarks = 10 landmarks cannot be drawn"),
])
def test_every_party_refuses_a_layout_out_of_the_rosters_range_before_confirming(layout,
                                                                                  match):
    session = _unchecked(Session(random_data([4, 3, 2], 3, seed=1), params(**layout)))
    for name, env in _roster(session):
        with pytest.raises(ProtocolError, match=match) as refused:
            list(session.parties[name].receive(env))
        assert isinstance(refused.value.__cause__, ParameterError)
        party = session.parties[name]
        assert party.phase == "failed" and party.failed_in == "join"
        assert not hasattr(party, "roster_digest") or not hasattr(party, "keys")


@pytest.mark.parametrize("layout, match", [
    (dict(layout="landmarks", layout_rows=(2, 9)), r"lists row 9, but the roster has n = 9"),
    (dict(layout="landmarks", n_landmarks=10), r"cannot be drawn from the n = 9 rows"),
])
def test_the_coordinator_refuses_it_before_sending_the_roster(layout, match):
    session = Session(random_data([4, 3, 2], 3, seed=1), params(**layout))
    hellos = list(session.hellos().items())
    for name, env in hellos[:-1]:
        assert session.coordinator.receive(name, env) == []
    with pytest.raises(ProtocolError, match=match):
        session.coordinator.receive(*hellos[-1])
    assert session.coordinator.phase == "failed"


def test_a_party_refuses_a_roster_whose_pair_list_differs_from_its_config():
    data = random_data([3, 3, 3], 3, seed=2)
    theirs = params(layout="pairs", layout_rows=(0, 4, 1, 7))
    mine = params(layout="pairs", layout_rows=(0, 4, 1, 8))
    session = Session(data, theirs)
    name = session.names[1]
    session.parties[name] = Party(name, data[name], session_id="test-session",
                                  parameters=mine, identity_key=session.keys[name],
                                  pinned=session.pinned)
    for dest, env in _roster(session):
        if dest != name:
            continue
        with pytest.raises(PeerError, match=r"roster parameters differ .*'layout_rows'"):
            list(session.parties[dest].receive(env))


# -- drawn landmarks ----------------------------------------------------------------------

def test_drawn_landmarks_are_distinct_in_range_and_bound_to_the_run():
    a = draw_landmarks("s", bytes(32), n=50, count=5)
    assert np.array_equal(a, draw_landmarks("s", bytes(32), n=50, count=5))
    assert a.tolist() == sorted(set(a.tolist())) and 0 <= a.min() and a.max() < 50
    # another digest or session draws another set: a false positive has probability
    # 1 / C(50, 5) < 5e-7 per comparison
    assert not np.array_equal(a, draw_landmarks("s", bytes(31) + b"\x01", n=50, count=5))
    assert not np.array_equal(a, draw_landmarks("t", bytes(32), n=50, count=5))
    assert draw_landmarks("s", bytes(32), n=7, count=7).tolist() == list(range(7))


def test_drawn_landmarks_are_uniform_over_rows():
    # 3000 draws of 2 of 6 rows: each row is chosen with probability 1/3 (1000 expected,
    # sd 25.8); the bound of 150 is 5.8 sd: false-positive rate below 1e-8 per row
    counts = np.zeros(6, dtype=np.int64)
    for i in range(3000):
        counts[draw_landmarks("s", i.to_bytes(32, "big"), n=6, count=2)] += 1
    assert np.abs(counts - 1000).max() < 150, counts


def test_every_party_and_the_coordinator_draw_the_same_landmarks_from_the_roster():
    session = Session(random_data([4, 3, 2], 3, seed=3),
                      params(layout="landmarks", n_landmarks=4))
    for name, env in _roster(session):
        list(session.parties[name].receive(env))
    drawn = {name: party.session.landmarks.tolist()
             for name, party in session.parties.items()}
    coordinator = session.coordinator
    assert drawn == {name: coordinator.session.landmarks.tolist() for name in drawn}
    expected = resolve_layout(coordinator.parameters, 9, "test-session",
                              coordinator.roster_digest)
    assert coordinator.session.landmarks.tolist() == expected.tolist()
    assert len(expected) == 4


def test_the_largest_pair_list_fits_one_roster_message():
    from protocols._layouts import MAX_PAIRS
    from protocols._tls import MAX_MESSAGE_BYTES

    rows = np.arange(2 * MAX_PAIRS, dtype=np.int64) + (1 << 23)  # 4-byte varints
    p = SessionParameters(dim=3, bound=1.0, layout="pairs", layout_rows=rows.tolist(),
                          max_rows_total=10_000_000, max_rows_per_party=10_000_000)
    assert p.max_pairs == MAX_PAIRS
    size = p.to_proto(p.plan(3)).ByteSize()
    assert size < 4.2e6 and size < MAX_MESSAGE_BYTES - 3 * 2**20  # 3 MiB for the rest

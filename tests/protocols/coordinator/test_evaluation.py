"""protocols/_coordinator.py's evaluation and result pinned down (mutation testing,
docs/testing.md, issue 14): ``_on_tile``, ``_accumulate``, ``_check_tile``, ``_finish`` and
``Outcome``.

Every refusal of an evaluation tile is checked for its exact class, the party blamed, the
phase and the text, each condition of a compound check alone, and that it recorded
nothing. Results are checked against D of the plaintext rows with Python integers
(``plaintext_sq_distances``), sums against the exact integer sum of the quantized rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from protocols import Coordinator, SessionParameters
from protocols._generated import omnifc_pb2 as pb
from protocol_helpers import Session, plaintext_sq_distances, quantize, random_data
from .test_refusals import PARAMS, SID, _copy, _pump, _refused, _says

pytestmark = pytest.mark.timeout(120)

NAMES = [f"party-{i}" for i in range(5)]


def _round1(params=PARAMS, sizes=(3, 2, 4, 3, 2), seed=7, responders=None):
    """Round 1 started and every party's tiles made (seeds relayed), none delivered yet:
    returns the session and the held (sender, tile envelope) in the order they were sent."""
    data = random_data(list(sizes), 3, seed=seed)
    session = Session(data, params)
    if responders is not None:
        session.coordinator = Coordinator(SID, params, session.names, session.pinned,
                                          responders=responders)
    queue = session.run_until("evaluation")
    held = _pump(session, queue, hold=lambda sender, env: env.HasField("tile"))
    assert held and session.coordinator.phase == "evaluation"
    return session, data, held


def _d(session, data, scale_bits=8):
    return plaintext_sq_distances(np.vstack([data[n] for n in session.names]), 1.0,
                                  scale_bits)


def _first(held, name):
    return next(env for sender, env in held if sender == name)


def _refused_tile(session, sender, env):
    """The tile is refused with a PeerError in phase evaluation; nothing was recorded."""
    coordinator = session.coordinator
    delivered = {r: set(v) for r, v in coordinator.delivered.items()}
    error = _refused(coordinator, sender, env)
    assert coordinator.delivered == delivered and coordinator.outcome is None
    return error


# -- refusals --------------------------------------------------------------------------------

def test_a_tile_from_another_sender_than_its_connection_is_refused():
    session, _, held = _round1()
    env = _copy(_first(held, "party-1"), sender="party-2")
    _says(_refused_tile(session, "party-1", env), "party-1", "evaluation",
          f"evaluation tile from a party outside the responding set {NAMES}")


def test_a_tile_from_a_party_outside_the_responding_set_is_refused():
    chosen = ["party-0", "party-2", "party-3", "party-4"]
    session, _, held = _round1(responders=chosen)
    assert session.coordinator.responders == chosen
    env = _first(held, "party-0")   # party-1 made no tile: it is not in B; it claims one
    forged = _copy(env, sender="party-1")
    _says(_refused_tile(session, "party-1", forged), "party-1", "evaluation",
          f"evaluation tile from a party outside the responding set {chosen}")


@pytest.mark.parametrize("round_", [0, 2])
def test_a_tile_of_another_round_is_refused_with_both_round_numbers(round_):
    session, _, held = _round1()
    env = _copy(_first(held, "party-3"), round=round_)
    _says(_refused_tile(session, "party-3", env), "party-3", "evaluation",
          f"evaluation tile for round {round_}, expected 1 (replayed)")


@pytest.mark.parametrize("field, delta", [("prime_index", 1), ("tile_index", 1),
                                          ("row_start", 1), ("row_stop", -1)])
def test_a_tile_off_the_schedule_is_refused_with_its_coordinates(field, delta):
    # two primes and three tiles: each coordinate one past the last one allowed
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, chunk_bytes=4096)
    session, _, held = _round1(params, sizes=(20, 15, 10, 12, 8))
    coordinator = session.coordinator
    tiles = coordinator.tiles
    assert len(coordinator.plan.primes) == 2 and len(tiles) == 3
    env = next(e for s, e in held if s == "party-2" and e.tile.prime_index == 1
               and e.tile.tile_index == 2)
    tile = env.tile
    value = {"prime_index": 2, "tile_index": 3, "row_start": tile.row_start + 1,
             "row_stop": tile.row_stop - 1}[field]
    forged = _copy(env, **{field: value})
    t = forged.tile
    _says(_refused_tile(session, "party-2", forged), "party-2", "evaluation",
          f"evaluation tile (prime {t.prime_index}, tile {t.tile_index}, rows "
          f"{t.row_start}:{t.row_stop}) does not fit the schedule")


def test_the_last_prime_and_tile_of_the_schedule_are_accepted():
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, chunk_bytes=4096)
    session, data, held = _round1(params, sizes=(20, 15, 10, 12, 8))
    coordinator = session.coordinator
    last = [(s, e) for s, e in held if e.tile.prime_index == 1 and e.tile.tile_index == 2]
    assert len(last) == 5
    assert coordinator.receive(*last[0]) == []
    assert (1, 2) in coordinator.delivered[last[0][0]]
    for sender, env in held:
        if (sender, env) != last[0]:
            coordinator.receive(sender, env)
    assert np.array_equal(coordinator.outcome.integer, _d(session, data, 16))


@pytest.mark.parametrize("integrity", ["detect", "off"])
@pytest.mark.parametrize("change", [False, True], ids=["identical", "different"])
def test_a_second_copy_of_any_tile_fails_the_session_naming_the_party(integrity, change):
    # no tile twice: an honest party re-sends only what a resume does not list as held, so
    # a second copy of any tile (a replay, or a tamper) is refused naming its sender and
    # nothing more is recorded; every tile of the round in turn
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity=integrity)
    count = len(_round1(params)[2])
    for position in range(count - 1):  # the last one would finish the round first
        session, _, held = _round1(params)
        for sender, env in held[:position + 1]:
            assert session.coordinator.receive(sender, env) == []
        sender, env = held[position]
        t = env.tile
        again = _copy(env)
        if change:
            again.tile.values = bytes([again.tile.values[0] ^ 1]) + again.tile.values[1:]
        _says(_refused_tile(session, sender, again), sender, "evaluation",
              f"a second copy of evaluation tile {t.tile_index} for prime {t.prime_index} "
              "(taken already; a party re-sends only the tiles the coordinator does not "
              "hold): replayed or deviating upload")


def test_a_tile_in_phase_shares_is_refused_as_out_of_order():
    session, _, held = _round1()
    later = Session(random_data([3, 2, 4, 3, 2], 3, seed=7), PARAMS)
    later.run_until("shares")
    assert later.coordinator.phase == "shares"
    error = _refused(later.coordinator, "party-0", _first(held, "party-0"))
    _says(error, "party-0", "shares", "out-of-order evaluation tile in phase 'shares'")


@pytest.mark.parametrize("delta", [-4, 4])
def test_a_tile_of_the_wrong_size_is_refused_with_both_sizes(delta):
    session, _, held = _round1()
    env = _first(held, "party-4")
    size = len(env.tile.values)
    assert size == 4 * 14 * 14   # n = 14, the first tile holds every row: 14 x 14
    forged = _copy(env, values=env.tile.values[:size + delta] if delta < 0
                   else env.tile.values + bytes(delta))
    _says(_refused_tile(session, "party-4", forged), "party-4", "evaluation",
          f"payload holds {size + delta} bytes, expected {size} ({size // 4} field elements)")


def _sum_round1(rows=2, dim=3, m=3):
    params = SessionParameters(dim=dim, rows=rows, kind="sum", bound=1.0, scale_bits=8,
                               chunk_bytes=4096)
    data = {f"party-{i}": np.random.default_rng(i).uniform(-1, 1, (rows, dim))
            for i in range(m)}
    session = Session(data, params)
    held = _pump(session, session.run_until("evaluation"),
                 hold=lambda sender, env: env.HasField("tile"))
    return session, data, held


@pytest.mark.parametrize("path", ["masked, unchecked", "transparent", "checked", "sum"])
def test_a_tile_value_of_p_is_refused_in_every_accumulation_path(path):
    if path == "sum":
        session, _, held = _sum_round1()
    else:
        params = SessionParameters(dim=3, bound=1.0, scale_bits=8,
                                   integrity="detect" if path == "checked" else "off",
                                   mode="transparent" if path == "transparent" else "masked")
        session, _, held = _round1(params)
        assert (session.coordinator.checks is not None) == (path == "checked")
    p = session.coordinator.plan.primes[0]
    sender, env = held[-1]
    values = np.frombuffer(env.tile.values, dtype="<u4").copy()
    values[-1] = p
    forged = _copy(env, values=values.tobytes())
    _says(_refused_tile(session, sender, forged), sender, "evaluation",
          f"evaluation tile holds a value >= p = {p}")


# -- the result ----------------------------------------------------------------------------

def _deliver_all(session, held):
    out = []
    for sender, env in held:
        out = session.coordinator.receive(sender, env)
    return out


def test_the_results_and_the_outcome_of_a_distance_session_are_exact():
    sizes = (3, 2, 4, 3, 2)
    session, data, held = _round1(sizes=sizes)
    coordinator = session.coordinator
    out = _deliver_all(session, held)
    status = "checked: s = 2 parity check(s) over 5 responders, radius 1, A = 0"
    assert [d for d, _ in out] == NAMES
    for name, (dest, env) in zip(NAMES, out):
        expected = pb.Result(session_id=SID, party_id=name, round=1, responders=NAMES,
                             integrity=status)
        assert env.result == expected
    outcome = coordinator.outcome
    d = _d(session, data)
    assert outcome.integer.dtype == np.int64 and np.array_equal(outcome.integer, d)
    assert outcome.integer is not outcome.integer           # materialized on each access
    assert np.array_equal(outcome.values, d / 4.0 ** 8)
    assert outcome.labels is None
    assert (outcome.party_names, outcome.row_offsets, outcome.rows) == \
        (NAMES, [0, 3, 5, 9, 12], list(sizes))
    assert (outcome.responders, outcome.round, outcome.lost) == (NAMES, 1, [])
    assert (outcome.integrity, outcome.deviations) == (status, [])
    params = outcome.parameters
    assert {k: params[k] for k in ("mode", "responders", "round", "integrity",
                                   "mask_degree")} == \
        {"mode": "masked", "responders": NAMES, "round": 1, "integrity": "detect",
         "mask_degree": 0}
    assert params["primes"] == list(coordinator.plan.primes) and params["parties"] == 5
    assert outcome.store.parameters == params
    assert set(outcome.stats) == {"join", "shares", "evaluation", "decode", "result"}
    assert all(isinstance(v, tuple) and len(v) == 2 for v in outcome.stats.values())
    assert coordinator.phase == "done" and coordinator._store is None
    assert repr(outcome) == (f"Outcome({outcome.store!r}, round=1, responders={NAMES}, "
                             f"integrity={status!r})")


def test_the_results_and_the_outcome_of_a_sum_session_are_exact():
    session, data, held = _sum_round1(rows=2, dim=3, m=3)
    out = _deliver_all(session, held)
    names = ["party-0", "party-1", "party-2"]
    assert [d for d, _ in out] == names
    for name, (_, env) in zip(names, out):
        assert env.result == pb.Result(session_id=SID, party_id=name, round=1,
                                       responders=names, integrity="off")
    outcome = session.coordinator.outcome
    exact = sum(quantize(data[x], 1.0, 8).astype(object) for x in names)
    assert outcome.integer.shape == (2, 3) and outcome.integer.tolist() == exact.tolist()
    assert outcome.values.tolist() == [[v / 256 for v in row] for row in exact.tolist()]
    assert outcome.store is None and outcome.integrity == "off"
    assert (outcome.row_offsets, outcome.rows) == ([0, 2, 4], [2, 2, 2])
    assert repr(outcome) == (f"Outcome(sum (2, 3), round=1, responders={names}, "
                             "integrity='off')")


def test_an_outcome_built_from_arrays_returns_them_and_says_what_it_holds():
    from protocols._outcome import Outcome

    integer, values = np.arange(6).reshape(2, 3), np.ones((2, 3))
    outcome = Outcome(integer=integer, values=values, labels=[1], party_names=("a",),
                      row_offsets=(0,), rows=(2,), responders=("a",), round=3,
                      parameters={"x": 1}, stats={"join": (1.0, 2)}, lost=["b"],
                      integrity="off", deviations=[{"round": 1}])
    assert outcome.integer is integer and outcome.values is values
    assert (outcome.party_names, outcome.row_offsets, outcome.rows, outcome.responders) == \
        (["a"], [0], [2], ["a"])
    assert (outcome.round, outcome.parameters, outcome.stats, outcome.lost) == \
        (3, {"x": 1}, {"join": (1.0, 2)}, ["b"])
    assert (outcome.integrity, outcome.deviations, outcome.labels, outcome.store) == \
        ("off", [{"round": 1}], [1], None)
    assert repr(outcome) == "Outcome(sum (2, 3), round=3, responders=['a'], integrity='off')"
    empty = Outcome()
    assert (empty.integer, empty.values, empty.store, empty.labels) == (None, None, None,
                                                                         None)
    assert (empty.party_names, empty.row_offsets, empty.rows, empty.responders, empty.lost,
            empty.deviations, empty.parameters, empty.stats) == ([], [], [], [], [], [], {},
                                                                 {})
    assert (empty.round, empty.integrity) == (0, "off")
    assert repr(empty) == "Outcome(sum None, round=0, responders=[], integrity='off')"


def test_a_corrupted_sum_fails_the_decode_naming_the_bound():
    from finite_field import IntegrityError

    session, data, held = _sum_round1(rows=2, dim=3, m=3)
    coordinator = session.coordinator
    offset = coordinator.plan.offset
    assert offset == 3 * 256
    sender, env = held[-1]
    p = coordinator.plan.primes[0]
    values = np.frombuffer(env.tile.values, dtype="<u4").copy()
    values[0] = (int(values[0]) + 2 * offset + 1) % p   # far outside [-offset, offset]
    for s, e in held[:-1]:
        coordinator.receive(s, e)
    with pytest.raises(IntegrityError) as info:
        coordinator.receive(sender, _copy(env, values=values.tobytes()))
    error = info.value
    assert (error.party, error.phase) == (None, "decode")
    assert str(error) == ("the decoded result failed its integrity check in phase 'decode': "
                          f"every decoded sum must lie in [-{offset}, {offset}] (m times the "
                          "largest quantized value); some do not: a contribution was "
                          "corrupted")
    assert coordinator.outcome is None and coordinator.failed_in == "decode"


def test_a_corrupted_unchecked_upload_fails_the_decode_naming_the_bound_and_b():
    from finite_field import IntegrityError

    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="off")
    session, data, held = _round1(params)
    coordinator = session.coordinator
    sender, env = held[-1]
    p = coordinator.plan.primes[0]
    values = np.frombuffer(env.tile.values, dtype="<u4").copy()
    values[1] = (int(values[1]) + p // 2) % p
    for s, e in held[:-1]:
        coordinator.receive(s, e)
    with pytest.raises(IntegrityError) as info:
        coordinator.receive(sender, _copy(env, values=values.tobytes()))
    bound = coordinator.plan.distance_bound
    assert bound == 3 * (2 * 256) ** 2
    assert str(info.value) == (
        "the decoded result failed its integrity check in phase 'decode': every decoded "
        f"squared distance must lie in [0, {bound}] (the no-wrap bound of the public "
        f"parameters); some do not: an uploaded evaluation of {NAMES} was corrupted")
    assert coordinator.outcome is None and coordinator._acc is None


# -- the clustering callback ------------------------------------------------------------------

def _clustered(cluster, **storage):
    data = random_data([3, 2, 4, 3, 2], 3, seed=7)
    session = Session(data, PARAMS)
    session.coordinator = Coordinator(SID, PARAMS, session.names, session.pinned,
                                      cluster=cluster, **storage)
    queue = session.run_until("evaluation")
    held = _pump(session, queue, hold=lambda sender, env: env.HasField("tile"))
    return session, data, held


def test_each_party_gets_the_labels_of_its_own_rows():
    seen = []

    def cluster(view):
        seen.append(type(view))
        return (np.arange(view.shape[0]) * 7 % 5).tolist()   # a list: made an array

    session, data, held = _clustered(cluster)
    out = _deliver_all(session, held)
    labels = [i * 7 % 5 for i in range(14)]
    bounds = [0, 3, 5, 9, 12, 14]
    assert seen == [np.ndarray]                  # small and in RAM: the dense matrix
    for i, (dest, env) in enumerate(out):
        assert dest == NAMES[i]
        assert list(env.result.labels) == labels[bounds[i]:bounds[i + 1]]
    outcome = session.coordinator.outcome
    assert outcome.labels.dtype == np.int64 and outcome.labels.tolist() == labels


def test_a_result_on_disk_is_clustered_through_the_tiled_view(tmp_path):
    from protocols._accumulator import TiledDistances

    seen = []

    def cluster(view):
        seen.append(view)
        return np.zeros((view.shape[0], 1), dtype=np.int8)    # reshaped to one label a row

    session, data, held = _clustered(cluster, out=tmp_path / "d.npy")
    _deliver_all(session, held)
    [view] = seen
    assert type(view) is TiledDistances and view.store.on_disk
    assert np.array_equal(np.asarray(view), _d(session, data) / 4.0 ** 8)
    labels = session.coordinator.outcome.labels
    assert labels.dtype == np.int64 and labels.tolist() == [0] * 14   # int8 (14, 1) given


@pytest.mark.parametrize("budget, dense", [(4 * 8 * 14 * 14, True),
                                           (4 * 8 * 14 * 14 - 1, False)])
def test_the_dense_matrix_is_passed_only_when_four_float_copies_fit_the_budget(budget,
                                                                               dense):
    from protocols._accumulator import TiledDistances

    seen = []
    session, data, held = _clustered(lambda view: seen.append(type(view)) or [0] * 14,
                                     memory_budget=budget)
    _deliver_all(session, held)
    assert seen == [np.ndarray if dense else TiledDistances]


def test_a_result_over_the_memory_budget_is_clustered_through_the_tiled_view():
    from protocols._accumulator import TiledDistances

    seen = []
    # 14 x 14 int32 is 784 bytes: in RAM under 1000 bytes, but four float copies are not
    session, data, held = _clustered(lambda view: seen.append(type(view)) or [0] * 14,
                                     memory_budget=1000)
    _deliver_all(session, held)
    assert seen == [TiledDistances] and not session.coordinator.outcome.store.on_disk


def test_a_failing_clustering_fails_the_session_in_decode_saying_why():
    from finite_field import ProtocolError

    def cluster(view):
        raise ZeroDivisionError("no clusters")

    session, _, held = _clustered(cluster)
    coordinator = session.coordinator
    with pytest.raises(ProtocolError) as info:
        _deliver_all(session, held)
    assert type(info.value) is ProtocolError
    assert str(info.value) == ("the coordinator's clustering failed in phase 'decode': "
                               "ZeroDivisionError: no clusters")
    assert type(info.value.__cause__) is ZeroDivisionError
    assert coordinator.failed_in == "decode" and coordinator.outcome is None


@pytest.mark.parametrize("count", [13, 15])
def test_a_clustering_with_another_label_count_fails_the_session(count):
    from finite_field import ProtocolError

    session, _, held = _clustered(lambda view: [0] * count)
    with pytest.raises(ProtocolError) as info:
        _deliver_all(session, held)
    assert type(info.value) is ProtocolError
    assert str(info.value) == f"clustering returned {count} labels for 14 rows"
    assert session.coordinator.outcome is None


def test_a_failing_clustering_leaves_no_result_file_behind(tmp_path):
    from finite_field import ProtocolError

    target = tmp_path / "d.npy"

    def cluster(view):
        assert target.exists()          # the finished store is there while clustering
        raise ValueError("bad")

    session, _, held = _clustered(cluster, out=target)
    with pytest.raises(ProtocolError):
        _deliver_all(session, held)
    assert list(tmp_path.iterdir()) == []   # neither the .npy nor its sidecar


def test_a_finished_result_file_is_kept_with_its_sidecar(tmp_path):
    target = tmp_path / "d.npy"
    session, data, held = _clustered(lambda view: [0] * 14, out=target)
    _deliver_all(session, held)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "d.npy.json"]
    assert np.array_equal(np.load(target), _d(session, data))


def test_a_party_lost_after_its_tiles_gets_no_result_and_the_others_after_it_do():
    session, data, held = _round1()
    coordinator = session.coordinator
    mine = [(s, e) for s, e in held if s == "party-1"]
    rest = [(s, e) for s, e in held if s != "party-1"]
    _deliver_all(session, mine)
    assert coordinator.party_lost("party-1") == []       # everything of it is in
    out = _deliver_all(session, rest)
    assert [d for d, _ in out] == ["party-0", "party-2", "party-3", "party-4"]
    outcome = coordinator.outcome
    assert outcome.lost == ["party-1"] and outcome.responders == NAMES
    assert np.array_equal(outcome.integer, _d(session, data))


@pytest.mark.parametrize("sign", [1, -1])
def test_a_sum_at_exactly_m_times_the_bound_is_decoded(sign):
    params = SessionParameters(dim=2, rows=1, kind="sum", bound=1.0, scale_bits=8)
    data = {f"party-{i}": np.full((1, 2), sign * 1.0) for i in range(3)}
    session = Session(data, params)
    _pump(session, session.run_until("evaluation"))
    outcome = session.coordinator.outcome
    offset = session.coordinator.plan.offset
    assert offset == 3 * 256
    assert outcome.integer.tolist() == [[sign * offset] * 2]     # |sum| = m M, not more
    assert outcome.values.tolist() == [[sign * 3.0] * 2]


def test_a_sum_session_clusters_the_dequantized_sums():
    seen = []
    params = SessionParameters(dim=3, rows=2, kind="sum", bound=1.0, scale_bits=8)
    data = {f"party-{i}": np.random.default_rng(i).uniform(-1, 1, (2, 3)) for i in range(3)}
    session = Session(data, params)
    session.coordinator = Coordinator(SID, params, session.names, session.pinned,
                                      cluster=lambda v: seen.append(v.copy()) or [4, 5])
    _pump(session, session.run_until("evaluation"))
    exact = sum(quantize(data[x], 1.0, 8).astype(object) for x in session.names)
    [view] = seen
    assert view.tolist() == [[v / 256 for v in row] for row in exact.tolist()]
    assert session.coordinator.outcome.labels.tolist() == [4, 5]


@pytest.mark.parametrize("sizes", [(3, 2, 4, 3, 2), (3, 2, 4)])
def test_an_unchecked_transparent_session_applies_the_weights_itself(sizes):
    # integrity off (5 parties) or r = 0 (3 parties): the coordinator weights the raw
    # evaluations with c_j and adds them straight into the result
    params = SessionParameters(dim=3, bound=1.0, scale_bits=16, mode="transparent",
                               integrity="off" if len(sizes) == 5 else "detect")
    session, data, held = _round1(params, sizes=sizes)
    assert session.coordinator.checks is None and len(session.coordinator.plan.primes) == 2
    _deliver_all(session, held)
    assert np.array_equal(session.coordinator.outcome.integer, _d(session, data, 16))


def test_a_sum_of_two_tiles_is_exact_and_a_short_second_tile_is_refused():
    session, data, held = _sum_round1(rows=300, dim=4, m=3)     # 1200 elements
    coordinator = session.coordinator
    assert coordinator.tiles == [(0, 1024), (1024, 1200)]
    sender, env = next((s, e) for s, e in held if e.tile.tile_index == 1)
    _deliver_all(session, held)
    exact = sum(quantize(data[x], 1.0, 8).astype(object) for x in session.names)
    assert coordinator.outcome.integer.tolist() == exact.tolist()
    # the same tile, 4 bytes short, in a fresh run of the session
    session, _, held = _sum_round1(rows=300, dim=4, m=3)
    sender, env = next((s, e) for s, e in held if e.tile.tile_index == 1)
    _says(_refused_tile(session, sender, _copy(env, values=env.tile.values[:-4])), sender,
          "evaluation", "payload holds 700 bytes, expected 704 (176 field elements)")


def test_a_failure_in_evaluation_deletes_the_result_file(tmp_path):
    target = tmp_path / "d.npy"
    data = random_data([3, 2, 4, 3, 2], 3, seed=7)
    session = Session(data, PARAMS)
    session.coordinator = Coordinator(SID, PARAMS, session.names, session.pinned,
                                      out=target)
    held = _pump(session, session.run_until("evaluation"),
                 hold=lambda sender, env: env.HasField("tile"))
    sender, env = held[0]
    assert session.coordinator.receive(sender, env) == []
    assert target.exists()                       # accumulated on disk at ``out``
    forged = _copy(env)                          # a different second copy: it fails
    forged.tile.values = bytes([env.tile.values[0] ^ 1]) + env.tile.values[1:]
    _refused_tile(session, sender, forged)
    assert list(tmp_path.iterdir()) == []


def test_a_refused_value_deletes_the_result_file_at_once(tmp_path):
    # the refusal comes from inside the accumulator, so the error's context still holds
    # it: the file must go with the failure, not whenever the error is collected
    target = tmp_path / "d.npy"
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, integrity="off")
    data = random_data([3, 2, 4, 3, 2], 3, seed=7)
    session = Session(data, params)
    session.coordinator = Coordinator(SID, params, session.names, session.pinned,
                                      out=target)
    held = _pump(session, session.run_until("evaluation"),
                 hold=lambda sender, env: env.HasField("tile"))
    sender, env = held[0]
    values = np.frombuffer(env.tile.values, dtype="<u4").copy()
    values[0] = session.coordinator.plan.primes[0]
    assert target.exists()
    error = _refused_tile(session, sender, _copy(env, values=values.tobytes()))
    assert error.__context__ is not None          # the accumulator's own ParameterError
    assert list(tmp_path.iterdir()) == []

"""Sessions of the ``landmarks`` and ``pairs`` layouts (protocols/_layout_plans.py).

Every entry a layout computes equals, bit for bit, the matching entry of the full secure D
of the same data and of the Python-integer D of the quantized rows: one and two primes,
masked and transparent, integrity on and off. The integrity checks catch (and correct)
deviations in a layout's uploads and name the right party through the layout's entry
positions; a dropped party triggers the same retry with fresh masks, garbage fails closed.
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import DeviationError, IntegrityError, ParameterError, PeerError
from protocols import Coordinator, SessionParameters, run_memory_session
from protocols._layout_plans import LandmarkDistances, PairDistances
from protocols._layouts import draw_landmarks
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = pytest.mark.timeout(120)

SIZES = [4, 3, 5, 2]        # m = 4: K = 3 with l = t = 1, r = 1 check
LANDMARKS = (9, 0, 4, 13)   # any order: column c is row LANDMARKS[c]
PAIRS = ((0, 13), (5, 2), (7, 8), (12, 1), (3, 4), (10, 11))


def rows(data):
    return np.concatenate(list(data.values()))


def _params(scale_bits, mode, integrity, **layout):
    return SessionParameters(dim=5, bound=1.0, scale_bits=scale_bits, mode=mode,
                             integrity=integrity, **layout)


@pytest.fixture(scope="module")
def data():
    return random_data(SIZES, 5, seed=7)


@pytest.fixture(scope="module")
def full(data):
    """The full secure D, per scale_bits (one prime at 10 bits, two at 24)."""
    out = {}
    for scale_bits in (10, 24):
        outcome, _ = run_memory_session(data, _params(scale_bits, "masked", "detect"))
        out[scale_bits] = outcome.integer
    return out


@pytest.mark.parametrize("scale_bits, primes", [(10, 1), (24, 2)])
@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("integrity", ["detect", "off"])
def test_landmark_entries_equal_the_full_secure_d_and_python_integers(
        data, full, scale_bits, primes, mode, integrity):
    outcome, _ = run_memory_session(data, _params(scale_bits, mode, integrity,
                                                  layout="landmarks", layout_rows=LANDMARKS))
    assert len(outcome.parameters["primes"]) == primes
    expected = plaintext_sq_distances(rows(data), 1.0, scale_bits)[:, list(LANDMARKS)]
    assert outcome.layout == "landmarks" and outcome.store is None
    assert outcome.landmarks.tolist() == list(LANDMARKS)
    # the storage type of the full layout's store: int32 with one prime, else int64
    assert outcome.integer.dtype == (np.int32 if primes == 1 else np.int64)
    assert outcome.integer.shape == (14, 4)
    assert np.array_equal(outcome.integer, expected)
    assert np.array_equal(outcome.integer, full[scale_bits][:, list(LANDMARKS)])
    assert np.array_equal(outcome.values, expected / 4.0 ** scale_bits)
    assert outcome.integrity.startswith("checked" if integrity == "detect" else "off")


@pytest.mark.parametrize("scale_bits, primes", [(10, 1), (24, 2)])
@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("integrity", ["detect", "off"])
def test_pair_entries_equal_the_full_secure_d_and_python_integers(
        data, full, scale_bits, primes, mode, integrity):
    outcome, _ = run_memory_session(data, _params(scale_bits, mode, integrity,
                                                  layout="pairs", layout_rows=PAIRS))
    assert len(outcome.parameters["primes"]) == primes
    i, j = np.array(PAIRS).T
    expected = plaintext_sq_distances(rows(data), 1.0, scale_bits)[i, j]
    assert outcome.layout == "pairs" and outcome.pairs.tolist() == [list(p) for p in PAIRS]
    assert outcome.integer.shape == (len(PAIRS),)
    assert np.array_equal(outcome.integer, expected)
    assert np.array_equal(outcome.integer, full[scale_bits][i, j])
    assert outcome.integrity.startswith("checked" if integrity == "detect" else "off")


@pytest.mark.parametrize("layout", ["landmarks", "pairs"])
def test_small_tiles_stream_a_layout_in_many_tiles_with_the_same_result(layout):
    # 4096-byte tiles hold 1024 elements: 40 landmarks of 120 rows make 5 row tiles of
    # 25 rows, the 7140 pairs i < j of 120 rows make 7 tiles
    big = random_data([30, 30, 30, 30], 5, seed=11)
    exact = plaintext_sq_distances(rows(big), 1.0, 24)
    if layout == "landmarks":
        chosen = tuple(range(1, 120, 3))
        expected = exact[:, list(chosen)]
    else:
        chosen = tuple((i, j) for i in range(120) for j in range(i + 1, 120))
        i, j = np.array(chosen).T
        expected = exact[i, j]
    params = _params(24, "masked", "detect", layout=layout, layout_rows=chosen,
                     chunk_bytes=4096)
    outcome, transcript = run_memory_session(big, params, record=True)
    tiles = {(m.envelope().tile.prime_index, m.envelope().tile.tile_index)
             for m in transcript.of_kind("tile")}
    assert len(tiles) == 2 * (5 if layout == "landmarks" else 7)
    assert np.array_equal(outcome.integer, expected)


def test_drawn_landmarks_are_the_rosters_and_their_columns_are_exact(data, full):
    seen = {}

    class Watching(Coordinator):
        def _finish(self):
            seen["digest"], seen["session"] = self.roster_digest, self.session_id
            return super()._finish()

    outcome, _ = run_memory_session(data, _params(24, "masked", "detect", layout="landmarks",
                                                  n_landmarks=5), coordinator_class=Watching)
    drawn = draw_landmarks(seen["session"], seen["digest"], n=14, count=5)
    assert outcome.landmarks.tolist() == drawn.tolist()
    assert outcome.parameters["landmarks"] == drawn.tolist()
    assert np.array_equal(outcome.integer, full[24][:, drawn])


def test_the_clustering_callback_gets_the_layout_and_every_party_its_labels(data):
    got = {}

    def cluster(view):
        got["view"] = view
        return np.arange(len(view)) % 3

    outcome, transcript = run_memory_session(
        data, _params(10, "masked", "detect", layout="landmarks", layout_rows=LANDMARKS),
        cluster=cluster)
    view = got["view"]
    assert isinstance(view, LandmarkDistances) and view.landmarks.tolist() == list(LANDMARKS)
    assert np.array_equal(np.asarray(view), outcome.values)
    assert np.array_equal(outcome.labels, np.arange(14) % 3)
    assert transcript.parties["party-2"].labels.tolist() == (np.arange(7, 12) % 3).tolist()

    outcome, _ = run_memory_session(
        data, _params(10, "masked", "detect", layout="pairs", layout_rows=PAIRS),
        cluster=cluster)
    assert isinstance(got["view"], PairDistances) and len(got["view"]) == 14
    assert np.array_equal(got["view"].values, outcome.values)


@pytest.mark.parametrize("layout", [dict(layout="landmarks", layout_rows=LANDMARKS),
                                    dict(layout="pairs", layout_rows=PAIRS)])
def test_a_corrupt_upload_is_corrected_and_its_party_named(data, layout):
    sizes = random_data([3, 3, 3, 3, 2], 5, seed=8)  # m = 5: r = 2, "correct" with A = 1
    params = SessionParameters(dim=5, bound=1.0, scale_bits=10, integrity="correct",
                               **layout)
    outcome, _ = run_memory_session(sizes, params, faults={"party-3": "corrupt-upload"})
    expected = plaintext_sq_distances(rows(sizes), 1.0, 10)
    if layout["layout"] == "landmarks":
        expected = expected[:, list(LANDMARKS)]
    else:
        i, j = np.array(PAIRS).T
        expected = expected[i, j]
    assert np.array_equal(outcome.integer, expected)
    assert [d["named"] for d in outcome.deviations] == [["party-3"]]
    assert outcome.deviations[0]["action"] == "corrected"


def test_a_bad_share_is_attributed_through_the_landmark_columns():
    # party-4 (rows 12, 13) sends party-2 a share of row 12 off its polynomial: at
    # party-2, every entry of row 12 and every entry of the column of landmark 12 is
    # wrong. Either party-4 (owner of row 12) or party-2 (the evaluator) explains that,
    # so nobody can be named and "detect" must refuse. Read with the column *index* as
    # the column (row 0, owned by party-0), the errors would name the honest party-2.
    five = random_data([3, 3, 3, 3, 2], 5, seed=9)
    params = SessionParameters(dim=5, bound=1.0, scale_bits=10, integrity="detect",
                               adversaries=1, layout="landmarks", layout_rows=(12, 3, 6))
    with pytest.raises(DeviationError) as caught:
        run_memory_session(five, params, faults={"party-4": "bad-share:party-2"})
    assert set(caught.value.suspects) == {("party-2",), ("party-4",)}
    assert caught.value.named == ()


def test_detect_excludes_a_corrupting_party_and_reruns_exactly(data):
    sizes = random_data([3, 3, 3, 3, 2], 5, seed=10)
    params = SessionParameters(dim=5, bound=1.0, scale_bits=10, integrity="detect",
                               adversaries=1, layout="pairs", layout_rows=PAIRS)
    outcome, _ = run_memory_session(sizes, params, faults={"party-1": "corrupt-upload"})
    i, j = np.array(PAIRS).T
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows(sizes), 1.0, 10)[i, j])
    assert outcome.round == 2 and "party-1" not in outcome.responders


def test_a_dropped_party_reruns_a_layout_with_a_smaller_set():
    five = random_data([3, 3, 3, 3, 2], 5, seed=12)  # m = 5, A = 1: 4 responders suffice
    params = SessionParameters(dim=5, bound=1.0, scale_bits=24, adversaries=1,
                               layout="landmarks", layout_rows=LANDMARKS)
    outcome, _ = run_memory_session(five, params, drop={"party-4": "evaluation"})
    assert outcome.round == 2 and "party-4" not in outcome.responders
    expected = plaintext_sq_distances(rows(five), 1.0, 24)[:, list(LANDMARKS)]
    assert np.array_equal(outcome.integer, expected)


def test_garbage_tiles_fail_a_layout_closed(data):
    with pytest.raises((IntegrityError, PeerError)):
        run_memory_session(data, _params(10, "masked", "off", layout="pairs",
                                         layout_rows=PAIRS),
                           faults={"party-1": "garbage-tiles"})


def test_a_layout_result_is_not_written_to_out(data, tmp_path):
    with pytest.raises(ParameterError, match="keeps its result in memory"):
        run_memory_session(data, _params(10, "masked", "off", layout="pairs",
                                         layout_rows=PAIRS), out=tmp_path / "d.npy")


# -- the result out of core: memory-mapped, decoded in place by row blocks ---------------

@pytest.mark.slow
@pytest.mark.parametrize("scale_bits, primes, dtype", [(10, 1, np.int32), (24, 2, np.int64)])
@pytest.mark.parametrize("layout", ["landmarks", "pairs"])
def test_a_memory_mapped_result_decoded_in_row_blocks_equals_python_integers(
        oracle, scale_bits, primes, dtype, layout):
    # 600 rows: the decode runs in several row blocks (tile_bytes = 4 KiB); memory_budget
    # = 0 memory-maps the residues (and, with two primes, the CRT result); one prime
    # decodes in place (the residues become the int32 result)
    rng = np.random.default_rng(11)
    data = {f"p{i}": rng.uniform(-1, 1, (150, 5)) for i in range(4)}
    q = oracle.quantize(rows(data), scale_bits, 1.0)  # Python ints

    def sq(i, j):
        return sum((a - b) * (a - b) for a, b in zip(q[i], q[j]))

    if layout == "landmarks":
        marks = (599, 0, 17, 300, 42, 151, 450)
        extra = dict(layout="landmarks", layout_rows=marks)
        expected = [[sq(i, j) for j in marks] for i in range(600)]
    else:
        pairs = rng.choice(600, size=(400, 2))
        pairs = np.unique(np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1), axis=0)
        extra = dict(layout="pairs", layout_rows=pairs.ravel().tolist())
        expected = [sq(i, j) for i, j in pairs.tolist()]
    outcome, _ = run_memory_session(data, _params(scale_bits, "masked", "detect", **extra),
                                    memory_budget=0, tile_bytes=4096)
    assert len(outcome.parameters["primes"]) == primes
    integer = outcome.integer
    assert isinstance(integer, np.memmap) and integer.dtype == dtype
    assert np.asarray(integer).tolist() == expected  # bit for bit, as Python ints
    scale = 4.0 ** scale_bits
    assert np.array_equal(outcome.values, np.array(expected, dtype=np.float64) / scale)
    if layout == "landmarks":
        view = LandmarkDistances(integer, None, marks, scale_bits)
        block = np.array(expected[100:250], dtype=np.float64) / scale
        assert np.array_equal(view.rows(100, 250), block)
        assert np.array_equal(view.values, np.array(expected, dtype=np.float64) / scale)

"""Pair lists longer than one session's public cap (omnifc/_secure_knn.py, pair_rounds).

``secure_knn_graph`` runs a pair list of more than ``max_pairs`` pairs as several ``pairs``
sessions of at most ``max_pairs`` each; every party checks each session's list in full
(range, duplicates, pairs of a row with itself, the cap, the same list as its own config)
before it computes anything. Checked here: the split at exactly the cap and one past it,
and the exact k-NN graph (against Python-integer distances) with a small cap and several
sessions; tests/protocols/test_pair_round_lists.py: every party refusing a bad list in
the roster of such a session.
"""

from __future__ import annotations

import numpy as np
import pytest

import omnifc
from finite_field import ParameterError
from omnifc._secure_knn import pair_rounds
from oracles import k_nearest

pytestmark = pytest.mark.timeout(240)


def _parties(seed=0, n=24, d=3):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, d))
    return [x[:7], x[7:12], x[12:16], x[16:20], x[20:]], x  # 5 parties


def _all_pairs(n):
    i, j = np.triu_indices(n, 1)
    return np.stack([i, j], axis=1).astype(np.int64)


@pytest.mark.parametrize("count, cap, sizes", [
    (10, 10, [10]),          # exactly the cap: one round
    (11, 10, [10, 1]),       # one past it: two
    (25, 10, [10, 10, 5]),
    (1, 1, [1]),
    (3, 1, [1, 1, 1]),
])
def test_pair_rounds_partition_the_list_in_order_within_the_cap(count, cap, sizes):
    pairs = _all_pairs(8)[:count]
    rounds = pair_rounds(pairs, cap)
    assert [len(r) for r in rounds] == sizes
    assert np.array_equal(np.concatenate(rounds), pairs)


@pytest.mark.parametrize("cap", [0, -3])
def test_pair_rounds_refuse_a_cap_below_one(cap):
    with pytest.raises(ParameterError, match="max_pairs must be >= 1"):
        pair_rounds(_all_pairs(4), cap)


def _spied(monkeypatch):
    import omnifc._secure_knn as module

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return omnifc.secure_distance_matrix(*args, **kwargs)

    monkeypatch.setattr(module, "secure_distance_matrix", spy)
    return calls


LANDMARKS = [0, 5, 11, 17]  # 20 other rows: every pair of them is C(20, 2) = 190 pairs


@pytest.mark.slow
@pytest.mark.parametrize("cap, sessions", [(190, 1), (189, 2), (40, 5)])
def test_beyond_the_cap_the_graph_is_still_the_exact_knn_graph(monkeypatch, oracle, cap,
                                                               sessions):
    calls = _spied(monkeypatch)
    parts, x = _parties()
    n = len(x)
    knn = omnifc.secure_knn_graph(parts, k=4, landmarks=LANDMARKS, candidates=n - 1,
                                  max_pairs=cap, bound=1.0, scale_bits=8)
    assert len(knn.pairs) == 190  # every pair without a landmark end
    rounds = [c for c in calls if c["layout"] == "pairs"]
    assert len(rounds) == sessions and all(c["max_pairs"] == cap for c in rounds)
    assert [len(c["pairs"]) for c in rounds] == [len(r) for r in pair_rounds(knn.pairs, cap)]
    assert all(len(c["pairs"]) <= cap for c in rounds)
    sq = oracle.sq_distances(oracle.quantize(x, 8, 1.0))
    assert knn.indices.tolist() == k_nearest(sq, 4)
    assert knn.integer_distances.tolist() == [[sq[i][j] for j in row]
                                              for i, row in enumerate(knn.indices.tolist())]
    results = knn.pair_result if isinstance(knn.pair_result, list) else [knn.pair_result]
    assert len(results) == sessions
    got = np.concatenate([r.pairs for r in results])
    assert np.array_equal(got, knn.pairs)
    values = np.concatenate([np.asarray(r.integer_distances) for r in results])
    assert values.tolist() == [sq[i][j] for i, j in knn.pairs.tolist()]


@pytest.mark.parametrize("cap", [0, (1 << 19) + 1, 2.5, True])
def test_a_cap_outside_one_session_is_refused_before_any_round(monkeypatch, cap):
    calls = _spied(monkeypatch)
    parts, _ = _parties()
    with pytest.raises(ParameterError, match=r"max_pairs must be an integer in \[1, 524288\]"):
        omnifc.secure_knn_graph(parts, k=3, n_landmarks=4, max_pairs=cap, bound=1.0)
    assert calls == []

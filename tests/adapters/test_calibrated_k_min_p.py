"""The min-p combination of the top-axis index and the Ward gap (``statistic="axis_or_gap"``,
issue 24, fourteenth pass): its arithmetic against plain Python, its level at the bound, and
the decision against a direct computation on fixed reference draws."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.cluster.hierarchy import cut_tree, linkage

from omnifc.adapters import _calibrated_k as ck
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import calibrated_k, min_p

from oracles import sq_distances


def _brute_min_p(observed, references):
    """Plain Python: pool, rank each statistic, take each row's smallest p."""
    pool = [list(map(float, observed))] + [list(map(float, r)) for r in references]
    size = len(pool)
    combined = []
    for row in pool:
        combined.append(min(sum(other[s] <= row[s] for other in pool) / size
                            for s in range(len(row))))
    return combined[0], combined[1:]


@pytest.mark.parametrize("seed", range(5))
def test_min_p_equals_ranking_the_pool_in_plain_python(seed):
    rng = np.random.default_rng(seed)
    m = 1 + seed % 3
    obs, refs = rng.normal(size=m), rng.normal(size=(15, m))
    refs[3] = obs                                        # a tie with the data counts
    refs[5, 0] = refs[6, 0]                              # and ties among references
    want_obs, want_refs = _brute_min_p(obs, refs)
    got_obs, got_refs = min_p(obs, refs)
    assert got_obs == pytest.approx(want_obs) and got_refs == pytest.approx(want_refs)


@pytest.mark.parametrize("size", [2, 3, 4, 6])
def test_min_p_test_is_exact_at_every_level_over_every_choice_of_the_data(size):
    """Claims at the bound: pool B + 1 exchangeable rows; whichever row is the data (every
    choice tried), the test rejects at alpha = c / (B + 1) for at most c of the B + 1
    choices (level exactly <= alpha), and for every c some pool reaches c (the bound is
    attained); one step past, alpha = (c + 1) / (B + 1), more than c can reject."""
    rng = np.random.default_rng(size)
    reached = set()
    for trial in range(40):
        pool = rng.normal(size=(size, 2)).round(1)        # rounding makes ties
        pvals = []
        for j in range(size):
            obs, refs = min_p(pool[j], np.delete(pool, j, axis=0))
            pvals.append((1 + np.count_nonzero(refs <= obs)) / size)
        for c in range(1, size + 1):
            rejected = sum(p <= c / size + 1e-12 for p in pvals)
            assert rejected <= c
            if rejected == c:
                reached.add(c)
    assert reached == set(range(1, size + 1))


def _fixed_draws(monkeypatch, draws):
    it = iter(draws)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(it))


def _brute_ci(values):
    """W_2 / W_1 over every split of the values into two groups (plain Python)."""
    values = [float(v) for v in values]
    n = len(values)

    def ss(group):
        mean = sum(group) / len(group)
        return sum((v - mean) ** 2 for v in group)

    best = min(ss([values[i] for i in range(n) if mask >> i & 1])
               + ss([values[i] for i in range(n) if not mask >> i & 1])
               for mask in range(1, 2 ** (n - 1)))
    return best / ss(values)


def _widest_ratio(x):
    """The widest ratio of consecutive Ward merge heights over the upper half (scipy)."""
    h = linkage(x, "ward")[:, 2]
    return max(h[j + 1] / h[j] for j in range(len(h) // 2, len(h) - 1))


def _top_axis(x):
    centred = x - x.mean(axis=0)
    return centred @ np.linalg.svd(centred)[2][0]


def test_axis_or_gap_p_value_k_and_labels_against_a_direct_computation(monkeypatch):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(0, 1, (4, 3)), rng.normal(0, 1, (4, 3)) + [2.5, 0, 0]])
    refs = [rng.normal(size=(8, 3)) for _ in range(19)]
    _fixed_draws(monkeypatch, refs)
    out = calibrated_k(sq_distances(x), references=19, alpha=0.2, statistic="axis_or_gap")
    rows = [(_brute_ci(_top_axis(z)), -_widest_ratio(z)) for z in [x] + refs]
    want_obs, want_refs = _brute_min_p(rows[0], rows[1:])
    p = (1 + sum(r <= want_obs + 1e-12 for r in want_refs)) / 20
    assert out.statistic == pytest.approx(want_obs) and out.p_value == pytest.approx(p)
    # each single test on the same draws: min-p lies between the smaller p and twice it
    single = []
    for statistic in ("axis_ci", "ward_gap"):
        _fixed_draws(monkeypatch, refs)
        single.append(calibrated_k(sq_distances(x), references=19, alpha=0.2,
                                   statistic=statistic).p_value)
    assert min(single) <= out.p_value <= 2 * min(single)
    assert out.rule == "calibrated/axis_or_gap" and "min-p" in out.summary()
    if out.p_value <= 0.2:            # K: Ward's cut at its widest gap, as for ward_gap
        tree = linkage(x, "ward")
        h = tree[:, 2]
        j = max(range(len(h) // 2, len(h) - 1), key=lambda i: h[i + 1] / h[i])
        assert out.k == max(2, 8 - 1 - j)
        want = cut_tree(tree, n_clusters=out.k).ravel()
        assert len({(a, b) for a, b in zip(want, out.labels)}) == out.k
    else:
        assert out.k == 1


def test_axis_or_gap_at_alpha_rejects_and_just_below_keeps_one(monkeypatch):
    """Two tight groups, the data the most clustered of the pool in both statistics:
    p = 1 / 20 rejects at alpha = 0.05, not at 0.0499; a reference equal to the data
    ties in both and gives p = 2 / 20."""
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    x = x + np.random.default_rng(1).normal(scale=0.01, size=x.shape)
    embedded = ck.mds_embedding(sq_distances(x))[0]
    refs = [np.random.default_rng(50 + i).normal(size=(10, 2)) for i in range(19)]
    for equal, alpha, p, k in ((0, 0.05, 0.05, 2), (0, 0.0499, 0.05, 1), (1, 0.05, 0.1, 1)):
        _fixed_draws(monkeypatch, [embedded] * equal + refs[equal:])
        out = calibrated_k(sq_distances(x), references=19, alpha=alpha,
                           statistic="axis_or_gap")
        assert out.p_value == pytest.approx(p) and out.k == k
    _fixed_draws(monkeypatch, refs)
    out = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic="axis_or_gap")
    assert out.labels.tolist() == [0] * 5 + [1] * 5


@pytest.mark.timeout(120)
def test_the_flux_rule_and_the_bench_column_read_the_min_p_statistic(k_selection_bench):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 1, (10, 3)), rng.normal(0, 1, (10, 3)) + [12, 0, 0]])
    d = sq_distances(x)
    got = flux.cluster_clients(d, k_rule="calibrated_axis_or_gap", k_alpha=0.01,
                               k_references=199, random_state=2)
    want = calibrated_k(d, statistic="axis_or_gap", alpha=0.01, references=199,
                        random_state=2)
    assert got.decision.rule == "calibrated/axis_or_gap" and got.decision.references == 199
    assert got.decision.p_value == want.p_value and got.n_clusters == want.k == 2
    column = k_selection_bench.RULES["flux:axis_or_gap@0.01"]({"flux": d})
    assert np.array_equal(column, calibrated_k(d, statistic="axis_or_gap", alpha=0.01,
                                               references=199).labels)
    assert calibrated_k(d, statistic="axis_or_gap").references == ck.AXIS_CI_REFERENCES
    with pytest.raises(ck.ParameterError, match="min_group applies"):
        calibrated_k(d, statistic="axis_or_gap", min_group=2)

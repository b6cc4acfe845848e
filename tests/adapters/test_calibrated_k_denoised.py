"""The calibrated rule on the denoised embedding (``statistic="denoised"``, issue 24 seventh
pass): the broken-stick axis selection, the 2-means cluster index on the kept axes, and the
one-cluster test built from them, each against an independent computation (Python
fractions, every split of a small sample, numpy's SVD)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from omnifc.adapters import _calibrated_k as ck
from omnifc.adapters._calibrated_k import (broken_stick_axes, calibrated_k,
                                           denoised_cluster_index, two_means)

from oracles import sq_distances


def _stick_fractions(values):
    """Independent broken stick in exact fractions: the leading run of shares above
    b_j = (1/R) sum_{i=j}^{R} 1/i, at least 1 (values: positive integers)."""
    lam = sorted((Fraction(int(v)) for v in values if v > 0), reverse=True)
    r = len(lam)
    if r < 2:
        return 1
    total = sum(lam)
    kept = 0
    for j in range(1, r + 1):
        stick = sum(Fraction(1, i) for i in range(j, r + 1)) / r
        if lam[j - 1] / total > stick:
            kept += 1
        else:
            break
    return max(kept, 1)


def _brute_ci(x):
    """min over every split into two non-empty groups of W_2, divided by W_1 (exact)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    total = ((x - x.mean(axis=0)) ** 2).sum()
    best = np.inf
    for mask in itertools.product([0, 1], repeat=n - 1):
        g = np.array((0,) + mask, dtype=bool)
        if not g.any():
            continue
        w = sum(((x[s] - x[s].mean(axis=0)) ** 2).sum() for s in (g, ~g))
        best = min(best, w)
    return best / total


def _lloyd_from_axis_cuts(x):
    """Independent 2-means as the module defines it: for each column, the best cut of its
    sorted values (every cut tried), then Lloyd's steps in all columns until the assignment
    is stable; the smallest W_2 of those local optima over W_1 (plain Python loops)."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    total = ((x - x.mean(axis=0)) ** 2).sum()
    sse = lambda g: sum(((x[g == k] - x[g == k].mean(axis=0)) ** 2).sum() for k in (0, 1))
    best = np.inf
    for j in range(x.shape[1]):
        order = np.argsort(x[:, j], kind="stable")
        cuts = []
        for c in range(1, n):
            g = np.zeros(n, dtype=int)
            g[order[c:]] = 1
            y = x[:, j]
            cuts.append((((y[g == 0] - y[g == 0].mean()) ** 2).sum()
                         + ((y[g == 1] - y[g == 1].mean()) ** 2).sum(), c, g))
        g = min(cuts, key=lambda t: (t[0], t[1]))[2]
        for _ in range(1000):
            m0, m1 = x[g == 0].mean(axis=0), x[g == 1].mean(axis=0)
            new = np.array([int(((p - m1) ** 2).sum() < ((p - m0) ** 2).sum()) for p in x])
            if (new == g).all() or new.min() == new.max():
                break
            g = new
        best = min(best, sse(g))
    return best / total


def _principal_svd(x):
    """Principal coordinates and variances by numpy's SVD (independent of the module)."""
    c = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(c, full_matrices=False)
    keep = s > s[0] * 1e-10
    return (u * s)[:, keep], (s ** 2)[keep]


@pytest.mark.parametrize("seed", range(6))
def test_broken_stick_against_exact_fractions(seed):
    rng = np.random.default_rng(seed)
    for size in (2, 3, 5, 10, 40):
        spikes = rng.integers(1, 400, size=rng.integers(0, 4))
        values = np.concatenate([spikes, rng.integers(1, 30, size=size)])
        rng.shuffle(values)                              # any order is accepted
        assert broken_stick_axes(values) == _stick_fractions(values), values
    # the sticks for R = 4: 25/48, 13/48, 7/48, 3/48; a share equal to a stick is not above
    assert broken_stick_axes([25, 13, 7, 3]) == 1
    assert broken_stick_axes([26, 14, 5, 3]) == 2 == _stick_fractions([26, 14, 5, 3])
    assert broken_stick_axes([1.0, 0.0, -1e-12]) == 1     # one positive value: 1


def test_two_means_in_one_dimension_is_exact_against_every_split():
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 9):
        for _ in range(5):
            y = rng.normal(size=n) * rng.choice([1.0, 10.0], size=n)
            t, labels = two_means(y[:, None])
            assert t == pytest.approx(_brute_ci(y[:, None]), rel=1e-10, abs=1e-14)
            if t < 1:
                w = sum(((y[labels == g] - y[labels == g].mean()) ** 2).sum() for g in (0, 1))
                assert t == pytest.approx(w / ((y - y.mean()) ** 2).sum(), rel=1e-10)
                assert labels[0] == 0


def test_two_means_in_several_dimensions_against_every_split():
    """Lloyd's 2-means is a local search: its index is never below the exact minimum, is
    the index of the labels it returns, and reaches the minimum on separated groups."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        x = rng.normal(size=(9, 3)) * [3.0, 1.5, 1.0]
        t, labels = two_means(x)
        w = sum(((x[labels == g] - x[labels == g].mean(axis=0)) ** 2).sum() for g in (0, 1))
        assert t == pytest.approx(w / ((x - x.mean(axis=0)) ** 2).sum(), rel=1e-10)
        assert t >= _brute_ci(x) - 1e-12
    groups = np.array([0, 1, 0, 0, 1, 1, 0, 1, 1])
    x = rng.normal(size=(9, 3)) + 6.0 * groups[:, None] * np.array([1.0, -1.0, 0.5])
    t, labels = two_means(x)
    assert t == pytest.approx(_brute_ci(x), rel=1e-10)
    assert labels.tolist() == groups.tolist()
    assert two_means(np.ones((4, 2)))[0] == 1.0              # no spread: index 1


def test_lloyd_steps_reach_the_minimum_that_no_axis_cut_reaches():
    """Two groups apart along an oblique direction of the principal plane (seed 4 of a
    search for such a sample: no cut along either principal axis is the best split); the
    refined 2-means is the exact minimum over every split, and it is the planted groups."""
    rng = np.random.default_rng(4)
    groups = np.arange(9) % 2
    x = rng.normal(size=(9, 2)) * [1.5, 0.5] + 2.0 * groups[:, None] * np.array([1.0, 1.0])
    coords = _principal_svd(x)[0]
    cut_only = min(_cut_ci(coords, j) for j in range(2))
    t, labels = two_means(coords)
    assert t == pytest.approx(_brute_ci(coords), rel=1e-12)
    assert cut_only > t + 1e-6
    assert labels.tolist() == groups.tolist()


def _cut_ci(x, j):
    """W_2 / W_1 in all columns of the best cut of column j alone (every cut tried)."""
    total = ((x - x.mean(axis=0)) ** 2).sum()
    order = np.argsort(x[:, j])
    best_1d, best = np.inf, None
    for c in range(1, len(x)):
        lo, hi = x[order[:c], j], x[order[c:], j]
        w = ((lo - lo.mean()) ** 2).sum() + ((hi - hi.mean()) ** 2).sum()
        if w < best_1d:
            best_1d, best = w, c
    g = np.zeros(len(x), dtype=bool)
    g[order[best:]] = True
    return sum(((x[s] - x[s].mean(axis=0)) ** 2).sum() for s in (g, ~g)) / total


@pytest.mark.parametrize("seed", range(4))
def test_denoised_statistic_against_svd_and_rotation(seed):
    rng = np.random.default_rng(seed)
    n = 11
    x = rng.normal(size=(n, 6)) * np.array([8.0, 5.0, 1.0, 1.0, 1.0, 1.0])
    coords, values = _principal_svd(x)
    r = _stick_fractions(np.round(values * 1e6))           # exact on values scaled to integers
    t, kept, labels = denoised_cluster_index(x)
    assert kept == r == broken_stick_axes(values)
    assert t == pytest.approx(two_means(coords[:, :r])[0], rel=1e-9)
    assert t >= _brute_ci(coords[:, :r]) - 1e-12
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))           # a rigid motion changes nothing
    t2, kept2, labels2 = denoised_cluster_index(x @ q + 3.0)
    assert kept2 == kept and t2 == pytest.approx(t, rel=1e-9)
    assert labels2.tolist() == labels.tolist()
    # from D: the MDS embedding and its eigenvalues give the same statistic
    emb, lam = ck.mds_embedding(sq_distances(x))
    assert denoised_cluster_index(emb, lam)[:2] == pytest.approx((t, kept), rel=1e-9)


def _refs(n, count, scales, seed=40):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, len(scales))) * np.asarray(scales) for _ in range(count)]


def test_denoised_p_value_against_a_direct_computation(monkeypatch):
    """Fixed Gaussian draws and fixed smoothed-bootstrap columns: each reference is its draw
    with column 0 = (column - mean y) * sqrt(lambda_1 / (n - 1)) / sd(y) (y the data's top-axis
    projections, lambda_1 their sum of squares), read by the exact 2-means index (every split)
    on the r leading principal axes of *its own* spectrum, r the data's broken-stick count
    (2 here); p = (1 + #{T_b <= T}) / (1 + B)."""
    x = np.array([[0.0, 2.0], [0.3, -2.0], [0.1, 2.1], [5.0, -2.2], [5.2, 1.9], [4.9, -2.1],
                  [0.2, -1.8], [5.1, 2.0]])
    x = np.column_stack([x, np.random.default_rng(2).normal(scale=0.1, size=(8, 2))])
    n = len(x)
    refs = _refs(n, 11, [6.0, 2.0, 0.5, 0.5])
    cols = [np.random.default_rng(70 + s).normal(size=n) for s in range(11)]
    draws, columns = iter(refs), iter(cols)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
    monkeypatch.setattr(ck, "smoothed_bootstrap", lambda *args: next(columns))
    out = calibrated_k(sq_distances(x), references=len(refs), alpha=0.2, statistic="denoised")
    coords, values = _principal_svd(x)
    r = _stick_fractions(np.round(values * 1e9))
    assert r == 2
    y = coords[:, 0]
    null = []
    for z, col in zip(refs, cols):
        z = z.copy()
        z[:, 0] = (col - y.mean()) * np.sqrt(values[0] / (n - 1)) / y.std()
        read = _principal_svd(z)[0][:, :r]
        null.append(_lloyd_from_axis_cuts(read))
        assert null[-1] >= _brute_ci(read) - 1e-12        # never below the exact minimum
    null = np.array(null)
    observed = _brute_ci(coords[:, :r])                   # two groups: Lloyd is exact here
    assert out.statistic == pytest.approx(observed, rel=1e-9)
    assert out.null_mean == pytest.approx(null.mean(), rel=1e-9)
    assert out.null_sd == pytest.approx(null.std(), rel=1e-9)
    assert out.p_value == pytest.approx((1 + np.sum(null <= observed)) / (1 + len(refs)))
    assert out.k == (2 if out.p_value <= 0.2 else 1)
    assert out.rule == "calibrated/denoised" and "broken-stick" in out.summary()


def test_denoised_at_alpha_rejects_and_just_below_keeps_one(monkeypatch):
    """No reference as clustered as two tight groups: p = 1/20 = 0.05 rejects at
    alpha = 0.05 and not at 0.0499; a reference equal to the data ties and counts against
    the data (p = 2/20)."""
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    x = x + np.random.default_rng(1).normal(scale=0.01, size=x.shape)
    embedded = ck.mds_embedding(sq_distances(x))[0]

    def fixed(equal):
        draws = iter([embedded] * equal + _refs(10, 19 - equal, [1.0, 1.0], seed=50))
        monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
        monkeypatch.setattr(ck, "_unimodal_top", lambda rng, z, *args: z)   # held to identity

    fixed(0)
    at = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic="denoised")
    assert at.p_value == pytest.approx(0.05) and at.k == 2
    assert at.labels.tolist() == [0] * 5 + [1] * 5
    fixed(0)
    past = calibrated_k(sq_distances(x), references=19, alpha=0.0499, statistic="denoised")
    assert past.p_value == pytest.approx(0.05) and past.k == 1
    assert past.margin == pytest.approx(0.05 - 0.0499)
    fixed(1)
    tie = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic="denoised")
    assert tie.p_value == pytest.approx(0.1) and tie.k == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_separated_groups_are_two_and_one_gaussian_is_one():
    """Fixed seeds (deterministic): a check, not a rate (a level-0.05 test splits about 1
    Gaussian federation in 20)."""
    rng = np.random.default_rng(12)
    groups = np.arange(40) % 2
    centres = rng.normal(size=(2, 30)) * 2.0
    x = rng.normal(size=(40, 30)) + centres[groups]
    out = calibrated_k(sq_distances(x), statistic="denoised")
    assert out.k == 2 and out.p_value <= out.alpha, out.summary()
    assert len({(g, l) for g, l in zip(groups, out.labels)}) == 2
    one = calibrated_k(sq_distances(rng.normal(size=(40, 30))), statistic="denoised")
    assert one.k == 1 and one.p_value > one.alpha, one.summary()
    assert one.labels.tolist() == [0] * 40


def test_bench_column_reads_the_denoised_rule(k_selection_bench):
    """``flux:denoised`` in the grid is ``calibrated_k(D, statistic="denoised")`` on the
    cell's FLUX D (labels compared with a direct call)."""
    rng = np.random.default_rng(9)
    groups = np.arange(12) % 2
    x = rng.normal(size=(12, 4)) + 5.0 * groups[:, None]
    d = sq_distances(x)
    labels = k_selection_bench.RULES["flux:denoised"]({"flux": d, "groups": groups})
    assert np.asarray(labels).tolist() == calibrated_k(d, statistic="denoised").labels.tolist()
    assert len({(g, l) for g, l in zip(groups, labels)}) == 2

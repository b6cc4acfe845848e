"""The calibrated rule's top-axis statistic (``statistic="axis_ci"``) and the grid's
population-descriptor check (benchmarks/bench_k_selection.py --population)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage

from omnifc.adapters import _calibrated_k as ck
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import (axis_cluster_index, calibrated_k,
                                           cluster_index_1d)

from oracles import sq_distances


def _ss(values):
    """Sum of squares about the mean, in plain Python."""
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def _brute_ci(values, min_group=1):
    """W_2 / W_1 by trying every split of the values into two groups of at least
    ``min_group`` values (any subsets, not only cuts of the sorted order): the independent
    oracle."""
    values = [float(v) for v in values]
    n = len(values)
    best = min(_ss([values[i] for i in range(n) if mask >> i & 1])
               + _ss([values[i] for i in range(n) if not mask >> i & 1])
               for mask in range(1, 2 ** (n - 1))       # element n-1 always in group "0"
               if min_group <= bin(mask).count("1") <= n - min_group)
    return best / _ss(values)


@pytest.mark.parametrize("seed", range(6))
def test_cluster_index_1d_equals_the_best_of_every_two_group_split(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 11))
    values = rng.normal(size=n) * 3 + (rng.random(n) < 0.4) * rng.normal(0, 8)
    assert cluster_index_1d(values) == pytest.approx(_brute_ci(values), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_cluster_index_1d_with_a_group_floor_equals_the_best_split_of_allowed_sizes(seed):
    """``min_group`` 2 and 3 against every subset split whose groups both hold at least
    that many values (n from 4 to 11, outliers planted in some draws)."""
    rng = np.random.default_rng(100 + seed)
    m = 2 + seed % 2
    n = int(rng.integers(2 * m, 12))
    values = rng.normal(size=n) + (rng.random(n) < 0.2) * rng.normal(0, 10, n)
    assert cluster_index_1d(values, min_group=m) == pytest.approx(
        _brute_ci(values, m), rel=1e-9, abs=1e-12)
    assert cluster_index_1d(values, min_group=m) >= cluster_index_1d(values) - 1e-12


def test_cluster_index_1d_is_scale_free_down_to_two_values_and_tiny_spreads():
    """Two distinct values are two groups (index 0); the index of values scaled by 1e-4
    (a sum of squares far below 1) equals the unscaled one; and, with no floor, an
    outlier alone is the best cut of the top axis (the default of axis_cluster_index)."""
    assert cluster_index_1d([0.0, 1.0]) == 0.0 and cluster_index_1d([3.0, 3.0]) == 1.0
    values = np.random.default_rng(5).normal(size=9)
    assert cluster_index_1d(values * 1e-4) == pytest.approx(cluster_index_1d(values),
                                                            rel=1e-9)
    x = np.random.default_rng(6).normal(size=(8, 2)) * [3.0, 1.0]
    x[0, 0] += 20.0
    assert axis_cluster_index(x) == pytest.approx(_brute_ci((x - x.mean(0)) @ np.linalg.svd(
        x - x.mean(0))[2][0]), rel=1e-9)
    assert axis_cluster_index(x) < axis_cluster_index(x, min_group=2)


def test_cluster_index_1d_group_floor_at_and_past_the_sample_size():
    """At n = 2 m the only split is m + m; one value fewer leaves no split (index 1);
    min_group below 1 is refused."""
    from finite_field import ParameterError

    values = [0.0, 0.5, 3.0, 10.0]
    assert cluster_index_1d(values, min_group=2) == pytest.approx(
        (_ss(values[:2]) + _ss(values[2:])) / _ss(values))
    assert cluster_index_1d(values[:3], min_group=2) == 1.0
    with pytest.raises(ParameterError, match="min_group"):
        cluster_index_1d(values, min_group=0)


def test_cluster_index_1d_fixed_values_and_degenerate_inputs():
    # 0, 1, 2, 3: the best split is 2 + 2, W_2 = 0.5 + 0.5, W_1 = 5
    assert cluster_index_1d([3.0, 0.0, 2.0, 1.0]) == pytest.approx(0.2)
    assert cluster_index_1d([1.0, 1.0, 5.0, 5.0]) == 0.0
    assert cluster_index_1d([2.0]) == 1.0 and cluster_index_1d([4.0, 4.0, 4.0]) == 1.0
    # a large Gaussian sample: 1 - 2/pi (the cut at the median, halves' variances)
    big = np.random.default_rng(0).normal(size=200_000)
    assert cluster_index_1d(big) == pytest.approx(1 - 2 / np.pi, abs=3e-3)


@pytest.mark.parametrize("shape", [(12, 3), (7, 20)])        # covariance side, Gram side
def test_axis_cluster_index_reads_the_first_principal_axis(shape):
    rng = np.random.default_rng(shape[1])
    x = rng.normal(size=shape) * np.linspace(3, 1, shape[1]) + 5.0
    centred = x - x.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    assert axis_cluster_index(x) == pytest.approx(_brute_ci(centred @ axis), rel=1e-9)


def _refs(n, count, seed=0):
    return [np.random.default_rng(seed + s).normal(size=(n, 3)) for s in range(count)]


def test_axis_statistic_p_value_margin_and_k_against_a_direct_computation(monkeypatch):
    x = np.array([[0.0, 0.0], [0.3, 0.1], [0.1, 0.4], [5.0, 5.0], [5.2, 4.8], [4.9, 5.3],
                  [0.2, 0.2], [5.1, 5.1]])
    refs = _refs(8, 9)
    draws = iter(refs)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
    out = calibrated_k(sq_distances(x), references=9, alpha=0.2, statistic="axis_ci")
    centred = x - x.mean(axis=0)
    observed = _brute_ci(centred @ np.linalg.svd(centred)[2][0])
    null = []
    for r in refs:
        rc = r - r.mean(axis=0)
        null.append(_brute_ci(rc @ np.linalg.svd(rc)[2][0]))
    null = np.array(null)
    assert out.statistic == pytest.approx(observed)
    assert out.p_value == pytest.approx((1 + np.sum(null <= observed)) / 10) == 0.1
    assert out.null_mean == pytest.approx(null.mean()) and out.null_sd == pytest.approx(null.std())
    assert out.margin == pytest.approx(np.quantile(null, 0.2) / observed)
    # K: Ward's cut at the widest gap of the upper half of the merge heights
    h = linkage(x, "ward")[:, 2]
    ratios = {j: h[j + 1] / h[j] for j in range(len(h) // 2, len(h) - 1)}
    j = max(ratios, key=ratios.get)
    assert out.k == 8 - 1 - j == 2 and out.labels.tolist() == [0, 0, 0, 1, 1, 1, 0, 1]
    assert out.rule == "calibrated/axis_ci" and "top-axis 2-means cluster index" in out.summary()


@pytest.mark.parametrize("statistic", ["axis_ci", "axis_unimodal"])
def test_axis_statistic_at_alpha_rejects_and_just_below_keeps_one(monkeypatch, statistic):
    """Two tight groups against iid references: no reference is as clustered, so
    p = 1 / (1 + 19) = 0.05 rejects at alpha = 0.05 and not at 0.0499; a reference
    equal to the data's embedding counts as at least as clustered (p = 2/20). The same
    p-value arithmetic for both top-axis statistics (``axis_unimodal``'s top-axis
    replacement is held to the identity here: its draws are tested on their own in
    test_calibrated_k_unimodal.py)."""
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    x = x + np.random.default_rng(1).normal(scale=0.01, size=x.shape)

    embedded = ck.mds_embedding(sq_distances(x))[0]          # what the observed statistic reads

    def fixed(equal):
        draws = iter([embedded] * equal + _refs(10, 19 - equal, seed=50))
        monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
        monkeypatch.setattr(ck, "_unimodal_top", lambda rng, z, *args: z)

    fixed(0)
    at = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic=statistic)
    assert at.p_value == pytest.approx(0.05) and at.k == 2
    assert at.labels.tolist() == [0] * 5 + [1] * 5
    fixed(0)
    past = calibrated_k(sq_distances(x), references=19, alpha=0.0499, statistic=statistic)
    assert past.p_value == pytest.approx(0.05) and past.k == 1
    assert past.margin == pytest.approx(0.05 - 0.0499)
    fixed(1)
    tie = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic=statistic)
    assert tie.p_value == pytest.approx(0.1) and tie.k == 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_axis_statistic_default_references_and_the_cluster_rule_name():
    x = np.random.default_rng(4).normal(size=(9, 3))
    assert calibrated_k(sq_distances(x), statistic="axis_ci").references == ck.AXIS_CI_REFERENCES == 99
    assert calibrated_k(sq_distances(x)).references == ck.CALIBRATED_REFERENCES == 39
    a = flux.cluster_clients(sq_distances(x), k_rule="calibrated_axis")
    assert a.decision.rule == "calibrated/axis_ci" and a.decision.references == 99


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [11, 12])
def test_axis_statistic_finds_planted_groups_and_keeps_iid_at_one(seed):
    """Fixed seeds (deterministic); a calibrated test at alpha = 0.05 would split about 1
    Gaussian federation in 20, so these 6 iid cases are a check, not a rate."""
    rng = np.random.default_rng(seed)
    for k, n, dim in ((2, 20, 50), (3, 30, 50), (2, 40, 10)):
        centres = rng.normal(size=(k, dim)) * 3.0
        groups = np.arange(n) % k
        x = rng.normal(size=(n, dim)) + centres[groups]
        out = calibrated_k(sq_distances(x), statistic="axis_ci")
        assert out.k == k, (k, n, dim, out.summary())
        assert len({(g, l) for g, l in zip(groups, out.labels)}) == k
    for n, dim in ((10, 200), (60, 220), (300, 20)):
        out = calibrated_k(sq_distances(rng.normal(size=(n, dim))), statistic="axis_ci")
        assert out.k == 1 and out.p_value > out.alpha, (n, dim, out.summary())


@pytest.mark.parametrize("statistic", ["ward_gap", "axis_ci"])
def test_equal_descriptors_in_two_groups_give_two_clusters(statistic):
    """Clients with equal descriptors (D_ij = 0 within a group, as population descriptors
    of identically distributed clients are): the noise MDS adds to their coordinates is
    no gap, so Ward's widest gap is the one between the groups."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=12), rng.normal(size=12) + 0.5
    x = np.stack([a] * 7 + [b] * 5)
    out = calibrated_k(sq_distances(x), statistic=statistic)
    assert out.k == 2 and out.labels.tolist() == [0] * 7 + [1] * 5


def test_population_descriptor_with_equal_weights_is_flux_descriptor(k_selection_bench):
    rng = np.random.default_rng(6)
    bench = k_selection_bench
    proj = flux.shared_projection(8, 3, max_value=2.0)
    z = rng.uniform(0, 2, size=(40, 8))
    y = np.repeat([0, 1, 2, 3], 10)
    rng.shuffle(y)
    got = bench.population_descriptor(z, y, np.full(40, 1 / 40), proj, 5)   # class 4 absent
    assert np.allclose(got, flux.descriptor(z, y, proj, 5), rtol=1e-12, atol=1e-12)
    # integer weights are repeated rows
    reps = rng.integers(1, 4, size=40)
    rows = np.repeat(np.arange(40), reps)
    assert np.allclose(bench.population_descriptor(z, y, reps / reps.sum(), proj, 5),
                       flux.descriptor(z[rows], y[rows], proj, 5), rtol=1e-12, atol=1e-12)


def test_recorder_changes_no_draw_and_records_each_clients_prior(k_selection_bench):
    from omnifc import fl
    from omnifc.fl import _data

    bench = k_selection_bench
    kwargs = dict(shift="label", n_groups=2, clients_per_group=3, new_per_group=0,
                  train_samples=4000, test_samples=1, seed=7)
    plain = fl.make_federated("digits", **kwargs)
    made, real = [], np.random.default_rng

    def factory(*args, **kw):
        made.append(bench._Recorder(real(*args, **kw)))
        return made[-1]

    with mock.patch.object(_data.np.random, "default_rng", factory):
        watched = fl.make_federated("digits", **kwargs)
    for a, b in zip(plain.clients, watched.clients):
        assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_train, b.y_train)
    priors = made[0].pvals[0::2]
    assert len(priors) == 6
    for client, p in zip(plain.clients, priors):        # 4000 multinomial rows: 5 sd
        share = np.bincount(client.y_train, minlength=10) / 4000
        assert np.all(np.abs(share - p) <= 5 * np.sqrt(p * (1 - p) / 4000) + 1e-12)


def test_population_federation_keeps_the_clients_and_gives_the_whole_pool(k_selection_bench):
    bench = k_selection_bench
    cell = ("label", 6, 20, 10, 2)                            # 4 + 2 clients, breast cancer
    sampled, groups, _, _ = bench.federation(*cell, 5)
    pop, pop_groups, class_of_row, priors = bench.population_federation(*cell, 5)
    assert np.array_equal(groups, pop_groups) and len(pop) == len(sampled) == 6
    pool = np.concatenate([r for r in class_of_row[:1]])
    for cl, cls, p in zip(pop, class_of_row, priors):
        assert cl.x_train.shape[0] == cls.size == pool.size     # every pool row, every client
        assert np.array_equal(cl.y_train, cls)                  # label shift: no relabelling
        assert p.shape == (2,) and p.sum() == pytest.approx(1.0)
    # the priors are those the sampled run draws its clients' rows with (watched directly)
    from omnifc.fl import _data

    made, real = [], np.random.default_rng

    def factory(*args, **kw):
        made.append(bench._Recorder(real(*args, **kw)))
        return made[-1]

    with mock.patch.object(_data.np.random, "default_rng", factory):
        bench.federation(*cell, 5)
    watched = made[0].pvals[0::2]
    assert len(watched) >= 6 and all(np.array_equal(a, b) for a, b in zip(priors, watched))
    assert len({tuple(p) for p in priors}) == 6            # label shift: one prior per client
    # iid: every prior is uniform and every population descriptor the same, D = 0
    d = bench.population_distances("none", 6, 20, 1, 2, 5)
    assert d.shape == (6, 6) and np.all(d == 0)


def test_min_group_p_value_against_a_direct_computation(monkeypatch):
    """``min_group=2``: the data's and every reference's top-axis index skip singleton
    cuts; p, the statistic and the reference mean equal the brute-force oracle's."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(9, 3))
    x[0] += [9.0, 0.0, 0.0]                                   # one outlying client
    refs = _refs(9, 19, seed=70)
    for r in refs[::2]:                                       # singleton cuts win in these
        r[0] += [6.0, 0.0, 0.0]
    draws = iter(refs)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
    out = calibrated_k(sq_distances(x), references=19, alpha=0.05, statistic="axis_ci",
                       min_group=2)

    def top(z):
        zc = z - z.mean(axis=0)
        return zc @ np.linalg.svd(zc)[2][0]

    observed = _brute_ci(top(x), 2)
    null = np.array([_brute_ci(top(r), 2) for r in refs])
    assert not np.allclose(null, [_brute_ci(top(r)) for r in refs])   # the floor matters
    assert out.statistic == pytest.approx(observed)
    assert out.p_value == pytest.approx((1 + np.sum(null <= observed)) / 20)
    assert out.null_mean == pytest.approx(null.mean())
    assert out.min_group == 2 and "(groups >= 2)" in out.summary()


def test_a_single_outlying_client_is_not_two_groups_with_min_group_2():
    """Eleven clients from one Gaussian and one far off: the any-cut index calls it two
    groups, the index with no singleton cut one; two groups of 6 are found by both."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 4))
    x[0] += [12.0, 0, 0, 0]
    d = sq_distances(x)
    assert calibrated_k(d, statistic="axis_ci", alpha=0.01, references=199).k >= 2
    alone = calibrated_k(d, statistic="axis_ci", alpha=0.01, references=199, min_group=2)
    assert alone.k == 1 and alone.p_value > 0.01
    x2 = rng.normal(size=(12, 4)) + np.repeat([[0.0] * 4, [8.0, 0, 0, 0]], 6, axis=0)
    assert calibrated_k(sq_distances(x2), statistic="axis_ci", alpha=0.01, references=199,
                        min_group=2).k == 2


@pytest.mark.parametrize("kwargs", [{"min_group": 0}, {"min_group": 2},
                                    {"min_group": 2, "statistic": "denoised"}])
def test_min_group_is_refused_outside_the_top_axis_statistics(kwargs):
    from finite_field import ParameterError

    d = sq_distances(np.random.default_rng(0).normal(size=(8, 2)))
    with pytest.raises(ParameterError, match="min_group"):
        calibrated_k(d, **kwargs)

"""The calibrated K rule (omnifc.adapters._calibrated_k): statistic, reference, decision."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.cluster import AgglomerativeClustering

from finite_field import InputError, ParameterError
from omnifc.adapters import _calibrated_k as ck
from omnifc.adapters._calibrated_k import calibrated_k, mds_embedding, within_sums

from oracles import sq_distances


def _sse(x, labels):
    """Within-cluster sum of squares in plain Python (the independent oracle)."""
    total = 0.0
    for c in set(labels.tolist()):
        rows = [list(map(float, r)) for r in x[labels == c]]
        mean = [sum(col) / len(rows) for col in zip(*rows)]
        total += sum(sum((v - m) ** 2 for v, m in zip(r, mean)) for r in rows)
    return total


def test_within_sums_equal_sklearn_ward_cuts_on_the_vectors():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(9, 3))
    w = within_sums(x, 8)
    for k in range(1, 9):
        labels = (np.zeros(9, dtype=int) if k == 1 else
                  AgglomerativeClustering(n_clusters=k, linkage="ward").fit(x).labels_)
        assert w[k - 1] == pytest.approx(_sse(x, labels), rel=1e-9, abs=1e-12)


def test_mds_embedding_reproduces_a_euclidean_d_and_its_spectrum():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(7, 4))
    emb, values = mds_embedding(sq_distances(x))
    assert np.allclose(sq_distances(emb), sq_distances(x), atol=1e-9)
    centred = x - x.mean(axis=0)
    assert np.allclose(np.sort(values)[::-1],
                       np.sort(np.linalg.eigvalsh(centred.T @ centred))[::-1], atol=1e-9)
    assert np.allclose(emb.T @ emb, np.diag(values), atol=1e-9)


def test_statistic_gap_and_p_against_a_direct_computation(monkeypatch):
    """With the reference draws fixed (monkeypatched), every number is recomputed here from
    scipy's Ward on the vectors and the paper's formulas."""
    x = np.array([[0.0, 0.0], [0.3, 0.1], [0.1, 0.4], [5.0, 5.0], [5.2, 4.8], [4.9, 5.3]])
    refs = [np.random.default_rng(s).normal(size=(6, 3)) for s in range(4)]
    draws = iter(refs)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
    out = calibrated_k(sq_distances(x), references=4, max_clusters=3, alpha=0.25, statistic="drop")

    def log_w(points, k):
        labels = (np.zeros(len(points), dtype=int) if k == 1 else
                  fcluster(linkage(points, "ward"), k, criterion="maxclust"))
        return np.log(_sse(points, labels))

    ks = range(1, 5)                                   # W_{k+1} up to K = 3 + 1
    obs = np.array([log_w(x, k) for k in ks])
    ref = np.array([[log_w(r, k) for k in ks] for r in refs])
    gap = ref.mean(axis=0) - obs
    sd = ref.std(axis=0) * np.sqrt(1 + 1 / 4)
    assert np.allclose(out.gap, gap) and np.allclose(out.gap_sd, sd)
    drops, ref_drops = obs[0] - obs[1:3], ref[:, :1] - ref[:, 1:3]
    z = (drops - ref_drops.mean(axis=0)) / ref_drops.std(axis=0)
    null = ((ref_drops - ref_drops.mean(axis=0)) / ref_drops.std(axis=0)).max(axis=1)
    assert out.statistic == pytest.approx(z.max())
    assert out.p_value == pytest.approx((1 + np.sum(null >= z.max())) / 5)
    assert out.null_mean == pytest.approx(null.mean()) and out.null_sd == pytest.approx(null.std())
    # K: the smallest k >= 2 with Gap(k) >= Gap(k + 1) - s_{k+1}, when p <= alpha
    assert out.p_value <= 0.25
    expected = next((k for k in (2, 3) if gap[k - 1] >= gap[k] - sd[k]), None)
    assert out.k == (expected or 2 + int(np.argmax(gap[1:3])))
    assert out.labels.tolist() == [0, 0, 0, 1, 1, 1] or out.k != 2


def _widest_ratio(points):
    """The widest ratio h[j + 1] / h[j] of Ward's merge heights over j >= (n - 1) // 2."""
    h = linkage(points, "ward")[:, 2]
    start = min(len(h) // 2, len(h) - 2)
    ratios = [(h[j + 1] / h[j], j) for j in range(start, len(h) - 1)]
    return max(ratios)


def test_ward_gap_statistic_against_a_direct_computation(monkeypatch):
    x = np.array([[0.0, 0.0], [0.3, 0.1], [0.1, 0.4], [5.0, 5.0], [5.2, 4.8], [4.9, 5.3],
                  [9.0, 0.0], [9.2, 0.3]])
    refs = [np.random.default_rng(s).normal(size=(8, 3)) for s in range(9)]
    draws = iter(refs)
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))
    out = calibrated_k(sq_distances(x), references=9, alpha=0.2)
    ratio, j = _widest_ratio(x)
    null = np.array([_widest_ratio(r)[0] for r in refs])
    assert out.statistic == pytest.approx(ratio)
    assert out.p_value == pytest.approx((1 + np.sum(null >= ratio)) / 10)
    assert out.null_mean == pytest.approx(null.mean()) and out.null_sd == pytest.approx(null.std())
    assert out.p_value <= 0.2 and out.k == 8 - 1 - j == 3
    assert out.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    assert out.margin == pytest.approx(ratio / np.quantile(null, 0.8))


def _fixed_p(monkeypatch, x, references, exceed):
    """Reference draws such that exactly ``exceed`` null statistics reach the observed one:
    the observed points themselves (equal statistic) ``exceed`` times, iid noise otherwise."""
    rng = np.random.default_rng(0)
    draws = iter([x] * exceed + [rng.normal(size=x.shape) * 0.0 + rng.normal(size=x.shape)
                                 for _ in range(references - exceed)])
    monkeypatch.setattr(ck, "_draw", lambda *args: next(draws))


def test_alpha_is_a_bound_p_equal_to_alpha_rejects_one_cluster(monkeypatch):
    """p = (1 + 0) / (1 + 19) = 0.05: rejected at alpha = 0.05 (p <= alpha), one cluster just
    below it. The observed data are two tight groups, the references iid noise."""
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)])
    x = x + np.random.default_rng(1).normal(scale=0.01, size=x.shape)
    _fixed_p(monkeypatch, x, 19, 0)
    at = calibrated_k(sq_distances(x), references=19, alpha=0.05)
    assert at.p_value == pytest.approx(0.05) and at.k == 2
    _fixed_p(monkeypatch, x, 19, 0)
    past = calibrated_k(sq_distances(x), references=19, alpha=0.0499)
    assert past.p_value == pytest.approx(0.05) and past.k == 1
    assert past.margin == pytest.approx(0.05 - 0.0499)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("statistic", ["ward_gap", "drop"])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_planted_groups_found_and_iid_stays_one(seed, statistic):
    rng = np.random.default_rng(seed)
    for k, n, dim in ((2, 20, 50), (3, 30, 50), (4, 40, 10)):
        centres = rng.normal(size=(k, dim)) * 3.0
        groups = np.arange(n) % k
        x = rng.normal(size=(n, dim)) + centres[groups]
        out = calibrated_k(sq_distances(x), statistic=statistic)
        assert out.k == k, (k, n, dim, out.summary())
        assert len({(g, l) for g, l in zip(groups, out.labels)}) == k     # the partition
    for n, dim in ((10, 200), (60, 220), (300, 20)):         # high and low dimension
        out = calibrated_k(sq_distances(rng.normal(size=(n, dim))), statistic=statistic)
        assert out.k == 1 and out.p_value > out.alpha, (n, dim, out.summary())


def test_seeded_reproducible_and_logged_at_info(caplog):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(0, 1, (8, 5)), rng.normal(6, 1, (8, 5))])
    with caplog.at_level(logging.INFO, logger="omnifc.adapters._calibrated_k"):
        a = calibrated_k(sq_distances(x), random_state=4)
    b = calibrated_k(sq_distances(x), random_state=4)
    assert a.k == b.k == 2 and a.p_value == b.p_value and np.array_equal(a.gap, b.gap)
    assert any("K=2" in r.getMessage() and "p=" in r.getMessage() for r in caplog.records)


def test_min_clusters_two_skips_the_one_cluster_step():
    x = np.random.default_rng(3).normal(size=(30, 4))
    one = calibrated_k(sq_distances(x))
    forced = calibrated_k(sq_distances(x), min_clusters=2)
    assert one.k == 1 and forced.k >= 2 and forced.p_value == one.p_value


def test_small_inputs_and_errors():
    assert calibrated_k(np.zeros((2, 2))).k == 1
    assert calibrated_k(np.zeros((5, 5))).k == 1                  # identical clients
    d = sq_distances(np.arange(6.0))
    for kwargs, phrase in ((dict(null="box"), "null must be one of"),
                           (dict(references=0), "references must be >= 1"),
                           (dict(alpha=1.0), "alpha must be in"),
                           (dict(max_clusters=0), "max_clusters must be >= 1"),
                           (dict(min_clusters=3), "min_clusters must be 1 or 2"),
                           (dict(statistic="silhouette"), "statistic must be one of")):
        with pytest.raises(ParameterError, match=phrase):
            calibrated_k(d, **kwargs)
    with pytest.raises(InputError, match="symmetric"):
        calibrated_k(np.array([[0.0, 1.0], [2.0, 0.0]]))


def test_uniform_null_also_decides():
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.normal(0, 1, (10, 3)), rng.normal(9, 1, (10, 3))])
    assert calibrated_k(sq_distances(x), null="uniform").k == 2
    assert calibrated_k(sq_distances(x), null="uniform", statistic="drop").k == 2


def _fmcl_domains(n_domains, seed):
    from omnifc.adapters import fmcl

    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=10,
                                              samples=300, seed=seed)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    return fmcl.fmcl_distances(means, weights), fmcl.class_overlap(weights), np.array(domains)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n_domains,seed", [(1, 100), (2, 100), (3, 101)])
def test_fmcl_calibrated_rule_one_cluster_test_then_the_calibrated_cut(n_domains, seed):
    """FMCL's rule "calibrated": K = 1 exactly when its one-cluster test (here with the
    overlap-stratified null) does not reject; otherwise K and labels are calibrated_k's
    with min_clusters=2 on the same D. Found: the one domain is one cluster; Ward's cut of the
    MDS embedding of FMCL's (non-Euclidean) D is not the planted partition for 2 and 3
    domains here (why "calibrated" is not FMCL's default: docs/adapters.md, FMCL)."""
    from omnifc.adapters import fmcl

    d, overlap, domains = _fmcl_domains(n_domains, seed)
    got = fmcl.fmcl_server(d, rule="calibrated", overlap=overlap)
    test = fmcl.one_cluster_test(d, overlap=overlap)
    if test.one_cluster:
        assert got.n_clusters == 1 and got.labels.tolist() == [0] * d.shape[0]
    else:
        ref = calibrated_k(d, max_clusters=min(10, d.shape[0] - 1), min_clusters=2)
        assert got.n_clusters == ref.k and np.array_equal(got.labels, ref.labels)
        assert got.silhouettes == {k + 1: float(v) for k, v in enumerate(ref.gap)}
    if n_domains == 1:
        assert got.n_clusters == 1 and not test.p_value <= test.alpha
    else:
        assert not test.one_cluster and got.n_clusters >= 2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_grid_cell_through_the_secure_path_equals_the_plaintext_d(k_selection_bench):
    """The grid reads plaintext D; through omnifc's secure reconstruction the FLUX D of a
    cell is the same matrix bit for bit, hence the same calibrated decision."""
    bench = k_selection_bench
    cell = ("label", 6, 20, 1, 10)
    plain = bench.distances(*cell, 1000)
    secure = bench.distances(*cell, 1000, secure=True)
    for key in ("flux", "flux_old", "flux_paper"):
        assert np.array_equal(plain[key], secure[key])
    a, b = calibrated_k(plain["flux"]), calibrated_k(secure["flux"])
    assert a.k == b.k and np.array_equal(a.labels, b.labels) and a.p_value == b.p_value


def test_grid_group_sizes_at_the_smallest_federation(k_selection_bench):
    bench = k_selection_bench
    assert bench.group_sizes(6, 1) == (3, 3) and bench.group_sizes(6, 10) == (4, 2)
    assert bench.group_sizes(20, 10) == (18, 2) and bench.group_sizes(300, 10) == (273, 27)


def test_noise_floor_correction_starts_just_past_hdlss_factor_times_the_rank(monkeypatch):
    """The null keeps the sample spectrum while PR <= HDLSS_FACTOR * r (PR = 2 mean(D)^2 /
    var(D), r the embedding's rank), and spreads the floor over ceil(PR) directions past it."""
    x = np.random.default_rng(9).normal(size=(8, 40))
    d = sq_distances(x)
    _, values = mds_embedding(d)
    off = d[~np.eye(8, dtype=bool)]
    ratio = 2 * off.mean() ** 2 / off.var()
    r = values.size
    monkeypatch.setattr(ck, "HDLSS_FACTOR", ratio / r)          # at the bound: plain
    spikes, noise, q = ck._null_spectrum(d, values)
    assert np.array_equal(spikes, values) and noise == 0.0 and q == 0
    monkeypatch.setattr(ck, "HDLSS_FACTOR", ratio / r * (1 - 1e-9))    # one step past
    spikes, noise, q = ck._null_spectrum(d, values)
    floor = np.median(values)
    assert q == int(np.ceil(ratio)) and noise == pytest.approx(floor * r / q)
    assert np.allclose(spikes, np.clip(values - floor, 0, None))

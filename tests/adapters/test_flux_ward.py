"""FLUX's default K rule (omnifc's): Ward's tree on D cut at its widest relative gap."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import calibrated_k

from oracles import sq_distances

pytestmark = pytest.mark.timeout(120)


def test_hand_computed_heights_gap_and_cut():
    """x = 0, 1, 10, 11: Ward heights 1, 1 and sqrt(2 * 2 * 2 / 4) * 10 = 10 sqrt(2) (the
    pair merge's Ward distance); the upper half of the merges is heights 2 and 3."""
    out = flux.ward_gap(sq_distances([0.0, 1.0, 10.0, 11.0]))
    assert out.labels.tolist() == [0, 0, 1, 1] and out.n_clusters == 2 and out.knee_found
    assert out.labels.dtype == np.int64
    assert out.gap == pytest.approx(10 * np.sqrt(2), rel=1e-12)
    assert out.eps == pytest.approx(np.sqrt(10 * np.sqrt(2)), rel=1e-12)
    # the same tree, but a gap threshold above the ratio: one cluster, eps = the top height
    one = flux.ward_gap(sq_distances([0.0, 1.0, 10.0, 11.0]), min_gap=15.0)
    assert one.labels.tolist() == [0, 0, 0, 0] and one.n_clusters == 1
    assert one.knee_found is False and one.labels.dtype == np.int64
    assert one.eps == pytest.approx(10 * np.sqrt(2), rel=1e-12)


def test_three_groups_labelled_in_order_of_first_appearance():
    """Heights .1, .1, .1 (pairs), 10 sqrt(2) (two pairs), sqrt(2*4*2/6) * 15 (the third pair
    to the rest): upper-half ratios 141 and 1.73, so 3 clusters, not 2."""
    out = flux.ward_gap(sq_distances([10.0, 0.0, 10.1, 0.1, 20.0, 20.1]))
    assert out.labels.tolist() == [0, 1, 0, 1, 2, 2]
    assert out.gap == pytest.approx(10 * np.sqrt(2) / 0.1, rel=1e-9)


def test_duplicate_clients_give_an_infinite_gap():
    """x = 0, 0, 0, 5, 5, 5: heights 0, 0, 0, 0 and sqrt(2 * 3 * 3 / 6) * 5 = 5 sqrt(3);
    the gap after 0 is infinite and the cut is half the upper height."""
    out = flux.ward_gap(sq_distances([0.0, 0.0, 0.0, 5.0, 5.0, 5.0]))
    assert out.labels.tolist() == [0, 0, 0, 1, 1, 1] and out.gap == np.inf
    assert out.eps == pytest.approx(5 * np.sqrt(3) / 2, rel=1e-12)


def test_fewer_than_three_clients():
    """No gap to read: one cluster, eps 0, ratio 1, no landmark (DBSCAN's gap_eps: eps = the
    one distance, so DBSCAN joins the two)."""
    for x in ([0.0, 3.0], [0.0]):
        out = flux.ward_gap(sq_distances(x))
        assert out.labels.tolist() == [0] * len(x) and out.labels.dtype == np.int64
        assert out.n_clusters == 1 and out.eps == 0.0 and out.gap == 1.0
        assert out.knee_found is False
    assert flux.gap_eps(sq_distances([0.0, 3.0])) == (3.0, 1.0, False)
    assert flux.gap_eps(sq_distances([0.0])) == (0.0, 1.0, False)


def test_a_ratio_equal_to_min_gap_is_a_gap():
    """"Below min_gap: one cluster", so a ratio exactly at min_gap splits. MST edges 1, 1, 2
    (exact in floating point): ratio 2."""
    assert flux.gap_eps(sq_distances([0.0, 1.0, 2.0, 4.0]), min_gap=2.0) == (np.sqrt(2.0), 2.0, True)
    d = sq_distances([0.0, 1.0, 10.0, 11.0])
    ratio = flux.ward_gap(d).gap
    assert flux.ward_gap(d, min_gap=ratio).n_clusters == 2
    assert flux.ward_gap(d, min_gap=np.nextafter(ratio, np.inf)).n_clusters == 1


def test_zero_heights_without_warnings():
    """Identical clients: every height 0, ratio 1 (no gap), one cluster. Duplicates 0.5 apart:
    heights 0, 0, 0, 0, then 0.5 (MST) or sqrt(3) * 0.5 (Ward), both below 1: the gap after
    0 is infinite. No division by zero on the way (warnings are errors here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = flux.ward_gap(np.zeros((4, 4)))
        assert same.n_clusters == 1 and same.gap == 1.0
        assert flux.gap_eps(np.zeros((4, 4))) == (0.0, 1.0, False)
        d = sq_distances([0.0, 0.0, 0.0, 0.5, 0.5, 0.5])
        out = flux.ward_gap(d)
        assert out.labels.tolist() == [0, 0, 0, 1, 1, 1] and out.gap == np.inf
        assert out.eps == pytest.approx(np.sqrt(3) * 0.5 / 2, rel=1e-12)
        assert flux.gap_eps(d) == (0.25, np.inf, True)


def test_a_d_symmetric_within_rounding_is_accepted():
    """check_distance_matrix accepts |D - D^T| <= 1e-9 * max D; Ward reads one triangle."""
    d = sq_distances([0.0, 1.0, 10.0, 11.0, 30.0, 31.0])
    skewed = d.copy()
    skewed[0, 1] += 1e-12
    assert np.array_equal(flux.ward_gap(skewed).labels, flux.ward_gap(d).labels)
    assert flux.gap_eps(skewed) == pytest.approx(flux.gap_eps(d), rel=1e-9)
    assert np.array_equal(flux.adaptive_dbscan(skewed).labels, flux.adaptive_dbscan(d).labels)
    # one client whose diagonal carries rounding (accepted up to 1e-9): eps is still 0
    assert flux.gap_eps(np.array([[1e-12]])) == (0.0, 1.0, False)


def test_three_clients_split_two_and_one():
    """With 3 clients the only gap is searched (both rules crashed on an empty search before):
    MST edges 1, 4 (DBSCAN eps = sqrt(1 * 4) = 2); Ward heights 1 and sqrt(2*2*1/3) * 4.5."""
    d = sq_distances([0.0, 1.0, 5.0])
    dbscan = flux.adaptive_dbscan(d)
    assert dbscan.labels.tolist() == [0, 0, 1] and dbscan.eps == pytest.approx(2.0)
    ward = flux.ward_gap(d)
    assert ward.labels.tolist() == [0, 0, 1]
    assert ward.gap == pytest.approx(np.sqrt(4 / 3) * 4.5, rel=1e-12)


def test_equals_sklearn_ward_on_the_vectors():
    """Independent: sklearn's Ward tree built from the vectors (which the coordinator never
    sees), its merge distances, the widest ratio over the upper half computed here, and
    sklearn's cut at that K; with and without planted structure."""
    rng = np.random.default_rng(7)
    for trial in range(30):
        k = int(rng.integers(1, 6))
        spread = 10.0 if trial % 3 else 0.0          # every third trial: no structure
        centres = rng.normal(0, spread, (k, 5))
        x = np.concatenate([c + rng.normal(0, 1, (int(rng.integers(2, 6)), 5)) for c in centres])
        if len(x) < 4:
            x = np.concatenate([x, centres[0] + rng.normal(0, 1, (2, 5))])
        x = x[rng.permutation(len(x))]
        n = len(x)
        out = flux.ward_gap(sq_distances(x))
        tree = AgglomerativeClustering(n_clusters=None, distance_threshold=0.0, linkage="ward",
                                       compute_distances=True).fit(x)
        h = np.sort(tree.distances_)
        start = (n - 1) // 2
        ratios = [h[i + 1] / h[i] for i in range(start, n - 2)]
        best = max(range(len(ratios)), key=lambda i: ratios[i])
        assert out.gap == pytest.approx(ratios[best], rel=1e-9)
        if ratios[best] < flux.WARD_MIN_GAP:
            assert out.n_clusters == 1 and out.labels.tolist() == [0] * n
            continue
        expected_k = n - 1 - (start + best)
        expected = AgglomerativeClustering(n_clusters=expected_k, linkage="ward").fit_predict(x)
        assert out.n_clusters == expected_k
        assert adjusted_rand_score(expected, out.labels) == 1.0
        assert out.eps == pytest.approx(np.sqrt(h[start + best] * h[start + best + 1]),
                                        rel=1e-9)


def test_ward_does_not_chain_where_single_linkage_does():
    """Two elongated groups (5 clients 1 apart each) whose nearest members are 1.1 apart:
    the MST has no gap (ratio 1.1 < MIN_GAP), so DBSCAN's gap rule answers one cluster;
    Ward merges whole groups last (height sqrt(5) * 5.1 against about 3.9 within)."""
    x = np.concatenate([np.arange(5.0), 5.1 + np.arange(5.0)])
    d = sq_distances(x)
    assert flux.adaptive_dbscan(d).n_clusters == 1
    out = flux.cluster_clients(d, k_rule="ward")     # the Ward rule, pinned by name
    assert out.labels.tolist() == [0] * 5 + [1] * 5
    assert out.gap > 2.0


def test_cluster_clients_dispatch_and_errors():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 1, (6, 4)), rng.normal(8, 1, (6, 4))])
    d = sq_distances(x)
    assert np.array_equal(flux.cluster_clients(d, k_rule="ward").labels,
                          flux.ward_gap(d).labels)
    default = flux.cluster_clients(d)                   # the calibrated rule, with evidence
    ref = calibrated_k(d)
    assert flux.DEFAULT_K_RULE == "calibrated"
    assert np.array_equal(default.labels, ref.labels) and default.n_clusters == ref.k == 2
    assert default.decision.p_value == ref.p_value == default.gap and np.isnan(default.eps)
    unimodal = flux.cluster_clients(d, k_rule="calibrated_unimodal")   # an option
    ref = calibrated_k(d, statistic="axis_unimodal")
    assert np.array_equal(unimodal.labels, ref.labels) and unimodal.n_clusters == ref.k
    assert unimodal.decision.p_value == ref.p_value == unimodal.gap
    with pytest.raises(ParameterError, match="apply to k_rule='dbscan'"):
        flux.cluster_clients(d, k_rule="ward", eps_rule="knee")
    for rule, scaling in (("gap", 1.0), ("knee", 1.0), ("knee", 1.5)):
        got = flux.cluster_clients(d, k_rule="dbscan", eps_rule=rule, eps_scaling=scaling)
        ref = flux.adaptive_dbscan(d, eps_rule=rule, eps_scaling=scaling)
        assert np.array_equal(got.labels, ref.labels) and got.eps == ref.eps
    with pytest.raises(ParameterError, match="k_rule must be one of"):
        flux.cluster_clients(d, k_rule="single")
    with pytest.raises(ParameterError, match="apply to k_rule='dbscan'"):
        flux.cluster_clients(d, eps_rule="knee")           # would silently not be the knee
    with pytest.raises(ParameterError, match="apply to k_rule='dbscan'"):
        flux.cluster_clients(d, eps_scaling=1.5)
    with pytest.raises(ParameterError, match="eps_rule must be one of"):
        flux.cluster_clients(d, k_rule="dbscan", eps_rule="elbow")
    # run_flux checks before any training (no data needed to fail)
    with pytest.raises(ParameterError, match="apply to k_rule='dbscan'"):
        flux.run_flux(None, None, eps_rule="knee")

"""FMCL's one-cluster test with the additive client-effect null (issue 24)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import InputError, ParameterError
from omnifc.adapters import fmcl
from omnifc.adapters import _k_selection

pytestmark = pytest.mark.timeout(120)


def _symmetric(m):
    m = np.triu(m, 1)
    return m + m.T


def _one_population(seed, n=40):
    """Clients of one population whose spreads differ: D_ij = s_i s_j chi^2_8."""
    rng = np.random.default_rng(seed)
    s = np.exp(rng.normal(0, 1, n))
    return _symmetric(np.outer(s, s) * rng.chisquare(8, (n, n)))


def _two_groups(seed, n=40, small=10):
    rng = np.random.default_rng(seed)
    s = np.exp(rng.normal(0, 0.5, n))
    groups = np.repeat([0, 1], [n - small, small])
    x = rng.normal(0, 1, (n, 5)) + 4 * groups[:, None]
    return ((x[:, None] - x[None]) ** 2).sum(-1) * np.outer(s, s), groups


def test_additive_fit_is_the_least_squares_fit():
    rng = np.random.default_rng(3)
    n = 9
    d = _symmetric(rng.exponential(1.0, (n, n)))
    fit = fmcl.additive_fit(d)
    i, j = np.triu_indices(n, 1)
    design = np.zeros((i.size, n))
    design[np.arange(i.size), i] = 1.0
    design[np.arange(i.size), j] = 1.0                     # the intercept is in the span
    y = np.log(d[i, j])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    assert fit.mean + fit.effects[i] + fit.effects[j] == pytest.approx(design @ coef, abs=1e-12)
    assert fit.residuals == pytest.approx(y - design @ coef, abs=1e-12)
    assert abs(fit.effects.sum()) < 1e-12
    assert np.allclose(fit.matrix(), d, rtol=1e-12, atol=0)


def test_pure_client_effects_have_no_residual_and_p_one():
    a = np.random.default_rng(0).normal(0, 1, 12)
    d = np.exp(0.5 + a[:, None] + a[None, :])
    np.fill_diagonal(d, 0.0)
    test = fmcl.one_cluster_test(d, null="additive", permutations=19)
    assert test.p_value == 1.0 and test.one_cluster
    assert np.allclose(test.null, test.statistic, rtol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_unequal_spreads_fool_the_exchangeable_null_not_the_additive_one(seed):
    d = _one_population(seed)
    assert fmcl.one_cluster_test(d).p_value <= fmcl.NULL_ALPHA            # the old null
    additive = fmcl.one_cluster_test(d, null="additive")
    assert additive.one_cluster and additive.p_value > fmcl.NULL_ALPHA
    labels, k, window, scores = fmcl.choose_clusters(d, rule="additive")
    assert k == 1 and not labels.any() and scores[1] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_groups_under_client_effects_are_found(seed):
    d, groups = _two_groups(seed)
    test = fmcl.one_cluster_test(d, null="additive")
    assert test.p_value <= fmcl.NULL_ALPHA and not test.one_cluster
    labels, k, window, scores = fmcl.choose_clusters(d, rule="additive")
    silhouette = _k_selection.choose_clusters(d, rule="silhouette")
    assert k == silhouette[1] == 2 and np.array_equal(labels, silhouette[0])
    assert adjusted_rand_score(groups, labels) == 1.0
    assert window == (1, silhouette[2][1])


def test_p_value_counts_the_null_by_hand():
    d, _ = _two_groups(5, n=16, small=6)
    test = fmcl.one_cluster_test(d, null="additive", permutations=29, random_state=7)
    assert test.null.size == 29
    assert test.p_value == (1 + int(np.sum(test.null >= test.statistic))) / 30
    assert test.statistic == pytest.approx(fmcl.silhouette_profile(d, 2)[2], abs=1e-12)
    # the null matrices are the fit with permuted residuals: same seed, same null
    again = fmcl.one_cluster_test(d, null="additive", permutations=29, random_state=7)
    assert np.array_equal(test.null, again.null)
    fit = fmcl.additive_fit(d)
    rng = np.random.Generator(np.random.PCG64(7))
    first = fit.matrix(fit.residuals[rng.permutation(fit.residuals.size)])
    assert test.null[0] == pytest.approx(fmcl.silhouette_profile(first, 2)[2], abs=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_split_silhouette_is_sklearns_on_the_two_cluster_cut(seed):
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 40))
    x = rng.normal(size=(n, 3))
    x[: n // 3] += 3 * rng.normal()
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    labels = cut_tree(linkage(squareform(d, checks=False), "average"), n_clusters=2).ravel()
    expected = silhouette_score(d, labels, metric="precomputed")
    assert fmcl.split_silhouette(d) == pytest.approx(expected, abs=1e-12)


def test_zero_distances_are_floored_not_infinite():
    d, _ = _two_groups(1, n=12, small=4)
    d[0, 1] = d[1, 0] = 0.0
    fit = fmcl.additive_fit(d)
    assert np.all(np.isfinite(fit.residuals))
    median = np.median(d[np.triu_indices(12, 1)])
    assert fit.matrix()[0, 1] == pytest.approx(1e-9 * median, rel=1e-9)


@pytest.mark.slow
def test_the_other_rules_and_nulls_are_unchanged():
    d, _ = _two_groups(2, n=14, small=5)
    for rule in ("tested", "silhouette", "paper", "calibrated"):
        ours = fmcl.choose_clusters(d, rule=rule)
        base = _k_selection.choose_clusters(d, rule=rule)
        assert ours[1] == base[1] and np.array_equal(ours[0], base[0])
    overlap = np.full(d.shape, 0.5)
    assert np.array_equal(fmcl.one_cluster_test(d).null,
                          _k_selection.one_cluster_test(d).null)
    assert np.array_equal(fmcl.one_cluster_test(d, overlap=overlap).null,
                          _k_selection.one_cluster_test(d, overlap=overlap).null)
    assert fmcl.DEFAULT_RULE in fmcl.RULES and "additive" in fmcl.RULES


def test_errors():
    d, _ = _two_groups(0, n=8, small=3)
    with pytest.raises(ParameterError, match="null must be"):
        fmcl.one_cluster_test(d, null="gaussian")
    with pytest.raises(ParameterError, match="needs overlap"):
        fmcl.one_cluster_test(d, null="stratified")
    with pytest.raises(ParameterError, match="permutations"):
        fmcl.one_cluster_test(d, null="additive", permutations=0)
    with pytest.raises(ParameterError, match="rule must be"):
        fmcl.choose_clusters(d, rule="nope")
    bad = d.copy()
    bad[0, 1] = bad[1, 0] = np.inf
    with pytest.raises(InputError, match="finite"):
        fmcl.additive_fit(bad)
    with pytest.raises(InputError, match="at least 3"):
        fmcl.additive_fit(d[:2, :2])
    labels, k, _, _ = fmcl.choose_clusters(d[:3, :3], rule="additive")
    assert k == 1                                   # 3 clients: the model fits exactly


@pytest.mark.slow
def test_fmcl_server_and_the_federated_loop_take_the_additive_rule():
    from omnifc import fl

    d, groups = _two_groups(1)
    server = fmcl.fmcl_server(d, rule="additive")
    labels, k, window, scores = fmcl.choose_clusters(d, rule="additive")
    assert server.n_clusters == k == 2 and np.array_equal(server.labels, labels)
    data = fl.make_federated("digits", shift="concept", n_groups=2, clients_per_group=4,
                             train_samples=80, test_samples=20, seed=2)
    out = fmcl.run_federated_fmcl(data, rounds=1, secure=False, rule="additive")
    direct = fmcl.fmcl_server(out["distances"], rule="additive")
    assert out["n_clusters"] == direct.n_clusters
    assert np.array_equal(out["labels"], direct.labels)


@pytest.mark.slow
def test_the_default_rule_is_the_additive_one_and_keeps_one_population_whole():
    # issue 24: the default rule answers K = 1 on one population with client effects, where
    # the previous default ("tested", the exchangeable null) splits it; every entry point
    # that takes a rule defaults to it
    import inspect

    assert fmcl.DEFAULT_RULE == "additive"
    for function in (fmcl.fmcl_server, fmcl.choose_clusters, fmcl.run_federated_fmcl):
        assert inspect.signature(function).parameters["rule"].default == "additive"
    d = _one_population(0)
    by_default = fmcl.fmcl_server(d)
    assert by_default.n_clusters == 1 and not by_default.labels.any()
    assert fmcl.fmcl_server(d, rule="tested").n_clusters >= 2

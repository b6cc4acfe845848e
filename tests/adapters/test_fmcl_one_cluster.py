"""FMCL's one-cluster permutation test: the statistic, the p-value, K = 1 and K = 2, 3."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import cut_tree, linkage
from scipy.spatial.distance import squareform
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import adjusted_rand_score, silhouette_score

from finite_field import InputError, ParameterError
from omnifc.adapters import fmcl

pytestmark = pytest.mark.timeout(120)


def _distances(n_domains, seed, shift="rotation", clients_per_domain=10):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains,
                                              clients_per_domain=clients_per_domain,
                                              samples=300, shift=shift, seed=seed)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means = np.stack([s[0] for s in sig])
    weights = np.stack([s[1] for s in sig])
    return fmcl.fmcl_distances(means, weights), domains


@pytest.mark.parametrize("seed", [0, 1])
def test_silhouette_profile_equals_sklearn_on_the_average_linkage_cuts(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((14, 3)) + np.repeat(rng.standard_normal((3, 3)) * 4, [5, 5, 4], 0)
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    profile = fmcl.silhouette_profile(d, max_clusters=6)
    assert sorted(profile) == [2, 3, 4, 5, 6]
    tree = linkage(squareform(d, checks=False), method="average")
    for k, value in profile.items():
        labels = cut_tree(tree, n_clusters=k).ravel()
        assert value == pytest.approx(silhouette_score(d, labels, metric="precomputed"),
                                      abs=1e-12)
        sk = AgglomerativeClustering(n_clusters=k, metric="precomputed",
                                     linkage="average").fit_predict(d)
        assert adjusted_rand_score(sk, labels) == 1.0   # the same tree as the rule's
    assert fmcl.silhouette_profile(d, max_clusters=20).keys() == set(range(2, 14))
    assert fmcl.silhouette_profile(d[:2, :2]) == {}


def test_silhouette_profile_singleton_scores_zero_by_hand():
    # points 0, 1 at distance 1, point 2 at distance 9 from both: K = 2 cuts {0, 1} | {2};
    # s_0 = s_1 = (9 - 1) / 9, the singleton's s = 0 -> mean 16/27
    d = np.array([[0, 1, 9], [1, 0, 9], [9, 9, 0.0]])
    assert fmcl.silhouette_profile(d) == {2: pytest.approx(16 / 27, abs=1e-15)}


def test_p_value_of_an_all_equal_matrix_is_one():
    d = np.ones((6, 6)) - np.eye(6)
    test = fmcl.one_cluster_test(d, permutations=9)
    assert test.p_value == 1.0 and test.one_cluster
    assert np.all(test.null == test.statistic)


def test_p_value_matches_the_hand_computed_null_probability():
    # Two tight pairs among 4 points: distances {1, 1, 9, 9, 9, 9}. The statistic (0.889 at
    # K = 2) is reached exactly when the two 1s fall on disjoint pairs: 3 of the C(6, 2) = 15
    # placements, so P(null >= observed) = 1/5 and p -> (1 + B/5) / (1 + B).
    d = np.array([[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0.0]])
    test = fmcl.one_cluster_test(d, permutations=999)
    assert test.statistic == pytest.approx(8 / 9, abs=1e-15)
    assert abs(test.p_value - 0.2) < 0.04          # 3.2 binomial standard deviations
    assert test.one_cluster                        # p > 0.05: not evidence of two groups


def test_parameters_are_checked():
    d = np.ones((4, 4)) - np.eye(4)
    with pytest.raises(ParameterError):
        fmcl.one_cluster_test(d, permutations=0)
    with pytest.raises(ParameterError):
        fmcl.one_cluster_test(d, alpha=1.0)
    with pytest.raises(ParameterError):
        fmcl.one_cluster_test(d[:2, :2])
    with pytest.raises(ParameterError):
        fmcl.fmcl_server(d, rule="gap")


@pytest.mark.parametrize("shift,seed", [("rotation", 100), ("offset", 101),
                                        ("permutation", 102)])
def test_single_domain_gives_one_cluster_by_default(shift, seed):
    d, _ = _distances(1, seed, shift)
    result = fmcl.fmcl_server(d, rule="tested")       # the default before issue 24
    assert result.n_clusters == 1 and result.labels.tolist() == [0] * 10
    assert result.window == (1, 9)
    # the silhouette rule alone splits the same domain
    assert fmcl.fmcl_server(d, rule="silhouette").n_clusters >= 2


@pytest.mark.parametrize("n_domains,seed", [(2, 100), (2, 103), (3, 101), (3, 104)])
def test_two_and_three_domains_still_found_on_held_out_seeds(n_domains, seed):
    d, domains = _distances(n_domains, seed)
    result = fmcl.fmcl_server(d)
    assert fmcl.one_cluster_test(d).p_value <= fmcl.NULL_ALPHA
    assert result.n_clusters == n_domains
    assert adjusted_rand_score(domains, result.labels) == 1.0
    silhouette = fmcl.fmcl_server(d, rule="silhouette")
    assert np.array_equal(result.labels, silhouette.labels)


def test_end_to_end_single_group_gives_one_cluster_and_plain_fedavg():
    """digits, one group of 8 clients: the tested rule answers K = 1 (the silhouette rule
    splits it), so FMCL's per-cluster FedAvg is FedAvg itself, model for model."""
    from omnifc import fl

    data = fl.make_federated("digits", shift="feature", n_groups=1, clients_per_group=8,
                             train_samples=150, test_samples=100, seed=0)
    out = fmcl.run_federated_fmcl(data, rounds=3, secure=False)
    assert out["n_clusters"] == 1 and out["labels"].tolist() == [0] * 8
    assert fmcl.fmcl_server(out["distances"], rule="silhouette").n_clusters >= 2
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    fedavg = fl.run_federated(data.clients, [model.init(0)], rounds=3,
                              local_train=fl.sgd_trainer(model, epochs=2, batch_size=20,
                                                         learning_rate=0.5),
                              evaluate=fl.accuracy_evaluator(model), seed=0)
    assert np.array_equal(out["run"].models[0], fedavg.models[0])


def test_class_overlap_equals_the_loop_and_the_secure_path_reports_it_exactly():
    clients, _ = fmcl.synthetic_domains(n_domains=2, clients_per_domain=3, samples=200, seed=5)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means = np.stack([s[0] for s in sig])
    weights = np.stack([s[1] for s in sig])
    n = len(clients)
    loop = np.array([[sum(min(weights[i, c], weights[j, c]) for c in range(10))
                      for j in range(n)] for i in range(n)])
    assert np.allclose(fmcl.class_overlap(weights), loop, atol=1e-15)
    d, overlap = fmcl.secure_thermometer_distances(means, weights, resolution=200,
                                                   secure=False, return_overlap=True)
    counts = np.rint(weights * 200).astype(int)       # exact: q = the sample count
    expected = np.minimum(counts[:, None, :], counts[None, :, :]).sum(axis=2) / 200
    assert np.array_equal(overlap, expected)
    assert np.array_equal(d, fmcl.secure_thermometer_distances(means, weights, resolution=200,
                                                               secure=False))


def test_groups_made_by_overlap_alone_are_one_cluster_under_the_stratified_null():
    # Two groups of 4 that differ only in class overlap (0.9 within, 0.1 across); the
    # overlap-normalized cosine part v depends on the overlap alone (0.01 at 0.9, 0.05 at
    # 0.1, as noisy low-weight class means do): D = v g(Omega) = v / Omega. The exchangeable
    # null sees two perfect groups (p = 1/100); within overlap strata every permutation
    # moves equal values, so each null matrix is D itself and p = 1 (mixing v across strata
    # would break that).
    group = np.repeat([0, 1], 4)
    same = group[:, None] == group[None, :]
    overlap = np.where(same, 0.9, 0.1)
    np.fill_diagonal(overlap, 1.0)
    d = np.where(same, 0.01, 0.05) / overlap
    np.fill_diagonal(d, 0.0)
    plain = fmcl.one_cluster_test(d)
    stratified = fmcl.one_cluster_test(d, overlap=overlap)
    assert plain.p_value == 0.01 and not plain.one_cluster
    assert stratified.p_value == 1.0 and stratified.one_cluster
    assert np.all(stratified.null == stratified.statistic)
    assert fmcl.fmcl_server(d, rule="tested", overlap=overlap).n_clusters == 1
    assert fmcl.fmcl_server(d, rule="tested").n_clusters == 2
    with pytest.raises(InputError):
        fmcl.one_cluster_test(d, overlap=overlap[:3, :3])

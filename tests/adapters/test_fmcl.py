"""FMCL on protected thermometer signatures: distance, K window, secure == plaintext."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from omnifc.adapters import fmcl


def _naive_fmcl(means, weights):
    """Independent loop implementation of Algorithm 3 with g = min(1/Omega, 100)."""
    n, c, _ = means.shape
    d = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        num = om = 0.0
        for k in range(c):
            m = min(weights[i, k], weights[j, k])
            if m > 0:
                a, b = means[i, k], means[j, k]
                num += m * (1 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
                om += m
        d[i, j] = d[j, i] = (num / (om + 1e-3) * min(1 / om, 100.0)) if om > 0 else np.inf
    off = ~np.eye(n, dtype=bool)
    finite = d[off & np.isfinite(d)]
    d[off & ~np.isfinite(d)] = min(2 * np.percentile(finite, 95), np.percentile(finite, 99))
    return d


@pytest.fixture(scope="module")
def three_domains():
    clients, domains = fmcl.synthetic_domains(seed=0)   # 3 x 30 clients, Dirichlet(0.1)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means = np.stack([s[0] for s in sig])
    weights = np.stack([s[1] for s in sig])
    return clients, domains, means, weights


def test_direct_distance_equals_naive_algorithm(three_domains):
    _, _, means, weights = three_domains
    sub = slice(0, 40)
    expected = _naive_fmcl(means[sub], weights[sub])
    assert np.isinf(fmcl.fmcl_distances(means[sub], weights[sub], fill=False)).any()  # fills used
    np.testing.assert_allclose(fmcl.fmcl_distances(means[sub], weights[sub], fill="paper"), expected,
                               rtol=1e-12, atol=1e-12)


def test_round_weights_largest_remainder():
    k = fmcl.round_weights([0.333, 0.333, 0.334, 0.0], 10)
    assert k.sum() == 10 and k[3] == 0
    w = np.random.Generator(np.random.PCG64(1)).dirichlet(0.1 * np.ones(10), size=50)
    for row in w:
        k = fmcl.round_weights(row, 50)
        assert k.sum() == 50 and np.all(np.abs(k / 50 - row) < 1 / 50)


def test_thermometer_identity_is_exact_for_rounded_weights(three_domains):
    _, _, means, weights = three_domains
    q = 40
    sub = slice(0, 30)
    rounded = np.stack([fmcl.round_weights(w, q) / q for w in weights[sub]])
    rows = [fmcl.thermometer_rows(m, w, q) for m, w in zip(means[sub], weights[sub])]
    z = np.stack([r[0] for r in rows])
    t = np.stack([r[1] for r in rows])
    sq = lambda x: ((x[:, None] - x[None]) ** 2).sum(-1)   # noqa: E731
    got = fmcl.fmcl_from_thermometer(sq(z), sq(t), q, fill=False)
    want = fmcl.fmcl_distances(means[sub], rounded, fill=False)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-9, atol=1e-12)


def test_secure_thermometer_equals_plaintext_thermometer():
    clients, _ = fmcl.synthetic_domains(clients_per_domain=3, samples=200, seed=2)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    secure = fmcl.secure_thermometer_distances(means, weights, resolution=20,
                                               parties=np.arange(9) % 3)
    plain = fmcl.secure_thermometer_distances(means, weights, resolution=20, secure=False)
    assert np.array_equal(secure, plain)
    a, b = fmcl.fmcl_server(secure), fmcl.fmcl_server(plain)
    assert np.array_equal(a.labels, b.labels) and a.n_clusters == b.n_clusters


def test_domains_recovered_and_kmeans_on_means_is_worse(three_domains):
    clients, domains, means, weights = three_domains
    direct = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert direct.window[0] <= 3 <= direct.window[1]
    assert direct.n_clusters == 3
    assert adjusted_rand_score(domains, direct.labels) >= 0.9
    baseline = fmcl.kmeans_on_mean_embeddings(np.stack([x.mean(0) for x, _ in clients]), 3)
    assert adjusted_rand_score(domains, baseline) < 0.6   # measured 0.24 (seed 0)
    # The thermometer path (what the secure path computes, exactly; q = 500).
    therm = fmcl.fmcl_server(fmcl.secure_thermometer_distances(means, weights, secure=False))
    assert therm.window[0] <= 3 <= therm.window[1]
    assert adjusted_rand_score(domains, therm.labels) >= 0.9


def test_thermometer_path_within_documented_bound(three_domains):
    _, _, means, weights = three_domains
    q = fmcl.DEFAULT_RESOLUTION
    direct = fmcl.fmcl_distances(means, weights, fill=False)
    therm = fmcl.secure_thermometer_distances(means, weights, resolution=q, secure=False)
    raw = fmcl.fmcl_distances(means, weights, fill=True)   # same fill rule, for finite pairs
    bound = fmcl.thermometer_error_bound(means, weights, resolution=q)
    checked = np.isfinite(bound) & np.isfinite(direct)
    assert checked.mean() > 0.8                            # most pairs have overlap > Delta
    assert np.all(np.abs(therm - raw)[checked] <= bound[checked])


def test_k_window_and_edge_cases():
    assert fmcl.k_window(0.2) == (1, 3) and fmcl.k_window(0.5) == (2, 6)
    assert fmcl.k_window(0.7) == (3, 10)
    two = fmcl.fmcl_server(np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert two.n_clusters == 1 and two.labels.tolist() == [0, 0]
    none_shared = np.full((4, 4), np.inf)
    np.fill_diagonal(none_shared, 0.0)
    filled = fmcl.fill_missing(none_shared)
    assert filled[0, 1] == 1.0 and fmcl.coefficient_of_variation(filled) == 0.0
    flat = fmcl.fmcl_server(filled, rule="paper")
    assert flat.n_clusters == 1            # window (1, 3); no split has a positive silhouette
    # the silhouette rule never answers K = 1; the default (tested) rule does: every
    # permutation of an all-equal matrix is the matrix itself, so p = 1
    assert fmcl.fmcl_server(filled, rule="silhouette").n_clusters == 2
    assert fmcl.fmcl_server(filled).n_clusters == 1
    assert fmcl.fmcl_server(np.array([[0.0, 1.0], [1.0, 0.0]]), rule="silhouette").n_clusters == 1
    assert fmcl.coefficient_of_variation(np.zeros((3, 3))) == 0.0


def _signatures(clients):
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    return np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])


@pytest.mark.parametrize("n_domains", [2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_k_finds_planted_two_and_three_domains_with_defaults(n_domains, seed):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=10,
                                              samples=300, seed=seed)
    means, weights = _signatures(clients)
    result = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))   # all defaults
    assert result.n_clusters == n_domains
    assert adjusted_rand_score(domains, result.labels) == 1.0
    # The paper's rule on the same signatures: D_big fill and the CV window. Planted K = 2
    # gives CV > 0.70, so its window (3, 10) cannot contain 2.
    paper = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights, fill="paper"), rule="paper")
    if n_domains == 2:
        assert paper.window == (3, 10) and paper.n_clusters != 2


@pytest.mark.parametrize("shift", ["offset"])
def test_auto_k_other_shift_types(shift):
    # permutation (concept shift) is weaker (K right in 2-5 of 5 seeds per K, see
    # docs/adapters.md): a client whose few classes are fixed points of the permutation
    # looks like the other domain.
    clients, domains = fmcl.synthetic_domains(n_domains=3, clients_per_domain=10, samples=300,
                                              shift=shift, seed=3)
    means, weights = _signatures(clients)
    result = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert result.n_clusters == 3 and adjusted_rand_score(domains, result.labels) == 1.0


def test_geodesic_fill_routes_missing_pairs_through_shared_classes():
    d = np.array([[0.0, 0.1, np.inf, 5.0], [0.1, 0, 0.2, 5.0], [np.inf, 0.2, 0, 5.0],
                  [5.0, 5.0, 5.0, 0]])
    filled = fmcl.geodesic_fill(d)
    assert filled[0, 2] == pytest.approx(0.3) and filled[2, 0] == filled[0, 2]
    assert fmcl.fill_missing(d)[0, 2] == pytest.approx(5.0)   # the paper's D_big
    apart = np.array([[0.0, np.inf], [np.inf, 0.0]])          # no path: D_big (all missing: 1)
    assert fmcl.geodesic_fill(apart)[0, 1] == 1.0


def test_exact_resolution_makes_weight_rounding_the_identity():
    assert fmcl.exact_resolution([120, 120, 80]) == 240
    with pytest.raises(ValueError, match="limit"):
        fmcl.exact_resolution([997, 991], limit=1000)
    counts = np.array([[3, 0, 117], [60, 60, 0], [1, 1, 118]])
    for row in counts:
        assert fmcl.round_weights(row / row.sum(), 240).tolist() == (row * 2).tolist()


@pytest.mark.parametrize("n_domains,seed", [(2, 0), (3, 1)])
def test_secure_fmcl_is_lossless_on_the_quantized_signature(n_domains, seed):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=8,
                                              samples=120, seed=seed)
    means, weights = _signatures(clients)
    q = fmcl.exact_resolution([len(y) for _, y in clients])          # 120: weights exact
    secure = fmcl.secure_thermometer_distances(means, weights, resolution=q,
                                               parties=np.arange(len(clients)) % 3)
    # bit for bit: the direct formula on the quantized signature, computed from integers
    assert np.array_equal(secure, fmcl.quantized_fmcl_distances(means, weights, resolution=q))
    # against the unquantized direct distance: the stated bound, and the same labels
    direct_raw = fmcl.fmcl_distances(means, weights, fill=False)
    quant_raw = fmcl.quantized_fmcl_distances(means, weights, resolution=q, fill=False)
    finite = np.isfinite(direct_raw)
    assert np.array_equal(finite, np.isfinite(quant_raw))            # same missing pairs
    bound = fmcl.thermometer_error_bound(means, weights, resolution=q)
    assert np.all(np.abs(quant_raw[finite] - direct_raw[finite]) <= bound[finite])
    a = fmcl.fmcl_server(secure)
    b = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert a.n_clusters == b.n_clusters == n_domains
    assert np.array_equal(a.labels, b.labels)


@pytest.mark.parametrize("shift,n_groups", [("feature", 3), ("concept", 2)])
def test_fmcl_end_to_end_federated_secure_equals_plaintext(shift, n_groups):
    from omnifc import fl

    data = fl.make_federated("digits", shift=shift, n_groups=n_groups, clients_per_group=4,
                             train_samples=150, test_samples=100, seed=0)
    secure = fmcl.run_federated_fmcl(data, rounds=8, secure=True)
    plain = fmcl.run_federated_fmcl(data, rounds=8, secure=False)
    assert secure["resolution"] == 150                      # exact class weights
    assert np.array_equal(secure["distances"], plain["distances"])
    assert np.array_equal(secure["labels"], plain["labels"])
    assert all(np.array_equal(a, b) for a, b in zip(secure["run"].models, plain["run"].models))
    assert secure["n_clusters"] == n_groups
    assert adjusted_rand_score(data.groups, secure["labels"]) == 1.0
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    fedavg = fl.run_federated(data.clients, [model.init(0)], rounds=8,
                              local_train=fl.sgd_trainer(model, epochs=2, batch_size=20,
                                                         learning_rate=0.5),
                              evaluate=fl.accuracy_evaluator(model), seed=0)
    # measured (seed 0): feature 0.93 vs 0.68, concept 0.94 vs 0.40
    assert secure["accuracy"] > fedavg.history[-1].metrics["accuracy"] + 0.1

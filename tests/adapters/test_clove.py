"""CLoVE on protected loss vectors: paper algorithm, secure == plaintext, and its claims."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics import adjusted_rand_score, silhouette_score

from finite_field import ParameterError
from oracles import sq_distances, ward_gap_k
from omnifc.adapters import clove, plaintext_distances, quantize_rows

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [6, 20])
def test_choose_k_equals_the_papers_code_on_vectors(seed, n):
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = rng.uniform(0, 4, (3, 5))
    x = centres[rng.integers(0, 3, n)] + rng.normal(0, 0.2 + 0.3 * seed, (n, 5))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    assert clove.choose_k(d, k_upper=15) == _paper_choose_k(x, 15)   # n=6 takes the 5x path
    assert clove.choose_k(d, k_upper=4) == _paper_choose_k(x, 4)


def test_matching_sorting_and_fedavg():
    labels = clove.sort_clusters(np.array([2, 2, 0, 1, 0]))
    assert labels.tolist() == [0, 0, 1, 2, 1]     # clusters ordered by smallest client index
    cost = np.array([[5.0, 1.0, 9.0, 3.0], [1.0, 2.0, 9.0, 4.0]])
    model = clove.match_clusters(cost)
    rows, cols = linear_sum_assignment(cost)
    assert model.tolist() == cols.tolist() == [1, 0]
    models = np.arange(8.0).reshape(4, 2)
    updates = np.array([[1.0, 1.0], [3.0, 3.0], [10.0, 0.0]])
    out = clove.fedavg(models, np.array([1, 1, 0]), updates, np.array([1, 3, 2]))
    assert out[1].tolist() == [2.5, 2.5] and out[0].tolist() == [10.0, 0.0]
    assert np.array_equal(out[2:], models[2:])    # unmatched models keep their parameters


def test_stability_rules():
    assert clove.is_stable([0, 1, 1, 1]) and not clove.is_stable([1, 1])
    assert not clove.is_stable([1, 2, 1]) and clove.is_stable([1, 2, 1], rule="literal")


def test_loss_vector_and_sqrt_option():
    x = np.eye(3)
    y = np.array([1.0, 0.0, 0.0])
    models = [np.zeros(3), np.array([1.0, 0, 0])]
    assert clove.loss_vector(models, x, y).tolist() == [1 / 3, 0.0]
    assert clove.loss_vector(models, x, y, transform="sqrt")[0] == pytest.approx(np.sqrt(1 / 3))


def test_kmeans_on_protected_distances_equals_kmeans_on_loss_vectors():
    clients, truth, _ = clove.linear_mixture(delta=1.0, train_points=300, seed=3)
    models = clove.random_unit_models(5, 20, seed=7)
    vectors = np.stack([clove.loss_vector(models, x, y) for x, y in clients])
    q = quantize_rows(vectors, bound=clove.DEFAULT_MAX_LOSS, scale_bits=20, nonnegative=True)
    ours = clove.cluster_clients(plaintext_distances(q), 5, random_state=0)
    paper = KMeans(n_clusters=5, random_state=0, n_init="auto").fit(vectors).labels_
    assert adjusted_rand_score(ours, paper) == 1.0


def test_secure_round_loop_equals_plaintext_round_loop():
    clients, truth, _ = clove.linear_mixture(delta=0.1, train_points=200, seed=1)
    start = clove.random_unit_models(5, 20, seed=11)
    organizations = np.arange(len(clients)) % 4
    secure = clove.run_clove(clients, start, n_clusters=5, rounds=2, parties=organizations)
    plain = clove.run_clove(clients, start, n_clusters=5, rounds=2, secure=False)
    for a, b in zip(secure.assignments, plain.assignments):
        assert np.array_equal(a, b)
    for a, b in zip(secure.costs, plain.costs):
        assert np.array_equal(a, b)     # the secure-sum cost is exact
    assert np.array_equal(secure.models, plain.models)


def _ifca_keeps_round0_merges(run, start):
    """IFCA's mechanism: models no client picked in round 0 are never picked again."""
    used = set(run.assignments[0].tolist())
    unused = [j for j in range(len(start)) if j not in used]
    return (all(set(a.tolist()) <= used for a in run.assignments)
            and all(np.array_equal(run.models[j], start[j]) for j in unused))


@pytest.mark.parametrize("delta", [1.0, 0.1])
def test_clove_reaches_ari_one_within_two_rounds_and_ifca_does_not(delta):
    """5 clusters x 5 clients, d = 20, unit-norm models at separation delta, random start.

    Secure == plaintext is proven above, so the statistics use the plaintext path.
    Measured (seeds 0-4, initial models seeds 100-104): CLoVE ARI 1 by round 1 on every
    seed. IFCA final ARI: delta 0.1 -> 0.00, 0.33, 0.33, 0.33, 0.18 (1-2 models used);
    delta 1 -> 0.44, 0.75, 0.75, 0.75, 0.68 (3-5 models used, never ARI 1).

    The issue's "IFCA below 0.5 on most seeds" holds at delta 0.1 only. At delta 1 the true
    models are 1-2 apart (60-180 degrees on the sphere), so the 5 random directions are won by
    4 (3-5) different true clusters in round 0; IFCA then only merges what round 0 merged
    (asserted below): 4 models -> ARI 0.75, 3 -> 0.44/0.57. Faithful IFCA (argmin of the
    training loss, per-model FedAvg, unused models kept) gives the same with the paper's Adam
    training (test below); over seeds 0-29 it is below 0.5 on 11/30 (exact fits) and 12/30
    (Adam). See docs/adapters.md (CLoVE) for why the reference sanity run saw 0.13-0.44.
    """
    clove_hits, ifca_low, ifca_never_one = 0, 0, 0
    for seed in range(5):
        clients, truth, _ = clove.linear_mixture(delta=delta, seed=seed)
        start = clove.random_unit_models(5, 20, seed=100 + seed)
        run = clove.run_clove(clients, start, n_clusters=5, rounds=3, secure=False, seed=seed)
        ifca = clove.run_ifca(clients, start, rounds=3)
        aris = [adjusted_rand_score(truth, a) for a in run.assignments]
        ifca_aris = [adjusted_rand_score(truth, a) for a in ifca.assignments]
        clove_hits += max(aris[:2]) == 1.0 and aris[-1] == 1.0
        ifca_low += ifca_aris[-1] < 0.5
        ifca_never_one += max(ifca_aris) < 1.0
        assert _ifca_keeps_round0_merges(ifca, start)
    assert clove_hits == 5
    assert ifca_never_one >= 4
    if delta == 0.1:
        assert ifca_low >= 4


def test_adam_trainer_is_adam():
    rng = np.random.Generator(np.random.PCG64(4))
    x = rng.standard_normal((50, 3))
    y = x @ np.array([0.5, -1.0, 2.0])
    theta = np.zeros(3)
    one_step = clove.adam_trainer(epochs=1, batch_size=50)(theta, x, y)
    grad = (2.0 / 50) * x.T @ (x @ theta - y)
    np.testing.assert_allclose(one_step, -1e-3 * grad / (np.abs(grad) + 1e-8), rtol=1e-12)
    long_run = clove.adam_trainer(learning_rate=1e-2, epochs=300, batch_size=10)(theta, x, y)
    np.testing.assert_allclose(long_run, clove.local_update(theta, x, y), atol=1e-3)


@pytest.mark.slow
def test_ifca_with_the_papers_adam_training_keeps_round0_merges():
    """The paper's local training (Adam, lr 1e-3, 25 epochs, batch 100) at delta = 1: the same
    picture as exact local fits. Measured final ARI, seeds 0-4: 0.44, 0.75, 0.44, 0.75, 0.75."""
    never_one = 0
    for seed in range(5):
        clients, truth, _ = clove.linear_mixture(delta=1.0, seed=seed)
        start = clove.random_unit_models(5, 20, seed=100 + seed)
        ifca = clove.run_ifca(clients, start, rounds=3, trainer=clove.adam_trainer(seed=seed))
        never_one += max(adjusted_rand_score(truth, a) for a in ifca.assignments) < 1.0
        assert _ifca_keeps_round0_merges(ifca, start)
    assert never_one == 5


def test_unknown_k_is_found_and_assignments_freeze():
    clients, truth, _ = clove.linear_mixture(delta=1.0, seed=0)
    start = clove.random_unit_models(15, 20, seed=100)
    run = clove.run_clove(clients, start, n_clusters=None, k_upper=15, rounds=5, secure=False)
    assert run.n_clusters[0] == 5
    assert adjusted_rand_score(truth, run.assignments[0]) == 1.0
    assert run.frozen_from == 3 and run.costs[3] is None and run.costs[4] is None
    assert np.array_equal(run.assignments[4], run.assignments[2])


def test_secure_round_with_every_client_its_own_party():
    clients, truth, _ = clove.linear_mixture(n_clusters=3, clients_per_cluster=2, delta=1.0,
                                             train_points=200, seed=2)
    start = clove.random_unit_models(3, 20, seed=5)
    secure = clove.run_clove(clients, start, n_clusters=3, rounds=1)       # 6 parties
    plain = clove.run_clove(clients, start, n_clusters=3, rounds=1, secure=False)
    assert np.array_equal(secure.assignments[0], plain.assignments[0])
    assert np.array_equal(secure.costs[0], plain.costs[0])
    labels = clove.cluster_clients(secure.distances[0], 3)
    vectors = quantize_rows(np.stack([clove.loss_vector(start, x, y) for x, y in clients]),
                            bound=clove.DEFAULT_MAX_LOSS, scale_bits=clove.DEFAULT_SCALE_BITS,
                            nonnegative=True)
    assert np.array_equal(secure.costs[0], clove.cluster_cost(vectors, labels, 3))


def _sort_clusters_before_the_move(labels):
    # clove.sort_clusters as written before it became omnifc._clustering's relabel
    labels = np.asarray(labels)
    order = sorted(set(labels.tolist()), key=lambda c: int(np.flatnonzero(labels == c)[0]))
    mapping = {c: k for k, c in enumerate(order)}
    return np.array([mapping[c] for c in labels.tolist()], dtype=np.int64)


def test_sort_clusters_is_relabel_bit_for_bit_on_cluster_labels():
    from omnifc._clustering import relabel

    assert clove.sort_clusters is relabel
    rng = np.random.default_rng(0)
    for _ in range(200):
        labels = rng.integers(0, rng.integers(1, 9), size=rng.integers(1, 30))
        old = _sort_clusters_before_the_move(labels)
        new = clove.sort_clusters(labels)
        assert new.dtype == old.dtype and np.array_equal(new, old)
    assert clove.sort_clusters([5, 3, 5, 9, 3, 1]).tolist() == [0, 1, 0, 2, 1, 3]


# -- folded in from test_clove_bites.py ---------------------------------------------------
# omnifc.adapters.clove pinned against independent expectations (mutation testing, issue 14).
#
# Every expectation is recomputed here from the paper's construction (docs/adapters.md,
# CLoVE; the module docstring): losses and least squares in plain numpy, Adam's update rule
# written out, the K rule with scikit-learn's ward clustering and silhouette on the vectors,
# k-means with scikit-learn on the vectors, the matching with scipy's Hungarian solver, and
# the quantization ``round(2^q clip(x, 0, R)) / 2^q`` by hand.


def _quantize(v, bound, bits):
    """The protocol's view of a loss: round(2^q clip(v, 0, R)) / 2^q, halves rounded up."""
    return np.floor(np.clip(v, 0.0, bound) * 2.0 ** bits + 0.5) / 2.0 ** bits


# ----------------------------------------------------------------------------- client side

def test_mse_loss_and_loss_vector_by_hand():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = np.array([0.0, 1.0])
    assert clove.mse_loss([1.0, 0.0], x, y) == (1.0 ** 2 + 2.0 ** 2) / 2     # residuals 1, 2
    assert isinstance(clove.mse_loss([1.0, 0.0], x, y), float)
    models = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.0, 0.0])]
    # residuals: [1, 2], [2, 3], [0, -1]
    expected = [5 / 2, 13 / 2, 1 / 2]
    assert clove.loss_vector(models, x, y).tolist() == expected
    assert clove.loss_vector(models, x, y, transform="sqrt").tolist() == \
        [np.sqrt(v) for v in expected]

    def absolute(theta, features, targets):     # a loss other than the MSE: its own path
        return float(np.abs(features @ theta - targets).sum())

    out = clove.loss_vector(models, x, y, loss=absolute)
    assert out.dtype == np.float64 and out.tolist() == [3.0, 5.0, 1.0]
    assert clove.loss_vector(models, x, y, loss=absolute, transform="sqrt").tolist() == \
        [np.sqrt(3.0), np.sqrt(5.0), 1.0]
    with pytest.raises(ParameterError, match=re.escape(
            "transform must be one of ('identity', 'sqrt'), got 'log'")):
        clove.loss_vector(models, x, y, transform="log")


def test_local_update_least_squares_and_gradient_steps():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(12, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.1, 12)
    fit = np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose(clove.local_update(np.zeros(3), x, y), fit, rtol=1e-10)
    theta = np.array([0.3, 0.1, -0.2])
    w = theta.copy()
    for _ in range(3):                    # the default learning rate 0.1, gradient 2/n X^T r
        w = w - 0.1 * (2.0 / 12) * (x.T @ (x @ w - y))
    np.testing.assert_allclose(clove.local_update(theta, x, y, local_steps=3), w, rtol=1e-12)
    w = theta.copy()
    for _ in range(2):
        w = w - 0.02 * (2.0 / 12) * (x.T @ (x @ w - y))
    np.testing.assert_allclose(clove.local_update(theta, x, y, local_steps=2,
                                                  learning_rate=0.02), w, rtol=1e-12)
    assert clove.local_update(theta, x, y, local_steps=0).tolist() == theta.tolist()


def _adam_reference(seed, learning_rate, epochs, batch_size, betas, eps):
    """Adam (torch's rule) written out per coordinate with Python floats."""
    rng = np.random.Generator(np.random.PCG64(seed))
    b1, b2 = betas

    def train(theta, x, y):
        w = [float(v) for v in theta]
        m, v, t = [0.0] * len(w), [0.0] * len(w), 0
        for _ in range(epochs):
            order = rng.permutation(x.shape[0])
            for start in range(0, x.shape[0], batch_size):
                idx = order[start:start + batch_size]
                residual = [sum(x[i, j] * w[j] for j in range(len(w))) - y[i] for i in idx]
                g = [2.0 / len(idx) * sum(x[i, j] * r for i, r in zip(idx, residual))
                     for j in range(len(w))]
                t += 1
                for j in range(len(w)):
                    m[j] = b1 * m[j] + (1 - b1) * g[j]
                    v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j]
                    w[j] -= learning_rate * (m[j] / (1 - b1 ** t)) / (
                        (v[j] / (1 - b2 ** t)) ** 0.5 + eps)
        return np.array(w)

    return train


def test_adam_trainer_defaults_are_the_papers_settings():
    """lr 1e-3, 25 epochs, batches of 100, seed 0, betas (0.9, 0.999), eps 1e-8."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(230, 2))          # 3 batches per epoch: 100, 100, 30
    y = x @ np.array([0.7, -0.4]) + 0.01
    theta = np.array([0.1, 0.2])
    ours = clove.adam_trainer()
    ref = _adam_reference(0, 1e-3, 25, 100, (0.9, 0.999), 1e-8)
    for _ in range(2):                     # the shuffling stream continues across calls
        np.testing.assert_allclose(ours(theta, x, y), ref(theta, x, y), rtol=1e-11)
    small = x[:6] * 1e-5, y[:6] * 1e-5     # gradients near eps: eps matters
    ours = clove.adam_trainer(epochs=2, batch_size=4, seed=3)
    ref = _adam_reference(3, 1e-3, 2, 4, (0.9, 0.999), 1e-8)
    np.testing.assert_allclose(ours(theta, *small), ref(theta, *small), rtol=1e-11)
    ours = clove.adam_trainer(learning_rate=0.05, epochs=3, batch_size=7, seed=2,
                              betas=(0.5, 0.9), eps=1e-3)
    ref = _adam_reference(2, 0.05, 3, 7, (0.5, 0.9), 1e-3)
    np.testing.assert_allclose(ours(theta, x[:20], y[:20]), ref(theta, x[:20], y[:20]),
                               rtol=1e-11)


# ----------------------------------------------------------------------------- choosing K

def _paper_choose_k(x, k_upper=15, tolerance=0.10, repeat=5):
    """find_best_K_by_silhouette on vectors with scikit-learn (the released code's rule)."""
    upper = min(len(x), k_upper)
    if upper >= len(x) and repeat > 1:
        x = np.repeat(x, repeat, axis=0)
    best, best_k = -1.0, None
    for k in range(2, upper + 1):
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        score = silhouette_score(x, labels)
        if score > best * (1 + tolerance):
            best, best_k = score, k
    return best_k


@pytest.mark.parametrize("seed", [0, 4, 10])
def test_choose_k_tolerance_repeat_and_upper_bound(seed):
    x = np.random.default_rng(seed).normal(0, 1, (7, 2))
    d = sq_distances(x)
    assert clove.choose_k(d) == _paper_choose_k(x)
    for tolerance in (0.0, 0.5):
        assert clove.choose_k(d, tolerance=tolerance) == _paper_choose_k(x, tolerance=tolerance)
    for repeat in (2, 3):
        assert clove.choose_k(d, repeat=repeat) == _paper_choose_k(x, repeat=repeat)
    for k_upper in (4, 6, 7):
        assert clove.choose_k(d, k_upper=k_upper) == _paper_choose_k(x, k_upper=k_upper)


def test_choose_k_known_answers_and_refusals():
    # seed 4: K = 7 with tolerance 0, the default 10 % rule keeps 5; seed 10: 6, and 4 at K_ub 4
    x4 = np.random.default_rng(4).normal(0, 1, (7, 2))
    assert [clove.choose_k(sq_distances(x4), tolerance=0.0), clove.choose_k(sq_distances(x4))] == [7, 5]
    x10 = np.random.default_rng(10).normal(0, 1, (7, 2))
    assert [clove.choose_k(sq_distances(x10)), clove.choose_k(sq_distances(x10), k_upper=4)] == [6, 4]
    two = sq_distances([[0.0], [1.0]])
    assert clove.choose_k(two) == 2                         # 2 clients: repeated, K = 2
    with pytest.raises(ParameterError, match=re.escape(
            "choosing K needs at least 2 clients and k_upper >= 2; got 1 clients, k_upper=15")):
        clove.choose_k(np.zeros((1, 1)))
    with pytest.raises(ParameterError, match=re.escape(
            "choosing K needs at least 2 clients and k_upper >= 2; got 7 clients, k_upper=1")):
        clove.choose_k(sq_distances(x4), k_upper=1)


def test_choose_k_gap_small_cases_by_hand():
    # ward merge heights sqrt(2 n1 n2 / (n1 + n2)) |c1 - c2|: four pairs at 1, then
    # {0,1}+{10,11} sqrt(2) 10 = 14.1, +{30,31} sqrt(16/6) 25 = 40.8, +{200,201}
    # sqrt(3) 186.67 = 323.3; n = 8, K <= 4: ratios K=2 8.0, K=3 2.9, K=4 14.1
    line = np.array([[0.0], [1.0], [10.0], [11.0], [30.0], [31.0], [200.0], [201.0]])
    heights = np.sort(linkage(line, "ward")[:, 2])
    np.testing.assert_allclose(heights, [1, 1, 1, 1, 10 * np.sqrt(2), 25 * np.sqrt(16 / 6),
                                         (200.5 - 83 / 6) * np.sqrt(3)], rtol=1e-12)
    assert clove.choose_k_gap(sq_distances(line)) == 4
    assert clove.choose_k_gap(sq_distances(line), k_upper=3) == 2
    assert clove.choose_k_gap(sq_distances(line), k_upper=2) == 2
    # duplicated points: zero merge heights; a positive height above a zero one is an
    # infinite ratio, so K = 3 (the clusters {0,0}, {5,5}, {100,100})
    dup = np.array([[0.0], [0.0], [5.0], [5.0], [100.0], [100.0]])
    assert clove.choose_k_gap(sq_distances(dup)) == 3
    assert clove.choose_k_gap(np.zeros((4, 4))) == 2     # every height 0: ratio 1, K = 2
    # the doctest's far group, and k_upper = 2 cutting it off
    far = np.array([[0.0], [0.1], [5.0], [5.1], [100.0], [100.1]])
    assert clove.choose_k_gap(sq_distances(far)) == 3 and clove.choose_k_gap(sq_distances(far), k_upper=2) == 2
    # three clients: upper = n = 3, K = 2 or 3 from the two heights
    tri = np.array([[0.0], [1.0], [50.0]])
    assert clove.choose_k_gap(sq_distances(tri)) == ward_gap_k(tri)
    with pytest.raises(ParameterError, match=re.escape(
            "choosing K needs at least 2 clients and k_upper >= 2; got 1 clients, k_upper=15")):
        clove.choose_k_gap(np.zeros((1, 1)))
    with pytest.raises(ParameterError, match=re.escape(
            "choosing K needs at least 2 clients and k_upper >= 2; got 6 clients, k_upper=1")):
        clove.choose_k_gap(sq_distances(far), k_upper=1)


@pytest.mark.parametrize("seed", range(6))
def test_choose_k_gap_against_sklearn_merge_distances(seed):
    rng = np.random.default_rng(40 + seed)
    n = int(rng.integers(4, 11))
    x = rng.normal(0, 1, (n, 2)) + 8 * rng.integers(0, 4, (n, 1))
    assert clove.choose_k_gap(sq_distances(x)) == ward_gap_k(x)
    assert clove.choose_k_gap(sq_distances(x), k_upper=3) == ward_gap_k(x, k_upper=3)
    h = np.sort(linkage(x, "ward")[:, 2])                  # scipy from vectors agrees too
    np.testing.assert_allclose(h, np.sort(AgglomerativeClustering(
        linkage="ward", compute_distances=True).fit(x).distances_), rtol=1e-9)


# ----------------------------------------------------------------------------- server side

def _sorted_labels(labels):
    first = {}
    for i, c in enumerate(labels):
        first.setdefault(int(c), len(first))
    return [first[int(c)] for c in labels]


def test_sort_clusters_and_cluster_clients_against_kmeans():
    out = clove.sort_clusters([5, 3, 5, 9, 3, 1])
    assert out.dtype == np.int64 and out.tolist() == [0, 1, 0, 2, 1, 3]
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, (30, 2))            # no structure: the seed decides the partition
    d = sq_distances(x)
    for state in (0, 3):
        ours = clove.cluster_clients(d, 4, random_state=state)
        ref = KMeans(n_clusters=4, random_state=state, n_init="auto").fit(x).labels_
        assert ours.tolist() == _sorted_labels(ref)
    ref0 = KMeans(n_clusters=4, random_state=0, n_init="auto").fit(x).labels_
    ref3 = KMeans(n_clusters=4, random_state=3, n_init="auto").fit(x).labels_
    assert _sorted_labels(ref0) != _sorted_labels(ref3)     # the seed matters on these data
    assert clove.cluster_clients(d, 4).tolist() == _sorted_labels(ref0)   # default seed 0


def test_cluster_cost_and_matching_by_hand():
    vectors = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [0.5, 0.25, 0.0]])
    cost = clove.cluster_cost(vectors, [1, 0, 1])
    assert cost.tolist() == [[10.0, 20.0, 30.0], [1.5, 2.25, 3.0]]
    cost = clove.cluster_cost(vectors.tolist(), np.array([2, 2, 0]), 4)   # explicit K
    assert cost.tolist() == [[0.5, 0.25, 0.0], [0, 0, 0], [11.0, 22.0, 33.0], [0, 0, 0]]
    cost = clove.cluster_cost([[1, 2], [3, 4]], [0, 0])
    assert cost.dtype == np.float64 and cost.tolist() == [[4.0, 6.0]]
    # 2 clusters, 3 models: cluster 0 -> model 2 (cost 1), cluster 1 -> model 0 (cost 2)
    cost = [[7, 9, 1], [2, 8, 3]]
    model = clove.match_clusters(cost)
    assert model.dtype == np.int64 and model.tolist() == [2, 0]
    assert model.tolist() == linear_sum_assignment(np.array(cost))[1].tolist()
    assert clove.match_clusters([[0.25, 0.5], [0.5, 0.75]]).tolist() == [1, 0] or \
        clove.match_clusters([[0.25, 0.5], [0.5, 0.75]]).tolist() == [0, 1]
    assert clove.match_clusters([[0.2, 0.1], [0.1, 0.9]]).tolist() == [1, 0]  # floats kept
    with pytest.raises(ParameterError, match=re.escape("more clusters (3) than models (2)")):
        clove.match_clusters(np.ones((3, 2)))
    assert clove.match_clusters(np.ones((2, 2))).size == 2


def test_fedavg_weights_by_training_size_by_hand():
    models = [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    updates = [[1.0, 2.0], [4.0, 8.0], [9.0, 9.0], [3.0, 0.0]]
    out = clove.fedavg(models, [0, 0, 2, 0], updates, [1, 3, 5, 4])
    assert out.tolist() == [[(1 + 12 + 12) / 8, (2 + 24 + 0) / 8], [1.0, 1.0], [9.0, 9.0]]
    assert models == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]         # inputs untouched
    ints = clove.fedavg(np.array([[0, 0]]), [0, 0], [[1, 1], [2, 2]], [1, 2])
    assert ints.dtype == np.float64 and ints.tolist() == [[5 / 3, 5 / 3]]


def test_is_stable_boundaries_and_rules():
    assert clove.is_stable([4, 4, 4]) and not clove.is_stable([4, 4])       # default 3 rounds
    assert not clove.is_stable([4, 5, 4, 4]) and clove.is_stable([5, 4, 4, 4])
    assert clove.is_stable([1, 1], rounds=2) and not clove.is_stable([1], rounds=2)
    assert not clove.is_stable([2, 1, 1], rounds=3, rule="intended")
    assert clove.is_stable([1, 2, 1], rule="literal")
    assert not clove.is_stable([1, 2, 2], rule="literal")          # h[-3] != h[-1]
    assert not clove.is_stable([1, 1], rule="literal")             # too short either way
    assert clove.is_stable([3, 1, 2, 3], rounds=4, rule="literal")
    with pytest.raises(ParameterError, match=re.escape(
            "rule must be 'intended' or 'literal', got 'loose'")):
        clove.is_stable([1, 1, 1], rule="loose")


# ----------------------------------------------------------------------------- round loop

def _clients(seed, sizes=(14, 16, 12, 18, 15, 13), dim=3):
    """Two planted linear models, clients of unequal size (FedAvg weights matter)."""
    rng = np.random.default_rng(seed)
    truth = [np.array([1.0, 0.0, 0.0])[:dim], np.array([0.0, 0.0, 1.0])[:dim]]
    clients = []
    for i, size in enumerate(sizes):
        x = rng.normal(size=(size, dim))
        clients.append((x, x @ truth[i % 2] + rng.normal(0, 0.05, size)))
    return clients


def _reference_clove(clients, models, *, n_clusters, rounds, seed=0, max_loss=16.0,
                     bits=20, transform="identity", local_steps=None, learning_rate=0.1,
                     stability_rounds=3, rule="intended", k_upper=15):
    """CLoVE's round loop written out: numpy losses, sklearn KMeans on the quantized
    vectors, scipy's Hungarian matching, lstsq / gradient-descent updates, FedAvg."""
    models = np.array(models, dtype=np.float64)
    sizes = np.array([len(y) for _, y in clients], dtype=np.float64)
    history = [[] for _ in clients]
    out = {"assignments": [], "costs": [], "k": [], "frozen": None}
    assignment = None
    for r in range(rounds):
        if (out["frozen"] is None and r > 0 and stability_rounds is not None
                and all(len(h) >= stability_rounds and (
                    all(v == h[-1] for v in h[-stability_rounds:]) if rule == "intended"
                    else h[-stability_rounds] == h[-1]) for h in history)):
            out["frozen"] = r
        if out["frozen"] is None:
            losses = np.array([[np.mean((x @ m - y) ** 2) for m in models] for x, y in clients])
            if transform == "sqrt":
                losses = np.sqrt(losses)
            q = _quantize(losses, max_loss, bits)
            k = n_clusters if n_clusters is not None else _paper_choose_k(q, k_upper=k_upper)
            labels = np.array(_sorted_labels(
                KMeans(n_clusters=k, random_state=seed, n_init="auto").fit(q).labels_))
            cost = np.zeros((k, len(models)))
            for i, c in enumerate(labels):
                cost[c] += q[i]
            rows, cols = linear_sum_assignment(cost)
            assignment = np.array([dict(zip(rows, cols))[c] for c in labels])
            for i in range(len(clients)):
                history[i].append(int(assignment[i]))
            out["costs"].append(cost)
            out["k"].append(k)
        else:
            out["costs"].append(None)
            out["k"].append(out["k"][-1])
        out["assignments"].append(assignment.tolist())
        updates = []
        for i, (x, y) in enumerate(clients):
            if local_steps is None:
                updates.append(np.linalg.lstsq(x, y, rcond=None)[0])
            else:
                w = models[assignment[i]].copy()
                for _ in range(local_steps):
                    w = w - learning_rate * (2.0 / len(y)) * (x.T @ (x @ w - y))
                updates.append(w)
        new = models.copy()
        for j in range(len(models)):
            members = [i for i in range(len(clients)) if assignment[i] == j]
            if members:
                new[j] = sum(sizes[i] * updates[i] for i in members) / sizes[members].sum()
        models = new
    out["models"] = models
    return out


def _same(run, ref, rtol=1e-9):
    assert [a.tolist() for a in run.assignments] == ref["assignments"]
    assert run.n_clusters == ref["k"]
    assert run.frozen_from == ref["frozen"]
    for ours, theirs in zip(run.costs, ref["costs"]):
        if theirs is None:
            assert ours is None
        else:
            assert np.array_equal(ours, theirs)
    np.testing.assert_allclose(run.models, ref["models"], rtol=rtol, atol=1e-12)


def test_run_clove_defaults_against_the_written_out_loop():
    clients = _clients(1)
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [0.8, 0.0, 0.6]])
    run = clove.run_clove(clients, start, n_clusters=2, secure=False)
    ref = _reference_clove(clients, start, n_clusters=2, rounds=5)
    _same(run, ref)
    assert ref["frozen"] == 3                            # 3 stable rounds, then frozen
    assert all(d is None for d in run.distances[3:])
    losses = np.array([[np.mean((x @ m - y) ** 2) for m in start] for x, y in clients])
    q = _quantize(losses, 16.0, 20)
    np.testing.assert_array_equal(run.distances[0], sq_distances(q))    # dyadic: exact


def test_run_clove_options_reach_the_loop():
    clients = _clients(2)
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [0.8, 0.0, 0.6]])
    # small bound (clipping), coarse quantization, sqrt, gradient steps, another seed
    options = dict(max_loss=1.5, transform="sqrt", local_steps=2, learning_rate=0.05)
    run = clove.run_clove(clients, start, n_clusters=2, rounds=4, secure=False, seed=3,
                          scale_bits=3, **options)
    ref = _reference_clove(clients, start, n_clusters=2, rounds=4, seed=3, bits=3, **options)
    _same(run, ref)
    assert set(np.unique(run.costs[0] * 8 % 1)) == {0.0}        # multiples of 2^-3
    # freezing after two stable rounds, the literal rule, and no freezing at all
    for stability_rounds, rule in ((2, "intended"), (2, "literal"), (None, "intended")):
        run = clove.run_clove(clients, start, n_clusters=2, rounds=4, secure=False,
                              stability_rounds=stability_rounds, stability_rule=rule)
        ref = _reference_clove(clients, start, n_clusters=2, rounds=4,
                               stability_rounds=stability_rounds, rule=rule)
        _same(run, ref)
    assert ref["frozen"] is None and run.frozen_from is None
    run = clove.run_clove(clients, start, n_clusters=2, rounds=4, secure=False,
                          stability_rounds=2)
    assert run.frozen_from == 2


def test_run_clove_unknown_k_uses_the_silhouette_rule_with_k_upper():
    clients = _clients(3, sizes=(14, 16, 12, 18, 15, 13, 11, 17))
    start = clove.random_unit_models(8, 3, seed=1)      # K_hat = n: any K fits
    for k_upper in (15, 3):
        run = clove.run_clove(clients, start, rounds=2, secure=False, k_upper=k_upper,
                              stability_rounds=None, k_rule="silhouette")
        ref = _reference_clove(clients, start, n_clusters=None, rounds=2, k_upper=k_upper,
                               stability_rounds=None)
        _same(run, ref)


def test_run_clove_with_a_trainer_and_secure_parties():
    clients = _clients(4, sizes=(10, 12, 11, 9))
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]])
    calls = []

    def trainer(theta, features, targets):      # one gradient step with step 0.01
        calls.append(len(targets))
        return theta - 0.01 * (2.0 / len(targets)) * features.T @ (features @ theta - targets)

    run = clove.run_clove(clients, start, n_clusters=2, rounds=1, secure=True,
                          parties=["a", "b", "c", "a"], trainer=trainer)
    ref = _reference_clove(clients, start, n_clusters=2, rounds=1, local_steps=1,
                           learning_rate=0.01)
    _same(run, ref)
    assert calls == [10, 12, 11, 9]
    losses = np.array([[np.mean((x @ m - y) ** 2) for m in start] for x, y in clients])
    np.testing.assert_array_equal(run.distances[0], sq_distances(_quantize(losses, 16.0, 20)))


def test_run_ifca_against_the_written_out_loop():
    clients = _clients(5)
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [0.8, 0.0, 0.6]])
    for kwargs in ({}, {"local_steps": 2, "learning_rate": 0.05}):
        run = clove.run_ifca(clients, start, rounds=3, **kwargs)
        models = start.copy()
        sizes = np.array([len(y) for _, y in clients], dtype=np.float64)
        for r in range(3):
            losses = [[np.mean((x @ m - y) ** 2) for m in models] for x, y in clients]
            pick = [int(np.argmin(v)) for v in losses]
            assert run.assignments[r].tolist() == pick
            assert run.n_clusters[r] == len(set(pick))
            assert run.costs[r] is None and run.distances[r] is None
            updates = []
            for i, (x, y) in enumerate(clients):
                if not kwargs:
                    updates.append(np.linalg.lstsq(x, y, rcond=None)[0])
                else:
                    w = models[pick[i]].copy()
                    for _ in range(2):
                        w = w - 0.05 * (2.0 / len(y)) * (x.T @ (x @ w - y))
                    updates.append(w)
            for j in range(len(models)):
                members = [i for i in range(len(clients)) if pick[i] == j]
                if members:
                    models[j] = sum(sizes[i] * updates[i] for i in members) / sizes[members].sum()
        np.testing.assert_allclose(run.models, models, rtol=1e-9, atol=1e-12)
    seen = []
    clove.run_ifca(clients, start, rounds=1,
                   trainer=lambda t, x, y: seen.append(len(y)) or np.asarray(t))
    assert seen == [14, 16, 12, 18, 15, 13]


# ----------------------------------------------------------------------------- synthetic data

def test_random_unit_models_and_linear_mixture_streams():
    w = np.random.Generator(np.random.PCG64(9)).standard_normal((4, 3))
    np.testing.assert_allclose(clove.random_unit_models(4, 3, seed=9),
                               w / np.sqrt((w ** 2).sum(1))[:, None], rtol=1e-12)
    clients, truth, thetas = clove.linear_mixture(n_clusters=3, clients_per_cluster=2, dim=4,
                                                  delta=0.5, train_points=7, noise=0.1,
                                                  seed=6)
    assert truth.tolist() == [0, 0, 1, 1, 2, 2] and thetas.shape == (3, 4)
    np.testing.assert_allclose(np.linalg.norm(thetas, axis=1), 1.0, rtol=1e-12)
    gaps = np.linalg.norm(thetas[:, None] - thetas[None], axis=-1)[np.triu_indices(3, 1)]
    assert (gaps >= 0.5).all() and (gaps <= 2.5).all()       # [delta, 5 delta]
    # the stream: models first, then per client x (7 x 4) and the noise (7)
    rng = np.random.Generator(np.random.PCG64(6))
    again = clove.true_models(3, 4, 0.5, rng)
    np.testing.assert_array_equal(again, thetas)
    for i, (x, y) in enumerate(clients):
        ex = rng.standard_normal((7, 4))
        ey = ex @ thetas[truth[i]] + 0.1 * rng.standard_normal(7)
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_allclose(y, ey, rtol=1e-12)
    default, truth, thetas = clove.linear_mixture(seed=0)
    assert len(default) == 25 and truth.tolist() == sorted(list(range(5)) * 5)
    assert default[0][0].shape == (900, 20) and thetas.shape == (5, 20)
    residual = default[0][1] - default[0][0] @ thetas[0]
    assert 0.5e-4 < residual.std() < 2e-4                    # noise 1e-4
    gaps = np.linalg.norm(thetas[:, None] - thetas[None], axis=-1)[np.triu_indices(5, 1)]
    assert (gaps >= 1.0).all() and (gaps <= 5.0).all()       # default delta 1, spread 5


def test_true_models_by_hand_stream_and_refusal():
    rng = np.random.Generator(np.random.PCG64(2))
    out = clove.true_models(3, 2, 0.3, rng, spread=2.0)
    ref = np.random.Generator(np.random.PCG64(2))
    first = ref.standard_normal(2)
    vectors = [first / np.linalg.norm(first)]
    while len(vectors) < 3:
        step = ref.standard_normal(2)
        cand = vectors[ref.integers(len(vectors))] + 0.3 * step / np.linalg.norm(step)
        cand = cand / np.linalg.norm(cand)
        gaps = np.linalg.norm(np.array(vectors) - cand, axis=1)
        if np.all(gaps >= 0.3) and np.all(gaps <= 0.6):
            vectors.append(cand)
    np.testing.assert_allclose(out, np.array(vectors), rtol=1e-12)
    assert clove.true_models(1, 2, 0.3, np.random.default_rng(0)).shape == (1, 2)
    with pytest.raises(ParameterError, match=re.escape(
            "could not draw 4 models at separation 3.0")):
        clove.true_models(4, 2, 3.0, np.random.default_rng(0), max_attempts=50)
    ok = clove.true_models(2, 2, 0.3, np.random.default_rng(0), max_attempts=1_000)
    assert ok.shape == (2, 2)


def test_coordinator_learns_and_constants():
    assert clove.DEFAULT_MAX_LOSS == 16.0 and clove.CLASSIFIER_MAX_LOSS == 16.0
    assert clove.DEFAULT_SCALE_BITS == 20
    assert "per-cluster loss totals" in clove.COORDINATOR_LEARNS


# ----------------------------------------------------------------------------- classifiers loop

class _Scalar:
    """A one-parameter model on rows (1, c): loss (w - c)^2, 'accurate' when |w - c| < 0.5."""

    def loss(self, m, x, y):
        return float(np.mean((x[:, 0] * m[0] - y) ** 2))

    def accuracy(self, m, x, y):
        return float(np.mean(np.abs(x[:, 0] * m[0] - y) < 0.5))


TARGETS = [0.0, 0.5, 1.5, 1.25, 3.0, 2.75]          # three planted groups
MODELS = [np.array([0.0]), np.array([1.5]), np.array([3.0])]


def _fl_clients(targets):
    from omnifc import fl

    return [fl.Client(x_train=np.ones((2, 1)), y_train=np.full(2, c), x_test=np.ones((1, 1)),
                      y_test=np.array([c]), group=0) for c in targets]


def _keep(params, client, rng):                     # local training that changes nothing:
    return np.array(params, copy=True)              # the losses stay the same every round


def _losses(targets):
    return np.array([[(m[0] - c) ** 2 for m in MODELS] for c in targets])


def _run_on_losses(*args, **kwargs):
    """``run_clove_fl`` sending the losses themselves (``transform="identity"``): the loop's
    machinery checked against losses computed by hand here; the default transform ("sqrt")
    is checked in tests/adapters/test_clove_transform.py."""
    return clove.run_clove_fl(*args, transform="identity", **kwargs)


def _matched(losses, n_clusters, seed=0):
    """k-means on the loss vectors, clusters by smallest client, Hungarian on cluster sums."""
    labels = np.array(_sorted_labels(KMeans(n_clusters=n_clusters, random_state=seed,
                                            n_init="auto").fit(losses).labels_))
    cost = np.zeros((n_clusters, losses.shape[1]))
    for i, c in enumerate(labels):
        cost[c] += losses[i]
    rows, cols = linear_sum_assignment(cost)
    return np.array([dict(zip(rows, cols))[c] for c in labels]), cost


def test_run_clove_fl_evaluation_based_rounds_and_freeze():
    clients = _fl_clients(TARGETS)
    run = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, rounds=5,
                         local_train=_keep, first_round="evaluation_based", secure=False)
    losses = _losses(TARGETS)
    expected, cost = _matched(losses, 3)
    assert expected.tolist() == [0, 0, 1, 1, 2, 2]
    assert [a.tolist() for a in run.assignments] == [expected.tolist()] * 5
    assert run.frozen_from == 3 and run.n_clusters == [3, 3, 3, None, None]
    for r in range(3):
        np.testing.assert_array_equal(run.distances[r], sq_distances(losses))     # dyadic: exact
        np.testing.assert_array_equal(run.costs[r], cost)
    assert run.distances[3:] == [None, None] and run.costs[3:] == [None, None]
    assert run.newcomers == {}
    assert run.accuracy == 5 / 6                    # |0 - 0.5| is not below 0.5
    assert len(run.run.history) == 5 and [m.tolist() for m in run.models] == [[0.0], [1.5],
                                                                                  [3.0]]
    never = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, rounds=5,
                           local_train=_keep, first_round="evaluation_based",
                           secure=False, stability_rounds=None)
    assert never.frozen_from is None and never.n_clusters == [3] * 5
    two = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, rounds=4,
                         local_train=_keep, first_round="evaluation_based", secure=False,
                         stability_rounds=2)
    assert two.frozen_from == 2


def _random_start(seed, n, n_models, r=0):
    """Round r's random models: the loop's server generator, repaired in round 0."""
    rng = np.random.default_rng([seed, r, 2**31])
    picks = rng.integers(0, n_models, size=n)
    if r == 0 and n >= n_models:
        picks[rng.permutation(n)[:n_models]] = np.arange(n_models)
    return picks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_run_clove_fl_random_first_rounds(seed):
    clients = _fl_clients(TARGETS)
    expected, _ = _matched(_losses(TARGETS), 3, seed)
    run = clove.run_clove_fl(clients, _Scalar(), MODELS, n_clusters=3, rounds=6,
                             local_train=_keep, seed=seed, secure=False)
    first = _random_start(seed, 6, 3)
    assert sorted(set(first.tolist())) == [0, 1, 2]               # every model got a client
    assert run.assignments[0].tolist() == first.tolist()
    assert run.n_clusters[0] is None and run.distances[0] is None and run.costs[0] is None
    assert all(a.tolist() == expected.tolist() for a in run.assignments[1:])
    history = [[int(first[i])] for i in range(6)]                 # round 0 counts
    frozen = None
    for r in range(1, 6):
        if frozen is None and all(h[-3:] == [h[-1]] * 3 and len(h) >= 3 for h in history):
            frozen = r
        if frozen is None:
            for i in range(6):
                history[i].append(int(expected[i]))
    assert run.frozen_from == frozen
    # two random rounds: round 1 holds round 0's picks and does not count towards stability
    held = clove.run_clove_fl(clients, _Scalar(), MODELS, n_clusters=3, rounds=7,
                              local_train=_keep, seed=seed, secure=False, random_rounds=2)
    assert held.assignments[0].tolist() == held.assignments[1].tolist() == first.tolist()
    assert held.n_clusters[:3] == [None, None, 3]
    assert held.assignments[2].tolist() == expected.tolist()
    history = [[int(first[i])] for i in range(6)]                 # only round 1 counts
    frozen = None
    for r in range(2, 7):
        if frozen is None and all(len(h) >= 3 and h[-3:] == [h[-1]] * 3 for h in history):
            frozen = r
        if frozen is None:
            for i in range(6):
                history[i].append(int(expected[i]))
    assert held.frozen_from == frozen


def test_run_clove_fl_newcomers_take_the_nearest_centroid_model():
    targets = TARGETS + [0.75, 2.0]
    clients = _fl_clients(targets)
    join = [0, 0, 0, 0, 0, 0, 5, 5]
    run = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, rounds=7,
                         local_train=_keep, join_round=join,
                         first_round="evaluation_based", secure=False)
    assert run.frozen_from == 3
    for r in range(5):
        assert run.assignments[r].tolist() == [0, 0, 1, 1, 2, 2, -1, -1]   # not seen yet
    losses = _losses(targets)
    centroids = [losses[[0, 1]].mean(0), losses[[2, 3]].mean(0), losses[[4, 5]].mean(0)]
    near = [[float(((losses[i] - c) ** 2).sum()) for c in centroids] for i in (6, 7)]
    picks = [int(np.argmin(row)) for row in near]
    assert picks == [1, 1]          # 0.75 and 2.0 are nearest the centroid of model 1's clients
    assert run.newcomers == {6: (5, picks[0]), 7: (5, picks[1])}
    assert run.assignments[5].tolist() == run.assignments[6].tolist() == \
        [0, 0, 1, 1, 2, 2, *picks]
    np.testing.assert_array_equal(run.distances[5], sq_distances(losses))
    assert run.distances[3] is None and run.distances[4] is None and run.distances[6] is None
    assert run.costs[5] is None and run.n_clusters[5] is None
    # a newcomer that would be nearest model 0 and one nearest model 2
    targets = TARGETS + [0.25, 3.25]
    run = _run_on_losses(_fl_clients(targets), _Scalar(), MODELS, n_clusters=3, rounds=6,
                         local_train=_keep, join_round=np.array(join),
                         first_round="evaluation_based", secure=False)
    assert run.newcomers == {6: (5, 0), 7: (5, 2)}


def test_run_clove_fl_partial_participation():
    clients = _fl_clients(TARGETS)
    losses = _losses(TARGETS)
    run = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=2, rounds=4,
                         local_train=_keep, participation=0.5, seed=3,
                         first_round="evaluation_based", secure=False,
                         stability_rounds=None)
    shown = np.full(6, -1)
    assignment = np.zeros(6, dtype=int)
    for r in range(4):
        rng = np.random.default_rng([3, r, 2**31])
        part = np.sort(rng.choice(np.arange(6), size=3, replace=False))     # ceil(0.5 x 6)
        assert run.run.history[r].participants.tolist() == part.tolist()
        matched, cost = _matched(losses[part], 2, 3)
        assignment[part] = matched
        shown[part] = matched
        assert run.assignments[r].tolist() == np.where(shown >= 0, assignment, -1).tolist()
        np.testing.assert_array_equal(run.costs[r], cost)
        np.testing.assert_array_equal(run.distances[r], sq_distances(losses[part]))
    small = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=1, rounds=2,
                           local_train=_keep, participation=0.1,
                           first_round="evaluation_based", secure=False)
    assert [h.participants.size for h in small.run.history] == [1, 1]      # at least one
    full = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, rounds=1,
                          local_train=_keep, participation=1.0,
                          first_round="evaluation_based", secure=False)
    assert full.run.history[0].participants.tolist() == list(range(6))
    chosen = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=2, rounds=2,
                            local_train=_keep, participation=lambda r, rng: [0, 2, 5, 9],
                            join_round=[0, 0, 0, 0, 0, 1],
                            first_round="evaluation_based", secure=False)
    assert chosen.run.history[0].participants.tolist() == [0, 2]     # 5 joins in round 1
    assert chosen.run.history[1].participants.tolist() == [0, 2, 5]
    assert chosen.assignments[0].tolist()[1] == -1 and chosen.assignments[0][5] == -1


def test_run_clove_fl_k_rules():
    targets = TARGETS + [0.25, 1.75]
    clients = _fl_clients(targets)
    losses = _losses(targets)
    gap = clove.run_clove_fl(clients, _Scalar(), MODELS, rounds=1, local_train=_keep,
                             first_round="evaluation_based", secure=False)
    assert gap.n_clusters == [ward_gap_k(losses)] == [3]
    gap2 = clove.run_clove_fl(clients, _Scalar(), MODELS, rounds=1, local_train=_keep,
                              first_round="evaluation_based", secure=False, k_upper=2)
    assert gap2.n_clusters == [2]
    for tolerance in (0.1, 0.0):
        sil = clove.run_clove_fl(clients, _Scalar(), MODELS, rounds=1, local_train=_keep,
                                 first_round="evaluation_based", secure=False,
                                 k_rule="silhouette", k_upper=3, k_tolerance=tolerance)
        assert sil.n_clusters == [_paper_choose_k(losses, k_upper=3, tolerance=tolerance)]
    sil = clove.run_clove_fl(clients, _Scalar(), MODELS, rounds=1, local_train=_keep,
                             first_round="evaluation_based", secure=False,
                             k_rule="silhouette", k_upper=2)
    assert sil.n_clusters == [2]


def test_run_clove_fl_secure_quantized_and_clipped(caplog):
    clients = _fl_clients(TARGETS)
    losses = _losses(TARGETS)
    kwargs = dict(n_clusters=3, rounds=1, local_train=_keep, first_round="evaluation_based",
                  max_loss=4.0, scale_bits=1)
    with caplog.at_level("INFO", logger="omnifc.adapters"):
        plain = _run_on_losses(clients, _Scalar(), MODELS, secure=False, **kwargs)
    assert "4 loss values above the public bound 4 were clipped" in caplog.text
    q = _quantize(losses, 4.0, 1)
    np.testing.assert_array_equal(plain.distances[0], sq_distances(q))
    expected, cost = _matched(q, 3)
    np.testing.assert_array_equal(plain.costs[0], cost)
    assert plain.assignments[0].tolist() == expected.tolist()
    # the secure path refuses that much clipping: compare it at the default bound 16
    kwargs.pop("max_loss")
    plain = _run_on_losses(clients, _Scalar(), MODELS, secure=False, **kwargs)
    np.testing.assert_array_equal(plain.distances[0], sq_distances(_quantize(losses, 16.0, 1)))
    secure = _run_on_losses(clients, _Scalar(), MODELS, secure=True,
                            parties=["a", "b", "c", "a", "b", "c"], **kwargs)
    np.testing.assert_array_equal(secure.distances[0], plain.distances[0])
    np.testing.assert_array_equal(secure.costs[0], plain.costs[0])
    assert secure.assignments[0].tolist() == plain.assignments[0].tolist()
    caplog.clear()
    with caplog.at_level("INFO", logger="omnifc.adapters"):
        _run_on_losses(clients, _Scalar(), MODELS, secure=False, n_clusters=3, rounds=1,
                       local_train=_keep, first_round="evaluation_based")
    assert "clipped" not in caplog.text                         # 16 is above every loss


def test_choose_k_logs_each_silhouette(caplog):
    x = np.array([[0.0], [0.5], [4.0], [4.5]])
    repeated = np.repeat(x, 5, axis=0)                  # k_upper >= n: each row 5 times
    with caplog.at_level("DEBUG", logger="omnifc.adapters"):
        clove.choose_k(sq_distances(x))
    expected = []
    for k in range(2, 5):
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(repeated)
        expected.append("K=%d silhouette %.6f" % (k, silhouette_score(repeated, labels)))
    assert [r.getMessage() for r in caplog.records
            if r.name == "omnifc.adapters._k_selection"] == expected


def test_is_stable_compares_with_the_last_entry_and_ifca_default_step():
    assert clove.is_stable([9, 8, 7, 7, 7]) and not clove.is_stable([9, 8, 8, 7, 7])
    clients = _clients(6, sizes=(10, 12, 11, 9))
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]])
    run = clove.run_ifca(clients, start, rounds=1, local_steps=1)   # default step 0.1
    pick = [int(np.argmin([np.mean((x @ m - y) ** 2) for m in start])) for x, y in clients]
    sizes = np.array([10.0, 12.0, 11.0, 9.0])
    models = start.copy()
    for j in range(2):
        members = [i for i in range(4) if pick[i] == j]
        if members:
            updates = [start[j] - 0.1 * (2.0 / len(clients[i][1])) * clients[i][0].T
                       @ (clients[i][0] @ start[j] - clients[i][1]) for i in members]
            models[j] = sum(sizes[i] * u for i, u in zip(members, updates)) / sizes[members].sum()
    np.testing.assert_allclose(run.models, models, rtol=1e-12)


def test_defaults_k_upper_15_and_five_rounds():
    x = np.random.default_rng(21).normal(0, 1, (16, 2))    # n = 16 > K_ub: no repetition
    assert clove.choose_k(sq_distances(x)) == _paper_choose_k(x, k_upper=15)
    assert clove.choose_k(sq_distances(x)) != _paper_choose_k(x, k_upper=16)
    clients = _clients(7, sizes=(10, 12, 11, 9))
    start = np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]])
    assert len(clove.run_ifca(clients, start).assignments) == 5
    assert len(clove.run_clove(clients, start, n_clusters=2, secure=False,
                               stability_rounds=None).assignments) == 5


def test_run_clove_changing_assignments_do_not_freeze():
    clients = _clients(2)
    start = clove.random_unit_models(3, 3, seed=2)
    options = dict(local_steps=1, learning_rate=0.05)
    run = clove.run_clove(clients, start, n_clusters=3, rounds=5, secure=False, **options)
    ref = _reference_clove(clients, start, n_clusters=3, rounds=5, **options)
    _same(run, ref)
    assert ref["frozen"] is None and ref["assignments"][1] != ref["assignments"][2]


def test_fedavg_never_writes_into_its_input_and_linear_mixture_default_seed(monkeypatch):
    models = np.array([[0.0, 0.0], [1.0, 1.0]])
    out = clove.fedavg(models, [0, 0], [[2.0, 4.0], [4.0, 8.0]], [1, 1])
    assert out.tolist() == [[3.0, 6.0], [1.0, 1.0]] and models.tolist() == [[0.0, 0.0],
                                                                           [1.0, 1.0]]
    clients, _, thetas = clove.linear_mixture(n_clusters=1, clients_per_cluster=1, dim=3,
                                              train_points=4)
    rng = np.random.Generator(np.random.PCG64(0))            # the default seed 0
    np.testing.assert_array_equal(thetas, clove.true_models(1, 3, 1.0, rng))
    np.testing.assert_array_equal(clients[0][0], rng.standard_normal((4, 3)))
    # the secure cost: one masked sum over the given parties
    import omnifc.adapters.clove._simulation as module

    seen = []
    real = module.secure_group_sums

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "secure_group_sums", spy)
    small = _clients(4, sizes=(10, 12, 11, 9))
    clove.run_clove(small, np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]]), n_clusters=2,
                    rounds=1, parties=["a", "b", "c", "a"], scale_bits=12, max_loss=8.0)
    assert seen == [dict(n_groups=2, bound=8.0, scale_bits=12, nonnegative=True,
                         parties=["a", "b", "c", "a"])]


def test_run_clove_fl_defaults_parties_and_the_clip_count(monkeypatch, caplog):
    clients = _fl_clients(TARGETS)
    run = _run_on_losses(clients, _Scalar(), MODELS, n_clusters=3, local_train=_keep,
                         secure=False)
    assert len(run.assignments) == 10                            # rounds=10 by default
    losses = _losses(TARGETS)
    sil = _run_on_losses(clients, _Scalar(), MODELS, rounds=1, local_train=_keep,
                         first_round="evaluation_based", secure=False,
                         k_rule="silhouette", k_upper=3)     # tolerance 0.10 by default
    assert sil.n_clusters == [_paper_choose_k(losses, k_upper=3, tolerance=0.10)]
    # a loss exactly at the bound is not clipped: 4 values above 4, (3 - 1)^2 = 4 is not
    with caplog.at_level("INFO", logger="omnifc.adapters"):
        _run_on_losses(_fl_clients(TARGETS + [1.0]), _Scalar(), MODELS, n_clusters=3,
                       rounds=1, local_train=_keep, first_round="evaluation_based",
                       secure=False, max_loss=4.0)
    assert [r.getMessage() for r in caplog.records if r.name == "omnifc.adapters.clove._simulation"] == \
        ["4 loss values above the public bound 4 were clipped"]
    import omnifc.adapters.clove._simulation as module

    seen = []
    real = module.protect

    def spy(rows, **kwargs):
        seen.append(kwargs.get("parties"))
        return real(rows, **kwargs)

    monkeypatch.setattr(module, "protect", spy)
    _run_on_losses(clients, _Scalar(), MODELS, n_clusters=2, rounds=1, local_train=_keep,
                   first_round="evaluation_based", participation=lambda r, rng: [1, 2, 3, 4],
                   parties=["a", "b", "c", "a", "b", "c"])
    assert seen == [["b", "c", "a", "b"]]                        # the participants' labels


def test_run_clove_default_step_one_round_freeze_and_protect_arguments(monkeypatch):
    clients = _clients(2)
    start = clove.random_unit_models(3, 3, seed=2)
    run = clove.run_clove(clients, start, n_clusters=3, rounds=3, secure=False, local_steps=1)
    _same(run, _reference_clove(clients, start, n_clusters=3, rounds=3, local_steps=1,
                                learning_rate=0.1))
    run = clove.run_clove(clients, start, n_clusters=3, rounds=3, secure=False,
                          stability_rounds=1)
    assert run.frozen_from == 1                    # one round of history is enough
    import omnifc.adapters.clove._simulation as module

    seen = []
    real = module.protect

    def spy(rows, **kwargs):
        seen.append(kwargs)
        return real(rows, **kwargs)

    monkeypatch.setattr(module, "protect", spy)
    small = _clients(4, sizes=(10, 12, 11, 9))
    clove.run_clove(small, np.array([[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]]), n_clusters=2,
                    rounds=1, parties=["a", "b", "c", "a"], scale_bits=12, max_loss=8.0)
    assert seen == [dict(bound=8.0, scale_bits=12, nonnegative=True,
                         parties=["a", "b", "c", "a"])]


def test_choose_k_gap_zero_height_below_a_small_one():
    # ward heights 0, 0, 0, sqrt(2) 0.3 = 0.42, then ~16: at K = 3 a zero height lies
    # below 0.42, an infinite ratio
    x = np.array([[0.0], [0.0], [0.3], [0.3], [10.0], [10.0]])
    assert clove.choose_k_gap(sq_distances(x)) == ward_gap_k(x) == 3


def test_run_clove_fl_default_trainer_and_the_secure_sum_parties(monkeypatch):
    from omnifc import fl

    rng = np.random.default_rng(5)
    clients = [fl.Client(x_train=rng.normal(size=(24, 2)) + 3 * (i % 2),
                         y_train=rng.integers(0, 2, 24), x_test=rng.normal(size=(3, 2)),
                         y_test=rng.integers(0, 2, 3), group=i % 2) for i in range(6)]
    model = fl.SoftmaxRegression(2, 2)
    starts = [model.init(seed=s) for s in (1, 2)]
    common = dict(n_clusters=2, rounds=2, first_round="evaluation_based", secure=False)
    implicit = clove.run_clove_fl(clients, model, starts, **common)
    explicit = clove.run_clove_fl(clients, model, starts, **common, local_train=fl.sgd_trainer(
        model, epochs=1, batch_size=20, learning_rate=0.3))        # the documented default
    assert all(np.array_equal(a, b) for a, b in zip(implicit.models, explicit.models))
    assert not np.array_equal(implicit.models[0], starts[0])
    import omnifc.adapters.clove._simulation as module

    seen = []
    real = module.secure_group_sums

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "secure_group_sums", spy)
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=2, rounds=1,
                       local_train=_keep, first_round="evaluation_based",
                       participation=lambda r, rng: [1, 2, 3, 4],
                       parties=["a", "b", "c", "a", "b", "c"])
    assert seen == [dict(n_groups=2, bound=16.0, scale_bits=20, nonnegative=True,
                         parties=["b", "c", "a", "b"])]

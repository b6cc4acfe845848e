"""CLoVE on protected loss vectors: paper algorithm, secure == plaintext, and its claims."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics import adjusted_rand_score, silhouette_score

from omnifc.adapters import clove, plaintext_distances, quantize_rows


def _paper_choose_k(x, k_upper=15):
    """The released ``find_best_K_by_silhouette``, rewritten here on raw vectors (sklearn)."""
    upper = min(len(x), k_upper)
    if upper >= len(x):
        x = np.repeat(x, repeats=5, axis=0)
    best, best_k = -1.0, None
    for k in range(2, upper + 1):
        labels = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        if len(set(labels)) < 2:
            continue
        score = silhouette_score(x, labels)
        if score > best * 1.10:
            best, best_k = score, k
    return best_k


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

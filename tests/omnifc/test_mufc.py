"""MUFC's clustering baseline: client seeds, quantized bins, their multiset, the server."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from finite_field import InputError, ParameterError
from omnifc.experiments.baselines import _mufc

pytestmark = pytest.mark.timeout(120)


def _blobs(seed, sizes=(40, 30, 30), spread=0.3):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    x = np.concatenate([c + spread * rng.standard_normal((n, 2)) for c, n in zip(centres, sizes)])
    y = np.repeat(np.arange(3), sizes)
    return x, y


def test_quantization_step_is_one_over_sqrt_n():
    assert _mufc.quantization_step(400) == 0.05
    with pytest.raises(ParameterError):
        _mufc.quantization_step(0)


def test_kmeanspp_seeds_are_distinct_rows_and_stop_at_distinct_points():
    rng = np.random.default_rng(0)
    x = np.array([[0.0, 0], [0, 0], [1, 1], [1, 1]])
    seeds = _mufc.kmeanspp_centres(x, 4, rng)       # only two distinct rows exist
    assert len(seeds) == 2
    assert {tuple(x[i]) for i in seeds} == {(0.0, 0.0), (1.0, 1.0)}


def test_client_upload_rounds_its_seeds_to_the_grid_and_assigns_nearest():
    x, _ = _blobs(1)
    eps = 0.25
    bins, assignment = _mufc.client_upload(x, 3, eps, np.random.default_rng(3))
    rng = np.random.default_rng(3)                  # the same draws, recomputed by hand
    first = int(rng.integers(len(x)))
    chosen = [first]
    d2 = ((x - x[first]) ** 2).sum(1)
    for _ in range(2):
        nxt = int(rng.choice(len(x), p=d2 / d2.sum()))
        chosen.append(nxt)
        d2 = np.minimum(d2, ((x - x[nxt]) ** 2).sum(1))
    seeds = x[chosen]
    expected_bins = [[round(float(v) / eps) for v in row] for row in seeds]
    assert bins.tolist() == expected_bins
    for i, row in enumerate(x):
        dists = [float(((row - s) ** 2).sum()) for s in seeds]
        assert assignment[i] == dists.index(min(dists))


def test_aggregate_bins_is_the_multiset_sum_over_clients():
    uploads = [(np.array([[0, 0], [5, 1]]), np.array([0, 0, 1])),
               (np.array([[5, 1], [2, 2], [9, 9]]), np.array([0, 1, 1, 1, 0])),
               (np.array([[0, 0]]), np.array([0]))]
    expected = Counter()
    for bins, assignment in uploads:
        for a in assignment:
            expected[tuple(int(v) for v in bins[a])] += 1
    bins, counts = _mufc.aggregate_bins(uploads)
    assert dict(zip(map(tuple, bins.tolist()), counts.tolist())) == dict(expected)
    assert counts.sum() == 9


def test_weighted_server_equals_kmeans_on_the_repeated_points():
    rng = np.random.default_rng(5)
    bins = np.array([[0, 0], [1, 0], [0, 1], [40, 40], [41, 40], [80, 0], [81, 1]])
    counts = np.array([5, 3, 2, 4, 6, 1, 7])
    eps = 0.1
    labels, model = _mufc.server_labels(bins, counts, eps, 3, rng, jitter=False)
    points = np.repeat(bins * eps, counts, axis=0)
    reference = KMeans(n_clusters=3, n_init=10, random_state=1).fit(points)
    assert adjusted_rand_score(reference.labels_, labels) == 1.0
    assert model.inertia_ == pytest.approx(reference.inertia_, rel=1e-9)


def test_jittered_server_draws_inside_each_bin():
    rng = np.random.default_rng(2)
    bins = np.array([[0, 0], [50, 50]])
    counts = np.array([4, 6])
    labels, model = _mufc.server_labels(bins, counts, 0.2, 2, rng, jitter=True)
    assert labels.shape == (10,) and len(set(labels[:4].tolist())) == 1
    assert len(set(labels[4:].tolist())) == 1 and labels[0] != labels[4]
    centres = np.sort(model.cluster_centers_, axis=0)
    assert np.all(np.abs(centres - np.array([[0.0, 0.0], [10.0, 10.0]])) <= 0.1)


@pytest.mark.parametrize("jitter", [True, False])
def test_mufc_recovers_separated_blobs_across_parties(jitter):
    x, y = _blobs(0)
    order = np.random.default_rng(7).permutation(len(x))
    parts = np.array_split(order, 4)                 # mixed parties
    labels = _mufc.federated_mufc([x[i] for i in parts], 3, jitter=jitter, seed=0)
    assert adjusted_rand_score(y[np.concatenate(parts)], labels) == 1.0


def test_each_row_inherits_the_label_of_its_seeds_bin():
    x, _ = _blobs(4, spread=2.0)                      # overlapping blobs: a real test
    parts = [x[:50], x[50:]]
    labels = _mufc.federated_mufc(parts, 3, jitter=False, seed=1)
    eps = _mufc.quantization_step(len(x))
    rng = np.random.Generator(np.random.PCG64(1))
    uploads = [_mufc.client_upload(p, 3, eps, rng) for p in parts]
    bins, counts = _mufc.aggregate_bins(uploads)
    server = KMeans(n_clusters=3, n_init=10, random_state=0).fit(
        bins * eps, sample_weight=counts.astype(float))
    for (b, assignment), got in zip(uploads, (labels[:50], labels[50:])):
        for row, centre in enumerate(assignment):   # rows behind one bin share one label
            same = np.flatnonzero(assignment == centre)
            assert len(set(got[same].tolist())) == 1
        # the partition of the rows equals the reference server's on the bins
        ref = server.predict(b[assignment] * eps)
        assert adjusted_rand_score(ref, got) == 1.0


def test_errors():
    with pytest.raises(InputError):
        _mufc.federated_mufc([], 2)
    with pytest.raises(ParameterError):
        _mufc.federated_mufc([np.zeros((3, 2))], 0)
    with pytest.raises(InputError):
        _mufc.client_upload(np.zeros((0, 2)), 2, 0.1, np.random.default_rng(0))


def test_rows_take_their_own_surrogates_label_when_a_bin_is_split():
    # One party, one local seed, a coarse grid: every row sits in one bin, the server splits
    # the bin's uniform surrogates in two, and row i takes surrogate i's label (the authors'
    # one-sample-per-point draw), recomputed here from the same generator.
    x = np.random.default_rng(3).standard_normal((30, 2))
    labels = _mufc.federated_mufc([x], 2, local_clusters=1, eps=8.0, seed=4)
    rng = np.random.Generator(np.random.PCG64(4))
    seed_row = int(rng.integers(30))                       # the one K-means++ seed
    centre = np.rint(x[seed_row] / 8.0) * 8.0
    server_seed = int(rng.integers(2 ** 31 - 1))
    points = np.repeat(centre[None], 30, axis=0) + rng.uniform(-4.0, 4.0, size=(30, 2))
    expected = KMeans(n_clusters=2, n_init=10, max_iter=300,
                      random_state=server_seed).fit_predict(points)
    assert labels.tolist() == expected.tolist()
    assert len(set(labels.tolist())) == 2

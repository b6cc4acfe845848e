"""The shared mechanism: protect (secure distances in client order) and the group sums."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics import adjusted_rand_score, silhouette_score

from omnifc.adapters import (client_parties, kmeans_from_distances, plaintext_distances,
                             protect, quantize_rows, secure_group_sums,
                             silhouette_from_distances, ward_from_distances)
from omnifc.adapters.clove import cluster_cost


def _rng(seed=0):
    return np.random.Generator(np.random.PCG64(seed))


def test_protect_is_exact_and_in_client_order_with_grouped_parties():
    rows = _rng(1).uniform(-1, 1, (9, 5))
    organizations = ["b", "a", "c", "a", "b", "c", "c", "a", "b"]   # interleaved on purpose
    out = protect(rows, bound=1.0, scale_bits=12, parties=organizations)
    q = np.floor(np.clip(rows, -1, 1) * 2**12 + 0.5).astype(np.int64)   # independent reference
    ref = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)
    assert np.array_equal(out.integer_distances, ref)
    assert np.array_equal(out.distances, ref / 4.0**12)
    assert np.array_equal(out.distances, plaintext_distances(quantize_rows(rows, bound=1.0,
                                                                            scale_bits=12)))
    assert out.result.party_names == ["b", "a", "c"]


def test_client_parties_default_one_party_per_client():
    groups = client_parties(3)
    assert [name for name, _ in groups] == ["client-0", "client-1", "client-2"]
    with pytest.raises(ValueError):
        client_parties(3, ["a", "b"])


@pytest.mark.parametrize("parties", [None, [0, 1, 2, 0, 1, 2, 0]])
def test_secure_group_sums_equal_plaintext_cluster_sums(parties):
    """CLoVE's matching cost: secure sum per cluster == plaintext sums of quantized rows."""
    losses = _rng(2).uniform(0, 3, (7, 4))
    labels = np.array([2, 0, 0, 1, 2, 2, 0])
    out = secure_group_sums(losses, labels, n_groups=3, bound=16.0, scale_bits=20,
                            nonnegative=True, parties=parties)
    quantized = quantize_rows(losses, bound=16.0, scale_bits=20, nonnegative=True)
    expected = np.zeros((3, 4))
    for i, k in enumerate(labels):
        expected[k] += quantized[i]
    assert np.array_equal(out.totals, expected)
    assert np.array_equal(out.totals, cluster_cost(quantized, labels, 3))
    ints = np.floor(losses * 2**20 + 0.5).astype(np.int64)
    assert np.array_equal(out.result.integer_total.reshape(3, 4),
                          np.stack([ints[labels == k].sum(0) for k in range(3)]))


def test_clustering_on_distances_matches_sklearn_on_vectors():
    rng = _rng(3)
    x = np.concatenate([rng.normal(c, 0.3, (8, 4)) for c in (0.0, 2.0, 4.0)])
    d = cdist(x, x, "sqeuclidean")
    for seed in range(3):
        ours = kmeans_from_distances(d, 3, random_state=seed)
        theirs = KMeans(3, random_state=seed, n_init="auto").fit(x).labels_
        assert adjusted_rand_score(ours, theirs) == 1.0
    for k in (2, 3, 5):
        ward = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        assert adjusted_rand_score(ward_from_distances(d, k), ward) == 1.0
        assert silhouette_from_distances(d, ward) == pytest.approx(silhouette_score(x, ward),
                                                                   abs=1e-12)

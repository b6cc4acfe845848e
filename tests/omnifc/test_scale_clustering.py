"""Clustering an out-of-core (memory-mapped) distance result equals clustering it in memory.

The store is on disk (``memory_budget=0``) with small tiles, so every streamed pass reads
many row blocks. References are the dense methods on the same float matrix, dense
k-NN / radius graphs built with numpy sorts, and scikit-learn on explicit points.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

import omnifc
from finite_field import ParameterError
from omnifc import DistanceResult, classical_mds, plaintext_distance_store
from omnifc._clustering import fit_method
from omnifc._clustering._outofcore import knn_affinity, spectral_on_graph
from omnifc._clustering._streamed import (PermutedRows, canonical_order_streamed, knn_graph,
                                          radius_graph, streamed_mds)

TILE = 6000  # bytes: a few rows per tile at these sizes


def _blobs(n_per, dim, k, seed, spread=10.0, scale_bits=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, spread, (k, dim))
    x = np.vstack([c + rng.normal(0, 1, (n_per, dim)) for c in centers])
    truth = np.repeat(np.arange(k), n_per)
    perm = rng.permutation(len(x))
    return np.round(x[perm] * 2**scale_bits).astype(np.int64), truth[perm]


@pytest.fixture(scope="module")
def blobs():
    rows, truth = _blobs(70, 3, 4, seed=0)
    store = plaintext_distance_store(rows, scale_bits=4, memory_budget=0, tile_bytes=TILE)
    assert store.on_disk
    dense = np.asarray(store.integer, dtype=np.float64) / 4**4
    return store, dense, truth, rows


def _ari(a, b):
    from sklearn.metrics import adjusted_rand_score
    return adjusted_rand_score(a, b)


def test_canonical_order_streamed_equals_dense_including_ties():
    rows = np.array([[2, 0], [0, 0], [0, 4], [3, 3], [1, 3]])  # rows 1, 2: equal sums
    sums = np.sort(((rows[:, None] - rows[None]) ** 2).sum(-1), axis=1).sum(axis=1)
    assert sums[1] == sums[2] and sorted(sums.tolist()) != sums.tolist()
    for x in (rows, np.vstack([rows, rows[:2]])):           # and with duplicate points
        store = plaintext_distance_store(x, scale_bits=0, memory_budget=0, tile_bytes=40)
        dense = np.asarray(store.integer, dtype=np.float64)
        assert np.array_equal(canonical_order_streamed(store.distances),
                              omnifc.canonical_order(dense))


def test_canonical_order_streamed_on_blobs(blobs):
    store, dense, _, _ = blobs
    assert np.array_equal(omnifc.canonical_order(store), omnifc.canonical_order(dense))


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["randomized", "lanczos"])
def test_streamed_mds_is_isometric_for_low_rank_data(blobs, solver):
    store, dense, _, _ = blobs
    y, values, explained = streamed_mds(store.distances, 8, np.random.default_rng(1),
                                        solver=solver)
    assert y.shape == (dense.shape[0], 3)  # rank 3: only three positive eigenvalues kept
    d = ((y[:, None] - y[None]) ** 2).sum(-1)
    assert np.allclose(d, dense, rtol=1e-9, atol=1e-8 * dense.max())
    exact = np.sort(np.linalg.eigvalsh(-0.5 * _centre(dense)))[::-1][:3]
    assert np.allclose(values, exact, rtol=1e-10)
    assert abs(explained - 1.0) < 1e-10


def _centre(d):
    c = d - d.mean(axis=0, keepdims=True)
    return c - c.mean(axis=1, keepdims=True)


@pytest.mark.slow
def test_streamed_mds_top_eigenvalues_of_full_rank_data():
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 64, size=(150, 40))
    store = plaintext_distance_store(rows, scale_bits=0, memory_budget=0, tile_bytes=TILE)
    dense = np.asarray(store.integer, dtype=np.float64)
    exact = np.sort(np.linalg.eigvalsh(-0.5 * _centre(dense)))[::-1]
    _, lanczos, explained = streamed_mds(store.distances, 5, rng, solver="lanczos", tol=1e-12)
    assert np.allclose(lanczos, exact[:5], rtol=1e-9)
    assert np.isclose(explained, exact[:5].sum() / exact[exact > 0].sum(), rtol=1e-9)
    _, randomized, _ = streamed_mds(store.distances, 5, rng, solver="randomized", n_iter=8)
    assert np.allclose(randomized, exact[:5], rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["randomized", "lanczos"])
def test_kmeans_out_of_core_equals_dense_and_sklearn(blobs, solver):
    store, dense, truth, rows = blobs
    streamed = fit_method(store, "kmeans", 4, random_state=7, out_of_core=True,
                          n_components=6, solver=solver)
    reference = fit_method(dense, "kmeans", 4, random_state=7)
    assert np.array_equal(streamed["labels"], reference["labels"])
    assert np.array_equal(streamed["init_indices"], reference["init_indices"])
    assert np.isclose(streamed["inertia"], reference["inertia"], rtol=1e-9)
    # scikit-learn's Lloyd on the plaintext rows from the same seed rows
    from sklearn.cluster import KMeans
    x = rows / 16.0
    plain = KMeans(4, init=x[streamed["init_indices"]], n_init=1, tol=0,
                   algorithm="lloyd").fit(x)
    assert np.array_equal(omnifc._clustering._common.relabel(plain.labels_),
                          omnifc._clustering._common.relabel(streamed["labels"]))
    assert _ari(streamed["labels"], truth) == 1.0


def test_kmeans_seeding_reads_rows_in_canonical_order(blobs):
    store, dense, _, _ = blobs
    order = omnifc.canonical_order(dense)
    rows = PermutedRows(store.distances, order)
    permuted = dense[np.ix_(order, order)]
    assert np.array_equal(rows[5], permuted[5])
    assert np.array_equal(rows[[3, 0, 3]], permuted[[3, 0, 3]])
    seeds = [omnifc._clustering.kmeans_plusplus_indices(m, 4, np.random.default_rng(2))
             for m in (rows, permuted)]
    assert np.array_equal(*seeds)


def test_fcm_out_of_core_equals_dense(blobs):
    store, dense, _, _ = blobs
    a = fit_method(store, "fcm", 4, random_state=3, out_of_core=True, n_components=5)
    b = fit_method(dense, "fcm", 4, random_state=3)
    assert np.array_equal(a["labels"], b["labels"])
    assert np.allclose(a["memberships"], b["memberships"], atol=1e-8)


def _dense_knn(dense, k, rank):
    n = dense.shape[0]
    idx = np.empty((n, k), dtype=np.int64)
    for i in range(n):
        cols = np.array([j for j in range(n) if j != i])
        idx[i] = cols[np.lexsort((rank[cols], dense[i, cols]))[:k]]
    return idx, np.take_along_axis(dense, idx, axis=1)


def test_knn_graph_equals_dense_graph_with_ties():
    # integer grid points: many exactly equal distances
    rng = np.random.default_rng(4)
    rows = rng.integers(0, 4, size=(60, 2))
    store = plaintext_distance_store(rows, scale_bits=0, memory_budget=0, tile_bytes=500)
    dense = np.asarray(store.integer, dtype=np.float64)
    rank = rng.permutation(60)
    for k in (1, 5, 59, 80):
        idx, dist = knn_graph(store.distances, k, rank=rank)
        ref_idx, ref_dist = _dense_knn(dense, min(k, 59), rank)
        assert np.array_equal(idx, ref_idx) and np.array_equal(dist, ref_dist)
    _, _, mean = knn_graph(store.distances, 3, with_mean=True)
    assert np.isclose(mean, np.sqrt(dense[np.triu_indices(60, 1)]).mean(), rtol=1e-12)


def test_radius_graph_equals_dense_threshold():
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 5, size=(40, 2))
    store = plaintext_distance_store(rows, scale_bits=0, memory_budget=0, tile_bytes=300)
    euclid = np.sqrt(np.asarray(store.integer, dtype=np.float64))
    order = rng.permutation(40)
    graph = radius_graph(store.distances, 1.5, order=order)
    permuted = euclid[np.ix_(order, order)]
    mask = permuted <= 1.5
    assert graph.has_sorted_indices
    assert np.array_equal(graph.toarray() != 0, mask & (permuted != 0))
    coo = graph.tocoo()
    assert set(zip(coo.row.tolist(), coo.col.tolist())) == set(zip(*np.nonzero(mask)))
    assert np.array_equal(coo.data, permuted[coo.row, coo.col])  # explicit zeros kept


@pytest.mark.parametrize("eps", [None, 1.2])
def test_dbscan_out_of_core_equals_dense(eps):
    rows, _ = _blobs(40, 2, 3, seed=6, spread=6.0, scale_bits=2)
    rows = np.vstack([rows, rows[:5], rows[-3:]])  # duplicate points (distance 0 pairs)
    store = plaintext_distance_store(rows, scale_bits=2, memory_budget=0, tile_bytes=TILE)
    dense = np.asarray(store.integer, dtype=np.float64) / 16
    a = fit_method(store, "dbscan", random_state=0, out_of_core=True, eps=eps, min_samples=4)
    b = fit_method(dense, "dbscan", random_state=0, eps=eps, min_samples=4)
    assert a["eps"] == b["eps"]
    assert np.array_equal(a["labels"], b["labels"])
    assert np.array_equal(np.sort(a["core_sample_indices"]), np.sort(b["core_sample_indices"]))
    assert len(set(a["labels"].tolist()) - {-1}) >= 2


def test_spectral_out_of_core_uses_the_same_graph_as_a_dense_build(blobs):
    store, dense, truth, _ = blobs
    details = fit_method(store, "spectral", 4, random_state=1, out_of_core=True,
                         n_neighbors=8)
    n = dense.shape[0]
    sigma = np.sqrt(dense[np.triu_indices(n, 1)]).mean()
    assert np.isclose(details["bandwidth"], sigma, rtol=1e-12)
    # dense reference, in the caller's row order; ties broken by canonical position
    order = details["order"]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    idx, sq = _dense_knn(dense, 8, inverse)
    w = np.zeros((n, n))
    rows = np.repeat(np.arange(n), 8)
    w[rows, idx.ravel()] = np.exp(-sq.ravel() / (2 * details["bandwidth"] ** 2))
    w = np.maximum(w, w.T)
    assert sparse.issparse(details["graph"])
    assert np.allclose(details["graph"].toarray(), w, rtol=1e-15, atol=0)
    assert np.array_equal(details["graph"].toarray() != 0, w != 0)
    assert _ari(details["labels"], truth) > 0.95
    # the same spectral step on the dense-built graph, in canonical order, gives the labels
    ref = spectral_on_graph(sparse.csr_matrix(w[np.ix_(order, order)]), 4,
                            np.random.default_rng(1))
    assert _ari(ref[inverse], details["labels"]) == 1.0


def test_knn_affinity_is_symmetric_union():
    idx = np.array([[1], [2], [1]])
    sq = np.array([[1.0], [4.0], [4.0]])
    a = knn_affinity(idx, sq, 1.0).toarray()
    assert np.allclose(a, a.T) and a[0, 1] == np.exp(-0.5) and a[2, 0] == 0


def test_kmedoids_clara_with_full_sample_is_pam(blobs):
    store, dense, truth, _ = blobs
    a = fit_method(store, "kmedoids", 4, random_state=0, out_of_core=True)  # sample >= n
    b = fit_method(dense, "kmedoids", 4, random_state=0)
    assert np.array_equal(a["labels"], b["labels"])
    assert np.array_equal(np.sort(a["medoid_indices"]), np.sort(b["medoid_indices"]))
    assert np.isclose(a["inertia"], b["inertia"], rtol=1e-12)


def test_kmedoids_clara_sampled_cost_is_exact(blobs):
    store, dense, truth, _ = blobs
    a = fit_method(store, "kmedoids", 4, random_state=0, out_of_core=True, sample_size=40,
                   n_draws=4)
    euclid = np.sqrt(dense)
    medoids = a["medoid_indices"]
    assert np.isclose(a["inertia"], euclid[:, medoids].min(axis=1).sum(), rtol=1e-12)
    assert np.array_equal(a["labels"], np.argmin(euclid[:, medoids], axis=1))
    assert _ari(a["labels"], truth) == 1.0


@pytest.mark.parametrize("method", ["hierarchical", "nmf", "kmeans-rows"])
def test_methods_needing_memory_fail_clearly(blobs, method):
    store, _, _, _ = blobs
    with pytest.raises(ParameterError, match="needs all of D in memory.*use '"):
        omnifc.cluster(store, method, 3, out_of_core=True)


@pytest.mark.slow
def test_automatic_choice_by_memory_budget(blobs):
    _, _, truth, rows = blobs
    roomy = plaintext_distance_store(rows, scale_bits=4, memory_budget=2**30)
    tight = plaintext_distance_store(rows, scale_bits=4, memory_budget=0)
    dense = np.asarray(roomy.distances)
    a = fit_method(roomy, "spectral", 4, random_state=0)
    assert "affinity" in a and "graph" not in a  # the dense method
    assert np.array_equal(a["labels"], fit_method(dense, "spectral", 4, random_state=0)["labels"])
    b = fit_method(tight, "spectral", 4, random_state=0)
    assert "graph" in b and "affinity" not in b  # streamed
    with pytest.raises(ParameterError, match="hierarchical.*needs all of D"):
        omnifc.cluster(tight, "hierarchical", 4)
    labels = omnifc.cluster(roomy, "hierarchical", 4)  # fits: dense method
    assert np.array_equal(labels, omnifc.cluster(dense, "hierarchical", 4))
    with pytest.raises(ParameterError, match="out_of_core=True needs"):
        omnifc.cluster(dense, "kmeans", 4, out_of_core=True)
    with pytest.raises(ParameterError, match="does not take option.*out of core"):
        omnifc.cluster(tight, "kmeans", 4, linkage="ward")


@pytest.mark.slow
def test_result_and_view_are_accepted(blobs):
    store, dense, _, _ = blobs
    result = DistanceResult.from_store(store)
    expected = omnifc.cluster(dense, "kmeans", 4, random_state=2)
    for source in (result, result.distances, store):
        got = omnifc.cluster(source, "kmeans", 4, random_state=2, out_of_core=True,
                             n_components=4)
        assert np.array_equal(got, expected)

"""The k-NN graph from D[:, L] plus listed pairs (omnifc/_clustering/_neighbours.py), checked
against the plaintext exact k-NN graph (tests/oracles.py), and spectral clustering and
DBSCAN on it."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import DBSCAN

from finite_field import ParameterError
from oracles import k_nearest
from omnifc._clustering import KNNGraph, candidate_pairs, knn_from_entries, landmark_mds

pytestmark = pytest.mark.timeout(120)


def _grid(seed=0, n=40, d=3):
    """Integer rows on a small grid: many equal distances (ties) and duplicate rows."""
    x = np.random.default_rng(seed).integers(0, 4, (n, d)).astype(np.int64)
    return x, [[int(((a - b) ** 2).sum()) for b in x] for a in x]


def test_every_pair_a_candidate_gives_the_exact_knn_graph_with_ties_to_the_lower_row():
    x, sq = _grid()
    n, d = len(x), np.array(_grid()[1])
    landmarks = np.array([5, 0, 17, 33])
    pairs = candidate_pairs(d[:, landmarks], landmarks, candidates=n - 1)
    # every pair without a landmark end, once, i < j
    free = [i for i in range(n) if i not in set(landmarks.tolist())]
    assert pairs.tolist() == [[i, j] for i in free for j in free if i < j]
    graph = knn_from_entries(n, landmarks, d[:, landmarks], pairs,
                             d[pairs[:, 0], pairs[:, 1]], 7)
    assert graph.indices.tolist() == k_nearest(sq, 7)
    assert graph.integer_distances.tolist() == [[sq[i][j] for j in row]
                                                for i, row in enumerate(k_nearest(sq, 7))]
    assert graph.integer_distances.dtype == np.int64


def test_the_csr_graph_holds_each_rows_neighbours_and_the_union_when_symmetric():
    x, sq = _grid(seed=3, n=25)
    d = np.array(sq)
    landmarks = np.arange(0, 25, 6)
    pairs = candidate_pairs(d[:, landmarks], landmarks, candidates=24)
    graph = knn_from_entries(25, landmarks, d[:, landmarks], pairs,
                             d[pairs[:, 0], pairs[:, 1]], 3, scale_bits=1)
    nearest = k_nearest(sq, 3)
    directed = graph.graph(symmetric=False)
    union = graph.graph()
    for i in range(25):
        assert directed.indices[directed.indptr[i]:directed.indptr[i + 1]].tolist() == \
            sorted(nearest[i])
        expected = sorted(set(nearest[i]) | {j for j in range(25) if i in nearest[j]})
        row = slice(union.indptr[i], union.indptr[i + 1])
        assert union.indices[row].tolist() == expected
        assert union.data[row].tolist() == [sq[i][j] / 4 for j in expected]  # 4^q, q = 1
    zero = [(i, j) for i in range(25) for j in nearest[i] if sq[i][j] == 0]
    assert zero and all(union[i, j] == 0 and j in union.indices[
        union.indptr[i]:union.indptr[i + 1]] for i, j in zero)  # duplicates stay edges
    assert (union != union.T).nnz == 0
    euclid = graph.graph(squared=False)
    np.testing.assert_array_equal(euclid.data, np.sqrt(union.data))


def test_candidates_come_from_the_landmark_embeddings_nearest_rows():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 2))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    landmarks = np.array([2, 9, 21])  # span the plane: the embedding is isometric
    pairs = candidate_pairs(d[:, landmarks], landmarks, candidates=4)
    y = landmark_mds(d[:, landmarks], landmarks)
    e = ((y[:, None] - y[None]) ** 2).sum(-1)
    np.fill_diagonal(e, np.inf)
    expected = {tuple(sorted((i, int(j)))) for i in range(30) for j in np.argsort(e[i])[:4]}
    expected = {p for p in expected if not set(p) & {2, 9, 21}}
    assert {tuple(p) for p in pairs.tolist()} == expected
    assert (pairs[:, 0] < pairs[:, 1]).all()


def test_rows_with_too_few_known_neighbours_are_refused():
    d = np.array(_grid(n=10)[1])
    with pytest.raises(ParameterError, match="known neighbours, fewer than n_neighbors = 3"):
        knn_from_entries(10, [0], d[:, [0]], np.array([[1, 2]]), d[[1], [2]], 3)
    with pytest.raises(ParameterError, match="n_neighbors must be at most n - 1 = 9"):
        knn_from_entries(10, [0], d[:, [0]], np.array([[1, 2]]), d[[1], [2]], 10)
    with pytest.raises(ParameterError, match="candidates must be an integer >= 1"):
        candidate_pairs(d[:, [0]], [0], candidates=0)


def _complete(d, scale_bits=0):
    n = len(d)
    landmarks = np.array([0])
    pairs = candidate_pairs(d[:, landmarks], landmarks, candidates=n - 1)
    return knn_from_entries(n, landmarks, d[:, landmarks], pairs,
                            d[pairs[:, 0], pairs[:, 1]], n - 1, scale_bits=scale_bits)


def test_dbscan_on_the_complete_graph_is_dbscan_on_sqrt_d():
    import omnifc

    x, sq = _grid(seed=5, n=40)
    d = np.array(sq)
    graph = _complete(d)
    for eps, min_samples in ((1.0, 4), (1.0, 6), (1.45, 10)):  # 3-4 clusters and noise
        found = omnifc.cluster(graph, "dbscan", eps=eps, min_samples=min_samples)
        expected = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit(
            np.sqrt(d)).labels_
        assert len(set(expected.tolist())) >= 3 and -1 in expected
        assert found.tolist() == _first_appearance(expected)


def _first_appearance(labels):
    mapping, out = {}, []
    for v in np.asarray(labels).tolist():
        out.append(-1 if v == -1 else mapping.setdefault(v, len(mapping)))
    return out


def _blobs(seed=6, n=90):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0, 0.0], [6.0, 0.0, 0.0], [0.0, 6.0, 6.0]])
    labels = np.repeat(np.arange(3), n // 3)
    x = centers[labels] + rng.normal(0, 0.4, (n, 3))
    return x, labels, ((x[:, None] - x[None]) ** 2).sum(-1)


@pytest.mark.parametrize("options", [{}, {"affinity": "connectivity"}, {"bandwidth": 1.0}])
def test_spectral_and_dbscan_on_the_graph_recover_well_separated_blobs(options):
    import omnifc

    x, labels, d = _blobs()
    landmarks = np.array([0, 31, 62, 5, 40])
    pairs = candidate_pairs(d[:, landmarks], landmarks, candidates=12)
    graph = knn_from_entries(len(x), landmarks, d[:, landmarks], pairs,
                             d[pairs[:, 0], pairs[:, 1]], 8)
    found = omnifc.cluster(graph, "spectral", 3, random_state=0, **options)
    assert omnifc.adjusted_rand(labels, found) == 1.0
    found = omnifc.cluster(graph, "dbscan", min_samples=5)
    assert omnifc.adjusted_rand(labels, found) == 1.0


def test_the_graph_refuses_other_methods_and_unknown_options():
    import omnifc

    _, _, d = _blobs(n=30)
    graph = _complete(d)
    with pytest.raises(ParameterError, match="method 'kmeans' needs the full D"):
        omnifc.cluster(graph, "kmeans", 3)
    with pytest.raises(ParameterError, match="does not take option"):
        omnifc.cluster(graph, "spectral", 3, linkage="ward")
    with pytest.raises(ParameterError, match="needs n_clusters"):
        omnifc.cluster(graph, "spectral")
    with pytest.raises(ParameterError, match="affinity must be"):
        omnifc.cluster(graph, "spectral", 3, affinity="rbf")
    small = knn_from_entries(30, [0], d[:, [0]], *_pairs_of(d), 2)
    with pytest.raises(ParameterError, match="min_samples - 1 = 4 neighbours are more"):
        omnifc.cluster(small, "dbscan", min_samples=5)
    assert isinstance(small, KNNGraph)


def _pairs_of(d):
    n = len(d)
    i, j = np.triu_indices(n, 1)
    keep = (i != 0) & (j != 0)
    pairs = np.stack([i[keep], j[keep]], axis=1)
    return pairs, d[pairs[:, 0], pairs[:, 1]]

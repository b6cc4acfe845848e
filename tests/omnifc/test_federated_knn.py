"""FederatedClustering(distances="knn", n_neighbors=k, n_landmarks=L): a landmarks session,
then a pairs session on the embedding's candidate neighbours, and spectral clustering or
DBSCAN on the exact k-NN graph."""

from __future__ import annotations

import numpy as np
import pytest

import omnifc
from finite_field import ParameterError
from oracles import k_nearest

pytestmark = pytest.mark.timeout(180)


def _parties(seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.2, 0.2, 0.2], [0.8, 0.8, 0.2], [0.2, 0.8, 0.8]])
    labels = rng.integers(3, size=45)
    x = centers[labels] + rng.normal(0, 0.03, (45, 3))
    return [x[:15], x[15:27], x[27:36], x[36:]], x, labels


@pytest.mark.parametrize("method, options", [("spectral", {}), ("dbscan", {"min_samples": 4, "eps": 0.15})])
def test_fit_clusters_the_exact_knn_graph_and_recovers_the_blobs(oracle, method, options):
    parties, x, labels = _parties()
    model = omnifc.FederatedClustering(method, n_clusters=3, bound=1.0, scale_bits=10,
                                       random_state=0, distances="knn", n_landmarks=5,
                                       n_neighbors=6, candidates=44,
                                       options=options).fit(parties)
    graph = model.knn_graph_
    sq = oracle.sq_distances(oracle.quantize(x, 10, 1.0))
    assert graph.indices.tolist() == k_nearest(sq, 6)  # c = n - 1: the exact graph
    assert graph.pair_result.layout == "pairs" and model.distance_result_.layout == \
        "landmarks"
    assert model.labels_.tolist() == omnifc.cluster(graph, method, 3, random_state=0,
                                                    **options).tolist()
    assert omnifc.adjusted_rand(labels, model.labels_) == 1.0
    assert [len(p) for p in model.party_labels_] == [15, 12, 9, 9]


@pytest.mark.parametrize("kwargs, match", [
    (dict(distances="knn", n_landmarks=4, method="kmeans"), "method must be one of"),
    (dict(distances="knn", method="spectral"), "needs n_landmarks"),
    (dict(distances="knn", n_landmarks=4, method="spectral", n_neighbors=0),
     "needs n_neighbors"),
    (dict(distances="knn", n_landmarks=4, method="spectral", n_neighbors=3, candidates=2),
     "candidates must be an integer >= k = 3"),
])
def test_bad_knn_settings_are_refused(kwargs, match):
    parties, _, _ = _parties()
    with pytest.raises(ParameterError, match=match):
        omnifc.FederatedClustering(n_clusters=3, bound=1.0, **kwargs).fit(parties)

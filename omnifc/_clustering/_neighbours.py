"""An exact k-nearest-neighbour graph from a landmarks round plus a pairs round (issue 22).

Two rounds of the secure distance protocol, both of which reveal entries of D only:

1. a ``landmarks`` session gives C = D[:, L]. Landmark (Nyström) MDS of C
   (:func:`~omnifc._clustering.landmark_mds`) embeds every row; scikit-learn's
   ``NearestNeighbors`` on that embedding gives each row its ``candidates`` nearest rows
   (c >= k). :func:`candidate_pairs` turns them into a list of distinct pairs {i, j},
   leaving out those with a landmark end, whose distance C already holds;
2. a ``pairs`` session gives the exact distances of the listed pairs.

:func:`knn_from_entries` then takes, for every row, its k nearest rows among all the
entries known exactly (its candidate pairs, in either direction, and its distances to and
from the landmarks), ordered by (exact integer squared distance, column index): ties go to
the lower row index, the rule of the streamed ``knn_graph`` and of a stable sort of each
row of D. With c = n - 1 every pair is known and the graph is the exact k-NN graph of D;
with a smaller c a true neighbour is missed only when the embedding ranks it below c
others (recall is measured, not guaranteed).

>>> import numpy as np
>>> x = np.array([[0.0], [1.0], [3.0], [7.0], [8.0]])
>>> d = (x - x.T) ** 2
>>> pairs = candidate_pairs(d[:, [0, 4]], [0, 4], candidates=2)
>>> pairs.tolist()
[[1, 2], [2, 3]]
>>> graph = knn_from_entries(5, [0, 4], d[:, [0, 4]], pairs, d[pairs[:, 0], pairs[:, 1]], 1)
>>> graph.indices.ravel().tolist()
[1, 0, 1, 4, 3]
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

import numpy as np

from finite_field import ParameterError

from ._landmarks import _columns, landmark_mds

__all__ = ["KNNGraph", "candidate_pairs", "knn_from_entries", "knn_spectral", "knn_dbscan",
           "fit_knn", "KNN_METHODS"]

logger = logging.getLogger(__name__)

#: Methods :func:`omnifc.cluster` runs on a :class:`KNNGraph`.
KNN_METHODS = ("spectral", "dbscan")


def _positive_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ParameterError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def candidate_pairs(columns, landmarks=None, *, candidates: int,
                    n_components: int | None = None) -> np.ndarray:
    """The pairs a ``pairs`` round must compute: every row's ``candidates`` nearest rows
    in the landmark-MDS embedding of D[:, L], as distinct pairs (i, j), i < j, sorted,
    without the pairs that have a landmark end (D[:, L] holds those already).

    ``candidates`` is capped at n - 1 (then every pair without a landmark end is listed).
    The embedding's neighbours come from scikit-learn's ``NearestNeighbors`` (exact,
    Euclidean, on the float coordinates; their ties do not matter: the graph is built from
    the exact distances).
    """
    from sklearn.neighbors import NearestNeighbors

    c, index = _columns(columns, landmarks)
    n = c.shape[0]
    count = min(_positive_int(candidates, "candidates"), n - 1)
    if count < 1:
        return np.empty((0, 2), dtype=np.int64)
    embedding = landmark_mds(c, index, n_components)
    if count == n - 1:  # every pair: no search needed
        i, j = np.triu_indices(n, 1)
        pairs = np.stack([i, j], axis=1).astype(np.int64)
    else:
        model = NearestNeighbors(n_neighbors=count).fit(embedding)
        neighbours = model.kneighbors(return_distance=False)  # never the row itself
        rows = np.repeat(np.arange(n, dtype=np.int64), count)
        pairs = np.sort(np.stack([rows, neighbours.ravel().astype(np.int64)], axis=1),
                        axis=1)
        pairs = np.unique(pairs, axis=0)  # sorted, each unordered pair once
    landmark = np.zeros(n, dtype=bool)
    landmark[index] = True
    keep = ~(landmark[pairs[:, 0]] | landmark[pairs[:, 1]])
    return pairs[keep]


@dataclass
class KNNGraph:
    """The exact k-nearest-neighbour graph of the rows (secure entries of D only).

    Attributes
    ----------
    indices : ndarray of int64, shape (n, k)
        Row i's k nearest rows among the entries known, nearest first (ties: lower index).
    integer_distances : ndarray of int64, shape (n, k)
        Their exact integer squared distances (quantized units, 4^q per unit^2).
    distances : ndarray of float64, shape (n, k)
        ``integer_distances / 4^q``: squared distances in the data's units.
    n_neighbors : int
        k.
    landmarks : ndarray of int64 (L,)
        The landmark rows of the first round.
    pairs : ndarray of int64 (P, 2)
        The pairs of the second round (i < j, sorted).
    landmark_result, pair_result : DistanceResult, optional
        The two rounds' results (with :func:`omnifc.secure_knn_graph`).
    party_names, owners
        As in :class:`~omnifc.DistanceResult` (with :func:`omnifc.secure_knn_graph`).
    """

    indices: np.ndarray
    integer_distances: np.ndarray
    distances: np.ndarray
    n_neighbors: int
    landmarks: np.ndarray
    pairs: np.ndarray
    landmark_result: object = None
    pair_result: object = None
    party_names: list = field(default_factory=list)
    owners: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.indices.shape[0])

    def __len__(self) -> int:
        return self.n

    def graph(self, *, symmetric: bool = True, squared: bool = True):
        """The graph as a scipy CSR matrix (n x n) of squared (or, ``squared=False``,
        Euclidean) distances; column indices sorted in each row.

        Zero distances (duplicate rows) are stored as explicit entries. ``symmetric``
        (default) keeps an edge when either end lists the other (the union); otherwise row
        i holds exactly its k neighbours.
        """
        from scipy import sparse

        n, k = self.indices.shape
        rows = np.repeat(np.arange(n, dtype=np.int64), k)
        cols = self.indices.ravel()
        values = self.distances.ravel()
        if symmetric:  # D is symmetric exactly: an edge has one value in either direction
            rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
            values = np.concatenate([values, values])
        key = rows * n + cols
        key, first = np.unique(key, return_index=True)  # sorted by (row, column)
        rows, cols, values = key // n, key % n, values[first]
        if not squared:
            values = np.sqrt(values)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return sparse.csr_matrix((values, cols, indptr), shape=(n, n))

    def __repr__(self) -> str:
        return (f"KNNGraph(n={self.n}, k={self.n_neighbors}, L={len(self.landmarks)}, "
                f"pairs={len(self.pairs)})")


def knn_from_entries(n: int, landmarks, landmark_columns, pairs, pair_distances,
                     n_neighbors: int, *, scale_bits: int = 0) -> KNNGraph:
    """The k-NN graph from the entries of D known exactly: D[:, L] and the listed pairs.

    ``landmark_columns`` and ``pair_distances`` are the integer squared distances (or any
    exact values; ``scale_bits`` q turns integers into data units, ``/ 4^q``). Each row's
    neighbours are ordered by (distance, column index). ParameterError when some row has
    fewer than k known neighbours.
    """
    n = _positive_int(n, "n", 2)
    k = _positive_int(n_neighbors, "n_neighbors")
    if k > n - 1:
        raise ParameterError(f"n_neighbors must be at most n - 1 = {n - 1}, got {k}")
    landmarks = np.asarray(landmarks, dtype=np.int64).reshape(-1)
    columns = np.asarray(landmark_columns)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    values = np.asarray(pair_distances).reshape(-1)
    if columns.shape != (n, landmarks.size) or values.shape != (pairs.shape[0],):
        raise ParameterError(f"expected D[:, L] of shape {(n, landmarks.size)} and one "
                             f"distance per pair ({pairs.shape[0]}), got {columns.shape} "
                             f"and {values.shape}")
    exact = np.issubdtype(columns.dtype, np.integer) and np.issubdtype(values.dtype,
                                                                       np.integer)
    dtype = np.int64 if exact else np.float64
    # every known entry (i, j, D[i, j]), in both directions, without i == j
    lm_rows = np.repeat(np.arange(n, dtype=np.int64), landmarks.size)
    lm_cols = np.tile(landmarks, n)
    lm_values = columns.astype(dtype).ravel()
    rows = np.concatenate([lm_rows, lm_cols, pairs[:, 0], pairs[:, 1]])
    cols = np.concatenate([lm_cols, lm_rows, pairs[:, 1], pairs[:, 0]])
    vals = np.concatenate([lm_values, lm_values, values.astype(dtype),
                           values.astype(dtype)])
    keep = rows != cols
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    # one entry per (row, column): sort by (row, column); duplicates hold the same value
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    unique = np.ones(rows.size, dtype=bool)
    unique[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols, vals = rows[unique], cols[unique], vals[unique]
    counts = np.bincount(rows, minlength=n)
    if counts.min() < k:
        short = int(np.argmin(counts))
        raise ParameterError(f"row {short} has {int(counts[short])} known neighbours, fewer "
                             f"than n_neighbors = {k}: raise candidates")
    # nearest first, ties to the lower column: sort by (row, value, column)
    order = np.lexsort((cols, vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    start = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    take = (start[:, None] + np.arange(k)[None, :]).ravel()
    indices = cols[take].reshape(n, k)
    chosen = vals[take].reshape(n, k)
    factor = 4.0 ** -int(scale_bits)
    return KNNGraph(indices=indices,
                    integer_distances=chosen if exact else None,
                    distances=chosen.astype(np.float64) * factor, n_neighbors=k,
                    landmarks=landmarks, pairs=pairs)


# --- clustering on the graph ---------------------------------------------------------

def _bandwidth(graph: KNNGraph, bandwidth, bandwidth_scale) -> float:
    if not bandwidth_scale > 0:
        raise ParameterError(f"bandwidth_scale must be positive, got {bandwidth_scale}")
    if isinstance(bandwidth, (int, float, np.floating)) and not isinstance(bandwidth, bool):
        if not bandwidth > 0:
            raise ParameterError(f"bandwidth must be positive, got {bandwidth}")
        return float(bandwidth) * bandwidth_scale
    if bandwidth != "mean":
        raise ParameterError(f"on a k-NN graph, bandwidth must be 'mean' (the mean "
                             f"Euclidean length of its edges) or a positive number, got "
                             f"{bandwidth!r}")
    sigma = float(np.sqrt(graph.distances).mean()) * bandwidth_scale
    return sigma if sigma > 0 else 1.0


def knn_spectral(graph: KNNGraph, n_clusters: int, rng, *, affinity: str = "gaussian",
                 bandwidth="mean", bandwidth_scale: float = 1.0, n_init: int = 10,
                 assign_labels: str = "kmeans") -> dict:
    """scikit-learn's ``SpectralClustering(affinity="precomputed")`` on the symmetric k-NN
    graph: Gaussian weights exp(-D / (2 sigma^2)) (sigma = ``bandwidth_scale`` x the
    mean Euclidean edge length, or ``bandwidth``) or ``affinity="connectivity"`` (1 on
    every edge)."""
    from ._outofcore import spectral_on_graph

    affinity_graph = graph.graph(symmetric=True)
    if affinity == "gaussian":
        sigma = _bandwidth(graph, bandwidth, bandwidth_scale)
        affinity_graph.data = np.exp(-affinity_graph.data / (2.0 * sigma * sigma))
    elif affinity == "connectivity":
        sigma = None
        affinity_graph.data = np.ones_like(affinity_graph.data)
    else:
        raise ParameterError(f"affinity must be 'gaussian' or 'connectivity', got "
                             f"{affinity!r}")
    labels = spectral_on_graph(affinity_graph, n_clusters, rng, n_init=n_init,
                               assign_labels=assign_labels)
    return {"labels": np.asarray(labels), "bandwidth": sigma, "graph": affinity_graph}


def knn_dbscan(graph: KNNGraph, n_clusters=None, rng=None, *, eps=None,
               min_samples: int = 5) -> dict:
    """scikit-learn's ``DBSCAN(metric="precomputed")`` on the symmetric k-NN graph of
    Euclidean distances: a pair outside the graph counts as farther than ``eps``, so this
    is DBSCAN on D when every row's eps-ball holds at most its k neighbours. ``eps``
    defaults to the knee of the sorted (min_samples - 1)-th neighbour distances, as the
    dense method's; ``min_samples - 1`` must be at most k."""
    from sklearn.cluster import DBSCAN

    from ._density import knee_eps

    min_samples = _positive_int(min_samples, "min_samples")
    if min_samples - 1 > graph.n_neighbors:
        raise ParameterError(f"min_samples - 1 = {min_samples - 1} neighbours are more than "
                             f"the graph's n_neighbors = {graph.n_neighbors}")
    if eps is None:
        kdist = np.sort(np.sqrt(graph.distances[:, max(min_samples - 2, 0)]))
        eps = knee_eps(kdist)
        lengths = np.unique(np.sqrt(graph.distances))
        above = lengths[lengths > eps]
        if above.size:
            eps = (eps + float(above[0])) / 2.0
        if not eps > 0:
            eps = float(above[0]) / 2.0 if above.size else 1.0
    elif not eps > 0:
        raise ParameterError(f"eps must be positive, got {eps}")
    distances = graph.graph(symmetric=True, squared=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's note on sparse precomputed graphs
        model = DBSCAN(eps=float(eps), min_samples=min_samples,
                       metric="precomputed").fit(distances)
    return {"labels": model.labels_, "eps": float(eps),
            "core_sample_indices": model.core_sample_indices_}


def fit_knn(graph: KNNGraph, method: str, n_clusters=None, *, random_state=None,
            **options) -> dict:
    """:func:`omnifc.cluster` on a :class:`KNNGraph`: ``"spectral"`` or ``"dbscan"``, in
    the rows' own order (there is no full D for a canonical order); labels renumbered by
    first appearance (-1 is DBSCAN noise)."""
    import inspect

    from ._common import as_generator, check_n_clusters, relabel

    if method not in KNN_METHODS:
        raise ParameterError(f"a k-NN graph supports methods {list(KNN_METHODS)}; method "
                             f"{method!r} needs the full D (layout = 'full') or D[:, L] "
                             f"('kmeans' on a landmarks result)")
    function = knn_spectral if method == "spectral" else knn_dbscan
    accepted = [p for p in inspect.signature(function).parameters
                if p not in ("graph", "n_clusters", "rng")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ParameterError(f"method {method!r} on a k-NN graph does not take option(s) "
                             f"{unknown}; it takes {accepted}")
    if method == "spectral":
        if n_clusters is None:
            raise ParameterError("method 'spectral' needs n_clusters")
        n_clusters = check_n_clusters(n_clusters, graph.n)
    elif n_clusters is not None:
        check_n_clusters(n_clusters, graph.n)
    details = function(graph, n_clusters, as_generator(random_state), **options)
    details["labels"] = relabel(details["labels"])
    found = len(set(details["labels"].tolist()) - {-1})
    logger.debug("%s on a %d-NN graph of %d rows: %d clusters", method, graph.n_neighbors,
                 graph.n, found)
    return details

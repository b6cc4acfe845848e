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

from ._landmarks import _Columns, landmark_mds

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

    reader = _Columns(columns, landmarks)  # D[:, L] is read by row blocks, never whole
    index, n = reader.index, reader.shape[0]
    count = min(_positive_int(candidates, "candidates"), n - 1)
    if count < 1:
        return np.empty((0, 2), dtype=np.int64)
    embedding = landmark_mds(columns, landmarks, n_components)
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


#: Bytes of D[:, L] rows (plus their pair entries) handled at once by knn_from_entries.
_BLOCK_BYTES = 32 * 2**20


def _smallest(values: np.ndarray, index: np.ndarray, k: int, n: int, axis: int):
    """Positions along ``axis`` of the k smallest entries by (value, index), in order.

    Integer values small enough make one int64 key ``value * n + index`` (argpartition,
    then a sort of the k); otherwise a lexsort on both. Padding entries must carry the
    largest value of their dtype (they sort last either way).
    """
    if np.issubdtype(values.dtype, np.integer) and values.size:
        big = np.iinfo(np.int64).max
        pad = values == np.iinfo(values.dtype).max
        top = int(values[~pad].max()) if (~pad).any() else 0
        if (top + 1) * n < big // 2:
            key = values.astype(np.int64) * n + index
            key[pad] = big
            if key.shape[axis] > k:
                part = np.argpartition(key, k - 1, axis=axis)
                part = part[:k] if axis == 0 else part[:, :k]
            else:
                part = np.broadcast_to(np.arange(key.shape[axis]).reshape(
                    (-1, 1) if axis == 0 else (1, -1)), key.shape).copy()
            order = np.argsort(np.take_along_axis(key, part, axis=axis), axis=axis)
            return np.take_along_axis(part, order, axis=axis)
    order = np.lexsort((index, values), axis=axis)
    return order[:k] if axis == 0 else order[:, :k]


def knn_from_entries(n: int, landmarks, landmark_columns, pairs, pair_distances,
                     n_neighbors: int, *, scale_bits: int = 0) -> KNNGraph:
    """The k-NN graph from the entries of D known exactly: D[:, L] and the listed pairs.

    ``landmark_columns`` and ``pair_distances`` are the integer squared distances (or any
    exact values; ``scale_bits`` q turns integers into data units, ``/ 4^q``). Each row's
    neighbours are ordered by (distance, column index). ParameterError when some row has
    fewer than k known neighbours.

    A landmark row knows its distance to every row (its column of D[:, L]); any other row
    knows its distances to the landmarks and its listed pairs (either direction). D[:, L]
    is read in row blocks (it may be memory-mapped): one pass gives every non-landmark
    row's neighbours and, kept as a running selection, every landmark's; besides the
    (n, k) result only one block and the pair list (CSR) are held.
    """
    n = _positive_int(n, "n", 2)
    k = _positive_int(n_neighbors, "n_neighbors")
    if k > n - 1:
        raise ParameterError(f"n_neighbors must be at most n - 1 = {n - 1}, got {k}")
    landmarks = np.asarray(landmarks, dtype=np.int64).reshape(-1)
    columns = landmark_columns if hasattr(landmark_columns, "shape") and \
        hasattr(landmark_columns, "dtype") else np.asarray(landmark_columns)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    values = np.asarray(pair_distances).reshape(-1)
    if tuple(columns.shape) != (n, landmarks.size) or values.shape != (pairs.shape[0],):
        raise ParameterError(f"expected D[:, L] of shape {(n, landmarks.size)} and one "
                             f"distance per pair ({pairs.shape[0]}), got {columns.shape} "
                             f"and {values.shape}")
    if landmarks.size and (landmarks.min() < 0 or landmarks.max() >= n or
                           np.unique(landmarks).size != landmarks.size):
        raise ParameterError(f"landmarks must be distinct rows in [0, {n})")
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ParameterError(f"pairs must hold rows in [0, {n})")
    exact = np.issubdtype(columns.dtype, np.integer) and np.issubdtype(values.dtype,
                                                                       np.integer)
    dtype = np.dtype(np.int64 if exact else np.float64)
    pad = np.iinfo(dtype).max if exact else np.inf
    is_landmark = np.zeros(n, dtype=bool)
    is_landmark[landmarks] = True
    # the pair entries of the rows that are not landmarks, in both directions, one per
    # (row, column), sorted by row (CSR); a landmark end's entries are in its column
    rows = np.concatenate([pairs[:, 0], pairs[:, 1]])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0]])
    vals = np.concatenate([values, values]).astype(dtype)
    keep = (rows != cols) & ~is_landmark[rows] & ~is_landmark[cols]
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    unique = np.ones(rows.size, dtype=bool)
    unique[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols, vals = rows[unique], cols[unique], vals[unique]
    degree = np.bincount(rows, minlength=n)
    known = np.where(is_landmark, n - 1, degree + landmarks.size)
    if known.min() < k:
        short = int(np.argmin(known))
        raise ParameterError(f"row {short} has {int(known[short])} known neighbours, fewer "
                             f"than n_neighbors = {k}: raise candidates")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = np.empty((n, k), dtype=np.int64)
    chosen = np.empty((n, k), dtype=dtype)
    width = landmarks.size + (int(degree.max()) if degree.size else 0)
    step = max(1, _BLOCK_BYTES // (8 * max(width, 1)))
    # running selection of every landmark's column: (k, L) values and rows
    best_vals = np.full((k, landmarks.size), pad, dtype=dtype)
    best_rows = np.full((k, landmarks.size), n, dtype=np.int64)
    for a in range(0, n, step):
        b = min(n, a + step)
        block = np.asarray(columns[a:b]).astype(dtype)
        # landmarks: merge this block's rows into each column's selection (not itself)
        own = np.arange(a, b, dtype=np.int64)
        lm_block = block.copy()
        lm_block[own[:, None] == landmarks[None, :]] = pad
        stack_vals = np.concatenate([best_vals, lm_block])
        stack_rows = np.concatenate([best_rows, np.broadcast_to(own[:, None],
                                                                lm_block.shape)])
        pick = _smallest(stack_vals, stack_rows, k, n + 1, axis=0)
        best_vals = np.take_along_axis(stack_vals, pick, axis=0)
        best_rows = np.take_along_axis(stack_rows, pick, axis=0)
        # the other rows: their landmark columns and their pairs
        others = np.flatnonzero(~is_landmark[a:b])
        if not others.size:
            continue
        extra = width - landmarks.size
        cand_vals = np.full((others.size, width), pad, dtype=dtype)
        cand_cols = np.full((others.size, width), n, dtype=np.int64)
        cand_vals[:, :landmarks.size] = block[others]
        cand_cols[:, :landmarks.size] = landmarks[None, :]
        if extra:
            global_rows = a + others
            starts, counts = indptr[global_rows], degree[global_rows]
            slot = np.arange(extra)[None, :]
            has = slot < counts[:, None]
            where = (starts[:, None] + slot)[has]
            cand_vals[:, landmarks.size:][has] = vals[where]
            cand_cols[:, landmarks.size:][has] = cols[where]
        pick = _smallest(cand_vals, cand_cols, k, n + 1, axis=1)
        indices[a + others] = np.take_along_axis(cand_cols, pick, axis=1)
        chosen[a + others] = np.take_along_axis(cand_vals, pick, axis=1)
    indices[landmarks] = best_rows.T
    chosen[landmarks] = best_vals.T
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

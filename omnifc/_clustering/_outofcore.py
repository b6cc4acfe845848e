"""The clustering methods on a distance matrix too large for memory (streamed passes).

:func:`omnifc.cluster` runs these instead of the dense ones when D is a
:class:`~omnifc.TiledDistances` (or a store or result holding one) whose dense
processing would not fit the store's memory budget, or when ``out_of_core=True``.
Every function gets the view, the canonical row order ``order`` and works in that order
(row i is data row ``order[i]``), like the dense methods get ``D[order][:, order]``.

- ``kmeans``: classical MDS by a streamed eigensolver (:func:`streamed_mds`, top
  ``n_components`` directions), then Lloyd from k-means++ seeds chosen on D, best of
  ``n_init``. Same labels as the dense method when D has rank <= ``n_components``.
- ``fcm``: fuzzy c-means on the same embedding.
- ``spectral``: spectral clustering on the sparse k-nearest-neighbour graph (union of
  both directions) weighted by the Gaussian affinity exp(-D / (2 sigma^2)), built in one
  pass; sigma by the dense method's "mean" rule (mean pairwise Euclidean distance).
  Differs from the dense method, which uses the full affinity.
- ``dbscan``: DBSCAN on the sparse radius graph sqrt(D) <= eps; the automatic eps is
  computed exactly as the dense method does (k-distance knee, then the midpoint to the
  next distinct distance), so the labels equal the dense method's.
- ``kmedoids``: CLARA (Kaufman and Rousseeuw): PAM on ``n_draws`` random samples of
  ``sample_size`` rows (default max(1000, 40 + 2k)) (each after the first also holds the best medoids so far), each
  candidate scored on all n rows (k rows of D read), best kept. With ``sample_size >= n``
  it is PAM on everything, i.e. the dense method.
- ``hierarchical``, ``nmf``, ``kmeans-rows``: need all of D in memory; a clear error.
"""

from __future__ import annotations

import warnings

import numpy as np

from finite_field import ParameterError

from .._geometry import to_euclidean
from ._common import kmeans_plusplus_indices, seed_from
from ._density import knee_eps
from ._fcm import fcm_points
from ._kmeans import best_lloyd
from ._kmedoids import pam
from ._streamed import PermutedRows, knn_graph, min_above, radius_graph, streamed_mds

__all__ = ["STREAMED", "streamed_function", "knn_affinity", "spectral_on_graph"]


def _gigabytes(n: int, copies: float = 1.0) -> str:
    return f"{copies * 8 * n * n / 1e9:.1f} GB"


def _embedding(view, order, rng, n_components, solver, n_iter, dask=None):
    embedding, values, explained = streamed_mds(view, n_components, rng, solver=solver,
                                                n_iter=n_iter, dask=dask)
    return embedding[order], values, explained


def kmeans_streamed(view, order, n_clusters, rng, *, n_init: int = 10, max_iter: int = 300,
                    tol: float = 0.0, n_components: int = 64, solver: str = "randomized",
                    n_iter: int = 4, dask=None) -> dict:
    # the seeds first, so that they use the generator exactly as the dense method does
    rows = PermutedRows(view, order)
    all_seeds = [kmeans_plusplus_indices(rows, n_clusters, rng) for _ in range(int(n_init))]
    embedding, values, explained = _embedding(view, order, rng, n_components, solver, n_iter,
                                              dask)
    result = best_lloyd(embedding, all_seeds, n_clusters, max_iter=max_iter, tol=tol)
    return result | {"eigenvalues": values, "explained": explained}


def fcm_streamed(view, order, n_clusters, rng, *, fuzzifier: float = 2.0, max_iter: int = 300,
                 tol: float = 1e-6, n_init: int = 1, n_components: int = 64,
                 solver: str = "randomized", n_iter: int = 4, dask=None) -> dict:
    rows = PermutedRows(view, order)
    all_seeds = [kmeans_plusplus_indices(rows, n_clusters, rng) for _ in range(int(n_init))]
    embedding, values, explained = _embedding(view, order, rng, n_components, solver, n_iter,
                                              dask)
    best = None
    for seeds in all_seeds:
        result = fcm_points(embedding, embedding[seeds], fuzzifier=fuzzifier,
                            max_iter=max_iter, tol=tol)
        result["init_indices"] = seeds
        if best is None or result["objective"] < best["objective"]:
            best = result
    best.update(embedding=embedding, eigenvalues=values, explained=explained)
    return best


def knn_affinity(indices: np.ndarray, sq_distances: np.ndarray, sigma: float):
    """Symmetric sparse Gaussian affinity on the union of the k-NN edges (no self-loops)."""
    from scipy import sparse

    n, k = indices.shape
    weights = np.exp(-sq_distances / (2.0 * sigma * sigma)).ravel()
    rows = np.repeat(np.arange(n), k)
    graph = sparse.csr_matrix((weights, (rows, indices.ravel())), shape=(n, n))
    return graph.maximum(graph.T).tocsr()


def spectral_on_graph(affinity, n_clusters, rng, *, n_init: int = 10,
                      assign_labels: str = "kmeans") -> np.ndarray:
    """scikit-learn's SpectralClustering on a precomputed (sparse) affinity."""
    from sklearn.cluster import SpectralClustering

    if n_clusters == 1:
        return np.zeros(affinity.shape[0], dtype=np.int64)
    model = SpectralClustering(n_clusters=n_clusters, affinity="precomputed", n_init=n_init,
                               assign_labels=assign_labels, random_state=seed_from(rng))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "graph is not fully connected"
        model.fit(affinity)
    return model.labels_


def spectral_streamed(view, order, n_clusters, rng, *, n_neighbors: int = 10,
                      bandwidth="mean", bandwidth_scale: float = 1.0, n_init: int = 10,
                      assign_labels: str = "kmeans") -> dict:
    n = view.shape[0]
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    indices, sq, mean = knn_graph(view, n_neighbors, rank=inverse, with_mean=True)
    if isinstance(bandwidth, (int, float)) and not isinstance(bandwidth, bool):
        if not bandwidth > 0:
            raise ParameterError(f"bandwidth must be positive, got {bandwidth}")
        sigma = float(bandwidth) * bandwidth_scale
    elif bandwidth == "mean":
        if not bandwidth_scale > 0:
            raise ParameterError(f"bandwidth_scale must be positive, got {bandwidth_scale}")
        sigma = mean * bandwidth_scale if mean > 0 else 1.0
    else:
        raise ParameterError(f"out of core, bandwidth must be 'mean' or a positive number, "
                             f"got {bandwidth!r} (the median needs all n^2/2 distances)")
    # into canonical order: row i is data row order[i]
    affinity = knn_affinity(inverse[indices[order]], sq[order], sigma)
    labels = spectral_on_graph(affinity, n_clusters, rng, n_init=n_init,
                               assign_labels=assign_labels)
    return {"labels": labels, "bandwidth": sigma, "graph": affinity,
            "n_neighbors": indices.shape[1]}


def dbscan_streamed(view, order, n_clusters=None, rng=None, *, eps=None,
                    min_samples: int = 5) -> dict:
    from sklearn.cluster import DBSCAN

    if isinstance(min_samples, bool) or int(min_samples) < 1:
        raise ParameterError(f"min_samples must be a positive integer, got {min_samples!r}")
    n = view.shape[0]
    if eps is None:
        eps = 1.0
        if n >= 2:
            k = min(max(int(min_samples) - 1, 1), n - 1)
            _, sq = knn_graph(view, k)
            kdist = np.sort(np.sqrt(sq[:, -1]))
            eps = knee_eps(kdist)
            above = min_above(view, eps)
            if above is not None:
                eps = (eps + above) / 2.0
            if not eps > 0:
                eps = above / 2.0 if above is not None else 1.0
    elif not eps > 0:
        raise ParameterError(f"eps must be positive, got {eps}")
    graph = radius_graph(view, float(eps), order=order)
    model = DBSCAN(eps=float(eps), min_samples=int(min_samples), metric="precomputed").fit(graph)
    return {"labels": model.labels_, "eps": float(eps),
            "core_sample_indices": model.core_sample_indices_}


def kmedoids_streamed(view, order, n_clusters, rng, *, squared: bool = False,
                      max_iter: int = 100, sample_size: int | None = None,
                      n_draws: int = 5) -> dict:
    n = view.shape[0]
    rows = PermutedRows(view, order)
    if sample_size is None:
        sample_size = max(1000, 40 + 2 * n_clusters)
    sample_size = int(sample_size)
    if sample_size < n_clusters:
        raise ParameterError(f"sample_size must be at least n_clusters = {n_clusters}, got "
                             f"{sample_size}")

    def dissimilarity(block):
        return block if squared else to_euclidean(block)

    def score(medoids):
        to_medoids = dissimilarity(rows.take_rows(medoids))  # (k, n): D is symmetric
        return float(to_medoids.min(axis=0).sum()), to_medoids

    if sample_size >= n:
        draws = [np.arange(n)]
    else:
        draws = [None] * int(n_draws)
    best = None
    for draw in draws:
        if draw is None:
            keep = np.array([], dtype=np.int64) if best is None else best[1]
            others = np.setdiff1d(np.arange(n), keep)
            extra = rng.choice(others, size=sample_size - keep.size, replace=False)
            draw = np.sort(np.concatenate([keep, extra]))
        sub = dissimilarity(rows.take_rows(draw)[:, draw])
        medoids = draw[pam(sub, n_clusters, max_iter=max_iter)["medoid_indices"]]
        cost, to_medoids = score(medoids)
        if best is None or cost < best[0]:
            best = (cost, medoids, to_medoids)
    cost, medoids, to_medoids = best
    return {"labels": np.argmin(to_medoids, axis=0), "medoid_indices": medoids,
            "inertia": cost, "sample_size": min(sample_size, n)}


def _needs_memory(method: str, alternatives: str):
    def refuse(view, order, n_clusters=None, rng=None, **options):
        n = view.shape[0]
        raise ParameterError(
            f"method {method!r} needs all of D in memory (n x n float64 is "
            f"{_gigabytes(n)} for n = {n}, and the method makes copies), more than the memory budget of {view.store.memory_budget / 1e9:.1f} GB;"
            f" use {alternatives} (streamed), or raise memory_budget")
    return refuse


#: The streamed implementation of each method (or a function raising a clear error).
STREAMED = {
    "kmeans": kmeans_streamed,
    "fcm": fcm_streamed,
    "spectral": spectral_streamed,
    "dbscan": dbscan_streamed,
    "kmedoids": kmedoids_streamed,
    "hierarchical": _needs_memory("hierarchical", "'kmeans', 'spectral', 'dbscan' or "
                                  "'kmedoids'"),
    "nmf": _needs_memory("nmf", "'spectral' or 'kmeans'"),
    "kmeans-rows": _needs_memory("kmeans-rows", "'kmeans' (exact k-means via streamed MDS)"),
}


def streamed_function(method: str):
    return STREAMED[method]

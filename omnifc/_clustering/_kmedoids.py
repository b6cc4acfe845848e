"""K-medoids by PAM (BUILD then SWAP) on sqrt(D), the Euclidean distances.

K-medoids minimises sum_i min_k dist(x_i, m_k) over medoids that are data rows. It runs on
the Euclidean distances E = sqrt(D) by default (``squared=True`` uses D itself). BUILD
(Kaufman & Rousseeuw) adds greedily the row that lowers the cost most; SWAP repeatedly
makes the single best (medoid, non-medoid) exchange while it lowers the cost, so the result
is a local optimum for single swaps. Both are deterministic (ties to the lowest index).
The swap gains of all k x n exchanges are computed in O(n^2) per round from the nearest
and second-nearest medoid distances (the FastPAM1 decomposition of Schubert & Rousseeuw).
"""

from __future__ import annotations

import numpy as np

from .._geometry import to_euclidean
from ._progress import Steps

__all__ = ["kmedoids", "pam", "medoid_cost"]


def medoid_cost(dist: np.ndarray, medoids) -> float:
    """sum_i min_k dist[i, medoids[k]]."""
    return float(dist[:, np.asarray(medoids)].min(axis=1).sum())


def _build(dist: np.ndarray, n_clusters: int) -> list[int]:
    first = int(np.argmin(dist.sum(axis=0)))
    medoids = [first]
    nearest = dist[:, first].copy()
    for _ in range(1, n_clusters):
        gains = np.maximum(nearest[:, None] - dist, 0.0).sum(axis=0)
        gains[medoids] = -np.inf
        best = int(np.argmax(gains))
        medoids.append(best)
        nearest = np.minimum(nearest, dist[:, best])
    return medoids


def pam(dist: np.ndarray, n_clusters: int, *, max_iter: int = 100) -> dict:
    """PAM on a precomputed dissimilarity matrix ``dist`` (n, n)."""
    dist = np.asarray(dist, dtype=np.float64)
    n = dist.shape[0]
    medoids = _build(dist, n_clusters)
    n_iter = 0
    if n_clusters < n:
        steps = Steps("k-medoids", "swap round", at_most=int(max_iter))
        for n_iter in range(1, int(max_iter) + 1):
            steps.step(n_iter)
            to_medoids = dist[:, medoids]                       # (n, k)
            order = np.argsort(to_medoids, axis=1, kind="stable")
            nearest_k = order[:, 0]
            d1 = to_medoids[np.arange(n), nearest_k]
            d2 = (to_medoids[np.arange(n), order[:, 1]] if n_clusters > 1
                  else np.full(n, np.inf))
            # Removing nothing, adding h: every point may move to h.
            base = np.minimum(dist - d1[:, None], 0.0).sum(axis=0)    # (n,) over h
            best_gain, best_pair = 0.0, None
            for k in range(n_clusters):
                members = nearest_k == k
                sub = dist[members]                                # (n_k, n) rows j, cols h
                # points served by medoid k go to min(h, second nearest) instead
                corrected = (np.minimum(sub, d2[members, None]) - d1[members, None]
                             - np.minimum(sub - d1[members, None], 0.0)).sum(axis=0)
                delta = base + corrected
                delta[medoids] = np.inf
                h = int(np.argmin(delta))
                if delta[h] < best_gain - 1e-12 * max(1.0, abs(d1.sum())):
                    best_gain, best_pair = float(delta[h]), (k, h)
            if best_pair is None:
                break
            medoids[best_pair[0]] = best_pair[1]
    medoids = np.asarray(medoids, dtype=np.int64)
    labels = np.argmin(dist[:, medoids], axis=1)
    return {"labels": labels, "medoid_indices": medoids, "inertia": medoid_cost(dist, medoids),
            "n_iter": n_iter}


def kmedoids(distances: np.ndarray, n_clusters: int, rng=None, *, squared: bool = False,
             max_iter: int = 100) -> dict:
    """PAM on sqrt(D) (or on D with ``squared=True``). ``rng`` is unused: PAM is deterministic."""
    dist = distances if squared else to_euclidean(distances)
    return pam(dist, n_clusters, max_iter=max_iter)

"""Fuzzy c-means (Bezdek) on the classical-MDS embedding of D.

FCM uses only distances to weighted means, so, like k-means, it is invariant to the
rigid motion that classical MDS leaves undetermined: run on the embedding with seeds
``Y[idx]`` it gives the memberships it would give on the plaintext rows seeded with
``X[idx]``. Seeds are data rows chosen by k-means++ on D.

Iteration (fuzzifier m > 1): u_ik = 1 / sum_j (|x_i - c_k| / |x_i - c_j|)^(2/(m-1)),
c_k = sum_i u_ik^m x_i / sum_i u_ik^m, until the largest membership change is below
``tol`` or ``max_iter`` rounds. A point that coincides with centres splits its membership
equally between them.
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

from .._geometry import classical_mds
from ._common import kmeans_plusplus_indices
from ._progress import Steps, started

__all__ = ["fuzzy_cmeans", "fcm_points", "fcm_memberships", "fcm_objective"]


def _sq_distances(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    sq = ((points * points).sum(axis=1)[:, None] + (centers * centers).sum(axis=1)[None, :]
          - 2.0 * points @ centers.T)
    return np.maximum(sq, 0.0)


def fcm_memberships(points: np.ndarray, centers: np.ndarray, fuzzifier: float) -> np.ndarray:
    """Membership matrix u (n, k) of points to centres; rows sum to 1."""
    sq = _sq_distances(points, centers)
    zero = sq <= 0
    out = np.empty_like(sq)
    hit = zero.any(axis=1)
    if hit.any():
        out[hit] = zero[hit] / zero[hit].sum(axis=1, keepdims=True)
    rest = ~hit
    if rest.any():
        # u_ik = d_ik^(-1/(m-1)) / sum_j d_ij^(-1/(m-1)) with d squared distances
        power = sq[rest] ** (-1.0 / (fuzzifier - 1.0))
        out[rest] = power / power.sum(axis=1, keepdims=True)
    return out


def fcm_objective(points, centers, memberships, fuzzifier) -> float:
    """J_m = sum_ik u_ik^m |x_i - c_k|^2."""
    sq = _sq_distances(points, centers)
    return float((memberships ** fuzzifier * sq).sum())


def fcm_points(points: np.ndarray, init_centers: np.ndarray, *, fuzzifier: float = 2.0,
               max_iter: int = 300, tol: float = 1e-6) -> dict:
    """Fuzzy c-means on explicit points from given initial centres."""
    if not fuzzifier > 1.0:
        raise ParameterError(f"fuzzifier m must be > 1, got {fuzzifier}")
    points = np.asarray(points, dtype=np.float64)
    centers = np.asarray(init_centers, dtype=np.float64).copy()
    memberships = fcm_memberships(points, centers, fuzzifier)
    n_iter = 0
    steps = Steps("fuzzy c-means", "iteration", at_most=int(max_iter))
    for n_iter in range(1, int(max_iter) + 1):
        steps.step(n_iter)
        weights = memberships ** fuzzifier
        centers = (weights.T @ points) / weights.sum(axis=0)[:, None]
        updated = fcm_memberships(points, centers, fuzzifier)
        change = float(np.abs(updated - memberships).max())
        memberships = updated
        if change < tol:
            break
    return {"labels": memberships.argmax(axis=1), "memberships": memberships,
            "cluster_centers": centers, "n_iter": n_iter,
            "objective": fcm_objective(points, centers, memberships, fuzzifier)}


def fuzzy_cmeans(distances: np.ndarray, n_clusters: int, rng: np.random.Generator, *,
                 fuzzifier: float = 2.0, max_iter: int = 300, tol: float = 1e-6,
                 n_init: int = 1) -> dict:
    """FCM on classical_mds(D), seeded with k-means++ rows; best objective of ``n_init``."""
    started("fuzzy c-means", f"classical MDS of the {len(distances)} x {len(distances)} "
                             "matrix")
    embedding = classical_mds(distances)
    best = None
    for _ in range(int(n_init)):
        seeds = kmeans_plusplus_indices(distances, n_clusters, rng)
        result = fcm_points(embedding, embedding[seeds], fuzzifier=fuzzifier,
                            max_iter=max_iter, tol=tol)
        result["init_indices"] = seeds
        if best is None or result["objective"] < best["objective"]:
            best = result
    best["embedding"] = embedding
    return best

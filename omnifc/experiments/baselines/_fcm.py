"""Federated fuzzy c-means (FFCM, Stallmann & Wilbik 2022), the federated-averaging variant."""

from __future__ import annotations

import numpy as np

from ..._clustering._fcm import fcm_memberships

__all__ = ["federated_fcm"]


def federated_fcm(parts, n_clusters: int, *, fuzzifier: float = 2.0, rounds: int = 100,
                  tol: float = 1e-6, seed: int = 0) -> np.ndarray:
    """FFCM baseline (Stallmann & Wilbik 2022, the federated-averaging variant).

    The server broadcasts c centres; every party computes its memberships and returns, per
    centre, ``sum_i u_ik^m x_i`` and ``sum_i u_ik^m``; the server divides the totals. Seeds:
    c distinct rows of the parties drawn with ``seed``. Returns the labels of the stacked
    rows (largest membership). The server learns per-party, per-cluster weighted sums.
    """
    x = np.concatenate(parts)
    rng = np.random.default_rng(seed)
    centers = x[rng.choice(x.shape[0], size=n_clusters, replace=False)].copy()
    for _ in range(int(rounds)):
        num = np.zeros_like(centers)
        den = np.zeros(n_clusters)
        for part in parts:
            u = fcm_memberships(part, centers, fuzzifier) ** fuzzifier
            num += u.T @ part
            den += u.sum(axis=0)
        new = num / np.maximum(den, 1e-300)[:, None]
        moved = float(np.abs(new - centers).max())
        centers = new
        if moved < tol:
            break
    return np.argmax(fcm_memberships(x, centers, fuzzifier), axis=1)


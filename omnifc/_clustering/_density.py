"""DBSCAN on the Euclidean distances sqrt(D), with an automatic eps.

When ``eps`` is not given it is chosen from the sorted k-distance curve, k = min_samples - 1
(the distance of every row to its (min_samples - 1)-th nearest other row; scikit-learn
counts the row itself in ``min_samples``): eps is the curve's knee found by
``kneed.KneeLocator(curve="convex", direction="increasing")``, or its 90th percentile when
no knee is found. The value is then moved to the midpoint between that distance and the
next larger distinct pairwise distance, so that no pair sits exactly on the eps boundary
(identical results whatever the rounding of equal distances). ``n_clusters`` is not used:
DBSCAN finds the number of clusters, and labels noise -1.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from finite_field import ParameterError

from .._geometry import to_euclidean

__all__ = ["dbscan", "auto_eps", "knee_eps", "kneedle_knee", "warn_if_degenerate"]

logger = logging.getLogger(__name__)


def warn_if_degenerate(labels, eps: float, min_samples: int) -> None:
    """Log a warning when DBSCAN found no cluster (all noise) or a single one.

    Either result carries no grouping (ARI 0 against any labelling with several classes),
    yet it is a valid DBSCAN outcome, so it is a warning, not an error. It says which way
    to move ``eps`` or ``min_samples``.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n < 2:
        return
    noise = int((labels < 0).sum())
    found = len(set(labels[labels >= 0].tolist()))
    if found == 0:
        logger.warning("DBSCAN (eps=%.4g, min_samples=%d) labelled all %d rows as noise: no "
                       "cluster found; pass a larger eps or a smaller min_samples "
                       "(options={'eps': ..., 'min_samples': ...}), or a method that takes "
                       "n_clusters such as 'kmeans' or 'spectral'", eps, min_samples, n)
    elif found == 1:
        logger.warning("DBSCAN (eps=%.4g, min_samples=%d) put %s%d rows in one cluster "
                       "(%d noise): no grouping found; pass a smaller eps (options={'eps': "
                       "...}), or a method that takes n_clusters such as 'kmeans' or "
                       "'spectral'", eps, min_samples, "all " if noise == 0 else "",
                       n - noise, noise)


def auto_eps(dist: np.ndarray, min_samples: int) -> float:
    """The automatic eps described in the module docstring (``dist`` = sqrt(D))."""
    n = dist.shape[0]
    if n < 2:
        return 1.0
    k = min(max(int(min_samples) - 1, 1), n - 1)
    kdist = np.sort(np.partition(dist, k, axis=1)[:, k])
    eps = knee_eps(kdist)
    values = np.unique(dist[np.triu_indices(n, 1)])
    above = values[values > eps]
    if above.size:
        eps = (eps + float(above[0])) / 2.0
    return eps if eps > 0 else float(above[0]) / 2.0 if above.size else 1.0


def knee_eps(kdist: np.ndarray) -> float:
    """The knee of the sorted k-distance curve ``kdist`` (or its 90th percentile)."""
    n = kdist.shape[0]
    if n >= 3 and kdist[-1] > kdist[0]:
        knee = kneedle_knee(kdist)
        if knee is not None:
            return float(kdist[int(knee)])
    return float(np.percentile(kdist, 90, method="lower"))


def kneedle_knee(curve: np.ndarray):
    """Index of the knee of a sorted increasing curve (``kneed.KneeLocator``, convex and
    increasing, x = 0..n-1), or None when kneed finds none (its warning is silenced)."""
    from kneed import KneeLocator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # kneed warns when it finds no knee
        return KneeLocator(np.arange(curve.shape[0]), curve, curve="convex",
                           direction="increasing").knee


def dbscan(distances: np.ndarray, n_clusters=None, rng=None, *, eps=None,
           min_samples: int = 5) -> dict:
    from sklearn.cluster import DBSCAN

    if isinstance(min_samples, bool) or int(min_samples) < 1:
        raise ParameterError(f"min_samples must be a positive integer, got {min_samples!r}")
    dist = to_euclidean(distances)
    if eps is None:
        eps = auto_eps(dist, min_samples)
    elif not eps > 0:
        raise ParameterError(f"eps must be positive, got {eps}")
    model = DBSCAN(eps=float(eps), min_samples=int(min_samples), metric="precomputed").fit(dist)
    return {"labels": model.labels_, "eps": float(eps),
            "core_sample_indices": model.core_sample_indices_}

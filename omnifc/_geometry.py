"""Euclidean geometry recovered from a squared-distance matrix alone.

D is a Euclidean squared-distance matrix, so classical MDS (``G = -1/2 J D J``) yields a
point set isometric to the data (up to a rigid motion), and distances to centroids of
any subsets follow from D directly:

    ||x - c_A||^2 = mean_{j in A} D_xj - (1 / (2 |A|^2)) sum_{j,k in A} D_jk

Examples
--------
>>> import numpy as np
>>> from omnifc import classical_mds, check_distance_matrix
>>> x = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
>>> D = ((x[:, None] - x[None]) ** 2).sum(-1)
>>> y = classical_mds(check_distance_matrix(D))
>>> np.allclose(((y[:, None] - y[None]) ** 2).sum(-1), D)
True
>>> float(centroid_sq_distances(D, [np.array([1, 2])])[0, 0])
6.25
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError

__all__ = ["check_distance_matrix", "classical_mds", "centroid_sq_distances", "to_euclidean"]


def check_distance_matrix(distances, *, name: str = "D") -> np.ndarray:
    """Validate a squared-distance matrix: square, finite, symmetric, >= 0, zero diagonal.

    Returns it as a float64 array. Raises :class:`InputError` naming what is wrong.
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise InputError(f"{name} must be a square matrix, got shape {d.shape}")
    if d.shape[0] == 0:
        raise InputError(f"{name} is empty")
    if not np.isfinite(d).all():
        raise InputError(f"{name} must be finite; found NaN or inf")
    if (d < 0).any():
        raise InputError(f"{name} must be non-negative; smallest entry is {d.min()}")
    scale = max(1.0, float(np.abs(d).max()))
    if not np.allclose(d, d.T, rtol=0, atol=1e-9 * scale):
        raise InputError(f"{name} must be symmetric; max |D - D^T| = {np.abs(d - d.T).max()}")
    if np.abs(np.diag(d)).max() > 1e-9 * scale:
        raise InputError(f"{name} must have a zero diagonal; max diagonal entry is "
                         f"{np.abs(np.diag(d)).max()}")
    return d


def classical_mds(distances, n_components: int | None = None) -> np.ndarray:
    """Coordinates whose pairwise squared distances are ``distances`` (classical MDS).

    Keeps every direction with a positive eigenvalue (or the top ``n_components``), so for
    a Euclidean D the embedding is isometric to the original points.
    """
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    centered = d - d.mean(axis=0, keepdims=True)
    centered -= centered.mean(axis=1, keepdims=True)
    gram = -0.5 * centered
    gram = (gram + gram.T) / 2
    values, vectors = np.linalg.eigh(gram)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    tolerance = max(n, 1) * np.finfo(np.float64).eps * max(abs(values[0]), 1.0) * 16
    keep = values > tolerance
    if n_components is not None:
        keep[n_components:] = False
    if not keep.any():
        return np.zeros((n, 1))
    return vectors[:, keep] * np.sqrt(values[keep])


def centroid_sq_distances(distances, groups, rows=None) -> np.ndarray:
    """Squared distances from rows to the centroid of each group, from D alone.

    Parameters
    ----------
    distances : ndarray (n, n)
    groups : sequence of index arrays
        Members of each group (non-empty).
    rows : index array, optional
        The rows to measure (all by default).

    Returns
    -------
    ndarray of shape (len(rows), len(groups))
    """
    d = np.asarray(distances, dtype=np.float64)
    rows = np.arange(d.shape[0]) if rows is None else np.asarray(rows)
    out = np.empty((rows.size, len(groups)))
    for k, members in enumerate(groups):
        members = np.asarray(members)
        if members.size == 0:
            raise InputError(f"group {k} is empty")
        within = d[np.ix_(members, members)].sum() / (2.0 * members.size**2)
        out[:, k] = d[np.ix_(rows, members)].mean(axis=1) - within
    return np.maximum(out, 0.0)


def to_euclidean(distances) -> np.ndarray:
    """sqrt(D): the Euclidean distance matrix for ``metric="precomputed"`` estimators."""
    return np.sqrt(np.maximum(np.asarray(distances, dtype=np.float64), 0.0))

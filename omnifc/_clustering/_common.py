"""Shared pieces of the clustering methods: validation, row order, seeding, bandwidth.

Every method receives D, the matrix of *squared* Euclidean distances exactly as
:func:`omnifc.secure_distance_matrix` returns it.
"""

from __future__ import annotations

import numbers

import numpy as np

from finite_field import ParameterError

from .._geometry import check_distance_matrix

__all__ = ["validate", "check_n_clusters", "canonical_order", "kmeans_plusplus_indices",
           "gaussian_bandwidth", "gaussian_affinity", "as_generator", "relabel"]


def validate(distances, n_clusters=None, *, name: str = "D") -> np.ndarray:
    """Check D (square, finite, symmetric, >= 0, zero diagonal) and ``n_clusters``."""
    matrix = check_distance_matrix(distances, name=name)
    if n_clusters is not None:
        check_n_clusters(n_clusters, matrix.shape[0])
    return matrix


def check_n_clusters(n_clusters, n_samples: int) -> int:
    if (isinstance(n_clusters, bool) or not isinstance(n_clusters, numbers.Integral)
            or not 1 <= n_clusters <= n_samples):
        raise ParameterError(f"n_clusters must be an integer in [1, {n_samples}] (the number "
                             f"of rows), got {n_clusters!r}")
    return int(n_clusters)


def as_generator(random_state) -> np.random.Generator:
    """A numpy Generator from None, an int or a Generator (experiments, not secrets)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(2**31))
    raise ParameterError(f"random_state must be None, an int or a numpy Generator, "
                         f"got {type(random_state).__name__}")


def seed_from(random_state) -> int:
    """An int seed for scikit-learn routines, derived from ``random_state``."""
    return int(as_generator(random_state).integers(2**31 - 1))


def canonical_order(distances) -> np.ndarray:
    """A row order that depends only on the set of points, not on how rows were listed.

    Rows are sorted by the sum of their sorted distances, ties broken by the sorted row
    itself. Clustering ``D[order][:, order]`` and mapping labels back makes every method
    invariant to a permutation of the rows (e.g. to how the rows were split across
    parties): the same random seed then picks the same points. Rows that tie exactly
    (identical sorted distance rows, e.g. duplicate points) are interchangeable.
    Cost: one sort of each row, O(n^2 log n) time and n^2 floats of memory (for an
    out-of-core :class:`~omnifc.TiledDistances`, one row block at a time).
    """
    from .._store import as_tiled

    tiled = as_tiled(distances)
    if tiled is not None:
        from ._streamed import canonical_order_streamed

        return canonical_order_streamed(tiled)
    matrix = np.asarray(distances, dtype=np.float64) + 0.0  # turns -0.0 into +0.0
    rows = np.sort(matrix, axis=1)
    sums = rows.sum(axis=1)
    keys = [(sums[i], rows[i].tobytes()) for i in range(matrix.shape[0])]
    return np.asarray(sorted(range(matrix.shape[0]), key=keys.__getitem__), dtype=np.int64)


def kmeans_plusplus_indices(distances, n_clusters: int, rng: np.random.Generator,
                            n_local_trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding computed from D alone; returns row indices.

    Same rule as scikit-learn's ``kmeans_plusplus`` (first seed uniform, then
    ``2 + log k`` candidates drawn with probability proportional to the squared distance
    to the nearest seed, keeping the one that lowers the potential most), but every
    quantity is an entry of D, so the seeds are data rows and the same indices can seed
    k-means on the plaintext vectors.
    """
    # a row provider (rows of an out-of-core D, read on demand) or a dense matrix
    matrix = (distances if hasattr(distances, "take_rows")
              else np.asarray(distances, dtype=np.float64))
    n = matrix.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    centers = [int(rng.integers(n))]
    closest = matrix[centers[0]].copy()
    potential = closest.sum()
    for _ in range(1, n_clusters):
        if potential <= 0:
            # every remaining point coincides with a seed: take unused rows in order
            unused = np.setdiff1d(np.arange(n), centers)
            centers.append(int(unused[0]))
            continue
        draws = rng.random(n_local_trials) * potential
        candidates = np.searchsorted(np.cumsum(closest), draws)
        candidates = np.minimum(candidates, n - 1)
        trial = np.minimum(closest[None, :], matrix[candidates])
        potentials = trial.sum(axis=1)
        best = int(np.argmin(potentials))
        centers.append(int(candidates[best]))
        closest, potential = trial[best], potentials[best]
    return np.asarray(centers, dtype=np.int64)


def gaussian_bandwidth(distances, rule="mean", scale: float = 1.0) -> float:
    """sigma of the Gaussian affinity exp(-D / (2 sigma^2)).

    ``rule="mean"`` follows FedSC (``sigma2_estimator``): sigma = scale * the mean
    pairwise Euclidean distance (off-diagonal mean of sqrt(D)); ``"median"`` uses the
    median instead; a positive number is used as sigma directly.
    """
    if isinstance(rule, numbers.Real) and not isinstance(rule, bool):
        if not rule > 0:
            raise ParameterError(f"bandwidth must be positive, got {rule}")
        return float(rule) * scale
    matrix = np.asarray(distances, dtype=np.float64)
    n = matrix.shape[0]
    if n < 2:
        return 1.0
    upper = np.sqrt(matrix[np.triu_indices(n, 1)])
    if rule == "mean":
        sigma = float(upper.mean())
    elif rule == "median":
        sigma = float(np.median(upper))
    else:
        raise ParameterError(f"bandwidth must be 'mean', 'median' or a positive number, "
                             f"got {rule!r}")
    if not scale > 0:
        raise ParameterError(f"bandwidth_scale must be positive, got {scale}")
    sigma *= scale
    return sigma if sigma > 0 else 1.0


def gaussian_affinity(distances, sigma: float) -> np.ndarray:
    """exp(-gamma D) with gamma = 1 / (2 sigma^2), written as scikit-learn's rbf_kernel."""
    gamma = 1.0 / (2.0 * sigma * sigma)
    k = np.asarray(distances, dtype=np.float64) * -gamma
    np.exp(k, out=k)
    return k


def relabel(labels) -> np.ndarray:
    """Cluster labels renumbered 0..k-1 by first appearance; -1 (noise) kept."""
    labels = np.asarray(labels)
    out = np.full(labels.shape, -1, dtype=np.int64)
    mapping: dict = {}
    for i, value in enumerate(labels.tolist()):
        if value == -1:
            continue
        if value not in mapping:
            mapping[value] = len(mapping)
        out[i] = mapping[value]
    return out

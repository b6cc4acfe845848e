"""CLoVE's synthetic data: the paper's mixture of linear regressions and its models.

>>> from omnifc.adapters import clove
>>> clients, truth, thetas = clove.linear_mixture(n_clusters=2, clients_per_cluster=2,
...                                               dim=3, train_points=5, seed=0)
>>> len(clients), truth.tolist(), thetas.shape
(4, [0, 0, 1, 1], (2, 3))
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

__all__ = ["linear_mixture", "random_unit_models", "true_models"]


def _rng(seed):
    return np.random.Generator(np.random.PCG64(seed))


def true_models(n_clusters: int, dim: int, delta: float, rng, *, spread: float = 5.0,
                max_attempts: int = 1_000_000) -> np.ndarray:
    """Unit-norm models with pairwise distances in [delta, spread*delta] (``generate_thetas``)."""
    first = rng.standard_normal(dim)
    vectors = [first / np.linalg.norm(first)]
    for _ in range(max_attempts):
        if len(vectors) == n_clusters:
            break
        step = rng.standard_normal(dim)
        candidate = vectors[rng.integers(len(vectors))] + delta * step / np.linalg.norm(step)
        candidate /= np.linalg.norm(candidate)
        gaps = np.linalg.norm(np.array(vectors) - candidate, axis=1)
        if np.all(gaps >= delta) and np.all(gaps <= spread * delta):
            vectors.append(candidate)
    if len(vectors) < n_clusters:
        raise ParameterError(f"could not draw {n_clusters} models at separation {delta}")
    return np.array(vectors)


def random_unit_models(count: int, dim: int, *, seed: int) -> np.ndarray:
    """Random unit-norm initial models (the paper's initialization)."""
    w = _rng(seed).standard_normal((count, dim))
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def linear_mixture(*, n_clusters: int = 5, clients_per_cluster: int = 5, dim: int = 20,
                   delta: float = 1.0, train_points: int = 900, noise: float = 1e-4,
                   seed: int = 0):
    """The paper's mixture of linear regressions (``utils/linear.py``, runs 800-804).

    Returns ``(clients, truth, thetas)``: per client ``(x, y)`` with ``x ~ N(0, I_d)``,
    ``y = x . theta*_k + N(0, noise^2)``; the true cluster per client; the true models.
    900 training points per client = 90 % of 1000, as in the paper.
    """
    rng = _rng(seed)
    thetas = true_models(n_clusters, dim, delta, rng)
    clients, truth = [], []
    for k in range(n_clusters):
        for _ in range(clients_per_cluster):
            x = rng.standard_normal((train_points, dim))
            clients.append((x, x @ thetas[k] + noise * rng.standard_normal(train_points)))
            truth.append(k)
    return clients, np.array(truth), thetas

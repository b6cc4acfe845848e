"""k-means from D: exact (classical MDS then Lloyd) and the paper's rows-of-D surrogate.

D of Euclidean data is itself Euclidean, so classical MDS (G = -1/2 J D J) returns points
``Y`` isometric to the data rows. Lloyd's algorithm only uses distances between points and
means of points, both preserved by an isometry, so Lloyd on ``Y`` started from the rows
``Y[idx]`` produces the same labels as Lloyd on the plaintext rows started from ``X[idx]``.
The seeds are chosen by k-means++ on D (:func:`kmeans_plusplus_indices`), so they are
data rows and the same ``idx`` can seed either run. ``tol=0`` (the default) runs Lloyd
until the labels stop changing: scikit-learn scales ``tol`` by the mean per-feature
variance, which depends on the number of coordinates and would differ between ``Y`` and
``X`` (a rank-deficient ``X`` has more columns than ``Y``).
"""

from __future__ import annotations

import warnings

import numpy as np

from finite_field import ParameterError

from .._geometry import check_distance_matrix, classical_mds
from ._common import kmeans_plusplus_indices, seed_from
from ._progress import Steps, started

__all__ = ["exact_kmeans", "rows_kmeans", "kmeans_from_distances"]


def exact_kmeans(distances: np.ndarray, n_clusters: int, rng: np.random.Generator, *,
                 n_init: int = 10, max_iter: int = 300, tol: float = 0.0) -> dict:
    """Lloyd's k-means on the classical-MDS embedding of D; best of ``n_init`` seedings."""
    started("k-means", f"classical MDS of the {len(distances)} x {len(distances)} matrix")
    embedding = classical_mds(distances)
    seed_sets = [kmeans_plusplus_indices(distances, n_clusters, rng) for _ in range(int(n_init))]
    return best_lloyd(embedding, seed_sets, n_clusters, max_iter=max_iter, tol=tol)


def best_lloyd(embedding: np.ndarray, seed_sets, n_clusters: int, *, max_iter: int = 300,
               tol: float = 0.0) -> dict:
    """Lloyd's algorithm on ``embedding`` from each set of seed rows; the run with the least
    inertia (the first on ties). Shared by the dense and the out-of-core k-means, which
    differ only in how they get the embedding and the seeds."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    best = None
    steps = Steps("k-means", "Lloyd run", total=len(seed_sets))
    for run, seeds in enumerate(seed_sets, 1):
        steps.step(run)
        model = KMeans(n_clusters=n_clusters, init=embedding[seeds], n_init=1,
                       max_iter=max_iter, tol=tol, algorithm="lloyd")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(embedding)
        if best is None or model.inertia_ < best[0].inertia_:
            best = (model, seeds)
    model, seeds = best
    return {"labels": model.labels_, "init_indices": seeds, "inertia": float(model.inertia_),
            "cluster_centers": model.cluster_centers_, "embedding": embedding,
            "n_iter": int(model.n_iter_)}


def rows_kmeans(distances: np.ndarray, n_clusters: int, rng: np.random.Generator, *,
                n_init: int = 10, max_iter: int = 300) -> dict:
    """The OmniFC paper's surrogate: scikit-learn k-means on the rows of D as features."""
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=n_clusters, n_init=n_init, max_iter=max_iter,
                   random_state=seed_from(rng)).fit(distances)
    return {"labels": model.labels_, "inertia": float(model.inertia_),
            "cluster_centers": model.cluster_centers_, "n_iter": int(model.n_iter_)}


# The adapters' k-means (moved from omnifc/adapters/_common.py): scikit-learn's own seeding
# and n_init on the MDS coordinates, so an adapter reproduces its paper's
# ``KMeans(n_clusters, random_state, n_init)`` call. It differs from exact_kmeans (k-means++
# on D, tol=0, best of n_init), which omnifc.cluster uses; both are kept, each for its callers.

def kmeans_from_distances(distances, n_clusters: int, *, random_state=0,
                          n_init="auto") -> np.ndarray:
    """sklearn ``KMeans`` on classical-MDS coordinates of D (isometric to the vectors).

    k-means depends on the data only through Euclidean geometry, so this is the paper's
    ``KMeans(n_clusters, random_state, n_init)`` on the protected vectors up to a rigid
    motion (k-means++ picks the same seeds; tests check the labels agree).
    """
    matrix = check_distance_matrix(distances)
    coords = classical_mds(matrix)
    n_clusters = int(n_clusters)
    if not 1 <= n_clusters <= matrix.shape[0]:
        raise ParameterError(f"n_clusters must be in [1, {matrix.shape[0]}], got {n_clusters}")
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=n_clusters, random_state=random_state, n_init=n_init)
    return model.fit(coords).labels_.astype(np.int64)

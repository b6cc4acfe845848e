"""``omnifc.cluster``: any of the supported clusterings on a squared-distance matrix."""

from __future__ import annotations

import inspect
import logging

import numpy as np

from finite_field import ParameterError

from ._common import as_generator, canonical_order, check_n_clusters, relabel, validate
from ._density import dbscan, warn_if_degenerate
from ._fcm import fuzzy_cmeans
from ._hierarchical import hierarchical
from ._kmeans import exact_kmeans, rows_kmeans
from ._kmedoids import kmedoids
from ._outofcore import streamed_function
from ._spectral import nmf, spectral

__all__ = ["cluster", "fit_method", "METHODS"]

logger = logging.getLogger(__name__)

_FUNCTIONS = {
    "kmeans": exact_kmeans,
    "kmeans-rows": rows_kmeans,
    "spectral": spectral,
    "fcm": fuzzy_cmeans,
    "nmf": nmf,
    "dbscan": dbscan,
    "hierarchical": hierarchical,
    "kmedoids": kmedoids,
}

#: The method names accepted by :func:`cluster`.
METHODS = tuple(_FUNCTIONS)

# Result entries holding row indices: mapped back to the caller's row order.
_INDEX_KEYS = ("init_indices", "medoid_indices", "core_sample_indices")
# Result entries with one row per data row: reordered back.
_ROW_KEYS = ("memberships", "embedding", "weights")


def fit_method(distances, method: str, n_clusters=None, *, random_state=None,
               canonical: bool = True, out_of_core: bool | None = None, **options) -> dict:
    """Run one method and return its details (``labels`` plus method-specific entries).

    Row-indexed results are in the caller's row order. See :func:`cluster`.
    """
    if method not in _FUNCTIONS:
        raise ParameterError(f"unknown clustering method {method!r}; choose one of "
                             f"{list(METHODS)}")
    from ._neighbours import KNNGraph, fit_knn

    if isinstance(distances, KNNGraph):  # the exact k-NN graph (secure_knn_graph)
        return fit_knn(distances, method, n_clusters, random_state=random_state, **options)
    if getattr(distances, "landmarks", None) is not None or \
            getattr(distances, "pairs", None) is not None:  # a layout's result
        from ._landmarks import fit_layout

        return fit_layout(distances, method, n_clusters, random_state=random_state,
                          **options)
    from .._store import as_tiled  # here: the method names load without the tile store

    tiled = as_tiled(distances)
    if out_of_core not in (None, True, False):
        raise ParameterError(f"out_of_core must be None, True or False, got {out_of_core!r}")
    if options.get("dask") not in (None, False):  # the MDS products on Dask: streamed
        if method not in ("kmeans", "fcm"):
            raise ParameterError(f"dask= runs the streamed MDS of 'kmeans' and 'fcm' on "
                                 f"Dask; method {method!r} does not use it")
        if tiled is None or out_of_core is False:
            raise ParameterError("dask= needs an out-of-core result (a DistanceStore, its "
                                 "view or a DistanceResult holding one) and "
                                 "out_of_core not False")
        out_of_core = True
    if tiled is None and out_of_core:
        raise ParameterError("out_of_core=True needs a DistanceStore, TiledDistances or a "
                             "DistanceResult holding one (omnifc.plaintext_distance_store, "
                             "DistanceAccumulator)")
    streamed = tiled is not None and (out_of_core if out_of_core is not None
                                      else not tiled.fits_in_memory())
    if tiled is not None and not streamed:
        distances = np.asarray(tiled)  # fits the memory budget: the dense methods
    if streamed:
        distances = tiled
    else:
        distances = validate(distances)
    n = distances.shape[0]
    if method == "dbscan":
        if n_clusters is not None:
            check_n_clusters(n_clusters, n)
    else:
        if n_clusters is None:
            raise ParameterError(f"method {method!r} needs n_clusters")
        n_clusters = check_n_clusters(n_clusters, n)
    function = streamed_function(method) if streamed else _FUNCTIONS[method]
    parameters = inspect.signature(function).parameters
    accepted = [p for p in parameters
                if p not in ("distances", "view", "order", "n_clusters", "rng")]
    refuses = any(v.kind is inspect.Parameter.VAR_KEYWORD for v in parameters.values())
    unknown = sorted(set(options) - set(accepted))
    if unknown and not refuses:  # (a method that refuses out of core takes anything)
        where = " out of core" if streamed else ""
        raise ParameterError(f"method {method!r} does not take option(s) {unknown}{where}; it "
                             f"takes {accepted}")
    order = canonical_order(distances) if canonical else np.arange(n)
    if streamed:
        logger.info("%s on %d rows out of core (D %s)", method, n,
                    "on disk" if tiled.store.on_disk else "in memory")
        details = function(distances, order, n_clusters, as_generator(random_state), **options)
    else:
        permuted = distances[np.ix_(order, order)]
        details = function(permuted, n_clusters, as_generator(random_state), **options)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    raw = np.asarray(details["labels"])
    labels = relabel(raw)
    details["labels"] = labels[inverse]
    _renumber_per_cluster(details, raw, labels)
    for key in _INDEX_KEYS:
        if key in details:
            details[key] = order[np.asarray(details[key], dtype=np.int64)]
    for key in _ROW_KEYS:
        if key in details:
            details[key] = np.asarray(details[key])[inverse]
    if "affinity" in details:
        details["affinity"] = details["affinity"][np.ix_(inverse, inverse)]
    if "graph" in details:  # sparse
        details["graph"] = details["graph"][inverse][:, inverse]
    details["order"] = order
    if method == "dbscan":
        warn_if_degenerate(details["labels"], details["eps"],
                           options.get("min_samples", 5))
    found = len(set(details["labels"].tolist()) - {-1})
    logger.debug("%s on %d rows: %d clusters", method, n, found)
    return details


# Result entries with one entry (row or column) per cluster, renumbered with the labels.
_CLUSTER_ROW_KEYS = ("medoid_indices", "cluster_centers", "init_indices")
_CLUSTER_COLUMN_KEYS = ("memberships", "weights")


def _renumber_per_cluster(details: dict, raw: np.ndarray, labels: np.ndarray) -> None:
    """Reorder per-cluster results so that entry j belongs to the cluster labelled j."""
    n_old = max((len(details[k]) for k in _CLUSTER_ROW_KEYS if k in details), default=0)
    n_old = max([n_old] + [details[k].shape[1] for k in _CLUSTER_COLUMN_KEYS if k in details])
    if n_old == 0:
        return
    new_of_old = {}
    for old, new in zip(raw.tolist(), labels.tolist()):
        if new >= 0:
            new_of_old.setdefault(int(old), int(new))
    # clusters that received no rows keep their relative order after the others
    permutation = sorted(range(n_old), key=lambda old: (new_of_old.get(old, n_old), old))
    for key in _CLUSTER_ROW_KEYS:
        if key in details:
            details[key] = np.asarray(details[key])[permutation]
    for key in _CLUSTER_COLUMN_KEYS:
        if key in details:
            details[key] = np.asarray(details[key])[:, permutation]


def cluster(distances, method: str = "kmeans", n_clusters=None, *, random_state=None,
            canonical: bool = True, out_of_core: bool | None = None,
            **options) -> np.ndarray:
    """Cluster the rows of a squared-distance matrix with any supported method.

    Parameters
    ----------
    distances : array-like of shape (n, n), TiledDistances, DistanceStore or DistanceResult
        Squared Euclidean distances, e.g. ``secure_distance_matrix(...).distances``.
        Checked: square, finite, symmetric, non-negative, zero diagonal. An out-of-core
        result (:class:`~omnifc.DistanceStore`, its ``distances`` view, or a
        :class:`~omnifc.DistanceResult` holding one; complete and symmetric by
        construction) is clustered by the dense methods when four n x n float64 copies
        fit its memory budget, and otherwise by the streamed ones (see ``out_of_core``).
        The result of a ``landmarks`` session (D[:, L] with its ``landmarks``, e.g. what
        the coordinator's callback receives) is clustered by ``"kmeans"`` on landmark MDS
        coordinates (:func:`~omnifc._clustering.landmark_kmeans`). A
        :class:`~omnifc.KNNGraph` (:func:`omnifc.secure_knn_graph`) is clustered by
        ``"spectral"`` (``affinity`` "gaussian" or "connectivity" on its symmetric edges)
        or ``"dbscan"`` (on its Euclidean edges).
    method : str
        ``"kmeans"`` exact k-means (classical MDS of D, then Lloyd from k-means++ seeds
        chosen on D; equals k-means on the plaintext rows with the same seed rows),
        ``"kmeans-rows"`` the OmniFC paper's surrogate (k-means on the rows of D),
        ``"spectral"`` (Gaussian affinity exp(-D/(2 sigma^2)), sigma = mean pairwise
        distance by default), ``"fcm"`` fuzzy c-means on the MDS embedding, ``"nmf"`` on
        the Gaussian affinity, ``"dbscan"`` on sqrt(D) with an automatic eps,
        ``"hierarchical"`` scipy linkage on sqrt(D) (Ward by default), ``"kmedoids"``
        PAM on sqrt(D).
    n_clusters : int
        Number of clusters (ignored by DBSCAN, which finds it).
    random_state : None, int or numpy Generator
        Seeds the random choices (seeding, restarts).
    canonical : bool
        Cluster the rows in :func:`canonical_order` and map back (default), so the
        partition does not depend on the order of the rows.
    out_of_core : bool, optional
        For an out-of-core result: force (True) or forbid (False) the streamed methods;
        by default they run when the dense ones would not fit the memory budget. They
        read D one row block at a time (memory O(tile x n)): ``"kmeans"`` and ``"fcm"``
        on a streamed classical MDS (top ``n_components`` = 64 directions by a randomized
        eigensolver, ``solver="lanczos"`` for ARPACK; same labels as the dense method
        when the data span at most that many dimensions), ``"spectral"`` on the sparse
        ``n_neighbors``-nearest-neighbour graph (default 10) with Gaussian weights,
        ``"dbscan"`` on the radius graph (same labels as the dense method),
        ``"kmedoids"`` by CLARA (``sample_size``, ``n_draws``; PAM when the sample holds
        every row). ``"hierarchical"``, ``"nmf"`` and ``"kmeans-rows"`` need D in memory
        and raise :class:`ParameterError` naming the alternatives. The option ``dask``
        (a ``dask.distributed.Client``, a scheduler name or True; ``omnifc[dask]``) runs
        the products of the streamed MDS of ``"kmeans"`` and ``"fcm"`` on Dask, reading
        the store (a Zarr store by ``dask.array.from_zarr``); it implies the streamed
        methods.
    **options
        Method options: ``n_init``, ``max_iter``, ``tol`` (kmeans); ``bandwidth``,
        ``bandwidth_scale``, ``n_init``, ``assign_labels`` (spectral); ``fuzzifier``,
        ``max_iter``, ``tol``, ``n_init`` (fcm); ``representation`` ("affinity"/"rows"),
        ``bandwidth``, ``bandwidth_scale``, ``max_iter`` (nmf); ``eps``, ``min_samples``
        (dbscan); ``linkage`` (hierarchical); ``squared``, ``max_iter`` (kmedoids).

    Returns
    -------
    ndarray of int, shape (n,)
        Cluster labels 0..k-1 (numbered by first appearance in canonical order); -1 is
        DBSCAN noise.

    Examples
    --------
    >>> import numpy as np, omnifc
    >>> x = np.array([[0.0, 0.0], [0.0, 1.0], [9.0, 9.0], [9.0, 8.0]])
    >>> D = ((x[:, None] - x[None]) ** 2).sum(-1)
    >>> omnifc.cluster(D, "kmeans", n_clusters=2, random_state=0).tolist()
    [0, 0, 1, 1]
    >>> omnifc.cluster(D, "hierarchical", n_clusters=2, linkage="average").tolist()
    [0, 0, 1, 1]
    """
    return fit_method(distances, method, n_clusters, random_state=random_state,
                      canonical=canonical, out_of_core=out_of_core, **options)["labels"]

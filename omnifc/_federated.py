"""``FederatedClustering``: secure distance reconstruction, then any clustering on D.

>>> import numpy as np
>>> from omnifc import FederatedClustering
>>> parties = [np.array([[0.0, 0.0], [9.0, 9.0]]), np.array([[0.0, 1.0]]),
...            np.array([[9.0, 8.0], [1.0, 0.0]])]
>>> model = FederatedClustering(method="kmeans", n_clusters=2, bound=16.0,
...                             random_state=0).fit(parties)
>>> model.labels_.tolist()
[0, 1, 0, 1, 0]
>>> [labels.tolist() for labels in model.party_labels_]
[[0, 1], [0], [1, 0]]
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from functools import update_wrapper
from types import MethodType

from finite_field import InputError, ParameterError

from ._clipping import MAX_CLIPPED
from ._clustering import fit_method
from ._secure import secure_distance_matrix

__all__ = ["FederatedClustering", "split_parties"]

_ONE_ARRAY = ("FederatedClustering.fit got one 2-D array of shape {shape}: pass the parties' "
              "rows as a list (or dict name -> array) of per-party arrays, e.g. "
              "fit([rows_a, rows_b, rows_c]); or say which party holds each row with "
              "fit(X, owners=...) (in a Pipeline: pipe.fit(X, <step name>__owners=...)), "
              "or set n_parties=... to split X into equal contiguous parties, a "
              "simulation)")

#: A call of scikit-learn's ``check_estimator`` that passes (README.md quotes it; a test
#: runs it): its checks fit one array with values up to about 100.
CHECK_ESTIMATOR_CALL = ("check_estimator(omnifc.FederatedClustering(n_clusters=3, "
                        "bound=1000.0, scale_bits=8, n_parties=3))")

_NO_BOUND = ("bound (the public clip bound R) must be given: it is agreed in advance, never "
             "computed from pooled data, e.g. FederatedClustering(n_clusters=3, bound=10.0) "
             "for features in [-10, 10]. scikit-learn's check_estimator passes with "
             + CHECK_ESTIMATOR_CALL)

_PREDICT_METHODS = ("kmeans", "kmedoids")


class _predict_if_method:
    """Like scikit-learn's ``available_if``, but the AttributeError says why and what works.

    ``hasattr(model, "predict")`` is False for a method without a rule for new rows;
    ``model.predict(...)`` raises an AttributeError naming predict and the calls that work.
    """

    def __init__(self, fn):
        self.fn = fn
        update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        if obj.method not in _PREDICT_METHODS:
            raise AttributeError(
                f"FederatedClustering.predict exists for method='kmeans' or 'kmedoids' "
                f"only; method={obj.method!r} has no rule for new rows. Label the rows "
                f"you fit with model.labels_ (or fit_predict), or fit again with the new "
                f"rows as one more party: fit([*parties, new_rows])")
        return MethodType(self.fn, obj)


def _is_per_party(X) -> bool:
    """A dict, or a list/tuple whose every item is 2-D (one party's rows)."""
    if hasattr(X, "toarray"):  # a sparse matrix (scipy's dok format is a dict)
        return False
    if isinstance(X, dict):
        return True
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(
        hasattr(x, "toarray") or np.ndim(x) == 2 for x in X)


def split_parties(estimator, X, owners=None, n_parties=None, reset=True):
    """Validated per-party arrays and the global row order of ``X``.

    Returns ``(names, arrays, order)``: ``order[k]`` is the row of ``X`` that becomes row k
    of the concatenated parties (``None`` when ``X`` already was per-party arrays). Input is
    validated with scikit-learn's :func:`~sklearn.utils.validation.validate_data` (dense,
    real, finite, non-empty), which also sets ``n_features_in_``.
    """
    from sklearn.utils.validation import check_array, validate_data

    if _is_per_party(X):
        if owners is not None:
            raise ParameterError("owners= is for one 2-D array X; X is already a collection "
                                 "of per-party arrays")
        named = X.items() if isinstance(X, dict) else (
            (f"party-{i}", x) for i, x in enumerate(X))
        names, arrays = [], []
        for name, x in named:
            names.append(str(name))
            if np.shape(x)[:1] == (0,):
                raise InputError("holds no rows (empty party)", party=str(name))
            try:
                arrays.append(check_array(x, dtype=np.float64))
            except ValueError as error:
                raise InputError(str(error), party=str(name)) from None
        dims = {x.shape[1] for x in arrays}
        if len(dims) > 1:
            raise InputError(f"d must be equal for all parties, got {[x.shape for x in arrays]}")
        if reset:
            estimator.n_features_in_ = arrays[0].shape[1]
        elif arrays[0].shape[1] != estimator.n_features_in_:
            raise InputError(f"X has {arrays[0].shape[1]} features, but "
                             f"{type(estimator).__name__} is expecting "
                             f"{estimator.n_features_in_} features as input")
        return names, arrays, None
    if owners is None and n_parties is None:
        shape = getattr(X, "shape", None) or np.shape(X)
        raise InputError(_ONE_ARRAY.format(shape=shape))
    x = validate_data(estimator, X, dtype=np.float64, reset=reset)
    n = x.shape[0]
    if owners is not None:
        owners = np.asarray(owners)
        if owners.shape != (n,):
            raise InputError(f"owners must name one party per row of X: expected shape "
                             f"({n},), got {owners.shape}")
        _, first = np.unique(owners, return_index=True)
        keys = owners[np.sort(first)]
        order = np.concatenate([np.flatnonzero(owners == key) for key in keys])
        return ([str(k) for k in keys], [x[owners == key] for key in keys], order)
    if isinstance(n_parties, bool) or not isinstance(n_parties, (int, np.integer)) \
            or n_parties < 1:
        raise ParameterError(f"n_parties must be a positive integer, got {n_parties!r}")
    if n < n_parties and not reset:  # predict: a few new rows become fewer new parties
        n_parties = n
    if n < n_parties:
        raise InputError(f"n_samples={n} rows cannot be split into n_parties={n_parties} "
                         "non-empty parties")
    blocks = np.array_split(np.arange(n), n_parties)
    return ([f"party-{i}" for i in range(n_parties)], [x[b] for b in blocks], np.arange(n))


class FederatedClustering(ClusterMixin, BaseEstimator):
    """Cluster the rows of several parties without pooling them (OmniFC).

    ``fit`` reconstructs the exact squared-distance matrix of all parties' quantized rows
    with :func:`omnifc.secure_distance_matrix` (Lagrange shares, no party sees another's
    rows) and runs :func:`omnifc.cluster` on it at the coordinator.

    Parameters
    ----------
    method : str
        One of :data:`omnifc.METHODS` ("kmeans", "kmeans-rows", "spectral", "fcm", "nmf",
        "dbscan", "hierarchical", "kmedoids").
    n_clusters : int, optional
        Number of clusters (not used by DBSCAN).
    segments, noise_segments, scale_bits, nonnegative
        Passed to :func:`omnifc.secure_distance_matrix` (l, t, q).
    bound : float
        Public clip bound R, agreed in advance (never computed from pooled data).
    clip : {"clip", "error"}
        Clip entries outside the bound (and count them), or refuse any.
    max_clipped : float
        Largest fraction of one party's entries that may be clipped before ``fit`` refuses
        (default 0.01); 1.0 accepts any amount.
    n_parties : int, optional
        Simulation convenience: split a single 2-D ``X`` into this many contiguous,
        near-equal parties. By default a single array is refused (pass per-party arrays,
        or ``owners=`` to ``fit``).
    random_state : None, int or numpy Generator
        Seeds the clustering's random choices (never the shares' noise, which is CSPRNG).
    options : dict, optional
        Method options for :func:`omnifc.cluster` (e.g. ``{"linkage": "average"}``).
    integrity : {"detect", "correct", "off"}
        Passed to :func:`omnifc.secure_distance_matrix`.
    adversaries : int, optional
        A, the most parties that may deviate together; passed to
        :func:`omnifc.secure_distance_matrix` (default: the largest the parties allow).
    mask_degree : int
        Mask partners of each party (0: every other party; else at least
        ``noise_segments + 1``, so that the masks withstand t colluding parties as the
        shares do); passed to :func:`omnifc.secure_distance_matrix`. ``fit`` refuses
        1 <= k <= ``noise_segments`` before it reads the data.
    memory_budget : int, optional
        Bytes of n x n data kept in RAM (default 2 GiB); above it the coordinator
        accumulates D in a temporary memory-mapped file, clustered out of core
        (docs/scale.md).
    distances : {"full", "landmarks", "knn"}
        Which entries of D the session computes (docs/protocol.md, "Layouts"): all
        (default), or D[:, L] for ``n_landmarks`` landmark rows drawn from the session's
        public randomness, clustered by k-means on landmark (Nyström) MDS coordinates
        (``method="kmeans"``) or by landmark spectral clustering (Chen & Cai 2011,
        ``method="spectral"``; ``options`` ``n_neighbors``, ``bandwidth``,
        ``bandwidth_scale``, ``n_init``); the coordinator then learns n x L entries of D;
        or
        ``"knn"``: D[:, L] and then the distances of every row's ``candidates`` nearest
        rows in its landmark embedding, a second session, giving the exact
        ``n_neighbors``-NN graph (:func:`omnifc.secure_knn_graph`), clustered by
        ``method="spectral"`` or ``"dbscan"`` on that graph.
    n_landmarks : int, optional
        L, for ``distances="landmarks"`` or ``"knn"``.
    n_neighbors : int, optional
        k of the k-NN graph, for ``distances="knn"`` (default 10, at most n - 1).
    candidates : int, optional
        Candidate neighbours per row for ``distances="knn"`` (default ``4 * n_neighbors``).

    Attributes
    ----------
    labels_ : ndarray of int
        Labels of all rows in global order: the parties concatenated in the order given
        (or the row order of ``X`` with ``owners=`` / ``n_parties``).
    party_labels_ : dict of str to ndarray, or list of ndarray
        Labels of each party's rows, shaped like the input of ``fit``: a dict by party
        name when it got a dict (as ``clipped_``), else a list in the order of
        ``party_names_``.
    labels_global_ : ndarray
        Same as ``labels_`` (kept for compatibility).

    ``predict`` exists for the methods that have one ("kmeans", "kmedoids"): it runs a new
    secure session over the fitted parties' rows plus the new rows (as extra parties; one
    2-D array is one new party, so ``model.predict(X_new)`` and ``Pipeline.predict`` work)
    and assigns each new row to the nearest k-means centroid (computed exactly from D) or
    medoid.
    The estimator therefore keeps the fitted parties' rows, as this in-process simulation
    holds them anyway; a deployment runs ``serve``/``join`` instead.
    party_names_ : list of str
    n_features_in_ : int
    clipped_ : dict of str to (int, float)
        Per party: clipped entries and their fraction of the party's entries.
    distance_result_ : DistanceResult
        The reconstruction (distances, integer distances, owners, parameters, stats); with
        ``distances="knn"`` the landmarks session's.
    knn_graph_ : KNNGraph
        With ``distances="knn"``: the exact k-NN graph (both sessions' results in it).
    details_ : dict
        Method-specific results (e.g. ``init_indices``, ``medoid_indices``, ``eps``).
    """

    def __init__(self, method="kmeans", n_clusters=None, *, segments=1, noise_segments=1,
                 scale_bits=16, bound=None, nonnegative=False, clip="clip",
                 max_clipped=MAX_CLIPPED, n_parties=None, random_state=None, options=None,
                 integrity="detect", adversaries=None, mask_degree=0, memory_budget=None,
                 distances="full", n_landmarks=None, n_neighbors=None, candidates=None):
        self.method = method
        self.n_clusters = n_clusters
        self.segments = segments
        self.noise_segments = noise_segments
        self.scale_bits = scale_bits
        self.bound = bound
        self.nonnegative = nonnegative
        self.clip = clip
        self.max_clipped = max_clipped
        self.n_parties = n_parties
        self.random_state = random_state
        self.options = options
        self.integrity = integrity
        self.adversaries = adversaries
        self.mask_degree = mask_degree
        self.memory_budget = memory_budget
        self.distances = distances
        self.n_landmarks = n_landmarks
        self.n_neighbors = n_neighbors
        self.candidates = candidates

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = bool(self.nonnegative)
        return tags

    def fit(self, X, y=None, *, owners=None):
        """Reconstruct D securely and cluster it. Returns ``self``.

        Parameters
        ----------
        X : list or dict of array-like (n_i, d), or array-like (n, d) with ``owners``
            Each party's rows. A single 2-D array needs ``owners`` (or ``n_parties``).
        y : ignored
        owners : array-like (n,), optional
            For a single array ``X``: the party (name or number) holding each row.
        """
        from protocols import check_distance_mask_degree

        if self.bound is None:
            raise ParameterError(_NO_BOUND)
        check_distance_mask_degree(self.mask_degree, self.noise_segments)
        self._check_distances()
        names, arrays, order = split_parties(self, X, owners, self.n_parties)
        if self.nonnegative and any((x < 0).any() for x in arrays):
            raise InputError("Negative values in data passed to FederatedClustering with "
                             "nonnegative=True: features must lie in [0, bound]")
        if self.distances == "knn":  # two sessions: D[:, L], then the candidate pairs
            from ._secure_knn import secure_knn_graph

            source = secure_knn_graph(dict(zip(names, arrays)), k=self._n_neighbors(),
                                      n_landmarks=int(self.n_landmarks),
                                      candidates=self.candidates, **self._session())
            result = source.landmark_result
            self.knn_graph_ = source
        else:
            result = self._secure(dict(zip(names, arrays)), n_landmarks=self.n_landmarks)
            # a landmarks result is clustered as a whole (D[:, L] and its landmarks)
            source = result if result.layout == "landmarks" else result.distances
        details = fit_method(source, self.method, self.n_clusters,
                             random_state=self.random_state, **dict(self.options or {}))
        labels = np.asarray(details["labels"])
        self.distance_result_ = result
        self.details_ = details
        self.party_names_ = list(result.party_names)
        per_party = [labels[result.owners == i] for i in range(len(names))]
        self.party_labels_ = (dict(zip(names, per_party)) if isinstance(X, dict)
                              else per_party)
        if order is not None:
            in_x_order = np.empty_like(labels)
            in_x_order[order] = labels
            labels = in_x_order
        self.labels_ = labels
        self.labels_global_ = labels
        self.clipped_ = {name: (result.clipped[name], result.clipped_fraction[name])
                         for name in names}
        self._fitted_parties = dict(zip(names, arrays))
        return self

    def _check_distances(self) -> None:
        if self.distances not in ("full", "landmarks", "knn"):
            raise ParameterError(f"distances must be 'full' or 'landmarks' or 'knn', got "
                                 f"{self.distances!r}")
        if self.distances == "knn":
            from ._clustering._neighbours import KNN_METHODS

            if self.method not in KNN_METHODS:
                raise ParameterError(f"distances='knn' clusters the k-NN graph: method must "
                                     f"be one of {list(KNN_METHODS)}, got {self.method!r}")
            self._n_neighbors()
        if self.distances in ("landmarks", "knn"):
            if self.distances == "landmarks" and self.method not in ("kmeans", "spectral"):
                raise ParameterError(f"distances='landmarks' clusters by k-means on landmark "
                                     f"MDS coordinates or by landmark spectral clustering: "
                                     f"method must be 'kmeans' or 'spectral', got "
                                     f"{self.method!r}")
            if isinstance(self.n_landmarks, bool) or not isinstance(
                    self.n_landmarks, (int, np.integer)) or self.n_landmarks < 1:
                raise ParameterError(f"distances={self.distances!r} needs n_landmarks, an "
                                     f"integer >= 1, got {self.n_landmarks!r}")

    def _n_neighbors(self) -> int:
        k = 10 if self.n_neighbors is None else self.n_neighbors
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ParameterError(f"distances='knn' needs n_neighbors, an integer >= 1, got "
                                 f"{self.n_neighbors!r}")
        return int(k)

    def _layout(self, *, n_landmarks=None, landmarks=None) -> dict:
        if self.distances != "landmarks":
            return {}
        if landmarks is not None:
            return {"layout": "landmarks", "landmarks": landmarks}
        return {"layout": "landmarks", "n_landmarks": int(n_landmarks)}

    def _secure(self, parties: dict, **layout):
        """One secure reconstruction of D (or of the layout's entries) with this
        estimator's public parameters."""
        return secure_distance_matrix(parties, **self._layout(**layout), **self._session(),
                                      memory_budget=self.memory_budget)

    def _session(self) -> dict:
        """This estimator's public session parameters (every layout)."""
        return dict(bound=self.bound, scale_bits=self.scale_bits, segments=self.segments,
                    noise_segments=self.noise_segments, nonnegative=self.nonnegative,
                    clip=self.clip, max_clipped=self.max_clipped, integrity=self.integrity,
                    adversaries=self.adversaries, mask_degree=self.mask_degree)

    @_predict_if_method
    def predict(self, X, *, owners=None):
        """Cluster of each new row: nearest k-means centroid or medoid, from exact distances.

        ``X`` is the new rows: one 2-D array (held by one new party, as
        ``model.predict(X_new)`` or ``Pipeline.predict`` pass it), or per-party arrays or
        one array with ``owners`` as in :meth:`fit`. With ``n_parties`` set, one array is
        split as in :meth:`fit`. Returns the labels in the row order of ``X``.

        Examples
        --------
        >>> import numpy as np
        >>> from omnifc import FederatedClustering
        >>> parties = [np.array([[0.0, 0.0], [9.0, 9.0]]), np.array([[0.0, 1.0]]),
        ...            np.array([[9.0, 8.0], [1.0, 0.0]])]
        >>> model = FederatedClustering(n_clusters=2, bound=16.0, random_state=0).fit(parties)
        >>> model.predict(np.array([[8.0, 9.0], [1.0, 1.0]])).tolist()
        [1, 0]
        """
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self, "labels_")
        if owners is None and self.n_parties is None and not _is_per_party(X):
            # One array of new rows: one querying party holds them all (nothing to split).
            names, arrays, order = ["party-0"], [validate_data(self, X, dtype=np.float64,
                                                               reset=False)], None
        else:
            names, arrays, order = split_parties(self, X, owners, self.n_parties,
                                                 reset=False)
        fitted = self._fitted_parties
        new = {f"new:{name}": x for name, x in zip(names, arrays)}
        n_fit = sum(x.shape[0] for x in fitted.values())
        if self.distances == "landmarks":
            return self._predict_landmarks(fitted, new, n_fit, order)
        result = self._secure({**fitted, **new})
        d = result.distances
        cross, within = d[n_fit:, :n_fit], d[:n_fit, :n_fit]
        per_party = self.party_labels_
        train = np.concatenate(list(per_party.values()) if isinstance(per_party, dict)
                               else per_party)
        if self.method == "kmedoids":
            medoids = np.asarray(self.details_["medoid_indices"])
            labels = train[medoids][np.argmin(cross[:, medoids], axis=1)]
        else:
            clusters = np.unique(train[train >= 0])
            # ||x - c_k||^2 = mean_i D(x, i) - mean_{i,j} D(i, j) / 2 over the rows i, j of k
            cost = np.stack([cross[:, train == k].mean(axis=1)
                             - within[np.ix_(train == k, train == k)].mean() / 2
                             for k in clusters], axis=1)
            labels = clusters[np.argmin(cost, axis=1)]
        if order is not None:
            in_x_order = np.empty_like(labels)
            in_x_order[order] = labels
            labels = in_x_order
        return labels

    def _predict_landmarks(self, fitted: dict, new: dict, n_fit: int, order):
        """Nearest k-means centroid in the landmark-MDS coordinates of the fit: a
        landmarks session over the fitted rows plus the new ones, with the fitted landmark
        rows (the fitted parties come first, so their global rows are unchanged), gives
        the new rows' D[:, L]; the landmark block is the fit's, hence the same basis."""
        from ._clustering import landmark_mds

        landmarks = self.distance_result_.landmarks
        result = self._secure({**fitted, **new}, landmarks=landmarks.tolist())
        embedding = landmark_mds(result)[n_fit:]
        centers = np.asarray(self.details_["cluster_centers"])
        cost = ((embedding[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
        labels = np.argmin(cost, axis=1).astype(np.int64)
        if order is not None:
            in_x_order = np.empty_like(labels)
            in_x_order[order] = labels
            labels = in_x_order
        return labels

    def fit_predict(self, X, y=None, *, owners=None):
        """``fit(X).labels_``: all rows' labels in global row order."""
        return self.fit(X, owners=owners).labels_

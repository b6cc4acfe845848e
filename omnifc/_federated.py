"""``FederatedClustering``: secure distance reconstruction, then any clustering on D.

>>> import numpy as np
>>> from omnifc import FederatedClustering
>>> parties = [np.array([[0.0, 0.0], [9.0, 9.0]]), np.array([[0.0, 1.0]]),
...            np.array([[9.0, 8.0], [1.0, 0.0]])]
>>> model = FederatedClustering(method="kmeans", n_clusters=2, bound=16.0,
...                             random_state=0).fit(parties)
>>> [labels.tolist() for labels in model.labels_]
[[0, 1], [0], [1, 0]]
"""

from __future__ import annotations

from sklearn.base import BaseEstimator

from finite_field import ParameterError

from ._clustering import fit_method
from ._secure import secure_distance_matrix

__all__ = ["FederatedClustering"]


class FederatedClustering(BaseEstimator):
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
    random_state : None, int or numpy Generator
        Seeds the clustering's random choices (never the shares' noise, which is CSPRNG).
    options : dict, optional
        Method options for :func:`omnifc.cluster` (e.g. ``{"linkage": "average"}``).
    integrity : {"detect", "correct", "off"}
        Passed to :func:`omnifc.secure_distance_matrix`.

    Attributes
    ----------
    labels_ : list of ndarray
        Labels of each party's rows, in the order the parties were given.
    labels_global_ : ndarray
        The same labels in global row order (parties concatenated in the order given).
    party_names_ : list of str
    distance_result_ : DistanceResult
        The reconstruction (distances, integer distances, owners, parameters, stats).
    details_ : dict
        Method-specific results (e.g. ``init_indices``, ``medoid_indices``, ``eps``).
    """

    def __init__(self, method="kmeans", n_clusters=None, *, segments=1, noise_segments=1,
                 scale_bits=16, bound=None, nonnegative=False, random_state=None,
                 options=None, integrity="detect"):
        self.method = method
        self.n_clusters = n_clusters
        self.segments = segments
        self.noise_segments = noise_segments
        self.scale_bits = scale_bits
        self.bound = bound
        self.nonnegative = nonnegative
        self.random_state = random_state
        self.options = options
        self.integrity = integrity

    def fit(self, parties, y=None):
        """Reconstruct D securely from ``parties`` (list or dict of arrays) and cluster it."""
        if self.bound is None:
            raise ParameterError("bound (the public clip bound R) must be given; it is "
                                 "agreed in advance, never computed from pooled data")
        result = secure_distance_matrix(parties, bound=self.bound, scale_bits=self.scale_bits,
                                        segments=self.segments,
                                        noise_segments=self.noise_segments,
                                        nonnegative=self.nonnegative,
                                        integrity=self.integrity)
        details = fit_method(result.distances, self.method, self.n_clusters,
                             random_state=self.random_state, **dict(self.options or {}))
        labels = details["labels"]
        self.distance_result_ = result
        self.details_ = details
        self.party_names_ = list(result.party_names)
        self.labels_global_ = labels
        self.labels_ = [labels[result.owners == i] for i in range(len(result.party_names))]
        return self

    def fit_predict(self, parties, y=None):
        """``fit(parties).labels_``: one label array per party."""
        return self.fit(parties).labels_

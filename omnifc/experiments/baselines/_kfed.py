"""k-FED (Dennis, Li & Smith, ICML 2021): one-shot federated k-means from local centres.

The baseline that aggregates *proxies*: each party runs k-means locally with k' clusters
and uploads only its k' centres. The server seeds k centres by farthest-point traversal on
the uploaded centres, starting from all centres of one randomly chosen party, runs **one**
Lloyd step over all uploaded centres (assign each to its nearest seed, replace each seed by
the mean of its centres), assigns every uploaded centre to its nearest updated centre, and
every party's points inherit the label of their local centre.

What OmniFC fixes: a local centre stands for all its points, so when a party's data mix
several classes (low non-IID level p, or k' smaller than the number of classes a party
holds) one centre averages them and every point behind it gets one label; OmniFC
clusters the exact global distances of all points instead.

>>> import numpy as np
>>> from omnifc import KFed
>>> parties = [np.array([[0.0, 0.0], [0.0, 1.0]]), np.array([[9.0, 9.0], [9.0, 8.0]]),
...            np.array([[0.0, 0.5], [9.0, 8.5]])]
>>> model = KFed(n_clusters=2, local_clusters=1, random_state=0).fit(parties)
>>> [labels.tolist() for labels in model.party_labels_][:2]
[[0, 0], [1, 1]]
>>> model.labels_.tolist()   # the third party's two rows share its one local centre
[0, 0, 1, 1, 0, 0]
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from finite_field import ParameterError

from ..._clustering._common import as_generator, seed_from
from ..._federated import split_parties

__all__ = ["KFed"]


def _sq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=-1)


class KFed(ClusterMixin, BaseEstimator):
    """k-FED baseline over a list (or dict) of party arrays.

    Parameters
    ----------
    n_clusters : int
        k, the number of global clusters.
    local_clusters : int, optional
        k', the clusters per party; default floor(sqrt(k)) (the paper's k' <= sqrt(k)),
        at least 1 and at most the party's row count.
    n_init : int
        Restarts of each local k-means.
    n_parties : int, optional
        Simulation convenience: split a single 2-D ``X`` into this many contiguous parties
        (by default a single array is refused; pass per-party arrays or ``owners=``).
    random_state : None, int or numpy Generator

    Attributes
    ----------
    labels_ : ndarray of int
        Labels of all rows in global order (parties concatenated in the order given, or
        the row order of ``X`` with ``owners=`` / ``n_parties``); also ``labels_global_``.
    party_labels_ : list of ndarray
        Per-party labels.
    local_centers_ : list of ndarray
        What each party uploaded.
    cluster_centers_ : ndarray (k, d)
        Server centres after the Lloyd step.
    """

    def __init__(self, n_clusters=2, *, local_clusters=None, n_init=10, n_parties=None,
                 random_state=None):
        self.n_clusters = n_clusters
        self.local_clusters = local_clusters
        self.n_init = n_init
        self.n_parties = n_parties
        self.random_state = random_state

    def fit(self, X, y=None, *, owners=None):
        """Run k-FED on per-party arrays (or one array with ``owners``). Returns ``self``."""
        from sklearn.cluster import KMeans

        names, arrays, order = split_parties(self, X, owners, self.n_parties)
        k = self.n_clusters
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ParameterError(f"n_clusters must be a positive integer, got {k!r}")
        k_local = (max(1, math.isqrt(k)) if self.local_clusters is None
                   else self.local_clusters)
        if isinstance(k_local, bool) or not isinstance(k_local, numbers.Integral) \
                or not 1 <= k_local <= k:
            raise ParameterError(f"local_clusters must be an integer in [1, n_clusters={k}], "
                                 f"got {k_local!r}")
        rng = as_generator(self.random_state)
        centers, local_labels = [], []
        for x in arrays:
            kk = min(int(k_local), x.shape[0])
            model = KMeans(n_clusters=kk, n_init=self.n_init, random_state=seed_from(rng)).fit(x)
            centers.append(model.cluster_centers_)
            local_labels.append(model.labels_)
        pooled = np.concatenate(centers)
        owner = np.concatenate([np.full(len(c), i) for i, c in enumerate(centers)])
        if pooled.shape[0] < k:
            raise ParameterError(f"k-FED needs at least n_clusters={k} uploaded centres, got "
                                 f"{pooled.shape[0]} ({len(arrays)} parties x k'={k_local})")
        start = int(rng.integers(len(arrays)))
        chosen = list(np.flatnonzero(owner == start)[:k])
        closest = _sq(pooled, pooled[chosen]).min(axis=1)
        while len(chosen) < k:
            nxt = int(np.argmax(closest))
            chosen.append(nxt)
            closest = np.minimum(closest, _sq(pooled, pooled[[nxt]])[:, 0])
        seeds = pooled[chosen]
        assign = _sq(pooled, seeds).argmin(axis=1)            # Lloyd step: assignment
        updated = np.array([pooled[assign == j].mean(axis=0) if (assign == j).any()
                            else seeds[j] for j in range(k)])  # Lloyd step: update
        center_labels = _sq(pooled, updated).argmin(axis=1)
        offsets = np.cumsum([0] + [len(c) for c in centers])
        self.party_labels_ = [center_labels[offsets[i] + local_labels[i]]
                              for i in range(len(arrays))]
        labels = np.concatenate(self.party_labels_)
        if order is not None:
            labels = labels[np.argsort(order)]
        self.labels_ = self.labels_global_ = labels
        self.local_centers_ = centers
        self.cluster_centers_ = updated
        self.party_names_ = names
        return self

    def fit_predict(self, X, y=None, *, owners=None):
        """``fit(X).labels_``: all rows' labels in global row order."""
        return self.fit(X, owners=owners).labels_

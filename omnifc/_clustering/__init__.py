"""Clustering on a squared-distance matrix D (one topic per module).

- ``_common``: validation, canonical row order, k-means++ on D, Gaussian bandwidth
- ``_kmeans``: exact k-means (classical MDS + Lloyd) and the rows-of-D surrogate
- ``_fcm``: fuzzy c-means on the MDS embedding
- ``_kmedoids``: PAM on sqrt(D)
- ``_spectral``: spectral clustering and NMF on a Gaussian affinity
- ``_density``: DBSCAN with automatic eps
- ``_hierarchical``: scipy linkage on condensed sqrt(D)
- ``_api``: :func:`cluster` dispatching to all of them
"""

from ._api import METHODS, cluster, fit_method
from ._common import canonical_order, gaussian_bandwidth, kmeans_plusplus_indices
from ._density import auto_eps
from ._fcm import fcm_points
from ._hierarchical import LINKAGES
from ._kmedoids import pam

__all__ = ["cluster", "fit_method", "METHODS", "canonical_order", "gaussian_bandwidth",
           "kmeans_plusplus_indices", "auto_eps", "fcm_points", "LINKAGES", "pam"]

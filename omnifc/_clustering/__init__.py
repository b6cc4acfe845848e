"""Clustering on a squared-distance matrix D (one topic per module).

- ``_common``: validation, canonical row order, k-means++ on D, Gaussian bandwidth
- ``_kmeans``: exact k-means (classical MDS + Lloyd), the rows-of-D surrogate and the
  adapters' scikit-learn k-means on MDS coordinates
- ``_fcm``: fuzzy c-means on the MDS embedding
- ``_kmedoids``: PAM on sqrt(D)
- ``_spectral``: spectral clustering and NMF on a Gaussian affinity
- ``_density``: DBSCAN with automatic eps; the Kneedle knee of a sorted curve
- ``_hierarchical``: scipy linkage on condensed sqrt(D); the adapters' Ward cut and average
  linkage
- ``_landmarks``: landmark (Nyström) MDS and k-means from D[:, L] alone (the result of a
  ``landmarks`` session)
- ``_landmark_spectral``: landmark spectral clustering (Chen & Cai 2011) from D[:, L]
- ``_dask``: the products of the streamed MDS on a Dask cluster
- ``_neighbours``: the exact k-NN graph from D[:, L] plus listed pairs, and spectral
  clustering and DBSCAN on it
- ``_progress``: rate-limited INFO records from inside the long steps (the CLI renders them)
- ``_api``: :func:`cluster` dispatching to all of them
"""

from ._api import METHODS, cluster, fit_method
from ._common import canonical_order, gaussian_bandwidth, kmeans_plusplus_indices, relabel
from ._density import auto_eps, kneedle_knee
from ._fcm import fcm_points
from ._hierarchical import LINKAGES, average_linkage_labels, ward_from_distances
from ._kmeans import kmeans_from_distances
from ._kmedoids import pam
from ._landmark_spectral import landmark_spectral
from ._landmarks import landmark_kmeans, landmark_mds
from ._neighbours import KNNGraph, candidate_pairs, knn_from_entries

__all__ = ["cluster", "fit_method", "METHODS", "canonical_order", "gaussian_bandwidth",
           "kmeans_plusplus_indices", "auto_eps", "fcm_points", "LINKAGES", "pam", "relabel",
           "kneedle_knee", "kmeans_from_distances", "ward_from_distances",
           "average_linkage_labels", "landmark_kmeans", "landmark_mds", "landmark_spectral",
           "KNNGraph",
           "candidate_pairs", "knn_from_entries"]

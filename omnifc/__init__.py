"""omnifc: secure federated clustering across organizations.

Several parties hold private rows; a coordinator learns the exact pairwise squared-distance
matrix of all of them (OmniFC: Lagrange coded computing over prime fields) and runs any
clustering on it.

>>> import numpy as np, omnifc
>>> parts = [np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), np.array([[1.0, 1.0]])]
>>> float(omnifc.secure_distance_matrix(parts, bound=8.0, scale_bits=8).distances[0, 1])
25.0
"""

import logging

from finite_field import (AuthenticationError, DeadlineError, DeviationError, InputError,
                          IntegrityError, OmniFCError, ParameterError, PeerError,
                          ProtocolError)

from ._result import DistanceResult, PhaseStats
from ._store import DistanceAccumulator, DistanceStore, TiledDistances, plaintext_distance_store
from ._plaintext import plaintext_sq_distances
from ._secure import secure_distance_matrix
from ._secure_knn import secure_knn_graph
from ._secure_sum import SumResult, secure_sum
from .experiments import DATASETS, Dataset, load_dataset
from ._geometry import centroid_sq_distances, check_distance_matrix, classical_mds, to_euclidean
from .experiments import split_non_iid
from ._clustering import METHODS, KNNGraph, canonical_order, cluster
from ._estimators import (DistanceDBSCAN, DistanceFuzzyCMeans, DistanceHierarchical,
                          DistanceKMeans, DistanceKMedoids, DistanceNMF, DistanceSpectral)
from ._federated import FederatedClustering
from .experiments import KFed, adjusted_rand, clustering_scores, kappa, nmi
from . import audit
from . import adapters

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "secure_distance_matrix", "secure_knn_graph", "KNNGraph", "plaintext_sq_distances", "secure_sum", "SumResult", "DistanceResult", "PhaseStats", "DistanceAccumulator", "DistanceStore", "TiledDistances", "plaintext_distance_store", "split_non_iid", "classical_mds", "centroid_sq_distances", "check_distance_matrix",
    "to_euclidean", "load_dataset", "Dataset", "DATASETS",
    "cluster", "METHODS", "canonical_order", "DistanceKMeans", "DistanceSpectral",
    "DistanceFuzzyCMeans", "DistanceNMF", "DistanceDBSCAN", "DistanceHierarchical",
    "DistanceKMedoids", "FederatedClustering", "KFed", "kappa", "nmi", "adjusted_rand",
    "clustering_scores", "audit", "adapters",
    "OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
    "DeadlineError", "AuthenticationError", "IntegrityError", "DeviationError",
]

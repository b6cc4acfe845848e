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
from finite_field import lazy_exports

# Every name loads on first use (PEP 562): ``import omnifc`` costs only the exception
# classes; scikit-learn, gRPC and the numba kernels load with the first name that needs them.
__getattr__, __dir__ = lazy_exports(__name__, {
    "._result": ["DistanceResult", "PhaseStats"],
    "._store": ["DistanceAccumulator", "DistanceStore", "TiledDistances",
                "plaintext_distance_store", "IncompleteResultError"],
    "._plaintext": ["plaintext_sq_distances"],
    "._secure": ["secure_distance_matrix"],
    "._secure_knn": ["secure_knn_graph"],
    "._secure_sum": ["SumResult", "secure_sum"],
    ".experiments": ["DATASETS", "Dataset", "load_dataset", "split_non_iid", "KFed",
                     "adjusted_rand", "clustering_scores", "kappa", "nmi"],
    "._geometry": ["centroid_sq_distances", "check_distance_matrix", "classical_mds",
                   "to_euclidean"],
    "._clustering": ["METHODS", "KNNGraph", "canonical_order", "cluster"],
    "._estimators": ["DistanceDBSCAN", "DistanceFuzzyCMeans", "DistanceHierarchical",
                     "DistanceKMeans", "DistanceKMedoids", "DistanceNMF", "DistanceSpectral"],
    "._federated": ["FederatedClustering"],
    ".audit": ["audit"],
    ".adapters": ["adapters"],
})

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "secure_distance_matrix", "secure_knn_graph", "KNNGraph", "plaintext_sq_distances", "secure_sum", "SumResult", "DistanceResult", "PhaseStats", "DistanceAccumulator", "DistanceStore", "TiledDistances", "plaintext_distance_store", "IncompleteResultError", "split_non_iid", "classical_mds", "centroid_sq_distances", "check_distance_matrix",
    "to_euclidean", "load_dataset", "Dataset", "DATASETS",
    "cluster", "METHODS", "canonical_order", "DistanceKMeans", "DistanceSpectral",
    "DistanceFuzzyCMeans", "DistanceNMF", "DistanceDBSCAN", "DistanceHierarchical",
    "DistanceKMedoids", "FederatedClustering", "KFed", "kappa", "nmi", "adjusted_rand",
    "clustering_scores", "audit", "adapters",
    "OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
    "DeadlineError", "AuthenticationError", "IntegrityError", "DeviationError",
]

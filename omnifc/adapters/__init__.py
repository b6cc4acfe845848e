"""Adapters: clustered-FL client embeddings through secure distance reconstruction.

Every adapter has the same shape: a client-side function turns local data (plus the
shared model or encoder the paper needs, passed in) into the vector(s) to protect; the
rows go through :func:`protect` (:func:`omnifc.secure_distance_matrix`, the coordinator
never sees an embedding); a server-side function takes the reconstructed squared-distance
matrix, and only what it declares (e.g. a :func:`secure_group_sums` result), and returns
the paper's output. Each module states in ``COORDINATOR_LEARNS`` and in its docstring what
the coordinator learns beyond the distances.

========================  ==============================  ==================================
module                    client embedding                server algorithm on D
========================  ==============================  ==================================
``adapters.raw``          raw samples (OmniFC)            any :func:`omnifc.cluster` method
``adapters.clove``        loss on each of K_hat models    silhouette-K, k-means, Hungarian
                                                          matching (secure sum), FedAvg
``adapters.client2vec``   normalized client index         sampling softmax, MWU weights
``adapters.flux``         PCA-projected mean/std stats    adaptive DBSCAN, test-time assign
``adapters.fmcl``         thermometer class signatures    overlap-aware distance, CV-K
========================  ==============================  ==================================

Examples
--------
>>> import numpy as np
>>> from omnifc import adapters
>>> sorted(adapters.ADAPTERS)
['client2vec', 'clove', 'flux', 'fmcl', 'raw']
"""

from . import client2vec, clove, flux, fmcl, raw
from .._clustering import kmeans_from_distances, ward_from_distances
from ._common import (GroupSums, ProtectedDistances, client_parties, plaintext_distances, protect,
                      quantize_rows, secure_group_sums)
from ._k_selection import silhouette_from_distances
from ._examples import run_example

#: Adapter modules by name (``omnifc simulate --adapter NAME``).
ADAPTERS = {"raw": raw, "clove": clove, "client2vec": client2vec, "flux": flux, "fmcl": fmcl}

__all__ = ["ADAPTERS", "raw", "clove", "client2vec", "flux", "fmcl", "protect",
           "secure_group_sums", "ProtectedDistances", "GroupSums", "quantize_rows",
           "plaintext_distances", "client_parties", "kmeans_from_distances",
           "ward_from_distances", "silhouette_from_distances", "run_example"]

"""The fixed settings of the OmniFC evaluation: data sets, non-IID levels, methods, labels.

Shared by the experiment (:mod:`._omnifc`) and its report (:mod:`._omnifc_report`).
"""

from __future__ import annotations

import numpy as np

from .._datasets import Dataset, load_dataset

__all__ = ["BASELINE_REFERENCE", "LEVELS", "REPRO_DATASETS", "QUICK_DATASETS", "METHOD_OPTIONS",
           "METHOD_LABELS",
           "BASELINE_LABELS", "KFED_LABELS", "ROW_NORMALIZED", "SEED", "SCALE_BITS", "SEGMENTS",
           "NOISE_SEGMENTS", "load_reproduction_dataset"]

LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
REPRO_DATASETS = ("iris", "iris_l2", "wine", "breast_cancer", "digits")
QUICK_DATASETS = ("iris", "iris_l2", "wine")
SEED = 0
SCALE_BITS = 16
SEGMENTS = 1
NOISE_SEGMENTS = 1
#: Options passed to omnifc.cluster for each method (everything else is the default).
METHOD_OPTIONS = {
    "kmeans": {"n_init": 5},
    "kmeans-rows": {"n_init": 5},
    "spectral": {},
    "fcm": {},
    "nmf": {},
    "dbscan": {},
    "hierarchical": {"linkage": "ward"},
    "kmedoids": {},
}
METHOD_LABELS = {
    "kmeans": "KM (exact, MDS)", "kmeans-rows": "KM (rows of D, paper)", "spectral": "SC",
    "fcm": "FCM", "nmf": "NMF", "dbscan": "DBSCAN", "hierarchical": "HC (Ward)",
    "kmedoids": "K-medoids",
}
KFED_LABELS = {"kfed-sqrt": "k-FED (k'=floor(sqrt k))", "kfed-k": "k-FED (k'=k)"}
#: Federated baselines that run offline (one score each; they never see the distances).
BASELINE_LABELS = {"kfed-sqrt": "k-FED (k'=floor(sqrt k))", "kfed-k": "k-FED (k'=k)",
                   "ffcm": "FFCM (federated FCM)", "fedsc": "FedSC-style (RFF)",
                   "mufc": "MUFC (clustering part)"}
#: The OmniFC method the federated baselines are compared with (a verdict per cell):
#: k-means on the secure D, the exact variant.
BASELINE_REFERENCE = "kmeans"
#: Data sets of the reproduction: scikit-learn's, plus iris with rows L2-normalized.
ROW_NORMALIZED = "iris_l2"


def load_reproduction_dataset(name):
    """A reproduction data set; ``iris_l2``: iris with every row divided by its L2 norm.

    Row normalization is local to each row (no pooled statistic), and the public bound
    becomes 1. It closes the iris gap to the paper (see the notes in the report).
    """
    if name != ROW_NORMALIZED:
        return load_dataset(name)
    base = load_dataset("iris")
    x = base.features / np.linalg.norm(base.features, axis=1, keepdims=True)
    return Dataset(ROW_NORMALIZED, x, base.labels, bound=1.0, nonnegative=True)

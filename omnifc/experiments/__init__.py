"""Experiments: offline data sets, non-IID splits, metrics, baselines and reproductions.

- :func:`load_dataset` (``DATASETS``): scikit-learn's bundled data sets with a public bound.
- :func:`split_non_iid`: the paper's non-IID split of rows across parties.
- :func:`clustering_scores` (:func:`kappa`, :func:`nmi`, :func:`adjusted_rand`): the
  paper's metrics.
- :mod:`.baselines`: k-FED, MUFC, federated FCM, FedSC-style.
- :mod:`.reproduce`: ``omnifc reproduce`` (the OmniFC evaluation and each adapter's paper).
"""

from finite_field import lazy_exports

# Loaded on first use (PEP 562): the data sets and splits need no scikit-learn estimator.
__getattr__, __dir__ = lazy_exports(__name__, {
    "._datasets": ["DATASETS", "Dataset", "load_dataset"],
    "._metrics": ["adjusted_rand", "align_labels", "clustering_scores", "kappa", "nmi"],
    "._splits": ["split_non_iid"],
    ".baselines": ["KFed", "federated_fcm", "federated_mufc", "fedsc_style"],
})

__all__ = ["DATASETS", "Dataset", "load_dataset", "split_non_iid", "clustering_scores",
           "kappa", "nmi", "adjusted_rand", "align_labels", "KFed", "federated_mufc",
           "federated_fcm", "fedsc_style"]

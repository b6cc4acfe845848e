"""Clustering quality against ground-truth classes: the OmniFC paper's Kappa, ARI, NMI.

Kappa (as in the first author's SDA-FC ``Kappa_calculate.py``): both labelings are
renumbered 0..k-1, predicted clusters are matched one-to-one to classes by the Hungarian
method (here ``scipy.optimize.linear_sum_assignment`` maximising the total overlap, the
contingency matrix padded with zeros to a square when the numbers of clusters and classes
differ), every predicted label is replaced by its matched class (clusters matched to a
padding column get a fresh label, so all their points count as errors), and Cohen's kappa
``(p_o - p_e) / (1 - p_e)`` is taken with scikit-learn's ``cohen_kappa_score``. DBSCAN noise
(-1) is treated as one more cluster, as the authors' renumbering does.

Difference from the authors' code: SDA-FC's cost is ``|A| + |B| - 2|A and B|`` with zero
padding. For equal numbers of clusters and classes that is the same matching; when they
differ it also rewards leaving *large* clusters unmatched. ``matching="sdafc"`` reproduces
it exactly.

>>> from omnifc import kappa
>>> kappa([0, 0, 1, 1], [1, 1, 0, 0])
1.0
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError, ParameterError

__all__ = ["kappa", "adjusted_rand", "nmi", "align_labels", "clustering_scores"]


def _dense(labels, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {labels.shape}")
    _, dense = np.unique(labels, return_inverse=True)
    return dense.reshape(-1).astype(np.int64)


def _check_pair(true_labels, predicted):
    truth = _dense(true_labels, "true labels")
    pred = _dense(predicted, "predicted labels")
    if truth.size != pred.size:
        raise InputError(f"true and predicted labels must have the same length, got "
                         f"{truth.size} and {pred.size}")
    if truth.size == 0:
        raise InputError("labels are empty")
    return truth, pred


def align_labels(true_labels, predicted, *, matching: str = "overlap") -> np.ndarray:
    """Predicted labels replaced by their Hungarian-matched classes (0..k_true-1).

    Clusters left unmatched (more clusters than classes) get labels k_true, k_true+1, ...
    """
    from scipy.optimize import linear_sum_assignment

    truth, pred = _check_pair(true_labels, predicted)
    k_true, k_pred = truth.max() + 1, pred.max() + 1
    size = max(k_true, k_pred)
    overlap = np.zeros((size, size), dtype=np.int64)
    np.add.at(overlap, (pred, truth), 1)
    if matching == "overlap":
        rows, cols = linear_sum_assignment(overlap, maximize=True)
    elif matching == "sdafc":
        cost = np.zeros((size, size), dtype=np.int64)
        pred_sizes = np.bincount(pred, minlength=size)
        true_sizes = np.bincount(truth, minlength=size)
        real = (slice(0, k_pred), slice(0, k_true))
        cost[real] = (pred_sizes[:k_pred, None] + true_sizes[None, :k_true]
                      - 2 * overlap[real])
        rows, cols = linear_sum_assignment(cost)
    else:
        raise ParameterError(f"matching must be 'overlap' or 'sdafc', got {matching!r}")
    mapping = np.empty(size, dtype=np.int64)
    mapping[rows] = cols
    return mapping[pred]


def kappa(true_labels, predicted, *, matching: str = "overlap") -> float:
    """Cohen's kappa after Hungarian matching of clusters to classes (the paper's Kappa).

    Invariant to renaming the clusters. 1 for a perfect clustering, about 0 for chance.

    Examples
    --------
    >>> from omnifc import kappa
    >>> round(kappa([0, 0, 0, 1, 1, 1], [5, 5, 7, 7, 7, 7]), 4)
    0.6667
    """
    from sklearn.metrics import cohen_kappa_score

    truth, _ = _check_pair(true_labels, predicted)
    aligned = align_labels(true_labels, predicted, matching=matching)
    if np.array_equal(truth, aligned):
        return 1.0
    return float(cohen_kappa_score(truth, aligned))


def adjusted_rand(true_labels, predicted) -> float:
    """Adjusted Rand index (scikit-learn)."""
    from sklearn.metrics import adjusted_rand_score

    truth, pred = _check_pair(true_labels, predicted)
    return float(adjusted_rand_score(truth, pred))


def nmi(true_labels, predicted) -> float:
    """Normalized mutual information (scikit-learn, arithmetic normalisation)."""
    from sklearn.metrics import normalized_mutual_info_score

    truth, pred = _check_pair(true_labels, predicted)
    return float(normalized_mutual_info_score(truth, pred))


def clustering_scores(true_labels, predicted) -> dict:
    """``{"kappa": ..., "nmi": ..., "ari": ...}``."""
    return {"kappa": kappa(true_labels, predicted), "nmi": nmi(true_labels, predicted),
            "ari": adjusted_rand(true_labels, predicted)}

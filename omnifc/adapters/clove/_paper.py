"""CLoVE: the paper's client embedding and server algorithm."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from finite_field import ParameterError

from ..._clustering import kmeans_from_distances, relabel

__all__ = ["COORDINATOR_LEARNS", "DEFAULT_MAX_LOSS", "DEFAULT_SCALE_BITS", "LOSS_TRANSFORMS",
           "cluster_clients",
           "cluster_cost", "fedavg", "is_stable", "loss_vector", "match_clusters", "mse_loss"]


#: Clusters renumbered 0..K-1 by their smallest client index (as the code does):
#: omnifc._clustering's relabel.
sort_clusters = relabel


COORDINATOR_LEARNS = (
    "squared distances between loss vectors (run_clove_fl's default: of the square roots "
    "of the losses); the K x K_hat per-cluster loss totals of those vectors (secure "
    "sum; a singleton cluster's total is that client's vector); the model updates and "
    "training-set sizes used by FedAvg (not protected by this adapter)")

#: Public clip bound on a loss value (MSE of near-unit-norm linear models stays far below).
DEFAULT_MAX_LOSS = 16.0

#: Quantization step 2^-20 on losses: far below the loss differences CLoVE separates.
DEFAULT_SCALE_BITS = 20

def mse_loss(theta, features, targets) -> float:
    """Mean squared error of the linear model ``y = x . theta`` (no bias, as in the paper)."""
    residual = np.asarray(features) @ np.asarray(theta) - np.asarray(targets)
    return float(np.mean(residual * residual))

#: The client-side transforms of a loss vector: the paper's default and its ablation.
LOSS_TRANSFORMS = ("identity", "sqrt")


def _check_transform(transform: str) -> None:
    """``ParameterError`` unless ``transform`` is one of :data:`LOSS_TRANSFORMS`."""
    if transform not in LOSS_TRANSFORMS:
        raise ParameterError(f"transform must be one of {LOSS_TRANSFORMS}, got {transform!r}")


def loss_vector(models, features, targets, *, loss=mse_loss,
                transform: str = "identity") -> np.ndarray:
    """Client side: the loss of every current model on this client's training data.

    Parameters
    ----------
    models : sequence of parameter arrays (K_hat of them)
    features, targets : the client's training data
    loss : callable ``loss(model, features, targets) -> float``
        Mean loss (MSE for linear regression by default).
    transform : {"identity", "sqrt"}
        ``"identity"`` is the paper's default; ``"sqrt"`` its ablation.

    Returns
    -------
    ndarray (K_hat,)
        The vector to protect.
    """
    _check_transform(transform)
    if loss is mse_loss:
        residual = np.asarray(features) @ np.asarray(models, dtype=np.float64).T \
            - np.asarray(targets)[:, None]
        values = np.mean(residual * residual, axis=0)
    else:
        values = np.array([loss(m, features, targets) for m in models], dtype=np.float64)
    return np.sqrt(values) if transform == "sqrt" else values

def cluster_clients(distances, n_clusters: int, *, random_state: int = 0,
                    n_init="auto") -> np.ndarray:
    """``KMeans(K, random_state, n_init)`` on D, clusters sorted by smallest client.

    ``n_init="auto"`` is the paper's (scikit-learn: one k-means++ run); an integer keeps the
    lowest-inertia partition of that many k-means++ runs (``kmeans_inits`` of
    ``run_clove_fl``).

    >>> import numpy as np
    >>> d = np.square(np.subtract.outer([0.0, 0.1, 5.0, 5.2], [0.0, 0.1, 5.0, 5.2]))
    >>> cluster_clients(d, 2, n_init=10).tolist()
    [0, 0, 1, 1]
    """
    return sort_clusters(kmeans_from_distances(distances, n_clusters, random_state=random_state,
                                               n_init=n_init))

def cluster_cost(loss_vectors, labels, n_clusters: int | None = None) -> np.ndarray:
    """Plaintext reference of the matching cost ``C[k, j] = sum_{i in C_k} L_i[j]``."""
    loss_vectors = np.asarray(loss_vectors, dtype=np.float64)
    labels = np.asarray(labels)
    k = int(labels.max()) + 1 if n_clusters is None else int(n_clusters)
    cost = np.zeros((k, loss_vectors.shape[1]))
    np.add.at(cost, labels, loss_vectors)
    return cost

def match_clusters(cost) -> np.ndarray:
    """Hungarian matching: ``model[k]`` is the model index of cluster k (K <= K_hat)."""
    cost = np.asarray(cost, dtype=np.float64)
    if cost.shape[0] > cost.shape[1]:
        raise ParameterError(f"more clusters ({cost.shape[0]}) than models ({cost.shape[1]})")
    rows, cols = linear_sum_assignment(cost)
    model = np.empty(cost.shape[0], dtype=np.int64)
    model[rows] = cols
    return model

def fedavg(models, assignment, updates, sizes) -> np.ndarray:
    """Per-model FedAvg weighted by training-set size; models without clients are kept."""
    models = np.array(models, dtype=np.float64, copy=True)
    assignment = np.asarray(assignment)
    updates = np.asarray(updates, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    for j in range(models.shape[0]):
        members = np.flatnonzero(assignment == j)
        if members.size:
            models[j] = (sizes[members, None] * updates[members]).sum(0) / sizes[members].sum()
    return models

def is_stable(history, rounds: int = 3, rule: str = "intended") -> bool:
    """Whether a client's model history is stable (see the module's deviations)."""
    if len(history) < rounds:
        return False
    if rule == "intended":
        return all(h == history[-1] for h in history[-rounds:])
    if rule == "literal":
        return history[-rounds] == history[-1]
    raise ParameterError(f"rule must be 'intended' or 'literal', got {rule!r}")

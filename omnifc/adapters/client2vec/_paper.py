"""Client2Vec: the paper's client embedding and server algorithm."""

from __future__ import annotations

import numpy as np

from finite_field import InputError, ParameterError

from ..._clustering import kmeans_from_distances
from ..._geometry import check_distance_matrix

__all__ = ["COORDINATOR_LEARNS", "DEFAULT_GAMMA", "DEFAULT_LAMBDA", "DEFAULT_TAU",
           "client_index", "cluster_indices", "direct_pair_similarity", "mwu_weights",
           "pair_similarity", "protected_vector", "protection_bound", "sample_clients",
           "sampling_probabilities", "set_similarity"]


COORDINATOR_LEARNS = ("nothing beyond D (sum of feature and label cosines per pair); the "
                      "data-size weights q_i used by MWU are reported metadata")

#: omnifc's choices (the paper's values are not in its summary; reasons in the docstring).
DEFAULT_TAU = 1.0

DEFAULT_LAMBDA = 1.0

DEFAULT_GAMMA = 0.9

def client_index(feature_embeddings, label_embeddings) -> tuple[np.ndarray, np.ndarray]:
    """Client side: ``beta_i`` = mean over samples of the feature and label index vectors."""
    f = np.asarray(feature_embeddings, dtype=np.float64)
    lab = np.asarray(label_embeddings, dtype=np.float64)
    if f.ndim != 2 or lab.ndim != 2 or f.shape[0] != lab.shape[0] or f.shape[0] == 0:
        raise InputError(f"expected per-sample embeddings of shape (N, d_f) and (N, d_l) with "
                         f"N >= 1, got {f.shape} and {lab.shape}")
    return f.mean(axis=0), lab.mean(axis=0)

def protected_vector(index, *, weights=(1.0, 1.0)) -> np.ndarray:
    """Client side: ``[sqrt(a) beta^f/|beta^f|; sqrt(b) beta^l/|beta^l|]``, the row to protect."""
    a, b = _weights(weights)
    parts = []
    for part, w in zip(index, (a, b)):
        part = np.asarray(part, dtype=np.float64).ravel()
        norm = np.linalg.norm(part)
        if norm == 0:
            raise InputError("an index part is the zero vector; it has no direction")
        parts.append(np.sqrt(w) * part / norm)
    return np.concatenate(parts)

def protection_bound(weights=(1.0, 1.0)) -> float:
    """The public clip bound: entries of sqrt(w) x unit vector lie in [-sqrt(w), sqrt(w)]."""
    a, b = _weights(weights)
    return float(np.sqrt(max(a, b)))

def _weights(weights) -> tuple[float, float]:
    a, b = (float(w) for w in weights)
    if not (a > 0 and b > 0):
        raise ParameterError(f"part weights must be positive (pre-scaling), got {weights}")
    return a, b

def pair_similarity(distances, *, weights=(1.0, 1.0)) -> np.ndarray:
    """``s(i, j) = a cos_f + b cos_l = (a + b) - D_ij / 2`` from the squared distances."""
    a, b = _weights(weights)
    return (a + b) - check_distance_matrix(distances) / 2.0

def direct_pair_similarity(indices, *, weights=(1.0, 1.0)) -> np.ndarray:
    """Plaintext reference: ``a cos_f + b cos_l`` from the indices themselves."""
    a, b = _weights(weights)
    f = np.stack([np.asarray(i[0], float) / np.linalg.norm(i[0]) for i in indices])
    lab = np.stack([np.asarray(i[1], float) / np.linalg.norm(i[1]) for i in indices])
    return a * (f @ f.T) + b * (lab @ lab.T)

def set_similarity(similarity, members) -> np.ndarray:
    """``S(i, C)``: mean of ``s(i, j)`` over ``j in C, j != i`` for every client i (0 if empty)."""
    s = np.asarray(similarity, dtype=np.float64)
    members = np.unique(np.asarray(members, dtype=np.int64))
    n = s.shape[0]
    if members.size and (members.min() < 0 or members.max() >= n):
        raise ParameterError(f"set members must be client indices in [0, {n})")
    inside = np.zeros(n, dtype=bool)
    inside[members] = True
    total = s[:, members].sum(axis=1) - np.where(inside, np.diag(s), 0.0)
    count = members.size - inside.astype(np.float64)
    return np.divide(total, count, out=np.zeros(n), where=count > 0)

def sampling_probabilities(similarity, previous, *, tau: float = DEFAULT_TAU) -> np.ndarray:
    """``p_i ∝ exp(S(i, C_prev) / tau)``: the sampling distribution for the next round."""
    if not tau > 0:
        raise ParameterError(f"tau must be > 0, got {tau}")
    return _softmax(set_similarity(similarity, previous) / tau)

def mwu_weights(similarity, history, *, data_weights=None, among=None,
                lambda_1: float = DEFAULT_LAMBDA, gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """MWU aggregation weights ``∝ q_i exp((1/lambda_1) sum_tau gamma^(t-tau) S(i, C_tau))``.

    Parameters
    ----------
    similarity : ndarray (n, n)
        Pairwise ``s(i, j)`` (from :func:`pair_similarity`).
    history : sequence of index arrays
        The sampled sets ``C^1..C^t`` (oldest first).
    data_weights : array (n,), optional
        ``q_i`` (uniform by default).
    among : index array, optional
        Normalize over these clients (e.g. the round's participants); others get 0.
    """
    if not lambda_1 > 0:
        raise ParameterError(f"lambda_1 must be > 0, got {lambda_1}")
    s = np.asarray(similarity, dtype=np.float64)
    n = s.shape[0]
    t = len(history)
    score = np.zeros(n)
    for tau_index, members in enumerate(history, start=1):
        score += gamma ** (t - tau_index) * set_similarity(s, members)
    q = np.ones(n) if data_weights is None else np.asarray(data_weights, dtype=np.float64)
    if q.shape != (n,) or (q < 0).any():
        raise ParameterError(f"data_weights must be {n} non-negative numbers")
    logits = np.where(q > 0, np.log(np.where(q > 0, q, 1.0)) + score / lambda_1, -np.inf)
    mask = np.zeros(n, dtype=bool)
    mask[np.arange(n) if among is None else np.asarray(among, dtype=np.int64)] = True
    logits = np.where(mask, logits, -np.inf)
    return _softmax(logits)

def _softmax(logits) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    top = logits[np.isfinite(logits)].max()
    e = np.where(np.isfinite(logits), np.exp(logits - top), 0.0)
    return e / e.sum()

def sample_clients(probabilities, count: int, rng) -> np.ndarray:
    """Draw ``count`` distinct clients with the given probabilities (server-side randomness)."""
    p = np.asarray(probabilities, dtype=np.float64)
    return np.sort(rng.choice(p.size, size=int(count), replace=False, p=p))

def cluster_indices(distances, n_clusters: int, *, random_state: int = 0) -> np.ndarray:
    """**omnifc extension** (Client2Vec does not cluster): k-means on the protected indices."""
    return kmeans_from_distances(distances, n_clusters, random_state=random_state)

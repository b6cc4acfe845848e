"""Client2Vec (ICCV 2025, arXiv 2405.16233) on protected client indices.

Client side: from per-sample embeddings the caller supplies (the paper: a CLIP image
embedding passed through its DSA-IGN network for the feature part, the CLIP text embedding
of the label for the label part; any encoder's output is accepted), the client index is
``beta_i = mean over samples of [u^f; u^l]``. The client L2-normalizes each part and
protects ``x_i = [sqrt(a) beta^f / |beta^f|; sqrt(b) beta^l / |beta^l|]`` so that

    a cos_f(i, j) + b cos_l(i, j) = (a + b) - D_ij / 2.

Server side: similarity-driven client sampling and MWU aggregation weights:

    p_i^t  = exp(S(i, C^{t-1}) / tau) / sum_j exp(S(j, C^{t-1}) / tau)
    w_i^t  ∝ q_i exp((1 / lambda_1) sum_{tau'=1..t} gamma^(t - tau') S(i, C^{tau'}))

The definition of S implemented here (the reference notes mark the paper's exact form as
unverified; this is omnifc's choice): the pairwise similarity is
``s(i, j) = a cos_f(i, j) + b cos_l(i, j)`` with ``a = b = 1`` (the unweighted sum of the
two cosines), and the similarity of client i to a set C is the mean of ``s(i, j)`` over
``j in C, j != i`` (0 if that set is empty). Defaults, also omnifc's choice:
``tau = 1.0``, ``lambda_1 = 1.0``, ``gamma = 0.9``. Weights ``a, b`` must be positive
(pre-scaling); a subtracted label part would need two reconstructions and is not offered.

Public bound: every entry of a unit vector lies in [-1, 1], so the clip bound is
``sqrt(max(a, b))`` (1 for the default) and nothing is ever clipped.

What the coordinator learns beyond the distances
------------------------------------------------
Nothing beyond D (hence ``a cos_f + b cos_l`` for every pair, i.e. the normalized indices
up to a rigid motion). The data-size weights ``q_i`` of MWU are metadata the clients
report, as in the paper. Client2Vec itself does not cluster; :func:`cluster_indices` is an
**omnifc extension** (k-means on the protected indices).

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import client2vec
>>> d = np.array([[0.0, 0.0, 8.0], [0.0, 0.0, 8.0], [8.0, 8.0, 0.0]])
>>> s = client2vec.pair_similarity(d)
>>> float(s[0, 1]), float(s[0, 2])
(2.0, -2.0)
>>> client2vec.sampling_probabilities(s, previous=[0]).round(3).tolist()
[0.117, 0.867, 0.016]
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError, ParameterError

from .._geometry import check_distance_matrix
from ._common import kmeans_from_distances

__all__ = ["COORDINATOR_LEARNS", "client_index", "protected_vector", "protection_bound",
           "pair_similarity", "set_similarity", "sampling_probabilities", "mwu_weights",
           "sample_clients", "cluster_indices", "direct_pair_similarity",
           "synthetic_domains", "DEFAULT_TAU", "DEFAULT_LAMBDA", "DEFAULT_GAMMA"]

COORDINATOR_LEARNS = ("nothing beyond D (sum of feature and label cosines per pair); the "
                      "data-size weights q_i used by MWU are reported metadata")

DEFAULT_TAU = 1.0
DEFAULT_LAMBDA = 1.0
DEFAULT_GAMMA = 0.9


# ----------------------------------------------------------------------------- client side

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


# ----------------------------------------------------------------------------- server side

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


# ----------------------------------------------------------------------------- synthetic data

def synthetic_domains(*, n_domains: int = 4, clients_per_domain: int = 5, n_classes: int = 10,
                      feature_dim: int = 64, label_dim: int = 32, samples: int = 200,
                      alpha: float = 0.3, seed: int = 0):
    """Per-sample feature/label embeddings of clients from distinct domains with label skew.

    Feature embedding = domain vector + per-sample noise (label-free, as DSA-IGN's u^f is
    meant to be); label embedding = fixed class vector + small noise; each client's labels
    follow Dirichlet(alpha). Returns ``(clients, domains)`` with clients a list of
    ``(feature_embeddings, label_embeddings)``.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    domain_vectors = rng.standard_normal((n_domains, feature_dim))
    class_vectors = rng.standard_normal((n_classes, label_dim))
    clients, domains = [], []
    for k in range(n_domains):
        for _ in range(clients_per_domain):
            labels = rng.choice(n_classes, size=samples, p=rng.dirichlet(alpha * np.ones(n_classes)))
            f = domain_vectors[k] + 0.5 * rng.standard_normal((samples, feature_dim))
            lab = class_vectors[labels] + 0.05 * rng.standard_normal((samples, label_dim))
            clients.append((f, lab))
            domains.append(k)
    return clients, np.array(domains)

"""FMCL: the paper's client embedding and server algorithm."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from finite_field import InputError, ParameterError

from .._k_selection import DEFAULT_RULE, MAX_CLUSTERS, choose_clusters

__all__ = ["ALPHA", "BETA", "COORDINATOR_LEARNS", "DEFAULT_RESOLUTION", "EPS", "FmclResult",
           "exact_resolution", "fill_missing", "fmcl_distances", "fmcl_from_thermometer",
           "fmcl_server", "geodesic_fill", "round_weights", "signature", "thermometer_rows"]


COORDINATOR_LEARNS = ("the two squared-distance matrices D^z and D^t of the thermometer "
                      "codes: per pair the rounded class overlap and the overlap-weighted "
                      "cosine sum; no weights, means or counts")

#: alpha, beta (cap of the inverse-overlap factor) and eps: the paper's values as the
#: reference notes read them ([2nd]; the form of g is omnifc's reading, unverified).
ALPHA, BETA, EPS = 1.0, 100.0, 1e-3

#: Thermometer resolution q when the clients do not agree on :func:`exact_resolution`
#: (omnifc's choice; weights are rounded to multiples of 1/q).
DEFAULT_RESOLUTION = 500

def signature(embeddings, labels, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Client side: per-class mean embeddings (C, d) (0 for absent classes) and weights (C,)."""
    e = np.asarray(embeddings, dtype=np.float64)
    y = np.asarray(labels)
    if e.ndim != 2 or e.shape[0] != y.shape[0] or e.shape[0] == 0:
        raise InputError(f"expected embeddings (N, d) with N >= 1 labels, got {e.shape} and "
                         f"{y.shape}")
    means = np.zeros((n_classes, e.shape[1]))
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)[:n_classes]
    for c in np.flatnonzero(counts):
        means[c] = e[y == c].mean(axis=0)
    return means, counts / counts.sum()

def round_weights(weights, resolution: int = DEFAULT_RESOLUTION) -> np.ndarray:
    """Largest-remainder rounding: integers k_c >= 0 summing to q with |k_c/q - w_c| < 1/q."""
    w = np.asarray(weights, dtype=np.float64)
    q = int(resolution)
    if q < 1:
        raise ParameterError(f"resolution must be >= 1, got {resolution}")
    scaled = w / w.sum() * q
    nearest = np.round(scaled)
    if np.all(np.abs(scaled - nearest) < 1e-9 * max(q, 1)) and nearest.sum() == q:
        return nearest.astype(np.int64)     # already on the grid: exact (Delta = 0)
    k = np.floor(scaled).astype(np.int64)
    remainder = q - int(k.sum())
    if remainder:
        order = np.argsort(-(scaled - k), kind="stable")
        k[order[:remainder]] += 1
    return k

def exact_resolution(sample_counts, *, limit: int = 4096) -> int:
    """The least q with ``q n_ic / n_i`` integral for every client: lcm of the sample counts.

    With this q the thermometer encodes every class weight exactly (no rounding). Raises
    :class:`ParameterError` above ``limit`` (the code has C q d entries per client); use a
    fixed public q and :func:`thermometer_error_bound` then.

    Examples
    --------
    >>> exact_resolution([200, 300, 300])
    600
    """
    counts = [int(c) for c in np.asarray(sample_counts).ravel()]
    if not counts or min(counts) < 1:
        raise ParameterError(f"sample counts must be positive integers, got {sample_counts}")
    q = 1
    for c in counts:
        q = q * c // math.gcd(q, c)
        if q > limit:
            raise ParameterError(f"the least common multiple of the sample counts exceeds "
                                 f"limit={limit}; use a fixed resolution (weights rounded, "
                                 "error bounded by thermometer_error_bound)")
    return q

def thermometer_rows(means, weights, resolution: int = DEFAULT_RESOLUTION):
    """Client side: the two rows to protect, ``z_i`` (C q d) and ``t_i`` (C q), unnormalized.

    ``t`` has the first k_c of each class's q slots set to 1; ``z`` repeats the unit class
    mean in those slots. The server divides the squared distances by q.
    """
    means = np.asarray(means, dtype=np.float64)
    k = round_weights(weights, resolution)
    q = int(resolution)
    c, d = means.shape
    t = np.zeros((c, q))
    z = np.zeros((c, q, d))
    for cls in range(c):
        if k[cls]:
            norm = np.linalg.norm(means[cls])
            if norm == 0:
                raise InputError(f"class {cls} has weight but a zero mean embedding")
            t[cls, :k[cls]] = 1.0
            z[cls, :k[cls]] = means[cls] / norm
    return z.ravel(), t.ravel()

def _g(overlap):
    with np.errstate(divide="ignore"):
        return np.minimum(np.where(overlap > 0, overlap ** -ALPHA, np.inf), BETA)

def _combine(numerator, overlap) -> np.ndarray:
    """``D = N / (Omega + eps) g(Omega)``; inf where Omega = 0 (no shared class)."""
    overlap = np.asarray(overlap, dtype=np.float64)
    d = np.where(overlap > 0, numerator / (overlap + EPS) * _g(overlap), np.inf)
    np.fill_diagonal(d, 0.0)
    return d

def _fill(d, fill):
    if fill is False or fill is None:
        return d
    if fill is True or fill == "geodesic":
        return geodesic_fill(d)
    if fill == "paper":
        return fill_missing(d)
    raise ParameterError(f"fill must be 'geodesic', 'paper' or False, got {fill!r}")

def fmcl_distances(means, weights, *, fill="geodesic") -> np.ndarray:
    """Direct (plaintext) FMCL distance matrix from signatures (Algorithm 3).

    ``fill``: how pairs with no shared class are filled, ``"geodesic"`` (default,
    :func:`geodesic_fill`), ``"paper"`` (:func:`fill_missing`, ``D_big``) or ``False`` (inf).
    """
    means = np.asarray(means, dtype=np.float64)       # (n, C, d)
    weights = np.asarray(weights, dtype=np.float64)   # (n, C)
    norms = np.linalg.norm(means, axis=2)
    unit = np.divide(means, norms[..., None], out=np.zeros_like(means), where=norms[..., None] > 0)
    cos = np.einsum("icd,jcd->ijc", unit, unit)
    m = np.minimum(weights[:, None, :], weights[None, :, :])
    numerator = (m * (1.0 - cos)).sum(axis=2)
    d = _combine(numerator, m.sum(axis=2))
    return _fill(d, fill)

def fmcl_from_thermometer(d_z, d_t, resolution: int, *, fill="geodesic") -> np.ndarray:
    """FMCL distances from the two protected squared-distance matrices (unnormalized codes)."""
    q = float(resolution)
    dz = np.asarray(d_z, dtype=np.float64) / q
    dt = np.asarray(d_t, dtype=np.float64) / q
    numerator = np.maximum((dz - dt) / 2.0, 0.0)
    overlap = np.clip(1.0 - dt / 2.0, 0.0, 1.0)
    overlap[np.isclose(overlap, 0.0, atol=0.5 / q)] = 0.0  # overlaps are multiples of 1/q
    d = _combine(numerator, overlap)
    return _fill(d, fill)

def fill_missing(distances) -> np.ndarray:
    """The paper's fill: inf (no shared class) -> ``D_big = min(2 P95, P99)`` of finite off-diagonals."""
    d = np.array(distances, dtype=np.float64, copy=True)
    n = d.shape[0]
    off = ~np.eye(n, dtype=bool)
    finite = d[off & np.isfinite(d)]
    missing = off & ~np.isfinite(d)
    if missing.any():
        big = (min(2.0 * np.percentile(finite, 95), np.percentile(finite, 99))
               if finite.size else 1.0)
        d[missing] = big
    return d

def geodesic_fill(distances) -> np.ndarray:
    """omnifc's fill: inf (no shared class) -> the shortest path through the finite pairs.

    A missing pair is missing information, not a large distance: two clients of one domain
    with disjoint classes are each close to a third client that shares classes with both.
    Finite entries are kept; pairs with no path at all get the paper's ``D_big``.

    Examples
    --------
    >>> d = np.array([[0, 1, np.inf], [1, 0, 2], [np.inf, 2, 0]])
    >>> geodesic_fill(d).tolist()
    [[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]]
    """
    from scipy.sparse.csgraph import csgraph_from_dense, shortest_path

    d = np.array(distances, dtype=np.float64, copy=True)
    missing = ~np.isfinite(d)
    if not missing.any():
        return d
    # Sparse, with inf = no edge: every finite entry is an edge, zero-length ones too (a
    # dense csgraph reads every entry within 1e-8 of 0 as "no edge").
    graph = csgraph_from_dense(np.where(missing, np.inf, d), null_value=np.inf)
    paths = shortest_path(graph, method="D", directed=False)
    d[missing] = paths[missing]
    return fill_missing(d)

@dataclass
class FmclResult:
    """Server output: clusters, the chosen K, the K window, silhouettes, and the distances."""

    labels: np.ndarray
    n_clusters: int
    window: tuple
    silhouettes: dict
    distances: np.ndarray

def fmcl_server(distances, *, rule: str = DEFAULT_RULE,
                max_clusters: int = MAX_CLUSTERS, overlap=None) -> FmclResult:
    """Server side: cluster a filled FMCL distance matrix, choosing K by ``rule``.

    ``overlap`` (optional): the per-pair class overlap, for the overlap-stratified null of
    :func:`one_cluster_test`.
    """
    d = np.asarray(distances, dtype=np.float64)
    labels, k, window, scores = choose_clusters(d, rule=rule, max_clusters=max_clusters,
                                                overlap=overlap)
    return FmclResult(labels=labels, n_clusters=k, window=window, silhouettes=scores,
                      distances=d)

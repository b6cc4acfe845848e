"""FLUX (NeurIPS 2025, arXiv 2511.22305) on protected distribution descriptors.

Client side (official code, ``flux/``, ``public/models.py``): latents from the shared
encoder (the global model; any encoder's output is accepted) are projected by a shared,
data-independent PCA fitted on 200 points of Uniform[0, M]^D with seed 1 (a public
constant), ``l`` components (``l`` = number of classes by default). The descriptor is

    [mu_x, sigma_x, mu_1, ..., mu_U, sigma_1, ..., sigma_U]

with sigma the per-dimension population standard deviation (``np.std``, ddof 0) and
classes with fewer than 2 samples filled with -1: all class means first, then all class
stds; 2(U+1) blocks of l entries.

Server side: per-block scaling, adaptive DBSCAN (eps = the Kneedle knee, convex/increasing,
of the sorted distances of each client to its nearest other client; ``min_samples = 2``;
every noise point becomes its own cluster), centroids, and label-free test-time assignment
of a new client to the nearest centroid using only the ``[mu_x, sigma_x]`` prefix, from
distances: ``||x - c_A||^2 = mean_{j in A} D_xj - sum_{j,k in A} D_jk / (2 |A|^2)``. The new
client's descriptor is protected too: it joins a reconstruction of the prefix blocks.

Normalization: what each option reveals
---------------------------------------
The paper min-max scales each block with the range over all clients and coordinates;
distances cannot give ranges.

- ``"block_diameter"`` (**default**, distance-only): one reconstruction per block gives
  ``D_b``; the combined distance is ``sum_b D_b / diam_b^2`` with ``diam_b^2 = max_ij D_b``
  (the block's largest squared distance replaces its squared range). The coordinator learns
  the 2(U+1) per-block squared-distance matrices (each block's geometry separately: more than
  the total D, but no coordinate, range or offset).
- ``"ranges"`` (the paper's min-max scaling, exactly): each client reveals its per-block
  minimum and maximum; the coordinator broadcasts ``r_b = max_b - min_b``; clients divide
  block b by ``r_b`` (offsets cancel in distances) and one reconstruction gives the paper's
  scaled D. The coordinator learns every client's per-block min and max (2 x 2(U+1) numbers
  per client; with a secure max/min only the global ranges would be revealed).
- ``"none"``: one reconstruction of the unscaled descriptor; reveals D only.

Public bound: latents lie in [0, M] (M public, the paper's 1.02 x max activation, start 2),
so each projected coordinate lies within ``sum_k |w_k| M`` of the PCA mean; stds are at most
half that range; the filler is -1. :func:`descriptor_bound` returns that public bound.

Deviations from the paper (named)
---------------------------------
- The PCA fit uses ``np.random.RandomState(1).uniform(0, M, (200, D))``: same distribution
  and seed, the paper's exact draw sequence may differ.
- "No knee" (``KneeLocator`` returns None, where the paper's code crashes, or all
  nearest-neighbour distances equal to 1e-9 relative, where kneed would pick a knee from
  rounding noise): eps falls back to the largest nearest-neighbour distance (every client
  has a neighbour within eps, so clusters are the connected components at that scale).
- Clustering happens once, when the caller asks (the paper's timing rule on accuracy gains
  is training logic, not part of the adapter).

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import flux
>>> x = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
>>> flux.adaptive_dbscan((x - x.T) ** 2).labels.tolist()
[0, 0, 0, 1, 1, 1]
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import DBSCAN
from sklearn.decomposition import PCA

from finite_field import InputError, ParameterError

from .._geometry import centroid_sq_distances, check_distance_matrix, to_euclidean
from ._common import plaintext_distances, protect, quantize_rows

__all__ = ["COORDINATOR_LEARNS", "shared_projection", "descriptor", "descriptor_bound",
           "block_slices", "block_ranges", "combine_blocks", "block_distances",
           "DbscanResult", "adaptive_dbscan", "assign_new_clients", "prefix_distances",
           "shift_scenario", "SHIFTS"]

logger = logging.getLogger("omnifc.adapters.flux")

COORDINATOR_LEARNS = (
    "default (block_diameter): the 2(U+1) per-block squared-distance matrices; option "
    "'ranges': every client's per-block min and max; option 'none': D only. At test time: "
    "the prefix-block distances between the new client and the training clients")

NORMALIZATIONS = ("block_diameter", "ranges", "none")


# ----------------------------------------------------------------------------- client side

def shared_projection(latent_dim: int, n_components: int, *, max_value: float = 2.0,
                      n_points: int = 200, seed: int = 1) -> PCA:
    """The shared data-independent PCA ``xi``: fitted on Uniform[0, M]^D points, seed 1.

    Every client (and the server) builds the same projection from public constants.
    """
    points = np.random.RandomState(seed).uniform(0.0, max_value, size=(n_points, latent_dim))
    return PCA(n_components=n_components).fit(points)


def descriptor(latents, labels, projection: PCA, n_classes: int) -> np.ndarray:
    """Client side: ``[mu_x, sigma_x, mu_1..mu_U, sigma_1..sigma_U]`` of projected latents."""
    z = projection.transform(np.asarray(latents, dtype=np.float64))
    labels = np.asarray(labels)
    if z.shape[0] != labels.shape[0] or z.shape[0] == 0:
        raise InputError(f"expected one label per latent row and at least one row, got "
                         f"{z.shape[0]} rows and {labels.shape[0]} labels")
    l = z.shape[1]
    means, stds = [], []
    for c in range(n_classes):
        zc = z[labels == c]
        if zc.shape[0] < 2:
            means.append(-np.ones(l))
            stds.append(-np.ones(l))
        else:
            means.append(zc.mean(axis=0))
            stds.append(zc.std(axis=0))
    return np.concatenate([z.mean(axis=0), z.std(axis=0), *means, *stds])


def descriptor_bound(projection: PCA, max_value: float) -> float:
    """Public clip bound of every descriptor entry, from the projection and M alone.

    A latent in [0, M]^D projects to ``w_k . (x - mean)``, at most ``sum |w_k| M`` in
    magnitude (the PCA mean lies in the box); stds are smaller; the filler is -1.
    """
    reach = np.abs(projection.components_).sum(axis=1).max() * max_value
    return float(max(1.0, reach))


def block_slices(n_components: int, n_classes: int) -> list[slice]:
    """The 2(U+1) blocks of ``l`` entries of the descriptor, in layout order."""
    return [slice(b * n_components, (b + 1) * n_components) for b in range(2 * (n_classes + 1))]


# ----------------------------------------------------------------------------- server side

def block_ranges(descriptors, n_components: int, n_classes: int) -> np.ndarray:
    """Option "ranges": per-block max - min over all clients and coordinates (reveals them)."""
    x = np.asarray(descriptors, dtype=np.float64)
    out = []
    for s in block_slices(n_components, n_classes):
        r = x[:, s].max() - x[:, s].min()
        out.append(r if r > 0 else 1.0)   # MinMaxScaler maps a constant block to 0
    return np.array(out)


def combine_blocks(block_matrices, scales=None) -> np.ndarray:
    """``sum_b D_b / s_b^2`` (``s_b`` = block diameter by default; 1 for a constant block)."""
    total = None
    for b, d in enumerate(block_matrices):
        d = np.asarray(d, dtype=np.float64)
        scale2 = float(d.max()) if scales is None else float(scales[b]) ** 2
        scale2 = scale2 if scale2 > 0 else 1.0
        total = d / scale2 if total is None else total + d / scale2
    return total


def block_distances(descriptors, *, n_components: int, n_classes: int, bound: float,
                    normalization: str = "block_diameter", secure: bool = True,
                    scale_bits: int = 16, parties=None, blocks=None, **options):
    """The scaled squared-distance matrix the server clusters on (see module for leakage).

    Returns ``(D, block_matrices, scales)``; ``block_matrices`` is None unless the
    normalization needs them. ``secure=False`` computes the same from the same quantized
    descriptors in the clear (the plaintext reference). ``blocks`` restricts to a subset
    of block indices (test time uses the prefix blocks 0 and 1).
    """
    if normalization not in NORMALIZATIONS:
        raise ParameterError(f"normalization must be one of {NORMALIZATIONS}, got "
                             f"{normalization!r}")
    x = np.asarray(descriptors, dtype=np.float64)
    slices = block_slices(n_components, n_classes)
    chosen = range(len(slices)) if blocks is None else list(blocks)

    def run(rows, row_bound):
        if secure:
            return protect(rows, bound=row_bound, scale_bits=scale_bits, parties=parties,
                           **options).distances
        return plaintext_distances(quantize_rows(rows, bound=row_bound, scale_bits=scale_bits))

    if normalization == "ranges":
        ranges = block_ranges(x, n_components, n_classes)
        scaled = np.concatenate([x[:, slices[b]] / ranges[b] for b in chosen], axis=1)
        return run(scaled, bound / ranges.min()), None, ranges
    if normalization == "none":
        rows = np.concatenate([x[:, slices[b]] for b in chosen], axis=1)
        return run(rows, bound), None, None
    matrices = [run(x[:, slices[b]], bound) for b in chosen]
    return combine_blocks(matrices), matrices, np.sqrt([max(float(d.max()), 0.0) for d in matrices])


@dataclass
class DbscanResult:
    """Labels (noise points relabelled as their own clusters), eps, and whether a knee existed."""

    labels: np.ndarray
    eps: float
    knee_found: bool
    n_clusters: int


def adaptive_dbscan(distances, *, eps_scaling: float = 1.0, min_samples: int = 2) -> DbscanResult:
    """FLUX's adaptive DBSCAN on squared distances (``CLIENT_CLUSTER_METHOD=4``).

    eps = the knee (``kneed.KneeLocator(curve="convex", direction="increasing")``) of the
    sorted distances of each client to its nearest other client, times ``eps_scaling``;
    ``DBSCAN(eps, min_samples=2)`` on sqrt(D) with ``metric="precomputed"``; every noise
    point becomes its own cluster. No knee: eps = the largest nearest-neighbour distance.

    With ``min_samples = 2`` a client is a core point exactly when its nearest other client
    is within eps, and a client whose nearest other client is farther than eps cannot be a
    border point either; so every client whose nearest-neighbour distance exceeds
    ``sorted[knee] * eps_scaling`` ends up a singleton. At the paper's default
    ``eps_scaling = 1.0`` that is every client above the knee, which Kneedle puts where the
    sorted curve bends, below its top: groups of iid clients come back with their
    most isolated members split off (measured: exactly 2 clusters for 2 groups of 10 on 0 of
    20 seeds even at a between/within separation of 1000, independent of sample size, since
    the knee is scale-free). The clusters are never mixed; ``eps_scaling`` > max 1-NN
    distance / knee distance (1.15 at most on the FLUX scenario, in high dimension the 1-NN
    distances concentrate) joins the singletons to their groups: the tests use 1.5.
    """
    from kneed import KneeLocator

    e = to_euclidean(check_distance_matrix(distances))
    n = e.shape[0]
    if n < 2:
        return DbscanResult(labels=np.zeros(n, dtype=np.int64), eps=0.0, knee_found=False,
                            n_clusters=n)
    nearest = np.sort(np.where(np.eye(n, dtype=bool), np.inf, e).min(axis=1))
    if nearest[-1] - nearest[0] <= 1e-9 * max(nearest[-1], 1e-300):
        knee = None   # a flat curve has no knee (kneed would pick one from rounding noise)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # kneed warns when it finds no knee
            knee = KneeLocator(range(n), nearest, curve="convex", direction="increasing").knee
    found = knee is not None
    eps = float(nearest[int(knee)] if found else nearest[-1]) * eps_scaling
    if eps <= 0:
        eps = np.finfo(np.float64).tiny
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit(e).labels_
    labels = labels.astype(np.int64)
    next_label = labels.max() + 1
    for i in np.flatnonzero(labels == -1):
        labels[i] = next_label
        next_label += 1
    if not found:
        logger.info("no knee in the nearest-neighbour distances; eps = largest (%.4g)", eps)
    return DbscanResult(labels=labels, eps=eps, knee_found=found,
                        n_clusters=len(set(labels.tolist())))


def prefix_distances(train_descriptors, new_descriptors, *, n_components: int, n_classes: int,
                     bound: float, scales=None, normalization: str = "block_diameter",
                     secure: bool = True, scale_bits: int = 16, parties=None,
                     **options) -> np.ndarray:
    """Squared distances on the ``[mu_x, sigma_x]`` prefix among training + new clients.

    Scaled with the training-time scales (``scales`` from :func:`block_distances`: the
    fitted scalers, as in the paper). Rows 0..n_train-1 are the training clients.
    """
    rows = np.concatenate([np.asarray(train_descriptors, float),
                           np.asarray(new_descriptors, float)])
    slices = block_slices(n_components, n_classes)
    scales = np.ones(len(slices)) if scales is None or normalization == "none" else scales

    def run(block_rows, row_bound):
        if secure:
            return protect(block_rows, bound=row_bound, scale_bits=scale_bits, parties=parties,
                           **options).distances
        return plaintext_distances(quantize_rows(block_rows, bound=row_bound,
                                                 scale_bits=scale_bits))

    if normalization == "block_diameter":
        return combine_blocks([run(rows[:, slices[b]], bound) for b in (0, 1)],
                              scales=[scales[0], scales[1]])
    scaled = np.concatenate([rows[:, slices[b]] / scales[b] for b in (0, 1)], axis=1)
    return run(scaled, bound / min(scales[0], scales[1]))


def assign_new_clients(prefix, labels) -> np.ndarray:
    """Test time: nearest cluster centroid on the prefix, from distances only.

    ``prefix`` is the (n_train + n_new)² prefix squared-distance matrix (training clients
    first); ``labels`` the training clusters. Returns the cluster label of each new client.
    """
    labels = np.asarray(labels)
    n_train = labels.size
    d = check_distance_matrix(prefix)
    if d.shape[0] <= n_train:
        raise ParameterError("the prefix matrix holds no new clients")
    clusters = sorted(set(labels.tolist()))
    groups = [np.flatnonzero(labels == c) for c in clusters]
    to_centroid = centroid_sq_distances(d, groups, rows=np.arange(n_train, d.shape[0]))
    return np.array(clusters)[np.argmin(to_centroid, axis=1)]


# ----------------------------------------------------------------------------- synthetic data

SHIFTS = ("P(X)", "P(Y)", "P(Y|X)", "P(X|Y)")


def shift_scenario(shift: str, *, n_clients: int = 20, n_new: int = 10, n_classes: int = 10,
                   dim: int = 50, samples: int = 200, seed: int = 0):
    """Two groups of clients differing by one distribution shift (identity encoder, D = 50).

    - ``P(X)``: group 1's features are offset by a fixed vector (covariate shift);
    - ``P(Y)``: group 0 draws only classes 0..U/2-1, group 1 only the others;
    - ``P(Y|X)``: group 1's labels are permuted (same features: concept shift);
    - ``P(X|Y)``: group 1's class means move by per-class offsets.

    Latents are clipped to [0, M] with M = 2 x the public start value's scale (here M = 8):
    post-ReLU activations. Returns ``(train, new)``; each a list of ``(latents, labels)`` and
    an array of group indices.
    """
    if shift not in SHIFTS:
        raise ParameterError(f"shift must be one of {SHIFTS}, got {shift!r}")
    rng = np.random.Generator(np.random.PCG64(seed))
    centre = 4.0
    class_means = centre + rng.normal(0.0, 1.0, (n_classes, dim))
    offset = rng.normal(0.0, 1.0, dim)
    class_offsets = rng.normal(0.0, 1.0, (n_classes, dim))
    permutation = np.roll(np.arange(n_classes), 1)

    def client(group):
        if shift == "P(Y)":
            p = np.zeros(n_classes)
            p[np.arange(n_classes // 2) + (n_classes // 2) * group] = 1.0 / (n_classes // 2)
        else:
            p = np.full(n_classes, 1.0 / n_classes)
        y = rng.choice(n_classes, size=samples, p=p)
        x = class_means[y] + 0.5 * rng.standard_normal((samples, dim))
        if group == 1 and shift == "P(X)":
            x = x + offset
        if group == 1 and shift == "P(X|Y)":
            x = x + class_offsets[y]
        if group == 1 and shift == "P(Y|X)":
            y = permutation[y]
        return np.clip(x, 0.0, 2 * centre), y

    def make(count):
        groups = np.arange(count) % 2
        return [client(g) for g in groups], groups

    return make(n_clients), make(n_new)

"""FLUX (NeurIPS 2025, arXiv 2511.22305) on protected distribution descriptors.

Client side (official code, ``flux/``, ``public/models.py``): latents from the shared
encoder (the global model; any encoder's output is accepted) are projected by a shared,
data-independent PCA fitted on 200 points of Uniform[0, M]^D with seed 1 (a public
constant), ``l`` components (``l`` = number of classes by default). The paper's descriptor
(``form="paper"``) is

    [mu_x, sigma_x, mu_1, ..., mu_U, sigma_1, ..., sigma_U]

with sigma the per-dimension population standard deviation (``np.std``, ddof 0) and
classes with fewer than 2 samples filled with -1: all class means first, then all class
stds; 2(U+1) blocks of l entries. omnifc's default (``form="weighted"``, *our choice*)
keeps the layout and the prefix and weights each class block by the square root of the
class's share of the client's rows, ``sqrt(f_c) (mu_c - mu_x)`` and ``sqrt(f_c) sigma_c``
(zeros for classes with < 2 samples): the squared blocks decompose the client's variance, so
the label mix (what label shift changes) enters every class block and rare classes weigh
little (see :func:`descriptor` and docs/adapters.md for the measured reason).

Server side: optional per-block scaling (none by default), automatic K from D
(:func:`cluster_clients`): omnifc's Ward gap rule by default (``k_rule="ward"``,
:func:`ward_gap`: Ward's tree on D cut at the widest relative gap of its merge heights,
*our choice*, measured in docs/adapters.md) or FLUX's adaptive DBSCAN (``k_rule="dbscan"``,
``min_samples = 2``; every noise point becomes its own cluster) with eps from omnifc's gap
rule (:func:`gap_eps`: the widest relative gap of the MST edge lengths, the previous
default) or the paper's knee (``eps_rule="knee"``: the Kneedle knee, convex/increasing, of
the sorted distances of each client to its nearest other client, times ``eps_scaling``),
centroids, and label-free test-time assignment of a new client to the nearest centroid
using only the ``[mu_x, sigma_x]`` prefix, from distances:
``||x - c_A||^2 = mean_{j in A} D_xj - sum_{j,k in A} D_jk / (2 |A|^2)``. The new client's
descriptor is protected too: it joins a reconstruction of the prefix blocks.

Normalization: what each option reveals
---------------------------------------
The paper min-max scales each block with the range over all clients and coordinates;
distances cannot give ranges.

- ``"none"`` (**default**): one reconstruction of the unscaled descriptor; reveals D only.
- ``"block_neighbour"`` (distance-only, *our choice*): one reconstruction per block; block b
  is divided by its noise scale, the median over clients of the squared distance to the
  nearest other client in that block (:func:`neighbour_scales`). Reveals the per-block
  matrices, like ``"block_diameter"``.
- ``"block_diameter"`` (distance-only, the previous default): one reconstruction per block
  gives ``D_b``; the combined distance is ``sum_b D_b / diam_b^2`` with
  ``diam_b^2 = max_ij D_b`` (the block's largest squared distance replaces its squared
  range). The coordinator learns the 2(U+1) per-block squared-distance matrices (each
  block's geometry separately: more than the total D, but no coordinate, range or offset).
- ``"ranges"`` (the paper's min-max scaling, exactly): each client reveals its per-block
  minimum and maximum; the coordinator broadcasts ``r_b = max_b - min_b``; clients divide
  block b by ``r_b`` (offsets cancel in distances) and one reconstruction gives the paper's
  scaled D. The coordinator learns every client's per-block min and max (2 x 2(U+1) numbers
  per client; with a secure max/min only the global ranges would be revealed).

Public bound: latents lie in [0, M] (M public, the paper's 1.02 x max activation, start 2),
so each projected coordinate lies within ``sum_k |w_k| M`` of the PCA mean; stds are at most
half that range; the filler is -1; the weighted class blocks stay within it too.
:func:`descriptor_bound` returns that public bound.

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
           "neighbour_scales", "DESCRIPTOR_FORMS", "NORMALIZATIONS",
           "DbscanResult", "adaptive_dbscan", "gap_eps", "EPS_RULES", "MIN_GAP",
           "ward_gap", "cluster_clients", "K_RULES", "WARD_MIN_GAP",
           "assign_new_clients", "prefix_distances",
           "shift_scenario", "SHIFTS", "client_descriptors", "FluxRun", "run_flux",
           "flux_baselines"]

logger = logging.getLogger("omnifc.adapters.flux")

COORDINATOR_LEARNS = (
    "default (normalization 'none'): D only; options 'block_neighbour' and "
    "'block_diameter': the 2(U+1) per-block squared-distance matrices; option 'ranges': "
    "every client's per-block min and max. At test time: "
    "the prefix-block distances between the new client and the training clients; run_flux "
    "also reveals M, the largest latent activation over all clients (the paper's rule)")

#: Server-side normalizations: ``"none"`` (default), ``"block_neighbour"`` (*our choice*),
#: ``"block_diameter"`` (*our choice*, the previous default), ``"ranges"`` (the paper's).
NORMALIZATIONS = ("none", "block_neighbour", "block_diameter", "ranges")


# ----------------------------------------------------------------------------- client side

def shared_projection(latent_dim: int, n_components: int, *, max_value: float = 2.0,
                      n_points: int = 200, seed: int = 1) -> PCA:
    """The shared data-independent PCA ``xi``: fitted on Uniform[0, M]^D points, seed 1.

    Every client (and the server) builds the same projection from public constants.
    """
    points = np.random.RandomState(seed).uniform(0.0, max_value, size=(n_points, latent_dim))
    return PCA(n_components=n_components).fit(points)


#: Descriptor forms: ``"weighted"`` (**default, omnifc's**) and ``"paper"`` (the paper's).
DESCRIPTOR_FORMS = ("weighted", "paper")


def descriptor(latents, labels, projection: PCA, n_classes: int, *,
               form: str = "weighted") -> np.ndarray:
    """Client side: the ``2(U+1)``-block descriptor of the projected latents.

    ``form="paper"`` (the paper's): ``[mu_x, sigma_x, mu_1..mu_U, sigma_1..sigma_U]``;
    classes with fewer than 2 samples are filled with -1.

    ``form="weighted"`` (**default, omnifc's**): the same prefix ``[mu_x, sigma_x]``, and each
    class block weighted by the square root of the class's share ``f_c = n_c / n`` of the
    client's rows: ``sqrt(f_c) (mu_c - mu_x)``, then ``sqrt(f_c) sigma_c``; a class with fewer
    than 2 samples gives zeros (its value at ``f_c = 0``, no filler). The squared norms
    decompose the client's variance per coordinate, ``sigma_x^2 = sum_c f_c sigma_c^2 +
    sum_c f_c (mu_c - mu_x)^2`` (up to the classes left out), so every class block weighs
    what the class weighs in the client's data: the label mix (what label shift changes)
    enters every class block, a rare class's noisy statistics enter with a small weight, and
    a class a client happens to miss no longer jumps to a filler.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> proj = flux.shared_projection(3, 1, max_value=2.0)
    >>> x = np.array([[0.0, 0, 0], [0.2, 0, 0], [1, 1, 1], [1.2, 1, 1]])
    >>> d = flux.descriptor(x, [0, 0, 1, 1], proj, 3)
    >>> z = proj.transform(x)[:, 0]
    >>> bool(np.allclose(d[2:4], np.sqrt(0.5) * (np.array([z[:2].mean(), z[2:].mean()])
    ...                                          - z.mean()))), float(d[4])    # class 2 absent
    (True, 0.0)
    >>> bool(np.isclose(d[1] ** 2, (d[2:5] ** 2).sum() + (d[5:8] ** 2).sum()))  # variance
    True
    """
    if form not in DESCRIPTOR_FORMS:
        raise ParameterError(f"form must be one of {DESCRIPTOR_FORMS}, got {form!r}")
    z = projection.transform(np.asarray(latents, dtype=np.float64))
    labels = np.asarray(labels)
    if z.shape[0] != labels.shape[0] or z.shape[0] == 0:
        raise InputError(f"expected one label per latent row and at least one row, got "
                         f"{z.shape[0]} rows and {labels.shape[0]} labels")
    l = z.shape[1]
    mu = z.mean(axis=0)
    means, stds = [], []
    for c in range(n_classes):
        zc = z[labels == c]
        if zc.shape[0] < 2:
            filler = -1.0 if form == "paper" else 0.0
            means.append(np.full(l, filler))
            stds.append(np.full(l, filler))
        elif form == "paper":
            means.append(zc.mean(axis=0))
            stds.append(zc.std(axis=0))
        else:
            weight = np.sqrt(zc.shape[0] / z.shape[0])
            means.append(weight * (zc.mean(axis=0) - mu))
            stds.append(weight * zc.std(axis=0))
    return np.concatenate([mu, z.std(axis=0), *means, *stds])


def descriptor_bound(projection: PCA, max_value: float) -> float:
    """Public clip bound of every descriptor entry, from the projection and M alone.

    A latent in [0, M]^D projects to ``w_k . (x - mean)``, at most ``sum |w_k| M`` in
    magnitude (the PCA mean lies in the box); stds are smaller; the filler is -1. The
    weighted class means obey it too: ``sqrt(f) (mu_c - mu_x) = sqrt(f) (1 - f) (mu_c -
    mu_rest)`` with ``|w_k . (a - b)| <= sum |w_k| M`` for a, b in the box and
    ``sqrt(f) (1 - f) <= 0.39``.
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


def neighbour_scales(block_matrices) -> np.ndarray:
    """Per-block noise scale: sqrt of the median over clients of the squared distance to the
    nearest other client in that block (``"block_neighbour"``, omnifc's default).

    Falls back to the block diameter when that median is 0 (duplicate clients), and to 1
    for a constant block.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [1.0], [3.0], [5.0]])
    >>> (flux.neighbour_scales([(x - x.T) ** 2]) ** 2).round(6).tolist()   # median(1, 1, 4, 4)
    [2.5]
    """
    out = []
    for d in block_matrices:
        d = np.asarray(d, dtype=np.float64)
        n = d.shape[0]
        nearest = np.where(np.eye(n, dtype=bool), np.inf, d).min(axis=1) if n > 1 else d[0]
        scale2 = float(np.median(nearest))
        if not scale2 > 0:
            scale2 = float(d.max())
        out.append(np.sqrt(scale2) if scale2 > 0 else 1.0)
    return np.array(out)


def block_distances(descriptors, *, n_components: int, n_classes: int, bound: float,
                    normalization: str = "none", secure: bool = True,
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
    if normalization == "block_neighbour":
        scales = neighbour_scales(matrices)
        return combine_blocks(matrices, scales=scales), matrices, scales
    return combine_blocks(matrices), matrices, np.sqrt([max(float(d.max()), 0.0) for d in matrices])


@dataclass
class DbscanResult:
    """Labels (noise points relabelled as their own clusters), eps, and how eps was chosen.

    ``knee_found`` is whether the rule found its landmark (the knee for ``"knee"``, a gap of
    at least ``min_gap`` for ``"gap"``); ``gap`` is the gap rule's ratio (None for the knee).
    """

    labels: np.ndarray
    eps: float
    knee_found: bool
    n_clusters: int
    gap: float | None = None


EPS_RULES = ("gap", "knee")

#: (our choice) the gap rule looks for the widest gap among the upper half of the MST edges
#: (each planted cluster has >= 2 clients, so at least half of the edges are within-cluster).
GAP_SEARCH_FROM = 0.5
#: (our choice) below this ratio of consecutive MST edge lengths there is no structure: one
#: cluster. Measured on digits/MLP descriptors of iid clients: <= 1.08 (docs/adapters.md).
MIN_GAP = 1.15


def _mst_edges(e: np.ndarray) -> np.ndarray:
    """The n - 1 MST edge lengths, sorted: single linkage's merge heights. (A sparse MST
    reads a zero entry as "no edge", so duplicate clients were spanned by their positive
    edges instead of the zero ones; single linkage takes zeros as distances.)"""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    return np.sort(linkage(squareform(e, checks=False), method="single")[:, 2])


def gap_eps(distances, *, search_from: float = GAP_SEARCH_FROM,
            min_gap: float = MIN_GAP) -> tuple[float, float, bool]:
    """omnifc's data-driven eps: the widest relative gap in the MST edge lengths.

    DBSCAN with ``min_samples = 2`` links two clients exactly when they are within eps, so
    its clusters are the connected components of the eps-graph, which only change when eps
    crosses a minimum-spanning-tree edge length. Sorting the n - 1 MST edges
    ``e_1 <= ... <= e_{n-1}``, every eps in ``[e_j, e_{j+1})`` gives the same partition (into
    n - j clusters). The rule picks the partition that persists over the widest relative
    range of eps: ``j* = argmax e_{j+1} / e_j`` over the upper half of the edges, and
    ``eps = sqrt(e_j* e_{j*+1})`` (the geometric middle of the gap). When the widest gap is
    below ``min_gap`` there is no cluster structure and eps is the largest edge (one cluster).

    The 1-NN curve the paper's knee reads holds only the within-cluster scale (every client
    of a cluster of >= 2 has its nearest neighbour inside it); the MST also holds the
    K - 1 edges that join clusters, which is where the gap is.

    Returns ``(eps, gap ratio, found)``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [1.0], [2.0], [10.0], [11.5]])
    >>> eps, ratio, found = gap_eps((x - x.T) ** 2)
    >>> round(eps, 3), round(ratio, 2), found    # edges 1, 1, 1.5 | 8: eps = sqrt(1.5 * 8)
    (3.464, 5.33, True)
    """
    e = to_euclidean(check_distance_matrix(distances))
    n = e.shape[0]
    if n < 3:
        return (float(e.max()) if n == 2 else 0.0), 1.0, False
    edges = _mst_edges(e)
    _, ratio, cut = _widest_gap(edges, search_from)
    if not ratio >= min_gap:
        return float(edges[-1]), ratio, False
    return cut, ratio, True


def _widest_gap(heights: np.ndarray, search_from: float) -> tuple[int, float, float]:
    """``(j, ratio, cut)`` of the widest relative gap ``heights[j + 1] / heights[j]`` over
    ``j >= floor(search_from * m)`` (``m`` = len(heights) >= 2, sorted ascending; at least the
    last gap is searched, so 3 clients may split 2 + 1); a gap after 0 is infinite (1
    between two zeros); ``cut`` is the geometric middle of the gap (half the upper height
    after 0)."""
    m = heights.size
    start = min(int(np.floor(search_from * m)), m - 2)   # m - 1 crashed with 3 clients
    lower, upper = heights[start:-1], heights[start + 1:]
    ratios = np.where(upper > 0, np.inf, 1.0)           # after a zero height
    positive = lower > 0
    ratios[positive] = upper[positive] / lower[positive]
    j = int(np.argmax(ratios))
    low, high = float(lower[j]), float(upper[j])
    cut = float(np.sqrt(low * high)) if low > 0 else high / 2.0
    return start + j, float(ratios[j]), cut


def adaptive_dbscan(distances, *, eps_rule: str = "gap", eps_scaling: float = 1.0,
                    min_samples: int = 2, min_gap: float = MIN_GAP) -> DbscanResult:
    """FLUX's adaptive DBSCAN on squared distances, with omnifc's eps rule by default.

    (FLUX's default K rule is now :func:`ward_gap`; this is ``k_rule="dbscan"`` of
    :func:`cluster_clients`.) ``eps_rule="gap"`` (this function's default, omnifc's): eps
    in the widest relative gap of the minimum-spanning-tree edge lengths (:func:`gap_eps`;
    no knob: ``min_gap`` only decides "one cluster or more"). ``eps_rule="knee"`` (the
    paper's, ``CLIENT_CLUSTER_METHOD=4``): eps = the knee
    (``kneed.KneeLocator(curve="convex", direction="increasing")``) of the sorted
    distances of each client to its nearest other client, times ``eps_scaling`` (the
    paper's default 1.0); no knee: eps = the largest nearest-neighbour distance.
    Then ``DBSCAN(eps, min_samples=2)`` on sqrt(D) with ``metric="precomputed"``; every
    noise point becomes its own cluster.

    Why the knee over-splits: with ``min_samples = 2`` a client is a core point exactly when
    its nearest other client is within eps, and a client whose nearest other client is
    farther than eps cannot be a border point either; so every client whose nearest-neighbour
    distance exceeds ``sorted[knee] * eps_scaling`` ends up a singleton. At the paper's
    default ``eps_scaling = 1.0`` that is every client above the knee, which Kneedle puts
    where the sorted curve bends, below its top: groups of iid clients come back with their
    most isolated members split off (measured: exactly 2 clusters for 2 groups of 10 on 0 of
    20 seeds even at a between/within separation of 1000, independent of sample size, since
    the knee is scale-free). ``eps_scaling`` only moves eps relative to the within-cluster
    scale and cannot see the between-cluster one; the gap rule reads both from the MST.
    """
    if eps_rule not in EPS_RULES:
        raise ParameterError(f"eps_rule must be one of {EPS_RULES}, got {eps_rule!r}")
    e = to_euclidean(check_distance_matrix(distances))
    n = e.shape[0]
    if n < 2:
        return DbscanResult(labels=np.zeros(n, dtype=np.int64), eps=0.0, knee_found=False,
                            n_clusters=n)
    gap = None
    if eps_rule == "gap":
        eps, gap, found = gap_eps(e * e, min_gap=min_gap)
        eps *= eps_scaling
    else:
        from kneed import KneeLocator

        nearest = np.sort(np.where(np.eye(n, dtype=bool), np.inf, e).min(axis=1))
        if nearest[-1] - nearest[0] <= 1e-9 * max(nearest[-1], 1e-300):
            knee = None   # a flat curve has no knee (kneed would pick one from rounding noise)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # kneed warns when it finds no knee
                knee = KneeLocator(range(n), nearest, curve="convex",
                                   direction="increasing").knee
        found = knee is not None
        eps = float(nearest[int(knee)] if found else nearest[-1]) * eps_scaling
        if not found:
            logger.info("no knee in the nearest-neighbour distances; eps = largest (%.4g)", eps)
    if eps <= 0:
        eps = np.finfo(np.float64).tiny
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit(e).labels_
    labels = labels.astype(np.int64)
    next_label = labels.max() + 1
    for i in np.flatnonzero(labels == -1):
        labels[i] = next_label
        next_label += 1
    return DbscanResult(labels=labels, eps=eps, knee_found=found,
                        n_clusters=len(set(labels.tolist())), gap=gap)


#: (our choice) the Ward rule's "one cluster" threshold on the widest ratio of consecutive
#: Ward merge heights. Measured: iid digits clients (10 and 25, seeds 0-5) <= 1.35; planted
#: groups (every shift, K = 2, 3, 5, design seeds 0-2) >= 2.07; 1.6 lies between.
WARD_MIN_GAP = 1.6

#: How :func:`cluster_clients` chooses K: ``"ward"`` (**default, omnifc's**: :func:`ward_gap`)
#: or ``"dbscan"`` (FLUX's adaptive DBSCAN, :func:`adaptive_dbscan`, with ``eps_rule``).
K_RULES = ("ward", "dbscan")


def ward_gap(distances, *, search_from: float = GAP_SEARCH_FROM,
             min_gap: float = WARD_MIN_GAP) -> DbscanResult:
    """omnifc's default K rule: Ward's tree on D, cut at the widest relative gap.

    Ward linkage on ``sqrt(D)`` (D holds squared Euclidean distances of the descriptors, so
    Ward's Lance-Williams update is exact and the tree equals Ward on the descriptors
    themselves, which the coordinator never sees). With the n - 1 merge heights
    ``h_1 <= ... <= h_{n-1}`` (Ward's are monotone), the rule keeps the partition that
    persists over the widest relative range of heights, ``j* = argmax h_{j+1} / h_j`` over
    the upper half of the merges (``search_from``, as in :func:`gap_eps`), and returns the
    ``n - j*`` clusters that exist between ``h_j*`` and ``h_{j*+1}``. Below ``min_gap``
    there is no structure: one cluster.

    Why not single linkage (DBSCAN with ``min_samples = 2``): its merge heights are the MST
    edges, so one chain of clients whose label mixes lie between two groups joins them;
    Ward merges the pair of clusters whose union grows the within-cluster sum of squares
    least, so a group is joined to another only as a whole, and the between-group merges
    stand out as a step (measured: docs/adapters.md, FLUX).

    Returns a :class:`DbscanResult` with ``eps`` = the cut height ``sqrt(h_j* h_{j*+1})``
    (Ward's units; no DBSCAN is run), ``gap`` = the ratio, ``knee_found`` = whether it
    reached ``min_gap``. Labels are numbered in order of first appearance.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
    >>> out = flux.ward_gap((x - x.T) ** 2)
    >>> out.labels.tolist(), out.n_clusters, out.gap > flux.WARD_MIN_GAP
    ([0, 0, 0, 1, 1, 1], 2, True)
    """
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    e = to_euclidean(check_distance_matrix(distances))
    n = e.shape[0]
    if n < 3:
        return DbscanResult(labels=np.zeros(n, dtype=np.int64), eps=0.0, knee_found=False,
                            n_clusters=min(n, 1), gap=1.0)
    tree = linkage(squareform(e, checks=False), method="ward")
    heights = tree[:, 2]                  # Ward's merge heights are monotone (sorted)
    j, ratio, cut = _widest_gap(heights, search_from)
    if not ratio >= min_gap:
        return DbscanResult(labels=np.zeros(n, dtype=np.int64), eps=float(heights[-1]),
                            knee_found=False, n_clusters=1, gap=ratio)
    k = n - 1 - j                         # the j + 1 lowest merges done: n - j - 1 clusters
    # cut_tree numbers each cluster by the rank of its smallest member: first appearance
    labels = cut_tree(tree, n_clusters=k).ravel().astype(np.int64)
    return DbscanResult(labels=labels, eps=cut, knee_found=True,
                        n_clusters=int(np.unique(labels).size), gap=ratio)


def _check_k_rule(k_rule: str, eps_rule: str, eps_scaling: float) -> None:
    if k_rule not in K_RULES:
        raise ParameterError(f"k_rule must be one of {K_RULES}, got {k_rule!r}")
    if eps_rule not in EPS_RULES:
        raise ParameterError(f"eps_rule must be one of {EPS_RULES}, got {eps_rule!r}")
    if k_rule == "ward" and (eps_rule != "gap" or eps_scaling != 1.0):
        raise ParameterError(f"eps_rule and eps_scaling apply to k_rule='dbscan'; got "
                             f"eps_rule={eps_rule!r}, eps_scaling={eps_scaling} with "
                             f"k_rule='ward'")


def cluster_clients(distances, *, k_rule: str = "ward", eps_rule: str = "gap",
                    eps_scaling: float = 1.0) -> DbscanResult:
    """The server's clustering of the training clients from D, K chosen automatically.

    ``k_rule="ward"`` (**default, omnifc's**): :func:`ward_gap`. ``k_rule="dbscan"``:
    FLUX's adaptive DBSCAN (:func:`adaptive_dbscan`) with ``eps_rule`` (``"gap"``, omnifc's
    data-driven eps, or ``"knee"``, the paper's) and ``eps_scaling``. The DBSCAN options
    have no meaning for Ward: passing them with ``k_rule="ward"`` is an error (a silently
    ignored ``eps_rule="knee"`` would not run the paper's rule).

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
    >>> d = (x - x.T) ** 2
    >>> flux.cluster_clients(d).labels.tolist() == flux.cluster_clients(
    ...     d, k_rule="dbscan").labels.tolist()
    True
    """
    _check_k_rule(k_rule, eps_rule, eps_scaling)
    if k_rule == "ward":
        return ward_gap(distances)
    return adaptive_dbscan(distances, eps_rule=eps_rule, eps_scaling=eps_scaling)


def prefix_distances(train_descriptors, new_descriptors, *, n_components: int, n_classes: int,
                     bound: float, scales=None, normalization: str = "none",
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

    if normalization in ("block_neighbour", "block_diameter"):
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


# ----------------------------------------------------------------------------- end to end

#: (our choice) FedAvg rounds before the descriptors are taken (the paper clusters once the
#: round-to-round accuracy gain drops below 0.06, from round 3 on; fixed here for seeding).
WARMUP_ROUNDS = 5
#: (our choice) per-cluster FedAvg rounds after clustering.
CLUSTER_ROUNDS = 10
#: The paper's activation bound: M = 1.02 x the largest latent activation clients report.
ACTIVATION_MARGIN = 1.02


def client_descriptors(model, params, clients, projection: PCA, n_classes: int, *,
                       split: str = "train", form: str = "weighted") -> np.ndarray:
    """Each client's descriptor from the encoder ``model.latents(params, x)`` (client side)."""
    rows = []
    for c in clients:
        x, y = (c.x_train, c.y_train) if split == "train" else (c.x_test, c.y_test)
        rows.append(descriptor(model.latents(params, x), y, projection, n_classes,
                               form=form))
    return np.stack(rows)


@dataclass
class FluxRun:
    """The outcome of :func:`run_flux`.

    ``labels``: cluster per training client; ``models``: one per cluster (after per-cluster
    FedAvg); ``new_labels``: the cluster each unseen client was assigned to, label-free;
    ``accuracy`` / ``new_accuracy``: pooled test accuracy of the training / unseen clients
    with their cluster's model; ``distances``: the D the server clustered; ``eps`` and
    ``gap``: the K rule's cut (DBSCAN's eps, or Ward's cut height) and its gap ratio;
    ``global_model``: the warm-up FedAvg model (the encoder).
    """

    labels: np.ndarray
    n_clusters: int
    eps: float
    gap: float | None
    models: list
    new_labels: np.ndarray
    accuracy: float
    new_accuracy: float
    distances: np.ndarray
    prefix: np.ndarray
    global_model: np.ndarray
    max_activation: float


def run_flux(data, model, *, warmup_rounds: int = WARMUP_ROUNDS,
             cluster_rounds: int = CLUSTER_ROUNDS, local_train=None, seed: int = 0,
             secure: bool = True, normalization: str = "none", k_rule: str = "ward",
             eps_rule: str = "gap", eps_scaling: float = 1.0, n_components: int | None = None,
             descriptor_form: str = "weighted",
             scale_bits: int = 16, parties=None, new_parties=None) -> FluxRun:
    """FLUX end to end on an :func:`omnifc.fl.make_federated` data set.

    1. FedAvg warm-up of ``model`` for ``warmup_rounds`` (the global model is the encoder);
    2. clients compute descriptors of their training rows (latents of the global model,
       the shared data-independent PCA with ``l = n_classes`` components, ``M`` = 1.02 x the
       largest activation the clients report; ``descriptor_form="weighted"`` by default,
       ``"paper"`` for the paper's descriptor);
    3. the server gets the (per-block) squared distances through the secure reconstruction
       (``normalization="none"`` by default: D only) and chooses the clusters with
       :func:`cluster_clients`: ``k_rule="ward"`` by default (:func:`ward_gap`, omnifc's);
       ``k_rule="dbscan"`` runs FLUX's adaptive DBSCAN with ``eps_rule`` (``"gap"``, the
       previous default, or the paper's ``"knee"`` with ``eps_scaling``);
    4. per-cluster FedAvg from the global model for ``cluster_rounds``;
    5. test time: every unseen client (``data.new_clients``) computes its descriptor (no
       labels are needed for the ``[mu_x, sigma_x]`` prefix), the prefix distances go through
       a second reconstruction, and it takes the model of the nearest cluster centroid.

    ``secure=False`` computes the same distances from the same quantized descriptors in
    the clear; since the loop is seeded per (round, client), equal clusters give
    bit-identical models. ``parties`` / ``new_parties`` group clients into protocol parties
    (party label per training client / per training + unseen client for the prefix).
    """
    from .. import fl

    _check_k_rule(k_rule, eps_rule, eps_scaling)
    if local_train is None:
        local_train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.3)
    warm = fl.run_federated(data.clients, [model.init(seed)], rounds=warmup_rounds,
                            local_train=local_train, seed=seed)
    encoder = warm.models[0]
    latent_dim = model.latents(encoder, data.clients[0].x_train[:1]).shape[1]
    # M: the paper's 1.02 x the largest activation any client reports (the server learns it)
    largest = max(float(model.latents(encoder, c.x_train).max(initial=0.0))
                  for c in list(data.clients) + list(data.new_clients))
    max_value = ACTIVATION_MARGIN * max(largest, 1e-12)
    l = data.n_classes if n_components is None else int(n_components)
    projection = shared_projection(latent_dim, l, max_value=max_value)
    bound = descriptor_bound(projection, max_value)
    desc = client_descriptors(model, encoder, data.clients, projection, data.n_classes,
                              form=descriptor_form)
    d, _, scales = block_distances(desc, n_components=l, n_classes=data.n_classes,
                                   bound=bound, normalization=normalization, secure=secure,
                                   scale_bits=scale_bits, parties=parties)
    found = cluster_clients(d, k_rule=k_rule, eps_rule=eps_rule, eps_scaling=eps_scaling)
    labels = found.labels
    clustered = fl.run_federated(data.clients, [encoder] * found.n_clusters,
                                 rounds=cluster_rounds, local_train=local_train,
                                 assign=fl.fixed_assign(labels), seed=seed + 1)
    accuracy = fl.mean_accuracy(model, clustered.models, labels, data.clients)
    new_labels = np.zeros(0, dtype=np.int64)
    new_accuracy = float("nan")
    prefix = np.zeros((0, 0))
    if len(data.new_clients):
        # label-free: only the [mu_x, sigma_x] prefix is used (per-class blocks are ignored)
        new_desc = client_descriptors(model, encoder, data.new_clients, projection,
                                      data.n_classes, form=descriptor_form)
        prefix = prefix_distances(desc, new_desc, n_components=l, n_classes=data.n_classes,
                                  bound=bound, scales=scales, normalization=normalization,
                                  secure=secure, scale_bits=scale_bits, parties=new_parties)
        new_labels = assign_new_clients(prefix, labels)
        new_accuracy = fl.mean_accuracy(model, clustered.models, new_labels, data.new_clients)
    return FluxRun(labels=labels, n_clusters=found.n_clusters, eps=found.eps, gap=found.gap,
                   models=clustered.models, new_labels=new_labels, accuracy=accuracy,
                   new_accuracy=new_accuracy, distances=d, prefix=prefix,
                   global_model=encoder, max_activation=largest)


def flux_baselines(data, model, flux_run: FluxRun, *, warmup_rounds: int = WARMUP_ROUNDS,
                   cluster_rounds: int = CLUSTER_ROUNDS, local_train=None,
                   seed: int = 0) -> dict:
    """FedAvg, IFCA and random assignment on the same data and round budget as FLUX.

    - ``fedavg``: one model, ``warmup_rounds + cluster_rounds`` rounds;
    - ``ifca``: IFCA with the planted K (IFCA must be given K), models initialized from
      seeds ``seed .. seed + K - 1``, same total rounds; unseen clients pick the model with
      the lowest loss on their *labelled* training rows (an advantage FLUX does not have);
    - ``random``: FLUX's cluster models, each unseen client assigned to a uniformly random
      cluster (seeded).

    Returns ``{name: (accuracy on training clients, accuracy on unseen clients)}``; FLUX's
    own pair is under ``"flux"``.
    """
    from .. import fl

    if local_train is None:
        local_train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.3)
    rounds = warmup_rounds + cluster_rounds
    plain = fl.run_federated(data.clients, [model.init(seed)], rounds=rounds,
                             local_train=local_train, seed=seed)
    zeros_new = np.zeros(len(data.new_clients), dtype=np.int64)
    out = {"flux": (flux_run.accuracy, flux_run.new_accuracy),
           "fedavg": (fl.mean_accuracy(model, plain.models, plain.assignment, data.clients),
                      fl.mean_accuracy(model, plain.models, zeros_new, data.new_clients))}
    k = data.n_groups
    picker = fl.ifca_assign(model)
    ifca = fl.run_federated(data.clients, [model.init(seed + j) for j in range(k)],
                            rounds=rounds, local_train=local_train, assign=picker, seed=seed)
    final = picker(fl.RoundState(rounds, ifca.models, data.clients, np.arange(len(data.clients)),
                                 ifca.assignment, np.random.default_rng(0)))
    new_pick = picker(fl.RoundState(rounds, ifca.models, data.new_clients,
                                    np.arange(len(data.new_clients)), zeros_new,
                                    np.random.default_rng(0)))
    out["ifca"] = (fl.mean_accuracy(model, ifca.models, final, data.clients),
                   fl.mean_accuracy(model, ifca.models, new_pick, data.new_clients))
    rng = np.random.default_rng([seed, 7])
    random_labels = rng.integers(0, flux_run.n_clusters, size=len(data.new_clients))
    out["random"] = (flux_run.accuracy,
                     fl.mean_accuracy(model, flux_run.models, random_labels, data.new_clients))
    return out


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

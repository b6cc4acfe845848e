"""Choosing K from D: every adapter's K rules in one module (moved from the adapters).

- CLoVE: :func:`choose_k` (ward + silhouette, the code's 10 % parsimony rule) and
  :func:`choose_k_gap` (omnifc's: the widest relative gap in Ward's merge heights).
- FLUX: :func:`gap_eps` (the widest relative gap of the MST edges, DBSCAN's eps) and
  :func:`ward_gap` (Ward's tree cut at its widest relative gap, FLUX's default).
- FMCL: :func:`silhouette_profile`, :func:`one_cluster_test` and :func:`choose_clusters`
  (the ``tested``, ``silhouette`` and ``paper`` rules) with :func:`coefficient_of_variation`
  and :func:`k_window`.

Each adapter re-exports its own rules; docs/adapters.md gives the measurements behind them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import silhouette_score

from finite_field import InputError, ParameterError

from .._clustering import average_linkage_labels, ward_from_distances
from .._geometry import check_distance_matrix, to_euclidean

#: choose_k logs each silhouette under CLoVE's logger, as it did inside the CLoVE module.
logger = logging.getLogger(__name__)

__all__ = ["silhouette_from_distances", "CV_THRESHOLDS", "DEFAULT_RULE", "DbscanResult",
           "GAP_SEARCH_FROM", "MAX_CLUSTERS", "MIN_GAP", "NULL_ALPHA", "NULL_PERMUTATIONS", "OVERLAP_STRATA", "OneClusterTest",
           "RULES", "WARD_MIN_GAP", "choose_clusters", "choose_k", "choose_k_gap",
           "coefficient_of_variation", "gap_eps", "k_window", "one_cluster_test",
           "silhouette_profile", "ward_gap"]


def choose_k(distances, *, k_upper: int = 15, tolerance: float = 0.10,
             repeat: int = 5) -> int:
    """K by ward + silhouette with the 10 % parsimony rule (``find_best_K_by_silhouette``).

    Tries K = 2..min(n, k_upper); K replaces the best only if its silhouette exceeds
    ``(1 + tolerance) x`` the best so far (starting at -1). When ``k_upper >= n`` every
    loss vector is repeated ``repeat`` times first (rows a,a,a,a,a,b,...), as in the code.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [5.0], [5.1], [10.0], [10.1]])
    >>> choose_k((x - x.T) ** 2)
    3
    """
    d = check_distance_matrix(distances)
    n = d.shape[0]
    upper = min(n, int(k_upper))
    if upper < 2:
        raise ParameterError(f"choosing K needs at least 2 clients and k_upper >= 2; got "
                             f"{n} clients, k_upper={k_upper}")
    if upper >= n and repeat > 1:
        index = np.repeat(np.arange(n), repeat)
        d = d[np.ix_(index, index)]
    best_score, best_k = -1.0, None
    for k in range(2, upper + 1):
        labels = ward_from_distances(d, k)
        if len(set(labels.tolist())) < 2:
            continue
        score = silhouette_from_distances(d, labels)
        logger.debug("K=%d silhouette %.6f", k, score)
        if score > best_score * (1.0 + tolerance):
            best_score, best_k = score, k
    if best_k is None:
        raise InputError("no valid clustering found for K in 2..%d" % upper)
    return best_k

def choose_k_gap(distances, *, k_upper: int = 15) -> int:
    """omnifc's K rule: the widest relative gap in the ward merge heights (K >= 2).

    Ward's merge heights ``h_1 <= ... <= h_{n-1}`` (scipy, from D); cutting between
    ``h_{n-k}`` and ``h_{n-k+1}`` gives k clusters. K = the k in ``2..min(k_upper, n/2)``
    with the largest ratio ``h_{n-k+1} / h_{n-k}`` (the partition that persists over the
    widest relative range of cut heights). Unlike the silhouette, a ratio does not favour
    the coarsest split when one group lies far from the others (measured on CLoVE's
    classifier loss vectors: see docs/adapters.md). K = 2 at least, as in the paper's search.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [5.0], [5.1], [100.0], [100.1]])
    >>> choose_k_gap((x - x.T) ** 2)     # the silhouette rule says 2 here
    3
    """
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    d = check_distance_matrix(distances)
    n = d.shape[0]
    upper = min(int(k_upper), n // 2) if n >= 4 else n
    if upper < 2:
        raise ParameterError(f"choosing K needs at least 2 clients and k_upper >= 2; got "
                             f"{n} clients, k_upper={k_upper}")
    heights = np.sort(linkage(squareform(to_euclidean(d), checks=False), "ward")[:, 2])
    best_k, best_ratio = 2, -1.0
    for k in range(2, upper + 1):
        low, high = heights[n - k - 1], heights[n - k]
        ratio = high / low if low > 0 else (np.inf if high > 0 else 1.0)
        if ratio > best_ratio:
            best_k, best_ratio = k, ratio
    return best_k

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
    #: the evidence of FLUX's calibrated rule (:class:`KDecision`), None for the others
    decision: object = None
    #: the evidence of FLUX's second test on the split D where it was asked
    #: (:class:`~omnifc.adapters.flux._spiked_null.SpikedNullTest`), else None
    second_test: object = None

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

#: (our choice) the Ward rule's "one cluster" threshold on the widest ratio of consecutive
#: Ward merge heights. Measured: iid digits clients (10 and 25, seeds 0-5) <= 1.35; planted
#: groups (every shift, K = 2, 3, 5, design seeds 0-2) >= 2.07; 1.6 lies between.
WARD_MIN_GAP = 1.6

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

#: K selection rules: "tested" (omnifc's default: the one-cluster permutation test, then
#: "silhouette"), "calibrated" (the one-cluster test, with the overlap-stratified null when
#: the overlap is given, then the gap statistic of :func:`calibrated_k` for K >= 2; measured
#: below "tested" on the held-out grid, docs/adapters.md), "silhouette" (K >= 2 always) and
#: "paper" (CV window).
RULES = ("calibrated", "tested", "silhouette", "paper")

DEFAULT_RULE = "tested"

#: Permutations and level of :func:`one_cluster_test` (omnifc's choice).
NULL_PERMUTATIONS, NULL_ALPHA = 99, 0.05

#: Overlap strata of the overlap-stratified null (``one_cluster_test(overlap=...)``; our choice).
OVERLAP_STRATA = 4

#: Largest K the default rule tries (omnifc's choice: the top of the paper's largest window).
MAX_CLUSTERS = 10

#: CV thresholds of the paper's window rule ([2nd]: fixed across data sets in the paper).
CV_THRESHOLDS = (0.35, 0.70)

def coefficient_of_variation(distances) -> float:
    """CV = std / mean of the off-diagonal entries (0 when the mean is 0)."""
    d = np.asarray(distances, dtype=np.float64)
    off = d[~np.eye(d.shape[0], dtype=bool)]
    mean = off.mean() if off.size else 0.0
    return float(off.std() / mean) if mean > 0 else 0.0

def k_window(cv: float) -> tuple[int, int]:
    """The paper's window: CV < 0.35 -> (1, 3); CV < 0.70 -> (2, 6); else (3, 10)."""
    low, high = CV_THRESHOLDS
    if cv < low:
        return 1, 3
    if cv < high:
        return 2, 6
    return 3, 10

def _silhouettes(d, ks):
    scores, labelings = {}, {}
    for k in ks:
        labels = average_linkage_labels(d, k)
        labelings[k] = labels
        scores[k] = (0.0 if len(set(labels.tolist())) < 2
                     else float(silhouette_score(d, labels, metric="precomputed")))
    return scores, labelings

def silhouette_profile(distances, max_clusters: int = MAX_CLUSTERS) -> dict:
    """Average-linkage silhouette for every K in ``2..min(max_clusters, n - 1)``, fast.

    One scipy average-linkage tree cut at every K, and the silhouette of each cut computed
    from cluster sums of D (a singleton's own silhouette is 0, as in scikit-learn). This is
    the statistic of :func:`one_cluster_test`; it is evaluated on every permuted matrix, so
    it avoids refitting a tree per K. Empty for ``n < 3``.

    Examples
    --------
    >>> d = np.array([[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0.0]])
    >>> {k: round(v, 3) for k, v in silhouette_profile(d).items()}
    {2: 0.889, 3: 0.444}
    """
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    top = min(int(max_clusters), n - 1)
    if top < 2:
        return {}
    tree = linkage(squareform(d, checks=False), method="average")
    cuts = cut_tree(tree, n_clusters=list(range(2, top + 1)))
    rows = np.arange(n)
    profile = {}
    for column, k in enumerate(range(2, top + 1)):
        labels = cuts[:, column]
        onehot = np.zeros((n, k))
        onehot[rows, labels] = 1.0
        sums = d @ onehot                            # (n, k): distance sums to each cluster
        sizes = onehot.sum(axis=0)
        own = sizes[labels]
        a = np.divide(sums[rows, labels], own - 1, out=np.zeros(n), where=own > 1)
        mean_to = sums / sizes
        mean_to[rows, labels] = np.inf
        b = mean_to.min(axis=1)
        s = np.where(own > 1, (b - a) / np.maximum(a, b), 0.0)
        profile[k] = float(s.mean())
    return profile

@dataclass
class OneClusterTest:
    """Result of :func:`one_cluster_test`: the statistic, its permutation null, the p-value."""

    statistic: float
    null: np.ndarray
    p_value: float
    alpha: float

    @property
    def one_cluster(self) -> bool:
        """True when "no cluster structure" is not rejected at level ``alpha``."""
        return self.p_value > self.alpha

def _symmetric_permutation(d, rng):
    n = d.shape[0]
    upper = np.triu_indices(n, 1)
    values = d[upper]
    out = np.zeros_like(d)
    out[upper] = values[rng.permutation(values.size)]
    return out + out.T

def _stratified_null(d, overlap, strata):
    """A sampler of null matrices: ``N / (Omega + eps)`` permuted within overlap strata.

    Each pair keeps its own overlap Omega (so g(Omega) and the pairs with no shared class,
    refilled by :func:`geodesic_fill`, stay where they are); only the overlap-normalized
    cosine part moves, among pairs of similar overlap.
    """
    # FMCL's overlap factor and fill: imported here, fmcl imports this module
    from .fmcl._paper import _g, geodesic_fill

    n = d.shape[0]
    upper = np.triu_indices(n, 1)
    om = np.asarray(overlap, dtype=np.float64)[upper]
    shared = om > 0
    factor = _g(om[shared])
    values = d[upper][shared] / factor
    edges = (np.quantile(om[shared], np.linspace(0.0, 1.0, int(strata) + 1)[1:-1])
             if values.size else np.array([]))
    groups = [np.flatnonzero(np.digitize(om[shared], edges) == b) for b in range(int(strata))]

    def sample(rng):
        moved = values.copy()
        for idx in groups:
            moved[idx] = values[idx[rng.permutation(idx.size)]]
        entries = np.full(om.shape, np.inf)
        entries[shared] = moved * factor
        out = np.zeros((n, n))
        out[upper] = entries
        return geodesic_fill(out + out.T)
    return sample

def one_cluster_test(distances, *, permutations: int = NULL_PERMUTATIONS,
                     alpha: float = NULL_ALPHA, random_state: int = 0, overlap=None,
                     strata: int = OVERLAP_STRATA) -> OneClusterTest:
    """Monte Carlo permutation test of "one cluster" on a filled FMCL distance matrix.

    H0: no client grouping, i.e. which pair of clients carries which distance is arbitrary.
    Statistic: the silhouette of the average-linkage split into two clusters (the top of
    the tree the silhouette rule cuts; :func:`silhouette_profile` at K = 2). Null: the same
    statistic on ``permutations`` symmetric permutations of the off-diagonal entries of D,
    which keep the data's own distribution of distances (including the heavy tail from
    low-overlap clients) and destroy only their arrangement.
    ``p = (1 + #{null >= observed}) / (1 + permutations)``; one cluster when ``p > alpha``.
    ``permutations = 99`` and ``alpha = 0.05`` are omnifc's choice; the permutations come
    from a public seed (nothing secret is drawn). Why K = 2 and not the best K: a single
    domain with Dirichlet labels has small tight groups (clients sharing a dominant class)
    that make the best silhouette over K = 2..10 significant once there are ~30 clients,
    while its top split stays as weak as a permuted matrix's (measured, docs/adapters.md).

    ``overlap`` (optional, the class overlap Omega per pair: :func:`class_overlap`, or
    ``secure_thermometer_distances(..., return_overlap=True)`` on the secure path): the null
    then permutes only the overlap-normalized part ``D / g(Omega)`` of the pairs that share
    a class, within ``strata`` quantile bins of Omega, and refills the rest by the geodesic;
    groups that come from overlap alone (clients sharing a dominant class) stay in the null.

    Examples
    --------
    >>> d = np.array([[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0.0]])
    >>> test = one_cluster_test(d, permutations=19)
    >>> round(test.statistic, 3), test.p_value <= 1.0
    (0.889, True)
    """
    d = np.asarray(distances, dtype=np.float64)
    if int(permutations) < 1:
        raise ParameterError(f"permutations must be >= 1, got {permutations}")
    if not 0.0 < float(alpha) < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
    observed = silhouette_profile(d, 2)
    if not observed:
        raise ParameterError(f"the test needs at least 3 clients, got {d.shape[0]}")
    statistic = observed[2]
    rng = np.random.Generator(np.random.PCG64(random_state))
    if overlap is None:
        def sample(generator):
            return _symmetric_permutation(d, generator)
    else:
        if np.shape(overlap) != d.shape:
            raise InputError(f"overlap must have the shape of the distances {d.shape}, got "
                             f"{np.shape(overlap)}")
        if int(strata) < 1:
            raise ParameterError(f"strata must be >= 1, got {strata}")
        sample = _stratified_null(d, overlap, strata)
    null = np.array([silhouette_profile(sample(rng), 2)[2] for _ in range(int(permutations))])
    p_value = (1.0 + float(np.count_nonzero(null >= statistic))) / (1.0 + null.size)
    return OneClusterTest(statistic=float(statistic), null=null, p_value=p_value,
                          alpha=float(alpha))

def choose_clusters(distances, *, rule: str = DEFAULT_RULE, max_clusters: int = MAX_CLUSTERS,
                    overlap=None):
    """Choose K and cluster a filled FMCL distance matrix.

    ``rule="calibrated"`` (an option): K = 1 when :func:`one_cluster_test` (with
    the overlap-stratified null when ``overlap`` is given) does not reject "one cluster",
    else K >= 2 by the gap statistic of :func:`calibrated_k` (``min_clusters=2``: Ward's
    tree on the positive part of D's MDS embedding, Gaussian reference); ``scores`` holds
    ``Gap(k)`` and ``decision`` (see below) the evidence. ``window`` is ``(1, top)``.
    ``rule="tested"`` (default, omnifc's): K = 1 when :func:`one_cluster_test` does not
    reject "one cluster", else the silhouette rule's K; ``window`` is ``(1, top)``.
    ``rule="silhouette"``: K in ``2..min(max_clusters, n - 1)`` with the
    largest average-linkage silhouette; ``window`` is reported as ``(2, top)``.
    ``rule="paper"``: the CV window and the largest silhouette local maximum.
    ``overlap``: passed to :func:`one_cluster_test` (rules "calibrated" and "tested").

    Returns ``(labels, K, window, scores)`` with ``scores[K]`` the silhouette per K tried.
    """
    if rule not in RULES:
        raise ParameterError(f"rule must be one of {RULES}, got {rule!r}")
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if rule == "calibrated":
        top = max(2, min(int(max_clusters), n - 1))
        if n < 3:
            return np.zeros(n, dtype=np.int64), 1, (1, top), {1: 0.0}
        test = one_cluster_test(d, overlap=overlap)
        if test.one_cluster:
            logger.info("K=1 (one-cluster test%s: silhouette %.4g, p=%.3g > alpha=%g)",
                        "" if overlap is None else ", overlap-stratified null",
                        test.statistic, test.p_value, test.alpha)
            return np.zeros(n, dtype=np.int64), 1, (1, top), {1: 0.0}
        from ._calibrated_k import calibrated_k

        decision = calibrated_k(d, max_clusters=top, min_clusters=2)
        logger.info("one-cluster test rejected (p=%.3g); %s", test.p_value, decision.summary())
        scores = {k + 1: float(v) for k, v in enumerate(decision.gap)}
        return decision.labels, decision.k, (1, top), scores
    if rule == "tested":
        labels, k, window, scores = choose_clusters(d, rule="silhouette",
                                                    max_clusters=max_clusters)
        if n >= 3 and one_cluster_test(d, overlap=overlap).one_cluster:
            return np.zeros(n, dtype=np.int64), 1, (1, window[1]), {1: 0.0, **scores}
        return labels, k, (1, window[1]), scores
    if rule == "silhouette":
        window = (2, max(2, min(int(max_clusters), n - 1)))
        if n < 3:
            return np.zeros(n, dtype=np.int64), 1, window, {1: 0.0}
        ks = list(range(window[0], window[1] + 1))
        scores, labelings = _silhouettes(d, ks)
        k = max(ks, key=lambda key: (scores[key], -key))   # ties: the smaller K
        return labelings[k], k, window, scores
    cv = coefficient_of_variation(d)
    window = k_window(cv)
    if n < 3:
        return np.zeros(n, dtype=np.int64), 1, window, {1: 0.0}
    ks = [k for k in range(window[0], min(window[1], n - 1) + 1)]
    if not ks:
        ks = [1]
    scores, labelings = _silhouettes(d, ks)
    values = [scores[k] for k in ks]
    maxima = [i for i in range(len(ks))
              if (i == 0 or values[i] > values[i - 1])
              and (i == len(ks) - 1 or values[i] > values[i + 1])]
    best = (max(maxima, key=lambda i: values[i]) if maxima
            else int(np.argmax(values)))
    k = ks[best]
    return labelings[k], k, window, scores


def silhouette_from_distances(distances, labels) -> float:
    """Euclidean silhouette score from squared distances (``metric="precomputed"`` on sqrt D)."""
    return float(silhouette_score(to_euclidean(distances), np.asarray(labels),
                                  metric="precomputed"))

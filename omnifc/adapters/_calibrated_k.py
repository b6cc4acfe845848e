"""Calibrated automatic K from D: a reference computed from the same D, no fitted threshold.

:func:`calibrated_k` decides "how many clusters" in two steps, both against reference
federations of the **same size and the same spread** as the one observed, drawn from a
one-cluster null fitted to D itself:

1. *One cluster or more* (a parametric bootstrap in the spirit of SigClust: Liu, Hayes,
   Nobel & Marron 2008). D is embedded by classical MDS (``X``, isometric to the
   descriptors when D is Euclidean); its principal variances ``lambda_j`` define the null,
   one Gaussian in those axes (in high dimension with its noise floor spread over the
   descriptors' estimated dimension: :func:`_null_spectrum`; or Tibshirani's uniform box,
   ``null="uniform"``). For ``k = 2..K_max`` the drop ``log W_1 - log W_k`` of Ward's cut
   (``W`` = within-cluster sum of squares) is standardized by the references' mean and sd
   of the same drop; the statistic ``T`` is the largest standardized drop (one test over
   every k, so three equal groups, which Ward's first split halves badly, are seen), and
   ``p = (1 + #{T_b >= T}) / (1 + B)`` over ``B`` reference draws of ``n`` points.
   One cluster when ``p > alpha``.
2. *Which K >= 2* (the gap statistic: Tibshirani, Walther & Hastie 2001, on the same draws):
   ``Gap(k) = mean_b log W_k^b - log W_k`` and ``s_k = sd_b(log W_k^b) sqrt(1 + 1/B)``;
   K = the smallest ``k >= 2`` with ``Gap(k) >= Gap(k + 1) - s_{k+1}`` (the largest gap
   when no k qualifies).

The default statistic of step 1 is ``"ward_gap"`` (the widest ratio of consecutive Ward merge
heights, K = Ward's cut at that gap); ``"drop"`` is the standardized drop above; ``"axis_ci"``
(issue 24) is the 2-means cluster index ``W_2 / W_1`` of the projections on the top
principal axis (:func:`axis_cluster_index`; exact in one dimension, :func:`cluster_index_1d`),
scale-free along the axis, so the between-group variance a null fitted to D carries in its
top axis does not raise the bar; ``p = (1 + #{T_b <= T}) / (1 + B)`` with B = 99 by default.
``"axis_unimodal"`` (issue 24, fourth pass) is the same statistic against a null whose top
axis has the *shape* of the data: each reference's top-axis coordinate is a smoothed
bootstrap draw (:func:`smoothed_bootstrap`) from the least-smooth unimodal Gaussian KDE of
the observed top-axis projections, at Silverman's critical bandwidth
(:func:`critical_bandwidth`; Silverman 1981), rescaled to the variance the null puts on that
axis; the other axes stay the fitted null's. A skewed or heavy-tailed single population then
has references of the same shape, so its low cluster index is no evidence of groups.
``"denoised"`` (issue 24, seventh pass) keeps the r leading principal axes above the
broken-stick noise edge (:func:`broken_stick_axes`) and takes the 2-means cluster index
``W_2 / W_1`` there (:func:`two_means`, one start per kept axis, Lloyd's refinement;
:func:`denoised_cluster_index`). Each reference is the ``"axis_unimodal"`` draw (top axis
from the data's unimodal KDE) read the same way on the r leading axes of *its own* spectrum:
its directions are selected by its own variances, so that optimism is in the null, while the
count r is the data's (a count re-selected per draw made the test anti-conservative: draws
from the sample spectrum have a more dispersed spectrum, keep more axes, and an index in more
axes is larger). K = Ward's cut of the kept axes at its widest gap.

``W_k`` comes from Ward's tree on the embedding: the tree's merge heights ``h`` satisfy
``Delta W = h^2 / 2`` (scipy's Ward distance), so ``W_k = W_1 - sum`` of the ``n - k`` lowest
``h^2 / 2`` for every k at once. Every quantity is scale-free (a ratio of W's), so the rule
has no unit to tune; ``alpha``, ``B`` and the null's form are the only choices, stated below.
The draws come from a public seed (they are reference noise, not secrets).

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters._calibrated_k import calibrated_k
>>> rng = np.random.default_rng(0)
>>> x = np.concatenate([rng.normal(0, 1, (10, 3)), rng.normal(8, 1, (10, 3))])
>>> d = ((x[:, None] - x[None]) ** 2).sum(-1)
>>> out = calibrated_k(d)
>>> out.k, out.p_value < out.alpha, out.labels.tolist() == [0] * 10 + [1] * 10
(2, True, True)
>>> calibrated_k(((x[:10, None] - x[None, :10]) ** 2).sum(-1)).k   # one Gaussian: K = 1
1
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from finite_field import ParameterError

from .._geometry import check_distance_matrix
from ._k_selection import GAP_SEARCH_FROM, _widest_gap

__all__ = ["AXIS_CI_REFERENCES", "CALIBRATED_ALPHA", "CALIBRATED_REFERENCES", "NULLS",
           "KDecision", "STATISTICS", "axis_cluster_index", "calibrated_k", "cluster_index_1d",
           "broken_stick_axes", "critical_bandwidth", "denoised_cluster_index", "kde_modes",
           "mds_embedding", "smoothed_bootstrap", "two_means", "within_sums"]

logger = logging.getLogger(__name__)

#: (our choice) level of the one-cluster test: "one cluster" is rejected only at p <= 0.05.
CALIBRATED_ALPHA = 0.05

#: (our choice) reference draws B: the smallest p is 1/(B + 1) = 0.025 < alpha, and the
#: gap's s_k carries the sqrt(1 + 1/B) of the paper.
CALIBRATED_REFERENCES = 39

#: One-cluster nulls: ``"gaussian"`` (default) and ``"uniform"`` (Tibshirani's box).
NULLS = ("gaussian", "uniform")

#: (our choice) the null corrects for the noise floor only when the estimated dimension of
#: the descriptors' spread exceeds this many times the rank of the embedding (n - 1 at most).
HDLSS_FACTOR = 2.0

#: (our choice) reference draws B for ``statistic="axis_ci"``: p in steps of 0.01 (the
#: FMCL tests' 99), so a p near alpha is not rounded to the next step of 0.025.
AXIS_CI_REFERENCES = 99

#: Statistics of the one-cluster test: ``"ward_gap"`` (default: the widest relative gap of
#: Ward's merge heights, the statistic of :func:`ward_gap`, here against its reference
#: distribution instead of a fixed threshold; K = Ward's cut at that gap), ``"axis_ci"``
#: (the 2-means cluster index of the projections on the top principal axis,
#: :func:`axis_cluster_index`, small = two groups; K = Ward's cut at the widest gap as for
#: ``"ward_gap"``), ``"axis_unimodal"`` (the statistic of ``"axis_ci"``, each reference's
#: top axis drawn from the data's least-smooth unimodal KDE instead of a Gaussian; K as for
#: ``"ward_gap"``) and ``"drop"`` (the largest standardized drop of log W; K by the gap
#: statistic) and ``"denoised"`` (issue 24, seventh pass: the 2-means cluster index on the
#: r leading principal axes that stand above the broken-stick noise edge,
#: :func:`denoised_cluster_index`; each reference, drawn as for ``"axis_unimodal"``, is read
#: on the r leading axes of its own spectrum; K = Ward's cut of those axes at its widest gap)
#: and ``"axis_or_gap"`` (issue 24, fourteenth pass: both ``"axis_ci"`` and ``"ward_gap"``
#: against the same reference draws, combined by the smaller of their two p-values, itself
#: calibrated on those draws: :func:`min_p`; small = groups; K as for ``"ward_gap"``).
STATISTICS = ("ward_gap", "axis_ci", "drop", "axis_unimodal", "denoised", "axis_or_gap")

#: Statistics whose T is small for groups (a 2-means cluster index, or the min-p of
#: ``"axis_or_gap"``; B = 99 default).
_AXIS_STATISTICS = ("axis_ci", "axis_unimodal", "denoised", "axis_or_gap")

#: (our choice) Lloyd iterations of :func:`two_means` from each start (it stops earlier when
#: the assignment no longer changes, in a handful of steps on every D measured).
TWO_MEANS_ITERATIONS = 100

#: (our choice) grid of the KDE mode count: at least this many points over the data's range,
#: and at least ``KDE_GRID_PER_BANDWIDTH`` per bandwidth (so no bump of width ~h is stepped
#: over), at most ``KDE_GRID_MAX``.
KDE_GRID_MIN = 512
KDE_GRID_PER_BANDWIDTH = 16
KDE_GRID_MAX = 16384

#: (our choice) bisection steps of :func:`critical_bandwidth`: h_crit to 2^-40 of the range.
CRITICAL_BANDWIDTH_STEPS = 40

#: (our choice) Ward merge heights of the observed embedding below this fraction of the
#: largest are rounding noise of equal descriptors and count as 0 (a height is a distance;
#: MDS recovers coordinates to ~sqrt(machine eps) ~ 1.5e-8 of the scale).
DUPLICATE_HEIGHT = 1e-6

#: Largest K searched (as FMCL's ``MAX_CLUSTERS``; the top of the FMCL paper's window).
MAX_K = 10


@dataclass
class KDecision:
    """The decision of :func:`calibrated_k` and the evidence behind it.

    ``k`` and ``labels`` (Ward's cut, numbered by first appearance); ``statistic`` = the
    largest standardized drop ``T`` observed, ``null_mean`` / ``null_sd`` its reference mean and sd,
    ``p_value`` against ``alpha``; ``gap`` / ``gap_sd``: ``Gap(k)`` and ``s_k`` for
    ``k = 1..len(gap)``; ``margin``: for K >= 2, ``Gap(K) - (Gap(K+1) - s_{K+1})`` (how far
    inside the rule K is; ``inf`` at the top of the range), for K = 1, ``p - alpha``;
    ``min_group``: the top-axis index's smallest group (1: any cut; 2: no singleton).
    """

    k: int
    labels: np.ndarray
    statistic: float
    null_mean: float
    null_sd: float
    p_value: float
    alpha: float
    gap: np.ndarray
    gap_sd: np.ndarray
    margin: float
    references: int
    null: str
    seed: int
    rule: str = field(default="calibrated")
    min_group: int = 1

    @property
    def n_clusters(self) -> int:
        return self.k

    def summary(self) -> str:
        """One line: K and its evidence (what the adapters log at INFO)."""
        floor = f" (groups >= {self.min_group})" if self.min_group > 1 else ""
        what = ("widest Ward gap ratio" if self.rule.endswith("ward_gap")
                else "top-axis 2-means cluster index" if self.rule.endswith("axis_ci")
                else "top-axis 2-means cluster index, unimodal-KDE top axis"
                if self.rule.endswith("axis_unimodal")
                else "2-means cluster index on the axes above the broken-stick edge"
                if self.rule.endswith("denoised")
                else "smaller p of the top-axis index and the Ward gap (min-p)"
                if self.rule.endswith("axis_or_gap")
                else "largest standardized drop") + floor
        return (f"K={self.k} ({self.rule}: {what} {self.statistic:.4g} vs "
                f"{self.null} reference {self.null_mean:.4g} +- {self.null_sd:.3g}, "
                f"p={self.p_value:.3g} at alpha={self.alpha:g}, B={self.references}, "
                f"margin {self.margin:.3g})")


def mds_embedding(distances) -> tuple[np.ndarray, np.ndarray]:
    """Classical MDS of a squared-distance matrix: ``(X, lambda)`` with the positive part.

    ``X`` (n x r, centred) has ``X^T X = diag(lambda)``; for a Euclidean D its squared
    distances are D. Non-Euclidean D (FMCL's) keeps the positive-eigenvalue part only.
    """
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    j = d - d.mean(axis=0, keepdims=True)
    j -= j.mean(axis=1, keepdims=True)
    gram = -0.5 * (j + j.T) / 2
    values, vectors = np.linalg.eigh(gram)
    values, vectors = values[::-1], vectors[:, ::-1]
    tol = max(n, 1) * np.finfo(np.float64).eps * max(abs(values[0]), 1e-300) * 16
    keep = values > tol
    if not keep.any():
        return np.zeros((n, 1)), np.zeros(1)
    return vectors[:, keep] * np.sqrt(values[keep]), values[keep]


def _ward(x):
    from scipy.cluster.hierarchy import linkage

    return linkage(x, method="ward")


def _ward_of_embedding(x):
    """Ward's tree of an MDS embedding of D, its rounding-noise merge heights set to 0.

    Clients with equal descriptors (D_ij = 0) merge at height 0, but MDS returns their
    coordinates with rounding noise (~1e-8 of the scale); a widest "gap" between two such
    noise heights is no gap: heights below ``DUPLICATE_HEIGHT`` x the largest count as 0."""
    tree = _ward(x)
    heights = tree[:, 2]
    tree[:, 2] = np.where(heights <= DUPLICATE_HEIGHT * heights.max(), 0.0, heights)
    return tree


def within_sums(x, top: int, tree=None) -> np.ndarray:
    """``W_k`` (within-cluster sum of squares of Ward's cut into k) for ``k = 1..top``.

    ``W_1`` = the total sum of squares; each Ward merge of height h adds ``h^2 / 2``.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    total = float(((x - x.mean(axis=0)) ** 2).sum())
    if n < 2:
        return np.array([total])
    tree = _ward(x) if tree is None else tree
    added = np.cumsum(tree[:, 2] ** 2 / 2.0)          # W after m merges = added[m - 1]
    ks = np.arange(1, top + 1)
    merges = n - ks                                    # W_k: n - k merges done
    w = np.where(merges > 0, added[np.maximum(merges - 1, 0)], 0.0)
    # the last merge ends at the total; rescale the rounding so that W_1 = total exactly
    return np.where(ks == 1, total, np.minimum(w, total))


def cluster_index_1d(values, min_group: int = 1) -> float:
    """The 2-means cluster index ``W_2 / W_1`` of one-dimensional values (exact).

    ``W_1`` = the sum of squares about the mean, ``W_2`` = the least within-group sum of
    squares over every split into two groups of at least ``min_group`` values each; in one
    dimension the best split of given sizes ``(m, n - m)`` is a cut of the sorted values
    (``W_2 = W_1 - m (n - m) / n * (mean_1 - mean_2)^2``, and the means lie furthest apart
    when one group holds the m smallest values), so the minimum over the cuts
    ``m = min_group .. n - min_group`` is exact. 1 for
    fewer than ``2 * min_group`` values or no spread. Small = two groups:
    ``1 - 2/pi ~ 0.36`` for a large Gaussian sample, near 0 for two tight groups.
    ``min_group=2`` (issue 24, thirteenth pass) never cuts one value off: a single outlying
    client is not a group.

    >>> cluster_index_1d([0.0, 0.1, 0.2, 5.0, 5.1, 5.2]) < 0.01
    True
    >>> round(cluster_index_1d([0.0, 1.0, 2.0, 3.0]), 4)   # cut 2 + 2: W_2 = 1, W_1 = 5
    0.2
    >>> round(cluster_index_1d([0.0, 0.1, 0.2, 9.0]), 3)   # the outlier alone: W_2 = 0.02
    0.0
    >>> round(cluster_index_1d([0.0, 0.1, 0.2, 9.0], min_group=2), 3)   # no singleton
    0.652
    """
    min_group = int(min_group)
    if min_group < 1:
        raise ParameterError(f"min_group must be >= 1, got {min_group}")
    y = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = y.size
    if n < max(2, 2 * min_group):
        return 1.0
    y = y - y.mean()                   # the sums below stay well conditioned
    total = float((y * y).sum())
    if not total > 0:
        return 1.0
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    i = np.arange(min_group, n - min_group + 1)      # left group y[:i], right y[i:]
    left = c2[i - 1] - c1[i - 1] ** 2 / i
    right = (c2[-1] - c2[i - 1]) - (c1[-1] - c1[i - 1]) ** 2 / (n - i)
    return float(max(np.min(left + right), 0.0) / total)


def _top_axis(x) -> np.ndarray:
    """Projections of the (centred) rows of ``x`` on their first principal axis."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    n = x.shape[0]
    if n < 2:
        return np.zeros(n)
    from scipy.linalg import eigh

    if x.shape[1] <= n:                          # covariance side: p x p
        _, vec = eigh(x.T @ x, subset_by_index=[x.shape[1] - 1, x.shape[1] - 1])
        return x @ vec[:, 0]
    val, vec = eigh(x @ x.T, subset_by_index=[n - 1, n - 1])   # Gram side: n x n
    return vec[:, 0] * np.sqrt(max(float(val[0]), 0.0))


def axis_cluster_index(x, min_group: int = 1) -> float:
    """The statistic of ``statistic="axis_ci"``: :func:`cluster_index_1d` of the rows of
    ``x`` projected on their first principal axis (the axis of largest variance), over
    splits into groups of at least ``min_group`` rows.

    Scale-free along the axis, so an inflated top variance (the between-group variance a
    Gaussian null fitted to D carries in its top axis) does not make the reference harder
    to beat, unlike a statistic that compares the top axis with the others.

    >>> import numpy as np
    >>> t = np.array([0.0, 0.1, 4.0, 4.1])
    >>> x = np.stack([t, t], axis=1)                  # on the diagonal: the top axis
    >>> round(axis_cluster_index(x), 9) == round(cluster_index_1d(t), 9)
    True
    """
    return cluster_index_1d(_top_axis(x), min_group)


def broken_stick_axes(values) -> int:
    """How many leading principal axes stand above the broken-stick noise edge (at least 1).

    ``values``: the principal variances (any scale, any order; non-positive ones are
    dropped), R of them. Axis j (largest first) carries the share ``lambda_j / sum lambda``;
    the broken stick (Frontier 1976; Jackson 1993, "Stopping rules in principal components
    analysis") expects ``b_j = (1/R) sum_{i=j}^{R} 1/i`` of the j-th largest of R shares
    when the total variance is split at random, with no structure. The leading run of axes
    with ``share_j > b_j`` is kept: the rule has no constant, and it reads only the spectrum,
    so a reference draw is put through the same selection from its own spectrum.

    >>> broken_stick_axes([10.0, 1.0, 1.0, 1.0])      # b = (0.521, 0.271, 0.146, 0.0625)
    1
    >>> broken_stick_axes([1.0, 1.0, 1.0, 1.0])       # 0.25 < b_1: no axis, at least 1 kept
    1
    >>> broken_stick_axes([6.0, 3.0, 0.5, 0.5])       # shares 0.6 > 0.521, 0.3 > 0.271
    2
    """
    lam = np.sort(np.asarray(values, dtype=np.float64).ravel())[::-1]
    lam = lam[lam > 0]
    r = lam.size
    if r < 2:
        return 1
    share = lam / lam.sum()
    stick = np.cumsum(1.0 / np.arange(r, 0, -1))[::-1] / r        # b_j, j = 1..R
    above = share > stick
    keep = r if above.all() else int(np.argmin(above))
    return max(keep, 1)


def _best_cut_labels(y) -> np.ndarray:
    """The best 2-means split of 1-D values (a cut of the sorted values), as 0/1 labels."""
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    order = np.argsort(y, kind="stable")
    z = y[order] - y.mean()
    c1, c2 = np.cumsum(z), np.cumsum(z * z)
    i = np.arange(1, n)
    cost = (c2[:-1] - c1[:-1] ** 2 / i) + ((c2[-1] - c2[:-1]) - (c1[-1] - c1[:-1]) ** 2 / (n - i))
    labels = np.zeros(n, dtype=np.int64)
    labels[order[int(np.argmin(cost)) + 1:]] = 1
    return labels


def _lloyd(x, labels, iterations):
    """Lloyd's 2-means from ``labels``: the local optimum's ``(W_2, labels)``."""
    labels = labels.copy()
    for _ in range(iterations):
        if labels.min() == labels.max():
            break
        c0, c1 = x[labels == 0].mean(axis=0), x[labels == 1].mean(axis=0)
        new = (((x - c1) ** 2).sum(axis=1) < ((x - c0) ** 2).sum(axis=1)).astype(np.int64)
        if np.array_equal(new, labels):
            break
        labels = new
    if labels.min() == labels.max():
        return float("inf"), labels
    w = sum(float(((x[labels == g] - x[labels == g].mean(axis=0)) ** 2).sum()) for g in (0, 1))
    return w, labels


def two_means(x, iterations: int = TWO_MEANS_ITERATIONS) -> tuple[float, np.ndarray]:
    """2-means of the rows of ``x``: ``(W_2 / W_1, labels)``, the best of one start per column.

    Each start is the exact best split of one column (:func:`cluster_index_1d`'s cut),
    refined by Lloyd's iterations in all columns; the smallest within sum of squares wins
    (ties: the earlier column). Deterministic (no random start), so a reference and the data
    are treated alike. With one column it is exact. ``W_2 / W_1`` is 1 when the rows do not
    spread (fewer than 2 distinct rows).

    >>> import numpy as np
    >>> x = np.array([[0.0, 0.0], [0.1, 0.2], [5.0, 5.0], [5.2, 4.9]])
    >>> t, labels = two_means(x)
    >>> round(t, 4) < 0.01, labels.tolist()
    (True, [0, 0, 1, 1])
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    x = x - x.mean(axis=0)
    total = float((x * x).sum())
    if n < 2 or not total > 0:
        return 1.0, np.zeros(n, dtype=np.int64)
    best, best_labels = float("inf"), np.zeros(n, dtype=np.int64)
    for j in range(x.shape[1]):
        if not np.ptp(x[:, j]) > 0:
            continue
        w, labels = _lloyd(x, _best_cut_labels(x[:, j]), int(iterations))
        if w < best:
            best, best_labels = w, labels
    if not np.isfinite(best):
        return 1.0, np.zeros(n, dtype=np.int64)
    # numbered by first appearance, as the other rules' labels
    if best_labels[0] == 1:
        best_labels = 1 - best_labels
    return float(max(best, 0.0) / total), best_labels


def _principal(x):
    """Principal coordinates of the (centred) rows of ``x``, largest variance first, and the
    variances (the eigenvalues of the Gram matrix, the MDS of the rows' squared distances)."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    gram_side = x.shape[0] <= x.shape[1]              # eigh of the smaller square matrix
    values, vectors = np.linalg.eigh(x @ x.T if gram_side else x.T @ x)
    values, vectors = values[::-1], vectors[:, ::-1]
    keep = values > max(values[0], 0.0) * x.shape[0] * np.finfo(np.float64).eps * 16
    values, vectors = values[keep], vectors[:, keep]
    return (vectors * np.sqrt(values) if gram_side else x @ vectors), values


def denoised_cluster_index(x, values=None, axes: int | None = None
                           ) -> tuple[float, int, np.ndarray]:
    """The statistic of ``statistic="denoised"``: ``(T, r, labels)``.

    ``x``: principal coordinates, largest variance first (the MDS embedding of D), with
    their variances ``values`` (computed from ``x`` when omitted, and ``x`` rotated to its
    principal axes). ``r`` = ``axes`` when given (a reference read on as many of its own
    leading axes as the data kept), else :func:`broken_stick_axes` of the variances (the
    leading axes above the noise edge); ``T`` and ``labels`` = :func:`two_means` of the
    first ``r`` axes.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = np.concatenate([rng.normal(0, 1, (10, 5)), rng.normal(0, 1, (10, 5))])
    >>> x[10:, 0] += 12.0                     # two groups along the first coordinate
    >>> t, r, labels = denoised_cluster_index(x)
    >>> r, t < 0.1, labels.tolist() == [0] * 10 + [1] * 10
    (1, True, True)
    """
    if values is None:
        x, values = _principal(x)
    x = np.asarray(x, dtype=np.float64)
    r = broken_stick_axes(values) if axes is None else max(int(axes), 1)
    r = min(r, x.shape[1])
    t, labels = two_means(x[:, :r])
    return t, r, labels


def kde_modes(values, bandwidth: float) -> int:
    """Number of modes of the Gaussian kernel density estimate of ``values`` at ``bandwidth``.

    The KDE ``f(t) = sum_i exp(-(t - y_i)^2 / (2 h^2))`` has all its modes inside
    ``[min y, max y]`` (``f' > 0`` left of the data, ``< 0`` right of it), so the modes are
    the sign changes of ``f'`` from + to - on a grid over that range (``KDE_GRID_MIN`` to
    ``KDE_GRID_MAX`` points, ``KDE_GRID_PER_BANDWIDTH`` per ``h``); exact zeros of ``f'`` (far
    from every point, where it underflows) are skipped. 1 for fewer than 2 distinct values
    or ``h = inf``; ``h <= 0`` counts the distinct values (the KDE's limit).

    >>> kde_modes([0.0, 0.1, 0.2, 5.0, 5.1], 0.3), kde_modes([0.0, 0.1, 0.2, 5.0, 5.1], 3.0)
    (2, 1)
    """
    y = np.sort(np.asarray(values, dtype=np.float64).ravel())
    distinct = int(np.unique(y).size)
    if distinct < 2 or not np.isfinite(bandwidth):
        return 1
    if bandwidth <= 0:
        return distinct
    h = float(bandwidth)
    span = float(y[-1] - y[0])
    size = int(min(max(KDE_GRID_MIN, np.ceil(KDE_GRID_PER_BANDWIDTH * span / h)), KDE_GRID_MAX))
    grid = np.linspace(y[0], y[-1], size)
    slope = np.empty(size)
    step = max(1, 2_000_000 // max(y.size, 1))
    for lo in range(0, size, step):                  # f'(t) ~ sum_i (y_i - t) exp(...)
        diff = y[None, :] - grid[lo:lo + step, None]
        slope[lo:lo + step] = (diff * np.exp(-0.5 * (diff / h) ** 2)).sum(axis=1)
    signs = np.sign(slope)
    signs = signs[signs != 0]
    return max(int(np.count_nonzero((signs[:-1] > 0) & (signs[1:] < 0))), 1)


def critical_bandwidth(values) -> float:
    """Silverman's critical bandwidth: the smallest ``h`` at which the Gaussian KDE of
    ``values`` (:func:`kde_modes`) has one mode.

    The number of modes of a Gaussian KDE never grows with ``h`` (Silverman 1981, "Using
    kernel density estimates to investigate multimodality"), so ``h_crit`` is found by
    bisection between 0 and the range (at ``h >= range / 2`` the KDE is unimodal: every pair
    of kernels is within two bandwidths) to ``2^-CRITICAL_BANDWIDTH_STEPS`` of the range; the
    upper end of the last bracket (one mode) is returned. 0 for fewer than 2 distinct values.

    >>> import numpy as np
    >>> round(critical_bandwidth([-1.0, 1.0]), 3)    # two points: unimodal iff h >= half the gap
    1.0
    """
    y = np.asarray(values, dtype=np.float64).ravel()
    if np.unique(y).size < 2:
        return 0.0
    lo, hi = 0.0, float(y.max() - y.min())
    while kde_modes(y, hi) > 1:                      # not expected; a guard against rounding
        lo, hi = hi, 2.0 * hi
    for _ in range(CRITICAL_BANDWIDTH_STEPS):
        mid = 0.5 * (lo + hi)
        if kde_modes(y, mid) > 1:
            lo = mid
        else:
            hi = mid
    return hi


def smoothed_bootstrap(rng, values, bandwidth: float, size: int | None = None) -> np.ndarray:
    """A draw of ``size`` values (default ``len(values)``) from the Gaussian KDE of ``values``
    at ``bandwidth``, rescaled to the data's variance (Silverman 1981; Efron & Tibshirani,
    *An Introduction to the Bootstrap*, ch. 16): ``y* = m + (y_I - m + h e) / sqrt(1 +
    h^2 / s^2)`` with ``I`` uniform on the rows, ``e`` standard normal, ``m`` the mean and
    ``s^2`` the variance (divisor n) of ``values``, so ``E[y*] = m`` and ``var(y*) = s^2``.

    >>> import numpy as np
    >>> y = smoothed_bootstrap(np.random.default_rng(0), [0.0, 1.0, 5.0], 2.0, size=200_000)
    >>> round(float(y.mean()), 1), round(float(y.var()), 1)   # m = 2, s^2 = 14/3
    (2.0, 4.7)
    """
    y = np.asarray(values, dtype=np.float64).ravel()
    size = y.size if size is None else int(size)
    m, var = float(y.mean()), float(y.var())
    picks = y[rng.integers(0, y.size, size=size)]
    noise = rng.standard_normal(size)
    h = float(bandwidth)
    if not var > 0:
        return np.full(size, m)
    return m + (picks - m + h * noise) / np.sqrt(1.0 + h * h / var)


def _unimodal_top(rng, draw, top, bandwidth, top_var):
    """The reference ``draw`` with its first column (the null's top axis) replaced by a
    smoothed-bootstrap draw from the KDE of the observed top-axis projections ``top`` at
    the critical ``bandwidth``, centred and scaled to the null's variance ``top_var`` there."""
    y = np.asarray(top, dtype=np.float64)
    sd = float(y.std())
    col = smoothed_bootstrap(rng, y, bandwidth, draw.shape[0]) - float(y.mean())
    out = np.array(draw, dtype=np.float64, copy=True)
    out[:, 0] = col * (np.sqrt(top_var) / sd) if sd > 0 else 0.0
    return out


def _null_spectrum(d, values):
    """The one-cluster null's variances: ``(spikes, noise_var, noise_dims)``.

    The sample eigenvalues of n points in p >> n dimensions all carry the same noise floor
    (isotropic noise adds a constant to every pairwise distance: a regular simplex, whose
    n - 1 MDS eigenvalues are equal), and a Gaussian drawn in the n - 1 MDS axes alone is
    far less regular than that, which makes the test blind. So the null keeps each
    eigenvalue's excess over the floor ``f`` (their median) as one direction, and spreads
    the floor's mass ``f r`` over ``q = max(r, PR)`` isotropic directions, with
    ``PR = 2 mean(D)^2 / var(D)`` the participation ratio ``tr(S)^2 / tr(S^2)`` of a Gaussian's
    covariance S, estimated from the moments of D (``E D = 2 tr S``, ``var D = 8 tr S^2``).
    """
    r = values.size
    off = d[~np.eye(d.shape[0], dtype=bool)]
    var = float(off.var())
    ratio = 2.0 * float(off.mean()) ** 2 / var if var > 0 else float(r)
    if not ratio > HDLSS_FACTOR * r:         # enough clients: the sample spectrum is the null's
        return values, 0.0, 0
    floor = float(np.median(values))
    q = int(min(np.ceil(ratio), 20 * r + 1000))
    spikes = np.clip(values - floor, 0.0, None)
    return spikes, floor * r / q, q


def _draw(rng, null, n, spectrum, lows, highs):
    if null == "gaussian":
        spikes, noise_var, q = spectrum
        z = rng.standard_normal((n, spikes.size)) * np.sqrt(spikes / (n - 1))
        noise = rng.standard_normal((n, q)) * np.sqrt(noise_var / (n - 1))
        return np.concatenate([z, noise], axis=1)
    return rng.uniform(lows, highs, size=(n, lows.size))


def min_p(observed, references) -> tuple[float, np.ndarray]:
    """Several one-cluster statistics combined by the smallest of their p-values, calibrated
    on the same draws (the Monte Carlo min-p test: Westfall & Young 1993, ch. 2).

    ``observed``: the data's m statistics, ``references``: a B x m array of the same on
    every reference draw, each small = groups. The data and the B draws are pooled (B + 1
    exchangeable values under the null); every value's p-value per statistic is its rank
    among the pool, ``#{pool <= value} / (B + 1)``, and its combined statistic the smallest
    of its m p-values. Returns ``(the data's, the references')`` combined statistics, so
    ``p = (1 + #{ref <= obs}) / (1 + B)`` is an exact level-alpha test of the pooled null
    whichever statistic carries the evidence.

    >>> import numpy as np
    >>> obs, refs = min_p(np.array([0.1, 5.0]), np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 0.5]]))
    >>> float(obs), refs.tolist()
    (0.25, [0.5, 0.75, 0.25])
    """
    pool = np.vstack([np.asarray(observed, dtype=np.float64)[None],
                      np.asarray(references, dtype=np.float64)])
    ranks = (pool[None, :, :] <= pool[:, None, :]).sum(axis=1) / pool.shape[0]
    combined = ranks.min(axis=1)
    return float(combined[0]), combined[1:]


def calibrated_k(distances, *, max_clusters: int = MAX_K,
                 references: int | None = None, alpha: float = CALIBRATED_ALPHA,
                 null: str = "gaussian", random_state: int = 0,
                 min_clusters: int = 1, statistic: str = "ward_gap",
                 min_group: int = 1) -> KDecision:
    """K from D: a one-cluster bootstrap test, then the gap statistic (module docstring).

    ``distances``: squared distances (FLUX's D is exactly that; FMCL's is used through its
    MDS embedding's positive part). ``max_clusters``: largest K tried (and at most n - 1).
    ``references`` (B; default ``CALIBRATED_REFERENCES`` = 39, ``AXIS_CI_REFERENCES`` = 99
    for ``statistic="axis_ci"`` and ``"axis_unimodal"``), ``alpha``, ``null`` (``"gaussian"``
    or ``"uniform"``) and the public ``random_state`` of the draws. Fewer than 3 clients:
    K = 1 (nothing to test).
    ``statistic``: the one-cluster test's statistic (``STATISTICS``); for ``"axis_ci"``,
    ``"axis_unimodal"`` and ``"denoised"`` (small = two groups; B = 99 by default)
    ``p = (1 + #{T_b <= T}) / (1 + B)`` and the
    margin of a K >= 2 decision is the references' alpha quantile / T. ``"axis_unimodal"``
    draws each reference's top axis from the observed top-axis projections' KDE at their
    critical bandwidth (:func:`critical_bandwidth`, :func:`smoothed_bootstrap`), scaled to
    the variance the null gives that axis (module docstring); ``"denoised"`` draws its
    references the same way and reads data and references on as many leading axes as the
    broken stick keeps for the data (:func:`denoised_cluster_index`).
    ``min_clusters=2`` skips step 1 (a caller that has its own one-cluster test, FMCL's,
    and has rejected one cluster): K >= 2 by the gap rule.
    ``min_group`` (``"axis_ci"`` and ``"axis_unimodal"`` only; issue 24, thirteenth pass):
    the top-axis index of the data *and* of every reference splits into groups of at least
    this many clients; 2 = a single outlying client is no evidence of two groups. K is
    still Ward's cut at its widest gap.
    """
    if statistic not in STATISTICS:
        raise ParameterError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    if int(min_group) < 1:
        raise ParameterError(f"min_group must be >= 1, got {min_group}")
    if int(min_group) != 1 and statistic not in ("axis_ci", "axis_unimodal"):
        raise ParameterError(f"min_group applies to the top-axis statistics 'axis_ci' and "
                             f"'axis_unimodal'; got min_group={min_group} with "
                             f"statistic={statistic!r}")
    min_group = int(min_group)
    if int(min_clusters) not in (1, 2):
        raise ParameterError(f"min_clusters must be 1 or 2, got {min_clusters}")
    if null not in NULLS:
        raise ParameterError(f"null must be one of {NULLS}, got {null!r}")
    if references is None:
        references = (AXIS_CI_REFERENCES if statistic in _AXIS_STATISTICS
                      else CALIBRATED_REFERENCES)
    if int(references) < 1:
        raise ParameterError(f"references must be >= 1, got {references}")
    if not 0.0 < float(alpha) < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
    if int(max_clusters) < 1:
        raise ParameterError(f"max_clusters must be >= 1, got {max_clusters}")
    d = check_distance_matrix(distances)
    n = d.shape[0]
    b = int(references)
    x, values = mds_embedding(d)
    if n < 3 or values.sum() <= 0:
        return KDecision(k=1, labels=np.zeros(n, dtype=np.int64), statistic=0.0,
                         null_mean=0.0, null_sd=0.0, p_value=1.0, alpha=float(alpha),
                         gap=np.zeros(1), gap_sd=np.zeros(1), margin=1.0 - float(alpha),
                         references=b, null=null, seed=int(random_state),
                         min_group=min_group)
    top_k = min(int(max_clusters), n - 1)
    top = min(top_k + 1, n - 1)                       # W_{k+1} needed for the gap rule
    tree = _ward_of_embedding(x)
    log_w = np.log(np.maximum(within_sums(x, top, tree), np.finfo(np.float64).tiny))
    rng = np.random.Generator(np.random.PCG64(int(random_state)))
    spectrum = _null_spectrum(d, values) if null == "gaussian" else None
    lows, highs = x.min(axis=0), x.max(axis=0)
    ref = np.empty((b, top))
    ref_ratio = np.empty(b)
    ref_ci = np.empty(b)
    if statistic in ("axis_unimodal", "denoised"):
        top_y = x[:, 0]                       # MDS axes are the principal axes, largest first
        h_crit = critical_bandwidth(top_y)
        top_var = (spectrum[0][0] / (n - 1) if null == "gaussian"
                   else (highs[0] - lows[0]) ** 2 / 12.0)
        logger.debug("%s: critical bandwidth %.4g (top-axis sd %.4g)", statistic, h_crit,
                     float(top_y.std()))
    if statistic == "denoised":
        kept_axes = broken_stick_axes(values)
    for i in range(b):
        z = _draw(rng, null, n, spectrum, lows, highs)
        if statistic in ("axis_unimodal", "denoised"):
            z = _unimodal_top(rng, z, top_y, h_crit, top_var)
        z_tree = _ward(z)
        ref[i] = np.log(np.maximum(within_sums(z, top, z_tree), np.finfo(np.float64).tiny))
        ref_ratio[i] = _widest_gap(z_tree[:, 2], GAP_SEARCH_FROM)[1]
        if statistic == "denoised":
            # its own leading axes (selected by its own variances), as many as the data kept
            ref_ci[i] = denoised_cluster_index(z, axes=kept_axes)[0]
        elif statistic in _AXIS_STATISTICS:
            ref_ci[i] = axis_cluster_index(z, min_group)
    gap = ref.mean(axis=0) - log_w
    sd = ref.std(axis=0) * np.sqrt(1.0 + 1.0 / b)
    # drops log W_1 - log W_k, k = 2..top_k, standardized by the reference's own spread
    drop = log_w[0] - log_w[1:top_k]
    ref_drop = ref[:, :1] - ref[:, 1:top_k]
    centre, spread = ref_drop.mean(axis=0), ref_drop.std(axis=0)
    spread = np.where(spread > 0, spread, np.finfo(np.float64).tiny)
    j, ratio, _ = _widest_gap(tree[:, 2], GAP_SEARCH_FROM)
    if statistic == "ward_gap":
        observed, null_t = ratio, ref_ratio
    elif statistic == "denoised":
        observed, kept, _ = denoised_cluster_index(x, values)
        null_t = ref_ci
        # K from Ward's tree of the kept axes (the denoised embedding), at its widest gap
        tree = _ward_of_embedding(x[:, :kept])
        j = _widest_gap(tree[:, 2], GAP_SEARCH_FROM)[0]
        logger.debug("denoised: %d of %d axes above the broken-stick edge", kept, values.size)
    elif statistic == "axis_or_gap":
        observed, null_t = min_p(np.array([axis_cluster_index(x, min_group), -ratio]),
                                 np.stack([ref_ci, -ref_ratio], axis=1))
    elif statistic in _AXIS_STATISTICS:
        observed, null_t = axis_cluster_index(x, min_group), ref_ci
    else:
        observed = float(((drop - centre) / spread).max()) if top_k >= 2 else 0.0
        null_t = (((ref_drop - centre) / spread).max(axis=1) if top_k >= 2 else np.zeros(b))
    beat = null_t <= observed if statistic in _AXIS_STATISTICS else null_t >= observed
    p = (1.0 + float(np.count_nonzero(beat))) / (1.0 + b)
    one = p > alpha and int(min_clusters) == 1       # min_clusters=2: the caller decided
    if one or top_k < 2:
        k, margin = 1, p - float(alpha)
    elif statistic in ("ward_gap",) + _AXIS_STATISTICS:
        k = min(n - 1 - j, top_k) if n - 1 - j >= 2 else 2
        if statistic == "ward_gap":
            margin = float(observed / np.quantile(null_t, 1.0 - float(alpha)))
        else:
            q = float(np.quantile(null_t, float(alpha)))
            margin = q / observed if observed > 0 else float("inf")
    else:
        k, margin = None, float("inf")
        for cand in range(2, top_k + 1):
            if cand + 1 > top:                        # no W_{k+1}: the top of the range
                k = cand
                break
            slack = gap[cand - 1] - (gap[cand] - sd[cand])
            if slack >= 0:
                k, margin = cand, float(slack)
                break
        if k is None:
            k = 2 + int(np.argmax(gap[1:top_k]))
            margin = float(gap[k - 1] - (gap[k] - sd[k])) if k < top else float("inf")
    if k == 1:
        labels = np.zeros(n, dtype=np.int64)
    else:
        from scipy.cluster.hierarchy import cut_tree

        labels = cut_tree(tree, n_clusters=k).ravel().astype(np.int64)
    out = KDecision(k=k, labels=labels, statistic=float(observed), null_mean=float(null_t.mean()),
                    null_sd=float(null_t.std()), p_value=p, alpha=float(alpha), gap=gap,
                    gap_sd=sd, margin=margin, references=b, null=null,
                    seed=int(random_state), rule=f"calibrated/{statistic}",
                    min_group=min_group)
    logger.info("%s", out.summary())
    return out

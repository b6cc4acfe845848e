"""FMCL's one-cluster test with a null that keeps each client's own spread (issue 24).

Why the permutation null fails on large iid federations
-------------------------------------------------------
The exchangeable null of :func:`omnifc.adapters._k_selection.one_cluster_test` permutes the
off-diagonal entries of D freely: it assumes that, with no grouping, which pair carries which
distance is arbitrary. FMCL distances of one population are not like that. A client with
few rows (noisy class means), an unusual class mix or classes no one else holds is far from
*everyone*: its whole row of D is large. D then has client effects,
``log D_ij ~ mu + a_i + a_j + e_ij``, and the two-way split of average linkage isolates the
clients with the largest ``a_i``; a permuted matrix scatters their large entries over random
pairs and has no such clients, so the observed split looks significant, and the more clients
there are, the surer it looks (measured on the held-out seed 1000: K = 1 found in 7/30 iid
federations, 0/18 from 100 clients up). The overlap-stratified null keeps only the overlap
factor g(Omega) in place, not the rest of a client's effect (8/30).

The additive client-effect null
-------------------------------
Fit the two-way additive model to ``y_ij = log D_ij`` (i < j) by least squares: with
``r_i`` the mean of row i and ``m`` the mean of all pairs, the exact solution is
``a_i = (n - 1) / (n - 2) (r_i - m)`` (the row sums are ``(n - 1) m + (n - 2) a_i``; the
effects sum to 0). The residuals ``e_ij = y_ij - m - a_i - a_j`` carry whatever the clients'
own effects do not: a grouping makes them negative within groups and positive between.
Reference matrices are ``D*_ij = exp(m + a_i + a_j + e_pi(ij))`` with the residuals permuted
over the pairs (symmetric, public seed): every client keeps its own spread, and the
arrangement of the residuals, which is where the groups are, is destroyed. Statistic and
decision as before: the silhouette of the average-linkage split into two,
``p = (1 + #{null >= observed}) / (1 + B)``, one cluster when ``p > alpha``.

On the log scale because FMCL's distance is a product (``N / (Omega (Omega + eps))``, and a
client with little overlap with everyone multiplies its whole row); zero distances (two
identical signatures) are floored at ``1e-9`` times the median distance before the log.
With 3 clients the model fits D exactly (no residual: p = 1, K = 1). The test adds no
information: it reads D only.

Rules: ``"additive"`` (the default, :data:`DEFAULT_RULE`) = this test, then the silhouette
rule's K (as ``"tested"``); the other rules are :func:`omnifc.adapters._k_selection.choose_clusters`'s.

The class-mix rule (issue 24, twenty-sixth pass; an option)
------------------------------------------------------------
Under label shift the groups differ only in their class mix, and the additive null reads a
client whose mix is far from the others' as a client effect. The coordinator already learns
the class overlap ``Omega_ij = sum_c min(w_ic, w_jc)``, so the L1 distance of two clients'
class weights, ``2 (1 - Omega_ij)``. ``rule="additive_mix"`` (needs ``overlap``) runs the
additive test at ``MIX_ALPHAS[0]`` = 0.04; where it keeps one cluster, it tests the class
mixes at ``MIX_ALPHAS[1]`` = 0.01: the calibrated rule of
:mod:`omnifc.adapters._calibrated_k` (``statistic="axis_ci"``, a Gaussian null fitted to the
same matrix) on :func:`class_mix_distances`, the squared L1 distances (for two classes,
4 times the squared difference of the class-1 shares, a Euclidean configuration; for more,
read through the MDS embedding's positive part). The two levels sum to 0.05, the additive
rule's own (Bonferroni); the split was chosen among four on seeds 1000-1002 and 2000-2002
(docs/adapters.md, FMCL). K: the silhouette rule's where the additive test rejects, the
class-mix decision's (Ward's cut of that matrix) where only the second does, else 1.
Judged on fresh seeds against ``"additive"`` (docs/adapters.md, "FMCL's class-mix rule,
frozen and judged"): more planted grid runs right (591 of 720 against 570), but one-domain
federations whose clients share dominant classes split (20 of 30 kept against 28), so it
is not the default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from finite_field import InputError, ParameterError

from .._k_selection import (NULL_ALPHA, NULL_PERMUTATIONS, OVERLAP_STRATA, OneClusterTest,
                            MAX_CLUSTERS)
from .._k_selection import RULES as _BASE_RULES
from .._k_selection import choose_clusters as _base_choose_clusters
from .._k_selection import one_cluster_test as _base_one_cluster_test

__all__ = ["AdditiveFit", "DEFAULT_RULE", "MIX_ALPHAS", "NULLS", "RULES", "additive_fit",
           "choose_clusters", "class_mix_distances", "class_mix_test", "one_cluster_test",
           "split_silhouette"]

logger = logging.getLogger(__name__)

#: FMCL's K rules: the shared ones, ``"additive"`` (the client-effect null, then silhouette)
#: and ``"additive_mix"`` (the same, then the class-mix test; needs the overlap).
RULES = ("additive", "additive_mix") + tuple(_BASE_RULES)

#: FMCL's default K rule (docs/adapters.md, "Automatic K": held-out grid).
DEFAULT_RULE = "additive"

#: Nulls of :func:`one_cluster_test`.
NULLS = ("exchangeable", "stratified", "additive")

#: Zero distances are floored at this fraction of the median distance before the log.
LOG_FLOOR = 1e-9

#: ``rule="additive_mix"``'s levels: the additive test's, then the class-mix test's (their
#: sum is the additive rule's level, 0.05).
MIX_ALPHAS = (0.04, 0.01)


@dataclass
class AdditiveFit:
    """``log D_ij = mean + effects[i] + effects[j] + residuals`` over the pairs i < j."""

    mean: float
    effects: np.ndarray
    residuals: np.ndarray
    pairs: tuple

    def matrix(self, residuals=None) -> np.ndarray:
        """``exp(mean + a_i + a_j + e_ij)`` as a symmetric matrix (zero diagonal)."""
        e = self.residuals if residuals is None else residuals
        n = self.effects.size
        i, j = self.pairs
        out = np.zeros((n, n))
        out[i, j] = np.exp(self.mean + self.effects[i] + self.effects[j] + e)
        return out + out.T


def additive_fit(distances) -> AdditiveFit:
    """Least-squares client effects of ``log D`` (module docstring), exact closed form.

    Examples
    --------
    >>> a = np.array([0.0, 1.0, -1.0, 0.5])
    >>> d = np.exp(2.0 + a[:, None] + a[None, :]); np.fill_diagonal(d, 0)
    >>> fit = additive_fit(d)
    >>> round(fit.mean, 6), np.round(fit.effects, 6).tolist()
    (2.25, [-0.125, 0.875, -1.125, 0.375])
    >>> float(np.abs(fit.residuals).max()) < 1e-12
    True
    """
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if d.ndim != 2 or d.shape != (n, n) or n < 3:
        raise InputError(f"need a square distance matrix of at least 3 clients, got {d.shape}")
    i, j = np.triu_indices(n, 1)
    values = d[i, j]
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise InputError("distances must be finite and >= 0 (fill pairs with no shared class "
                         "first)")
    median = float(np.median(values))
    floor = LOG_FLOOR * median if median > 0 else 1.0
    y = np.log(np.maximum(values, floor))
    mean = float(y.mean())
    sums = np.bincount(i, y, n) + np.bincount(j, y, n)
    effects = (sums / (n - 1) - mean) * (n - 1) / (n - 2)
    residuals = y - mean - effects[i] - effects[j]
    return AdditiveFit(mean=mean, effects=effects, residuals=residuals, pairs=(i, j))


def _top_split(d) -> np.ndarray:
    """Labels (0/1) of the average-linkage tree's top split: the two children of its root.

    The same two clusters as ``cut_tree(tree, n_clusters=2)`` (which walks the whole tree),
    found by following the root's second child down the linkage matrix.
    """
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    n = d.shape[0]
    tree = linkage(squareform(d, checks=False), method="average")
    labels = np.zeros(n, dtype=np.int64)
    stack = [int(tree[-1, 1])]
    while stack:
        node = stack.pop()
        if node < n:
            labels[node] = 1
        else:
            stack.extend(int(c) for c in tree[node - n, :2])
    return labels


def split_silhouette(distances) -> float:
    """The silhouette of the average-linkage split into two (``silhouette_profile(d, 2)[2]``).

    Computed from the top split directly (a singleton's own silhouette is 0, as in
    scikit-learn).

    Examples
    --------
    >>> d = np.array([[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0.0]])
    >>> round(split_silhouette(d), 3)
    0.889
    """
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    labels = _top_split(d)
    onehot = np.stack([labels == 0, labels == 1], axis=1).astype(np.float64)
    sums = d @ onehot
    sizes = onehot.sum(axis=0)
    rows = np.arange(n)
    own = sizes[labels]
    a = np.divide(sums[rows, labels], own - 1, out=np.zeros(n), where=own > 1)
    b = sums[rows, 1 - labels] / sizes[1 - labels]
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.nan_to_num(np.where(own > 1, (b - a) / np.maximum(a, b), 0.0))
    return float(s.mean())


def one_cluster_test(distances, *, null=None, permutations: int = NULL_PERMUTATIONS,
                     alpha: float = NULL_ALPHA, random_state: int = 0, overlap=None,
                     strata: int = OVERLAP_STRATA) -> OneClusterTest:
    """The one-cluster test on a filled FMCL distance matrix, with a choice of null.

    ``null``: ``"exchangeable"`` (free permutation of D's entries), ``"stratified"`` (needs
    ``overlap``; permutes ``D / g(Omega)`` within overlap strata) or ``"additive"`` (the
    client-effect null of this module); default: ``"stratified"`` when ``overlap`` is given,
    else ``"exchangeable"`` (the behaviour before the option existed). Statistic, p-value and
    decision as in :func:`omnifc.adapters._k_selection.one_cluster_test`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> scale = np.exp(rng.normal(0, 1, 30))         # one population, clients of unequal spread
    >>> d = np.outer(scale, scale) * rng.chisquare(8, (30, 30)); d = np.triu(d, 1); d += d.T
    >>> one_cluster_test(d, null="additive").one_cluster
    True
    """
    if null is None:
        null = "exchangeable" if overlap is None else "stratified"
    if null not in NULLS:
        raise ParameterError(f"null must be one of {NULLS}, got {null!r}")
    if null == "stratified" and overlap is None:
        raise ParameterError("the stratified null needs overlap=")
    if null != "additive":
        return _base_one_cluster_test(distances, permutations=permutations, alpha=alpha,
                                      random_state=random_state,
                                      overlap=overlap if null == "stratified" else None,
                                      strata=strata)
    d = np.asarray(distances, dtype=np.float64)
    if int(permutations) < 1:
        raise ParameterError(f"permutations must be >= 1, got {permutations}")
    if not 0.0 < float(alpha) < 1.0:
        raise ParameterError(f"alpha must be in (0, 1), got {alpha}")
    if d.ndim != 2 or d.shape[0] < 3:
        raise ParameterError(f"the test needs at least 3 clients, got {d.shape[0]}")
    fit = additive_fit(d)
    rng = np.random.Generator(np.random.PCG64(random_state))
    e = fit.residuals
    null_values = np.array([split_silhouette(fit.matrix(e[rng.permutation(e.size)]))
                            for _ in range(int(permutations))])
    statistic = split_silhouette(d)
    p_value = (1.0 + float(np.count_nonzero(null_values >= statistic))) / (1.0 + null_values.size)
    return OneClusterTest(statistic=float(statistic), null=null_values, p_value=p_value,
                          alpha=float(alpha))


def class_mix_distances(overlap) -> np.ndarray:
    """The squared L1 distances of the clients' class weights, ``(2 (1 - Omega))^2``, from the
    class overlap the coordinator learns (zero diagonal; rounding below 0 clipped).

    Examples
    --------
    >>> w = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])
    >>> omega = np.minimum(w[:, None], w[None]).sum(-1)
    >>> class_mix_distances(omega).round(6).tolist()    # (2 |w_i1 - w_j1|)^2
    [[0.0, 1.0, 0.36], [1.0, 0.0, 2.56], [0.36, 2.56, 0.0]]
    """
    omega = np.asarray(overlap, dtype=np.float64)
    if omega.ndim != 2 or omega.shape[0] != omega.shape[1]:
        raise InputError(f"overlap must be a square matrix, got shape {omega.shape}")
    if not np.all(np.isfinite(omega)):
        raise InputError("overlap must be finite")
    d = np.maximum(2.0 * (1.0 - omega), 0.0) ** 2
    np.fill_diagonal(d, 0.0)
    return d


def class_mix_test(overlap, *, alpha: float = MIX_ALPHAS[1], random_state: int = 0):
    """Are there groups in the clients' class mixes? The calibrated rule's decision
    (``statistic="axis_ci"``, a Gaussian null fitted to the matrix) on
    :func:`class_mix_distances`: a ``KDecision`` (K = 1 when ``p > alpha``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> share = np.concatenate([rng.normal(0.2, 0.02, 10), rng.normal(0.8, 0.02, 10)])
    >>> w = np.stack([share, 1 - share], axis=1)
    >>> class_mix_test(np.minimum(w[:, None], w[None]).sum(-1)).k
    2
    """
    from .._calibrated_k import calibrated_k

    return calibrated_k(class_mix_distances(overlap), statistic="axis_ci", alpha=alpha,
                        random_state=random_state)


def choose_clusters(distances, *, rule: str = DEFAULT_RULE, max_clusters: int = MAX_CLUSTERS,
                    overlap=None):
    """Choose K and cluster a filled FMCL distance matrix (FMCL's rules, :data:`RULES`).

    ``rule="additive"``: K = 1 when :func:`one_cluster_test` with ``null="additive"`` does
    not reject "one cluster", else the ``"silhouette"`` rule's K and labels; ``window`` is
    ``(1, top)`` and ``scores`` the silhouettes (with ``{1: 0.0}`` for K = 1). Every other
    rule is :func:`omnifc.adapters._k_selection.choose_clusters`.
    Returns ``(labels, K, window, scores)``.

    Examples
    --------
    >>> d = np.array([[0, 1, 9, 9], [1, 0, 9, 9], [9, 9, 0, 1], [9, 9, 1, 0.0]])
    >>> labels, k, window, scores = choose_clusters(d, rule="additive")
    >>> k, window          # 4 clients: the additive null has one residual degree of freedom
    (1, (1, 3))
    """
    if rule not in RULES:
        raise ParameterError(f"rule must be one of {RULES}, got {rule!r}")
    if rule not in ("additive", "additive_mix"):
        return _base_choose_clusters(distances, rule=rule, max_clusters=max_clusters,
                                     overlap=overlap)
    if rule == "additive_mix" and overlap is None:
        raise ParameterError("rule='additive_mix' needs overlap= (the class overlap Omega)")
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if rule == "additive_mix" and np.shape(overlap) != d.shape:
        raise ParameterError(f"overlap must have the distances' shape {d.shape}, got "
                             f"{np.shape(overlap)}")
    labels, k, window, scores = _base_choose_clusters(d, rule="silhouette",
                                                      max_clusters=max_clusters)
    if n < 3:
        return labels, k, (1, window[1]), scores
    alpha = MIX_ALPHAS[0] if rule == "additive_mix" else NULL_ALPHA
    test = one_cluster_test(d, null="additive", alpha=alpha)
    if not test.one_cluster:
        logger.info("one-cluster test rejected (additive null, p=%.3g); K=%d by silhouette",
                    test.p_value, k)
        return labels, k, (1, window[1]), scores
    logger.info("K=1 (one-cluster test, additive client-effect null: silhouette %.4g, "
                "p=%.3g > alpha=%g)", test.statistic, test.p_value, test.alpha)
    if rule == "additive_mix":
        mix = class_mix_test(overlap)
        if mix.k > 1:
            logger.info("class-mix test rejected one cluster (p=%.3g <= alpha=%g); K=%d by "
                        "Ward's cut of the class-mix distances", mix.p_value, mix.alpha, mix.k)
            return np.asarray(mix.labels, dtype=np.int64), mix.k, (1, window[1]), scores
        logger.info("K=1 by the class-mix test too (p=%.3g > alpha=%g)", mix.p_value, mix.alpha)
    return np.zeros(n, dtype=np.int64), 1, (1, window[1]), {1: 0.0, **scores}

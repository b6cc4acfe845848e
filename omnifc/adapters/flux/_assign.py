"""FLUX test time: assigning unseen clients to the training clusters, from distances only.

Two rules (``ASSIGN_RULES``), both on the ``[mu_x, sigma_x]`` prefix distances (label-free):

- ``"nearest"`` (the previous rule, still :func:`run_flux`'s default): the cluster whose
  centroid is nearest, ``||x - c_A||^2 = mean_{j in A} D_xj - sum_{j,k in A} D_jk / (2
  |A|^2)``. Its decisions carry the calibrated rule's p-values too, and a client whose every
  p is ``<= alpha`` is flagged (``resembles_none``) and logged at WARNING, though it keeps
  the nearest cluster's model.
- ``"calibrated"`` (omnifc's, issue 24): a **full conformal p-value per cluster**. For cluster
  c with members S (``n_c`` of them) and the new client x, every point y of the augmented set
  ``S + {x}`` gets the nonconformity score ``s(y) = ||y - mean(S + {x} - {y})||^2``, its
  squared distance to the centroid of the *other* ``n_c`` points, from D alone: for T of size
  m, ``||y - mean(T)||^2 = mean_j D(y, t_j) - sum_{j,k} D(t_j, t_k) / (2 m^2)``. With
  ``r_y`` = the row sum of y in the augmented block and ``Sigma`` its total,
  ``s(y) = r_y / m - (Sigma - 2 r_y) / (2 m^2)``, ``m = n_c``; ``s(x)`` is x's squared
  distance to the centroid of S (the "nearest" rule's number). Then

      p_c = #{y in S + {x} : s(y) >= s(x)} / (n_c + 1).

  The score is symmetric in the augmented set, so when x and the members of S are
  exchangeable (x is a new client of the group S is the set of clients of)
  ``P(p_c <= a) <= a`` for every a, at any size (Vovk, Gammerman & Shafer 2005). The client
  goes to the cluster with the largest ``p_c`` (ties: the nearest centroid, the previous
  rule); when every ``p_c <= alpha`` (``CALIBRATED_ALPHA`` = 0.05, the K rule's level) it
  resembles no cluster and gets ``GLOBAL`` (-1): the global model (in :func:`run_flux`, the
  warm-up FedAvg encoder).

What the test can say: ``p_c >= 1 / (n_c + 1)`` always (x counts itself), so a cluster with
``n_c + 1 < 1 / alpha`` (fewer than 19 clients at alpha = 0.05) can never be rejected: a
client far from everything still goes to the small cluster with the largest p. Such clusters
are listed in each decision's ``untestable`` and logged. With the clusters found by the
server from the same clients (not the planted groups), exchangeability holds only as far as
the clusters are the groups.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import flux
>>> rng = np.random.default_rng(0)
>>> train = np.concatenate([rng.normal(0, 1, (20, 2)), rng.normal(10, 1, (20, 2))])
>>> x = np.concatenate([train, [[0.2, -0.1], [10.3, 9.8], [40.0, -40.0]]])
>>> d = ((x[:, None] - x[None]) ** 2).sum(-1)
>>> labels = np.repeat([0, 1], 20)
>>> flux.assign_new_clients(d, labels, rule="calibrated").tolist()   # last: no cluster
[0, 1, -1]
>>> flux.assign_new_clients(d, labels, rule="nearest").tolist()
[0, 1, 0]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from finite_field import ParameterError

from ..._geometry import centroid_sq_distances, check_distance_matrix
from .._calibrated_k import CALIBRATED_ALPHA

__all__ = ["ASSIGN_RULES", "Assignment", "AssignDecision", "GLOBAL", "assign_new_clients",
           "assign_with_evidence", "conformal_p_values"]

logger = logging.getLogger(__name__)

#: Test-time assignment rules: ``"calibrated"`` (omnifc's conformal rule) and ``"nearest"``
#: (the nearest centroid, the previous rule).
ASSIGN_RULES = ("calibrated", "nearest")

#: The label of a new client that resembles no cluster: it takes the global model.
GLOBAL = -1

#: (our choice) scores within this relative distance of x's count as ties (counted in
#: ``p_c``, the conservative side): D reconstructed from fixed-point shares and the
#: leave-one-out formula carry float rounding of ~1e-15 of the scale.
SCORE_TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class AssignDecision:
    """One unseen client's assignment and the evidence behind it.

    ``client``: index among the new clients; ``cluster``: the chosen training cluster, or
    ``GLOBAL`` (-1) for the global model; ``clusters``, ``sizes``, ``sq_distances`` (to each
    centroid) and ``p_values`` (conformal, per cluster, under either rule: ``"nearest"``
    chooses by distance and reports them) in the same order; ``untestable``: the clusters
    whose ``n_c + 1 < 1 / alpha`` (p can never be ``<= alpha`` there).
    """

    client: int
    cluster: int
    clusters: tuple
    sizes: tuple
    sq_distances: tuple
    p_values: tuple
    alpha: float
    rule: str
    untestable: tuple = ()

    @property
    def fallback(self) -> bool:
        """True when the client resembles no cluster and takes the global model."""
        return self.cluster == GLOBAL

    @property
    def resembles_none(self) -> bool:
        """True when every cluster's p-value is ``<= alpha``: the calibrated rule's verdict
        that the client resembles no cluster, whichever rule chose its model (under
        ``"calibrated"`` it is :attr:`fallback`)."""
        return all(p <= self.alpha for p in self.p_values)

    def summary(self) -> str:
        """One line: the decision and its evidence (what :func:`assign_with_evidence` logs)."""
        what = "global model (every p <= alpha)" if self.fallback else f"cluster {self.cluster}"
        parts = ", ".join(f"{c}: p={p:.3g} d2={s:.4g} n={n}" for c, p, s, n in
                          zip(self.clusters, self.p_values, self.sq_distances, self.sizes))
        note = (f"; clusters {list(self.untestable)} too small to reject at alpha "
                f"(n + 1 < 1/alpha)" if self.untestable else "")
        if self.resembles_none and not self.fallback:
            note += ("; every p <= alpha: it resembles no cluster (rule='calibrated' would "
                     "give it the global model)")
        return (f"new client {self.client} -> {what} ({self.rule}, alpha={self.alpha:g}: "
                f"{parts}{note})")


@dataclass(frozen=True)
class Assignment:
    """The outcome of :func:`assign_with_evidence`: ``labels`` (one per new client, ``GLOBAL``
    for the global model) and one :class:`AssignDecision` per new client."""

    labels: np.ndarray
    decisions: tuple

    @property
    def n_fallback(self) -> int:
        """New clients given the global model."""
        return int(np.sum(self.labels == GLOBAL))

    @property
    def n_resembling_none(self) -> int:
        """New clients whose every cluster p-value is ``<= alpha``, whatever their model."""
        return sum(d.resembles_none for d in self.decisions)


def _check(prefix, labels) -> tuple[np.ndarray, np.ndarray, int]:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ParameterError(f"labels must be a non-empty 1-d array (one cluster per training "
                             f"client), got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ParameterError(f"labels must be non-negative integers, got {labels.dtype} "
                             f"with minimum {labels.min()}")
    shape = np.shape(prefix)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ParameterError(f"prefix must be a square (n_train + n_new) squared-distance "
                             f"matrix, got shape {shape}")
    d = check_distance_matrix(prefix)      # InputError for NaN, asymmetry, negative entries
    n_train = labels.size
    if d.shape[0] <= n_train:
        raise ParameterError("the prefix matrix holds no new clients")   # (exact text tested)
    return d, labels, n_train


def conformal_p_values(prefix, labels):
    """Per new client and cluster: the full conformal p-value and the squared centroid distance.

    Returns ``(clusters, p, sq_distances)``: the sorted cluster labels, ``p`` and
    ``sq_distances`` of shape ``(n_new, n_clusters)``. See the module for the formula.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters.flux import conformal_p_values
    >>> x = np.array([[0.0], [1.0], [2.0], [3.0], [1.5]])   # one cluster of 4, new client 1.5
    >>> clusters, p, d2 = conformal_p_values((x - x.T) ** 2, [0, 0, 0, 0])
    >>> p.tolist(), d2.tolist()   # 1.5 is the centroid: every point scores >= it
    ([[1.0]], [[0.0]])
    """
    d, labels, n_train = _check(prefix, labels)
    rows = np.arange(n_train, d.shape[0])
    clusters = np.unique(labels)
    p = np.empty((rows.size, clusters.size))
    sq = centroid_sq_distances(d, [np.flatnonzero(labels == c) for c in clusters], rows=rows)
    for k, c in enumerate(clusters):
        members = np.flatnonzero(labels == c)
        m = members.size
        block = d[np.ix_(members, members)]
        member_rows = block.sum(axis=1)            # r_y without x, per member
        member_total = block.sum()
        to_x = d[np.ix_(rows, members)]            # (n_new, m)
        for i in range(rows.size):
            r_members = member_rows + to_x[i]      # each member's row sum in S + {x}
            r_x = to_x[i].sum()
            total = member_total + 2.0 * r_x
            scores = r_members / m - (total - 2.0 * r_members) / (2.0 * m * m)
            score_x = r_x / m - member_total / (2.0 * m * m)
            tie = SCORE_TIE_TOLERANCE * max(float(np.abs(scores).max(initial=0.0)),
                                            abs(score_x), 1e-300)
            p[i, k] = (1 + int(np.sum(scores >= score_x - tie))) / (m + 1)
    return clusters, p, sq


def assign_with_evidence(prefix, labels, *, rule: str = "calibrated",
                         alpha: float = CALIBRATED_ALPHA) -> Assignment:
    """Assign each new client and keep the evidence (p-values, centroid distances) of each.

    ``prefix`` is the ``(n_train + n_new)`` squared prefix-distance matrix (training clients
    first), ``labels`` the training clusters (non-negative integers). ``rule="calibrated"``:
    the largest conformal p-value (ties: nearest centroid), ``GLOBAL`` when every
    ``p <= alpha``; ``rule="nearest"``: the nearest centroid, with the same p-values as
    evidence. Each decision is logged at INFO; a client that resembles no cluster but keeps
    the nearest cluster's model (``"nearest"``) is logged at WARNING.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [1.0], [10.0], [11.0], [0.4]])
    >>> out = flux.assign_with_evidence((x - x.T) ** 2, [0, 0, 1, 1])
    >>> out.labels.tolist(), out.decisions[0].untestable   # clusters of 2: p >= 1/3 > 0.05
    ([0], (0, 1))
    """
    if rule not in ASSIGN_RULES:
        raise ParameterError(f"rule must be one of {ASSIGN_RULES}, got {rule!r}")
    if not 0.0 < float(alpha) < 1.0:
        raise ParameterError(f"alpha must lie in (0, 1), got {alpha}")
    clusters, p, sq = conformal_p_values(prefix, labels)
    labels = np.asarray(labels)
    sizes = tuple(int(np.sum(labels == c)) for c in clusters)
    untestable = tuple(int(c) for c, n in zip(clusters, sizes) if 1 / (n + 1) > alpha)
    if untestable:
        logger.info("clusters %s have n + 1 < 1/alpha = %.4g clients: their conformal p is at "
                    "least 1/(n + 1) > alpha, so no client can be rejected by them",
                    list(untestable), 1.0 / alpha)
    out, decisions = [], []
    for i in range(p.shape[0]):
        if rule == "nearest":
            chosen = int(clusters[np.argmin(sq[i])])
        else:
            best = np.flatnonzero(p[i] == p[i].max())
            chosen = int(clusters[best[np.argmin(sq[i, best])]])
            if np.all(p[i] <= alpha):
                chosen = GLOBAL
        decision = AssignDecision(client=i, cluster=chosen,
                                  clusters=tuple(int(c) for c in clusters), sizes=sizes,
                                  sq_distances=tuple(float(v) for v in sq[i]),
                                  p_values=tuple(float(v) for v in p[i]), alpha=float(alpha),
                                  rule=rule, untestable=untestable)
        if decision.resembles_none and not decision.fallback:
            logger.warning("%s", decision.summary())
        else:
            logger.info("%s", decision.summary())
        out.append(chosen)
        decisions.append(decision)
    return Assignment(labels=np.array(out, dtype=np.int64), decisions=tuple(decisions))


def assign_new_clients(prefix, labels, *, rule: str = "nearest",
                       alpha: float = CALIBRATED_ALPHA) -> np.ndarray:
    """Test time: the cluster of each new client from the prefix distances only.

    ``prefix`` is the (n_train + n_new)² prefix squared-distance matrix (training clients
    first); ``labels`` the training clusters. ``rule="nearest"`` (default: the previous
    behaviour) returns the nearest centroid's label; ``rule="calibrated"`` the conformal rule
    of :func:`assign_with_evidence`, with ``GLOBAL`` (-1) for a client that resembles no
    cluster. Returns one label per new client; :func:`assign_with_evidence` also gives the
    evidence.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> x = np.array([[0.0], [1.0], [10.0], [11.0], [9.0], [2.0]])
    >>> flux.assign_new_clients((x - x.T) ** 2, [0, 0, 1, 1]).tolist()
    [1, 0]
    """
    return assign_with_evidence(prefix, labels, rule=rule, alpha=alpha).labels

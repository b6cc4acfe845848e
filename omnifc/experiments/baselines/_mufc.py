"""MUFC's clustering (Pan et al., ICLR 2023, "Machine Unlearning of Federated Clusters").

The clustering part of MUFC, run offline as a baseline next to k-FED and FFCM. As the
authors' code (``thupchnsky/mufc``: ``mufc_main.py``, ``model.py``, ``utils.py``,
``run.sh``) does it:

1. **Client**: K-means++ *initialization only* (``--client_kpp_only`` in the published
   run script, Algorithm 1 of the paper: no Lloyd iterations, which is what makes client
   unlearning cheap) with ``k'`` centres (``k' = K`` in the published runs); every point is
   assigned to its nearest chosen centre. ``client_lloyd=True`` adds the Lloyd iterations
   (the code's default without the flag).
2. **Quantization**: every centre is rounded to the grid ``eps * round(c / eps)`` with
   ``eps = 1 / sqrt(N)``, N the total number of points (the code's fixed choice).
3. **Aggregation** (SCMA, secure compressed multiset aggregation): the server learns the
   multiset of quantization bins with the number of points behind each, summed over the
   clients, not who contributed them. Here the multiset is summed in the clear:
   the Reed-Solomon based secure protocol is **not** implemented (its output is the same).
4. **Server**: one point per client point drawn uniformly in that point's bin (the code's
   ``sample_points_in_bin``; ``jitter=False`` uses the bin centres weighted by their counts
   instead, the paper's "weighted centroids" reading), then full K-means (scikit-learn
   ``KMeans``, k-means++ seeding, ``n_init = 10``, ``max_iter = 300`` as in the code). Each
   point takes the server label of its surrogate.

Not MUFC here: the unlearning mechanism (removal requests, client retraining when a
removed point was an initial centre), the SCMA protocol itself, and the paper's data sets.

Examples
--------
>>> import numpy as np
>>> parties = [np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]]),
...            np.array([[5.1, 5.0], [0.0, 0.1], [5.0, 5.1]])]
>>> federated_mufc(parties, 2, seed=0).tolist()
[0, 0, 1, 1, 0, 1]
"""

from __future__ import annotations

import math

import numpy as np

from finite_field import InputError, ParameterError

__all__ = ["kmeanspp_centres", "client_upload", "aggregate_bins", "server_labels",
           "federated_mufc", "quantization_step"]

#: Server K-means settings of the authors' code (``n_init`` 10, ``max_iter`` 300).
SERVER_N_INIT, SERVER_MAX_ITER = 10, 300


def quantization_step(n_points: int) -> float:
    """The authors' fixed quantization step ``eps = 1 / sqrt(N)``."""
    if int(n_points) < 1:
        raise ParameterError(f"need at least one point, got {n_points}")
    return 1.0 / math.sqrt(int(n_points))


def kmeanspp_centres(x, k: int, rng) -> np.ndarray:
    """Indices of ``k`` K-means++ seeds of ``x`` (first uniform, then D^2 sampling).

    Stops early when every remaining point coincides with a chosen seed (fewer than ``k``
    distinct rows).
    """
    x = np.asarray(x, dtype=np.float64)
    chosen = [int(rng.integers(x.shape[0]))]
    closest = ((x - x[chosen[0]]) ** 2).sum(axis=1)
    while len(chosen) < k:
        total = closest.sum()
        if total <= 0.0:
            break
        nxt = int(rng.choice(x.shape[0], p=closest / total))
        chosen.append(nxt)
        closest = np.minimum(closest, ((x - x[nxt]) ** 2).sum(axis=1))
    return np.array(chosen, dtype=np.int64)


def client_upload(x, k: int, eps: float, rng, *, client_lloyd: bool = False,
                  max_iter: int = SERVER_MAX_ITER):
    """One client: K-means++ centres (optionally Lloyd), quantized to the grid ``eps``.

    Returns ``(bins, assignment)``: the integer bin of each centre (``round(c / eps)``,
    shape (k', d)) and each point's centre index.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise InputError(f"expected a non-empty (n, d) array, got shape {x.shape}")
    centres = x[kmeanspp_centres(x, min(int(k), x.shape[0]), rng)]
    assignment = ((x[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    if client_lloyd:
        for _ in range(int(max_iter)):
            updated = np.array([x[assignment == j].mean(axis=0) if np.any(assignment == j)
                                else centres[j] for j in range(len(centres))])
            new = ((x[:, None, :] - updated[None]) ** 2).sum(axis=2).argmin(axis=1)
            centres = updated
            if np.array_equal(new, assignment):
                break
            assignment = new
    bins = np.rint(centres / eps).astype(np.int64)
    return bins, assignment


def aggregate_bins(uploads) -> tuple[np.ndarray, np.ndarray]:
    """The multiset SCMA delivers: distinct bins (m, d) and the number of points in each.

    ``uploads`` is a list of ``(bins, assignment)`` from :func:`client_upload`. Summed in
    the clear here (SCMA computes the same sum securely).
    """
    rows, counts = [], []
    for bins, assignment in uploads:
        rows.append(bins)
        counts.append(np.bincount(assignment, minlength=len(bins)))
    stacked = np.concatenate(rows)
    unique, inverse = np.unique(stacked, axis=0, return_inverse=True)
    totals = np.bincount(inverse.ravel(), weights=np.concatenate(counts),
                         minlength=len(unique)).astype(np.int64)
    keep = totals > 0
    return unique[keep], totals[keep]


def server_labels(bins, counts, eps: float, n_clusters: int, rng, *, jitter: bool = True):
    """Server: K-means on the aggregated bins; returns ``(labels per point, model)``.

    Points are listed bin by bin (``np.repeat`` order of ``bins``). ``jitter=True``: one
    uniform sample in ``[-eps/2, eps/2)^d`` around its bin centre per point (the authors'
    code); ``False``: the bin centres weighted by their counts.
    """
    from sklearn.cluster import KMeans

    centres = np.asarray(bins, dtype=np.float64) * eps
    counts = np.asarray(counts, dtype=np.int64)
    seed = int(rng.integers(2 ** 31 - 1))
    model = KMeans(n_clusters=int(n_clusters), n_init=SERVER_N_INIT,
                   max_iter=SERVER_MAX_ITER, random_state=seed)
    if jitter:
        points = np.repeat(centres, counts, axis=0)
        points = points + rng.uniform(-eps / 2.0, eps / 2.0, size=points.shape)
        return model.fit_predict(points), model
    bin_labels = model.fit_predict(centres, sample_weight=counts.astype(np.float64))
    return np.repeat(bin_labels, counts), model


def federated_mufc(parts, n_clusters: int, *, local_clusters=None, eps=None,
                   jitter: bool = True, client_lloyd: bool = False, seed: int = 0) -> np.ndarray:
    """MUFC's federated clustering of the stacked rows of ``parts`` (see the module).

    ``local_clusters`` (k') defaults to ``n_clusters``; ``eps`` to ``1 / sqrt(N)``. Returns
    the label of every row, parties stacked in the order given.
    """
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    if not parts:
        raise InputError("need at least one party")
    k = int(n_clusters)
    k_local = k if local_clusters is None else int(local_clusters)
    if k < 1 or k_local < 1:
        raise ParameterError(f"n_clusters and local_clusters must be >= 1, got {n_clusters}, "
                             f"{local_clusters}")
    n = sum(p.shape[0] for p in parts)
    step = quantization_step(n) if eps is None else float(eps)
    rng = np.random.Generator(np.random.PCG64(seed))
    uploads = [client_upload(p, k_local, step, rng, client_lloyd=client_lloyd) for p in parts]
    bins, counts = aggregate_bins(uploads)
    if len(bins) < k and not jitter:
        raise ParameterError(f"only {len(bins)} distinct bins for n_clusters={k}")
    point_labels, _ = server_labels(bins, counts, step, k, rng, jitter=jitter)
    # map each row to its surrogate: surrogates are listed bin by bin, in `bins` order
    order = {tuple(b): i for i, b in enumerate(bins.tolist())}
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    taken = np.zeros(len(bins), dtype=np.int64)
    labels = []
    for bins_i, assignment in uploads:
        local = np.empty(len(assignment), dtype=np.int64)
        for row, centre in enumerate(assignment):
            b = order[tuple(bins_i[centre].tolist())]
            local[row] = point_labels[starts[b] + taken[b]]
            taken[b] += 1
        labels.append(local)
    return np.concatenate(labels)

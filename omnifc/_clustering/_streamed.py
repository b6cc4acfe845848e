"""Streamed passes over a distance matrix that does not fit in memory.

Each function reads D one row block at a time from a :class:`~omnifc.TiledDistances`
(the float view of an in-RAM or memory-mapped :class:`~omnifc.DistanceStore`), so its
memory is O(tile x n + n x r), never O(n^2):

- :func:`canonical_order_streamed`: the same row order as :func:`canonical_order` (one
  sort per row; rows whose sorted-row sums tie are re-read and compared byte-wise);
- :class:`PermutedRows`: rows of D in another row order (for k-means++ seeding on D);
- :func:`centered_gram_operator`: ``B = -1/2 J D J`` as a LinearOperator whose mat-vec
  and mat-mat are one pass over D each (centre the input, multiply tile-wise, centre the
  output; J D J is never formed);
- :func:`streamed_mds`: top eigenpairs of B by a randomized range finder (block power
  iterations, one pass per iteration: the default, a handful of passes) or by Lanczos
  (``scipy.sparse.linalg.eigsh``, one pass per mat-vec);
- :func:`knn_graph`: the k nearest other rows of every row, ties broken by a given rank
  (deterministic), one pass; also the mean pairwise Euclidean distance;
- :func:`radius_graph`: all pairs within Euclidean ``eps`` (a sparse matrix), one pass;
- :func:`min_above`: the smallest Euclidean distance above a threshold, one pass.

Examples
--------
>>> import numpy as np
>>> from omnifc import plaintext_distance_store
>>> x = np.array([[0, 0], [0, 1], [5, 5], [5, 7]])
>>> view = plaintext_distance_store(x, scale_bits=0).distances
>>> idx, dist = knn_graph(view, 1)
>>> idx[:, 0].tolist(), dist[:, 0].tolist()
([1, 0, 3, 2], [1.0, 1.0, 4.0, 4.0])
>>> y, values, explained = streamed_mds(view, 2, np.random.default_rng(0))
>>> d = ((y[:, None] - y[None]) ** 2).sum(-1)
>>> bool(np.allclose(d, np.asarray(view)))
True
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from finite_field import ParameterError

from ._progress import Steps, started

__all__ = ["PermutedRows", "canonical_order_streamed", "centered_gram_operator",
           "streamed_mds", "knn_graph", "radius_graph", "min_above", "mean_euclidean"]

logger = logging.getLogger(__name__)


class PermutedRows:
    """Rows of D with rows and columns listed in ``order``: ``rows[i] = D[order[i], order]``.

    Supports ``shape``, ``len``, ``rows[i]`` and ``rows[index_array]`` (float64), which is
    all :func:`kmeans_plusplus_indices` needs; each access reads only the rows asked for.
    """

    def __init__(self, view, order=None):
        self.view = view
        n = view.shape[0]
        self.order = np.arange(n) if order is None else np.asarray(order, dtype=np.int64)
        self.shape = (n, n)

    def __len__(self) -> int:
        return self.shape[0]

    def take_rows(self, indices) -> np.ndarray:
        return self.view.take_rows(self.order[np.asarray(indices, dtype=np.int64)])[:, self.order]

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.take_rows([index])[0]
        return self.take_rows(index)


def canonical_order_streamed(view) -> np.ndarray:
    """:func:`canonical_order` computed one row block at a time (identical result).

    Sorts each row block, keeps per row the sum of the sorted row (the same float sum as
    the dense function) and a 16-byte digest of its bytes. Rows are ordered by sum; rows
    with equal sums and different digests are re-read and ordered by their sorted bytes,
    as the dense function does; equal rows keep their index order (stable), as there.
    """
    n = view.shape[0]
    sums = np.empty(n)
    digests = []
    for a, b, block in view.tiles():
        block = np.sort(block + 0.0, axis=1)
        sums[a:b] = block.sum(axis=1)
        digests.extend(hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in block)
    order = np.lexsort((np.arange(n), sums))
    out = order.copy()
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and sums[order[stop]] == sums[order[start]]:
            stop += 1
        group = order[start:stop]
        if stop - start > 1 and len({digests[i] for i in group}) > 1:
            rows = np.sort(view.take_rows(group) + 0.0, axis=1)
            keys = {int(i): rows[j].tobytes() for j, i in enumerate(group)}
            out[start:stop] = sorted(group.tolist(), key=keys.__getitem__)
        start = stop
    return out.astype(np.int64)


def centered_gram_operator(view, rows_per_tile: int | None = None):
    """``B = -1/2 J D J`` as a :class:`scipy.sparse.linalg.LinearOperator` (streamed)."""
    from scipy.sparse.linalg import LinearOperator

    n = view.shape[0]

    def matmat(v):
        v = np.asarray(v, dtype=np.float64)
        squeeze = v.ndim == 1
        w = v.reshape(n, -1)
        w = w - w.mean(axis=0, keepdims=True)
        out = np.empty_like(w)
        for a, b, block in view.tiles(rows_per_tile):
            out[a:b] = block @ w
        out -= out.mean(axis=0, keepdims=True)
        out *= -0.5
        return out[:, 0] if squeeze else out

    return LinearOperator((n, n), matvec=matmat, matmat=matmat, rmatvec=matmat,
                          rmatmat=matmat, dtype=np.float64)


def _trace(view) -> float:
    """trace(B) = sum(D) / (2n): the total scatter, for the explained fraction."""
    total = 0.0
    for _, _, block in view.tiles():
        total += float(block.sum())
    return total / (2.0 * view.shape[0])


def streamed_mds(view, n_components: int, rng: np.random.Generator, *,
                 solver: str = "randomized", n_oversamples: int = 10, n_iter: int = 4,
                 tol: float = 0.0, dask=None) -> tuple[np.ndarray, np.ndarray, float]:
    """Classical MDS from streamed passes: the top ``n_components`` directions of B.

    Returns ``(embedding, eigenvalues, explained)``: coordinates ``V sqrt(lambda)`` for
    the eigenvalues above the same tolerance as :func:`classical_mds`, those eigenvalues,
    and the fraction of trace(B) = sum(D) / (2n) they hold. When D has rank at most
    ``n_components`` (data in at most that many dimensions), ``explained`` is 1 up to
    rounding and the embedding is isometric to the data: k-means on it equals k-means on
    the plaintext rows. Otherwise it is the best rank-``n_components`` approximation
    (classical MDS truncated), and ``explained`` says how much of the scatter it keeps.

    ``solver="randomized"`` (Halko, Martinsson and Tropp 2011, algorithm 4.4): a Gaussian
    block of ``n_components + n_oversamples`` columns, ``n_iter`` power iterations with
    re-orthonormalization, then the eigenproblem of Q^T B Q; ``n_iter + 2`` passes over D
    (plus one for trace(B)).
    ``solver="lanczos"``: ARPACK ``eigsh(which="LA")`` on the streamed operator, one pass
    per mat-vec (many passes; for D in RAM).

    ``dask``: run the products with D (and the trace) on Dask instead of in this process
    (:mod:`omnifc._clustering._dask`): a ``dask.distributed.Client``, a scheduler name or
    True; the same computation (the same random block, the same order of operations per
    row block), so the embedding equals the in-process one up to floating-point rounding
    of the products.
    """
    from scipy.linalg import eigh, qr

    n = view.shape[0]
    if isinstance(n_components, bool) or int(n_components) < 1:
        raise ParameterError(f"n_components must be a positive integer, got {n_components!r}")
    r = min(int(n_components), n)
    if dask is not None and dask is not False:
        from ._dask import check_dask, dask_gram_operator

        dask = check_dask(dask)
        op = dask_gram_operator(view, dask)
    else:
        dask = None
        op = centered_gram_operator(view)
    if solver == "randomized":
        from threadpoolctl import threadpool_limits

        def orthonormal(y):
            # a tall-skinny QR: one BLAS thread (multi-threaded LAPACK QR was 40x slower
            # on a busy 2-core machine, measured)
            with threadpool_limits(limits=1, user_api="blas"):
                return qr(y, mode="economic", overwrite_a=True)[0]

        width = min(n, r + int(n_oversamples))
        steps = Steps("streamed MDS", "pass over D", total=int(n_iter) + 2)
        steps.step(1)
        q = orthonormal(op.matmat(rng.standard_normal((n, width))))
        for number in range(int(n_iter)):
            steps.step(number + 2)
            q = orthonormal(op.matmat(q))
        steps.step(int(n_iter) + 2)
        small = q.T @ op.matmat(q)
        values, vectors = eigh((small + small.T) / 2)
        vectors = q @ vectors
    elif solver == "lanczos":
        from scipy.sparse.linalg import eigsh

        if r >= n - 1:  # ARPACK needs k < n
            raise ParameterError(f"solver='lanczos' needs n_components < n - 1 = {n - 1}, "
                                 f"got {r}; use solver='randomized'")
        started("streamed MDS", f"Lanczos iterations for {r} components (one pass over D "
                                "each)")
        values, vectors = eigsh(op, k=r, which="LA", tol=tol, v0=rng.standard_normal(n))
    else:
        raise ParameterError(f"solver must be 'randomized' or 'lanczos', got {solver!r}")
    order = np.argsort(values)[::-1][:r]
    values, vectors = values[order], vectors[:, order]
    tolerance = max(n, 1) * np.finfo(np.float64).eps * max(abs(values[0]), 1.0) * 16
    keep = values > tolerance
    if dask is not None:
        from ._dask import dask_trace

        trace = dask_trace(view, dask)
    else:
        trace = _trace(view)
    explained = float(values[keep].sum() / trace) if trace > 0 else 1.0
    if not keep.any():
        return np.zeros((n, 1)), values[:0], explained
    embedding = vectors[:, keep] * np.sqrt(values[keep])
    logger.debug("streamed MDS: %d components keep %.6f of the scatter", keep.sum(), explained)
    return embedding, values[keep], explained


def knn_graph(view, n_neighbors: int, rank=None, *, with_mean: bool = False):
    """Indices and squared distances of every row's ``n_neighbors`` nearest other rows.

    Neighbours are ordered by (distance, ``rank[column]``) (``rank`` defaults to the
    column index), so ties are broken deterministically and the result equals a dense
    sort of each row by that key. Computed on the exact integers, one row block at a
    time. Returns ``(indices (n, k), squared distances (n, k))``, plus the mean pairwise
    Euclidean distance over i < j with ``with_mean``.
    """
    store = view.store
    n = view.shape[0]
    k = min(int(n_neighbors), n - 1)
    if k < 1:
        raise ParameterError(f"n_neighbors must be at least 1 with n = {n} rows, got "
                             f"{n_neighbors!r}")
    rank = np.arange(n) if rank is None else np.asarray(rank, dtype=np.int64)
    indices = np.empty((n, k), dtype=np.int64)
    distances = np.empty((n, k), dtype=np.int64)
    sqrt_sum = 0.0
    for a, b, block in view.tiles(store.rows_per_tile(24), integer=True):
        block = np.array(block, dtype=np.int64)  # a copy: the diagonal is overwritten
        local = np.arange(b - a)
        if with_mean:
            upper = np.sqrt(np.triu(block[:, a:], 1) * store.factor)
            sqrt_sum += float(upper.sum())
        block[local, a + local] = np.iinfo(np.int64).max
        kth = np.partition(block, k - 1, axis=1)[:, k - 1]
        for i in range(b - a):
            row = block[i]
            candidates = np.flatnonzero(row <= kth[i])
            chosen = candidates[np.lexsort((rank[candidates], row[candidates]))[:k]]
            indices[a + i] = chosen
            distances[a + i] = row[chosen]
    out = (indices, distances * store.factor)
    if with_mean:
        pairs = n * (n - 1) / 2
        return out + ((sqrt_sum / pairs) if pairs else 0.0,)
    return out


def mean_euclidean(view) -> float:
    """The mean Euclidean distance sqrt(D) over pairs i < j, one pass."""
    n = view.shape[0]
    total = 0.0
    for a, b, block in view.tiles():
        total += float(np.sqrt(np.triu(block[:, a:], 1)).sum())
    pairs = n * (n - 1) / 2
    return total / pairs if pairs else 0.0


def radius_graph(view, eps: float, order=None):
    """Sparse CSR matrix of the Euclidean distances sqrt(D) <= ``eps`` (diagonal included).

    With ``order``, rows and columns are listed in that order (entry (i, j) is the pair
    (order[i], order[j])); column indices are sorted within each row.
    """
    from scipy import sparse

    n = view.shape[0]
    rows, cols, data = [], [], []
    for a, b, block in view.tiles():
        dist = np.sqrt(block)
        r, c = np.nonzero(dist <= eps)
        rows.append(r + a)
        cols.append(c)
        data.append(dist[r, c])
    rows, cols, data = (np.concatenate(v) if v else np.empty(0) for v in (rows, cols, data))
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[np.asarray(order)] = np.arange(n)
        rows, cols = inverse[rows], inverse[cols]
    graph = sparse.csr_matrix((data, (rows, cols)), shape=(n, n))
    graph.sort_indices()
    return graph


def min_above(view, threshold: float) -> float | None:
    """The smallest Euclidean distance sqrt(D) strictly above ``threshold`` (None if none)."""
    best = None
    for _, _, block in view.tiles():
        dist = np.sqrt(block)
        above = dist[dist > threshold]
        if above.size:
            value = float(above.min())
            best = value if best is None else min(best, value)
    return best

"""Gram matrices and squared distances, tile by tile.

Pairwise kernels (:func:`sq_distances`, :func:`gram_matrix`, :func:`cross_sq_distances`)
go tile by tile (about 4 MB of products each): BLAS writes a tile's exact float64 values
straight into the memory of the int64 result, and a numba kernel reduces them in place
while they are in cache. Symmetric results compute only tiles on or above the diagonal
and mirror each one. :class:`DistanceTiles` / :func:`sq_distances_tile` compute one row
block at a time, for callers that stream the result instead of holding n x n int64
(2 GB at n = 16000).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._jit import kernel, num_threads
from .._errors import ParameterError
from ._blas_threads import _single_threaded_blas
from ._checks import _as_int64, _check_matrix, _check_modulus
from ._exact import _mod_float
from ._operands import _Operands
from ._tasks import _BLOCK, _GRAIN, _run_tasks, _run_threads

__all__ = ["gram_matrix", "distances_from_gram", "cross_sq_distances", "sq_distances",
           "DistanceTiles", "sq_distances_tile"]

# --------------------------------------------------------------------------- tile geometry

#: Bytes of one tile of products (rows x columns float64), kept near the caches.
_PANEL_BYTES = 4 * 2**20
#: Columns per tile.
_TILE_COLUMNS = 2048


def _panel_rows(n_rows: int, n_cols: int) -> int:
    """Rows per panel: the panel's products (rows x n_cols float64) stay near the caches."""
    rows = _PANEL_BYTES // (8 * max(n_cols, 1))
    return int(max(8, min(1024, rows // 8 * 8)))


def _accumulate(out, part, row0, col0, first, p):
    # In place on the float64 view of out: out[row0 + r, col0 + c] = (that + part[r, c]) mod p,
    # or part[r, c] mod p when first. All values are exact float64 integers.
    rows, cols = part.shape
    pf = np.float64(p)
    p_inv = 1.0 / pf
    values = out.view(np.float64)
    for r in range(rows):
        dest = values[row0 + r, col0:col0 + cols]
        src = part[r]
        if first:
            for c in range(cols):
                dest[c] = _mod_float(src[c], pf, p_inv)
        else:
            for c in range(cols):
                dest[c] = _mod_float(dest[c] + src[c], pf, p_inv)


_accumulate_kernel = kernel("void(int64[:,::1], float64[:,::1], int64, int64, int64, int64)",
                                cache=True, nogil=True)(_accumulate)


@kernel(cache=True)
def _norms_minus_twice(norm_x, norm_y, g, p):
    # (norm_x + norm_y - 2 g) mod p, the squared distance from the norms and the Gram
    # entry, for norm_x, norm_y, g in [0, p): float64 (exact integers) or int64 alike.
    t = norm_x + norm_y
    if t >= p:
        t -= p
    u = g + g
    if u >= p:
        u -= p
    d = t - u
    if d < 0:
        d += p
    return d


def _panel(out, row0, row1, col0, row_norms, col_norms, c_lo, c_hi, mirror_from, distances, p):
    # In place: the float64 view of out[row0:row1, col0 + c] (c in [c_lo, c_hi)) holds exact
    # integers v (the BLAS product was written there). Replaces them by int64 results:
    #   distances == 0: v = <x, y> (mod p), result v mod p (the Gram entry);
    #   distances == 1: v = <x, y>, result row_norms[r] + col_norms[c] - 2 v mod p;
    #   distances == 2: v = h_x + h_y - <x, y> (halved norms), result 2 v mod p;
    # and mirrors the columns c >= mirror_from to out[col0 + c, row0:row1].
    # Reading the float64 view and writing the int64 array at the same address is safe
    # (each element is read before it is written) and LLVM sees that they are one array.
    pf = np.float64(p)
    p_inv = 1.0 / pf
    values = out.view(np.float64)
    cols = c_hi - c_lo
    for r in range(row1 - row0):
        # Contiguous row slices rather than offset indices: no negative-index checks in
        # the inner loop, so it vectorizes.
        dest = out[row0 + r, col0 + c_lo:col0 + c_hi]
        src = values[row0 + r, col0 + c_lo:col0 + c_hi]
        if distances == 2:
            for c in range(cols):
                g = _mod_float(src[c], pf, p_inv)
                g += g
                if g >= pf:
                    g -= pf
                dest[c] = np.int64(g)
        elif distances == 1:
            norm = row_norms[r]
            norms = col_norms[c_lo:c_hi]
            for c in range(cols):
                dest[c] = np.int64(_norms_minus_twice(norm, norms[c],
                                                      _mod_float(src[c], pf, p_inv), pf))
        else:
            for c in range(cols):
                dest[c] = np.int64(_mod_float(src[c], pf, p_inv))
    for c in range(max(c_lo, mirror_from), c_hi):
        dest = out[col0 + c, row0:row1]
        for r in range(row1 - row0):
            dest[r] = out[row0 + r, col0 + c]


# Serial and GIL-free: :func:`_pairwise` runs it in several Python threads, one tile each.
_panel_kernel = kernel("void(int64[:,::1], int64, int64, int64, float64[::1], float64[::1],"
                           " int64, int64, int64, int64, int64)", cache=True, nogil=True)(_panel)


@kernel("int64(int64[:,::1], int64[::1], int64[:,::1], int64, int64, int64, int64)",
            cache=True, nogil=True)
def _gram_to_distances_kernel(gram, diag, out, in_place, p, row_lo, row_hi):
    # out[i, j] = diag[i] + diag[j] - 2 gram[i, j] mod p for rows [row_lo, row_hi), with
    # diag a copy of gram's diagonal. in_place: out is gram itself; then results go
    # through a small scratch buffer, since LLVM vectorizes a loop reading one array and
    # writing another only after checking at run time that they do not overlap.
    # Returns the number of rows that held an element outside [0, p).
    n = gram.shape[1]
    bad = 0
    scratch = np.empty(min(n, _BLOCK), dtype=np.int64)
    for i in range(row_lo, row_hi):
        di = diag[i]
        lo = p
        hi = np.int64(0)
        for j0 in range(0, n, _BLOCK):
            j1 = min(n, j0 + _BLOCK)
            src = gram[i, j0:j1]
            dg = diag[j0:j1]
            dst_direct = out[i, j0:j1]
            for j in range(j1 - j0):
                g = src[j]
                lo = min(lo, g)
                hi = max(hi, g)
                d = _norms_minus_twice(di, dg[j], g, p)
                if in_place:
                    scratch[j] = d
                else:
                    dst_direct[j] = d
            if in_place:
                dst = out[i, j0:j1]
                for j in range(j1 - j0):
                    dst[j] = scratch[j]
        if lo < 0 or hi >= p:
            bad += 1
    return bad


def _pairwise(rows: _Operands, cols: _Operands, p: int, out: np.ndarray, *, symmetric: bool,
              distances: bool) -> np.ndarray:
    """Fill ``out`` (n_a, n_b) with Gram entries or squared distances, tile by tile.

    For each tile (rows [i0, i1), columns [j0, j1)), one BLAS product writes the exact
    float64 values straight into the memory of ``out`` (its float64 view), and the panel
    kernel turns them into reduced int64 results in place while they are still in cache.
    ``symmetric``: ``rows`` and ``cols`` are the same matrix; only tiles with columns
    >= i0 are computed, and each is mirrored to the lower triangle. No n x n buffer besides
    ``out`` is used (one tile-sized buffer per thread when k needs several exact chunks).

    ``numba.get_num_threads()`` workers (this thread and plain helper threads; the
    kernels release the GIL) take tiles from a shared queue and each runs the whole
    product-and-reduce of its tile with single-threaded BLAS (see
    :func:`_single_threaded_blas`), so nothing forks and joins per tile and no thread sits
    spinning. Without control over BLAS threads, one helper reduces tile t while BLAS
    (with its own threads) computes tile t+1.
    """
    n_a, n_b = out.shape
    if not rows.left or out.size == 0:  # k == 0: every dot product and distance is 0
        out[...] = 0
        return out
    values = out.view(np.float64)
    # The tile geometry lives in the package namespace (finite_field._kernels), read at call
    # time: that is where it is defined and where tests shrink it.
    tile_cols = min(n_b, _TILE_COLUMNS)
    rb = _panel_rows(n_a, tile_cols)
    chunks = list(zip(rows.left, cols.right))
    mode = (2 if rows.halved else 1) if distances else 0
    workers = max(1, min(num_threads(), 8))
    if -(-n_a // rb) * -(-n_b // tile_cols) < workers and n_a > 8:
        # a short row block (a party's evaluation tile): thinner panels, one per worker,
        # rather than one thread doing it all while the others idle
        rb = max(8, (-(-n_a // workers) + 7) // 8 * 8)
    tiles = [(i0, j0) for i0 in range(0, n_a, rb)
             for j0 in range(i0 if symmetric else 0, n_b, tile_cols)]

    def product(i0, j0, buffer):
        # The tile's exact values in out's memory; returns the panel kernel's arguments.
        i1 = min(n_a, i0 + rb)
        j1 = min(n_b, j0 + tile_cols)
        width = j1 - j0
        if len(chunks) == 1:
            np.matmul(rows.left[0][i0:i1], cols.right[0][j0:j1].T, out=values[i0:i1, j0:j1])
        else:
            part = buffer[:(i1 - i0) * width].reshape(i1 - i0, width)
            for number, (left, right) in enumerate(chunks):
                np.matmul(left[i0:i1], right[j0:j1].T, out=part)
                _accumulate_kernel(out, part, i0, j0, number == 0, p)
        mirror_from = max(0, i1 - j0) if symmetric else width
        return (out, i0, i1, j0, rows.norms[i0:i1], cols.norms[j0:j1], 0, width, mirror_from,
                mode, p)

    def new_buffer():
        return np.empty(rb * tile_cols, dtype=np.float64) if len(chunks) > 1 else None

    threads = min(workers, len(tiles))
    with _single_threaded_blas() as blas_single:
        if threads == 1:
            buffer = new_buffer()
            for i0, j0 in tiles:
                _panel_kernel(*product(i0, j0, buffer))
        elif blas_single:
            queue = iter(tiles)
            lock = threading.Lock()

            def worker():
                buffer = new_buffer()
                while True:
                    with lock:
                        tile = next(queue, None)
                    if tile is None:
                        return
                    _panel_kernel(*product(*tile, buffer))

            _run_threads(worker, [()] * threads)
        else:
            buffer = new_buffer()
            with ThreadPoolExecutor(1) as pool:
                pending = None
                for i0, j0 in tiles:
                    args = product(i0, j0, buffer)
                    if pending is not None:
                        pending.result()
                    pending = pool.submit(_panel_kernel, *args)
                pending.result()
    return out


def gram_matrix(x, p: int) -> np.ndarray:
    """Exact Gram matrix ``x @ x.T mod p`` of the rows of ``x`` (n, k): (n, n) int64.

    Only the upper triangle is computed (row panels, float64 BLAS on exact limbs) and
    mirrored.

    >>> import numpy as np
    >>> gram_matrix(np.array([[1, 2], [3, 4]]), 7).tolist()
    [[5, 4], [4, 4]]
    """
    p = _check_modulus(p)
    x = _check_matrix(x, p, "x")
    ops = _Operands(x, p)
    out = np.empty((x.shape[0], x.shape[0]), dtype=np.int64)
    return _pairwise(ops, ops, p, out, symmetric=True, distances=False)


def distances_from_gram(gram, p: int, out: np.ndarray | None = None) -> np.ndarray:
    """Squared distances ``G_ii + G_jj - 2 G_ij mod p`` from a Gram matrix, in one pass.

    Parameters
    ----------
    gram : ndarray of int64, shape (n, n)
        A Gram matrix mod p (:func:`gram_matrix`).
    p : int
    out : ndarray of int64, shape (n, n), optional
        Where to write; may be ``gram`` itself (in place).

    >>> import numpy as np
    >>> distances_from_gram(gram_matrix(np.array([[0, 1], [3, 5]]), 7), 7).tolist()
    [[0, 4], [4, 0]]
    """
    p = _check_modulus(p)
    gram = _as_int64(gram, "gram")
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ParameterError(f"gram must be a square (n, n) array, got shape {gram.shape}")
    if out is None:
        out = np.empty_like(gram)
    elif (not isinstance(out, np.ndarray) or out.shape != gram.shape or out.dtype != np.int64
          or not out.flags.c_contiguous):
        raise ParameterError(f"out must be a C-contiguous int64 array of shape {gram.shape}")
    diag = np.diagonal(gram).copy()  # a copy: out may be gram itself
    n = gram.shape[0]
    in_place = int(np.may_share_memory(gram, out))  # both C-contiguous (n, n)
    if in_place and gram.ctypes.data != out.ctypes.data:
        raise ParameterError("out must be gram itself or not overlap it")
    if gram.size and _run_tasks(_gram_to_distances_kernel, (gram, diag, out, in_place, p), n,
                                max(1, _GRAIN // max(n, 1))):
        raise ParameterError(f"gram must hold reduced field elements in [0, {p})")
    return out


def cross_sq_distances(a, b, p: int) -> np.ndarray:
    """Squared distances mod p between every row of ``a`` and every row of ``b``.

    ``a`` (n_a, k) and ``b`` (n_b, k) hold reduced elements of GF(p); the result is the
    exact ``sum_c (a_ic - b_jc)^2 mod p`` as int64, shape (n_a, n_b).

    >>> import numpy as np
    >>> cross_sq_distances(np.array([[1, 2]]), np.array([[4, 0], [1, 2]]), 11).tolist()
    [[2, 0]]
    """
    p = _check_modulus(p)
    a = _check_matrix(a, p, "a")
    b = _check_matrix(b, p, "b")
    if a.shape[1] != b.shape[1]:
        raise ParameterError(
            f"a and b must have the same number of columns, got {a.shape} and {b.shape}")
    out = np.empty((a.shape[0], b.shape[0]), dtype=np.int64)
    ops_a = _Operands(a, p, "a", distances=True)
    ops_b = _Operands(b, p, "b", distances=True)
    return _pairwise(ops_a, ops_b, p, out, symmetric=False, distances=True)


def sq_distances(x, p: int) -> np.ndarray:
    """All pairwise squared distances mod p between the rows of ``x`` (n, k): (n, n) int64.

    Computes the upper triangle only (row panels through float64 BLAS on exact limbs,
    reduced while in cache) and mirrors it. For n too large to hold n x n int64 at once,
    stream row blocks with :func:`sq_distances_tile`.

    >>> import numpy as np
    >>> sq_distances(np.array([[0, 1], [3, 5]]), 7).tolist()
    [[0, 4], [4, 0]]
    """
    p = _check_modulus(p)
    x = _check_matrix(x, p, "x")
    out = np.empty((x.shape[0], x.shape[0]), dtype=np.int64)
    ops = _Operands(x, p, distances=True)
    return _pairwise(ops, ops, p, out, symmetric=True, distances=True)


class DistanceTiles:
    """Pairwise squared distances mod p of the rows of ``x``, one row block at a time.

    For n too large to hold the n x n int64 result (16 GB at n = 45000), or to send it in
    pieces: the limb operands and row norms are prepared once, and each :meth:`tile` is
    computed on demand, exactly as the matching block of :func:`sq_distances`.

    Parameters
    ----------
    x : ndarray of int64, shape (n, k)
        Reduced field elements.
    p : int

    Examples
    --------
    >>> import numpy as np
    >>> tiles = DistanceTiles(np.array([[0, 1], [3, 5], [2, 2]]), 7)
    >>> tiles.tile(1, 3).tolist()
    [[4, 0, 3], [5, 3, 0]]
    >>> [(a, b, t.tolist()) for a, b, t in tiles.blocks(2, upper=True)]
    [(0, 2, [[0, 4, 5], [4, 0, 3]]), (2, 3, [[0]])]
    """

    def __init__(self, x, p: int):
        self.p = _check_modulus(p)
        x = _check_matrix(x, self.p, "x")
        self.n, self.k = x.shape
        self._ops = _Operands(x, self.p, distances=True)

    def tile(self, row_start: int, row_stop: int, *, upper: bool = False) -> np.ndarray:
        """Rows [row_start, row_stop) against all rows, or (``upper``) against rows >= row_start.

        Returns an int64 array of shape (row_stop - row_start, n), or
        (row_stop - row_start, n - row_start) when ``upper``: then column c is row
        row_start + c. With ``upper`` the entries left of the diagonal within the block
        are computed too (they are needed by nobody, but cost nothing extra).
        """
        row_start, row_stop = int(row_start), int(row_stop)
        if not 0 <= row_start <= row_stop <= self.n:
            raise ParameterError(
                f"row block must satisfy 0 <= row_start <= row_stop <= {self.n}, "
                f"got [{row_start}, {row_stop})")
        col_start = row_start if upper else 0
        out = np.empty((row_stop - row_start, self.n - col_start), dtype=np.int64)
        return _pairwise(self._ops.rows(row_start, row_stop), self._ops.rows(col_start, self.n),
                         self.p, out, symmetric=False, distances=True)

    def blocks(self, rows_per_tile: int, *, upper: bool = True):
        """Yield ``(row_start, row_stop, tile)`` for consecutive row blocks covering all rows."""
        rows_per_tile = int(rows_per_tile)
        if rows_per_tile < 1:
            raise ParameterError(f"rows_per_tile must be at least 1, got {rows_per_tile}")
        for start in range(0, self.n, rows_per_tile):
            stop = min(self.n, start + rows_per_tile)
            yield start, stop, self.tile(start, stop, upper=upper)


def sq_distances_tile(x, row_start: int, row_stop: int, p: int, *,
                      upper: bool = False) -> np.ndarray:
    """One row block of :func:`sq_distances`, for streaming the n x n result tile by tile.

    Parameters
    ----------
    x : ndarray of int64, shape (n, k)
        Reduced field elements (all rows).
    row_start, row_stop : int
        The row block ``x[row_start:row_stop]`` (0 <= row_start <= row_stop <= n).
    p : int
    upper : bool, default False
        If False, the block against all rows: shape (row_stop - row_start, n), equal to
        ``sq_distances(x, p)[row_start:row_stop]``. If True, only the columns
        ``row_start:`` (what the upper triangle needs): shape
        (row_stop - row_start, n - row_start), equal to
        ``sq_distances(x, p)[row_start:row_stop, row_start:]``.

    Notes
    -----
    Each call prepares the operands of all n rows again (O(n k), small next to the
    tile's O(tile_rows n k)); :class:`DistanceTiles` prepares them once for many tiles.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0, 1], [3, 5], [2, 2]])
    >>> sq_distances_tile(x, 1, 3, 7).tolist()
    [[4, 0, 3], [5, 3, 0]]
    >>> sq_distances_tile(x, 1, 3, 7, upper=True).tolist()
    [[0, 3], [3, 0]]
    """
    return DistanceTiles(x, p).tile(row_start, row_stop, upper=upper)

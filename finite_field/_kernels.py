"""Exact modular kernels: encoding, weighted combination and squared distances.

These are the hot paths. Each numba kernel is written once in plain Python over int64 and
compiled with an explicit signature (``cache=True``); with ``NUMBA_DISABLE_JIT=1`` the same
code runs uncompiled, which the tests use to check the source itself.

Arithmetic invariants (p < 2^31): a product of two reduced elements is < 2^62, so the
sum of one reduced accumulator and one product is < 2^63 and fits in int64. Every kernel
reduces after each multiply-add.

The distance kernel uses float64 BLAS exactly: entries are split into limbs small enough
that every dot product is an integer below 2^53, and the limb products are recombined
modulo p in int64.
"""

from __future__ import annotations

import numba
import numpy as np

from ._errors import ParameterError

__all__ = ["encode_blocks", "weighted_sum", "sq_distances", "cross_sq_distances"]

_FLOAT_EXACT = 2**53


@numba.njit("int64[:,:,::1](int64[:,::1], int64[:,:,::1], int64)", parallel=True, cache=True)
def _encode_kernel(matrix, blocks, p):
    n_blocks, n_parties = matrix.shape
    n, _, width = blocks.shape
    out = np.empty((n_parties, n, width), dtype=np.int64)
    for i in numba.prange(n):
        for j in range(n_parties):
            for c in range(width):
                acc = 0
                for a in range(n_blocks):
                    acc = (acc + matrix[a, j] * blocks[i, a, c]) % p
                out[j, i, c] = acc
    return out


@numba.njit("int64[::1](int64[::1], int64[:,::1], int64)", parallel=True, cache=True)
def _weighted_sum_kernel(weights, rows, p):
    n_rows, width = rows.shape
    out = np.empty(width, dtype=np.int64)
    for c in numba.prange(width):
        acc = 0
        for r in range(n_rows):
            acc = (acc + weights[r] * rows[r, c]) % p
        out[c] = acc
    return out


@numba.njit("int64[:,::1](float64[:,::1], float64[:,::1], float64[:,::1], float64[:,::1],"
            " float64[::1], float64[::1], int64, int64, int64)", parallel=True, cache=True)
def _combine_limbs_kernel(hh, hl, lh, ll, row_norms, col_norms, shift, shift2, p):
    # distance = |a|^2 + |b|^2 - 2 <a, b>, with <a,b> = hh*2^2b + (hl+lh)*2^b + ll
    n_rows, n_cols = ll.shape
    out = np.empty((n_rows, n_cols), dtype=np.int64)
    for r in numba.prange(n_rows):
        for c in range(n_cols):
            g = (np.int64(hh[r, c]) % p) * shift2 % p
            g = (g + (np.int64(hl[r, c]) % p + np.int64(lh[r, c]) % p) * shift) % p
            g = (g + np.int64(ll[r, c])) % p
            d = (np.int64(row_norms[r]) + np.int64(col_norms[c]) + 2 * (p - g)) % p
            out[r, c] = d
    return out


def _check_field_array(x, p: int, name: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.int64)
    if x.size and (x.min() < 0 or x.max() >= p):
        raise ParameterError(f"{name} must hold reduced field elements in [0, {p})")
    return x


def encode_blocks(matrix: np.ndarray, blocks: np.ndarray, p: int) -> np.ndarray:
    """Shares of every sample for every party: ``out[j, i] = sum_a matrix[a, j] blocks[i, a]``.

    Parameters
    ----------
    matrix : ndarray of int64, shape (l+t, m)
        The encoding matrix (:meth:`LagrangeCode.encoding_matrix`).
    blocks : ndarray of int64, shape (n, l+t, s)
        Data segments followed by noise segments for each sample.
    p : int
        The prime.

    Returns
    -------
    ndarray of int64, shape (m, n, s)

    Examples
    --------
    >>> import numpy as np
    >>> encode_blocks(np.array([[1, 2], [3, 4]]), np.array([[[5], [6]]]), 7)[:, 0, 0].tolist()
    [2, 6]
    """
    matrix = _check_field_array(matrix, p, "encoding matrix")
    blocks = _check_field_array(blocks, p, "blocks")
    if blocks.ndim != 3 or matrix.ndim != 2 or blocks.shape[1] != matrix.shape[0]:
        raise ParameterError(
            f"blocks of shape (n, {matrix.shape[0]}, s) expected, got {blocks.shape}")
    return _encode_kernel(matrix, blocks, int(p))


def weighted_sum(weights, rows, p: int) -> np.ndarray:
    """``sum_r weights[r] * rows[r] mod p`` for a stack of equally shaped arrays.

    >>> weighted_sum([2, 3], [[1, 1], [1, 2]], 5).tolist()
    [0, 3]
    """
    weights = _check_field_array(np.asarray(weights).reshape(-1), p, "weights")
    rows = np.asarray(rows)
    shape = rows.shape[1:]
    if rows.shape[0] != weights.size:
        raise ParameterError(f"{weights.size} weights for {rows.shape[0]} arrays")
    flat = _check_field_array(rows.reshape(rows.shape[0], -1), p, "rows")
    return _weighted_sum_kernel(weights, flat, int(p)).reshape(shape)


def _limbs(x: np.ndarray, bits: int):
    low = (x & ((1 << bits) - 1)).astype(np.float64)
    high = (x >> bits).astype(np.float64)
    return high, low


def cross_sq_distances(a, b, p: int) -> np.ndarray:
    """Squared distances mod p between every row of ``a`` and every row of ``b``.

    ``a`` (n_a, k) and ``b`` (n_b, k) hold reduced elements of GF(p); the result is the
    exact ``sum_c (a_ic - b_jc)^2 mod p`` as int64, shape (n_a, n_b).

    >>> import numpy as np
    >>> cross_sq_distances(np.array([[1, 2]]), np.array([[4, 0], [1, 2]]), 11).tolist()
    [[2, 0]]
    """
    p = int(p)
    a = _check_field_array(a, p, "a")
    b = _check_field_array(b, p, "b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ParameterError(f"a and b must be (n, k) with equal k, got {a.shape} and {b.shape}")
    k = a.shape[1]
    bits = max(1, (p - 1).bit_length())
    limb_bits = (bits + 1) // 2
    if k * (1 << (2 * limb_bits)) >= _FLOAT_EXACT:
        raise ParameterError(f"rows of length {k} are too long for the exact float64 kernel")
    a_high, a_low = _limbs(a, limb_bits)
    b_high, b_low = _limbs(b, limb_bits)
    hh = a_high @ b_high.T
    hl = a_high @ b_low.T
    lh = a_low @ b_high.T
    ll = a_low @ b_low.T
    row_norms = _row_norms(a, p)
    col_norms = _row_norms(b, p)
    shift = (1 << limb_bits) % p
    return _combine_limbs_kernel(hh, hl, lh, ll, row_norms.astype(np.float64),
                                 col_norms.astype(np.float64), shift, shift * shift % p, p)


def _row_norms(x: np.ndarray, p: int) -> np.ndarray:
    squares = x * x % p  # each < 2^62
    return weighted_sum(np.ones(x.shape[1], dtype=np.int64), np.ascontiguousarray(squares.T), p)


def sq_distances(x, p: int) -> np.ndarray:
    """All pairwise squared distances mod p between the rows of ``x`` (n, k): (n, n) int64.

    >>> import numpy as np
    >>> sq_distances(np.array([[0, 1], [3, 5]]), 7).tolist()
    [[0, 4], [4, 0]]
    """
    return cross_sq_distances(x, x, p)

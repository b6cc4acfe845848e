"""Encoding and weighted combination: :func:`encode_blocks`, :func:`weighted_sums` and its
one-row form :func:`weighted_sum`."""

from __future__ import annotations

import numpy as np

from .._jit import kernel
from .._errors import ParameterError
from ._checks import _as_int64, _check_field_array, _check_modulus
from ._exact import _balanced, _column_plan, _mod_float, _split, _split_coefficients
from ._tasks import _BLOCK, _GRAIN, _run_tasks

__all__ = ["encode_blocks", "weighted_sum", "weighted_sums"]


# Inner loops index contiguous 1-d slices with the bare loop variable: offset indices such as
# ``a[r, e0 + e]`` carry negative-index checks that stop LLVM from vectorizing the loop.

@kernel("int64(int64[:,:,::1], float64[:,::1], float64[:,::1], int64, int64, int64,"
            " int64[:,::1], int64, int64)", cache=True, nogil=True)
def _encode_kernel(blocks, m_high, m_low, bits, chunk, p, out, task_lo, task_hi):
    # out[j, i*s + c] = sum_a matrix[a, j] * blocks[i, a, c] mod p, with the encoding matrix
    # given as limbs: matrix = m_high * 2^bits + m_low (balanced; m_high = 0 if bits == 0).
    # Gram trick: m_high is paired with y = 2^bits x mod p and m_low with x (balanced), so
    # each output is one exact sum, reduced once (every `chunk` terms when l+t is long).
    # Works on the samples of tasks [task_lo, task_hi) (task t: samples t*per ..
    # (t+1)*per - 1, per = _BLOCK // s). Returns the number of tasks that met an element
    # outside [0, p) (then out is garbage).
    n, n_blocks, width = blocks.shape
    n_parties = m_high.shape[1]
    pf = np.float64(p)
    p_inv = 1.0 / pf
    half = np.float64((p - 1) // 2)
    scale = np.float64(np.int64(1) << bits)
    per = max(1, _BLOCK // max(width, 1))
    bad = 0
    span_max = min(n, per) * width
    xb = np.empty((n_blocks, span_max), dtype=np.float64)
    yb = np.empty((n_blocks, span_max), dtype=np.float64)
    acc = np.empty((4, span_max), dtype=np.float64)
    for task in range(task_lo, task_hi):
        i0 = task * per
        i1 = min(n, i0 + per)
        span = (i1 - i0) * width
        lo = p
        hi = np.int64(0)
        for a in range(n_blocks):
            xrow = xb[a]
            yrow = yb[a]
            for ii in range(i1 - i0):
                src = blocks[i0 + ii, a]
                xdst = xrow[ii * width:(ii + 1) * width]
                ydst = yrow[ii * width:(ii + 1) * width]
                for c in range(width):
                    v = src[c]
                    lo = min(lo, v)
                    hi = max(hi, v)
                    x = np.float64(v)
                    y = _mod_float(x * scale, pf, p_inv)
                    xdst[c] = x - pf if x > half else x
                    ydst[c] = y - pf if y > half else y
        if lo < 0 or hi >= p:
            bad += 1
            continue
        # Four parties at a time: each load of x and y feeds eight multiply-adds.
        for j0 in range(0, n_parties, 4):
            nj = min(4, n_parties - j0)
            for q in range(nj):
                accq = acc[q]
                wh = m_high[0, j0 + q]
                wl = m_low[0, j0 + q]
                xrow = xb[0]
                yrow = yb[0]
                for e in range(span):
                    accq[e] = wh * yrow[e] + wl * xrow[e]
            for a in range(1, n_blocks):
                xrow = xb[a]
                yrow = yb[a]
                if a % chunk == 0:
                    for q in range(nj):
                        accq = acc[q]
                        for e in range(span):
                            accq[e] = _mod_float(accq[e], pf, p_inv)
                if nj == 4:
                    acc0 = acc[0]
                    acc1 = acc[1]
                    acc2 = acc[2]
                    acc3 = acc[3]
                    h0 = m_high[a, j0]
                    h1 = m_high[a, j0 + 1]
                    h2 = m_high[a, j0 + 2]
                    h3 = m_high[a, j0 + 3]
                    l0 = m_low[a, j0]
                    l1 = m_low[a, j0 + 1]
                    l2 = m_low[a, j0 + 2]
                    l3 = m_low[a, j0 + 3]
                    for e in range(span):
                        y = yrow[e]
                        x = xrow[e]
                        acc0[e] += h0 * y + l0 * x
                        acc1[e] += h1 * y + l1 * x
                        acc2[e] += h2 * y + l2 * x
                        acc3[e] += h3 * y + l3 * x
                else:
                    for q in range(nj):
                        accq = acc[q]
                        wh = m_high[a, j0 + q]
                        wl = m_low[a, j0 + q]
                        for e in range(span):
                            accq[e] += wh * yrow[e] + wl * xrow[e]
            for q in range(nj):
                accq = acc[q]
                dst = out[j0 + q, i0 * width:i1 * width]
                for e in range(span):
                    dst[e] = np.int64(_mod_float(accq[e], pf, p_inv))
    return bad


@kernel("int64(int64[:,::1], float64[:,::1], float64[:,::1], int64, int64, float64,"
            " int64[:,::1], int64, int64)", cache=True, nogil=True)
def _weighted_sums_kernel(rows, w_high, w_low, chunk, p, shift, out, task_lo, task_hi):
    # out[q, e] = sum_r (w_high[q, r] * shift + w_low[q, r]) * rows[r, e] mod p for every q,
    # reading each value of ``rows`` once (the multi-output form of weighted_sum's kernel;
    # same exactness argument: one limb times a balanced element is < 2^45 and ``chunk``
    # such products stay below 2^53 - 4p). Columns of tasks [task_lo, task_hi).
    # Returns the number of tasks that met an element outside [0, p).
    n_rows, width = rows.shape
    n_out = w_high.shape[0]
    pf = np.float64(p)
    p_inv = 1.0 / pf
    half = np.float64((p - 1) // 2)
    bad = 0
    acc_h = np.empty((n_out, _BLOCK), dtype=np.float64)
    acc_l = np.empty((n_out, _BLOCK), dtype=np.float64)
    x = np.empty(_BLOCK, dtype=np.float64)
    for task in range(task_lo, task_hi):
        e0 = task * _BLOCK
        e1 = min(width, e0 + _BLOCK)
        span = e1 - e0
        for q in range(n_out):
            ah = acc_h[q]
            al = acc_l[q]
            for e in range(span):
                ah[e] = 0.0
                al[e] = 0.0
        lo = p
        hi = np.int64(0)
        for r in range(n_rows):
            src = rows[r, e0:e1]
            for e in range(span):
                v = src[e]
                lo = min(lo, v)
                hi = max(hi, v)
                f = np.float64(v)
                x[e] = f - pf if f > half else f
            for q in range(n_out):
                wh = w_high[q, r]
                wl = w_low[q, r]
                ah = acc_h[q]
                al = acc_l[q]
                for e in range(span):
                    ah[e] += wh * x[e]
                    al[e] += wl * x[e]
            if (r + 1) % chunk == 0 and r + 1 < n_rows:
                for q in range(n_out):
                    ah = acc_h[q]
                    al = acc_l[q]
                    for e in range(span):
                        ah[e] = _mod_float(ah[e], pf, p_inv)
                        al[e] = _mod_float(al[e], pf, p_inv)
        if lo < 0 or hi >= p:
            bad += 1
        for q in range(n_out):
            ah = acc_h[q]
            al = acc_l[q]
            dst = out[q, e0:e1]
            for e in range(span):
                h = _mod_float(ah[e], pf, p_inv) * shift
                dst[e] = np.int64(_mod_float(h + _mod_float(al[e], pf, p_inv), pf, p_inv))
    return bad


def encode_blocks(matrix: np.ndarray, blocks: np.ndarray, p: int, *,
                  out: np.ndarray | None = None) -> np.ndarray:
    """Shares of every sample for every party: ``out[j, i] = sum_a matrix[a, j] blocks[i, a]``.

    Parameters
    ----------
    matrix : ndarray of int64, shape (l+t, m)
        The encoding matrix (:meth:`LagrangeCode.encoding_matrix`).
    blocks : ndarray of int64, shape (n, l+t, s)
        Data segments followed by noise segments for each sample.
    p : int
        The prime (any modulus in [2, 2^31) works).
    out : ndarray of int64, shape (m, n, s), optional
        Where to write (C-contiguous). Reusing one buffer saves the page faults of a fresh
        output, a large part of the cost at this speed.

    Returns
    -------
    ndarray of int64, shape (m, n, s)

    Examples
    --------
    >>> import numpy as np
    >>> encode_blocks(np.array([[1, 2], [3, 4]]), np.array([[[5], [6]]]), 7)[:, 0, 0].tolist()
    [2, 6]
    """
    p = _check_modulus(p)
    matrix = _check_field_array(matrix, p, "encoding matrix")
    blocks = _as_int64(blocks, "blocks")
    if blocks.ndim != 3 or matrix.ndim != 2 or blocks.shape[1] != matrix.shape[0]:
        expected = matrix.shape[0] if matrix.ndim == 2 else "l+t"
        raise ParameterError(
            f"blocks of shape (n, {expected}, s) and a 2-d encoding matrix expected, "
            f"got blocks {blocks.shape} and matrix {matrix.shape}")
    n, _, width = blocks.shape
    shape = (matrix.shape[1], n, width)
    if out is None:
        out = np.empty(shape, dtype=np.int64)
    elif (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != np.int64
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ParameterError(f"out must be a writeable C-contiguous int64 array of shape {shape}")
    elif np.may_share_memory(out, blocks) or np.may_share_memory(out, matrix):
        raise ParameterError("out must not overlap the inputs")
    if out.size == 0:
        return out
    if matrix.shape[0] == 0:
        out[...] = 0
        return out
    bits, chunk = _column_plan(p, matrix.shape[0])
    balanced = _balanced(matrix, p)
    if bits:
        high, low = _split(balanced, bits)
    else:
        high, low = np.zeros_like(balanced), balanced
    per = max(1, _BLOCK // max(width, 1))  # samples per task, as in the kernel
    n_tasks = -(-n // per)
    grain = max(1, _GRAIN // (per * width * matrix.shape[1]))
    bad = _run_tasks(_encode_kernel, (blocks, np.ascontiguousarray(high, dtype=np.float64),
                                      np.ascontiguousarray(low, dtype=np.float64), bits, chunk,
                                      p, out.reshape(out.shape[0], -1)), n_tasks, grain)
    if bad:
        raise ParameterError(f"blocks must hold reduced field elements in [0, {p})")
    return out


def weighted_sum(weights, rows, p: int) -> np.ndarray:
    """``sum_r weights[r] * rows[r] mod p`` for a stack of equally shaped arrays.

    Parameters
    ----------
    weights : array_like of int, shape (r,)
        Reduced field elements (for decoding: the weights c_j of the responding parties).
    rows : array_like of int, shape (r, ...)
        Reduced field elements; ``rows[i]`` is multiplied by ``weights[i]``.
    p : int
        The prime (any modulus in [2, 2^31) works).

    Returns
    -------
    ndarray of int64, shape ``rows.shape[1:]``

    Examples
    --------
    >>> weighted_sum([2, 3], [[1, 1], [1, 2]], 5).tolist()
    [0, 3]
    """
    return weighted_sums(np.asarray(weights).reshape(1, -1), rows, p)[0]


def weighted_sums(weights, rows, p: int) -> np.ndarray:
    """``out[q] = sum_r weights[q, r] * rows[r] mod p`` for several weight rows in one pass.

    The multi-row form of :func:`weighted_sum`: with the rows of ``weights`` the decoding
    vector c and the parity rows mu_1..mu_s, one pass over the N evaluations gives D and
    every syndrome.

    Parameters
    ----------
    weights : array_like of int, shape (q, N)
        Reduced field elements.
    rows : array_like of int, shape (N, ...)
        Reduced field elements.
    p : int
        The prime (< 2^31).

    Returns
    -------
    ndarray of int64, shape ``(q,) + rows.shape[1:]``

    Examples
    --------
    >>> weighted_sums([[2, 3], [1, 1]], [[1, 1], [1, 2]], 5).tolist()
    [[0, 3], [2, 3]]
    """
    p = _check_modulus(p)
    weights = _check_field_array(weights, p, "weights")
    if weights.ndim != 2:
        raise ParameterError(f"weights must be 2-d (q, N), got shape {weights.shape}")
    rows = _as_int64(rows, "rows")
    if rows.ndim == 0 or rows.shape[0] != weights.shape[1]:
        raise ParameterError(
            f"one array per weight column expected: {weights.shape[1]} columns, "
            f"rows of shape {rows.shape}")
    shape = (weights.shape[0],) + rows.shape[1:]
    out = np.empty(shape, dtype=np.int64)
    if out.size == 0:
        return out
    if weights.shape[1] == 0:
        out[...] = 0
        return out
    flat = rows.reshape(rows.shape[0], -1)
    high, low, chunk, shift = _split_coefficients(weights, p)
    n_tasks = -(-flat.shape[1] // _BLOCK)
    grain = max(1, _GRAIN // (_BLOCK * flat.shape[0]))
    bad = _run_tasks(_weighted_sums_kernel,
                     (flat, np.ascontiguousarray(high), np.ascontiguousarray(low), chunk, p,
                      shift, out.reshape(weights.shape[0], -1)), n_tasks, grain)
    if bad:
        raise ParameterError(f"rows must hold reduced field elements in [0, {p})")
    return out

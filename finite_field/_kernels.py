"""Exact modular kernels: encoding, weighted combination, Gram matrices and squared distances.

These are the hot paths. Each numba kernel is written once in plain Python over int64 and
float64 and compiled with an explicit signature (``cache=True``); with
``NUMBA_DISABLE_JIT=1`` the same code runs uncompiled, which the tests use to check the
source itself.

How the arithmetic stays exact (p < 2^31)
-----------------------------------------
Every kernel computes in float64, whose integers are exact up to 2^53, and never lets an
intermediate value leave that range:

* **Balanced representatives.** An element x in [0, p) is used as x or x - p, whichever
  lies in [-h, h] with h = (p - 1) // 2 < 2^30.
* **Limbs.** One operand of each product is split into two signed digits,
  x = x_hi * 2^b + x_lo (|x_lo| <= 2^(b-1), |x_hi| <= (h + 2^(b-1)) / 2^b; b = 16 for
  the largest primes). A limb times a balanced element is below 2^45, so a sum of up to
  about 170-256 such products (the *chunk*) is an exact float64 integer. Longer sums are
  cut into chunks and reduced mod p in between. When h^2 * k is already below the
  budget (small primes) no split is made. :func:`weighted_sum` splits the weights and
  keeps one accumulator per limb, recombined as (acc_hi mod p) * 2^b + acc_lo.
* **Gram trick.** For a dot product <x, y> mod p the limbs of x are paired with
  (2^b y mod p, y): <x, y> = <x_hi, 2^b y> + <x_lo, y> (mod p), so one float64 GEMM of
  inner dimension 2k (BLAS) gives a value that is exact and congruent to <x, y>.
  :func:`encode_blocks` uses the same pairing (limbs of the small encoding matrix) with
  one accumulator and one reduction per share.
  For distances (p odd) the y side is negated and two columns (h_x, 1) . (1, h_y) with
  h = |x|^2 / 2 mod p are appended, so the GEMM yields h_x + h_y - <x, y> and the squared
  distance is just twice that mod p: no separate norm pass.
* **Reduction without division.** An exact float v with |v| <= 2^53 - 2p is reduced by
  q = floor(v * (1/p)), r = v - q * p (both products exact; q is off by at most one),
  then one conditional add or subtract. This vectorizes; integer ``%`` does not. Sums of
  products are kept within 2^53 - 4p, so that adding a reduced accumulator (< p) or the
  two norm columns keeps them reducible.

Pairwise kernels (:func:`sq_distances`, :func:`gram_matrix`, :func:`cross_sq_distances`)
go tile by tile (about 4 MB of products each): BLAS writes a tile's exact float64 values
straight into the memory of the int64 result, and a numba kernel reduces them in place
while they are in cache. Symmetric results compute only tiles on or above the diagonal
and mirror each one. :class:`DistanceTiles` / :func:`sq_distances_tile` compute one row
block at a time, for callers that stream the result instead of holding n x n int64
(2 GB at n = 16000).

Threads. No kernel opens an OpenMP (numba ``prange``) region: OpenMP workers spin for a
while after a region, as idle OpenBLAS workers do after a BLAS call, and on a 2-core
machine either steals the cores from whatever runs next. Instead each kernel is serial,
releases the GIL, and ``numba.get_num_threads()`` plain Python threads share the work
through a queue (a paused thread does not hold the others up). The pairwise kernels also
run their BLAS products single-threaded, one per worker, while the call lasts (OpenBLAS's
thread count is set to 1 and restored; see ``_single_threaded_blas``); without OpenBLAS
they keep BLAS's threads and overlap each tile's reduction with the next product.
Set ``numba.set_num_threads(1)`` for fully serial kernels.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ._errors import ParameterError

__all__ = [
    "encode_blocks", "weighted_sum", "sq_distances", "cross_sq_distances",
    "sq_distances_tile", "DistanceTiles", "gram_matrix", "distances_from_gram",
]

#: Float64 represents every integer of magnitude <= 2^53 exactly.
_FLOAT_EXACT = 2**53
#: Elements per inner block of the vectorized loops (two float64 accumulators each).
_BLOCK = 2048
#: Elements of work per scheduling step of the memory-bound kernels (about 0.1-1 ms).
_GRAIN = 2**18
#: Bytes of one tile of products (rows x columns float64), kept near the caches.
_PANEL_BYTES = 4 * 2**20
#: Columns per tile.
_TILE_COLUMNS = 2048


# --------------------------------------------------------------------------- numba kernels

@numba.njit("float64(float64, float64, float64)", cache=True)
def _mod_float(v, p, p_inv):
    # v is an exact integer with |v| <= 2^53 - 2p; returns v mod p in [0, p) exactly.
    # q = floor(v / p) up to +-1 (two roundings of relative size 2^-53), so |q p| <= |v| + 2p
    # <= 2^53 is exact, and v - q p, an integer in [-p, 2p), is computed exactly.
    q = np.floor(v * p_inv)
    r = v - q * p
    if r < 0.0:
        r += p
    elif r >= p:
        r -= p
    return r


# Inner loops index contiguous 1-d slices with the bare loop variable: offset indices such as
# ``a[r, e0 + e]`` carry negative-index checks that stop LLVM from vectorizing the loop.

@numba.njit("int64(int64[:,:,::1], float64[:,::1], float64[:,::1], int64, int64, int64,"
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


@numba.njit("int64(int64[:,::1], float64[::1], float64[::1], int64, int64, float64,"
            " int64[::1], int64, int64)", cache=True, nogil=True)
def _weighted_sum_kernel(rows, w_high, w_low, chunk, p, shift, out, task_lo, task_hi):
    # out[e] = sum_r (w_high[r] * shift + w_low[r]) * rows[r, e] mod p, for the columns of
    # tasks [task_lo, task_hi) (task t: columns t*_BLOCK .. (t+1)*_BLOCK - 1).
    # Returns the number of tasks that met an element outside [0, p) (then out is garbage).
    n_rows, width = rows.shape
    pf = np.float64(p)
    p_inv = 1.0 / pf
    half = np.float64((p - 1) // 2)
    bad = 0
    for task in range(task_lo, task_hi):
        e0 = task * _BLOCK
        e1 = min(width, e0 + _BLOCK)
        span = e1 - e0
        acc_h = np.zeros(span, dtype=np.float64)
        acc_l = np.zeros(span, dtype=np.float64)
        lo = p
        hi = np.int64(0)
        for r in range(n_rows):
            wh = w_high[r]
            wl = w_low[r]
            src = rows[r, e0:e1]
            for e in range(span):
                v = src[e]
                lo = min(lo, v)
                hi = max(hi, v)
                x = np.float64(v)
                x = x - pf if x > half else x
                acc_h[e] += wh * x
                acc_l[e] += wl * x
            if (r + 1) % chunk == 0 and r + 1 < n_rows:
                for e in range(span):
                    acc_h[e] = _mod_float(acc_h[e], pf, p_inv)
                    acc_l[e] = _mod_float(acc_l[e], pf, p_inv)
        if lo < 0 or hi >= p:
            bad += 1
        dst = out[e0:e1]
        for e in range(span):
            h = _mod_float(acc_h[e], pf, p_inv) * shift
            dst[e] = np.int64(_mod_float(h + _mod_float(acc_l[e], pf, p_inv), pf, p_inv))
    return bad


def _operands(x, p, bits, chunk, augment, left, right, norms):
    # GEMM operands and squared row norms of the field matrix x (n, k), in one pass.
    # Column layout (o = 2 if augment else 0):
    # bits == 0: left[:, o + c] = balanced x, right[:, o + c] = the same (one product is
    #   exact). Otherwise, for each chunk of columns [c0, c1) (width w):
    #   left[:, o+2c0 : o+2c0+w] = high limbs,  left[:, o+2c0+w : o+2c1] = low limbs,
    #   right[:, o+2c0 : o+2c0+w] = balanced (2^bits x mod p),
    #   right[:, o+2c0+w : o+2c1] = balanced x.
    # norms[i] = sum_c x_ic^2 mod p.
    # augment (for distances, p odd): right is negated and two columns are added,
    #   left[:, 0:2] = (h_i, 1), right[:, 0:2] = (1, h_j) with h = norm / 2 mod p, so
    #   that left_i . right_j = h_i + h_j - <x_i, x_j> and the squared distance is twice
    #   that mod p.
    # Returns the number of elements outside [0, p).
    n, k = x.shape
    pf = np.float64(p)
    p_inv = 1.0 / pf
    half = (p - 1) // 2
    half_base = np.int64(1) << max(bits - 1, 0)
    mask = (np.int64(1) << bits) - 1
    scale = np.float64(np.int64(1) << bits)
    off = 2 if augment else 0
    sign = -1.0 if augment else 1.0
    bad = 0
    for i in range(n):
        total = 0.0
        lrow = left[i, off:]
        rrow = right[i, off:]
        for c0 in range(0, k, chunk):
            c1 = min(k, c0 + chunk)
            w = c1 - c0
            dot = 0.0
            for c in range(c0, c1):
                v = x[i, c]
                if v < 0 or v >= p:
                    bad += 1
                xb = v - p if v > half else v
                if bits == 0:
                    f = np.float64(xb)
                    lrow[c] = f
                    rrow[c] = sign * f
                    dot += f * f
                else:
                    low = ((xb + half_base) & mask) - half_base
                    high = (xb - low) >> bits
                    shifted = _mod_float(np.float64(v) * scale, pf, p_inv)
                    if shifted > half:
                        shifted -= pf
                    lrow[2 * c0 + (c - c0)] = np.float64(high)
                    lrow[2 * c0 + w + (c - c0)] = np.float64(low)
                    rrow[2 * c0 + (c - c0)] = sign * shifted
                    rrow[2 * c0 + w + (c - c0)] = sign * np.float64(xb)
                    dot += np.float64(high) * shifted + np.float64(low) * np.float64(xb)
            total = _mod_float(total + _mod_float(dot, pf, p_inv), pf, p_inv)
        norms[i] = total
        if augment:
            h = total * 0.5 if np.fmod(total, 2.0) == 0.0 else (total + pf) * 0.5
            left[i, 0] = h
            left[i, 1] = 1.0
            right[i, 0] = 1.0
            right[i, 1] = h
    return bad


_operands_kernel = numba.njit(
    "int64(int64[:,::1], int64, int64, int64, int64, float64[:,::1], float64[:,::1],"
    " float64[::1])", cache=True, nogil=True)(_operands)


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


_accumulate_kernel = numba.njit("void(int64[:,::1], float64[:,::1], int64, int64, int64, int64)",
                                cache=True, nogil=True)(_accumulate)


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
                g = _mod_float(src[c], pf, p_inv)
                t = norm + norms[c]
                if t >= pf:
                    t -= pf
                u = g + g
                if u >= pf:
                    u -= pf
                d = t - u
                if d < 0.0:
                    d += pf
                dest[c] = np.int64(d)
        else:
            for c in range(cols):
                dest[c] = np.int64(_mod_float(src[c], pf, p_inv))
    for c in range(max(c_lo, mirror_from), c_hi):
        dest = out[col0 + c, row0:row1]
        for r in range(row1 - row0):
            dest[r] = out[row0 + r, col0 + c]


# Serial and GIL-free: :func:`_pairwise` runs it in several Python threads, one tile each.
_panel_kernel = numba.njit("void(int64[:,::1], int64, int64, int64, float64[::1], float64[::1],"
                           " int64, int64, int64, int64, int64)", cache=True, nogil=True)(_panel)


@numba.njit("int64(int64[:,::1], int64[::1], int64[:,::1], int64, int64, int64, int64)",
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
                t = di + dg[j]
                if t >= p:
                    t -= p
                u = g + g
                if u >= p:
                    u -= p
                d = t - u
                if d < 0:
                    d += p
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


# --------------------------------------------------------------------------- BLAS threads
# The pairwise kernels run several single-threaded BLAS products at once from plain Python
# threads (one per core, each followed by its numba reduction). A multi-threaded BLAS would
# fork and join its own threads for every tile, its idle workers spin between calls and
# steal the cores from the reductions, and on a loaded machine every join waits for the
# slowest thread. _single_threaded_blas() finds the OpenBLAS libraries loaded in this
# process (Linux: /proc/self/maps), sets their thread count to 1 and restores it after,
# without depending on threadpoolctl. Where no OpenBLAS is found it changes nothing and
# reports False; the pairwise kernels then keep BLAS's own threads. Speed only, never
# results.

_blas_lock = threading.Lock()
_blas_depth = 0
_blas_saved: list[tuple[object, int]] = []
_blas_controls: list[tuple[object, object]] | None = None

_BLAS_NAMES = [(f"{prefix}openblas_get_num_threads{suffix}",
                f"{prefix}openblas_set_num_threads{suffix}")
               for prefix in ("", "scipy_") for suffix in ("", "64_")]


def _find_blas_controls() -> list[tuple[object, object]]:
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ")[-1]
                if "openblas" in path.lower() and path.startswith("/") and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    controls = []
    for path in paths:
        try:
            # RTLD_NOLOAD: only a handle to the copy already loaded, never a second one.
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
        except OSError:
            continue
        for get_name, set_name in _BLAS_NAMES:
            getter = getattr(lib, get_name, None)
            setter = getattr(lib, set_name, None)
            if getter is not None and setter is not None:
                getter.restype = ctypes.c_int
                setter.argtypes = [ctypes.c_int]
                controls.append((getter, setter))
                break
    return controls


@contextlib.contextmanager
def _single_threaded_blas():
    """Context manager: OpenBLAS uses one thread inside; yields whether it could be set.

    Re-entrant and safe to enter from several threads at once (the first entry saves and
    sets the thread counts, the last exit restores them).
    """
    global _blas_depth, _blas_controls, _blas_saved
    with _blas_lock:
        if _blas_controls is None:
            _blas_controls = _find_blas_controls()
        if _blas_depth == 0:
            _blas_saved = []
            for getter, setter in _blas_controls:
                _blas_saved.append((setter, int(getter())))
                setter(1)
        _blas_depth += 1
        active = bool(_blas_controls)
    try:
        yield active
    finally:
        with _blas_lock:
            _blas_depth -= 1
            if _blas_depth == 0:
                for setter, count in _blas_saved:
                    setter(count)
                _blas_saved = []


# --------------------------------------------------------------------------- helpers

def _check_modulus(p) -> int:
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, np.integer)):
        raise ParameterError(f"the modulus must be an integer, got {type(p).__name__}")
    p = int(p)
    if not 2 <= p < 2**31:
        raise ParameterError(f"the modulus must be in [2, 2^31), got {p}")
    return p


def _as_int64(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "iu" and not (x.dtype == object and x.size == 0) and x.size:
        raise ParameterError(f"{name} must hold integers, got dtype {x.dtype}")
    if x.dtype.kind == "u" and x.size and x.max() > np.iinfo(np.int64).max:
        raise ParameterError(f"{name} holds values above 2^63")
    return np.ascontiguousarray(x, dtype=np.int64)


def _check_field_array(x, p: int, name: str) -> np.ndarray:
    x = _as_int64(x, name)
    if x.size and (x.min() < 0 or x.max() >= p):
        raise ParameterError(
            f"{name} must hold reduced field elements in [0, {p}), "
            f"got values in [{int(x.min())}, {int(x.max())}]")
    return x


def _balanced(x: np.ndarray, p: int) -> np.ndarray:
    """Representatives in [-(p-1)//2, (p-1)//2] (int64)."""
    return np.where(x > (p - 1) // 2, x - p, x)


def _limb_bits(half: int) -> tuple[int, int]:
    """Limb width b minimising the largest digit of a balanced split; (b, max digit)."""
    best = None
    for bits in range(1, 32):
        low = 1 << (bits - 1)
        high = (half + low) >> bits
        largest = max(low, high)
        if best is None or largest < best[1]:
            best = (bits, largest)
    return best


def _split(x_balanced: np.ndarray, bits: int):
    """Signed digits (high, low) with x = high * 2^bits + low and |low| <= 2^(bits-1)."""
    half_base = 1 << (bits - 1)
    low = ((x_balanced + half_base) & ((1 << bits) - 1)) - half_base
    high = (x_balanced - low) >> bits
    return high, low


def _small_operand_plan(p: int):
    """How to split a small coefficient matrix: (bits, shift, chunk of products)."""
    half = (p - 1) // 2
    budget = _FLOAT_EXACT - 4 * p
    bits, largest = _limb_bits(half)
    chunk = max(1, budget // max(1, largest * half))
    return bits, float(1 << bits), int(chunk)


def _split_coefficients(coefficients: np.ndarray, p: int):
    bits, shift, chunk = _small_operand_plan(p)
    high, low = _split(_balanced(coefficients, p), bits)
    return (np.ascontiguousarray(high, dtype=np.float64),
            np.ascontiguousarray(low, dtype=np.float64), chunk, shift)


def _column_plan(p: int, k: int) -> tuple[int, int]:
    """(limb bits, columns per exact chunk) for dot products of length k mod p.

    bits == 0 means no split: h^2 * k already fits the float64 budget.
    """
    half = (p - 1) // 2
    budget = _FLOAT_EXACT - 4 * p
    if half * half * max(k, 1) <= budget:
        return 0, max(k, 1)
    bits, _ = _limb_bits(half)
    low_max = 1 << (bits - 1)
    high_max = (half + low_max) >> bits
    return bits, max(1, budget // ((low_max + high_max) * half))


class _Operands:
    """Float64 GEMM operands of an (n, k) field matrix, cut into exact chunks.

    ``left[i] @ right[i].T`` summed over chunks i (each reduced mod p) is congruent to
    the Gram matrix mod p, or, with ``distances`` (``self.halved``), to
    h_i + h_j - <x_i, x_j> with h = |x|^2 / 2 mod p: then the squared distance is twice
    that mod p. Every entry of each single product is an exact float64 integer of
    magnitude at most 2^53 - 2p (2^53 - 4p after the first chunk). ``norms`` holds the
    squared row norms mod p (float64).
    """

    def __init__(self, x: np.ndarray, p: int, name: str = "x", *, distances: bool = False):
        n, k = x.shape
        bits, chunk = _column_plan(p, k)
        # 1/2 exists mod p only for odd p; p = 2 falls back to the norms in the panel kernel.
        self.halved = bool(distances and p % 2 == 1)
        off = 2 if self.halved else 0
        width = off + (k if bits == 0 else 2 * k)
        left = np.empty((n, width), dtype=np.float64)
        right = np.empty((n, width), dtype=np.float64)
        self.norms = np.empty(n, dtype=np.float64)
        args = (p, bits, max(chunk, 1), int(self.halved))
        # Rows are independent: large inputs are prepared by several threads (GIL-free).
        parts = _split_range(n, numba.get_num_threads() if n * k >= 2**18 else 1)
        bad = _run_threads(_operands_kernel, [
            (x[a:b], *args, left[a:b], right[a:b], self.norms[a:b]) for a, b in parts])
        if sum(bad):
            raise ParameterError(
                f"{name} must hold reduced field elements in [0, {p}), "
                f"got values in [{int(x.min())}, {int(x.max())}]")
        if k == 0:
            self.left, self.right = [], []
            return
        per = k if bits == 0 else chunk
        cuts = [(off + 2 * c0 if bits else off + c0,
                 off + (2 * min(k, c0 + per) if bits else min(k, c0 + per)))
                for c0 in range(0, k, per)]
        cuts[0] = (0, cuts[0][1])  # the two extra columns go with the first chunk
        self.left = [left[:, a:b] for a, b in cuts]
        self.right = [right[:, a:b] for a, b in cuts]

    def rows(self, start: int, stop: int) -> "_Operands":
        """The operands of rows [start, stop), as views (nothing is recomputed)."""
        view = object.__new__(_Operands)
        view.halved = self.halved
        view.left = [m[start:stop] for m in self.left]
        view.right = [m[start:stop] for m in self.right]
        view.norms = self.norms[start:stop]
        return view


def _split_range(n: int, parts: int, multiple: int = 1) -> list[tuple[int, int]]:
    """[0, n) cut into at most ``parts`` consecutive ranges (lengths multiples of ``multiple``)."""
    parts = max(1, min(parts, 8))
    step = max(1, -(-n // (multiple * parts)) * multiple)
    return [(a, min(n, a + step)) for a in range(0, n, step)] or [(0, 0)]


def _run_threads(kernel, arguments: list[tuple]) -> list:
    """kernel(*a) for each a in ``arguments``: the first in this thread, the others in
    short-lived helper threads (the kernels release the GIL). Returns the results."""
    if len(arguments) == 1:
        return [kernel(*arguments[0])]
    with ThreadPoolExecutor(len(arguments) - 1) as pool:
        futures = [pool.submit(kernel, *a) for a in arguments[1:]]
        first = kernel(*arguments[0])
        return [first] + [f.result() for f in futures]


def _run_tasks(kernel, args: tuple, n_tasks: int, grain: int) -> int:
    """sum of kernel(*args, lo, hi) over [0, n_tasks), shared dynamically between threads.

    ``numba.get_num_threads()`` workers (this thread and plain helper threads; the
    kernels release the GIL) take ``grain`` tasks at a time from a shared counter, so a
    worker that the OS pauses does not hold the others up. Plain threads rather than an
    OpenMP region: no spinning workers are left behind to compete with BLAS or with the
    next kernel.
    """
    grain = max(1, grain)
    threads = max(1, min(numba.get_num_threads(), 8, -(-n_tasks // grain)))
    if threads == 1:
        return int(kernel(*args, 0, n_tasks))
    counter = iter(range(0, n_tasks, grain))
    lock = threading.Lock()

    def worker():
        total = 0
        while True:
            with lock:
                lo = next(counter, None)
            if lo is None:
                return total
            total += int(kernel(*args, lo, min(n_tasks, lo + grain)))

    return sum(_run_threads(worker, [()] * threads))


def _panel_rows(n_rows: int, n_cols: int) -> int:
    """Rows per panel: the panel's products (rows x n_cols float64) stay near the caches."""
    rows = _PANEL_BYTES // (8 * max(n_cols, 1))
    return int(max(8, min(1024, rows // 8 * 8)))


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
    tile_cols = min(n_b, _TILE_COLUMNS)
    rb = _panel_rows(n_a, tile_cols)
    chunks = list(zip(rows.left, cols.right))
    mode = (2 if rows.halved else 1) if distances else 0
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

    threads = max(1, min(numba.get_num_threads(), len(tiles), 8))
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


def _check_matrix(x, p: int, name: str) -> np.ndarray:
    x = _as_int64(x, name)
    if x.ndim != 2:
        raise ParameterError(f"{name} must be a 2-d array (n, k), got shape {x.shape}")
    return x


# --------------------------------------------------------------------------- public API

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
    p = _check_modulus(p)
    weights = _check_field_array(np.asarray(weights).reshape(-1), p, "weights")
    rows = _as_int64(rows, "rows")
    if rows.ndim == 0 or rows.shape[0] != weights.size:
        raise ParameterError(
            f"one array per weight expected: {weights.size} weights, "
            f"rows of shape {rows.shape}")
    shape = rows.shape[1:]
    out = np.empty(shape, dtype=np.int64)
    if out.size == 0:
        return out
    if weights.size == 0:
        out[...] = 0
        return out
    flat = rows.reshape(rows.shape[0], -1)
    high, low, chunk, shift = _split_coefficients(weights, p)
    n_tasks = -(-flat.shape[1] // _BLOCK)
    grain = max(1, _GRAIN // (_BLOCK * flat.shape[0]))
    bad = _run_tasks(_weighted_sum_kernel, (flat, high, low, chunk, p, shift, out.reshape(-1)),
                     n_tasks, grain)
    if bad:
        raise ParameterError(f"rows must hold reduced field elements in [0, {p})")
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

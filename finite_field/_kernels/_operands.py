"""GEMM operands of a field matrix: limbs, balanced columns and row norms (``_Operands``)."""

from __future__ import annotations

import numpy as np

from .._jit import kernel, num_threads
from .._errors import ParameterError
from ._exact import _column_plan, _mod_float
from ._tasks import _run_threads, _split_range


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


_operands_kernel = kernel(
    "int64(int64[:,::1], int64, int64, int64, int64, float64[:,::1], float64[:,::1],"
    " float64[::1])", cache=True, nogil=True)(_operands)


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
        parts = _split_range(n, num_threads() if n * k >= 2**18 else 1)
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

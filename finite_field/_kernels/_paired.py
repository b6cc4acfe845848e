"""Squared distances of listed row pairs, mod p: the kernel of the ``pairs`` layout.

For pairs (i_q, j_q), q = 0..P-1, of rows of ``x`` (n, k) over GF(p):

    out_q = sum_c (x[i_q, c] - x[j_q, c])^2  mod p

Each term is reduced before it is added: (a - b) mod p < 2^31, its square < 2^62, and a
sum of k reduced terms stays below 2^63 for any k < 2^32, so int64 is exact.

>>> import numpy as np
>>> x = np.array([[1, 2], [4, 0], [1, 2]])
>>> paired_sq_distances(x, np.array([0, 1]), np.array([1, 2]), 11).tolist()
[2, 2]
"""

from __future__ import annotations

import numpy as np

from .._errors import ParameterError
from .._jit import kernel
from ._checks import _as_int64, _check_modulus

__all__ = ["paired_sq_distances"]


@kernel(cache=True, nogil=True)
def _paired_kernel(x, rows, cols, p, out):
    k = x.shape[1]
    for q in range(rows.shape[0]):
        a = x[rows[q]]
        b = x[cols[q]]
        acc = 0
        for c in range(k):
            d = (np.int64(a[c]) - np.int64(b[c])) % p
            acc += d * d % p
        out[q] = acc % p


def paired_sq_distances(x, rows, cols, p: int) -> np.ndarray:
    """``sum_c (x[rows[q], c] - x[cols[q], c])^2 mod p`` for every q, as int64 (P,).

    ``x`` (n, k) holds reduced elements of GF(p) (low level: not re-checked, every pass
    over x would cost as much as the kernel), int64 or uint32 (a party's held shares:
    used as they are, not copied); ``rows`` and ``cols`` are row indices in [0, n) of
    equal length.
    """
    p = _check_modulus(p)
    x = np.asarray(x)
    x = np.ascontiguousarray(x) if x.dtype == np.uint32 else _as_int64(x, "x")
    if x.ndim != 2:
        raise ParameterError(f"x must be a 2-d array (n, k), got shape {x.shape}")
    rows, cols = _as_int64(rows, "rows").reshape(-1), _as_int64(cols, "cols").reshape(-1)
    if rows.shape != cols.shape:
        raise ParameterError(f"rows and cols must have the same length, got {rows.size} "
                             f"and {cols.size}")
    n = x.shape[0]
    for name, index in (("rows", rows), ("cols", cols)):
        if index.size and (index.min() < 0 or index.max() >= n):
            raise ParameterError(f"{name} must be row indices in [0, {n}), got values in "
                                 f"[{int(index.min())}, {int(index.max())}]")
    out = np.empty(rows.shape, dtype=np.int64)
    _paired_kernel(x, rows, cols, np.int64(p), out)
    return out

"""Decoding: residues of the uploads' sum -> exact integers (CRT, no-wrap check, symmetrize).

Every decode of a session goes through here; what differs is only the shape of the
result:

* :func:`decode_residues` decodes residue arrays of any shape: Chinese remaindering
  (:func:`~finite_field.crt_combine`), then the no-wrap check ``0 <= x <= bound``, or
  ``-bound <= x <= bound`` with ``signed=True`` (a secure sum: the residues are shifted
  by +bound first, so that the signed values are non-negative before the CRT);
* :func:`decode_upper` decodes an n x n distance matrix **in place**, row block by row
  block, from residues held in its upper triangle (what the coordinator accumulates tile
  by tile, possibly memory-mapped): CRT, the no-wrap check, the upper triangle mirrored
  below, the diagonal zeroed, and no second n x n array.

A value outside the bound can only come from a wrong contribution (a faulty party, or
inconsistent weights): it raises :class:`WrapAroundError` (a :class:`ParameterError`)
saying the largest value seen and the bound.

Examples
--------
>>> import numpy as np
>>> d = np.array([[0, 5, 9], [0, 0, 4], [0, 0, 0]])     # upper triangle of D
>>> result = d % 7                                       # residues mod 7 ...
>>> decode_upper(result, [(d % 11).astype(np.uint32)], (7, 11), bound=9)
>>> result.tolist()                                      # ... and mod 11, combined
[[0, 5, 9], [5, 0, 4], [9, 4, 0]]
>>> decode_residues([np.array([1, 6, 12])], (7,), bound=2, signed=True).tolist()
[1, -1, -2]
"""

from __future__ import annotations

import numpy as np

from ._crt import crt_combine
from ._jit import kernel
from ._errors import ParameterError

__all__ = ["decode_residues", "decode_upper", "WrapAroundError"]

#: Rows of one in-place block of the one-prime finish (no temporaries are made).
_ONE_PRIME_ROWS = 1024


class WrapAroundError(ParameterError):
    """A decoded value lies outside the no-wrap bound: a contribution was corrupted.

    Attributes
    ----------
    largest : int
        The largest (magnitude of a) decoded value of the block that failed.
    bound : int
        The bound it exceeds.
    """

    def __init__(self, message: str, *, largest: int, bound: int) -> None:
        super().__init__(message)
        self.largest = int(largest)
        self.bound = int(bound)


def _exceeds(what: str, largest: int, bound: int) -> WrapAroundError:
    return WrapAroundError(f"{what} exceed the largest possible value ({largest} > {bound}): "
                           "a contribution was corrupted", largest=largest, bound=bound)


@kernel(cache=True, nogil=True)
def _finish_rows_one_prime(result, a, b):
    # One prime (D < p, so the residues are D itself): rows [a, b) hold the strip
    # [a, b) x [a, n) of the uploads. Zero its diagonal and mirror its upper part into the
    # lower triangle (the square block [a, b)^2 and, for every row j >= b, the segment
    # [a, b) of row j), in place; returns the largest distance of the strip. The strip is
    # mirrored 64 columns at a time: the reads stay in cache and every row j receives one
    # contiguous segment.
    n = result.shape[1]
    top = 0
    for i in range(a, b):
        row = result[i]
        for j in range(i + 1, n):
            top = max(top, row[j])
        row[i] = 0
        for j in range(a, i):
            row[j] = result[j, i]
    for j0 in range(b, n, 64):
        for j in range(j0, min(n, j0 + 64)):
            target = result[j]
            for i in range(a, b):
                target[i] = result[i, j]
    return top


def decode_residues(residues, primes, bound: int, *, signed: bool = False,
                    what: str = "decoded values") -> np.ndarray:
    """Exact integers from their residues mod ``primes``: CRT, then the no-wrap check.

    Parameters
    ----------
    residues : sequence of array-like of int
        One array per prime (any shape, all alike). Unsigned: reduced residues in
        [0, p). Signed: any integers (reduced here, e.g. unreduced sums of uploads).
    primes : sequence of int
        Their product must exceed the largest value (2 * bound when signed).
    bound : int
        Every true value lies in [0, bound], or in [-bound, bound] when ``signed``.
    signed : bool
        Decode signed values: ``x + bound`` is Chinese-remaindered, then ``bound``
        subtracted again.
    what : str
        What the values are, for the error message.

    Returns
    -------
    ndarray of int64

    Raises
    ------
    WrapAroundError
        Some value lies outside the bound. A :class:`ParameterError` also comes from
        :func:`~finite_field.crt_combine` when a value would not fit int64.
    """
    bound = int(bound)
    if signed:
        residues = [(np.asarray(s, dtype=np.int64) % p + bound) % p
                    for s, p in zip(residues, primes)]
        values = crt_combine(residues, primes) - bound
        if values.size and int(np.abs(values).max()) > bound:
            raise _exceeds(what, int(np.abs(values).max()), bound)
        return values
    values = crt_combine([np.asarray(s, dtype=np.int64) for s in residues], primes)
    if values.size and values.max() > bound:
        raise _exceeds(what, int(values.max()), bound)
    return values


def decode_upper(result, residues, primes, *, bound: int | None = None,
                 tile_bytes: int = 64 * 2**20, what: str = "decoded distances") -> None:
    """Decode an n x n distance matrix in place from the residues in its upper triangle.

    Row block by row block: Chinese remaindering of the residues, the no-wrap check,
    the upper triangle mirrored below and the diagonal zeroed. Entries left of the
    diagonal are ignored (overwritten). With one prime the residues are the distances
    themselves and each block of 1,024 rows is finished in place by a compiled kernel;
    with several, a block holds about ``tile_bytes`` of working data.

    Parameters
    ----------
    result : ndarray (or numpy.memmap) of int32 or int64, shape (n, n)
        Row i holds the residues mod ``primes[0]`` in columns i..n-1; receives D. int64
        with several primes.
    residues : sequence of array-like, shape (n, n)
        The residues mod ``primes[1:]`` laid out alike (e.g. uint32, memory-mapped); empty
        with one prime.
    primes : sequence of int
    bound : int, optional
        The largest possible distance; None checks nothing.
    tile_bytes : int
        Working data per block with several primes (about 16 bytes per prime and entry).
    what : str
        What the values are, for the error message.

    Raises
    ------
    WrapAroundError
        A decoded distance exceeds ``bound`` (the block's largest value is named; the
        blocks before it are decoded, the rest is left as it was).
    """
    primes = tuple(int(p) for p in primes)
    if len(residues) != len(primes) - 1:
        raise ParameterError(f"{len(residues)} residue matrices for the {len(primes) - 1} "
                             "primes after the first")
    n = int(result.shape[0])
    if len(primes) == 1:  # in place, no temporaries
        matrix = np.asarray(result)  # an ndarray view of a memmap: no copy
        for a in range(0, n, _ONE_PRIME_ROWS):
            top = int(_finish_rows_one_prime(matrix, a, min(n, a + _ONE_PRIME_ROWS)))
            if bound is not None and top > bound:
                raise _exceeds(what, top, bound)
        return
    # integer tile + residues + a float-free CRT: about 8 bytes per prime and entry, x2
    rows = max(1, min(n, int(tile_bytes) // max(1, n * 16 * len(primes))))
    for a in range(0, n, rows):
        b = min(n, a + rows)
        tile = crt_combine([np.asarray(result[a:b, a:], dtype=np.int64)]
                           + [np.asarray(r[a:b, a:], dtype=np.int64) for r in residues],
                           primes)
        square = tile[:, : b - a]
        upper = np.triu(square, 1)
        square[...] = upper + upper.T  # diagonal zero, lower part mirrored from above
        if bound is not None and tile.size and int(tile.max()) > bound:
            raise _exceeds(what, int(tile.max()), bound)
        result[a:b, a:] = tile
        if b < n:
            result[b:, a:b] = tile[:, b - a:].T

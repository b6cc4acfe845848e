"""The OmniFC computation as four steps on whole arrays (the low-level reference path).

1. :func:`encode_rows` (a data owner): quantized rows -> one share array per party and prime.
2. :func:`evaluate_shares` (party j): the shares it holds of all n rows -> g(beta_j) for
   every pair, i.e. the pairwise squared distances of its shares mod p.
3. :func:`weight_evaluation` (party j): c_j * g(beta_j), what it contributes to the sum.
4. :func:`decode_sum` (the coordinator): residues of sum_j c_j g(beta_j) per prime ->
   exact integer squared distances by CRT, checked against the no-wrap bound (the decode
   of :mod:`finite_field._decode`, which the protocol's coordinator uses too).

Examples
--------
>>> import numpy as np
>>> from finite_field import make_plan, encode_rows, evaluate_shares, weight_evaluation
>>> from finite_field import decode_sum
>>> plan = make_plan(dim=2, bound=4.0, scale_bits=4, parties=3)
>>> rows = plan.quantizer.quantize(np.array([[0.0, 1.0], [3.0, -1.0]])).values
>>> shares = encode_rows(plan, rows)                    # [prime][party] -> (n, s)
>>> evals = [evaluate_shares(plan, [shares[0][j]]) for j in range(3)]
>>> weights = plan.codes[0].decoding_weights([0, 1, 2])
>>> total = sum(weight_evaluation(plan, [w], e)[0] for w, e in zip(weights, evals))
>>> decode_sum(plan, [total % plan.primes[0]]).tolist()
[[0, 3328], [3328, 0]]
"""

from __future__ import annotations

import numpy as np

from ._decode import decode_residues
from ._errors import InputError, ParameterError
from ._kernels import cross_sq_distances, encode_blocks, sq_distances, weighted_sum
from ._plan import CodingPlan
from ._random import ByteSource, uniform_elements

__all__ = ["encode_rows", "encode_row_blocks", "evaluate_shares", "weight_evaluation", "decode_sum"]


def encode_rows(plan: CodingPlan, rows: np.ndarray, source: ByteSource | None = None,
                *, party: object = None) -> list[list[np.ndarray]]:
    """Lagrange-encode quantized rows for every party, independently per prime.

    Parameters
    ----------
    plan : CodingPlan
    rows : ndarray of integers, shape (n, d)
        Signed quantized rows (``Quantizer.quantize(...).values``).
    source : ByteSource, optional
        Noise source; the OS CSPRNG when omitted.

    Returns
    -------
    list (per prime) of list (per party) of ndarray of int64, shape (n, s)

    Every party's shares of all n rows at once (m n d / l int64 elements per prime): a
    party that sends its shares uses :func:`encode_row_blocks` instead, a block of rows
    at a time.
    """
    rows = np.asarray(rows)
    [(_, _, shares)] = encode_row_blocks(plan, rows, source, party=party,
                                         block_rows=max(1, rows.shape[0] if rows.ndim else 1))
    return [[block[j] for j in range(plan.parties)] for block in shares]


def encode_row_blocks(plan: CodingPlan, rows: np.ndarray, source: ByteSource | None = None,
                      *, party: object = None, block_rows: int = 4096):
    """Lagrange-encode quantized rows a block of rows at a time, for every party at once.

    The rows are checked in full (shape, not empty, every value within the quantizer's
    bound) before the first block is encoded. Each block gets fresh noise, drawn per row
    and prime (``source``, the OS CSPRNG when omitted), and every party's share of a row
    comes from the same polynomial: the shares of one block for parties j and j' are
    ``shares[k][j]`` and ``shares[k][j']`` of the same yield. Memory: one block's
    ``m x block_rows x s`` int64 shares per prime, not the n rows' (encode_rows).

    Parameters
    ----------
    plan : CodingPlan
    rows : ndarray of integers, shape (n, d)
        Signed quantized rows (any integer dtype; ``Quantizer.quantize(...).values``).
    source : ByteSource, optional
    block_rows : int
        Rows per block (the last block may be shorter).

    Yields
    ------
    (a, b, shares)
        Rows [a, b) and, per prime, an int64 array of shape (m, b - a, s): ``shares[k][j]``
        is party j's share of those rows modulo prime k.

    Examples
    --------
    >>> import numpy as np
    >>> from finite_field import make_plan
    >>> plan = make_plan(dim=2, bound=4.0, scale_bits=4, parties=3)
    >>> rows = plan.quantizer.quantize(np.array([[0.0, 1.0], [3.0, -1.0]])).values
    >>> [(a, b, s[0].shape) for a, b, s in encode_row_blocks(plan, rows, block_rows=1)]
    [(0, 1, (3, 1, 2)), (1, 2, (3, 1, 2))]
    """
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] != plan.dim:
        raise InputError(f"rows must have shape (n, {plan.dim}), got {rows.shape}", party=party)
    if rows.shape[0] == 0:
        raise InputError("no rows to encode (empty party)", party=party)
    block_rows = int(block_rows)
    if block_rows < 1:
        raise ParameterError(f"block_rows must be at least 1, got {block_rows}")
    n = rows.shape[0]
    limit = plan.quantizer.max_magnitude
    # checked a block at a time (no n x d temporary), all before any share exists
    for a in range(0, n, block_rows):
        block = rows[a:a + block_rows]
        if max(-int(block.min()), int(block.max())) > limit:
            raise InputError(f"quantized values must lie in [-{limit}, {limit}]", party=party)
    l, t, s = plan.segments, plan.noise_segments, plan.segment_length
    for a in range(0, n, block_rows):
        b = min(n, a + block_rows)
        padded = np.zeros((b - a, l * s), dtype=np.int64)
        padded[:, : plan.dim] = rows[a:b]
        out = []
        for code in plan.codes:
            p = code.prime
            blocks = np.empty((b - a, l + t, s), dtype=np.int64)
            blocks[:, :l, :] = (padded % p).reshape(b - a, l, s)
            blocks[:, l:, :] = uniform_elements(p, (b - a, t, s), source)
            out.append(encode_blocks(code.encoding_matrix(), blocks, p))
        yield a, b, out


def evaluate_shares(plan: CodingPlan, shares, row_slice: slice | None = None) -> list[np.ndarray]:
    """Party-side evaluation: g(beta_j) for every pair of rows, per prime.

    Parameters
    ----------
    shares : list (per prime) of ndarray (n, s)
        This party's shares of all n rows in global order.
    row_slice : slice, optional
        Only these rows against all rows (a tile); all rows by default.
    """
    if len(shares) != len(plan.primes):
        raise ParameterError(f"expected shares for {len(plan.primes)} primes, got {len(shares)}")
    out = []
    for p, x in zip(plan.primes, shares):
        x = np.ascontiguousarray(x, dtype=np.int64)
        if row_slice is None:
            out.append(sq_distances(x, p))  # symmetric: upper triangle only, mirrored
        else:
            out.append(cross_sq_distances(x[row_slice], x, p))
    return out


def weight_evaluation(plan: CodingPlan, weights, evaluation) -> list[np.ndarray]:
    """c_j * g(beta_j) mod p, per prime (``weights[i]`` is c_j for prime i)."""
    return [weighted_sum([int(w) % p], np.asarray(e)[np.newaxis], p)
            for p, w, e in zip(plan.primes, weights, evaluation)]


def decode_sum(plan: CodingPlan, sums) -> np.ndarray:
    """Exact integer squared distances from the per-prime residues of sum_j c_j g(beta_j).

    :func:`~finite_field.decode_residues` with the plan's no-wrap bound: raises
    :class:`~finite_field.WrapAroundError` (a :class:`ParameterError`) if any value
    exceeds it, which can only happen when a contribution was wrong (a faulty party, or
    inconsistent weights).
    """
    return decode_residues(sums, plan.primes, plan.distance_bound, what="decoded distances")

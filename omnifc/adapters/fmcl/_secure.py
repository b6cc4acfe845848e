"""FMCL: the secure path (the protected vectors and their distances through :func:`omnifc.adapters.protect`)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from finite_field import InputError, ParameterError

from .._common import plaintext_distances, protect, quantize_rows
from ._paper import (BETA, DEFAULT_RESOLUTION, EPS, MAX_LEVEL_SCALE, _combine, _fill, _g,
                     check_level_counts, grouped_level_code, level_code, level_rows,
                     round_weights, thermometer_rows)

__all__ = ["EXACT_SCALE_BITS", "GROUP_LCM_LIMITS", "class_overlap", "exact_code",
           "exact_fmcl_distances", "exact_scale_bits",
           "fmcl_from_anchored", "quantized_fmcl_distances",
           "secure_thermometer_distances", "thermometer_error_bound"]


def _from_gram(gram_z, gram_t, resolution, fill):
    """``Omega = G^t / q`` and ``N = (G^t - G^z) / q`` from the two Gram matrices."""
    q = float(resolution)
    overlap = np.asarray(gram_t, dtype=np.float64) / q
    numerator = np.maximum((np.asarray(gram_t, dtype=np.float64)
                            - np.asarray(gram_z, dtype=np.float64)) / q, 0.0)
    return _fill(_combine(numerator, overlap), fill)

def _gram_from_anchored(d):
    """Gram matrix of n rows from the squared distances of ``[rows; 0]`` (last row = anchor)."""
    d = np.asarray(d, dtype=np.float64)
    n = d.shape[0] - 1
    to_anchor = d[:n, n]
    return (to_anchor[:, None] + to_anchor[None, :] - d[:n, :n]) / 2.0

def fmcl_from_anchored(d_z, d_t, resolution: int, *, fill="geodesic") -> np.ndarray:
    """FMCL distances from the reconstructions of ``[z; 0]`` and ``[t; 0]`` (anchor last).

    The public all-zero anchor row turns squared distances into exact inner products
    (``<a, b> = (|a - 0|^2 + |b - 0|^2 - |a - b|^2) / 2``), so the server gets
    ``G^z_ij = sum_c min(k_ic, k_jc) <mu_q_ic, mu_q_jc>`` and ``G^t_ij = sum_c min(k_ic, k_jc)``
    exactly, with no unit-norm assumption on the quantized means: the result equals
    :func:`quantized_fmcl_distances` bit for bit.
    """
    return _from_gram(_gram_from_anchored(d_z), _gram_from_anchored(d_t), resolution, fill)

def quantized_fmcl_distances(means, weights, *, resolution: int = DEFAULT_RESOLUTION,
                             scale_bits: int = 16, fill="geodesic") -> np.ndarray:
    """Direct FMCL distance of the quantized signature, computed in the clear from integers.

    The signature the secure path encodes: weights on the 1/q grid (:func:`round_weights`,
    exact with :func:`exact_resolution`), unit class means quantized to multiples of
    ``2^-scale_bits``, ``cos_c = <mu_q_ic, mu_q_jc>``. The secure path equals this bit for
    bit; it differs from :func:`fmcl_distances` by at most :func:`thermometer_error_bound`.
    """
    means = np.asarray(means, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    n, c, dim = means.shape
    k = np.stack([round_weights(w, resolution) for w in weights])          # (n, C) int
    norms = np.linalg.norm(means, axis=2)
    unit = np.divide(means, norms[..., None], out=np.zeros_like(means), where=norms[..., None] > 0)
    unit = np.where(k[..., None] > 0, unit, 0.0)
    scale = 2.0 ** scale_bits
    ints = np.rint(quantize_rows(unit.reshape(n * c, dim), bound=1.0, scale_bits=scale_bits)
                   * scale).astype(np.int64).reshape(n, c, dim)
    inner = np.einsum("icd,jcd->ijc", ints, ints)                          # exact int64
    mins = np.minimum(k[:, None, :], k[None, :, :])
    gram_z = (mins * inner).sum(axis=2).astype(np.float64) / (scale * scale)
    gram_t = mins.sum(axis=2).astype(np.float64)
    return _from_gram(gram_z, gram_t, resolution, fill)

def class_overlap(weights) -> np.ndarray:
    """Plaintext ``Omega_ij = sum_c min(w_ic, w_jc)`` (1 on the diagonal for weights summing to 1).

    Examples
    --------
    >>> class_overlap(np.array([[0.5, 0.5], [1.0, 0.0]])).tolist()
    [[1.0, 0.5], [0.5, 1.0]]
    """
    w = np.asarray(weights, dtype=np.float64)
    return np.minimum(w[:, None, :], w[None, :, :]).sum(axis=2)

def secure_thermometer_distances(means, weights, *, resolution: int = DEFAULT_RESOLUTION,
                                 scale_bits: int = 16, secure: bool = True, parties=None,
                                 fill="geodesic", return_overlap: bool = False, **options):
    """Client rows -> the two protected reconstructions -> FMCL distances (filled).

    A public all-zero anchor row is added to both reconstructions (held by the first
    client's party; it carries no information) so that the server works with exact inner
    products (:func:`fmcl_from_anchored`). ``secure=False`` computes the same from the same
    quantized rows in the clear. Use ``resolution=exact_resolution(sample_counts)`` for
    exact class weights. ``return_overlap=True`` returns ``(distances, overlap)`` with the
    rounded class overlap ``G^t / q`` the coordinator already holds (for
    ``one_cluster_test(overlap=...)``).
    """
    rows = [thermometer_rows(m, w, resolution) for m, w in zip(means, weights)]
    z = np.stack([r[0] for r in rows] + [np.zeros_like(rows[0][0])])
    t = np.stack([r[1] for r in rows] + [np.zeros_like(rows[0][1])])
    if secure:
        owners = None if parties is None else list(parties) + [list(parties)[0]]
        d_z = protect(z, bound=1.0, scale_bits=scale_bits, parties=owners, **options).distances
        d_t = protect(t, bound=1.0, scale_bits=scale_bits, nonnegative=True, parties=owners,
                      **options).distances
    else:
        d_z = plaintext_distances(quantize_rows(z, bound=1.0, scale_bits=scale_bits))
        d_t = plaintext_distances(quantize_rows(t, bound=1.0, scale_bits=scale_bits,
                                                nonnegative=True))
    distances = fmcl_from_anchored(d_z, d_t, resolution, fill=fill)
    if return_overlap:
        return distances, _gram_from_anchored(d_t) / float(resolution)
    return distances

def thermometer_error_bound(means, weights, *, resolution: int = DEFAULT_RESOLUTION,
                            scale_bits: int = 16) -> np.ndarray:
    """Per-pair bound on |D_thermometer - D_direct| (inf where Omega <= Delta); see module."""
    means = np.asarray(means, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    n, c, dim = means.shape
    rounded = np.stack([round_weights(w, resolution) for w in weights]) / resolution
    err = np.abs(rounded - weights).sum(axis=1)
    delta = err[:, None] + err[None, :]
    h = 2.0 ** -(scale_bits + 1)
    e_q = 4 * math.sqrt(dim) * h + 2 * dim * h * h
    norms = np.linalg.norm(means, axis=2)
    unit = np.divide(means, norms[..., None], out=np.zeros_like(means), where=norms[..., None] > 0)
    cos = np.einsum("icd,jcd->ijc", unit, unit)
    m = np.minimum(weights[:, None, :], weights[None, :, :])
    numerator = (m * (1.0 - cos)).sum(axis=2)
    overlap = m.sum(axis=2)

    def f(nu, om):
        return nu / (om + EPS) * _g(om)

    with np.errstate(divide="ignore", invalid="ignore"):
        centre = f(numerator, overlap)
        high = f(numerator + 2 * delta + e_q, overlap - delta)
        low = f(np.maximum(numerator - 2 * delta - e_q, 0.0), overlap + delta)
        bound = np.maximum(high - centre, centre - low)
    bound = np.where(overlap > delta, bound, np.inf)
    np.fill_diagonal(bound, 0.0)
    return bound


# -- exact class weights for any sample counts ----------------------------------------------

#: Scale bits of the unit class means on the exact path: the largest s <= 16 whose no-wrap
#: bound fits; below 8 the exact path refuses (cosines would be coarser than 2^-8).
EXACT_SCALE_BITS = (16, 8)

_INT64_DISTANCE = 2**63 - 1


def exact_scale_bits(code, n_classes: int, dim: int) -> int:
    """The largest s in 16..8 for which the z codes' worst-case squared distance fits 63 bits.

    The protocol bounds a squared distance by ``dims (2 M)^2`` with M the public bound
    ``largest part * 2^s`` (signed entries); ``ParameterError`` when even s = 8 does not fit.
    """
    dims = n_classes * code.width * int(dim)
    high, low = EXACT_SCALE_BITS
    for bits in range(high, low - 1, -1):
        if dims * (2 * code.largest_part * 2**bits) ** 2 <= _INT64_DISTANCE:
            return bits
    raise ParameterError(
        f"exact class weights need C W d (2 A 2^s)^2 < 2^63 with s >= {low}: C W d = {dims}, "
        f"A = {code.largest_part} (L = {code.scale}); the sample counts' lcm is too large "
        "for this signature size; pass resolution=q for the rounded thermometer")


#: The groups' lcm limits :func:`exact_code` tries, in order, when one level code does not fit
#: (derived: a block joins two groups, so its scale stays below ``limit^2 <= 2^44 <=``
#: :data:`MAX_LEVEL_SCALE`; smaller limits mean more blocks but smaller parts, down to one
#: count per group, whose blocks have scales ``n_i n_j``).
GROUP_LCM_LIMITS = tuple(2**k for k in range(22, 0, -2)) + (1,)


def exact_code(sample_counts, n_classes: int, dim: int):
    """The public code of the exact path and the scale bits of the unit means: ``(code, s)``.

    One :class:`LevelCode` of all the counts when it fits (its lcm at most
    :data:`MAX_LEVEL_SCALE`, at most :data:`MAX_LEVELS` slots, ``s >= 8`` by
    :func:`exact_scale_bits`); otherwise the :class:`GroupedLevelCode` of the first group
    limit in :data:`GROUP_LCM_LIMITS` that reaches s = 16, else the one with the largest s
    (the fewest groups among ties). :class:`ParameterError` (before any share is made) when
    nothing fits: then the counts need more slots than :data:`MAX_LEVELS` or larger integers
    than the protocol's 63 bits, and ``resolution=q`` (rounded weights) is the caller's choice.

    Examples
    --------
    >>> code, bits = exact_code([101, 103, 107, 109, 113, 127, 131, 137], 3, 4)
    >>> type(code).__name__, bits        # lcm 2^54: one code cannot carry it
    ('GroupedLevelCode', 16)
    """
    counts, scale = check_level_counts(sample_counts, lcm_limit=False)
    reasons = []
    if scale <= MAX_LEVEL_SCALE:
        code = level_code(counts)
        try:
            return code, exact_scale_bits(code, n_classes, dim)
        except ParameterError as exc:
            reasons.append(str(exc))
    best = None
    for limit in GROUP_LCM_LIMITS:
        try:
            code = grouped_level_code(counts, limit)
            bits = exact_scale_bits(code, n_classes, dim)
        except ParameterError as exc:
            reasons.append(str(exc))
            continue
        if bits == EXACT_SCALE_BITS[0]:
            return code, bits
        if best is None or bits > best[1]:
            best = (code, bits)
    if best is not None:
        return best
    raise ParameterError(
        f"no exact code fits these sample counts (lcm 2^{math.log2(scale):.1f}); "
        f"last reason: {reasons[-1] if reasons else 'none'}; pass resolution=q for the "
        "rounded thermometer")


def _unit_ints(means, counts, scale_bits):
    """Unit class means quantized to integers in [-2^s, 2^s] (0 for absent classes)."""
    means = np.asarray(means, dtype=np.float64)
    n, c, dim = means.shape
    norms = np.linalg.norm(means, axis=2)
    present = np.asarray(counts) > 0
    if np.any(present & (norms == 0)):
        raise InputError("a class with samples has a zero mean embedding")
    unit = np.divide(means, norms[..., None], out=np.zeros_like(means), where=norms[..., None] > 0)
    unit = np.where(present[..., None], unit, 0.0)
    scale = 2.0 ** scale_bits
    return np.rint(quantize_rows(unit.reshape(n * c, dim), bound=1.0, scale_bits=scale_bits)
                   * scale).astype(np.int64).reshape(n, c, dim)


def _exact_combine(gram_z, gram_t, scale, scale_bits, fill):
    """FMCL distances from exact integer Gram matrices, in Python fractions, then float.

    ``Omega = G^t / L`` and ``N = (G^t 4^s - G^z) / (L 4^s)`` are exact rationals (``scale``:
    L, or the n x n matrix of the pairs' public scales ``L_ij`` of a grouped code);
    ``D = N / (Omega + eps) * min(Omega^-1, beta)`` is evaluated exactly and rounded once.
    Returns ``(distances, overlap)`` (overlap as floats).
    """
    n = len(gram_t)
    eps, beta = Fraction(EPS).limit_denominator(10**6), Fraction(BETA)
    unit = 4 ** int(scale_bits)
    d = np.zeros((n, n))
    overlap = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            pair = scale if isinstance(scale, int) else int(scale[i][j])
            om = Fraction(int(gram_t[i][j]), pair)
            overlap[i, j] = float(om)
            if i == j:
                continue
            if om == 0:
                d[i, j] = np.inf
                continue
            num = Fraction(int(gram_t[i][j]) * unit - int(gram_z[i][j]), pair * unit)
            num = max(num, Fraction(0))
            d[i, j] = float(num / (om + eps) * min(1 / om, beta))
    return _fill(d, fill), overlap


def _exact_grams(z, t):
    """Exact integer Gram matrices of integer rows (the plaintext reference).

    int64 products when every squared row norm is below 2^61 (estimated in float64, well
    within its relative error; then, by Cauchy-Schwarz on every prefix of the coordinates,
    every partial sum of two rows' products stays below 2^62), Python integers otherwise."""
    z, t = np.asarray(z, dtype=np.int64), np.asarray(t, dtype=np.int64)
    out = []
    for rows in (z, t):
        norms = (rows.astype(np.float64) ** 2).sum(axis=1)
        if norms.max(initial=0.0) < 2.0**61:
            gram = rows @ rows.T
            out.append([[int(v) for v in line] for line in gram])
        else:
            py = [[int(v) for v in row] for row in rows]
            out.append([[sum(a * b for a, b in zip(r1, r2)) for r2 in py] for r1 in py])
    return out[0], out[1]


def _anchored_grams(integer_distances):
    """Exact Gram of n rows from the integer squared distances of ``[rows; 0]``."""
    d = [[int(v) for v in row] for row in np.asarray(integer_distances)]
    n = len(d) - 1
    return [[(d[i][n] + d[j][n] - d[i][j]) // 2 for j in range(n)] for i in range(n)]


def exact_fmcl_distances(means, counts, *, secure: bool = True, parties=None,
                         fill="geodesic", return_overlap: bool = False, scale_bits=None,
                         **options):
    """FMCL distances with the class weights carried exactly, for any sample counts.

    ``means`` (n, C, d): the clients' class mean embeddings; ``counts`` (n, C): their class
    counts (:func:`class_counts`; the row sums are the public sample counts). Every client
    protects its level-set rows (:func:`level_rows` on :func:`level_code` of the sample
    counts) plus the public zero anchor, so the coordinator gets ``G^t = L Omega`` and
    ``G^z`` as exact integers and evaluates D in exact fractions (one rounding to float).
    ``scale_bits`` of the unit means: :func:`exact_scale_bits` by default. ``secure=False``
    computes the same integers in the clear. Raises :class:`ParameterError` (before any
    share is made) when the counts' lcm is too large for the protocol's 63-bit integers.

    Returns the filled distance matrix, or ``(distances, overlap)`` with
    ``return_overlap=True`` (the exact overlap Omega the coordinator holds, as floats).
    """
    means = np.asarray(means, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    if means.ndim != 3 or counts.shape != means.shape[:2]:
        raise InputError(f"expected means (n, C, d) and counts (n, C), got {means.shape} and "
                         f"{counts.shape}")
    if np.any(counts < 0) or np.any(counts.sum(axis=1) < 1):
        raise InputError("class counts must be >= 0 with at least one sample per client")
    n, c, dim = means.shape
    totals = [int(t) for t in counts.sum(axis=1)]
    code, bits = exact_code(totals, c, dim)
    bits = bits if scale_bits is None else int(scale_bits)
    ints = _unit_ints(means, counts, bits)
    rows = [level_rows(ints[i], counts[i], code) for i in range(n)]
    z = np.stack([r[0] for r in rows] + [np.zeros_like(rows[0][0])])
    t = np.stack([r[1] for r in rows] + [np.zeros_like(rows[0][1])])
    if secure:
        owners = None if parties is None else list(parties) + [list(parties)[0]]
        bound_z = float(code.largest_part * 2**bits)
        d_z = protect(z.astype(np.float64), bound=bound_z, scale_bits=0, parties=owners,
                      **options).integer_distances
        d_t = protect(t.astype(np.float64), bound=float(code.largest_part), scale_bits=0,
                      nonnegative=True, parties=owners, **options).integer_distances
        gram_z, gram_t = _anchored_grams(d_z), _anchored_grams(d_t)
    else:
        gram_z, gram_t = _exact_grams(z[:n], t[:n])
    scales = [[code.pair_scale(a, b) for b in totals] for a in totals]
    distances, overlap = _exact_combine(gram_z, gram_t, scales, bits, fill)
    return (distances, overlap) if return_overlap else distances

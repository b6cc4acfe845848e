"""FMCL: the secure path (the protected vectors and their distances through :func:`omnifc.adapters.protect`)."""

from __future__ import annotations

import math

import numpy as np

from .._common import plaintext_distances, protect, quantize_rows
from ._paper import DEFAULT_RESOLUTION, EPS, _combine, _fill, _g, round_weights, thermometer_rows

__all__ = ["class_overlap", "fmcl_from_anchored", "quantized_fmcl_distances",
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

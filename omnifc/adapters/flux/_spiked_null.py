"""FLUX's second test at few clients: the spiked-null ratio test on the split D (issue 24,
twenty-fifth to twenty-seventh passes).

At six clients the default K rule (the top-axis index and Ward's gap, min-p, on the
noise-whitened D) misses close groups with 20 and 50 rows a client: the bound's ratio test
finds them far more often. This module is that test told nothing the coordinator does not
have, with a null that lets clients differ, read from the coordinator's split D (the ``(k +
1) n`` rows of :func:`~omnifc.adapters.flux.split_rows`; docs/adapters.md, twenty-fifth pass):

- **Noise.** From D's MDS embedding (:func:`~omnifc.adapters.flux._split_half.split_embedding`)
  the clients' descriptors are whitened by ``S``, the OAS-shrunk covariance of the ``n (k -
  1)`` within-client contrasts (the default's whitening). A descriptor's own noise is then
  about ``kappa = (k - 1) / 4`` in every direction.
- **Statistic** (:func:`ratio_statistic`): ``T`` = the largest, over ``m = 2 .. floor(n /
  2)``, of the log likelihood ratio (:func:`log_likelihood_ratio`, not told the direction nor
  the centre) of two groups of ``m`` and ``n - m`` clients ``Delta`` noise units apart against
  the Gaussian that pools them, on the centred Gram matrix of the whitened descriptors over
  ``kappa``; ``Delta`` read from the top eigenvalue's excess over pure noise's.
- **Null** (:func:`fitted_spikes`): a Gaussian fitted to the clients with the contrasts'
  noise as its floor: every Gram eigenvalue above pure noise's mean (``PILOT`` draws) is a
  spike along its direction (as in SigClust, Liu, Hayes, Nobel & Marron 2008). Clients that
  differ by more than their noise are part of the null.
- **Reference**: a parametric bootstrap that repeats the estimate (contrasts from ``N(0,
  S)``, clients from the fitted Gaussian, ``S`` re-estimated by OAS); ``p = (1 + #{T_b >=
  T}) / (1 + B)``.

**The union** (:func:`union_k`): the default's K where it finds structure, else K = 2 where
this test's ``p <= alpha``: its level is at most ``2 alpha``. Judged at six clients on fresh
seeds twice (``benchmarks/flux_spiked_null.py``): the first trial failed a level bound
stricter than its level, the second (fresh seeds 3481-3492) holds: 390 against the default's
319 of 576 planted runs, 72 of 72 iid federations kept whole, 11 of 576 single groups split
(the default's 11).

The ratio's closed form (the direction-averaged planted and null densities: a Bessel
function and the moment generating function of a Dirichlet law, computed on a Bromwich line)
is ``benchmarks/flux_direction_free_bound.py``'s, whose bound it is; that module reads these
functions from here.

>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> f = rng.standard_normal((6, 4)) * 3
>>> x = np.vstack(list(f[None] + rng.standard_normal((3, 6, 4))) + [f])
>>> test = spiked_null_test(((x[:, None] - x[None]) ** 2).sum(-1), 6, groups=3,
...                         references=9, pilot=9)
>>> 0 < test.p_value <= 1
True
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from finite_field import ParameterError

from ._paper import DEFAULT_SPLIT_GROUPS, RUN_K_ALPHA, RUN_K_REFERENCES

__all__ = ["SPIKED_MAX_CLIENTS", "SpikedNullTest", "log_likelihood_ratio", "spiked_null_test",
           "union_k"]

#: Terms (Gram matrices x arrangements) per batch of the arrangement sums (memory: 32 MB
#: per array of squares).
_TERMS_PER_CHUNK = 4_000_000
#: The inversion contour: points per unit of the saddle's width, and how far down (in
#: e-folds of ``e^s``) it is followed; and the terms (rows x points x coordinates) computed
#: at once (memory: 64 MB per complex array).
_LINE_DENSITY, _LINE_REACH = 4.0, 40.0
_LINE_TERMS = 4_000_000
#: Terms of the series of ``0F1`` below its switch to the Bessel function.
_SERIES_TERMS = 80
#: From this order on, ``log I_nu`` by Debye's expansion (five terms: relative error
#: below ``nu^-5``, 3e-7 at 20); below it by scipy's ``ive``.
_DEBYE_ORDER = 20.0

#: The least excess spread (in a descriptor's noise units) the statistic reads a separation
#: from: with no excess over pure noise the planted and the pooled model coincide.
EXCESS_FLOOR = 1e-3
#: Pure-noise draws behind the expected eigenvalues ``q_j`` of the null's floor.
PILOT = 49
#: The most clients the union asks the test about: it was judged at six clients, and the
#: statistic sums over every split of the clients (``2^(n-1)`` of them).
SPIKED_MAX_CLIENTS = 6


def log_sphere_mgf(kappa, d: int):
    """``log E exp(kappa u_1)`` for ``u`` uniform on the unit sphere of ``R^d``:
    ``log 0F1(; d/2; kappa^2 / 4)`` (elementwise).

    >>> round(float(log_sphere_mgf(0.0, 5)), 12)
    0.0
    >>> round(float(np.exp(log_sphere_mgf(1.0, 1))), 12)   # d = 1: u = +-1, cosh(1)
    1.543080634815
    """
    kappa = np.asarray(kappa, dtype=np.float64)
    shape = kappa.shape
    kappa = np.abs(kappa).reshape(-1)
    b, z = d / 2.0, kappa ** 2 / 4.0
    out = np.empty_like(kappa)
    small = z <= b
    # the series sum_k z^k / ((b)_k k!): its ratio z / ((b + k)(k + 1)) stays below 1
    k = np.arange(float(_SERIES_TERMS))
    coefficients = _series_coefficients(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_z = np.log(z[small])
        log_terms = np.where(k == 0, 0.0, k * log_z[:, None]) + coefficients
    out[small] = special.logsumexp(log_terms, axis=1)
    big = ~small
    nu = b - 1.0
    out[big] = (special.gammaln(b) + nu * np.log(2.0 / kappa[big])
                + _log_bessel_i(nu, kappa[big]))
    return out.reshape(shape)


def _series_coefficients(b: float) -> np.ndarray:
    """``log (1 / ((b)_k k!))`` for ``k < _SERIES_TERMS``: the series ``0F1(; b; z) =
    sum_k z^k / ((b)_k k!)``."""
    k = np.arange(float(_SERIES_TERMS))
    return special.gammaln(b) - special.gammaln(b + k) - special.gammaln(k + 1)


def _log_bessel_i(nu: float, x):
    """``log I_nu(x)`` for ``x > 0`` (Debye's uniform expansion for large ``nu``: scipy's
    ``ive`` costs about a microsecond per value, and the arrangement sums need millions).

    >>> bool(abs(_log_bessel_i(30.0, np.array([50.0]))[0]
    ...          - math.log(special.ive(30.0, 50.0)) - 50.0) < 1e-8)
    True
    """
    x = np.asarray(x, dtype=np.float64)
    if nu < _DEBYE_ORDER:
        return np.log(special.ive(nu, x)) + x
    return _debye_log_bessel(nu, x)


def _debye_log_bessel(nu, x):
    """``log I_nu(x)`` by Debye's uniform expansion (five terms; arrays or, compiled by
    numba inside :func:`log_mean_sphere_mgf`'s loop, scalars)."""
    z = x / nu
    root = np.sqrt(1.0 + z * z)
    t = 1.0 / root
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 ** 2) / 1152.0
    u3 = t * t2 * (30375.0 - 369603.0 * t2 + 765765.0 * t2 ** 2 - 425425.0 * t2 ** 3) / 414720.0
    u4 = t2 ** 2 * (4465125.0 - 94121676.0 * t2 + 349922430.0 * t2 ** 2
                    - 446185740.0 * t2 ** 3 + 185910725.0 * t2 ** 4) / 39813120.0
    series = 1.0 + u1 / nu + u2 / nu ** 2 + u3 / nu ** 3 + u4 / nu ** 4
    # nu eta (eta = root + log(z / (1 + root))), and t^(1/2) series in one logarithm
    return (nu * (root + np.log(z / (1.0 + root))) - 0.5 * np.log(2.0 * math.pi * nu)
            + np.log(np.sqrt(t) * series))


def log_dirichlet_mgf(beta, d: int):
    """``log E exp(beta . t)`` for ``t``: the first ``k`` coordinates of
    ``Dirichlet(1/2, ..., 1/2, (d - k) / 2)`` (``(u . e_j)^2`` of a uniform unit vector
    ``u`` of ``R^d``), ``beta >= 0`` of shape ``(..., k)``; one value per leading index.

    The inverse Laplace transform at 1 of ``Gamma(d/2) s^(-(d-k)/2) prod_j (s -
    beta_j)^(-1/2)``, integrated (trapezoid) on a parabola through the real saddle point
    of its integrand that opens to the left: it crosses the real axis only there, right
    of every singularity, and ``e^s`` decays along it like a Gaussian.

    >>> round(float(np.exp(log_dirichlet_mgf([0.0, 0.0], 6))), 9)
    1.0
    >>> bool(abs(log_dirichlet_mgf([2.0], 4) - math.log(special.hyp1f1(0.5, 2.0, 2.0))) < 1e-9)
    True
    """
    beta = np.asarray(beta, dtype=np.float64)
    lead = beta.shape[:-1]
    beta = beta.reshape(-1, beta.shape[-1])
    k = beta.shape[1]
    rest = (d - k) / 2.0
    if rest < 0 or np.any(beta < 0):
        raise ParameterError(f"need beta >= 0 and at most d = {d} coordinates, got {k}")
    top = beta.max(axis=1, initial=0.0)

    def slope(s):            # d/ds of log(e^s F(s)), increasing right of every singularity
        with np.errstate(divide="ignore"):
            return 1.0 - rest / s - 0.5 * np.sum(1.0 / (s[:, None] - beta), axis=1)
    # bisection on (top, top + d/2 + 1]: the slope is positive at the right end
    low, high = top.copy(), top + d / 2.0 + 1.0
    for _ in range(80):
        mid = 0.5 * (low + high)
        negative = slope(mid) < 0
        low, high = np.where(negative, mid, low), np.where(negative, high, mid)
    saddle = high
    curvature = rest / saddle ** 2 + 0.5 * np.sum(1.0 / (saddle[:, None] - beta) ** 2, axis=1)
    width = 1.0 / np.sqrt(curvature)
    scale = np.maximum(saddle, width ** 2)
    reach = np.sqrt(2.0 * scale * (saddle + _LINE_REACH))
    points = int(np.ceil(np.max(reach / width) * _LINE_DENSITY)) + 1
    step = reach / (points - 1)
    out = np.empty(len(beta))
    # the same contour for every row, in batches of rows: a row whose saddle lies far out
    # needs tens of thousands of points, and (rows, points, k) at once can exhaust memory
    per_batch = max(1, _LINE_TERMS // (points * (k + 1)))
    for lo in range(0, len(beta), per_batch):
        rows = slice(lo, lo + per_batch)
        y = step[rows, None] * np.arange(points)[None, :]
        s = saddle[rows, None] - y ** 2 / (2.0 * scale[rows, None]) + 1j * y
        log_f = s - (rest * np.log(s) if rest > 0 else 0.0) - 0.5 * np.sum(
            np.log(s[:, :, None] - beta[rows, None, :]), axis=2)
        anchor = log_f[:, 0].real
        values = (np.exp(log_f - anchor[:, None]) * (1.0 + 1j * y / scale[rows, None])).real
        # (1 / 2 pi i) int e^s F(s) ds = (1 / pi) int_0^inf Re[e^s F(s) s'(y) / i] dy
        integral = step[rows] * (values.sum(axis=1) - 0.5 * values[:, 0]) / math.pi
        if not np.all(integral > 0):
            raise ArithmeticError("the inverse Laplace transform did not converge")
        out[rows] = special.gammaln(d / 2.0) + anchor + np.log(integral)
    return out.reshape(lead) if lead else float(out[0])


def arrangements(n: int, m: int) -> np.ndarray:
    """``a_s`` for every arrangement of ``m`` clients in the small group, one per row
    (``1 - pi`` there, ``-pi`` elsewhere); with ``2 m = n`` one of each complementary
    pair (they give the same ``|Y^T a_s|``).

    >>> arrangements(3, 1).round(3).tolist()
    [[0.667, -0.333, -0.333], [-0.333, 0.667, -0.333], [-0.333, -0.333, 0.667]]
    """
    pi = m / n
    subsets = itertools.combinations(range(n), m)
    if 2 * m == n:
        subsets = (c for c in subsets if 0 in c)
    rows = []
    for c in subsets:
        a = np.full(n, -pi)
        a[list(c)] = 1.0 - pi
        rows.append(a)
    return np.array(rows)


def arrangement_count(n: int, m: int) -> int:
    """``len(arrangements(n, m))``, without listing them.

    >>> arrangement_count(20, 10), arrangement_count(20, 2)
    (92378, 190)
    """
    return math.comb(n, m) // (2 if 2 * m == n else 1)


def spike(n: int, m: int, delta: float) -> float:
    """``c = pi (1 - pi) Delta^2`` (``pi = m / n``): the null's extra variance along the
    direction, the groups pooled.

    >>> spike(6, 3, 2.0)
    1.0
    """
    return (m / n) * (1.0 - m / n) * delta ** 2


def log_likelihood_ratio(gram, m: int, delta: float, d: int, a=None, *,
                         told_centre: bool = True):
    """``log`` (planted / null), both averaged over the direction, for the clients'
    whitened Gram matrix ``gram`` (``n x n``, or a stack of them) in ``d`` dimensions, told
    the noise level; ``a``: :func:`arrangements` (computed when not given).

    ``told_centre=False``: the ratio of the densities of the clients' descriptors *relative
    to their own mean* (coordinates ``V^T Y`` in an orthonormal basis ``V`` of the
    ``n - 1`` contrasts), i.e. for rules that are not told the pooled mean. Every rule
    reading distances is of that kind: translating every descriptor changes no distance.
    The arrangements' contrasts sum to zero, so only the Gram matrix is centred
    (``H G H``, ``H = I - 1 1^T / n``) and the null's normalization counts ``n - 1`` rows.

    >>> round(float(log_likelihood_ratio(np.eye(4) * 5.0, 2, 0.0, 6)), 12)   # Delta = 0
    0.0
    >>> g = np.ones((4, 4)) + np.eye(4)            # a shared offset: seen only when told
    >>> bool(np.isclose(log_likelihood_ratio(g, 2, 1.0, 6, told_centre=False),
    ...                 log_likelihood_ratio(np.eye(4), 2, 1.0, 6, told_centre=False)))
    True
    """
    return chunked_log_ratio(gram, m, delta, d, a, told_centre, _log_ratio_told_level, 1)


def chunked_log_ratio(gram, m: int, delta: float, d: int, a, told_centre: bool, ratio,
                      points: int):
    """:func:`log_likelihood_ratio`'s loop for any ``ratio(squares, grams, rows, n, c,
    delta, d)`` that evaluates ``points`` terms per arrangement: the Gram matrices centred
    or not (:func:`_centred`), in batches of :data:`_TERMS_PER_CHUNK` terms."""
    gram = np.asarray(gram, dtype=np.float64)
    n = gram.shape[-1]
    grams, rows = _centred(gram.reshape(-1, n, n), told_centre)
    a = arrangements(n, m) if a is None else a
    pairs = arrangement_pairs(a)
    c = spike(n, m, delta)
    out = np.empty(len(grams))
    per_chunk = rows_per_chunk(len(a), points)
    for lo in range(0, len(grams), per_chunk):     # (chunk, arrangements) terms at a time
        part = grams[lo:lo + per_chunk]
        out[lo:lo + per_chunk] = ratio(arrangement_squares(pairs, part), part, rows, n, c,
                                       delta, d)
    return out.reshape(gram.shape[:-2]) if gram.ndim > 2 else float(out[0])


def rows_per_chunk(arrangement_total: int, points: int = 1) -> int:
    """Gram matrices per batch of the arrangement sums: :data:`_TERMS_PER_CHUNK` terms,
    ``points`` per arrangement of a row.

    >>> rows_per_chunk(10, 4) == _TERMS_PER_CHUNK // 40
    True
    """
    return max(1, _TERMS_PER_CHUNK // (arrangement_total * points))


def _log_ratio_told_level(squares, grams, rows: int, n: int, c: float, delta: float,
                          d: int) -> np.ndarray:
    """``log`` (planted / null) of the Gram matrices ``grams`` (their arrangements'
    ``squares``), both direction-averaged, told the noise level."""
    return _log_planted(squares, n, c, delta, d) - _log_null(grams, rows, c, d)


def _centred(grams, told_centre: bool):
    """``(grams, rows)``: the Gram matrices as the ratio reads them, and how many
    independent rows they hold (``H G H`` and ``n - 1`` when not told the centre)."""
    n = grams.shape[-1]
    if told_centre:
        return grams, n
    h = np.eye(n) - 1.0 / n
    return h @ grams @ h, n - 1


def arrangement_pairs(a) -> np.ndarray:
    """``a_si a_sj`` for every arrangement ``a_s`` (rows of ``a``) over the pairs ``i <= j``
    (``np.triu_indices``), doubled off the diagonal: what :func:`arrangement_squares`
    multiplies the Gram matrices by. It depends on the arrangements only, so a caller
    computes it once (at 20 clients 10 : 10 it is 92,378 x 210 numbers).

    >>> arrangement_pairs(np.array([[1.0, -1.0]]))
    array([[ 1., -2.,  1.]])
    """
    i, j = np.triu_indices(a.shape[1])
    return a[:, i] * a[:, j] * np.where(i == j, 1.0, 2.0)


def arrangement_squares(pairs, grams) -> np.ndarray:
    """``|Y^T a_s|^2 = a_s^T G a_s`` for every arrangement ``a_s`` and every Gram matrix
    ``G`` of the stack ``grams``, given the arrangements' :func:`arrangement_pairs`: shape
    ``(len(grams), len(pairs))``, one matrix product.

    >>> pairs = arrangement_pairs(np.array([[1.0, -1.0]]))
    >>> arrangement_squares(pairs, np.array([[[2.0, 1.0], [1.0, 3.0]]]))
    array([[3.]])
    """
    i, j = np.triu_indices(grams.shape[-1])
    return grams[:, i, j] @ pairs.T


def _log_planted(squares, n: int, c: float, delta: float, d: int) -> np.ndarray:
    """``log`` (direction-averaged planted density / standard normal) from the arrangements'
    squares (:func:`arrangement_squares`), one value per row."""
    return log_mean_sphere_mgf(squares, delta, d) - 0.5 * n * c


def _log_null(grams, rows: int, c: float, d: int) -> np.ndarray:
    """``log`` (direction-averaged null density / standard normal) of the (centred) Gram
    matrices ``grams``, ``rows`` of them independent (``n``, or ``n - 1`` centred)."""
    values = np.linalg.eigvalsh(grams)[:, ::-1][:, :min(rows, d)]
    return -0.5 * rows * math.log1p(c) + log_dirichlet_mgf(
        np.maximum(values, 0.0) * c / (2.0 * (1.0 + c)), d)


def log_mean_sphere_mgf(squares, delta: float, d: int) -> np.ndarray:
    """``log`` of the mean over each row's arrangements of ``E_u exp(Delta u . Y^T a_s)``,
    i.e. of ``exp(log_sphere_mgf(Delta * sqrt(squares), d))``; one value per row of
    ``squares``. From ``d = 42`` on (Debye's expansion) a compiled loop that keeps no
    array of the terms: at 20 clients 10 : 10 a row has 92,378 of them.

    >>> sq = np.array([[4.0, 9.0, 0.0]])
    >>> want = special.logsumexp(log_sphere_mgf(1.5 * np.sqrt(sq), 60), axis=1) - math.log(3)
    >>> bool(np.allclose(log_mean_sphere_mgf(sq, 1.5, 60), want, rtol=1e-12))
    True
    """
    squares = np.ascontiguousarray(squares, dtype=np.float64)
    b = d / 2.0
    if b - 1.0 < _DEBYE_ORDER:
        norms = np.sqrt(np.maximum(squares, 0.0))
        return (special.logsumexp(log_sphere_mgf(delta * norms, d), axis=1)
                - math.log(squares.shape[1]))
    return _log_mean_sphere_mgf_kernel()(squares, float(delta), b, _series_coefficients(b),
                                         float(special.gammaln(b)))


@functools.lru_cache(maxsize=1)
def _log_mean_sphere_mgf_kernel():
    """The compiled loop of :func:`log_mean_sphere_mgf` (numba: compiled on first use)."""
    import numba
    debye = numba.njit(_debye_log_bessel)

    @numba.njit
    def kernel(squares, delta, b, coefficients, log_gamma_b):
        nu = b - 1.0
        rows, terms = squares.shape
        out = np.empty(rows)
        for i in range(rows):
            top, total = -np.inf, 0.0            # logsumexp, one pass
            for s in range(terms):
                kappa = delta * math.sqrt(max(squares[i, s], 0.0))
                z = kappa * kappa / 4.0
                if z == 0.0:
                    value = 0.0
                elif z <= b:                     # the series, as log_sphere_mgf
                    log_z = math.log(z)
                    peak = -np.inf
                    for k in range(coefficients.shape[0]):
                        peak = max(peak, k * log_z + coefficients[k])
                    acc = 0.0
                    for k in range(coefficients.shape[0]):
                        acc += math.exp(k * log_z + coefficients[k] - peak)
                    value = peak + math.log(acc)
                else:                            # Debye's expansion, as _log_bessel_i
                    value = log_gamma_b + nu * math.log(2.0 / kappa) + debye(nu, kappa)
                if value > top:
                    total = total * math.exp(top - value) + 1.0
                    top = value
                else:
                    total += math.exp(value - top)
            out[i] = top + math.log(total) - math.log(terms)
        return out
    return kernel


def ratio_statistic(grams, d: int, n: int, expected) -> np.ndarray:
    """``T`` for each centred, noise-scaled Gram matrix of the stack ``grams`` (``n x n``,
    ``d`` dimensions; ``expected``: pure noise's mean eigenvalues, largest first): the
    largest log likelihood ratio over ``m = 2 .. floor(n / 2)``, each at the separation its
    top eigenvalue's excess gives (module docstring).

    >>> g = np.diag([30.0, 30.0, 1.0, 1.0]) ; g -= g.mean(0) ; g -= g.mean(1)[:, None]
    >>> c = (np.linalg.eigvalsh(g)[-1] - 8.0) / 3             # the excess over 8, / (n - 1)
    >>> want = log_likelihood_ratio(g, 2, float(np.sqrt(4 * c)), 8, told_centre=False)
    >>> bool(np.isclose(ratio_statistic(g[None], 8, 4, [8.0, 8.0, 8.0])[0], want))
    True
    """
    grams = np.asarray(grams, dtype=np.float64)
    if n < 4:
        raise ParameterError(f"the statistic needs n >= 4 clients (two groups of two), "
                             f"got {n}")
    excess = np.maximum(np.linalg.eigvalsh(grams)[:, -1] - expected[0], EXCESS_FLOOR) / (n - 1)
    best = np.full(len(grams), -np.inf)
    for m in range(2, n // 2 + 1):
        a, pi = arrangements(n, m), m / n
        for i, (gram, c) in enumerate(zip(grams, excess)):
            delta = float(np.sqrt(c / (pi * (1.0 - pi))))
            best[i] = max(best[i], log_likelihood_ratio(gram, m, delta, d, a,
                                                        told_centre=False))
    return best


def scaled_gram(whitened, kappa: float) -> np.ndarray:
    """The centred Gram matrix of the whitened descriptors (rows; or a stack) divided by
    ``kappa``: the clients in units of a descriptor's noise.

    >>> scaled_gram(np.array([[1.0, 0.0], [-1.0, 0.0]]), 2.0)
    array([[ 0.5, -0.5],
           [-0.5,  0.5]])
    """
    y = np.asarray(whitened, dtype=np.float64)
    y = y - y.mean(axis=-2, keepdims=True)
    return np.einsum("...id,...jd->...ij", y, y) / kappa


def fitted_spikes(whitened, kappa: float, expected) -> list[tuple[float, np.ndarray]]:
    """The null's spikes: ``[(c_j, v_j)]`` for every eigenvalue ``l_j`` of
    :func:`scaled_gram` above ``expected[j]`` (the mean ``j``-th eigenvalue of pure noise,
    both in decreasing order): ``c_j = (l_j - expected[j]) / (n - 1)`` and ``v_j`` the unit
    direction (in the whitened coordinates) of its principal axis.

    >>> y = np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 0.5], [0.0, -0.5]])
    >>> [(round(c, 6), abs(v).round(6).tolist()) for c, v in fitted_spikes(y, 1.0, [2, 2, 0])]
    [(5.333333, [1.0, 0.0])]
    """
    y = np.asarray(whitened, dtype=np.float64)
    n = y.shape[0]
    values, vectors = np.linalg.eigh(scaled_gram(y, kappa))
    values, vectors = values[::-1], vectors[:, ::-1]
    centred = (y - y.mean(axis=0)) / np.sqrt(kappa)
    out = []
    for j in range(n - 1):
        if values[j] > expected[j]:
            v = centred.T @ vectors[:, j]
            out.append((float((values[j] - expected[j]) / (n - 1)), v / np.linalg.norm(v)))
    return out


def _null_draw(rng, contrasts_shape, n: int, values, vectors, kappa: float, spikes):
    """One reference draw, whitened as the observed clients are: contrasts from ``N(0,
    S)`` and clients from the fitted Gaussian (``S = vectors diag(values) vectors^T``),
    ``S`` re-estimated by OAS."""
    from ._split_half import oas_whitened_points

    root = np.sqrt(values)
    noise = rng.standard_normal(contrasts_shape) * root @ vectors.T
    w = rng.standard_normal((n, len(values)))
    for c, v in spikes:
        w = w + np.sqrt(c) * rng.standard_normal((n, 1)) * v[None, :]
    return oas_whitened_points(noise, np.sqrt(kappa) * w * root @ vectors.T)[0]


@dataclass(frozen=True)
class SpikedNullTest:
    """The evidence of :func:`spiked_null_test`: the statistic ``T`` (the largest log
    likelihood ratio of two groups against the pooled Gaussian), its ``p_value`` against
    ``references`` bootstrap draws of the fitted null (``(1 + #{T_b >= T}) / (1 + B)``), the
    null's number of ``spikes`` (directions in which the clients differ by more than their
    noise), the ``pilot`` draws of pure noise and the public ``seed`` of the draws."""

    statistic: float
    p_value: float
    spikes: int
    references: int
    pilot: int
    seed: int


def spiked_null_test(distances, n: int, *, groups: int = DEFAULT_SPLIT_GROUPS,
                     order: str = "stacked", references: int = RUN_K_REFERENCES,
                     pilot: int = PILOT, seed: int = 0) -> SpikedNullTest:
    """The spiked-null ratio test (module docstring) on the coordinator's split D: the
    squared distances of the ``(k + 1) n`` rows ``[G_0; ...; G_{k-1}; F]`` (``k = groups``;
    ``order="client"``: client by client, as a session over the nodes'
    :func:`~omnifc.adapters.flux.split_rows` gives them), ``n >= 4`` clients. Small ``p``:
    the clients fall into two groups beyond what a Gaussian fitted to them (their noise as
    its floor) explains. ``seed``: the public seed of the draws.

    >>> rng = np.random.default_rng(1)
    >>> f = rng.standard_normal((6, 4)) * 3
    >>> x = np.vstack(list(f[None] + rng.standard_normal((3, 6, 4))) + [f])
    >>> d = ((x[:, None] - x[None]) ** 2).sum(-1)
    >>> r = spiked_null_test(d, 6, groups=3, references=9, pilot=9)
    >>> 0 < r.p_value <= 1 and spiked_null_test(d * 4, 6, groups=3, references=9,
    ...                                         pilot=9).p_value == r.p_value
    True
    """
    from ._split_half import split_embedding

    if int(references) < 1 or int(pilot) < 1:
        raise ParameterError(f"references and pilot must be >= 1, got {references}, {pilot}")
    contrasts, points = split_embedding(distances, int(n), groups=groups, order=order)
    return spiked_of_parts(contrasts, points, references=int(references), pilot=int(pilot),
                           seed=int(seed))


def spiked_of_parts(contrasts, points, *, references: int = RUN_K_REFERENCES,
                    pilot: int = PILOT, seed: int = 0) -> SpikedNullTest:
    """:func:`spiked_null_test` on the within-client ``contrasts`` and the clients'
    ``points`` (``_split_half.split_embedding``'s parts)."""
    from ._split_half import oas_whitened_points

    n, d = points.shape
    kappa = (contrasts.shape[0] // n) / 4          # (k - 1) / 4
    whitened, s = oas_whitened_points(contrasts, points)
    values, vectors = np.linalg.eigh(s)
    values = np.maximum(values, values.max() * 1e-12)
    rng = np.random.default_rng(seed)
    noise = np.stack([scaled_gram(_null_draw(rng, contrasts.shape, n, values, vectors, kappa,
                                             []), kappa) for _ in range(pilot)])
    expected = np.sort(np.linalg.eigvalsh(noise), axis=1)[:, ::-1].mean(axis=0)
    spikes = fitted_spikes(whitened, kappa, expected)
    draws = np.stack([scaled_gram(_null_draw(rng, contrasts.shape, n, values, vectors,
                                             kappa, spikes), kappa)
                      for _ in range(references)])
    t = ratio_statistic(np.concatenate([scaled_gram(whitened, kappa)[None], draws]), d, n,
                        expected)
    return SpikedNullTest(statistic=float(t[0]),
                          p_value=float((1 + np.sum(t[1:] >= t[0])) / (1 + references)),
                          spikes=len(spikes), references=int(references), pilot=int(pilot),
                          seed=int(seed))


def union_k(default_k: int, p_value: float, alpha: float = RUN_K_ALPHA) -> int:
    """The union's K: the default rule's ``default_k`` where it is above 1, else 2 where
    the spiked-null test's ``p_value <= alpha``, else 1 (level at most ``2 alpha``).

    >>> union_k(3, 0.9), union_k(1, 0.01), union_k(1, 0.02)
    (3, 2, 1)
    """
    if default_k > 1:
        return int(default_k)
    return 2 if p_value <= alpha else 1

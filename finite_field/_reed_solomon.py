"""Reed-Solomon checks on the evaluations D is decoded from: parity rows, syndromes, decoding.

The responding set B has N = K + r distinct points beta_1..beta_N, where K = deg g + 1
= 2l+2t-1. Entry by entry (every pair of rows, modulo each prime), the vector
y = (g(beta_j))_j of a polynomial g of degree <= K-1 is a codeword of a generalized
Reed-Solomon code of dimension K. Its dual code is spanned by the *parity rows*

    mu_{k,j} = v_j beta_j^(k-1),  k = 1..r,   v_j = 1 / prod_{i != j} (beta_j - beta_i),

because sum_j v_j f(beta_j) is the leading (x^(N-1)) coefficient of the interpolant of f,
zero for every f of degree <= N-2, and x^(k-1) g(x) has degree <= K+r-2 = N-2.
The *syndromes* S_k = mu_k . U of received values U = y + e are therefore exactly zero for
honest values and depend on the errors e only:

    S_k = sum_{j in E} Y_j X_j^(k-1),   X_j = beta_j,  Y_j = v_j e_j,

the power sums of a standard Reed-Solomon decoding problem (only the first s <= r rows may
be used, for instance when the others are not mask-free; decoding then sees s checks).

Decoding (bounded distance, radius tau <= floor(s/2)): Berlekamp-Massey finds the
shortest linear recurrence sum_u sigma_u S_{k+u} = 0 (sigma monic of degree L); when the
errors number at most tau it is sigma(z) = prod_{j in E} (z - X_j). Its roots among the
points locate the errors (a zero point is fine in this form); the magnitudes follow by
inverting the transposed Vandermonde system with Lagrange's formula,

    Y_i = sum_k q_{i,k} S_{k+1} / sigma'(X_i),   q_i(z) = sigma(z) / (z - X_i),

and e_j = Y_j / v_j. Guarantees (minimum distance of the code seen through s checks is
s+1): at most tau wrong evaluators in an entry are located and corrected exactly; between
tau+1 and s - tau they are always detected (reported uncorrectable, never miscorrected);
with tau = 0 every pattern of up to s wrong evaluators is detected. More than s - tau wrong
values can be miscorrected or, beyond s, pass unseen: the radius is a choice of the caller.

All arithmetic is exact: syndromes reuse the limb-paired float64 kernels of ``_kernels``
(one pass over the evaluations for all rows), the decoder is an int64 numba kernel over the
flagged entries (p < 2^31, so products stay below 2^62).

Examples
--------
>>> import numpy as np
>>> from finite_field import ReedSolomonCheck
>>> check = ReedSolomonCheck(points=(3, 4, 5, 6, 7), dimension=3, prime=13)
>>> check.parity_rows().tolist()
[[6, 2, 10, 2, 6], [5, 8, 11, 12, 3]]
>>> honest = np.array([[(x * x + 1) % 13] for x in check.points])   # g = x^2 + 1, one entry
>>> check.syndromes(honest).tolist()
[[0], [0]]
>>> received = honest.copy(); received[3] = (received[3] + 5) % 13    # evaluator 3 lies
>>> result = check.decode(check.syndromes(received))
>>> result.flagged.tolist(), result.positions.tolist(), result.correctable.tolist()
([0], [[3]], [True])
>>> bool((result.corrected(received) == honest).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._jit import kernel
from ._errors import ParameterError
from ._kernels._checks import _check_field_array
from ._kernels._encode import weighted_sums
from ._lagrange import LagrangeCode
from ._primes import validate_prime

__all__ = ["ReedSolomonCheck", "Decoding", "CheckedSum", "weighted_sums", "dual_multipliers",
           "checked_sum", "decode_evaluations"]


# --------------------------------------------------------------------------- linear maps

def dual_multipliers(points, p: int) -> list[int]:
    """v_j = 1 / prod_{i != j} (beta_j - beta_i) mod p: the column multipliers of the dual code.

    >>> dual_multipliers([3, 4, 5], 13)
    [7, 12, 7]
    """
    points = [int(x) % p for x in points]
    out = []
    for j, xj in enumerate(points):
        den = 1
        for i, xi in enumerate(points):
            if i != j:
                den = den * (xj - xi) % p
        out.append(pow(den, -1, p))
    return out


# --------------------------------------------------------------------------- decoder kernel

@kernel(cache=True)
def _inverse(a, p):
    # a^-1 mod p by the extended Euclidean algorithm (a != 0 mod p).
    t, new_t, r, new_r = np.int64(0), np.int64(1), p, a % p
    while new_r != 0:
        q = r // new_r
        t, new_t = new_t, t - q * new_t
        r, new_r = new_r, r - q * new_r
    return t + p if t < 0 else t


@kernel("void(int64[:,::1], int64[::1], int64[::1], int64, int64, int64[:,::1],"
            " int64[:,::1], int64[::1])", cache=True, nogil=True)
def _decode_kernel(syndromes, points, multipliers, p, radius, positions, errors, located):
    # For each entry f (column of ``syndromes``, shape (s, F)): Berlekamp-Massey on
    # S_1..S_s, roots of sigma among the points, magnitudes by Lagrange/Forney.
    # located[f] = number of errors found (positions[f, :L], errors[f, :L]), or -1 when the
    # pattern is not within ``radius`` (detected, uncorrectable).
    s, n_entries = syndromes.shape
    n_points = points.shape[0]
    conn = np.zeros(s + 1, dtype=np.int64)    # C(x), connection polynomial
    prev = np.zeros(s + 1, dtype=np.int64)    # B(x)
    temp = np.zeros(s + 1, dtype=np.int64)
    syn = np.zeros(s, dtype=np.int64)
    sigma = np.zeros(s + 1, dtype=np.int64)   # sigma[u]: coefficient of z^u
    quot = np.zeros(s + 1, dtype=np.int64)
    roots = np.zeros(s + 1, dtype=np.int64)
    mags = np.zeros(s + 1, dtype=np.int64)
    for f in range(n_entries):
        positions_f = positions[f]
        for k in range(s):
            syn[k] = syndromes[k, f]
        for i in range(positions.shape[1]):
            positions_f[i] = -1
            errors[f, i] = 0
        # Berlekamp-Massey over GF(p).
        for i in range(s + 1):
            conn[i] = 0
            prev[i] = 0
        conn[0] = 1
        prev[0] = 1
        length = 0
        shift = 1
        last = np.int64(1)
        for n in range(s):
            d = syn[n]
            for i in range(1, length + 1):
                d = (d + conn[i] * syn[n - i]) % p
            if d == 0:
                shift += 1
                continue
            coef = d * _inverse(last, p) % p
            if 2 * length <= n:
                for i in range(s + 1):
                    temp[i] = conn[i]
                for i in range(shift, s + 1):
                    conn[i] = (conn[i] - coef * prev[i - shift]) % p
                length = n + 1 - length
                for i in range(s + 1):
                    prev[i] = temp[i]
                last = d
                shift = 1
            else:
                for i in range(shift, s + 1):
                    conn[i] = (conn[i] - coef * prev[i - shift]) % p
                shift += 1
        if length == 0 or length > radius or 2 * length > s:
            located[f] = -1 if length > 0 else 0
            continue
        # sigma(z) = z^L C(1/z): sigma[u] = C[L - u]; monic of degree L.
        for u in range(length + 1):
            sigma[u] = conn[length - u]
        found = 0
        for j in range(n_points):
            x = points[j]
            acc = np.int64(1)
            for u in range(length - 1, -1, -1):
                acc = (acc * x + sigma[u]) % p
            if acc == 0:
                if found < length:
                    roots[found] = j
                found += 1
        if found != length:
            located[f] = -1
            continue
        ok = True
        for i in range(length):
            xi = points[roots[i]]
            # q(z) = sigma(z) / (z - X_i), by synthetic division (high to low).
            quot[length - 1] = 1
            for u in range(length - 1, 0, -1):
                quot[u - 1] = (sigma[u] + xi * quot[u]) % p
            num = np.int64(0)
            den = np.int64(0)
            power = np.int64(1)
            for u in range(length):
                num = (num + quot[u] * syn[u]) % p
                den = (den + quot[u] * power) % p
                power = power * xi % p
            if den == 0 or num == 0:
                ok = False
                break
            mags[i] = num * _inverse(den, p) % p
        if ok:
            # The error pattern must reproduce every syndrome (implied by the algebra when
            # the locator splits; checked anyway, it is cheap).
            for k in range(s):
                total = np.int64(0)
                for i in range(length):
                    xi = points[roots[i]]
                    power = np.int64(1)
                    for _ in range(k):
                        power = power * xi % p
                    total = (total + mags[i] * power) % p
                if total != syn[k]:
                    ok = False
                    break
        if not ok:
            located[f] = -1
            continue
        for i in range(length):
            j = roots[i]
            positions_f[i] = j
            errors[f, i] = mags[i] * _inverse(multipliers[j], p) % p
        located[f] = length


# --------------------------------------------------------------------------- results

@dataclass(frozen=True)
class Decoding:
    """What syndrome decoding found, entry by entry (entries are flat indices).

    Attributes
    ----------
    shape : tuple of int
        The shape of one evaluation (the entries).
    flagged : ndarray of int64, shape (F,)
        Flat indices of the entries with a nonzero syndrome (a detected deviation).
    positions : ndarray of int64, shape (F, tau)
        For each flagged entry, the indices (into the check's points, i.e. the order of B)
        of the located wrong evaluators, padded with -1.
    errors : ndarray of int64, shape (F, tau)
        The error values e_j = received - true (mod p) at those positions, 0 as padding.
    correctable : ndarray of bool, shape (F,)
        False where the errors were detected but not located within the radius.
    prime : int
    """

    shape: tuple
    flagged: np.ndarray
    positions: np.ndarray
    errors: np.ndarray
    correctable: np.ndarray
    prime: int

    @property
    def clean(self) -> bool:
        """True when every syndrome was zero (no deviation detected)."""
        return self.flagged.size == 0

    @property
    def uncorrectable(self) -> np.ndarray:
        """Flat indices of the entries whose errors were detected but not located."""
        return self.flagged[~self.correctable]

    @property
    def ok(self) -> bool:
        """True when every detected deviation was located and can be corrected."""
        return bool(self.correctable.all())

    def located(self) -> list[tuple[int, int]]:
        """(flat entry index, evaluator index) for every located error."""
        rows, cols = np.nonzero(self.positions >= 0)
        return [(int(self.flagged[r]), int(self.positions[r, c])) for r, c in zip(rows, cols)]

    def wrong_evaluators(self) -> dict[int, int]:
        """{evaluator index: number of entries where it was located wrong}."""
        found, counts = np.unique(self.positions[self.positions >= 0], return_counts=True)
        return {int(j): int(c) for j, c in zip(found, counts)}

    def corrected(self, evaluations) -> np.ndarray:
        """A copy of ``evaluations`` (shape (N,) + shape) with the located errors removed.

        Uncorrectable entries are left as received: check :attr:`ok` first.
        """
        out = np.array(evaluations, dtype=np.int64, copy=True)
        flat = out.reshape(out.shape[0], -1)
        rows, cols = np.nonzero(self.positions >= 0)
        entries = self.flagged[rows]
        evaluators = self.positions[rows, cols]
        flat[evaluators, entries] = (flat[evaluators, entries] - self.errors[rows, cols]) \
            % self.prime
        return out

    def correct_combination(self, weights, combined) -> np.ndarray:
        """``combined - sum_j weights[j] e_j`` per entry: a linear combination, corrected.

        With ``weights`` the decoding vector c and ``combined`` = c . U (for instance the
        masked sum the coordinator holds), this is c . (U - e) = D wherever the errors were
        located. Uncorrectable entries are left as they were: check :attr:`ok` first.
        Returns ``combined`` itself (no copy) when nothing was flagged.
        """
        p = self.prime
        if self.flagged.size == 0:
            return np.asarray(combined, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.int64) % p
        out = np.array(combined, dtype=np.int64, copy=True)
        flat = out.reshape(-1)
        safe = np.where(self.positions >= 0, self.positions, 0)
        terms = weights[safe] * self.errors % p   # padding has error 0
        fix = terms.sum(axis=1) % p
        flat[self.flagged] = (flat[self.flagged] - fix) % p
        return out


@dataclass(frozen=True)
class CheckedSum:
    """A linear combination of the evaluations and the integrity verdict on them.

    ``values`` is the combination c . (U - e), corrected wherever the errors were located;
    it is a valid result only when ``decoding.ok`` (else uncorrectable entries keep the
    received combination and must not be used).
    """

    values: np.ndarray
    decoding: Decoding

    @property
    def ok(self) -> bool:
        return self.decoding.ok


# --------------------------------------------------------------------------- the code

@dataclass(frozen=True)
class ReedSolomonCheck:
    """Parity checks and syndrome decoding for the evaluations of one responding set.

    Parameters
    ----------
    points : sequence of int
        beta_j of the responding parties, in the order of the evaluations (the order of B).
    dimension : int
        K = deg g + 1 (2l+2t-1 for squared distances).
    prime : int
        The prime (< 2^31).

    Use :meth:`for_responders` to build it from a :class:`LagrangeCode`.
    """

    points: tuple
    dimension: int
    prime: int

    def __post_init__(self) -> None:
        p = validate_prime(self.prime)
        points = tuple(int(x) % p for x in self.points)
        if len(set(points)) != len(points):
            raise ParameterError(f"points must be distinct mod p, got {list(points)}")
        k = int(self.dimension)
        if not 1 <= k <= len(points):
            raise ParameterError(
                f"dimension must be in [1, {len(points)}] (number of points), got {k}")
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "dimension", k)
        object.__setattr__(self, "prime", p)
        object.__setattr__(self, "_multipliers",
                           np.array(dual_multipliers(points, p), dtype=np.int64))

    @classmethod
    def for_responders(cls, code: LagrangeCode, responders) -> "ReedSolomonCheck":
        """The check for the evaluations g(beta_j), j in ``responders`` (indices 0..m-1).

        >>> from finite_field import LagrangeCode
        >>> code = LagrangeCode(segments=1, noise_segments=1, parties=5, prime=13)
        >>> ReedSolomonCheck.for_responders(code, [0, 1, 2, 4]).redundancy
        1
        """
        responders = [int(j) for j in responders]
        if len(set(responders)) != len(responders) or any(
                not 0 <= j < code.parties for j in responders):
            raise ParameterError(
                f"responders must be distinct indices in [0, {code.parties}), got {responders}")
        return cls(points=tuple(code.betas[j] for j in responders),
                   dimension=code.min_responders, prime=code.prime)

    @property
    def length(self) -> int:
        """N = |B|."""
        return len(self.points)

    @property
    def redundancy(self) -> int:
        """r = N - K: how many independent parity checks there are."""
        return self.length - self.dimension

    @property
    def multipliers(self) -> np.ndarray:
        """v_j (int64, shape (N,))."""
        return self._multipliers.copy()

    def _count(self, checks) -> int:
        r = self.redundancy
        if checks is None:
            return r
        checks = int(checks)
        if not 0 <= checks <= r:
            raise ParameterError(f"checks must be in [0, r = {r}], got {checks}")
        return checks

    def parity_rows(self, checks: int | None = None) -> np.ndarray:
        """mu_{k,j} = v_j beta_j^(k-1) for k = 1..checks (all r by default); shape (checks, N)."""
        s = self._count(checks)
        p = self.prime
        out = np.empty((s, self.length), dtype=np.int64)
        for j, (x, v) in enumerate(zip(self.points, self._multipliers.tolist())):
            value = v
            for k in range(s):
                out[k, j] = value
                value = value * x % p
        return out

    def syndromes(self, evaluations, checks: int | None = None) -> np.ndarray:
        """S_k = sum_j mu_{k,j} U_j, exactly, for k = 1..checks; shape (checks,) + entries.

        ``evaluations`` has shape (N, ...) with reduced field elements.
        """
        return weighted_sums(self.parity_rows(checks), evaluations, self.prime)

    def max_correctable(self, checks: int | None = None) -> int:
        """floor(s/2): the largest decoding radius with s checks."""
        return self._count(checks) // 2

    def decode(self, syndromes, *, max_errors: int | None = None) -> Decoding:
        """Locate and size the errors behind ``syndromes`` (shape (s,) + entries).

        Parameters
        ----------
        syndromes : array_like of int, shape (s, ...)
            S_1..S_s per entry (:meth:`syndromes`), s <= r.
        max_errors : int, optional
            The decoding radius tau, 0 <= tau <= floor(s/2) (default floor(s/2)). Up to
            tau wrong evaluators per entry are corrected; up to s - tau are always detected.
            tau = 0: detection only (every pattern of up to s wrong evaluators is flagged).
        """
        p = self.prime
        syn = _check_field_array(syndromes, p, "syndromes")
        if syn.ndim == 0:
            raise ParameterError("syndromes must have shape (s, ...)")
        s = self._count(syn.shape[0])
        tau = s // 2 if max_errors is None else int(max_errors)
        if not 0 <= tau <= s // 2:
            raise ParameterError(
                f"max_errors must be in [0, floor(s/2) = {s // 2}] with s = {s} checks, "
                f"got {tau}")
        shape = syn.shape[1:]
        flat = syn.reshape(s, int(np.prod(shape, dtype=np.int64)))
        # One int64 OR-reduction over the checks, then the indices of nonzero entries.
        flagged = (np.flatnonzero(np.bitwise_or.reduce(flat, axis=0)) if s and flat.size
                   else np.zeros(0, np.int64)).astype(np.int64)
        positions = np.full((flagged.size, tau), -1, dtype=np.int64)
        errors = np.zeros((flagged.size, tau), dtype=np.int64)
        located = np.full(flagged.size, -1, dtype=np.int64)
        if tau and flagged.size:
            _decode_kernel(np.ascontiguousarray(flat[:, flagged]),
                           np.array(self.points, dtype=np.int64), self._multipliers, p, tau,
                           positions, errors, located)
        return Decoding(shape=shape, flagged=flagged, positions=positions, errors=errors,
                        correctable=located > 0, prime=p)


def checked_sum(check: ReedSolomonCheck, weights, evaluations, *, checks: int | None = None,
                max_errors: int | None = None) -> CheckedSum:
    """``weights . evaluations`` with the first ``checks`` syndromes, decoded and corrected.

    One pass computes the combination (for decoding: c . U = D) and S_1..S_s; the flagged
    entries are decoded with radius ``max_errors`` and the combination corrected where the
    errors were located. Transparent mode: raw evaluations, every check (``checks=None``).
    Masked mode: U_j = g(beta_j) + M_j with M orthogonal to c and mu_1..mu_s, and
    ``checks=s`` (the masks cancel in exactly these combinations).

    Parameters
    ----------
    check : ReedSolomonCheck
    weights : array_like of int, shape (N,)
        The decoding vector c (:meth:`LagrangeCode.decoding_weights` of the same B).
    evaluations : array_like of int, shape (N, ...)
    checks, max_errors
        s (default r) and tau (default floor(s/2)); see :meth:`ReedSolomonCheck.decode`.

    Examples
    --------
    >>> import numpy as np
    >>> from finite_field import LagrangeCode
    >>> code = LagrangeCode(segments=1, noise_segments=1, parties=5, prime=13)
    >>> check = ReedSolomonCheck.for_responders(code, range(5))    # K = 3, r = 2
    >>> c = code.decoding_weights(range(5))
    >>> g = lambda x: (2 * x * x + 3 * x + 5) % 13                 # sum g(alpha_o) = g(1) = 10
    >>> evaluations = np.array([[g(b)] for b in code.betas])
    >>> evaluations[1, 0] = (evaluations[1, 0] + 7) % 13           # party 1 lies
    >>> result = checked_sum(check, c, evaluations)
    >>> result.values.tolist(), result.decoding.wrong_evaluators(), result.ok
    ([10], {1: 1}, True)
    """
    p = check.prime
    s = check._count(checks)
    weights = _check_field_array(np.asarray(weights).reshape(-1), p, "weights")
    if weights.size != check.length:
        raise ParameterError(f"expected {check.length} weights, got {weights.size}")
    rows = np.concatenate([weights[np.newaxis], check.parity_rows(s)])
    combined = weighted_sums(rows, evaluations, p)
    decoding = check.decode(combined[1:], max_errors=max_errors)
    return CheckedSum(values=decoding.correct_combination(weights, combined[0]),
                      decoding=decoding)


def decode_evaluations(code: LagrangeCode, responders, evaluations, *,
                       max_errors: int | None = None) -> CheckedSum:
    """Transparent mode: full Reed-Solomon decoding of raw evaluations g(beta_j), j in B.

    Uses every one of the r = |B| - K checks; corrects up to ``max_errors`` (default
    floor(r/2)) wrong parties per entry and detects up to r - max_errors. The result's
    ``values`` are sum_o g(alpha_o) (the distances mod p) wherever ``decoding.ok``.

    Parameters
    ----------
    code : LagrangeCode
    responders : sequence of int
        B, indices 0..m-1 in the order of ``evaluations``.
    evaluations : array_like of int, shape (|B|, ...)

    Examples
    --------
    >>> import numpy as np
    >>> from finite_field import LagrangeCode
    >>> code = LagrangeCode(segments=1, noise_segments=1, parties=6, prime=251)
    >>> g = lambda x: (x * x + 4 * x + 9) % 251                   # sum g(alpha_o) = g(1) = 14
    >>> raw = np.array([[g(b), 0] for b in code.betas])           # two entries
    >>> raw[[2, 5], 0] = (raw[[2, 5], 0] + 1) % 251               # parties 2 and 5 lie
    >>> result = decode_evaluations(code, range(6), raw)          # r = 3: corrects 1
    >>> result.decoding.uncorrectable.tolist(), int(result.values[1])
    ([0], 0)
    >>> result = decode_evaluations(code, [0, 1, 2, 3, 4], raw[:5])   # one liar left
    >>> result.values.tolist(), result.decoding.wrong_evaluators()
    ([14, 0], {2: 1})
    """
    responders = [int(j) for j in responders]
    check = ReedSolomonCheck.for_responders(code, responders)
    return checked_sum(check, code.decoding_weights(responders), evaluations,
                       max_errors=max_errors)

"""Lagrange coding over GF(p): evaluation points, encoding matrix and decoding weights.

A sample split into l segments s_1..s_l, plus t uniformly random noise segments
z_1..z_t, defines the degree-(l+t-1) polynomial f with f(alpha_a) equal to the a-th
block. Party j receives f(beta_j). Squared distances are degree 2, so
g(x) = ||f_u(x) - f_v(x)||^2 has degree D = 2(l+t-1) and the sum of its values at the
data points, sum_{o<=l} g(alpha_o), is the squared distance of the two samples. Any
D+1 = 2l+2t-1 evaluations g(beta_j) determine it:

    D_uv = sum_{j in B} c_j g(beta_j),   c_j = sum_{o<=l} L_j^B(alpha_o)

where L_j^B is the Lagrange basis on the points of the responding set B.

This module is low level (the "hazmat" layer): it trusts its caller to keep noise secret.

Examples
--------
>>> from finite_field import LagrangeCode
>>> code = LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13)
>>> code.alphas, code.betas
((1, 2), (3, 4, 5))
>>> code.encoding_matrix().tolist()
[[12, 11, 10], [2, 3, 4]]
>>> [int(c) for c in code.decoding_weights([0, 1, 2])]
[6, 5, 3]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._errors import ParameterError
from ._primes import validate_prime

__all__ = ["LagrangeCode", "min_parties", "lagrange_basis_at"]


def min_parties(segments: int, noise_segments: int) -> int:
    """The fewest parties that can decode: deg g + 1 = 2l + 2t - 1."""
    return 2 * segments + 2 * noise_segments - 1


def _positive_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ParameterError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def lagrange_basis_at(points, x: int, p: int) -> list[int]:
    """[L_a(x) for a in points]: the Lagrange basis on ``points`` evaluated at x over GF(p).

    Exact, with Python integers. The points must be distinct mod p (no check here: a
    repeated point raises ``ValueError`` from the modular inverse).

    >>> lagrange_basis_at([1, 2], 3, 13)
    [12, 2]
    """
    values = []
    for a, xa in enumerate(points):
        num, den = 1, 1
        for b, xb in enumerate(points):
            if b != a:
                num = num * (x - xb) % p
                den = den * (xa - xb) % p
        values.append(num * pow(den, -1, p) % p)
    return values


@dataclass(frozen=True)
class LagrangeCode:
    """Lagrange coding parameters for one prime.

    Parameters
    ----------
    segments : int
        l, the number of data segments per sample (l >= 1).
    noise_segments : int
        t, the number of uniformly random segments (t >= 1): any t parties together
        learn nothing about the data.
    parties : int
        m, the number of parties receiving shares; m >= 2l + 2t - 1.
    prime : int
        The field modulus, a prime below 2^31 with p > l + t + m.
    alphas, betas : sequence of int, optional
        Interpolation points (l+t of them) and party points (m). Defaults
        ``alpha_a = a`` and ``beta_j = l + t + j``. All points must be pairwise distinct
        modulo p.
    """

    segments: int
    noise_segments: int
    parties: int
    prime: int
    alphas: tuple[int, ...] = field(default=None)
    betas: tuple[int, ...] = field(default=None)

    def __post_init__(self) -> None:
        l = _positive_int(self.segments, "segments (l)", 1)
        t = _positive_int(self.noise_segments, "noise_segments (t)", 1)
        m = _positive_int(self.parties, "parties (m)", 1)
        need = min_parties(l, t)
        if m < need:
            raise ParameterError(
                f"at least 2l+2t-1 = {need} parties are needed for segments={l}, "
                f"noise_segments={t}; got {m}")
        p = validate_prime(self.prime)
        if p <= l + t + m:
            raise ParameterError(
                f"prime must exceed l+t+m = {l + t + m} to give distinct points; got {p}")
        alphas = tuple(range(1, l + t + 1)) if self.alphas is None else self.alphas
        betas = tuple(range(l + t + 1, l + t + m + 1)) if self.betas is None else self.betas
        alphas = tuple(int(a) % p for a in alphas)
        betas = tuple(int(b) % p for b in betas)
        if len(alphas) != l + t:
            raise ParameterError(f"expected l+t = {l + t} alphas, got {len(alphas)}")
        if len(betas) != m:
            raise ParameterError(f"expected m = {m} betas, got {len(betas)}")
        points = alphas + betas
        if len(set(points)) != len(points):
            seen, dup = set(), None
            for x in points:
                if x in seen:
                    dup = x
                    break
                seen.add(x)
            kind = "a party point equals an interpolation point (that party would see a raw " \
                   "segment)" if dup in alphas and dup in betas else "a point is repeated"
            raise ParameterError(
                f"evaluation points must be pairwise distinct mod p; {kind}: {dup}")
        object.__setattr__(self, "segments", l)
        object.__setattr__(self, "noise_segments", t)
        object.__setattr__(self, "parties", m)
        object.__setattr__(self, "prime", p)
        object.__setattr__(self, "alphas", alphas)
        object.__setattr__(self, "betas", betas)

    @classmethod
    def unchecked(cls, segments: int, noise_segments: int, parties: int, prime: int,
                  alphas, betas) -> "LagrangeCode":
        """The same object without any validation, for audits only.

        A privacy audit must run the real encoder on *broken* points (a repeated party
        point, a party point equal to an interpolation point) to show what they leak; the
        constructor rightly refuses those. Never use this for a session.
        """
        code = object.__new__(cls)
        for name, value in (("segments", int(segments)), ("noise_segments", int(noise_segments)),
                            ("parties", int(parties)), ("prime", int(prime)),
                            ("alphas", tuple(int(a) % prime for a in alphas)),
                            ("betas", tuple(int(b) % prime for b in betas))):
            object.__setattr__(code, name, value)
        return code

    @property
    def degree(self) -> int:
        """D = 2(l+t-1), the degree of the distance polynomial g."""
        return 2 * (self.segments + self.noise_segments - 1)

    @property
    def min_responders(self) -> int:
        """D + 1: how many party results decoding needs."""
        return self.degree + 1

    def encoding_matrix(self) -> np.ndarray:
        """U with U[a, j] = L_a(beta_j): shape (l+t, m), int64 in [0, p).

        Party j's share of a sample whose blocks are X_1..X_{l+t} is sum_a U[a, j] X_a.
        """
        columns = [lagrange_basis_at(self.alphas, b, self.prime) for b in self.betas]
        return np.array(columns, dtype=np.int64).T.copy()

    def decoding_weights(self, responders) -> np.ndarray:
        """c_j = sum_{o<=l} L_j^B(alpha_o) for the responding parties B (indices 0..m-1).

        ``sum_j c_j g(beta_j) mod p`` is then the exact squared distance.
        """
        responders = [int(j) for j in responders]
        if len(set(responders)) != len(responders):
            raise ParameterError(f"responding parties must be distinct, got {responders}")
        bad = [j for j in responders if not 0 <= j < self.parties]
        if bad:
            raise ParameterError(
                f"responding party indices must be in [0, {self.parties}), got {bad}")
        if len(responders) < self.min_responders:
            raise ParameterError(
                f"decoding needs at least 2l+2t-1 = {self.min_responders} responding parties, "
                f"got {len(responders)}")
        points = tuple(self.betas[j] for j in responders)
        weights = [0] * len(points)
        for alpha in self.alphas[: self.segments]:
            for i, v in enumerate(lagrange_basis_at(points, alpha, self.prime)):
                weights[i] = (weights[i] + v) % self.prime
        return np.array(weights, dtype=np.int64)

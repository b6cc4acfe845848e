"""One object with every public parameter of a session's arithmetic, validated up front.

:func:`make_plan` turns what a user asks for (dimension, clip bound, scale bits, segments,
noise segments, party count) into a :class:`CodingPlan`: the quantizer, the primes that
make every squared distance exact (one prime when it fits, several otherwise) and one
:class:`LagrangeCode` per prime. Impossible requests fail here, before any share is made.

Examples
--------
>>> from finite_field import make_plan
>>> plan = make_plan(dim=4, bound=8.0, scale_bits=16, segments=1, noise_segments=1, parties=3)
>>> plan.primes, plan.segment_length, plan.min_responders
((2147483647, 2147483629), 4, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass


from ._errors import ParameterError
from ._lagrange import LagrangeCode, _positive_int
from ._primes import choose_primes
from ._quantize import Quantizer

__all__ = ["CodingPlan", "make_plan"]


@dataclass(frozen=True)
class CodingPlan:
    """The validated arithmetic of one session (see :func:`make_plan`)."""

    dim: int
    quantizer: Quantizer
    codes: tuple[LagrangeCode, ...]

    @property
    def primes(self) -> tuple[int, ...]:
        return tuple(code.prime for code in self.codes)

    @property
    def segments(self) -> int:
        return self.codes[0].segments

    @property
    def noise_segments(self) -> int:
        return self.codes[0].noise_segments

    @property
    def parties(self) -> int:
        return self.codes[0].parties

    @property
    def segment_length(self) -> int:
        """s = ceil(d / l): features per segment (the last one zero-padded)."""
        return -(-self.dim // self.segments)

    @property
    def min_responders(self) -> int:
        return self.codes[0].min_responders

    @property
    def distance_bound(self) -> int:
        """The largest integer squared distance quantized rows can have."""
        return self.quantizer.distance_bound(self.dim)

    @property
    def headroom_bits(self) -> float:
        """log2(prod(primes) / (distance_bound + 1)): bits to spare before wrap-around."""
        return math.log2(math.prod(self.primes)) - math.log2(self.distance_bound + 1)

    def describe(self) -> dict:
        """The public parameters as plain data (for logs, reports and session configs)."""
        code = self.codes[0]
        return {
            "dim": self.dim,
            "segments": self.segments,
            "noise_segments": self.noise_segments,
            "parties": self.parties,
            "scale_bits": self.quantizer.scale_bits,
            "bound": self.quantizer.bound,
            "nonnegative": self.quantizer.nonnegative,
            "primes": list(self.primes),
            "alphas": list(code.alphas),
            "betas": list(code.betas),
            "distance_bound": self.distance_bound,
            "headroom_bits": round(self.headroom_bits, 3),
        }


def make_plan(dim: int, *, bound: float, scale_bits: int, segments: int = 1,
              noise_segments: int = 1, parties: int, nonnegative: bool = False,
              clip: str = "clip", primes=None, alphas=None, betas=None) -> CodingPlan:
    """Validate a session's public parameters and choose its primes.

    Parameters
    ----------
    dim : int
        d, the number of features every party has.
    bound, scale_bits, nonnegative, clip
        Quantization (see :class:`Quantizer`).
    segments, noise_segments, parties
        l, t and m (see :class:`LagrangeCode`); 1 <= l <= d and m >= 2l + 2t - 1.
    primes : sequence of int, optional
        Explicit moduli; by default the fewest large primes below 2^31 whose product
        exceeds the largest possible squared distance.
    alphas, betas : sequence of int, optional
        Evaluation points, shared by every prime.

    Raises
    ------
    ParameterError
        On any parameter that cannot give an exact, private result.
    """
    dim = _positive_int(dim, "dim (d)", 1)
    segments = _positive_int(segments, "segments (l)", 1)
    if segments > dim:
        raise ParameterError(f"segments (l) must be <= d = {dim}, got {segments}")
    quantizer = Quantizer(scale_bits=scale_bits, bound=bound, nonnegative=nonnegative, clip=clip)
    chosen = choose_primes(quantizer.distance_bound(dim) + 1, primes)
    codes = tuple(
        LagrangeCode(segments=segments, noise_segments=noise_segments, parties=parties,
                     prime=p, alphas=None if alphas is None else tuple(alphas),
                     betas=None if betas is None else tuple(betas))
        for p in chosen)
    # Points must be distinct for every prime, and identical integers across primes.
    return CodingPlan(dim=dim, quantizer=quantizer, codes=codes)



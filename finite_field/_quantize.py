"""Fixed-point quantization with a public clip bound, and the no-wrap condition.

``Q(x) = round(2^q * clip(x, -R, R))`` maps reals to integers in ``[-M, M]`` with
``M = round(2^q * R)``. A negative integer ``z`` is embedded in GF(p) as ``p + z``.
Squared distances of quantized vectors are at most ``4 d M^2`` (``d M^2`` when every
feature is known to lie in ``[0, R]``), so they are exact modulo any prime, or product of
primes, above that bound.

R must be public and agreed in advance: computing it from pooled data would leak.

Examples
--------
>>> import numpy as np
>>> from finite_field import Quantizer
>>> qz = Quantizer(scale_bits=2, bound=1.0)
>>> qz.quantize(np.array([[0.5, -2.0, 0.13]])).values
array([[ 2, -4,  1]])
>>> qz.distance_bound(dim=3)
192
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._errors import InputError, ParameterError

__all__ = ["Quantizer", "Quantized"]

CLIP_POLICIES = ("clip", "error")


def _round_half_up(scaled):
    """floor(y + 1/2) exactly, for float64 y with |y| < 2^53.

    ``np.floor(y + 0.5)`` is not exact: for y = 0.49999999999999994 the float sum rounds
    to 1.0. The fractional part ``y - floor(y)`` is computed exactly, so comparing it with
    1/2 is.
    """
    whole = np.floor(scaled)
    return whole + (scaled - whole >= 0.5)


@dataclass(frozen=True)
class Quantized:
    """The result of quantizing one party's rows.

    Attributes
    ----------
    values : ndarray of int64, shape (n, d)
        Signed integers in ``[-M, M]``.
    clipped : int
        How many entries lay outside ``[-R, R]`` and were clipped (0 under ``"error"``).
    """

    values: np.ndarray
    clipped: int


@dataclass(frozen=True)
class Quantizer:
    """Public quantization parameters.

    Parameters
    ----------
    scale_bits : int
        q: values are multiplied by 2^q before rounding. 0 <= q <= 30.
    bound : float
        R > 0: the public clip bound.
    nonnegative : bool
        Every feature is known to lie in ``[0, R]`` (pixels, counts): values below 0 are
        clipped to 0 and the no-wrap bound shrinks fourfold.
    clip : {"clip", "error"}
        What to do with values outside the range: clip and count them, or refuse.
    """

    scale_bits: int
    bound: float
    nonnegative: bool = False
    clip: str = "clip"

    def __post_init__(self) -> None:
        if isinstance(self.scale_bits, bool) or not isinstance(self.scale_bits, (int, np.integer)):
            raise ParameterError(f"scale_bits must be an integer, got {self.scale_bits!r}")
        if not 0 <= self.scale_bits <= 30:
            raise ParameterError(f"scale_bits must be in [0, 30], got {self.scale_bits}")
        if (isinstance(self.bound, bool) or not isinstance(self.bound, (int, float, np.number))
                or not 0 < self.bound < math.inf):
            raise ParameterError(f"bound must be a finite number > 0, got {self.bound!r}")
        if self.bound >= 2**53 / self.scale:
            raise ParameterError(
                f"bound * 2^scale_bits must be below 2^53 to quantize exactly, got "
                f"bound={self.bound}, scale_bits={self.scale_bits}")
        if self.clip not in CLIP_POLICIES:
            raise ParameterError(f"clip must be one of {CLIP_POLICIES}, got {self.clip!r}")
        if self.max_magnitude == 0:
            raise ParameterError(
                f"bound * 2^scale_bits rounds to 0 (bound={self.bound}, scale_bits="
                f"{self.scale_bits}): every value would quantize to 0"
            )

    @property
    def scale(self) -> float:
        """2^q."""
        return float(2**self.scale_bits)

    @property
    def max_magnitude(self) -> int:
        """M = round(2^q R): the largest quantized magnitude."""
        return int(_round_half_up(np.float64(self.bound) * self.scale))

    @property
    def lower(self) -> float:
        return 0.0 if self.nonnegative else -float(self.bound)

    def distance_bound(self, dim: int) -> int:
        """The largest possible integer squared distance between two quantized rows."""
        span = self.max_magnitude if self.nonnegative else 2 * self.max_magnitude
        return int(dim) * span * span

    def error_bound(self, dim: int, distance: float | None = None) -> float:
        """Worst-case |D_hat - ||x - y||^2| for in-range data.

        With ``distance`` (the true Euclidean distance, not squared) the bound is
        ``2 ||x-y|| sqrt(d) 2^-q + d 4^-q``; without it the worst case over the box.
        """
        diameter = self.bound * (1.0 if self.nonnegative else 2.0) * math.sqrt(dim)
        dist = diameter if distance is None else float(distance)
        return 2.0 * dist * math.sqrt(dim) / self.scale + dim / self.scale**2

    def quantize(self, x, *, party: object = None) -> Quantized:
        """Quantize a (n, d) array of reals; NaN/inf raise :class:`InputError`."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise InputError(f"data must be a 2-D array (rows x features), got shape {x.shape}",
                             party=party)
        finite = np.isfinite(x)
        if not finite.all():
            row, col = np.argwhere(~finite)[0]
            raise InputError(
                f"data must be finite; found {x[row, col]} at row {row}, column {col} "
                f"({int((~finite).sum())} non-finite entries)", party=party)
        outside = (x < self.lower) | (x > self.bound)
        clipped = int(outside.sum())
        if clipped and self.clip == "error":
            row, col = np.argwhere(outside)[0]
            raise InputError(
                f"values must lie in [{self.lower}, {self.bound}]; found {x[row, col]} at row "
                f"{row}, column {col} ({clipped} entries out of range)", party=party)
        clipped_x = np.clip(x, self.lower, self.bound)
        values = _round_half_up(clipped_x * self.scale).astype(np.int64)
        return Quantized(values=values, clipped=clipped)

    def dequantize_distances(self, integer_distances: np.ndarray) -> np.ndarray:
        """Integer squared distances back to real units: D / 4^q."""
        # 4^-q is a power of two: the product is exact, and one pass instead of two.
        return np.multiply(integer_distances, 1.0 / self.scale**2, dtype=np.float64)

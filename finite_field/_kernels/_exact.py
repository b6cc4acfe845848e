"""Float64 exactness: balanced residues, limb splitting, operand plans and ``_mod_float``.

How the arithmetic stays exact (p < 2^31)
-----------------------------------------
Every kernel computes in float64, whose integers are exact up to 2^53, and never lets an
intermediate value leave that range:

* **Balanced representatives.** An element x in [0, p) is used as x or x - p, whichever
  lies in [-h, h] with h = (p - 1) // 2 < 2^30.
* **Limbs.** One operand of each product is split into two signed digits,
  x = x_hi * 2^b + x_lo (|x_lo| <= 2^(b-1), |x_hi| <= (h + 2^(b-1)) / 2^b; b = 16 for
  the largest primes). A limb times a balanced element is below 2^45, so a sum of up to
  about 170-256 such products (the *chunk*) is an exact float64 integer. Longer sums are
  cut into chunks and reduced mod p in between. When h^2 * k is already below the
  budget (small primes) no split is made. :func:`weighted_sum` splits the weights and
  keeps one accumulator per limb, recombined as (acc_hi mod p) * 2^b + acc_lo.
* **Gram trick.** For a dot product <x, y> mod p the limbs of x are paired with
  (2^b y mod p, y): <x, y> = <x_hi, 2^b y> + <x_lo, y> (mod p), so one float64 GEMM of
  inner dimension 2k (BLAS) gives a value that is exact and congruent to <x, y>.
  :func:`encode_blocks` uses the same pairing (limbs of the small encoding matrix) with
  one accumulator and one reduction per share.
  For distances (p odd) the y side is negated and two columns (h_x, 1) . (1, h_y) with
  h = |x|^2 / 2 mod p are appended, so the GEMM yields h_x + h_y - <x, y> and the squared
  distance is just twice that mod p: no separate norm pass.
* **Reduction without division.** An exact float v with |v| <= 2^53 - 2p is reduced by
  q = floor(v * (1/p)), r = v - q * p (both products exact; q is off by at most one),
  then one conditional add or subtract. This vectorizes; integer ``%`` does not. Sums of
  products are kept within 2^53 - 4p, so that adding a reduced accumulator (< p) or the
  two norm columns keeps them reducible.
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel

#: Float64 represents every integer of magnitude <= 2^53 exactly.
_FLOAT_EXACT = 2**53


@kernel(cache=True)
def _mod_float(v, p, p_inv):
    # v is an exact integer with |v| <= 2^53 - 2p; returns v mod p in [0, p) exactly.
    # q = floor(v / p) up to +-1 (two roundings of relative size 2^-53), so |q p| <= |v| + 2p
    # <= 2^53 is exact, and v - q p, an integer in [-p, 2p), is computed exactly.
    q = np.floor(v * p_inv)
    r = v - q * p
    if r < 0.0:
        r += p
    elif r >= p:
        r -= p
    return r


def _balanced(x: np.ndarray, p: int) -> np.ndarray:
    """Representatives in [-(p-1)//2, (p-1)//2] (int64)."""
    return np.where(x > (p - 1) // 2, x - p, x)


def _limb_bits(half: int) -> tuple[int, int]:
    """Limb width b minimising the largest digit of a balanced split; (b, max digit)."""
    best = None
    for bits in range(1, 32):
        low = 1 << (bits - 1)
        high = (half + low) >> bits
        largest = max(low, high)
        if best is None or largest < best[1]:
            best = (bits, largest)
    return best


def _split(x_balanced: np.ndarray, bits: int):
    """Signed digits (high, low) with x = high * 2^bits + low and |low| <= 2^(bits-1)."""
    half_base = 1 << (bits - 1)
    low = ((x_balanced + half_base) & ((1 << bits) - 1)) - half_base
    high = (x_balanced - low) >> bits
    return high, low


def _small_operand_plan(p: int):
    """How to split a small coefficient matrix: (bits, shift, chunk of products)."""
    half = (p - 1) // 2
    budget = _FLOAT_EXACT - 4 * p
    bits, largest = _limb_bits(half)
    chunk = max(1, budget // max(1, largest * half))
    return bits, float(1 << bits), int(chunk)


def _split_coefficients(coefficients: np.ndarray, p: int):
    bits, shift, chunk = _small_operand_plan(p)
    high, low = _split(_balanced(coefficients, p), bits)
    return (np.ascontiguousarray(high, dtype=np.float64),
            np.ascontiguousarray(low, dtype=np.float64), chunk, shift)


def _column_plan(p: int, k: int) -> tuple[int, int]:
    """(limb bits, columns per exact chunk) for dot products of length k mod p.

    bits == 0 means no split: h^2 * k already fits the float64 budget.
    """
    half = (p - 1) // 2
    budget = _FLOAT_EXACT - 4 * p
    if half * half * max(k, 1) <= budget:
        return 0, max(k, 1)
    bits, _ = _limb_bits(half)
    low_max = 1 << (bits - 1)
    high_max = (half + low_max) >> bits
    return bits, max(1, budget // ((low_max + high_max) * half))

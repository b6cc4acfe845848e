"""Chinese remaindering back to exact int64, against Python integers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finite_field import ParameterError, crt_combine, fast_primes

INT64_MAX = 2**63 - 1


def residues_of(values, primes):
    return [np.array([v % p for v in values], dtype=np.int64) for p in primes]


def test_three_primes_values_near_the_int64_limit():
    primes = fast_primes(3)
    rng = np.random.Generator(np.random.PCG64(8))
    values = [0, 1, 2, primes[0] - 1, primes[0], primes[0] * primes[1] - 1,
              primes[0] * primes[1], INT64_MAX, INT64_MAX - 1, 2**62, 2**62 + 12345]
    values += [INT64_MAX - int(k) for k in rng.integers(0, 2**40, size=50)]
    values += [int(v) for v in rng.integers(0, INT64_MAX, size=50, dtype=np.int64)]
    out = crt_combine(residues_of(values, primes), primes)
    assert out.dtype == np.int64
    assert [int(v) for v in out] == values


@pytest.mark.parametrize("count", [1, 2, 3])
def test_preserves_shape(count):
    primes = fast_primes(count)
    bound = min(math.prod(primes), 2**63)
    rng = np.random.Generator(np.random.PCG64(count))
    values = rng.integers(0, bound, size=(4, 5), dtype=np.uint64).astype(object)
    residues = [np.vectorize(lambda v, p=p: v % p)(values).astype(np.int64) for p in primes]
    out = crt_combine(residues, primes)
    assert out.shape == (4, 5) and out.dtype == np.int64
    assert out.astype(object).tolist() == values.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, INT64_MAX), min_size=1, max_size=10),
       st.sampled_from([(13, 11, 7, 5, 3), (65521, 251, 13), (2147483647, 65521, 251, 13),
                        fast_primes(3)]))
def test_small_and_mixed_primes(values, primes):
    values = [v % math.prod(primes) for v in values]
    values = [v for v in values if v <= INT64_MAX]
    if not values:
        return
    out = crt_combine(residues_of(values, primes), primes)
    assert [int(v) for v in out] == values


@pytest.mark.parametrize("value", [2**63, 2**63 + 1, 2**64, math.prod(fast_primes(3)) - 1])
def test_values_beyond_int64_raise(value):
    # Residues of a value >= 2^63 are inconsistent with the no-wrap bound (e.g. corrupted).
    primes = fast_primes(3)
    with pytest.raises(ParameterError, match=r"exceed the int64 range"):
        crt_combine(residues_of([5, value], primes), primes)


def test_random_inconsistent_residues_raise():
    # Uniformly random residues modulo three ~2^31 primes encode a value >= 2^63 with
    # probability 1 - 2^63 / prod(p) > 0.999: among 100 of them some must be refused.
    primes = fast_primes(3)
    rng = np.random.Generator(np.random.PCG64(1))
    residues = [rng.integers(0, p, size=100) for p in primes]
    with pytest.raises(ParameterError, match=r"exceed the int64 range"):
        crt_combine(residues, primes)


def test_count_mismatch_raises():
    with pytest.raises(ParameterError, match=r"^1 residue arrays for 2 primes$"):
        crt_combine([np.array([1])], (13, 11))


def test_docstring_example():
    assert crt_combine([np.array([2]), np.array([3])], (5, 7)).tolist() == [17]

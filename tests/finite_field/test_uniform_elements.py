"""Uniform field elements: range, shape, the CSPRNG default, reproducibility, no modulo bias.

Statistical tests use a fixed seed, so they are deterministic; the stated false-positive
rate ALPHA is the probability that a correct sampler would fail with a fresh seed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy import stats

import finite_field._random as random_module
from finite_field import SYSTEM_RANDOM, ParameterError, SystemRandom, uniform_elements

#: False-positive rate of each chi-square test (for a correct sampler and a random seed).
ALPHA = 1e-3


@pytest.mark.parametrize("shape", [7, (3, 4), (2, 0, 5), (1, 1, 1), ()])
def test_range_dtype_and_shape(prime, shape, seeded_source):
    x = uniform_elements(prime, shape, seeded_source)
    expected = (shape,) if isinstance(shape, int) else shape
    assert x.shape == expected
    assert x.dtype == np.int64
    assert ((x >= 0) & (x < prime)).all()


def test_large_draw_reaches_both_ends_of_a_small_field(seeded_source):
    x = uniform_elements(13, 5000, seeded_source)
    assert set(np.unique(x).tolist()) == set(range(13))


def test_top_of_the_int64_boundary_field_is_reachable(seeded_source):
    # 2^31-1 rejects only the single word 2^31-1: values just below p must appear.
    p = 2**31 - 1
    x = uniform_elements(p, 200_000, seeded_source)
    assert x.max() < p and x.max() > p - 2**31 // 1000


@pytest.mark.parametrize("bad", [1, 0, -13, 2**31, 2**31 + 11])
def test_rejects_moduli_outside_the_kernel_range(bad):
    with pytest.raises(ParameterError, match=rf"modulus must be in \[2, 2\^31\), got {bad}"):
        uniform_elements(bad, 3)


def test_default_source_is_the_system_csprng(monkeypatch):
    assert isinstance(SYSTEM_RANDOM, SystemRandom)
    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", spy)
    x = uniform_elements(2**31 - 1, 100)
    assert calls and sum(calls) >= 4 * 100
    assert x.shape == (100,)


def test_default_source_output_is_what_os_urandom_returned(monkeypatch):
    # Feed known bytes through os.urandom: the output must be exactly the accepted words,
    # so nothing but the OS CSPRNG feeds the default path.
    feed = np.random.Generator(np.random.PCG64(7))
    seen = []

    def fake(n):
        chunk = feed.bytes(n)
        seen.append(chunk)
        return chunk

    monkeypatch.setattr(os, "urandom", fake)
    p = 251
    x = uniform_elements(p, 1000)
    words = np.frombuffer(b"".join(seen), dtype="<u4") & 255
    accepted = words[words < p]
    assert np.array_equal(x, accepted[: x.size].astype(np.int64))


def test_default_source_delegates_to_SYSTEM_RANDOM(monkeypatch):
    calls = []
    monkeypatch.setattr(SYSTEM_RANDOM, "bytes", lambda n: calls.append(n) or os.urandom(n))
    uniform_elements(13, 10)
    assert calls
    assert random_module.SYSTEM_RANDOM is SYSTEM_RANDOM


def test_two_default_draws_differ():
    # Probability that two correct draws of 64 elements of GF(2^31-1) are equal: 2^-1984.
    a = uniform_elements(2**31 - 1, 64)
    b = uniform_elements(2**31 - 1, 64)
    assert not np.array_equal(a, b)


def test_seeded_generator_is_reproducible(prime):
    a = uniform_elements(prime, (5, 40), np.random.Generator(np.random.PCG64(123)))
    b = uniform_elements(prime, (5, 40), np.random.Generator(np.random.PCG64(123)))
    c = uniform_elements(prime, (5, 40), np.random.Generator(np.random.PCG64(124)))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


# --- modulo bias ----------------------------------------------------------------------------

def naive_byte_mod(p: int, size: int, source) -> np.ndarray:
    """Broken on purpose: one random byte reduced mod p (biased when p does not divide 256)."""
    return np.frombuffer(source.bytes(size), dtype=np.uint8).astype(np.int64) % p


def naive_masked_mod(p: int, size: int, source) -> np.ndarray:
    """Broken on purpose: the library's masked words, reduced mod p instead of rejected."""
    mask = (1 << (p - 1).bit_length()) - 1
    words = np.frombuffer(source.bytes(4 * size), dtype="<u4").astype(np.int64) & mask
    return words % p


def chi_square_pvalue(values: np.ndarray, p: int) -> float:
    counts = np.bincount(values, minlength=p)
    assert counts.size == p
    return float(stats.chisquare(counts).pvalue)


# Sample sizes give every broken sampler below a power of essentially 1 at ALPHA: for
# byte mod 13 the noncentrality is N * 5.5e-4 = 110 at N = 200_000 (power > 0.999 at
# 12 degrees of freedom); the masked variants are far more biased.
@pytest.mark.parametrize("p, size", [(13, 200_000), (257, 200_000)])
def test_rejection_sampling_has_no_modulo_bias(p, size):
    values = uniform_elements(p, size, np.random.Generator(np.random.PCG64(2026)))
    assert chi_square_pvalue(values, p) > ALPHA


@pytest.mark.parametrize("p, size, sampler", [(13, 200_000, naive_byte_mod),
                                              (13, 200_000, naive_masked_mod),
                                              (257, 200_000, naive_byte_mod),
                                              (257, 200_000, naive_masked_mod)])
def test_the_bias_test_flags_a_naive_modulo_sampler(p, size, sampler):
    values = sampler(p, size, np.random.Generator(np.random.PCG64(2026)))
    assert chi_square_pvalue(values, p) < ALPHA


def test_boundary_prime_is_uniform_over_coarse_buckets():
    # 2^31-1 cannot be histogrammed directly: bucket the values into 64 equal ranges.
    p = 2**31 - 1
    values = uniform_elements(p, 200_000, np.random.Generator(np.random.PCG64(99)))
    buckets = values * 64 // p
    counts = np.bincount(buckets, minlength=64)
    assert counts.size == 64
    assert stats.chisquare(counts).pvalue > ALPHA

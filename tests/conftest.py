"""Shared fixtures: the named list of primes every field test runs over, seeded sources."""

from __future__ import annotations

import numpy as np
import pytest

#: A small prime, mid-size primes, and the int64 boundary prime 2^31 - 1.
PRIMES = [13, 251, 65521, 2147483629, 2147483647]


@pytest.fixture(params=PRIMES, ids=lambda p: f"p{p}")
def prime(request) -> int:
    return request.param


@pytest.fixture
def seeded_source():
    """A reproducible byte source for low-level calls (never the default in public paths)."""
    return np.random.Generator(np.random.PCG64(20261130))


class Oracle:
    """Independent reference computations with exact Python integers and fractions.

    Nothing here calls omnifc: tests compare the library against these.
    """

    @staticmethod
    def quantize_value(x: float, scale_bits: int, bound: float, nonnegative: bool = False) -> int:
        """round-half-up(2^q * clip(x, lower, R)), computed exactly with fractions."""
        from fractions import Fraction
        import math

        lower = 0.0 if nonnegative else -float(bound)
        clipped = min(max(float(x), lower), float(bound))
        return math.floor(Fraction(clipped) * 2**scale_bits + Fraction(1, 2))

    @classmethod
    def quantize(cls, rows, scale_bits: int, bound: float, nonnegative: bool = False):
        """A list of lists of Python ints."""
        return [[cls.quantize_value(v, scale_bits, bound, nonnegative) for v in row]
                for row in np.asarray(rows, dtype=np.float64).tolist()]

    @staticmethod
    def sq_distances(rows):
        """Pairwise squared distances of integer rows, as a list of lists of Python ints."""
        rows = [[int(v) for v in row] for row in rows]
        return [[sum((a - b) * (a - b) for a, b in zip(u, v)) for v in rows] for u in rows]

    @staticmethod
    def is_prime(n: int) -> bool:
        """Deterministic Miller-Rabin for n < 3.3e24 (bases are the first 13 primes)."""
        if n < 2:
            return False
        bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
        for b in bases:
            if n % b == 0:
                return n == b
        d, s = n - 1, 0
        while d % 2 == 0:
            d, s = d // 2, s + 1
        for b in bases:
            x = pow(b, d, n)
            if x in (1, n - 1):
                continue
            for _ in range(s - 1):
                x = x * x % n
                if x == n - 1:
                    break
            else:
                return False
        return True


@pytest.fixture(scope="session")
def oracle():
    """Exact reference computations (see :class:`Oracle`)."""
    return Oracle


#: Default ceiling (seconds) of a test marked ``network`` that sets no timeout of its own.
#: The slowest loopback session of the suite takes well under a minute alone on 2 cores;
#: this leaves room for a loaded machine while a hung session still fails fast.
NETWORK_TIMEOUT = 150


def pytest_collection_modifyitems(config, items):
    """Give every network test a tighter timeout than the global one (setup.cfg)."""
    for item in items:
        if item.get_closest_marker("network") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(NETWORK_TIMEOUT))


@pytest.fixture(autouse=True)
def _fresh_log_once():
    """Each test starts in a process that has said nothing once yet (protocols._log_once
    is per process; the whole suite shares one)."""
    from protocols._log_once import restore
    restore(())
    yield

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

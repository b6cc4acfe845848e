"""The test helpers' reference computations agree with galois (the project's oracle)."""

from __future__ import annotations

import galois
import numpy as np
import pytest

from protocol_helpers import lagrange_weights
from oracles import galois_field


@pytest.mark.parametrize("p", [13, 251, 65521])
def test_lagrange_weights_equal_galois_lagrange_polynomials(p):
    field = galois_field(p)
    rng = np.random.default_rng(p)
    for _ in range(5):
        size = int(rng.integers(2, 7))
        points = [int(v) for v in rng.choice(np.arange(1, min(p, 60)), size, replace=False)]
        x = int(rng.integers(0, min(p, 60)))
        expected = []
        for j in range(size):
            unit = field([1 if i == j else 0 for i in range(size)])
            expected.append(int(galois.lagrange_poly(field(points), unit)(field(x))))
        assert lagrange_weights(points, x, p) == expected
        assert sum(lagrange_weights(points, x, p)) % p == 1  # the basis sums to one

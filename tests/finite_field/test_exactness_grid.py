"""Exactness over the full grid of issue 2, with the finite_field steps.

l in {1, 2, 4}, t in {1, 2, 3}, m from 2l+2t-1 to 2l+2t+3, and for each the smallest
responding set, every party, and random sets in between. Half of the cells use one prime,
half two (RNS). The public entry point runs a subsample of this grid in
tests/omnifc/test_secure_distance_matrix.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finite_field import (decode_sum, encode_rows, evaluate_shares, make_plan,
                          weight_evaluation)

GRID = [(l, t, m) for l, t in itertools.product((1, 2, 4), (1, 2, 3))
        for m in range(2 * l + 2 * t - 1, 2 * l + 2 * t + 4)]


@pytest.mark.parametrize("l, t, m", GRID)
def test_exact_for_every_responding_set(l, t, m, oracle):
    index = GRID.index((l, t, m))
    rng = np.random.Generator(np.random.PCG64(index))
    scale_bits = 10 if index % 2 else 20
    dim = 9  # l = 2 and l = 4 do not divide it: zero padding
    plan = make_plan(dim, bound=2.0, scale_bits=scale_bits, segments=l, noise_segments=t,
                     parties=m)
    assert len(plan.primes) == (1 if scale_bits == 10 else 2)
    x = rng.uniform(-2.2, 2.2, size=(6, dim))
    x[0] = 2.0
    x[1] = -2.0  # the largest possible distance
    rows = plan.quantizer.quantize(x).values
    source = np.random.Generator(np.random.PCG64(1000 + index))
    outgoing = [encode_rows(plan, part, source) for part in (rows[:2], rows[2:3], rows[3:])]
    primes = plan.primes
    evaluations = []
    for j in range(m):
        held = [np.concatenate([out[k][j] for out in outgoing]) for k in range(len(primes))]
        evaluations.append(evaluate_shares(plan, held))
    need = plan.min_responders
    subsets = [list(range(need)), list(range(m)), list(range(m - need, m))]
    subsets += [sorted(rng.choice(m, size=int(rng.integers(need, m + 1)), replace=False))
                for _ in range(2)]
    expected = oracle.sq_distances(oracle.quantize(x, scale_bits, 2.0))
    assert expected[0][1] == plan.distance_bound
    for responders in subsets:
        weights = [code.decoding_weights(responders) for code in plan.codes]
        totals = [0] * len(primes)
        for position, j in enumerate(responders):
            contribution = weight_evaluation(plan, [w[position] for w in weights],
                                             evaluations[j])
            totals = [(a + b) % p for a, b, p in zip(totals, contribution, primes)]
        assert decode_sum(plan, totals).tolist() == expected, responders

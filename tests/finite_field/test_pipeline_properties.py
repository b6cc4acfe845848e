"""Property tests: the four steps reconstruct exact squared distances for random parameters.

Hypothesis draws l, t, m, the responding set B, n, d, q, R and the data; the oracle is the
brute-force Python-integer squared distance of the rows quantized exactly with fractions.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from finite_field import (LagrangeCode, ParameterError, decode_sum, encode_rows,
                          evaluate_shares, make_plan, weight_evaluation)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def sessions(draw):
    l = draw(st.integers(1, 4))
    t = draw(st.integers(1, 3))
    need = 2 * l + 2 * t - 1
    m = draw(st.integers(need, need + 3))
    responders = sorted(draw(st.sets(st.integers(0, m - 1), min_size=need, max_size=m)))
    d = draw(st.integers(l, 9))
    n = draw(st.integers(1, 7))
    q = draw(st.integers(0, 20))
    bound = draw(st.sampled_from([0.5, 1.0, 3.0, 10.0]))
    nonnegative = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    # Values inside and outside the clip range, including the extremes and exact halves.
    scale = 2.0**q
    special = [0.0, bound, -bound, 2 * bound, -2 * bound, 0.5 / scale, -0.5 / scale]
    rng = np.random.Generator(np.random.PCG64(seed))
    x = rng.uniform(-1.5 * bound, 1.5 * bound, size=(n, d))
    mask = rng.random((n, d)) < 0.2
    x[mask] = rng.choice(special, size=int(mask.sum()))
    return dict(l=l, t=t, m=m, responders=responders, d=d, q=q, bound=bound,
                nonnegative=nonnegative, seed=seed, x=x)


@SETTINGS
@given(session=sessions())
def test_steps_reconstruct_exact_squared_distances(session, oracle):
    s = session
    plan = make_plan(s["d"], bound=s["bound"], scale_bits=s["q"], segments=s["l"],
                     noise_segments=s["t"], parties=s["m"], nonnegative=s["nonnegative"])
    quantized = plan.quantizer.quantize(s["x"]).values
    expected_rows = oracle.quantize(s["x"], s["q"], s["bound"], s["nonnegative"])
    assert quantized.tolist() == expected_rows
    source = np.random.Generator(np.random.PCG64(s["seed"]))
    # Rows come from two owners, as in a session: shares are concatenated per party.
    split = quantized.shape[0] // 2
    owners = [quantized[:split], quantized[split:]] if split else [quantized]
    outgoing = [encode_rows(plan, rows, source) for rows in owners]
    primes = plan.primes
    totals = [0] * len(primes)
    weights = [code.decoding_weights(s["responders"]) for code in plan.codes]
    for position, j in enumerate(s["responders"]):
        held = [np.concatenate([out[k][j] for out in outgoing]) for k in range(len(primes))]
        evaluation = evaluate_shares(plan, held)
        contribution = weight_evaluation(plan, [w[position] for w in weights], evaluation)
        totals = [(a + b) % p for a, b, p in zip(totals, contribution, primes)]
    result = decode_sum(plan, totals)
    assert result.dtype == np.int64
    assert result.tolist() == oracle.sq_distances(expected_rows)
    assert int(result.max(initial=0)) <= plan.distance_bound


@SETTINGS
@given(l=st.integers(1, 4), t=st.integers(1, 3), extra=st.integers(0, 3),
       prime=st.sampled_from([13, 251, 65521, 2147483629, 2147483647]), data=st.data())
def test_decoding_recovers_sum_at_alphas_from_any_large_enough_set(l, t, extra, prime, data):
    m = 2 * l + 2 * t - 1 + extra
    if prime <= l + t + m:
        try:
            LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime)
        except ParameterError as error:
            assert "prime must exceed l+t+m" in str(error)
            return
        raise AssertionError("a prime <= l+t+m was accepted")
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime)
    responders = sorted(data.draw(st.sets(st.integers(0, m - 1),
                                          min_size=code.min_responders, max_size=m)))
    coeffs = data.draw(st.lists(st.integers(0, prime - 1), min_size=code.degree + 1,
                                max_size=code.degree + 1))

    def g(x):  # Horner over Python integers
        acc = 0
        for c in reversed(coeffs):
            acc = (acc * x + c) % prime
        return acc

    weights = code.decoding_weights(responders)
    total = sum(int(c) * g(code.betas[j]) for c, j in zip(weights, responders)) % prime
    assert total == sum(g(a) for a in code.alphas[:l]) % prime

"""The four steps (encode_rows, evaluate_shares, weight_evaluation, decode_sum) and make_plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from finite_field import (ParameterError, decode_sum, encode_rows, evaluate_shares, make_plan,
                          weight_evaluation)


def python_sq_distances_mod(rows_a, rows_b, p):
    return [[sum((int(x) - int(y)) ** 2 for x, y in zip(u, v)) % p for v in rows_b]
            for u in rows_a]


def run_steps(plan, rows, responders, source):
    shares = encode_rows(plan, rows, source)
    totals = [np.zeros((rows.shape[0], rows.shape[0]), dtype=np.int64) for _ in plan.primes]
    weights = [code.decoding_weights(responders) for code in plan.codes]
    for position, j in enumerate(responders):
        evaluation = evaluate_shares(plan, [shares[k][j] for k in range(len(plan.primes))])
        contribution = weight_evaluation(plan, [w[position] for w in weights], evaluation)
        totals = [(a + b) % p for a, b, p in zip(totals, contribution, plan.primes)]
    return shares, totals


def test_evaluate_shares_is_the_squared_distance_of_the_shares(seeded_source):
    plan = make_plan(5, bound=2.0, scale_bits=20, segments=2, noise_segments=1, parties=5)
    assert len(plan.primes) == 2
    rows = plan.quantizer.quantize(
        np.random.Generator(np.random.PCG64(4)).uniform(-2, 2, (7, 5))).values
    shares = encode_rows(plan, rows, seeded_source)
    for j in (0, 4):
        mine = [shares[k][j] for k in range(2)]
        full = evaluate_shares(plan, mine)
        tile = evaluate_shares(plan, mine, row_slice=slice(2, 5))
        for k, p in enumerate(plan.primes):
            expected = python_sq_distances_mod(mine[k].tolist(), mine[k].tolist(), p)
            assert full[k].tolist() == expected
            assert tile[k].tolist() == expected[2:5]


def test_evaluate_shares_refuses_the_wrong_number_of_primes():
    plan = make_plan(2, bound=2.0, scale_bits=20, parties=3)
    with pytest.raises(ParameterError, match=r"^expected shares for 2 primes, got 1$"):
        evaluate_shares(plan, [np.zeros((2, 2), dtype=np.int64)])


def test_weight_evaluation_matches_python_integers():
    plan = make_plan(2, bound=2.0, scale_bits=20, parties=3)
    rng = np.random.Generator(np.random.PCG64(6))
    evaluation = [rng.integers(0, p, size=(3, 3)) for p in plan.primes]
    evaluation[0][0, 0] = plan.primes[0] - 1
    weights = [plan.primes[0] - 1, 12345]
    out = weight_evaluation(plan, weights, evaluation)
    for w, e, o, p in zip(weights, evaluation, out, plan.primes):
        assert o.tolist() == [[int(w) * int(v) % p for v in row] for row in e.tolist()]


@pytest.mark.parametrize("responders", [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6], [1, 3, 4, 5, 6]])
def test_steps_reconstruct_exact_distances(responders, seeded_source, oracle):
    plan = make_plan(6, bound=3.0, scale_bits=22, segments=2, noise_segments=1, parties=7)
    assert len(plan.primes) == 2
    x = np.random.Generator(np.random.PCG64(9)).uniform(-4, 4, (9, 6))
    rows = plan.quantizer.quantize(x).values
    assert rows.tolist() == oracle.quantize(x, 22, 3.0)
    _, totals = run_steps(plan, rows, responders, seeded_source)
    assert decode_sum(plan, totals).tolist() == oracle.sq_distances(rows.tolist())


def test_decode_sum_detects_a_corrupted_contribution(seeded_source):
    plan = make_plan(3, bound=1.0, scale_bits=4, parties=3)
    assert len(plan.primes) == 1
    rows = np.array([[16, -16, 3], [0, 5, -7]])
    _, totals = run_steps(plan, rows, [0, 1, 2], seeded_source)
    assert decode_sum(plan, totals).tolist() == [[0, 797], [797, 0]]
    corrupted = [totals[0].copy()]
    corrupted[0][0, 1] = (corrupted[0][0, 1] + 10**6) % plan.primes[0]
    with pytest.raises(ParameterError, match=r"decoded distances exceed the largest possible "
                                             r"value \(1000797 > 3072\): a contribution was "
                                             r"corrupted"):
        decode_sum(plan, corrupted)


def test_make_plan_describe_and_bounds():
    plan = make_plan(784, bound=1.0, scale_bits=12, segments=4, noise_segments=2, parties=11)
    assert plan.distance_bound == 4 * 784 * 4096**2
    assert len(plan.primes) == 2 and math.prod(plan.primes) > plan.distance_bound
    assert plan.segment_length == 196 and plan.min_responders == 11
    assert plan.headroom_bits == pytest.approx(
        math.log2(math.prod(plan.primes)) - math.log2(plan.distance_bound + 1))
    info = plan.describe()
    assert info["primes"] == list(plan.primes)
    assert info["alphas"] == list(range(1, 7)) and info["betas"] == list(range(7, 18))
    assert (info["dim"], info["segments"], info["noise_segments"], info["parties"]) == \
        (784, 4, 2, 11)
    assert (info["scale_bits"], info["bound"], info["nonnegative"]) == (12, 1.0, False)


def test_make_plan_pads_when_l_does_not_divide_d():
    plan = make_plan(7, bound=1.0, scale_bits=4, segments=3, parties=7)
    assert plan.segment_length == 3


@pytest.mark.parametrize("kwargs, error, message", [
    ({"dim": 2, "segments": 3}, ParameterError, r"^segments \(l\) must be <= d = 2, got 3$"),
    ({"dim": 0}, ParameterError, r"dim \(d\) must be >= 1, got 0"),
    ({"dim": 4, "parties": 2}, ParameterError, r"at least 2l\+2t-1 = 3 parties .* got 2$"),
    ({"dim": 4, "primes": [13]}, ParameterError, r"\(3\.7 bits\).*\(18\.0 bits\).*wrap around"),
    ({"dim": 4, "primes": [2147483647, 21]}, ParameterError, r"^primes\[1\] must be prime, got 21"),
    ({"dim": 4, "betas": [3, 4, 3]}, ParameterError, r"a point is repeated: 3$"),
    ({"dim": 4, "betas": [3, 4, 1]}, ParameterError, r"a party point equals an interpolation"),
    ({"dim": 10**6, "scale_bits": 30, "bound": 10.0}, ParameterError, r"at most 63 are supported"),
])
def test_make_plan_refusals(kwargs, error, message):
    base = {"bound": 8.0, "scale_bits": 4, "parties": 3}
    with pytest.raises(error, match=message):
        make_plan(**(base | kwargs))

"""Quantization against exact rounding with fractions; clipping, refusals and the bounds."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finite_field import InputError, ParameterError, Quantizer

# Hand cases: (x, scale_bits, bound, expected Q(x)), round half up.
HAND_CASES = [
    (0.5, 2, 1.0, 2), (-2.0, 2, 1.0, -4), (0.13, 2, 1.0, 1),
    (0.125, 2, 1.0, 1),            # 0.5 exactly: half rounds up
    (-0.125, 2, 1.0, 0),           # -0.5 exactly: half rounds up, to 0
    (0.375, 2, 1.0, 2), (-0.375, 2, 1.0, -1),
    (0.49999999999999994, 0, 4.0, 0),    # largest double below 1/2: naive floor(y+0.5) gives 1
    (-0.49999999999999994, 0, 4.0, 0),
    (0.49999999999999994 / 2**10, 10, 4.0, 0),
    (2.5, 0, 4.0, 3), (-2.5, 0, 4.0, -2), (3.4999999999999996, 0, 4.0, 3),
    (1e-300, 30, 1.0, 0), (-1e-300, 30, 1.0, 0),
    (1.0, 30, 1.0, 2**30), (-1.0, 30, 1.0, -(2**30)), (7.3, 30, 1.0, 2**30),
    (0.1, 16, 8.0, 6554), (-0.1, 16, 8.0, -6554),
]


@pytest.mark.parametrize("x, q, bound, expected", HAND_CASES)
def test_hand_cases_match_exact_rounding(x, q, bound, expected, oracle):
    assert oracle.quantize_value(x, q, bound) == expected  # the oracle agrees with the table
    got = Quantizer(scale_bits=q, bound=bound).quantize(np.array([[x]])).values
    assert got.dtype == np.int64
    assert int(got[0, 0]) == expected


@settings(max_examples=200, deadline=None)
@given(q=st.integers(0, 30), bound=st.floats(1e-3, 1e3),
       values=st.lists(st.floats(-2e3, 2e3, allow_nan=False), min_size=1, max_size=20),
       nonnegative=st.booleans())
def test_random_values_match_exact_rounding(q, bound, values, nonnegative, oracle):
    try:
        quantizer = Quantizer(scale_bits=q, bound=bound, nonnegative=nonnegative)
    except ParameterError:  # bound * 2^q rounds to 0 or is too wide to quantize exactly
        assert (oracle.quantize_value(bound, q, bound) == 0) or bound * 2**q >= 2**53
        return
    got = quantizer.quantize(np.array([values])).values[0].tolist()
    assert got == oracle.quantize(np.array([values]), q, bound, nonnegative)[0]
    assert quantizer.max_magnitude == oracle.quantize_value(bound, q, bound)


def test_values_near_half_steps_match_exact_rounding(oracle):
    # Every double adjacent to a half step k + 1/2 (scaled): the hard cases for rounding.
    halves = np.arange(-40, 40) + 0.5
    x = np.concatenate([np.nextafter(halves, -np.inf), halves, np.nextafter(halves, np.inf)])
    for q in (0, 3, 17):
        scaled = x / 2**q
        got = Quantizer(scale_bits=q, bound=64.0).quantize(scaled[None, :]).values[0]
        assert got.tolist() == oracle.quantize(scaled[None, :], q, 64.0)[0]


def test_clipping_is_counted_and_clips_to_the_bound():
    quantizer = Quantizer(scale_bits=3, bound=2.0)
    x = np.array([[2.5, -3.0, 1.0], [2.0, -2.0, 100.0]])
    result = quantizer.quantize(x)
    assert result.clipped == 3
    assert result.values.tolist() == [[16, -16, 8], [16, -16, 16]]
    assert quantizer.quantize(np.array([[0.0, 2.0, -2.0]])).clipped == 0


def test_nonnegative_mode_clips_below_zero():
    quantizer = Quantizer(scale_bits=1, bound=4.0, nonnegative=True)
    result = quantizer.quantize(np.array([[-0.1, -5.0, 0.0, 3.3, 4.5]]))
    assert result.values.tolist() == [[0, 0, 0, 7, 8]]
    assert result.clipped == 3
    assert quantizer.lower == 0.0


def test_clip_error_policy_names_row_and_column():
    quantizer = Quantizer(scale_bits=3, bound=2.0, clip="error")
    x = np.array([[0.0, 1.0, 0.5], [0.0, 0.0, -2.5], [9.0, 0.0, 0.0]])
    with pytest.raises(InputError, match=r"^party 'hospital': values must lie in \[-2\.0, 2\.0\]; "
                                         r"found -2\.5 at row 1, column 2 \(2 entries out of "
                                         r"range\)$") as info:
        quantizer.quantize(x, party="hospital")
    assert info.value.party == "hospital"
    assert isinstance(info.value, ValueError)
    # In range (the bound itself included): accepted.
    assert quantizer.quantize(np.array([[2.0, -2.0]])).clipped == 0


def test_clip_error_policy_in_nonnegative_mode():
    quantizer = Quantizer(scale_bits=0, bound=2.0, nonnegative=True, clip="error")
    with pytest.raises(InputError, match=r"\[0\.0, 2\.0\]; found -0\.5 at row 0, column 1"):
        quantizer.quantize(np.array([[1.0, -0.5]]))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("clip", ["clip", "error"])
def test_non_finite_values_are_rejected_naming_party_and_column(bad, clip):
    x = np.zeros((3, 4))
    x[2, 3] = bad
    with pytest.raises(InputError, match=rf"^party 'b': data must be finite; found {bad} at "
                                         r"row 2, column 3 \(1 non-finite entries\)$") as info:
        Quantizer(scale_bits=4, bound=1.0, clip=clip).quantize(x, party="b")
    assert info.value.party == "b"


def test_non_2d_data_is_rejected():
    with pytest.raises(InputError, match=r"2-D array .* got shape \(3,\)"):
        Quantizer(scale_bits=4, bound=1.0).quantize(np.zeros(3), party=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"scale_bits": -1, "bound": 1.0}, r"scale_bits must be in \[0, 30\], got -1"),
    ({"scale_bits": 31, "bound": 1.0}, r"scale_bits must be in \[0, 30\], got 31"),
    ({"scale_bits": 2.0, "bound": 1.0}, r"scale_bits must be an integer, got 2\.0"),
    ({"scale_bits": True, "bound": 1.0}, r"scale_bits must be an integer, got True"),
    ({"scale_bits": 4, "bound": 0.0}, r"bound must be a finite number > 0, got 0\.0"),
    ({"scale_bits": 4, "bound": -1.0}, r"bound must be a finite number > 0, got -1\.0"),
    ({"scale_bits": 4, "bound": float("nan")}, r"bound must be a finite number > 0, got nan"),
    ({"scale_bits": 4, "bound": float("inf")}, r"bound must be a finite number > 0, got inf"),
    ({"scale_bits": 4, "bound": "1"}, r"bound must be a finite number > 0, got '1'"),
    ({"scale_bits": 4, "bound": 1.0, "clip": "wrap"}, r"clip must be one of .*, got 'wrap'"),
    ({"scale_bits": 0, "bound": 0.4}, r"rounds to 0 \(bound=0\.4, scale_bits=0\)"),
    ({"scale_bits": 30, "bound": 1e300}, r"below 2\^53"),
    ({"scale_bits": 0, "bound": 2**53}, r"below 2\^53"),
    ({"scale_bits": 0, "bound": 10**400}, r"below 2\^53"),
    ({"scale_bits": 4, "bound": True}, r"bound must be a finite number > 0, got True"),
    ({"scale_bits": 4, "bound": np.float64("nan")}, r"bound must be a finite number > 0"),
])
def test_invalid_parameters(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        Quantizer(**kwargs)


@pytest.mark.parametrize("q, bound, nonnegative", [(1, 1.5, False), (1, 1.5, True),
                                                   (0, 2.0, False), (2, 0.7, False),
                                                   (2, 0.7, True)])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_distance_bound_is_the_brute_force_maximum(q, bound, nonnegative, dim):
    quantizer = Quantizer(scale_bits=q, bound=bound, nonnegative=nonnegative)
    m = quantizer.max_magnitude
    low = 0 if nonnegative else -m
    # Every quantized value the quantizer can produce, found by sweeping the reals finely.
    sweep = np.linspace(-2 * bound - 1, 2 * bound + 1, 4001)
    levels = sorted(set(quantizer.quantize(sweep[None, :]).values[0].tolist()))
    assert levels == list(range(low, m + 1))
    worst = max(sum((a - b) ** 2 for a, b in zip(u, v))
                for u in itertools.product(levels, repeat=dim)
                for v in itertools.product(levels, repeat=dim))
    assert quantizer.distance_bound(dim) == worst


def test_distance_bound_formula_is_exact_for_large_dimensions():
    quantizer = Quantizer(scale_bits=12, bound=1.0)
    extremes = quantizer.quantize(np.array([[1.0] * 784, [-1.0] * 784])).values.astype(object)
    worst = int(((extremes[0] - extremes[1]) ** 2).sum())
    assert quantizer.distance_bound(784) == worst == 784 * (2 * 4096) ** 2
    nonneg = Quantizer(scale_bits=12, bound=1.0, nonnegative=True)
    assert nonneg.distance_bound(784) == 784 * 4096**2


def exact_sq_distance(x, y) -> Fraction:
    return sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(x, y))


@pytest.mark.parametrize("q, bound, nonnegative, dim", [(4, 3.0, False, 5), (8, 1.0, True, 16),
                                                        (0, 10.0, False, 2), (12, 2.0, False, 64)])
def test_error_bound_holds_on_random_in_range_data(q, bound, nonnegative, dim):
    rng = np.random.Generator(np.random.PCG64(5))
    quantizer = Quantizer(scale_bits=q, bound=bound, nonnegative=nonnegative)
    x = rng.uniform(quantizer.lower, bound, size=(40, dim))
    values = quantizer.quantize(x).values
    scale2 = Fraction(4) ** q
    worst_ratio = 0.0
    for i in range(0, 40, 2):
        true = exact_sq_distance(x[i], x[i + 1])
        estimate = Fraction(int(((values[i] - values[i + 1]) ** 2).sum())) / scale2
        error = abs(float(estimate - true))
        bound_here = quantizer.error_bound(dim, distance=math.sqrt(true))
        assert error <= bound_here
        assert error <= quantizer.error_bound(dim)
        worst_ratio = max(worst_ratio, error / bound_here)
    assert worst_ratio > 0  # the data did exercise rounding


def test_error_bound_is_tight():
    # Rounding errors of +1/2 and -1/2 step in every coordinate, in the same direction as
    # the difference: the observed error reaches the bound (up to one ulp of the inputs).
    q, dim = 4, 8
    quantizer = Quantizer(scale_bits=q, bound=16.0)
    step = 2.0**-q
    x = np.full(dim, (3 + 0.5) * step)                        # rounds up by half a step
    y = np.full(dim, np.nextafter(0.5 * step, 0.0))           # rounds down by ~half a step
    true = exact_sq_distance(x, y)
    values = quantizer.quantize(np.array([x, y])).values
    estimate = Fraction(int(((values[0] - values[1]) ** 2).sum())) / Fraction(4) ** q
    error = float(estimate - true)
    bound_here = quantizer.error_bound(dim, distance=math.sqrt(true))
    assert 0.999 * bound_here < error <= bound_here


def test_dequantize_distances_divides_by_4_to_the_q():
    quantizer = Quantizer(scale_bits=5, bound=1.0)
    out = quantizer.dequantize_distances(np.array([[0, 1024], [3, 2**40]]))
    assert out.dtype == np.float64
    assert out.tolist() == [[0.0, 1.0], [3 / 1024, 2.0**30]]

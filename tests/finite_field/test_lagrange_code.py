"""LagrangeCode against galois: encoding matrix, decoding weights, and every refusal.

Two independent oracles, both computing in galois' GF(p):

* interpolation as linear algebra: the values at the betas of the polynomial through
  (alpha_a, y_a) are ``V(betas) @ inv(V(alphas)) @ y`` with Vandermonde matrices V, so the
  encoding matrix is ``(V(betas) inv(V(alphas)))^T``; used for every fixture prime;
* ``galois.lagrange_poly``, for the two extreme fixture primes, 13 and 2^31-1.

Both run galois in its pure-Python mode (tests/oracles.py ``galois_field``): no field is
JIT-compiled in the run.
"""

from __future__ import annotations

import galois
import numpy as np
import pytest

from finite_field import LagrangeCode, ParameterError, min_parties
from oracles import galois_field

#: (l, t, m) configurations; some exceed the small primes (p <= l+t+m) on purpose.
CONFIGS = [(1, 1, 3), (1, 2, 6), (2, 1, 5), (2, 3, 9), (3, 2, 12), (4, 3, 13)]

#: Fixture primes also checked against galois.lagrange_poly.
LAGRANGE_POLY_PRIMES = (13, 2_147_483_647)


def field(p: int):
    return galois_field(p)  # galois caches field classes


def vandermonde(gf, points, columns: int):
    """V[i, k] = points[i]^k in GF(p), by repeated multiplication."""
    x = gf([int(v) % gf.order for v in points])
    matrix = gf.Ones((x.size, columns))
    for k in range(1, columns):
        matrix[:, k] = matrix[:, k - 1] * x
    return matrix


def evaluate(gf, coeffs, points):
    """sum_k coeffs[k] x^k at every point (coefficients in increasing degree)."""
    return vandermonde(gf, points, len(coeffs)) @ gf(coeffs)


def interpolation_matrix(p, points, targets):
    """M with M @ y = values at ``targets`` of the polynomial through (points, y)."""
    gf = field(p)
    k = len(points)
    return vandermonde(gf, targets, k) @ np.linalg.inv(vandermonde(gf, points, k))


def galois_basis_at(points, targets, p):
    """B[i, a] = L_a(targets[i]): the Lagrange basis on ``points`` from galois.lagrange_poly."""
    gf = field(p)
    xs = gf([int(v) % p for v in points])
    columns = []
    for a in range(len(points)):
        unit = gf.Zeros(len(points))
        unit[a] = 1
        coeffs = galois.lagrange_poly(xs, unit).coeffs[::-1]  # increasing degree
        columns.append(evaluate(gf, np.asarray(coeffs), targets))
    return np.stack([np.asarray(c) for c in columns], axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("l, t, m", CONFIGS)
def test_encoding_matrix_matches_galois(prime, l, t, m):
    if prime <= l + t + m:
        with pytest.raises(ParameterError, match=rf"prime must exceed l\+t\+m = {l + t + m} "
                                                 rf"to give distinct points; got {prime}"):
            LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime)
        return
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime)
    assert code.alphas == tuple(range(1, l + t + 1))
    assert code.betas == tuple(range(l + t + 1, l + t + m + 1))
    matrix = code.encoding_matrix()
    assert matrix.shape == (l + t, m) and matrix.dtype == np.int64
    expected = np.asarray(interpolation_matrix(prime, code.alphas, code.betas)).T
    assert np.array_equal(matrix, expected)
    if prime in LAGRANGE_POLY_PRIMES:
        assert np.array_equal(matrix, galois_basis_at(code.alphas, code.betas, prime).T)


def test_encoding_matrix_with_custom_points_matches_galois(prime):
    rng = np.random.Generator(np.random.PCG64(prime % 1000))
    l, t, m = 2, 1, 5
    assert prime > l + t + m
    points = rng.choice(min(prime, 10**9), size=l + t + m, replace=False)
    alphas, betas = points[: l + t].tolist(), points[l + t:].tolist()
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime,
                        alphas=alphas, betas=betas)
    expected = np.asarray(interpolation_matrix(prime, alphas, betas)).T
    assert np.array_equal(code.encoding_matrix(), expected)
    if prime in LAGRANGE_POLY_PRIMES:
        assert np.array_equal(code.encoding_matrix(), galois_basis_at(alphas, betas, prime).T)


def test_vandermonde_evaluation_agrees_with_galois_poly(prime):
    gf = field(prime)
    coeffs = gf.Random(7, seed=prime % 997)
    points = [0, 1, 2, 5, prime - 1]
    poly = galois.Poly(coeffs[::-1])  # galois wants decreasing degree
    assert np.array_equal(evaluate(gf, coeffs, points), poly(gf(points)))


def test_points_are_reduced_mod_p():
    code = LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13,
                        alphas=(14, 2), betas=(16, -9, 5))
    assert code.alphas == (1, 2) and code.betas == (3, 4, 5)
    default = LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13)
    assert np.array_equal(code.encoding_matrix(), default.encoding_matrix())


def test_docstring_example_matches_galois():
    code = LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13)
    assert code.encoding_matrix().tolist() == [[12, 11, 10], [2, 3, 4]]
    assert code.decoding_weights([0, 1, 2]).tolist() == [6, 5, 3]
    assert np.array_equal(code.encoding_matrix(), galois_basis_at((1, 2), (3, 4, 5), 13).T)


def responder_sets(m: int, need: int, rng, count: int = 4):
    """The smallest and largest sets, and random ones in between."""
    sets = [list(range(need)), list(range(m)), list(range(m - need, m))]
    for _ in range(count):
        size = int(rng.integers(need, m + 1))
        sets.append(sorted(rng.choice(m, size=size, replace=False).tolist()))
    return sets


@pytest.mark.parametrize("l, t, m", CONFIGS)
def test_decoding_weights_recover_the_sum_over_the_data_points(prime, l, t, m):
    if prime <= l + t + m:
        return  # refused, see test_encoding_matrix_matches_galois
    gf = field(prime)
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=prime)
    degree = 2 * (l + t - 1)
    assert code.degree == degree and code.min_responders == degree + 1 == min_parties(l, t)
    rng = np.random.Generator(np.random.PCG64(l * 100 + t * 10 + m))
    for trial, responders in enumerate(responder_sets(m, degree + 1, rng)):
        weights = code.decoding_weights(responders)
        assert weights.dtype == np.int64 and weights.shape == (len(responders),)
        assert ((weights >= 0) & (weights < prime)).all()
        # Random polynomials g of degree D over GF(p): one per column.
        coeffs = gf.Random((degree + 1, 4), seed=1000 * trial + prime % 1000)
        at_betas = vandermonde(gf, [code.betas[j] for j in responders], degree + 1) @ coeffs
        at_alphas = vandermonde(gf, code.alphas[:l], degree + 1) @ coeffs
        assert np.array_equal(gf(weights) @ at_betas, np.sum(at_alphas, axis=0))


@pytest.mark.parametrize("p", LAGRANGE_POLY_PRIMES)
def test_decoding_weights_match_galois_lagrange_basis(p):
    l, t, m = 2, 2, 9
    if p <= l + t + m:
        l, t, m = 1, 2, 7
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=p)
    responders = list(range(m))[1:] if m > code.min_responders else list(range(m))
    points = [code.betas[j] for j in responders]
    basis = galois_basis_at(points, code.alphas[:l], p)    # L_j^B(alpha_o), shape (l, |B|)
    expected = np.asarray(np.sum(field(p)(basis), axis=0))
    assert np.array_equal(code.decoding_weights(responders), expected)
    # The same polynomial identity, with galois.Poly doing the evaluation.
    gf = field(p)
    g = galois.Poly.Random(code.degree, seed=11, field=gf)
    weights = gf(code.decoding_weights(responders))
    assert np.sum(weights * g(gf(points))) == np.sum(g(gf(list(code.alphas[:l]))))


def test_decoding_fails_for_a_polynomial_of_too_high_degree():
    # The identity test above can fail: one degree more than D breaks it on D+1 points.
    p, l, t, m = 2_147_483_647, 2, 1, 5
    gf = field(p)
    code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=p)
    coeffs = gf.Random(code.degree + 2, seed=3)
    coeffs[-1] = 1  # degree exactly D + 1
    weights = gf(code.decoding_weights(range(code.min_responders)))
    at_betas = evaluate(gf, coeffs, code.betas[: code.min_responders])
    at_alphas = evaluate(gf, coeffs, code.alphas[:l])
    assert weights @ at_betas != np.sum(at_alphas)


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"segments": 1, "noise_segments": 1, "parties": 2},
     r"^at least 2l\+2t-1 = 3 parties are needed for segments=1, noise_segments=1; got 2$"),
    ({"segments": 2, "noise_segments": 3, "parties": 8},
     r"^at least 2l\+2t-1 = 9 parties are needed for segments=2, noise_segments=3; got 8$"),
    ({"segments": 0, "noise_segments": 1, "parties": 3}, r"segments \(l\) must be >= 1, got 0"),
    ({"segments": 1, "noise_segments": 0, "parties": 3},
     r"noise_segments \(t\) must be >= 1, got 0"),
    ({"segments": 1.0, "noise_segments": 1, "parties": 3},
     r"segments \(l\) must be an integer, got 1\.0"),
    ({"segments": 1, "noise_segments": 1, "parties": True},
     r"parties \(m\) must be an integer, got True"),
])
def test_refuses_bad_counts(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        LagrangeCode(prime=251, **kwargs)


def test_refuses_a_prime_not_above_l_t_m():
    with pytest.raises(ParameterError, match=r"exceed l\+t\+m = 13 .*got 13$"):
        LagrangeCode(segments=1, noise_segments=1, parties=11, prime=13)
    LagrangeCode(segments=1, noise_segments=1, parties=10, prime=13)  # 12 < 13: fine


@pytest.mark.parametrize("prime, message", [(15, r"must be prime, got 15 \(composite\)"),
                                            (2**31 + 11, r"prime in \[3, 2\^31-1\]"),
                                            (13.0, r"integer prime, got float")])
def test_refuses_a_non_prime_modulus(prime, message):
    with pytest.raises(ParameterError, match=message):
        LagrangeCode(segments=1, noise_segments=1, parties=3, prime=prime)


@pytest.mark.parametrize("alphas, betas, message", [
    ((1, 1), None, r"a point is repeated: 1$"),
    (None, (3, 4, 3), r"a point is repeated: 3$"),
    (None, (3, 4, 2 + 251), r"a party point equals an interpolation point.*: 2$"),  # mod p
    (None, (3, 4, 1), r"a party point equals an interpolation point \(that party would see "
                      r"a raw segment\): 1$"),
    (None, (3, 4, 2), r"a party point equals an interpolation point"),
    ((1, 2 + 251), (5, 6, 2), r"a party point equals an interpolation point.*: 2$"),
])
def test_refuses_repeated_points(alphas, betas, message):
    with pytest.raises(ParameterError, match=r"evaluation points must be pairwise distinct mod "
                                             r"p; " + message.lstrip("^")):
        LagrangeCode(segments=1, noise_segments=1, parties=3, prime=251,
                     alphas=alphas, betas=betas)


def test_equal_mod_p_is_a_repeat():
    # 254 = 3 mod 251: a repeated party point, not a raw segment.
    with pytest.raises(ParameterError, match=r"a point is repeated: 3$"):
        LagrangeCode(segments=1, noise_segments=1, parties=3, prime=251, betas=(3, 254, 5))


@pytest.mark.parametrize("alphas, betas, message", [
    ((1, 2, 3), None, r"^expected l\+t = 2 alphas, got 3$"),
    ((1,), None, r"^expected l\+t = 2 alphas, got 1$"),
    (None, (3, 4), r"^expected m = 3 betas, got 2$"),
    (None, (3, 4, 5, 6), r"^expected m = 3 betas, got 4$"),
])
def test_refuses_wrong_point_counts(alphas, betas, message):
    with pytest.raises(ParameterError, match=message):
        LagrangeCode(segments=1, noise_segments=1, parties=3, prime=251,
                     alphas=alphas, betas=betas)


@pytest.mark.parametrize("responders, message", [
    ([0, 1, 2, 3], r"^decoding needs at least 2l\+2t-1 = 5 responding parties, got 4$"),
    ([], r"at least 2l\+2t-1 = 5 responding parties, got 0$"),
    ([0, 1, 2, 3, 3], r"^responding parties must be distinct, got \[0, 1, 2, 3, 3\]$"),
    ([0, 1, 2, 3, 6], r"^responding party indices must be in \[0, 6\), got \[6\]$"),
    ([-1, 0, 1, 2, 3], r"^responding party indices must be in \[0, 6\), got \[-1\]$"),
])
def test_decoding_weights_refuse_bad_responder_sets(responders, message):
    code = LagrangeCode(segments=2, noise_segments=1, parties=6, prime=251)
    with pytest.raises(ParameterError, match=message):
        code.decoding_weights(responders)


def test_unchecked_builds_what_the_constructor_refuses_with_the_same_matrix():
    # For audits: a party point equal to an interpolation point is refused by the
    # constructor, but the unchecked object computes the same encoding matrix, whose
    # column for that party is a unit vector (it receives the raw segment).
    with pytest.raises(ParameterError):
        LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13, betas=(1, 4, 5))
    broken = LagrangeCode.unchecked(1, 1, 3, 13, (1, 2), (1, 4, 5))
    assert broken.encoding_matrix()[:, 0].tolist() == [1, 0]
    good = LagrangeCode(segments=1, noise_segments=1, parties=3, prime=13, betas=(3, 4, 5))
    same = LagrangeCode.unchecked(1, 1, 3, 13, good.alphas, good.betas)
    assert np.array_equal(same.encoding_matrix(), good.encoding_matrix())
    assert same == good

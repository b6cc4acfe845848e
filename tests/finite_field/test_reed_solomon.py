"""Reed-Solomon checks: parity rows, syndromes and decoding against independent oracles.

Oracles: Python integers (syndromes, weighted sums), brute force over error positions with
galois Lagrange interpolation (which evaluators must be removed so that the rest lie on a
polynomial of degree < K), and galois's own ReedSolomon decoder on a full-length code.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import galois
import numpy as np
import pytest

from finite_field import (LagrangeCode, ParameterError, ReedSolomonCheck, checked_sum,
                          decode_sum, encode_rows, evaluate_shares, make_plan, weighted_sum,
                          weighted_sums)
from finite_field._reed_solomon import dual_multipliers
from oracles import parity_rows
from oracles import galois_field

PRIMES = [13, 251, 65521, 2147483629, 2147483647]  # as tests/conftest.py

SMALL = [13, 251, 2147483647]


def _rng(seed):
    return np.random.Generator(np.random.PCG64(seed))


def _points(rng, count, p):
    if p < 2**20:
        return [int(x) for x in rng.choice(p, size=count, replace=False)]
    points = set()
    while len(points) < count:
        points.add(int(rng.integers(0, p)))
    return sorted(points, key=lambda _: rng.random())


def _poly_values(coefficients, points, p):
    return [sum(c * pow(x, i, p) for i, c in enumerate(coefficients)) % p for x in points]


def _codewords(rng, points, dimension, entries, p):
    """(N, entries) values of random polynomials of degree < dimension, Python ints."""
    columns = []
    for _ in range(entries):
        coefficients = [int(rng.integers(0, p)) for _ in range(dimension)]
        columns.append(_poly_values(coefficients, points, p))
    return np.array(columns, dtype=np.int64).T.copy()


def _interpolate_at(xs, ys, x, p):
    """The polynomial through (xs, ys) evaluated at x, with Python integers (Fermat inverse)."""
    total = 0
    for a, (xa, ya) in enumerate(zip(xs, ys)):
        num, den = 1, 1
        for b, xb in enumerate(xs):
            if b != a:
                num = num * (x - xb) % p
                den = den * (xa - xb) % p
        total += ya * num * pow(den, p - 2, p)
    return total % p


def _brute_force(points, received, dimension, p, radius):
    """Smallest set of positions whose removal leaves values on a degree < K polynomial.

    Returns (positions, errors) or None when no set of size <= radius works: interpolates
    through K of the kept points (Python ints) and checks every other point.
    """
    n = len(points)
    for size in range(radius + 1):
        for removed in itertools.combinations(range(n), size):
            kept = [j for j in range(n) if j not in removed]
            basis = kept[:dimension]
            xs, ys = [points[j] for j in basis], [received[j] for j in basis]
            values = [_interpolate_at(xs, ys, x, p) for x in points]
            if all(values[j] == received[j] for j in kept):
                return list(removed), [(received[j] - values[j]) % p for j in removed]
    return None


@pytest.mark.slow
def test_brute_force_oracle_agrees_with_galois():
    # The oracle's interpolation is itself checked against galois.lagrange_poly.
    GF = galois_field(251)
    xs, ys = [3, 9, 27, 81], [5, 200, 17, 0]
    poly = galois.lagrange_poly(GF(xs), GF(ys))
    assert [_interpolate_at(xs, ys, x, 251) for x in range(20)] == \
        [int(v) for v in poly(GF(list(range(20))))]


@pytest.mark.parametrize("p", PRIMES)
def test_honest_codewords_have_zero_syndromes(p):
    rng = _rng(p % 1000)
    for dimension, redundancy in [(1, 1), (3, 2), (5, 4)]:
        n = dimension + redundancy
        if n > p:
            continue
        points = _points(rng, n, p)
        check = ReedSolomonCheck(points=points, dimension=dimension, prime=p)
        values = _codewords(rng, points, dimension, 40, p)
        assert check.syndromes(values).shape == (redundancy, 40)
        assert not check.syndromes(values).any()
        assert check.decode(check.syndromes(values)).clean
        # x^K (degree one too many) is caught: the last check, sum_j v_j beta_j^(r-1) beta_j^K,
        # is the leading coefficient of x^(K+r-1) = x^(N-1), which is 1.
        top = np.array([[pow(x, dimension, p)] for x in points], dtype=np.int64)
        assert check.syndromes(top)[:, 0].any()


@pytest.mark.parametrize("p", PRIMES)
def test_parity_rows_and_syndromes_match_python_ints(p):
    rng = _rng(7 + p % 97)
    n = min(9, p - 1)
    points = _points(rng, n, p)
    check = ReedSolomonCheck(points=points, dimension=4, prime=p)
    expected = parity_rows(points, n - 4, p)
    v = expected[0]  # the dual code's column multipliers
    assert check.parity_rows().tolist() == expected
    assert check.multipliers.tolist() == v
    values = rng.integers(0, p, size=(n, 5, 3))
    syn = check.syndromes(values)
    assert syn.shape == (n - 4, 5, 3)
    for k in range(n - 4):
        for a in range(5):
            for b in range(3):
                want = sum(expected[k][j] * int(values[j, a, b]) for j in range(n)) % p
                assert syn[k, a, b] == want


@pytest.mark.parametrize("p", PRIMES)
def test_weighted_sums_matches_python_ints_and_weighted_sum(p):
    rng = _rng(p % 1009)
    for n_rows in (1, 3, 600):            # 600 rows: several exact chunks for large primes
        weights = rng.integers(0, p, size=(4, n_rows))
        rows = rng.integers(0, p, size=(n_rows, 2500))   # more than one block of columns
        rows[0, :3] = p - 1
        out = weighted_sums(weights, rows, p)
        for q in range(4):
            assert np.array_equal(out[q], weighted_sum(weights[q], rows, p))
        for e in (0, 1, 2, 1777, 2499):
            for q in range(4):
                want = sum(int(weights[q, r]) * int(rows[r, e]) for r in range(n_rows)) % p
                assert out[q, e] == want


def test_weighted_sums_refuses_unreduced_values():
    with pytest.raises(ParameterError, match="reduced"):
        weighted_sums([[1, 1]], [[1, 13], [0, 0]], 13)
    with pytest.raises(ParameterError, match="weights"):
        weighted_sums([[13, 1]], [[1, 1], [0, 0]], 13)
    with pytest.raises(ParameterError, match="one array per weight"):
        weighted_sums([[1, 1, 1]], [[1, 1], [0, 0]], 13)


@pytest.mark.slow
@pytest.mark.parametrize("p", SMALL)
@pytest.mark.parametrize("dimension,redundancy", [(3, 1), (3, 2), (3, 4), (5, 5), (1, 6)])
def test_decoding_matches_brute_force(p, dimension, redundancy):
    rng = _rng(dimension * 100 + redundancy + p % 1000)
    n = dimension + redundancy
    points = _points(rng, n, p)
    check = ReedSolomonCheck(points=points, dimension=dimension, prime=p)
    entries = 30
    honest = _codewords(rng, points, dimension, entries, p)
    received = honest.copy()
    truth = []
    for e in range(entries):
        weight = int(rng.integers(0, redundancy + 1))     # 0..r wrong evaluators
        wrong = sorted(int(j) for j in rng.choice(n, size=weight, replace=False))
        for j in wrong:
            received[j, e] = (received[j, e] + int(rng.integers(1, p))) % p
        truth.append(wrong)
    syn = check.syndromes(received)
    for tau in sorted({0, redundancy // 2, max(0, redundancy // 2 - 1)}):
        result = check.decode(syn, max_errors=tau)
        flagged = set(result.flagged.tolist())
        for e, wrong in enumerate(truth):
            assert (e in flagged) == bool(wrong)          # up to r errors: always detected
            if not wrong:
                continue
            row = result.flagged.tolist().index(e)
            oracle = _brute_force(points, received[:, e].tolist(), dimension, p, tau)
            if len(wrong) <= tau:
                assert oracle is not None and oracle[0] == wrong
                assert result.correctable[row]
                assert sorted(result.positions[row][result.positions[row] >= 0].tolist()) \
                    == wrong
                got = dict(zip(result.positions[row].tolist(), result.errors[row].tolist()))
                assert [got[j] for j in wrong] == oracle[1]
            elif len(wrong) <= redundancy - tau:
                assert oracle is None                     # nothing within the radius
                assert not result.correctable[row]
            else:                                         # beyond the guarantee: agree with
                if result.correctable[row]:               # the bounded-distance oracle
                    assert oracle is not None
                    assert sorted(result.positions[row][result.positions[row] >= 0]
                                  .tolist()) == oracle[0]
                else:
                    assert oracle is None
        fixed = result.corrected(received)
        for e, wrong in enumerate(truth):
            if len(wrong) <= tau:
                assert fixed[:, e].tolist() == honest[:, e].tolist()


@pytest.mark.slow
def test_decoding_agrees_with_galois_reed_solomon():
    # galois's narrow-sense RS(12, k) over GF(13) is our code on the points alpha^i,
    # positions reversed (galois lists the highest-degree coefficient first).
    GF = galois_field(13)
    rng = _rng(5)
    for k in (6, 9):
        rs = galois.ReedSolomon(12, k, field=GF)
        alpha = int(rs.alpha)
        points = [pow(alpha, i, 13) for i in range(12)]
        check = ReedSolomonCheck(points=points, dimension=k, prime=13)
        tau = (12 - k) // 2
        codewords = rs.encode(GF.Random((20, k), seed=k))
        received = np.array(codewords, dtype=np.int64)
        for row in received:
            wrong = rng.choice(12, size=int(rng.integers(0, tau + 1)), replace=False)
            row[wrong] = (row[wrong] + rng.integers(1, 13, size=wrong.size)) % 13
        decoded, n_errors = rs.decode(GF(received), output="codeword", errors=True)
        ours = received[:, ::-1].T.copy()                  # (N, entries) in our order
        result = check.decode(check.syndromes(ours), max_errors=tau)
        assert result.ok
        fixed = result.corrected(ours)
        assert fixed.T[:, ::-1].tolist() == np.array(decoded).tolist()
        counts = np.zeros(20, dtype=np.int64)
        counts[result.flagged] = (result.positions >= 0).sum(axis=1)
        assert counts.tolist() == np.array(n_errors).tolist()


def test_zero_point_is_located():
    # sigma(z) has the factor z when the wrong evaluator sits at beta = 0.
    p, points = 251, [0, 5, 9, 17, 40, 41, 100]
    rng = _rng(3)
    check = ReedSolomonCheck(points=points, dimension=3, prime=p)
    honest = _codewords(rng, points, 3, 10, p)
    received = honest.copy()
    received[0] = (received[0] + 1 + np.arange(10)) % p
    received[4, :5] = (received[4, :5] + 3) % p
    result = check.decode(check.syndromes(received))
    assert result.ok and result.flagged.tolist() == list(range(10))
    assert result.wrong_evaluators() == {0: 10, 4: 5}
    assert np.array_equal(result.corrected(received), honest)


def test_decode_parameters_are_checked():
    check = ReedSolomonCheck(points=(1, 2, 3, 4, 5), dimension=3, prime=13)
    with pytest.raises(ParameterError, match="max_errors"):
        check.decode(np.zeros((2, 1), dtype=np.int64), max_errors=2)
    with pytest.raises(ParameterError, match="checks"):
        check.parity_rows(3)
    with pytest.raises(ParameterError, match="distinct"):
        ReedSolomonCheck(points=(1, 14, 3), dimension=1, prime=13)
    with pytest.raises(ParameterError, match="dimension"):
        ReedSolomonCheck(points=(1, 2, 3), dimension=4, prime=13)


def test_fewer_checks_decode_with_a_smaller_radius():
    # Masked mode keeps s < r checks: the decoder only sees S_1..S_s.
    p, points = 251, list(range(10, 19))          # N = 9, K = 3, r = 6
    rng = _rng(11)
    check = ReedSolomonCheck(points=points, dimension=3, prime=p)
    honest = _codewords(rng, points, 3, 4, p)
    received = honest.copy()
    received[2, 0] = (received[2, 0] + 1) % p                                # one error
    received[[1, 7], 1] = (received[[1, 7], 1] + 9) % p                      # two errors
    s = 3                                         # tau = 1: one located, two detected
    result = check.decode(check.syndromes(received, checks=s))
    assert result.flagged.tolist() == [0, 1]
    assert result.correctable.tolist() == [True, False]
    assert result.positions.tolist() == [[2], [-1]]


@pytest.mark.parametrize("primes", [None, (2147483647,), (65521, 65519)])
def test_checked_sum_decodes_real_distances(oracle, primes):
    # The whole chain: encode, evaluate at every party, corrupt, checked decoding per prime.
    rng = _rng(99)
    x = rng.uniform(-2, 2, size=(7, 3))
    plan = make_plan(3, bound=2.0, scale_bits=8, segments=1, noise_segments=1, parties=7,
                     primes=primes)
    rows = plan.quantizer.quantize(x).values
    shares = encode_rows(plan, rows, rng)
    responders = [0, 1, 2, 4, 5, 6]                  # N = 6, K = 3, r = 3
    per_party = [evaluate_shares(plan, [s[j] for s in shares]) for j in responders]
    sums = []
    for i, code in enumerate(plan.codes):
        evaluations = np.stack([e[i] for e in per_party])
        evaluations[3, 0, 1] = (evaluations[3, 0, 1] + 5) % code.prime     # party 4, entry
        evaluations[3, 1, 0] = (evaluations[3, 1, 0] + 5) % code.prime     # (0,1) both ways
        evaluations[0, 2:, 5] = (evaluations[0, 2:, 5] + 1) % code.prime   # party 0, many
        check = ReedSolomonCheck.for_responders(code, responders)
        result = checked_sum(check, code.decoding_weights(responders), evaluations)
        assert result.ok
        assert result.decoding.wrong_evaluators() == {3: 2, 0: 5}
        sums.append(result.values)
    assert decode_sum(plan, sums).tolist() == oracle.sq_distances(rows)


def test_checked_sum_flags_what_it_cannot_correct():
    code = LagrangeCode(segments=1, noise_segments=1, parties=5, prime=251)
    check = ReedSolomonCheck.for_responders(code, range(5))     # r = 2
    c = code.decoding_weights(range(5))
    rng = _rng(1)
    honest = _codewords(rng, code.betas, 3, 3, 251)
    received = honest.copy()
    received[[0, 3], 2] = (received[[0, 3], 2] + 1) % 251        # two wrong = r
    # Radius 1 would guarantee detection of r - 1 = 1 error only (two may be miscorrected);
    # radius 0 detects every pattern of up to r = 2 wrong evaluators.
    result = checked_sum(check, c, received, max_errors=0)
    assert not result.ok
    assert result.decoding.uncorrectable.tolist() == [2]
    exact = [sum(int(c[j]) * int(honest[j, e]) for j in range(5)) % 251 for e in range(3)]
    assert result.values[:2].tolist() == exact[:2]


def test_dual_multipliers_give_the_leading_coefficient():
    # sum_j v_j f(beta_j) = leading coefficient of the interpolant (degree N-1).
    p, points = 251, [3, 8, 20, 77, 100]
    v = dual_multipliers(points, p)
    f = [5, 0, 2, 9, 11]               # degree 4 = N - 1, leading coefficient 11
    assert sum(a * b for a, b in zip(v, _poly_values(f, points, p))) % p == 11


NOJIT = r"""
import json, sys
import numpy as np
import numba
from finite_field import ReedSolomonCheck
import finite_field._reed_solomon as rs
args = json.loads(sys.argv[1])
check = ReedSolomonCheck(points=args["points"], dimension=args["k"], prime=args["p"])
received = np.array(args["received"], dtype=np.int64)
result = check.decode(check.syndromes(received))
from finite_field import MaskGroup, integrity_upload
group = MaskGroup(members=(0, 1, 2), vector=(1, args["p"] - 2, 5))
upload = integrity_upload(np.array([args["p"] - 1, 3]), [group], 1, {0: np.array([7, args["p"] - 1])},
                          args["p"])
print(json.dumps({"jit": isinstance(rs._decode_kernel, numba.core.dispatcher.Dispatcher),
                  "upload": upload.tolist(),
                  "positions": result.positions.tolist(), "errors": result.errors.tolist(),
                  "ok": result.ok, "flagged": result.flagged.tolist()}))
"""


def test_decoder_source_is_right_without_jit():
    p, points, k = 2147483647, [11, 12, 13, 14, 15, 16, 17], 3
    rng = _rng(21)
    honest = _codewords(rng, points, k, 3, p)
    received = honest.copy()
    received[1, 0] = (received[1, 0] + 12345) % p
    received[[2, 6], 2] = (received[[2, 6], 2] + 7) % p
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    payload = json.dumps({"points": points, "k": k, "p": p, "received": received.tolist()})
    out = subprocess.run([sys.executable, "-c", NOJIT, payload], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["jit"] is False
    assert report["ok"] and report["flagged"] == [0, 2]
    assert report["positions"] == [[1, -1], [2, 6]]
    assert report["errors"] == [[12345, 0], [7, 7]]
    assert report["upload"] == [(p - 1 + (p - 2) * 7) % p, (3 + (p - 2) * (p - 1)) % p]


@pytest.mark.parametrize("scale_bits", [8, 16])          # one prime, two primes
def test_transparent_decoding_over_many_seeds(oracle, scale_bits):
    from finite_field import decode_evaluations
    for seed in range(12):
        rng = _rng(1000 + seed)
        x = rng.uniform(-8, 8, size=(5, 3))
        plan = make_plan(3, bound=8.0, scale_bits=scale_bits, segments=1, noise_segments=2,
                         parties=8)                      # K = 5, r = 3
        assert len(plan.primes) == (1 if scale_bits == 8 else 2)
        rows = plan.quantizer.quantize(x).values
        shares = encode_rows(plan, rows, rng)
        evaluations = [evaluate_shares(plan, [s[j] for s in shares]) for j in range(8)]
        liar = int(rng.integers(0, 8))
        sums = []
        for i, code in enumerate(plan.codes):
            raw = np.stack([e[i] for e in evaluations])
            honest = decode_evaluations(code, range(8), raw)
            assert honest.decoding.clean                   # no false accusation
            corrupted = raw.copy()
            hit = rng.random((5, 5)) < 0.4
            hit[0, 1] = True
            corrupted[liar][hit] = (corrupted[liar][hit] + rng.integers(1, code.prime,
                                                                       hit.sum())) % code.prime
            result = decode_evaluations(code, range(8), corrupted)
            assert result.ok and set(result.decoding.wrong_evaluators()) == {liar}
            assert np.array_equal(result.values, honest.values)
            assert decode_evaluations(code, range(8), corrupted, max_errors=0).decoding \
                .flagged.size == int(hit.sum())
            sums.append(result.values)
        assert decode_sum(plan, sums).tolist() == oracle.sq_distances(rows)

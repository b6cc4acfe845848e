"""Encoding (encode_blocks, encode_rows) against galois, and t-privacy of the shares.

The privacy tests are chi-square goodness-of-fit tests with fixed seeds. Each family of
tests splits a total false-positive rate of FAMILY_ALPHA = 1e-3 evenly over its members
(Bonferroni): with fresh seeds, a correct encoder would fail any of them with probability
at most 1e-3.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from scipy import stats

from finite_field import (InputError, encode_blocks, encode_rows, make_plan,
                          uniform_elements)
from oracles import galois_field

FAMILY_ALPHA = 1e-3


def vandermonde(gf, points, columns: int):
    x = gf([int(v) % gf.order for v in points])
    matrix = gf.Ones((x.size, columns))
    for k in range(1, columns):
        matrix[:, k] = matrix[:, k - 1] * x
    return matrix


def interpolation_matrix(p, points, targets):
    """M with M @ y = values at ``targets`` of the polynomial through (points, y), in GF(p)."""
    gf = galois_field(p)
    k = len(points)
    return vandermonde(gf, targets, k) @ np.linalg.inv(vandermonde(gf, points, k))


# --- encode_blocks --------------------------------------------------------------------------

@pytest.mark.slow
def test_encode_blocks_matches_galois_matrix_product(prime, seeded_source):
    gf = galois_field(prime)
    l_t, m, n, s = 4, 7, 6, 5
    matrix = uniform_elements(prime, (l_t, m), seeded_source)
    blocks = uniform_elements(prime, (n, l_t, s), seeded_source)
    blocks[0] = prime - 1  # the largest products
    matrix[:, 0] = prime - 1
    out = encode_blocks(matrix, blocks, prime)
    assert out.shape == (m, n, s) and out.dtype == np.int64
    stacked = gf(blocks.transpose(1, 0, 2).reshape(l_t, n * s))
    expected = (gf(matrix).T @ stacked).reshape(m, n, s)
    assert np.array_equal(out, np.asarray(expected))


def test_encode_blocks_matches_python_integers():
    p = 2_147_483_647
    matrix = [[p - 1, 2], [p - 2, p - 1], [1, p - 3]]
    blocks = [[[p - 1, 0], [p - 1, 1], [5, p - 1]]]
    out = encode_blocks(np.array(matrix), np.array(blocks), p)
    for j in range(2):
        for c in range(2):
            assert out[j, 0, c] == sum(matrix[a][j] * blocks[0][a][c] for a in range(3)) % p


# --- encode_rows ----------------------------------------------------------------------------

@pytest.mark.parametrize("l, t, m, dim", [(1, 1, 3, 4), (2, 1, 6, 5), (3, 2, 9, 7), (4, 3, 13, 8)])
def test_encode_rows_shares_interpolate_to_the_data(l, t, m, dim, seeded_source):
    # Two primes (the bound needs them), l not dividing d (zero padding), negative values.
    plan = make_plan(dim, bound=4.0, scale_bits=24, segments=l, noise_segments=t, parties=m)
    assert len(plan.primes) == 2
    rng = np.random.Generator(np.random.PCG64(dim))
    rows = plan.quantizer.quantize(rng.uniform(-5, 5, size=(6, dim))).values
    rows[0] = plan.quantizer.max_magnitude
    rows[1] = -plan.quantizer.max_magnitude
    shares = encode_rows(plan, rows, seeded_source)
    s = plan.segment_length
    padded = np.zeros((rows.shape[0], l * s), dtype=object)
    padded[:, :dim] = rows.astype(object)
    assert len(shares) == len(plan.primes)
    for code, per_party in zip(plan.codes, shares):
        p = code.prime
        assert len(per_party) == m
        for share in per_party:
            assert share.shape == (rows.shape[0], s) and share.dtype == np.int64
            assert ((share >= 0) & (share < p)).all()
        gf = galois_field(p)
        # Any l+t parties determine the polynomial: interpolate from a random coalition.
        coalition = sorted(rng.choice(m, size=l + t, replace=False).tolist())
        stacked = gf(np.stack([per_party[j].reshape(-1) for j in coalition]))
        betas = [code.betas[j] for j in coalition]
        at_alphas = interpolation_matrix(p, betas, code.alphas) @ stacked
        data = np.asarray(at_alphas[:l]).reshape(l, rows.shape[0], s).transpose(1, 0, 2)
        assert np.array_equal(data.reshape(rows.shape[0], l * s), (padded % p).astype(np.int64))
        # ... and it reproduces every other party's share (degree <= l+t-1).
        at_betas = interpolation_matrix(p, betas, code.betas) @ stacked
        for j in range(m):
            assert np.array_equal(np.asarray(at_betas[j]), per_party[j].reshape(-1))
        # The noise segments (values at the noise points) are not zero.
        assert np.asarray(at_alphas[l:]).any()


def test_encode_rows_uses_independent_noise_per_prime(seeded_source):
    plan = make_plan(3, bound=4.0, scale_bits=24, parties=3)
    assert len(plan.primes) == 2
    rows = np.zeros((50, 3), dtype=np.int64)
    shares = encode_rows(plan, rows, seeded_source)
    # With zero data, party 0's share is z * L_2(beta_1): the noise differs between primes.
    noise = []
    for code, per_party in zip(plan.codes, shares):
        scale = int(code.encoding_matrix()[1, 0])
        noise.append(per_party[0] * pow(scale, -1, code.prime) % code.prime)
    assert not np.array_equal(noise[0], noise[1])


def test_encode_rows_default_source_is_the_os_csprng(monkeypatch):
    plan = make_plan(2, bound=4.0, scale_bits=4, parties=3)
    calls = []
    real = os.urandom
    monkeypatch.setattr(os, "urandom", lambda n: calls.append(n) or real(n))
    rows = np.array([[1, 2], [3, -4]])
    first = encode_rows(plan, rows)
    assert calls
    second = encode_rows(plan, rows)
    assert not np.array_equal(first[0][0], second[0][0])   # fresh noise every time


def test_encode_rows_is_reproducible_with_a_seeded_source():
    plan = make_plan(2, bound=4.0, scale_bits=4, parties=3)
    rows = np.array([[1, 2], [3, -4]])
    a = encode_rows(plan, rows, np.random.Generator(np.random.PCG64(1)))
    b = encode_rows(plan, rows, np.random.Generator(np.random.PCG64(1)))
    assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0]))


@pytest.mark.parametrize("rows, message", [
    (np.zeros((2, 3), dtype=np.int64), r"^party 'a': rows must have shape \(n, 2\), got \(2, 3\)$"),
    (np.zeros(2, dtype=np.int64), r"rows must have shape \(n, 2\), got \(2,\)"),
    (np.zeros((0, 2), dtype=np.int64), r"^party 'a': no rows to encode \(empty party\)$"),
    (np.array([[65, 0]]), r"^party 'a': quantized values must lie in \[-64, 64\]$"),
    (np.array([[0, -65]]), r"quantized values must lie in \[-64, 64\]"),
])
def test_encode_rows_refuses_bad_rows(rows, message):
    plan = make_plan(2, bound=4.0, scale_bits=4, parties=3)
    with pytest.raises(InputError, match=message):
        encode_rows(plan, rows, party="a")


# --- t-privacy ------------------------------------------------------------------------------

class SmallNoise:
    """Broken on purpose: every 32-bit word is 0 or 1, so the 'noise' takes two values."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def bytes(self, n: int) -> bytes:
        return self.rng.integers(0, 2, size=n // 4, dtype="<u4").tobytes()


def coalition_pvalue(shares, coalition, p: int) -> float:
    """Chi-square p-value of the coalition's joint view against uniform on GF(p)^|C|."""
    view = np.stack([shares[j].reshape(-1) for j in coalition], axis=1)
    cells = np.zeros(view.shape[0], dtype=np.int64)
    for column in view.T:
        cells = cells * p + column
    counts = np.bincount(cells, minlength=p ** len(coalition))
    return float(stats.chisquare(counts).pvalue)


P_SMALL = 13
# (l, t, m, dim, bound, rows per data set): the coalition's view has 13^t cells; rows are
# chosen for ~120 expected counts per cell.
PRIVACY_CONFIGS = [(1, 2, 5, 1, 3.0, 20_000), (2, 1, 5, 2, 2.0, 1600)]
DATA_SETS = ("zeros", "max", "mixed")
N_PRIVACY_TESTS = sum(len(list(itertools.combinations(range(m), t))) * len(DATA_SETS)
                      for _, t, m, *_ in PRIVACY_CONFIGS)
ALPHA_EACH = FAMILY_ALPHA / N_PRIVACY_TESTS


def privacy_plan(l, t, m, dim, bound):
    # Non-negative values in [0, bound], q = 0: distances <= d * bound^2 < 13.
    return make_plan(dim, bound=bound, scale_bits=0, segments=l, noise_segments=t,
                     parties=m, nonnegative=True, primes=[P_SMALL])


def privacy_rows(kind: str, n: int, dim: int, bound: float) -> np.ndarray:
    if kind == "zeros":
        return np.zeros((n, dim), dtype=np.int64)
    if kind == "max":
        return np.full((n, dim), int(bound), dtype=np.int64)
    return np.random.Generator(np.random.PCG64(3)).integers(0, int(bound) + 1, size=(n, dim))


@pytest.mark.parametrize("kind", DATA_SETS)
@pytest.mark.parametrize("l, t, m, dim, bound, n", PRIVACY_CONFIGS)
def test_every_t_coalition_sees_uniform_shares(l, t, m, dim, bound, n, kind):
    plan = privacy_plan(l, t, m, dim, bound)
    rows = privacy_rows(kind, n, dim, bound)
    seed = 17 + DATA_SETS.index(kind)  # independent noise for each data set
    shares = encode_rows(plan, rows, np.random.Generator(np.random.PCG64(seed)))[0]
    for coalition in itertools.combinations(range(m), t):
        assert coalition_pvalue(shares, coalition, P_SMALL) > ALPHA_EACH, coalition


@pytest.mark.parametrize("l, t, m, dim, bound, n", PRIVACY_CONFIGS)
def test_the_uniformity_test_flags_noise_from_a_small_range(l, t, m, dim, bound, n):
    plan = privacy_plan(l, t, m, dim, bound)
    rows = privacy_rows("mixed", n, dim, bound)
    shares = encode_rows(plan, rows, SmallNoise(17))[0]
    for coalition in itertools.combinations(range(m), t):
        assert coalition_pvalue(shares, coalition, P_SMALL) < ALPHA_EACH, coalition


def test_the_uniformity_test_flags_a_coalition_of_t_plus_1():
    # l = t = 1: two parties see (s L_1(b1) + z L_2(b1), s L_1(b2) + z L_2(b2)); with all-zero
    # data that is z times a fixed vector: 13 of the 169 cells. The bound t is tight.
    plan = privacy_plan(1, 1, 3, 1, 3.0)
    shares = encode_rows(plan, np.zeros((20_000, 1), dtype=np.int64),
                         np.random.Generator(np.random.PCG64(17)))[0]
    for single in range(3):
        assert coalition_pvalue(shares, (single,), P_SMALL) > FAMILY_ALPHA / 6
    for pair in itertools.combinations(range(3), 2):
        assert coalition_pvalue(shares, pair, P_SMALL) < FAMILY_ALPHA / 6


def test_a_coalition_of_l_plus_t_reads_the_data():
    # The other side of the bound: l+t parties interpolate f and read every segment.
    l, t, m = 2, 1, 5
    plan = privacy_plan(l, t, m, 2, 2.0)
    rows = privacy_rows("mixed", 50, 2, 2.0)
    shares = encode_rows(plan, rows)[0]
    code = plan.codes[0]
    gf = galois_field(P_SMALL)
    coalition = [1, 3, 4]
    stacked = gf(np.stack([shares[j][:, 0] for j in coalition]))
    at_alphas = interpolation_matrix(P_SMALL, [code.betas[j] for j in coalition],
                                     code.alphas[:l]) @ stacked
    assert np.array_equal(np.asarray(at_alphas).T, rows)

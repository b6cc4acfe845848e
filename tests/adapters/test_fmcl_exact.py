"""FMCL's exact secure path for arbitrary sample counts (the level-set code, issue 24).

Every expectation is recomputed outside the module: sums of squares by brute force, the
overlap ``sum_c min(n_ic / n_i, n_jc / n_j)`` in Python fractions from the class counts,
the cosines from the quantized unit means in Python integers, and the FMCL formula of
docs/adapters.md in fractions, rounded to float once.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction as F

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError
from omnifc.adapters import fmcl

EPS, BETA = F(1, 1000), F(100)


def _fewest_squares(v):
    """Least number of positive squares summing to v (brute force)."""
    squares = [a * a for a in range(1, math.isqrt(v) + 1)]
    for k in (1, 2, 3, 4):
        if any(sum(c) == v for c in itertools.combinations_with_replacement(squares, k)):
            return k
    raise AssertionError


def test_sum_of_squares_is_fewest_and_exact():
    for v in range(1, 400):
        parts = fmcl.sum_of_squares(v)
        assert sum(p * p for p in parts) == v
        assert len(parts) == _fewest_squares(v)
        assert list(parts) == sorted(parts, reverse=True) and min(parts) >= 1
    for v in (2**16 + 1, 2**40 + 5, 9163427 * 12345):     # greedy head above 2^16
        parts = fmcl.sum_of_squares(v)
        assert sum(p * p for p in parts) == v and max(parts) <= math.isqrt(v)
    with pytest.raises(ParameterError, match="positive"):
        fmcl.sum_of_squares(0)


@pytest.mark.parametrize("counts", [[2, 3], [7, 13], [4, 6, 6, 9]])
def test_level_code_inner_product_is_the_min_of_any_two_weights(counts):
    code = fmcl.level_code(counts)
    assert code.scale == math.lcm(*counts)
    values = sorted({k * code.scale // n for n in counts for k in range(n + 1)})
    assert list(code.levels) == values[1:]
    for a, b in itertools.product(values, repeat=2):
        assert int(code.code(a) @ code.code(b)) == min(a, b)


def test_level_rows_carry_the_overlap_exactly():
    code = fmcl.level_code([7, 13, 20])
    counts = [np.array([3, 0, 4]), np.array([0, 13, 0]), np.array([5, 5, 10])]
    unit = np.ones((3, 2), dtype=np.int64)
    rows = [fmcl.level_rows(unit, c, code) for c in counts]
    for (zi, ti), (zj, tj), ci, cj in zip(rows, rows[1:] + rows[:1], counts, counts[1:] + counts[:1]):
        omega = sum(min(F(int(a), int(ci.sum())), F(int(b), int(cj.sum()))) for a, b in zip(ci, cj))
        assert F(int(ti @ tj), code.scale) == omega
        assert F(int(zi @ zj), 2 * code.scale) == omega        # <unit, unit> = 2 per class
    with pytest.raises(ParameterError, match="not one of the counts"):
        fmcl.level_rows(unit, np.array([1, 1, 1]), code)


# -- the bounds of docs/adapters.md ---------------------------------------------------------

def test_level_count_bound_at_and_past():
    counts, scale = fmcl.check_level_counts([fmcl.MAX_LEVELS])        # exactly 2^20 slots
    assert scale == 2**20
    with pytest.raises(ParameterError, match="distinct sample counts sum to 1048577"):
        fmcl.check_level_counts([fmcl.MAX_LEVELS + 1])


def test_lcm_bound_at_and_past():
    below = [7, 31, 73, 151, 631, 23311]                 # lcm = 2^45 - 1, the largest odd one
    assert fmcl.check_level_counts(below)[1] == 2**45 - 1 <= fmcl.MAX_LEVEL_SCALE
    with pytest.raises(ParameterError, match=r"above 2\^45"):
        fmcl.check_level_counts(below + [2])             # lcm = 2^46 - 2


def test_scale_bits_bound_at_and_past():
    code = fmcl.level_code([7, 13])
    w, a = code.width, code.largest_part

    def largest_dim(bits):
        return (2**63 - 1) // (w * (2 * a * 2**bits) ** 2)

    assert fmcl.exact_scale_bits(code, 1, largest_dim(16)) == 16
    assert fmcl.exact_scale_bits(code, 1, largest_dim(16) + 1) == 15
    assert fmcl.exact_scale_bits(code, 1, largest_dim(8)) == 8
    with pytest.raises(ParameterError, match="s >= 8"):
        fmcl.exact_scale_bits(code, 1, largest_dim(8) + 1)


# -- secure == exact fractions, labels == the plaintext pipeline's --------------------------

def _round_half_up(x):
    return math.floor(x + 0.5)


def _oracle(means, counts, bits):
    """FMCL distances (no fill) in fractions from class counts and quantized unit means."""
    n, c, _ = means.shape
    s = 2**bits
    q = [[[max(-s, min(s, _round_half_up(float(v) * s)))
           for v in (means[i, k] / np.linalg.norm(means[i, k]))] if counts[i][k] else None
          for k in range(c)] for i in range(n)]
    d = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        num = om = F(0)
        for k in range(c):
            m = min(F(int(counts[i][k]), int(sum(counts[i]))), F(int(counts[j][k]), int(sum(counts[j]))))
            if m:
                inner = sum(a * b for a, b in zip(q[i][k], q[j][k]))
                num += m * (1 - F(inner, s * s))
                om += m
        d[i, j] = d[j, i] = float(max(num, F(0)) / (om + EPS) * min(1 / om, BETA)) if om else math.inf
    return d


def _varied_clients(counts, *, n_domains=2, n_classes=3, dim=4, seed=0):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=len(counts),
                                              n_classes=n_classes, dim=dim, samples=max(counts),
                                              alpha=0.5, seed=seed)
    cut = [(x[:counts[i % len(counts)]], y[:counts[i % len(counts)]])
           for i, (x, y) in enumerate(clients)]
    means = np.stack([fmcl.signature(x, y, n_classes)[0] for x, y in cut])
    counts_ = np.stack([fmcl.class_counts(y, n_classes) for _, y in cut])
    return means, counts_, domains


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exact_path_with_counts_7_13_101_997_equals_fractions_and_plaintext_labels():
    means, counts, domains = _varied_clients([7, 13, 101, 997])
    assert math.lcm(*counts.sum(axis=1)) == 9163427 > 4096   # exact_resolution refuses this
    with pytest.raises(ParameterError, match="limit"):
        fmcl.exact_resolution(counts.sum(axis=1))
    code = fmcl.level_code(counts.sum(axis=1))
    bits = fmcl.exact_scale_bits(code, 3, 4)
    assert bits == 16
    secure, overlap = fmcl.exact_fmcl_distances(means, counts, parties=np.arange(8) % 3,
                                                fill=False, return_overlap=True)
    oracle = _oracle(means, counts, bits)
    assert np.array_equal(secure, oracle)                    # bit for bit, inf where Omega = 0
    w = counts / counts.sum(axis=1, keepdims=True)
    tot = counts.sum(axis=1)
    omega = [[float(sum(min(F(int(a), int(tot[i])), F(int(b), int(tot[j])))
                        for a, b in zip(counts[i], counts[j]))) for j in range(8)] for i in range(8)]
    assert overlap.tolist() == omega                         # the exact overlap, rounded once
    plain = fmcl.exact_fmcl_distances(means, counts, secure=False, fill=False)
    assert np.array_equal(plain, secure)
    filled = fmcl.exact_fmcl_distances(means, counts, parties=np.arange(8) % 3)
    ours = fmcl.fmcl_server(filled)
    theirs = fmcl.fmcl_server(fmcl.fmcl_distances(means, w))
    assert ours.n_clusters == theirs.n_clusters
    assert np.array_equal(ours.labels, theirs.labels)
    assert adjusted_rand_score(domains, ours.labels) == 1.0


def test_exact_path_plaintext_matches_fractions_small():
    means, counts, _ = _varied_clients([3, 5, 8], n_classes=2, dim=3, seed=4)
    got = fmcl.exact_fmcl_distances(means, counts, secure=False, fill=False, scale_bits=12)
    assert np.array_equal(got, _oracle(means, counts, 12))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_federated_fmcl_is_exact_with_varied_counts_and_never_falls_back():
    from omnifc import fl

    data = fl.make_federated("digits", shift="concept", n_groups=2, clients_per_group=4,
                             train_samples=150, test_samples=60, seed=1)
    keep = [150, 97, 131, 150, 64, 150, 113, 150]            # lcm 26 795 850 > 4096
    data.clients = [dataclasses.replace(c, x_train=c.x_train[:k], y_train=c.y_train[:k])
                    for c, k in zip(data.clients, keep)]
    secure = fmcl.run_federated_fmcl(data, rounds=2, secure=True)
    plain = fmcl.run_federated_fmcl(data, rounds=2, secure=False)
    assert secure["resolution"] == math.lcm(*keep)
    assert np.array_equal(secure["distances"], plain["distances"])
    assert np.array_equal(secure["labels"], plain["labels"])
    assert secure["n_clusters"] == 2
    assert adjusted_rand_score(data.groups, secure["labels"]) == 1.0
    encode = fmcl.fixed_encoder(data.n_features, 16, seed=0)       # the plaintext pipeline
    sig = [fmcl.signature(encode(c.x_train), c.y_train, data.n_classes) for c in data.clients]
    direct = fmcl.fmcl_server(fmcl.fmcl_distances(np.stack([m for m, _ in sig]),
                                                  np.stack([w for _, w in sig])))
    assert np.array_equal(secure["labels"], direct.labels)


# -- the grouped level code: exact weights when the counts' lcm is too large for one code ----

def _expected_pair_scale(groups, g, h):
    """<t_i, t_j> / Omega_ij, from the groups alone: lcm of the two groups' counts, or the
    sum over every group k of lcm(G_g u G_k) within one group."""
    if g != h:
        return math.lcm(*groups[g], *groups[h])
    return sum(math.lcm(*groups[g], *groups[k]) for k in range(len(groups)))


@pytest.mark.parametrize("limit", [1, 6, 35, 10**6])
def test_grouped_code_inner_product_is_the_pair_scale_times_the_min(limit):
    counts = [2, 3, 5, 7, 3]
    code = fmcl.grouped_level_code(counts, limit)
    flat = [n for group in code.groups for n in group]
    assert flat == sorted(set(counts))                       # consecutive, every count once
    for group in code.groups:
        assert len(group) == 1 or math.lcm(*group) <= limit
    for ni, nj in itertools.product(sorted(set(counts)), repeat=2):
        g, h = code.group_of(ni), code.group_of(nj)
        scale = _expected_pair_scale(code.groups, g, h)
        assert code.pair_scale(ni, nj) == scale
        for a, b in itertools.product(range(ni + 1), range(nj + 1)):
            got = int(code.class_code(ni, a) @ code.class_code(nj, b))
            assert F(got, scale) == min(F(a, ni), F(b, nj))
    assert not code.accepts(4)


def test_group_counts_at_the_limit():
    assert fmcl.group_counts([6, 4, 3], 12) == ((3, 4, 6),)          # lcm 12 <= 12
    assert fmcl.group_counts([6, 4, 3], 11) == ((3,), (4,), (6,))    # lcm(3, 4) = 12 > 11
    assert fmcl.group_counts([2, 3, 4, 5], 12) == ((2, 3, 4), (5,))   # 60 > 12
    assert fmcl.group_counts([5, 7], 1) == ((5,), (7,))


def _clients_with_counts(counts, *, n_classes=3, dim=4, seed=0):
    """Two domains, clients cut to ``counts`` rows (the first half in domain 0)."""
    half = (len(counts) + 1) // 2
    clients, domains = fmcl.synthetic_domains(n_domains=2, clients_per_domain=half,
                                              n_classes=n_classes, dim=dim,
                                              samples=max(counts), alpha=0.5, seed=seed)
    keep = list(range(half)) + list(range(half, half + len(counts) - half))
    cut = [(clients[i][0][:k], clients[i][1][:k]) for i, k in zip(keep, counts)]
    means = np.stack([fmcl.signature(x, y, n_classes)[0] for x, y in cut])
    class_counts = np.stack([fmcl.class_counts(y, n_classes) for _, y in cut])
    return means, class_counts, domains[keep], cut


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_secure_path_with_prime_counts_beyond_one_code_equals_fractions_bit_for_bit():
    primes = [101, 103, 107, 109, 113, 127, 131]
    means, counts, domains, cut = _clients_with_counts(primes)
    assert list(counts.sum(axis=1)) == primes
    assert math.lcm(*primes) > fmcl.MAX_LEVEL_SCALE           # one level code refuses these
    with pytest.raises(ParameterError, match="above 2"):
        fmcl.level_code(primes)
    code, bits = fmcl.exact_code(primes, 3, 4)
    assert isinstance(code, fmcl.GroupedLevelCode) and bits == 16
    secure, overlap = fmcl.exact_fmcl_distances(means, counts, parties=np.arange(7) % 3,
                                                fill=False, return_overlap=True)
    assert np.array_equal(secure, _oracle(means, counts, bits))   # bit for bit
    omega = [[float(sum(min(F(int(a), primes[i]), F(int(b), primes[j]))
                        for a, b in zip(counts[i], counts[j]))) for j in range(7)]
             for i in range(7)]
    assert overlap.tolist() == omega
    plain = fmcl.exact_fmcl_distances(means, counts, secure=False, fill=False)
    assert np.array_equal(plain, secure)
    # labels: the secure pipeline's equal the plaintext pipeline's (direct float formula)
    w = counts / counts.sum(axis=1, keepdims=True)
    ours = fmcl.fmcl_server(fmcl.exact_fmcl_distances(means, counts, parties=np.arange(7) % 3))
    theirs = fmcl.fmcl_server(fmcl.fmcl_distances(means, w))
    assert ours.n_clusters == theirs.n_clusters
    assert np.array_equal(ours.labels, theirs.labels)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_random_counts_far_beyond_one_code_are_exact():
    rng = np.random.default_rng(24)
    counts_list = [int(v) for v in rng.integers(100, 400, size=9)]
    assert math.lcm(*counts_list) > 2**50 > fmcl.MAX_LEVEL_SCALE
    means, counts, _, _ = _clients_with_counts(counts_list, n_classes=2, dim=3, seed=3)
    code, bits = fmcl.exact_code(counts_list, 2, 3)
    got = fmcl.exact_fmcl_distances(means, counts, secure=False, fill=False)
    assert np.array_equal(got, _oracle(means, counts, bits))


def _primes_from(start, count):
    out, p = [], start
    while len(out) < count:
        if all(p % q for q in range(2, math.isqrt(p) + 1)):
            out.append(p)
        p += 1
    return out


def test_exact_code_refuses_before_any_share_when_no_code_fits():
    big = _primes_from(5000, 20)         # lcm ~ 2^246; one count per group: 20 x 100k slots
    assert sum(big) * len(big) > fmcl.MAX_LEVELS
    with pytest.raises(ParameterError, match="no exact code fits"):
        fmcl.exact_code(big, 3, 4)
    means = np.ones((20, 3, 4))
    counts = np.array([[p - 2, 1, 1] for p in big])
    with pytest.raises(ParameterError, match="no exact code fits"):
        fmcl.exact_fmcl_distances(means, counts, parties=np.arange(20) % 3)

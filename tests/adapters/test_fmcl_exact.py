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

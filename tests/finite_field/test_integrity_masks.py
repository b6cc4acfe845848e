"""Integrity masks: exact cancellation in W, uniformity on W^perp, coalition leakage.

Oracles: galois matrix arithmetic (null spaces, ranks, products), Python integers, exact
enumeration of every mask coefficient over a small field.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finite_field import (LagrangeCode, ParameterError, ReedSolomonCheck, checked_sum,
                          choose_mask_groups, cyclic_groups, decode_sum, encode_rows,
                          evaluate_shares, exposed_coalitions, integrity_rows,
                          integrity_upload, make_plan,
                          mask_groups, null_space, party_mask, rank_mod, spans_complement,
                          uniform_elements)
from oracles import galois_field

P31 = 2147483647


def _rng(seed):
    return np.random.Generator(np.random.PCG64(seed))


def _rows(parties, l, t, s, p, responders=None):
    code = LagrangeCode(segments=l, noise_segments=t, parties=parties, prime=p)
    responders = list(range(parties)) if responders is None else responders
    check = ReedSolomonCheck.for_responders(code, responders)
    return integrity_rows(code.decoding_weights(responders), check.parity_rows(s), p)


@pytest.mark.parametrize("p", [13, 251, P31])
def test_null_space_and_rank_agree_with_galois(p):
    GF = galois_field(p)
    rng = _rng(p % 1000)
    for shape in [(2, 3), (3, 5), (4, 4), (2, 6)]:
        for _ in range(5):
            a = rng.integers(0, p, size=shape)
            if rng.random() < 0.3:
                a[-1] = a[0] * 2 % p              # force dependence sometimes
            z = null_space(a, p)
            assert rank_mod(a, p) == np.linalg.matrix_rank(GF(a))
            assert z.shape == (shape[1] - rank_mod(a, p), shape[1])
            if z.size:
                assert not np.array((GF(a) @ GF(z).T)).any()
                assert rank_mod(z, p) == z.shape[0]
                assert all(row[np.flatnonzero(row)[0]] == 1 for row in z)


@pytest.mark.parametrize("p", [251, P31])
@pytest.mark.parametrize("parties,l,t,s,colluders",
                         [(7, 1, 1, 1, 1), (7, 1, 1, 3, 1), (9, 1, 2, 2, 2),
                          (10, 2, 1, 2, 2), (9, 2, 1, 1, 3)])
def test_groups_span_the_complement_and_masks_cancel_in_w(p, parties, l, t, s, colluders):
    GF = galois_field(p)
    rows = _rows(parties, l, t, s, p)
    groups = choose_mask_groups(rows, p, colluders)
    assert groups == choose_mask_groups(rows, p, colluders)        # deterministic
    assert all(len(g.members) == s + 2 for g in groups)
    dense = np.array([g.dense(parties) for g in groups])
    # Every group vector is orthogonal to W; together they span W^perp (dim N - s - 1).
    assert not np.array(GF(rows) @ GF(dense).T).any()
    assert np.linalg.matrix_rank(GF(dense)) == parties - s - 1
    assert np.linalg.matrix_rank(GF(rows)) == s + 1
    # Exhaustive: no coalition of up to `colluders` parties learns more than W allows.
    assert exposed_coalitions(rows, p, groups, colluders) == []
    # Masks: each party sums its own groups only; W cancels them exactly.
    entries = 17
    rho = {i: uniform_elements(p, entries, _rng(i)) for i in range(len(groups))}
    masks = np.stack([party_mask(groups, j, {i: rho[i] for i, g in enumerate(groups)
                                             if j in g.members}, p) for j in range(parties)])
    expected = sum(np.outer(g.dense(parties), rho[i]).astype(object)
                   for i, g in enumerate(groups)) % p
    assert masks.tolist() == expected.tolist()
    assert not np.array(GF(rows) @ GF(masks)).any()
    values = uniform_elements(p, entries, _rng(99))
    for j in range(parties):
        upload = integrity_upload(values, groups, j, rho, p)
        assert upload.dtype == np.uint32
        assert upload.tolist() == ((values.astype(object) + expected[j]) % p).tolist()


def test_masks_are_exactly_uniform_on_the_complement():
    # p = 13, N = 4, s = 1: enumerate every coefficient vector of the 4 windows (13^4).
    # M = sum rho_G z_G must hit each of the 13^2 points of W^perp exactly 13^2 times.
    p = 13
    points = (2, 5, 7, 11)
    check = ReedSolomonCheck(points=points, dimension=2, prime=p)
    weights = [3, 1, 4, 1]
    rows = integrity_rows(weights, check.parity_rows(1), p)
    groups = mask_groups(rows, p, cyclic_groups(4, 3))
    z = np.array([g.dense(4) for g in groups])
    rho = np.array(list(itertools.product(range(p), repeat=len(groups))))
    masks = rho @ z % p
    assert not (masks @ rows.T % p).any()
    _, counts = np.unique(masks, axis=0, return_counts=True)
    assert counts.size == p ** 2 and (counts == p ** (len(groups) - 2)).all()


@pytest.mark.parametrize("primes", [(P31,), (65521, 65519)])
def test_masked_uploads_decode_exactly_and_locate_errors(oracle, primes):
    rng = _rng(4)
    x = rng.uniform(-1, 1, size=(6, 2))
    parties, s = 7, 2
    plan = make_plan(2, bound=1.0, scale_bits=10, parties=parties, primes=primes)
    quantized = plan.quantizer.quantize(x).values
    shares = encode_rows(plan, quantized, rng)
    responders = list(range(parties))
    evaluations = [evaluate_shares(plan, [sh[j] for sh in shares]) for j in responders]
    sums = []
    for i, code in enumerate(plan.codes):
        p = code.prime
        check = ReedSolomonCheck.for_responders(code, responders)
        weights = code.decoding_weights(responders)
        rows = integrity_rows(weights, check.parity_rows(s), p)
        groups = choose_mask_groups(rows, p, colluders=1)
        rho = {k: uniform_elements(p, (6, 6), rng) for k in range(len(groups))}
        uploads = np.stack([integrity_upload(evaluations[j][i], groups, j, rho, p)
                            for j in responders]).astype(np.int64)
        # Honest: every syndrome is exactly zero, D exact.
        honest = checked_sum(check, weights, uploads, checks=s)
        assert honest.decoding.clean
        # The uploads alone are masked: they differ from the evaluations.
        assert (uploads != np.stack([e[i] for e in evaluations])).any()
        # Party 5 lies on one entry: located and corrected through the masks.
        uploads[5, 1, 4] = (uploads[5, 1, 4] + 3) % p
        result = checked_sum(check, weights, uploads, checks=s)
        assert result.ok and result.decoding.wrong_evaluators() == {5: 1}
        assert np.array_equal(result.values, honest.values)
        sums.append(result.values)
    assert decode_sum(plan, sums).tolist() == oracle.sq_distances(quantized)


def test_cyclic_windows_leak_run_sums_to_two_colluders():
    # Attack first: with windows only, colluders {0, 3} (N = 7, s = 1) cut the honest
    # parties into runs {1, 2} and {4, 5, 6}. There is a vector a on the honest parties,
    # orthogonal to every honest group vector, whose a.g_H is NOT fixed by what W reveals:
    # the coalition computes a.U_H - (masks of the groups it knows) = a.g_H exactly.
    p = 251
    parties, s = 7, 1
    rows = _rows(parties, 1, 1, s, p)
    windows = mask_groups(rows, p, cyclic_groups(parties, s + 2))
    coalition = (0, 3)
    assert spans_complement(rows, p, windows, coalition) > 0
    honest = [j for j in range(parties) if j not in coalition]
    inside = np.array([g.dense(parties)[honest] for g in windows
                       if not set(coalition) & set(g.members)])
    a = null_space(inside, p)[0]            # orthogonal to every honest group vector
    # a is not a combination of W restricted to H (else W would reveal a.g_H anyway).
    assert rank_mod(np.vstack([rows[:, honest], a]), p) > rank_mod(rows[:, honest], p)
    rng = _rng(8)
    g = uniform_elements(p, parties, rng)
    rho = {k: int(v) for k, v in enumerate(uniform_elements(p, len(windows), rng))}
    masks = sum(rho[k] * w.dense(parties) for k, w in enumerate(windows)) % p
    uploads = (g + masks) % p
    known = sum(rho[k] * w.dense(parties) for k, w in enumerate(windows)
                if set(coalition) & set(w.members)) % p
    assert int(a @ ((uploads - known) % p)[honest] % p) == int(a @ g[honest] % p)
    assert exposed_coalitions(rows, p, windows, 2)
    # The chosen structure repairs it: no such a exists for any pair of colluders.
    groups = choose_mask_groups(rows, p, colluders=2)
    assert spans_complement(rows, p, groups, coalition) == 0
    assert exposed_coalitions(rows, p, groups, 2) == []


def test_parameters_are_checked():
    p = 13
    with pytest.raises(ParameterError, match="independent"):
        integrity_rows([1, 2, 3], [[2, 4, 6]], p)
    rows = _rows(5, 1, 1, 1, 251)
    groups = choose_mask_groups(rows, 251, 1)
    with pytest.raises(ParameterError, match="missing"):
        party_mask(groups, 0, {}, 251)
    with pytest.raises(ParameterError, match="missing"):
        integrity_upload([1], groups, 0, {}, 251)
    rho = {i: np.array([251]) for i in range(len(groups))}
    with pytest.raises(ParameterError, match="reduced"):
        integrity_upload([1], groups, 0, rho, 251)
    with pytest.raises(ParameterError, match="need"):
        choose_mask_groups(np.ones((6, 5), dtype=np.int64), 251, 1)

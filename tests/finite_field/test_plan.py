"""Planning for stragglers and adversaries: parties_needed, tolerance, make_plan's checks.

The figures are checked against the decoder itself: with the parties a plan asks for,
every pattern it promises to detect is detected and every one it promises to correct is
corrected (all error positions, small field, Python-int codewords).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finite_field import (LagrangeCode, ParameterError, ReedSolomonCheck, make_plan,
                          parties_needed, tolerance)


@pytest.mark.parametrize("l,t", [(1, 1), (2, 1), (1, 3), (4, 2)])
def test_parties_needed_formula(l, t):
    for stragglers, adversaries in itertools.product(range(3), range(3)):
        assert parties_needed(l, t, stragglers, adversaries) == \
            2 * l + 2 * t - 1 + stragglers + 2 * adversaries


def test_audit_rows_for_m_equal_k_k1_k2():
    k = 3
    nothing = tolerance(parties=k, segments=1, noise_segments=1)
    assert (nothing.redundancy, nothing.detect, nothing.correct) == (0, 0, 0)
    assert "nothing can be checked" in nothing.describe()
    one = tolerance(parties=k + 1)
    assert (one.detect, one.correct) == (1, 0)
    assert "detects up to 1 wrong party per entry" in one.describe()
    two = tolerance(parties=k + 2)
    assert (two.detect, two.correct) == (2, 1)
    assert two.detect_while_correcting(1) == 1
    short = tolerance(parties=k + 1, stragglers=2)
    assert not short.decodable and "cannot decode (1 too few)" in short.describe()


@pytest.mark.parametrize("parties,stragglers", [(3, 0), (4, 0), (5, 0), (6, 0), (7, 1), (8, 2)])
def test_tolerance_is_what_the_decoder_delivers(parties, stragglers):
    p = 13
    code = LagrangeCode(segments=1, noise_segments=1, parties=parties, prime=p)
    responders = list(range(stragglers, parties))            # the first S straggle
    check = ReedSolomonCheck.for_responders(code, responders)
    promise = tolerance(parties, 1, 1, stragglers)
    n = len(responders)
    rng = np.random.Generator(np.random.PCG64(parties))
    coefficients = rng.integers(0, p, size=3)
    honest = np.array([[int(coefficients @ [1, b, b * b]) % p] for b in check.points])
    for count in range(1, promise.detect + 1):
        for wrong in itertools.combinations(range(n), count):
            received = honest.copy()
            received[list(wrong), 0] = (received[list(wrong), 0] + 1 + np.arange(count)) % p
            syn = check.syndromes(received)
            assert check.decode(syn, max_errors=0).flagged.tolist() == [0]
            if count <= promise.correct:
                result = check.decode(syn, max_errors=promise.correct)
                assert result.ok and sorted(result.positions[0].tolist()) == list(wrong)
    if promise.redundancy == 0:
        received = honest.copy()
        received[0, 0] = (received[0, 0] + 1) % p
        assert check.decode(check.syndromes(received)).clean     # unseen: as promised


def test_make_plan_checks_the_party_count_and_keeps_its_signature():
    plan = make_plan(4, bound=1.0, scale_bits=8, parties=3)                  # old call
    assert (plan.stragglers, plan.adversaries, plan.redundancy) == (0, 0, 0)
    plan = make_plan(4, bound=1.0, scale_bits=8, parties=7, stragglers=1, adversaries=1)
    assert plan.tolerance().correct == 1 and plan.tolerance(stragglers=0).correct == 2
    info = plan.describe()
    assert (info["stragglers"], info["adversaries"], info["redundancy"]) == (1, 1, 4)
    with pytest.raises(ParameterError, match=r"needs m >= 2l\+2t-1\+S\+2A = 8 parties; got 7"):
        make_plan(4, bound=1.0, scale_bits=8, parties=7, stragglers=1, adversaries=2)
    with pytest.raises(ParameterError, match="stragglers"):
        make_plan(4, bound=1.0, scale_bits=8, parties=7, stragglers=-1)

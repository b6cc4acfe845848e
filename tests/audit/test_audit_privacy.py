"""Checks 1-2: algebraic and empirical t-privacy, and the t+1 reconstruction."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finite_field import LagrangeCode, ParameterError, encode_rows, make_plan
from omnifc.audit import (AuditParameters, check_algebraic_privacy, check_empirical_privacy,
                          encoding_matrix, noise_block_ranks, reconstruct_rows)


def seeded(seed=20261130):
    return np.random.Generator(np.random.PCG64(seed))


class SmallRangeNoise:
    """A broken noise source: every field element it yields lies in [0, 4)."""

    def __init__(self, seed=1):
        self.rng = np.random.default_rng(seed)

    def bytes(self, n):
        return self.rng.integers(0, 4, size=-(-n // 4), dtype="<u4").tobytes()[:n]


class ReusedNoise:
    """A broken noise source: the same noise value for every row and segment."""

    def bytes(self, n):
        return (b"\x07\x00\x00\x00" * (-(-n // 4)))[:n]


def test_default_configuration_passes_checks_1_and_2():
    params = AuditParameters()
    assert check_algebraic_privacy(params).verdict == "pass"
    check = check_empirical_privacy(params, noise_source=seeded())
    assert check.verdict == "pass", check.reasons
    assert check.evidence["tightness"]["rows_recovered_exactly"] == check.evidence["rows_per_set"]


@pytest.mark.slow
@pytest.mark.parametrize("changes, check_1_reason, check_2_fails", [
    (dict(betas=(3, 4, 5, 5)), "parties 3 and 4 share the point 5", False),
    (dict(betas=(1, 4, 5, 6)), "beta_1 = 1 equals the data point alpha_1", True),
    (dict(alphas=(2, 2)), "alpha_1 and alpha_2 coincide", True),
    (dict(noise_segments=2), "t = 2 is too large for m = 4", False),
    (dict(betas=(3, 4, 5)), "expected m = 4 party points, got 3", True),
], ids=["duplicated-point", "beta-equals-alpha", "duplicated-alpha", "t-too-large",
        "missing-point"])
def test_broken_configurations_fail_with_a_clear_reason(changes, check_1_reason, check_2_fails):
    params = AuditParameters(**changes)
    check = check_algebraic_privacy(params)
    assert check.verdict == "fail"
    assert any(check_1_reason in r for r in check.reasons), check.reasons
    empirical = check_empirical_privacy(params, noise_source=seeded())
    assert (empirical.verdict == "fail") == check_2_fails, empirical.reasons


def test_beta_equal_to_alpha_is_a_singular_coalition():
    check = check_algebraic_privacy(AuditParameters(betas=(1, 4, 5, 6)))
    assert any("singular noise block" in r and "parties [1]" in r for r in check.reasons)
    empirical = check_empirical_privacy(AuditParameters(betas=(1, 4, 5, 6)),
                                        noise_source=seeded())
    assert any("coalition [1]" in r for r in empirical.reasons)


def test_encoding_matrix_matches_lagrange_code():
    for l, t, m, p in [(1, 1, 3, 13), (2, 1, 5, 251), (2, 3, 11, 2147483647)]:
        code = LagrangeCode(segments=l, noise_segments=t, parties=m, prime=p)
        assert np.array_equal(encoding_matrix(code.alphas, code.betas, p),
                              code.encoding_matrix())


def _det_mod(matrix, p):
    """Determinant mod p by Laplace expansion over Python ints (independent of galois)."""
    matrix = [[int(x) for x in row] for row in matrix]
    if len(matrix) == 1:
        return matrix[0][0] % p
    return sum((-1) ** j * matrix[0][j] * _det_mod([r[:j] + r[j + 1:] for r in matrix[1:]], p)
               for j in range(len(matrix))) % p


@pytest.mark.slow
def test_ranks_agree_with_determinants_including_singular_points():
    p, l, t = 13, 1, 2
    alphas, betas = (1, 2, 3), (4, 5, 1, 6, 7)  # party 3 sits on a data point
    matrix = encoding_matrix(alphas, betas, p)
    coalitions = list(itertools.combinations(range(len(betas)), t))
    ranks = noise_block_ranks(matrix, l, p, coalitions)
    for c, r in zip(coalitions, ranks):
        full = _det_mod(matrix[l:, list(c)], p) != 0
        assert (r == t) == full
    assert (ranks < t).any()  # the check above can see a singular block


def test_many_coalitions_use_the_sufficient_condition_and_a_sample():
    params = AuditParameters(parties=30, noise_segments=4, segments=1)
    check = check_algebraic_privacy(params, max_coalitions=100, sample_size=200)
    assert check.verdict == "pass"
    assert {e["method"] for e in check.evidence["primes"]} == {"sampled"}
    assert all(e["coalitions_checked"] == 200 and e["sufficient_condition"]
               for e in check.evidence["primes"])
    assert "sufficient condition verified" in check.finding


@pytest.mark.parametrize("l, t, m", [(1, 1, 3), (1, 2, 5), (2, 1, 5)])
def test_l_plus_t_parties_reconstruct_rows_exactly(l, t, m):
    plan = make_plan(dim=5, bound=4.0, scale_bits=10, segments=l, noise_segments=t, parties=m)
    rows = plan.quantizer.quantize(
        np.random.default_rng(3).uniform(-4, 4, size=(40, 5))).values
    shares = encode_rows(plan, rows, seeded())[0]
    params = AuditParameters(dim=5, bound=4.0, scale_bits=10, segments=l, noise_segments=t,
                             parties=m, nonnegative=False)
    coalition = list(range(m - l - t, m))  # the last l+t parties
    assert np.array_equal(reconstruct_rows(shares, coalition, params, plan.primes[0]), rows)
    with pytest.raises(ParameterError, match="needs l\\+t"):
        reconstruct_rows(shares, coalition[1:], params, plan.primes[0])


@pytest.mark.slow
def test_t_plus_one_noise_free_combination_for_l_greater_than_one():
    params = AuditParameters(parties=5, segments=2, noise_segments=1)
    check = check_empirical_privacy(params, noise_source=seeded())
    assert check.verdict == "pass", check.reasons
    tight = check.evidence["tightness"]
    assert len(tight["plus_one"]) == 2 and tight["noise_free_combination"]["p_value"] < 1e-12
    assert len(tight["reconstructing_coalition"]) == 3
    assert tight["rows_recovered_exactly"] == tight["rows"]


@pytest.mark.parametrize("source", [SmallRangeNoise(), ReusedNoise()],
                         ids=["small-range-noise", "reused-noise"])
def test_coalition_test_flags_a_broken_noise_source(source):
    check = check_empirical_privacy(AuditParameters(), noise_source=source, rows_per_set=1000)
    assert check.verdict == "fail"
    assert any("views of the two data sets differ" in r for r in check.reasons)


def test_coalition_test_does_not_flag_the_correct_encoder_for_t_2():
    # Family-wise false-positive rate 1e-3, fixed seeds: deterministic.
    params = AuditParameters(parties=7, noise_segments=2, segments=2)
    check = check_empirical_privacy(params, noise_source=seeded(5))
    assert check.verdict == "pass", check.reasons
    assert check.evidence["family_false_positive_rate"] == 1e-3


@pytest.mark.slow
def test_privacy_views_plot_has_the_uniform_reference_and_p_values(tmp_path):
    from omnifc.audit import AuditParameters, check_empirical_privacy

    check = check_empirical_privacy(AuditParameters(), noise_source=np.random.Generator(
        np.random.PCG64(7)))
    (name, draw), = check.plots
    texts = draw(tmp_path / name)
    assert "uniform" in texts and "uniform ± 2σ" in texts
    titles = [t for t in texts if "A vs B: p = " in t]
    assert len(titles) == 2                    # both panels state their test's p-value
    assert any("in 20 equal bins" in t for t in texts)
    assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"

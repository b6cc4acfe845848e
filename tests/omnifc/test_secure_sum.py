"""omnifc.secure_sum: exact, and the coordinator's view of each upload is uniform."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import omnifc
from finite_field import InputError, ParameterError, PeerError
from protocols import SessionParameters, run_memory_session


def exact_sum(contributions, bound, scale_bits, nonnegative=False):
    """The sum of the quantized contributions with Python integers."""
    lower = 0.0 if nonnegative else -bound
    total = None
    for x in contributions.values():
        q = [int(v) for v in np.floor(np.clip(np.ravel(x), lower, bound) * 2.0**scale_bits
                                      + 0.5)]
        total = q if total is None else [a + b for a, b in zip(total, q)]
    return np.array(total, dtype=object).reshape(np.shape(next(iter(contributions.values()))))


@pytest.mark.parametrize("shape", [(7,), (3, 5)])
@pytest.mark.parametrize("scale_bits, bound", [(16, 4.0), (30, 1000.0)])
def test_exact_against_python_integers(shape, scale_bits, bound):
    rng = np.random.default_rng(sum(shape) + scale_bits)
    parts = {f"p{i}": rng.uniform(-1.2 * bound, 1.2 * bound, shape) for i in range(4)}
    result = omnifc.secure_sum(parts, bound=bound, scale_bits=scale_bits)
    expected = exact_sum(parts, bound, scale_bits)
    assert result.integer_total.shape == shape
    assert result.integer_total.tolist() == expected.tolist()
    assert np.array_equal(result.total, result.integer_total / 2.0**scale_bits)
    assert sum(result.clipped.values()) == sum(int((np.abs(x) > bound).sum())
                                              for x in parts.values())
    # 2 m M + 1 must fit: 30 bits and R = 1000 need two primes.
    assert len(result.parameters["primes"]) == (2 if scale_bits == 30 else 1)


def test_extreme_values_do_not_wrap():
    parts = {"a": np.full(3, -5.0), "b": np.full(3, -5.0), "c": np.array([5.0, -5.0, 0.0])}
    result = omnifc.secure_sum(parts, bound=5.0, scale_bits=20)
    assert result.integer_total.tolist() == exact_sum(parts, 5.0, 20).tolist()


def test_nonnegative_contributions():
    parts = {"a": np.array([0.5, 2.0]), "b": np.array([-1.0, 1.0])}  # -1 clipped to 0
    result = omnifc.secure_sum(parts, bound=2.0, scale_bits=4, nonnegative=True)
    assert result.total.tolist() == [0.5, 3.0] and result.clipped == {"a": 0, "b": 1}


@pytest.mark.parametrize("parts, error, match", [
    ({"a": np.zeros(3)}, ParameterError, "at least 2 parties"),
    ({"a": np.zeros(3), "b": np.zeros(4)}, InputError, "same shape"),
    ({"a": np.zeros(3), "b": np.array([0.0, np.nan, 1.0])}, InputError, "finite"),
])
def test_bad_contributions_are_refused(parts, error, match):
    with pytest.raises(error, match=match):
        omnifc.secure_sum(parts, bound=1.0)


def test_each_masked_upload_is_uniform_even_for_a_constant_vector():
    # Party "a" contributes the same value everywhere: unmasked, its upload would be one
    # value repeated. The coordinator sees values uniform over GF(251): chi-square with
    # 250 degrees of freedom, false-positive rate 1e-6 (fixed seeds). The sum is still exact.
    k, p = 20_000, 251
    parts = {"a": np.full((1, k), 0.5), "b": np.zeros((1, k)), "c": np.full((1, k), -0.25)}
    params = SessionParameters(kind="sum", dim=k, rows=1, bound=1.0, scale_bits=2,
                               primes=(p,))
    sources = {name: np.random.Generator(np.random.PCG64([63, i]))
               for i, name in enumerate(parts)}
    outcome, transcript = run_memory_session(parts, params, record=True, sources=sources)
    assert outcome.integer.reshape(-1).tolist() == [2 + 0 - 1] * k
    for name in parts:
        values = np.concatenate([np.frombuffer(m.envelope().tile.values, "<u4")
                                 for m in transcript.of_kind("tile") if m.sender == name])
        assert values.size == k and values.max() < p
        assert stats.chisquare(np.bincount(values, minlength=p)).pvalue > 1e-6
        own = np.round(parts[name][0] * 4).astype(np.int64) % p  # the unmasked upload
        assert np.mean(values == own) < 0.02  # about 1/p, where unmasked it would be 1


def test_a_dropout_aborts_the_sum_instead_of_summing_fewer_parties():
    parts = {f"p{i}": np.ones((1, 3)) for i in range(3)}
    params = SessionParameters(kind="sum", dim=3, rows=1, bound=1.0, scale_bits=4)
    with pytest.raises(PeerError) as info:
        run_memory_session(parts, params, drop={"p1": "evaluation"})
    assert (info.value.party, info.value.phase) == ("p1", "evaluation")

"""omnifc.secure_distance_matrix: exactness, RNS, refusals and the result's provenance.

The oracle is the brute-force Python-integer squared distance of the rows quantized
exactly with fractions (tests/conftest.py). The full (l, t, m, B) grid runs on the
finite_field steps in tests/finite_field/test_exactness_grid.py; here the public entry
point runs a subsample that covers every l, every t and both extremes of m.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import omnifc
from omnifc import (DistanceResult, InputError, OmniFCError, ParameterError, PhaseStats,
                    secure_distance_matrix)


def make_parties(m: int, dim: int, seed: int, bound: float = 2.0):
    rng = np.random.Generator(np.random.PCG64(seed))
    parties = {f"org{i}": rng.uniform(-1.2 * bound, 1.2 * bound, size=(1 + (i == 0), dim))
               for i in range(m)}
    parties["org0"][0] = bound
    if m > 1:
        parties["org1"][0] = -bound  # with org0's first row: the largest possible distance
    return parties


def stacked(parties) -> np.ndarray:
    return np.concatenate(list(parties.values()))


def l_t_m_cases():
    # Every (l, t); m alternates between 2l+2t-1 and 2l+2t+3 so that every l and every t
    # meets both extremes.
    for index, (l, t) in enumerate(itertools.product((1, 2, 4), (1, 2, 3))):
        smallest = 2 * l + 2 * t - 1
        yield l, t, smallest if index % 2 == 0 else smallest + 4


@pytest.mark.slow
@pytest.mark.parametrize("l, t, m", list(l_t_m_cases()))
def test_exact_through_the_public_api(l, t, m, oracle):
    index = list(l_t_m_cases()).index((l, t, m))
    rng = np.random.Generator(np.random.PCG64(100 + index))
    dim, q, bound = 5, 12, 2.0
    parties = make_parties(m, dim, seed=index, bound=bound)
    names = list(parties)
    need = 2 * l + 2 * t - 1
    size = need if index % 3 == 0 else int(rng.integers(need, m + 1))
    chosen = sorted(rng.choice(m, size=size, replace=False).tolist())
    # Responders by name or by index, in any order.
    responders = [names[j] if j % 2 else j for j in rng.permutation(chosen).tolist()]
    result = secure_distance_matrix(parties, bound=bound, scale_bits=q, segments=l,
                                    noise_segments=t, responders=responders,
                                    max_clipped=1.0)  # the data exercise clipping
    expected = oracle.sq_distances(oracle.quantize(stacked(parties), q, bound))
    assert result.integer_distances.dtype == np.int64
    assert result.integer_distances.tolist() == expected
    assert expected[0][2] == result.parameters["distance_bound"]
    assert sorted(result.parameters["responders"]) == sorted(names[j] for j in chosen)
    assert (result.parameters["segments"], result.parameters["noise_segments"],
            result.parameters["parties"]) == (l, t, m)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, derandomize=True)
@given(l=st.integers(1, 2), t=st.integers(1, 2), extra=st.integers(0, 2), d=st.integers(2, 6),
       q=st.integers(0, 20), bound=st.sampled_from([0.5, 1.0, 4.0]), nonnegative=st.booleans(),
       data=st.data())
def test_property_public_api_is_exact(l, t, extra, d, q, bound, nonnegative, data, oracle):
    m = 2 * l + 2 * t - 1 + extra
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.Generator(np.random.PCG64(seed))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=m, max_size=m))
    parties = {f"p{i}": rng.uniform(-1.5 * bound, 1.5 * bound, size=(k, d))
               for i, k in enumerate(sizes)}
    responders = sorted(data.draw(st.sets(st.integers(0, m - 1), min_size=2 * l + 2 * t - 1)))
    segments = min(l, d)
    result = secure_distance_matrix(parties, bound=bound, scale_bits=q, segments=segments,
                                    noise_segments=t, nonnegative=nonnegative,
                                    responders=responders, max_clipped=1.0)
    rows = oracle.quantize(stacked(parties), q, bound, nonnegative)
    assert result.integer_distances.tolist() == oracle.sq_distances(rows)


@pytest.mark.slow
@pytest.mark.parametrize("scale_bits, bound, n_primes", [(12, 1.0, 2), (25, 1.2, 3)])
def test_exact_with_several_rns_primes(scale_bits, bound, n_primes, oracle):
    # d = 784, q = 12, R = 1: 4 d M^2 = 2^37.6 needs two primes; q = 25, R = 1.2 needs
    # three (2^62.1): the distances at the corners come close to the int64 limit.
    dim = 784
    rng = np.random.Generator(np.random.PCG64(784))
    parties = {name: rng.uniform(-bound, bound, size=(2, dim)) for name in ("a", "b", "c")}
    parties["a"][0] = bound
    parties["b"][1] = -bound
    parties["c"][0, ::2] = bound
    parties["c"][0, 1::2] = -bound
    result = secure_distance_matrix(parties, bound=bound, scale_bits=scale_bits)
    primes = result.parameters["primes"]
    assert len(primes) == n_primes > 1
    expected = oracle.sq_distances(oracle.quantize(stacked(parties), scale_bits, bound))
    assert result.integer_distances.tolist() == expected
    worst = result.parameters["distance_bound"]
    assert expected[0][3] == worst == 4 * dim * round(bound * 2**scale_bits) ** 2
    assert np.prod(np.array(primes, dtype=object)) > worst
    if n_primes == 3:
        assert worst > 2**62


def test_exact_nonnegative_with_clipping(oracle):
    parties = {"x": [[0.0, 3.9, -1.0]], "y": [[2.5, 5.0, 1.0]], "z": [[4.0, 0.0, 0.3]]}
    result = secure_distance_matrix(parties, bound=4.0, scale_bits=10, nonnegative=True,
                                    max_clipped=1.0)
    rows = oracle.quantize(stacked({k: np.array(v) for k, v in parties.items()}), 10, 4.0,
                           nonnegative=True)
    assert result.integer_distances.tolist() == oracle.sq_distances(rows)
    assert result.clipped == {"x": 1, "y": 1, "z": 0}
    assert result.clipped_fraction == {"x": 1 / 3, "y": 1 / 3, "z": 0.0}
    assert result.parameters["nonnegative"] is True


def test_distances_are_the_dequantized_integers():
    parties = make_parties(3, 4, seed=1)
    result = secure_distance_matrix(parties, bound=2.0, scale_bits=9)
    assert result.distances.dtype == np.float64
    assert np.array_equal(result.distances, result.integer_distances / 4.0**9)
    assert np.array_equal(result.integer_distances, result.integer_distances.T)
    assert not np.diag(result.integer_distances).any()


def test_docstring_example():
    parties = [np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), np.array([[1.0, 1.0]])]
    result = secure_distance_matrix(parties, bound=8.0, scale_bits=8)
    assert result.distances[0].tolist() == [0.0, 25.0, 2.0]


@pytest.mark.slow
def test_default_noise_comes_from_the_os_csprng(monkeypatch):
    # Every noise element is drawn from finite_field's SYSTEM_RANDOM (os.urandom): at least
    # 4 bytes per noise element, n rows x t segments x s features, per prime.
    from finite_field import SYSTEM_RANDOM

    calls = []
    real = os.urandom
    monkeypatch.setattr(SYSTEM_RANDOM, "bytes", lambda n: calls.append(n) or real(n))
    parties = make_parties(5, 6, seed=2)  # 6 rows of 6 features
    result = secure_distance_matrix(parties, bound=2.0, scale_bits=20, noise_segments=2,
                                    max_clipped=1.0)
    n_primes = len(result.parameters["primes"])
    assert n_primes == 2
    assert sum(calls) >= 4 * 6 * 2 * 6 * n_primes


# --- the result's provenance -----------------------------------------------------------------

def test_result_fields():
    parties = {"clinic": np.zeros((3, 4)), "lab": np.ones((1, 4)), "school": np.full((2, 4), 0.5),
               "bank": np.full((1, 4), -0.5)}
    result = secure_distance_matrix(parties, bound=1.0, scale_bits=6,
                                    responders=["clinic", "lab", "bank"])
    assert isinstance(result, DistanceResult)
    assert result.party_names == ["clinic", "lab", "school", "bank"]
    assert result.owners.tolist() == [0, 0, 0, 1, 2, 2, 3]
    assert result.rows_of("school").tolist() == [4, 5]
    assert result.rows_of(1).tolist() == [3]
    assert result.rows_of("bank").tolist() == [6]
    assert result.integer_distances.shape == result.distances.shape == (7, 7)
    # Global row order: party by party, rows in their own order.
    assert result.integer_distances[3, 0] == 4 * 64**2
    assert result.integer_distances[6, 3] == 4 * (64 + 32) ** 2
    params = result.parameters
    assert params["party_names"] == result.party_names
    assert sorted(params["responders"]) == ["bank", "clinic", "lab"]
    assert (params["dim"], params["scale_bits"], params["bound"]) == (4, 6, 1.0)
    assert (params["segments"], params["noise_segments"], params["parties"]) == (1, 1, 4)
    assert params["primes"] == [2_147_483_647]
    assert params["alphas"] == [1, 2] and params["betas"] == [3, 4, 5, 6]
    assert params["distance_bound"] == 4 * 4 * 64**2
    assert result.clipped == {"clinic": 0, "lab": 0, "school": 0, "bank": 0}
    assert {"shares", "evaluation", "decode"} <= set(result.stats)
    for phase in result.stats.values():
        assert isinstance(phase, PhaseStats)
        assert phase.seconds >= 0 and phase.bytes_sent >= 0
    # Shares of every row reach every other party: at least n (m - 1) s 4-byte elements.
    assert result.stats["shares"].bytes_sent >= 7 * 3 * 4 * 4
    assert result.total_seconds() == pytest.approx(sum(s.seconds for s in result.stats.values()))
    assert result.total_bytes() == sum(s.bytes_sent for s in result.stats.values())


def test_sequence_input_gets_generated_names():
    result = secure_distance_matrix([np.zeros((1, 2)), np.ones((2, 2)), [0.5, 0.5]],
                                    bound=1.0, scale_bits=4)
    assert result.party_names == ["party-0", "party-1", "party-2"]
    assert result.owners.tolist() == [0, 1, 1, 2]  # a 1-D array is one row


# --- refusals, before anything is shared ------------------------------------------------------

@pytest.fixture
def no_session(monkeypatch):
    """Fail the test if any party encodes a share: refusals must come first."""
    import protocols._party

    def forbidden(*args, **kwargs):
        raise AssertionError("a share was made although the request was invalid")

    monkeypatch.setattr(protocols._party, "encode_row_blocks", forbidden)


def three(dim: int = 3, **overrides):
    parties = {"a": np.zeros((2, dim)), "b": np.ones((1, dim)), "c": np.full((1, dim), 0.5)}
    parties.update(overrides)
    return parties


def refusal(error_type, message, parties, **kwargs):
    kwargs = {"bound": 1.0, "scale_bits": 8} | kwargs
    with pytest.raises(error_type, match=message) as info:
        secure_distance_matrix(parties, **kwargs)
    assert isinstance(info.value, OmniFCError)
    return info.value


def test_too_few_parties(no_session):
    error = refusal(ParameterError, r"^at least 2l\+2t-1 = 5 parties are needed for "
                                    r"segments=2, noise_segments=1; got 3$", three(),
                    segments=2)
    assert isinstance(error, ValueError)
    refusal(ParameterError, r"at least 2l\+2t-1 = 3 parties .* got 2$",
            {"a": np.zeros((1, 2)), "b": np.ones((1, 2))})


def test_more_segments_than_features(no_session):
    parties = {f"p{i}": np.zeros((1, 3)) for i in range(9)}
    error = refusal(ParameterError, r"^segments \(l\) must be <= d = 3, got 4$", parties,
                    segments=4)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("primes, message", [
    ([2_147_483_647, 15], r"^primes\[1\] must be prime, got 15 \(composite\)$"),
    ([4_294_967_291], r"^primes\[0\] must be a prime in \[3, 2\^31-1\], got 4294967291$"),
    ([2_147_483_647, 2_147_483_647], r"^primes must be distinct"),
])
def test_bad_primes(primes, message, no_session):
    error = refusal(ParameterError, message, three(), primes=primes)
    assert isinstance(error, ValueError)


def test_values_that_would_wrap(no_session):
    # d = 3, M = 256: distances up to 4 * 3 * 256^2 = 786432 (19.6 bits) do not fit mod 65521.
    error = refusal(ParameterError, r"^the product of the primes \(16\.0 bits\) must exceed the "
                                    r"largest squared distance \(19\.6 bits\): results would "
                                    r"wrap around$", three(), primes=[65521])
    assert isinstance(error, ValueError)
    refusal(ParameterError, r"needed 103\.4 bits, at most 63 are supported", three(),
            scale_bits=30, bound=1e6)


@pytest.mark.parametrize("responders, message", [
    (["a", "a", "b"], r"responders must be distinct parties of \['a', 'b', 'c'\], got "
                      r"\['a', 'a', 'b'\]"),
    ([0, "a", 1], r"must be distinct parties of \['a', 'b', 'c'\], got \['a', 'a', 'b'\]"),
    (["a", "b"], r"the responding set needs at least 3 parties, got 2"),
    (["a", "nobody", "b"], r"unknown responder 'nobody'; parties are \['a', 'b', 'c'\]"),
    ([0, 1, 5], r"responder index must be in \[0, 3\), got 5"),
])
def test_bad_responders(responders, message, no_session):
    error = refusal(ParameterError, message, three(), responders=responders)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_the_party_and_column(bad, no_session):
    data = np.zeros((2, 3))
    data[1, 2] = bad
    error = refusal(InputError, rf"^party 'c': data must be finite; found {bad} at row 1, "
                                r"column 2", three(c=data))
    assert error.party == "c"
    assert isinstance(error, ValueError)


def test_mismatched_dimensions_name_the_party_and_both_values(no_session):
    error = refusal(InputError, r"^party 'b': d must be equal for all parties; sent d=4, "
                                r"expected 3 \(from party 'a'\)$", three(b=np.ones((1, 4))))
    assert error.party == "b"
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("empty", [np.zeros((0, 3)), [], np.array([])])
def test_empty_party(empty, no_session):
    error = refusal(InputError, r"^party 'b': holds no rows \(empty party\)$", three(b=empty))
    assert error.party == "b"
    assert isinstance(error, ValueError)


def test_no_parties(no_session):
    refusal(ParameterError, r"at least one party is needed, got none", {})


def test_not_a_matrix(no_session):
    refusal(InputError, r"^party 'a': data must be a 2-D array \(rows x features\), got shape "
                        r"\(1, 2, 3\)$", three(a=np.zeros((1, 2, 3))))


def test_clip_error_policy_names_party_row_and_column(no_session):
    data = np.zeros((2, 3))
    data[1, 0] = 1.5
    refusal(InputError, r"^party 'c': values must lie in \[-1\.0, 1\.0\]; found 1\.5 at row 1, "
                        r"column 0 \(1 entries out of range\)$", three(c=data), clip="error")


def test_bad_quantization_parameters(no_session):
    refusal(ParameterError, r"scale_bits must be in \[0, 30\], got 31", three(), scale_bits=31)
    refusal(ParameterError, r"bound must be a finite number > 0, got -1\.0", three(), bound=-1.0)


def test_refusal_check_can_fail(monkeypatch):
    # The no_session guard is live: a valid request does make shares through it.
    import protocols._party

    calls = []
    real = protocols._party.encode_row_blocks
    monkeypatch.setattr(protocols._party, "encode_row_blocks",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    secure_distance_matrix(three(), bound=1.0, scale_bits=8)
    assert len(calls) == 3  # one encoding per party


def test_errors_are_exported_from_omnifc():
    assert omnifc.ParameterError is ParameterError
    assert issubclass(ParameterError, ValueError) and issubclass(InputError, ValueError)


# -- the keywords and the parameter table (issue 20: a parameter is declared once) ---------

def keyword_mismatches(parameters, function, not_keywords):
    """What keeps the table and ``function``'s signature from agreeing: a table row that is
    neither taken (a keyword, or by name through ``**options``) nor excused, a keyword
    default that is not the table's, an excuse for a name that is not in the table or that
    is a keyword after all."""
    import inspect

    from protocols._parameters import REQUIRED

    signature = inspect.signature(function).parameters
    by_name = any(p.kind is p.VAR_KEYWORD for p in signature.values())
    problems = []
    names = {p.name for p in parameters}
    for p in parameters:
        if p.name in not_keywords:
            if p.name in signature:
                problems.append(f"{p.name}: excused, yet a keyword")
            continue
        keyword = signature.get(p.name)
        if keyword is None:
            if not by_name:
                problems.append(f"{p.name}: in the table, not taken")
            continue
        if keyword.kind is not keyword.KEYWORD_ONLY:
            problems.append(f"{p.name}: in the table, not a keyword")
            continue
        expected = inspect.Parameter.empty if p.default is REQUIRED else p.default
        if keyword.default != expected:
            problems.append(f"{p.name}: default {keyword.default!r}, the table's {expected!r}")
    problems += [f"{name}: excused, not in the table" for name in not_keywords
                 if name not in names]
    return problems


def test_the_keywords_are_the_parameter_tables_rows():
    from protocols._parameters import PARAMETERS

    from omnifc._secure import NOT_KEYWORDS, session_keywords
    assert keyword_mismatches(PARAMETERS, secure_distance_matrix, NOT_KEYWORDS) == []
    import inspect
    written = inspect.signature(secure_distance_matrix).parameters
    taken = session_keywords()
    assert [p.name for p in PARAMETERS if p.name in written] == [
        n for n in taken if n in written]  # every written-out session keyword is taken
    assert {"bound", "mode", "integrity", "mask_degree", "layout"} <= set(written)
    assert "chunk_bytes" in taken and "chunk_bytes" not in written  # by name
    assert not set(taken) & set(NOT_KEYWORDS)


def test_a_new_table_row_is_taken_by_name_without_an_edit_of_the_function():
    from protocols._parameters import PARAMETERS, Parameter

    from omnifc._secure import NOT_KEYWORDS
    extra = (*PARAMETERS, Parameter("throwaway", "int", "throwaway", 0))
    # taken through **options: nothing to add to the signature or to the excuses
    assert keyword_mismatches(extra, secure_distance_matrix, NOT_KEYWORDS) == []

    def written_out(parties, *, bound, scale_bits=16):  # a signature without **options
        ...
    assert "throwaway: in the table, not taken" in keyword_mismatches(
        extra, written_out, NOT_KEYWORDS)
    assert keyword_mismatches(PARAMETERS, secure_distance_matrix,
                              {**NOT_KEYWORDS, "mode": "?", "gone": "?"}) == [
        "mode: excused, yet a keyword", "gone: excused, not in the table"]


def test_a_table_row_outside_the_signature_reaches_the_session_by_name(monkeypatch):
    import protocols

    seen = []
    real = protocols.run_memory_session

    def spy(party_data, parameters, **kwargs):
        seen.append(parameters)
        return real(party_data, parameters, **kwargs)

    monkeypatch.setattr(protocols, "run_memory_session", spy)
    rng = np.random.default_rng(11)
    parties = [rng.uniform(-1, 1, (4, 3)) for _ in range(3)]
    result = secure_distance_matrix(parties, bound=2.0, scale_bits=6, chunk_bytes=4096)
    assert [p.chunk_bytes for p in seen] == [4096]
    x = np.concatenate([np.round(p * 64).astype(np.int64) for p in parties])
    assert result.integer_distances.tolist() == [  # Python integers
        [sum((int(a) - int(b)) ** 2 for a, b in zip(u, v)) for v in x] for u in x]
    with pytest.raises(ParameterError, match="chunk_bytes must be in"):  # the table's check
        secure_distance_matrix(parties, bound=2.0, chunk_bytes=64)


def test_rows_the_function_cannot_take_are_refused_with_the_reason():
    parties = [np.zeros((1, 2)), np.ones((1, 2)), np.full((1, 2), 2.0)]
    with pytest.raises(TypeError, match="does not take 'dim': taken from the parties' rows"):
        secure_distance_matrix(parties, bound=4.0, dim=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunkbytes'.*chunk_bytes"):
        secure_distance_matrix(parties, bound=4.0, chunkbytes=4096)


def test_every_session_keyword_is_documented():
    import inspect
    import re

    from omnifc._secure import session_keywords
    section = secure_distance_matrix.__doc__.split("Parameters\n    ----------")[1]
    section = section.split("Returns\n")[0]
    documented = {name.strip() for line in re.findall(r"^    (\w[\w, ]*) :", section, re.M)
                  for name in line.split(",")}
    documented |= {name.strip() for line in re.findall(r"^    ([\w, ]+)$", section, re.M)
                   for name in line.split(",")}
    written = set(inspect.signature(secure_distance_matrix).parameters)
    keywords = set(session_keywords()) & written
    assert keywords <= documented, keywords - documented
    assert "**options" in section  # the rest of the table, by name


def test_each_session_keyword_reaches_the_session_by_name():
    rng = np.random.default_rng(5)
    parties = [rng.uniform(0, 1, (2, 3)) for _ in range(4)]
    result = secure_distance_matrix(parties, bound=2.0, scale_bits=6, nonnegative=True,
                                    integrity="off", mask_degree=2, primes=[2147483647])
    given = {"bound": 2.0, "scale_bits": 6, "segments": 1, "noise_segments": 1,
             "nonnegative": True, "primes": [2147483647], "mode": "masked",
             "integrity": "off", "mask_degree": 2, "adversaries": 0}
    assert {k: result.parameters[k] for k in given} == given
    with pytest.raises(ParameterError, match="integrity must be one of"):
        secure_distance_matrix(parties, bound=2.0, integrity="never")

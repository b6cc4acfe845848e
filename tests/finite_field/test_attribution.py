"""Attribution of located errors: every case of the design, and never an innocent alone.

The oracle for "never an innocent party alone" is a brute-force simulation: for every
set of at most A deviating parties and every way they can deviate (wrong evaluations on
chosen entries, off-polynomial shares of chosen rows to chosen evaluators), the named
parties must be a subset of the deviating set.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finite_field import (LagrangeCode, ParameterError, ReedSolomonCheck, attribute,
                          located_errors)

OWNER = ["a", "a", "b", "b", "c", "c", "d"]          # rows 0-1: a, 2-3: b, 4-5: c, 6: d
PARTIES = ["a", "b", "c", "d"]


def test_one_evaluator_in_arbitrary_entries_is_named_as_evaluator():
    result = attribute([(0, 2, "d"), (2, 4, "d"), (1, 5, "d")], OWNER)
    assert result.named == ("d",) and result.roles == {"d": "evaluator"}
    assert result.suspects == (("d",),)


def test_several_evaluators_on_one_owners_rows_name_the_sender():
    result = attribute([(0, 2, "b"), (1, 4, "c"), (0, 6, "d")], OWNER)
    assert result.named == ("a",) and result.roles == {"a": "sender"}


def test_one_evaluator_on_one_owners_rows_is_a_suspect_pair():
    result = attribute([(0, 2, "c"), (1, 4, "c"), (0, 1, "c")], OWNER)
    assert result.named == ()
    assert result.suspects == (("a",), ("c",))
    assert "cannot be attributed" in result.describe()


def test_owner_wrong_on_its_own_rows_is_named():
    # Evaluator a, errors only on a's rows: a is at fault either way.
    result = attribute([(0, 2, "a"), (1, 4, "a")], OWNER)
    assert result.named == ("a",)


def test_more_deviators_than_tolerated_is_said():
    # Errors no single party can explain (it would have to be evaluator or owner of all).
    errors = [(0, 2, "c"), (4, 6, "a"), (2, 6, "b")]
    assert not attribute(errors, OWNER).explained
    assert attribute(errors, OWNER).named == ()
    two = attribute(errors, OWNER, adversaries=2)
    assert two.explained and two.named == ()         # several pairs explain it


def test_with_two_adversaries_colluding_evaluators_shield_the_sender_pattern():
    # b and c can forge the pattern of a bad sender a: with A = 2, a is not named.
    errors = [(0, 2, "b"), (1, 4, "c")]
    assert attribute(errors, OWNER, adversaries=1).named == ("a",)
    assert attribute(errors, OWNER, adversaries=2).named == ()
    assert ("b", "c") in attribute(errors, OWNER, adversaries=2).suspects


def test_no_errors_and_bad_input():
    assert attribute([], OWNER).clean
    with pytest.raises(ParameterError, match="rows"):
        attribute([(0, 9, "a")], OWNER)
    with pytest.raises(ParameterError, match="adversaries"):
        attribute([(0, 1, "a")], OWNER, adversaries=-1)
    # A = 0: no error can be explained; known deviators beyond A are refused
    assert not attribute([(0, 1, "a")], OWNER, adversaries=0).explained
    with pytest.raises(ParameterError, match="bound A = 1"):
        attribute([(0, 1, "a")], OWNER, adversaries=1, known=["a", "b"])


def test_known_deviators_explain_their_errors_and_count_against_a():
    """Errors a known deviator can explain are its; the rest get the remaining budget."""
    # a is known: (a,b,c) and (a,c,d) are a's; (b,c,c) alone leaves the pair {b} / {c}
    verdict = attribute([(0, 2, "c"), (2, 4, "c"), (0, 5, "d")], OWNER, adversaries=2,
                        known=["a"])
    assert verdict.named == () and verdict.suspects == (("b",), ("c",))
    # c's errors across the rows of b, c and d: c is the one explanation of size 1
    verdict = attribute([(0, 2, "d"), (2, 4, "c"), (2, 6, "c"), (4, 6, "c")], OWNER,
                        adversaries=2, known=["a"])
    assert verdict.named == ("c",) and verdict.suspects == (("c",),)
    # with the budget spent, an error the known party cannot explain is "more than A"
    assert not attribute([(2, 4, "c")], OWNER, adversaries=1, known=["a"]).explained
    # every error explained by the known party: clean, nobody new
    assert attribute([(0, 2, "c"), (0, 4, "d")], OWNER, adversaries=1, known=["a"]).clean


def _faults(party):
    """A few deviations of one party: wrong evaluations, or bad shares of its rows."""
    rows = [r for r, o in enumerate(OWNER) if o == party]
    entries = [(0, 3), (2, 5), (1, 6), (4, 6)]
    yield [(a, b, party) for a, b in entries]                          # computes wrongly
    yield [(a, b, party) for a, b in entries[:1]]
    for victim in PARTIES:                                               # bad share to one
        if victim != party:
            yield [(r, c, victim) for r in rows[:1] for c in (0, 4, 6) if c != r]
    yield [(r, c, v) for r in rows for c in (2, 5) if c != r for v in PARTIES if v != party]


@pytest.mark.parametrize("adversaries", [1, 2])
def test_never_names_an_innocent_party(adversaries):
    checked = 0
    for size in range(1, adversaries + 1):
        for culprits in itertools.combinations(PARTIES, size):
            for combo in itertools.product(*[list(_faults(c)) for c in culprits]):
                errors = [e for part in combo for e in part]
                result = attribute(errors, OWNER, adversaries=adversaries)
                assert result.explained
                assert set(result.named) <= set(culprits), (culprits, errors, result)
                assert any(set(s) <= set(culprits) for s in result.suspects)
                checked += 1
    assert checked > 20


def test_located_errors_from_a_decoding():
    code = LagrangeCode(segments=1, noise_segments=1, parties=5, prime=251)
    check = ReedSolomonCheck.for_responders(code, [0, 1, 2, 3, 4])
    rng = np.random.Generator(np.random.PCG64(2))
    coefficients = rng.integers(0, 251, size=(3, 2, 4))           # degree-2 g per entry
    values = np.stack([(coefficients[0] + coefficients[1] * b + coefficients[2] * b * b) % 251
                       for b in code.betas])
    values[3, 1, 2] = (values[3, 1, 2] + 1) % 251
    decoding = check.decode(check.syndromes(values))
    assert located_errors(decoding, row_offset=10, evaluators=list("vwxyz")) == [(11, 2, "y")]

"""The declared adversary bound A, brute-forced through the real Party and Coordinator.

Claims pinned here (docs/integrity.md, "Declared adversaries"; README's threat model):

* **P1** against any coalition of at most A parties deviating in any way, the session
  returns exactly the true D, or ends with :class:`DeviationError` at every end;
* **P2** no party outside the coalition is ever named, excluded, or reported;
* **P3** the policies load only where they hold (``check_adversaries``), and a rerun after
  an exclusion keeps P1 and P2 for the deviators left;
* one step past the bound (A + 1 colluders) the outcome is what the docs say: the
  codeword-shaped error is mistaken for errors at honest parties.

Every setting of a small federation (m = 4..8, l and t in {1, 2}, both policies, every A
the redundancy allows) runs every coalition of at most A parties with every pattern of
:mod:`protocols._faults` (random, codeword-shaped, framing, mixed located/unlocatable,
bad shares to one or to every honest party): the real parties, the members rewriting
what they send with the whole public structure in hand. The truth is computed from the
plaintext rows with Python integers.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from finite_field import DeviationError, IntegrityError, ParameterError, check_adversaries
from finite_field._lagrange import min_parties
from protocols import SessionParameters, run_memory_session
from protocols._faults import COALITION_PATTERNS as PATTERNS, Coalition
from protocols._memory import Transcript
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = pytest.mark.timeout(900)

BOUND, SCALE, DIM = 1.0, 6, 2


def settings():
    """(l, t, m, integrity, A): every small federation and every A its r allows."""
    out = []
    for l, t in ((1, 1), (1, 2), (2, 1), (2, 2)):
        k = min_parties(l, t)
        for m in range(max(4, k + 1), 9):
            r = m - k
            out += [(l, t, m, "detect", a) for a in range(1, r + 1)]
            out += [(l, t, m, "correct", a) for a in range(1, r // 2 + 1)]
    return out


#: Federations up to this size run every coalition of every size <= A; larger ones run the
#: strongest coalitions only, those of size exactly A: all of them when A = 1, else a fixed
#: spread of SAMPLE (the smaller sizes are run exhaustively in the smaller federations).
#: OMNIFC_BRUTE_FORCE=all runs every coalition everywhere: about 7,700 sessions.
EXHAUSTIVE_UP_TO = 8 if os.environ.get("OMNIFC_BRUTE_FORCE") == "all" else 6
SAMPLE = 4


def coalitions(names, at_most):
    """Every coalition of 1..at_most parties (of size at_most only, sampled, above
    EXHAUSTIVE_UP_TO parties)."""
    out = []
    sampled = len(names) > EXHAUSTIVE_UP_TO
    for size in range(1, at_most + 1):
        if sampled and size < at_most:
            continue
        every = list(itertools.combinations(names, size))
        if sampled and size > 1 and len(every) > SAMPLE:
            # a fixed spread: the first (adjacent parties), the last, and evenly between
            every = [every[round(i * (len(every) - 1) / (SAMPLE - 1))] for i in range(SAMPLE)]
        out += every
    return out


def run(l, t, m, integrity, adversaries, coalition: Coalition | None, seed=0):
    data = random_data([1 + (i % 2) for i in range(m)], DIM, seed=seed)
    params = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE, segments=l,
                               noise_segments=t, integrity=integrity,
                               adversaries=adversaries)
    seen = Transcript()
    faults = {x: coalition.spec() for x in coalition.members} if coalition else None
    try:
        outcome, _ = run_memory_session(data, params, faults=faults, observe=seen)
    except IntegrityError as error:
        return data, None, error, seen
    return data, outcome, None, seen


def judge(coalition, data, outcome, error, seen):
    """P1 and P2 for one run; returns 'exact', 'corrected', 'excluded' or 'aborted'."""
    members = set(coalition.members)
    names = list(data)
    if error is not None:
        assert isinstance(error, DeviationError), error          # P1: says what it found
        assert set(error.named) <= members, (error.named, members)  # P2
        for party in seen.parties.values():                     # every end, nothing kept
            assert party.result is None and party.labels is None
        return "aborted"
    truth = plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE)
    assert np.array_equal(outcome.integer, truth)                # P1: exactly the true D
    excluded = set(names) - set(outcome.responders) - set(outcome.lost)
    assert excluded <= members, (excluded, members)             # P2
    for record in outcome.deviations:
        assert set(record["named"]) <= members, (record, members)
    for party in seen.parties.values():
        for message in party.result.deviations:
            assert set(message.named) <= members
    actions = {d["action"] for d in outcome.deviations}
    return "excluded" if "excluded" in actions else "corrected" if actions else "exact"


SETTINGS = settings()


@pytest.mark.slow
@pytest.mark.parametrize("l, t, m, integrity, adversaries", SETTINGS,
                         ids=[f"l{l}t{t}-m{m}-{i}-A{a}" for l, t, m, i, a in SETTINGS])
def test_every_coalition_up_to_a_gets_the_exact_d_or_an_abort(l, t, m, integrity,
                                                               adversaries):
    names = [f"party-{i}" for i in range(m)]
    outcomes = {}
    for members in coalitions(names, adversaries):
        for pattern in PATTERNS:
            coalition = Coalition(pattern, members)
            verdict = judge(coalition, *run(l, t, m, integrity, adversaries, coalition))
            outcomes.setdefault(pattern, set()).add(verdict)
            if integrity == "correct" and not pattern.startswith("bad-share"):
                # within A every wrong upload is located (radius >= A): corrected, exact
                assert verdict == "corrected", (members, pattern)
    # every pattern deviated visibly: no coalition went unseen
    assert all("exact" not in seen for seen in outcomes.values()), outcomes


def test_settings_cover_the_bounds():
    """Both policies at A = 1 and at their largest A, for every (l, t)."""
    assert len(SETTINGS) >= 38
    for l, t in ((1, 1), (1, 2), (2, 1), (2, 2)):
        mine = [s for s in SETTINGS if s[:2] == (l, t)]
        assert any(i == "detect" and a == m - min_parties(l, t) for _, _, m, i, a in mine)
    assert ("detect", 5) in {(i, a) for _, _, _, i, a in SETTINGS}
    assert ("correct", 2) in {(i, a) for _, _, _, i, a in SETTINGS}



def test_small_federations_run_every_coalition_and_larger_ones_the_strongest():
    from math import comb
    six = [f"party-{i}" for i in range(6)]
    assert len(set(coalitions(six, 3))) == comb(6, 1) + comb(6, 2) + comb(6, 3)
    eight = [f"party-{i}" for i in range(8)]
    if EXHAUSTIVE_UP_TO >= 8:  # OMNIFC_BRUTE_FORCE=all: every coalition everywhere
        assert len(set(coalitions(eight, 3))) == comb(8, 1) + comb(8, 2) + comb(8, 3)
        return
    assert coalitions(eight, 1) == [(name,) for name in eight]  # every single deviator
    strongest = coalitions(eight, 3)
    assert len(set(strongest)) == SAMPLE and {len(c) for c in strongest} == {3}
    assert strongest[0] == tuple(eight[:3]) and strongest[-1] == tuple(eight[-3:])

# -- the attacks of issue 19, at the bound and one step past it ------------------------------

def _truth(data):
    return plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE)


def test_two_colluders_forging_a_codeword_are_detected_at_the_default_bound():
    # m = 5, l = t = 1: r = 2. The members add a codeword vanishing at every honest point
    # but one, so their error looks like one error at that honest party.
    codeword = Coalition("codeword", ("party-1", "party-3"))
    data, outcome, error, seen = run(1, 1, 5, "detect", None, codeword)  # default A = r = 2
    assert judge(codeword, data, outcome, error, seen) == "aborted"
    assert error.named == () and error.suspects == ()
    assert "could not be located within radius 0" in str(error)


def test_one_step_past_the_bound_the_codeword_is_taken_for_an_honest_party():
    # What docs/integrity.md says happens with A + 1 deviators: the forged pattern is
    # located at the spared honest party (party-0), so "correct" returns a wrong D naming
    # it, and "detect" excludes it and accepts the wrong D in the rerun, where the
    # members' error is a codeword of the smaller set.
    codeword = Coalition("codeword", ("party-1", "party-3"))
    for integrity in ("correct", "detect"):
        data, outcome, error, _ = run(1, 1, 5, integrity, 1, codeword)
        assert error is None
        wrong = outcome.integer != _truth(data)
        assert np.count_nonzero(wrong) == wrong.size - len(wrong)  # every off-diagonal
        assert outcome.deviations[0]["named"] == ["party-0"]       # an honest party
        if integrity == "detect":
            assert outcome.round == 2 and "party-0" not in outcome.responders


def test_framing_an_honest_party_needs_more_deviators_than_declared():
    # m = 6 (r = 3): two members corrupt disjoint entries of party-0's rows, as a bad
    # sender would. Within the bound nobody is named; the session ends with the sets.
    framing = Coalition("framing", ("party-2", "party-4"))
    data, outcome, error, seen = run(1, 1, 6, "detect", None, framing)  # A = 3: radius 0
    assert judge(framing, data, outcome, error, seen) == "aborted" and error.named == ()
    data, outcome, error, seen = run(1, 1, 6, "detect", 2, framing)     # radius 1: located
    assert judge(framing, data, outcome, error, seen) == "aborted" and error.named == ()
    assert ("party-0",) in error.suspects and ("party-2", "party-4") in error.suspects
    # one step past (A = 1, "correct"): D is still exact (each entry has one located
    # error) but the one explanation of size 1 is the honest owner: party-0 is named
    data, outcome, error, _ = run(1, 1, 6, "correct", 1, framing)
    assert error is None and np.array_equal(outcome.integer, _truth(data))
    assert outcome.deviations[0]["named"] == ["party-0"]


def test_correct_never_accepts_a_round_with_unlocated_entries_beside_located_ones():
    # m = 7, A = 2 (s = 4, radius 2). party-1 corrupts entries alone (located) and sends
    # every honest party a share off its polynomial (its rows wrong at 5 evaluators: not
    # locatable). Accepting "explained" located errors would return a wrong D.
    data = random_data([1 + (i % 2) for i in range(7)], DIM, seed=0)
    params = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE, integrity="correct",
                               adversaries=2)
    rewrite = Coalition("random", ("party-1",))
    shares = Coalition("bad-shares", ("party-1",))

    def fault(party, env):
        return shares.rewrite(party, rewrite.rewrite(party, env))
    seen = Transcript()
    with pytest.raises(DeviationError) as info:
        run_memory_session(data, params, faults={"party-1": fault}, observe=seen)
    assert set(info.value.named) <= {"party-1"}
    assert "could not be located" in str(info.value) and not str(info.value).startswith("0")
    assert all(p.result is None for p in seen.parties.values())


@pytest.mark.parametrize("integrity, adversaries", [("detect", 1), ("correct", 1),
                                                    ("detect", 0)])
def test_the_policies_load_only_where_they_hold(integrity, adversaries):
    """P3 at the bound and one past it, through SessionParameters (what serve/join load)."""
    for m in range(3, 9):
        r = m - 3
        limit = r if integrity == "detect" else r // 2
        for a in range(0, limit + 2):
            params = SessionParameters(dim=DIM, bound=BOUND, integrity=integrity,
                                       adversaries=a)
            if a == 0 or a <= limit:
                assert params.adversary_bound(m) == a
                assert check_adversaries(m, 1, 1, a, integrity) == a
            else:
                with pytest.raises(ParameterError, match="redundant parties|r = 0"):
                    params.plan(m)
    assert adversaries >= 0

"""The verdicts of faulted sessions (protocols/_fault_sessions.py ``classify``), on runs
built by hand: what the chaos run counts as exact, abort, hung, wrong or lost.
(The sessions themselves run in test_faults_grpc.py and the chaos smoke test.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from finite_field import DeadlineError, PeerError
from protocols._fault_sessions import SLACK, FaultedRun, PartyEnd, classify

D = np.array([[0, 5, 8], [5, 0, 1], [8, 1, 0]], dtype=np.int64)
LABELS = np.array([0, 1, 1])
NAMES = ["a", "b"]   # a holds row 0, b rows 1 and 2


def outcome(integer=D, undelivered=None, labels=LABELS):
    return SimpleNamespace(integer=integer, party_names=NAMES, row_offsets=[0, 1],
                           rows=[1, 2], labels=labels, undelivered=dict(undelivered or {}))


def success(**changes):
    parties = {"a": PartyEnd(0, 3.0, "", LABELS[:1]), "b": PartyEnd(0, 3.0, "", LABELS[1:])}
    parties.update(changes.pop("parties", {}))
    return FaultedRun(outcome=changes.pop("outcome", outcome()),
                      seconds=changes.pop("seconds", 2.0), parties=parties, bound=30.0,
                      party_bound=40.0, **changes)


def failure(error, **parties):
    ends = {"a": PartyEnd(1, 3.0, "ERROR coordinator reports: party 'b' failed", None),
            "b": PartyEnd(1, 3.0, "ERROR party 'b' reports: the stream failed", None)}
    ends.update(parties)
    return FaultedRun(error=error, seconds=2.0, parties=ends, bound=30.0, party_bound=40.0)


def test_a_clean_success_is_exact():
    assert classify(success(), D) == ("exact", "")


def test_a_reported_undelivered_party_is_still_exact_and_says_so():
    run = success(outcome=outcome(undelivered={"b": "lost before the result"}),
                  parties={"b": PartyEnd(1, 3.0, "ERROR stream failed", None)})
    verdict, reason = classify(run, D)
    assert verdict == "exact" and "b undelivered: lost before the result" in reason


def test_a_d_off_by_one_entry_is_wrong():
    bad = D.copy()
    bad[0, 2] += 1
    assert classify(success(outcome=outcome(integer=bad)), D)[0] == "wrong"


def test_labels_that_differ_from_the_coordinators_are_wrong():
    run = success(parties={"b": PartyEnd(0, 3.0, "", np.array([1, 0]))})
    assert classify(run, D) == ("wrong", "party 'b' saved labels that differ")


@pytest.mark.parametrize("end, phrase", [
    (PartyEnd(1, 3.0, "ERROR stream failed", None), "has no labels, reported delivered"),
    (PartyEnd(1, 3.0, "ERROR exit", LABELS[1:]), "exited 1"),
])
def test_a_party_without_its_result_that_the_coordinator_calls_delivered_is_lost(end, phrase):
    verdict, reason = classify(success(parties={"b": end}), D)
    assert verdict == "lost" and phrase in reason


def test_an_end_past_its_bound_is_hung():
    assert classify(success(seconds=None), D)[0] == "hung"
    late = success(seconds=30.0 + SLACK + 0.1)
    assert classify(late, D)[0] == "hung"
    assert classify(success(seconds=30.0 + SLACK), D)[0] == "exact"   # at the bound: not
    run = success(parties={"b": PartyEnd(None, None, "", None)})       # killed at its bound
    assert classify(run, D) == ("hung", "party processes killed after 55 s: ['b']")


def test_an_abort_is_clean_only_when_every_end_names_a_cause():
    assert classify(failure(PeerError("x", party="b", phase="evaluation")), D)[0] == "abort"
    assert classify(failure(DeadlineError("x", party="b", phase="evaluation")), D)[0] == \
        "abort"
    silent = failure(PeerError("x", party="b", phase="evaluation"),
                     a=PartyEnd(1, 3.0, "", None))
    assert classify(silent, D) == ("unclear-abort", "no clear error from ['a']")
    happy = failure(PeerError("x", party="b", phase="evaluation"),
                    a=PartyEnd(0, 3.0, "ERROR but exited 0", None))
    assert classify(happy, D)[0] == "unclear-abort"
    assert classify(failure(RuntimeError("bug")), D)[0] == "unclear-abort"
    killed = failure(PeerError("x", party="b", phase="evaluation"),
                     b=PartyEnd(-9, 1.0, "", None, killed=True))
    assert classify(killed, D)[0] == "abort"      # a process the schedule killed says nothing

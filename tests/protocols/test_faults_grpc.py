"""Network faults on a party's connection, over gRPC with separate processes (issue 23).

Each party dials its own loopback fault proxy (protocols/_fault_proxy.py), which forwards
to the coordinator and applies the fault; ``run_faulted_session`` (protocols/_fault_sessions.py)
waits for every end with a bound and records how each ended. For every fault the outcome
is pinned precisely through one table, :data:`OUTCOMES` (fault -> expected outcome): either
the exact D (equal to the Python-integer oracle of the quantized rows; every party that
was not reported undelivered saved exactly its labels) or a clean abort (the coordinator
raises the named error, every party process exits 1 naming the cause), every end within
its deadline, nothing left behind.

The table is today's behaviour with reconnect (reconnect_grace 30 s unless a row says
otherwise): a fault that breaks the stream (reset, corrupted byte) is reconnected through
the proxy, which faults only the first connection, and resumed (exact D, round 1, every result
delivered); a fault that only stalls it (pause, half-open) is judged by the phase deadline
as before, unless keepalive notices it: the rows run without keepalive (0) but the
half-open ones, with keepalive 1 s (far below E, as the default 30 s is below a real
session's deadlines), which are then reconnected like a reset; the row "half-open,
keepalive = 0" is the same link without it. A party dropped at a deadline is told so (an ErrorReport of kind "dropped"),
and reads it once its link moves again; the party of an aborted session is told of the
abort like the rest. The "Faults on the network" section of docs/protocol.md states the same
outcomes (kept equal by hand: this test reads nothing from the docs).

Deadlines: join 10 s (from the moment every stream is open), shares 8 s, evaluation 5 s,
result 5 s; a party's own session timeout is join + shares + 4 x evaluation + result = 43 s.
Short pause 2 s (< the evaluation deadline), long pause 8 s (> it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from finite_field import DeadlineError, PeerError
from protocols import SessionParameters
from protocols._config import Deadlines
from protocols._fault_sessions import classify, run_faulted_session
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.protobuf,
              pytest.mark.usefixtures("shared_party_server")]

DEADLINES = Deadlines(join=10, shares=8, evaluation=5, result=5)
FAULTED = "party-1"
#: Upstream byte offset of the reset / pause / half-open / corruption: inside the
#: evaluation upload of both shapes below (asserted: the fault fires in evaluation).
AT = 30_000
RATE = 100_000  # bytes per second


@dataclass(frozen=True)
class Expected:
    """The outcome of one fault: ``verdict`` "exact" (``round``, the parties reported
    undelivered) or "abort" (the coordinator's error type and key phrase); what the
    faulted party says when it exits (``party_code``, ``party_says``)."""

    verdict: str
    round: int = 1
    undelivered: tuple = ()
    error: type | None = None
    error_says: str = ""          # a regular expression the coordinator's error matches
    party_code: int = 0
    party_says: str = ""
    others_say: str = ""
    fired: str | None = None      # the proxy event that must have happened ...
    phase: str = "evaluation"     # ... in this phase (also the phase of an abort)
    resumed: bool = False         # the faulted party reconnected and resumed (its log says)
    grace: float | None = None    # reconnect_grace of the session (None: the default, 30 s)
    keepalive: float = 0.0        # keepalive of the session (0: none; see the module)


DROPPED = dict(round=2, undelivered=(FAULTED,), party_code=1)

#: fault -> (proxy spec of the faulted party, m, expected outcome). m = 4 with A = 0 has a
#: spare responder (K = 3): a party lost in evaluation is dropped and the round reruns;
#: m = 3 has none: losing it aborts the session.
OUTCOMES = {
    "latency+jitter": ("latency=50ms,jitter=20ms,dir=both", 4, Expected("exact")),
    "bandwidth cap": (f"rate={RATE}B/s,dir=both", 4, Expected("exact")),
    # the party's stream breaks (a gRPC error): it reconnects through its proxy, which
    # faults only the first connection, and resumes within reconnect_grace (30 s)
    "reset mid-stream": (f"reset@bytes={AT}", 4, Expected(
        "exact", resumed=True, fired="reset")),
    "reset mid-stream, reconnect_grace = 0": (f"reset@bytes={AT}", 4, Expected(
        "exact", **DROPPED, grace=0.0,
        party_says="the stream to the coordinator failed: UNAVAILABLE", fired="reset")),
    "pause shorter than the deadline": (f"pause=2s@bytes={AT}", 4, Expected(
        "exact", fired="pause")),
    # the coordinator drops the party at the deadline and tells it why; the party reads
    # that when the pause ends, unless the session ended first: the coordinator's exit
    # then resets the link (unread bytes), the report is lost, and the party tries to
    # resume within reconnect_grace (3 s here, so that this ends soon)
    "pause longer than the deadline": (f"pause=8s@bytes={AT}", 4, Expected(
        "exact", **DROPPED, party_says=(
            "coordinator reports: dropped this party in phase 'evaluation': missed the "
            "deadline of phase 'evaluation'; the session goes on without this party "
            "from round 2",
            "the stream to the coordinator failed: UNAVAILABLE"), fired="pause",
        grace=3.0)),
    # keepalive (1 s) notices the silent link within about 2 s, well inside E: then as a
    # reset (reconnect through the proxy, resume)
    "half-open": (f"half-open@bytes={AT}", 4, Expected(
        "exact", resumed=True, fired="half-open", keepalive=1.0)),
    # without keepalive nothing notices it but the deadlines: the party is dropped, is
    # told so on a link that never moves again, and ends at its own session timeout
    "half-open, keepalive = 0": (f"half-open@bytes={AT}", 4, Expected(
        "exact", **DROPPED, party_says="the session did not finish within 43 s",
        fired="half-open")),
    # the coordinator's TLS drops the connection: as a reset
    "corrupted byte": (f"corrupt@bytes={AT}", 4, Expected(
        "exact", resumed=True, fired="corrupt")),
    # downstream, the share relay is what the coordinator sends most: the byte is hit there
    "corrupted byte, coordinator to party, in the share exchange": (
        "corrupt@bytes=5000,dir=down", 4, Expected(
            "exact", resumed=True, fired="corrupt", phase="shares")),
    "reset, no spare responder": (f"reset@bytes={AT}", 3, Expected(
        "exact", resumed=True, fired="reset")),
    "reset, no spare responder, reconnect_grace = 0": (f"reset@bytes={AT}", 3, Expected(
        # which the coordinator notices first, the reset stream or the party's exit on it,
        # is a race (a forked party exits within milliseconds of its error)
        "abort", error=PeerError, error_says=r"(its stream ended|its process exited with "
                                             r"code 1 .*); only 2 parties remain",
        party_code=1, party_says="the stream to the coordinator failed: UNAVAILABLE",
        others_say="coordinator reports: party 'party-1' failed in phase 'evaluation'",
        fired="reset", grace=0.0)),
    # the paused party is told of the abort like the rest, and reads it when the pause
    # ends (8 s), unless the coordinator stopped first (its abort grace is
    # min(ABORT_GRACE, result) = 5 s after the abort, at 10 s): then it tries to resume
    # within reconnect_grace (3 s here, so that this ends soon: the default 30 s of
    # retrying is the rows above)
    "pause longer than the deadline, no spare responder": (f"pause=8s@bytes={AT}", 3, Expected(
        "abort", error=DeadlineError, error_says="missed the deadline",
        party_code=1, party_says=("coordinator reports: party 'party-1' (this party) "
                                  "failed in phase 'evaluation'",
                                  "the stream to the coordinator failed: UNAVAILABLE",
                                  "the coordinator closed the stream before sending a "
                                  "result"),
        others_say="coordinator reports: party 'party-1' failed in phase 'evaluation'",
        fired="pause", grace=3.0)),
    "half-open, no spare responder": (f"half-open@bytes={AT}", 3, Expected(
        "exact", resumed=True, fired="half-open", keepalive=1.0)),
    "corrupted byte, no spare responder": (f"corrupt@bytes={AT}", 3, Expected(
        "exact", resumed=True, fired="corrupt")),
}


def session_data(m):
    data = random_data([120 // m] * m, 4, seed=23 + m)
    return data, plaintext_sq_distances(np.concatenate(list(data.values())), 1.0, 8)


def labels_of(view):
    """The coordinator's 'clustering': each row's nearest of the first three rows."""
    return np.asarray(view)[:, :3].argmin(axis=1)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("fault", list(OUTCOMES))
def test_each_fault_ends_exactly_or_aborts_cleanly_within_its_deadline(fault):
    spec, m, want = OUTCOMES[fault]
    data, expected = session_data(m)
    grace = {} if want.grace is None else {"reconnect_grace": want.grace}
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, adversaries=0,
                               keepalive=want.keepalive, **grace)
    run = run_faulted_session(data, params, DEADLINES, faults={FAULTED: spec},
                              cluster=labels_of, seed=5)
    verdict, reason = classify(run, expected)
    logs = {name: end.error for name, end in run.parties.items()}
    assert verdict == want.verdict, (reason, logs)

    # the fault really happened, once, while the coordinator was in evaluation
    fired = run.fired[FAULTED]
    if want.fired is None:
        assert fired == []
    else:
        assert [what for _, what, _, _ in fired] == [want.fired], fired
        assert run.phase_at(fired[0][0])[0] == want.phase, (fired, run.phases)
    assert all(run.fired[name] == [] for name in data if name != FAULTED)

    # every end within its deadline; nothing left behind
    assert run.seconds is not None and run.seconds <= run.bound, run.seconds
    for name, end in run.parties.items():
        assert end.seconds is not None and end.seconds <= run.party_bound + run.slack, \
            (name, end.seconds)
    assert run.files_left == [] and run.processes_left == [] and run.threads_left == 0

    faulted = run.parties[FAULTED]
    assert faulted.code == want.party_code, (faulted.code, faulted.error)
    says = (want.party_says,) if isinstance(want.party_says, str) else want.party_says
    assert any(phrase in faulted.error for phrase in says), faulted.error
    assert "Traceback" not in faulted.error
    # a resume is logged by the party and the coordinator; without one, neither says so
    assert ("resumed the session" in faulted.log) == want.resumed, faulted.log
    if want.verdict == "exact":
        outcome = run.outcome
        assert np.array_equal(outcome.integer, expected)          # also checked by classify
        assert outcome.round == want.round
        assert tuple(outcome.undelivered) == want.undelivered
        if want.undelivered:
            assert "lost before the result" in outcome.undelivered[FAULTED]
            assert FAULTED not in outcome.responders and faulted.labels is None
        for i, name in enumerate(outcome.party_names):
            if name in want.undelivered:
                continue
            start = outcome.row_offsets[i]
            assert run.parties[name].code == 0, (name, run.parties[name].error)
            assert np.array_equal(run.parties[name].labels,
                                  labels_of(expected.astype(float))[start:start
                                                                     + outcome.rows[i]])
    else:
        assert run.outcome is None
        assert isinstance(run.error, want.error), run.error
        assert (run.error.party, run.error.phase) == (FAULTED, want.phase)
        assert re.search(want.error_says, str(run.error)), run.error
        for name, end in run.parties.items():
            assert end.code == 1 and end.labels is None, (name, end.error)
            if name != FAULTED:
                assert want.others_say in end.error, (name, end.error)

    if fault == "bandwidth cap":  # the cap held: the upload took at least volume / rate
        assert run.seconds >= 0.5 * run.volumes[FAULTED]["up"] / RATE, \
            (run.seconds, run.volumes[FAULTED])
    if fault == "half-open, keepalive = 0":  # it waited for its session timeout, no longer
        assert faulted.seconds >= 43 - 1, faulted.seconds
    if fault == "pause shorter than the deadline":
        assert run.seconds >= 2.0


@pytest.mark.timeout(120)
def test_a_silent_fault_free_run_through_the_proxies_is_exact():
    """The harness itself: clean proxies change nothing (exact D, every label delivered)."""
    data, expected = session_data(3)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8)
    run = run_faulted_session(data, params, DEADLINES, cluster=labels_of)
    assert classify(run, expected) == ("exact", "")
    assert run.outcome.undelivered == {} and run.outcome.round == 1
    assert all(end.code == 0 for end in run.parties.values())
    assert all(v["up"] > 10_000 and v["down"] > 1_000 for v in run.volumes.values())

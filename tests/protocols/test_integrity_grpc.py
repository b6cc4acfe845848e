"""Integrity fault injection with real, separate party processes over gRPC (mutual TLS).

Each deviating party is a ``python -m protocols._grpc_party --fault ...`` process:
(a) ``corrupt-upload``: wrong values in some entries of its upload; (b)
``bad-share:RECEIVER``: one share off its polynomial to one other party; (c)
``collude:PEER`` on two processes: errors that cancel in the first parity check. The
expected D is the plaintext (Python integers); every party's log shows the deviation it
was told about in its Result, or the error that ended the session.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from finite_field import DeviationError
from protocols import SessionParameters
from protocols._grpc_local import LocalSession
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.protobuf, pytest.mark.network, pytest.mark.timeout(400),
              pytest.mark.usefixtures("shared_party_server")]

BOUND, SCALE = 1.0, 8


def _serve(data, params, faults, *, error=None):
    """Run one session with party processes; (outcome or error, exit codes, logs, labels)."""
    with LocalSession(data, params, deadline=30) as local:
        server = local.server(cluster=lambda d: np.zeros(len(d), dtype=np.int64)).start()
        try:
            for name in local.names:
                local.start_party(name, server.port, fault=faults.get(name))
            if error is None:
                result = server.run(poll=lambda: local.watch(server))
            else:
                with pytest.raises(error) as info:
                    server.run(poll=lambda: local.watch(server))
                result = info.value
        finally:
            server.stop()
        codes = {n: p.wait(timeout=60) for n, p in local.processes.items()}
        logs = {n: local.party_log(n) for n in local.names}
        labels = {n: local.received_labels(n) for n in local.names}
    return result, codes, logs, labels


def _data(m, seed):
    return random_data([3 + (i % 3) for i in range(m)], 3, seed=seed)


def _expected(data):
    return plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE)


def test_a_wrong_upload_over_grpc_is_corrected_and_every_party_is_told():
    data = _data(5, 41)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, integrity="correct")
    outcome, codes, logs, labels = _serve(data, params, {"party-2": "corrupt-upload"})
    assert np.array_equal(outcome.integer, _expected(data))
    [deviation] = outcome.deviations
    assert deviation["named"] == ["party-2"] and deviation["action"] == "corrected"
    assert set(codes.values()) == {0}
    for name, log in logs.items():  # the Result carried the deviation to every party
        assert "found a deviation (corrected)" in log and "party 'party-2' deviated" in log
    assert all(v is not None for v in labels.values())


def test_a_wrong_upload_over_grpc_under_detect_is_excluded_and_rerun():
    data = _data(5, 42)
    # integrity="detect" with A = 1 (of r = 2): radius 1, so the liar is located
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, adversaries=1)
    outcome, codes, logs, _ = _serve(data, params, {"party-0": "corrupt-upload"})
    assert np.array_equal(outcome.integer, _expected(data))
    assert outcome.round == 2 and "party-0" not in outcome.responders
    assert outcome.deviations[0]["named"] == ["party-0"]
    assert outcome.deviations[0]["action"] == "excluded"
    assert set(codes.values()) == {0}
    assert all("found a deviation (excluded)" in log for log in logs.values())


def test_a_bad_share_over_grpc_names_the_suspect_pair():
    data = _data(5, 43)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, integrity="correct")
    outcome, codes, logs, _ = _serve(data, params, {"party-1": "bad-share:party-3"})
    assert np.array_equal(outcome.integer, _expected(data))
    [deviation] = outcome.deviations
    assert deviation["named"] == [] and deviation["suspects"] == [["party-1"], ["party-3"]]
    assert set(codes.values()) == {0}
    for log in logs.values():
        assert "one of {'party-1'} or {'party-3'}" in log


def test_a_bad_share_over_grpc_under_detect_aborts_naming_the_suspects_everywhere():
    data = _data(5, 44)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, adversaries=1)
    start = time.monotonic()
    error, codes, logs, labels = _serve(data, params, {"party-1": "bad-share:party-3"},
                                        error=DeviationError)
    assert error.suspects == (("party-1",), ("party-3",)) and error.named == ()
    assert set(codes.values()) == {1}  # every process failed, none returned a result
    for log in logs.values():
        assert "integrity check failed" in log and "{'party-1'} or {'party-3'}" in log
    assert all(v is None for v in labels.values())
    assert time.monotonic() - start < 300


def test_colluding_parties_over_grpc_are_caught_by_the_second_check():
    data = _data(7, 45)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, integrity="correct",
                               adversaries=2)
    faults = {"party-1": "collude:party-5", "party-5": "collude:party-1"}
    outcome, codes, logs, _ = _serve(data, params, faults)
    assert np.array_equal(outcome.integer, _expected(data))
    [deviation] = outcome.deviations
    assert deviation["named"] == ["party-1", "party-5"]
    assert set(codes.values()) == {0}


def test_colluding_parties_over_grpc_beyond_the_radius_abort_without_a_result():
    data = _data(5, 46)  # s = 2: two wrong evaluators per entry detected, not located
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, integrity="correct")
    faults = {"party-0": "collude:party-3", "party-3": "collude:party-0"}
    error, codes, logs, labels = _serve(data, params, faults, error=DeviationError)
    assert error.named == () and "could not be located" in str(error)
    assert set(codes.values()) == {1}
    assert all(v is None for v in labels.values())


# -- issue 19's attacks with separate party processes ----------------------------------------

def _coalition(pattern, *members):
    spec = f"coalition:{pattern}:{','.join(members)}"
    return {name: spec for name in members}


def test_a_codeword_forged_by_two_processes_is_detected_at_the_declared_bound():
    # m = 5, r = 2, default A = 2: the forged pattern is detected, nothing is returned,
    # nobody is named (it would have been "corrected" onto a wrong D with radius 1)
    data = _data(5, 47)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE)
    error, codes, logs, labels = _serve(data, params,
                                        _coalition("codeword", "party-1", "party-3"),
                                        error=DeviationError)
    assert error.named == () and error.suspects == ()
    assert set(codes.values()) == {1} and all(v is None for v in labels.values())
    assert all("integrity check failed" in log for log in logs.values())


def test_two_processes_framing_an_honest_party_get_nobody_named():
    # m = 6, detect with A = 2 (radius 1): the framing is located but two explanations
    # fit, the honest owner alone and the two framers: abort with both sets
    data = _data(6, 48)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, adversaries=2)
    error, codes, logs, labels = _serve(data, params,
                                        _coalition("framing", "party-2", "party-4"),
                                        error=DeviationError)
    assert error.named == ()
    assert ("party-0",) in error.suspects and ("party-2", "party-4") in error.suspects
    assert set(codes.values()) == {1} and all(v is None for v in labels.values())


def test_unlocated_entries_beside_located_ones_are_never_corrected_over_grpc():
    # m = 7, correct with A = 2: party-1 corrupts entries alone and sends every honest
    # party a share off its polynomial; its rows cannot be located: the session ends
    data = _data(7, 49)
    params = SessionParameters(dim=3, bound=BOUND, scale_bits=SCALE, integrity="correct",
                               adversaries=2)
    faults = {"party-1": "coalition:bad-shares:party-1", "party-4": "corrupt-upload"}
    error, codes, logs, labels = _serve(data, params, faults, error=DeviationError)
    assert set(error.named) <= {"party-1", "party-4"}
    assert "could not be located" in str(error)
    assert set(codes.values()) == {1} and all(v is None for v in labels.values())

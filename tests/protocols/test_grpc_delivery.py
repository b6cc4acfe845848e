"""Over gRPC the coordinator knows which parties received their result (issue 25 item 4):
a party confirms receipt by closing its side of the stream after the result; a party whose
process is gone by then, or that dropped out earlier, is in ``Outcome.undelivered``."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import SessionParameters
from protocols._grpc_local import LocalSession, run_local_grpc_session
from protocol_helpers import plaintext_sq_distances, random_data

pytestmark = [pytest.mark.network, pytest.mark.usefixtures("shared_party_server")]


def rows(data):
    return np.concatenate(list(data.values()))


@pytest.mark.timeout(240)
def test_every_party_confirms_its_result():
    data = random_data([3, 4, 2], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    outcome = run_local_grpc_session(data, params, deadline=20)
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows(data), 1.0, 8))
    assert outcome.undelivered == {}


@pytest.mark.timeout(240)
def test_a_party_gone_when_its_result_arrives_is_reported_undelivered():
    # party-2 uploads everything, then its process ends when the result arrives (killed
    # while the coordinator decoded): D is exact, but party-2 never got its labels
    data = random_data([3, 4, 2], 3, seed=8)
    # the coordinator waits reconnect_grace for party-2 to come back for it: 3 s here
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, reconnect_grace=3.0)
    outcome = run_local_grpc_session(
        data, params, deadline=20, faults={"party-2": "exit-at-result"},
        cluster=lambda d: np.zeros(len(d), dtype=np.int64))
    assert np.array_equal(outcome.integer, plaintext_sq_distances(rows(data), 1.0, 8))
    assert outcome.lost == []                            # it was there for the whole round
    assert list(outcome.undelivered) == ["party-2"]
    assert "before it confirmed" in outcome.undelivered["party-2"]


@pytest.mark.timeout(240)
def test_a_party_lost_in_evaluation_is_reported_undelivered():
    data = random_data([3, 4, 2, 3], 3, seed=8)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=0)
    outcome = run_local_grpc_session(data, params, deadline=20,
                                     faults={"party-2": "stall-in-evaluation"},
                                     kill_on={"party-2": "evaluation"})
    assert outcome.round == 2
    assert list(outcome.undelivered) == ["party-2"]
    assert "lost before the result" in outcome.undelivered["party-2"]


@pytest.mark.timeout(240)
def test_labels_a_party_confirmed_are_the_ones_it_saved():
    data = random_data([3, 4, 2], 3, seed=9)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    with LocalSession(data, params, deadline=20) as local:
        server = local.server(cluster=lambda d: np.arange(len(d)) % 2).start()
        try:
            for name in local.names:
                local.start_party(name, server.port)
            outcome = server.run(poll=lambda: local.watch(server))
        finally:
            server.stop()
        for process in local.processes.values():
            assert process.wait(timeout=60) == 0
        for i, name in enumerate(local.names):
            start = outcome.row_offsets[i]
            assert np.array_equal(local.received_labels(name),
                                  outcome.labels[start:start + outcome.rows[i]])
    assert outcome.undelivered == {}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_library_call_reports_a_party_that_never_got_its_result(monkeypatch, caplog):
    # secure_distance_matrix(transport="grpc") passes Outcome.undelivered on: D is whole,
    # and the result says which local party process never confirmed its copy
    import protocols

    import omnifc

    real = protocols.run_local_grpc_session

    def with_a_crash(party_data, parameters, **kwargs):
        return real(party_data, parameters, faults={"party-2": "exit-at-result"}, **kwargs)

    monkeypatch.setattr(protocols, "run_local_grpc_session", with_a_crash)
    data = random_data([3, 4, 2], 3, seed=8)
    with caplog.at_level("WARNING", logger="omnifc"):
        result = omnifc.secure_distance_matrix(list(data.values()), bound=1.0, scale_bits=8,
                                               transport="grpc", deadline=20,
                                               reconnect_grace=3.0)
    assert np.array_equal(result.integer_distances,
                          plaintext_sq_distances(rows(data), 1.0, 8))
    assert list(result.parameters["undelivered"]) == ["party-2"]
    assert "before it confirmed" in result.parameters["undelivered"]["party-2"]
    assert "party 'party-2' did not receive the result" in caplog.text
    clean = omnifc.secure_distance_matrix(list(data.values()), bound=1.0, scale_bits=8)
    assert clean.parameters["undelivered"] == {}

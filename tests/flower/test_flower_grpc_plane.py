"""GrpcDataPlaneWorkflow: Flower orchestrates (one message per node), omnifc's own gRPC with
mutual TLS on 127.0.0.1 carries the session. The nodes are real ClientApps with real Contexts
(tests/flower/flower_helpers.py), each handling its message in a thread of its own, as
SuperNodes run them concurrently."""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
    ".ci/protobuf_matrix.sh runs these tests in its low venv, which has flwr 1.42")


from finite_field import DeadlineError, ProtocolError  # noqa: E402
from omnifc.flower import GrpcDataPlaneWorkflow, party_status  # noqa: E402
from omnifc.flower import _constants as C  # noqa: E402

from flower_helpers import grpc_session  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from oracles import plaintext_sq_distances  # noqa: E402

#: .ci/run runs these in the matrix's low venv (flwr 1.42): one session each, on loopback
pytestmark = [pytest.mark.protobuf_matrix, pytest.mark.network, pytest.mark.slow,
              pytest.mark.timeout(120)]

BOUND, SCALE_BITS, DIM = 1.0, 8, 4


def _session(tmp_path, data, deadline=20.0):
    config, grid, _ = grpc_session(tmp_path, data, dim=DIM, bound=BOUND,
                                   scale_bits=SCALE_BITS, deadline=deadline)
    return config, grid


def _data():
    rng = np.random.default_rng(5)
    return {f"org-{i}": rng.uniform(-1, 1, (n, DIM)) for i, n in enumerate([5, 4, 6])}


def test_one_flower_message_per_node_and_d_exact_over_the_grpc_data_plane(tmp_path):
    data = _data()
    config, grid = _session(tmp_path, data)
    workflow = GrpcDataPlaneWorkflow(config, join_timeout=5)
    outcome = workflow(grid)
    expected = plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE_BITS)
    assert np.array_equal(np.asarray(outcome.integer), expected)
    # every node proved which party it ran: the server binds party -> node
    assert workflow.nodes == {"org-0": 2000, "org-1": 2001, "org-2": 2002}
    assert not workflow.refused and not workflow.unbound
    # Flower carried one start message per node and one reply each: no envelope, no row
    assert sorted(m.metadata.dst_node_id for m in grid.sent) == [2000, 2001, 2002]
    for message in grid.sent:
        record = message.content.config_records[C.RECORD]
        assert dict(record) == {C.KEY_SESSION: config.session_id, C.KEY_START: True,
                                C.KEY_TRANSPORT: C.TRANSPORT_GRPC}
        assert not message.content.array_records
    assert len(grid.received) == 3
    for reply in grid.received:
        record = dict(reply.content.config_records[C.RECORD])
        assert len(record.pop(C.KEY_PROOF)) == 64  # an Ed25519 signature
        assert record == {C.KEY_SESSION: config.session_id, C.KEY_PHASE: "done",
                          C.KEY_ERROR: "", C.KEY_PARTY: f"org-{reply.metadata.src_node_id - 2000}"}
    workflow_ends = {node: party_status(grid.contexts[node])["phase"] for node in grid.apps}
    assert workflow_ends == {2000: "done", 2001: "done", 2002: "done"}


def test_a_node_that_never_runs_its_party_ends_the_session_with_a_clear_error(tmp_path):
    data = _data()
    config, grid = _session(tmp_path, data, deadline=3.0)
    grid.silence(2001)  # its ClientApp never runs: org-1 never connects
    workflow = GrpcDataPlaneWorkflow(config, join_timeout=5)
    start = time.monotonic()
    with pytest.raises(DeadlineError, match="join") as caught:
        workflow(grid)
    # the join deadline, the abort grace and the replies (each at most the result deadline),
    # with slack for a loaded machine: not the 120 s a session may take
    assert time.monotonic() - start < 3.0 + 5.0 + 5.0 + 15.0
    assert caught.value.phase == "join"
    # the parties that did connect were told and failed closed, with the reason
    time.sleep(0.5)
    for node in (2000, 2002):
        status = party_status(grid.contexts[node])
        assert status["phase"] == "failed", status
        assert "join" in status["error"]


def test_a_second_start_of_a_grpc_session_on_a_node_is_refused(tmp_path):
    data = _data()
    config, grid = _session(tmp_path, data)
    first = GrpcDataPlaneWorkflow(config, join_timeout=5)
    first(grid)
    assert len(first.bind()) == 3  # the first session's replies, every proof checked
    sent = len(grid.sent)
    with pytest.raises(ProtocolError):
        GrpcDataPlaneWorkflow(config, join_timeout=5)(grid)
    errors = [r for r in grid.received[3:] if r.has_error()]
    assert len(grid.sent) == sent + 3 and len(errors) == 3
    assert all("already started on this node" in r.error.reason for r in errors)


def test_the_workflow_returns_with_the_result_and_checks_the_proofs_when_asked(tmp_path):
    # Flower's reply path (ClientApp exit, the SuperNode's push, the ServerApp's pull) is
    # slow in a deployment: the workflow returns once the coordinator's result is final,
    # and the nodes' binding proofs are pulled and checked when the binding is read
    data = _data()
    config, grid = _session(tmp_path, data)
    grid.hold_replies()
    workflow = GrpcDataPlaneWorkflow(config, join_timeout=5)
    outcome = workflow(grid)
    expected = plaintext_sq_distances(np.concatenate(list(data.values())), BOUND, SCALE_BITS)
    assert np.array_equal(np.asarray(outcome.integer), expected)
    assert not grid.received  # returned without a single reply
    deadline = time.monotonic() + 30
    while grid.answered() < 3 and time.monotonic() < deadline:  # the ClientApps return
        time.sleep(0.05)
    assert grid.answered() == 3
    grid.release_replies()
    assert workflow.nodes == {"org-0": 2000, "org-1": 2001, "org-2": 2002}
    assert not workflow.refused and not workflow.unbound
    assert workflow.ends == {node: ("done", "") for node in (2000, 2001, 2002)}
    assert len(grid.received) == 3
    stamps = workflow.timeline
    assert stamps["call"] <= stamps["pushed"] <= stamps["outcome"] <= stamps["returned"]
    assert all(stamps["returned"] <= stamps[f"reply:{node}"] <= stamps["bound"]
               for node in (2000, 2001, 2002))
    assert workflow.bind() == workflow.nodes and len(grid.received) == 3  # once only

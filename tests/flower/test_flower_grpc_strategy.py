"""ClusteredFedAvg over the gRPC data plane: one Flower message per node runs the whole
clustering session over omnifc's gRPC + mutual TLS (127.0.0.1), then per-cluster FedAvg over
Flower. The ServerApp learns which node runs which party only from each node's binding proof
(omnifc.flower._binding): these tests check that the groups come back, that D is exact, and
that a node cannot get another party's cluster model by claiming its name, by replaying its
proof, or keep the session waiting by not answering.

Transport: ``flower_helpers.ThreadedGrid`` (real ClientApps and Contexts, each message handled
in a thread of its own, as SuperNodes run concurrently)."""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time

import numpy as np
import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
    ".ci/protobuf_matrix.sh runs these tests in its low venv, which has flwr 1.42")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict  # noqa: E402
from flwr.common import MessageType  # noqa: E402

from finite_field import ProtocolError  # noqa: E402
from omnifc.flower import ClusteredFedAvg, NodeBindingError, embedding  # noqa: E402
from omnifc.flower import _constants as C  # noqa: E402

from flower_helpers import grpc_session  # noqa: E402
from test_flower_strategy import (BOUND, DIM, GROUPS, ROUNDS, SCALE_BITS, partition,  # noqa: E402
                                  planted, replay, trainer)

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from oracles import plaintext_sq_distances  # noqa: E402

#: one gRPC session on loopback per test, then a few Flower rounds in process
pytestmark = [pytest.mark.protobuf_matrix, pytest.mark.network, pytest.mark.slow,
              pytest.mark.timeout(180)]


def _run(config, grid, rounds=ROUNDS):
    strategy = ClusteredFedAvg(config, embedding("raw", n_clusters=GROUPS), transport="grpc",
                               workflow_options={"join_timeout": 10})
    w0 = np.zeros(DIM)
    result = strategy.start(grid, ArrayRecord({"w": Array(w0)}), num_rounds=rounds,
                            timeout=30.0)
    return result, w0


def _members(labels_by_name: dict) -> dict:
    out: dict = {}
    for name, c in labels_by_name.items():
        out.setdefault(c, []).append(name)
    return out


def _trained(grid, node) -> list:
    """The models the server sent ``node`` to train."""
    return [m.content["arrays"]["w"].numpy() for m in grid.sent
            if m.metadata.dst_node_id == node and m.metadata.message_type == MessageType.TRAIN]


def test_clustered_fedavg_over_the_grpc_data_plane_recovers_the_groups(tmp_path):
    rows, targets, group = planted()
    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, register=trainer(rows, targets))
    result, w0 = _run(config, grid)
    # D through omnifc's gRPC session equals the plaintext quantized D, bit for bit
    outcome = result.outcomes[0]
    assert outcome.party_names == list(rows)
    expected = plaintext_sq_distances(np.concatenate(list(rows.values())), BOUND, SCALE_BITS)
    assert np.array_equal(np.asarray(outcome.integer), expected)
    # every party was bound to the node that runs it, by its proof alone
    assert result.parties == {node: name for name, node in node_of.items()}
    assert not result.unbound
    # the planted groups come back, and each cluster model is its members' FedAvg
    labels = {result.parties[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)
    oracle = replay(rows, targets, _members(labels), w0, ROUNDS)
    for c, model in result.models.items():
        np.testing.assert_allclose(model["w"].numpy(), oracle[c], rtol=1e-12, atol=1e-12)
    # Flower carried one omnifc message per node: the start (no row, no address)
    omnifc = [m for m in grid.sent if m.metadata.message_type == C.MESSAGE_TYPE]
    assert sorted(m.metadata.dst_node_id for m in omnifc) == sorted(node_of.values())
    for message in omnifc:
        assert dict(message.content.config_records[C.RECORD]) == {
            C.KEY_SESSION: config.session_id, C.KEY_START: True,
            C.KEY_TRANSPORT: C.TRANSPORT_GRPC}
    for name, node in node_of.items():
        assert len(_trained(grid, node)) == ROUNDS


def test_a_node_claiming_another_partys_name_gets_no_cluster_model(tmp_path):
    """The node of org-0 runs org-0's party honestly, then claims to be org-4 (another
    group) to be sent org-4's cluster model: its proof is org-0's, so it is refused, org-4
    stays bound to its own node, and org-0 (whose node did not prove it) gets nothing."""
    rows, targets, group = planted()
    assert group["org-0"] != group["org-4"]

    def wrap(name, app):
        if name != "org-0":
            return app

        def liar(message, context):
            reply = app(message, context)
            if message.metadata.message_type == C.MESSAGE_TYPE:
                record = reply.content.config_records[C.RECORD]
                record[C.KEY_PARTY] = "org-4"  # its own proof, another party's name
            return reply
        return liar

    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, register=trainer(rows, targets),
                                         wrap=wrap)
    result, w0 = _run(config, grid)
    liar, victim = node_of["org-0"], node_of["org-4"]
    assert result.parties.get(liar) is None and liar not in result.labels
    assert result.parties[victim] == "org-4"
    assert _trained(grid, liar) == []  # no cluster model ever reached the liar
    assert set(result.unbound) == {"org-0"}
    # the other clusters are trained as before (org-0 is clustered but gets no model)
    labels = {result.parties[node]: c for node, c in result.labels.items()}
    assert partition(dict(labels, **{"org-0": result.party_labels["org-0"]})) == \
        partition(group)
    oracle = replay(rows, targets, _members(labels), w0, ROUNDS)
    for c, model in result.models.items():
        np.testing.assert_allclose(model["w"].numpy(), oracle[c], rtol=1e-12, atol=1e-12)


def test_the_refusal_says_why(tmp_path):
    """The same attack, seen on the workflow: a NodeBindingError naming node and party."""
    rows, _, _ = planted()

    def wrap(name, app):
        def liar(message, context):
            reply = app(message, context)
            reply.content.config_records[C.RECORD][C.KEY_PARTY] = "org-4"
            return reply
        return liar if name == "org-0" else app

    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, wrap=wrap)
    from omnifc.flower import GrpcDataPlaneWorkflow

    workflow = GrpcDataPlaneWorkflow(config, join_timeout=10)
    workflow(grid)
    error = workflow.refused[node_of["org-0"]]
    assert isinstance(error, NodeBindingError) and isinstance(error, ProtocolError)
    assert error.party == "org-4" and error.node == node_of["org-0"]
    assert "does not verify" in str(error)
    assert workflow.nodes["org-4"] == node_of["org-4"] and "org-0" not in workflow.nodes
    assert "no Flower node proved" in workflow.unbound["org-0"]


def test_a_rogue_node_replaying_another_nodes_proof_is_refused(tmp_path):
    """A seventh node, no party, copies org-3's whole reply (its name and valid proof): the
    proof names org-3's node and message, so the rogue is refused and org-3 keeps its own."""
    rows, targets, group = planted()
    leaked: dict = {}

    def wrap(name, app):
        if name != "org-3":
            return app

        def leaky(message, context):  # org-3's reply leaks (to the rogue)
            reply = app(message, context)
            if message.metadata.message_type == C.MESSAGE_TYPE:
                leaked.update(dict(reply.content.config_records[C.RECORD]))
            return reply
        return leaky

    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, register=trainer(rows, targets),
                                         wrap=wrap)
    rogue = 1999  # a lower node id than any party's: first in line

    def replayer(message, context):
        if message.metadata.message_type != C.MESSAGE_TYPE:
            raise AssertionError("the rogue node was sent a model")
        deadline = time.monotonic() + 60
        while not leaked and time.monotonic() < deadline:
            time.sleep(0.05)
        return Message(RecordDict({C.RECORD: ConfigRecord(dict(leaked))}), reply_to=message)

    grid.add_node(rogue, replayer, {C.NODE_PARTY: "rogue"})
    assert leaked == {}
    result, w0 = _run(config, grid)
    assert leaked[C.KEY_PARTY] == "org-3" and len(leaked[C.KEY_PROOF]) == 64
    assert rogue not in result.labels and rogue not in result.parties
    assert result.parties[node_of["org-3"]] == "org-3"
    assert not result.unbound
    assert _trained(grid, rogue) == []
    labels = {result.parties[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)


def test_a_node_that_never_answers_is_a_dropout_for_training(tmp_path):
    """org-2's node runs its party (its rows are in D) but its reply never arrives: org-2
    is clustered, unbound, and gets no model; the others train; the wait is bounded by the
    result deadline."""
    rows, targets, group = planted()
    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, register=trainer(rows, targets),
                                         result_deadline=3.0)
    grid.drop_reply(node_of["org-2"])
    start = time.monotonic()
    result, w0 = _run(config, grid, rounds=1)
    assert time.monotonic() - start < 120
    expected = plaintext_sq_distances(np.concatenate(list(rows.values())), BOUND, SCALE_BITS)
    assert np.array_equal(np.asarray(result.outcomes[0].integer), expected)
    assert set(result.unbound) == {"org-2"}
    assert "no Flower node proved" in result.unbound["org-2"]
    assert node_of["org-2"] not in result.labels
    assert partition(result.party_labels) == partition(group)
    # its node was sent no model; every other node one per round
    trains = [m.metadata.dst_node_id for m in grid.sent
              if m.metadata.message_type == MessageType.TRAIN]
    assert sorted(trains) == sorted(n for p, n in node_of.items() if p != "org-2")


def test_no_bound_node_at_all_is_a_clear_error(tmp_path):
    rows, _, _ = planted()
    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS, result_deadline=1.0)
    for node in node_of.values():
        grid.drop_reply(node)
    with pytest.raises(ProtocolError, match="no party of the clustering is bound"):
        _run(config, grid, rounds=1)


def test_the_binding_transcript_is_omnifcs_transcript_under_its_own_label():
    from omnifc.flower._binding import LABEL, binding_transcript

    def field(data: bytes) -> bytes:  # docs/protocol.md, re-encoded here independently
        return len(data).to_bytes(4, "big") + data

    fields = ("s-1", "org-a", b"n" * 32, b"r" * 32, 1234, "message-id")
    expected = (b"omnifc" + field(b"3") + field(b"flower-node-binding") + field(b"s-1")
                + field(b"org-a") + field(b"n" * 32) + field(b"r" * 32) + field(b"1234")
                + field(b"message-id"))
    assert binding_transcript(*fields) == expected
    assert LABEL not in ("hello", "roster-confirmation", "resume", "roster")


def test_the_strategy_clusters_while_the_proofs_travel_and_checks_them_before_any_label(
        tmp_path):
    # the clustering runs while the nodes' replies are still on Flower's reply path (held
    # here); the labels by node come only after every proof was pulled and checked
    rows, targets, group = planted()
    config, grid, node_of = grpc_session(tmp_path, rows, dim=DIM, bound=BOUND,
                                         scale_bits=SCALE_BITS)
    grid.hold_replies()
    base = embedding("raw", n_clusters=GROUPS)
    seen = []

    def cluster(distances):
        seen.append(len(grid.received))  # replies pulled before the clustering
        grid.release_replies()
        return base.cluster(distances)

    strategy = ClusteredFedAvg(config, dataclasses.replace(base, cluster=cluster),
                               transport="grpc", workflow_options={"join_timeout": 10})
    labels, result = strategy.cluster(grid)
    assert seen == [0]
    assert result.parties == {node: name for name, node in node_of.items()}
    assert set(labels) == set(node_of.values()) and not result.unbound
    members = _members({result.parties[node]: c for node, c in labels.items()})
    assert sorted(sorted(m) for m in members.values()) == sorted(
        sorted(n for n in rows if group[n] == g) for g in set(group.values()))

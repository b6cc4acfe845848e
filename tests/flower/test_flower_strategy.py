"""ClusteredFedAvg: cluster the Flower nodes through the secure D, then FedAvg per cluster.

Transport: ``flower_helpers.LoopbackGrid`` (real ClientApps, one Flower Context per node, a
fresh ClientApp per message). The ClientApps train a numpy least-squares model; the oracle
replays every round in numpy from the same initial model and the same local-update rule.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
    ".ci/protobuf_matrix.sh runs these tests in its low venv, which has flwr 1.42")

#: in-process Grid, no sockets: .ci/run runs these in the matrix's low venv (flwr 1.42)
pytestmark = pytest.mark.protobuf_matrix

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.common import MessageType  # noqa: E402

from finite_field import ParameterError  # noqa: E402
from omnifc.flower import (ClusteredFedAvg, client_distances, embedding)  # noqa: E402
from omnifc.flower import _constants as C  # noqa: E402
from protocols import ReceivedMessage, SessionParameters, Transcript, parse_envelope  # noqa: E402
from protocols._messages import phase_of  # noqa: E402

from flower_helpers import Federation  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "protocols"))
from protocol_helpers import plaintext_sq_distances  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "_flower_strategy_spy", TESTS / "adapters" / "test_protocol_really_runs.py")
really_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(really_runs)

GROUPS = 3
DIM = 4
BOUND, SCALE_BITS = 8.0, 8
ROUNDS = 3
LEARNING_RATE = 0.05
CENTERS = np.array([[4.0, 0.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0], [-4.0, -4.0, 0.0, 0.0]])
WEIGHTS = np.array([[1.0, -2.0, 0.5, 0.0], [-1.0, 0.0, 2.0, 1.0], [0.0, 3.0, -1.0, -2.0]])


def planted(n_nodes: int = 6, seed: int = 0):
    """Nodes in 3 planted groups (node i in group i % 3), 3 to 5 rows each: the rows are
    the node's samples (the raw-sample embedding); the targets follow the group's weights."""
    rng = np.random.default_rng(seed)
    rows, targets, group = {}, {}, {}
    for i in range(n_nodes):
        g = i % GROUPS
        x = CENTERS[g] + rng.normal(0, 0.3, (3 + i % 3, DIM))
        rows[f"org-{i}"] = x
        targets[f"org-{i}"] = x @ WEIGHTS[g] + rng.normal(0, 0.01, x.shape[0])
        group[f"org-{i}"] = g
    return rows, targets, group


def local_update(w, x, y, steps: int = 2):
    """The ClientApp's training: full-batch gradient steps on the mean squared error."""
    w = np.array(w, dtype=np.float64)
    for _ in range(steps):
        w = w - LEARNING_RATE * 2.0 / x.shape[0] * x.T @ (x @ w - y)
    return w


def trainer(rows, targets):
    """``register(app, name)``: the ClientApp's Flower train and evaluate handlers."""

    def register(app, name):
        x, y = rows[name], targets[name]

        @app.train()
        def train(message, context):
            w = message.content["arrays"]["w"].numpy()
            new = local_update(w, x, y)
            content = RecordDict({"arrays": ArrayRecord({"w": Array(new)}),
                                  "metrics": MetricRecord({"num-examples": x.shape[0],
                                                           "loss": float(np.mean((x @ new - y) ** 2))})})
            return Message(content, reply_to=message)

        @app.evaluate()
        def evaluate(message, context):
            w = message.content["arrays"]["w"].numpy()
            content = RecordDict({"metrics": MetricRecord(
                {"num-examples": x.shape[0], "loss": float(np.mean((x @ w - y) ** 2))})})
            return Message(content, reply_to=message)

    return register


def replay(rows, targets, members_of, w0, rounds, left_out=()):
    """The numpy oracle: per cluster, every round, the example-weighted mean of the members'
    local updates (members in ``left_out`` never reply)."""
    models = {}
    for c, members in members_of.items():
        w = np.array(w0)
        for _ in range(rounds):
            replying = [m for m in members if m not in left_out]
            updates = np.stack([local_update(w, rows[m], targets[m]) for m in replying])
            sizes = np.array([rows[m].shape[0] for m in replying], dtype=np.float64)
            w = (sizes[:, None] * updates).sum(axis=0) / sizes.sum()
        models[c] = w
    return models


def partition(labels_by_name: dict) -> set:
    out: dict = {}
    for name, c in labels_by_name.items():
        out.setdefault(c, set()).add(name)
    return {frozenset(v) for v in out.values()}


def run_strategy(federation, **options):
    strategy = ClusteredFedAvg(federation.workflow(**options.pop("workflow_options", {})),
                               embedding("raw", n_clusters=GROUPS), **options)
    w0 = np.zeros(DIM)
    result = strategy.start(federation.grid, ArrayRecord({"w": Array(w0)}), num_rounds=ROUNDS,
                            timeout=2.0)
    return strategy, result, w0


@pytest.mark.timeout(120)
def test_clustered_fedavg_recovers_the_groups_and_trains_one_fedavg_model_per_cluster():
    rows, targets, group = planted()
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS)
    federation = Federation(rows, parameters, register=trainer(rows, targets))
    _, result, w0 = run_strategy(federation)
    # D through the secure session equals the plaintext quantized D, bit for bit
    outcome = result.outcomes[0]
    expected = plaintext_sq_distances(np.concatenate(list(rows.values())), BOUND, SCALE_BITS)
    assert np.array_equal(outcome.integer, expected)
    # the client distances are those of the quantized row centroids
    quantized = {n: np.round(np.clip(x, -BOUND, BOUND) * 2 ** SCALE_BITS) / 2 ** SCALE_BITS
                 for n, x in rows.items()}
    centroids = np.stack([quantized[n].mean(axis=0) for n in outcome.party_names])
    np.testing.assert_allclose(result.distances,
                               ((centroids[:, None] - centroids[None]) ** 2).sum(-1),
                               rtol=1e-9, atol=1e-9)
    # the planted groups come back
    name_of = {node: name for name, node in federation.node_of.items()}
    labels = {name_of[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)
    # each cluster model is the FedAvg of its members' updates, round after round
    members_of = {}
    for name, c in labels.items():
        members_of.setdefault(c, []).append(name)
    oracle = replay(rows, targets, members_of, w0, ROUNDS)
    assert set(result.models) == set(oracle)
    for c, model in result.models.items():
        np.testing.assert_allclose(model["w"].numpy(), oracle[c], rtol=1e-12, atol=1e-12)
    models = [result.models[c]["w"].numpy() for c in sorted(result.models)]
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            assert np.linalg.norm(models[i] - models[j]) > 0.1  # one model per cluster
    # every train message went to a clustered node with its own cluster's model
    trains = [m for m in federation.grid.sent if m.metadata.message_type == MessageType.TRAIN]
    assert len(trains) == ROUNDS * len(rows)
    assert result.train_metrics[ROUNDS] and result.evaluate_metrics[ROUNDS]


@pytest.mark.timeout(120)
def test_the_oracle_catches_a_wrong_aggregation():
    """The replay can fail: averaging without the example weights gives other models."""
    rows, targets, group = planted(seed=1)
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS)
    federation = Federation(rows, parameters, register=trainer(rows, targets))
    _, result, w0 = run_strategy(federation, weighted_by_key="loss")
    name_of = {node: name for name, node in federation.node_of.items()}
    members_of = {}
    for node, c in result.labels.items():
        members_of.setdefault(c, []).append(name_of[node])
    oracle = replay(rows, targets, members_of, w0, ROUNDS)
    assert any(not np.allclose(result.models[c]["w"].numpy(), oracle[c], rtol=1e-12,
                               atol=1e-12) for c in oracle)


@pytest.mark.timeout(120)
def test_a_newcomer_joins_the_nearest_cluster_through_a_second_secure_session():
    rows, targets, group = planted(n_nodes=7, seed=2)   # org-6 arrives after training
    trained = [f"org-{i}" for i in range(6)]
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS)
    federation = Federation(rows, parameters, register=trainer(rows, targets),
                            sessions={"cluster": trained, "assign": trained + ["org-6"]},
                            session_id="cluster", newcomers=["org-6"])
    strategy = ClusteredFedAvg(federation.workflow("cluster"),
                               embedding("raw", n_clusters=GROUPS),
                               newcomer_workflow=federation.workflow("assign"))
    grid = federation.grid

    def connect_newcomer(server_round, cluster, arrays):  # during the last round
        if server_round == 2 and federation.node_of["org-6"] not in grid.apps:
            federation.join("org-6")

    result = strategy.start(grid, ArrayRecord({"w": Array(np.zeros(DIM))}), num_rounds=2,
                            timeout=5.0, evaluate_fn=connect_newcomer)
    node = federation.node_of["org-6"]
    assert node not in result.labels and set(result.newcomers) == {node}
    same_group = [federation.node_of[n] for n in trained if group[n] == group["org-6"]]
    assert {result.labels[n] for n in same_group} == {result.newcomers[node]}
    # the assignment is the nearest centroid of the second session's exact D
    d = client_distances(result.outcomes[1].values, result.outcomes[1].rows)
    train_labels = np.array([result.labels[federation.node_of[n]] for n in trained])
    to_train, within = d[6, :6], d[:6, :6]
    centroid = [to_train[train_labels == c].mean()
                - within[np.ix_(train_labels == c, train_labels == c)].sum()
                / (2 * (train_labels == c).sum() ** 2) for c in sorted(set(train_labels))]
    assert result.newcomers[node] == sorted(set(train_labels))[int(np.argmin(centroid))]
    # it was evaluated on its cluster's model
    sent = [m for m in grid.sent if m.metadata.dst_node_id == node
            and m.metadata.message_type == MessageType.EVALUATE]
    assert len(sent) == 1
    assert np.array_equal(sent[0].content["arrays"]["w"].numpy(),
                          result.models[result.newcomers[node]]["w"].numpy())
    assert node in result.newcomer_metrics
    assert not [m for m in grid.sent if m.metadata.dst_node_id == node
                and m.metadata.message_type == MessageType.TRAIN]


@pytest.mark.timeout(120)
def test_a_node_silent_mid_workflow_is_a_dropout_in_clustering_and_in_training():
    """org-2 stops answering in the clustering's evaluation: the session completes without
    it (its rows were shared already, so it is still clustered), and its cluster's FedAvg
    averages the members that reply."""
    from test_flower_workflow import SilentAfter

    rows, targets, group = planted(seed=3)
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS, adversaries=0)
    federation = Federation(rows, parameters, register=trainer(rows, targets))
    SilentAfter(federation.grid, federation.node_of["org-2"], "round_start")
    _, result, w0 = run_strategy(federation)
    outcome = result.outcomes[0]
    assert "org-2" not in outcome.responders and outcome.round == 2
    expected = plaintext_sq_distances(np.concatenate(list(rows.values())), BOUND, SCALE_BITS)
    assert np.array_equal(outcome.integer, expected)
    name_of = {node: name for name, node in federation.node_of.items()}
    labels = {name_of[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)
    members_of = {}
    for name, c in labels.items():
        members_of.setdefault(c, []).append(name)
    oracle = replay(rows, targets, members_of, w0, ROUNDS, left_out={"org-2"})
    for c, model in result.models.items():
        np.testing.assert_allclose(model["w"].numpy(), oracle[c], rtol=1e-12, atol=1e-12)


def _spy_transcript(federation, observe_into: Transcript):
    def observe(direction, node, data):
        if direction != "in":
            return
        name = {n: p for p, n in federation.node_of.items()}.get(node, str(node))
        for raw in data:
            kind = parse_envelope(raw).WhichOneof("body")
            observe_into.messages.append(ReceivedMessage(name, kind, phase_of(kind), raw))
    return observe


def _flower_payload_bytes(messages) -> bytes:
    """Every array, config and metric value the messages carried, as bytes."""
    out = []
    for message in messages:
        if message.has_error():
            continue
        content = message.content
        for record in content.array_records.values():
            out += [a.numpy().tobytes() for a in record.values()]
        for record in list(content.config_records.values()) + list(
                content.metric_records.values()):
            for value in record.values():
                values = value if isinstance(value, list) else [value]
                out += [v if isinstance(v, bytes) else repr(v).encode() for v in values]
    return b"".join(out)


@pytest.mark.timeout(120)
def test_server_side_spy_on_the_strategy_sees_no_plaintext_row():
    rows, targets, _ = planted(seed=4)
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS)
    federation = Federation(rows, parameters, register=trainer(rows, targets))
    transcript = Transcript()
    _, result, _ = run_strategy(
        federation, workflow_options={"observe": _spy_transcript(federation, transcript)})
    grid = federation.grid
    # every omnifc byte the server pulled is in the spy's transcript, and none is plaintext
    carried = [bytes(b) for m in grid.received
               if m.metadata.message_type == C.MESSAGE_TYPE
               for b in (m.content.config_records[C.RECORD].get(C.KEY_ENVELOPES) or [])]
    assert carried == [m.data for m in transcript.messages]
    transcript.parties = {name: federation.rebuilt_party(name) for name in rows}
    really_runs.assert_coordinator_saw_no_plaintext((parameters, rows, result.outcomes[0],
                                                     transcript))
    # the training traffic (models, metrics) carries no embedding row either
    payload = _flower_payload_bytes(grid.sent + grid.received)
    assert payload  # the spy read something
    for name, x in rows.items():
        quantized = np.round(np.clip(x, -BOUND, BOUND) * 2 ** SCALE_BITS).astype(np.int64)
        for row, qrow in zip(x, quantized):
            assert row.tobytes() not in payload, name
            assert qrow.tobytes() not in payload, name


def test_flower_payload_spy_can_fail():
    """The payload spy finds a row a ClientApp put into its reply."""
    x = np.arange(8.0).reshape(2, 4)
    leaky = Message(RecordDict({"arrays": ArrayRecord({"w": Array(x[1].copy())})}),
                    dst_node_id=1, message_type=MessageType.TRAIN)
    assert x[1].tobytes() in _flower_payload_bytes([leaky])


def test_embeddings_check_their_options():
    with pytest.raises(ParameterError, match="n_clusters"):
        embedding("clove")
    with pytest.raises(ParameterError, match="FLUX chooses K"):
        embedding("flux", n_clusters=3)
    with pytest.raises(ParameterError, match="one of"):
        embedding("fmcl-typo")
    with pytest.raises(ParameterError, match="resolution"):
        embedding("fmcl")
    with pytest.raises(ParameterError, match="not both"):
        embedding("fmcl", resolution=8, n_clusters=2, rule="silhouette")
    with pytest.raises(ParameterError, match="sum to"):
        client_distances(np.zeros((3, 3)), [1, 1])


@pytest.mark.parametrize("name, options", [("raw", {"n_clusters": 2}),
                                           ("clove", {"n_clusters": 2}),
                                           ("client2vec", {"n_clusters": 2}),
                                           ("flux", {})])
def test_each_embedding_clusters_two_planted_groups(name, options):
    x = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0], [5.1, 5.0], [5.0, 5.1]])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    labels = embedding(name, **options).cluster(d)
    assert partition(dict(enumerate(labels))) == {frozenset({0, 1, 2}), frozenset({3, 4, 5})}


@pytest.mark.timeout(120)
def test_reclustering_every_k_rounds_runs_a_fresh_session_and_keeps_the_cluster_models():
    rows, targets, group = planted(seed=5)
    parameters = SessionParameters(dim=DIM, bound=BOUND, scale_bits=SCALE_BITS)
    federation = Federation(rows, parameters, register=trainer(rows, targets),
                            sessions={"c0": list(rows), "c1": list(rows)}, session_id="c0")
    strategy = ClusteredFedAvg(lambda k: federation.workflow(f"c{k}"),
                               embedding("raw", n_clusters=GROUPS), recluster_every=2)
    w0 = np.zeros(DIM)
    result = strategy.start(federation.grid, ArrayRecord({"w": Array(w0)}), num_rounds=ROUNDS,
                            timeout=5.0)
    assert len(result.outcomes) == 2  # before round 1 and before round 3
    expected = plaintext_sq_distances(np.concatenate(list(rows.values())), BOUND, SCALE_BITS)
    for outcome in result.outcomes:
        assert np.array_equal(outcome.integer, expected)
    assert {m.metadata.group_id for m in federation.grid.sent
            if m.metadata.message_type == C.MESSAGE_TYPE} == {"c0", "c1"}
    name_of = {node: name for name, node in federation.node_of.items()}
    labels = {name_of[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)
    members_of = {}
    for name, c in labels.items():
        members_of.setdefault(c, []).append(name)
    oracle = replay(rows, targets, members_of, w0, ROUNDS)  # the same clusters: continued
    for c, model in result.models.items():
        np.testing.assert_allclose(model["w"].numpy(), oracle[c], rtol=1e-12, atol=1e-12)
    with pytest.raises(ParameterError, match="fresh session"):
        ClusteredFedAvg(federation.workflow("c0"), embedding("raw", n_clusters=2),
                        recluster_every=2)

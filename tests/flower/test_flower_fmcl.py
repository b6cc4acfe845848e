"""FMCL as a built-in embedding of ClusteredFedAvg: two secure sessions (parts "z" and "t"),
combined by the server into FMCL's distance.

Each node holds a class-aware signature (class mean embeddings and class weights); its rows are
``omnifc.flower.fmcl_rows`` (FMCL's thermometer rows plus the public zero anchor). The oracle is
FMCL's own plaintext pipeline (``omnifc.adapters.fmcl.secure_thermometer_distances`` with
``secure=False``: the same quantized integers in the clear) and, within FMCL's documented error
bound, the unquantized ``fmcl_distances``. Transport: the in-process LoopbackGrid (real
ClientApps and Contexts, a fresh ClientApp per message)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
    ".ci/protobuf_matrix.sh runs these tests in its low venv, which has flwr 1.42")

from flwr.app import Array, ArrayRecord  # noqa: E402
from flwr.common import MessageType  # noqa: E402

from finite_field import ParameterError, ProtocolError  # noqa: E402
from omnifc.adapters import fmcl  # noqa: E402
from omnifc.flower import ClusteredFedAvg, embedding, fmcl_dims, fmcl_rows  # noqa: E402
from omnifc.flower import _constants as C  # noqa: E402
from protocols import SessionParameters  # noqa: E402

from flower_helpers import Federation  # noqa: E402
from test_flower_strategy import partition  # noqa: E402

pytestmark = pytest.mark.protobuf_matrix

CLASSES, DIM, Q, SCALE_BITS = 3, 4, 10, 12
#: per group: the direction of each class mean, and the class weights (multiples of 1/Q)
DIRECTIONS = np.array([
    [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
    [[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, -1.0, 1.0, 0.0]],
    [[-1.0, 0.0, 1.0, 0.0], [0.0, 0.0, -1.0, 1.0], [1.0, 0.0, 0.0, -1.0]],
])
WEIGHTS = np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3], [0.3, 0.2, 0.5]])


def signatures(n_nodes: int = 6, seed: int = 0):
    """Node i in group i % 3: its class means are the group's directions plus noise, its
    class weights the group's (some nodes' shifted by 1/Q)."""
    rng = np.random.default_rng(seed)
    means, weights, group = {}, {}, {}
    for i in range(n_nodes):
        g = i % 3
        means[f"org-{i}"] = DIRECTIONS[g] + rng.normal(0, 0.05, (CLASSES, DIM))
        w = WEIGHTS[g].copy()
        if i >= 3:
            w[0] += 0.1
            w[2] -= 0.1
        weights[f"org-{i}"], group[f"org-{i}"] = w, g
    return means, weights, group


def federation(means, weights, **options):
    dims = fmcl_dims(CLASSES, DIM, Q)
    rows = {name: fmcl_rows(means[name], weights[name], Q) for name in means}
    sessions = {"fmcl-z": list(rows), "fmcl-t": list(rows)}
    parameters = {"fmcl-z": SessionParameters(dim=dims["z"], bound=1.0, scale_bits=SCALE_BITS),
                  "fmcl-t": SessionParameters(dim=dims["t"], bound=1.0, scale_bits=SCALE_BITS,
                                              nonnegative=True)}
    return Federation(rows, parameters, sessions=sessions, session_id="fmcl-z", **options)


def plaintext(means, weights, names):
    return fmcl.secure_thermometer_distances(
        np.stack([means[n] for n in names]), np.stack([weights[n] for n in names]),
        resolution=Q, scale_bits=SCALE_BITS, secure=False)


def _strategy(fed, **options):
    return ClusteredFedAvg({"z": fed.workflow("fmcl-z", part="z"),
                            "t": fed.workflow("fmcl-t", part="t")},
                           embedding("fmcl", resolution=Q, **options),
                           fraction_train=0.0, fraction_evaluate=0.0)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fmcl_embedding_recovers_the_groups_and_its_d_is_the_plaintext_fmcl_d():
    means, weights, group = signatures()
    fed = federation(means, weights)
    result = _strategy(fed, n_clusters=3).start(fed.grid, ArrayRecord({"w": Array(np.zeros(2))}),
                                               num_rounds=1)
    names = result.outcomes[0].party_names
    assert names == list(means)
    # D equals FMCL's plaintext pipeline on the same quantized integers, bit for bit
    expected = plaintext(means, weights, names)
    assert np.array_equal(result.distances, expected)
    # and the unquantized FMCL distance within FMCL's documented bound
    stacked_m = np.stack([means[n] for n in names])
    stacked_w = np.stack([weights[n] for n in names])
    bound = fmcl.thermometer_error_bound(stacked_m, stacked_w, resolution=Q,
                                         scale_bits=SCALE_BITS)
    assert np.all(np.abs(result.distances - fmcl.fmcl_distances(stacked_m, stacked_w))
                  <= bound + 1e-12)
    # the planted groups come back
    labels = {result.parties[node]: c for node, c in result.labels.items()}
    assert partition(labels) == partition(group)
    # each part's session sent its part's rows: z then t, each a row and the zero anchor
    for (part, outcome), dim in zip(result.sessions[0].items(), (CLASSES * Q * DIM, CLASSES * Q)):
        assert outcome.rows == [2] * len(names) and outcome.parameters["dim"] == dim, part
    starts = [m for m in fed.grid.sent if m.metadata.message_type == C.MESSAGE_TYPE
              and m.content.config_records[C.RECORD].get(C.KEY_START)]
    assert sorted(str(m.content.config_records[C.RECORD][C.KEY_PART]) for m in starts) == \
        ["t"] * 6 + ["z"] * 6
    assert not [m for m in fed.grid.sent if m.metadata.message_type == MessageType.TRAIN]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_fmcl_with_its_k_rule_clusters_as_fmcl_server_does_on_the_plaintext_d():
    means, weights, group = signatures(seed=1)
    fed = federation(means, weights)
    result = _strategy(fed).start(fed.grid, ArrayRecord({"w": Array(np.zeros(2))}),
                                  num_rounds=1)
    names = result.outcomes[0].party_names
    expected = fmcl.fmcl_server(plaintext(means, weights, names)).labels
    got = [result.party_labels[n] for n in names]
    assert partition(dict(enumerate(got))) == partition(dict(enumerate(expected)))
    assert partition(result.party_labels) == partition(group)  # K = 3 found


def _outcome(points, names):
    """A stand-in Outcome: two rows per party (row, anchor), integer squared distances."""
    x = np.asarray(points, dtype=np.int64)
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    return SimpleNamespace(rows=[2] * len(names), party_names=list(names), integer=d,
                           values=d.astype(np.float64))


def test_fmcl_combine_refuses_anchors_that_are_not_one_point():
    e = embedding("fmcl", resolution=2, n_clusters=2)
    good = _outcome([[1, 0], [0, 0], [0, 1], [0, 0]], ["a", "b"])
    bad = _outcome([[1, 0], [0, 0], [0, 1], [1, 1]], ["a", "b"])
    assert e.distances({"z": good, "t": good}).shape == (2, 2)
    with pytest.raises(ProtocolError, match="anchor rows are not one point"):
        e.distances({"z": good, "t": bad})
    three = SimpleNamespace(rows=[3, 1], party_names=["a", "b"], integer=None, values=None)
    with pytest.raises(ProtocolError, match="2 rows"):
        e.distances({"z": three, "t": good})
    with pytest.raises(ParameterError, match="parts"):
        e.distances({None: good})


def test_a_multi_part_embedding_needs_one_session_per_part():
    means, weights, _ = signatures()
    fed = federation(means, weights)
    with pytest.raises(ParameterError, match="one session per part"):
        ClusteredFedAvg(fed.workflow("fmcl-z"), embedding("fmcl", resolution=Q)).start(
            fed.grid, ArrayRecord({"w": Array(np.zeros(2))}), num_rounds=1)
    with pytest.raises(ParameterError, match="parts"):
        ClusteredFedAvg({"z": fed.workflow("fmcl-z")}, embedding("raw", n_clusters=2)).start(
            fed.grid, ArrayRecord({"w": Array(np.zeros(2))}), num_rounds=1)


def test_a_node_without_the_asked_part_fails_with_a_clear_error():
    from omnifc.flower import PartyHandler

    handler = PartyHandler(lambda context: {"z": np.zeros((2, 3))})
    with pytest.raises(ProtocolError, match="part 't'"):
        handler._rows(None, "s", "t")
    with pytest.raises(ProtocolError, match="names no embedding part"):
        handler._rows(None, "s", None)
    plain = PartyHandler(lambda context: np.zeros((1, 3)))
    with pytest.raises(ProtocolError, match="one array"):
        plain._rows(None, "s", "z")


def test_fmcl_newcomers_join_the_cluster_of_least_mean_distance():
    # clustered clients 0-3 in clusters [0, 0, 1, 1]; newcomers 4 (near 0-1) and 5 (near 2-3)
    d = np.array([[0, 1, 9, 9, 1, 8],
                  [1, 0, 9, 9, 2, 9],
                  [9, 9, 0, 1, 9, 1],
                  [9, 9, 1, 0, 8, 2],
                  [1, 2, 9, 8, 0, 9],
                  [8, 9, 1, 2, 9, 0]], dtype=float)
    e = embedding("fmcl", resolution=2, n_clusters=2)
    assert e.assign(d, np.array([0, 0, 1, 1])).tolist() == [0, 1]
    assert e.assign(d, np.array([1, 1, 0, 0])).tolist() == [1, 0]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(240)
def test_fmcl_over_the_grpc_data_plane_two_configs_same_keys(tmp_path):
    """FMCL through ClusteredFedAvg(transport="grpc"): two session configs over the same
    identity keys (one per part), one Flower message per node per part; D as in plaintext,
    every node bound by its proof in both sessions."""
    from flower_helpers import grpc_session

    means, weights, group = signatures(seed=2)
    dims = fmcl_dims(CLASSES, DIM, Q)
    rows = {name: fmcl_rows(means[name], weights[name], Q) for name in means}
    configs, grid, node_of = grpc_session(
        tmp_path, rows, dim=dims["z"], bound=1.0, scale_bits=SCALE_BITS,
        more=[SessionParameters(dim=dims["t"], bound=1.0, scale_bits=SCALE_BITS,
                                nonnegative=True)])
    strategy = ClusteredFedAvg({"z": configs[0], "t": configs[1]},
                               embedding("fmcl", resolution=Q, n_clusters=3),
                               transport="grpc", workflow_options={"join_timeout": 10},
                               fraction_train=0.0, fraction_evaluate=0.0)
    result = strategy.start(grid, ArrayRecord({"w": Array(np.zeros(2))}), num_rounds=1)
    names = result.outcomes[0].party_names
    assert np.array_equal(result.distances, plaintext(means, weights, names))
    assert result.parties == {node: name for name, node in node_of.items()}
    assert partition(result.party_labels) == partition(group)
    starts = [m for m in grid.sent if m.metadata.message_type == C.MESSAGE_TYPE]
    assert sorted(str(m.content.config_records[C.RECORD][C.KEY_PART]) for m in starts) == \
        ["t"] * 6 + ["z"] * 6


class _FakeWorkflow:
    """A workflow stand-in: returns a fixed outcome, binds parties to given nodes."""

    def __init__(self, outcome, nodes):
        self.outcome, self.nodes = outcome, dict(nodes)

    def __call__(self, grid):
        return self.outcome


def test_a_party_bound_to_different_nodes_in_two_parts_gets_no_model():
    names = ["a", "b", "c"]
    outcome = _outcome([[1, 0], [0, 0], [0, 1], [0, 0], [1, 1], [0, 0]], names)
    z = _FakeWorkflow(outcome, {"a": 1, "b": 2, "c": 3})
    t = _FakeWorkflow(outcome, {"a": 1, "b": 2, "c": 4})   # c: another node in part t
    strategy = ClusteredFedAvg({"z": z, "t": t}, embedding("fmcl", resolution=2, n_clusters=2))
    labels, result = strategy.cluster(grid=None)
    assert set(labels) == {1, 2} and set(result.party_labels) == set(names)
    assert "different nodes" in result.unbound["c"]
    missing = _FakeWorkflow(outcome, {"a": 1, "b": 2})
    labels, result = ClusteredFedAvg({"z": z, "t": missing}, embedding(
        "fmcl", resolution=2, n_clusters=2)).cluster(grid=None)
    assert set(labels) == {1, 2} and set(result.unbound) == {"c"}


def test_a_session_config_becomes_the_transports_workflow(tmp_path):
    from omnifc.flower import GrpcDataPlaneWorkflow, SecureDistanceWorkflow
    from protocols import generate_certificates, load_session_config

    config = load_session_config(generate_certificates(tmp_path / "certs",
                                                       ["a", "b", "c"]).config)
    grpc = ClusteredFedAvg(config, embedding("raw", n_clusters=2), transport="grpc",
                           workflow_options={"join_timeout": 3})._workflows(config)
    assert isinstance(grpc[None], GrpcDataPlaneWorkflow) and grpc[None].join_timeout == 3
    flower = ClusteredFedAvg({"z": config, "t": config}, embedding("fmcl", resolution=2),
                             transport="flower")._workflows({"z": config, "t": config})
    assert all(isinstance(w, SecureDistanceWorkflow) for w in flower.values())
    assert [w.part for w in flower.values()] == ["z", "t"]
    assert set(flower["z"].pinned) == {"a", "b", "c"}
    with pytest.raises(ParameterError, match="transport"):
        ClusteredFedAvg(config, embedding("raw", n_clusters=2), transport="http")


# -- exact class weights (FMCL's level-set code, grouped when the counts' lcm is large) ----

#: one node per count: 8 primes whose lcm (2^45.2) is too large for one level code, so the
#: adapter's exact path uses the grouped level code; and small counts, where one code fits
EXACT_COUNTS = {"grouped": [37, 41, 43, 47, 53, 59, 61, 67], "single": [5, 6, 7, 8, 9, 10]}
EXACT_CLASSES, EXACT_DIM = 2, 3


def exact_signatures(totals, seed=0):
    """Node i in group i % 2: class means along the group's directions plus noise; class
    counts of its total n_i split about 70:30 (group 0) or 30:70 (group 1)."""
    rng = np.random.default_rng(seed)
    directions = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
                           [[0.0, 0.0, 1.0], [1.0, -1.0, 0.0]]])
    means, counts, group = {}, {}, {}
    for i, total in enumerate(totals):
        g, name = i % 2, f"org-{i}"
        first = int(round(total * (0.7 if g == 0 else 0.3)))
        means[name] = directions[g] + rng.normal(0, 0.05, (EXACT_CLASSES, EXACT_DIM))
        counts[name] = np.array([first, total - first])
        group[name] = g
    return means, counts, group


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", sorted(EXACT_COUNTS))
def test_exact_fmcl_embedding_d_is_the_adapters_exact_d_bit_for_bit(kind):
    from omnifc.flower import fmcl_exact_parameters, fmcl_exact_rows

    totals = EXACT_COUNTS[kind]
    means, counts, group = exact_signatures(totals)
    sample_counts = {name: int(c.sum()) for name, c in counts.items()}
    code, _ = fmcl.exact_code(totals, EXACT_CLASSES, EXACT_DIM)
    assert type(code).__name__ == ("GroupedLevelCode" if kind == "grouped" else "LevelCode")
    rows = {name: fmcl_exact_rows(means[name], counts[name], list(sample_counts.values()))
            for name in means}
    params = fmcl_exact_parameters(sample_counts, EXACT_CLASSES, EXACT_DIM)
    fed = Federation(rows, {"fmcl-z": SessionParameters(**params["z"]),
                            "fmcl-t": SessionParameters(**params["t"])},
                     sessions={"fmcl-z": list(rows), "fmcl-t": list(rows)},
                     session_id="fmcl-z")
    strategy = ClusteredFedAvg({"z": fed.workflow("fmcl-z", part="z"),
                                "t": fed.workflow("fmcl-t", part="t")},
                               embedding("fmcl", sample_counts=sample_counts,
                                         n_classes=EXACT_CLASSES, dim=EXACT_DIM, n_clusters=2),
                               fraction_train=0.0, fraction_evaluate=0.0)
    labels, result = strategy.cluster(fed.grid)
    names = result.outcomes[0].party_names
    assert names == list(means)
    # the adapter's exact path (the same integers in the clear, combined in fractions)
    expected = fmcl.exact_fmcl_distances(np.stack([means[n] for n in names]),
                                         np.stack([counts[n] for n in names]), secure=False)
    assert np.array_equal(result.distances, expected)
    # and the plain FMCL formula on the exact weights, up to the means' 2^-16 rounding
    weights = np.stack([counts[n] / counts[n].sum() for n in names])
    direct = fmcl.fmcl_distances(np.stack([means[n] for n in names]), weights)
    assert np.allclose(result.distances, direct, rtol=1e-3, atol=1e-3)
    assert partition(result.party_labels) == partition(group)


def test_exact_fmcl_embedding_refuses_what_does_not_fit():
    with pytest.raises(ParameterError, match="not both"):
        embedding("fmcl", sample_counts={"a": 3}, n_classes=2, dim=2, resolution=4)
    with pytest.raises(ParameterError, match="n_classes and dim"):
        embedding("fmcl", sample_counts={"a": 3, "b": 4})
    with pytest.raises(ParameterError, match="sample counts"):
        embedding("fmcl")
    e = embedding("fmcl", sample_counts={"a": 3, "b": 4}, n_classes=2, dim=2, n_clusters=2)
    outcome = _outcome([[1, 0], [0, 0], [0, 1], [0, 0]], ["a", "c"])
    with pytest.raises(ProtocolError, match="no public sample count"):
        e.distances({"z": outcome, "t": outcome})
    outcome = _outcome([[1, 0], [0, 0], [0, 1], [0, 0]], ["a", "b"])
    outcome.parameters = {"dim": 2}
    with pytest.raises(ProtocolError, match="dim"):
        e.distances({"z": outcome, "t": outcome})
    # a node whose own count is not one of the public counts has no code
    from omnifc.flower import fmcl_exact_rows
    with pytest.raises(ParameterError, match="sample count"):
        fmcl_exact_rows(np.ones((2, 2)), [2, 3], [3, 4])

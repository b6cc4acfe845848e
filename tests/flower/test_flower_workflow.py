"""omnifc over Flower: the secure-distance workflow driving real ClientApps (issue 21).

Transport: ``flower_helpers.LoopbackGrid``, a direct in-process implementation of Flower's
``Grid`` over real ``ClientApp`` objects and one Flower ``Context`` per node (not Flower's
Ray simulation engine, which needs ``flwr[simulation]``). By default every message reaches
a fresh ClientApp (a new handler object, so nothing survives in memory): the party comes
back from the node's Context alone, as in a ClientApp process per message.
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

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from scipy.cluster.hierarchy import fcluster, linkage  # noqa: E402
from scipy.spatial.distance import squareform  # noqa: E402

from finite_field import DeadlineError, PeerError, ProtocolError  # noqa: E402
from omnifc.flower import (PartySetup, SecureDistanceWorkflow, add_party,  # noqa: E402
                           party_status)
from omnifc.flower import _constants as C  # noqa: E402
from protocols import ReceivedMessage, SessionParameters, Transcript  # noqa: E402
from protocols._identity import public_key_bytes  # noqa: E402
from protocols._messages import phase_of  # noqa: E402

from flower_helpers import Federation, LoopbackGrid  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "protocols"))
from protocol_helpers import plaintext_sq_distances  # noqa: E402


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The plaintext spy of the adapters' tests (ALLOWED_KINDS, no row/share/seed/evaluation).
really_runs = _load(TESTS / "adapters" / "test_protocol_really_runs.py", "_flower_spy_checks")

GROUPS = 3
NODES = 6
ROWS = 3
DIM = 4


def planted(seed: int = 0):
    """6 nodes, 2 per group, 3 rows each; groups far apart, members close together."""
    rng = np.random.default_rng(seed)
    centers = np.array([[4.0, 0.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0], [-4.0, -4.0, 0.0, 0.0]])
    data, truth = {}, []
    for i in range(NODES):
        group = i % GROUPS
        data[f"org-{i}"] = centers[group] + rng.normal(0, 0.1, (ROWS, DIM))
        truth += [group] * ROWS
    return data, np.array(truth)


def recorder():
    transcript = Transcript()
    names = {}

    def observe(direction, node, data):
        if direction != "in":
            return
        for raw in data:
            from protocols import parse_envelope
            kind = parse_envelope(raw).WhichOneof("body")
            transcript.messages.append(ReceivedMessage(names.get(node, str(node)), kind,
                                                       phase_of(kind), raw))
    return transcript, names, observe


@pytest.mark.timeout(120)
def test_flower_session_recovers_planted_groups_with_d_bit_for_bit():
    data, truth = planted()
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters)
    outcome = federation.workflow()(federation.grid)
    expected = plaintext_sq_distances(np.concatenate(list(data.values())), 8.0, 8)
    assert outcome.integer.dtype == np.int64
    assert np.array_equal(outcome.integer, expected)
    assert outcome.responders == list(data) and outcome.round == 1
    # the groups come back from the secure D (average linkage, 3 clusters)
    labels = fcluster(linkage(squareform(outcome.values, checks=False), "average"),
                      GROUPS, "maxclust")
    for group in range(GROUPS):
        assert len(set(labels[truth == group])) == 1
    assert len(set(labels)) == GROUPS
    for name in data:
        assert federation.status(name)["phase"] == "done", federation.status(name)
    # one Flower message per step per node, every one of type query.omnifc
    assert {m.metadata.message_type for m in federation.grid.sent} == {C.MESSAGE_TYPE}


@pytest.mark.timeout(120)
def test_live_handler_and_context_replay_agree():
    """With the handler kept (no fresh ClientApp), the same session also completes."""
    data, _ = planted(1)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters, fresh=False)
    outcome = federation.workflow()(federation.grid)
    expected = plaintext_sq_distances(np.concatenate(list(data.values())), 8.0, 8)
    assert np.array_equal(outcome.integer, expected)


@pytest.mark.timeout(120)
def test_server_side_spy_sees_no_plaintext():
    data, _ = planted(2)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters)
    transcript, names, observe = recorder()
    names.update({node: name for name, node in federation.node_of.items()})
    outcome = federation.workflow(observe=observe)(federation.grid)
    # every byte the Grid carried to the server is in the spy's transcript
    carried = [bytes(b) for m in federation.grid.received
               for b in (m.content.config_records[C.RECORD].get(C.KEY_ENVELOPES) or [])]
    assert carried == [m.data for m in transcript.messages]
    transcript.parties = {name: federation.rebuilt_party(name) for name in data}
    assert all(p.phase == "done" for p in transcript.parties.values())
    really_runs.assert_coordinator_saw_no_plaintext((parameters, data, outcome, transcript))


@pytest.mark.timeout(120)
def test_spy_catches_a_plaintext_leak():
    """The spy can fail: a node that also uploads its quantized rows is caught."""
    data, _ = planted(3)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters)
    transcript, names, observe = recorder()
    names.update({node: name for name, node in federation.node_of.items()})
    outcome = federation.workflow(observe=observe)(federation.grid)
    transcript.parties = {name: federation.rebuilt_party(name) for name in data}
    leaky = transcript.of_kind("tile")[0]
    party = transcript.parties[leaky.sender]
    row = np.asarray(party.quantized, dtype=np.int64).reshape(party.quantized.shape[0], -1)[0]
    prime = int(outcome.parameters["primes"][0])
    transcript.messages.append(ReceivedMessage(
        leaky.sender, "tile", "evaluation", leaky.data + really_runs._packed(row % prime)))
    with pytest.raises(AssertionError, match="plaintext row"):
        really_runs.assert_coordinator_saw_no_plaintext((parameters, data, outcome,
                                                         transcript))


class SilentAfter:
    """Silence a node when the server sends it its first message of the given kind."""

    def __init__(self, grid: LoopbackGrid, node: int, kind: str) -> None:
        self.grid, self.node, self.kind = grid, node, kind
        original = grid.push_messages

        def push(messages):
            messages = list(messages)
            from protocols import parse_envelope
            for message in messages:
                if message.metadata.dst_node_id != self.node:
                    continue
                record = message.content.config_records.get(C.RECORD)
                if record is None:  # a train or evaluate message
                    continue
                kinds = {parse_envelope(b).WhichOneof("body")
                         for b in (record.get(C.KEY_ENVELOPES) or [])}
                if self.kind in kinds:
                    grid.silence(self.node)
            return original(messages)

        grid.push_messages = push


@pytest.mark.timeout(120)
def test_node_silent_in_evaluation_is_a_dropout_and_the_session_completes():
    data, _ = planted(4)
    # a round needs 2l+2t-1+A = 3 responders (A = 0); 5 remain
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8, adversaries=0)
    federation = Federation(data, parameters)
    SilentAfter(federation.grid, federation.node_of["org-2"], "round_start")
    outcome = federation.workflow()(federation.grid)
    expected = plaintext_sq_distances(np.concatenate(list(data.values())), 8.0, 8)
    assert np.array_equal(outcome.integer, expected)
    assert "org-2" not in outcome.responders and len(outcome.responders) == 5
    assert outcome.round == 2  # round 1 abandoned without unmasking, retried without org-2
    for name in data:
        if name != "org-2":
            assert federation.status(name)["phase"] == "done"


@pytest.mark.timeout(120)
def test_too_many_silent_nodes_fail_with_a_clear_error_everywhere():
    data, _ = planted(5)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8, adversaries=0)
    federation = Federation(data, parameters)
    for name in ("org-0", "org-1", "org-2", "org-3"):  # 2 remain, 3 are needed
        SilentAfter(federation.grid, federation.node_of[name], "round_start")
    with pytest.raises((DeadlineError, PeerError, ProtocolError), match="org-"):
        federation.workflow()(federation.grid)
    for name in ("org-4", "org-5"):
        status = federation.status(name)
        assert status["phase"] == "failed", status
        assert status["error"], status


@pytest.mark.timeout(120)
def test_node_silent_before_evaluation_fails_the_session_everywhere():
    data, _ = planted(6)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8, adversaries=0)
    federation = Federation(data, parameters)
    SilentAfter(federation.grid, federation.node_of["org-3"], "roster")
    with pytest.raises(PeerError, match="org-3"):
        federation.workflow()(federation.grid)
    for name in data:
        if name != "org-3":
            status = federation.status(name)
            assert status["phase"] == "failed" and "org-3" in status["error"], status


@pytest.mark.timeout(60)
def test_a_second_start_of_the_same_session_is_refused():
    data, _ = planted(7)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters)
    federation.workflow()(federation.grid)
    with pytest.raises(ProtocolError):
        federation.workflow()(federation.grid)


@pytest.mark.timeout(60)
def test_a_session_is_started_once_per_node_even_after_another_session():
    """A node in several sessions (clustering, newcomer assignment) refuses a second start
    of any session it ran, not only of the last one."""
    data, _ = planted(8)
    parameters = SessionParameters(dim=DIM, bound=8.0, scale_bits=8)
    federation = Federation(data, parameters, sessions={"s1": list(data), "s2": list(data)},
                            session_id="s1")
    federation.workflow("s1")(federation.grid)
    federation.workflow("s2")(federation.grid)
    with pytest.raises(ProtocolError):
        federation.workflow("s1")(federation.grid)
    for name in data:  # every node refused; its record still holds session s2
        assert federation.status(name)["session"] == "s2"

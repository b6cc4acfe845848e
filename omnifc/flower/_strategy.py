"""Clustered federated learning on Flower's Message API: cluster once through the secure D,
then one FedAvg per cluster.

:class:`ClusteredFedAvg` is a Flower strategy (a subclass of
``flwr.serverapp.strategy.FedAvg``, so weighting, reply checks and metric aggregation are
Flower's own). Its :meth:`~ClusteredFedAvg.start` runs, over the same Grid:

1. **Clustering** (before round 1, and again every ``recluster_every`` rounds when given):
   one secure session per part of the :class:`Embedding` over the clients' embedding rows
   (what each node's :func:`~omnifc.flower.add_party` handler returns: raw samples, CLoVE
   loss vectors, Client2Vec indices, FLUX descriptors; FMCL's two parts), over Flower's
   messages (:class:`~omnifc.flower.SecureDistanceWorkflow`) or omnifc's gRPC data plane
   (:class:`~omnifc.flower.GrpcDataPlaneWorkflow`, ``transport="grpc"``: each node proves
   which party it ran before it is sent any model). The server gets D and nothing else;
   the embedding combines the parts' D into client-level distances (one part: the squared
   distances between the clients' row centroids, :func:`client_distances`; FMCL: its
   distance from the two reconstructions), and its server algorithm (the paper's) clusters
   them.
2. **Per-cluster FedAvg**: every round sends each clustered node one ``train`` message with
   its cluster's model and averages the replies cluster by cluster (Flower's weighted
   ``aggregate_arrayrecords``), then the same for ``evaluate``. A node that does not reply
   in a round is left out of that round's average (as in Flower's FedAvg).
3. **Newcomers** (optional, after training: FLUX's test-time assignment): one more session
   over the clustered clients and the newcomers; each newcomer joins the cluster whose
   centroid is nearest, from distances alone (:func:`omnifc.adapters.flux.assign_new_clients`),
   and is sent one ``evaluate`` message with that cluster's model.

What the server learns: what :class:`SecureDistanceWorkflow` says (ciphertexts, masked
tiles, D) plus what Flower's FedAvg shows any server (the model updates of every node; add
Flower's SecAgg+ per cluster to hide them, not done here).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from finite_field import ParameterError, ProtocolError

# The embeddings (registry, parts, client distances) live in ._embeddings (issue 20);
# their public names are still importable from here.
from ._embeddings import (EMBEDDINGS, FMCL_PARTS, Embedding, client_distances, embedding,
                          fmcl_dims, fmcl_rows)

__all__ = ["Embedding", "EMBEDDINGS", "embedding", "client_distances", "ClusteredFedAvg",
           "ClusteredResult", "fmcl_rows", "fmcl_dims", "FMCL_PARTS"]

logger = logging.getLogger(__name__)


@dataclass
class ClusteredResult:
    """What :meth:`ClusteredFedAvg.start` produced.

    Attributes
    ----------
    labels : dict of int to int
        Node id -> cluster, for every clustered node (the last clustering).
    models : dict of int to ArrayRecord
        Cluster -> its final model.
    distances : ndarray
        The client-level squared distances of the last clustering (roster order).
    parties : dict of int to str
        Node id -> the omnifc party it is bound to.
    outcomes : list
        Every session's :class:`protocols.Outcome` (D, responders, stats), in order.
    sessions : list of dict
        Per clustering (then the newcomer session): part -> Outcome (``None`` -> Outcome
        for a one-part embedding).
    party_labels : dict of str to int
        Party -> cluster for every party of the last clustering, bound or not.
    unbound : dict of str to str
        Parties in D that no Flower node proved to run (gRPC data plane: no valid binding
        proof), with why: clustered, but sent no model (a dropout for training).
    newcomers : dict of int to int
        Newcomer node id -> assigned cluster (empty without a newcomer session).
    train_metrics, evaluate_metrics : dict of int to dict of int to MetricRecord
        Round -> cluster -> aggregated metrics; ``newcomer_metrics``: node -> MetricRecord.
    """

    labels: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    distances: np.ndarray | None = None
    parties: dict = field(default_factory=dict)
    outcomes: list = field(default_factory=list)
    newcomers: dict = field(default_factory=dict)
    train_metrics: dict = field(default_factory=dict)
    evaluate_metrics: dict = field(default_factory=dict)
    newcomer_metrics: dict = field(default_factory=dict)
    party_labels: dict = field(default_factory=dict)
    unbound: dict = field(default_factory=dict)
    sessions: list = field(default_factory=list)


def _is_workflow(item) -> bool:
    """A workflow object (it runs a session over a grid and binds parties to nodes), as
    opposed to a session config or a ``k -> workflow`` factory."""
    # looked up on the type or the instance's own attributes: a property ``nodes`` (the
    # gRPC data plane's, which waits for the binding proofs) is not called here
    return callable(item) and (hasattr(type(item), "nodes")
                               or "nodes" in getattr(item, "__dict__", {}))


def _fedavg_base():
    try:
        from flwr.serverapp.strategy import FedAvg
    except ImportError:  # pragma: no cover - the extra is missing
        class FedAvg:
            """A stand-in: omnifc.flower imports without flwr, the strategy needs it."""

            def __init__(self, *args, **kwargs):
                raise ImportError("ClusteredFedAvg needs flwr: pip install 'omnifc[flower]'")
    return FedAvg


class ClusteredFedAvg(_fedavg_base()):
    """Cluster the clients through the secure D, then train one FedAvg model per cluster.

    Parameters
    ----------
    workflow : workflow, SessionConfig, dict, or callable
        The clustering session (its parties are the clients to cluster): a
        :class:`SecureDistanceWorkflow` or :class:`GrpcDataPlaneWorkflow`, or a
        ``protocols.SessionConfig`` (the workflow is made with ``transport``); for a
        multi-part embedding a dict ``{part: workflow or config}``. With
        ``recluster_every``, a callable ``workflow(k)`` giving any of these for the k-th
        clustering (k = 0, 1, ...; a session id is started once).
    embedding : Embedding
        The adapter's server algorithm (:func:`embedding`).
    transport : {"grpc", "flower"}, optional
        For session configs: ``"grpc"`` (the default: one Flower message per node, the
        session over omnifc's gRPC + mutual TLS; the config holds the coordinator's TLS
        key) or ``"flower"`` (one Flower message per node per step).
    workflow_options : dict, optional
        Passed to the workflows made from session configs (``join_timeout``, ...).
    recluster_every : int, optional
        Cluster again before every round ``r`` with ``(r - 1) % recluster_every == 0``
        (cluster models are kept; a node takes its new cluster's model).
    newcomer_workflow : SecureDistanceWorkflow, optional
        A session over the clustered parties and the newcomers (clustered parties first, in
        the clustering's roster order), run after the last round.
    poll_interval : float or None
        Seconds between pulls of a round's replies (0.1); None: ``grid.send_and_receive``.
    **fedavg_options
        Flower's FedAvg options (``weighted_by_key``, ``arrayrecord_key``, ...).
        ``fraction_train``/``fraction_evaluate`` of 0 skip that step.

    Examples
    --------
    In a ServerApp (``grid`` from ``@app.main()``)::

        strategy = ClusteredFedAvg(workflow, embedding("raw", n_clusters=3))
        result = strategy.start(grid, ArrayRecord(initial_model), num_rounds=5)
        result.models[result.labels[node_id]]   # that node's cluster model

        # over omnifc's gRPC data plane, from the session config
        strategy = ClusteredFedAvg(load_session_config("keys/session.toml"),
                                   embedding("raw", n_clusters=3), transport="grpc")
    """

    def __init__(self, workflow, embedding: Embedding, *, recluster_every: int | None = None,
                 newcomer_workflow=None, poll_interval: float | None = 0.1,
                 transport: str | None = None, workflow_options: dict | None = None,
                 **fedavg_options) -> None:
        fedavg_options.setdefault("min_train_nodes", 0)
        fedavg_options.setdefault("min_evaluate_nodes", 0)
        fedavg_options.setdefault("min_available_nodes", 0)
        super().__init__(**fedavg_options)
        if recluster_every is not None and int(recluster_every) < 1:
            raise ParameterError(f"recluster_every must be >= 1, got {recluster_every!r}")
        if recluster_every is not None and (not callable(workflow)
                                            or _is_workflow(workflow)):
            raise ParameterError("recluster_every needs workflow(k) -> a workflow "
                                 "(a fresh session per clustering), got one workflow")
        if transport is not None and transport not in ("grpc", "flower"):
            raise ParameterError(f"transport must be 'grpc' or 'flower', got {transport!r}")
        self.workflow = workflow
        self.embedding = embedding
        self.recluster_every = None if recluster_every is None else int(recluster_every)
        self.newcomer_workflow = newcomer_workflow
        self.poll_interval = None if poll_interval is None else float(poll_interval)
        self.transport = transport
        self.workflow_options = dict(workflow_options or {})

    def _send(self, grid, messages, timeout: float):
        from ._server import send_and_poll

        if self.poll_interval is None:
            return grid.send_and_receive(messages, timeout=timeout)
        return send_and_poll(grid, messages, timeout=timeout, poll_interval=self.poll_interval)

    def summary(self) -> None:
        logger.info("ClusteredFedAvg: embedding %r, recluster every %s rounds, newcomers: %s",
                    self.embedding.name, self.recluster_every or "-",
                    "yes" if self.newcomer_workflow is not None else "no")
        super().summary()

    # -- clustering -----------------------------------------------------------------------
    def _session(self, k: int):
        if self.recluster_every is None:
            return self.workflow
        return self.workflow(k)

    def _workflows(self, spec) -> dict:
        """``{part: workflow}`` (``{None: workflow}`` for a one-part embedding) from a
        workflow, a session config, or a dict of either by part."""
        from ._server import distance_workflow

        parts = tuple(self.embedding.parts)
        if isinstance(spec, dict):
            if set(spec) != set(parts) or not parts:
                raise ParameterError(f"embedding {self.embedding.name!r} has the parts "
                                     f"{list(parts) or 'none (one session)'}, got sessions "
                                     f"for {sorted(map(str, spec))}")
            items = [(part, spec[part]) for part in parts]
        elif parts:
            raise ParameterError(f"embedding {self.embedding.name!r} needs one session per "
                                 f"part {list(parts)}: pass {{part: workflow or config}}")
        else:
            items = [(None, spec)]
        out = {}
        for part, item in items:
            if not _is_workflow(item):  # a session config: the strategy's transport
                item = distance_workflow(item, transport=self.transport or "grpc", part=part,
                                         **self.workflow_options)
            out[part] = item
        return out

    def _run_sessions(self, grid, spec):
        """Run every part's session; return ``(workflows by part, outcomes by part, party
        names)``. Which node runs which party is :meth:`_bound`'s (over the gRPC data plane
        the nodes' proofs arrive after the result: the server computes meanwhile)."""
        workflows = self._workflows(spec)
        outcomes = {part: workflow(grid) for part, workflow in workflows.items()}
        names = next(iter(outcomes.values())).party_names
        for part, outcome in outcomes.items():
            if outcome.party_names != names:
                raise ProtocolError(f"the sessions of embedding {self.embedding.name!r} have "
                                    f"different rosters ({names} and, for part {part!r}, "
                                    f"{outcome.party_names})")
        return workflows, outcomes, names

    def _bound(self, workflows: dict, names: list):
        """``(nodes by party, unbound parties)``, every binding checked (reading a
        workflow's ``nodes`` waits for and checks its nodes' proofs). A party is bound to a
        node only when every part's session bound it to that same node (its signed hello,
        or its binding proof); raise when no party is bound."""
        nodes, unbound = {}, {}
        for name in names:
            seen = {part: workflow.nodes.get(name) for part, workflow in workflows.items()}
            why = [getattr(w, "unbound", {}).get(name) for w in workflows.values()]
            if None in seen.values():
                unbound[name] = next((w for w in why if w), "no node is bound to it")
            elif len(set(seen.values())) > 1:
                unbound[name] = f"the parts' sessions bound it to different nodes {seen}"
            else:
                nodes[name] = next(iter(seen.values()))
        for workflow in workflows.values():
            for node, error in getattr(workflow, "refused", {}).items():
                logger.warning("refused: %s", error)
        for name, why in unbound.items():
            logger.warning("party %r is clustered but gets no model: %s", name, why)
        if not nodes:
            raise ProtocolError("no party of the clustering is bound to a Flower node: "
                                + "; ".join(f"{n}: {w}" for n, w in unbound.items()))
        return nodes, unbound

    def cluster(self, grid, k: int = 0, result: ClusteredResult | None = None):
        """Run the k-th clustering session (one per embedding part); return ``(labels by
        node, result)``. Only nodes bound to their party get a label (and models)."""
        result = ClusteredResult() if result is None else result
        workflows, outcomes, names = self._run_sessions(grid, self._session(k))
        distances, labels = self.embedding.cluster_session(outcomes)
        labels = labels.astype(int)
        if labels.shape != (len(names),):
            raise ProtocolError(f"the {self.embedding.name!r} clustering returned "
                                f"{labels.shape} labels, expected ({len(names)},)")
        nodes, unbound = self._bound(workflows, names)  # before any label goes to a node
        result.labels = {nodes[name]: int(c) for name, c in zip(names, labels)
                         if name in nodes}
        result.party_labels = {name: int(c) for name, c in zip(names, labels)}
        result.unbound = dict(unbound)
        result.parties.update({node: name for name, node in nodes.items()})
        result.distances = distances
        result.outcomes.extend(outcomes.values())
        result.sessions.append(outcomes)
        logger.info("clustering %d: %d clients in %d clusters", k, len(names),
                    len(set(labels.tolist())))
        return result.labels, result

    # -- one round --------------------------------------------------------------------------
    def _messages(self, models: dict, labels: dict, config, message_type: str, server_round):
        from flwr.app import Message, RecordDict

        config = config.__class__(dict(config)) if config is not None else None
        config["server-round"] = server_round
        return [Message(content=RecordDict({self.arrayrecord_key: models[labels[node]],
                                            self.configrecord_key: config}),
                        message_type=message_type, dst_node_id=node)
                for node in sorted(labels)]

    def _by_cluster(self, replies, labels: dict) -> dict:
        out: dict = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if node in labels:
                out.setdefault(labels[node], []).append(reply)
        return out

    def start(self, grid, initial_arrays, num_rounds: int = 3, timeout: float = 3600,
              train_config=None, evaluate_config=None, evaluate_fn=None) -> ClusteredResult:
        """Cluster, then ``num_rounds`` rounds of per-cluster FedAvg (train, then evaluate).

        ``evaluate_fn(server_round, cluster, arrays)`` (optional) evaluates a cluster model
        on the server. Returns a :class:`ClusteredResult`.
        """
        from flwr.app import ConfigRecord
        from flwr.common import MessageType

        train_config = ConfigRecord() if train_config is None else train_config
        evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
        self.summary()
        result = ClusteredResult()
        labels, _ = self.cluster(grid, 0, result)
        models = {c: initial_arrays for c in sorted(set(labels.values()))}
        clusterings = 1
        for server_round in range(1, int(num_rounds) + 1):
            if (self.recluster_every is not None and server_round > 1
                    and (server_round - 1) % self.recluster_every == 0):
                old_models, old_labels = models, labels
                labels, _ = self.cluster(grid, clusterings, result)
                clusterings += 1
                models = {}
                for c in sorted(set(labels.values())):  # a new cluster starts from the model
                    members = [n for n, lab in labels.items() if lab == c]  # most had
                    before = [old_labels[n] for n in members if n in old_labels]
                    start_from = (max(set(before), key=before.count) if before
                                  else sorted(old_models)[0])
                    models[c] = old_models[start_from]
            if self.fraction_train != 0.0:
                replies = self._send(grid,
                    self._messages(models, labels, train_config, MessageType.TRAIN,
                                   server_round), timeout)
                metrics = {}
                for c, group in sorted(self._by_cluster(replies, labels).items()):
                    arrays, aggregated = self.aggregate_train(server_round, group)
                    if arrays is not None:
                        models[c] = arrays
                    if aggregated is not None:
                        metrics[c] = aggregated
                result.train_metrics[server_round] = metrics
            if self.fraction_evaluate != 0.0:
                replies = self._send(grid,
                    self._messages(models, labels, evaluate_config, MessageType.EVALUATE,
                                   server_round), timeout)
                metrics = {}
                for c, group in sorted(self._by_cluster(replies, labels).items()):
                    aggregated = self.aggregate_evaluate(server_round, group)
                    if aggregated is not None:
                        metrics[c] = aggregated
                result.evaluate_metrics[server_round] = metrics
            if evaluate_fn is not None:
                for c in sorted(models):
                    evaluate_fn(server_round, c, models[c])
        result.models = dict(models)
        if self.newcomer_workflow is not None:
            self.assign_newcomers(grid, result, evaluate_config, timeout=timeout)
        return result

    # -- newcomers ------------------------------------------------------------------------
    def assign_newcomers(self, grid, result: ClusteredResult, evaluate_config=None, *,
                         timeout: float = 3600) -> dict:
        """FLUX's test-time assignment through one more secure session; each newcomer is
        then evaluated on its cluster's model. Returns newcomer node -> cluster."""
        from flwr.app import ConfigRecord
        from flwr.common import MessageType

        workflows, outcomes, names = self._run_sessions(grid, self.newcomer_workflow)
        clustered = getattr(result, "party_labels", None) or {
            result.parties[node]: c for node, c in result.labels.items()}
        known = [i for i, name in enumerate(names) if name in clustered]
        new = [i for i, name in enumerate(names) if name not in clustered]
        if known != list(range(len(known))):
            raise ProtocolError("the newcomer session must list the clustered parties first "
                                f"(roster {names})")
        if not new:
            raise ProtocolError("the newcomer session has no newcomer")
        distances = self.embedding.distances(outcomes, newcomers=True)
        train_labels = np.array([clustered[names[i]] for i in known])
        assigned = np.asarray(self.embedding.assign(distances, train_labels)).astype(int)
        nodes, unbound = self._bound(workflows, names)  # before any model goes to a node
        result.outcomes.extend(outcomes.values())
        result.sessions.append(outcomes)
        result.parties.update({node: name for name, node in nodes.items()})
        result.newcomers = {nodes[names[i]]: int(c) for i, c in zip(new, assigned)
                            if names[i] in nodes}
        for i in new:
            if names[i] not in nodes:
                result.unbound[names[i]] = unbound[names[i]]
        if self.fraction_evaluate != 0.0:
            config = ConfigRecord() if evaluate_config is None else evaluate_config
            replies = self._send(grid,
                self._messages(result.models, result.newcomers, config, MessageType.EVALUATE,
                               0), timeout)
            for reply in replies:
                if not reply.has_error() and reply.content.metric_records:
                    result.newcomer_metrics[reply.metadata.src_node_id] = next(
                        iter(reply.content.metric_records.values()))
        return result.newcomers

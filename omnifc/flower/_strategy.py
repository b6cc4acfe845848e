"""Clustered federated learning on Flower's Message API: cluster once through the secure D,
then one FedAvg per cluster.

:class:`ClusteredFedAvg` is a Flower strategy (a subclass of
``flwr.serverapp.strategy.FedAvg``, so weighting, reply checks and metric aggregation are
Flower's own). Its :meth:`~ClusteredFedAvg.start` runs, over the same Grid:

1. **Clustering** (before round 1, and again every ``recluster_every`` rounds when given):
   one :class:`~omnifc.flower.SecureDistanceWorkflow` session over the clients' embedding
   rows (what each node's :func:`~omnifc.flower.add_party` handler returns: raw samples,
   CLoVE loss vectors, Client2Vec indices, FLUX descriptors). The server gets D and nothing
   else; the client-level distances are the squared distances between the clients' row
   centroids, computed from D alone (:func:`client_distances`; one row per client: D
   itself), and the :class:`Embedding`'s server algorithm (the paper's) clusters them.
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
from typing import Callable

import numpy as np

from finite_field import ParameterError, ProtocolError

__all__ = ["Embedding", "EMBEDDINGS", "embedding", "client_distances", "ClusteredFedAvg",
           "ClusteredResult"]

logger = logging.getLogger(__name__)


def client_distances(distances, rows) -> np.ndarray:
    """Squared distances between the clients' row centroids, from the row distances alone.

    ``rows``: how many consecutive rows of ``distances`` each client owns (roster order).
    With ``A``, ``B`` the row sets of two clients,
    ``||c_A - c_B||^2 = mean_{a in A, b in B} D_ab - W_A - W_B`` with
    ``W_A = sum_{a, a' in A} D_aa' / (2 |A|^2)``; clients of one row each give D itself.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [2.0], [5.0]])          # client 0 owns rows 0-1, client 1 row 2
    >>> client_distances((x - x.T) ** 2, [2, 1]).tolist()
    [[0.0, 16.0], [16.0, 0.0]]
    """
    d = np.asarray(distances, dtype=np.float64)
    counts = [int(r) for r in rows]
    if any(c < 1 for c in counts) or sum(counts) != d.shape[0]:
        raise ParameterError(f"rows per client must be >= 1 and sum to {d.shape[0]}, "
                             f"got {counts}")
    if all(c == 1 for c in counts):
        return d.copy()
    bounds = np.cumsum([0] + counts)
    blocks = [slice(bounds[i], bounds[i + 1]) for i in range(len(counts))]
    within = np.array([d[b, b].sum() / (2.0 * (b.stop - b.start) ** 2) for b in blocks])
    out = np.empty((len(counts), len(counts)))
    for i, a in enumerate(blocks):
        for j, b in enumerate(blocks):
            out[i, j] = d[a, b].mean() - within[i] - within[j]
    np.fill_diagonal(out, 0.0)
    return np.maximum(out, 0.0)


def _nearest_centroid(distances, labels) -> np.ndarray:
    from ..adapters.flux import assign_new_clients

    return assign_new_clients(distances, labels)


@dataclass(frozen=True)
class Embedding:
    """The server side of an adapter's client embedding.

    ``cluster(D_clients) -> labels`` is the paper's server algorithm on the client-level
    squared distances; ``assign(D, labels) -> labels`` places newcomers (D over the
    clustered clients first, then the newcomers); FLUX's nearest-centroid rule by default.
    The client side is the ``rows`` function each node gives :func:`add_party` (the
    adapter's embedding of its local data).
    """

    name: str
    cluster: Callable
    assign: Callable = _nearest_centroid


def _needs_k(name, n_clusters):
    if n_clusters is None or int(n_clusters) < 1:
        raise ParameterError(f"embedding {name!r} needs n_clusters >= 1, got {n_clusters!r}")
    return int(n_clusters)


def _raw(n_clusters=None, random_state=0, method="kmeans", **options):
    from ..adapters import raw

    k = _needs_k("raw", n_clusters)
    return lambda d: raw.cluster_samples(d, method=method, n_clusters=k,
                                         random_state=random_state, **options)


def _clove(n_clusters=None, random_state=0):
    from ..adapters import clove

    k = _needs_k("clove", n_clusters)
    return lambda d: clove.cluster_clients(d, k, random_state=random_state)


def _client2vec(n_clusters=None, random_state=0):
    from ..adapters import client2vec

    k = _needs_k("client2vec", n_clusters)
    return lambda d: client2vec.cluster_indices(d, k, random_state=random_state)


def _flux(n_clusters=None, **options):
    from ..adapters import flux

    if n_clusters is not None:
        raise ParameterError("FLUX chooses K itself (flux.cluster_clients); n_clusters must "
                             f"be None, got {n_clusters!r}")
    return lambda d: np.asarray(flux.cluster_clients(d, **options).labels)


#: Server algorithms by adapter name (``embedding(name, ...)``). FMCL is not listed: its
#: distance needs two reconstructions (class means and thermometer weights,
#: ``fmcl.secure_thermometer_distances``), not one session's D; pass its server algorithm as
#: an :class:`Embedding` of your own over the combined distances.
EMBEDDINGS = {"raw": _raw, "clove": _clove, "client2vec": _client2vec, "flux": _flux}


def embedding(name: str, **options) -> Embedding:
    """The :class:`Embedding` of adapter ``name`` (``raw``, ``clove``, ``client2vec``,
    ``flux``), its server algorithm configured by ``options`` (``n_clusters``,
    ``random_state``; FLUX: ``k_rule``, ``eps_rule``...).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> embedding("clove", n_clusters=2).cluster((x - x.T) ** 2).tolist()
    [0, 0, 1, 1]
    """
    if name not in EMBEDDINGS:
        raise ParameterError(f"embedding must be one of {sorted(EMBEDDINGS)}, got {name!r}")
    return Embedding(name, EMBEDDINGS[name](**options))


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
        Every clustering session's :class:`protocols.Outcome` (D, responders, stats).
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
    workflow : SecureDistanceWorkflow or callable
        The clustering session (its parties are the clients to cluster). With
        ``recluster_every``, a callable ``workflow(k) -> SecureDistanceWorkflow`` giving
        the k-th clustering's session (k = 0, 1, ...; a session id is started once).
    embedding : Embedding
        The adapter's server algorithm (:func:`embedding`).
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
    """

    def __init__(self, workflow, embedding: Embedding, *, recluster_every: int | None = None,
                 newcomer_workflow=None, poll_interval: float | None = 0.1,
                 **fedavg_options) -> None:
        fedavg_options.setdefault("min_train_nodes", 0)
        fedavg_options.setdefault("min_evaluate_nodes", 0)
        fedavg_options.setdefault("min_available_nodes", 0)
        super().__init__(**fedavg_options)
        if recluster_every is not None and int(recluster_every) < 1:
            raise ParameterError(f"recluster_every must be >= 1, got {recluster_every!r}")
        from ._server import SecureDistanceWorkflow

        if recluster_every is not None and isinstance(workflow, SecureDistanceWorkflow):
            raise ParameterError("recluster_every needs workflow(k) -> SecureDistanceWorkflow "
                                 "(a fresh session per clustering), got one workflow")
        self.workflow = workflow
        self.embedding = embedding
        self.recluster_every = None if recluster_every is None else int(recluster_every)
        self.newcomer_workflow = newcomer_workflow
        self.poll_interval = None if poll_interval is None else float(poll_interval)

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

    def cluster(self, grid, k: int = 0, result: ClusteredResult | None = None):
        """Run the k-th clustering session; return ``(labels by node, result)``."""
        result = ClusteredResult() if result is None else result
        workflow = self._session(k)
        outcome = workflow(grid)
        nodes = [workflow.nodes[name] for name in outcome.party_names]
        distances = client_distances(outcome.values, outcome.rows)
        labels = np.asarray(self.embedding.cluster(distances)).astype(int)
        if labels.shape != (len(nodes),):
            raise ProtocolError(f"the {self.embedding.name!r} clustering returned "
                                f"{labels.shape} labels, expected ({len(nodes)},)")
        result.labels = {node: int(c) for node, c in zip(nodes, labels)}
        result.parties.update({node: name for name, node in workflow.nodes.items()})
        result.distances = distances
        result.outcomes.append(outcome)
        logger.info("clustering %d: %d clients in %d clusters", k, len(nodes),
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

        workflow = self.newcomer_workflow
        outcome = workflow(grid)
        nodes = [workflow.nodes[name] for name in outcome.party_names]
        known = [i for i, node in enumerate(nodes) if node in result.labels]
        new = [i for i, node in enumerate(nodes) if node not in result.labels]
        if known != list(range(len(known))):
            raise ProtocolError("the newcomer session must list the clustered parties first "
                                f"(roster {outcome.party_names})")
        if not new:
            raise ProtocolError("the newcomer session has no newcomer")
        distances = client_distances(outcome.values, outcome.rows)
        train_labels = np.array([result.labels[nodes[i]] for i in known])
        assigned = np.asarray(self.embedding.assign(distances, train_labels)).astype(int)
        result.outcomes.append(outcome)
        result.parties.update({node: name for name, node in workflow.nodes.items()})
        result.newcomers = {nodes[i]: int(c) for i, c in zip(new, assigned)}
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

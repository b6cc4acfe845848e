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
from typing import Callable

import numpy as np

from finite_field import ParameterError, ProtocolError

__all__ = ["Embedding", "EMBEDDINGS", "embedding", "client_distances", "ClusteredFedAvg",
           "ClusteredResult", "fmcl_rows", "fmcl_dims", "FMCL_PARTS"]

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


def _one_session(outcomes: dict) -> np.ndarray:
    (outcome,) = outcomes.values()
    return client_distances(outcome.values, outcome.rows)


@dataclass(frozen=True)
class Embedding:
    """The server side of an adapter's client embedding.

    An embedding is a list of **parts**, each one secure session over its own rows (one
    part, unnamed, for raw samples, CLoVE, Client2Vec, FLUX; two for FMCL); ``distances``
    combines the parts' outcomes into the client-level distances, on which
    ``cluster(D_clients) -> labels`` (the paper's server algorithm) runs.
    ``assign(D, labels) -> labels`` places newcomers (D over the clustered clients first,
    then the newcomers); FLUX's nearest-centroid rule by default. The client side is the
    ``rows`` function each node gives :func:`add_party` (the adapter's embedding of its local
    data; a dict ``{part: rows}`` for a multi-part embedding).

    Attributes
    ----------
    name : str
    cluster, assign : callable
    parts : tuple of str
        The named parts (empty: one session, whose rows are the embedding).
    combine : callable, optional
        ``combine({part: Outcome}) -> D_clients`` (roster order); for one part by default
        the squared distances of the clients' row centroids (:func:`client_distances`).

    Examples
    --------
    >>> import numpy as np
    >>> e = Embedding("mine", cluster=lambda d: (d[0] > 1).astype(int))
    >>> e.parts, e.cluster(np.array([[0.0, 4.0], [4.0, 0.0]])).tolist()
    ((), [0, 1])
    """

    name: str
    cluster: Callable
    assign: Callable = _nearest_centroid
    parts: tuple = ()
    combine: Callable | None = None

    def distances(self, outcomes: dict) -> np.ndarray:
        """The client-level distances from ``{part: Outcome}`` (``{None: Outcome}`` for a
        one-part embedding)."""
        expected = set(self.parts) if self.parts else {None}
        if set(outcomes) != expected:
            raise ParameterError(f"embedding {self.name!r} combines the parts "
                                 f"{sorted(map(str, expected))}, got sessions for "
                                 f"{sorted(map(str, outcomes))}")
        return (self.combine or _one_session)(outcomes)


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


#: FMCL's two parts: the class-weighted unit means ``z`` and the thermometer code ``t``.
FMCL_PARTS = ("z", "t")


def fmcl_rows(means, weights, resolution: int) -> dict:
    """A node's FMCL embedding (the client half of ``embedding("fmcl", ...)``).

    ``means`` (C, d): the node's class mean embeddings; ``weights`` (C,): its class weights
    ``n_c / n``; ``resolution``: the public q of every node. Returns ``{"z": rows, "t":
    rows}``: FMCL's thermometer rows (:func:`omnifc.adapters.fmcl.thermometer_rows`), each
    followed by the public all-zero anchor row that turns the squared distances into exact
    inner products. Return it from the node's ``rows(context)``.

    Examples
    --------
    >>> import numpy as np
    >>> parts = fmcl_rows(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, 0.5]), 2)
    >>> parts["t"].tolist()
    [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    >>> parts["z"].shape
    (2, 8)
    """
    from ..adapters import fmcl

    z, t = fmcl.thermometer_rows(np.asarray(means, dtype=np.float64),
                                 np.asarray(weights, dtype=np.float64), int(resolution))
    return {"z": np.stack([z, np.zeros_like(z)]), "t": np.stack([t, np.zeros_like(t)])}


def fmcl_dims(n_classes: int, dim: int, resolution: int) -> dict:
    """The session ``dim`` of each FMCL part: ``{"z": C q d, "t": C q}`` (bound 1.0 both).

    >>> fmcl_dims(3, 4, 10)
    {'z': 120, 't': 30}
    """
    return {"z": int(n_classes) * int(resolution) * int(dim),
            "t": int(n_classes) * int(resolution)}


def _anchored(outcome, part: str) -> np.ndarray:
    """The (n+1) x (n+1) distances of the clients' rows and one anchor (anchor last), after
    checking that every client sent two rows whose second (the anchor) is the same point."""
    rows = list(outcome.rows)
    if any(r != 2 for r in rows):
        raise ProtocolError(f"FMCL part {part!r}: every client sends its row and the zero "
                            f"anchor (2 rows), got {rows} rows (roster {outcome.party_names})")
    integer = np.asarray(outcome.integer)
    anchors = np.arange(1, 2 * len(rows), 2)
    if np.any(integer[np.ix_(anchors, anchors)] != 0):
        raise ProtocolError(f"FMCL part {part!r}: the clients' anchor rows are not one point "
                            "(every anchor must be the public all-zero row)")
    order = np.concatenate([np.arange(0, 2 * len(rows), 2), anchors[:1]])
    return np.asarray(outcome.values)[np.ix_(order, order)]


def _mean_distance_assign(distances, labels) -> np.ndarray:
    """Each newcomer joins the cluster of the least mean distance to its members (for a
    distance that is not a squared Euclidean one, where no centroid exists)."""
    d = np.asarray(distances, dtype=np.float64)
    labels = np.asarray(labels)
    n = len(labels)
    clusters = sorted(set(labels.tolist()))
    scores = np.stack([d[n:, :n][:, labels == c].mean(axis=1) for c in clusters], axis=1)
    return np.array(clusters)[np.argmin(scores, axis=1)]


def _fmcl(resolution=None, n_clusters=None, rule=None, max_clusters=None, fill="geodesic"):
    from ..adapters import fmcl

    if resolution is None or int(resolution) < 1:
        raise ParameterError(f"embedding 'fmcl' needs the nodes' public resolution q >= 1, "
                             f"got {resolution!r}")
    q = int(resolution)

    def combine(outcomes):
        return fmcl.fmcl_from_anchored(_anchored(outcomes["z"], "z"),
                                       _anchored(outcomes["t"], "t"), q, fill=fill)

    if n_clusters is not None:
        from .._clustering import average_linkage_labels

        if rule is not None:
            raise ParameterError("embedding 'fmcl': give n_clusters or a K rule, not both")
        k = _needs_k("fmcl", n_clusters)
        cluster = lambda d: np.asarray(average_linkage_labels(d, k))  # noqa: E731
    else:
        options = {"rule": rule} if rule is not None else {}
        if max_clusters is not None:
            options["max_clusters"] = int(max_clusters)
        cluster = lambda d: np.asarray(fmcl.fmcl_server(d, **options).labels)  # noqa: E731
    return {"cluster": cluster, "combine": combine, "parts": FMCL_PARTS,
            "assign": _mean_distance_assign}


#: Server algorithms by adapter name (``embedding(name, ...)``). FMCL's distance needs two
#: reconstructions (the thermometer-weighted class means ``z`` and the thermometer code
#: ``t``, each with a zero anchor row: :func:`fmcl_rows`), so its embedding has two parts.
EMBEDDINGS = {"raw": _raw, "clove": _clove, "client2vec": _client2vec, "flux": _flux,
              "fmcl": _fmcl}


def embedding(name: str, **options) -> Embedding:
    """The :class:`Embedding` of adapter ``name`` (``raw``, ``clove``, ``client2vec``,
    ``flux``, ``fmcl``), its server algorithm configured by ``options`` (``n_clusters``,
    ``random_state``; FLUX: ``k_rule``, ``eps_rule``...; FMCL: ``resolution`` (the nodes'
    public q, required), ``n_clusters`` (average linkage) or ``rule`` (K chosen by
    :func:`omnifc.adapters.fmcl.fmcl_server`, its default rule when neither is given),
    ``max_clusters``, ``fill``; newcomers join the cluster of least mean FMCL distance).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> embedding("clove", n_clusters=2).cluster((x - x.T) ** 2).tolist()
    [0, 0, 1, 1]
    """
    if name not in EMBEDDINGS:
        raise ParameterError(f"embedding must be one of {sorted(EMBEDDINGS)}, got {name!r}")
    made = EMBEDDINGS[name](**options)
    if isinstance(made, dict):  # a multi-part embedding
        return Embedding(name, **made)
    return Embedding(name, made)


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
    return hasattr(item, "nodes") and callable(item)


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
        """Run every part's session; return ``(outcomes by part, party names, nodes by
        party, unbound parties)``. A party is bound to a node only when every part's session
        bound it to that same node (its signed hello, or its binding proof)."""
        workflows = self._workflows(spec)
        outcomes = {part: workflow(grid) for part, workflow in workflows.items()}
        names = next(iter(outcomes.values())).party_names
        for part, outcome in outcomes.items():
            if outcome.party_names != names:
                raise ProtocolError(f"the sessions of embedding {self.embedding.name!r} have "
                                    f"different rosters ({names} and, for part {part!r}, "
                                    f"{outcome.party_names})")
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
        return outcomes, names, nodes, unbound

    def cluster(self, grid, k: int = 0, result: ClusteredResult | None = None):
        """Run the k-th clustering session (one per embedding part); return ``(labels by
        node, result)``. Only nodes bound to their party get a label (and models)."""
        result = ClusteredResult() if result is None else result
        outcomes, names, nodes, unbound = self._run_sessions(grid, self._session(k))
        distances = self.embedding.distances(outcomes)
        labels = np.asarray(self.embedding.cluster(distances)).astype(int)
        if labels.shape != (len(names),):
            raise ProtocolError(f"the {self.embedding.name!r} clustering returned "
                                f"{labels.shape} labels, expected ({len(names)},)")
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

        outcomes, names, nodes, unbound = self._run_sessions(grid, self.newcomer_workflow)
        clustered = getattr(result, "party_labels", None) or {
            result.parties[node]: c for node, c in result.labels.items()}
        known = [i for i, name in enumerate(names) if name in clustered]
        new = [i for i, name in enumerate(names) if name not in clustered]
        if known != list(range(len(known))):
            raise ProtocolError("the newcomer session must list the clustered parties first "
                                f"(roster {names})")
        if not new:
            raise ProtocolError("the newcomer session has no newcomer")
        distances = self.embedding.distances(outcomes)
        train_labels = np.array([clustered[names[i]] for i in known])
        assigned = np.asarray(self.embedding.assign(distances, train_labels)).astype(int)
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

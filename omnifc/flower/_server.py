"""The Flower ServerApp side: omnifc's :class:`protocols.Coordinator` over Flower's Grid.

:class:`SecureDistanceWorkflow` is one more transport for the sans-IO coordinator, shaped
like Flower's SecAgg+ workflow: every step sends **one message per node** that has something
to receive (its envelopes, in order, as bytes in a ``ConfigRecord``), pushes them at once,
pulls the replies (every ``poll_interval`` seconds until all arrived or the phase deadline
passed) and feeds every reply's envelopes to ``Coordinator.receive``,
attributing them to the party that node is bound to. Party-to-party ciphertexts (encrypted
shares, group seeds) come back from the coordinator with their destination and go out in the
next step: relayed by destination, never opened.

- **Who is who.** A node is bound to a party by the first hello it sends (the coordinator
  checks that hello's signature under the pinned identity key); every later envelope from
  that node is attributed to that party. A second node claiming a bound party fails the
  session (a hello twice). Flower's node authentication, when enabled, decides which nodes
  may connect at all; the pinned identity keys decide who is a party.
- **Deadlines.** Each step waits at most ``phase_timeout`` seconds. A node of the session
  that does not answer in time (or answers with a Flower error) is reported lost
  (``Coordinator.party_lost``): in evaluation that is a dropout and the round is retried
  with the remaining responders while enough remain; before evaluation it fails the session.
  When no node has anything to receive and the session is not over, the phase deadline is
  taken to have passed (``Coordinator.expire``), as in the in-memory transport.
- **Fail closed.** When the coordinator fails, every node still in the session is sent the
  coordinator's ErrorReport (one more step) and the workflow raises the coordinator's error;
  nothing partial is returned. A malformed reply is attributed to its node's party.

Flower's server and transport are untrusted exactly like omnifc's coordinator: what passes
through them is what the coordinator sees (signed hellos, roster confirmations, AEAD
ciphertexts of shares and seeds, masked evaluation tiles) and the decoded D.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from finite_field import PeerError, ProtocolError
from protocols import Coordinator
from protocols import omnifc_pb2 as pb

from . import _constants as C
from ._binding import NodeBindingError, check_binding

__all__ = ["SecureDistanceWorkflow", "GrpcDataPlaneWorkflow", "distance_workflow", "send_and_poll"]

logger = logging.getLogger(__name__)


def send_and_poll(grid, messages, *, timeout: float, poll_interval: float = 0.1) -> list:
    """``grid.send_and_receive`` with a short poll: push every message, then pull the replies
    every ``poll_interval`` seconds until all arrived or ``timeout`` passed. (Flower's own
    pulls every 3 s in flwr 1.42's deployment runtime: a floor under every step of a
    multi-step protocol.)"""
    waiting = set(grid.push_messages(messages))
    deadline = time.monotonic() + float(timeout)
    replies: list = []
    while waiting:
        pulled = list(grid.pull_messages(waiting))
        replies.extend(pulled)
        waiting.difference_update(m.metadata.reply_to_message_id for m in pulled)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
    return replies


def _wait_for_nodes(grid, needed: int, timeout: float) -> list:
    """The grid's node ids once at least ``needed`` are connected (PeerError after
    ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= needed:
            return nodes
        if time.monotonic() >= deadline:
            raise PeerError(f"{len(nodes)} Flower nodes connected within {timeout:g} s, "
                            f"the session needs {needed}", party="nodes", phase="join")
        time.sleep(0.2)


class SecureDistanceWorkflow:
    """Run one omnifc session (secure pairwise distances, optional clustering) over a Grid.

    Parameters
    ----------
    session_id : str
        The session of the session config every party pinned.
    parameters : protocols.SessionParameters
        The public parameters (the session config's, ``parameters_from_config``).
    pinned : dict of str to bytes
        Party id -> Ed25519 identity public key (roster order).
    phase_timeout : float
        Seconds each step waits for the nodes' replies (the phase deadline).
    join_timeout : float
        Seconds to wait until enough nodes are connected to the SuperLink.
    cluster : callable, optional
        ``cluster(D) -> labels``, run on the decoded D (see :class:`protocols.Coordinator`).
    responders : sequence of str, optional
        The first round's responding set (all parties by default).
    coordinator_class : callable, optional
        Builds the coordinator (tests: a deviating one); :class:`protocols.Coordinator`.
    poll_interval : float or None
        Seconds between the pulls of one step's replies (0.1 by default); None uses
        ``grid.send_and_receive``, which pulls every 3 s in flwr 1.42's deployment runtime.
    observe : callable, optional
        ``observe(direction, node_id, envelopes_bytes)`` sees every payload the server
        sends (``"out"``) and receives (``"in"``): a spy for tests and audits.
    part : str, optional
        The embedding part this session carries (a multi-part embedding such as FMCL's:
        the start message names it, and each node's ``rows`` returns a dict of parts).

    After a successful call, :attr:`outcome` holds the coordinator's :class:`Outcome`
    and :attr:`nodes` the party -> node id binding.
    """

    def __init__(self, session_id: str, parameters, pinned: dict, *,
                 phase_timeout: float = 60.0, join_timeout: float = 60.0,
                 cluster: Callable | None = None, responders=None,
                 coordinator_class=Coordinator, observe: Callable | None = None,
                 poll_interval: float | None = 0.1, part: str | None = None) -> None:
        self.part = None if part is None else str(part)
        self.session_id = str(session_id)
        self.parameters = parameters
        self.pinned = {str(k): bytes(v) for k, v in pinned.items()}
        self.phase_timeout = float(phase_timeout)
        self.join_timeout = float(join_timeout)
        self.cluster = cluster
        self.responders = responders
        self.coordinator_class = coordinator_class
        self.observe = observe
        self.poll_interval = None if poll_interval is None else float(poll_interval)
        self.outcome = None
        self.coordinator = None
        self.nodes: dict = {}

    # -- messages ------------------------------------------------------------------------
    def _message(self, grid, node_id: int, envelopes: list, *, start: bool = False):
        from flwr.app import ConfigRecord, Message, RecordDict

        data = [env.SerializeToString() for env in envelopes]
        if self.observe is not None:
            self.observe("out", node_id, data)
        values = {C.KEY_SESSION: self.session_id, C.KEY_START: start}
        if start and self.part is not None:
            values[C.KEY_PART] = self.part
        if data:
            values[C.KEY_ENVELOPES] = data
        return Message(RecordDict({C.RECORD: ConfigRecord(values)}), dst_node_id=node_id,
                       message_type=C.MESSAGE_TYPE, group_id=self.session_id,
                       ttl=max(self.phase_timeout, 1.0) * 2)

    def _exchange(self, grid, outgoing: dict, *, start: bool = False) -> tuple[dict, set]:
        """Send {node_id: [envelope]}; return ({node_id: [bytes] or Exception}, silent)."""
        messages = [self._message(grid, node, envs, start=start)
                    for node, envs in outgoing.items()]
        if self.poll_interval is None:
            replies = grid.send_and_receive(messages, timeout=self.phase_timeout)
        else:
            replies = send_and_poll(grid, messages, timeout=self.phase_timeout,
                                    poll_interval=self.poll_interval)
        answered: dict = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if node not in outgoing or node in answered:
                continue  # not asked this step, or a second reply: ignored
            if reply.has_error():
                answered[node] = ProtocolError(
                    f"node {node} answered with a Flower error: {reply.error.reason}")
                continue
            record = reply.content.config_records.get(C.RECORD)
            if record is None or str(record.get(C.KEY_SESSION, "")) != self.session_id:
                answered[node] = ProtocolError(
                    f"node {node} answered without this session's {C.RECORD!r} record")
                continue
            data = [bytes(b) for b in (record.get(C.KEY_ENVELOPES) or [])]
            if self.observe is not None:
                self.observe("in", node, data)
            answered[node] = data
        return answered, set(outgoing) - set(answered)

    # -- the session ---------------------------------------------------------------------
    def _wait_for_nodes(self, grid) -> list:
        return _wait_for_nodes(grid, len(self.pinned), self.join_timeout)

    def __call__(self, grid, context=None):
        """Run the session; return the :class:`protocols.Outcome` (raise on failure)."""
        coordinator = self.coordinator_class(self.session_id, self.parameters,
                                             list(self.pinned), self.pinned,
                                             responders=self.responders, cluster=self.cluster)
        self.coordinator = coordinator
        party_of: dict = {}          # node id -> party
        pending: dict = {}           # party -> [envelope]

        def queue(pairs):
            for dest, env in pairs:
                pending.setdefault(dest, []).append(env)

        def step(call, *args):
            queue(call(*args))

        def consume(node, data: list) -> None:
            for raw in data:
                if coordinator.outcome is not None or coordinator.error is not None:
                    return
                try:
                    env = pb.Envelope.FromString(raw)
                except Exception:  # garbage from a node
                    env = None
                name = party_of.get(node)
                if name is None:
                    if env is None or env.WhichOneof("body") != "hello":
                        logger.warning("node %s spoke before its hello; ignored", node)
                        return
                    name = env.hello.party_id
                    if name not in self.pinned:
                        logger.warning("node %s claims unknown party %r; ignored", node, name)
                        return
                    party_of[node] = name
                    self.nodes.setdefault(name, node)
                if env is None:
                    step(coordinator.party_lost, name, "sent bytes that are not an envelope")
                    return
                step(coordinator.receive, name, env)

        try:
            nodes = self._wait_for_nodes(grid)
            answered, silent = self._exchange(grid, {node: [] for node in nodes}, start=True)
            for node, data in answered.items():
                if isinstance(data, Exception):
                    logger.info("node %s did not start a party: %s", node, data)
                    continue
                consume(node, data)
            while coordinator.outcome is None:
                node_of = {name: node for node, name in party_of.items()}
                outgoing = {}
                for name in list(pending):
                    if name in coordinator.lost or name not in node_of:
                        pending.pop(name)
                        continue
                    outgoing[node_of[name]] = pending.pop(name)
                if not outgoing:
                    step(coordinator.expire)
                    if not pending and coordinator.outcome is None:
                        raise ProtocolError("the session stalled with nothing in flight")
                    continue
                answered, silent = self._exchange(grid, outgoing)
                for node in sorted(silent):
                    step(coordinator.party_lost, party_of[node],
                         f"no reply within the phase deadline ({self.phase_timeout:g} s)")
                for node, data in answered.items():
                    if isinstance(data, Exception):
                        step(coordinator.party_lost, party_of[node], str(data))
                    else:
                        consume(node, data)
        except ProtocolError:
            self._abort(grid, coordinator, party_of)
            raise
        except Exception as error:  # fail closed on anything else too
            self._abort(grid, coordinator, party_of)
            raise ProtocolError(f"the Flower workflow failed: unexpected "
                                f"{type(error).__name__}") from error
        # deliver the results
        node_of = {name: node for node, name in party_of.items()}
        final = {node_of[name]: envs for name, envs in pending.items()
                 if name in node_of and name not in coordinator.lost}
        if final:
            self._exchange(grid, final)
        self.outcome = coordinator.outcome
        return coordinator.outcome

    def _abort(self, grid, coordinator, party_of: dict) -> None:
        """Tell every node still in the session why it failed (best effort, one step)."""
        if coordinator.error is None:
            return
        node_of = {name: node for node, name in party_of.items()}
        reports: dict = {}
        for dest, env in coordinator.abort():
            if dest in node_of and dest not in coordinator.lost:
                reports.setdefault(node_of[dest], []).append(env)
        if reports:
            try:
                self._exchange(grid, reports)
            except Exception:  # the session failed already; the reports are best effort
                logger.warning("could not deliver the error reports to every node")


class GrpcDataPlaneWorkflow:
    """One omnifc session over omnifc's own gRPC data plane, orchestrated by Flower.

    The ServerApp hosts omnifc's gRPC coordinator (:class:`protocols.CoordinatorServer`,
    mutual TLS, what ``omnifc serve`` runs) at the session config's ``coordinator``
    address, and sends every node **one** Flower message (``transport = "grpc"``, no
    address, no data). Each node's party handler then runs the whole session in that
    message (``protocols.run_party``: what ``omnifc join`` does) against the coordinator
    address of the session config *it* pinned, and replies with its end (phase, error).
    So a session costs one Flower message per node instead of one per step; the phases,
    deadlines, dropouts, integrity checks and fail-closed rules are those of the native gRPC
    path (docs/protocol.md), unchanged. What changes is the topology: the nodes must reach
    the ServerApp's host on omnifc's port (besides the SuperLink's), and omnifc's TLS
    certificates (from its key ceremony) authenticate both ends.

    **Which node runs which party.** Each node's reply names its party and carries a binding
    proof: an Ed25519 signature with the party's identity key over the session id, the
    party's run nonce, the roster digest, the node id and the start message's id
    (:mod:`omnifc.flower._binding`). After the session the workflow checks every proof
    against the pinned keys and the coordinator's roster: :attr:`nodes` maps each proved
    party to its node; a claim that does not verify (another party's name, a proof copied
    from another node or message) is in :attr:`refused` (node -> :class:`NodeBindingError`);
    a party no node proved within the result deadline is in :attr:`unbound` (party -> why).
    :class:`ClusteredFedAvg` sends cluster models to bound nodes only.

    Parameters
    ----------
    config : protocols.SessionConfig
        The session config every party pinned, with the coordinator's TLS key (or
        ``insecure``, tests only).
    cluster, responders : optional
        As for :class:`protocols.Coordinator`.
    join_timeout : float
        Seconds to wait for the Flower nodes to connect (before any message).
    address : str, optional
        Where the coordinator listens (default: the config's ``coordinator``).
    poll_interval : float
        Seconds between pulls of the nodes' replies.
    part : str, optional
        The embedding part this session carries (a multi-part embedding such as FMCL's).

    Calling it returns the :class:`protocols.Outcome` or raises the coordinator's error
    (after every node that still answers said how its party ended, within the result
    deadline). :attr:`ends` maps node id -> (phase, error) as the nodes replied.

    Examples
    --------
    In a ServerApp (the config holds the coordinator's TLS key)::

        workflow = GrpcDataPlaneWorkflow(load_session_config("keys/session.toml"))
        outcome = workflow(grid)          # outcome.integer: D, exact
        workflow.nodes                    # party -> Flower node id, proved by each node
    """

    def __init__(self, config, *, cluster: Callable | None = None, responders=None,
                 join_timeout: float = 60.0, address: str | None = None,
                 poll_interval: float = 0.1, part: str | None = None) -> None:
        self.part = None if part is None else str(part)
        self.config = config
        self.session_id = str(config.session_id)
        self.cluster = cluster
        self.responders = responders
        self.join_timeout = float(join_timeout)
        self.address = address
        self.poll_interval = float(poll_interval)
        self.outcome = None
        self.coordinator = None
        self.server = None
        self._ends: dict = {}
        self._nodes: dict = {}
        self._refused: dict = {}
        self._unbound: dict = {}
        self._claims: dict = {}
        # (grid, start message ids still unanswered, message id -> node) between a session's
        # result and the binding (:meth:`bind`); None when nothing is pending
        self._pending = None
        #: wall-clock stamps (``time.time()``) of the last call: ``call``, ``listening``
        #: (the coordinator serves), ``nodes`` (enough nodes connected), ``pushed`` (the
        #: start messages are at the SuperLink), ``phase:<phase>`` (the coordinator's
        #: phases: join, shares, evaluation, decode, result), ``outcome`` (the result is
        #: final), ``returned`` (the call returns), ``reply:<node id>`` (that node's reply
        #: pulled, by :meth:`bind`), ``bound`` (the proofs checked, by :meth:`bind`);
        #: public timing, for the cost breakdown of docs/flower.md
        self.timeline: dict = {}

    def _session_seconds(self) -> float:
        d = self.config.deadlines
        return d.join + d.shares + d.evaluation * 4 + d.result

    def __call__(self, grid, context=None):
        from flwr.app import ConfigRecord, Message, RecordDict

        from protocols import (CoordinatorServer, coordinator_credentials,
                               coordinator_from_config)

        config = self.config
        timeline = self.timeline = {"call": time.time()}
        self._nodes, self._refused, self._unbound, self._claims = {}, {}, {}, {}
        self._ends, self._pending, self.outcome = {}, None, None
        coordinator = coordinator_from_config(config, cluster=self.cluster,
                                              responders=self.responders)
        self.coordinator = coordinator
        server = CoordinatorServer(
            coordinator, config.deadlines, address=self.address or config.coordinator,
            credentials=None if config.insecure else coordinator_credentials(config),
            insecure=config.insecure, config=config).start()
        self.server = server
        timeline["listening"] = time.time()
        waiting: set = set()
        sent: dict = {}

        def phase_changed(phase, _round):
            timeline.setdefault(f"phase:{phase}", time.time())

        try:
            nodes = _wait_for_nodes(grid, len(config.party_names), self.join_timeout)
            timeline["nodes"] = time.time()
            ttl = self._session_seconds() + 60.0
            record = {C.KEY_SESSION: self.session_id, C.KEY_START: True,
                      C.KEY_TRANSPORT: C.TRANSPORT_GRPC}
            if self.part is not None:
                record[C.KEY_PART] = self.part
            ids = list(grid.push_messages([
                Message(RecordDict({C.RECORD: ConfigRecord(dict(record))}), dst_node_id=node,
                        message_type=C.MESSAGE_TYPE, group_id=self.session_id, ttl=ttl)
                for node in nodes]))
            sent = dict(zip(ids, nodes))  # message id -> the node it was sent to
            waiting = set(ids)
            timeline["pushed"] = time.time()
            outcome = server.run(on_phase=phase_changed)  # its deadlines; raises its error
            timeline["outcome"] = time.time()
        except ProtocolError as error:
            if coordinator.error is None and coordinator.outcome is None:
                server.fail(error)  # every connected party hears why
            raise
        except Exception as error:  # fail closed on anything else too
            wrapped = ProtocolError(f"the Flower workflow failed: unexpected "
                                    f"{type(error).__name__}")
            if coordinator.error is None and coordinator.outcome is None:
                server.fail(wrapped)
            raise wrapped from error
        finally:
            server.stop()
            if coordinator.outcome is None:  # failed: every node that answers says why
                self._collect(grid, waiting, sent)
        # the result is final: the replies (each node's binding proof) are collected and
        # checked by bind(), which every reader of the binding calls first, so the caller
        # does not wait for Flower's reply path where nothing depends on it
        self._pending = (grid, waiting, sent)
        self.outcome = outcome
        timeline["returned"] = time.time()
        return outcome

    def bind(self) -> dict:
        """Collect the nodes' replies to the last session's start messages (at most the
        result deadline) and check every binding proof (:mod:`._binding`); return
        :attr:`nodes`. The first call after a session does it, later calls return what it
        found. :attr:`nodes`, :attr:`refused`, :attr:`unbound` and :attr:`ends` call it, so
        no party is taken as bound before its proof is checked.

        Examples
        --------
        ::

            outcome = workflow(grid)     # returns once the result is final
            labels = my_clustering(outcome.integer)   # overlaps the nodes' replies
            nodes = workflow.bind()      # party -> node id, every proof checked
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            grid, waiting, sent = pending
            self._collect(grid, waiting, sent)
            self._bind(self.coordinator)
            self.timeline["bound"] = time.time()
        return self._nodes

    @property
    def nodes(self) -> dict:
        """Party -> Flower node id of every party whose node proved it runs it (waits for
        the proofs: :meth:`bind`)."""
        return self.bind()

    @property
    def refused(self) -> dict:
        """Node id -> :class:`NodeBindingError`: the claims that failed (after :meth:`bind`)."""
        self.bind()
        return self._refused

    @property
    def unbound(self) -> dict:
        """Party -> why no node is bound to it (after :meth:`bind`)."""
        self.bind()
        return self._unbound

    @property
    def ends(self) -> dict:
        """Node id -> (phase, error) as the nodes replied (after :meth:`bind`; on a failed
        session, as collected before the error was raised)."""
        self.bind()
        return self._ends

    def _collect(self, grid, waiting: set, sent: dict) -> None:
        """The nodes' replies (how each party ended, the party each claims and its proof),
        at most the result deadline."""
        if not waiting:
            return
        try:
            deadline = time.monotonic() + max(self.config.deadlines.result, 1.0)
            while waiting and time.monotonic() < deadline:
                for reply in grid.pull_messages(set(waiting)):
                    message_id = reply.metadata.reply_to_message_id
                    waiting.discard(message_id)
                    node = reply.metadata.src_node_id
                    self.timeline[f"reply:{node}"] = time.time()
                    if sent.get(message_id) != node:
                        self._refused[node] = NodeBindingError(
                            node, None, f"it answered message {message_id!r}, which was "
                            f"sent to node {sent.get(message_id)!r}")
                        continue
                    if reply.has_error():
                        self._ends[node] = ("failed", f"Flower error: {reply.error.reason}")
                        continue
                    record = reply.content.config_records.get(C.RECORD)
                    if record is None:
                        self._ends[node] = ("failed", f"no {C.RECORD!r} record")
                        continue
                    self._ends[node] = (str(record.get(C.KEY_PHASE, "")),
                                       str(record.get(C.KEY_ERROR, "")))
                    self._claims[node] = (message_id, record.get(C.KEY_PARTY),
                                          record.get(C.KEY_PROOF))
                if waiting:
                    time.sleep(self.poll_interval)
        except Exception:  # the session's end is decided; the replies are best effort
            logger.warning("could not collect every node's reply")

    def _bind(self, coordinator) -> None:
        """Bind each party to the node that proved it runs it (:mod:`._binding`); refuse
        every other claim; a party no node proved is unbound (a dropout for training)."""
        for node in sorted(self._claims):
            message_id, party, proof = self._claims[node]
            try:
                name = check_binding(self.pinned, coordinator.hellos,
                                     coordinator.roster_digest, self.session_id, node,
                                     message_id, party, proof)
                if name in self._nodes:
                    raise NodeBindingError(node, name, f"that party is bound to node "
                                           f"{self._nodes[name]} already")
            except NodeBindingError as error:
                self._refused[node] = error
                logger.warning("%s", error)
                continue
            self._nodes[name] = node
        for name in self.config.party_names:
            if name not in self._nodes:
                self._unbound[name] = ("no Flower node proved it runs this party within the "
                                      f"result deadline ({self.config.deadlines.result:g} s)")
                logger.warning("party %r: %s", name, self._unbound[name])

    @property
    def pinned(self) -> dict:
        """Party id -> pinned identity public key (the session config's)."""
        return {p.name: p.identity_public_key for p in self.config.parties}


def distance_workflow(config, *, transport: str = "grpc", part: str | None = None,
                      **options):
    """The workflow of one session of ``config`` (a :class:`protocols.SessionConfig`) over
    Flower: :class:`GrpcDataPlaneWorkflow` for ``transport="grpc"`` (one Flower message per
    node, omnifc's gRPC + mutual TLS; the config holds the coordinator's TLS key) or
    :class:`SecureDistanceWorkflow` for ``"flower"`` (one Flower message per node per step).
    ``part``: the embedding part the session carries; ``options``: the workflow's.

    Examples
    --------
    In a ServerApp::

        config = load_session_config("keys/session.toml")
        outcome = distance_workflow(config, transport="grpc")(grid)
    """
    if transport == C.TRANSPORT_GRPC:
        return GrpcDataPlaneWorkflow(config, part=part, **options)
    if transport == C.TRANSPORT_FLOWER:
        from protocols import parameters_from_config

        return SecureDistanceWorkflow(
            config.session_id, parameters_from_config(config),
            {p.name: p.identity_public_key for p in config.parties}, part=part, **options)
    from finite_field import ParameterError

    raise ParameterError(f"transport must be {C.TRANSPORT_GRPC!r} or {C.TRANSPORT_FLOWER!r}, "
                         f"got {transport!r}")

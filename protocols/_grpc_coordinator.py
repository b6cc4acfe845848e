"""gRPC transport, coordinator side: one bidirectional ``Session`` stream per party.

The servicer is a thin adapter around the sans-IO :class:`Coordinator`: it identifies the
caller by the common name of its TLS client certificate (checked against the session
config, fingerprint included), feeds every received envelope to the state machine under a
lock, and routes what comes out to the parties' response streams. :meth:`CoordinatorServer.run`
keeps the clock: each phase has a deadline (a new evaluation round gets a fresh one), and
a party whose stream ends early is reported as lost.

Fail closed: any exception while handling a message (in the state machine, a reader thread,
decoding, the clustering callback) aborts the session: every party gets an ErrorReport
naming the phase, the streams close, and :meth:`CoordinatorServer.run` raises the error
(so ``omnifc serve`` exits non-zero) instead of waiting. A party that connects after the
failure is told the same cause at once; ``run`` returns (raises) as soon as every party has
been told, or :data:`ABORT_GRACE` seconds after the failure.

Delivery: after its result a party confirms receipt with a ``Ready`` of phase ``result``
on its stream (:func:`protocols._grpc_party.run_party` does; the TLS peer is the sender),
then closes its side. A party whose stream ends first, that refuses the result, or that
does not confirm within the result deadline is reported in :attr:`Outcome.undelivered`,
with the reason.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import grpc

from finite_field import PeerError, ProtocolError

from ._config import parameters_from_config  # re-exported: its home is the config
from ._coordinator import Coordinator, Outcome
from ._generated import omnifc_pb2_grpc as pb_grpc
from ._messages import SessionParameters
from ._tls import authenticated_party, make_server, peer_common_name

__all__ = ["CoordinatorServer", "parameters_from_config", "coordinator_from_config"]

logger = logging.getLogger(__name__)

_END = object()

#: After a failure, seconds ``serve`` keeps answering parties that have not connected yet
#: (each is told the cause as soon as it connects); it stops as soon as every party of the
#: session has been told, so a failure never keeps it waiting for a phase deadline.
ABORT_GRACE = 10.0


def coordinator_from_config(config, *, cluster=None, responders=None,
                            parameters: SessionParameters | None = None, out=None,
                            memory_budget=None) -> Coordinator:
    """A :class:`Coordinator` for the session a config describes (``out`` /
    ``memory_budget``: where it accumulates the result, see :class:`Coordinator`)."""
    return Coordinator(config.session_id, parameters or parameters_from_config(config),
                       config.party_names,
                       {e.name: e.identity_public_key for e in config.parties},
                       cluster=cluster, responders=responders, out=out,
                       memory_budget=memory_budget)


class _Servicer(pb_grpc.CoordinatorServicer):
    def __init__(self, owner: "CoordinatorServer") -> None:
        self.owner = owner

    def Session(self, request_iterator, context):
        owner = self.owner
        name = owner.identify(context)
        if name is None:
            return
        outbox = owner.connect(name, context)
        if outbox is None:
            return
        who = [name]  # resolved from the hello when insecure
        context.add_callback(lambda: owner.lost(who[0]))
        reader = threading.Thread(target=owner.read, args=(who, outbox, request_iterator),
                                  name=f"omnifc-read-{name}", daemon=True)
        reader.start()
        with owner.lock:
            owner.streams += 1
        try:
            while True:
                try:
                    item = outbox.get(timeout=0.25)
                except queue.Empty:
                    if not context.is_active():
                        owner.lost(who[0])
                        return
                    continue
                if item is _END:
                    if owner.coordinator.outcome is not None:
                        # keep the stream open until the party confirms receipt of the
                        # result by closing its side (or the stream breaks)
                        reader.join(owner.deadlines.result)
                    return
                yield item
        finally:
            with owner.lock:
                owner.streams -= 1


class CoordinatorServer:
    """Serve one session over gRPC.

    Parameters
    ----------
    coordinator : Coordinator
        The state machine of the session.
    deadlines : object with ``join``, ``shares``, ``evaluation``, ``result`` seconds
        Usually ``SessionConfig.deadlines``.
    address : str
        Where to listen; port 0 picks a free port (see :attr:`port`).
    credentials : grpc.ServerCredentials, optional
        Mutual TLS (client authentication required); ``insecure=True`` instead logs a
        warning and trusts the party id in the hello.
    config : SessionConfig, optional
        When given, each caller's certificate must name a party of it and match its
        pinned fingerprint.
    tamper : callable, optional
        ``tamper(destination, envelope) -> envelope`` on everything sent (tests only: a
        malicious relay).
    """

    def __init__(self, coordinator: Coordinator, deadlines, *, address: str = "127.0.0.1:0",
                 credentials=None, insecure: bool = False, config=None, tamper=None) -> None:
        self.coordinator = coordinator
        self.deadlines = deadlines
        self.config = config
        self.insecure = insecure
        self.tamper = tamper
        self.lock = threading.RLock()
        self.changed = threading.Event()
        self.closed = threading.Event()
        self.outboxes: dict[str, queue.Queue] = {}
        self.streams = 0  # response streams still open
        self.seen: set[str] = set()  # parties that opened a stream (told, if it failed)
        # after the outcome: parties that confirmed receipt of their result (closed their
        # side of the stream), and those that did not (stream broken, result refused)
        self.confirmed: set[str] = set()
        self.unconfirmed: dict[str, str] = {}
        self.server, self.port = make_server(address, credentials, insecure=insecure,
                                             max_workers=len(coordinator.names) + 4)
        pb_grpc.add_CoordinatorServicer_to_server(_Servicer(self), self.server)

    # -- stream plumbing (called from gRPC threads) ---------------------------------------
    def identify(self, context) -> str | None:
        if self.insecure:
            return "?"  # resolved from the hello (no TLS: nothing is authenticated)
        try:
            if self.config is not None:
                return authenticated_party(context, self.config)
            name = peer_common_name(context)
            if name not in self.coordinator.names:
                raise PeerError(f"the TLS certificate names {name!r}, not a party of the "
                                "session", party=name, phase="join")
            return name
        except PeerError as error:
            logger.warning("refused a connection: %s", error)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(error))

    def connect(self, name: str, context) -> queue.Queue | None:
        with self.lock:
            if name == "?":
                return queue.Queue()  # registered when the hello names the stream
            if self.closed.is_set():  # too late: told the cause at once, never left waiting
                self.seen.add(name)
                return self._told_late(name, queue.Queue())
            if name in self.outboxes:
                context.abort(grpc.StatusCode.ALREADY_EXISTS,
                              f"party {name!r} is already connected")
            self.seen.add(name)
            self.outboxes[name] = queue.Queue()
            return self.outboxes[name]

    def _told_late(self, name: str, box: queue.Queue) -> queue.Queue:
        """``box`` with what a party that connects after the session ended is told: the
        failure's ErrorReport (when it failed), then the end of the stream."""
        if self.coordinator.error is not None:
            for _, env in self.coordinator.abort(names=[name]):
                box.put(env)
        box.put(_END)
        return box

    def read(self, who: list, outbox: queue.Queue, request_iterator) -> None:
        try:
            for env in request_iterator:
                if who[0] == "?":  # insecure: the first hello names the stream
                    claimed = env.hello.party_id if env.HasField("hello") else ""
                    with self.lock:
                        if claimed in self.outboxes or claimed not in self.coordinator.names:
                            return
                        who[0] = claimed
                        self.seen.add(claimed)
                        if self.closed.is_set():
                            self._told_late(claimed, outbox)
                            return
                        self.outboxes[claimed] = outbox
                self._receive(who[0], env)  # after the end too: until the party closes
        except grpc.RpcError:
            pass
        except Exception as error:  # noqa: BLE001 - fail closed: abort the whole session
            logger.exception("reading from %r failed", who[0])
            self.fail(error)
            return
        self._ended(who[0])

    def _receive(self, name: str, env) -> None:
        with self.lock:
            # decided under the lock: a result's confirmation can arrive while the thread
            # that decoded still holds it, before it marks the session closed
            if self.closed.is_set():
                self._after_end(name, env)
            else:
                self._handle(self.coordinator.receive, name, env)

    def _after_end(self, name: str, env) -> None:
        """A message after the session ended: a party's confirmation of its result, or its
        refusal of it (an ErrorReport); anything else is ignored."""
        with self.lock:
            if self.coordinator.outcome is None or name in self.unconfirmed:
                return
            kind = env.WhichOneof("body")
            if kind == "ready" and env.ready.phase == "result" and \
                    env.ready.party_id == name and \
                    env.ready.session_id == self.coordinator.session_id:
                self.confirmed.add(name)
            elif kind == "error" and name not in self.confirmed:
                self.unconfirmed[name] = f"it refused the result: {env.error.message[:300]}"
            self.changed.set()

    def _ended(self, name: str) -> None:
        """The party's side of the stream ended (closed, cancelled, process gone)."""
        with self.lock:
            if self.coordinator.outcome is not None and name in self.coordinator.names:
                if name not in self.confirmed:
                    self.unconfirmed.setdefault(
                        name, "its connection ended before it confirmed receipt")
                self.changed.set()
                return
        self.lost(name)

    def fail(self, error: Exception) -> None:
        """Abort the session because of ``error`` (raised outside the state machine)."""
        with self.lock:
            if self.closed.is_set():
                return
            self.coordinator._fail(error)
            self._route(self.coordinator.abort())
            self._finish()

    def lost(self, name: str, reason: str = "its stream ended") -> None:
        """A party's stream ended (closed, cancelled, process gone)."""
        if name != "?" and not self.closed.is_set():
            self._handle(self.coordinator.party_lost, name, reason)

    def _handle(self, call, *args) -> None:
        with self.lock:
            if self.closed.is_set():
                return
            try:
                out = call(*args)
            except Exception as error:  # noqa: BLE001 - fail closed, whatever it was
                if self.coordinator.error is None:
                    self.coordinator._fail(error)
                out = self.coordinator.abort()
                self._route(out)
                self._finish()
                return
            self._route(out)
            if self.coordinator.outcome is not None:
                self._finish()
            self.changed.set()

    def _route(self, pairs) -> None:
        for dest, env in pairs:
            if self.tamper is not None:
                env = self.tamper(dest, env)
            box = self.outboxes.get(dest)
            if box is not None:
                box.put(env)

    def _finish(self) -> None:
        for box in self.outboxes.values():
            box.put(_END)
        self.closed.set()
        self.changed.set()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "CoordinatorServer":
        self.server.start()
        logger.info("coordinator listening on port %d", self.port)
        return self

    def stop(self, grace: float = 1.0) -> None:
        self.closed.set()
        self.server.stop(grace).wait(grace + 1.0)

    def deadline_of(self, phase: str) -> float | None:
        return {"join": self.deadlines.join, "shares": self.deadlines.shares,
                "evaluation": self.deadlines.evaluation}.get(phase)

    def run(self, on_phase=None, poll=None, on_progress=None) -> Outcome:
        """Serve until the session finishes or fails; enforce the phase deadlines.

        ``on_phase(phase, round)`` is called on every phase or round change (progress
        display, tests), ``decode`` and ``result`` included (from the thread that decodes);
        ``on_progress(phase, detail)`` inside a phase (tiles received, the decode's steps);
        ``poll()`` about every 0.1 s (e.g. to notice a party process that died before it
        connected). Returns the outcome or raises the coordinator's error.
        """
        if on_phase is not None or on_progress is not None:
            def progress(phase, round_, detail):
                if detail is None:
                    if on_phase is not None:
                        on_phase(phase, round_)
                elif on_progress is not None:
                    on_progress(phase, detail)
            self.coordinator.progress = progress
        key, deadline = None, None
        coordinator = self.coordinator
        while not self.closed.is_set():
            with self.lock:
                current = (coordinator.phase, coordinator.round)
            if current != key:
                key = current
                seconds = self.deadline_of(current[0])
                deadline = None if seconds is None else time.monotonic() + seconds
                if on_phase is not None:
                    on_phase(*current)
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                self._handle(coordinator.expire)
                deadline = None  # a retry changes the round, which sets a new deadline
                continue
            self.changed.wait(0.1 if deadline is None else
                              max(0.0, min(0.1, deadline - time.monotonic())))
            self.changed.clear()
        if coordinator.error is not None:
            # every party hears the cause: those connected got it with the abort, a party
            # that connects within ABORT_GRACE gets it at once; then stop, not at a deadline
            end = time.monotonic() + min(ABORT_GRACE, self.deadlines.result)
            while time.monotonic() < end and (self.streams > 0 or
                                               not self.seen >= set(coordinator.names)):
                time.sleep(0.02)
            raise coordinator.error
        if coordinator.outcome is None:
            raise ProtocolError("the coordinator stopped before the session finished")
        return self._await_delivery(coordinator.outcome)

    def _await_delivery(self, outcome: Outcome) -> Outcome:
        """Wait (at most the result deadline) until every party sent a result confirmed
        its receipt or is known not to have it; record the others in
        ``outcome.undelivered``."""
        sent = [name for name in outcome.party_names if name not in outcome.lost]
        end = time.monotonic() + self.deadlines.result
        while True:
            with self.lock:
                pending = [n for n in sent if n not in self.confirmed
                           and n not in self.unconfirmed]
            if not pending or time.monotonic() >= end:
                break
            self.changed.wait(0.05)
            self.changed.clear()
        with self.lock:
            for name in sent:
                if name in self.unconfirmed:
                    outcome.undelivered[name] = self.unconfirmed[name]
                elif name not in self.confirmed:
                    outcome.undelivered[name] = (
                        f"it did not confirm receipt within the result deadline "
                        f"({self.deadlines.result:g} s)")
        for name, reason in outcome.undelivered.items():
            logger.warning("the result of party %r was not delivered: %s", name, reason)
        end = time.monotonic() + 2.0  # the last stream statuses out before stopping
        while time.monotonic() < end and self.streams > 0:
            time.sleep(0.02)
        return outcome


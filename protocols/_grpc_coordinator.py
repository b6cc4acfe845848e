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
(so ``omnifc serve`` exits non-zero) instead of waiting.
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
            if name in self.outboxes:
                context.abort(grpc.StatusCode.ALREADY_EXISTS,
                              f"party {name!r} is already connected")
            self.outboxes[name] = queue.Queue()
            return self.outboxes[name]

    def read(self, who: list, outbox: queue.Queue, request_iterator) -> None:
        try:
            for env in request_iterator:
                if who[0] == "?":  # insecure: the first hello names the stream
                    claimed = env.hello.party_id if env.HasField("hello") else ""
                    with self.lock:
                        if claimed in self.outboxes or claimed not in self.coordinator.names:
                            return
                        who[0] = claimed
                        self.outboxes[claimed] = outbox
                self._handle(self.coordinator.receive, who[0], env)
                if self.closed.is_set():
                    return
        except grpc.RpcError:
            pass
        except Exception as error:  # noqa: BLE001 - fail closed: abort the whole session
            logger.exception("reading from %r failed", who[0])
            self.fail(error)
            return
        self.lost(who[0])

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

    def run(self, on_phase=None, poll=None) -> Outcome:
        """Serve until the session finishes or fails; enforce the phase deadlines.

        ``on_phase(phase, round)`` is called on every phase or round change (progress
        display, tests); ``poll()`` about every 0.1 s (e.g. to notice a party process that
        died before it connected). Returns the outcome or raises the coordinator's error.
        """
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
        # Let the result (or the error report) reach the parties before stopping.
        end = time.monotonic() + self.deadlines.result
        while time.monotonic() < end and self.streams > 0:
            time.sleep(0.02)
        if coordinator.error is not None:
            raise coordinator.error
        if coordinator.outcome is None:
            raise ProtocolError("the coordinator stopped before the session finished")
        return coordinator.outcome


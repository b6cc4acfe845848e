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

from finite_field import AuthenticationError, OmniFCError, PeerError, ProtocolError

from ._config import parameters_from_config  # re-exported: its home is the config
from ._coordinator import Coordinator
from ._generated import omnifc_pb2_grpc as pb_grpc
from ._messages import SessionParameters, is_dropped
from ._outcome import Outcome
from ._tls import authenticated_party, keepalive_options, make_server, peer_common_name

__all__ = ["CoordinatorServer", "parameters_from_config", "coordinator_from_config",
           "Absences"]

logger = logging.getLogger(__name__)

_END = object()

#: After a failure, seconds ``serve`` keeps answering parties that have not connected yet
#: (each is told the cause as soon as it connects); it stops as soon as every party of the
#: session has been told, so a failure never keeps it waiting for a phase deadline.
ABORT_GRACE = 10.0
#: Seconds a new stream of a party that is already known gets to complete its resume
#: handshake; then it ends (it never holds a server thread for longer).
RESUME_HANDSHAKE = 10.0
#: Messages an outbox may hold before a share chunk's sender is held (about 1 MiB each).
RELAY_BACKLOG = 32
#: Seconds a sender is held at most per relayed share chunk.
RELAY_WAIT = 5.0


def coordinator_from_config(config, *, cluster=None, responders=None,
                            parameters: SessionParameters | None = None, out=None,
                            memory_budget=None, journal=None) -> Coordinator:
    """A :class:`Coordinator` for the session a config describes (``out`` /
    ``memory_budget``: where it accumulates the result; ``journal``: what a restarted
    coordinator continues from; see :class:`Coordinator`)."""
    return Coordinator(config.session_id, parameters or parameters_from_config(config),
                       config.party_names,
                       {e.name: e.identity_public_key for e in config.parties},
                       cluster=cluster, responders=responders, out=out,
                       memory_budget=memory_budget, journal=journal)


class Absences:
    """Parties whose stream broke and who may still resume: the grace period's clock.

    ``expired()`` names those away for longer than ``grace`` seconds: a party that is back
    after exactly ``grace`` seconds resumes, one step later it is a dropout.

    >>> clock = [0.0]
    >>> away = Absences(2.0, clock=lambda: clock[0])
    >>> away.mark("a"); clock[0] = 2.0; away.expired()
    []
    >>> clock[0] = 2.001; away.expired()
    ['a']
    """

    def __init__(self, grace: float, clock=time.monotonic) -> None:
        self.grace = float(grace)
        self.clock = clock
        self.since: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.since.setdefault(name, self.clock())

    def clear(self, name: str) -> None:
        self.since.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self.since

    def expired(self) -> list:
        now = self.clock()
        return sorted(n for n, t in self.since.items() if now - t > self.grace)


class _Servicer(pb_grpc.CoordinatorServicer):
    def __init__(self, owner: "CoordinatorServer") -> None:
        self.owner = owner

    def Session(self, request_iterator, context):
        owner = self.owner
        name = owner.identify(context)
        if name is None:
            return
        token = object()  # this stream; a resume on a new stream supersedes it
        outbox, resuming = owner.connect(name, context, token)
        if outbox is None:
            return
        who = [name]  # resolved from the hello when insecure
        context.add_callback(lambda: owner.stream_ended(who[0], token))
        reader = threading.Thread(target=owner.read,
                                  args=(who, outbox, request_iterator, token, resuming),
                                  name=f"omnifc-read-{name}", daemon=True)
        reader.start()
        with owner.lock:
            owner.streams += 1
        handshake_end = time.monotonic() + RESUME_HANDSHAKE if resuming else None
        try:
            while True:
                try:
                    item = outbox.get(timeout=0.25)
                except queue.Empty:
                    if not context.is_active():
                        owner.stream_ended(who[0], token)
                        return
                    if handshake_end is not None and time.monotonic() > handshake_end:
                        with owner.lock:
                            if owner.tokens.get(who[0]) is not token:
                                return  # no resume on this stream in time: it ends
                        handshake_end = None
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
        # reconnect (docs/protocol.md, "Reconnect"): the current stream of every party,
        # and the parties away (stream broken) that may still resume
        self.grace = float(coordinator.reconnect_grace)
        self.tokens: dict[str, object] = {}
        self.away = Absences(self.grace)
        self.server, self.port = make_server(
            address, credentials, insecure=insecure, max_workers=len(coordinator.names) + 4,
            options=keepalive_options(coordinator.parameters.keepalive))
        pb_grpc.add_CoordinatorServicer_to_server(_Servicer(self), self.server)
        for name in sorted(coordinator.away):  # restored from a journal: all must resume
            self.outboxes[name] = queue.Queue()
            self.seen.add(name)
            self.away.mark(name)

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

    def connect(self, name: str, context, token=None) -> tuple:
        """``(outbox, resuming)`` of a new stream: a party's first stream is registered
        at once; a later one (a reconnect, when the session allows it) must resume first."""
        with self.lock:
            if name == "?":
                return queue.Queue(), False  # registered when the first message names it
            late = self.closed.is_set() and not self._accepts_resume()
            if late:  # too late: told the cause at once, never left waiting
                self.seen.add(name)
                return self._told_late(name, queue.Queue()), False
            if name in self.outboxes:
                if self.grace > 0:
                    return queue.Queue(), True  # only a resume opens it
                context.abort(grpc.StatusCode.ALREADY_EXISTS,
                              f"party {name!r} is already connected")
            self.seen.add(name)
            self.outboxes[name] = queue.Queue()
            self.tokens[name] = token
            return self.outboxes[name], False

    def _accepts_resume(self) -> bool:
        """After the session: a party may still resume to fetch its result."""
        c = self.coordinator
        return self.grace > 0 and c.outcome is not None and c.error is None

    def _told_late(self, name: str, box: queue.Queue) -> queue.Queue:
        """``box`` with what a party that connects after the session ended is told: the
        failure's ErrorReport (when it failed), then the end of the stream."""
        if self.coordinator.error is not None:
            for _, env in self.coordinator.abort(names=[name]):
                box.put(env)
        box.put(_END)
        return box

    def read(self, who: list, outbox: queue.Queue, request_iterator, token=None,
             resuming: bool = False) -> None:
        try:
            requests = iter(request_iterator)
            for env in requests:
                if who[0] == "?":  # insecure: the first message names the stream
                    claimed = env.hello.party_id if env.HasField("hello") else \
                        env.resume_request.party_id if env.HasField("resume_request") else ""
                    with self.lock:
                        if claimed not in self.coordinator.names:
                            return
                        if claimed in self.outboxes and not (
                                self.grace > 0 and env.HasField("resume_request")):
                            return
                        who[0] = claimed
                        self.seen.add(claimed)
                        if self.closed.is_set() and not self._accepts_resume():
                            self._told_late(claimed, outbox)
                            return
                        resuming = claimed in self.outboxes
                        if not resuming:
                            self.outboxes[claimed] = outbox
                            self.tokens[claimed] = token
                if resuming:
                    resuming = False
                    if not self._resume(who[0], env, outbox, requests, token):
                        return
                    continue
                with self.lock:  # one hold: a resume cannot slip between check and use
                    if self.tokens.get(who[0]) is not token:
                        return  # superseded by a resumed stream: nothing more from it
                    self._receive(who[0], env)  # after the end too: until the party closes
                if env.HasField("share"):
                    self._relay_backpressure(env.share.receiver)
        except grpc.RpcError:
            pass
        except Exception as error:  # noqa: BLE001 - fail closed: abort the whole session
            logger.exception("reading from %r failed", who[0])
            self.fail(error)
            return
        self.stream_ended(who[0], token)

    def _resume(self, name: str, first, outbox: queue.Queue, requests, token) -> bool:
        """The resume handshake on a new stream of ``name`` (docs/protocol.md,
        "Reconnect"); True when it is accepted and the stream now carries the session."""
        from ._messages import envelope
        from ._generated import omnifc_pb2 as pb

        def refuse(why: str, kind: str = "authentication") -> bool:
            outbox.put(envelope(error=pb.ErrorReport(
                session_id=self.coordinator.session_id, reporter="coordinator", party=name,
                phase=self.coordinator.phase, kind=kind,
                message=f"resume refused: {why}")))
            outbox.put(_END)
            return False

        if not first.HasField("resume_request"):
            return refuse(f"party {name!r} is already connected; a new stream must resume",
                          "peer")
        with self.lock:
            challenge = self.coordinator.resume_challenge(name)
        outbox.put(challenge)
        answer = next(requests, None)  # bounded by the stream's deadline
        if answer is None:
            outbox.put(_END)
            return False
        with self.lock:
            try:
                out = self.coordinator.resume(name, answer)
            except OmniFCError as error:
                logger.warning("refused a resume of %r: %s", name,
                               getattr(error, "reason", None) or error)
                opaque = "authentication failed" if isinstance(error, AuthenticationError) \
                    else str(error)
                return refuse(opaque, "authentication" if isinstance(
                    error, AuthenticationError) else "peer")
            old = self.outboxes.get(name)
            self.outboxes[name] = outbox
            self.tokens[name] = token
            self.away.clear(name)
            if old is not None and old is not outbox:
                old.put(_END)  # the superseded stream ends; nothing more is read from it
            self._route(out)
            if self.closed.is_set():  # fetched its result: the stream ends after it
                outbox.put(_END)
            self.changed.set()
        return True

    def stream_ended(self, name: str, token=None) -> None:
        """A stream's end, once: ignored when a resumed stream superseded it."""
        with self.lock:
            # only the party's current stream: a resume candidate that failed, or a
            # stream a resume superseded, says nothing about the party
            if name == "?" or self.tokens.get(name) is not token:
                return
            del self.tokens[name]
        self._ended(name)

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
                    if self._accepts_resume() and name not in self.unconfirmed:
                        self.away.mark(name)  # it may resume to fetch its result
                    else:
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

    def lost(self, name: str, reason: str = "its stream ended", *, final: bool = False) -> None:
        """A party's stream ended (closed, cancelled): away while it may resume (within
        the grace period), else lost; ``final``: it cannot come back (its process is gone),
        lost at once."""
        if name == "?" or self.closed.is_set():
            return
        with self.lock:
            if not final and self.grace > 0 and self.coordinator.resumable(name):
                self._handle(self.coordinator.party_away, name, reason)
                if name in self.coordinator.away:
                    self.away.mark(name)
                return
        with self.lock:
            self.away.clear(name)
        self._handle(self.coordinator.party_lost, name, reason)

    def _expire_absences(self) -> None:
        """Parties away for longer than the grace period are dropouts, as today."""
        for name in self.away.expired():
            self.away.clear(name)
            with self.lock:
                if self.coordinator.outcome is not None:
                    self.unconfirmed.setdefault(
                        name, f"its connection ended before it confirmed receipt and it "
                              f"did not resume within reconnect_grace = {self.grace:g} s")
                    self.changed.set()
                    continue
            self._handle(self.coordinator.party_lost, name,
                         f"did not reconnect within reconnect_grace = {self.grace:g} s")

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

    def _relay_backpressure(self, receiver: str) -> None:
        """Hold this sender's stream (outside the lock) while the receiver's outbox holds
        more than ``RELAY_BACKLOG`` messages: share chunks are relayed as fast as their
        receiver takes them, so the coordinator holds a bounded backlog of them instead
        of up to the whole exchange (n d / l field elements per party). HTTP/2 flow
        control then pushes back on the sender. Bounded wait (``RELAY_WAIT`` s per
        message): a receiver that stalls or is gone delays its senders, never blocks
        them for good."""
        box = self.outboxes.get(receiver)
        if box is None or box.qsize() <= RELAY_BACKLOG:
            return
        end = time.monotonic() + RELAY_WAIT
        while box.qsize() > RELAY_BACKLOG and time.monotonic() < end and \
                not self.closed.is_set() and self.outboxes.get(receiver) is box:
            time.sleep(0.005)

    def _route(self, pairs) -> None:
        for dest, env in pairs:
            if self.tamper is not None:
                env = self.tamper(dest, env)
            box = self.outboxes.get(dest)
            if box is not None:
                box.put(env)
                if env.HasField("error") and is_dropped(env.error):
                    box.put(_END)  # the session goes on without it: its stream ends

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
            self._expire_absences()
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
            self._expire_absences()
            self.changed.wait(0.05)
            self.changed.clear()
        with self.lock:
            for name in sent:
                if name in self.unconfirmed:
                    outcome.undelivered[name] = self.unconfirmed[name]
                elif name not in self.confirmed and name in self.away:
                    outcome.undelivered[name] = (
                        f"its connection ended before it confirmed receipt, and it did not "
                        f"resume within the result deadline ({self.deadlines.result:g} s)")
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


"""gRPC transport, party side: connect (mutual TLS), run the sans-IO :class:`Party`.

:func:`run_party` opens one ``Session`` stream to the coordinator, sends what the state
machine emits and feeds it what arrives, until the result (or an error). Every wait is
bounded: connecting by ``connect_timeout``, the whole stream by ``timeout``. When the
stream breaks (a gRPC error, not a protocol error) and the session's ``reconnect_grace``
is positive, it reconnects with bounded backoff and resumes within that many seconds
(docs/protocol.md, "Reconnect"), else it fails as before.

``python -m protocols._grpc_party --config session.toml --party NAME --data FILE`` runs one
party as a process (what ``omnifc join``, ``omnifc demo`` and
``secure_distance_matrix(transport="grpc")`` start); it exits 0 on success and 1 on any
error, after logging it.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import pathlib
import queue
import sys
import threading
import time

import grpc
import numpy as np

from finite_field import DeadlineError, InputError, OmniFCError, ProtocolError

from ._faults import Fault
from ._generated import omnifc_pb2_grpc as pb_grpc
from ._party import Party
from ._party_connect import _connection_error, _wait_until_ready
from ._party_data import load_party_data
from ._tls import keepalive_options, make_channel, party_credentials

__all__ = ["run_party", "party_from_config", "load_party_data", "main"]

logger = logging.getLogger(__name__)

_END = object()
#: Seconds :meth:`_Link.close` waits for gRPC's thread that sends the stream.
_CLOSE_WAIT = 5.0


def party_from_config(config, name: str, data, *, parameters=None) -> Party:
    """The :class:`Party` ``name`` of a session config, with its identity key loaded."""
    from ._config import parameters_from_config
    from ._identity import load_identity

    from ._identity import public_key_bytes

    entry = config.party(name)
    if entry.identity_key is None:
        raise InputError(f"the session config gives no identity_key file for party {name!r}")
    identity_key = load_identity(entry.identity_key)
    if public_key_bytes(identity_key) != entry.identity_public_key:
        raise InputError(f"the identity key {str(entry.identity_key)!r} does not match the "
                         f"one pinned for {name!r} in the session config; use {name!r}'s own "
                         "key file (or the config of the session it was made for)")
    return Party(name, data, session_id=config.session_id,
                 parameters=parameters or parameters_from_config(config),
                 identity_key=identity_key,
                 pinned={e.name: e.identity_public_key for e in config.parties})


def run_party(party: Party, target: str, *, credentials=None, insecure: bool = False,
              timeout: float = 600.0, connect_timeout: float = 30.0, fault: str | None = None,
              on_message=None, tls_files=None, on_progress=None) -> Party:
    """Take part in a session over gRPC until the result arrives.

    Parameters
    ----------
    party : Party
    target : str
        The coordinator's ``host:port``.
    credentials : grpc.ChannelCredentials
        Mutual TLS (see :func:`protocols.party_credentials`); or ``insecure=True``.
    timeout : float
        Upper bound in seconds on the whole session.
    connect_timeout : float
        Seconds to establish the (mutually authenticated) connection.
    fault : str, optional
        Test hook: a misbehaving or failing party (a crash or stall when the evaluation
        starts, a delayed stream, garbage or corrupted uploads, bad shares, coalitions;
        the specs are listed in :mod:`protocols._faults`).
    on_message : callable, optional
        ``on_message(kind)`` after each received message.
    on_progress : callable, optional
        ``on_progress(phase, round, detail)`` for a progress display: every phase of
        :data:`protocols.PHASES` as this party sees it (detail None): ``join`` while it
        connects, ``shares`` from the roster, ``evaluation`` from the round's start (then
        "k of n tiles uploaded"), ``decode`` once its whole upload is out (the coordinator
        decodes), ``result`` when the result arrives.
    tls_files : TLSFiles, optional
        This party's certificate, key and CA files: while the connection is not ready, a
        direct TLS handshake diagnoses the cause (a certificate that does not verify ends
        the wait at once with the reason; a closed port is logged every few seconds).

    Returns
    -------
    Party
        Done, with ``labels`` when the coordinator clustered.

    Raises
    ------
    PeerError, DeadlineError, AuthenticationError, IntegrityError, ProtocolError
    """
    fault = Fault(fault)
    progress = _Progress(party, on_progress)
    link = _Link(party, target, credentials, insecure, timeout, fault)
    warming = None
    try:
        progress.phase("join")
        _wait_until_ready(link.channel, target, connect_timeout, tls_files, party)
        link.open(party.start())
        # the kernels load (numba included) while this party waits for the others to join,
        # not in the share exchange, whose deadline would pay for them
        import finite_field  # warm_up loads lazily, and so does everything it compiles

        warming = finite_field.warm_up_in_background()
        pending = iter(())  # what the party still has to send (an interrupted generator)

        def receive(env, kind):
            """``party.receive(env)`` (a refusal reported to the coordinator, raised)."""
            fault.on_message(kind)
            progress.received(kind)
            try:
                return party.receive(env)
            except ProtocolError as error:
                _report(party, link, error, kind)
                raise

        def arrived():
            """Share chunks that arrived while the party sends its own: each received
            (copied into its shares) at once; a Ready it brings is sent."""
            while party.phase == "shares":
                env = link.responses.share_nowait()
                if env is None:
                    return
                _drain(party, link, receive(env, "share"), progress, "share")
                if on_message is not None:
                    on_message("share")

        while True:
            try:
                _drain(party, link, pending, progress, between=arrived)
                for env in link.responses:
                    kind = env.WhichOneof("body")
                    pending = receive(env, kind)
                    _drain(party, link, pending, progress, kind, between=arrived)
                    if on_message is not None:
                        on_message(kind)
                    if party.done:
                        _confirm(party, link.responses, link.outgoing)
                        return party
                broken = "the coordinator closed the stream before sending a result"
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise _connection_error(party, party.phase, f"the session did not "
                                            f"finish within {timeout:g} s",
                                            DeadlineError) from None
                broken = f"the stream to the coordinator failed: {code.name} " \
                         f"({error.details()})"
            except _Broken as error:
                broken = str(error)
            if not party.can_resume:
                raise _connection_error(party, party.phase, broken)
            link.reconnect(broken)  # within reconnect_grace, or raises; then go on
    finally:
        link.close()
        if warming is not None:
            warming.stop()


class _Broken(Exception):
    """The stream broke while sending (a transport failure, not a protocol error)."""


def _drain(party: Party, link: "_Link", pending, progress, kind=None, *,
           between=None) -> None:
    """Send everything ``pending`` yields, calling ``between()`` after each share chunk
    sent (the party receives the chunks that arrived meanwhile). A protocol error is
    reported to the coordinator and raised; a broken stream raises :class:`_Broken` and
    leaves ``pending`` where it stopped (what it yielded last is in the party's log:
    re-sent after a resume)."""
    try:
        for out in pending:
            link.send(out)
            progress.sent(out)
            if between is not None and out.HasField("share"):
                between()
    except ProtocolError as error:
        _report(party, link, error, kind)
        raise


def _report(party: Party, link: "_Link", error: Exception, kind) -> None:
    """Tell the coordinator why this party stops (unless it told this party), once (a
    share chunk received while sending, :func:`_drain`, reports its refusal itself)."""
    if getattr(error, "_reported", False):
        return
    try:
        error._reported = True
    except AttributeError:  # pragma: no cover - an exception that takes no attribute
        pass
    if kind != "error" and not link.responses.done():
        try:
            link.send(party.error_report(error))
        except _Broken:
            return
        time.sleep(0.2)  # let the report go out before the stream closes


class _Prefetched:
    """A stream's responses, read by a thread of their own as they arrive.

    The party's loop sends everything a message makes it send before it reads the next
    one: in the share exchange, all of its share chunks. Read only then, the chunks
    relayed to it meanwhile would wait in the coordinator (its outbox to this party and
    the HTTP/2 buffers), for every party at once: about the whole exchange, n d / l field
    elements per party, in the coordinator (6.3 GB at n = 1,000,000, m = 17, l = 8). Read
    here, each party holds what is sent to it (what it keeps anyway, as its shares) and
    the coordinator relays as it goes. Iterating gives the messages in order, then raises
    the call's error (a ``grpc.RpcError``) or stops; ``done``, ``cancel``, ``code``, ... are
    the call's.
    """

    def __init__(self, call) -> None:
        self.call = call
        self._items: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name="party-responses")
        self._thread.start()

    def _put(self, item) -> None:
        with self._ready:
            self._items.append(item)
            self._ready.notify()

    def _read(self) -> None:
        try:
            for env in self.call:
                self._put(env)
        except grpc.RpcError as error:
            self._put(_Failed(error))
            return
        self._put(_END)

    def __iter__(self):
        return self

    def __next__(self):
        with self._ready:
            while not self._items:
                self._ready.wait()
            item = self._items[0]
            if item is _END:
                raise StopIteration  # stays ended for the next reader
            if isinstance(item, _Failed):
                raise item.error
            return self._items.popleft()

    def share_nowait(self):
        """The next message if it has arrived and is a share chunk (taken), else None
        (nothing taken): what the party copies into its shares while it is still sending
        its own (:func:`_drain`), so that the chunks relayed to it meanwhile do not wait
        here (about n d / l field elements: 0.39 GB at n = 1,000,000, l = 8)."""
        with self._ready:
            if not self._items:
                return None
            item = self._items[0]
            if item is _END or isinstance(item, _Failed) or not item.HasField("share"):
                return None
            return self._items.popleft()

    def done(self) -> bool:
        return self.call.done()

    def cancel(self) -> bool:
        return self.call.cancel()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def __getattr__(self, name):  # code(), details(), ...: the call's
        return getattr(self.call, name)


class _Failed:
    """The error that ended a prefetched stream."""

    def __init__(self, error) -> None:
        self.error = error


class _Link:
    """The party's stream to the coordinator, and its reconnect (docs/protocol.md,
    "Reconnect")."""

    def __init__(self, party: Party, target: str, credentials, insecure: bool,
                 timeout: float, fault: Fault) -> None:
        self.party, self.target, self.credentials = party, target, credentials
        self.insecure, self.timeout, self.fault = insecure, timeout, fault
        self.started = time.monotonic()
        self.options = keepalive_options(party.parameters.keepalive)
        self.channel = make_channel(target, credentials, insecure=insecure,
                                    options=self.options)
        self.outgoing: queue.Queue = queue.Queue(maxsize=8)
        self.responses = None
        self._senders: list[threading.Thread] = []  # gRPC's threads that read requests()

    def _stream(self, first) -> None:
        outgoing = self.outgoing

        def requests():
            self._senders.append(threading.current_thread())
            while True:
                item = outgoing.get()
                if item is _END:
                    return
                yield item

        for env in first:
            outgoing.put(env)
        remaining = max(1.0, self.timeout - (time.monotonic() - self.started))
        self.responses = _Prefetched(pb_grpc.CoordinatorStub(self.channel).Session(
            requests(), timeout=remaining))

    def open(self, hello) -> None:
        self._stream([self.fault.rewrite(self.party, env) for env in hello])

    def send(self, env) -> None:  # bounded queue: memory stays bounded by a few tiles
        env = self.fault.rewrite(self.party, env)
        self.fault.before_send(env, self.timeout)
        while True:
            try:
                self.outgoing.put(env, timeout=0.5)
                break
            except queue.Full:
                if self.responses.done():
                    raise _Broken("the stream to the coordinator closed") from None
        if self.fault.drop_after(env):  # test fault: the stream breaks once, here
            self.responses.cancel()
            raise _Broken("the stream was dropped (test fault drop-stream-in-evaluation)")

    def close(self) -> None:
        """End the stream and the channel, wait for gRPC's sending thread (a few seconds
        at most), and drop both.

        A gRPC call or channel left for the interpreter's exit to collect can hang the
        exit for good: its ``__del__`` takes a lock that one of gRPC's daemon threads may
        hold when the exit freezes it (seen as a party process that logged its error and
        never exited). So nothing of the stream outlives this call.
        """
        if self.responses is not None and not self.responses.done():
            self.responses.cancel()
        while True:  # a full queue is drained: the end marker must get in
            try:
                self.outgoing.put_nowait(_END)
                break
            except queue.Full:
                try:
                    self.outgoing.get_nowait()
                except queue.Empty:
                    pass
        if self.channel is not None:
            self.channel.close()
        self.channel = None
        end = time.monotonic() + _CLOSE_WAIT
        for sender in self._senders:
            sender.join(timeout=max(0.0, end - time.monotonic()))
        self._senders.clear()
        if self.responses is not None:
            self.responses.join(max(0.0, end - time.monotonic()))
        self.responses = None  # collected now, while gRPC's threads can still run

    def reconnect(self, broken: str) -> None:
        """Open a new stream and resume within ``reconnect_grace`` seconds of the break
        (bounded backoff), and within the session's own timeout, or raise. A refused
        resume is final."""
        party = self.party
        grace = party.parameters.reconnect_grace
        phase = party.phase
        session_end = self.started + self.timeout  # the whole session's bound, as a stream's
        end = min(time.monotonic() + grace, session_end)
        logger.warning("party %r: %s (phase %r); reconnecting within %g s", party.party_id,
                       broken, phase, grace)
        self.close()
        pause = self.fault.reconnect_pause()
        if pause:
            time.sleep(pause)
        delay, cause = 0.1, broken
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                if end >= session_end:
                    raise _connection_error(
                        party, phase, f"the session did not finish within {self.timeout:g} "
                        f"s (its timeout) while reconnecting: {broken} ({cause})",
                        DeadlineError)
                raise _connection_error(party, phase, f"{broken}; could not resume within "
                                        f"reconnect_grace = {grace:g} s ({cause})")
            self.channel = make_channel(self.target, self.credentials, insecure=self.insecure,
                                        options=self.options)
            self.outgoing = queue.Queue(maxsize=8)
            try:
                grpc.channel_ready_future(self.channel).result(timeout=min(remaining, 5.0))
                self._handshake(min(remaining, 10.0))
                logger.warning("party %r resumed the session", party.party_id)
                return
            except (grpc.FutureTimeoutError, grpc.RpcError, _Broken) as error:
                details = getattr(error, "details", None)
                cause = (details() if callable(details) else None) or str(error) or \
                    type(error).__name__
                self.close()
                time.sleep(max(0.0, min(delay, end - time.monotonic())))
                delay = min(2 * delay, 2.0)

    def _handshake(self, seconds: float) -> None:
        """ResumeRequest, challenge, Resume, acceptance; then re-send what is due."""
        party = self.party
        self._stream([party.resume_request()])
        timer = threading.Timer(seconds, self.responses.cancel)  # a silent coordinator
        timer.start()
        try:
            replies = iter(self.responses)
            challenge = next(replies, None)
            if challenge is None:
                raise _Broken("the coordinator closed the new stream")
            self.outgoing.put(party.answer_challenge(challenge))
            accepted = next(replies, None)
            if accepted is None:
                raise _Broken("the coordinator closed the new stream")
        finally:
            timer.cancel()
        for env in party.resumed(accepted):
            self.send(env)


class _Progress:
    """What :func:`run_party` tells ``on_progress``: the phases as this party sees them."""

    _PHASE_OF = {"roster": "shares", "round_start": "evaluation", "result": "result"}

    def __init__(self, party: Party, callback) -> None:
        self.party, self.callback = party, callback
        self.round, self.uploaded, self.total = 0, 0, 0

    def phase(self, phase: str, detail: str | None = None) -> None:
        if self.callback is not None:
            self.callback(phase, self.round, detail)

    def received(self, kind: str | None) -> None:
        if kind == "round_start":
            self.round += 1
            self.uploaded = 0
            plan = getattr(self.party, "plan", None)
            session = getattr(self.party, "session", None)
            self.total = len(plan.primes) * len(session.tiles(self.party.n_total)) \
                if plan is not None and session is not None else 0
        phase = self._PHASE_OF.get(kind)
        if phase is not None:
            self.phase(phase)

    def sent(self, env) -> None:
        if not env.HasField("tile") or not self.total:
            return
        self.uploaded += 1
        self.phase("evaluation", f"{self.uploaded} of {self.total} tiles uploaded")
        if self.uploaded == self.total:  # all out: the coordinator decodes now
            self.phase("decode")


def _confirm(party: Party, responses, outgoing: queue.Queue) -> None:
    """Confirm receipt of the result (a ``Ready`` of phase ``result``; the coordinator
    reports a party that never confirmed as not delivered), close this side of the stream,
    then let the coordinator end it."""
    from ._generated import omnifc_pb2 as pb
    from ._messages import envelope

    try:
        outgoing.put(envelope(ready=pb.Ready(session_id=party.session_id,
                                             party_id=party.party_id, phase="result")),
                     timeout=5.0)
        outgoing.put(_END, timeout=5.0)
    except queue.Full:
        return  # nothing is being sent any more: no confirmation (reported as undelivered)
    try:
        for _ in responses:  # nothing more is expected; the coordinator ends the stream
            pass
    except grpc.RpcError:
        pass  # the result is here; how the stream ends changes nothing


def main(argv=None) -> int:
    """Run one party process (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m protocols._grpc_party",
                                     description="Run one party of an omnifc session.")
    parser.add_argument("--config", required=True)
    parser.add_argument("--party", required=True)
    parser.add_argument("--data", required=True, help=".npy or .csv file of rows")
    parser.add_argument("--target", help="coordinator host:port (default: from the config)")
    parser.add_argument("--labels-out", help="write the received labels here (.npy)")
    parser.add_argument("--kind", choices=("distance", "sum"), default="distance",
                        help="session kind (default distance)")
    parser.add_argument("--rows", type=int, default=1, help="sum sessions: rows per party")
    parser.add_argument("--stats-out", help="write this party's evaluation figures here (JSON: "
                        "seconds, seconds in the distance kernel, bytes uploaded)")
    parser.add_argument("--fault", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING,
                        format=f"%(asctime)s party {args.party} %(levelname)s %(message)s")
    try:
        party = join_from_config(args.config, args.party, args.data, target=args.target,
                                 fault=args.fault, kind=args.kind, rows=args.rows)
        if args.labels_out and party.labels is not None:
            np.save(args.labels_out, party.labels)
        if args.stats_out:
            pathlib.Path(args.stats_out).write_text(json.dumps(party.timings))
    except OmniFCError as error:
        logger.error("%s", error)
        return 1
    return 0


def join_from_config(config_path, name: str, data_path, *, target=None, fault=None,
                     on_message=None, kind: str = "distance", rows: int = 1,
                     on_progress=None) -> Party:
    """Load config and data, then :func:`run_party` (what ``omnifc join`` does).

    ``data_path`` is a file (see :func:`load_party_data`) or the rows already loaded.
    """
    from ._config import SessionConfig, load_session_config, parameters_from_config

    config = config_path if isinstance(config_path, SessionConfig) \
        else load_session_config(config_path)
    parameters = parameters_from_config(config, kind=kind, rows=rows) if kind == "sum" \
        else None
    data = data_path if isinstance(data_path, np.ndarray) else load_party_data(data_path)
    party = party_from_config(config, name, data, parameters=parameters)
    d = config.deadlines
    total = d.join + d.shares + d.evaluation * 4 + d.result
    return run_party(party, target or config.coordinator,
                     credentials=None if config.insecure else party_credentials(config, name),
                     insecure=config.insecure, timeout=total, connect_timeout=d.join,
                     fault=fault, on_message=on_message, on_progress=on_progress,
                     tls_files=None if config.insecure else config.party_tls(name))


if __name__ == "__main__":
    sys.exit(main())

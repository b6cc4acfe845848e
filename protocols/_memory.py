"""In-memory transport: the coordinator and every party in one process, passing messages.

The same state machines as over gRPC; by default every envelope is serialized to protobuf
bytes and parsed back on delivery, so the exact wire bytes are exercised. Deadlines are
simulated: when no message is left in flight and the session is not finished, the current
phase's deadline is taken to have passed (:meth:`Coordinator.expire`).

Streaming: a party's evaluation is a lazy generator of tiles. The transport never
materializes it: every party's pending output is an outbox of such generators, and when
nothing else is in flight the loop pulls **one** message from the next party's outbox,
round-robin, and delivers it before pulling another. A session's peak memory is then the
coordinator's result (one preallocated matrix, see :class:`Coordinator` ``out`` /
``memory_budget``) plus O(m blocks) (each party's block being sent and the next one,
computed meanwhile: :class:`protocols._plans._BlockValues`), not m uploads of n^2
values. Messages a generator yields before its first tile (group seeds) are delivered at
once, so a party's seed bookkeeping is complete before others' seeds reach it; a new
round (or the result, or an error report) reaching a party discards what is left of its
outbox (the coordinator ignores tiles of an abandoned round anyway).

Examples
--------
>>> import numpy as np
>>> from protocols import SessionParameters, run_memory_session
>>> data = {"a": np.array([[0.0, 0.0]]), "b": np.array([[3.0, 4.0]]),
...         "c": np.array([[1.0, 1.0]])}
>>> outcome, _ = run_memory_session(data, SessionParameters(dim=2, bound=8.0, scale_bits=4))
>>> outcome.values[0].tolist()
[0.0, 25.0, 2.0]
"""

from __future__ import annotations

import collections
import itertools
import secrets
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import ProtocolError

from ._coordinator import Coordinator
from ._identity import public_key_bytes
from ._generated import omnifc_pb2 as pb
from ._messages import SessionParameters, body_of, phase_of
from ._outcome import Outcome
from ._fail_closed import COORDINATOR
from ._party import Party

__all__ = ["run_memory_session", "Transcript", "ReceivedMessage"]


@dataclass(frozen=True)
class ReceivedMessage:
    """One message as the coordinator received it.

    Attributes
    ----------
    sender : str
        The authenticated party it came from.
    kind : str
        The envelope body: ``hello``, ``confirmation``, ``share``, ``ready``, ``tile``,
        ``group_seed`` or ``error``.
    phase : str
        ``join``, ``shares`` (the roster confirmation included), ``evaluation`` or
        ``error``.
    data : bytes
        The serialized ``omnifc.v1.Envelope`` exactly as received (parse with
        ``protocols.parse_envelope``).
    """

    sender: str
    kind: str
    phase: str
    data: bytes

    def envelope(self) -> pb.Envelope:
        return pb.Envelope.FromString(self.data)


@dataclass
class Transcript:
    """Everything the coordinator received (``record=True``), in order.

    ``messages`` is the coordinator's whole view from the parties: in masked mode it holds
    signed hellos (public keys only), signed roster confirmations, AES-GCM ciphertext
    share chunks, ready notes and masked evaluation tiles. ``parties`` are the parties' state machines after the run;
    they hold the pairwise keys and are returned for simulations and tests only (an audit
    that wants to show what the coordinator *cannot* do must not use them).
    ``coordinator`` is the coordinator's state machine after the run (tests, and the
    audit of a deviating coordinator).
    """

    messages: list = field(default_factory=list)
    parties: dict = field(default_factory=dict)
    session_id: str = ""
    coordinator: object = None

    def of_kind(self, kind: str) -> list:
        return [m for m in self.messages if m.kind == kind]


def run_memory_session(party_data: dict, parameters: SessionParameters, *, session_id=None,
                       responders=None, cluster=None, record: bool = False,
                       serialize: bool = True, drop: dict | None = None, tamper=None,
                       sources: dict | None = None,
                       coordinator_class=Coordinator,
                       identities: dict | None = None,
                       observe: Transcript | None = None,
                       faults: dict | None = None, out=None, memory_budget=None,
                       tile_bytes=None) -> tuple[Outcome, Transcript]:
    """Run one complete session in memory.

    Parameters
    ----------
    party_data : dict of str to array-like
        Each party's private rows, in roster order.
    parameters : SessionParameters
        Public parameters (``kind="sum"`` for a secure sum).
    session_id : str, optional
        A fresh random id by default.
    responders, cluster
        See :class:`Coordinator`.
    record : bool
        Keep a copy of every message the coordinator receives in the transcript.
    serialize : bool
        Pass every message through its protobuf bytes (default True).
    drop : dict of str to str, optional
        Simulated crashes: ``{"party-2": "evaluation"}`` makes that party disappear when
        the first message of that phase reaches it (``"join"`` means it never says hello).
    tamper : callable, optional
        ``tamper(destination, envelope) -> envelope`` applied to everything the
        coordinator sends (a malicious relay, for tests).
    sources : dict of str to ByteSource, optional
        Per-party noise sources (reproducible tests only; the OS CSPRNG otherwise).
    coordinator_class : callable, optional
        Builds the coordinator from ``(session_id, parameters, names, pinned,
        responders=..., cluster=...)``; a :class:`Coordinator` subclass that deviates
        from the protocol (an audit of the malicious-coordinator threat) by default the
        honest one. The parties are always the real, unmodified ones.
    faults : dict of str to str, optional
        ``{"party-2": "corrupt-upload"}``: that party deviates exactly as the gRPC party
        process's test fault of the same name (:mod:`protocols._faults`). A
        callable ``fault(party, envelope) -> envelope`` rewrites everything that party
        sends (an adversary with the party's full state, for tests).
    out, memory_budget, tile_bytes : optional
        Where the coordinator accumulates the result (see :class:`Coordinator`); passed
        to ``coordinator_class`` only when given.

    Returns
    -------
    (Outcome, Transcript)

    Raises
    ------
    ProtocolError, PeerError, DeadlineError, AuthenticationError, IntegrityError
        The coordinator's error when the session fails; no partial outcome.
    """
    session_id = session_id or f"session-{secrets.token_hex(8)}"
    names = [str(k) for k in party_data]
    drop = dict(drop or {})
    identities = dict(identities or {})
    identities = {name: identities.get(name) or Ed25519PrivateKey.generate() for name in names}
    pinned = {name: public_key_bytes(key) for name, key in identities.items()}
    parties = {name: Party(name, party_data[name], session_id=session_id,
                           parameters=parameters, identity_key=identities[name],
                           pinned=pinned, source=(sources or {}).get(name))
               for name in names}
    storage = {key: value for key, value in (("out", out), ("memory_budget", memory_budget),
                                             ("tile_bytes", tile_bytes)) if value is not None}
    coordinator = coordinator_class(session_id, parameters, names, pinned,
                                    responders=responders, cluster=cluster, **storage)
    # in memory no stream breaks: nothing is logged for a replay (docs/protocol.md,
    # "Reconnect"), whatever reconnect_grace says
    coordinator.reconnect_grace = 0.0
    for party in parties.values():
        party.resumable = False
    transcript = observe if observe is not None else Transcript()
    transcript.parties, transcript.session_id = parties, session_id
    transcript.coordinator = coordinator
    queue = collections.deque()  # (destination, sender, envelope)
    # per party: lazy generators of what it still has to send (its evaluation tiles)
    outboxes = {name: collections.deque() for name in names}
    turn = collections.deque(names)  # round-robin order of the outboxes
    faults = dict(faults or {})
    if faults:
        from ._faults import corrupt

    def wire(env):
        return pb.Envelope.FromString(env.SerializeToString()) if serialize else env

    def from_coordinator(pairs):
        for dest, env in pairs:
            if tamper is not None:
                env = tamper(dest, env)
            queue.append((dest, COORDINATOR, env))

    def coordinator_step(call, *args):
        try:
            from_coordinator(call(*args))
        except ProtocolError:
            for dest, env in coordinator.abort():
                if dest in parties and parties[dest].phase not in ("failed", "done"):
                    try:
                        list(parties[dest].receive(wire(env)))
                    except ProtocolError:
                        pass
            raise

    for name in names:
        if drop.get(name) == "join":  # never connects: the join deadline catches it
            continue
        for env in parties[name].start():
            queue.append((COORDINATOR, name, env))

    def post(name, env):
        if name in faults:
            fault = faults[name]
            env = (fault(parties[name], wire(env)) if callable(fault) else
                   corrupt(parties[name], wire(env), fault))
        queue.append((COORDINATOR, name, env))

    def pull(name) -> bool:
        """Move the next message of ``name``'s outbox into the queue; False if empty."""
        box = outboxes[name]
        while box:
            try:
                env = next(box[0])
            except StopIteration:
                box.popleft()
                continue
            except ProtocolError as error:
                box.clear()
                queue.append((COORDINATOR, name, parties[name].error_report(error)))
                return True
            post(name, env)
            return True
        return False

    def emit(name, produced) -> None:
        """Send what a party produced: eagerly up to its first tile, lazily after."""
        iterator = iter(produced)
        for env in iterator:
            if env.WhichOneof("body") == "tile":
                outboxes[name].append(itertools.chain((env,), iterator))
                return
            post(name, env)

    def pull_next() -> bool:
        for _ in range(len(turn)):
            name = turn[0]
            turn.rotate(-1)
            if name in coordinator.lost or parties[name].phase in ("failed", "done"):
                outboxes[name].clear()
                continue
            if pull(name):
                return True
        return False

    while coordinator.outcome is None:
        if not queue and pull_next():
            continue
        if not queue:
            coordinator_step(coordinator.expire)
            if not queue and coordinator.outcome is None:
                raise ProtocolError("the session stalled with nothing in flight")
            continue
        dest, sender, env = queue.popleft()
        env = wire(env)
        if dest == COORDINATOR:
            if record:
                kind = env.WhichOneof("body")
                transcript.messages.append(ReceivedMessage(
                    sender, kind, phase_of(kind), env.SerializeToString()))
            coordinator_step(coordinator.receive, sender, env)
            continue
        party = parties[dest]
        if dest in coordinator.lost or party.phase in ("failed", "done"):
            continue
        kind, _ = body_of(env)
        if drop.get(dest) == phase_of(kind):
            outboxes[dest].clear()
            coordinator_step(coordinator.party_lost, dest, "process crashed")
            continue
        if kind in ("round_start", "result", "error"):
            outboxes[dest].clear()  # a new round (or the end) supersedes unsent tiles
        try:
            emit(dest, party.receive(env))
        except ProtocolError as error:
            outboxes[dest].clear()
            if kind == "error":
                continue
            queue.append((COORDINATOR, dest, party.error_report(error)))
    # Deliver the results still in flight.
    while queue:
        dest, sender, env = queue.popleft()
        if dest in parties and parties[dest].phase not in ("failed", "done"):
            list(parties[dest].receive(wire(env)))
    return coordinator.outcome, transcript

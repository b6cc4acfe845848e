"""The Flower ClientApp side: omnifc's :class:`protocols.Party` behind a ``query`` handler.

A ClientApp handles one message at a time, possibly in a fresh process each time, so the
party's state lives in the node's ``context.state`` between messages (as Flower's SecAgg+
mod keeps its own): a 32-byte randomness key drawn from the OS CSPRNG when the session
starts, and every envelope the party consumed, in order. The party is a deterministic
function of its inputs once its randomness is fixed: every random byte it draws (run nonce,
ephemeral X25519 key, noise segments, group seeds) comes from a ChaCha20 keystream under
that key (:class:`KeystreamSource`), so a process that does not hold the live party rebuilds
it exactly by replaying the recorded envelopes (their outputs were sent already and are
dropped). A process that still holds it (the usual case) skips the replay.

The key never leaves the node: ``context.state`` is kept by the SuperNode (or the simulation
engine's node), never sent to the SuperLink. It is as secret as the party's shares' noise:
whoever reads it and the relayed ciphertexts can decrypt this party's shares. One key serves
one session; a second ``start`` of any session this node has started (the node's Context lists
them) is refused, so randomness is never reused.

**The gRPC data plane** (a start message with ``transport = "grpc"``, sent by
:class:`omnifc.flower.GrpcDataPlaneWorkflow`): the handler runs the whole session in that
one message, over omnifc's own gRPC with mutual TLS to the coordinator address of the
session config this node pinned (:func:`protocols.run_party`, what ``omnifc join`` does),
with the OS CSPRNG and nothing kept in the Context but the session's end (phase, error). The
message names no address: a server cannot point the party anywhere else, and the party's
TLS pins the coordinator's certificate. The reply names the party and carries its binding
proof (:mod:`omnifc.flower._binding`: a signature with the party's identity key over the
session, its run nonce, the roster, this node id and this message id), so the server learns
which node runs which party and nobody can claim another's.

Everything the party's own rules say holds unchanged (pinned identity keys, roster checks,
masks bound to the view, fail closed): this module only carries bytes. A failure leaves the
party failed; the reply carries its ErrorReport, and :func:`party_status` tells the ClientApp
why.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from finite_field import ProtocolError
from protocols import Party, load_identity, load_session_config
from protocols import omnifc_pb2 as pb
from protocols import parameters_from_config
from protocols import as_protocol_error

from . import _constants as C
from ._binding import prove_binding

__all__ = ["PartySetup", "PartyHandler", "KeystreamSource", "setup_from_node_config",
           "party_status", "add_party"]

logger = logging.getLogger(__name__)

_SEED_BYTES = 32


class KeystreamSource:
    """A ByteSource: the ChaCha20 keystream under a 32-byte key (a CSPRNG while the key is
    secret and used for one session only)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != _SEED_BYTES:
            raise ProtocolError(f"the party's randomness key must be {_SEED_BYTES} bytes, "
                                f"got {len(key)}")
        self._stream = Cipher(algorithms.ChaCha20(bytes(key), b"\0" * 16), mode=None).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._stream.update(b"\0" * int(n))

    def __repr__(self) -> str:
        return "KeystreamSource(<secret>)"


@dataclass(frozen=True)
class PartySetup:
    """Who this node is in which session (all public except ``identity_key``)."""

    party_id: str
    session_id: str
    parameters: object  # protocols.SessionParameters
    identity_key: object  # Ed25519PrivateKey
    pinned: dict
    #: the whole session config (protocols.SessionConfig): its coordinator address and TLS
    #: files are what the gRPC data plane uses; None: that data plane is refused
    config: object = None

    def __repr__(self) -> str:
        return (f"PartySetup(party_id={self.party_id!r}, session_id={self.session_id!r}, "
                f"parties={sorted(self.pinned)})")


def setup_from_node_config(context) -> list:
    """The node's party in each of its sessions: ``omnifc-party``, ``omnifc-session-config``
    (the session config TOML every participant checked by its fingerprint; several paths
    separated by ``;`` when the node takes part in several sessions, e.g. the clustering
    session and a newcomer-assignment session) and ``omnifc-identity`` (this party's Ed25519
    identity key file) from ``context.node_config``. Returns one :class:`PartySetup` per
    session config."""
    config_of = context.node_config
    missing = [key for key in (C.NODE_PARTY, C.NODE_SESSION_CONFIG, C.NODE_IDENTITY)
               if key not in config_of]
    if missing:
        raise ProtocolError(f"the node config lacks {missing} (expected keys "
                            f"{C.NODE_PARTY!r}, {C.NODE_SESSION_CONFIG!r}, {C.NODE_IDENTITY!r})")
    identity = load_identity(str(config_of[C.NODE_IDENTITY]))
    setups = []
    for path in str(config_of[C.NODE_SESSION_CONFIG]).split(";"):
        if not path.strip():
            continue
        config = load_session_config(path.strip())
        setups.append(PartySetup(str(config_of[C.NODE_PARTY]), config.session_id,
                                 parameters_from_config(config), identity,
                                 {e.name: e.identity_public_key for e in config.parties},
                                 config))
    return setups


def party_status(context) -> dict:
    """``{"session", "phase", "error"}`` of the party this node ran last (empty if none)."""
    record = context.state.config_records.get(C.STATE_RECORD)
    if record is None:
        return {}
    return {"session": str(record[C.STATE_SESSION]), "phase": str(record[C.STATE_PHASE]),
            "error": str(record[C.STATE_ERROR])}


class PartyHandler:
    """A ClientApp ``query`` handler that runs this node's omnifc party.

    Parameters
    ----------
    rows : callable
        ``rows(context) -> array (n_i, d)``: this node's private vectors (raw samples or an
        adapter's client embedding). Called when the party is built; a ``rows`` with a
        parameter named ``session`` also gets the session id (a node in several sessions,
        e.g. FLUX's full descriptor for clustering and its prefix for assignment). For a
        multi-part embedding (FMCL: :func:`omnifc.flower.fmcl_rows`) it returns a dict
        ``{part: array}``; each session's start message names its part.
    setup : callable, optional
        ``setup(context) -> PartySetup`` or a list of them (one per session this node may
        take part in); :func:`setup_from_node_config` by default.
    on_result : callable, optional
        ``on_result(party, context)`` once the result arrived (``party.labels`` holds the
        labels of this node's rows).
    """

    def __init__(self, rows: Callable, *, setup: Callable = setup_from_node_config,
                 on_result: Callable | None = None) -> None:
        self.rows = rows
        self.setup = setup
        self.on_result = on_result
        #: wall-clock stamps (``time.time()``) of the last gRPC-data-plane message this
        #: process handled: ``handler`` (entered), ``party`` (built), ``party:<phase>`` (the
        #: phases as the party saw them: join, shares, evaluation, decode, result),
        #: ``ended`` (the session over for this party), ``reply`` (the proof signed);
        #: public timing, for the cost breakdown of docs/flower.md
        self.timeline: dict = {}
        # live parties of this process: (run, node, session) -> (party, envelopes consumed,
        # digest of the randomness key); an optimization only, context.state is the truth
        self._live: dict = {}

    # -- the handler ---------------------------------------------------------------------
    def __call__(self, message, context):
        from flwr.app import ConfigRecord, Message, RecordDict

        record = message.content.config_records.get(C.RECORD)
        if record is None:
            raise ProtocolError(f"an omnifc message without its {C.RECORD!r} record")
        session = str(record[C.KEY_SESSION])
        incoming = [bytes(b) for b in (record.get(C.KEY_ENVELOPES) or [])]
        start = bool(record.get(C.KEY_START, False))
        transport = str(record.get(C.KEY_TRANSPORT, C.TRANSPORT_FLOWER))
        part = record.get(C.KEY_PART)
        part = None if part is None else str(part)
        if transport == C.TRANSPORT_GRPC and start:
            phase, error, party, proof = self._run_grpc(context, session, message, part)
            return Message(RecordDict({C.RECORD: ConfigRecord(
                {C.KEY_SESSION: session, C.KEY_PHASE: phase, C.KEY_ERROR: error,
                 C.KEY_PARTY: party, C.KEY_PROOF: proof})}),
                reply_to=message)
        if transport != C.TRANSPORT_FLOWER:
            raise ProtocolError(f"an omnifc message with transport {transport!r} (expected "
                                f"{C.TRANSPORT_FLOWER!r}, or {C.TRANSPORT_GRPC!r} to start)")
        out = self._handle(context, session, start, incoming, part)
        reply = ConfigRecord({C.KEY_SESSION: session, C.KEY_ENVELOPES: out} if out
                             else {C.KEY_SESSION: session})
        return Message(RecordDict({C.RECORD: reply}), reply_to=message)

    def _start_once(self, context, session: str) -> PartySetup:
        """Refuse a session this node started before; else record it as started and
        return this node's setup for it."""
        from flwr.app import ConfigRecord

        state = context.state.config_records.get(C.STATE_RECORD)
        started = context.state.config_records.get(C.STARTED_RECORD)
        seen = [str(s) for s in (started.get(C.STARTED_SESSIONS) or [])] if started else []
        if session in seen or (state is not None and str(state[C.STATE_SESSION]) == session):
            raise ProtocolError(f"session {session!r} was already started on this node; "
                                "a session is started once (its randomness is never "
                                "reused)")
        setup = self._setup_for(context, session)
        context.state.config_records[C.STARTED_RECORD] = ConfigRecord(
            {C.STARTED_SESSIONS: seen + [session]})
        return setup

    def _run_grpc(self, context, session: str, message, part=None) -> tuple:
        """The whole session over omnifc's gRPC data plane; returns (phase, error, party,
        binding proof): the proof (``b""`` when the party never got a roster) signs this
        node id and message id with the party's identity key (:mod:`._binding`)."""
        from flwr.app import ConfigRecord

        from protocols import party_credentials, run_party

        timeline = self.timeline = {"handler": time.time()}
        setup = self._start_once(context, session)
        config = setup.config
        if config is None:
            raise ProtocolError(f"session {session!r} over omnifc's gRPC needs the session "
                                "config on the node (PartySetup.config)")
        state = ConfigRecord({C.STATE_SESSION: session, C.STATE_SEED: b"",
                              C.STATE_PHASE: "init", C.STATE_ERROR: ""})
        context.state.config_records[C.STATE_RECORD] = state
        party = Party(setup.party_id, self._rows(context, session, part), session_id=session,
                      parameters=setup.parameters, identity_key=setup.identity_key,
                      pinned=setup.pinned)  # the OS CSPRNG: the party lives in this call
        timeline["party"] = time.time()

        def progress(phase, _round, detail):
            if detail is None:
                timeline.setdefault(f"party:{phase}", time.time())

        d = config.deadlines
        try:
            run_party(party, config.coordinator,
                      credentials=None if config.insecure
                      else party_credentials(config, setup.party_id),
                      insecure=config.insecure,
                      timeout=d.join + d.shares + d.evaluation * 4 + d.result,
                      connect_timeout=d.join,
                      tls_files=None if config.insecure else config.party_tls(setup.party_id),
                      on_progress=progress)
        except Exception as exc:  # fail closed: the party failed, the node says why
            error = as_protocol_error(exc, f"party {setup.party_id!r}", party.phase)
            if party.phase != "failed":
                party._fail(error)
            logger.warning("party %r failed: %s", party.party_id, error)
        timeline["ended"] = time.time()
        state[C.STATE_PHASE] = party.phase
        state[C.STATE_ERROR] = "" if party.error is None else str(party.error)
        context.state.config_records[C.STATE_RECORD] = state
        if party.phase == "done" and self.on_result is not None:
            self.on_result(party, context)
        proof = b""
        if party.roster_digest is not None:  # the party is in a roster: it can prove it
            proof = prove_binding(setup.identity_key, session, setup.party_id,
                                  party.run_nonce, party.roster_digest,
                                  context.node_id, message.metadata.message_id)
        timeline["reply"] = time.time()
        return (str(state[C.STATE_PHASE]), str(state[C.STATE_ERROR]), setup.party_id,
                proof)

    def _handle(self, context, session: str, start: bool, incoming: list,
                part=None) -> list:
        from flwr.app import ConfigRecord

        state = context.state.config_records.get(C.STATE_RECORD)
        if start:
            setup = self._start_once(context, session)
            state = ConfigRecord({C.STATE_SESSION: session, C.STATE_SEED: os.urandom(_SEED_BYTES),
                                  C.STATE_PHASE: "init", C.STATE_ERROR: ""})
            context.state.config_records[C.STATE_RECORD] = state
            if part is not None:
                state[C.STATE_PART] = part
            party = self._build(context, setup, state)
            out = [env.SerializeToString() for env in party.start()]
            self._save(context, state, party, [])
            return out
        if state is None or str(state[C.STATE_SESSION]) != session:
            raise ProtocolError(f"a message of session {session!r}, which this node never "
                                "started")
        if str(state[C.STATE_PHASE]) in ("failed", "done"):
            return []  # over: late relays and error reports change nothing
        party = self._restore(context, state)
        received = list(state.get(C.STATE_RECEIVED) or [])
        out = []
        for data in incoming:
            received.append(data)
            kind = None
            try:
                env = pb.Envelope.FromString(data)
                kind = env.WhichOneof("body")
                produced = [e.SerializeToString() for e in party.receive(env)]
            except Exception as exc:  # fail closed, whatever it was
                error = as_protocol_error(exc, f"party {party.party_id!r}", party.phase)
                if party.phase != "failed":
                    party._fail(error)
                logger.warning("party %r failed: %s", party.party_id, error)
                if kind != "error":  # an error report is not answered with another
                    out.append(party.error_report(error).SerializeToString())
                break
            out.extend(produced)
            if party.phase == "done":
                break
        self._save(context, state, party, received)
        if party.phase == "done" and self.on_result is not None:
            self.on_result(party, context)
        return out

    # -- the party between messages ----------------------------------------------------
    def _key(self, context, state):
        return (context.run_id, context.node_id, str(state[C.STATE_SESSION]))

    def _setup_for(self, context, session: str) -> PartySetup:
        setups = self.setup(context)
        if isinstance(setups, PartySetup):
            setups = [setups]
        for setup in setups:
            if setup.session_id == session:
                return setup
        raise ProtocolError(f"the server started session {session!r}, this node's session "
                            f"configs are for {[s.session_id for s in setups]}")

    def _rows(self, context, session: str, part=None):
        try:
            takes_session = "session" in inspect.signature(self.rows).parameters
        except (TypeError, ValueError):  # a builtin or C callable: no signature
            takes_session = False
        rows = self.rows(context, session=session) if takes_session else self.rows(context)
        if isinstance(rows, dict):  # a multi-part embedding: the session names its part
            if part is None:
                raise ProtocolError(f"session {session!r} names no embedding part, and "
                                    f"rows(context) returned the parts {sorted(rows)}")
            if part not in rows:
                raise ProtocolError(f"session {session!r} asks for embedding part {part!r}, "
                                    f"rows(context) returned the parts {sorted(rows)}")
            return rows[part]
        if part is not None:
            raise ProtocolError(f"session {session!r} asks for embedding part {part!r}, "
                                "rows(context) returned one array (no parts)")
        return rows

    def _build(self, context, setup: PartySetup, state) -> Party:
        part = state.get(C.STATE_PART)
        return Party(setup.party_id,
                     self._rows(context, setup.session_id, None if part is None else str(part)),
                     session_id=setup.session_id,
                     parameters=setup.parameters, identity_key=setup.identity_key,
                     pinned=setup.pinned, source=KeystreamSource(bytes(state[C.STATE_SEED])))

    def _restore(self, context, state) -> Party:
        received = list(state.get(C.STATE_RECEIVED) or [])
        digest = hashlib.sha256(bytes(state[C.STATE_SEED])).digest()
        live = self._live.get(self._key(context, state))
        if live is not None and live[1] == len(received) and live[2] == digest:
            return live[0]
        party = self._build(context, self._setup_for(context, str(state[C.STATE_SESSION])),
                            state)
        list(party.start())
        for data in received:  # replay: same randomness, same inputs -> same state
            for _ in party.receive(pb.Envelope.FromString(bytes(data))):
                pass
        logger.info("party %r rebuilt from the node's context (%d envelopes replayed)",
                    party.party_id, len(received))
        return party

    def _save(self, context, state, party: Party, received: list) -> None:
        state[C.STATE_RECEIVED] = list(received)
        state[C.STATE_PHASE] = party.phase
        state[C.STATE_ERROR] = "" if party.error is None else str(party.error)
        context.state.config_records[C.STATE_RECORD] = state
        key = self._key(context, state)
        if party.phase in ("failed", "done"):
            self._live.pop(key, None)
        else:
            self._live[key] = (party, len(received),
                               hashlib.sha256(bytes(state[C.STATE_SEED])).digest())


def add_party(app, rows: Callable, **options) -> PartyHandler:
    """Register omnifc's party on a ``flwr.clientapp.ClientApp`` (``query.omnifc``).

    ``rows`` and ``options``: see :class:`PartyHandler`. Returns the handler.
    """
    handler = PartyHandler(rows, **options)
    app.query(C.ACTION)(handler)
    return handler

"""The coordinator's side of a session as a sans-IO state machine.

:meth:`Coordinator.receive` consumes one envelope from an authenticated sender (the
transport says who: the TLS peer name over gRPC) and returns ``(destination, envelope)``
pairs to send. The transport also reports a lost connection (:meth:`party_lost`) and a
passed phase deadline (:meth:`expire`); the coordinator never reads a clock to decide
anything (it only times phases for the stats). What differs between a distance session and
a secure sum (the tiles, the round's result, the decode) is asked of the session plan
(:mod:`protocols._plans`); the rules below hold for both.

Fail closed: any exception, whatever its origin (a violation, a malformed or garbage upload,
the decode, the clustering callback, a bug), leaves the coordinator failed with a
:class:`ProtocolError` (``PeerError`` naming the party and phase, ``DeadlineError``,
``AuthenticationError``, ``IntegrityError``; anything else is wrapped, with only its type in the message);
:meth:`abort` then returns the ErrorReports, naming the phase, that tell every remaining
party. Nothing partial is ever returned: :attr:`outcome` is set only when the whole matrix
(or sum) is decoded and clustered. A decoded value outside the no-wrap bound is an
``IntegrityError`` that says which check failed. Blame goes only to the authenticated
sender: an ErrorReport from party X is "reported by X", whatever party it names.

Public row caps (``max_rows_per_party``, ``max_rows_total``) are checked on every hello
before anything is allocated. The roster is the session config's order of parties; every
party checks it (order, signatures, its own hello, parameters, caps) and binds its keys to
its digest.

Roster confirmation (still phase ``shares``, under its deadline): every party then sends
a :class:`RosterConfirmation`, its identity signature on the roster digest. The
coordinator accepts one per party, from that party (the authenticated sender), of the
digest of the roster it sent, with a valid signature under the pinned key; anything else
(early, late, duplicate, misattributed, wrong size, another digest) fails the session
naming the sender. When all m are in, it relays them in roster order to every party; a
party encrypts nothing before it verified them all itself, and a share chunk or Ready
before the relay is refused as out of order.

Reconnect (docs/protocol.md, "Reconnect"): with ``reconnect_grace`` > 0 a party whose
stream broke is *away* (:meth:`Coordinator.party_away`), not lost, until it resumes
(:meth:`Coordinator.resume_challenge`, :meth:`Coordinator.resume`: identity signature,
run nonce, a fresh challenge and a proof of the run's ephemeral key, checked against the
roster; then what it did not receive is re-sent) or the transport's grace period ends
(:meth:`party_lost`). A tile is never taken twice: a second copy, identical or not, fails
the session naming the sender (an honest party re-sends only the tiles not held).

Dropouts during evaluation: if a party of the responding set B disappears or misses the
deadline before it delivered every tile, the round is abandoned without unmasking, and a
new round with B' = the remaining parties of B (a strict subset: parties accept nothing
else, so there are at most m - (2l+2t-1) + 1 rounds; |B'| >= 2l+2t-1, all parties for a
sum) starts with fresh masks: masks are bound to the exact view (session, round, roster
digest, B, prime, tile). Tiles of an abandoned round that are still in flight are ignored.
A coordinator that deviates from all this (shows parties different sets B or rosters,
replays hellos, runs extra rounds) gets noise or aborted parties, never more than D:
see docs/protocol.md and ``tests/protocols/test_malicious_coordinator.py``.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from finite_field import (AuthenticationError, DeadlineError, DeviationError, IntegrityError, ParameterError,
                          PeerError, ProtocolError, masked_upload)

from ._accumulator import (DEFAULT_MEMORY_BUDGET, DistanceAccumulator, DistanceStore,
                           discard_store)
from ._crypto import PROTOCOL_VERSION, RUN_NONCE_BYTES
from ._identity import verify
from ._integrity import Findings, OpenTileSums, verdict
from ._generated import omnifc_pb2 as pb
from ._messages import (DROPPED, SessionParameters, body_of, check_row_caps, chunk_rows,
                        envelope, phase_of, packed_view, wire_size)
from ._party import (as_protocol_error, confirmation_transcript, hello_transcript,
                     roster_digest_of)
from ._log_once import log_once
from ._plans import SumAccumulator, session_plan, session_type
from ._resume import CHALLENGE_BYTES, Outlog, check_resume_proof, resume_transcript
from ._journal import why_not_journaled
from ._crypto import EphemeralKey

__all__ = ["Coordinator", "Outcome", "PHASES"]

logger = logging.getLogger(__name__)

#: Phases in order; stats are kept per phase.
PHASES = ("join", "shares", "evaluation", "decode", "result")

_AEAD_TAG = 16


class Outcome:
    """What a finished session produced at the coordinator.

    Attributes
    ----------
    store : DistanceStore or None
        Distance sessions: the one integer result matrix the coordinator accumulated every
        tile into (in RAM below ``memory_budget``, else memory-mapped; at ``out`` when
        given). None for sum sessions.
    integer : ndarray of int64
        Distance sessions: the exact integer squared distances (n, n), **materialized on
        access** from :attr:`store` (an int64 copy: fine for small results; use
        ``store.integer`` for large ones). Sum sessions: the exact signed integer sum,
        shape (rows, k).
    values : ndarray of float64
        ``integer`` dequantized (distances / 4^q, or sum / 2^q); for distance sessions
        also materialized on access (``store.distances`` is the lazy, tile-wise view).
    labels : ndarray or None
        Cluster labels of every row, when a clustering callback was given.
    party_names, row_offsets, rows
        Roster order, first global row and row count of every party.
    responders : list of str
        The responding set B of the successful round.
    round : int
        The successful round (1 when nobody dropped, no deviation was excluded).
    integrity : str
        What the checks covered in the successful round ("checked: s = ..." , "unchecked:
        r = 0" or "off").
    deviations : list of dict
        Every deviation the checks detected (round, named parties, suspect sets, action
        "corrected" or "excluded", description); empty when every syndrome was zero.
    parameters : dict
        Public parameters, primes and points included.
    stats : dict of str to [seconds, bytes]
        Per phase (see :data:`PHASES`): wall-clock seconds and bytes of every message the
        coordinator received or sent.
    undelivered : dict of str to str
        Parties whose result did not reach them, each with the reason: those lost before
        the result (a dropout the session survived) and, filled in by the transport, those
        whose connection ended before they confirmed receipt (over gRPC a party confirms by
        closing its side of the stream after the result). Empty when every party got its
        result; :class:`~protocols.CoordinatorServer` and ``omnifc serve`` report it.
    memory : dict of str to int
        The coordinator's n x n memory (docs/scale.md, "Coordinator memory"):
        ``memory_budget``, ``result_ram_bytes`` (the result and residues held in RAM, 0
        when memory-mapped), ``open_sum_budget`` (what is left for open tile sums),
        ``peak_open_sum_bytes`` and ``peak_open_sum_disk_bytes`` (the most open tile sums
        held in RAM, and memory-mapped, at once, over every round; zero in rounds without
        checks, which keep no open sums). Empty for sum sessions.
    layout : str
        Which entries of D (docs/protocol.md, "Layouts"): "full" (``store``), "landmarks"
        (``integer`` and ``values`` are (n, L) arrays of D[:, landmarks]) or "pairs"
        (``integer`` and ``values`` are (P,) vectors of the distances of ``pairs``). A
        layout's ``integer`` is int32 with one prime and a bound below 2^31 (else int64),
        memory-mapped beyond ``memory_budget``; its ``values`` are computed on access.
    landmarks : ndarray of int64 (L,) or None
        The landmark rows of a "landmarks" session (column c is row ``landmarks[c]``).
    pairs : ndarray of int64 (P, 2) or None
        The global rows (i, j) of every entry of a "pairs" session, in order.
    """

    def __init__(self, integer=None, values=None, labels=None, party_names=(),
                 row_offsets=(), rows=(), responders=(), round=0, parameters=None,
                 stats=None, lost=None, integrity: str = "off", deviations=None,
                 store: DistanceStore | None = None, memory=None, layout: str = "full",
                 landmarks=None, pairs=None) -> None:
        self._integer = integer
        self._values = values
        self.store = store
        self.labels = labels
        self.party_names = list(party_names)
        self.row_offsets = list(row_offsets)
        self.rows = list(rows)
        self.responders = list(responders)
        self.round = round
        self.parameters = dict(parameters or {})
        self.stats = dict(stats or {})
        self.lost = list(lost or [])
        self.integrity = integrity
        self.deviations = list(deviations or [])
        self.memory = dict(memory or {})
        self.layout = layout
        self.landmarks = None if landmarks is None else np.array(landmarks, dtype=np.int64)
        self.pairs = None if pairs is None else np.array(pairs, dtype=np.int64)
        self.resumes = 0
        self.undelivered = {name: "lost before the result (it dropped out; the session went "
                                  "on without it)" for name in self.lost}

    @property
    def integer(self) -> np.ndarray:
        if self._integer is None and self.store is not None:
            return np.array(self.store.integer, dtype=np.int64)
        return self._integer

    @property
    def values(self) -> np.ndarray:
        if self._values is None and self.store is not None:
            return np.asarray(self.store.distances)
        if self._values is None and self._integer is not None and self.layout != "full":
            # a layout's float entries, computed on access from its integer result
            return np.asarray(self._integer) * (1.0 / 4.0 ** self.parameters["scale_bits"])
        return self._values

    def __repr__(self) -> str:
        what = self.store if self.store is not None else \
            f"sum {getattr(self._integer, 'shape', None)}"
        return (f"Outcome({what}, round={self.round}, responders={self.responders}, "
                f"integrity={self.integrity!r})")


class Coordinator:
    """The session's coordinator.

    Parameters
    ----------
    session_id : str
    parameters : SessionParameters
    parties : sequence of str
        Every party of the session, in the session config's order: the roster order (row
        order and mask order) every party checks.
    identities : dict of str to bytes
        Pinned raw Ed25519 public keys (from the session config); hellos must verify.
    responders : sequence of str, optional
        B for the first round; every party by default.
    cluster : callable, optional
        ``cluster(distances) -> labels`` run on the decoded matrix (the omnifc layer passes
        its clustering; this package never imports scikit-learn). Each party then receives
        the labels of its own rows. ``distances`` is a dense float64 array when four such
        arrays fit ``memory_budget`` and the result is in RAM, else the lazy
        :class:`~protocols._accumulator.TiledDistances` view of the store.
    out : str or path, optional
        Accumulate the result in this ``.npy`` file (memory-mapped; must not exist). A
        JSON sidecar is written only when the result is complete; a failed session
        deletes both.
    memory_budget : int, optional
        Bytes of n x n data kept in RAM (default 2 GiB); above it the result is
        memory-mapped in a temporary directory removed with the store. The running sums
        of the tiles still open (integrity checks) get what the result leaves of it and
        are memory-mapped beyond that, however late a party uploads
        (:class:`~protocols._integrity.OpenTileSums`, :attr:`Outcome.memory`).
    tile_bytes : int, optional
        Working tile of the decode (and of the streamed algorithms on the store).
    journal : protocols._journal.Journal, optional
        Keep the journal a restarted coordinator continues from (:meth:`restore`;
        ``omnifc serve`` gives one): needs ``out`` and a distance session of the full
        layout. Every tile of a round is then written into the result once, with all of
        B's uploads (their running sum is kept open until then, as with integrity checks).
    """

    def __init__(self, session_id: str, parameters: SessionParameters, parties, identities: dict,
                 *, responders=None, cluster=None, out=None, memory_budget=None,
                 tile_bytes=None, journal=None) -> None:
        self.session_id = str(session_id)
        self.names = [str(p) for p in parties]
        if len(set(self.names)) != len(self.names):
            raise ParameterError(f"party names must be unique, got {self.names}")
        missing = [p for p in self.names if p not in identities]
        if missing:
            raise ParameterError(f"no pinned identity key for parties {missing}")
        self.identities = {p: bytes(identities[p]) for p in self.names}
        self.parameters = parameters
        self.plan = None
        self.session = None  # the session plan (distance or sum): what differs by kind
        if parameters.dim:  # otherwise d is taken from the hellos (all must agree)
            self.plan = parameters.plan(len(self.names))
            self.session = session_plan(self.plan, parameters)
            self.parameters = parameters.with_plan(self.plan)
        self.min_responders = self.parameters.min_responders(len(self.names))
        # A, the declared bound on deviating parties (checked against r when the plan is made)
        self.adversaries = self.parameters.adversary_bound(len(self.names))
        self._excluded: list[str] = []  # named and excluded for deviating, in order
        if responders is not None:
            responders = [str(r) for r in responders]
            unknown = [r for r in responders if r not in self.names]
            if unknown or len(set(responders)) != len(responders):
                raise ParameterError(f"responders must be distinct parties of {self.names}, "
                                     f"got {responders}")
            needed = self._needed(self.adversaries)
            if len(responders) < needed:
                why = f" ({self._why_needed(self.adversaries)})" if self.adversaries else ""
                fits = len(responders) - self.min_responders
                advice = (f"; declare adversaries <= {fits} for this set"
                          if self.adversaries and fits >= 0 else "")
                raise ParameterError(f"the responding set needs at least {needed} parties"
                                     f"{why}, got {len(responders)}{advice}")
        self._first_responders = responders
        self.cluster = cluster
        reopened = journal is not None and journal.records > 0  # restore() follows
        if out is not None and Path(out).exists() and not reopened:  # before any party
            raise ParameterError(f"out={str(out)!r} exists already; choose a new path")
        if out is not None and self.parameters.layout != "full":
            raise ParameterError(f"out= writes the n x n result of the full layout; layout "
                                 f"{self.parameters.layout!r} keeps its result in memory "
                                 "(leave out unset)")
        self.storage = {"out": out, "memory_budget": memory_budget, "tile_bytes": tile_bytes}
        if journal is not None:
            why = "no out= (the result it vouches for is that file)" if out is None \
                else why_not_journaled(self.parameters)
            if why is not None:
                raise ParameterError(f"this coordinator cannot keep a journal: {why}")
        self.journal = journal
        self._restarted: set[str] = set()  # parties not yet back after a restore
        self._acc: DistanceAccumulator | SumAccumulator | None = None  # the round's result
        self._store: DistanceStore | None = None
        self._open_sums: OpenTileSums | None = None
        self.memory: dict = {}
        self.phase = "join"
        self.error: Exception | None = None
        self.outcome: Outcome | None = None
        self.hellos: dict[str, pb.Hello] = {}
        self.roster_digest: bytes | None = None
        self.confirmations: dict[str, pb.RosterConfirmation] = {}
        self.confirmed = False  # every confirmation relayed: shares may flow
        self.ready: set[str] = set()
        self.lost: set[str] = set()
        self.round = 0
        self.responders: list[str] = []
        self._aborted_rounds: set[int] = set()
        self._relayed: set[tuple] = set()
        self.checks = None
        self.deviations: list = []
        self._warned_unchecked = False
        self.failed_in: str | None = None
        #: ``progress(phase, round, detail)``, set by a transport for a progress display:
        #: called (synchronously, no IO here) on every phase change (detail None), on every
        #: evaluation tile ("k of n tiles") and between the decode's steps
        self.progress = None
        # reconnect (docs/protocol.md, "Reconnect"): what was sent to each party since it
        # last (implicitly) acknowledged it, how many envelopes came from it since its
        # last (re)connect, the parties whose stream broke and who may still resume
        self.reconnect_grace = float(self.parameters.reconnect_grace)
        self._outlogs = {name: Outlog() for name in self.names}
        self._received = {name: 0 for name in self.names}
        self._unresumable: dict[str, str] = {}
        self._challenges: dict[bytes, tuple] = {}
        self.away: set[str] = set()
        self.resumes = 0
        self.hold_budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else \
            int(memory_budget)
        self.stats = {phase: [0.0, 0] for phase in PHASES}
        self._phase_started = time.perf_counter()
        if self.parameters.mode == "transparent":
            logger.warning("session %r runs in TRANSPARENT mode: the coordinator learns every "
                           "per-segment distance matrix, not only D", self.session_id)

    # -- bookkeeping --------------------------------------------------------------------
    def _enter(self, phase: str) -> None:
        now = time.perf_counter()
        if self.phase in self.stats:
            self.stats[self.phase][0] += now - self._phase_started
        self._phase_started = now
        self.phase = phase
        self._progress(None)

    def _progress(self, detail: str | None) -> None:
        """Tell :attr:`progress` (when set) the phase, and what is done inside it."""
        if self.progress is not None and self.phase in PHASES:
            self.progress(self.phase, self.round, detail)

    def _count(self, env: pb.Envelope, payload: bytes | None = None) -> None:
        phase = phase_of(env.WhichOneof("body"))
        if phase in self.stats:
            self.stats[phase][1] += wire_size(env, payload)  # ByteSize would encode a tile

    def _send(self, dest: str, env: pb.Envelope) -> tuple[str, pb.Envelope]:
        self._count(env)
        if self.reconnect_grace > 0 and dest not in self._unresumable:
            self._hold(dest, env)
        return dest, env

    def _hold(self, dest: str, env: pb.Envelope) -> None:
        """Log ``env`` for a replay to ``dest`` after a reconnect. Relayed share chunks
        are held within ``memory_budget`` (all parties together): beyond it, a party that
        is away is lost (in the shares phase the session fails, as without a grace
        period) and a connected one can no longer resume (its log is dropped)."""
        log = self._outlogs[dest]
        size = len(env.share.ciphertext) if env.HasField("share") else 0
        held = sum(o.bytes for o in self._outlogs.values())
        if size and held + size > self.hold_budget:
            reason = (f"holding the relayed share chunks for {dest!r} until it resumes "
                      f"would exceed memory_budget = {self.hold_budget} bytes ({held} held, "
                      f"{size} more)")
            if dest in self.away:
                raise PeerError(reason, party=dest, phase=self._step)
            logger.warning("%s: it can no longer resume in this phase", reason)
            self._unresumable[dest] = reason
            log.drop()
            return
        log.append(env, size)

    def _broadcast(self, make) -> list:
        return [self._send(name, make(name)) for name in self.names if name not in self.lost]

    @property
    def alive(self) -> list[str]:
        return [p for p in self.names if p not in self.lost]

    def waiting_for(self) -> list[str]:
        """Parties the current phase still waits for."""
        if self.phase == "join":
            return [p for p in self.names if p not in self.hellos]
        if self.phase == "shares" and not self.confirmed:
            return [p for p in self.names if p not in self.confirmations]
        if self.phase == "shares":
            return [p for p in self.names if p not in self.ready]
        if self.phase == "evaluation":
            return [p for p in self.responders if not self._complete(p)]
        return []

    def _fail(self, error: Exception) -> Exception:
        """Record the first failure (wrapped into a ProtocolError) and return it."""
        if self.error is None:
            self.failed_in = self.phase
            self.error = as_protocol_error(error, "the coordinator", self.phase)
            self._discard()
            if self.journal is not None:  # failed closed: nothing to resume
                self.journal.close(remove=True)
            self._enter("failed")
            logger.warning("session %r failed in phase %r: %s", self.session_id,
                           self.failed_in, self.error)
        return self.error

    def _discard(self) -> None:
        """Fail closed: drop the accumulator, the open tile sums and any finished store,
        files included."""
        sums, self._open_sums = getattr(self, "_open_sums", None), None
        if sums is not None:
            sums.close()
        acc, self._acc = getattr(self, "_acc", None), None
        if acc is not None:
            acc.abort()
        store, self._store = getattr(self, "_store", None), None
        discard_store(store)

    def abort(self, names=None) -> list:
        """ErrorReports telling every connected party (or only ``names``: a party that
        connects after the failure) that the session failed, why, and in which phase."""
        error = self.error or ProtocolError("session aborted")
        kind = ("authentication" if isinstance(error, AuthenticationError) else
                "integrity" if isinstance(error, IntegrityError) else
                "deadline" if isinstance(error, DeadlineError) else
                "peer" if isinstance(error, PeerError) else "protocol")
        culprit = getattr(error, "party", None)
        phase = getattr(error, "phase", None) or self.failed_in or self.phase
        def report(name):
            return envelope(error=pb.ErrorReport(
                session_id=self.session_id, reporter="coordinator",
                party="" if culprit is None else str(culprit),
                phase=phase, kind=kind,
                # the report carries who and where; the message says what (once)
                message=getattr(error, "detail", None) or str(error)))
        if names is None:
            return self._broadcast(report)
        return [self._send(name, report(name)) for name in names]

    def _dropped(self, name: str, why: str) -> pb.Envelope:
        """The ErrorReport (kind ``dropped``) telling ``name`` that the session goes on
        without it, and why; the transport ends its stream after it."""
        return envelope(error=pb.ErrorReport(
            session_id=self.session_id, reporter="coordinator", party=name,
            phase=self.phase, kind=DROPPED,
            message=f"{why}; the session goes on without this party from round "
                    f"{self.round}"))

    # -- entry points -------------------------------------------------------------------
    def receive(self, sender: str, env: pb.Envelope) -> list:
        """Consume one envelope from the authenticated ``sender``."""
        if self.error is not None or self.outcome is not None:
            raise ProtocolError(f"session {self.session_id!r} is over; message from {sender!r} "
                                "ignored")
        try:
            if sender not in self.names:
                raise ProtocolError(f"unknown party {sender!r}; the session's parties are "
                                    f"{self.names}")
            kind, body = body_of(env)
            payload = body.values if kind == "tile" else None  # each read copies it: once
            self._count(env, payload)
            self._received[sender] += 1
            handler = {"hello": self._on_hello, "confirmation": self._on_confirmation,
                       "share": self._on_share,
                       "ready": self._on_ready,
                       "tile": lambda sender, tile: self._on_tile(sender, tile, payload),
                       "group_seed": self._on_group_seed, "error": self._on_error}.get(kind)
            if handler is None:
                raise PeerError(f"unexpected message {kind!r} (the coordinator never receives "
                                "it)", party=sender, phase=self.phase)
            if kind not in ("hello", "error") and sender not in self.hellos:
                raise PeerError(f"out-of-order message {kind!r} before the hello",
                                party=sender, phase=self.phase)
            if body.session_id != self.session_id:
                raise PeerError(f"message for session {body.session_id!r}, expected "
                                f"{self.session_id!r} (replayed or misrouted)", party=sender,
                                phase=phase_of(kind))
            return handler(sender, body)
        except Exception as error:
            raise self._fail(error)

    def party_lost(self, name: str, reason: str = "connection lost") -> list:
        """The transport lost ``name`` (stream closed, process gone)."""
        if self.error is not None or self.outcome is not None or name in self.lost:
            return []
        self.lost.add(name)
        logger.warning("party %r lost in phase %r: %s", name, self.phase, reason)
        try:
            if self.phase in ("join", "shares"):
                raise PeerError(reason, party=name, phase=self._step)
            if self.phase == "evaluation" and name in self.responders and not self._complete(name):
                return self._retry([name], reason, DeadlineError if "deadline" in reason
                                   else PeerError)
            return []
        except Exception as error:
            raise self._fail(error)

    # -- reconnect (docs/protocol.md, "Reconnect") -------------------------------------
    def resumable(self, name: str) -> bool:
        """Whether ``name``'s broken stream may be resumed (it is then *away*, not lost,
        until it resumes or the transport's grace period ends)."""
        return (self.reconnect_grace > 0 and self.error is None and name in self.hellos
                and name not in self.lost and name not in self._unresumable)

    def party_away(self, name: str, reason: str = "its stream broke") -> list:
        """The transport lost ``name``'s stream; it may resume within the grace period
        (the transport calls :meth:`party_lost` when it ends). What is sent to it
        meanwhile is held for the replay."""
        if not self.resumable(name):
            return self.party_lost(name, reason)
        if name not in self.away:
            self.away.add(name)
            logger.warning("party %r away in phase %r (%s); it may resume within %g s",
                           name, self.phase, reason, self.reconnect_grace)
        return []

    def resume_challenge(self, name: str, source=None) -> pb.Envelope:
        """A fresh challenge for a new stream that claims to be ``name`` (valid once)."""
        import os

        challenge = os.urandom(CHALLENGE_BYTES) if source is None else \
            bytes(source.bytes(CHALLENGE_BYTES))
        key = EphemeralKey.generate(source)
        mine = [c for c, v in self._challenges.items() if v[0] == name]
        for old in mine[:-3]:  # at most 4 outstanding per party
            del self._challenges[old]
        self._challenges[challenge] = (name, key)
        return envelope(resume_challenge=pb.ResumeChallenge(
            session_id=self.session_id, challenge=challenge,
            ephemeral_public_key=key.public_bytes))

    def resume(self, name: str, env: pb.Envelope) -> list:
        """Check a ``Resume`` from the (TLS-authenticated) stream of ``name``; when it
        holds, the party is back: returns the ``ResumeAccepted`` and what it did not
        receive, in order. A refused resume raises :class:`AuthenticationError` or
        :class:`PeerError` and changes nothing: the session goes on (the party stays away
        until its grace period ends); the transport tells that stream only."""
        kind, msg = body_of(env)
        phase = self.phase
        if kind != "resume":
            raise PeerError(f"expected a resume on the new stream, got {kind!r}",
                            party=name, phase=phase)
        taken = self._challenges.pop(bytes(msg.challenge), None)
        if self.error is not None:
            raise PeerError(f"session {self.session_id!r} failed; no resume", party=name,
                            phase=phase)
        if name not in self.names or msg.party_id != name or \
                msg.session_id != self.session_id:
            raise PeerError(f"resume of {msg.party_id!r} for session {msg.session_id!r} on "
                            f"the stream of {name!r}", party=name, phase=phase)
        if name not in self.hellos:
            raise PeerError("no hello of this party arrived in this run: nothing to resume",
                            party=name, phase=phase)
        if name in self.lost or name in self._unresumable:
            why = self._unresumable.get(name, "it is a dropout (its grace period ended, or "
                                              "it was lost)")
            raise PeerError(f"cannot resume: {why}", party=name, phase=phase)
        if taken is None or taken[0] != name:
            raise _refused(name, phase, "unknown or used resume challenge "
                                      "(a replayed handshake)")
        hello = self.hellos[name]
        if bytes(msg.run_nonce) != bytes(hello.run_nonce):
            raise _refused(name, phase, "the run nonce is not this run's")
        message = resume_transcript(self.session_id, name, msg.run_nonce,
                                    hello.ephemeral_public_key, msg.challenge,
                                    taken[1].public_bytes, msg.received)
        try:
            verify(self.identities[name], message, msg.signature, party=name, phase=phase)
        except AuthenticationError:
            raise _refused(name, phase, "the identity signature does not verify") from None
        if not check_resume_proof(taken[1], hello.ephemeral_public_key, message, msg.proof):
            raise _refused(name, phase, "no proof of possession of the "
                                      "run's ephemeral key")
        log = self._outlogs[name]
        # restored from the journal: the party's count is of the old process's streams;
        # it gets everything this process holds for it (the round's start, relays since)
        restarted = name in self._restarted
        replay = log.since(0 if restarted else msg.received, party=name, phase=phase)
        accepted = pb.ResumeAccepted(session_id=self.session_id,
                                     received=self._received[name], round=self.round,
                                     replayed=len(replay), restarted=restarted)
        self._restarted.discard(name)
        if self.phase == "evaluation" and name in self.responders:
            for k in range(len(self.plan.primes)):
                accepted.held.add(indices=sorted(i for kk, i in self.delivered[name]
                                                 if kk == k))
        self._received[name] = 0
        log.restart(replay, [len(e.share.ciphertext) if e.HasField("share") else 0
                             for e in replay])
        self.away.discard(name)
        self.resumes += 1
        logger.warning("party %r resumed in phase %r: %d envelope(s) re-sent to it, it had "
                       "sent %d", name, self.phase, len(replay), accepted.received)
        out = [(name, envelope(resume_accepted=accepted))]
        for e in replay:
            self._count(e)
            out.append((name, e))
        return out

    def expire(self) -> list:
        """The current phase's deadline passed: retry (evaluation) or fail."""
        if self.error is not None or self.outcome is not None:
            return []
        missing = self.waiting_for()
        try:
            if not missing:
                return []
            if self.phase == "evaluation":
                self.lost.update(missing)
                try:
                    out = self._retry(missing, "missed the deadline", DeadlineError)
                except Exception:
                    self.lost.difference_update(missing)  # told of the abort like the rest
                    raise
                # told why, if their stream still carries anything (the transport ends it)
                return [self._send(name, self._dropped(name, "missed the deadline of phase "
                                                       "'evaluation'")) for name in missing] + out
            what = " of the roster confirmation" if self._step == "confirm" else ""
            raise DeadlineError(f"missed the deadline{what} (still waiting for {missing})",
                                party=missing[0], phase=self._step)
        except Exception as error:
            raise self._fail(error)

    @property
    def _step(self) -> str:
        """The phase named in errors: ``confirm`` while the roster confirmations are
        awaited (the state, deadline and stats are those of ``shares``)."""
        return "confirm" if self.phase == "shares" and not self.confirmed else self.phase

    # -- join ---------------------------------------------------------------------------
    def _on_hello(self, sender: str, hello: pb.Hello) -> list:
        if self.phase != "join":
            raise PeerError(f"out-of-order hello in phase {self.phase!r}", party=sender,
                            phase=self.phase)
        if hello.party_id != sender:
            raise PeerError(f"hello claims to be {hello.party_id!r}", party=sender, phase="join")
        if sender in self.hellos:
            raise PeerError("duplicate hello (rejected)", party=sender, phase="join")
        if hello.protocol_version != PROTOCOL_VERSION:
            raise PeerError(f"protocol version {hello.protocol_version}, expected "
                            f"{PROTOCOL_VERSION}", party=sender, phase="join")
        verify(self.identities[sender], hello_transcript(hello), hello.signature,
               party=sender, phase="join")
        if len(hello.ephemeral_public_key) != 32 or len(hello.run_nonce) != RUN_NONCE_BYTES:
            raise PeerError(f"hello carries a {len(hello.ephemeral_public_key)}-byte ephemeral "
                            f"key and a {len(hello.run_nonce)}-byte run nonce, expected 32 and "
                            f"{RUN_NONCE_BYTES}", party=sender, phase="join")
        expected_dim = self.parameters.dim or next(
            (h.dim for h in self.hellos.values()), hello.dim)
        if hello.dim != expected_dim or hello.dim == 0:
            source = "the session config" if self.parameters.dim else \
                f"party {next(iter(self.hellos), sender)!r}"
            raise PeerError(f"d must be equal for all parties; sent d={hello.dim}, expected "
                            f"{expected_dim} (from {source})", party=sender, phase="join")
        expected_rows = session_type(self.parameters).expected_rows(self.parameters)
        if hello.n_rows == 0 or (expected_rows is not None and hello.n_rows != expected_rows):
            raise PeerError(f"sent n_rows={hello.n_rows}, expected "
                            f"{expected_rows if expected_rows else 'at least 1'}",
                            party=sender, phase="join")
        # before anything is allocated: the public row caps
        check_row_caps(self.parameters, {h.party_id: h.n_rows for h in self.hellos.values()}
                       | {sender: hello.n_rows}, blame=lambda _: sender)
        self.hellos[sender] = hello
        if len(self.hellos) < len(self.names):
            return []
        return self._send_roster()

    def _send_roster(self) -> list:
        if not self.parameters.dim:
            dim = self.hellos[self.names[0]].dim
            self.plan = replace(self.parameters, dim=dim).plan(len(self.names))
            self.session = session_plan(self.plan, replace(self.parameters, dim=dim))
            self.parameters = replace(self.parameters, dim=dim).with_plan(self.plan)
        roster = pb.Roster(session_id=self.session_id, protocol_version=PROTOCOL_VERSION,
                           parameters=self.parameters.to_proto(self.plan))
        self.row_offsets, self.rows, offset = [], [], 0
        for name in self.names:
            n = int(self.hellos[name].n_rows)
            roster.parties.add(hello=self.hellos[name], row_offset=offset)
            self.row_offsets.append(offset)
            self.rows.append(n)
            offset += n
        self.n_total = offset
        self.roster_digest = roster_digest_of(self.session_id,
                                              [self.hellos[name] for name in self.names])
        # the layout's entries against the roster's n, before the roster goes out
        self.session.bind(self.session_id, self.n_total, self.roster_digest)
        self._enter("shares")
        return self._broadcast(lambda name: envelope(roster=roster))

    # -- roster confirmation (checked, then relayed to everyone) ------------------------
    def _on_confirmation(self, sender: str, msg: pb.RosterConfirmation) -> list:
        if self.phase != "shares" or self.confirmed:
            raise PeerError(f"out-of-order roster confirmation in phase {self._step!r}",
                            party=sender, phase=self._step)
        if msg.party_id != sender:
            raise PeerError(f"roster confirmation claims to be {msg.party_id!r}",
                            party=sender, phase="confirm")
        if sender in self.confirmations:
            raise PeerError("duplicate roster confirmation (rejected)", party=sender,
                            phase="confirm")
        if len(msg.roster_digest) != 32 or len(msg.signature) != 64:
            raise PeerError(f"roster confirmation carries a {len(msg.roster_digest)}-byte "
                            f"digest and a {len(msg.signature)}-byte signature, expected 32 "
                            "and 64", party=sender, phase="confirm")
        if msg.roster_digest != self.roster_digest:
            raise PeerError("roster confirmation of another roster than the one sent "
                            "(digest differs)", party=sender, phase="confirm")
        verify(self.identities[sender], confirmation_transcript(
            self.session_id, sender, msg.roster_digest), msg.signature, party=sender,
            phase="confirm")
        self.confirmations[sender] = msg
        if len(self.confirmations) < len(self.names):
            return []
        self.confirmed = True
        relay = pb.RosterConfirmations(
            session_id=self.session_id,
            confirmations=[self.confirmations[name] for name in self.names])
        return self._broadcast(lambda name: envelope(confirmations=relay))

    # -- share exchange (relay only) ----------------------------------------------------
    def _on_share(self, sender: str, chunk: pb.ShareChunk) -> list:
        if self.phase != "shares" or not self.confirmed or not self.session.exchanges_shares:
            raise PeerError(f"out-of-order share chunk in phase {self._step!r}", party=sender,
                            phase=self._step)
        if chunk.sender != sender or chunk.receiver not in self.names or \
                chunk.receiver == sender:
            raise PeerError(f"share chunk from {chunk.sender!r} to {chunk.receiver!r} sent by "
                            f"{sender!r}", party=sender, phase="shares")
        width = self.plan.segment_length
        chunks = chunk_rows(self.rows[self.names.index(sender)], width,
                            self.parameters.chunk_bytes)
        key = (sender, chunk.receiver, chunk.prime_index, chunk.chunk_index)
        if (chunk.round != 0 or chunk.prime_index >= len(self.plan.primes)
                or chunk.total_chunks != len(chunks) or chunk.chunk_index >= len(chunks)):
            raise PeerError(f"share chunk (round {chunk.round}, prime {chunk.prime_index}, "
                            f"chunk {chunk.chunk_index}/{chunk.total_chunks}) does not fit the "
                            f"schedule (round 0, {len(chunks)} chunks per prime)",
                            party=sender, phase="shares")
        a, b = chunks[chunk.chunk_index]
        if len(chunk.ciphertext) != 4 * (b - a) * width + _AEAD_TAG:
            raise PeerError(f"share chunk holds {len(chunk.ciphertext)} bytes, expected "
                            f"{4 * (b - a) * width + _AEAD_TAG}", party=sender, phase="shares")
        if key in self._relayed:
            raise PeerError(f"duplicate share chunk {chunk.chunk_index} (rejected)",
                            party=sender, phase="shares")
        self._relayed.add(key)
        if chunk.receiver in self.lost:
            raise PeerError("connection lost", party=chunk.receiver, phase="shares")
        return [self._send(chunk.receiver, envelope(share=chunk))]

    def _on_ready(self, sender: str, ready: pb.Ready) -> list:
        if self.phase != "shares" or not self.confirmed or ready.party_id != sender:
            raise PeerError(f"out-of-order ready in phase {self._step!r}", party=sender,
                            phase=self._step)
        if sender in self.ready:
            raise PeerError("duplicate ready (rejected)", party=sender, phase="shares")
        self.ready.add(sender)
        # it holds every share: everything sent to it so far arrived
        self._outlogs[sender].acknowledge_all()
        if len(self.ready) < len(self.names):
            return []
        responders = self._first_responders or self.names
        return self._start_round([p for p in self.names if p in responders])

    # -- evaluation ---------------------------------------------------------------------
    def _start_round(self, responders: list[str], held=None) -> list:
        """Start the next round with B = ``responders``; ``held``: the (prime, tile)
        pairs a restore keeps from the journal (the result file is reopened, the round
        not journaled again)."""
        self.round += 1
        self.responders = responders
        session = self.session
        self.tiles = session.tiles(self.n_total)
        self.weights = session.weights(self.names, responders)
        # every round starts from a clean result: the previous one (and its files) is
        # dropped first, so an aborted round leaves nothing behind
        self._discard()
        storage = self.storage
        if held is not None:  # reopened: the journal's tiles are kept
            storage = storage | {"written": [(k, *self.tiles[i]) for k, i in sorted(held)],
                                 "tiles": self.tiles}
        self._acc = session.accumulator(self.n_total, parameters=self._describe(),
                                        storage=storage)
        self.memory.update(session.result_memory(self._acc, self.memory))
        # (prime, tile) taken, per party
        self.delivered = {r: set(held or ()) for r in responders}
        self.checks = None
        if session.has_checks:
            self.checks = session.round_checks(self.names, responders, self.parameters,
                                               adversaries=self._adversaries_left)
            if self.checks is None and self.parameters.integrity != "off" and \
                    not self._warned_unchecked:
                self._warned_unchecked = True
                log_once(
                    logger, ("unchecked", len(responders), self.plan.min_responders),
                    logging.WARNING,
                    "session %r: NO INTEGRITY CHECK in round %d: %d responders leave r = 0 "
                    "redundant evaluations (decoding needs %d), so a party that computes or "
                    "shares wrongly would go undetected", self.session_id, self.round,
                    len(responders), self.plan.min_responders)
        if self.checks is not None or self.journal is not None:
            # open tile sums get what the result leaves of the budget; with a journal
            # (no checks) a tile's one sum, written once when B's uploads are all in
            out = self.storage["out"]
            self._open_sums = OpenTileSums(
                1 if self.checks is None else self.checks.checks + 1,
                self._acc.memory_budget - self._acc.ram_bytes,
                directory=None if out is None else Path(out).parent)
            self.memory["open_sum_budget"] = self._open_sums.budget
        self._tile_count: dict = {}
        self._seeds_relayed: set = set()
        self.findings = Findings()
        if self.phase != "evaluation":
            self._enter("evaluation")
        if self.journal is not None and held is None:
            self._journal_round()
        logger.info("session %r: round %d with responders %s", self.session_id, self.round,
                    responders)
        start = pb.RoundStart(session_id=self.session_id, round=self.round, responders=responders)
        return self._broadcast(lambda name: envelope(round_start=start))

    def _complete(self, name: str) -> bool:
        return len(self.delivered.get(name, ())) == len(self.plan.primes) * len(self.tiles)

    @property
    def _adversaries_left(self) -> int:
        """The deviating parties a round must still withstand: A minus those excluded."""
        return self.adversaries - len(self._excluded)

    def _needed(self, adversaries: int) -> int:
        """Responders a round needs: K to decode, plus one check per deviating party (a
        sum has none: A = 0)."""
        return self.min_responders + adversaries

    def _why_needed(self, adversaries: int) -> str:
        if not adversaries:
            return f"decoding needs {self.min_responders}"
        return (f"decoding needs K = {self.min_responders} and detecting {adversaries} "
                f"deviating part{'y' if adversaries == 1 else 'ies'} one check each")

    def _retry(self, missing: list[str], reason: str, error_type) -> list:
        # a strict subset of the current B: honest parties accept nothing else
        remaining = [p for p in self.responders if p not in self.lost]
        left = self._adversaries_left
        needed = self._needed(left)
        if len(remaining) < needed:
            raise error_type(f"{reason}; only {len(remaining)} parties remain "
                             f"({remaining}) and {self._why_needed(left)}"
                             + (f" (at least {needed})" if left else ""),
                             party=missing[0], phase="evaluation")
        logger.warning("round %d abandoned without unmasking (%s: %s); retrying with %s",
                       self.round, missing, reason, remaining)
        self._aborted_rounds.add(self.round)
        return self._start_round(remaining)

    def _on_tile(self, sender: str, tile: pb.EvaluationTile, payload: bytes) -> list:
        if tile.round in self._aborted_rounds and self.phase == "evaluation":
            return []  # in flight when its round was abandoned
        if self.phase != "evaluation":
            raise PeerError(f"out-of-order evaluation tile in phase {self.phase!r}",
                            party=sender, phase=self.phase)
        if tile.sender != sender or sender not in self.responders:
            raise PeerError(f"evaluation tile from a party outside the responding set "
                            f"{self.responders}", party=sender, phase="evaluation")
        if tile.round != self.round:
            raise PeerError(f"evaluation tile for round {tile.round}, expected {self.round} "
                            "(replayed)", party=sender, phase="evaluation")
        k, index = tile.prime_index, tile.tile_index
        if k >= len(self.plan.primes) or index >= len(self.tiles) or \
                (tile.row_start, tile.row_stop) != self.tiles[index]:
            raise PeerError(f"evaluation tile (prime {k}, tile {index}, rows "
                            f"{tile.row_start}:{tile.row_stop}) does not fit the schedule",
                            party=sender, phase="evaluation")
        if (k, index) in self.delivered[sender]:
            # no tile twice: an honest party re-sends only the tiles a resume does not
            # list as held, so any second copy, identical or not, is a deviation
            raise PeerError(f"a second copy of evaluation tile {index} for prime {k} "
                            "(taken already; a party re-sends only the tiles the "
                            "coordinator does not hold): replayed or deviating upload",
                            party=sender, phase="evaluation")
        p = self.plan.primes[k]
        a, b = self.tiles[index]
        shape = self.session.tile_shape(a, b, self.n_total)
        values = packed_view(payload, int(np.prod(shape)), party=sender,
                             phase="evaluation").reshape(shape)
        try:
            if self.checks is None and self.parameters.mode == "transparent":
                values = masked_upload(values, self.weights[sender][k], (), (), p)  # c_j
            if self._open_sums is not None:  # running sums (c.U and mu_k.U), tile by tile
                self._accumulate(sender, k, index, values)
            else:
                # straight into the round's result (reduced mod p on every add, or, for
                # a sum, each value < 2^31 and reduced at the decode)
                self._acc.add_tile(k, a, b, values)
        except ParameterError:
            raise PeerError(f"evaluation tile holds a value >= p = {p}", party=sender,
                            phase="evaluation") from None
        self.delivered[sender].add((k, index))
        if self.progress is not None:
            done = sum(len(tiles) for tiles in self.delivered.values())
            total = len(self.responders) * len(self.plan.primes) * len(self.tiles)
            self._progress(f"{done} of {total} tiles")
        if self._open_sums is not None:
            self._tile_count[(k, index)] = self._tile_count.get((k, index), 0) + 1
            if self._tile_count[(k, index)] == len(self.responders):
                self._check_tile(k, index)
        if all(self._complete(r) for r in self.responders):
            return self._finish()
        return []

    # -- integrity ----------------------------------------------------------------------
    def _on_group_seed(self, sender: str, msg: pb.GroupSeed) -> list:
        # Relayed unread (AES-GCM under the pair's key); checked against the public groups.
        if msg.round in self._aborted_rounds and self.phase == "evaluation":
            return []  # in flight when its round was abandoned
        members = tuple(msg.members)
        sets = () if self.checks is None else self.checks.member_sets
        if self.phase != "evaluation" or msg.sender != sender or msg.round != self.round \
                or members not in sets or members[0] != sender or \
                msg.receiver not in members[1:] or len(msg.ciphertext) != 32 + _AEAD_TAG:
            raise PeerError(f"group seed (round {msg.round}, group {list(members)}, to "
                            f"{msg.receiver!r}, {len(msg.ciphertext)} bytes) does not fit "
                            f"round {self.round}'s groups", party=sender, phase="evaluation")
        key = (members, msg.receiver)
        if key in self._seeds_relayed:
            raise PeerError(f"duplicate group seed for {list(members)} to {msg.receiver!r}",
                            party=sender, phase="evaluation")
        self._seeds_relayed.add(key)
        if msg.receiver in self.lost:
            return []
        return [self._send(msg.receiver, envelope(group_seed=msg))]

    def _accumulate(self, sender: str, k: int, index: int, values) -> None:
        # in RAM within what the result leaves of memory_budget, memory-mapped beyond it:
        # however many tiles a late party keeps open (docs/scale.md, "Coordinator memory")
        sums = self._open_sums
        column = (1,) if self.checks is None else \
            self.checks.rows[k][:, self.checks.index(sender)]
        sums.add((k, index), self.plan.primes[k], values.shape, column, values)
        memory = self.memory
        memory["peak_open_sum_bytes"] = max(memory.get("peak_open_sum_bytes", 0),
                                            sums.peak_ram_bytes)
        memory["peak_open_sum_disk_bytes"] = max(memory.get("peak_open_sum_disk_bytes", 0),
                                                 sums.peak_disk_bytes)

    def _check_tile(self, k: int, index: int) -> None:
        """All uploads of a tile are in: D's tile, its syndromes decoded, findings kept."""
        sums = self._open_sums.finish((k, index))
        a, b = self.tiles[index]
        values = sums[0]
        if self.checks is not None:
            decoding = self.checks.codes[k].decode(sums[1:], max_errors=self.checks.radius)
            if not decoding.clean:
                self.findings.add(decoding, a, a, self._owner_starts, self.checks.responders,
                                  entries=self.session.entries(a, b))
                if decoding.ok:
                    values = decoding.correct_combination(self.checks.rows[k][0], values)
        self._acc.add_tile(k, a, b, np.asarray(values, dtype=np.int64) % self.plan.primes[k])
        if self.journal is not None:  # in the result file first, then vouched for
            self.journal.append("tile", round=self.round, prime=k, tile=index,
                                digest=self._acc.region_digest(k, a, b))

    @property
    def _owner_starts(self) -> np.ndarray:
        return np.asarray(self.row_offsets, dtype=np.int64)

    def _integrity_status(self) -> str:
        if self.checks is not None:
            return (f"checked: s = {self.checks.checks} parity check(s) over "
                    f"{len(self.responders)} responders, radius {self.checks.radius}, "
                    f"A = {self.adversaries}")
        if self.parameters.integrity == "off" or not self.session.has_checks:
            return "off"
        return "unchecked: r = 0 redundant responders"

    def _on_deviation(self):
        """Some syndrome was nonzero: correct, exclude and rerun, or raise DeviationError.

        Returns None when the round's (corrected) sums may be decoded, else the messages
        of the rerun. The rules that keep the guarantees against any A deviating parties
        (docs/integrity.md, "Declared adversaries"):

        * the verdict assumes at most A deviators, those excluded earlier among them, so
          it names only parties in every explanation of the errors (never an innocent);
        * "correct" accepts the round only if every flagged entry was located and the
          errors are explained within A: with tau + A' <= s (the round's radius) nothing
          located is mislocated, and what is not located is refused; otherwise the round
          is handled as "detect";
        * a rerun excludes named responders only, and only if it is itself checked against
          the deviators left (K + max(A' - excluded, 1) responders); else the session ends.
        """
        found, checks = self.findings, self.checks
        left = self._adversaries_left
        attribution = verdict(found, self.names, self.adversaries, known=self._excluded)
        named = tuple(attribution.named) if attribution.explained else ()
        suspects = tuple(attribution.suspects) if attribution.explained else ()
        what = (f"{found.flagged} entries failed the parity checks in round {self.round} "
                f"({found.uncorrectable} could not be located within radius "
                f"{checks.radius} of s = {checks.checks} checks)")
        if not attribution.explained:
            who = (f"more than the declared A = {self.adversaries} parties deviate "
                   "(no explanation of the errors is that small)")
        elif attribution.clean and not found.triples:
            who = "no error could be located"
        else:
            who = attribution.describe()
        if self._excluded:
            who += f" (already excluded: {', '.join(map(repr, self._excluded))})"
        record = {"round": self.round, "named": list(named),
                  "suspects": [list(x) for x in suspects], "description": f"{what}: {who}"}
        logger.warning("session %r: integrity: %s: %s", self.session_id, what, who)
        if self.parameters.integrity == "correct" and attribution.explained and \
                found.uncorrectable == 0:
            self.deviations.append(record | {"action": "corrected"})
            return None
        exclude = [p for p in self.responders if p in named]
        remaining = [p for p in self.responders if p not in exclude and p not in self.lost]
        needed = self.min_responders + max(left - len(exclude), 1)  # checked against the rest
        if exclude and len(remaining) >= needed:
            self.deviations.append(record | {"action": "excluded"})
            self._excluded.extend(exclude)
            logger.warning("round %d rejected by the integrity checks; rerunning without %s "
                           "with %s", self.round, exclude, remaining)
            self._aborted_rounds.add(self.round)
            self._enter("evaluation")
            return self._start_round(remaining)
        reason = ("nobody can be excluded" if not exclude else
                  f"excluding {exclude} leaves {len(remaining)} responders, a rerun checked "
                  f"against the deviators left needs {needed}")
        raise DeviationError(f"integrity check failed in phase 'decode': {what}: {who}; "
                             f"{reason}, so the session returns nothing",
                             named=tuple(self._excluded) + named, suspects=suspects)

    # -- decode and result --------------------------------------------------------------
    def _finish(self) -> list:
        self._enter("decode")
        if self.journal is not None:  # the decode changes the result in place
            self.journal.append("decode", round=self.round)
        if self.checks is not None and not self.findings.clean:
            rerun = self._on_deviation()
            if rerun is not None:
                return rerun
        # the session plan decodes (finite_field's decode): a distance session finalizes
        # its one result matrix in place, a sum is decoded signed
        acc, self._acc = self._acc, None
        self._progress(f"decoding the evaluations of {len(self.responders)} responders")
        integer, values, store = self.session.decode(acc, self.responders)
        self._store = store  # deleted by _fail if anything below fails
        labels = None
        if self.cluster is not None:
            view = values
            if self.session.layout != "full":  # D[:, L] with its landmarks, or the pairs
                view = self.session.cluster_input(integer, values)
            elif store is not None:
                view = store.distances
                if not store.on_disk and view.fits_in_memory(copies=4):
                    view = np.asarray(view)  # small: the dense float matrix callers expect
            rows = len(view)
            self._progress(f"clustering {rows} rows")
            try:
                labels = np.asarray(self.cluster(view), dtype=np.int64).reshape(-1)
            except Exception as error:  # noqa: BLE001 - fail closed, say where
                raise ProtocolError(f"the coordinator's clustering failed in phase 'decode': "
                                    f"{type(error).__name__}: {error}") from error
            del view
            if labels.size != rows:
                raise ProtocolError(f"clustering returned {labels.size} labels for "
                                    f"{rows} rows")
        self._enter("result")
        out = []
        for i, name in enumerate(self.names):
            if name in self.lost:
                continue
            own = [] if labels is None else labels[self.row_offsets[i]:
                                                   self.row_offsets[i] + self.rows[i]]
            out.append(self._send(name, envelope(result=pb.Result(
                session_id=self.session_id, party_id=name, labels=[int(v) for v in own],
                round=self.round, responders=self.responders,
                integrity=self._integrity_status(),
                deviations=[_deviation_message(d) for d in self.deviations]))))
        self._enter("done")
        self._store = None  # handed over to the outcome
        if store is not None:
            store.parameters = self._describe()
        self.outcome = Outcome(
            integer=integer, values=values, labels=labels, party_names=list(self.names),
            row_offsets=list(self.row_offsets), rows=list(self.rows),
            responders=list(self.responders), round=self.round,
            parameters=self._describe(),
            stats={k: tuple(v) for k, v in self.stats.items()}, lost=sorted(self.lost),
            integrity=self._integrity_status(), deviations=list(self.deviations),
            store=store, memory=dict(self.memory), layout=self.session.layout,
            landmarks=getattr(self.session, "landmarks", None),
            pairs=getattr(self.session, "pairs", None))
        self.outcome.resumes = self.resumes  # reconnects resumed before the result
        if self.journal is not None:  # done: nothing to resume
            self.journal.close(remove=True)
        return out

    # -- coordinator restart (docs/protocol.md, "Coordinator restart") -------------------
    def _journal_round(self) -> None:
        """Journal the round before its RoundStart goes out (the first one with what a
        restarted coordinator checks the parties against: their signed hellos)."""
        if self.journal.records == 0:
            self.journal.append(
                "begin", session_id=self.session_id, parties=self.names,
                fingerprint=self.parameters_fingerprint, n=self.n_total,
                primes=list(self.plan.primes),
                hellos=[_b64(self.hellos[name]) for name in self.names],
                confirmations=[_b64(self.confirmations[name]) for name in self.names])
        self.journal.append(
            "round", round=self.round, responders=list(self.responders),
            excluded=list(self._excluded), lost=sorted(self.lost),
            aborted=sorted(self._aborted_rounds), deviations=list(self.deviations))

    @property
    def parameters_fingerprint(self) -> str:
        """SHA-256 (hex) of what a resumed session must share with the journaled one:
        the session id, the parties and their pinned keys, every parameter, B's rule."""
        import hashlib
        import json

        described = {"session_id": self.session_id, "parties": self.names,
                     "identities": [self.identities[n].hex() for n in self.names],
                     "parameters": self.parameters.to_proto(self.plan).SerializeToString().hex()
                     if self.plan is not None else None,
                     "first_responders": self._first_responders}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def restore(self, records: list) -> list:
        """Continue, in a new process, a session whose coordinator died in evaluation,
        from its journal's verified ``records`` (:func:`protocols._journal.read_journal`)
        and the result at ``out``; returns nothing to send yet: every party is *away*
        until it resumes (:meth:`resume` then re-sends it the round's start, and the
        party re-sends the uploads of the round the journal does not hold).

        Refused (:class:`ParameterError`, nothing changed on disk) when the journal is
        another session's, the parameters, parties or first B differ from the journaled
        run, the decode had started, or the result file's journaled tiles differ from
        their digests (:class:`IntegrityError`). The hellos and roster confirmations
        are checked again (signatures, caps) as when they first arrived.
        """
        if self.phase != "join" or self.hellos or self.journal is None:
            raise ProtocolError("restore a new coordinator that keeps a journal")
        try:
            return self._restore(records)
        except Exception as error:
            self.keep_files()  # refused: the files stay as they were, for another try
            self._fail(error)
            raise

    def keep_files(self) -> None:
        """Let go of the journal and the result without deleting them (a resume that
        was refused, or could not start serving, may be tried again)."""
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        acc, self._acc = self._acc, None
        if acc is not None:
            acc.release()

    def _restore(self, records: list) -> list:
        if not records or records[0].get("kind") != "begin":
            raise ParameterError("the journal holds no evaluation round: the coordinator "
                                 "died before evaluation started; nothing to resume")
        begin = records[0]
        if begin["session_id"] != self.session_id or begin["parties"] != self.names:
            raise ParameterError(f"the journal is of session {begin['session_id']!r} with "
                                 f"parties {begin['parties']}, not {self.session_id!r} with "
                                 f"{self.names}; refusing to resume")
        for name, raw in zip(self.names, begin["hellos"]):
            self._on_hello(name, pb.Hello.FromString(base64.b64decode(raw)))
        for name, raw in zip(self.names, begin["confirmations"]):
            self._on_confirmation(name, pb.RosterConfirmation.FromString(
                base64.b64decode(raw)))
        if begin["fingerprint"] != self.parameters_fingerprint:
            raise ParameterError("the session config changed since the journal was written "
                                 "(parameters, parties, keys or responders differ); "
                                 "refusing to resume")
        rounds = [r for r in records if r["kind"] == "round"]
        last = rounds[-1]
        if any(r["kind"] == "decode" and r["round"] == last["round"] for r in records):
            raise ParameterError(f"the coordinator died while decoding round "
                                 f"{last['round']} (the decode changes the result in place); "
                                 "nothing to resume: run the session again")
        first = self._first_responders or self.names
        if rounds[0]["round"] != 1 or rounds[0]["responders"] != \
                [p for p in self.names if p in first]:
            raise ParameterError(f"the journal's first responding set "
                                 f"{rounds[0]['responders']} is not this config's; refusing "
                                 "to resume")
        held = [(r["prime"], r["tile"], r["digest"]) for r in records
                if r["kind"] == "tile" and r["round"] == last["round"]]
        self.ready = set(self.names)
        for log in self._outlogs.values():
            log.drop()  # everything before the round was delivered in the first process
        self.round = last["round"] - 1
        self._excluded = list(last["excluded"])
        self.lost = set(last["lost"])
        self._aborted_rounds = set(last["aborted"])
        self.deviations = list(last["deviations"])
        self._restarted = set(self.names) - self.lost
        # its RoundStarts are held for the resumes
        self._start_round(list(last["responders"]), held={(k, i) for k, i, _ in held})
        for k, i, digest in held:
            a, b = self.tiles[i]
            if self._acc.region_digest(k, a, b) != digest:
                raise IntegrityError(f"the result file was changed since the journal "
                                     f"recorded tile {i} of prime {k} (its digest "
                                     "differs); refusing to resume")
        self.away = set(self._restarted)
        logger.warning("session %r restored from its journal in round %d: %d of %d tiles "
                       "held; waiting for %s to resume", self.session_id, self.round,
                       len(held), len(self.plan.primes) * len(self.tiles),
                       sorted(self._restarted))
        return []

    def _describe(self) -> dict:
        described = self.plan.describe() | {"mode": self.parameters.mode,
                                            "responders": list(self.responders),
                                            "round": self.round,
                                            "integrity": self.parameters.integrity,
                                            "mask_degree": self.parameters.mask_degree}
        if self.session.layout != "full":
            described |= self.session.describe()
        return described

    def _on_error(self, sender: str, report: pb.ErrorReport) -> list:
        # Blame only the authenticated sender: whatever party the report names, the
        # coordinator cannot verify it, so it says who reported and passes the claim on.
        phase = report.phase or self.phase
        claim = f" (its report names {report.party!r})" if report.party and \
            report.party != sender else ""
        raise PeerError(f"reported by {sender!r}{claim}: {report.kind or 'error'}: "
                        f"{report.message[:500]}", party=sender, phase=phase)


def _b64(message) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


def _refused(name: str, phase: str, reason: str) -> AuthenticationError:
    """A refused resume: opaque to the stream it is told to (like every authentication
    failure), with the reason kept for the coordinator's log (``error.reason``)."""
    error = AuthenticationError(name, phase)
    error.reason = reason
    return error


def _deviation_message(record: dict) -> pb.Deviation:
    return pb.Deviation(round=record["round"], named=record["named"],
                        suspects=[pb.Suspects(parties=x) for x in record["suspects"]],
                        action=record["action"], description=record["description"])

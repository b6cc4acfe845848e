"""The party's side of a session as a sans-IO state machine.

A :class:`Party` never touches a socket, a thread or a clock: :meth:`Party.start` returns the
hello, and :meth:`Party.receive` consumes one envelope from the coordinator and returns the
envelopes to send back (an iterator: evaluation tiles are produced one at a time, so memory
stays bounded by a tile; iterate it to the end before the next ``receive``). Any violation
raises (``ProtocolError``/``PeerError``/``AuthenticationError``/``IntegrityError``) and leaves the party failed;
:meth:`Party.error_report` turns that error into the message that tells the coordinator.
What differs between a distance session and a secure sum (the data's shape, the share
exchange, the tiles and what is uploaded for each) is asked of the session plan
(:mod:`protocols._plans`); the rules below hold for both.

Phases: ``join`` (hello sent) -> ``confirm`` (roster verified, its digest signed and sent,
waiting for every party's confirmation) -> ``shares`` (confirmations verified, encrypted
shares sent, waiting for everyone else's; a sum goes straight to ``ready``) -> ``ready`` ->
``evaluation`` (uploaded for the current round; a new ``RoundStart`` restarts) -> ``done``
(result received) or ``failed``.

Rules that hold whatever the coordinator sends (it may be actively malicious):

- **Fresh run.** The hello carries a fresh 32-byte run nonce and a fresh ephemeral key,
  signed with the pinned identity key. The roster digest (every signed hello, in roster
  order) goes into every pair key, AAD and mask, so a hello of an earlier run, or a roster
  that differs between two parties, never yields keys that work.
- **Roster confirmation.** Keys that do not work are found too late if shares were already
  encrypted under them: a hello of an earlier run carries an old ephemeral key whose secret
  may have leaked since. So after the roster checks a party signs its roster digest with
  its identity key (:func:`confirmation_transcript`, its own domain label) and sends it;
  it derives no pair key and encrypts or masks nothing (no share, no seed, no masked
  upload: distance sessions and sums alike) until the coordinator relays a confirmation
  of **this** digest from every party of the roster, each once, in roster order, each
  verifying under that party's pinned key. A replayed hello's owner refuses the roster (it
  lacks its fresh hello) or never saw it; either way it signs no digest holding the old
  hello, and a confirmation of an earlier run never matches (every digest holds every
  party's fresh run nonce).
- **Roster.** Accepted only in the session config's order (the order of ``pinned``), with
  every party exactly once, every hello verified against its pinned key, this party's own
  hello unchanged, the public parameters equal to this party's own, and every row count
  within the public caps (checked before anything is allocated). A layout other than
  the full matrix (:mod:`protocols._layouts`) must fit the roster: every landmark or pair
  row below its n, at most n landmarks drawn, all checked before the roster is confirmed.
- **Rounds.** Round numbers strictly increase (a replayed ``RoundStart`` is refused); the
  first round's responding set B has at least 2l+2t-1 parties (all for a sum) and every
  later one is a *strict subset* of the previous round's B, so a session has at most
  m - (2l+2t-1) + 1 rounds.
- **Masks bound to the view.** The masks of a round are derived from (session, round,
  roster digest, the exact B in roster order, prime, tile)
  (:func:`protocols._crypto.view_mask_key`): uploads made for different views never
  cancel, so a coordinator that tells different parties different sets gets noise.
- **Fail closed.** Any exception, expected or not, leaves the party failed with a
  :class:`ProtocolError` (non-protocol exceptions are wrapped, with only their type in the
  message); :meth:`Party.error_report` turns it into the ErrorReport for the coordinator.

Where the pieces live: the state machine is here; its reconnect methods are
:mod:`protocols._party_reconnect` (a class :class:`Party` inherits), the signed transcripts
of the hello and the roster confirmation :mod:`protocols._roster_transcripts`, and how an
error fails closed :mod:`protocols._fail_closed`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import replace
from typing import Iterator

import numpy as np

from finite_field import (AuthenticationError, InputError, IntegrityError, OmniFCError, PeerError, ProtocolError,
                          SYSTEM_RANDOM, DistanceTiles, Quantizer, encode_row_blocks,
                          masked_upload_streams)

from ._log_once import log_once
from ._crypto import (PROTOCOL_VERSION, RUN_NONCE_BYTES, EphemeralKey, MaskView, PairKeys,
                      new_run_nonce)
from ._identity import public_key_bytes, sign, verify
from ._integrity import group_streams
from ._mask_graph import mask_neighbours
from ._generated import omnifc_pb2 as pb
from ._messages import (SessionParameters, body_of, check_row_caps, chunk_rows, envelope,
                        is_dropped, pack, packed_view)
from ._plans import _BLOCK_ELEMENTS, _block_stop, session_plan, session_type  # noqa: F401
from ._resume import Outlog
from ._fail_closed import COORDINATOR, as_protocol_error
from ._party_reconnect import PartyReconnect
from ._roster_transcripts import (confirmation_transcript, hello_transcript,
                                  roster_digest_of)

__all__ = ["Party", "hello_transcript", "roster_digest_of", "confirmation_transcript",
           "COORDINATOR"]

logger = logging.getLogger(__name__)

@contextlib.contextmanager
def _tile_values(session, party, k: int, tiles):
    """``session.tile_values(party, k, tiles)``, closed on leaving (a distance session's
    :class:`~protocols._plans._BlockValues` then stops computing ahead)."""
    values_of = session.tile_values(party, k, tiles)
    try:
        yield values_of
    finally:
        close = getattr(values_of, "close", None)
        if close is not None:
            close()


#: Share elements (rows x d/l x m) a party encodes at a time, in whole share chunks: 2^22
#: int64 elements, 32 MB per prime (at least one chunk).
_ENCODE_ELEMENTS = 1 << 22
#: Rows a party quantizes at a time (float64 temporaries of a few MB at d = 784).
_QUANTIZE_ROWS = 1024


def _storage_type(limit: int) -> np.dtype:
    """The smallest signed integer type holding [-limit, limit].

    >>> _storage_type(256).name, _storage_type(127).name, _storage_type(2**40).name
    ('int16', 'int8', 'int64')
    """
    for dtype in (np.int8, np.int16, np.int32):
        if np.iinfo(dtype).max >= limit:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _quantize_blocks(quantizer: Quantizer, x: np.ndarray, party) -> tuple:
    """``quantizer.quantize(x)`` as (values, clipped), a block of rows at a time, the
    values in :func:`_storage_type` of the bound. ``x`` may be any real array (a
    read-only memory map too): only one block is ever converted to float64."""
    n = x.shape[0]
    values = np.empty(x.shape, dtype=_storage_type(quantizer.max_magnitude))
    clipped = 0
    for a in range(0, n, _QUANTIZE_ROWS):
        b = min(n, a + _QUANTIZE_ROWS)
        try:
            q = quantizer.quantize(np.asarray(x[a:b], dtype=np.float64), party=party)
        except InputError:
            # the whole array's error (its first bad entry by global row, the count of
            # all of them): quantized again at once, only on the way to refusing it
            quantizer.quantize(np.asarray(x, dtype=np.float64), party=party)
            raise
        values[a:b] = q.values
        clipped += q.clipped
    return values, clipped


class _Recorded:
    """A byte source that hands out ``source``'s bytes and keeps them (``drawn``)."""

    def __init__(self, source) -> None:
        self.source, self.drawn = source, []

    def bytes(self, n: int) -> bytes:
        out = bytes(self.source.bytes(n))
        self.drawn.append(out)
        return out


class _Replayed:
    """The bytes a :class:`_Recorded` kept, handed out again in the same calls."""

    def __init__(self, drawn, party) -> None:
        self._drawn, self._party = iter(drawn), party

    def bytes(self, n: int) -> bytes:
        out = next(self._drawn, b"")
        if len(out) != n:  # never for the same rows and plan: the same draws in order
            raise ProtocolError(f"party {self._party!r}: a share block drawn again asked "
                                f"for {n} random bytes, {len(out)} were kept")
        return out


class Party(PartyReconnect):
    """One data owner.

    Parameters
    ----------
    party_id : str
        This party's name, as pinned in the session config.
    data : array-like, shape (n, d) (distance) or (rows, k) / (k,) (sum)
        The private rows. Checked and quantized here, before anything is sent: NaN,
        infinities, a wrong dimension or an empty array raise :class:`InputError`.
    session_id : str
    parameters : SessionParameters
        This party's own copy of the public parameters; the roster must agree with it.
    identity_key : Ed25519PrivateKey
        The long-term key whose public half is pinned for ``party_id``.
    pinned : dict of str to bytes
        Raw Ed25519 public keys of every party of the session, **in the session config's
        order**: the only roster order this party accepts (row order and mask order).
    source : ByteSource, optional
        Randomness for the Lagrange noise and the ephemeral X25519 key (hence the masks);
        the OS CSPRNG when omitted. A seeded source is for reproducible tests only.
    """

    def __init__(self, party_id: str, data, *, session_id: str, parameters: SessionParameters,
                 identity_key, pinned: dict, source=None) -> None:
        self.party_id = str(party_id)
        self.session_id = str(session_id)
        self.parameters = parameters
        self.pinned = {str(k): bytes(v) for k, v in pinned.items()}
        if self.party_id not in self.pinned:
            raise ProtocolError(f"party {self.party_id!r} is not pinned in the session config; "
                                f"parties are {sorted(self.pinned)}")
        if public_key_bytes(identity_key) != self.pinned[self.party_id]:
            raise AuthenticationError(self.party_id, "join")
        self._identity = identity_key
        self._source = source
        if parameters.dim == 0:  # a distance session takes d from the data (a sum has dim > 0)
            shape = np.shape(data)
            self.parameters = parameters = replace(parameters, dim=int(shape[-1]) if shape else 0)
        self.quantized, self.clipped = self._check_data(data)
        self.phase = "init"
        self.error: Exception | None = None
        self.labels: np.ndarray | None = None
        self.result: pb.Result | None = None
        #: this party's evaluation figures, over all rounds: seconds spent producing its
        #: tiles (not the time the transport held it back), seconds in the exact distance
        #: kernel (blocks computed ahead in the background included: they overlap the
        #: tiles' production, so this may exceed the first), each as wall-clock and as
        #: process CPU time (which the other processes of a shared machine do not
        #: inflate; it includes the other threads working meanwhile), and the payload
        #: bytes uploaded, and the tiles (a tile re-sent after a resume counts again)
        self.timings = {"evaluation_seconds": 0.0, "kernel_seconds": 0.0,
                        "evaluation_cpu_seconds": 0.0, "kernel_cpu_seconds": 0.0,
                        "bytes_uploaded": 0, "tiles_uploaded": 0}
        if self.n_rows > parameters.max_rows_per_party:
            raise InputError(f"holds {self.n_rows} rows, more than the session's "
                             f"max_rows_per_party = {parameters.max_rows_per_party}",
                             party=self.party_id)
        if parameters.mode == "transparent":
            logger.warning("party %r: TRANSPARENT mode: the coordinator will learn every "
                           "per-segment distance matrix, not only D", self.party_id)
        self._ephemeral = EphemeralKey.generate(source)
        self._run_nonce = new_run_nonce(source)
        self._hello: pb.Hello | None = None
        self._responders: list | None = None
        self._checks = None          # the round's integrity structure (None: unchecked)
        self._seeds: dict = {}       # member set -> 32-byte seed of this round
        self._seed_wait: set = set()  # member sets whose seed has not arrived yet
        self._warned_unchecked = False
        # reconnect (docs/protocol.md, "Reconnect"): what this party sent since the
        # coordinator last (implicitly) acknowledged it, and how many envelopes it received
        # since its last (re)connect; kept only when the session allows a reconnect
        self.resumable = parameters.reconnect_grace > 0
        self._log = Outlog()
        self.received = 0
        self._round = 0
        # after a coordinator restart (omnifc serve --resume): the round whose start and
        # group seeds may come again, and the responders its first start named
        self._repeats_of_round = 0
        self._responders_sent: list | None = None

    # -- input checks (before any share leaves) -----------------------------------------
    def _check_data(self, data):
        """The rows checked and quantized, before anything is sent.

        A distance session's rows are quantized ``_QUANTIZE_ROWS`` rows at a time into the
        smallest signed integer type that holds them (int16 for q = 8 and a bound of 1):
        no float64 copy of the rows and no n x d float temporaries, so a memory-mapped
        ``.npy`` file (:func:`protocols.load_party_data`) stays file pages. A bad entry
        raises the error the whole array's quantization raises (found again on the whole
        array: a refused file costs memory, not a wrong message)."""
        params = self.parameters
        kind = session_type(params)
        # rows that only go into shares (a distance session's) are read a block at a time;
        # a sum's rows are its uploads (read as int64 by its tiles): quantized at once
        blocks = kind.exchanges_shares
        real = isinstance(data, np.ndarray) and data.dtype.kind in "biuf"
        x = kind.check_data(data if blocks and real else np.asarray(data, dtype=np.float64),
                            params, self.party_id)
        quantizer = Quantizer(scale_bits=params.scale_bits, bound=params.bound,
                              nonnegative=params.nonnegative)
        if blocks:
            values, clipped = _quantize_blocks(quantizer, x, self.party_id)
        else:
            q = quantizer.quantize(x, party=self.party_id)
            values, clipped = q.values, q.clipped
        if clipped:
            logger.warning("party %r: %d entries clipped to the public bound", self.party_id,
                           clipped)
        return values, clipped

    @property
    def n_rows(self) -> int:
        return int(self.quantized.shape[0])

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def run_nonce(self) -> bytes:
        """This run's nonce (public: it is in the signed hello; read-only), e.g. for a
        transport that binds the party to its own identities (omnifc.flower._binding)."""
        return bytes(self._run_nonce)

    # -- helpers ------------------------------------------------------------------------
    def _fail(self, error: Exception):
        if self.phase != "failed":
            self.failed_in = self.phase
        self.error = error
        self.phase = "failed"
        return error

    def _expect_session(self, session_id: str, phase: str) -> None:
        if session_id != self.session_id:
            raise PeerError(f"message for session {session_id!r}, expected {self.session_id!r} "
                            "(replayed or misrouted)", party=COORDINATOR, phase=phase)

    def error_report(self, error: Exception) -> pb.Envelope:
        """The ErrorReport that tells the coordinator why this party stopped."""
        kind = ("authentication" if isinstance(error, AuthenticationError) else
                "integrity" if isinstance(error, IntegrityError) else
                "input" if isinstance(error, InputError) else
                "peer" if isinstance(error, PeerError) else "protocol")
        culprit = getattr(error, "party", None)
        return envelope(error=pb.ErrorReport(
            session_id=self.session_id, reporter=self.party_id,
            party="" if culprit is None else str(culprit),
            phase=getattr(error, "phase", None) or getattr(self, "failed_in", self.phase),
            kind=kind,
            message=str(error) if isinstance(error, OmniFCError) else type(error).__name__))

    # -- phases -------------------------------------------------------------------------
    def start(self) -> list[pb.Envelope]:
        """The signed hello (phase ``join``)."""
        if self.phase != "init":
            raise ProtocolError(f"party {self.party_id!r} already started (phase {self.phase!r})")
        hello = pb.Hello(session_id=self.session_id, protocol_version=PROTOCOL_VERSION,
                         party_id=self.party_id, n_rows=self.n_rows, dim=self.parameters.dim,
                         ephemeral_public_key=self._ephemeral.public_bytes,
                         run_nonce=self._run_nonce)
        hello.signature = sign(self._identity, hello_transcript(hello))
        self._hello = hello
        self.phase = "join"
        out = envelope(hello=hello)
        self._record(out)
        return [out]

    def receive(self, env: pb.Envelope) -> Iterator[pb.Envelope]:
        """Consume one envelope from the coordinator; return what to send back."""
        if self.phase in ("failed", "done"):
            raise ProtocolError(f"party {self.party_id!r} received a message after the "
                                f"session ended (phase {self.phase!r})")
        kind, body = body_of(env)
        self.received += 1
        try:
            handler = {"roster": self._on_roster, "confirmations": self._on_confirmations,
                       "share": self._on_share,
                       "round_start": self._on_round_start, "result": self._on_result,
                       "group_seed": self._on_group_seed, "error": self._on_error}.get(kind)
            if handler is None:
                raise PeerError(f"unexpected message {kind!r} (a party never receives it)",
                                party=COORDINATOR, phase=self.phase)
            out = handler(body)
        except Exception as error:
            raise self._fail(as_protocol_error(error, f"party {self.party_id!r}", self.phase))
        return self._guard(out)

    def _guard(self, out) -> Iterator[pb.Envelope]:
        try:
            for env in out:
                self._record(env)
                yield env
        except Exception as error:
            raise self._fail(as_protocol_error(error, f"party {self.party_id!r}", self.phase))

    def _tile_envelope(self, round_: int, responders, k: int, tile_index: int) -> pb.Envelope:
        """One tile of this round, computed again (deterministic: identical bytes)."""
        tiles = self.session.tiles(self.n_total)
        with _tile_values(self.session, self, k, tiles) as values_of:
            values = values_of(tile_index)
        return self._pack_tile(round_, responders, k, tile_index, tiles, values)

    def _require_phase(self, kind: str, *allowed: str) -> None:
        if self.phase not in allowed:
            raise PeerError(f"out-of-order message {kind!r}: party {self.party_id!r} is in "
                            f"phase {self.phase!r}, expected one of {list(allowed)}",
                            party=COORDINATOR, phase=self.phase)

    def _on_roster(self, roster: pb.Roster):
        self._require_phase("roster", "join")
        self._expect_session(roster.session_id, "join")
        names = [e.hello.party_id for e in roster.parties]
        order = list(self.pinned)
        if names != order:
            raise PeerError(f"roster lists parties {names}, the session config pins "
                            f"{order} in this order (the only order accepted)",
                            party=COORDINATOR, phase="join")
        offset = 0
        for entry in roster.parties:
            hello = entry.hello
            verify(self.pinned[hello.party_id], hello_transcript(hello),
                   hello.signature, party=hello.party_id, phase="join")
            if hello.session_id != self.session_id or hello.dim != self.parameters.dim \
                    or hello.protocol_version != PROTOCOL_VERSION:
                raise PeerError(f"roster entry of {hello.party_id!r} has session "
                                f"{hello.session_id!r}, d={hello.dim} and protocol version "
                                f"{hello.protocol_version}, expected {self.session_id!r}, "
                                f"d={self.parameters.dim} and {PROTOCOL_VERSION}",
                                party=COORDINATOR, phase="join")
            if len(hello.run_nonce) != RUN_NONCE_BYTES or len(hello.ephemeral_public_key) != 32:
                raise PeerError(f"roster entry of {hello.party_id!r} carries a "
                                f"{len(hello.run_nonce)}-byte run nonce and a "
                                f"{len(hello.ephemeral_public_key)}-byte ephemeral key, "
                                f"expected {RUN_NONCE_BYTES} and 32", party=COORDINATOR,
                                phase="join")
            if entry.row_offset != offset:
                raise PeerError(f"row offset of {hello.party_id!r} is {entry.row_offset}, "
                                f"expected {offset}", party=COORDINATOR, phase="join")
            offset += hello.n_rows
        # Before anything is allocated: the row counts must respect the public caps.
        check_row_caps(self.parameters, {e.hello.party_id: e.hello.n_rows
                                         for e in roster.parties},
                       blame=lambda _: COORDINATOR)
        if len({e.hello.run_nonce for e in roster.parties}) != len(names) or \
                len({e.hello.ephemeral_public_key for e in roster.parties}) != len(names):
            raise PeerError("two roster entries share a run nonce or an ephemeral key",
                            party=COORDINATOR, phase="join")
        mine = roster.parties[names.index(self.party_id)].hello
        if mine.SerializeToString() != self._hello.SerializeToString():
            raise PeerError("the roster does not carry this party's own hello",
                            party=COORDINATOR, phase="join")
        self.plan = self.parameters.plan(len(names))
        self.session = session_plan(self.plan, self.parameters)
        expected = self.parameters.with_plan(self.plan)
        seen = SessionParameters.from_proto(roster.parameters)
        if seen != expected:
            diff = [f for f in expected.__dataclass_fields__
                    if getattr(seen, f) != getattr(expected, f)]
            raise PeerError(f"roster parameters differ from the session config in {diff}",
                            party=COORDINATOR, phase="join")
        self.names = names
        self.index = names.index(self.party_id)
        self.rows_of = {e.hello.party_id: int(e.hello.n_rows) for e in roster.parties}
        self.n_total = offset
        self.roster_digest = roster_digest_of(self.session_id,
                                              [e.hello for e in roster.parties])
        # the layout's entries against the roster's n, before any key or share
        self.session.bind(self.session_id, self.n_total, self.roster_digest)
        self._peer_keys = {e.hello.party_id: bytes(e.hello.ephemeral_public_key)
                           for e in roster.parties if e.hello.party_id != self.party_id}
        self.phase = "confirm"
        return iter([envelope(confirmation=pb.RosterConfirmation(
            session_id=self.session_id, party_id=self.party_id,
            roster_digest=self.roster_digest,
            signature=sign(self._identity, confirmation_transcript(
                self.session_id, self.party_id, self.roster_digest))))])

    def _on_confirmations(self, relay: pb.RosterConfirmations):
        """Every party's signature on this roster's digest: only then keys and shares."""
        self._require_phase("confirmations", "confirm")
        self._expect_session(relay.session_id, "confirm")
        names = [c.party_id for c in relay.confirmations]
        if names != self.names:
            raise PeerError(f"the roster confirmations come from {names}, expected one from "
                            f"every party of the roster, in its order: {self.names}",
                            party=COORDINATOR, phase="confirm")
        for c in relay.confirmations:
            if c.session_id != self.session_id:
                raise PeerError(f"the roster confirmation of {c.party_id!r} is for session "
                                f"{c.session_id!r}, expected {self.session_id!r}",
                                party=COORDINATOR, phase="confirm")
            verify(self.pinned[c.party_id], confirmation_transcript(
                self.session_id, c.party_id, c.roster_digest), c.signature,
                party=c.party_id, phase="confirm")
            if c.roster_digest != self.roster_digest:
                raise PeerError(f"{c.party_id!r} confirmed another roster (digest "
                                f"{bytes(c.roster_digest).hex()[:16]}..., this party accepted "
                                f"{self.roster_digest.hex()[:16]}...): the parties were shown "
                                "different rosters, or one holds a hello of an earlier run; "
                                "nothing was encrypted", party=c.party_id, phase="confirm")
        self.keys = {name: PairKeys.derive(
            self._ephemeral, public, session_id=self.session_id, me=self.party_id,
            peer=name, roster_digest=self.roster_digest)
            for name, public in self._peer_keys.items()}
        self._round = 0
        self.phase = "shares"
        if not self.session.exchanges_shares:
            self.phase = "ready"
            return iter([self._ready()])
        self._expect_shares()
        return self._send_shares()

    def _ready(self) -> pb.Envelope:
        return envelope(ready=pb.Ready(session_id=self.session_id, party_id=self.party_id,
                                       phase="shares"))

    def _expect_shares(self) -> None:
        """Where every row's shares go, before any is sent or received: one n x (d/l)
        uint32 array per prime (the field elements are < 2^31), rows in roster order,
        filled as the chunks arrive (each copied in and dropped), and the chunks awaited."""
        width = self.plan.segment_length
        primes = len(self.plan.primes)
        self._held = [np.empty((self.n_total, width), dtype=np.uint32) for _ in range(primes)]
        self._offsets, offset = {}, 0
        for name in self.names:
            self._offsets[name] = offset
            offset += self.rows_of[name]
        self._own_done = False
        # the random bytes each block's noise was drawn from (the OS CSPRNG's; a seeded
        # source only in tests), kept until the round starts: a share chunk is made again
        # bit for bit when a resume must re-send it (_share_again), so the reconnect log
        # keeps its coordinates, not its bytes (n_rows t d/l elements per prime, 1/(m-1)
        # of the chunks' bytes for t = 1)
        self._noise = {}
        self._chunks = chunk_rows(self.n_rows, width, self.parameters.chunk_bytes)
        step = self._chunks[0][1] - self._chunks[0][0]
        self._chunks_per_block = max(1, _ENCODE_ELEMENTS // (step * width * len(self.names)))
        self._block_rows = step * self._chunks_per_block
        self._block_cache = None  # (block index, its shares): the last one made again
        self._pending = {}
        for sender in self.names:
            if sender != self.party_id:
                chunks = chunk_rows(self.rows_of[sender], width, self.parameters.chunk_bytes)
                for k in range(primes):
                    self._pending[(sender, k)] = {i: None for i in range(len(chunks))}

    def _send_shares(self):
        """This party's share chunks (:meth:`_share_chunks`), then its Ready if every
        other party's chunks are in by then. Its own shares are all held once the last
        chunk is handed out: from then on the chunk that completes the others' may bring
        the Ready (:meth:`_on_share`), as when all shares were encoded up front."""
        last = None
        for env in self._share_chunks():
            if last is not None:
                yield last
            last = env
        self._own_done = True
        if last is not None:
            yield last
        if self.phase == "shares":  # else the Ready went out already (from _on_share)
            yield from self._maybe_ready()

    def _share_chunks(self):
        """Encode this party's rows a block of rows at a time (:meth:`_encode_block`) and
        yield each block's chunks for every other party as it goes; its own shares go
        straight into its held array. Nothing holds the shares of all rows for all
        parties (n_rows x d/l x m int64 elements) at once: one block's."""
        primes = len(self.plan.primes)
        mine = self._offsets[self.party_id]
        receivers = [(j, name) for j, name in enumerate(self.names) if name != self.party_id]
        for block in range(-(-self.n_rows // self._block_rows)):
            a, b, shares = self._encode_block(block)
            for k in range(primes):
                self._held[k][mine + a:mine + b] = shares[k][self.index]
            first = block * self._chunks_per_block
            last = min(len(self._chunks), first + self._chunks_per_block)
            for j, receiver in receivers:
                for k in range(primes):
                    for i in range(first, last):
                        yield self._share_envelope(j, receiver, k, i, a, shares)
            del shares

    def _encode_block(self, block: int):
        """(a, b, shares) of block ``block`` (rows [a, b)): :func:`encode_row_blocks` with
        fresh noise per row and prime (the OS CSPRNG's bytes, kept), every party's share of
        a row from the same polynomial; called again, from the same bytes: the same arrays."""
        a = block * self._block_rows
        b = min(self.n_rows, a + self._block_rows)
        if block in self._noise:  # made again: the same bytes, the same noise
            source = _Replayed(self._noise[block], self.party_id)
        else:
            source = _Recorded(SYSTEM_RANDOM if self._source is None else self._source)
            self._noise[block] = source.drawn
        [(_, _, shares)] = encode_row_blocks(self.plan, self.quantized[a:b], source,
                                             party=self.party_id, block_rows=b - a)
        return a, b, shares

    def _share_envelope(self, j: int, receiver: str, k: int, i: int, a: int, shares):
        """Chunk ``i`` of this party's shares for ``receiver`` (roster index ``j``) modulo
        prime ``k``, from the shares of the block that starts at row ``a``."""
        lo, hi = self._chunks[i]
        keys = self.keys[receiver]
        return envelope(share=pb.ShareChunk(
            session_id=self.session_id, round=0, sender=self.party_id, receiver=receiver,
            prime_index=k, chunk_index=i, total_chunks=len(self._chunks),
            nonce=keys.nonce(self.party_id, 0, k, i),
            ciphertext=keys.encrypt(pack(shares[k][j][lo - a:hi - a]), round_=0,
                                    prime_index=k, chunk_index=i)))

    def _share_again(self, receiver: str, k: int, i: int) -> pb.Envelope:
        """Share chunk ``i`` for ``receiver`` modulo prime ``k``, made again for a resume:
        its block encoded again from the same random bytes, so the plaintext and hence the
        ciphertext (the same key, nonce and AAD) are the bytes sent first."""
        block = i // self._chunks_per_block
        if self._block_cache is None or self._block_cache[0] != block:
            self._block_cache = (block, self._encode_block(block))
        _, (a, _, shares) = self._block_cache
        return self._share_envelope(self.names.index(receiver), receiver, k, i, a, shares)

    def _on_share(self, chunk: pb.ShareChunk):
        self._require_phase("share", "shares")
        self._expect_session(chunk.session_id, "shares")
        sender = chunk.sender
        if chunk.receiver != self.party_id or sender not in self.keys:
            raise PeerError(f"share chunk from {sender!r} to {chunk.receiver!r} delivered to "
                            f"{self.party_id!r}", party=COORDINATOR, phase="shares")
        if chunk.round != 0:
            raise PeerError(f"share chunk for round {chunk.round}, expected 0", party=sender,
                            phase="shares")
        slots = self._pending.get((sender, chunk.prime_index))
        width = self.plan.segment_length
        chunks = chunk_rows(self.rows_of[sender], width, self.parameters.chunk_bytes)
        if slots is None or chunk.total_chunks != len(chunks) or chunk.chunk_index not in slots:
            raise PeerError(f"share chunk (prime {chunk.prime_index}, chunk "
                            f"{chunk.chunk_index}/{chunk.total_chunks}) does not fit the "
                            f"schedule ({len(chunks)} chunks per prime)", party=sender,
                            phase="shares")
        if slots[chunk.chunk_index] is not None:
            raise PeerError(f"duplicate share chunk {chunk.chunk_index} for prime "
                            f"{chunk.prime_index}", party=sender, phase="shares")
        plaintext = self.keys[sender].decrypt(
            chunk.ciphertext, sender=sender, round_=0, prime_index=chunk.prime_index,
            chunk_index=chunk.chunk_index, nonce=chunk.nonce)
        a, b = chunks[chunk.chunk_index]
        p = self.plan.primes[chunk.prime_index]
        values = packed_view(plaintext, (b - a) * width, party=sender, phase="shares")
        if values.size and int(values.max()) >= p:
            raise PeerError(f"payload holds a value >= p = {p}", party=sender, phase="shares")
        # straight into the held array: no received chunk is kept
        offset = self._offsets[sender]
        self._held[chunk.prime_index][offset + a:offset + b] = values.reshape(b - a, width)
        slots[chunk.chunk_index] = True
        return self._maybe_ready()

    def _maybe_ready(self):
        if self.phase != "shares":
            return  # ready already (this generator was iterated late)
        if not self._own_done or any(
                v is None for slots in self._pending.values() for v in slots.values()):
            return
        # every row's shares in roster order, one uint32 array per prime
        self.held = self._held
        del self._pending, self._held, self._own_done, self._offsets
        self.phase = "ready"
        yield self._ready()

    def _on_round_start(self, start: pb.RoundStart):
        self._require_phase("round_start", "ready", "evaluation")
        self._expect_session(start.session_id, "evaluation")
        responders = list(start.responders)
        need = self.parameters.min_responders(len(self.names))
        if self._repeats_of_round == start.round == self._round and \
                list(start.responders) == list(self._responders_sent):
            return iter(())  # re-sent by a restarted coordinator: nothing changes
        if start.round <= self._round:
            raise PeerError(f"round {start.round} does not follow round {self._round} "
                            "(replayed)", party=COORDINATOR, phase="evaluation")
        if (len(set(responders)) != len(responders) or not set(responders) <= set(self.names)
                or len(responders) < need):
            raise PeerError(f"responding set {responders} must hold at least {need} distinct "
                            f"parties of {self.names}", party=COORDINATOR, phase="evaluation")
        if self._responders is not None and not set(responders) < set(self._responders):
            raise PeerError(f"round {start.round} responding set {responders} is not a strict "
                            f"subset of the previous round's {self._responders} (a session "
                            f"has at most m - (2l+2t-1) + 1 = {len(self.names) - need + 1} "
                            "rounds)", party=COORDINATOR, phase="evaluation")
        order = sorted(responders, key=self.names.index)
        self._responders_sent = responders
        # the coordinator starts a round only with every party's Ready in: what this
        # party sent before it arrived (a round abandoned since needs nothing again)
        self._log.acknowledge_all()
        # no share chunk can be asked for again: the noise goes (a secret kept no longer
        # than needed)
        self._noise, self._block_cache = {}, None
        self._round = start.round
        self._responders = order
        self.phase = "evaluation"
        self._checks, self._seeds, self._seed_wait = None, {}, set()
        if self.party_id not in responders:
            return iter(())
        if self.session.has_checks:
            self._checks = self.session.round_checks(self.names, order, self.parameters)
            if self._checks is None and self.parameters.integrity != "off" and \
                    not self._warned_unchecked:
                self._warned_unchecked = True
                log_once(
                    logger, ("unchecked", len(order), self.plan.min_responders),
                    logging.WARNING,
                    "party %r: NO INTEGRITY CHECK in round %d: |B| = %d responders leave "
                    "r = 0 redundant evaluations (decoding needs %d), so a party that "
                    "computes or shares wrongly goes undetected", self.party_id,
                    start.round, len(order), self.plan.min_responders)
        if self._checks is not None and self.parameters.mode == "masked":
            return self._send_seeds(start.round, order)
        return self._tiles(start.round, order)

    def _view(self, round_: int, responders) -> MaskView:
        return MaskView(self.session_id, round_, self.roster_digest, tuple(responders))

    def _send_seeds(self, round_: int, responders: list[str]):
        """Draw the seed of every group this party leads; send it to the other members."""
        view = self._view(round_, responders)
        for index, members in self._checks.my_sets(self.party_id):
            if members[0] != self.party_id:
                self._seed_wait.add(members)
                continue
            seed = bytes(self._source.bytes(32)) if self._source is not None \
                else os.urandom(32)  # CSPRNG; a seeded source only in tests
            self._seeds[members] = seed
            for receiver in members[1:]:
                yield envelope(group_seed=pb.GroupSeed(
                    session_id=self.session_id, round=round_, sender=self.party_id,
                    receiver=receiver, members=members,
                    ciphertext=self.keys[receiver].encrypt_seed(
                        seed, view=view, group_index=index, members=members)))
        if not self._seed_wait:
            yield from self._tiles(round_, responders)

    def _on_group_seed(self, msg: pb.GroupSeed):
        self._require_phase("group_seed", "evaluation")
        self._expect_session(msg.session_id, "evaluation")
        if msg.round < self._round:
            return iter(())  # sent for a round the coordinator abandoned
        members = tuple(msg.members)
        if self._repeats_of_round == msg.round == self._round and members in self._seeds \
                and msg.receiver == self.party_id and msg.sender == members[0] != \
                self.party_id and members in self._checks.member_sets:
            # re-sent after a coordinator restart: accepted only as an exact repeat
            seed = self.keys[msg.sender].decrypt_seed(
                msg.ciphertext, view=self._view(self._round, self._responders),
                group_index=self._checks.member_sets.index(members), members=members)
            if seed != self._seeds[members]:
                raise PeerError(f"group seed from {msg.sender!r} for group {list(members)} "
                                "differs from the one received first", party=COORDINATOR,
                                phase="evaluation")
            return iter(())
        if msg.round != self._round or msg.receiver != self.party_id or \
                members not in self._seed_wait or msg.sender != members[0]:
            raise PeerError(f"group seed from {msg.sender!r} for round {msg.round} and group "
                            f"{list(members)} does not fit this round (round {self._round}, "
                            f"waiting for {sorted(self._seed_wait)})", party=COORDINATOR,
                            phase="evaluation")
        index = self._checks.member_sets.index(members)
        self._seeds[members] = self.keys[msg.sender].decrypt_seed(
            msg.ciphertext, view=self._view(self._round, self._responders),
            group_index=index, members=members)
        self._seed_wait.discard(members)
        if self._seed_wait:
            return iter(())
        return self._tiles(self._round, self._responders)

    def _tiles(self, round_: int, responders: list[str]):
        plan, params, session = self.plan, self.parameters, self.session
        view = self._view(round_, responders)
        others = self._mask_partners(responders)
        checks = self._checks
        tiles = session.tiles(self.n_total)
        weights = session.weights(self.names, responders)[self.party_id]  # c_j per prime
        timings = self.timings
        for k, p in enumerate(plan.primes):
            # g(beta_j), or the sum's values; closed also when the round is abandoned
            with _tile_values(session, self, k, tiles) as values_of:
                for tile_index, (a, b) in enumerate(tiles):
                    started, cpu = time.perf_counter(), time.process_time()
                    env = self._pack_tile(round_, responders, k, tile_index, tiles,
                                          values_of(tile_index), view=view, others=others,
                                          weights=weights)
                    timings["evaluation_seconds"] += time.perf_counter() - started
                    timings["evaluation_cpu_seconds"] += time.process_time() - cpu
                    yield env  # the time the transport holds this generator is not counted

    def _pack_tile(self, round_: int, responders, k: int, tile_index: int, tiles, values,
                   *, view=None, others=None, weights=None) -> pb.Envelope:
        """The upload of one tile: ``values`` (g(beta_j), or the sum's) masked for the
        round's view, packed. A function of the shares and the view only (masks from the
        pair keys and the view, group masks from the round's seeds): computed again, the
        bytes are identical."""
        p = self.plan.primes[k]
        masked = self.parameters.mode == "masked"
        checks = self._checks
        view = self._view(round_, responders) if view is None else view
        if masked and checks is not None:  # U_j = g(beta_j) + M_j (unweighted)
            streams = [(stream, z) for _, stream, z in group_streams(
                checks, k, self.party_id, self._seeds, view, tile_index)]
            values = masked_upload_streams(values, 1, streams, p)
        elif masked:  # c_j * g(beta_j) + PRG for later peers - PRG for earlier ones
            others = self._mask_partners(responders) if others is None else others
            if weights is None:
                weights = self.session.weights(self.names, responders)[self.party_id]
            streams = [(keys.mask_stream(p, view=view, tile_index=tile_index),
                        peer_index < self.index) for peer_index, keys in others]
            values = masked_upload_streams(values, weights[k], streams, p)
        a, b = tiles[tile_index]
        # Filled in place: pb.Envelope(tile=pb.EvaluationTile(values=...)) copies the
        # payload twice more (about 10 ms per MB-sized tile).
        env = pb.Envelope()
        tile = env.tile
        tile.session_id, tile.round, tile.sender = self.session_id, round_, self.party_id
        tile.prime_index, tile.tile_index = k, tile_index
        tile.row_start, tile.row_stop = a, b
        payload = pack(values)
        tile.values = payload
        self.timings["bytes_uploaded"] += len(payload)  # tile.values would copy it
        self.timings["tiles_uploaded"] += 1
        return env

    def _mask_partners(self, responders: list[str]) -> list:
        """(roster index, pair keys) of this party's neighbours in the round's mask graph:
        the Harary graph of degree ``mask_degree`` over the ordered responding set (every
        other responder for degree 0; see :mod:`protocols._mask_graph`)."""
        me = responders.index(self.party_id)
        return [(self.names.index(responders[i]), self.keys[responders[i]])
                for i in mask_neighbours(len(responders), me, self.parameters.mask_degree)]

    def _evaluate(self, k: int, a: int, b: int) -> np.ndarray:
        """g(beta_j) for rows [a, b) against columns a..n-1, modulo prime k.

        The held shares' GEMM operands are prepared (and checked) once per prime, not
        once per row block (:class:`finite_field.DistanceTiles`)."""
        x = self.held[k]
        started, cpu = time.perf_counter(), time.process_time()
        cache = self.__dict__.setdefault("_distance_tiles", {})
        if k not in cache or cache[k][0] is not x:
            cache[k] = (x, DistanceTiles(x, self.plan.primes[k]))
        out = cache[k][1].tile(a, b, upper=True)
        self.timings["kernel_seconds"] += time.perf_counter() - started
        self.timings["kernel_cpu_seconds"] += time.process_time() - cpu
        return out

    def _on_result(self, result: pb.Result):
        self._require_phase("result", "ready", "evaluation")
        self._expect_session(result.session_id, "result")
        if result.party_id != self.party_id:
            raise PeerError(f"result addressed to {result.party_id!r}", party=COORDINATOR,
                            phase="result")
        if len(result.labels) not in (0, self.n_rows):
            raise PeerError(f"result holds {len(result.labels)} labels, expected "
                            f"{self.n_rows} (one per own row) or none", party=COORDINATOR,
                            phase="result")
        self.result = result
        for deviation in result.deviations:
            logger.warning("party %r: the integrity checks of round %d found a deviation "
                           "(%s): %s", self.party_id, deviation.round, deviation.action,
                           deviation.description)
        self.labels = np.array(result.labels, dtype=np.int64) if result.labels else None
        self.phase = "done"
        return iter(())

    def _on_error(self, report: pb.ErrorReport):
        # say who reports what: the coordinator's word about a party (maybe this one),
        # never a message that reads as if this party's own check had failed
        phase = report.phase or self.phase
        culprit = report.party
        if is_dropped(report) and culprit == self.party_id:
            raise PeerError(f"dropped this party in phase {phase!r}: "
                            f"{report.message}", party=culprit, phase=phase,
                            reporter=COORDINATOR)
        who = ("the session" if not culprit or culprit == COORDINATOR else
               f"party {culprit!r}" + (" (this party)" if culprit == self.party_id else ""))
        raise PeerError(f"{who} failed in phase {phase!r}, so it aborted the session: "
                        f"{report.message}", party=culprit or COORDINATOR, phase=phase,
                        reporter=COORDINATOR)

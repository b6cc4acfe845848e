"""Reconnect, party side (docs/protocol.md, "Reconnect"): log what is sent, and resume on a
new stream after the old one broke.

:class:`PartyReconnect` holds the methods of :class:`protocols._party.Party` that log every
envelope sent (``_record``; a tile or a share chunk by its coordinates only: it is
computed again, the identical bytes, when it must be re-sent), say whether a resume is possible
(``can_resume``), open the new stream (``resume_request``), answer the coordinator's
challenge with the signed ``Resume`` (``answer_challenge``) and, once it is accepted, give
what to send again (``resumed``). The handshake's cryptography and the logs are
:mod:`protocols._resume`.
"""

from __future__ import annotations

import logging

from finite_field import PeerError, ProtocolError

from ._fail_closed import COORDINATOR, as_protocol_error
from ._generated import omnifc_pb2 as pb
from ._identity import sign
from ._messages import body_of, envelope
from ._resume import TILE, resume_proof, resume_transcript

#: The first item of a party's log entry for one of its share chunks: ``(SHARE, receiver,
#: prime index, chunk index)`` (made again, the same bytes, when it must be re-sent:
#: ``Party._share_again``).
SHARE = "share"

__all__ = ["PartyReconnect"]

logger = logging.getLogger(__name__)


class PartyReconnect:
    """The party's side of a reconnect (mixed into :class:`protocols._party.Party`)."""

    # -- reconnect (docs/protocol.md, "Reconnect") --------------------------------------
    def _record(self, env: pb.Envelope) -> None:
        """Log what is sent (a tile by its coordinates: it is computed again if needed)."""
        if not self.resumable:
            return
        if env.HasField("tile"):
            t = env.tile
            self._log.append((TILE, t.round, t.prime_index, t.tile_index))
        elif env.HasField("share"):  # n_rows d/l elements to every other party: not kept
            c = env.share
            self._log.append((SHARE, c.receiver, c.prime_index, c.chunk_index))
        else:
            self._log.append(env, env.ByteSize())

    @property
    def can_resume(self) -> bool:
        """Whether a broken stream may be resumed: the session allows it and this party
        is neither finished nor failed."""
        return self.resumable and self.phase in ("join", "confirm", "shares", "ready",
                                                 "evaluation")

    def resume_request(self) -> pb.Envelope:
        """The first envelope on a new stream after the old one broke."""
        if not self.can_resume:
            raise ProtocolError(f"party {self.party_id!r} cannot resume in phase "
                                f"{self.phase!r} (reconnect_grace = "
                                f"{self.parameters.reconnect_grace:g} s)")
        return envelope(resume_request=pb.ResumeRequest(session_id=self.session_id,
                                                        party_id=self.party_id))

    def answer_challenge(self, env: pb.Envelope) -> pb.Envelope:
        """The signed ``Resume`` for the coordinator's challenge on the new stream."""
        kind, challenge = body_of(env)
        try:
            if kind == "error":  # told at once: the session failed, or no resume
                self._on_error(challenge)
            if kind != "resume_challenge":
                raise PeerError(f"expected a resume challenge on the new stream, got "
                                f"{kind!r}", party=COORDINATOR, phase=self.phase)
            self._expect_session(challenge.session_id, self.phase)
            if len(challenge.challenge) != 32 or len(challenge.ephemeral_public_key) != 32:
                raise PeerError("the resume challenge must hold a 32-byte challenge and a "
                                "32-byte key", party=COORDINATOR, phase=self.phase)
        except Exception as error:
            raise self._fail(as_protocol_error(error, f"party {self.party_id!r}", self.phase))
        received = self.received
        message = resume_transcript(self.session_id, self.party_id, self._run_nonce,
                                    self._ephemeral.public_bytes, challenge.challenge,
                                    challenge.ephemeral_public_key, received)
        return envelope(resume=pb.Resume(
            session_id=self.session_id, party_id=self.party_id, run_nonce=self._run_nonce,
            challenge=challenge.challenge, received=received,
            proof=resume_proof(self._ephemeral, challenge.ephemeral_public_key, message),
            signature=sign(self._identity, message)))

    def resumed(self, env: pb.Envelope) -> list[pb.Envelope]:
        """The coordinator accepted the resume: what to send again, in order (everything
        after what it received, but the tiles it holds; a tile is computed again, the
        identical bytes). Then the coordinator re-sends what this party did not receive;
        those envelopes go to :meth:`receive` as usual."""
        kind, accepted = body_of(env)
        if kind == "error":
            try:
                self._on_error(accepted)
            except Exception as error:
                raise self._fail(error)
        if kind != "resume_accepted":
            raise self._fail(PeerError(f"expected the resume's acceptance, got {kind!r}",
                                       party=COORDINATOR, phase=self.phase))
        try:
            self._expect_session(accepted.session_id, self.phase)
            restarted = accepted.restarted
            # a coordinator restarted from its journal received nothing on the old
            # streams: every upload of its round it does not hold goes again, the rest
            # (a Ready, an earlier round's) is history
            entries = self._log.since(0 if restarted else accepted.received,
                                      party=COORDINATOR, phase=self.phase)
            held = {k: set(t.indices) for k, t in enumerate(accepted.held)}
            out = []
            for entry in entries:
                if isinstance(entry, tuple) and entry[0] == SHARE:
                    if not restarted:  # a share chunk: the same bytes, made again
                        out.append(self._share_again(*entry[1:]))
                elif isinstance(entry, tuple):  # a tile: the same bytes, computed again
                    _, round_, k, index = entry
                    if round_ != self._round or index in held.get(k, ()):
                        continue  # an abandoned round's, or held already
                    out.append(self._tile_envelope(round_, self._responders, k, index))
                elif not restarted or (entry.HasField("group_seed") and
                                       entry.group_seed.round == accepted.round):
                    out.append(entry)
            if restarted:
                self._repeats_of_round = int(accepted.round)
        except Exception as error:
            raise self._fail(as_protocol_error(error, f"party {self.party_id!r}", self.phase))
        self._log.restart([])
        for e in out:
            self._record(e)
        self.received = 0
        logger.info("party %r resumed: %d envelope(s) re-sent, %d to come from the "
                    "coordinator", self.party_id, len(out), accepted.replayed)
        return out

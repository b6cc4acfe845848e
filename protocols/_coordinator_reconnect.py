"""Reconnect, coordinator side (docs/protocol.md, "Reconnect"): a party whose stream broke
is *away*, not lost, until it resumes on a new stream or the transport's grace period ends.

:class:`CoordinatorReconnect` holds the methods of :class:`protocols._coordinator.Coordinator`
that say whether a party may resume (``resumable``), mark it away (``party_away``), give a
new stream a fresh challenge (``resume_challenge``) and check its signed ``Resume``
(``resume``: identity signature, run nonce, the challenge used once, a proof of the run's
ephemeral key), then re-send what it did not receive. The handshake's cryptography and the
logs are :mod:`protocols._resume`.
"""

from __future__ import annotations

import logging

from finite_field import AuthenticationError, PeerError

from ._crypto import EphemeralKey
from ._generated import omnifc_pb2 as pb
from ._identity import verify
from ._messages import body_of, envelope
from ._resume import CHALLENGE_BYTES, _refused, check_resume_proof, resume_transcript

__all__ = ["CoordinatorReconnect"]

logger = logging.getLogger(__name__)


class CoordinatorReconnect:
    """The coordinator's side of a reconnect (mixed into
    :class:`protocols._coordinator.Coordinator`)."""

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

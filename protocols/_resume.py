"""Reconnect and resume: the handshake's cryptography and the logs that make a resume exact.

A party whose stream to the coordinator broke (a transport error, not a protocol error)
opens a new stream within ``reconnect_grace`` seconds and proves that it is the same party
of the same run (docs/protocol.md, "Reconnect"):

1. ``ResumeRequest`` (party -> coordinator): session and party id, nothing secret.
2. ``ResumeChallenge`` (coordinator -> party): 32 fresh random bytes and a fresh X25519
   public key of the coordinator, valid once and only on that stream.
3. ``Resume`` (party -> coordinator): the run nonce of the party's hello, the challenge,
   how many envelopes it received since its last (re)connect, an **identity signature**
   (Ed25519, the pinned key) over :func:`resume_transcript`, and a **proof of possession of
   the run's ephemeral key**: HMAC-SHA256 of the same transcript under a key derived from
   X25519(the party's run ephemeral secret, the challenge key), which only the holder of the
   secret behind the ephemeral key in the signed hello can compute
   (:func:`resume_proof`). The transcript binds session, party, run nonce, the hello's
   ephemeral key, the challenge and its key, and the count: a handshake of an earlier
   stream (its challenge was used), of another run (another nonce and ephemeral key), or
   made with another identity or ephemeral key is refused.
4. ``ResumeAccepted`` (coordinator -> party): how many envelopes it received from the
   party since then, the round and, per prime, the tiles of the round it holds; then it
   re-sends what the party did not receive, and the party re-sends what the coordinator
   did not receive (tiles it holds excepted).

Both ends keep an :class:`Outlog` of what they sent since the other end last (implicitly)
acknowledged it: a stream delivers a prefix of what was sent, so "I received N" names
exactly what to send again. A party logs a tile as its coordinates only and computes it
again when it must be re-sent: the tile is a deterministic function of its shares and the
round's view (the same g(beta_j), the same masks, the same group seeds), so the copy is
byte-identical. The party leaves out the tiles ``ResumeAccepted.held`` lists: the
coordinator refuses any second copy of a tile it holds, identical or not.

>>> from protocols._crypto import EphemeralKey
>>> party, challenge = EphemeralKey.generate(), EphemeralKey.generate()
>>> message = resume_transcript("s", "a", b"n" * 32, party.public_bytes, b"c" * 32,
...                             challenge.public_bytes, 3)
>>> proof = resume_proof(party, challenge.public_bytes, message)
>>> check_resume_proof(challenge, party.public_bytes, message, proof)
True
>>> check_resume_proof(challenge, EphemeralKey.generate().public_bytes, message, proof)
False
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from finite_field import AuthenticationError, PeerError

from ._crypto import EphemeralKey, transcript

__all__ = ["CHALLENGE_BYTES", "resume_transcript", "resume_proof", "check_resume_proof",
           "Outlog", "TILE"]

#: Bytes of a coordinator's resume challenge.
CHALLENGE_BYTES = 32
#: The first item of a party's log entry for a tile: ``(TILE, round, prime index, tile
#: index)`` (the tile itself is computed again when it must be re-sent).
TILE = "tile"


def resume_transcript(session_id: str, party_id: str, run_nonce: bytes,
                      ephemeral_public_key: bytes, challenge: bytes, challenge_key: bytes,
                      received: int) -> bytes:
    """The canonical bytes a resuming party signs and MACs (label ``resume``: no hello,
    roster confirmation or other signed message has the same bytes)."""
    return transcript("resume", session_id, party_id, bytes(run_nonce),
                      bytes(ephemeral_public_key), bytes(challenge), bytes(challenge_key),
                      int(received))


def _proof_key(secret: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=transcript("resume-proof")).derive(secret)


def resume_proof(ephemeral: EphemeralKey, challenge_key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under HKDF(X25519(run ephemeral secret, challenge key))."""
    key = _proof_key(ephemeral.exchange(challenge_key))
    return hmac.new(key, bytes(message), hashlib.sha256).digest()


def check_resume_proof(challenge: EphemeralKey, ephemeral_public_key: bytes, message: bytes,
                       proof: bytes) -> bool:
    """Whether ``proof`` was made with the secret behind ``ephemeral_public_key``."""
    try:
        key = _proof_key(challenge.exchange(ephemeral_public_key))
    except AuthenticationError:
        return False
    return hmac.compare_digest(hmac.new(key, bytes(message), hashlib.sha256).digest(),
                               bytes(proof))


class Outlog:
    """What one end sent since the other end last acknowledged it, in order.

    ``base`` counts the entries acknowledged (dropped) since the last (re)connect;
    :meth:`since` gives the entries after the first ``n`` sent on the current stream(s),
    and :meth:`restart` begins a new count with what is re-sent on a new stream.
    ``size`` of an entry (its bytes) is summed in :attr:`bytes`, what the log holds.
    """

    def __init__(self) -> None:
        self.base = 0
        self.entries: list = []
        self.sizes: list = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def append(self, entry, size: int = 0) -> None:
        self.entries.append(entry)
        self.sizes.append(int(size))
        self.bytes += int(size)

    def acknowledge_all(self) -> None:
        """Everything sent so far arrived (e.g. the other end answered what needed it)."""
        self.base = self.end
        self.entries, self.sizes, self.bytes = [], [], 0

    def drop(self) -> None:
        """Stop holding anything (entries counted as acknowledged)."""
        self.acknowledge_all()

    def since(self, n: int, *, party: str, phase: str) -> list:
        """The entries after the first ``n`` (never more than were sent; entries
        acknowledged already are not sent again)."""
        if not 0 <= int(n) <= self.end:
            raise PeerError(f"claims to have received {int(n)} envelopes, but only "
                            f"{self.end} were sent since its last (re)connect",
                            party=party, phase=phase)
        return self.entries[max(int(n), self.base) - self.base:]

    def restart(self, entries, sizes=None) -> None:
        """A new stream: its count starts with ``entries`` (what is re-sent first)."""
        self.base = 0
        self.entries = list(entries)
        self.sizes = list(sizes) if sizes is not None else [0] * len(self.entries)
        self.bytes = sum(self.sizes)


def _refused(name: str, phase: str, reason: str) -> AuthenticationError:
    """A refused resume: opaque to the stream it is told to (like every authentication
    failure), with the reason kept for the coordinator's log (``error.reason``)."""
    error = AuthenticationError(name, phase)
    error.reason = reason
    return error

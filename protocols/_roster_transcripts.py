"""The bytes a party signs: its hello, and its confirmation of the roster it accepted.

The roster digest (:func:`roster_digest_of`: every signed hello, in roster order) goes into
every pair key, AAD and mask (:mod:`protocols._crypto`); each transcript has its own domain
label, so no signed message of one kind has the bytes of another.
"""

from __future__ import annotations

from ._crypto import roster_digest, transcript
from ._generated import omnifc_pb2 as pb

__all__ = ["hello_transcript", "roster_digest_of", "confirmation_transcript"]


def hello_transcript(hello: pb.Hello) -> bytes:
    """The canonical bytes a party signs in its hello (every field but the signature)."""
    return transcript("hello", hello.session_id, hello.protocol_version, hello.party_id,
                      hello.n_rows, hello.dim, hello.ephemeral_public_key, hello.run_nonce)


def roster_digest_of(session_id: str, hellos) -> bytes:
    """The roster digest of signed hellos in roster order (see :mod:`protocols._crypto`)."""
    return roster_digest(session_id, [(hello_transcript(h), h.signature) for h in hellos])


def confirmation_transcript(session_id: str, party_id: str, digest: bytes) -> bytes:
    """The canonical bytes a party signs to confirm the roster it accepted (label
    ``roster-confirmation``: no hello or other signed message has the same bytes)."""
    return transcript("roster-confirmation", session_id, party_id, bytes(digest))

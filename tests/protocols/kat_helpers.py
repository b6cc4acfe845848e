"""What the two known-answer test files of protocols/_crypto.py share: docs/protocol.md's
transcript encoding and the X25519 public key, recomputed with pyca/cryptography alone,
and the pair keys of the fixed alice/bob pair as the module derives them (the subject of
those files' answers, which check them against keys recomputed by hand).

Each file keeps its own private keys and roster digest (its pinned answers depend on them).
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocols._crypto import EphemeralKey, PairKeys

#: docs/protocol.md: protocol version 3 (a literal, not the module's constant).
VERSION = 3


def _field(value) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return len(data).to_bytes(4, "big") + data


def transcript(label, *fields) -> bytes:
    """b"omnifc" + the length-prefixed (4-byte big-endian) version, label and fields,
    ints as their decimal digits."""
    return b"omnifc" + _field(VERSION) + _field(label) + b"".join(map(_field, fields))


def x25519_public(private: bytes) -> bytes:
    """The raw X25519 public key of a 32-byte private key."""
    return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def alice_and_bob_keys(private: dict, session: str, roster: bytes):
    """(alice's, bob's) PairKeys derived by the module from the fixed private keys."""
    a = EphemeralKey(X25519PrivateKey.from_private_bytes(private["alice"]))
    b = EphemeralKey(X25519PrivateKey.from_private_bytes(private["bob"]))
    return (PairKeys.derive(a, b.public_bytes, session_id=session, me="alice", peer="bob",
                            roster_digest=roster),
            PairKeys.derive(b, a.public_bytes, session_id=session, me="bob", peer="alice",
                            roster_digest=roster))

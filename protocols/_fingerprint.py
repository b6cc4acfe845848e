"""Fingerprints people can read aloud: one format for keys, cards and session configs.

Format: the SHA-256 digest in RFC 4648 base32 (letters A-Z and digits 2-7: no 0/O or
1/I/L to confuse, case does not matter), its first 25 characters (125 bits) in five groups
of five separated by dashes, e.g. ``KZ3QD-7MFXA-2RWTE-BQ4NH-UOC6S``. 125 bits leave no
room for a second preimage (2^125 work to make another card or config with the same
fingerprint), and five groups of five are read out over the phone in well under a minute.

Every fingerprint omnifc prints (``keygen``, ``certs``, ``session new``, ``session
fingerprint``, ``serve``, ``join``) and every one written into a card or a session config
is in this format, so they can be compared character for character.

What is hashed (each with its own domain-separation prefix, so a digest of one kind can
never be confused with another):

- a card: role, name, the raw Ed25519 identity public key (empty for the coordinator) and
  the DER of the TLS certificate, each length-prefixed (:func:`card_fingerprint`);
- a session config: its canonical JSON form (:func:`protocols.session_fingerprint`);
- an identity key alone: the raw 32-byte public key (:func:`protocols.identity_fingerprint`).

Examples
--------
>>> from protocols._fingerprint import readable_fingerprint
>>> readable_fingerprint(b"omnifc", domain="example")
'VBDJ6-BYQPV-HRDUX-VXS4D-GMDDT'
"""

from __future__ import annotations

import base64
import hashlib
import re

__all__ = ["readable_fingerprint", "card_fingerprint", "FINGERPRINT_PATTERN"]

#: What a fingerprint looks like (for validating ones read from files).
FINGERPRINT_PATTERN = re.compile(r"[A-Z2-7]{5}(-[A-Z2-7]{5}){4}")

_GROUPS, _GROUP = 5, 5


def readable_fingerprint(data: bytes, *, domain: str) -> str:
    """SHA-256 of ``domain`` and ``data``, as five dash-separated groups of base32.

    ``domain`` names what is hashed ("card", "session", "identity-key", ...).
    """
    digest = hashlib.sha256(b"omnifc-fingerprint-v1\0" + domain.encode("ascii") + b"\0"
                            + bytes(data)).digest()
    text = base64.b32encode(digest).decode("ascii")[:_GROUPS * _GROUP]
    return "-".join(text[i:i + _GROUP] for i in range(0, len(text), _GROUP))


def _field(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


def card_fingerprint(role: str, name: str, identity_public_key: bytes | None,
                     certificate_der: bytes) -> str:
    """The fingerprint of a public card (what its owner reads out to the others)."""
    data = b"".join(_field(v) for v in (role.encode("utf-8"), name.encode("utf-8"),
                                        bytes(identity_public_key or b""),
                                        bytes(certificate_der)))
    return readable_fingerprint(data, domain="card")

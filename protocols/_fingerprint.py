"""Fingerprints people can read aloud: one format for keys, cards and session configs.

Format: the SHA-256 digest in RFC 4648 base32 (letters A-Z and digits 2-7: no 0/O or
1/I/L to confuse, case does not matter), its first 32 characters (160 bits: the first 20
digest bytes) in eight groups of four separated by dashes, e.g.
``KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ5Y``.

Why 160 bits: the threat is not only a second preimage. Whoever assembles a session
config chooses everything in both of two configs (the session id is free), so two
*different* configs with one fingerprint are a collision, found with about 2^(b/2) hashes
for a b-bit fingerprint: 2^62.5 for the 125 bits omnifc printed before (within reach of a
well-funded attacker), 2^80 for 160 bits. A second preimage (a card or config matching
one somebody else made) costs 2^160. Eight groups of four are still read out over the
phone in well under a minute.

Fingerprints of the old format (25 characters in five groups of five) are refused where
they are read back, cards and session configs, with an error naming the fix (re-run
``omnifc keygen`` / ``omnifc session new``): they would compare equal only on fewer bits
(:func:`refuse_old_format`).

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
'VBDJ-6BYQ-PVHR-DUXV-XS4D-GMDD-T5MD-RZ54'
"""

from __future__ import annotations

import base64
import hashlib
import re

from finite_field import ParameterError

__all__ = ["readable_fingerprint", "card_fingerprint", "refuse_old_format",
           "FINGERPRINT_PATTERN", "FINGERPRINT_BITS"]

#: What a fingerprint looks like (for validating ones read from files).
FINGERPRINT_PATTERN = re.compile(r"[A-Z2-7]{4}(-[A-Z2-7]{4}){7}")
#: How many digest bits a fingerprint shows (5 bits per base32 character).
FINGERPRINT_BITS = 160

_GROUPS, _GROUP = 8, 4
#: The format omnifc wrote before: 25 characters (125 bits) in five groups of five.
_OLD_PATTERN = re.compile(r"[A-Z2-7]{5}(-[A-Z2-7]{5}){4}")


def readable_fingerprint(data: bytes, *, domain: str) -> str:
    """SHA-256 of ``domain`` and ``data``: its first 160 bits as eight dash-separated
    groups of four base32 characters.

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


def refuse_old_format(value, where: str, fix: str) -> None:
    """Raise ParameterError when ``value`` is a fingerprint in the old 125-bit format.

    ``where`` names what was read (a card, a config entry), ``fix`` what to run instead.

    >>> refuse_old_format("KZ3QD-7MFXA-2RWTE-BQ4NH-UOC6S", "card 'a'", "re-run keygen")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    finite_field._errors.ParameterError: card 'a': fingerprint ... has the old 125-bit format ...
    >>> refuse_old_format(readable_fingerprint(b"x", domain="card"), "card 'a'", "")  # None
    """
    if isinstance(value, str) and _OLD_PATTERN.fullmatch(value):
        raise ParameterError(f"{where}: fingerprint {value!r} has the old 125-bit format "
                             "(five groups of five); omnifc now writes and compares 160-bit "
                             f"fingerprints (eight groups of four): {fix}")

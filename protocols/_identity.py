"""Long-term Ed25519 identity keys: generate, store, sign and verify.

Each party holds one Ed25519 identity key. Its raw 32-byte public key is pinned in the
session config every party shares, so the coordinator cannot substitute the ephemeral
X25519 keys the parties sign with it (DESIGN.md section 4, phase 1).

Private keys are written as unencrypted PKCS#8 PEM with file mode 0600 (through
:mod:`protocols._files`: never through a symbolic link), and a key file that group or
others may read is refused when loading; the folder that holds them is the thing to protect. Verification failures raise the opaque
:class:`~finite_field.AuthenticationError` (nothing says which check failed).

Examples
--------
>>> from protocols import generate_identity, public_key_bytes, sign, verify
>>> key = generate_identity()
>>> signature = sign(key, b"hello")
>>> verify(public_key_bytes(key), b"hello", signature)   # returns None when valid
>>> len(public_key_bytes(key)), len(signature)
(32, 64)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)

from finite_field import AuthenticationError, ParameterError

from ._files import check_private_key_file, write_private_file
from ._fingerprint import readable_fingerprint

__all__ = ["generate_identity", "save_identity", "load_identity", "public_key_bytes",
           "public_key_hex", "identity_fingerprint", "sign", "verify",
           "PUBLIC_KEY_BYTES", "SIGNATURE_BYTES"]

logger = logging.getLogger(__name__)

#: Length of a raw Ed25519 public key.
PUBLIC_KEY_BYTES = 32
#: Length of an Ed25519 signature.
SIGNATURE_BYTES = 64

PathLike = Union[str, "os.PathLike[str]"]


def generate_identity() -> Ed25519PrivateKey:
    """A fresh Ed25519 identity key from the operating system's CSPRNG.

    >>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    >>> from protocols import generate_identity
    >>> isinstance(generate_identity(), Ed25519PrivateKey)
    True
    """
    return Ed25519PrivateKey.generate()


def save_identity(private_key: Ed25519PrivateKey, path: PathLike, *,
                  overwrite: bool = False) -> Path:
    """Write an identity key as unencrypted PKCS#8 PEM, file mode 0600.

    Parameters
    ----------
    private_key : Ed25519PrivateKey
    path : str or os.PathLike
    overwrite : bool
        Replace an existing file (default: refuse with :class:`ParameterError`).

    Returns
    -------
    pathlib.Path
        The file written.

    Examples
    --------
    >>> import tempfile, os
    >>> from protocols import generate_identity, save_identity, load_identity
    >>> folder = tempfile.mkdtemp()
    >>> path = save_identity(generate_identity(), os.path.join(folder, "a.identity.pem"))
    >>> oct(path.stat().st_mode & 0o777)
    '0o600'
    """
    if not isinstance(private_key, Ed25519PrivateKey):
        raise ParameterError(
            f"an identity key must be an Ed25519 private key, got {type(private_key).__name__}")
    pem = private_key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return write_private_file(path, pem, overwrite=overwrite)


def load_identity(path: PathLike) -> Ed25519PrivateKey:
    """Read an identity key written by :func:`save_identity`.

    Raises
    ------
    ParameterError
        When the file is missing, may be read or changed by group or others (any 0077
        mode bit; see :func:`protocols._files.check_private_key_file`), or does not hold
        an unencrypted Ed25519 private key.
    """
    path = check_private_key_file(path, "identity key")
    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ParameterError(
            f"{str(path)!r} does not hold an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ParameterError(
            f"{str(path)!r} holds a {type(key).__name__}, expected an Ed25519 private key")
    return key


def public_key_bytes(key) -> bytes:
    """The raw 32-byte public key of an Ed25519 private or public key.

    >>> from protocols import generate_identity, public_key_bytes
    >>> len(public_key_bytes(generate_identity()))
    32
    """
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise ParameterError(f"expected an Ed25519 key, got {type(key).__name__}")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_key_hex(key) -> str:
    """The raw public key as 64 lowercase hex characters (the form pinned in configs).

    >>> from protocols import generate_identity, public_key_hex
    >>> len(public_key_hex(generate_identity()))
    64
    """
    return public_key_bytes(key).hex()


def identity_fingerprint(key) -> str:
    """The fingerprint of an identity public key, in the one readable format omnifc uses
    everywhere (:mod:`protocols._fingerprint`: 160 bits, eight groups of four base32
    characters).

    The config pins the full key; this is for reading out. Cards and session configs
    carry the *card* fingerprint, which covers this key and the TLS certificate together.

    >>> from protocols import generate_identity, identity_fingerprint
    >>> len(identity_fingerprint(generate_identity()).split("-"))
    8
    """
    raw = key if isinstance(key, (bytes, bytearray)) else public_key_bytes(key)
    return readable_fingerprint(bytes(raw), domain="identity-key")


def sign(private_key: Ed25519PrivateKey, message: bytes) -> bytes:
    """Sign ``message`` with an identity key; returns a 64-byte signature.

    The caller is responsible for domain separation (binding protocol version, session
    and role into ``message``).

    >>> from protocols import generate_identity, sign
    >>> len(sign(generate_identity(), b"transcript"))
    64
    """
    if not isinstance(private_key, Ed25519PrivateKey):
        raise ParameterError(
            f"signing needs an Ed25519 private key, got {type(private_key).__name__}")
    return private_key.sign(bytes(message))


def verify(public_key_raw: bytes, message: bytes, signature: bytes, *,
           party: object = None, phase: str | None = None) -> None:
    """Check an Ed25519 signature against a pinned raw public key.

    Parameters
    ----------
    public_key_raw : bytes
        The 32-byte public key pinned in the session config.
    message, signature : bytes
    party, phase : optional
        Named in the (otherwise opaque) error.

    Raises
    ------
    AuthenticationError
        When the signature does not verify, for any reason (wrong key, altered message
        or signature, malformed key or signature). The error does not say which.

    Examples
    --------
    >>> from protocols import generate_identity, public_key_bytes, sign, verify
    >>> key = generate_identity()
    >>> verify(public_key_bytes(key), b"m", sign(key, b"m"))
    """
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes(public_key_raw))
        public.verify(bytes(signature), bytes(message))
    except (InvalidSignature, ValueError, TypeError):
        raise AuthenticationError(party=party, phase=phase) from None

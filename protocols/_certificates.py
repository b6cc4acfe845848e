"""Reading X.509 certificates and TLS keys, and checking them against a session config.

The session config pins, for every participant, a self-signed TLS certificate (and for a
party an Ed25519 identity public key). This module reads certificates and private keys from
paths or bytes, parses the PEM certificates a config embeds (:func:`parse_certificate`),
checks a card's fingerprint against its certificate (:func:`check_card_fingerprint`), gives
the SHA-256 pinned in configs (:func:`certificate_sha256`), and checks that a participant's
key files are the ones pinned for it (:func:`check_own_keys`). The gRPC credentials built
from them are in :mod:`protocols._tls`.

Examples
--------
>>> import tempfile
>>> from protocols import certificate_sha256, generate_certificates
>>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
>>> len(certificate_sha256(certs.party("a").cert))
32
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from finite_field import ParameterError

from ._config import SessionConfig
from ._fingerprint import refuse_old_format
from ._parameters import show
from ._files import check_private_key_file
from ._identity import load_identity, public_key_bytes

__all__ = ["parse_certificate", "check_card_fingerprint", "certificate_sha256",
           "check_own_keys"]


def parse_certificate(value, where: str, expected_name: Optional[str] = None):
    """Parse a PEM certificate embedded in a session config (``where`` names the key);
    returns (normalized PEM text, DER, common name)."""
    if not isinstance(value, str) or "-----BEGIN CERTIFICATE-----" not in value:
        raise ParameterError(f"{where} must be a PEM certificate (text starting with "
                             f"-----BEGIN CERTIFICATE-----), got {show(value)}")
    if value.count("-----BEGIN") != 1:
        raise ParameterError(f"{where} must hold exactly one PEM certificate")
    try:
        cert = x509.load_pem_x509_certificate(value.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise ParameterError(f"{where} is not a valid PEM X.509 certificate") from None
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(names) != 1:
        raise ParameterError(f"{where}: the certificate must have one common name, "
                             f"has {names}")
    if expected_name is not None and names[0] != expected_name:
        raise ParameterError(f"{where}: the certificate names {names[0]!r}, expected "
                             f"{expected_name!r}")
    pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    return pem, cert.public_bytes(serialization.Encoding.DER), names[0]


def check_card_fingerprint(value, computed: str, where: str) -> Optional[str]:
    """The card fingerprint a config entry gives (``value``, None: not given), checked
    against the one its certificate and key give (``computed``)."""
    if value is None:
        return computed
    refuse_old_format(value, where.rstrip(":"),
                      "re-run 'omnifc session new' on the cards (old cards: their owners "
                      "re-run 'omnifc keygen') or 'omnifc certs'")
    if value != computed:
        raise ParameterError(f"{where} fingerprint is {show(value)} but the certificate and "
                             f"keys written with it give {computed!r}: the entry was edited "
                             "or mixed up")
    return computed


def _read(value, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if value is None:
        raise ParameterError(f"{what} is required")
    try:
        return Path(value).read_bytes()
    except FileNotFoundError:
        raise ParameterError(f"{what} file not found: {str(value)!r}") from None
    except IsADirectoryError:
        raise ParameterError(f"{what} must be a file, got the folder {str(value)!r}") \
            from None


def _read_key(value, what: str = "TLS private key") -> bytes:
    """A private key's bytes; a file must pass :func:`check_private_key_file`."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if value is None:
        raise ParameterError(f"{what} is required")
    return check_private_key_file(value, what).read_bytes()


def _load_certificate(value, what: str = "certificate") -> x509.Certificate:
    data = _read(value, what)
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError:
        raise ParameterError(f"{what} is not a PEM or DER X.509 certificate") from None


def certificate_sha256(cert) -> bytes:
    """SHA-256 of a certificate's DER encoding (the fingerprint pinned in configs).

    ``cert`` is a path, PEM or DER bytes, or an :class:`x509.Certificate`.

    >>> import tempfile
    >>> from protocols import certificate_sha256, generate_certificates
    >>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
    >>> certificate_sha256(certs.party("a").cert) == certs.party("a").certificate_sha256
    True
    """
    if not isinstance(cert, x509.Certificate):
        cert = _load_certificate(cert)
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()


def _key_matches(key_bytes: bytes, cert: x509.Certificate, where: str, owner: str) -> None:
    try:
        key = serialization.load_pem_private_key(key_bytes, password=None)
    except (ValueError, TypeError):
        raise ParameterError(f"{where} does not hold an unencrypted PEM private key") \
            from None
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*raw) != cert.public_key().public_bytes(*raw):
        raise ParameterError(
            f"{where} is not the key of the TLS certificate pinned for {owner} in the session "
            "config: the config was assembled from another card than the one made with this "
            "key (or --keys points at the wrong folder); compare the card fingerprints")


def check_own_keys(config: SessionConfig, name: str) -> None:
    """Check that ``name``'s private key files belong to what the config pins for it.

    For a party: its TLS key must match its pinned certificate and its identity key the
    pinned identity public key; for the coordinator: its TLS key must match its
    certificate. Key files that group or others may read are refused.

    Raises
    ------
    ParameterError
        Naming the participant, the file and what does not match.
    """
    if name in config.party_names:
        files = config.party_tls(name)
        cert = _load_certificate(files.cert, f"TLS certificate of party {name!r}")
        _key_matches(_read_key(files.key), cert, f"the TLS key file {str(files.key)!r}",
                     f"party {name!r}")
        entry = config.party(name)
        if entry.identity_key is None:
            raise ParameterError(f"the session config gives no identity key file for party "
                                 f"{name!r}: pass --keys DIR")
        if public_key_bytes(load_identity(entry.identity_key)) != entry.identity_public_key:
            raise ParameterError(
                f"the identity key file {str(entry.identity_key)!r} does not match the "
                f"identity_public_key pinned for party {name!r} in the session config: the "
                "config was assembled from another card (or --keys points at the wrong "
                "folder); compare the card fingerprints")
        return
    files = config.coordinator_tls()
    cert = _load_certificate(files.cert, "the coordinator's TLS certificate")
    _key_matches(_read_key(files.key), cert, f"the TLS key file {str(files.key)!r}",
                 "the coordinator")

"""The session fingerprint: the canonical JSON of a session config and its hash.

Which parameters it covers comes from the parameter table (:mod:`protocols._parameters`,
``Parameter.fingerprint``); the readable format is :mod:`protocols._fingerprint`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from finite_field import ParameterError

from .._fingerprint import readable_fingerprint
from ._schema import PARAMETER_FIELDS, SESSION_FIELDS, SessionConfig

__all__ = ["canonical_session", "session_fingerprint"]


def _fingerprinted(obj, fields) -> dict:
    """The values of ``fields`` the fingerprint covers: every one marked "always", and
    those marked "unless-default" when they differ from their default (mask_degree = 0,
    every pair masks as before the key existed, is left out, so the fingerprints of older
    configs do not change)."""
    values = {}
    for f in fields:
        value = getattr(obj, f.name)
        if f.fingerprint == "never" or (f.fingerprint == "unless-default"
                                        and value == f.default_in_config):
            continue
        values[f.name] = list(value) if isinstance(value, tuple) else value
    return values


def canonical_session(config: SessionConfig) -> dict:
    """The meaning of a session config as plain data: what :func:`session_fingerprint`
    hashes.

    Everything every participant must agree on is in it: session id, protocol version,
    coordinator address, mode, every parameter (row caps included), the clustering
    request, every deadline, whether TLS is on, the SHA-256 of every trust root and pinned
    certificate (the embedded coordinator certificate or the coordinator certificate file,
    the ``ca`` file whenever TLS uses it: in older configs, and in mixed ones where some
    party has no embedded certificate and the coordinator trusts the CA for it) and every
    party in roster order with its identity key and certificate pin. A file's
    certificates are hashed each (one: a hex string; several, as in a CA bundle gRPC
    trusts all of: a list in file order). Local file paths (where each organization keeps
    its own private keys) are not: they differ between copies and do not change what the
    session does.
    """
    from cryptography import x509  # here: `omnifc --help` never reads a certificate
    from cryptography.hazmat.primitives import serialization

    def der_sha256(data: bytes):
        try:  # every certificate of a PEM file: TLS trusts each one of a bundle
            certs = x509.load_pem_x509_certificates(data) if b"-----BEGIN" in data \
                else [x509.load_der_x509_certificate(data)]
        except ValueError:
            raise ParameterError("not a PEM or DER certificate") from None
        digests = [hashlib.sha256(c.public_bytes(serialization.Encoding.DER)).hexdigest()
                   for c in certs]
        return digests[0] if len(digests) == 1 else digests

    p, t = config.parameters, config.tls
    tls: dict = {"enabled": t.enabled}
    files: tuple = ()
    if t.coordinator_certificate is not None:
        tls["coordinator_certificate_sha256"] = der_sha256(
            t.coordinator_certificate.encode("ascii"))
        if t.enabled and t.ca is not None:  # mixed: the coordinator trusts the CA for the
            files = ("ca",)                 # parties without embedded certificates
    elif t.enabled:  # older configs: the trust anchors are files
        files = ("ca", "coordinator_cert")
    for key in files:
        try:
            tls[f"{key}_sha256"] = der_sha256(Path(getattr(t, key)).read_bytes())
        except (OSError, ParameterError):
            raise ParameterError(
                f"the session fingerprint covers the [tls] {key} certificate, which "
                f"cannot be read from {str(getattr(t, key))!r}") from None
    return {
        "format": "omnifc-session-config-v1",
        "session": {"id": config.session_id, "protocol_version": config.protocol_version,
                    "coordinator": config.coordinator, **_fingerprinted(config,
                                                                        SESSION_FIELDS)},
        "parameters": _fingerprinted(p, PARAMETER_FIELDS),
        "clustering": {"method": config.clustering.method,
                       "n_clusters": config.clustering.n_clusters},
        "deadlines": dataclasses.asdict(config.deadlines),
        "tls": tls,
        "parties": [{"name": e.name, "identity_public_key": e.identity_public_key.hex(),
                     "certificate_sha256": None if e.certificate_sha256 is None
                     else e.certificate_sha256.hex()} for e in config.parties],
    }


def session_fingerprint(config: SessionConfig) -> str:
    """A fingerprint of the whole session config that people read aloud and compare.

    SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8) of
    :func:`canonical_session`, in the readable format of :mod:`protocols._fingerprint`
    (160 bits: eight groups of four base32 characters). Two configs have the same
    fingerprint exactly when they describe the same session, whatever their comments, key
    order, number formatting or local key paths.

    >>> from protocols import PartyEntry, SessionConfig, TLSSettings, session_fingerprint
    >>> parties = tuple(PartyEntry(n, bytes([i]) * 32) for i, n in enumerate("abc"))
    >>> c = SessionConfig("ab" * 16, "127.0.0.1:50051", parties, tls=TLSSettings(enabled=False))
    >>> session_fingerprint(c) == session_fingerprint(c.with_keys("a", "/"))
    True
    >>> session_fingerprint(c) == session_fingerprint(c.with_(coordinator="127.0.0.1:50052"))
    False
    """
    text = json.dumps(canonical_session(config), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False)
    return readable_fingerprint(text.encode("utf-8"), domain="session")

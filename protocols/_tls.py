"""Certificates for a session and the gRPC plumbing that uses them (mutual TLS by default).

The real key ceremony is in :mod:`protocols._cards` (``omnifc keygen`` on each
organization's machine, ``omnifc session new`` from the public cards).
:func:`generate_certificates` is the one-machine shortcut for demos and tests (``omnifc
certs``): it runs that ceremony for every participant into one folder, so **whoever runs it
holds every party's private keys and can impersonate every party**. Never use it for a
real deployment.

Trust is by pinning, with no certificate authority: every certificate is self-signed; the
coordinator's TLS server trusts exactly the parties' certificates embedded in the session
config (client authentication required) and every party trusts exactly the coordinator's.
Configs written by older versions (a session CA file) still work.

:func:`make_server` and :func:`make_channel` are the one place where gRPC servers and
channels are made: TLS with client authentication required, unless ``insecure=True`` is
asked for explicitly (which logs a WARNING). :func:`peer_common_name` and
:func:`authenticated_party` let a servicer check that the TLS identity of a caller is the
party it claims to be. TLS private key files are refused when group or others may read
them (:func:`protocols._files.check_private_key_file`), and checked against the
certificate pinned for their owner before any connection is made.

Examples
--------
>>> import tempfile
>>> from protocols import generate_certificates, load_session_config
>>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
>>> load_session_config(certs.config).party_names
('a', 'b', 'c')
"""

from __future__ import annotations

import hashlib
import logging
import os
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from finite_field import ParameterError, PeerError

from ._cards import LOOPBACK_HOSTS, generate_keys, key_file_names, load_card, \
    new_session_config
from ._config import (ClusteringRequest, Deadlines, SessionConfig, ConfigParameters,
                      dump_session_config, split_address, validate_party_name)
from ._fingerprint import refuse_old_format
from ._parameters import show
from ._files import check_private_key_file, prepare_private_folder
from ._identity import load_identity, public_key_bytes

__all__ = ["CertificateSet", "PartyFiles", "generate_certificates", "certificate_sha256",
           "server_credentials", "channel_credentials", "coordinator_credentials",
           "party_credentials", "make_server", "make_channel", "peer_common_name",
           "peer_certificate_sha256", "authenticated_party", "check_own_keys",
           "MAX_MESSAGE_BYTES", "LOOPBACK_HOSTS", "IMPERSONATION_WARNING",
           "parse_certificate", "check_card_fingerprint"]

logger = logging.getLogger(__name__)

#: Explicit gRPC message-size limit (send and receive). Payloads travel in chunks well
#: below gRPC's default 4 MB; 8 MB leaves room for framing without inviting huge messages.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

#: What ``omnifc certs`` (and :func:`generate_certificates`) says about itself.
IMPERSONATION_WARNING = (
    "DEMO ONLY: this made every party's private keys on this machine, so whoever ran it (or "
    "can read this folder) can impersonate every party, read their shares and still finish "
    "the session with a correct result. For a real deployment each organization runs "
    "'omnifc keygen' on its own machine and the config is built with 'omnifc session new' "
    "(docs/deployment.md).")


# --- the one-machine shortcut ------------------------------------------------------------

@dataclass(frozen=True)
class PartyFiles:
    """What :func:`generate_certificates` wrote for one party."""

    name: str
    cert: Path
    key: Path
    identity_key: Path
    identity_public_key: bytes
    certificate_sha256: bytes
    card: Path
    fingerprint: str


@dataclass(frozen=True)
class CertificateSet:
    """Paths written by :func:`generate_certificates` (no key material in memory)."""

    directory: Path
    coordinator: str
    coordinator_cert: Path
    coordinator_key: Path
    coordinator_card: Path
    coordinator_fingerprint: str
    parties: tuple
    config: Path
    session_id: str
    fingerprint: str

    def party(self, name: str) -> PartyFiles:
        for files in self.parties:
            if files.name == name:
                return files
        raise ParameterError(f"no certificates for party {name!r}; have "
                             f"{', '.join(repr(p.name) for p in self.parties)}")

    @property
    def files(self) -> list:
        """Every file written, the coordinator's first, the session config last."""
        out = [self.coordinator_key, self.coordinator_cert, self.coordinator_card]
        for p in self.parties:
            out += [p.key, p.identity_key, p.cert, p.card]
        return out + [self.config]

    @property
    def private_files(self) -> list:
        """The files holding private keys (mode 0600)."""
        return [self.coordinator_key] + [f for p in self.parties for f in (p.key,
                                                                           p.identity_key)]


def generate_certificates(out_dir, parties: Sequence[str], coordinator: str = "coordinator",
                          days: int = 30, *, coordinator_address: str = "127.0.0.1:50051",
                          coordinator_hosts: Sequence[str] = (), mode: str = "masked",
                          integrity: str = "detect", adversaries: Optional[int] = None,
                          parameters: Optional[ConfigParameters] = None,
                          clustering: Optional[ClusteringRequest] = None,
                          deadlines: Optional[Deadlines] = None,
                          config_name: str = "session.toml",
                          overwrite: bool = False, **session_parameters) -> CertificateSet:
    """The one-machine shortcut: everyone's keys, cards and a session config in one folder.

    **Demo and test use only**: whoever runs this holds every party's private keys and can
    impersonate every party (:data:`IMPERSONATION_WARNING`). It runs the real ceremony
    (:func:`protocols._cards.generate_keys` for the coordinator and each party, then
    :func:`protocols._cards.new_session_config` from their cards) in one folder, and the
    config also records where each private key lies, so ``serve`` / ``join`` need no
    ``--keys``.

    Files written into ``out_dir`` (created with mode 0700 if missing; an existing one must
    be yours, not writable by group or others, and not a symbolic link: see
    :func:`protocols._files.prepare_private_folder`): for the coordinator and every party
    ``<name>.key`` (TLS key, 0600), ``<name>.pem`` (self-signed certificate) and
    ``<name>.card.toml``; for every party ``<name>.identity.pem``
    (Ed25519 identity key, 0600); and ``config_name``. Nothing is written when any
    argument is invalid or, without ``overwrite``, when any target exists; symbolic links
    are refused always.

    Parameters
    ----------
    out_dir : path
    parties : sequence of str
        Party names: unique, 1-64 characters from [A-Za-z0-9_.-].
    coordinator : str
        The coordinator's name (its certificate's CN); must differ from every party.
    days : int
        Validity of every certificate, 1 to 3650 days.
    coordinator_address : str
        ``host:port`` written to the config.
    coordinator_hosts : sequence of str
        Extra DNS names / IP addresses for the coordinator certificate.
    mode, integrity, adversaries, parameters, clustering, deadlines
        Written to the config (defaults: masked, :class:`ConfigParameters`, ...); so is
        any other ``[session]`` parameter of the parameter table (``session_parameters``).
    config_name : str
        File name of the session config.
    overwrite : bool
        Replace existing files (never symbolic links).

    Returns
    -------
    CertificateSet

    Examples
    --------
    >>> import tempfile
    >>> from protocols import generate_certificates
    >>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
    >>> [p.key.name for p in certs.parties]
    ['a.key', 'b.key', 'c.key']
    """
    from ._config import PartyEntry, TLSSettings, new_session_id

    if isinstance(parties, str) or not hasattr(parties, "__iter__"):
        raise ParameterError(f"parties must be a list of names, got {parties!r}")
    parties = [validate_party_name(p) for p in parties]
    coordinator = validate_party_name(coordinator, what="coordinator name")
    duplicates = sorted({p for p in parties if parties.count(p) > 1})
    if duplicates:
        raise ParameterError(f"party names must be unique; repeated: {', '.join(duplicates)}")
    if coordinator in parties:
        raise ParameterError(f"the coordinator name {coordinator!r} is also a party name")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ParameterError(f"days must be an integer in [1, 3650], got {days!r}")
    if not isinstance(config_name, str) or not config_name or os.sep in config_name \
            or config_name in (".", ".."):
        raise ParameterError(f"config_name must be a plain file name, got {config_name!r}")
    host, _ = split_address(coordinator_address)
    hosts = [h for h in [host, *coordinator_hosts] if h not in ("0.0.0.0", "::", "")]

    directory = Path(out_dir).absolute()
    config_path = directory / config_name
    targets = [directory / f for f in key_file_names(coordinator, "coordinator").values()]
    for name in parties:
        targets += [directory / f for f in key_file_names(name).values()]
    if config_path in targets:
        raise ParameterError(f"config_name {config_name!r} collides with a key or card "
                             "file name")
    targets.append(config_path)

    # Validate every session setting before writing anything (placeholder keys, no TLS).
    SessionConfig(session_id=new_session_id(), coordinator=coordinator_address, mode=mode,
                  integrity=integrity, adversaries=adversaries,
                  parameters=parameters if parameters is not None else ConfigParameters(),
                  clustering=clustering if clustering is not None else ClusteringRequest(),
                  deadlines=deadlines if deadlines is not None else Deadlines(),
                  tls=TLSSettings(enabled=False),
                  parties=tuple(PartyEntry(p, i.to_bytes(32, "big"))
                                for i, p in enumerate(parties)), **session_parameters)
    from ._cards import general_name
    for h in hosts:
        general_name(h)
    links = [str(t) for t in targets if t.is_symlink()]
    if links:
        raise ParameterError(f"refusing to write through symbolic links: {', '.join(links)}")
    if not overwrite:
        existing = [str(t) for t in targets if t.exists()]
        if existing:
            raise ParameterError(f"refusing to overwrite existing files: {', '.join(existing)} "
                                 "(pass overwrite=True / --force to replace them)")
    prepare_private_folder(directory)

    hub = generate_keys(directory, coordinator, role="coordinator", hosts=hosts, days=days,
                        overwrite=overwrite)
    written = [generate_keys(directory, name, days=days, overwrite=overwrite)
               for name in parties]
    cards = [load_card(files.card) for files in written]
    config = new_session_config(cards, load_card(hub.card), coordinator_address, mode=mode,
                                integrity=integrity, adversaries=adversaries,
                                parameters=parameters, clustering=clustering,
                                deadlines=deadlines, **session_parameters)
    config = config.with_keys(coordinator, directory)
    for name in parties:
        config = config.with_keys(name, directory)
    dump_session_config(config, config_path, overwrite=overwrite)
    logger.info("%s", IMPERSONATION_WARNING)
    party_files = tuple(
        PartyFiles(name=f.name, cert=f.certificate, key=f.tls_key,
                   identity_key=f.identity_key, identity_public_key=c.identity_public_key,
                   certificate_sha256=c.certificate_sha256, card=f.card,
                   fingerprint=f.fingerprint)
        for f, c in zip(written, cards))
    return CertificateSet(directory=directory, coordinator=coordinator,
                          coordinator_cert=hub.certificate, coordinator_key=hub.tls_key,
                          coordinator_card=hub.card, coordinator_fingerprint=hub.fingerprint,
                          parties=party_files, config=config_path,
                          session_id=config.session_id, fingerprint=config.fingerprint)


# --- reading certificates and credentials ------------------------------------------------

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


def server_credentials(cert, key, ca) -> grpc.ServerCredentials:
    """Mutual-TLS server credentials: the server's cert and key; clients must present a
    certificate that chains to ``ca`` (client authentication REQUIRED).

    ``ca`` is the trusted certificates: the parties' pinned self-signed certificates
    concatenated, or a CA certificate. Each argument is a path or PEM bytes; a key file
    that group or others may read is refused.
    """
    return grpc.ssl_server_credentials(
        [(_read_key(key), _read(cert, "TLS certificate"))],
        root_certificates=_read(ca, "trusted certificates"), require_client_auth=True)


def channel_credentials(cert, key, ca) -> grpc.ChannelCredentials:
    """Mutual-TLS channel credentials: trust ``ca`` (the coordinator's pinned certificate,
    or a CA) and present ``cert`` / ``key``.

    Each argument is a path or PEM bytes; a key file that group or others may read is
    refused.
    """
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "trusted certificate"),
        private_key=_read_key(key),
        certificate_chain=_read(cert, "TLS certificate"))


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


def coordinator_credentials(config: SessionConfig) -> grpc.ServerCredentials:
    """Server credentials of the coordinator from a session config (TLS must be on).

    Trusts exactly the parties' pinned certificates (or the CA of an older config);
    checks first that the coordinator's key matches its certificate.
    """
    check_own_keys(config, config.tls.coordinator_name or "")
    return server_credentials(*config.coordinator_tls())


def party_credentials(config: SessionConfig, name: str) -> grpc.ChannelCredentials:
    """Channel credentials of party ``name`` from a session config.

    Checks that the party's certificate names it and matches the pinned fingerprint, and
    that its TLS and identity keys are the ones pinned for it (:func:`check_own_keys`), so
    a mix-up of files or cards fails here, naming the party, rather than as a refused
    connection.
    """
    files = config.party_tls(name)
    cert = _load_certificate(files.cert, f"TLS certificate of party {name!r}")
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [name]:
        raise ParameterError(f"the TLS certificate of party {name!r} names {names}, "
                             f"expected [{name!r}]")
    pinned = config.party(name).certificate_sha256
    if pinned is not None and certificate_sha256(cert) != pinned:
        raise ParameterError(f"the TLS certificate {str(files.cert)!r} does not match the "
                             f"certificate_sha256 pinned for party {name!r}")
    check_own_keys(config, name)
    return channel_credentials(*files)


# --- servers and channels ----------------------------------------------------------------

def _options(options) -> list:
    merged = {"grpc.max_send_message_length": MAX_MESSAGE_BYTES,
              "grpc.max_receive_message_length": MAX_MESSAGE_BYTES}
    for key, value in (options.items() if isinstance(options, dict) else (options or ())):
        merged[key] = value
    return list(merged.items())


def keepalive_options(seconds: float) -> dict:
    """gRPC channel arguments, for a channel and a server alike: a ping after ``seconds``
    of silence, the connection closed when its answer has not come within as long, and
    pings that often accepted from the other end (0: none of it, gRPC's defaults).

    ``grpc.http2.ping_timeout_ms`` is what bounds the wait for the answer (grpcio 1.85:
    with ``grpc.keepalive_timeout_ms`` alone a half-open link was never noticed).

    >>> keepalive_options(30)["grpc.http2.ping_timeout_ms"]
    30000
    >>> keepalive_options(0)
    {}
    """
    if not seconds:
        return {}
    ms = int(round(seconds * 1000))
    return {"grpc.keepalive_time_ms": ms, "grpc.keepalive_timeout_ms": ms,
            "grpc.http2.ping_timeout_ms": ms,
            "grpc.keepalive_permit_without_calls": 1,
            "grpc.http2.max_pings_without_data": 0,
            # the other end pings this often: never a GOAWAY for "too many pings"
            "grpc.http2.min_ping_interval_without_data_ms": ms // 2,
            "grpc.http2.max_ping_strikes": 0}


def _choose(credentials, insecure: bool, what: str) -> None:
    if credentials is not None and insecure:
        raise ParameterError(f"{what}: pass either credentials or insecure=True, not both")
    if credentials is None and not insecure:
        raise ParameterError(f"{what}: TLS credentials are required (pass insecure=True "
                             "to run without TLS, which is insecure)")


def make_server(address: str = "127.0.0.1:0", credentials: Optional[grpc.ServerCredentials]
                = None, *, insecure: bool = False, max_workers: int = 8,
                options=None) -> tuple:
    """A gRPC server bound to ``address`` (not started yet), and its port.

    Add servicers (``add_..._to_server(servicer, server)`` or
    ``server.add_generic_rpc_handlers``), then ``server.start()``; finish with
    ``server.stop(grace)``.

    Parameters
    ----------
    address : str
        ``host:port``; port 0 picks a free port (returned).
    credentials : grpc.ServerCredentials
        From :func:`server_credentials` / :func:`coordinator_credentials`.
    insecure : bool
        Listen without TLS; must be asked for explicitly and logs a WARNING.
    max_workers : int
        Threads serving RPCs.
    options : dict or sequence of (key, value)
        gRPC channel arguments, added to the defaults (message-size limits of
        :data:`MAX_MESSAGE_BYTES`, no SO_REUSEPORT).

    Returns
    -------
    (grpc.Server, int)

    Examples
    --------
    >>> from protocols import make_server
    >>> server, port = make_server("127.0.0.1:0", insecure=True)   # logs a warning
    >>> port > 0
    True
    >>> server.stop(None).wait()
    True
    """
    _choose(credentials, insecure, "make_server")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="omnifc-grpc"),
                         options=_options({"grpc.so_reuseport": 0, **dict(_options(options))}))
    try:
        if insecure:
            logger.warning("gRPC server on %s WITHOUT TLS: peers are not authenticated and "
                           "traffic is not encrypted", address)
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as error:
        server.stop(None)
        raise ParameterError(f"could not listen on {address!r}: {_bind_cause(address)} "
                             f"({error}); is the address local and the port free?") from None
    if not port:
        server.stop(None)
        raise ParameterError(f"could not listen on {address!r}: {_bind_cause(address)}; is "
                             "the address local and the port free?")
    return server, port


def _bind_cause(address: str) -> str:
    """Why ``address`` cannot be bound, in the operating system's words ("Address already in
    use", "Cannot assign requested address"), found by binding a plain socket to it (gRPC
    itself only logs the cause in its C++ log)."""
    import socket

    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, int(port)))
    except (OSError, ValueError) as error:
        return getattr(error, "strerror", None) or str(error)
    return "the port could be bound a moment later (taken briefly by another program?)"


def make_channel(target: str, credentials: Optional[grpc.ChannelCredentials] = None, *,
                 insecure: bool = False, options=None) -> grpc.Channel:
    """A gRPC channel to ``target`` (``host:port``), mutual TLS unless ``insecure=True``.

    No target-name override is needed on loopback: every certificate carries the SANs
    localhost, 127.0.0.1 and ::1. ``insecure=True`` logs a WARNING.

    >>> from protocols import make_channel
    >>> channel = make_channel("127.0.0.1:1", insecure=True)   # logs a warning
    >>> channel.close()
    """
    _choose(credentials, insecure, "make_channel")
    if insecure:
        logger.warning("gRPC channel to %s WITHOUT TLS: the server is not authenticated and "
                       "traffic is not encrypted", target)
        return grpc.insecure_channel(target, options=_options(options))
    return grpc.secure_channel(target, credentials, options=_options(options))


# --- peer identity ---------------------------------------------------------------------

def _auth_value(context, key: str) -> Optional[bytes]:
    try:
        values = context.auth_context().get(key) or []
    except Exception:  # noqa: BLE001 - a context without auth data
        return None
    return values[0] if values else None


def peer_common_name(context) -> Optional[str]:
    """The CN of the authenticated TLS peer of a gRPC call, or None without TLS.

    ``context`` is the ``grpc.ServicerContext`` of the call. With mutual TLS (client
    authentication required) the CN is the party id the certificate was issued for.
    """
    value = _auth_value(context, "x509_common_name")
    return None if value is None else value.decode("utf-8", "replace")


def peer_certificate_sha256(context) -> Optional[bytes]:
    """SHA-256 of the DER of the TLS peer's certificate, or None without TLS."""
    pem = _auth_value(context, "x509_pem_cert")
    if pem is None:
        return None
    return certificate_sha256(x509.load_pem_x509_certificate(pem))


def authenticated_party(context, config: SessionConfig, claimed: Optional[str] = None, *,
                        phase: str = "join") -> Optional[str]:
    """The party a gRPC caller is, proven by its TLS certificate; checked against the config.

    The certificate's CN must be a party of ``config``, equal ``claimed`` when given, and
    its SHA-256 must equal the pinned ``certificate_sha256`` when one is pinned. With TLS
    disabled in the config nothing can be checked and ``claimed`` is returned as is.

    Raises
    ------
    PeerError
        Naming the claimed (or certified) party and ``phase``.
    """
    if config.insecure:
        return claimed
    name = peer_common_name(context)
    if name is None:
        raise PeerError("the connection carries no authenticated TLS certificate",
                        party=claimed, phase=phase)
    if name not in config.party_names:
        raise PeerError(f"the TLS certificate names {name!r}, which is not a party of this "
                        "session", party=claimed if claimed is not None else name, phase=phase)
    if claimed is not None and name != claimed:
        raise PeerError(f"claims to be {claimed!r} but its TLS certificate names {name!r}",
                        party=claimed, phase=phase)
    pinned = config.party(name).certificate_sha256
    if pinned is not None and peer_certificate_sha256(context) != pinned:
        raise PeerError("the TLS certificate does not match the certificate_sha256 pinned in "
                        "the session config", party=name, phase=phase)
    return name

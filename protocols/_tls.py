"""Certificates for a session and the gRPC plumbing that uses them (mutual TLS by default).

:func:`generate_certificates` writes a throwaway CA, an ECDSA P-256 certificate for the
coordinator and for each party, each party's Ed25519 identity key and a ready-to-use
session config that pins every party's identity key and certificate fingerprint. The CA's
private key is never written: once the certificates are signed it is discarded, so nobody
can issue another certificate for the session.

:func:`make_server` and :func:`make_channel` are the one place where gRPC servers and
channels are made: TLS with client authentication required, unless ``insecure=True`` is
asked for explicitly (which logs a WARNING). :func:`peer_common_name` and
:func:`authenticated_party` let a servicer check that the TLS identity of a caller is the
party it claims to be.

Examples
--------
>>> import tempfile
>>> from protocols import generate_certificates, load_session_config
>>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
>>> load_session_config(certs.config).party_names
('a', 'b', 'c')
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from finite_field import ParameterError, PeerError

from ._config import (ClusteringRequest, Deadlines, PartyEntry, SessionConfig,
                      ConfigParameters, TLSSettings, dump_session_config, new_session_id,
                      split_address, validate_party_name)
from ._identity import (generate_identity, public_key_bytes, save_identity,
                        write_private_file)

__all__ = ["CertificateSet", "PartyFiles", "generate_certificates", "certificate_sha256",
           "server_credentials", "channel_credentials", "coordinator_credentials",
           "party_credentials", "make_server", "make_channel", "peer_common_name",
           "peer_certificate_sha256", "authenticated_party", "MAX_MESSAGE_BYTES",
           "LOOPBACK_HOSTS"]

logger = logging.getLogger("omnifc.tls")

#: Explicit gRPC message-size limit (send and receive). Payloads travel in chunks well
#: below gRPC's default 4 MB; 8 MB leaves room for framing without inviting huge messages.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024

#: Subject alternative names every certificate carries, so loopback needs no name override.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

_CLOCK_SKEW = datetime.timedelta(minutes=5)


# --- certificate generation ------------------------------------------------------------

@dataclass(frozen=True)
class PartyFiles:
    """What :func:`generate_certificates` wrote for one party."""

    name: str
    cert: Path
    key: Path
    identity_key: Path
    identity_public_key: bytes
    certificate_sha256: bytes


@dataclass(frozen=True)
class CertificateSet:
    """Paths written by :func:`generate_certificates` (no key material in memory)."""

    directory: Path
    ca_cert: Path
    coordinator: str
    coordinator_cert: Path
    coordinator_key: Path
    parties: tuple
    config: Path
    session_id: str

    def party(self, name: str) -> PartyFiles:
        for files in self.parties:
            if files.name == name:
                return files
        raise ParameterError(f"no certificates for party {name!r}; have "
                             f"{', '.join(repr(p.name) for p in self.parties)}")

    @property
    def files(self) -> list:
        """Every file written, CA and coordinator first, the session config last."""
        out = [self.ca_cert, self.coordinator_cert, self.coordinator_key]
        for p in self.parties:
            out += [p.cert, p.key, p.identity_key]
        return out + [self.config]

    @property
    def private_files(self) -> list:
        """The files holding private keys (mode 0600)."""
        return [self.coordinator_key] + [f for p in self.parties for f in (p.key,
                                                                           p.identity_key)]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "omnifc session"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise ParameterError(f"host names for certificates must be DNS names or IP "
                             f"addresses, got {host!r}")
    try:
        host.encode("ascii")
    except UnicodeEncodeError:
        raise ParameterError(f"host names for certificates must be ASCII (use the "
                             f"punycode form), got {host!r}") from None
    return x509.DNSName(host)


def _issue(common_name: str, public_key, ca_key, ca_name: x509.Name, *, now, days: int,
           hosts: Sequence[str], server: bool) -> x509.Certificate:
    # Only the coordinator serves; party certificates are client-only, so a party's
    # certificate can never pass as the coordinator's, even on one machine.
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    names = []
    for host in hosts:
        general = _general_name(host)
        if general not in names:
            names.append(general)
    ca_public = ca_key.public_key()
    return (x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def _make_ca(session_id: str, *, now, days: int):
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"omnifc session CA {session_id[:16]}")
    cert = (x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return key, name, cert


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_public(path: Path, data: bytes, *, overwrite: bool) -> None:
    try:
        with open(path, "wb" if overwrite else "xb") as handle:
            os.fchmod(handle.fileno(), 0o644)  # public, but never writable by others
            handle.write(data)
    except FileExistsError:
        raise ParameterError(f"refusing to overwrite existing file {str(path)!r}") from None


def generate_certificates(out_dir, parties: Sequence[str], coordinator: str = "coordinator",
                          days: int = 30, *, coordinator_address: str = "127.0.0.1:50051",
                          coordinator_hosts: Sequence[str] = (), mode: str = "masked",
                          parameters: Optional[ConfigParameters] = None,
                          clustering: Optional[ClusteringRequest] = None,
                          deadlines: Optional[Deadlines] = None,
                          config_name: str = "session.toml",
                          overwrite: bool = False) -> CertificateSet:
    """Write a throwaway CA, TLS certificates, identity keys and a session config.

    Files written into ``out_dir`` (created with mode 0700 if missing):

    - ``ca.pem``: the session CA certificate (its private key is discarded);
    - ``<coordinator>.pem`` / ``<coordinator>.key``: the coordinator's certificate and key;
    - ``<party>.pem`` / ``<party>.key`` / ``<party>.identity.pem`` for each party: TLS
      certificate and key, and the Ed25519 identity key;
    - ``config_name``: the session config pinning every party's identity public key and
      certificate SHA-256.

    TLS keys are ECDSA P-256; every certificate has CN = its name, extended key usage
    serverAuth + clientAuth, and SANs localhost, 127.0.0.1 and ::1 (the coordinator's also
    the host of ``coordinator_address`` and ``coordinator_hosts``). Private keys are
    written with mode 0600.

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
        Extra DNS names / IP addresses for the coordinator certificate (for deployments
        beyond loopback).
    mode, parameters, clustering, deadlines
        Written to the config (defaults: masked, :class:`ConfigParameters`, ...).
    config_name : str
        File name of the session config.
    overwrite : bool
        Replace existing files; by default any existing target file is refused before
        anything is written.

    Returns
    -------
    CertificateSet

    Raises
    ------
    ParameterError
        Invalid names, days or session parameters (checked before anything is written),
        or existing files without ``overwrite``.

    Examples
    --------
    >>> import tempfile
    >>> from protocols import generate_certificates
    >>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
    >>> [p.cert.name for p in certs.parties]
    ['a.pem', 'b.pem', 'c.pem']
    """
    if isinstance(parties, str) or not hasattr(parties, "__iter__"):
        raise ParameterError(f"parties must be a list of names, got {parties!r}")
    parties = [validate_party_name(p) for p in parties]
    coordinator = validate_party_name(coordinator, what="coordinator name")
    duplicates = sorted({p for p in parties if parties.count(p) > 1})
    if duplicates:
        raise ParameterError(f"party names must be unique; repeated: {', '.join(duplicates)}")
    if coordinator in parties:
        raise ParameterError(f"the coordinator name {coordinator!r} is also a party name")
    if "ca" in parties + [coordinator]:
        raise ParameterError("'ca' is reserved (ca.pem is the CA certificate); choose "
                             "another name")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ParameterError(f"days must be an integer in [1, 3650], got {days!r}")
    if not isinstance(config_name, str) or not config_name or os.sep in config_name \
            or config_name in (".", ".."):
        raise ParameterError(f"config_name must be a plain file name, got {config_name!r}")
    host, _ = split_address(coordinator_address)

    directory = Path(out_dir).absolute()
    ca_path = directory / "ca.pem"
    coord_cert, coord_key = directory / f"{coordinator}.pem", directory / f"{coordinator}.key"
    party_paths = {p: (directory / f"{p}.pem", directory / f"{p}.key",
                       directory / f"{p}.identity.pem") for p in parties}
    config_path = directory / config_name
    targets = [ca_path, coord_cert, coord_key, config_path]
    targets += [f for files in party_paths.values() for f in files]
    if len(set(targets)) != len(targets):
        raise ParameterError(f"config_name {config_name!r} collides with a certificate or "
                             "key file name")

    # Validate every session setting before writing anything (placeholder identity keys).
    session_id = new_session_id()
    tls = TLSSettings(enabled=True, ca=ca_path, coordinator_cert=coord_cert,
                      coordinator_key=coord_key)
    draft = SessionConfig(
        session_id=session_id, coordinator=coordinator_address, mode=mode,
        parameters=parameters if parameters is not None else ConfigParameters(),
        clustering=clustering if clustering is not None else ClusteringRequest(),
        deadlines=deadlines if deadlines is not None else Deadlines(), tls=tls,
        parties=tuple(PartyEntry(p, i.to_bytes(32, "big")) for i, p in enumerate(parties)))
    server_hosts = list(LOOPBACK_HOSTS) + [h for h in [host, *coordinator_hosts]
                                           if h not in ("0.0.0.0", "::", "")]
    for h in server_hosts:
        _general_name(h)

    if not overwrite:
        existing = [str(t) for t in targets if t.exists()]
        if existing:
            raise ParameterError(f"refusing to overwrite existing files: {', '.join(existing)} "
                                 "(pass overwrite=True / --force to replace them)")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, ca_name, ca_cert = _make_ca(session_id, now=now, days=days)

    def issue(name: str, cert_path: Path, key_path: Path, hosts, server: bool) -> bytes:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(name, key.public_key(), ca_key, ca_name, now=now, days=days,
                      hosts=hosts, server=server)
        write_private_file(key_path, _key_pem(key), overwrite=overwrite)
        _write_public(cert_path, cert.public_bytes(serialization.Encoding.PEM),
                      overwrite=overwrite)
        return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()

    _write_public(ca_path, ca_cert.public_bytes(serialization.Encoding.PEM),
                  overwrite=overwrite)
    issue(coordinator, coord_cert, coord_key, server_hosts, server=True)
    written, entries = [], []
    for name in parties:
        cert_path, key_path, identity_path = party_paths[name]
        digest = issue(name, cert_path, key_path, LOOPBACK_HOSTS, server=False)
        identity = generate_identity()
        save_identity(identity, identity_path, overwrite=overwrite)
        raw = public_key_bytes(identity)
        written.append(PartyFiles(name, cert_path, key_path, identity_path, raw, digest))
        entries.append(PartyEntry(name, raw, digest, cert_path, key_path, identity_path))
    del ca_key  # the CA key is never written: no further certificate can be issued

    config = draft.with_(parties=tuple(entries))
    if not overwrite and config_path.exists():  # pragma: no cover - raced by another writer
        raise ParameterError(f"refusing to overwrite existing file {str(config_path)!r}")
    dump_session_config(config, config_path)
    logger.info("wrote a session CA, certificates for %s and %d parties, and %s",
                coordinator, len(parties), config_path)
    return CertificateSet(directory=directory, ca_cert=ca_path, coordinator=coordinator,
                          coordinator_cert=coord_cert, coordinator_key=coord_key,
                          parties=tuple(written), config=config_path, session_id=session_id)


# --- reading certificates and credentials ------------------------------------------------

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
    """Mutual-TLS server credentials: the server's cert and key, clients must present a
    certificate signed by ``ca`` (client authentication REQUIRED).

    Each argument is a path or PEM bytes.
    """
    return grpc.ssl_server_credentials(
        [(_read(key, "TLS private key"), _read(cert, "TLS certificate"))],
        root_certificates=_read(ca, "CA certificate"), require_client_auth=True)


def channel_credentials(cert, key, ca) -> grpc.ChannelCredentials:
    """Mutual-TLS channel credentials: trust ``ca`` and present ``cert`` / ``key``.

    Each argument is a path or PEM bytes.
    """
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "CA certificate"),
        private_key=_read(key, "TLS private key"),
        certificate_chain=_read(cert, "TLS certificate"))


def coordinator_credentials(config: SessionConfig) -> grpc.ServerCredentials:
    """Server credentials of the coordinator from a session config (TLS must be on).

    The certificate and key are parsed and matched first, so a damaged file is named here
    instead of failing later as a port that cannot be bound.
    """
    files = config.coordinator_tls()
    cert = _load_certificate(files.cert, f"the coordinator's TLS certificate "
                                         f"{str(files.cert)!r}")
    try:
        key = serialization.load_pem_private_key(_read(files.key, "TLS private key"), None)
    except (ValueError, TypeError):
        raise ParameterError(f"the coordinator's TLS private key {str(files.key)!r} is not "
                             "a readable unencrypted PEM private key (damaged?)") from None
    if key.public_key().public_bytes(serialization.Encoding.DER,
                                     serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo):
        raise ParameterError(f"the coordinator's TLS private key {str(files.key)!r} does not "
                             f"belong to its certificate {str(files.cert)!r}")
    return server_credentials(*files)


def party_credentials(config: SessionConfig, name: str) -> grpc.ChannelCredentials:
    """Channel credentials of party ``name`` from a session config.

    Checks that the party's certificate names it and matches the pinned fingerprint, so a
    mix-up of files fails here rather than as a refused connection.
    """
    files = config.party_tls(name)
    cert = _load_certificate(files.cert, f"TLS certificate of party {name!r}")
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [name]:
        raise ParameterError(f"the TLS certificate {str(files.cert)!r} names {names}, "
                             f"expected [{name!r}]")
    pinned = config.party(name).certificate_sha256
    if pinned is not None and certificate_sha256(cert) != pinned:
        raise ParameterError(f"the TLS certificate {str(files.cert)!r} does not match the "
                             f"certificate_sha256 pinned for party {name!r}")
    return channel_credentials(*files)


# --- servers and channels ----------------------------------------------------------------

def _options(options) -> list:
    merged = {"grpc.max_send_message_length": MAX_MESSAGE_BYTES,
              "grpc.max_receive_message_length": MAX_MESSAGE_BYTES}
    for key, value in (options.items() if isinstance(options, dict) else (options or ())):
        merged[key] = value
    return list(merged.items())


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
        raise ParameterError(f"could not listen on {address!r} ({error}); is the address "
                             "local and the port free?") from None
    if not port:
        server.stop(None)
        raise ParameterError(f"could not listen on {address!r}; is the address local and "
                             "the port free?")
    return server, port


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

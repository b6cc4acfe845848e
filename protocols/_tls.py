"""The gRPC plumbing of a session: credentials, servers, channels and peer identity
(mutual TLS by default).

Trust is by pinning, with no certificate authority: every certificate is self-signed; the
coordinator's TLS server trusts exactly the parties' certificates embedded in the session
config (client authentication required) and every party trusts exactly the coordinator's.
Configs written by older versions (a session CA file) still work. Reading certificates and
keys, and checking them against the config, is :mod:`protocols._certificates`; the
one-machine demo ceremony (``omnifc certs``) is :mod:`protocols._demo_certificates`.

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
>>> from protocols import coordinator_credentials, generate_certificates, load_session_config
>>> certs = generate_certificates(tempfile.mkdtemp(), ["a", "b", "c"])
>>> type(coordinator_credentials(load_session_config(certs.config))).__name__
'ServerCredentials'
"""

from __future__ import annotations

import logging
from concurrent import futures
from typing import Optional

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from finite_field import ParameterError, PeerError

from ._certificates import (_load_certificate, _read, _read_key, certificate_sha256,
                            check_own_keys)
from ._config import SessionConfig

__all__ = ["server_credentials", "channel_credentials", "coordinator_credentials",
           "party_credentials", "make_server", "make_channel", "peer_common_name",
           "peer_certificate_sha256", "authenticated_party", "MAX_MESSAGE_BYTES"]

logger = logging.getLogger(__name__)

#: Explicit gRPC message-size limit (send and receive). Payloads travel in chunks well
#: below gRPC's default 4 MB; 8 MB leaves room for framing without inviting huge messages.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


# --- credentials -------------------------------------------------------------------------

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

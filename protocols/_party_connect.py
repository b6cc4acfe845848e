"""A party's connection to the coordinator: a bounded wait until the channel is ready, and
why it is not (TCP refused, or the TLS handshake refused by either side).

:func:`_wait_until_ready` says why it waits after the first 5 s, then only when the cause
changes or the wait has doubled; :func:`_diagnose` finds the cause with a plain TCP
connection and a direct TLS handshake, so that a refused certificate fails at once, naming
it, instead of after the whole join deadline. :func:`_connection_error` is how a party
reports a failure of its connection (also used by :mod:`protocols._grpc_party` when the
stream breaks).
"""

from __future__ import annotations

import logging
import os
import time

import grpc

from finite_field import PeerError

from ._fail_closed import COORDINATOR
from ._party import Party

__all__: list = []

logger = logging.getLogger(__name__)


def _connection_error(party: Party, phase: str, what: str, kind=PeerError) -> PeerError:
    """A failure of the connection to the coordinator, as this party reports it (the
    error's ``party`` is the coordinator's end: where the problem is seen)."""
    return kind(f"{what} (phase {phase!r})", party=COORDINATOR, phase=phase,
                reporter=f"party {party.party_id!r}")


def _wait_until_ready(channel, target: str, connect_timeout: float, tls_files,
                      party: Party) -> None:
    """Wait (bounded) for the channel; stop on TLS failure. Says why it waits after the
    first 5 s, then only when the cause changes or the wait has doubled (5, 10, 20, 40 s,
    ...): a few lines for a long join deadline, not one every 5 s."""
    ready = grpc.channel_ready_future(channel)
    start = time.monotonic()
    cause = "no answer"
    said, next_report = None, 0.0
    while True:
        remaining = connect_timeout - (time.monotonic() - start)
        try:
            ready.result(timeout=max(0.0, min(5.0, remaining)))
            return
        except grpc.FutureTimeoutError:
            pass
        fatal, cause = _diagnose(target, tls_files)
        if fatal:
            ready.cancel()
            raise _connection_error(party, "join", f"TLS handshake with {target} failed: "
                                    f"{cause}")
        waited = time.monotonic() - start
        if waited >= connect_timeout:
            ready.cancel()
            raise _connection_error(party, "join", f"could not establish a connection to "
                                    f"{target} within {connect_timeout:g} s ({cause}); is "
                                    f"`omnifc serve` running there?")
        if cause != said or waited >= next_report:
            logger.warning("waiting for the coordinator at %s (%s): %.0f of %g s", target,
                           cause, waited, connect_timeout)
            said, next_report = cause, 2 * max(waited, 1.0)


def _tls_context(tls_files):
    """An ``ssl`` client context with this party's certificate and key, trusting what the
    config trusts; ``TLSFiles`` entries are paths, or PEM bytes where the config embeds
    them (written to a private temporary folder for the ssl module, then removed)."""
    import ssl
    import tempfile

    ca = tls_files.ca
    context = ssl.create_default_context(
        **({"cadata": bytes(ca).decode("ascii")} if isinstance(ca, (bytes, bytearray))
           else {"cafile": str(ca)}))
    cert = tls_files.cert
    if isinstance(cert, (bytes, bytearray)):
        with tempfile.TemporaryDirectory() as folder:  # created 0700
            path = os.path.join(folder, "cert.pem")
            with open(path, "wb") as handle:
                handle.write(bytes(cert))
            context.load_cert_chain(path, str(tls_files.key))
    else:
        context.load_cert_chain(str(cert), str(tls_files.key))
    return context


def _diagnose(target: str, tls_files) -> tuple:
    """``(fatal, cause)`` of a channel that is not ready: TCP, then a direct TLS handshake."""
    import socket
    import ssl

    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    try:
        sock = socket.create_connection((host, int(port)), timeout=2.0)
    except (OSError, ValueError) as error:
        return False, f"connection refused: {getattr(error, 'strerror', None) or error}"
    if tls_files is None:
        sock.close()
        return False, "the port accepts connections but gRPC is not ready"
    try:
        context = _tls_context(tls_files)
        context.set_alpn_protocols(["h2"])
        with context.wrap_socket(sock, server_hostname=host) as tls:
            tls.settimeout(2.0)
            try:
                tls.recv(1)  # TLS 1.3: a refused client certificate shows up here
            except (TimeoutError, socket.timeout):
                pass
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as error:
        # the peer hung up without a TLS alert (a restart, a proxy, a dropped connection):
        # nothing was refused, keep waiting (an alert below is what a refusal looks like)
        return False, f"connection closed during the TLS handshake ({error.reason})"
    except ssl.SSLCertVerificationError as error:
        return True, (f"the coordinator's certificate does not verify against this config's "
                      f"pinned coordinator certificate (CERTIFICATE_VERIFY_FAILED: "
                      f"{error.verify_message}); is this config from another session?")
    except ssl.SSLError as error:
        return True, (f"the coordinator refused this party's certificate ({error.reason}); "
                      "is the coordinator running another session's config?")
    except OSError as error:
        return False, f"connection closed during the TLS handshake ({error})"
    finally:
        sock.close()
    return False, "TLS handshake succeeded but gRPC is not ready"

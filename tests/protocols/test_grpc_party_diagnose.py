"""What a party concludes from a coordinator address that does not speak gRPC yet
(``_diagnose``): only a refused certificate is fatal. A TLS server that completes the
handshake and then closes (a restarting coordinator, a proxy, a slow connection) is a
reason to keep waiting, not to give up."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest

from protocols import generate_certificates, load_session_config
from protocols._party_connect import _diagnose

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]


def _pem_file(folder: Path, name: str, data) -> str:
    if isinstance(data, (bytes, bytearray)):
        path = folder / name
        path.write_bytes(bytes(data))
        return str(path)
    return str(data)


class OneShotTLSServer:
    """Accepts one TCP connection on 127.0.0.1, does the TLS handshake as the coordinator
    (trusting ``trusted``), then closes at once: with TLS's close_notify, or ``abrupt``ly
    (TCP's FIN alone, which the client reads as an EOF in violation of the protocol)."""

    def __init__(self, coordinator_tls, trusted_pem, abrupt=False, hang_up_on_hello=False):
        self.abrupt, self.hang_up_on_hello = abrupt, hang_up_on_hello
        folder = Path(tempfile.mkdtemp())
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(_pem_file(folder, "c.pem", coordinator_tls.cert),
                                     _pem_file(folder, "c.key", coordinator_tls.key))
        self.context.load_verify_locations(cadata=bytes(trusted_pem).decode("ascii"))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.set_alpn_protocols(["h2"])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(20)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        conn.settimeout(10)
        if self.hang_up_on_hello:  # read the ClientHello, then close mid-handshake
            try:
                conn.recv(65536)
            finally:
                conn.close()
            return
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
            if self.abrupt:  # handshake done: the bare socket closes, TLS never says so
                socket.socket(fileno=tls.detach()).close()
            else:
                tls.close()  # close_notify, no HTTP/2
        except (ssl.SSLError, OSError):
            pass  # the client was refused: the alert went out

    def close(self):
        self.sock.close()
        self.thread.join(timeout=20)


@pytest.fixture(scope="module")
def config():
    folder = tempfile.mkdtemp()
    certs = generate_certificates(folder, ["a", "b", "c"])
    return load_session_config(certs.config)


@pytest.mark.parametrize("abrupt", [False, True])
def test_a_handshake_followed_by_a_close_is_a_reason_to_wait(config, abrupt):
    coordinator = config.coordinator_tls()
    server = OneShotTLSServer(coordinator, coordinator.ca, abrupt)  # trusts the parties
    try:
        fatal, cause = _diagnose(f"127.0.0.1:{server.port}", config.party_tls("a"))
    finally:
        server.close()
    assert fatal is False, cause
    assert "certificate" not in cause


def test_a_hang_up_in_the_middle_of_the_handshake_is_a_reason_to_wait(config):
    coordinator = config.coordinator_tls()
    server = OneShotTLSServer(coordinator, coordinator.ca, hang_up_on_hello=True)
    try:
        fatal, cause = _diagnose(f"127.0.0.1:{server.port}", config.party_tls("a"))
    finally:
        server.close()
    assert fatal is False, cause
    assert "closed during the TLS handshake" in cause


def test_a_refused_party_certificate_is_fatal(config):
    coordinator = config.coordinator_tls()
    other = load_session_config(generate_certificates(tempfile.mkdtemp(), ["x", "y", "z"])
                                .config)
    server = OneShotTLSServer(coordinator, other.coordinator_tls().ca)  # trusts others only
    try:
        fatal, cause = _diagnose(f"127.0.0.1:{server.port}", config.party_tls("a"))
    finally:
        server.close()
    assert fatal is True
    assert "refused this party's certificate" in cause

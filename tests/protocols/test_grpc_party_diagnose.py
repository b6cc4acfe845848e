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
from types import SimpleNamespace

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


# -- every cause, exactly; the context from files or embedded PEM ---------------------------

def _closed_port(family=socket.AF_INET, host="127.0.0.1"):
    server = socket.create_server((host, 0), family=family)
    port = server.getsockname()[1]
    server.close()  # nothing listens there now
    return port


def test_a_closed_port_is_a_refused_connection_to_wait_for():
    assert _diagnose(f"127.0.0.1:{_closed_port()}", None) == \
        (False, "connection refused: Connection refused")


def test_an_ipv6_address_in_brackets_is_split_at_its_last_colon():
    port = _closed_port(socket.AF_INET6, "::1")
    assert _diagnose(f"[::1]:{port}", None) == (False, "connection refused: Connection refused")


def test_a_port_that_accepts_without_tls_files_is_not_ready_yet():
    server = socket.create_server(("127.0.0.1", 0))
    try:
        result = _diagnose(f"127.0.0.1:{server.getsockname()[1]}", None)
    finally:
        server.close()
    assert result == (False, "the port accepts connections but gRPC is not ready")


class SilentTLSServer(OneShotTLSServer):
    """Completes the handshake (ALPN h2), then says nothing until closed."""

    def _serve(self):
        import time
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
            self.alpn = tls.selected_alpn_protocol()
            for _ in range(200):  # bounded: at most 20 s, until the client hangs up
                time.sleep(0.1)
                if self.sock.fileno() == -1:
                    break
            tls.close()
        except (ssl.SSLError, OSError):
            pass


def _as_files(folder: Path, tls) -> SimpleNamespace:
    """The endpoint's TLS files as paths (a config may embed them as PEM)."""
    return SimpleNamespace(cert=Path(_pem_file(folder, "p.pem", tls.cert)),
                           key=Path(_pem_file(folder, "p.key", tls.key)),
                           ca=Path(_pem_file(folder, "ca.pem", tls.ca)))


@pytest.mark.slow  # the client's 2 s read timeout runs out
@pytest.mark.parametrize("as_paths", [False, True])
def test_a_handshake_that_holds_is_tls_up_and_grpc_not_ready(config, as_paths, tmp_path,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    coordinator = config.coordinator_tls()
    files = config.party_tls("a")
    if as_paths:
        files = _as_files(Path(tempfile.mkdtemp()), files)
    server = SilentTLSServer(coordinator, coordinator.ca)
    try:
        result = _diagnose(f"127.0.0.1:{server.port}", files)
    finally:
        server.close()
    assert result == (False, "TLS handshake succeeded but gRPC is not ready")
    assert server.alpn == "h2"  # it offered HTTP/2, as a gRPC client does
    assert list(tmp_path.iterdir()) == []  # an embedded certificate is never left behind


def test_a_coordinator_certificate_from_another_session_is_fatal(config):
    other = load_session_config(generate_certificates(tempfile.mkdtemp(), ["x", "y", "z"])
                                .config)
    coordinator = other.coordinator_tls()
    server = OneShotTLSServer(coordinator, config.coordinator_tls().ca)
    try:
        fatal, cause = _diagnose(f"127.0.0.1:{server.port}", config.party_tls("a"))
    finally:
        server.close()
    assert fatal is True
    assert cause.startswith("the coordinator's certificate does not verify against this "
                            "config's pinned coordinator certificate (CERTIFICATE_VERIFY_FAILED: ")
    assert cause.endswith("); is this config from another session?")


def test_a_refused_certificate_says_which_config_to_check(config):
    coordinator = config.coordinator_tls()
    other = load_session_config(generate_certificates(tempfile.mkdtemp(), ["x", "y", "z"])
                                .config)
    server = OneShotTLSServer(coordinator, other.coordinator_tls().ca)
    try:
        fatal, cause = _diagnose(f"127.0.0.1:{server.port}", config.party_tls("a"))
    finally:
        server.close()
    assert fatal is True and cause.startswith("the coordinator refused this party's "
                                              "certificate (")
    assert cause.endswith("); is the coordinator running another session's config?")


def test_a_port_that_is_not_a_number_is_a_reason_to_wait():
    assert _diagnose("127.0.0.1:grpc", None) == \
        (False, "connection refused: invalid literal for int() with base 10: 'grpc'")


def _in_thread(call, seconds):
    """``call()``'s result, or None when it did not return within ``seconds``."""
    out = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    return out[0] if out else None


@pytest.mark.slow  # the 2 s bounds run out
def test_a_peer_that_never_answers_is_given_up_on_within_seconds(config):
    # TCP accepted, then silence: the handshake is bounded (2 s), and so is the read after
    # a handshake that completes (SilentTLSServer); neither blocks the party's wait
    server = socket.create_server(("127.0.0.1", 0))
    try:
        result = _in_thread(lambda: _diagnose(f"127.0.0.1:{server.getsockname()[1]}",
                                              config.party_tls("a")), 15)
    finally:
        server.close()
    assert result is not None, "the handshake with a silent peer was not bounded"
    assert result[0] is False
    assert result[1].startswith("connection closed during the TLS handshake (") and \
        "timed out" in result[1]
    coordinator = config.coordinator_tls()
    silent = SilentTLSServer(coordinator, coordinator.ca)
    try:
        result = _in_thread(lambda: _diagnose(f"127.0.0.1:{silent.port}",
                                              config.party_tls("a")), 15)
    finally:
        silent.close()
    assert result == (False, "TLS handshake succeeded but gRPC is not ready")

"""Certificates for a session and mutual TLS over real gRPC on loopback (127.0.0.1:0).

Trust is by pinning self-signed certificates: the server trusts exactly the parties'
certificates, every party exactly the coordinator's; there is no CA.

Every call has a 5 s deadline and ``wait_for_ready=False``, so a refused handshake fails
fast with UNAVAILABLE instead of waiting. Servers are stopped in ``finally`` blocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import ipaddress
import os
import stat
import tomllib

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from finite_field import ParameterError, PeerError
from protocols import (MAX_MESSAGE_BYTES, authenticated_party, certificate_sha256,
                       channel_credentials, coordinator_credentials, generate_certificates,
                       load_identity, load_session_config, make_channel, make_server,
                       party_credentials, peer_certificate_sha256, peer_common_name,
                       public_key_bytes, server_credentials)
from protocols._cards import generate_keys
from protocols._tls import IMPERSONATION_WARNING, check_own_keys

#: run on the lowest and the highest protobuf (.ci/protobuf_matrix.sh)
pytestmark = pytest.mark.protobuf

METHOD = "/omnifc.test.Echo/Call"
TIMEOUT = 5.0
PARTIES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return generate_certificates(tmp_path_factory.mktemp("certs"), PARTIES)


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory):
    """Another session's certificates: the same names, other keys."""
    return generate_certificates(tmp_path_factory.mktemp("other"), PARTIES)


def _load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


# --- generated files ---------------------------------------------------------------------

def test_files_written_and_private_keys_are_0600(certs):
    expected = {"coordinator.pem", "coordinator.key", "coordinator.card.toml", "session.toml"}
    expected |= {f"{p}{suffix}" for p in PARTIES
                 for suffix in (".pem", ".key", ".identity.pem", ".card.toml")}
    assert set(os.listdir(certs.directory)) == expected  # no CA, no CA key
    assert stat.S_IMODE(certs.directory.stat().st_mode) == 0o700
    private = {certs.coordinator_key} | {f for p in certs.parties for f in (p.key, p.identity_key)}
    assert set(certs.private_files) == private
    for path in certs.files:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path in private:
            assert mode == 0o600, path
        elif path != certs.config:
            assert mode == 0o644, path
        else:
            assert not mode & 0o022, path


def test_certificates_parse_with_names_sans_and_key_usages(certs):
    loopback = {x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1"))}
    pairs = [("coordinator", certs.coordinator_cert, certs.coordinator_key)]
    pairs += [(p.name, p.cert, p.key) for p in certs.parties]
    for name, cert_path, key_path in pairs:
        cert = _load(cert_path)
        cert.verify_directly_issued_by(cert)  # raises unless validly self-signed
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] \
            == [name]
        sans = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
        assert loopback <= sans
        eku = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        # the coordinator only serves, parties only connect: neither can pass as the other
        assert eku == ({ExtendedKeyUsageOID.SERVER_AUTH} if name == "coordinator"
                       else {ExtendedKeyUsageOID.CLIENT_AUTH})
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
        assert cert.public_key().curve.name == "secp256r1"
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert key.public_key() == cert.public_key()
        lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert 30 * 86400 <= lifetime.total_seconds() <= 30 * 86400 + 3600


def test_session_toml_pins_der_fingerprints_and_identity_keys(certs):
    data = tomllib.loads(certs.config.read_text())  # parsed independently of our loader
    pinned = {p["name"]: p for p in data["parties"]}
    assert sorted(pinned) == PARTIES
    for files in certs.parties:
        der = _load(files.cert).public_bytes(serialization.Encoding.DER)
        assert pinned[files.name]["certificate_sha256"] == hashlib.sha256(der).hexdigest()
        identity = load_identity(files.identity_key)
        assert pinned[files.name]["identity_public_key"] == public_key_bytes(identity).hex()
        assert files.certificate_sha256 == hashlib.sha256(der).digest()
    assert data["session"]["id"] == certs.session_id and len(certs.session_id) == 32
    assert data["tls"]["enabled"] is True
    assert data["tls"]["coordinator_certificate"] == certs.coordinator_cert.read_text()
    for files in certs.parties:
        assert pinned[files.name]["certificate"] == files.cert.read_text()
    config = load_session_config(certs.config)
    # the coordinator trusts exactly the parties' certificates, each party the coordinator's
    assert config.coordinator_tls() == (certs.coordinator_cert.read_bytes(),
                                        certs.coordinator_key, _party_roots(certs))
    assert config.party_tls("b") == (certs.party("b").cert.read_bytes(), certs.party("b").key,
                                     certs.coordinator_cert.read_bytes())


def test_coordinator_address_host_and_extra_hosts_go_into_its_certificate(tmp_path):
    certs = generate_certificates(tmp_path, PARTIES, coordinator="hub",
                                  coordinator_address="10.1.2.3:7000",
                                  coordinator_hosts=["clustering.example.org"])
    sans = set(_load(certs.coordinator_cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value)
    assert x509.IPAddress(ipaddress.ip_address("10.1.2.3")) in sans
    assert x509.DNSName("clustering.example.org") in sans
    assert certs.coordinator_cert.name == "hub.pem"
    party_sans = set(_load(certs.party("a").cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value)
    assert x509.DNSName("clustering.example.org") not in party_sans


@pytest.mark.parametrize("parties, kwargs, match", [
    ([], {}, r"need at least 2l\+2t-1 = 3"),
    (["a", "b", ""], {}, "party name"),
    (["a", "b", "a"], {}, "repeated: a"),
    (["a", "b", "c d"], {}, "'c d'"),
    (["a", "b", "../x"], {}, "'../x'"),
    (["a", "b", "coordinator"], {}, "also a party name"),
    (PARTIES, {"coordinator_hosts": ["bad host"]}, "DNS names or IP"),
    ("abc", {}, "list of names"),
    (PARTIES, {"days": 0}, "days"),
    (PARTIES, {"coordinator_address": "nohost"}, "host:port"),
    (PARTIES, {"mode": "open"}, "mode"),
    (PARTIES, {"config_name": "a.pem"}, "collides"),
])
def test_invalid_requests_fail_before_anything_is_written(tmp_path, parties, kwargs, match):
    out = tmp_path / "out"
    with pytest.raises(ParameterError, match=match):
        generate_certificates(out, parties, **kwargs)
    assert not out.exists()


def test_refuses_to_overwrite_unless_asked(tmp_path):
    first = generate_certificates(tmp_path, PARTIES)
    before = {p: p.read_bytes() for p in first.files}
    with pytest.raises(ParameterError, match="refusing to overwrite"):
        generate_certificates(tmp_path, PARTIES)
    assert {p: p.read_bytes() for p in first.files} == before
    second = generate_certificates(tmp_path, PARTIES, overwrite=True)
    assert second.party("a").key.read_bytes() != before[first.party("a").key]
    assert stat.S_IMODE(second.party("a").key.stat().st_mode) == 0o600
    assert load_session_config(second.config).session_id == second.session_id


# --- gRPC over mutual TLS ----------------------------------------------------------------

def _echo(request: bytes, context) -> bytes:
    """Replies with what the server knows about the caller's TLS identity."""
    name = peer_common_name(context)
    digest = peer_certificate_sha256(context)
    return b"%s|%s|%s" % ((name or "-").encode(), (digest or b"").hex().encode(), request)


@contextlib.contextmanager
def _serve(credentials=None, *, insecure=False, handler=_echo, address="127.0.0.1:0"):
    server, port = make_server(address, credentials, insecure=insecure, max_workers=2)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "omnifc.test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(handler)})])
    server.start()
    try:
        yield port
    finally:
        server.stop(None).wait(TIMEOUT)


def _call(port, credentials=None, *, insecure=False, payload=b"ping", host="127.0.0.1"):
    with make_channel(f"{host}:{port}", credentials, insecure=insecure) as channel:
        stub = channel.unary_unary(METHOD)
        return stub(payload, timeout=TIMEOUT, wait_for_ready=False)


def _party_roots(certs, *extra) -> bytes:
    """What the coordinator trusts: the parties' pinned certificates, concatenated."""
    return b"".join(p.cert.read_bytes() for p in certs.parties) + \
        b"".join(path.read_bytes() for path in extra)


def _server_creds(certs, *extra):
    return server_credentials(certs.coordinator_cert, certs.coordinator_key,
                              _party_roots(certs, *extra))


def _client_creds(certs, name="a", trusted=None):
    files = certs.party(name)
    return channel_credentials(files.cert, files.key, trusted or certs.coordinator_cert)


@pytest.mark.network
def test_mutual_tls_round_trip_and_peer_identity(certs):
    with _serve(_server_creds(certs)) as port:
        for name in PARTIES:
            reply = _call(port, _client_creds(certs, name), payload=b"hello")
            cn, digest, payload = reply.split(b"|")
            assert cn.decode() == name
            assert bytes.fromhex(digest.decode()) == certs.party(name).certificate_sha256
            assert payload == b"hello"
        # SAN DNS:localhost covers the name without any target-name override
        assert _call(port, _client_creds(certs, "b"), host="localhost").startswith(b"b|")


@pytest.mark.network
def test_mutual_tls_over_ipv6_loopback(certs):
    try:
        probe, _ = make_server("[::1]:0", _server_creds(certs))
    except ParameterError:
        pytest.skip("this machine has no IPv6 loopback")
    probe.stop(None)
    with _serve(_server_creds(certs), address="[::1]:0") as port:
        assert _call(port, _client_creds(certs, "c"), host="[::1]").startswith(b"c|")


@pytest.mark.network
def test_credentials_from_the_session_config(certs):
    config = load_session_config(certs.config)
    with _serve(coordinator_credentials(config)) as port:
        assert _call(port, party_credentials(config, "c")).startswith(b"c|")
    # a party whose key files do not match what is pinned for it fails before connecting,
    # with an error naming it
    swapped = config.with_(parties=tuple(
        p if p.name != "a" else dataclasses.replace(p, key=config.party("b").key)
        for p in config.parties))
    with pytest.raises(ParameterError, match="not the key of the TLS certificate pinned for "
                                             "party 'a'"):
        party_credentials(swapped, "a")
    swapped = config.with_(parties=tuple(
        p if p.name != "a" else dataclasses.replace(p, identity_key=config.party("b").identity_key)
        for p in config.parties))
    with pytest.raises(ParameterError, match="does not match the identity_public_key pinned "
                                             "for party 'a'"):
        party_credentials(swapped, "a")


def _assert_refused(call):
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.network
def test_client_certificate_that_is_not_pinned_is_refused(certs, other_certs):
    with _serve(_server_creds(certs)) as port:
        # the same name 'a', trusts the right coordinator, but its certificate is not pinned
        foreign = channel_credentials(other_certs.party("a").cert, other_certs.party("a").key,
                                      certs.coordinator_cert)
        _assert_refused(lambda: _call(port, foreign))
        # the same call with a genuine certificate works (the refusal is about the cert)
        assert _call(port, _client_creds(certs, "a")).startswith(b"a|")


@pytest.mark.network
def test_client_without_certificate_is_refused(certs):
    with _serve(_server_creds(certs)) as port:
        anonymous = grpc.ssl_channel_credentials(
            root_certificates=certs.coordinator_cert.read_bytes())
        _assert_refused(lambda: _call(port, anonymous))


@pytest.mark.network
def test_a_party_certificate_cannot_serve_as_the_coordinator(certs):
    # A party (or anyone holding its key) that poses as the coordinator is refused by the
    # other parties: they trust the coordinator's pinned certificate only. (Party
    # certificates are also clientAuth-only, but BoringSSL does not check the extended key
    # usage of a certificate that is itself the trust anchor: the pin is what protects.)
    files = certs.party("b")
    with _serve(server_credentials(files.cert, files.key, _party_roots(certs))) as port:
        _assert_refused(lambda: _call(port, _client_creds(certs, "a")))
    with _serve(_server_creds(certs)) as port:  # the coordinator's own certificate works
        assert _call(port, _client_creds(certs, "a")).startswith(b"a|")


@pytest.mark.network
def test_server_that_is_not_the_pinned_coordinator_is_refused(certs, other_certs):
    with _serve(_server_creds(other_certs)) as port:
        _assert_refused(lambda: _call(port, _client_creds(certs, "a")))


@pytest.mark.network
def test_authenticated_party_checks_claim_membership_and_pin(certs, tmp_path):
    config = load_session_config(certs.config)
    stranger = generate_keys(tmp_path, "zed")  # a server that (wrongly) trusts it too
    # b pinned by a wrong SHA-256 only (no embedded certificate; a CA file stands in)
    repinned = config.with_(
        tls=dataclasses.replace(config.tls, ca=certs.coordinator_cert),
        parties=tuple(p if p.name != "b" else type(p)(p.name, p.identity_public_key,
                                                      b"\x00" * 32)
                      for p in config.parties))

    def handler(request, context):
        claimed, which = request.decode().split(",")
        try:
            name = authenticated_party(context, repinned if which == "repinned" else config,
                                       claimed or None, phase="join")
        except PeerError as error:
            return f"refused: {error}".encode()
        return f"ok: {name}".encode()

    with _serve(_server_creds(certs, stranger.certificate), handler=handler) as port:
        assert _call(port, _client_creds(certs, "a"), payload=b"a,config") == b"ok: a"
        assert _call(port, _client_creds(certs, "a"), payload=b",config") == b"ok: a"
        reply = _call(port, _client_creds(certs, "a"), payload=b"b,config").decode()
        assert reply.startswith("refused") and "claims to be 'b'" in reply
        outsider = channel_credentials(stranger.certificate, stranger.tls_key,
                                       certs.coordinator_cert)
        reply = _call(port, outsider, payload=b"a,config").decode()
        assert "not a party of this session" in reply
        reply = _call(port, _client_creds(certs, "b"), payload=b"b,repinned").decode()
        assert "does not match the certificate_sha256 pinned" in reply
        assert _call(port, _client_creds(certs, "b"), payload=b"b,config") == b"ok: b"


@pytest.mark.network
def test_message_size_limit_is_explicit(certs):
    assert MAX_MESSAGE_BYTES == 8 * 1024 * 1024
    with _serve(_server_creds(certs), handler=lambda r, c: r[:16]) as port:
        big = os.urandom(5 * 1024 * 1024)  # above gRPC's 4 MB default, below our limit
        assert _call(port, _client_creds(certs), payload=big) == big[:16]
        with pytest.raises(grpc.RpcError) as info:
            _call(port, _client_creds(certs), payload=b"\0" * (MAX_MESSAGE_BYTES + 1))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# --- insecure mode and helper rules --------------------------------------------------------

@pytest.mark.network
def test_insecure_only_when_asked_and_it_warns(certs, caplog):
    with pytest.raises(ParameterError, match="credentials are required"):
        make_server("127.0.0.1:0")
    with pytest.raises(ParameterError, match="credentials are required"):
        make_channel("127.0.0.1:1")
    with pytest.raises(ParameterError, match="not both"):
        make_server("127.0.0.1:0", _server_creds(certs), insecure=True)
    with pytest.raises(ParameterError, match="not both"):
        make_channel("127.0.0.1:1", _client_creds(certs), insecure=True)
    assert not caplog.records
    with caplog.at_level("WARNING", logger="protocols"):
        with _serve(insecure=True) as port:
            assert _call(port, insecure=True) == b"-||ping"  # no TLS peer identity
    server_warnings = [r for r in caplog.records if "server" in r.getMessage()
                       and "WITHOUT TLS" in r.getMessage()]
    channel_warnings = [r for r in caplog.records if "channel" in r.getMessage()
                        and "WITHOUT TLS" in r.getMessage()]
    assert server_warnings and channel_warnings
    assert all(r.levelname == "WARNING" and r.name == "protocols._tls"
               for r in server_warnings + channel_warnings)


@pytest.mark.network
def test_tls_client_cannot_talk_to_an_insecure_server(certs, caplog):
    with _serve(insecure=True) as port:
        _assert_refused(lambda: _call(port, _client_creds(certs)))


@pytest.mark.network
def test_a_busy_port_is_a_clear_error(certs):
    server, port = make_server("127.0.0.1:0", _server_creds(certs))
    try:
        with pytest.raises(ParameterError, match="could not listen"):
            make_server(f"127.0.0.1:{port}", _server_creds(certs))
    finally:
        server.stop(None)


def test_missing_tls_files_are_parameter_errors(certs, tmp_path):
    with pytest.raises(ParameterError, match="not found"):
        server_credentials(tmp_path / "missing.pem", certs.coordinator_key, _party_roots(certs))
    with pytest.raises(ParameterError, match="not found"):
        channel_credentials(certs.party("a").cert, certs.party("a").key, tmp_path / "ca.pem")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_tls_key_files_readable_by_group_or_others_are_refused(certs, tmp_path, mode):
    for key in (certs.coordinator_key, certs.party("a").key):
        loose = tmp_path / key.name
        loose.write_bytes(key.read_bytes())
        os.chmod(loose, mode)
        with pytest.raises(ParameterError, match=f"mode {oct(mode)}.*chmod 600"):
            server_credentials(certs.coordinator_cert, loose, _party_roots(certs))
        with pytest.raises(ParameterError, match=f"mode {oct(mode)}.*chmod 600"):
            channel_credentials(certs.party("a").cert, loose, certs.coordinator_cert)
    os.chmod(loose, 0o600)  # the same file, once private, is accepted
    channel_credentials(certs.party("a").cert, loose, certs.coordinator_cert)


def test_config_tls_key_with_wide_mode_is_refused_before_connecting(certs, tmp_path):
    config = load_session_config(certs.config)
    loose = tmp_path / "c.key"
    loose.write_bytes(certs.party("c").key.read_bytes())
    os.chmod(loose, 0o644)
    config = config.with_(parties=tuple(
        p if p.name != "c" else dataclasses.replace(p, key=loose) for p in config.parties))
    with pytest.raises(ParameterError, match="TLS private key file .*c.key.* mode 0o644"):
        party_credentials(config, "c")
    with pytest.raises(ParameterError, match="TLS private key file .*c.key.* mode 0o644"):
        check_own_keys(config, "c")


def test_generate_certificates_says_it_is_a_demo_shortcut(tmp_path, caplog):
    with caplog.at_level("INFO", logger="protocols"):
        generate_certificates(tmp_path, PARTIES)
    assert "impersonate every party" in IMPERSONATION_WARNING
    assert any(IMPERSONATION_WARNING in r.getMessage() for r in caplog.records)


def test_certificate_sha256_of_path_pem_and_der(certs):
    cert = _load(certs.party("a").cert)
    der = cert.public_bytes(serialization.Encoding.DER)
    expected = hashlib.sha256(der).digest()
    assert certificate_sha256(certs.party("a").cert) == expected
    assert certificate_sha256(certs.party("a").cert.read_bytes()) == expected
    assert certificate_sha256(der) == expected
    with pytest.raises(ParameterError, match="not a PEM or DER"):
        certificate_sha256(b"garbage")

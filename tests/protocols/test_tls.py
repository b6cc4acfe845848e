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
import logging
import os
import shutil
import stat
import tomllib

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from finite_field import ParameterError, PeerError
from protocols import (
    MAX_MESSAGE_BYTES,
    _certificates,
    _tls,
    authenticated_party,
    certificate_sha256,
    channel_credentials,
    coordinator_credentials,
    generate_certificates,
    load_identity,
    load_session_config,
    make_channel,
    make_server,
    party_credentials,
    peer_certificate_sha256,
    peer_common_name,
    public_key_bytes,
    server_credentials,
)
from protocols._cards import generate_keys
from protocols._config import ClusteringRequest, ConfigParameters, Deadlines, TLSSettings
from protocols._certificates import check_own_keys
from protocols._demo_certificates import IMPERSONATION_WARNING

#: run on the lowest and the highest protobuf (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.timeout(120)]

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


# -- folded in from test_tls_bites.py -----------------------------------------------------
# Tests that bite on protocols/_tls.py, _certificates.py and _demo_certificates.py (issue 14,
# mutation testing), without a network peer.
#
# Independent expectations: generated certificates and keys parsed back with
# ``cryptography``, hashes recomputed with ``hashlib``, the session config read back with
# the loader, exact error texts, and fake gRPC contexts (``auth_context()`` as gRPC documents
# it: a dict of lists of bytes) for the peer-identity checks. Servers are bound to
# 127.0.0.1:0 only and stopped; no connection is made.

def _der_sha256(path) -> bytes:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).digest()


# -- generate_certificates ------------------------------------------------------------

def test_constants():
    assert MAX_MESSAGE_BYTES == 8 * 1024 * 1024
    assert IMPERSONATION_WARNING.startswith("DEMO ONLY: this made every party's private keys")


def test_the_certificate_set_describes_what_was_written(certs):
    d = certs.directory
    assert d.is_absolute() and certs.coordinator == "coordinator"
    assert (certs.coordinator_cert, certs.coordinator_key, certs.coordinator_card) == (
        d / "coordinator.pem", d / "coordinator.key", d / "coordinator.card.toml")
    assert certs.config == d / "session.toml"
    config = load_session_config(certs.config)
    assert certs.session_id == config.session_id and certs.fingerprint == config.fingerprint
    assert config.coordinator == "127.0.0.1:50051"
    assert (config.mode, config.integrity) == ("masked", "detect")
    assert config.parameters == ConfigParameters()
    assert config.clustering == ClusteringRequest() and config.deadlines == Deadlines()
    assert [p.name for p in certs.parties] == PARTIES
    for files in certs.parties:
        n = files.name
        assert (files.cert, files.key, files.identity_key, files.card) == (
            d / f"{n}.pem", d / f"{n}.key", d / f"{n}.identity.pem", d / f"{n}.card.toml")
        assert files.certificate_sha256 == _der_sha256(files.cert)
        assert files.identity_public_key == public_key_bytes(load_identity(files.identity_key))
        entry = config.party(n)
        assert entry.certificate_sha256 == files.certificate_sha256
        assert entry.identity_public_key == files.identity_public_key
        assert entry.fingerprint == files.fingerprint
        assert entry.key == files.key and entry.identity_key == files.identity_key
        assert certs.party(n) is files
    assert config.tls.coordinator_key == certs.coordinator_key
    coordinator = x509.load_pem_x509_certificate(certs.coordinator_cert.read_bytes())
    assert config.tls.coordinator_certificate == coordinator.public_bytes(
        serialization.Encoding.PEM).decode()
    assert certs.coordinator_fingerprint == config.tls.coordinator_fingerprint
    # every private key is the key of its certificate
    for cert_path, key_path in [(certs.coordinator_cert, certs.coordinator_key)] + \
            [(p.cert, p.key) for p in certs.parties]:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_certificate_set_lists_and_lookup(certs):
    d = certs.directory
    expected = [d / "coordinator.key", d / "coordinator.pem", d / "coordinator.card.toml"]
    for n in PARTIES:
        expected += [d / f"{n}.key", d / f"{n}.identity.pem", d / f"{n}.pem",
                     d / f"{n}.card.toml"]
    assert certs.files == expected + [d / "session.toml"]
    assert certs.private_files == [d / "coordinator.key"] + [
        d / f"{n}{s}" for n in PARTIES for s in (".key", ".identity.pem")]
    with pytest.raises(ParameterError) as info:
        certs.party("z")
    assert str(info.value) == "no certificates for party 'z'; have 'a', 'b', 'c'"


def test_options_reach_the_config_and_the_certificates(tmp_path, caplog):
    params = ConfigParameters(scale_bits=10)
    clustering = ClusteringRequest(method="dbscan", n_clusters=None)
    deadlines = Deadlines(join=7.0)
    with caplog.at_level(logging.INFO, logger="protocols._demo_certificates"):
        certs = generate_certificates(tmp_path / "x", ["p", "q", "r"], "hub", 9,
                                      coordinator_address="hub.example:7000",
                                      coordinator_hosts=["10.0.0.2", "0.0.0.0"],
                                      mode="transparent", integrity="off",
                                      parameters=params, clustering=clustering,
                                      deadlines=deadlines, config_name="s.toml")
    assert IMPERSONATION_WARNING in caplog.text
    assert certs.config == (tmp_path / "x" / "s.toml").absolute()
    config = load_session_config(certs.config)
    assert config.coordinator == "hub.example:7000"
    assert (config.mode, config.integrity) == ("transparent", "off")
    assert config.parameters == params and config.clustering == clustering
    assert config.deadlines == deadlines
    assert config.tls.coordinator_name == "hub"
    cert = x509.load_pem_x509_certificate(certs.coordinator_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(v) for v in san.get_values_for_type(x509.DNSName)] == ["localhost",
                                                                       "hub.example"]
    assert [str(v) for v in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1",
                                                                         "10.0.0.2"]
    for path in [certs.coordinator_cert] + [p.cert for p in certs.parties]:
        c = x509.load_pem_x509_certificate(path.read_bytes())
        assert (c.not_valid_after_utc - c.not_valid_before_utc).days == 9


def test_a_wildcard_address_is_not_put_into_the_certificate(tmp_path):
    certs = generate_certificates(tmp_path, PARTIES, coordinator_address="[::1]:5",
                                  coordinator_hosts=["::"])
    cert = x509.load_pem_x509_certificate(certs.coordinator_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(v) for v in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]


def _gen_refusal(tmp_path, *args, **kwargs):
    out = tmp_path / "out"
    with pytest.raises(ParameterError) as info:
        generate_certificates(out, *args, **kwargs)
    assert not out.exists(), "nothing is written on a refusal"
    return str(info.value)


def test_generate_certificates_refusals(tmp_path):
    assert _gen_refusal(tmp_path, "abc") == "parties must be a list of names, got 'abc'"
    assert _gen_refusal(tmp_path, 5) == "parties must be a list of names, got 5"
    assert _gen_refusal(tmp_path, ["a", "b", "a", "c", "b"]) == \
        "party names must be unique; repeated: a, b"
    assert _gen_refusal(tmp_path, PARTIES, "b") == \
        "the coordinator name 'b' is also a party name"
    assert _gen_refusal(tmp_path, PARTIES, "-x").startswith(
        "coordinator name must be 1-64 characters")
    for days in (0, 3651, True, 1.5):
        assert _gen_refusal(tmp_path, PARTIES, days=days) == \
            f"days must be an integer in [1, 3650], got {days!r}"
    for name in ("", ".", "..", os.path.join("d", "s.toml"), 5):
        assert _gen_refusal(tmp_path, PARTIES, config_name=name) == \
            f"config_name must be a plain file name, got {name!r}"
    for name in ("coordinator.key", "b.identity.pem", "c.card.toml"):
        assert _gen_refusal(tmp_path, PARTIES, config_name=name) == \
            f"config_name {name!r} collides with a key or card file name"
    assert _gen_refusal(tmp_path, PARTIES, integrity="maybe").startswith(
        "[session] integrity must be one of")
    assert _gen_refusal(tmp_path, PARTIES, coordinator_address="bad host:1").startswith(
        "[session] coordinator must look like")
    assert _gen_refusal(tmp_path, PARTIES, coordinator_hosts=["ok.example", "bad/host"]) \
        .startswith("host names for certificates must be DNS names or IP addresses")
    assert _gen_refusal(tmp_path, PARTIES, coordinator_address="bücher.example:1") \
        .startswith("host names for certificates must be ASCII")


def test_generate_certificates_boundaries(tmp_path):
    for days in (1, 3650):
        certs = generate_certificates(tmp_path / str(days), PARTIES, days=days)
        c = x509.load_pem_x509_certificate(certs.coordinator_cert.read_bytes())
        assert (c.not_valid_after_utc - c.not_valid_before_utc).days == days


def test_existing_files_and_links_are_refused(tmp_path):
    first = generate_certificates(tmp_path, PARTIES)
    with pytest.raises(ParameterError) as info:
        generate_certificates(tmp_path, PARTIES)
    listed = ", ".join(str(p) for p in [tmp_path / "coordinator.key",
                                        tmp_path / "coordinator.pem",
                                        tmp_path / "coordinator.card.toml"] +
                       [tmp_path / f"{n}{s}" for n in PARTIES
                        for s in (".key", ".pem", ".card.toml", ".identity.pem")] +
                       [tmp_path / "session.toml"])
    assert str(info.value) == (f"refusing to overwrite existing files: {listed} (pass "
                               "overwrite=True / --force to replace them)")
    second = generate_certificates(tmp_path, PARTIES, overwrite=True)
    assert second.session_id != first.session_id
    assert load_session_config(second.config).session_id == second.session_id
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "b.pem").symlink_to(tmp_path / "b.pem")
    for overwrite in (False, True):
        with pytest.raises(ParameterError) as info:
            generate_certificates(other, PARTIES, overwrite=overwrite)
        assert str(info.value) == \
            f"refusing to write through symbolic links: {other / 'b.pem'}"
    assert os.listdir(other) == ["b.pem"]


# -- reading ----------------------------------------------------------------------------

def test_read_bytes_paths_and_refusals(tmp_path):
    assert _certificates._read(b"x", "w") == b"x"
    assert _certificates._read(bytearray(b"y"), "w") == b"y" and type(_certificates._read(bytearray(b"y"),
                                                                         "w")) is bytes
    (tmp_path / "f").write_bytes(b"z")
    assert _certificates._read(tmp_path / "f", "w") == b"z" and _certificates._read(str(tmp_path / "f"),
                                                                  "w") == b"z"
    with pytest.raises(ParameterError) as info:
        _certificates._read(None, "the thing")
    assert str(info.value) == "the thing is required"
    with pytest.raises(ParameterError) as info:
        _certificates._read(tmp_path / "missing", "the thing")
    assert str(info.value) == f"the thing file not found: {str(tmp_path / 'missing')!r}"
    with pytest.raises(ParameterError) as info:
        _certificates._read(tmp_path, "the thing")
    assert str(info.value) == f"the thing must be a file, got the folder {str(tmp_path)!r}"


def test_read_key_checks_files_only(tmp_path):
    assert _certificates._read_key(b"k") == b"k"
    assert _certificates._read_key(bytearray(b"k")) == b"k"
    with pytest.raises(ParameterError) as info:
        _certificates._read_key(None)
    assert str(info.value) == "TLS private key is required"
    with pytest.raises(ParameterError) as info:
        _certificates._read_key(None, "my key")
    assert str(info.value) == "my key is required"
    key = tmp_path / "k.key"
    key.write_bytes(b"secret")
    key.chmod(0o600)
    assert _certificates._read_key(key) == b"secret"
    key.chmod(0o644)
    with pytest.raises(ParameterError, match=r"^my key file .* has mode 0o644"):
        _certificates._read_key(key, "my key")
    with pytest.raises(ParameterError, match=r"^TLS private key file .* has mode 0o644"):
        _certificates._read_key(key)


def test_certificates_in_pem_der_and_refused(certs, tmp_path):
    pem = certs.party("a").cert.read_bytes()
    cert = x509.load_pem_x509_certificate(pem)
    der = cert.public_bytes(serialization.Encoding.DER)
    assert _certificates._load_certificate(pem) == cert
    assert _certificates._load_certificate(der) == cert
    assert certificate_sha256(der) == hashlib.sha256(der).digest()
    assert certificate_sha256(cert) == hashlib.sha256(der).digest()
    assert certificate_sha256(certs.party("a").cert) == hashlib.sha256(der).digest()
    for junk in (b"-----BEGIN nonsense", b"\x30\x03abc"):
        with pytest.raises(ParameterError) as info:
            _certificates._load_certificate(junk, "the cert")
        assert str(info.value) == "the cert is not a PEM or DER X.509 certificate"
    with pytest.raises(ParameterError) as info:
        _certificates._load_certificate(b"junk")
    assert str(info.value) == "certificate is not a PEM or DER X.509 certificate"
    with pytest.raises(ParameterError, match="^certificate is required$"):
        certificate_sha256(None)


# -- own keys and credentials ---------------------------------------------------------

def _copy(certs, tmp_path):
    """A private copy of the set (to break files in)."""
    target = tmp_path / "copy"
    shutil.copytree(certs.directory, target)
    config = load_session_config(target / "session.toml")
    for n in PARTIES:
        config = config.with_keys(n, target)
    return config.with_keys("coordinator", target), target


def test_own_keys_that_match_pass(certs):
    config = load_session_config(certs.config)
    for name in PARTIES + ["coordinator"]:
        check_own_keys(config, name)
    assert isinstance(party_credentials(config, "b"), grpc.ChannelCredentials)
    assert isinstance(coordinator_credentials(config), grpc.ServerCredentials)


def test_a_foreign_tls_key_is_refused_naming_the_owner(certs, tmp_path):
    config, folder = _copy(certs, tmp_path)
    shutil.copy(folder / "c.key", folder / "a.key")
    with pytest.raises(ParameterError) as info:
        check_own_keys(config, "a")
    assert str(info.value) == (
        f"the TLS key file {str(folder / 'a.key')!r} is not the key of the TLS certificate "
        "pinned for party 'a' in the session config: the config was assembled from another "
        "card than the one made with this key (or --keys points at the wrong folder); "
        "compare the card fingerprints")
    shutil.copy(folder / "b.key", folder / "coordinator.key")
    with pytest.raises(ParameterError) as info:
        check_own_keys(config, "coordinator")
    assert "pinned for the coordinator in the session config" in str(info.value)
    with pytest.raises(ParameterError, match="pinned for the coordinator"):
        coordinator_credentials(config)


def test_a_key_file_that_is_no_key_is_refused(certs, tmp_path):
    config, folder = _copy(certs, tmp_path)
    (folder / "b.key").write_bytes(b"not a key")
    with pytest.raises(ParameterError) as info:
        check_own_keys(config, "b")
    assert str(info.value) == (f"the TLS key file {str(folder / 'b.key')!r} does not hold an "
                               "unencrypted PEM private key")
    key = ec.generate_private_key(ec.SECP256R1())
    (folder / "b.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw")))
    with pytest.raises(ParameterError, match="does not hold an unencrypted PEM private key"):
        check_own_keys(config, "b")


def test_a_foreign_identity_key_is_refused(certs, tmp_path):
    config, folder = _copy(certs, tmp_path)
    shutil.copy(folder / "c.identity.pem", folder / "b.identity.pem")
    with pytest.raises(ParameterError) as info:
        check_own_keys(config, "b")
    assert str(info.value) == (
        f"the identity key file {str(folder / 'b.identity.pem')!r} does not match the "
        "identity_public_key pinned for party 'b' in the session config: the config was "
        "assembled from another card (or --keys points at the wrong folder); compare the "
        "card fingerprints")
    entry = dataclasses.replace(config.party("b"), identity_key=None)
    bare = config.with_(parties=tuple(entry if p.name == "b" else p for p in config.parties))
    with pytest.raises(ParameterError) as info:
        check_own_keys(bare, "b")
    assert str(info.value) == ("the session config gives no identity key file for party "
                               "'b': pass --keys DIR")


def test_party_credentials_check_the_certificate_file(certs, tmp_path):
    # an older config: certificate files, not embedded certificates
    config, folder = _copy(certs, tmp_path)
    entry = dataclasses.replace(config.party("a"), certificate=None, fingerprint=None,
                                cert=folder / "a.pem")
    tls = dataclasses.replace(config.tls, ca=folder / "coordinator.pem")
    old = config.with_(parties=tuple(entry if p.name == "a" else p for p in config.parties),
                       tls=tls)
    assert isinstance(party_credentials(old, "a"), grpc.ChannelCredentials)
    shutil.copy(folder / "b.pem", folder / "a.pem")  # the file names b
    with pytest.raises(ParameterError) as info:
        party_credentials(old, "a")
    assert str(info.value) == "the TLS certificate of party 'a' names ['b'], expected ['a']"
    # a certificate naming a, but not the pinned one
    generate_keys(tmp_path / "again", "a")
    shutil.copy(tmp_path / "again" / "a.pem", folder / "a.pem")
    with pytest.raises(ParameterError) as info:
        party_credentials(old, "a")
    assert str(info.value) == (f"the TLS certificate {str(folder / 'a.pem')!r} does not match "
                               "the certificate_sha256 pinned for party 'a'")
    # without a pin, the key check still catches the mix-up
    unpinned = dataclasses.replace(entry, certificate_sha256=None)
    loose = old.with_(parties=tuple(unpinned if p.name == "a" else p for p in old.parties))
    with pytest.raises(ParameterError, match="is not the key of the TLS certificate pinned "
                                             "for party 'a'"):
        party_credentials(loose, "a")


# -- servers and channels ---------------------------------------------------------------

def test_options_merge_over_the_size_limits():
    limits = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
              ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    assert _tls._options(None) == limits
    assert _tls._options({"x": 1}) == limits + [("x", 1)]
    assert _tls._options([("grpc.max_send_message_length", 5), ("y", 2)]) == \
        [("grpc.max_send_message_length", 5), limits[1], ("y", 2)]


def test_credentials_or_insecure_exactly_one():
    with pytest.raises(ParameterError) as info:
        _tls._choose(object(), True, "thing")
    assert str(info.value) == "thing: pass either credentials or insecure=True, not both"
    with pytest.raises(ParameterError) as info:
        _tls._choose(None, False, "thing")
    assert str(info.value) == ("thing: TLS credentials are required (pass insecure=True to "
                               "run without TLS, which is insecure)")
    _tls._choose(None, True, "thing")
    _tls._choose(object(), False, "thing")
    with pytest.raises(ParameterError, match="^make_server: TLS credentials are required"):
        make_server("127.0.0.1:0")
    with pytest.raises(ParameterError, match="^make_channel: TLS credentials are required"):
        make_channel("127.0.0.1:1")
    with pytest.raises(ParameterError, match="^make_channel: pass either"):
        make_channel("127.0.0.1:1", object(), insecure=True)


def test_make_server_binds_loopback_and_warns_when_insecure(certs, caplog):
    with caplog.at_level(logging.WARNING, logger="protocols._tls"):
        server, port = make_server("127.0.0.1:0", insecure=True)
    try:
        assert port > 0
        assert ("gRPC server on 127.0.0.1:0 WITHOUT TLS: peers are not authenticated and "
                "traffic is not encrypted") in caplog.text
    finally:
        server.stop(None)
    caplog.clear()
    config = load_session_config(certs.config)
    with caplog.at_level(logging.WARNING, logger="protocols._tls"):
        server, port = make_server("127.0.0.1:0", coordinator_credentials(config))
    try:
        assert port > 0 and "WITHOUT TLS" not in caplog.text
    finally:
        server.stop(None)


def test_make_server_refuses_an_address_it_cannot_bind():
    with pytest.raises(ParameterError) as info:
        make_server("192.0.2.1:0", insecure=True)  # TEST-NET-1: not a local address
    assert str(info.value).startswith("could not listen on '192.0.2.1:0'")
    assert str(info.value).endswith("is the address local and the port free?")


def test_make_channel_warns_when_insecure(caplog):
    with caplog.at_level(logging.WARNING, logger="protocols._tls"):
        channel = make_channel("127.0.0.1:1", insecure=True)
    channel.close()
    assert ("gRPC channel to 127.0.0.1:1 WITHOUT TLS: the server is not authenticated and "
            "traffic is not encrypted") in caplog.text


# -- peer identity ----------------------------------------------------------------------

class FakeContext:
    def __init__(self, values=None, broken=False):
        self.values, self.broken = values or {}, broken

    def auth_context(self):
        if self.broken:
            raise ValueError("no auth context")
        return self.values


def test_peer_values_from_the_auth_context(certs):
    pem = certs.party("b").cert.read_bytes()
    ctx = FakeContext({"x509_common_name": [b"b", b"ignored"], "x509_pem_cert": [pem]})
    assert peer_common_name(ctx) == "b"
    assert peer_certificate_sha256(ctx) == _der_sha256(certs.party("b").cert)
    for empty in (FakeContext(), FakeContext({"x509_common_name": []}),
                  FakeContext({"x509_common_name": None}), FakeContext(broken=True)):
        assert peer_common_name(empty) is None and peer_certificate_sha256(empty) is None
    assert peer_common_name(FakeContext({"x509_common_name": [b"\xff"]})) == "\ufffd"


def test_authenticated_party_checks(certs):
    config = load_session_config(certs.config)
    pem = {n: certs.party(n).cert.read_bytes() for n in PARTIES}

    def ctx(name, cert_of=None):
        return FakeContext({"x509_common_name": [name.encode()],
                            "x509_pem_cert": [pem[cert_of or name]]})

    assert authenticated_party(ctx("b"), config, "b") == "b"
    assert authenticated_party(ctx("b"), config) == "b"

    def refusal(context, claimed=None, **kwargs):
        with pytest.raises(PeerError) as info:
            authenticated_party(context, config, claimed, **kwargs)
        return str(info.value), info.value.party, info.value.phase

    assert refusal(FakeContext(), "a") == (
        "party 'a' in phase 'join': the connection carries no authenticated TLS "
        "certificate", "a", "join")
    assert refusal(ctx("z", "a"), "a", phase="shares") == (
        "party 'a' in phase 'shares': the TLS certificate names 'z', which is not a party of "
        "this session", "a", "shares")
    assert refusal(ctx("z", "a"))[1:] == ("z", "join")
    assert refusal(ctx("b"), "a") == (
        "party 'a' in phase 'join': claims to be 'a' but its TLS certificate names 'b'",
        "a", "join")
    assert refusal(ctx("b", "c"), "b") == (
        "party 'b' in phase 'join': the TLS certificate does not match the "
        "certificate_sha256 pinned in the session config", "b", "join")
    # without TLS nothing can be checked: the claim is returned as is
    insecure = config.with_(tls=dataclasses.replace(config.tls, enabled=False))
    assert authenticated_party(FakeContext(), insecure, "whoever") == "whoever"


def test_credentials_name_what_is_missing(certs, tmp_path):
    from protocols._tls import channel_credentials, server_credentials

    party = certs.party("a")
    key = party.key.read_bytes()
    cert = party.cert.read_bytes()
    hub = certs.coordinator_cert.read_bytes()
    assert isinstance(channel_credentials(cert, key, hub), grpc.ChannelCredentials)
    assert _refuse_text(channel_credentials, cert, key, None) == \
        "trusted certificate is required"
    assert _refuse_text(channel_credentials, None, key, hub) == "TLS certificate is required"
    assert _refuse_text(channel_credentials, cert, None, hub) == "TLS private key is required"
    assert _refuse_text(server_credentials, hub, key, None) == \
        "trusted certificates is required"
    assert _refuse_text(server_credentials, None, key, cert) == "TLS certificate is required"
    # a party's certificate file that holds no certificate is named as the party's
    config, folder = _copy(certs, tmp_path)
    entry = dataclasses.replace(config.party("a"), certificate=None, fingerprint=None,
                                cert=folder / "a.pem")
    old = config.with_(parties=tuple(entry if p.name == "a" else p for p in config.parties),
                       tls=dataclasses.replace(config.tls, ca=folder / "coordinator.pem"))
    (folder / "a.pem").write_bytes(b"junk")
    assert _refuse_text(party_credentials, old, "a") == \
        "TLS certificate of party 'a' is not a PEM or DER X.509 certificate"


def _refuse_text(factory, *args):
    with pytest.raises(ParameterError) as info:
        factory(*args)
    return str(info.value)


def test_make_channel_with_credentials_gives_a_secure_channel(certs):
    config = load_session_config(certs.config)
    channel = make_channel("127.0.0.1:1", party_credentials(config, "a"))
    try:
        assert isinstance(channel, grpc.Channel)
    finally:
        channel.close()


def test_a_bound_port_cannot_be_bound_again(caplog):
    # no SO_REUSEPORT: a second server on the same loopback port is refused (no connection
    # is made; both servers are only bound, never started)
    first, port = make_server("127.0.0.1:0", insecure=True)
    try:
        with pytest.raises(ParameterError) as info:
            make_server(f"127.0.0.1:{port}", insecure=True)
        text = str(info.value)
        assert text.startswith(f"could not listen on '127.0.0.1:{port}'")
        assert text.endswith("is the address local and the port free?")
    finally:
        first.stop(None)


def test_settings_that_the_session_refuses_are_refused_before_writing(tmp_path):
    assert _gen_refusal(tmp_path, PARTIES, parameters=ConfigParameters(segments=2)) == (
        "[[parties]] lists 3 parties; segments=2 and noise_segments=1 need at least "
        "2l+2t-1 = 5")
    assert _gen_refusal(tmp_path, PARTIES, clustering={"method": "kmeans"}) == \
        "clustering must be a ClusteringRequest, got dict"
    assert _gen_refusal(tmp_path, PARTIES, deadlines=5) == \
        "deadlines must be a Deadlines, got int"


def test_default_validity_is_30_days(certs):
    for path in [certs.coordinator_cert] + [p.cert for p in certs.parties]:
        c = x509.load_pem_x509_certificate(path.read_bytes())
        assert (c.not_valid_after_utc - c.not_valid_before_utc).days == 30


def test_a_coordinator_has_no_identity_file_to_collide_with(tmp_path):
    (tmp_path / "coordinator.identity.pem").write_text("someone else's file")
    certs = generate_certificates(tmp_path, PARTIES)
    assert (tmp_path / "coordinator.identity.pem").read_text() == "someone else's file"
    assert tmp_path / "coordinator.identity.pem" not in certs.files


def test_own_key_checks_name_the_file_and_the_certificate(certs, tmp_path):
    config, folder = _copy(certs, tmp_path)
    shutil.copy(folder / "b.key", folder / "coordinator.key")
    with pytest.raises(ParameterError) as info:
        check_own_keys(config, "coordinator")
    assert str(info.value) == (
        f"the TLS key file {str(folder / 'coordinator.key')!r} is not the key of the TLS "
        "certificate pinned for the coordinator in the session config: the config was "
        "assembled from another card than the one made with this key (or --keys points at "
        "the wrong folder); compare the card fingerprints")
    # older configs: certificate files that hold no certificate
    (folder / "junk.pem").write_bytes(b"junk")
    tls = TLSSettings(ca=folder / "coordinator.pem", coordinator_cert=folder / "junk.pem",
                      coordinator_key=folder / "coordinator.key")
    older = config.with_(tls=tls, parties=tuple(
        dataclasses.replace(p, certificate=None, fingerprint=None, cert=folder / "junk.pem")
        for p in config.parties))
    with pytest.raises(ParameterError) as info:
        check_own_keys(older, "coordinator")
    assert str(info.value) == \
        "the coordinator's TLS certificate is not a PEM or DER X.509 certificate"
    with pytest.raises(ParameterError) as info:
        check_own_keys(older, "b")
    assert str(info.value) == \
        "TLS certificate of party 'b' is not a PEM or DER X.509 certificate"


def test_make_server_binds_loopback_by_default(caplog):
    with caplog.at_level(logging.WARNING, logger="protocols._tls"):
        server, port = make_server(insecure=True)
    try:
        assert port > 0 and "gRPC server on 127.0.0.1:0 WITHOUT TLS" in caplog.text
    finally:
        server.stop(None)


def test_links_are_all_listed_and_the_demo_warning_logged_as_is(tmp_path, caplog):
    other = tmp_path / "o"
    other.mkdir(mode=0o700)
    (other / "a.pem").symlink_to(tmp_path / "x")
    (other / "c.key").symlink_to(tmp_path / "y")
    with pytest.raises(ParameterError) as info:
        generate_certificates(other, PARTIES)
    assert str(info.value) == ("refusing to write through symbolic links: "
                               f"{other / 'a.pem'}, {other / 'c.key'}")
    with caplog.at_level(logging.INFO, logger="protocols._demo_certificates"):
        generate_certificates(tmp_path / "d", PARTIES)
    assert [r.getMessage() for r in caplog.records
            if r.name == "protocols._demo_certificates"] == \
        [IMPERSONATION_WARNING]

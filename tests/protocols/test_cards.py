"""Tests that bite on protocols/_cards.py (issue 14, mutation testing).

Independent expectations: every generated certificate is parsed back with
``cryptography``'s own x509 API (subject, issuer, validity, each extension and its
criticality, the signature), the card's TOML is parsed with ``tomllib``, hashes are
recomputed with ``hashlib``, and each refusal is compared with its exact text.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
import stat

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from finite_field import ParameterError
from protocols import _cards
from protocols._cards import (LOOPBACK_HOSTS, ROLES, Card, KeyFiles, format_card,
                              general_name, generate_keys, key_file_names, load_card,
                              new_session_config, self_signed_certificate)
from protocols._config import ClusteringRequest, ConfigParameters, Deadlines
from protocols._fingerprint import card_fingerprint
from protocols._identity import load_identity, public_key_bytes

pytestmark = pytest.mark.timeout(120)

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem(cert) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _build(name, key, *, issuer_key=None, eku=None, not_after=None, cn=True):
    """A certificate built by hand (for the refusals)."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)] if cn else
                        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "x")])
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=2))
               .not_valid_after(not_after or now + datetime.timedelta(days=2)))
    if eku is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


# -- general_name ---------------------------------------------------------------------

def test_general_name_of_addresses_and_dns_names():
    assert general_name("127.0.0.1") == x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    assert general_name("::1") == x509.IPAddress(ipaddress.IPv6Address("::1"))
    assert general_name("example.org") == x509.DNSName("example.org")
    assert general_name("localhost") == x509.DNSName("localhost")


@pytest.mark.parametrize("host", ["", "a b", "tab\there", "a/b", None, b"hosts", "x\n"])
def test_general_name_refuses_what_is_no_host(host):
    with pytest.raises(ParameterError) as info:
        general_name(host)
    assert str(info.value) == ("host names for certificates must be DNS names or IP "
                               f"addresses, got {host!r}")


def test_general_name_refuses_non_ascii_names():
    with pytest.raises(ParameterError) as info:
        general_name("bücher.example")
    assert str(info.value) == ("host names for certificates must be ASCII (use the punycode "
                               "form), got 'bücher.example'")
    assert info.value.__cause__ is None and info.value.__suppress_context__


# -- self_signed_certificate ----------------------------------------------------------

def test_constants():
    assert LOOPBACK_HOSTS == ("localhost", "127.0.0.1", "::1")
    assert ROLES == ("party", "coordinator")


def test_a_party_certificate_parsed_back(key):
    cert = self_signed_certificate("alice", key, role="party", now=NOW)
    parsed = x509.load_pem_x509_certificate(cert.public_bytes(serialization.Encoding.PEM))
    subject = parsed.subject
    assert [(a.oid, a.value) for a in subject] == [
        (NameOID.ORGANIZATION_NAME, "omnifc"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "party"),
        (NameOID.COMMON_NAME, "alice")]
    assert parsed.issuer == subject
    assert parsed.public_key().public_numbers() == key.public_key().public_numbers()
    assert parsed.not_valid_before_utc == NOW - datetime.timedelta(minutes=5)
    assert parsed.not_valid_after_utc == NOW + datetime.timedelta(days=30)
    assert isinstance(parsed.signature_hash_algorithm, hashes.SHA256)
    parsed.verify_directly_issued_by(parsed)
    ext = parsed.extensions
    assert [e.oid for e in ext] == [x509.BasicConstraints.oid, x509.KeyUsage.oid,
                                    x509.ExtendedKeyUsage.oid,
                                    x509.SubjectAlternativeName.oid,
                                    x509.SubjectKeyIdentifier.oid]
    basic = ext.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical and basic.value.ca is False and basic.value.path_length is None
    usage = ext.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value == x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
        encipher_only=False, decipher_only=False)
    eku = ext.get_extension_for_class(x509.ExtendedKeyUsage)
    assert not eku.critical and list(eku.value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    san = ext.get_extension_for_class(x509.SubjectAlternativeName)
    assert not san.critical
    assert list(san.value) == [x509.DNSName("localhost"),
                               x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                               x509.IPAddress(ipaddress.ip_address("::1"))]
    ski = ext.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert not ski.critical
    assert ski.value == x509.SubjectKeyIdentifier.from_public_key(key.public_key())


def test_a_coordinator_certificate_with_hosts(key):
    cert = self_signed_certificate("hub", key, role="coordinator",
                                   hosts=["hub.example", "10.0.0.7", "localhost", "10.0.0.7"],
                                   days=3, now=NOW)
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value \
        == "coordinator"
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.SERVER_AUTH]
    san = list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    assert san == [x509.DNSName("localhost"),
                   x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                   x509.IPAddress(ipaddress.ip_address("::1")),
                   x509.DNSName("hub.example"),
                   x509.IPAddress(ipaddress.ip_address("10.0.0.7"))]  # no duplicates
    assert cert.not_valid_after_utc == NOW + datetime.timedelta(days=3)


def test_certificates_default_to_now_and_get_fresh_serials(key):
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    a = self_signed_certificate("a", key, role="party")
    b = self_signed_certificate("a", key, role="party")
    after = datetime.datetime.now(datetime.timezone.utc)
    start = a.not_valid_before_utc + datetime.timedelta(minutes=5)
    assert before <= start <= after
    assert a.not_valid_after_utc - a.not_valid_before_utc == \
        datetime.timedelta(days=30, minutes=5)
    assert a.serial_number != b.serial_number


def test_validity_starts_now_in_utc_whatever_the_local_time_zone(key, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-9")  # UTC+9
    time.tzset()
    try:
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        cert = self_signed_certificate("a", key, role="party")
        after = datetime.datetime.now(datetime.timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()
    start = cert.not_valid_before_utc + datetime.timedelta(minutes=5)
    assert before <= start <= after


def test_certificate_role_is_checked(key):
    with pytest.raises(ParameterError) as info:
        self_signed_certificate("a", key, role="admin")
    assert str(info.value) == "role must be one of ['party', 'coordinator'], got 'admin'"


def test_private_key_pem_is_unencrypted_pkcs8(key):
    pem = _cards._key_pem(key)
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    loaded = serialization.load_pem_private_key(pem, password=None)
    assert loaded.private_numbers() == key.private_numbers()


# -- Card -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def party_cert(key):
    return _pem(self_signed_certificate("alice", key, role="party"))


@pytest.fixture(scope="module")
def hub_cert(key):
    return _pem(self_signed_certificate("hub", key, role="coordinator",
                                        hosts=["hub.example", "10.1.2.3"]))


IDENTITY = bytes(range(32))


def test_card_properties(party_cert, hub_cert):
    card = Card("party", "alice", party_cert, IDENTITY)
    der = x509.load_pem_x509_certificate(party_cert.encode()).public_bytes(
        serialization.Encoding.DER)
    assert card.certificate_der == der
    assert card.certificate_sha256 == hashlib.sha256(der).digest()
    assert card.x509 == x509.load_pem_x509_certificate(party_cert.encode())
    assert card.fingerprint == card_fingerprint("party", "alice", IDENTITY, der)
    assert card.hosts == ["localhost", "127.0.0.1", "::1"]
    hub = Card("coordinator", "hub", hub_cert)
    assert hub.hosts == ["localhost", "hub.example", "127.0.0.1", "::1", "10.1.2.3"]
    assert hub.fingerprint == card_fingerprint("coordinator", "hub", None,
                                               hub.certificate_der)
    # a certificate without SANs has no hosts
    plain = Card("party", "bob", _pem(_build("bob", ec.generate_private_key(ec.SECP256R1()),
                                             eku=[ExtendedKeyUsageOID.CLIENT_AUTH])),
                 IDENTITY)
    assert plain.hosts == []
    # path is not part of equality (nor of the hash), as documented
    elsewhere = Card("party", "alice", party_cert, IDENTITY, path="x")
    assert elsewhere == card and hash(elsewhere) == hash(card) and elsewhere.path == "x"
    assert Card("party", "alice", party_cert, bytes(32)) != card


def test_card_normalizes_the_certificate_text(party_cert):
    messy = "\n\n" + party_cert.replace("\n", "\r\n") + "\n"
    card = Card("party", "alice", messy, IDENTITY)
    assert card.certificate == party_cert


def _refusal(*args, path=None):
    with pytest.raises(ParameterError) as info:
        Card(*args, path=path)
    return str(info.value)


def test_card_refusals(party_cert, hub_cert, key, tmp_path):
    where = "card 'alice'"
    assert _refusal("admin", "alice", party_cert, IDENTITY) == \
        f"{where}: role must be one of ['party', 'coordinator'], got 'admin'"
    assert _refusal("admin", "alice", party_cert, IDENTITY, path=tmp_path / "c.toml") == \
        (f"card 'alice' ({tmp_path / 'c.toml'}): role must be one of ['party', "
         "'coordinator'], got 'admin'")
    assert _refusal("party", "-x", party_cert, IDENTITY).startswith(
        "card '-x': name must be 1-64 characters")
    for identity in (None, bytes(31), bytes(33)):
        assert _refusal("party", "alice", party_cert, identity) == \
            f"{where}: a party card needs a 32-byte identity_public_key"
    assert _refusal("coordinator", "hub", hub_cert, IDENTITY) == \
        "card 'hub': a coordinator card has no identity key"
    for text in ("not a certificate", "é" + party_cert, None):
        assert _refusal("party", "alice", text, IDENTITY) == \
            f"{where}: the certificate is not a PEM X.509 certificate"
    assert _refusal("party", "bob", party_cert, IDENTITY) == \
        "card 'bob': the certificate names ['alice'], expected ['bob']"
    no_cn = _pem(_build("x", key, cn=False, eku=[ExtendedKeyUsageOID.CLIENT_AUTH]))
    assert _refusal("party", "alice", no_cn, IDENTITY) == \
        f"{where}: the certificate names [], expected ['alice']"
    other = ec.generate_private_key(ec.SECP256R1())
    forged = _pem(_build("alice", key, issuer_key=other,
                         eku=[ExtendedKeyUsageOID.CLIENT_AUTH]))
    assert _refusal("party", "alice", forged, IDENTITY) == \
        f"{where}: the certificate is not validly self-signed"
    no_eku = _pem(_build("alice", key))
    assert _refusal("party", "alice", no_eku, IDENTITY) == \
        f"{where}: the certificate of a party must allow client authentication"
    assert _refusal("coordinator", "alice", party_cert) == \
        f"{where}: the certificate of a coordinator must allow server authentication"
    server = _pem(_build("alice", key, eku=[ExtendedKeyUsageOID.SERVER_AUTH]))
    assert _refusal("party", "alice", server, IDENTITY) == \
        f"{where}: the certificate of a party must allow client authentication"
    past = datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alice")]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alice")]))
               .public_key(key.public_key()).serial_number(5)
               .not_valid_before(past - datetime.timedelta(days=1)).not_valid_after(past)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    expired = _pem(builder.sign(key, hashes.SHA256()))
    assert _refusal("party", "alice", expired, IDENTITY) == \
        f"{where}: the certificate expired on 2020-01-02; run keygen again"


def test_a_certificate_expiring_right_now_is_expired(key, monkeypatch):
    cert = _build("alice", key, eku=[ExtendedKeyUsageOID.CLIENT_AUTH])
    end = cert.not_valid_after_utc

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return end

    monkeypatch.setattr(_cards.datetime, "datetime", Frozen)
    with pytest.raises(ParameterError, match="the certificate expired on"):
        Card("party", "alice", _pem(cert), IDENTITY)

    class JustBefore(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return end - datetime.timedelta(seconds=1)

    monkeypatch.setattr(_cards.datetime, "datetime", JustBefore)
    assert Card("party", "alice", _pem(cert), IDENTITY).name == "alice"


# -- format_card and load_card --------------------------------------------------------

def test_format_card_is_the_documented_toml(party_cert, hub_cert):
    card = Card("party", "alice", party_cert, IDENTITY)
    text = format_card(card)
    lines = text.splitlines()
    assert lines[:4] == [
        "# omnifc public card of party 'alice'. It holds no secret: send it",
        "# to whoever assembles the session config, and read the fingerprint out to",
        "# the other organizations so they can check the copy that reached them.",
        "[card]"]
    assert text.endswith("\n") and not text.endswith("\n\n")
    table = tomllib.loads(text)
    assert table == {"card": {
        "format": 1, "role": "party", "name": "alice", "fingerprint": card.fingerprint,
        "identity_public_key": IDENTITY.hex(),
        "certificate_sha256": hashlib.sha256(card.certificate_der).hexdigest(),
        "hosts": ["localhost", "127.0.0.1", "::1"], "certificate": party_cert}}
    hub = tomllib.loads(format_card(Card("coordinator", "hub", hub_cert)))["card"]
    assert "identity_public_key" not in hub and hub["role"] == "coordinator"
    assert hub["hosts"] == ["localhost", "hub.example", "127.0.0.1", "::1", "10.1.2.3"]


def _write(tmp_path, text, name="c.card.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _load_refusal(path):
    with pytest.raises(ParameterError) as info:
        load_card(path)
    return str(info.value)


def test_load_card_round_trip(party_cert, hub_cert, tmp_path):
    card = Card("party", "alice", party_cert, IDENTITY)
    path = _write(tmp_path, format_card(card))
    loaded = load_card(str(path))
    assert loaded == card and loaded.path == path
    hub = Card("coordinator", "hub", hub_cert)
    assert load_card(_write(tmp_path, format_card(hub), "h.toml")) == hub
    # certificate_sha256 and hosts are optional
    table = tomllib.loads(format_card(card))["card"]
    text = "\n".join(line for line in format_card(card).splitlines()
                     if not line.startswith(("certificate_sha256", "hosts")))
    assert load_card(_write(tmp_path, text + "\n", "short.toml")) == card
    assert table["format"] == 1


def test_load_card_refusals(party_cert, tmp_path):
    card = Card("party", "alice", party_cert, IDENTITY)
    good = format_card(card)
    missing = tmp_path / "nope.toml"
    assert _load_refusal(missing) == f"card not found: {str(missing)!r}"
    path = _write(tmp_path, "[card\n")
    assert _load_refusal(path).startswith(f"{str(path)!r} is not a card (TOML): ")
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe[card]")
    assert _load_refusal(path).startswith(f"{str(path)!r} is not a card (TOML): ")
    for text in ("x = 1\n", "card = 3\n", good + "[other]\nx = 1\n"):
        path = _write(tmp_path, text)
        assert _load_refusal(path) == f"{str(path)!r} is not a card: expected one [card] table"
    path = _write(tmp_path, good.replace("[card]\n", "[card]\nzz = 1\naa = 2\n"))
    assert _load_refusal(path) == f"card {str(path)!r}: unknown keys ['aa', 'zz']"
    for old, new, shown in (("format = 1", "format = 2", "2"), ("format = 1\n", "", "None"),
                            ("format = 1", 'format = "1"', "'1'")):
        path = _write(tmp_path, good.replace(old, new))
        assert _load_refusal(path) == f"card {str(path)!r}: format must be 1, got {shown}"
    for key in ("role", "name", "fingerprint"):
        lines = [line for line in good.splitlines() if not line.startswith(f"{key} =")]
        path = _write(tmp_path, "\n".join(lines) + "\n")
        assert _load_refusal(path) == f"card {str(path)!r}: {key} is missing"
        path = _write(tmp_path, good.replace(f"{key} = ", f"{key} = 5 #", 1))
        assert _load_refusal(path) == f"card {str(path)!r}: {key} is missing"
    lines = good.split("certificate = ")[0]
    path = _write(tmp_path, lines)
    assert _load_refusal(path) == f"card {str(path)!r}: certificate is missing"
    for bad in ('"zz"', "5"):
        path = _write(tmp_path, good.replace(f'"{IDENTITY.hex()}"', bad))
        assert _load_refusal(path) == \
            f"card {str(path)!r}: identity_public_key must be hex"
    edited = good.replace('name = "alice"', 'name = "alice"', 1).replace(
        f'fingerprint = "{card.fingerprint}"', 'fingerprint = "AAAAA"')
    path = _write(tmp_path, edited)
    assert _load_refusal(path) == (
        f"card {str(path)!r}: its fingerprint 'AAAAA' does not match its contents "
        f"({card.fingerprint!r}); the card was edited or damaged")
    path = _write(tmp_path, good.replace(card.certificate_sha256.hex(), "00" * 32))
    assert _load_refusal(path) == \
        f"card {str(path)!r}: certificate_sha256 does not match its certificate"
    # the Card checks run with the card's path in the message
    path = _write(tmp_path, good.replace('role = "party"', 'role = "boss"'))
    assert _load_refusal(path) == (f"card 'alice' ({path}): role must be one of "
                                   "['party', 'coordinator'], got 'boss'")


# -- keygen ---------------------------------------------------------------------------

def test_key_file_names():
    assert key_file_names("a") == {"tls_key": "a.key", "certificate": "a.pem",
                                   "card": "a.card.toml", "identity_key": "a.identity.pem"}
    assert key_file_names("h", "coordinator") == {"tls_key": "h.key", "certificate": "h.pem",
                                                   "card": "h.card.toml"}


def test_keyfiles_lists(tmp_path):
    files = KeyFiles("a", "party", tmp_path, tmp_path / "k", tmp_path / "c", tmp_path / "t",
                     tmp_path / "i", "FP")
    assert files.private_files == [tmp_path / "k", tmp_path / "i"]
    assert files.files == [tmp_path / "k", tmp_path / "i", tmp_path / "c", tmp_path / "t"]
    hub = KeyFiles("h", "coordinator", tmp_path, tmp_path / "k", tmp_path / "c",
                   tmp_path / "t", None, "FP")
    assert hub.private_files == [tmp_path / "k"]
    assert hub.files == [tmp_path / "k", tmp_path / "c", tmp_path / "t"]


def test_generate_party_keys_writes_consistent_files(tmp_path, caplog):
    folder = tmp_path / "alice"
    with caplog.at_level(logging.INFO, logger="protocols._cards"):
        files = generate_keys(str(folder), "alice", days=7)
    assert [r.getMessage() for r in caplog.records if r.name == "protocols._cards"] == [
        f"wrote the keys and card of party 'alice' to {folder}"]
    assert (files.name, files.role, files.directory) == ("alice", "party", folder)
    assert files.tls_key == folder / "alice.key" and files.certificate == folder / "alice.pem"
    assert files.card == folder / "alice.card.toml"
    assert files.identity_key == folder / "alice.identity.pem"
    assert sorted(os.listdir(folder)) == ["alice.card.toml", "alice.identity.pem",
                                          "alice.key", "alice.pem"]
    for private in (files.tls_key, files.identity_key):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = serialization.load_pem_private_key(files.tls_key.read_bytes(), password=None)
    cert = x509.load_pem_x509_certificate(files.certificate.read_bytes())
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == \
        datetime.timedelta(days=7, minutes=5)
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    card = load_card(files.card)
    identity = load_identity(files.identity_key)
    assert card.identity_public_key == public_key_bytes(identity)
    assert card.certificate == files.certificate.read_text()
    assert files.fingerprint == card.fingerprint


def test_generate_coordinator_keys_with_hosts(tmp_path):
    files = generate_keys(tmp_path / "hub", "hub", role="coordinator",
                          hosts=("hub.example", "10.0.0.9"))
    assert files.identity_key is None and files.role == "coordinator"
    assert sorted(os.listdir(tmp_path / "hub")) == ["hub.card.toml", "hub.key", "hub.pem"]
    card = load_card(files.card)
    assert card.role == "coordinator" and card.identity_public_key is None
    assert card.hosts == ["localhost", "hub.example", "127.0.0.1", "::1", "10.0.0.9"]
    cert = card.x509
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == \
        datetime.timedelta(days=30, minutes=5)


def test_generate_keys_refusals(tmp_path):
    def refusal(*args, **kwargs):
        with pytest.raises(ParameterError) as info:
            generate_keys(tmp_path / "out", *args, **kwargs)
        return str(info.value)

    assert refusal("-bad").startswith("party name must be 1-64 characters")
    assert refusal("-bad", role="coordinator").startswith(
        "coordinator name must be 1-64 characters")
    assert refusal("a", role="boss") == \
        "role must be one of ['party', 'coordinator'], got 'boss'"
    for days in (0, 3651, True, 2.0, "3"):
        assert refusal("a", days=days) == \
            f"days must be an integer in [1, 3650], got {days!r}"
    assert refusal("a", hosts=["h.example"]) == \
        "only the coordinator's certificate carries host names"
    assert refusal("h", role="coordinator", hosts=["ok.example", "a b"]).startswith(
        "host names for certificates must be DNS names or IP addresses")
    assert not (tmp_path / "out").exists(), "nothing is created before the checks pass"
    generate_keys(tmp_path / "d1", "a", days=1)
    generate_keys(tmp_path / "d2", "a", days=3650)


def test_generate_keys_refuses_existing_files_and_links(tmp_path):
    folder = tmp_path / "a"
    first = generate_keys(folder, "a")
    with pytest.raises(ParameterError) as info:
        generate_keys(folder, "a")
    names = ", ".join(str(folder / n) for n in ("a.key", "a.pem", "a.card.toml",
                                                "a.identity.pem"))
    assert str(info.value) == (f"refusing to overwrite existing files: {names} (pass --force "
                               "/ overwrite=True to replace them)")
    second = generate_keys(folder, "a", overwrite=True)
    assert second.fingerprint != first.fingerprint
    assert load_card(second.card).fingerprint == second.fingerprint
    # a dangling link counts as existing; links are refused even with overwrite
    other = tmp_path / "b"
    other.mkdir(mode=0o700)
    (other / "b.pem").symlink_to(tmp_path / "nowhere")
    (other / "b.key").symlink_to(tmp_path / "nowhere-else")
    for overwrite in (False, True):
        with pytest.raises(ParameterError) as info:
            generate_keys(other, "b", overwrite=overwrite)
        assert str(info.value) == (f"refusing to write through symbolic links: "
                                   f"{other / 'b.key'}, {other / 'b.pem'} (--force "
                                   "included); remove them if you put them there")
    assert sorted(os.listdir(other)) == ["b.key", "b.pem"]


# -- new_session_config ---------------------------------------------------------------

@pytest.fixture(scope="module")
def ceremony(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceremony")
    cards = [load_card(generate_keys(root / n, n).card) for n in ("p1", "p2", "p3")]
    hub = load_card(generate_keys(root / "hub", "hub", role="coordinator",
                                  hosts=["hub.example", "10.0.0.5"]).card)
    return cards, hub


def test_new_session_config_from_cards(ceremony):
    cards, hub = ceremony
    config = new_session_config(cards[::-1], hub, "hub.example:443")
    assert config.party_names == ("p3", "p2", "p1")
    assert config.coordinator == "hub.example:443"
    assert (config.mode, config.integrity) == ("masked", "detect")
    assert config.parameters == ConfigParameters()
    assert config.clustering == ClusteringRequest() and config.deadlines == Deadlines()
    assert len(config.session_id) == 32 and int(config.session_id, 16) >= 0
    for entry, card in zip(config.parties, cards[::-1]):
        assert entry.name == card.name
        assert entry.identity_public_key == card.identity_public_key
        assert entry.certificate_sha256 == hashlib.sha256(card.certificate_der).digest()
        assert entry.certificate == card.certificate
        assert entry.fingerprint == card.fingerprint
    assert config.tls.enabled
    assert config.tls.coordinator_certificate == hub.certificate
    assert config.tls.coordinator_fingerprint == hub.fingerprint
    assert config.tls.coordinator_name == "hub"
    other = new_session_config(cards, hub, "10.0.0.5:1")
    assert other.session_id != config.session_id
    assert new_session_config(cards, hub, "[::1]:5").coordinator == "[::1]:5"
    assert new_session_config(cards, hub, "localhost:5").coordinator == "localhost:5"


def test_new_session_config_passes_its_options(ceremony):
    cards, hub = ceremony
    params = ConfigParameters(scale_bits=12)
    clustering = ClusteringRequest(method="dbscan", n_clusters=None)
    deadlines = Deadlines(join=5.0)
    config = new_session_config(cards, hub, "127.0.0.1:9", mode="transparent",
                                parameters=params, integrity="off", clustering=clustering,
                                deadlines=deadlines, session_id="ab" * 16)
    assert (config.mode, config.integrity, config.session_id) == ("transparent", "off",
                                                                  "ab" * 16)
    assert config.parameters is params and config.clustering is clustering
    assert config.deadlines is deadlines


def test_new_session_config_refusals(ceremony):
    cards, hub = ceremony

    def refusal(*args):
        with pytest.raises(ParameterError) as info:
            new_session_config(*args)
        return str(info.value)

    for bad in ("p1", b"p1", 5, None):
        assert refusal(bad, hub, "hub.example:1") == "cards must be a list of party cards"
    assert refusal([cards[0], hub], hub, "hub.example:1") == "'hub' is not a party card"
    assert refusal([cards[0], "p2"], hub, "hub.example:1") == "'p2' is not a party card"
    message = ("{} is not a coordinator card (make one with 'omnifc keygen --coordinator')")
    assert refusal(cards, cards[0], "hub.example:1") == message.format("'p1'")
    assert refusal(cards, "hub", "hub.example:1") == message.format("'hub'")
    for address in ("0.0.0.0:1", "[::]:1"):
        assert refusal(cards, hub, address) == (
            f"the coordinator address {address!r} is where parties dial; give a host name "
            "or IP they can reach (serve --address can still bind 0.0.0.0)")
    assert refusal(cards, hub, "other.example:1") == (
        "the coordinator's certificate is valid for ['localhost', 'hub.example', "
        "'127.0.0.1', '::1', '10.0.0.5'], not for 'other.example': the coordinator runs "
        "'omnifc keygen --coordinator --host other.example' again and sends the new card")
    assert refusal(cards, hub, "10.0.0.6:1").startswith(
        "the coordinator's certificate is valid for")
    assert refusal(cards, hub, "nocolon").startswith("[session] coordinator must look like")

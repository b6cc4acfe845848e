"""Tests that bite on the schema and loader part of protocols/_config.py (issue 14).

Independent expectations: the canonical session data written out by hand from the
docstring of ``canonical_session`` and hashed with ``hashlib``/``base64`` as documented in
``protocols._fingerprint``; the TOML text parsed back with ``tomllib``; certificates made
with ``cryptography``; exact error texts.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

import pytest
from cryptography.hazmat.primitives import serialization

from finite_field import ParameterError
from protocols._cards import generate_keys, load_card, new_session_config
from protocols._config import (ClusteringRequest, ConfigParameters, Deadlines, PartyEntry,
                               SessionConfig, TLSSettings, _certificate, _check_fingerprint,
                               _known, _relative, _table, _toml_string, _toml_value,
                               canonical_session, dump_session_config,
                               format_session_config, load_session_config,
                               session_config_from_dict, session_fingerprint)
from protocols._fingerprint import card_fingerprint

pytestmark = pytest.mark.timeout(120)

SID = "ab" * 16
KEYS = [bytes([i + 1]) * 32 for i in range(5)]


def _plain(n=3, **kwargs):
    parties = tuple(PartyEntry(name, KEYS[i]) for i, name in enumerate("abcde"[:n]))
    return SessionConfig(SID, "127.0.0.1:5000", parties, tls=TLSSettings(enabled=False),
                         **kwargs)


@pytest.fixture(scope="module")
def ceremony(tmp_path_factory):
    root = tmp_path_factory.mktemp("ceremony")
    cards = [load_card(generate_keys(root / n, n).card) for n in ("p1", "p2", "p3")]
    hub = load_card(generate_keys(root / "hub", "hub", role="coordinator").card)
    return root, cards, hub


def _refuse(factory, *args, **kwargs):
    with pytest.raises(ParameterError) as info:
        factory(*args, **kwargs)
    return str(info.value)


# -- value classes ---------------------------------------------------------------------

def test_parameter_defaults_and_messages():
    p = ConfigParameters()
    assert (p.dim, p.segments, p.noise_segments, p.scale_bits, p.bound, p.nonnegative,
            p.primes, p.max_rows_per_party, p.max_rows_total, p.mask_degree) == (
        0, 1, 1, 16, 8.0, False, (), 1_000_000, 2_000_000, 0)
    assert ConfigParameters(max_rows_per_party=5, max_rows_total=5).max_rows_total == 5
    assert _refuse(ConfigParameters, max_rows_per_party=6, max_rows_total=5) == \
        "[parameters] max_rows_per_party (6) must be <= max_rows_total (5)"
    assert ConfigParameters(dim=2, segments=2).segments == 2
    assert _refuse(ConfigParameters, dim=2, segments=3) == \
        "[parameters] segments must be <= dim = 2, got 3"
    assert ConfigParameters(dim=0, segments=3).segments == 3  # d unknown: not checked
    for bad in ("13", b"13", 13, None):
        assert _refuse(ConfigParameters, primes=bad) == \
            f"[parameters] primes must be a list of integers, got {bad!r}"
    assert _refuse(ConfigParameters, primes=[13, 13]) == \
        "[parameters] primes must be distinct, got [13, 13]"
    assert _refuse(ConfigParameters, primes=[13.0]).startswith(
        "[parameters] primes entries must be an integer")
    assert ConfigParameters(primes=[2147483647, 2147483629]).primes == (2147483647,
                                                                        2147483629)
    assert _refuse(ConfigParameters, mask_degree=-1) == \
        "[parameters] mask_degree (0 = every pair masks) must be >= 0, got -1"
    assert ConfigParameters(mask_degree=(1 << 20) - 1).mask_degree == (1 << 20) - 1
    assert _refuse(ConfigParameters, mask_degree=1 << 20).startswith(
        "[parameters] mask_degree (0 = every pair masks) must be <= 1048575")
    message = _refuse(ConfigParameters, bound=1e12)
    assert message.startswith("[parameters] bound = 1000000000000.0, scale_bits = 16, "
                              "dim = 0: ")
    bound = ConfigParameters(bound=3)
    assert bound.bound == 3.0 and type(bound.bound) is float


def test_make_plan_takes_d_from_the_data_or_the_config():
    p = ConfigParameters(dim=3, scale_bits=4, bound=1.0, nonnegative=True,
                         primes=(2147483647,))
    plan = p.make_plan(3)
    assert plan.dim == 3 and plan.primes == (2147483647,) and plan.parties == 3
    assert p.make_plan(4, 3).parties == 4
    assert _refuse(p.make_plan, 3, 2) == "the session config fixes d = 3, the data has d = 2"
    free = ConfigParameters(segments=2, noise_segments=2, scale_bits=5)
    plan = free.make_plan(7, 6)
    assert (plan.dim, plan.segments, plan.noise_segments) == (6, 2, 2)
    assert _refuse(free.make_plan, 7) == ("d is not known yet: [parameters] dim is 0 and no "
                                          "data dimension was given")
    assert _refuse(free.make_plan, 7, 0).startswith("d is not known yet")


def test_clustering_and_deadlines():
    assert ClusteringRequest() == ClusteringRequest("kmeans", 3)
    for bad in ("", "-x", "a b", 5, None):
        assert _refuse(ClusteringRequest, method=bad) == \
            f"[clustering] method must be a name like 'kmeans', got {bad!r}"
    assert ClusteringRequest("k_means-2", None).n_clusters is None
    assert _refuse(ClusteringRequest, n_clusters=0) == \
        "[clustering] n_clusters must be >= 1, got 0"
    d = Deadlines()
    assert (d.join, d.shares, d.evaluation, d.result) == (60.0, 120.0, 300.0, 60.0)
    assert Deadlines(result=7 * 24 * 3600).result == 604800.0
    assert _refuse(Deadlines, result=604801) == \
        "[deadlines] result must be <= 604800 seconds (7 days), got 604801.0"
    assert _refuse(Deadlines, shares=0).startswith("[deadlines] shares (seconds) must be")
    assert type(Deadlines(join=5).join) is float


# -- certificates and fingerprints -------------------------------------------------------

def test_embedded_certificate_checks(ceremony):
    root, cards, hub = ceremony
    pem = cards[0].certificate
    normalized, der, cn = _certificate("\n" + pem.replace("\n", "\r\n"), "here")
    assert normalized == pem and der == cards[0].certificate_der and cn == "p1"
    assert _certificate(pem, "here", "p1")[2] == "p1"
    for bad in (None, 5, "text", "-----BEGIN CERT-----"):
        assert _refuse(_certificate, bad, "here") == (
            "here must be a PEM certificate (text starting with -----BEGIN CERTIFICATE-----), "
            f"got {bad!r}")
    assert _refuse(_certificate, pem + pem, "here") == \
        "here must hold exactly one PEM certificate"
    assert _refuse(_certificate, pem + "-----BEGIN PRIVATE KEY-----", "here") == \
        "here must hold exactly one PEM certificate"
    broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    assert _refuse(_certificate, broken, "here") == \
        "here is not a valid PEM X.509 certificate"
    assert _refuse(_certificate, pem.replace("-----END", "é-----END"), "here") == \
        "here is not a valid PEM X.509 certificate"
    assert _refuse(_certificate, pem, "here", "p2") == \
        "here: the certificate names 'p1', expected 'p2'"


def test_a_certificate_with_two_or_no_common_names_is_refused():
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(names):
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, n) for n in names] or
                            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "o")])
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(1)
                .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
                .decode())

    assert _refuse(_certificate, cert(["a", "b"]), "w") == \
        "w: the certificate must have one common name, has ['a', 'b']"
    assert _refuse(_certificate, cert([]), "w") == \
        "w: the certificate must have one common name, has []"


def test_fingerprint_check():
    assert _check_fingerprint(None, "FP", "w") == "FP"
    assert _check_fingerprint("FP", "FP", "w") == "FP"
    assert _refuse(_check_fingerprint, "XX", "FP", "w") == (
        "w fingerprint is 'XX' but the certificate and keys written with it give 'FP': the "
        "entry was edited or mixed up")


def test_tls_settings(ceremony, tmp_path):
    root, cards, hub = ceremony
    t = TLSSettings(enabled=False)
    assert (t.ca, t.coordinator_cert, t.coordinator_key, t.coordinator_certificate,
            t.coordinator_fingerprint, t.coordinator_name) == (None,) * 6
    files = TLSSettings(ca=str(tmp_path / "ca.pem"), coordinator_cert=tmp_path / "c.pem",
                        coordinator_key="k.key")
    assert files.ca == tmp_path / "ca.pem" and isinstance(files.ca, Path)
    assert files.coordinator_key == Path("k.key")
    embedded = TLSSettings(coordinator_certificate=hub.certificate)
    assert embedded.coordinator_fingerprint == hub.fingerprint
    assert embedded.coordinator_fingerprint == card_fingerprint("coordinator", "hub", None,
                                                                hub.certificate_der)
    assert embedded.coordinator_name == "hub"
    assert _refuse(TLSSettings, coordinator_certificate=hub.certificate,
                   coordinator_fingerprint="AAAAA").startswith(
        "[tls] coordinator fingerprint is 'AAAAA' but the certificate")
    assert _refuse(TLSSettings, coordinator_fingerprint="AAAAA") == \
        "[tls] coordinator_fingerprint needs coordinator_certificate"
    assert _refuse(TLSSettings, coordinator_certificate="x").startswith(
        "[tls] coordinator_certificate must be a PEM certificate")
    for missing, given in (("ca", {"coordinator_cert": "c.pem"}),
                           ("coordinator_cert", {"ca": "ca.pem"})):
        assert _refuse(TLSSettings, **given) == (
            f"[tls] {missing} is required when TLS is enabled and no coordinator_certificate "
            "is given (build the config with 'omnifc session new', or set enabled = false to "
            "run without TLS, insecurely)")
    assert _refuse(TLSSettings, enabled=1) == "[tls] enabled must be true or false, got 1"


def test_party_entry(ceremony):
    root, cards, hub = ceremony
    card = cards[1]
    entry = PartyEntry("p2", card.identity_public_key.hex(), certificate=card.certificate)
    assert entry.identity_public_key == card.identity_public_key
    assert entry.certificate_sha256 == hashlib.sha256(card.certificate_der).digest()
    assert entry.fingerprint == card.fingerprint
    assert PartyEntry("p2", card.identity_public_key,
                      card.certificate_sha256.hex(), certificate=card.certificate,
                      fingerprint=card.fingerprint) == entry
    assert _refuse(PartyEntry, "p2", card.identity_public_key, bytes(32),
                   certificate=card.certificate) == (
        "[[parties]] 'p2': certificate_sha256 does not match the SHA-256 of the embedded "
        "certificate")
    assert _refuse(PartyEntry, "p3", card.identity_public_key,
                   certificate=card.certificate) == (
        "[[parties]] 'p3': certificate: the certificate names 'p2', expected 'p3'")
    assert _refuse(PartyEntry, "p2", card.identity_public_key, certificate=card.certificate,
                   fingerprint="AAAAA").startswith(
        "[[parties]] 'p2': fingerprint is 'AAAAA' but the certificate and keys")
    assert _refuse(PartyEntry, "p2", card.identity_public_key, fingerprint="AAAAA") == \
        "[[parties]] 'p2': fingerprint needs the embedded certificate"
    assert _refuse(PartyEntry, "p2", bytes(31)).startswith(
        "[[parties]] 'p2': identity_public_key must be")
    assert _refuse(PartyEntry, "p2", bytes(32), "00").startswith(
        "[[parties]] 'p2': certificate_sha256 must be")
    assert _refuse(PartyEntry, "", bytes(32)).startswith("[[parties]] name must be")
    e = PartyEntry("p", bytes(32), cert="c.pem", key="k", identity_key="i")
    assert (e.cert, e.key, e.identity_key) == (Path("c.pem"), Path("k"), Path("i"))
    assert e.certificate_sha256 is None and e.fingerprint is None


def test_session_config_refusals(ceremony):
    base = _plain()
    for sid in ("ab" * 15 + "a", "AB" * 16, "ab" * 32 + "a", 5):
        assert _refuse(base.with_, session_id=sid) == (
            "[session] id must be 32 to 64 lowercase hex characters (a random 128-bit id), "
            f"got {sid!r}")
    assert base.with_(session_id="ab" * 32).session_id == "ab" * 32
    assert _refuse(base.with_, mode="open") == \
        "[session] mode must be one of ['masked', 'transparent'], got 'open'"
    assert _refuse(base.with_, integrity="on") == \
        "[session] integrity must be one of ['detect', 'correct', 'off'], got 'on'"
    assert base.with_(integrity="correct").integrity == "correct"
    assert _refuse(base.with_, protocol_version=2) == \
        "[session] protocol_version 2 is not supported; this omnifc speaks version 3"
    assert _refuse(base.with_, protocol_version="3").startswith(
        "[session] protocol_version must be an integer")
    for name, value, kind in (("parameters", {}, "ConfigParameters"),
                              ("clustering", None, "ClusteringRequest"),
                              ("deadlines", 5, "Deadlines"), ("tls", "x", "TLSSettings")):
        assert _refuse(base.with_, **{name: value}) == \
            f"{name} must be a {kind}, got {type(value).__name__}"
    for bad in ("abc", b"abc", 5):
        assert _refuse(base.with_, parties=bad) == \
            f"parties must be a sequence of PartyEntry, got {bad!r}"
    assert _refuse(base.with_, parties=[base.parties[0], "b", base.parties[2]]) == \
        "parties must be PartyEntry objects"
    listed = base.with_(parties=list(base.parties))
    assert type(listed.parties) is tuple and listed == base
    assert _refuse(base.with_, parties=base.parties[:1]) == (
        "[[parties]] lists 1 party; segments=1 and noise_segments=1 need at least 2l+2t-1 = 3")
    assert _refuse(base.with_, parties=()) == (
        "[[parties]] lists 0 parties; segments=1 and noise_segments=1 need at least "
        "2l+2t-1 = 3")
    dup = base.parties + (PartyEntry("a", KEYS[4]),)
    assert _refuse(base.with_, parties=dup) == "[[parties]]: duplicate party 'a'"
    same_key = base.parties + (PartyEntry("d", KEYS[1]),)
    assert _refuse(base.with_, parties=same_key) == \
        "[[parties]]: parties 'b' and 'd' pin the same identity key"
    pins = tuple(dataclasses.replace(p, certificate_sha256=bytes(32)) if p.name in "ac" else p
                 for p in base.parties)
    assert _refuse(base.with_, parties=pins) == \
        "[[parties]]: parties 'a' and 'c' pin the same certificate"
    assert base.with_(parameters=ConfigParameters(mask_degree=2)).parameters.mask_degree == 2
    assert _refuse(base.with_, parameters=ConfigParameters(mask_degree=3)) == \
        "[parameters] mask_degree must be at most m - 1 = 2 (the other parties), got 3"
    assert base.path is None
    assert base.with_(path="x.toml").path == Path("x.toml")
    assert base.with_(path="x.toml") == base  # path is not part of equality


def test_tls_on_needs_certificates_and_a_coordinator_that_is_no_party(ceremony, tmp_path):
    root, cards, hub = ceremony
    config = new_session_config(cards, hub, "127.0.0.1:1", session_id=SID)
    bare = tuple(dataclasses.replace(p, certificate=None, fingerprint=None)
                 if p.name != "p2" else p for p in config.parties)
    assert _refuse(config.with_, parties=bare) == (
        "[[parties]] 'p1', 'p3': no certificate (from the party's card) and no [tls] ca to "
        "trust instead")
    with_ca = config.with_(parties=bare, tls=dataclasses.replace(config.tls, ca=tmp_path))
    assert with_ca.tls.ca == tmp_path
    coordinator_as_party = load_card(generate_keys(tmp_path / "x", "hub").card)
    assert _refuse(new_session_config, [coordinator_as_party] + cards, hub,
                   "127.0.0.1:1") == \
        "the coordinator's certificate names 'hub', which is also a party"


def test_lookups_and_tls_files(ceremony, tmp_path):
    root, cards, hub = ceremony
    config = new_session_config(cards, hub, "127.0.0.1:1", session_id=SID)
    assert config.party_names == ("p1", "p2", "p3") and not config.insecure
    assert config.party("p2") is config.parties[1]
    assert _refuse(config.party, "zz") == \
        "unknown party 'zz'; the session config lists 'p1', 'p2', 'p3'"
    assert _refuse(config.coordinator_tls) == (
        "the session config gives no private key file for the coordinator: pass --keys DIR "
        "(the folder 'omnifc keygen --coordinator' wrote) or set [tls] coordinator_key")
    assert _refuse(config.party_tls, "p1") == (
        "the session config gives no private key file for party 'p1': pass --keys DIR (the "
        "folder 'omnifc keygen --party p1' wrote)")
    keyed = config.with_keys("hub", root / "hub").with_keys("p1", str(root / "p1"))
    cert, key, ca = keyed.coordinator_tls()
    assert cert == hub.certificate.encode() and key == root / "hub" / "hub.key"
    assert ca == "".join(c.certificate for c in cards).encode()
    cert, key, ca = keyed.party_tls("p1")
    assert cert == cards[0].certificate.encode() and key == root / "p1" / "p1.key"
    assert ca == hub.certificate.encode()
    assert keyed.party("p1").identity_key == root / "p1" / "p1.identity.pem"
    assert keyed.party("p2").key is None
    # older configs: files and a CA
    older = keyed.with_(parties=tuple(dataclasses.replace(p, certificate=None,
                                                          fingerprint=None)
                                      for p in keyed.parties),
                        tls=dataclasses.replace(keyed.tls, ca=tmp_path / "ca.pem"))
    assert older.coordinator_tls().ca == tmp_path / "ca.pem"
    assert _refuse(older.party_tls, "p1") == (
        "the session config gives no TLS certificate file for party 'p1': pass --keys DIR "
        "(the folder 'omnifc keygen --party p1' wrote)")
    # with_keys
    messy = str(root / "p2" / ".." / "p2")
    assert config.with_keys("p2", messy).party("p2").key == root / "p2" / "p2.key"
    assert _refuse(config.with_keys, "p2", root / "missing") == \
        f"the keys folder {str(root / 'missing')!r} does not exist"
    assert _refuse(config.with_keys, "zz", root) == (
        "'zz' is neither a party of this session (p1, p2, p3) nor its coordinator ('hub')")
    assert _refuse(_plain().with_keys, "zz", root) == (
        "'zz' is neither a party of this session (a, b, c) nor its coordinator (None)")
    assert _refuse(_plain().coordinator_tls) == (
        "TLS is disabled in this session config ([tls] enabled = false); there are no TLS "
        "files")
    assert _plain().insecure


# -- the session fingerprint ------------------------------------------------------------

def _readable(data: bytes, domain: str) -> str:
    digest = hashlib.sha256(b"omnifc-fingerprint-v1\0" + domain.encode() + b"\0" + data)
    text = base64.b32encode(digest.digest()).decode()[:32]
    return "-".join(text[i:i + 4] for i in range(0, 32, 4))


def test_canonical_session_of_a_config_without_tls():
    config = _plain(parameters=ConfigParameters(dim=2, primes=(2147483647, 2147483629)),
                    clustering=ClusteringRequest("dbscan", None),
                    deadlines=Deadlines(join=1.5))
    expected = {
        "format": "omnifc-session-config-v1",
        "session": {"id": SID, "protocol_version": 3, "coordinator": "127.0.0.1:5000",
                    "mode": "masked", "integrity": "detect", "adversaries": 0},
        "parameters": {"dim": 2, "segments": 1, "noise_segments": 1, "scale_bits": 16,
                       "bound": 8.0, "nonnegative": False,
                       "primes": [2147483647, 2147483629], "max_rows_per_party": 1_000_000,
                       "max_rows_total": 2_000_000},
        "clustering": {"method": "dbscan", "n_clusters": None},
        "deadlines": {"join": 1.5, "shares": 120.0, "evaluation": 300.0, "result": 60.0},
        "tls": {"enabled": False},
        "parties": [{"name": n, "identity_public_key": KEYS[i].hex(),
                     "certificate_sha256": None} for i, n in enumerate("abc")],
    }
    assert canonical_session(config) == expected
    text = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert session_fingerprint(config) == _readable(text.encode(), "session")
    assert config.fingerprint == session_fingerprint(config)
    masked = config.with_(parameters=ConfigParameters(dim=2, mask_degree=2))
    assert canonical_session(masked)["parameters"]["mask_degree"] == 2



def test_the_fingerprint_hashes_utf_8_text_not_ascii_escapes():
    # a coordinator host outside ASCII is written as itself (UTF-8), as documented
    config = _plain().with_(coordinator="h\u00f4pital.example:50051")
    text = json.dumps(canonical_session(config), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    assert "h\u00f4pital" in text
    assert session_fingerprint(config) == _readable(text.encode("utf-8"), "session")


def test_a_default_valued_row_left_out_does_not_end_the_rows_after_it():
    # mask_degree at its default is left out; max_pairs after it, not at its default, is in
    config = _plain(parameters=ConfigParameters(max_pairs=1000))
    parameters = canonical_session(config)["parameters"]
    assert "mask_degree" not in parameters and parameters["max_pairs"] == 1000


def test_a_row_marked_never_is_not_fingerprinted():
    from protocols._config._fingerprint import _fingerprinted
    from protocols._parameters import Parameter

    rows = [Parameter("a", "int", "a", 1, table="parameters", fingerprint="never"),
            Parameter("b", "int", "b", 2, table="parameters")]
    obj = type("Values", (), {"a": 5, "b": 6})()
    assert _fingerprinted(obj, rows) == {"b": 6}

def test_canonical_session_pins_certificates(ceremony, tmp_path):
    root, cards, hub = ceremony
    config = new_session_config(cards, hub, "127.0.0.1:1", session_id=SID)
    data = canonical_session(config)
    assert data["tls"] == {"enabled": True, "coordinator_certificate_sha256":
                           hashlib.sha256(hub.certificate_der).hexdigest()}
    assert [p["certificate_sha256"] for p in data["parties"]] == \
        [hashlib.sha256(c.certificate_der).hexdigest() for c in cards]
    # an older config: the CA and coordinator certificate files (PEM or DER) are hashed
    (tmp_path / "ca.pem").write_text(cards[0].certificate)
    (tmp_path / "c.der").write_bytes(hub.certificate_der)
    older = config.with_(tls=TLSSettings(ca=tmp_path / "ca.pem",
                                         coordinator_cert=tmp_path / "c.der"))
    assert canonical_session(older)["tls"] == {
        "enabled": True, "ca_sha256": hashlib.sha256(cards[0].certificate_der).hexdigest(),
        "coordinator_cert_sha256": hashlib.sha256(hub.certificate_der).hexdigest()}
    missing = config.with_(tls=TLSSettings(ca=tmp_path / "none.pem",
                                           coordinator_cert=tmp_path / "c.der"))
    assert _refuse(canonical_session, missing) == (
        "the session fingerprint covers the [tls] ca certificate, which cannot be read from "
        f"{str(tmp_path / 'none.pem')!r}")
    (tmp_path / "junk.pem").write_bytes(b"junk")
    junk = config.with_(tls=TLSSettings(ca=tmp_path / "ca.pem",
                                        coordinator_cert=tmp_path / "junk.pem"))
    assert _refuse(canonical_session, junk) == (
        "the session fingerprint covers the [tls] coordinator_cert certificate, which cannot "
        f"be read from {str(tmp_path / 'junk.pem')!r}")


# -- reading ------------------------------------------------------------------------------

def test_tables_and_known_keys():
    assert _table({}, "x", False) == {}
    assert _table({"x": {"a": 1}}, "x", True) == {"a": 1}
    assert _refuse(_table, {}, "x", True) == "the [x] table is missing"
    assert _refuse(_table, {"x": [1]}, "x", False) == "[x] must be a table, got [1]"
    _known({"a": 1}, "w", ["a", "b"])
    assert _refuse(_known, {"z": 1}, "w", ["b", "a"]) == "w: unknown key z (allowed: a, b)"
    assert _refuse(_known, {"z": 1, "y": 2}, "w", ["a"]) == \
        "w: unknown keys y, z (allowed: a)"


def _data():
    return {"session": {"id": SID, "coordinator": "127.0.0.1:9"},
            "parameters": {"dim": 2},
            "tls": {"enabled": False},
            "parties": [{"name": n, "identity_public_key": KEYS[i].hex()}
                        for i, n in enumerate("abc")]}


def test_from_dict_defaults_and_paths(tmp_path):
    config = session_config_from_dict(_data(), tmp_path)
    assert (config.mode, config.integrity, config.protocol_version) == ("masked", "detect",
                                                                        3)
    assert config.clustering == ClusteringRequest() and config.deadlines == Deadlines()
    assert config.path is None
    data = _data()
    data["clustering"] = {"method": "dbscan"}
    data["session"].update(mode="transparent", integrity="off", protocol_version=3)
    data["parameters"]["primes"] = [2147483647, 2147483629]
    data["tls"] = {"enabled": False, "ca": "sub/../ca.pem", "coordinator_key": "/abs/k"}
    data["parties"][0].update(cert="a.pem", key="k/../a.key", identity_key="/x/a.id")
    config = session_config_from_dict(data, str(tmp_path), path=tmp_path / "s.toml")
    assert config.clustering == ClusteringRequest("dbscan", None)
    assert (config.mode, config.integrity) == ("transparent", "off")
    assert config.parameters.primes == (2147483647, 2147483629)
    assert config.tls.ca == tmp_path / "ca.pem" and config.tls.coordinator_key == Path("/abs/k")
    a = config.party("a")
    assert (a.cert, a.key, a.identity_key) == (tmp_path / "a.pem", tmp_path / "a.key",
                                               Path("/x/a.id"))
    assert config.path == tmp_path / "s.toml"


def test_from_dict_refusals(tmp_path):
    def refusal(change):
        data = _data()
        change(data)
        return _refuse(session_config_from_dict, data, tmp_path)

    assert refusal(lambda d: d.pop("session")) == "the [session] table is missing"
    assert refusal(lambda d: d.pop("parameters")) == "the [parameters] table is missing"
    assert refusal(lambda d: d["session"].pop("id")) == "[session] id is missing"
    assert refusal(lambda d: d["session"].pop("coordinator")) == \
        "[session] coordinator is missing"
    assert refusal(lambda d: d["session"].update(x=1)) == (
        "[session]: unknown key x (allowed: adversaries, coordinator, id, integrity, mode, "
        "protocol_version)")
    assert refusal(lambda d: d["parameters"].pop("dim")) == \
        "[parameters] dim is missing (0 means 'taken from the data')"
    assert refusal(lambda d: d["parameters"].update(primes=(13,))) == \
        "[parameters] primes must be a list of integers, got (13,)"
    assert refusal(lambda d: d.update(clustering={"k": 1})).startswith(
        "[clustering]: unknown key k (allowed: method, n_clusters)")
    assert refusal(lambda d: d.update(deadlines={"k": 1})).startswith(
        "[deadlines]: unknown key k (allowed: evaluation, join, result, shares)")
    assert refusal(lambda d: d["tls"].update(k=1)).startswith("[tls]: unknown key k")
    assert refusal(lambda d: d["tls"].update(ca=5)).startswith("[tls] ca must be")
    for parties in (None, [], {"name": "a"}):
        assert refusal(lambda d: d.update(parties=parties)) == \
            "at least one [[parties]] entry is required"
    assert refusal(lambda d: d["parties"].__setitem__(1, "b")) == \
        "[[parties]] entry 1 must be a table"
    assert refusal(lambda d: d["parties"][2].update(z=1)).startswith(
        "[[parties]] entry 2: unknown key z")
    for key in ("name", "identity_public_key"):
        assert refusal(lambda d: d["parties"][1].pop(key)) == \
            f"[[parties]] entry 1: {key} is missing"
    assert refusal(lambda d: d["parties"][0].update(identity_public_key=5)) == \
        "[[parties]] entry 0: identity_public_key must be a hex string, got 5"
    assert refusal(lambda d: d["parties"][0].update(certificate_sha256=[1])) == \
        "[[parties]] entry 0: certificate_sha256 must be a hex string, got [1]"
    assert refusal(lambda d: d["parties"][0].update(key=5)).startswith(
        "[[parties]] entry 0 key must be")


def test_load_refusals_and_warnings(tmp_path, caplog, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe")
    assert _refuse(load_session_config, bad) == \
        f"session config {str(bad)!r} is not UTF-8 text"
    bad.write_text("x = = 1")
    assert _refuse(load_session_config, bad).startswith(
        f"session config {str(bad)!r} is not valid TOML: ")
    good = tmp_path / "s.toml"
    dump_session_config(_plain(mode="transparent"), good)
    with caplog.at_level(logging.WARNING, logger="protocols"):
        config = load_session_config(str(good))
    assert config.path == good
    assert (f"session config {good} disables TLS: traffic between the parties and the "
            "coordinator is neither authenticated nor encrypted") in caplog.text
    assert (f'session config {good} uses mode = "transparent": the coordinator sees every '
            "party's evaluation") in caplog.text

    def hook(c):
        raise ParameterError("no such method")

    assert _refuse(load_session_config, good, validate=hook) == \
        f"session config {str(good)!r}: no such method"
    seen = []
    load_session_config(good, validate=seen.append)
    assert seen == [config]
    monkeypatch.chdir(tmp_path)
    assert load_session_config("s.toml").path == good


# -- writing ------------------------------------------------------------------------------

def test_toml_strings_and_values():
    assert _toml_string('a"b\\c\x00\x1f\x7f\x80é') == \
        '"a\\"b\\\\c\\u0000\\u001f\\u007f\x80é"'
    assert _toml_string(" ~") == '" ~"'
    assert tomllib.loads("x = " + _toml_string('q"\\\n\t'))["x"] == 'q"\\\n\t'
    assert (_toml_value(True), _toml_value(False), _toml_value(7)) == ("true", "false", "7")
    assert (_toml_value(1.0), _toml_value(2.5), _toml_value(1e300), _toml_value(1e-7)) == \
        ("1.0", "2.5", "1e+300", "1e-07")
    assert _toml_value([1, "a", [True]]) == '[1, "a", [true]]'
    assert _toml_value(()) == "[]"
    for bad in (float("inf"), float("nan")):
        assert _refuse(_toml_value, bad) == \
            f"cannot write the non-finite number {bad} to TOML"
    assert _refuse(_toml_value, None) == "cannot write a NoneType to TOML"
    assert _refuse(_toml_value, b"x") == "cannot write a bytes to TOML"


def test_relative_paths(tmp_path, monkeypatch):
    assert _relative(tmp_path / "a" / "b.pem", tmp_path) == "a/b.pem"
    assert _relative(tmp_path / "x" / ".." / "c.pem", tmp_path) == "c.pem"
    assert _relative(Path("/elsewhere/k.key"), tmp_path) == "/elsewhere/k.key"
    monkeypatch.chdir(tmp_path)
    assert _relative(Path("d/e.pem"), tmp_path) == "d/e.pem"


def test_format_of_a_config_with_cards(ceremony, tmp_path):
    root, cards, hub = ceremony
    config = new_session_config(cards, hub, "127.0.0.1:1", session_id=SID,
                                clustering=ClusteringRequest("dbscan", None))
    config = config.with_keys("p1", root / "p1").with_keys("hub", tmp_path)
    text = format_session_config(config, root)
    lines = text.splitlines()
    assert lines[:4] == [
        "# omnifc session config: the coordinator and every party use this same file.",
        "# Paths are relative to this file's folder. Written by omnifc; safe to edit.",
        "", "[session]"]
    assert f'id = "{SID}"'.ljust(39) + " # random 128-bit session id" in lines
    assert "protocol_version = 3" in lines
    assert 'integrity = "detect"'.ljust(39) + " # 'detect' (default), 'correct' or 'off': " \
        "Reed-Solomon checks on the uploads" in lines
    assert "mask_degree = 0".ljust(39) + \
        " # mask partners per party: 0 = all; k >= t+1 withstands k-1 colluders" in lines
    assert "[deadlines]".ljust(39) + " # seconds; every wait has one" in lines
    assert "join = 60.0" in lines and "result = 60.0" in lines
    assert not any(line.startswith("n_clusters") for line in lines)
    assert "enabled = true" in lines
    assert f'coordinator_fingerprint = "{hub.fingerprint}"'.ljust(39) + \
        " # card of 'hub'" in lines
    assert f'coordinator_key = "{tmp_path}/hub.key"' in lines
    assert 'key = "p1/p1.key"' in lines and 'identity_key = "p1/p1.identity.pem"' in lines
    assert f'fingerprint = "{cards[0].fingerprint}"'.ljust(39) + " # card fingerprint" \
        in lines
    assert text.endswith("-----END CERTIFICATE-----\n'''\n")
    data = tomllib.loads(text)
    assert data["clustering"] == {"method": "dbscan"}
    assert data["tls"]["coordinator_certificate"] == hub.certificate
    assert [p["certificate"] for p in data["parties"]] == [c.certificate for c in cards]
    assert data["parties"][0]["certificate_sha256"] == cards[0].certificate_sha256.hex()
    assert "cert" not in data["parties"][0] and "key" not in data["parties"][1]
    path = dump_session_config(config, root / "s.toml")
    assert path == root / "s.toml"
    again = load_session_config(path)
    assert again == config and again.fingerprint == config.fingerprint
    insecure = format_session_config(_plain(), tmp_path).splitlines()
    assert "enabled = false".ljust(39) + \
        " # INSECURE: no authentication, no encryption" in insecure
    assert "n_clusters = 3" in insecure


def test_dump_refuses_existing_files_only_when_asked(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("old")
    with pytest.raises(ParameterError):
        dump_session_config(_plain(), path, overwrite=False)
    assert path.read_text() == "old"
    dump_session_config(_plain(), path)
    assert load_session_config(path) == _plain()


def test_an_older_config_gives_the_coordinator_certificate_file(tmp_path):
    parties = tuple(PartyEntry(n, KEYS[i], cert=tmp_path / f"{n}.pem", key=tmp_path / "k")
                    for i, n in enumerate("abc"))
    config = SessionConfig(SID, "127.0.0.1:1", parties, tls=TLSSettings(
        ca=tmp_path / "ca.pem", coordinator_cert=tmp_path / "c.pem",
        coordinator_key=tmp_path / "c.key"))
    assert tuple(config.coordinator_tls()) == (tmp_path / "c.pem", tmp_path / "c.key",
                                               tmp_path / "ca.pem")
    assert tuple(config.party_tls("b")) == (tmp_path / "b.pem", tmp_path / "k",
                                            tmp_path / "ca.pem")

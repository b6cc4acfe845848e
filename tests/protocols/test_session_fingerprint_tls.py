"""Every TLS trust root a session uses is inside its session fingerprint.

How protocols._tls uses the [tls] table (SessionConfig.coordinator_tls / party_tls):

- a party trusts the embedded coordinator certificate, or else the ``ca`` file;
- the coordinator trusts the parties' embedded certificates when *every* party has one,
  or else the ``ca`` file (client authentication: any certificate the CA issued, with a
  party's name, is let in where that party pins no certificate_sha256).

So in a mixed config (an embedded coordinator certificate, a party without one) ``ca``
decides who the coordinator lets in, and two configs that differ only in it must have
different fingerprints. A ``ca`` file may hold several certificates (gRPC trusts every
one of them), so every one is hashed, not only the first. A config in which ``ca`` would
be ignored (every certificate embedded) is refused rather than carrying a trust setting
nobody reads.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from finite_field import ParameterError
from protocols._cards import generate_keys, load_card, new_session_config
from protocols._config import (SessionConfig, TLSSettings, canonical_session,
                               dump_session_config, load_session_config)

pytestmark = [pytest.mark.protobuf, pytest.mark.timeout(120)]

SID = "cd" * 16


@pytest.fixture(scope="module")
def ceremony(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust-roots")
    cards = [load_card(generate_keys(root / n, n).card) for n in ("p1", "p2", "p3")]
    hub = load_card(generate_keys(root / "hub", "hub", role="coordinator").card)
    strangers = [load_card(generate_keys(root / n, n).card) for n in ("x1", "x2")]
    config = new_session_config(cards, hub, "127.0.0.1:1", session_id=SID)
    return root, config, cards, hub, strangers


def _mixed(config, ca):
    """p2 without an embedded certificate or pin: the coordinator falls back to ``ca``."""
    bare = tuple(dataclasses.replace(p, certificate=None, fingerprint=None,
                                     certificate_sha256=None) if p.name == "p2" else p
                 for p in config.parties)
    return config.with_(parties=bare, tls=dataclasses.replace(config.tls, ca=ca))


def test_in_a_mixed_config_the_ca_is_what_the_coordinator_trusts(ceremony, tmp_path):
    root, config, cards, hub, strangers = ceremony
    ca = tmp_path / "ca.pem"
    ca.write_text(strangers[0].certificate)
    mixed = _mixed(config, ca).with_keys("hub", root / "hub")
    assert mixed.coordinator_tls().ca == ca         # the TLS code's trust root is the file
    # a party still trusts the embedded coordinator certificate, not the file
    assert mixed.with_keys("p1", root / "p1").party_tls("p1").ca == hub.certificate.encode()


def test_two_mixed_configs_differing_only_in_the_ca_have_different_fingerprints(ceremony,
                                                                                 tmp_path):
    root, config, cards, hub, strangers = ceremony
    first, second = tmp_path / "first.pem", tmp_path / "second.pem"
    first.write_text(strangers[0].certificate)
    second.write_text(strangers[1].certificate)
    a, b = _mixed(config, first), _mixed(config, second)
    assert a.fingerprint != b.fingerprint
    assert canonical_session(a)["tls"] == {
        "enabled": True,
        "coordinator_certificate_sha256": hashlib.sha256(hub.certificate_der).hexdigest(),
        "ca_sha256": hashlib.sha256(strangers[0].certificate_der).hexdigest()}
    # the same CA under another path, or the config written out and read back: same session
    copy = tmp_path / "copy.pem"
    copy.write_text(strangers[0].certificate)
    assert _mixed(config, copy).fingerprint == a.fingerprint
    path = dump_session_config(a, tmp_path / "mixed.toml")
    assert load_session_config(path).fingerprint == a.fingerprint


def test_every_certificate_of_a_ca_bundle_is_in_the_fingerprint(ceremony, tmp_path):
    root, config, cards, hub, strangers = ceremony
    one, two = tmp_path / "one.pem", tmp_path / "two.pem"
    one.write_text(strangers[0].certificate)
    two.write_text(strangers[0].certificate + strangers[1].certificate)
    assert _mixed(config, one).fingerprint != _mixed(config, two).fingerprint
    assert canonical_session(_mixed(config, two))["tls"]["ca_sha256"] == [
        hashlib.sha256(s.certificate_der).hexdigest() for s in strangers]
    # older configs (CA and coordinator certificate files) too
    (tmp_path / "c.pem").write_text(hub.certificate)
    files = [dataclasses.replace(p, certificate=None, fingerprint=None)
             for p in config.parties]
    older = [config.with_(parties=tuple(files), tls=TLSSettings(
        ca=ca, coordinator_cert=tmp_path / "c.pem")) for ca in (one, two)]
    assert older[0].fingerprint != older[1].fingerprint


def test_a_ca_that_nothing_would_use_is_refused(ceremony, tmp_path):
    root, config, cards, hub, strangers = ceremony
    ca = tmp_path / "ca.pem"
    ca.write_text(strangers[0].certificate)
    with pytest.raises(ParameterError, match=r"\[tls\] ca .* is ignored") as info:
        config.with_(tls=dataclasses.replace(config.tls, ca=ca))
    assert "remove [tls] ca" in str(info.value)
    # nor from a file
    text = dump_session_config(config, tmp_path / "full.toml").read_text()
    assert text.count("[tls]\n") == 1
    (tmp_path / "edited.toml").write_text(text.replace("[tls]\n", '[tls]\nca = "ca.pem"\n'))
    with pytest.raises(ParameterError, match=r"\[tls\] ca .* is ignored"):
        load_session_config(tmp_path / "edited.toml")


def test_a_mixed_config_without_a_ca_is_still_refused(ceremony):
    root, config, cards, hub, strangers = ceremony
    with pytest.raises(ParameterError, match="no \\[tls\\] ca to trust instead"):
        _mixed(config, None)
    assert isinstance(config, SessionConfig)

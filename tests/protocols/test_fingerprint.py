"""The readable fingerprint carries 160 bits, and fingerprints of the old 125-bit format
are refused where they are read back (cards, session configs) with an error that says so.

Why 160 bits: whoever assembles a session config chooses both configs (the session id is
free), so a *collision* suffices to get two different sessions with one fingerprint; at
125 bits that is about 2^62.5 hashes, at 160 bits 2^80. The expected values are computed
here with hashlib and base64 directly: SHA-256 of b"omnifc-fingerprint-v1\\0" + domain +
b"\\0" + data, RFC 4648 base32, the first 32 characters (= the first 20 digest bytes) in
eight dash-separated groups of four.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct

import pytest

from finite_field import ParameterError
from protocols import (
    generate_certificates,
    generate_identity,
    identity_fingerprint,
    load_session_config,
    public_key_bytes,
)
from protocols._cards import generate_keys, load_card
from protocols._fingerprint import FINGERPRINT_PATTERN, card_fingerprint, readable_fingerprint

pytestmark = pytest.mark.timeout(120)


def _digest(data: bytes, domain: str) -> bytes:
    return hashlib.sha256(b"omnifc-fingerprint-v1\x00" + domain.encode() + b"\x00"
                          + data).digest()


def _old_format(data: bytes, domain: str) -> str:
    """What omnifc wrote before: 25 characters (125 bits) in five groups of five."""
    text = base64.b32encode(_digest(data, domain)).decode()[:25]
    return "-".join(text[i:i + 5] for i in range(0, 25, 5))


@pytest.mark.parametrize("data, domain", [(b"", "card"), (b"omnifc", "example"),
                                          (bytes(range(256)), "session")])
def test_a_fingerprint_carries_the_first_160_bits_of_the_digest(data, domain):
    got = readable_fingerprint(data, domain=domain)
    groups = got.split("-")
    assert [len(g) for g in groups] == [4] * 8
    # base32 is 5 bits a character: the 32 characters decode to exactly 20 digest bytes
    assert base64.b32decode("".join(groups)) == _digest(data, domain)[:20]
    assert FINGERPRINT_PATTERN.fullmatch(got)


def test_the_pattern_takes_the_new_format_only():
    new = readable_fingerprint(b"omnifc", domain="example")
    old = _old_format(b"omnifc", domain="example")
    assert FINGERPRINT_PATTERN.fullmatch(new)
    assert not FINGERPRINT_PATTERN.fullmatch(old)
    assert new.replace("-", "")[:25] == old.replace("-", "")  # same digest, longer prefix


def test_card_session_and_identity_fingerprints_all_have_the_new_format(tmp_path):
    certs = generate_certificates(tmp_path, ["a", "b", "c"])
    config = load_session_config(certs.config)
    printed = [certs.fingerprint, certs.coordinator_fingerprint, config.fingerprint,
               config.tls.coordinator_fingerprint,
               identity_fingerprint(generate_identity())]
    printed += [p.fingerprint for p in certs.parties] + [p.fingerprint for p in config.parties]
    for fingerprint in printed:
        assert re.fullmatch(r"[A-Z2-7]{4}(-[A-Z2-7]{4}){7}", fingerprint), fingerprint
    # the card files carry the same (new-format) values
    for party in certs.parties:
        assert f'fingerprint = "{party.fingerprint}"' in party.card.read_text()


def test_a_card_with_an_old_format_fingerprint_is_refused_naming_the_fix(tmp_path):
    files = generate_keys(tmp_path / "alice", "alice")
    card = load_card(files.card)
    old = "-".join(card.fingerprint.replace("-", "")[i:i + 5] for i in range(0, 25, 5))
    assert re.fullmatch(r"[A-Z2-7]{5}(-[A-Z2-7]{5}){4}", old)
    files.card.write_text(files.card.read_text().replace(
        f'fingerprint = "{card.fingerprint}"', f'fingerprint = "{old}"'))
    with pytest.raises(ParameterError, match=re.escape(
            f"card {str(files.card)!r}: fingerprint {old!r} has the old 125-bit format")) \
            as info:
        load_card(files.card)
    assert "omnifc keygen" in str(info.value)


@pytest.mark.parametrize("which", ["party", "coordinator"])
def test_a_session_config_with_an_old_format_fingerprint_is_refused(tmp_path, which):
    certs = generate_certificates(tmp_path, ["a", "b", "c"])
    new = certs.party("b").fingerprint if which == "party" else certs.coordinator_fingerprint
    old = "-".join(new.replace("-", "")[i:i + 5] for i in range(0, 25, 5))
    text = certs.config.read_text()
    assert text.count(f'"{new}"') == 1
    certs.config.write_text(text.replace(f'"{new}"', f'"{old}"'))
    with pytest.raises(ParameterError, match=re.escape(
            f"fingerprint {old!r} has the old 125-bit format")) as info:
        load_session_config(certs.config)
    assert "omnifc session new" in str(info.value)
    assert ("'b'" if which == "party" else "[tls] coordinator") in str(info.value)


def test_identity_fingerprint_is_the_same_format():
    key = generate_identity()
    raw = public_key_bytes(key)
    text = base64.b32encode(_digest(raw, "identity-key")).decode()[:32]
    assert identity_fingerprint(key) == "-".join(text[i:i + 4] for i in range(0, 32, 4))


# -- folded in from test_fingerprint_bites.py ---------------------------------------------
# protocols._fingerprint against the documented construction (mutation testing, issue 14).
#
# The expected fingerprints are recomputed here from the module docstring with hashlib and
# base64 directly: SHA-256 of b"omnifc-fingerprint-v1\\0" + domain + b"\\0" + data, RFC 4648
# base32, the first 32 characters in eight dash-separated groups of four; a card hashes role,
# name, identity key and certificate DER, each prefixed with its 4-byte big-endian length.

def _expected(data: bytes, domain: str) -> str:
    digest = hashlib.sha256(b"omnifc-fingerprint-v1\x00" + domain.encode() + b"\x00"
                            + data).digest()
    text = base64.b32encode(digest).decode()
    return "-".join([text[0:4], text[4:8], text[8:12], text[12:16], text[16:20],
                     text[20:24], text[24:28], text[28:32]])


@pytest.mark.parametrize("data, domain", [(b"", "card"), (b"omnifc", "example"),
                                          (bytes(range(256)), "identity-key"),
                                          (bytearray(b"\x00\x01"), "session")])
def test_readable_fingerprint_is_the_documented_digest(data, domain):
    got = readable_fingerprint(data, domain=domain)
    assert got == _expected(bytes(data), domain)
    assert len(got) == 39 and got.count("-") == 7
    assert FINGERPRINT_PATTERN.fullmatch(got)


def test_the_docstring_example_value():
    assert readable_fingerprint(b"omnifc", domain="example") == \
        "VBDJ-6BYQ-PVHR-DUXV-XS4D-GMDD-T5MD-RZ54"


def test_domain_separates():
    assert readable_fingerprint(b"x", domain="card") != readable_fingerprint(b"x",
                                                                            domain="session")
    # the separator byte: ("ab", "c") and ("a", "bc") hash differently
    assert readable_fingerprint(b"c", domain="ab") != readable_fingerprint(b"bc", domain="a")


def test_domain_must_be_ascii():
    with pytest.raises(UnicodeEncodeError):
        readable_fingerprint(b"x", domain="carte-\u00e9")


def _field(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


@pytest.mark.parametrize("role, name, key, der", [
    ("party", "alice", bytes(range(32)), b"\x30\x82" + bytes(300)),
    ("coordinator", "hub", None, b"\x30\x03abc"),
    ("party", "b\u00e9b\u00e9", b"\xff" * 32, b""),
])
def test_card_fingerprint_is_the_documented_digest(role, name, key, der):
    data = (_field(role.encode("utf-8")) + _field(name.encode("utf-8"))
            + _field(key or b"") + _field(der))
    assert card_fingerprint(role, name, key, der) == _expected(data, "card")


def test_card_fields_are_length_prefixed():
    # moving a byte from one field to the next changes the fingerprint
    assert card_fingerprint("party", "ab", b"", b"c") != card_fingerprint("party", "a", b"",
                                                                         b"bc")
    assert card_fingerprint("party", "a", None, b"x") == card_fingerprint("party", "a", b"",
                                                                         b"x")


@pytest.mark.parametrize("text, ok", [
    ("KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ5Y", True),
    ("kz3q-d7mf-xa2r-wteb-q4nh-uoc6-smea-jj5y", False),  # lower case is not what is written
    ("KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ51", False),  # 1 is not a base32 digit
    ("KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ58", False),  # nor 8
    ("KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA", False),       # seven groups
    ("KZ3Q-D7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ5Y-AAAA", False),
    ("KZ3QD-7MF-XA2R-WTEB-Q4NH-UOC6-SMEA-JJ5Y", False),
    ("KZ3QD7MFXA2RWTEBQ4NHUOC6SMEAJJ5Y", False),
    ("KZ3QD-7MFXA-2RWTE-BQ4NH-UOC6S", False),             # the old 125-bit format
])
def test_pattern(text, ok):
    assert bool(FINGERPRINT_PATTERN.fullmatch(text)) is ok

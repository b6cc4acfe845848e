"""protocols._fingerprint against the documented construction (mutation testing, issue 14).

The expected fingerprints are recomputed here from the module docstring with hashlib and
base64 directly: SHA-256 of b"omnifc-fingerprint-v1\\0" + domain + b"\\0" + data, RFC 4648
base32, the first 32 characters in eight dash-separated groups of four; a card hashes role,
name, identity key and certificate DER, each prefixed with its 4-byte big-endian length.
"""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from protocols._fingerprint import FINGERPRINT_PATTERN, card_fingerprint, readable_fingerprint

pytestmark = pytest.mark.timeout(60)


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

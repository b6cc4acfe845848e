"""Ed25519 identity keys: RFC 8032 vectors, sign/verify, opaque failures, key files."""

from __future__ import annotations

import re
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from finite_field import AuthenticationError, ParameterError
from protocols import (
    generate_identity,
    identity_fingerprint,
    load_identity,
    public_key_bytes,
    public_key_hex,
    save_identity,
    sign,
    verify,
)

pytestmark = pytest.mark.timeout(60)

# RFC 8032, section 7.1, TEST 1 and TEST 2 (an independent oracle for sign and the raw key).
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
     "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
     "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
]


@pytest.mark.parametrize("secret, public, message, signature", RFC8032)
def test_rfc8032_vectors(secret, public, message, signature):
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
    assert public_key_hex(key) == public
    assert public_key_bytes(key.public_key()) == bytes.fromhex(public)
    assert sign(key, bytes.fromhex(message)).hex() == signature
    verify(bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature))


def test_sign_verify_round_trip():
    key = generate_identity()
    message = b"omnifc hello: session 1, party a, x25519 key"
    signature = sign(key, message)
    assert len(signature) == 64
    assert verify(public_key_bytes(key), message, signature) is None


@pytest.mark.parametrize("position", [0, 31, 63])
def test_flipped_signature_byte_is_rejected(position):
    key = generate_identity()
    signature = bytearray(sign(key, b"message"))
    signature[position] ^= 0x01
    with pytest.raises(AuthenticationError):
        verify(public_key_bytes(key), b"message", bytes(signature))


def test_altered_message_wrong_key_and_malformed_inputs_are_rejected():
    key, other = generate_identity(), generate_identity()
    signature = sign(key, b"message")
    raw = public_key_bytes(key)
    bad_cases = [
        (raw, b"messagf", signature),                  # altered message
        (public_key_bytes(other), b"message", signature),  # wrong key
        (raw[:31], b"message", signature),             # malformed key
        (raw, b"message", signature[:63]),             # truncated signature
        (raw, b"message", b""),                        # no signature
    ]
    for public, message, sig in bad_cases:
        with pytest.raises(AuthenticationError) as info:
            verify(public, message, sig, party="a", phase="join")
        text = str(info.value)
        # opaque: names party and phase, never the key or the signature
        assert "'a'" in text and "'join'" in text
        assert raw.hex() not in text and signature.hex()[:16] not in text
        assert info.value.party == "a" and info.value.phase == "join"


def test_save_and_load_round_trip_with_mode_0600(tmp_path):
    key = generate_identity()
    path = save_identity(key, tmp_path / "a.identity.pem")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = load_identity(path)
    assert public_key_bytes(loaded) == public_key_bytes(key)
    # the loaded key signs what the original key's public half verifies
    verify(public_key_bytes(key), b"x", sign(loaded, b"x"))


def test_save_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "id.pem"
    path.write_text("existing")
    path.chmod(0o644)
    with pytest.raises(ParameterError, match="refusing to overwrite"):
        save_identity(generate_identity(), path)
    assert path.read_text() == "existing"
    key = generate_identity()
    save_identity(key, path, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a wider mode is narrowed
    assert public_key_bytes(load_identity(path)) == public_key_bytes(key)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_load_refuses_a_key_file_group_or_others_may_read_or_change(tmp_path, mode):
    path = save_identity(generate_identity(), tmp_path / "id.pem")
    load_identity(path)  # 0600 as written: accepted
    path.chmod(mode)
    with pytest.raises(ParameterError, match=f"identity key file .*id.pem.* mode {oct(mode)}"
                                             r".*chmod 600"):
        load_identity(path)


def test_load_refuses_missing_garbage_and_non_ed25519_files(tmp_path):
    with pytest.raises(ParameterError, match="not found"):
        load_identity(tmp_path / "missing.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a key")
    garbage.chmod(0o600)
    with pytest.raises(ParameterError, match="unencrypted PEM private key"):
        load_identity(garbage)
    ecdsa = tmp_path / "ecdsa.pem"
    ecdsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    ecdsa.chmod(0o600)
    with pytest.raises(ParameterError, match="expected an Ed25519 private key"):
        load_identity(ecdsa)


def test_wrong_key_types_are_parameter_errors():
    with pytest.raises(ParameterError):
        sign(ec.generate_private_key(ec.SECP256R1()), b"m")
    with pytest.raises(ParameterError):
        public_key_bytes("not a key")


def test_fingerprint_is_readable_base32_of_a_domain_separated_sha256():
    import base64
    import hashlib

    key = generate_identity()
    raw = public_key_bytes(key)
    digest = hashlib.sha256(b"omnifc-fingerprint-v1\0identity-key\0" + raw).digest()
    text = base64.b32encode(digest).decode()[:32]
    expected = "-".join(text[i:i + 4] for i in range(0, 32, 4))
    assert identity_fingerprint(key) == expected
    assert identity_fingerprint(raw) == identity_fingerprint(key)
    assert re.fullmatch(r"[A-Z2-7]{4}(-[A-Z2-7]{4}){7}", expected)
    assert identity_fingerprint(generate_identity()) != expected


# -- folded in from test_identity_bites.py ------------------------------------------------
# protocols._identity: every refusal says what was expected and what was seen (issue 14).
#
# Mutation testing left only the texts of the errors unobserved: the type that was passed
# instead of an Ed25519 key, and the file that does not hold one. These are what a user
# reads to fix the call, so each is pinned here.

def test_save_names_the_wrong_key_type(tmp_path):
    with pytest.raises(ParameterError, match=re.escape(
            "an identity key must be an Ed25519 private key, got X25519PrivateKey")):
        save_identity(x25519.X25519PrivateKey.generate(), tmp_path / "k.pem")
    assert not (tmp_path / "k.pem").exists()


def test_public_key_bytes_names_the_wrong_type():
    with pytest.raises(ParameterError, match=re.escape("expected an Ed25519 key, got str")):
        public_key_bytes("not a key")
    with pytest.raises(ParameterError,
                       match=re.escape("expected an Ed25519 key, got X25519PublicKey")):
        public_key_bytes(x25519.X25519PrivateKey.generate().public_key())
    key = generate_identity()
    assert public_key_bytes(key) == public_key_bytes(key.public_key())


def test_sign_names_the_wrong_key_type():
    with pytest.raises(ParameterError, match=re.escape(
            "signing needs an Ed25519 private key, got X25519PrivateKey")):
        sign(x25519.X25519PrivateKey.generate(), b"m")
    with pytest.raises(ParameterError, match="got bytes"):
        sign(b"\x00" * 32, b"m")


def test_load_names_the_file_and_what_it_holds(tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a key")
    garbage.chmod(0o600)
    with pytest.raises(ParameterError, match=re.escape(
            f"{str(garbage)!r} does not hold an unencrypted PEM private key")):
        load_identity(garbage)
    other = tmp_path / "x25519.pem"
    other.write_bytes(x25519.X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    other.chmod(0o600)
    with pytest.raises(ParameterError, match=re.escape(
            f"{str(other)!r} holds a X25519PrivateKey, expected an Ed25519 private key")):
        load_identity(other)

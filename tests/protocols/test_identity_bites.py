"""protocols._identity: every refusal says what was expected and what was seen (issue 14).

Mutation testing left only the texts of the errors unobserved: the type that was passed
instead of an Ed25519 key, and the file that does not hold one. These are what a user
reads to fix the call, so each is pinned here.
"""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import x25519

from finite_field import ParameterError
from protocols import generate_identity, load_identity, public_key_bytes, save_identity, sign

pytestmark = pytest.mark.timeout(60)


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

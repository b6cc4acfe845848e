"""protocols/_crypto.py pinned down: known-answer tests of the wire format and the
checks that mutation testing showed nothing else observed (docs/testing.md).

The known answers are recomputed here from the documented construction with the
primitives of pyca/cryptography and ``int.to_bytes``, not with the module's helpers:
HKDF-SHA256 over the X25519 secret with ``info`` = the length-prefixed transcript
("omnifc", version, "pair-key", session, roster digest, both ids and both ephemeral keys
in canonical order, purpose); the AES-GCM nonce (direction, 0, prime index,
round << 40 | chunk); the AAD = the transcript ("share", session, roster digest, round,
sender, receiver, prime, chunk); the mask stream key = HKDF-Expand(mask key,
transcript("mask-stream", SHA-256(transcript("mask-view", session, round, roster digest,
|B|, *B)), p, tile)), the mask = ChaCha20 under it (zero nonce) read as little-endian
32-bit words, masked to the bit length of p - 1, kept when below p (docs/protocol.md).
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from finite_field import AuthenticationError, ParameterError
from protocols._crypto import PROTOCOL_VERSION, EphemeralKey, KeyStream, MaskView, PairKeys
from oracles import chacha20_elements

PRIVATE = {"alice": bytes(range(32)), "bob": bytes(range(100, 132))}
#: A fixed roster digest (any 32 bytes: the digest itself is checked in test_crypto.py).
ROSTER = hashlib.sha256(b"kat-roster").digest()


def _field(value) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return len(data).to_bytes(4, "big") + data


def _transcript(label, *fields) -> bytes:
    return b"omnifc" + _field(PROTOCOL_VERSION) + _field(label) + b"".join(map(_field, fields))


def _public(name) -> bytes:
    return X25519PrivateKey.from_private_bytes(PRIVATE[name]).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _expected_key(session, purpose, roster=ROSTER) -> bytes:
    secret = X25519PrivateKey.from_private_bytes(PRIVATE["alice"]).exchange(
        X25519PrivateKey.from_private_bytes(PRIVATE["bob"]).public_key())
    (first, first_key), (second, second_key) = sorted(
        [("alice", _public("alice")), ("bob", _public("bob"))])
    info = _transcript("pair-key", session, roster, first, second, first_key, second_key,
                       purpose)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _keys(session="kat-session", roster=ROSTER):
    a = EphemeralKey(X25519PrivateKey.from_private_bytes(PRIVATE["alice"]))
    b = EphemeralKey(X25519PrivateKey.from_private_bytes(PRIVATE["bob"]))
    return (PairKeys.derive(a, b.public_bytes, session_id=session, me="alice", peer="bob",
                            roster_digest=roster),
            PairKeys.derive(b, a.public_bytes, session_id=session, me="bob", peer="alice",
                            roster_digest=roster))


def _nonce(sender, round_, prime_index, chunk_index) -> bytes:
    direction = 0 if sender == "alice" else 1   # "alice" < "bob"
    return (bytes([direction, 0]) + prime_index.to_bytes(2, "big")
            + ((round_ << 40) | chunk_index).to_bytes(8, "big"))


def test_pair_keys_are_hkdf_of_the_documented_info():
    other_roster = hashlib.sha256(b"another roster").digest()
    for session, roster in [("kat-session", ROSTER), ("another", ROSTER),
                            ("kat-session", other_roster)]:
        ka, kb = _keys(session, roster)
        for keys in (ka, kb):
            assert keys.encryption_key == _expected_key(session, "share-encryption", roster)
            assert keys.mask_key == _expected_key(session, "mask", roster)
    # The roster digest really is in the info: another roster gives other keys.
    assert _keys("kat-session", other_roster)[0].encryption_key != _keys()[0].encryption_key


@pytest.mark.parametrize("sender, round_, prime_index, chunk_index",
                         [("alice", 0, 0, 0), ("alice", 3, 2, 7), ("bob", 1, 5, 2**40 - 1)])
def test_nonce_and_aad_are_the_documented_bytes(sender, round_, prime_index, chunk_index):
    ka, kb = _keys()
    me, peer = (ka, kb) if sender == "alice" else (kb, ka)
    receiver = peer.me
    assert me.nonce(sender, round_, prime_index, chunk_index) == _nonce(
        sender, round_, prime_index, chunk_index)
    box = me.encrypt(b"known answer", round_=round_, prime_index=prime_index,
                     chunk_index=chunk_index)
    aad = _transcript("share", "kat-session", ROSTER, round_, sender, receiver, prime_index,
                      chunk_index)
    key = _expected_key("kat-session", "share-encryption")
    assert AESGCM(key).decrypt(_nonce(sender, round_, prime_index, chunk_index), box,
                               aad) == b"known answer"


def test_authentication_errors_name_the_sender_and_the_phase():
    ka, kb = _keys()
    box = ka.encrypt(b"x", round_=0, prime_index=0, chunk_index=0)
    where = dict(round_=0, prime_index=0, chunk_index=0)
    cases = [  # (what is wrong, decrypt arguments, expected party)
        ("claimed sender", dict(sender="mallory"), "mallory"),
        ("nonce on the wire", dict(sender="alice", nonce=bytes([1]) * 12), "alice"),
        ("ciphertext", dict(sender="alice", ciphertext=box[:-1] + bytes([box[-1] ^ 1])),
         "alice"),
    ]
    for what, arguments, party in cases:
        arguments = dict(arguments)
        ciphertext = arguments.pop("ciphertext", box)
        for phase in (None, "evaluation"):
            extra = {} if phase is None else {"phase": phase}
            with pytest.raises(AuthenticationError) as info:
                kb.decrypt(ciphertext, **where, **arguments, **extra)
            assert info.value.party == party, what
            assert info.value.phase == (phase or "shares"), what


def test_no_pair_key_with_oneself():
    a = EphemeralKey.generate()
    with pytest.raises(ParameterError, match="^a party has no pair key with itself$"):
        PairKeys.derive(a, a.public_bytes, session_id="s", me="alice", peer="alice",
                        roster_digest=ROSTER)


@pytest.mark.parametrize("size", [0, 16, 31, 33])
def test_pair_keys_refuse_a_roster_digest_that_is_not_32_bytes(size):
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    with pytest.raises(ParameterError,
                       match=f"^the roster digest must be 32 bytes, got {size}$"):
        PairKeys.derive(a, b.public_bytes, session_id="s", me="alice", peer="bob",
                        roster_digest=bytes(size))


@pytest.mark.parametrize("key, nonce", [(32, 12), (16, 16), (31, 16), (32, 17)])
def test_keystream_refuses_wrong_key_or_nonce_sizes(key, nonce):
    with pytest.raises(ParameterError, match="^ChaCha20 needs a 32-byte key and a 16-byte nonce$"):
        KeyStream(bytes(key), bytes(nonce))


def test_secrets_are_never_shown_or_pickled():
    ka, _ = _keys()
    ephemeral = EphemeralKey.generate()
    stream = KeyStream(bytes(32), bytes(16))
    assert repr(ephemeral) == "EphemeralKey(<secret>)"
    assert repr(stream) == "KeyStream(<secret>)"
    assert repr(ka) == "PairKeys(session='kat-session', 'alice'<->'bob', <secret>)"
    for obj, match in [(ephemeral, "^ephemeral keys are not picklable$"),
                       (ka, "^pair keys are not picklable$")]:
        with pytest.raises(TypeError, match=match):
            pickle.dumps(obj)


@pytest.mark.parametrize("p", [13, 17, 251, 257, 65537, 2147483629, 2147483647])
def test_mask_of_a_few_elements_is_the_prefix_of_a_long_one(p):
    # The fast path (mask the first words, keep them when none is rejected) must give
    # the same values as rejection sampling over the whole stream: the first k accepted
    # elements. A long mask at a small prime always rejects some words, so it takes the
    # general path; its prefixes are the reference. Independent of how the nonce is made.
    ka, kb = _keys()
    view = MaskView("kat-session", 1, ROSTER, ("alice", "bob"))
    seen = set()
    for tile in range(40):
        where = dict(view=view, prime_index=0, tile_index=tile)
        long = ka.mask(p, 4000, **where)
        assert long.min() >= 0 and long.max() < p
        assert np.array_equal(long, kb.mask(p, 4000, **where))
        for k in (1, 2, 3, 5):
            assert np.array_equal(ka.mask(p, k, **where), long[:k]), (tile, k)
        seen.update(long.tolist())
    if p <= 257:  # every residue shows up, the largest one p - 1 included
        assert seen == set(range(p))


def _expected_mask(mask_key, session, round_, roster, responders, p, tile, count):
    """The documented mask stream, from hashlib, HKDFExpand, ChaCha20 and int arithmetic."""
    view = hashlib.sha256(_transcript("mask-view", session, round_, roster, len(responders),
                                      *responders)).digest()
    key = HKDFExpand(algorithm=hashes.SHA256(), length=32,
                     info=_transcript("mask-stream", view, p, tile)).derive(mask_key)
    return chacha20_elements(key, p, count)


@pytest.mark.parametrize("p", [13, 257, 2147483647])
def test_masks_are_chacha20_under_the_documented_view_key(p):
    ka, kb = _keys()
    mask_key = _expected_key("kat-session", "mask")
    responders = ("alice", "bob", "carol")
    view = MaskView("kat-session", 4, ROSTER, responders)
    for tile in (0, 3):
        expected = _expected_mask(mask_key, "kat-session", 4, ROSTER, responders, p, tile, 50)
        for keys in (ka, kb):
            got = keys.mask(p, (5, 10), view=view, prime_index=0, tile_index=tile)
            assert got.reshape(-1).tolist() == expected, (p, tile)
    # Every field of the view is bound: changing any one of them changes the stream.
    changed = [("other-session", 4, ROSTER, responders), ("kat-session", 5, ROSTER, responders),
               ("kat-session", 4, hashlib.sha256(b"x").digest(), responders),
               ("kat-session", 4, ROSTER, ("alice", "bob")),
               ("kat-session", 4, ROSTER, ("bob", "alice", "carol"))]
    reference = ka.mask(p, 50, view=view, prime_index=0, tile_index=0).tolist()
    for fields in changed:
        assert _expected_mask(mask_key, *fields, p, 0, 50) != reference, fields
        assert ka.mask(p, 50, view=MaskView(*fields), prime_index=0,
                       tile_index=0).tolist() != reference, fields


def test_signed_masks_cancel_over_the_responders():
    ka, kb = _keys()
    view = MaskView("kat-session", 1, ROSTER, ("alice", "bob"))
    p = 2147483647
    plus = ka.signed_mask(p, 20, my_index=0, peer_index=1, view=view, prime_index=0,
                          tile_index=2)
    minus = kb.signed_mask(p, 20, my_index=1, peer_index=0, view=view, prime_index=0,
                           tile_index=2)
    assert plus.tolist() == _expected_mask(_expected_key("kat-session", "mask"), "kat-session",
                                           1, ROSTER, ("alice", "bob"), p, 2, 20)
    assert ((plus + minus) % p == 0).all() and plus.any()

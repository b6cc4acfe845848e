"""protocols/_crypto.py, protocol version 3, pinned down by known answers (mutation testing).

Known answers recomputed here from docs/protocol.md with hashlib, hmac, ``int.to_bytes``
and the primitives of pyca/cryptography, never with the module's helpers:

- the roster digest: SHA-256(transcript("roster", session, m, hello_1, sig_1, ...,
  hello_m, sig_m)), transcript = b"omnifc" + the length-prefixed (4-byte big-endian)
  version, label and fields, ints as their decimal digits;
- the view digest: SHA-256(transcript("mask-view", session, round, roster digest, |B|,
  *B));
- the group seed box: AES-256-GCM under the pair's share-encryption key, nonce
  (direction, 1, group index as 2 bytes, round as 8 bytes, big-endian), associated data
  transcript("group-seed", session, roster digest, round, view digest, sender, receiver,
  |members|, *members);
- the group mask key: HKDF-Expand(seed, transcript("group-mask-stream", view digest,
  |members|, *members, vector index, p, tile)) with L = 32;
- the mask stream: AES-256-CTR (zero counter) little-endian 32-bit words masked to the bit
  length of p - 1, kept when below p.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand

from finite_field import AuthenticationError
from protocols import _crypto
from protocols._crypto import (MaskView, group_mask_key, new_run_nonce, roster_digest,
                               stream_elements)
from kat_helpers import alice_and_bob_keys, x25519_public
from kat_helpers import transcript as _transcript
from oracles import mask_stream_elements

pytestmark = pytest.mark.timeout(120)

PRIVATE = {"alice": bytes(range(1, 33)), "bob": bytes(range(200, 232))}
ROSTER = hashlib.sha256(b"roster of the known answers").digest()


def _public(name) -> bytes:
    return x25519_public(PRIVATE[name])


def _share_key(session, roster=ROSTER) -> bytes:
    secret = X25519PrivateKey.from_private_bytes(PRIVATE["alice"]).exchange(
        X25519PrivateKey.from_private_bytes(PRIVATE["bob"]).public_key())
    info = _transcript("pair-key", session, roster, "alice", "bob", _public("alice"),
                       _public("bob"), "share-encryption")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _keys(session="kat", roster=ROSTER):
    return alice_and_bob_keys(PRIVATE, session, roster)


def _view_digest(session, round_, roster, responders) -> bytes:
    return hashlib.sha256(_transcript("mask-view", session, round_, roster, len(responders),
                                      *responders)).digest()


# -- the transcript encoding and the roster digest --------------------------------------

def test_transcript_of_text_ints_and_bytes_is_the_length_prefixed_encoding():
    # Non-ASCII text is UTF-8; an int is its decimal digits; bytes as they are; a length
    # prefix of 4 bytes, big-endian (b"\x00\x00\x01\x2c" for 300 bytes).
    long = bytes(range(256)) + bytes(44)
    expected = (b"omnifc" + b"\x00\x00\x00\x01" + b"3" + b"\x00\x00\x00\x03" + b"lab"
                + b"\x00\x00\x00\x06" + "émile".encode("utf-8") + b"\x00\x00\x00\x04"
                + b"1234" + b"\x00\x00\x00\x00" + b"\x00\x00\x01\x2c" + long)
    assert _crypto.transcript("lab", "émile", 1234, b"", long) == expected


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_roster_digest_is_sha256_of_the_documented_transcript(count):
    hellos = [(f"hello {i}".encode() * (i + 1), bytes([i]) * 64) for i in range(count)]
    flat = [x for pair in hellos for x in pair]
    expected = hashlib.sha256(_transcript("roster", "sess", count, *flat)).digest()
    # any iterable of pairs (a generator, bytearrays) gives the same digest
    got = roster_digest("sess", ((bytearray(h), memoryview(s)) for h, s in hellos))
    assert got == expected
    if count:
        # the party count is the decimal count, not the number of fields
        wrong = hashlib.sha256(_transcript("roster", "sess", 2 * count, *flat)).digest()
        assert got != wrong


def test_roster_digest_known_answer():
    # SHA-256 of b"omnifc" | 1 "3" | 6 "roster" | 1 "s" | 1 "1" | 2 "hi" | 3 "sig", written
    # out byte by byte.
    data = (b"omnifc\x00\x00\x00\x013\x00\x00\x00\x06roster\x00\x00\x00\x01s"
            b"\x00\x00\x00\x011\x00\x00\x00\x02hi\x00\x00\x00\x03sig")
    assert roster_digest("s", [(b"hi", b"sig")]) == hashlib.sha256(data).digest()


# -- the run nonce ------------------------------------------------------------------------

class _Source:
    """A ByteSource that records the sizes asked for."""

    def __init__(self):
        self.asked = []

    def bytes(self, n):
        self.asked.append(n)
        return bytearray((7 * i + 1) % 256 for i in range(n))


def test_run_nonce_from_a_source_is_its_first_32_bytes_as_bytes():
    source = _Source()
    nonce = new_run_nonce(source)
    assert source.asked == [32]
    assert type(nonce) is bytes and nonce == bytes((7 * i + 1) % 256 for i in range(32))


def test_run_nonce_without_a_source_is_32_bytes_of_os_urandom(monkeypatch):
    asked = []

    def fake_urandom(n):
        asked.append(n)
        return b"\xab" * n

    monkeypatch.setattr(os, "urandom", fake_urandom)
    assert new_run_nonce() == b"\xab" * 32
    assert new_run_nonce(None) == b"\xab" * 32
    assert asked == [32, 32]


def test_fresh_run_nonces_differ():
    nonces = {new_run_nonce() for _ in range(8)}
    assert len(nonces) == 8 and all(len(n) == 32 for n in nonces)


# -- the view -------------------------------------------------------------------------------

def test_view_digest_is_sha256_of_the_documented_transcript():
    view = MaskView("sess", 3, ROSTER, ["alice", "bob", "carol"])
    assert view.responders == ("alice", "bob", "carol")
    assert view.digest == _view_digest("sess", 3, ROSTER, ("alice", "bob", "carol"))


def test_view_takes_responders_as_text_and_any_bytes_like_digest():
    # numpy strings (what a roster array gives) are plain str in the view and its digest;
    # the roster digest may come as a bytearray.
    names = np.array(["alice", "bob"])
    view = MaskView("sess", 2, bytearray(ROSTER), names)
    assert view.responders == ("alice", "bob")
    assert all(type(r) is str for r in view.responders)
    assert view.digest == _view_digest("sess", 2, ROSTER, ("alice", "bob"))


# -- group seeds ----------------------------------------------------------------------------

def _seed_nonce(sender, round_, group_index) -> bytes:
    direction = 0 if sender == "alice" else 1   # "alice" < "bob"
    return bytes([direction, 1]) + group_index.to_bytes(2, "big") + round_.to_bytes(8, "big")


def _seed_aad(session, sender, receiver, view_round, view_digest, members) -> bytes:
    return _transcript("group-seed", session, ROSTER, view_round, view_digest, sender,
                       receiver, len(members), *members)


@pytest.mark.parametrize("sender, round_, group_index", [
    ("alice", 1, 0), ("bob", 1, 0), ("alice", 7, 3), ("bob", 2**40 + 5, 513),
    ("alice", 2**63 + 9, 65535), ("bob", 2**64 - 1, 40000)])   # unsigned 2 and 8 bytes
def test_group_seed_box_is_aes_gcm_with_the_documented_nonce_and_aad(sender, round_,
                                                                      group_index):
    ka, kb = _keys()
    me, peer = (ka, kb) if sender == "alice" else (kb, ka)
    receiver = peer.me
    members = ("alice", "bob", "carol")
    responders = ("alice", "bob", "carol", "dave")
    view = MaskView("kat", round_, ROSTER, responders)
    seed = bytes(range(32, 64))
    box = me.encrypt_seed(seed, view=view, group_index=group_index, members=list(members))
    key = _share_key("kat")
    digest = _view_digest("kat", round_, ROSTER, responders)
    nonce = _seed_nonce(sender, round_, group_index)
    aad = _seed_aad("kat", sender, receiver, round_, digest, members)
    assert AESGCM(key).decrypt(nonce, box, aad) == seed
    assert len(box) == 48   # 32-byte seed + 16-byte tag (the coordinator's size check)
    # and the documented box opens at the peer
    assert peer.decrypt_seed(AESGCM(key).encrypt(nonce, seed, aad), view=view,
                             group_index=group_index, members=members) == seed


def test_seed_nonce_never_collides_with_a_share_nonce():
    # Same key, same direction, same "index" and round: the second byte tells them apart.
    ka, _ = _keys()
    view = MaskView("kat", 0, ROSTER, ("alice", "bob"))
    seed_box = ka.encrypt_seed(bytes(32), view=view, group_index=0, members=("alice", "bob"))
    key = _share_key("kat")
    share_nonce = bytes([0, 0]) + (0).to_bytes(2, "big") + (0).to_bytes(8, "big")
    with pytest.raises(InvalidTag):
        AESGCM(key).decrypt(share_nonce, seed_box,
                            _seed_aad("kat", "alice", "bob", 0,
                                      _view_digest("kat", 0, ROSTER, ("alice", "bob")),
                                      ("alice", "bob")))


def test_a_seed_opens_only_for_its_view_group_members_and_direction():
    ka, kb = _keys()
    members = ("alice", "bob", "carol")
    view = MaskView("kat", 2, ROSTER, ("alice", "bob", "carol"))
    seed = os.urandom(32)
    box = ka.encrypt_seed(seed, view=view, group_index=1, members=members)
    assert kb.decrypt_seed(box, view=view, group_index=1, members=members) == seed
    assert kb.decrypt_seed(box, view=view, group_index=1, members=list(members)) == seed
    wrong = [
        dict(view=MaskView("kat", 3, ROSTER, view.responders), group_index=1, members=members),
        dict(view=MaskView("kat", 2, ROSTER, ("alice", "bob", "dave")), group_index=1,
             members=members),
        dict(view=MaskView("kat", 2, hashlib.sha256(b"x").digest(), view.responders),
             group_index=1, members=members),
        dict(view=MaskView("other", 2, ROSTER, view.responders), group_index=1,
             members=members),
        dict(view=view, group_index=2, members=members),
        dict(view=view, group_index=1, members=("alice", "bob")),
        dict(view=view, group_index=1, members=("bob", "alice", "carol")),
    ]
    for arguments in wrong:
        with pytest.raises(AuthenticationError) as info:
            kb.decrypt_seed(box, **arguments)
        assert (info.value.party, info.value.phase) == ("alice", "evaluation"), arguments
    # a box alice sent cannot be opened by alice as if bob had sent it (direction)
    with pytest.raises(AuthenticationError) as info:
        ka.decrypt_seed(box, view=view, group_index=1, members=members)
    assert (info.value.party, info.value.phase) == ("bob", "evaluation")
    # tampered or truncated
    for bad in (box[:-1] + bytes([box[-1] ^ 1]), box[:10], b""):
        with pytest.raises(AuthenticationError) as info:
            kb.decrypt_seed(bad, view=view, group_index=1, members=members)
        assert (info.value.party, info.value.phase) == ("alice", "evaluation")


def test_seed_members_are_bound_as_text():
    # members given as numpy strings are the same names (str(m)) as plain text
    ka, kb = _keys()
    view = MaskView("kat", 1, ROSTER, ("alice", "bob"))
    box = ka.encrypt_seed(bytes(32), view=view, group_index=0,
                          members=np.array(["alice", "bob"]))
    assert kb.decrypt_seed(box, view=view, group_index=0, members=("alice", "bob")) == bytes(32)


# -- the group mask key ----------------------------------------------------------------------

@pytest.mark.parametrize("members, vector_index, prime, tile", [
    (("alice", "bob", "carol"), 0, 2147483647, 0),
    (("bob", "dave"), 3, 13, 17),
])
def test_group_mask_key_is_hkdf_expand_of_the_documented_info(members, vector_index, prime,
                                                               tile):
    seed = bytes(range(64, 96))
    responders = ("alice", "bob", "carol", "dave")
    view = MaskView("kat", 5, ROSTER, responders)
    info = _transcript("group-mask-stream", _view_digest("kat", 5, ROSTER, responders),
                       len(members), *members, vector_index, prime, tile)
    expected = HKDFExpand(algorithm=hashes.SHA256(), length=32, info=info).derive(seed)
    # numpy integers, a list of numpy strings and a bytearray seed: the same key
    got = group_mask_key(bytearray(seed), view, list(np.array(members)),
                         np.int64(vector_index), np.int64(prime), np.int32(tile))
    assert got == expected
    assert group_mask_key(seed, view, members, vector_index, prime, tile) == expected


# -- mask streams ----------------------------------------------------------------------------

_stream = mask_stream_elements   # the documented stream, word by word (tests/oracles.py)


@pytest.mark.parametrize("shape", [7, (7,), (2, 3), [3, 1, 2], np.int64(5), ()])
def test_stream_elements_shape_dtype_and_values(shape):
    key = bytes(range(7, 39))
    p = 257
    expected_shape = ((int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape))
    count = int(np.prod(expected_shape, dtype=np.int64))
    reference = _stream(key, p, count)
    for dtype in (np.int64, np.uint32, np.int32, np.float64):
        got = stream_elements(key, p, shape, dtype)
        assert got.shape == expected_shape and got.dtype == np.dtype(dtype)
        assert got.reshape(-1).tolist() == reference
    got = stream_elements(key, p, shape)   # default dtype
    assert got.dtype == np.dtype(np.int64) and got.reshape(-1).tolist() == reference


def test_stream_elements_of_zero_elements():
    assert stream_elements(bytes(32), 13, (0, 4)).shape == (0, 4)
    assert stream_elements(bytes(32), 13, 0).shape == (0,)


@pytest.mark.parametrize("p", [2, 3, 13, 65537, 2147483647])
def test_pair_mask_dtype_and_signed_mask_values(p):
    ka, kb = _keys()
    view = MaskView("kat", 1, ROSTER, ("alice", "bob"))
    where = dict(view=view, prime_index=0, tile_index=4)
    m = ka.mask(p, (3, 4), dtype=np.int32, **where)
    assert m.dtype == np.int32 and m.shape == (3, 4)
    reference = np.array(_stream(_crypto.view_mask_key(ka.mask_key, view, p, 4), p, 12))
    assert m.reshape(-1).tolist() == reference.tolist()
    plus = ka.signed_mask(p, 12, my_index=0, peer_index=1, **where)
    minus = kb.signed_mask(p, 12, my_index=1, peer_index=0, **where)
    assert plus.tolist() == reference.tolist()
    # -mask mod p, element by element with Python ints: 0 stays 0, never p
    assert minus.tolist() == [(p - int(x)) % p for x in reference]
    # the indices are roster positions, not names: a larger position comes later
    assert ka.signed_mask(p, 12, my_index=5, peer_index=2, **where).tolist() == minus.tolist()
    assert kb.signed_mask(p, 12, my_index=2, peer_index=9, **where).tolist() == plus.tolist()


# -- ElementStream -------------------------------------------------------------------------

@pytest.mark.parametrize("prime", [2, 3, 2**31 - 1])
def test_element_stream_accepts_every_modulus_in_2_to_2_to_the_31(prime):
    key = bytes(range(32))
    stream = _crypto.ElementStream(key, prime)
    assert stream.next(40).tolist() == _stream(key, prime, 40)


@pytest.mark.parametrize("prime", [0, 1, -5, 2**31, 2**31 + 11, 2**32, 2**32 + 15, 3**31])
def test_element_stream_refuses_a_modulus_outside_2_to_2_to_the_31(prime):
    with pytest.raises(_crypto.ParameterError,
                       match=f"^modulus must be in \\[2, 2\\^31\\), got {prime}$"):
        _crypto.ElementStream(bytes(32), prime)


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_element_stream_refuses_a_key_that_is_not_32_bytes(size):
    with pytest.raises(_crypto.ParameterError,
                       match=f"^a mask stream needs a 32-byte key, got {size} bytes$"):
        _crypto.ElementStream(bytes(size), 13)


def test_element_stream_next_gives_uint32_views_even_of_nothing():
    stream = _crypto.ElementStream(bytes(32), 13)
    empty = stream.next(0)
    assert empty.dtype == np.uint32 and empty.shape == (0,)
    assert stream.next(3).dtype == np.uint32
    assert stream.next(0).dtype == np.uint32


def test_a_stream_longer_than_one_chunk_fills_every_chunk_near_2_to_the_31():
    # p = 2^31 - 1 almost never rejects a word, so the first chunk of MASK_CHUNK words
    # is usually kept whole: the next chunks must still be drawn.
    key = bytes(range(3, 35))
    p = 2**31 - 1
    count = 2 * _crypto.MASK_CHUNK + 100
    assert stream_elements(key, p, count).tolist() == _stream(key, p, count)
    stream = _crypto.ElementStream(key, p)
    assert stream.next(count).tolist() == _stream(key, p, count)


def test_element_streams_are_never_shown_or_pickled():
    import pickle

    stream = _crypto.ElementStream(bytes(range(32)), 13)
    assert repr(stream) == "ElementStream(<secret>)"
    with pytest.raises(TypeError, match="^mask streams are not picklable$"):
        pickle.dumps(stream)


@pytest.mark.parametrize("sender, round_, prime_index, chunk_index", [
    ("alice", 2**23, 65535, 5), ("bob", 2**24 - 1, 40000, 2**40 - 1)])
def test_share_nonce_fields_are_unsigned(sender, round_, prime_index, chunk_index):
    # (direction, 0, prime index as 2 unsigned bytes, round << 40 | chunk as 8 unsigned
    # bytes): the whole unsigned ranges, not only the values below 2^15 and 2^63
    ka, kb = _keys()
    me, peer = (ka, kb) if sender == "alice" else (kb, ka)
    nonce = (bytes([0 if sender == "alice" else 1, 0]) + prime_index.to_bytes(2, "big")
             + ((round_ << 40) | chunk_index).to_bytes(8, "big"))
    assert me.nonce(sender, round_, prime_index, chunk_index) == nonce
    box = me.encrypt(b"x", round_=round_, prime_index=prime_index, chunk_index=chunk_index)
    aad = _transcript("share", "kat", ROSTER, round_, sender, peer.me, prime_index,
                      chunk_index)
    assert AESGCM(_share_key("kat")).decrypt(nonce, box, aad) == b"x"

"""Pairwise keys, AEAD binding and the mask PRG."""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand
from scipy import stats

from finite_field import AuthenticationError, ParameterError
from kat_helpers import alice_and_bob_keys, x25519_public
from kat_helpers import transcript as _transcript
from oracles import mask_stream_elements
from protocols._crypto import (
    EphemeralKey,
    KeyStream,
    MaskView,
    PairKeys,
    roster_digest,
    view_mask_key,
)

ROSTER = roster_digest("s1", [(b"hello-alice", b"sig-a"), (b"hello-bob", b"sig-b")])
VIEW = MaskView("s1", 1, ROSTER, ("alice", "bob", "carol"))


def pair(session="s1", seed=None, roster=ROSTER):
    if seed is None:
        a, b = EphemeralKey.generate(), EphemeralKey.generate()
    else:  # the test hook: reproducible keys (never used outside tests)
        source = np.random.Generator(np.random.PCG64(seed))
        a, b = EphemeralKey.generate(source), EphemeralKey.generate(source)
    return (PairKeys.derive(a, b.public_bytes, session_id=session, me="alice", peer="bob",
                            roster_digest=roster),
            PairKeys.derive(b, a.public_bytes, session_id=session, me="bob", peer="alice",
                            roster_digest=roster))


def test_both_ends_derive_the_same_keys_and_purposes_differ():
    ka, kb = pair()
    assert ka.encryption_key == kb.encryption_key and ka.mask_key == kb.mask_key
    assert ka.encryption_key != ka.mask_key
    assert "secret" in repr(ka) and ka.encryption_key.hex() not in repr(ka)


def test_session_id_and_roster_are_bound_into_the_keys():
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    k1 = PairKeys.derive(a, b.public_bytes, session_id="s1", me="alice", peer="bob",
                         roster_digest=ROSTER)
    k2 = PairKeys.derive(a, b.public_bytes, session_id="s2", me="alice", peer="bob",
                         roster_digest=ROSTER)
    assert k1.encryption_key != k2.encryption_key and k1.mask_key != k2.mask_key
    # the same pair of ephemeral keys under another roster (e.g. a replayed hello of a
    # third party, or the roster in another order) gives unrelated keys
    other = roster_digest("s1", [(b"hello-bob", b"sig-b"), (b"hello-alice", b"sig-a")])
    k3 = PairKeys.derive(a, b.public_bytes, session_id="s1", me="alice", peer="bob",
                         roster_digest=other)
    assert k3.encryption_key != k1.encryption_key and k3.mask_key != k1.mask_key
    box = k1.encrypt(b"share", round_=0, prime_index=0, chunk_index=0)
    kb3 = PairKeys.derive(b, a.public_bytes, session_id="s1", me="bob", peer="alice",
                          roster_digest=other)
    with pytest.raises(AuthenticationError):
        kb3.decrypt(box, sender="alice", round_=0, prime_index=0, chunk_index=0)
    with pytest.raises(Exception, match="32 bytes"):
        PairKeys.derive(a, b.public_bytes, session_id="s1", me="alice", peer="bob",
                        roster_digest=b"")


def test_roster_digest_binds_order_content_and_session():
    hellos = [(b"h1", b"s1"), (b"h2", b"s2"), (b"h3", b"s3")]
    base = roster_digest("s", hellos)
    assert len(base) == 32 and base == roster_digest("s", list(hellos))
    assert base != roster_digest("s", hellos[::-1])
    assert base != roster_digest("t", hellos)
    assert base != roster_digest("s", hellos[:2])
    assert base != roster_digest("s", [(b"h1", b"s1"), (b"h2", b"s2"), (b"h3", b"s4")])
    # length-prefixed: moving a byte between fields changes the digest
    assert roster_digest("s", [(b"ab", b"c")]) != roster_digest("s", [(b"a", b"bc")])


def test_round_trip_and_every_bound_field_is_checked():
    ka, kb = pair()
    box = ka.encrypt(b"payload", round_=0, prime_index=1, chunk_index=2)
    assert kb.decrypt(box, sender="alice", round_=0, prime_index=1, chunk_index=2) == b"payload"
    for change in [dict(round_=1), dict(prime_index=0), dict(chunk_index=3)]:
        args = dict(sender="alice", round_=0, prime_index=1, chunk_index=2) | change
        with pytest.raises(AuthenticationError):
            kb.decrypt(box, **args)
    with pytest.raises(AuthenticationError):  # the reverse direction uses another nonce
        ka.decrypt(box, sender="bob", round_=0, prime_index=1, chunk_index=2)
    flipped = bytearray(box)
    flipped[3] ^= 1
    with pytest.raises(AuthenticationError) as info:
        kb.decrypt(bytes(flipped), sender="alice", round_=0, prime_index=1, chunk_index=2)
    assert "authentication" in str(info.value) and "payload" not in str(info.value)


def test_nonces_differ_by_direction_and_chunk():
    ka, _ = pair()
    nonces = {ka.nonce(s, r, k, c) for s in ("alice", "bob") for r in (0, 1) for k in (0, 1)
              for c in (0, 1, 2)}
    assert len(nonces) == 24 and all(len(n) == 12 for n in nonces)


def test_signed_masks_cancel_over_any_responding_set():
    p, shape = 2147483647, (5, 7)
    keys = [EphemeralKey.generate() for _ in range(4)]
    names = ["a", "b", "c", "d"]
    pk = {(i, j): PairKeys.derive(keys[i], keys[j].public_bytes, session_id="s",
                                  me=names[i], peer=names[j], roster_digest=ROSTER)
          for i in range(4) for j in range(4) if i != j}
    for responders in ([0, 1, 2, 3], [0, 2, 3], [1, 3]):
        view = MaskView("s", 2, ROSTER, [names[i] for i in responders])
        total = np.zeros(shape, dtype=np.int64)
        for i in responders:
            for j in responders:
                if i != j:
                    total += pk[i, j].signed_mask(p, shape, my_index=i, peer_index=j,
                                                  view=view, prime_index=0, tile_index=1)
        assert not (total % p).any()


def test_masks_of_inconsistent_views_do_not_cancel():
    # Party 0 is told B = {0, 1, 2}, party 1 is told B = {0, 1, 3}: their pair masks come
    # from different views, so they stay in the sum (and look uniform).
    p, shape = 2147483647, (5, 7)
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    k01 = PairKeys.derive(a, b.public_bytes, session_id="s", me="p0", peer="p1",
                          roster_digest=ROSTER)
    k10 = PairKeys.derive(b, a.public_bytes, session_id="s", me="p1", peer="p0",
                          roster_digest=ROSTER)
    view0 = MaskView("s", 1, ROSTER, ("p0", "p1", "p2"))
    view1 = MaskView("s", 1, ROSTER, ("p0", "p1", "p3"))
    total = (k01.signed_mask(p, shape, my_index=0, peer_index=1, view=view0, prime_index=0,
                             tile_index=0)
             + k10.signed_mask(p, shape, my_index=1, peer_index=0, view=view1, prime_index=0,
                               tile_index=0)) % p
    assert (total != 0).sum() >= shape[0] * shape[1] - 1
    same = (k01.signed_mask(p, shape, my_index=0, peer_index=1, view=view0, prime_index=0,
                            tile_index=0)
            + k10.signed_mask(p, shape, my_index=1, peer_index=0, view=view0, prime_index=0,
                              tile_index=0)) % p
    assert not same.any()


def test_masks_change_with_every_part_of_the_view():
    ka, _ = pair()
    p = 2147483647
    base = ka.mask(p, 64, view=VIEW, prime_index=0, tile_index=0)
    other_roster = roster_digest("s1", [(b"hello-bob", b"sig-b")])
    views = [MaskView("s2", 1, ROSTER, VIEW.responders), MaskView("s1", 2, ROSTER, VIEW.responders),
             MaskView("s1", 1, other_roster, VIEW.responders),
             MaskView("s1", 1, ROSTER, ("alice", "bob")),
             MaskView("s1", 1, ROSTER, ("bob", "alice", "carol"))]
    for view in views:
        assert not np.array_equal(base, ka.mask(p, 64, view=view, prime_index=0, tile_index=0))
    assert not np.array_equal(base, ka.mask(p, 64, view=VIEW, prime_index=0, tile_index=1))
    assert not np.array_equal(base, ka.mask(2147483629, 64, view=VIEW, prime_index=1,
                                            tile_index=0))
    assert np.array_equal(base, ka.mask(p, 64, view=MaskView("s1", 1, ROSTER,
                                                               VIEW.responders),
                                        prime_index=0, tile_index=0))


def test_mask_prg_is_uniform_on_a_small_prime():
    # Chi-square goodness of fit, 250 degrees of freedom; false-positive rate 1e-6, fixed seed.
    ka, _ = pair(seed=251)
    p = 251
    values = ka.mask(p, 50_000, view=VIEW, prime_index=0, tile_index=0)
    assert values.min() >= 0 and values.max() < p
    counts = np.bincount(values, minlength=p)
    assert stats.chisquare(counts).pvalue > 1e-6


def test_keystream_is_a_deterministic_byte_source():
    key, nonce = bytes(range(32)), bytes(16)
    assert KeyStream(key, nonce).bytes(40) == KeyStream(key, nonce).bytes(40)
    s = KeyStream(key, nonce)
    assert s.bytes(8) + s.bytes(8) == KeyStream(key, nonce).bytes(16)


@pytest.mark.parametrize("p", [2147483647, 2147483629, 1073741827, 251])
def test_mask_fast_path_equals_plain_rejection_sampling(p):
    from finite_field import uniform_elements

    ka, _ = pair()
    for tile in range(3):
        key = view_mask_key(ka.mask_key, VIEW, p, tile)
        expected = uniform_elements(p, (40, 50), KeyStream(key, bytes(16)))
        assert np.array_equal(ka.mask(p, (40, 50), view=VIEW, prime_index=0, tile_index=tile),
                              expected)


def test_view_mask_key_is_hkdf_expand_of_the_view():
    # Independent oracle: cryptography's HKDF-Expand over the documented info string.
    import hashlib

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    from protocols._crypto import transcript

    ka, _ = pair()
    view_digest = hashlib.sha256(transcript("mask-view", VIEW.session_id, VIEW.round, ROSTER,
                                            3, "alice", "bob", "carol")).digest()
    info = transcript("mask-stream", view_digest, 2147483647, 7)
    expected = HKDFExpand(algorithm=hashes.SHA256(), length=32, info=info).derive(ka.mask_key)
    assert view_mask_key(ka.mask_key, VIEW, 2147483647, 7) == expected
    assert view_mask_key(ka.mask_key, VIEW, 2147483647, 8) != expected


# -- folded in from test_crypto_bites.py --------------------------------------------------
# protocols/_crypto.py pinned down: known-answer tests of the wire format and the
# checks that mutation testing showed nothing else observed (docs/testing.md).
#
# The known answers are recomputed here from the documented construction with the
# primitives of pyca/cryptography and ``int.to_bytes``, not with the module's helpers:
# HKDF-SHA256 over the X25519 secret with ``info`` = the length-prefixed transcript
# ("omnifc", version, "pair-key", session, roster digest, both ids and both ephemeral keys
# in canonical order, purpose); the AES-GCM nonce (direction, 0, prime index,
# round << 40 | chunk); the AAD = the transcript ("share", session, roster digest, round,
# sender, receiver, prime, chunk); the mask stream key = HKDF-Expand(mask key,
# transcript("mask-stream", SHA-256(transcript("mask-view", session, round, roster digest,
# |B|, *B)), p, tile)), the mask = AES-256-CTR under it (zero counter) read as little-endian
# 32-bit words, masked to the bit length of p - 1, kept when below p (docs/protocol.md).

PRIVATE = {"alice": bytes(range(32)), "bob": bytes(range(100, 132))}
#: A fixed roster digest (any 32 bytes: the digest itself is checked in test_crypto.py).
KAT_ROSTER = hashlib.sha256(b"kat-roster").digest()


def _public(name) -> bytes:
    return x25519_public(PRIVATE[name])


def _expected_key(session, purpose, roster=KAT_ROSTER) -> bytes:
    secret = X25519PrivateKey.from_private_bytes(PRIVATE["alice"]).exchange(
        X25519PrivateKey.from_private_bytes(PRIVATE["bob"]).public_key())
    (first, first_key), (second, second_key) = sorted(
        [("alice", _public("alice")), ("bob", _public("bob"))])
    info = _transcript("pair-key", session, roster, first, second, first_key, second_key,
                       purpose)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _keys(session="kat-session", roster=KAT_ROSTER):
    return alice_and_bob_keys(PRIVATE, session, roster)


def _nonce(sender, round_, prime_index, chunk_index) -> bytes:
    direction = 0 if sender == "alice" else 1   # "alice" < "bob"
    return (bytes([direction, 0]) + prime_index.to_bytes(2, "big")
            + ((round_ << 40) | chunk_index).to_bytes(8, "big"))


def test_pair_keys_are_hkdf_of_the_documented_info():
    other_roster = hashlib.sha256(b"another roster").digest()
    for session, roster in [("kat-session", KAT_ROSTER), ("another", KAT_ROSTER),
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
    aad = _transcript("share", "kat-session", KAT_ROSTER, round_, sender, receiver, prime_index,
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
                        roster_digest=KAT_ROSTER)


@pytest.mark.parametrize("size", [0, 16, 31, 33])
def test_pair_keys_refuse_a_roster_digest_that_is_not_32_bytes(size):
    a, b = EphemeralKey.generate(), EphemeralKey.generate()
    with pytest.raises(ParameterError,
                       match=f"^the roster digest must be 32 bytes, got {size}$"):
        PairKeys.derive(a, b.public_bytes, session_id="s", me="alice", peer="bob",
                        roster_digest=bytes(size))


@pytest.mark.parametrize("key, nonce", [(32, 12), (16, 16), (31, 16), (32, 17)])
def test_keystream_refuses_wrong_key_or_nonce_sizes(key, nonce):
    with pytest.raises(ParameterError,
                       match="^a keystream needs a 32-byte key and a 16-byte counter block$"):
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
    view = MaskView("kat-session", 1, KAT_ROSTER, ("alice", "bob"))
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
    """The documented mask stream, from hashlib, HKDFExpand, AES and int arithmetic."""
    view = hashlib.sha256(_transcript("mask-view", session, round_, roster, len(responders),
                                      *responders)).digest()
    key = HKDFExpand(algorithm=hashes.SHA256(), length=32,
                     info=_transcript("mask-stream", view, p, tile)).derive(mask_key)
    return mask_stream_elements(key, p, count)


@pytest.mark.parametrize("p", [13, 257, 2147483647])
def test_masks_are_aes_ctr_under_the_documented_view_key(p):
    ka, kb = _keys()
    mask_key = _expected_key("kat-session", "mask")
    responders = ("alice", "bob", "carol")
    view = MaskView("kat-session", 4, KAT_ROSTER, responders)
    for tile in (0, 3):
        expected = _expected_mask(mask_key, "kat-session", 4, KAT_ROSTER, responders, p, tile, 50)
        for keys in (ka, kb):
            got = keys.mask(p, (5, 10), view=view, prime_index=0, tile_index=tile)
            assert got.reshape(-1).tolist() == expected, (p, tile)
    # Every field of the view is bound: changing any one of them changes the stream.
    changed = [("other-session", 4, KAT_ROSTER, responders), ("kat-session", 5, KAT_ROSTER, responders),
               ("kat-session", 4, hashlib.sha256(b"x").digest(), responders),
               ("kat-session", 4, KAT_ROSTER, ("alice", "bob")),
               ("kat-session", 4, KAT_ROSTER, ("bob", "alice", "carol"))]
    reference = ka.mask(p, 50, view=view, prime_index=0, tile_index=0).tolist()
    for fields in changed:
        assert _expected_mask(mask_key, *fields, p, 0, 50) != reference, fields
        assert ka.mask(p, 50, view=MaskView(*fields), prime_index=0,
                       tile_index=0).tolist() != reference, fields


def test_signed_masks_cancel_over_the_responders():
    ka, kb = _keys()
    view = MaskView("kat-session", 1, KAT_ROSTER, ("alice", "bob"))
    p = 2147483647
    plus = ka.signed_mask(p, 20, my_index=0, peer_index=1, view=view, prime_index=0,
                          tile_index=2)
    minus = kb.signed_mask(p, 20, my_index=1, peer_index=0, view=view, prime_index=0,
                           tile_index=2)
    assert plus.tolist() == _expected_mask(_expected_key("kat-session", "mask"), "kat-session",
                                           1, KAT_ROSTER, ("alice", "bob"), p, 2, 20)
    assert ((plus + minus) % p == 0).all() and plus.any()

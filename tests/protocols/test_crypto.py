"""Pairwise keys, AEAD binding and the mask PRG."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from finite_field import AuthenticationError
from protocols._crypto import (EphemeralKey, KeyStream, MaskView, PairKeys, roster_digest,
                               view_mask_key)

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

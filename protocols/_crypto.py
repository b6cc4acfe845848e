"""Cryptographic primitives of the share-exchange protocol.

- **Ephemeral keys**: one X25519 key pair per party and session; the public half travels in
  the hello with a fresh 32-byte run nonce, signed by the party's long-term Ed25519 identity
  key (pinned in the session config), so the coordinator cannot substitute keys.
- **Roster digest**: SHA-256 over every signed hello in roster order
  (:func:`roster_digest`). It binds the whole join transcript (every party's ephemeral key
  and run nonce): two parties derive the same keys only if they saw the same roster, so
  nothing of an earlier run of the same session config, and no roster shown to only some
  parties, is ever accepted. Every party signs the digest it accepted (the roster
  confirmation, :mod:`protocols._party`) and uses no key derived from it before every
  other party signed the same digest, so nothing is encrypted to a replayed hello's old
  ephemeral key.
- **Pairwise keys**: HKDF-SHA256 over the X25519 secret. ``info`` binds the protocol
  version, the session id, the roster digest, both party ids in canonical (sorted) order,
  both ephemeral public keys and a purpose (``share-encryption`` or ``mask``), so keys of
  different purposes, runs, sessions or pairs are independent.
- **Share encryption**: AES-256-GCM. The 96-bit nonce is derived from (direction, round,
  prime index, chunk index) and is never reused under one key (keys are fresh per run);
  the associated data binds protocol version, session, roster digest, round, sender,
  receiver, prime index and chunk index. Any failure raises the opaque
  :class:`~finite_field.AuthenticationError`.
- **Masks bound to the exact view**: :func:`view_mask_key` derives the key of one mask
  stream with HKDF-Expand from the pair's mask key and the view: (session, round, roster
  digest, the exact responding set B in order, prime, tile). The stream is AES-256-CTR under
  that key (zero counter), turned into uniform field elements by rejection sampling
  (:func:`finite_field.uniform_elements`). Party j adds ``+PRG`` for every responding k
  after it in roster order and ``-PRG`` for every k before it, so the masks cancel in the
  sum over B when every party of B was shown the same view, and are independent
  pseudorandom streams otherwise: a coordinator that shows different parties different
  sets B (or rosters) gets only noise.

Examples
--------
>>> import numpy as np
>>> a, b = EphemeralKey.generate(), EphemeralKey.generate()
>>> roster = roster_digest("s", [(b"hello of a", b"sig"), (b"hello of b", b"sig")])
>>> ka = PairKeys.derive(a, b.public_bytes, session_id="s", me="a", peer="b",
...                      roster_digest=roster)
>>> kb = PairKeys.derive(b, a.public_bytes, session_id="s", me="b", peer="a",
...                      roster_digest=roster)
>>> box = ka.encrypt(b"share", round_=0, prime_index=0, chunk_index=0)
>>> kb.decrypt(box, sender="a", round_=0, prime_index=0, chunk_index=0)
b'share'
>>> view = MaskView("s", 1, roster, ("a", "b", "c"))
>>> m = ka.mask(13, (2, 3), view=view, prime_index=0, tile_index=0)
>>> bool((m == kb.mask(13, (2, 3), view=view, prime_index=0, tile_index=0)).all())
True
>>> other = MaskView("s", 1, roster, ("a", "b"))   # another responding set
>>> bool((m == kb.mask(13, (2, 3), view=other, prime_index=0, tile_index=0)).all())
False
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import finite_field
from finite_field import AuthenticationError, ParameterError

__all__ = ["PROTOCOL_VERSION", "EphemeralKey", "PairKeys", "KeyStream", "MaskView",
           "transcript", "roster_digest", "view_mask_key", "group_mask_key", "stream_elements",
           "ElementStream", "MASK_CHUNK",
           "new_run_nonce", "RUN_NONCE_BYTES"]

#: Version of the wire protocol; bound into every key, signature and AAD. Version 2 added
#: the run nonce, the roster digest, view-bound masks, row caps and the integrity checks
#: (group seeds, unweighted masked uploads). Version 3 draws the mask streams from
#: AES-256-CTR instead of ChaCha20 (every mask value changes; 2.6x the keystream speed
#: with AES-NI, issue 25). A config or peer of another version is refused by name instead
#: of failing later on a signature or a mask that does not cancel.
PROTOCOL_VERSION = 3

#: Bytes of fresh randomness every party adds to its signed hello.
RUN_NONCE_BYTES = 32

_NONCE_BYTES = 12


def _field(value) -> bytes:
    """Length-prefixed encoding: unambiguous concatenation of transcript fields."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, int):
        value = str(value).encode("ascii")
    return struct.pack(">I", len(value)) + bytes(value)


def transcript(label: str, *fields) -> bytes:
    """Canonical bytes of a labelled tuple of fields (what gets signed or bound as AAD).

    ``b"omnifc"``, then the protocol version, the label and each field, each prefixed by
    its 4-byte big-endian length (str as UTF-8, int as its decimal digits). Exported as
    ``protocols.transcript`` for omnifc's own signed messages (the Flower node binding).

    >>> transcript("x", b"ab", 7)[6:]
    b'\\x00\\x00\\x00\\x013\\x00\\x00\\x00\\x01x\\x00\\x00\\x00\\x02ab\\x00\\x00\\x00\\x017'
    """
    return b"omnifc" + _field(PROTOCOL_VERSION) + _field(label) + b"".join(map(_field, fields))


def new_run_nonce(source=None) -> bytes:
    """Fresh randomness for a hello (OS CSPRNG; ``source`` for reproducible tests only)."""
    if source is None:
        import os
        return os.urandom(RUN_NONCE_BYTES)
    return bytes(source.bytes(RUN_NONCE_BYTES))


def roster_digest(session_id: str, signed_hellos) -> bytes:
    """SHA-256 of the ordered roster: ``signed_hellos`` is a sequence of (signed transcript,
    signature) pairs, one per party in roster order."""
    fields = []
    for signed, signature in signed_hellos:
        fields += [bytes(signed), bytes(signature)]
    return hashlib.sha256(transcript("roster", session_id, len(fields) // 2,
                                     *fields)).digest()


@dataclass(frozen=True)
class MaskView:
    """What one party was shown for one evaluation round (public).

    Attributes
    ----------
    session_id : str
    round : int
    roster_digest : bytes
        :func:`roster_digest` of the roster the party accepted.
    responders : tuple of str
        The exact responding set B, in roster order.
    """

    session_id: str
    round: int
    roster_digest: bytes
    responders: tuple
    digest: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "responders", tuple(str(r) for r in self.responders))
        object.__setattr__(self, "digest", hashlib.sha256(transcript(
            "mask-view", self.session_id, self.round, bytes(self.roster_digest),
            len(self.responders), *self.responders)).digest())


def view_mask_key(mask_key: bytes, view: MaskView, prime: int, tile_index: int) -> bytes:
    """The AES-256 key of one mask stream: HKDF-Expand(mask key, view, prime, tile).

    The one place masks are bound to the view (session, round, roster digest, the ordered
    responding set B, prime, tile): streams of two different views are independent.
    """
    info = transcript("mask-stream", view.digest, int(prime), int(tile_index))
    # HKDF-Expand (RFC 5869) with L = 32 is one HMAC: T(1) = HMAC-SHA256(PRK, info | 0x01);
    # computed directly, it costs a few microseconds per tile (the tests check it against
    # cryptography's HKDFExpand).
    return hmac.new(bytes(mask_key), info + b"\x01", hashlib.sha256).digest()


#: Elements per keystream chunk: 32 Ki words (128 KiB) and their int64 sums stay in L2.
MASK_CHUNK = 1 << 15
_ZEROS = memoryview(bytes(4 * MASK_CHUNK))
_COUNTER = bytes(16)  # every stream has its own key: the counter starts at zero


class ElementStream:
    """Uniform GF(p) elements from the AES-256-CTR stream of a 32-byte ``key``, chunk by chunk.

    The same values as :func:`stream_elements` (AES-256 in counter mode from a zero
    counter block, every little-endian 32-bit word of the keystream masked to the bit
    length of p - 1 and rejected when >= p, as :func:`finite_field.uniform_elements`
    does), produced ``MASK_CHUNK`` words at a time with ``update_into`` into a reused
    buffer: no keystream-sized allocation, and the caller consumes each chunk while it is
    in cache.

    Examples
    --------
    >>> s = ElementStream(bytes(32), 13)
    >>> a = s.next(3).copy(); b = s.next(2).copy()
    >>> bool((np.concatenate([a, b]) == stream_elements(bytes(32), 13, 5)).all())
    True
    """

    __slots__ = ("_encryptor", "_prime", "_mask", "_buffer")

    def __init__(self, key: bytes, prime: int) -> None:
        prime = int(prime)
        if not 2 <= prime < 2**31:
            raise ParameterError(f"modulus must be in [2, 2^31), got {prime}")
        if len(key) != 32:
            raise ParameterError(f"a mask stream needs a 32-byte key, got {len(key)} bytes")
        self._encryptor = Cipher(algorithms.AES(bytes(key)), modes.CTR(_COUNTER)).encryptor()
        self._prime = prime
        self._mask = np.uint32((1 << (prime - 1).bit_length()) - 1)
        self._buffer = np.empty(0, dtype=np.uint32)

    def _draw(self, out: np.ndarray) -> int:
        # Masked words of the stream into ``out`` (contiguous uint32, <= MASK_CHUNK); how
        # many of them are >= p.
        self._encryptor.update_into(_ZEROS[:4 * out.size], out.view(np.uint8))
        # looked up on use: the numba kernels load with the first mask, not with the
        # config schema that imports PROTOCOL_VERSION from here
        return finite_field.mask_words(out, self._mask, self._prime)

    def fill(self, out: np.ndarray) -> np.ndarray:
        """Write the next ``out.size`` elements into ``out`` (contiguous uint32, 1-D)."""
        p = self._prime
        for start in range(0, out.size, MASK_CHUNK):
            chunk = out[start:start + MASK_CHUNK]
            if not self._draw(chunk):  # no word rejected: the usual case for p near 2^31
                continue
            kept = chunk[chunk < p]
            filled = kept.size
            chunk[:filled] = kept
            while filled < chunk.size:  # draw exactly what is missing: no accepted word lost
                tail = chunk[filled:]
                self._draw(tail)
                kept = tail[tail < p]
                tail[:kept.size] = kept
                filled += kept.size
        return out

    def next(self, count: int) -> np.ndarray:
        """The next ``count`` elements as uint32: a view of a reused buffer, valid until the
        next call."""
        if self._buffer.size < count:
            self._buffer = np.empty(max(int(count), MASK_CHUNK), dtype=np.uint32)
        return self.fill(self._buffer[:count])

    def __repr__(self) -> str:
        return "ElementStream(<secret>)"

    def __reduce__(self):
        raise TypeError("mask streams are not picklable")


def stream_elements(key: bytes, prime: int, shape, dtype=np.int64) -> np.ndarray:
    """Uniform field elements from the AES-256-CTR stream of a 32-byte ``key`` (zero
    counter: every key is unique per stream), by rejection sampling (see
    :class:`ElementStream`)."""
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    total = int(np.prod(shape, dtype=np.int64))
    out = ElementStream(key, prime).fill(np.empty(total, dtype=np.uint32))
    return out.astype(dtype, copy=False).reshape(shape)


def group_mask_key(seed: bytes, view: "MaskView", members, vector_index: int, prime: int,
                   tile_index: int) -> bytes:
    """The AES-256 key of one integrity-mask coefficient stream rho_G.

    HKDF-Expand (one HMAC, as in :func:`view_mask_key`) of the group's per-round seed over
    the view (session, round, roster digest, ordered B), the group's members, which null
    vector of the group (``vector_index``), the prime and the tile.
    """
    members = tuple(str(m) for m in members)
    info = transcript("group-mask-stream", view.digest, len(members), *members,
                      int(vector_index), int(prime), int(tile_index))
    return hmac.new(bytes(seed), info + b"\x01", hashlib.sha256).digest()


class EphemeralKey:
    """A fresh X25519 key pair for one session (never stored, never logged)."""

    __slots__ = ("_private", "public_bytes")

    def __init__(self, private: X25519PrivateKey) -> None:
        self._private = private
        self.public_bytes = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls, source=None) -> "EphemeralKey":
        """A fresh key from the OS CSPRNG (``X25519PrivateKey.generate``: OpenSSL's
        CSPRNG; tests/protocols/test_party_protections.py checks that this is the path a
        party takes); ``source`` (a ByteSource) only for reproducible tests, like the
        noise sources of the low-level calls."""
        if source is None:
            return cls(X25519PrivateKey.generate())
        return cls(X25519PrivateKey.from_private_bytes(bytes(source.bytes(32))))

    def exchange(self, peer_public: bytes) -> bytes:
        try:
            return self._private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))
        except ValueError:
            raise AuthenticationError() from None

    def __repr__(self) -> str:
        return "EphemeralKey(<secret>)"

    def __reduce__(self):
        raise TypeError("ephemeral keys are not picklable")


class KeyStream:
    """The mask streams' keystream as a :class:`finite_field.ByteSource` (``bytes(n)``):
    AES-256-CTR under a 32-byte key from a 16-byte initial counter block.

    >>> KeyStream(bytes(32), bytes(16)).bytes(4).hex()  # AES-256 of the zero block
    'dc95c078'
    """

    __slots__ = ("_encryptor",)

    def __init__(self, key: bytes, counter: bytes) -> None:
        if len(key) != 32 or len(counter) != 16:
            raise ParameterError("a keystream needs a 32-byte key and a 16-byte counter "
                                 "block")
        self._encryptor = Cipher(algorithms.AES(key), modes.CTR(counter)).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._encryptor.update(bytes(n))

    def __repr__(self) -> str:
        return "KeyStream(<secret>)"


@dataclass(frozen=True, repr=False)
class PairKeys:
    """The two symmetric keys one party shares with one peer in one session."""

    session_id: str
    me: str
    peer: str
    encryption_key: bytes
    mask_key: bytes
    roster_digest: bytes = b""

    def __repr__(self) -> str:
        return f"PairKeys(session={self.session_id!r}, {self.me!r}<->{self.peer!r}, <secret>)"

    def __reduce__(self):
        raise TypeError("pair keys are not picklable")

    @classmethod
    def derive(cls, mine: EphemeralKey, peer_public: bytes, *, session_id: str, me: str,
               peer: str, roster_digest: bytes) -> "PairKeys":
        """HKDF-SHA256 over the X25519 secret, one key per purpose, bound to the roster."""
        if me == peer:
            raise ParameterError("a party has no pair key with itself")
        roster_digest = bytes(roster_digest)
        if len(roster_digest) != 32:
            raise ParameterError(f"the roster digest must be 32 bytes, got {len(roster_digest)}")
        secret = mine.exchange(peer_public)
        (first, first_key), (second, second_key) = sorted(
            [(me, mine.public_bytes), (peer, bytes(peer_public))])

        def hkdf(purpose: str) -> bytes:
            info = transcript("pair-key", session_id, roster_digest, first, second, first_key,
                              second_key, purpose)
            return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)

        return cls(session_id, me, peer, hkdf("share-encryption"), hkdf("mask"), roster_digest)

    # -- share encryption -------------------------------------------------------------
    def nonce(self, sender: str, round_: int, prime_index: int, chunk_index: int) -> bytes:
        """Deterministic, unique per (direction, round, prime, chunk) under one key."""
        direction = 0 if sender == min(self.me, self.peer) else 1
        return struct.pack(">BBHQ", direction, 0, prime_index, (round_ << 40) | chunk_index)

    def _aad(self, sender, receiver, round_, prime_index, chunk_index) -> bytes:
        return transcript("share", self.session_id, self.roster_digest, round_, sender,
                          receiver, prime_index, chunk_index)

    def encrypt(self, plaintext: bytes, *, round_: int, prime_index: int,
                chunk_index: int) -> bytes:
        """AES-256-GCM ciphertext (with tag) of a chunk sent from ``me`` to ``peer``."""
        nonce = self.nonce(self.me, round_, prime_index, chunk_index)
        aad = self._aad(self.me, self.peer, round_, prime_index, chunk_index)
        return AESGCM(self.encryption_key).encrypt(nonce, plaintext, aad)

    def decrypt(self, ciphertext: bytes, *, sender: str, round_: int, prime_index: int,
                chunk_index: int, nonce: bytes | None = None, phase: str = "shares") -> bytes:
        """Open a chunk sent from ``peer`` to ``me``; AuthenticationError on any mismatch."""
        if sender != self.peer:
            raise AuthenticationError(sender, phase)
        expected = self.nonce(sender, round_, prime_index, chunk_index)
        if nonce is not None and bytes(nonce) != expected:
            raise AuthenticationError(sender, phase)
        aad = self._aad(sender, self.me, round_, prime_index, chunk_index)
        try:
            return AESGCM(self.encryption_key).decrypt(expected, bytes(ciphertext), aad)
        except (InvalidTag, ValueError):
            raise AuthenticationError(sender, phase) from None

    # -- integrity group seeds -----------------------------------------------------------
    def _seed_nonce(self, sender: str, round_: int, group_index: int) -> bytes:
        # Second byte 1: disjoint from every share nonce (second byte 0) under this key.
        direction = 0 if sender == min(self.me, self.peer) else 1
        return struct.pack(">BBHQ", direction, 1, group_index, round_)

    def _seed_aad(self, sender, receiver, view: "MaskView", members) -> bytes:
        return transcript("group-seed", self.session_id, self.roster_digest, view.round,
                          view.digest, sender, receiver, len(members), *members)

    def encrypt_seed(self, seed: bytes, *, view: "MaskView", group_index: int,
                     members) -> bytes:
        """AES-256-GCM of a mask group's seed for ``peer``, bound to the view and group."""
        members = tuple(str(m) for m in members)
        return AESGCM(self.encryption_key).encrypt(
            self._seed_nonce(self.me, view.round, group_index), bytes(seed),
            self._seed_aad(self.me, self.peer, view, members))

    def decrypt_seed(self, ciphertext: bytes, *, view: "MaskView", group_index: int,
                     members) -> bytes:
        """Open a seed ``peer`` sent for this view and group; AuthenticationError otherwise."""
        members = tuple(str(m) for m in members)
        try:
            return AESGCM(self.encryption_key).decrypt(
                self._seed_nonce(self.peer, view.round, group_index), bytes(ciphertext),
                self._seed_aad(self.peer, self.me, view, members))
        except (InvalidTag, ValueError):
            raise AuthenticationError(self.peer, "evaluation") from None

    # -- masks ------------------------------------------------------------------------
    def mask(self, prime: int, shape, *, view: MaskView, prime_index: int,
             tile_index: int, dtype=np.int64) -> np.ndarray:
        """The pairwise PRG mask both ends derive identically for the same view.

        Uniform in GF(p); ``prime_index`` only checks the call (the prime itself is bound).
        """
        del prime_index
        key = view_mask_key(self.mask_key, view, prime, tile_index)
        return stream_elements(key, prime, shape, dtype)

    def mask_stream(self, prime: int, *, view: MaskView, tile_index: int) -> ElementStream:
        """The same mask as :meth:`mask`, as a stream drawn chunk by chunk."""
        return ElementStream(view_mask_key(self.mask_key, view, prime, tile_index), prime)

    def signed_mask(self, prime: int, shape, *, my_index: int, peer_index: int,
                    view: MaskView, prime_index: int, tile_index: int) -> np.ndarray:
        """+mask if the peer comes after me in roster order, -mask (mod p) otherwise."""
        m = self.mask(prime, shape, view=view, prime_index=prime_index, tile_index=tile_index)
        return m if peer_index > my_index else (prime - m) % prime

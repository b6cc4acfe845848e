"""A party's shares made a block of rows at a time (protocols/_party.py): every receiver's
share of a row lies on one polynomial that carries the row, a share chunk made again for
a resume is the bytes sent first (so the reconnect log keeps coordinates, not bytes), the
rows are quantized a block at a time into int16 with the whole array's errors, a float64
``.npy`` loads memory-mapped, and the gRPC party takes share chunks that arrived while it
sends (``_Prefetched.share_nowait``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import protocols._party as party_module
from finite_field import InputError, Quantizer
from protocols import SessionParameters, load_party_data
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import envelope
from protocol_helpers import Session, lagrange_weights, quantize, random_data

# d = 4, l = 2, t = 1: s = 2; q = 16 needs two primes; 4 KiB chunks hold 512 rows, so
# party-0's 3,172 rows are 7 chunks (6 full)
PARAMS = SessionParameters(dim=4, bound=1.0, scale_bits=16, segments=2, noise_segments=1,
                           chunk_bytes=4096)
SIZES = [3_172, 3, 4, 2, 5]
#: _ENCODE_ELEMENTS for 1, 2 and all 7 chunks per block (512 rows x s x m = 5,120 a chunk)
ONE, TWO, ALL = 1, 2 * 5_120, 1 << 22


def _exchange(monkeypatch, elements: int):
    """Every party past its roster confirmations; party-0's share chunks (all of them,
    not delivered) with blocks of ``elements`` share elements (rows x s x m)."""
    monkeypatch.setattr(party_module, "_ENCODE_ELEMENTS", elements)
    data = random_data(SIZES, 4, seed=31)
    session = Session(data, PARAMS)
    queue = session.run_until("shares")
    streams = {dest: session.parties[dest].receive(env) for dest, _, env in queue}
    party = session.parties["party-0"]
    return data, session, party, list(streams["party-0"])


@pytest.mark.parametrize("elements", [ONE, TWO, ALL])
def test_every_receivers_share_of_a_row_lies_on_one_polynomial_carrying_the_row(
        monkeypatch, elements):
    data, session, party, sent = _exchange(monkeypatch, elements)
    plan = party.plan
    assert len(plan.primes) == 2 and plan.segments == 2 and plan.noise_segments == 1
    assert len(sent) == 4 * 2 * 7 and all(e.HasField("share") for e in sent)
    n, s, m = SIZES[0], plan.segment_length, len(SIZES)
    shares = np.full((2, m, n, s), -1, dtype=object)
    shares[:, 0] = party._held[0][:n].astype(object), party._held[1][:n].astype(object)
    for env in sent:
        c = env.share
        receiver = session.parties[c.receiver]
        plain = receiver.keys["party-0"].decrypt(c.ciphertext, sender="party-0", round_=0,
                                                 prime_index=c.prime_index,
                                                 chunk_index=c.chunk_index)
        a = c.chunk_index * 512
        values = np.frombuffer(plain, "<u4").reshape(-1, s)
        shares[c.prime_index, receiver.index, a:a + len(values)] = values.astype(object)
    assert (shares != -1).all()
    rows = quantize(data["party-0"], 1.0, 16).astype(object)
    noise = set()
    for k, code in enumerate(plan.codes):
        p, alphas, betas = code.prime, code.alphas, code.betas
        first = betas[:3]  # l + t = 3 shares fix the polynomial
        weights = {x: lagrange_weights(first, x, p) for x in (*alphas, betas[3], betas[4])}

        def at(x, r):
            return [sum(w * int(v) for w, v in zip(weights[x], shares[k, :3, r, c])) % p
                    for c in range(s)]
        for r in range(n):
            for segment in range(2):  # the data points carry the row's segments
                assert at(alphas[segment], r) == [int(v) % p for v in
                                                  rows[r, segment * s:(segment + 1) * s]]
            for j in (3, 4):  # the other receivers' shares: the same polynomial
                assert at(betas[j], r) == [int(v) for v in shares[k, j, r]]
            noise.add((k, tuple(at(alphas[2], r))))
    assert len(noise) == 2 * n  # fresh noise: no two rows (or primes) share it


def test_a_share_chunk_made_again_is_the_bytes_sent_first(monkeypatch):
    _, _, party, sent = _exchange(monkeypatch, TWO)  # 4 blocks
    order = list(sent)
    random.Random(3).shuffle(order)  # out of order: blocks made again, not cached
    for env in order:
        c = env.share
        again = party._share_again(c.receiver, c.prime_index, c.chunk_index)
        assert again.SerializeToString() == env.SerializeToString()


def test_the_reconnect_log_keeps_share_chunks_as_coordinates_not_bytes(monkeypatch):
    _, _, party, sent = _exchange(monkeypatch, TWO)
    assert party.resumable
    entries = party._log.entries[-len(sent):]
    # what it holds: its hello and roster confirmation, none of the 203 KB of chunks
    assert party._log.sizes[-len(sent):] == [0] * len(sent)
    assert party._log.bytes < 1_000 < sum(len(e.share.ciphertext) for e in sent) / 100
    assert entries == [("share", e.share.receiver, e.share.prime_index, e.share.chunk_index)
                       for e in sent]


@pytest.mark.parametrize("scale_bits, dtype", [(8, np.int16), (6, np.int8), (16, np.int32)])
def test_rows_quantize_a_block_at_a_time_into_the_smallest_type_with_the_whole_arrays_errors(
        monkeypatch, tmp_path, scale_bits, dtype):
    # 2^q R = 256 needs int16, 64 int8, 65,536 int32
    monkeypatch.setattr(party_module, "_QUANTIZE_ROWS", 7)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=scale_bits, segments=2,
                               noise_segments=1)
    data = random_data([30, 3, 3, 3, 3], 4, seed=5)
    x = data["party-0"] * 1.5  # some entries clipped
    np.save(tmp_path / "rows.npy", x)
    loaded = load_party_data(tmp_path / "rows.npy")
    assert isinstance(loaded, np.memmap) and not loaded.flags.writeable
    data["party-0"] = loaded
    party = Session(data, params).parties["party-0"]
    assert party.quantized.dtype == dtype
    assert np.array_equal(party.quantized, quantize(x, 1.0, scale_bits))
    assert party.clipped == int((np.abs(x) > 1.0).sum()) > 0
    bad = x.copy()
    bad[16, 2], bad[23, 0] = np.nan, np.inf  # in the third and fourth block
    with pytest.raises(InputError) as whole:
        Quantizer(scale_bits=scale_bits, bound=1.0).quantize(bad)
    data["party-0"] = bad
    with pytest.raises(InputError) as blocks:
        Session(data, params)
    assert "at row 16, column 2 (2 non-finite entries)" in str(blocks.value)
    assert str(blocks.value).endswith(str(whole.value))


def test_other_npy_files_load_as_float64_as_before(tmp_path):
    np.save(tmp_path / "ints.npy", np.arange(6, dtype=np.int32).reshape(3, 2))
    ints = load_party_data(tmp_path / "ints.npy")
    assert type(ints) is np.ndarray and ints.dtype == np.float64
    assert ints.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    np.save(tmp_path / "big.npy", np.ones((2, 2), dtype=">f8"))  # not native: copied
    assert type(load_party_data(tmp_path / "big.npy")) is np.ndarray


def test_the_pairs_kernel_takes_held_uint32_shares_as_they_are():
    from finite_field import paired_sq_distances

    p = 2**31 - 1
    x = np.random.default_rng(2).integers(0, p, (40, 5)).astype(np.uint32)
    rows, cols = np.arange(40), np.arange(40)[::-1]
    want = [sum((int(a) - int(b)) ** 2 for a, b in zip(x[i], x[j])) % p
            for i, j in zip(rows, cols)]
    assert paired_sq_distances(x, rows, cols, p).tolist() == want


class _Call:
    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


def _share(i):
    return envelope(share=pb.ShareChunk(chunk_index=i))


@pytest.mark.timeout(10)
def test_share_nowait_takes_only_share_chunks_at_the_head_and_never_waits():
    from protocols import _grpc_party

    items = [_share(0), _share(1), envelope(round_start=pb.RoundStart(round=1)), _share(2)]
    stream = _grpc_party._Prefetched(_Call(items))
    stream.join(5)
    assert [stream.share_nowait().share.chunk_index for _ in range(2)] == [0, 1]
    assert stream.share_nowait() is None  # a RoundStart first: left where it is
    rest = list(stream)
    assert [e.WhichOneof("body") for e in rest] == ["round_start", "share"]
    assert stream.share_nowait() is None  # ended: nothing, no wait

"""The out-of-core distance result: tile writer, finalize, on-disk store, lazy float view.

Every result is compared bit for bit with the in-memory decode path the coordinator uses
(``symmetrize_mod`` + ``decode_sum`` on whole matrices) and with exact Python integers.
"""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from finite_field import ParameterError, ProtocolError, decode_sum, make_plan, symmetrize_mod
from omnifc import (DistanceAccumulator, DistanceResult, DistanceStore, TiledDistances,
                    plaintext_distance_store)
from omnifc._store import as_tiled


def _python_distances(rows):
    rows = [[int(v) for v in r] for r in rows]
    return np.array([[sum((a - b) ** 2 for a, b in zip(u, v)) for v in rows] for u in rows],
                    dtype=object)


def _uploads(d_int, primes, parties, rng):
    """Per prime, ``parties`` random additive shares of D mod p (what masked uploads sum to)."""
    out = []
    for p in primes:
        target = np.asarray(d_int % p, dtype=np.int64)
        shares = [rng.integers(0, p, size=target.shape, dtype=np.int64) for _ in range(parties - 1)]
        shares.append((target - sum(s % p for s in shares)) % p)
        out.append(shares)
    return out


def _in_memory(uploads, primes, plan_bound):
    """The coordinator's whole-matrix path: sum uploads, symmetrize_mod, CRT, bound check."""
    sums = []
    for shares, p in zip(uploads, primes):
        total = np.zeros_like(shares[0])
        for s in shares:
            total += np.triu(s)  # only the upper triangle is uploaded
        sums.append(symmetrize_mod(total, p))

    class _Plan:
        pass

    plan = _Plan()
    plan.primes = tuple(primes)
    plan.distance_bound = plan_bound
    return decode_sum(plan, sums)


CASES = [
    # (dim, max |value|, primes)
    (5, 50, (2147483647,)),                    # one prime, int32 storage
    (4, 2**20, (2147483647, 2147483629)),      # two primes (distances up to 2^44), int64
    (3, 2**29, (2147483647, 2147483629, 65521)),  # three primes
]


@pytest.mark.parametrize("dim,magnitude,primes", CASES, ids=["1prime", "2primes", "3primes"])
@pytest.mark.parametrize("where", ["ram", "disk-budget", "disk-out"])
@pytest.mark.parametrize("tile_rows", [1, 7, 64])
def test_accumulated_tiles_equal_in_memory_decode(dim, magnitude, primes, where, tile_rows,
                                                  tmp_path):
    rng = np.random.default_rng(dim * 1000 + tile_rows)
    n = 37
    rows = rng.integers(-magnitude, magnitude + 1, size=(n, dim))
    exact = _python_distances(rows)
    d_int = np.array(exact.tolist(), dtype=np.int64)
    bound = dim * (2 * magnitude) ** 2
    uploads = _uploads(d_int, primes, parties=3, rng=rng)
    expected = _in_memory(uploads, primes, bound)
    assert (expected == d_int).all()

    kwargs = {"ram": {}, "disk-budget": {"memory_budget": 0},
              "disk-out": {"out": tmp_path / "d.npy"}}[where]
    # finalize in row blocks of about tile_rows rows too (16 bytes per entry and prime)
    acc = DistanceAccumulator(n, primes, scale_bits=3, distance_bound=bound,
                              tile_bytes=tile_rows * n * 16 * len(primes), **kwargs)
    # parties deliver in different orders and with a different tile schedule
    starts = list(range(0, n, tile_rows))
    for k in range(len(primes)):
        for j, share in enumerate(uploads[k]):
            order = starts if j % 2 == 0 else starts[::-1]
            for a in order:
                b = min(n, a + tile_rows)
                acc.add_tile(k, a, b, share[a:b, a:])
    store = acc.finalize()
    assert store.on_disk == (where != "ram")
    assert store.integer.dtype == (np.int32 if len(primes) == 1 else np.int64)
    assert np.array_equal(np.asarray(store.integer), expected)
    # the float view is D / 4^q, exactly as the in-memory result dequantizes
    view = store.distances
    assert np.array_equal(np.asarray(view), expected * (1.0 / 4**3))
    if where == "disk-out":
        assert store.path == tmp_path / "d.npy"
        assert not list(tmp_path.glob("*residues*")), "scratch files must be removed"
        again = DistanceStore.open(tmp_path / "d.npy")
        assert np.array_equal(np.asarray(again.integer), expected)
        meta = json.loads((tmp_path / "d.npy.json").read_text())
        assert meta["primes"] == list(primes) and meta["scale_bits"] == 3


def test_plaintext_store_matches_python_integers_and_dense_kernel(tmp_path):
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 256, size=(53, 11))
    exact = np.array(_python_distances(rows).tolist(), dtype=np.int64)
    for kwargs in ({}, {"memory_budget": 0, "tile_bytes": 2000}, {"out": tmp_path / "x.npy"}):
        store = plaintext_distance_store(rows, scale_bits=8, **kwargs)
        assert np.array_equal(np.asarray(store.integer), exact)
    # several primes (chosen by the builder) for values beyond 2^31
    big = rng.integers(-2**24, 2**24, size=(19, 3))
    exact_big = np.array(_python_distances(big).tolist(), dtype=np.int64)
    store = plaintext_distance_store(big, scale_bits=0, memory_budget=0, tile_bytes=500)
    assert store.integer.dtype == np.int64
    assert np.array_equal(np.asarray(store.integer), exact_big)


def test_view_indexing_tiles_and_rows_match_dense():
    rng = np.random.default_rng(2)
    rows = rng.integers(-9, 10, size=(23, 4))
    store = plaintext_distance_store(rows, scale_bits=2, memory_budget=0, tile_bytes=800)
    dense = np.array(_python_distances(rows).tolist(), dtype=np.int64) / 16.0
    view = store.distances
    assert isinstance(view, TiledDistances) and view.shape == (23, 23) and len(view) == 23
    assert np.array_equal(view[3], dense[3])
    assert np.array_equal(view[2:5], dense[2:5])
    assert view[4, 7] == dense[4, 7]
    assert np.array_equal(view.take_rows([5, 1, 5]), dense[[5, 1, 5]])
    blocks = list(view.tiles(6))
    assert [(a, b) for a, b, _ in blocks] == [(0, 6), (6, 12), (12, 18), (18, 23)]
    assert np.array_equal(np.vstack([blk for _, _, blk in blocks]), dense)
    ints = np.vstack([blk for _, _, blk in view.tiles(5, integer=True)])
    assert np.array_equal(ints * (1 / 16.0), dense)
    result = DistanceResult.from_store(store)
    assert as_tiled(result) is not None and as_tiled(store) is not None
    assert as_tiled(dense) is None


def test_missing_tile_fails_closed_and_removes_files(tmp_path):
    out = tmp_path / "d.npy"
    acc = DistanceAccumulator(10, (65521, 65519), scale_bits=0, distance_bound=10**6, out=out)
    zeros = np.zeros((5, 10), dtype=np.int64)
    acc.add_tile(0, 0, 5, zeros)
    acc.add_tile(0, 5, 10, zeros[:, :5])
    acc.add_tile(1, 0, 5, zeros)  # prime 1 misses rows 5..9
    assert out.exists()
    with pytest.raises(ProtocolError, match="row 5 received 0 contributions for prime 65519"):
        acc.finalize()
    assert not out.exists() and not list(tmp_path.iterdir())
    with pytest.raises(ProtocolError):
        acc.add_tile(0, 0, 5, zeros)


def test_uneven_contributions_fail_closed():
    acc = DistanceAccumulator(4, (13,), scale_bits=0, distance_bound=100)
    acc.add_tile(0, 0, 4, np.zeros((4, 4), dtype=np.int64))
    acc.add_tile(0, 0, 2, np.zeros((2, 4), dtype=np.int64))  # rows 0-1 twice, 2-3 once
    with pytest.raises(ProtocolError, match="row 2 received 1 contributions"):
        acc.finalize()


def test_value_beyond_bound_is_rejected_at_finalize(tmp_path):
    acc = DistanceAccumulator(3, (2147483647,), scale_bits=0, distance_bound=100,
                              out=tmp_path / "d.npy")
    tile = np.array([[0, 5, 101], [0, 0, 7], [0, 0, 0]])
    acc.add_tile(0, 0, 3, tile)
    with pytest.raises(ProtocolError, match="101 > 100"):
        acc.finalize()
    assert not list(tmp_path.iterdir())


def test_unreduced_upload_is_rejected_and_not_added():
    acc = DistanceAccumulator(2, (13,), scale_bits=0, distance_bound=100)
    with pytest.raises(ParameterError, match=r"\[0, 13\)"):
        acc.add_tile(0, 0, 2, np.array([[0, 13], [0, 0]], dtype=np.uint32))
    with pytest.raises(ParameterError, match=r"\[0, 13\)"):
        acc.add_tile(0, 0, 2, np.array([[0, -1], [0, 0]]))
    with pytest.raises(ParameterError, match="needs shape"):
        acc.add_tile(0, 1, 2, np.zeros((1, 2)))
    acc.add_tile(0, 0, 2, np.array([[0, 12], [0, 0]]))
    acc.add_tile(0, 0, 2, np.array([[0, 3], [0, 0]]))  # (12 + 3) mod 13 = 2
    assert acc.finalize().integer.tolist() == [[0, 2], [2, 0]]


def test_open_refuses_unfinished_and_existing_paths(tmp_path):
    out = tmp_path / "d.npy"
    np.save(out, np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="sidecar"):
        DistanceStore.open(out)
    with pytest.raises(ParameterError, match="exists already"):
        DistanceAccumulator(2, (13,), scale_bits=0, out=out)


@pytest.mark.slow
def test_temporary_file_is_removed_with_the_store():
    store = plaintext_distance_store(np.arange(12).reshape(6, 2), scale_bits=0, memory_budget=0)
    path = store.path
    assert store.on_disk and path.exists()
    del store
    gc.collect()
    assert not path.exists() and not path.parent.exists()


@pytest.mark.slow
def test_dropped_accumulator_removes_its_file(tmp_path):
    acc = DistanceAccumulator(4, (13,), scale_bits=0, out=tmp_path / "d.npy")
    assert (tmp_path / "d.npy").exists()
    del acc
    gc.collect()
    assert not list(tmp_path.iterdir())


def test_plan_bound_selects_int32_storage():
    plan = make_plan(784, bound=1.0, scale_bits=8, parties=3, nonnegative=True)
    acc = DistanceAccumulator(2, plan.primes, scale_bits=8, distance_bound=plan.distance_bound)
    assert len(plan.primes) == 1 and acc.dtype == np.int32

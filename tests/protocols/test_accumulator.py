"""Tests that bite on protocols/_accumulator.py (issue 14, mutation testing).

Every expectation is independent of the module: the exact matrix recomputed with Python
integers and the CRT of each entry by hand (``pow(M_i, -1, p_i)``), the documented limits
(2 GiB, 64 MiB, int32 below 2^31), the sidecar's documented keys, and the exact error
texts read off the documentation of each refusal.
"""

from __future__ import annotations

import gc
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import pytest

from finite_field import InputError, ParameterError, ProtocolError
from protocols import _accumulator as acc_mod
from protocols._accumulator import (DEFAULT_MEMORY_BUDGET, DEFAULT_TILE_BYTES,
                                    DistanceAccumulator, DistanceStore, TiledDistances,
                                    discard_store, storage_dtype)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Temporary result directories go under tmp_path/scratch (to see them removed)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def _python_distances(rows):
    rows = [[int(v) for v in r] for r in rows]
    return [[sum((a - b) ** 2 for a, b in zip(u, v)) for v in rows] for u in rows]


def _crt(residues, primes):
    """The CRT of one entry with Python integers (Garner-free textbook formula)."""
    modulus = 1
    for p in primes:
        modulus *= p
    total = 0
    for r, p in zip(residues, primes):
        m = modulus // p
        total += r * m * pow(m, -1, p)
    return total % modulus


def _feed(acc, exact, primes, rng, rows_per_tile, parties=2):
    """Every party's additive share of D mod p, upper strips only (as the protocol)."""
    n = len(exact)
    d = np.array(exact, dtype=object)
    for k, p in enumerate(primes):
        target = np.array((d % p).tolist(), dtype=np.int64)
        shares = [rng.integers(0, p, size=(n, n), dtype=np.int64) for _ in range(parties - 1)]
        shares.append((target - sum(shares)) % p)
        for share in shares:
            for a in range(0, n, rows_per_tile):
                b = min(n, a + rows_per_tile)
                acc.add_tile(k, a, b, share[a:b, a:])


# -- limits and defaults --------------------------------------------------------------

def test_documented_defaults():
    assert DEFAULT_MEMORY_BUDGET == 2 * 1024 ** 3
    assert DEFAULT_TILE_BYTES == 64 * 1024 ** 2
    assert acc_mod._check_budget(None) == 2 * 1024 ** 3
    assert acc_mod._check_tile_bytes(None) == 64 * 1024 ** 2


@pytest.mark.parametrize("bad", [True, False, -1, 1.0, "5", [1]])
def test_memory_budget_refusals_name_the_value(bad):
    with pytest.raises(ParameterError) as info:
        acc_mod._check_budget(bad)
    assert str(info.value) == ("memory_budget must be a non-negative number of bytes, got "
                               f"{bad!r}")


@pytest.mark.parametrize("bad", [True, False, 0, -3, 2.0, "5"])
def test_tile_bytes_refusals_name_the_value(bad):
    with pytest.raises(ParameterError) as info:
        acc_mod._check_tile_bytes(bad)
    assert str(info.value) == f"tile_bytes must be a positive number of bytes, got {bad!r}"


def test_limits_accept_the_boundaries_and_numpy_integers():
    assert acc_mod._check_budget(0) == 0
    value = acc_mod._check_budget(np.int64(7))
    assert value == 7 and type(value) is int
    assert acc_mod._check_tile_bytes(1) == 1
    value = acc_mod._check_tile_bytes(np.int32(9))
    assert value == 9 and type(value) is int


@pytest.mark.parametrize("n, per_row, tile, expected", [
    (10, 4, 20, 5),      # 20 // 4
    (10, 4, 3, 1),       # at least one row
    (10, 1, 1000, 10),   # at most n rows
    (10, 0, 7, 7),       # a zero row size counts as one byte
    (10, 3, 9, 3),
])
def test_rows_per_tile(n, per_row, tile, expected):
    assert acc_mod._rows_per_tile(n, per_row, tile) == expected


@pytest.mark.parametrize("bound, primes, expected", [
    (2**31 - 1, 1, np.int32), (2**31, 1, np.int64), (0, 1, np.int32), (None, 1, np.int64),
    (5, 2, np.int64), (5, 3, np.int64),
])
def test_storage_dtype(bound, primes, expected):
    assert storage_dtype(bound, primes) == np.dtype(expected)


# -- the store ------------------------------------------------------------------------

def test_store_properties_and_repr(tmp_path):
    matrix = np.array([[0, 8], [8, 0]], dtype=np.int64)
    store = DistanceStore(matrix, scale_bits=3)
    assert store.n == 2 and type(store.n) is int
    assert store.shape == (2, 2) and type(store.shape) is tuple
    assert not store.on_disk and store.path is None
    assert store.nbytes == 32 and type(store.nbytes) is int
    assert store.factor == 1 / 64
    assert store.memory_budget == 2 * 1024 ** 3 and store.tile_bytes == 64 * 1024 ** 2
    assert store.parameters == {}
    assert repr(store) == "DistanceStore(n=2, dtype=int64, scale_bits=3, in memory)"
    assert repr(store.distances) == f"TiledDistances({store!r})"
    params = {"k": 1}
    other = DistanceStore(matrix, scale_bits=np.int64(0), path=str(tmp_path / "x.npy"),
                          memory_budget=5, tile_bytes=6, parameters=params)
    assert other.scale_bits == 0 and type(other.scale_bits) is int
    assert other.path == tmp_path / "x.npy" and isinstance(other.path, Path)
    assert (other.memory_budget, other.tile_bytes) == (5, 6)
    assert other.parameters == {"k": 1} and other.parameters is not params
    with pytest.raises(ParameterError, match="memory_budget"):
        DistanceStore(matrix, scale_bits=0, memory_budget=-1)
    with pytest.raises(ParameterError, match="tile_bytes"):
        DistanceStore(matrix, scale_bits=0, tile_bytes=0)


def test_factor_is_exact_for_large_scales():
    store = DistanceStore(np.zeros((1, 1), dtype=np.int64), scale_bits=30)
    assert store.factor == 2.0 ** -60


def test_store_rows_per_tile_counts_sixteen_bytes_per_entry():
    store = DistanceStore(np.zeros((10, 10), dtype=np.int64), scale_bits=0, tile_bytes=480)
    assert store.rows_per_tile() == 3          # 480 // (10 * 16)
    assert store.rows_per_tile(8) == 6         # 480 // (10 * 8)
    assert store.rows_per_tile(100) == 1


def test_open_refuses_a_foreign_format_and_a_mismatch(tmp_path):
    path = tmp_path / "d.npy"
    np.save(path, np.zeros((3, 3), dtype=np.int32))
    side = tmp_path / "d.npy.json"
    with pytest.raises(InputError) as info:
        DistanceStore.open(path)
    assert str(info.value) == (f"{path} is not a finished omnifc distance file: its sidecar "
                               "d.npy.json is missing (written only when the result is "
                               "complete)")
    side.write_text(json.dumps({"format": "omnifc-distances/2", "n": 3, "dtype": "int32",
                                "scale_bits": 0}))
    with pytest.raises(InputError) as info:
        DistanceStore.open(path)
    assert str(info.value) == (f"{side} has format 'omnifc-distances/2', expected "
                               "'omnifc-distances/1'")
    side.write_text(json.dumps({"n": 3}))
    with pytest.raises(InputError, match="has format None, expected 'omnifc-distances/1'"):
        DistanceStore.open(path)
    for n, dtype in ((4, "int32"), (3, "int64")):
        side.write_text(json.dumps({"format": "omnifc-distances/1", "n": n, "dtype": dtype,
                                    "scale_bits": 0}))
        with pytest.raises(InputError) as info:
            DistanceStore.open(path)
        assert str(info.value) == (f"{path} holds int32 (3, 3), the sidecar says {dtype} "
                                   f"({n}, {n})")


def test_open_reads_the_sidecar(tmp_path):
    path = tmp_path / "d.npy"
    np.save(path, np.array([[0, 4], [4, 0]], dtype=np.int64))
    (tmp_path / "d.npy.json").write_text(json.dumps({
        "format": "omnifc-distances/1", "n": 2, "dtype": "int64", "scale_bits": 1,
        "parameters": {"mode": "masked"}}))
    store = DistanceStore.open(str(path), memory_budget=11, tile_bytes=12)
    assert store.on_disk and store.path == path
    assert store.scale_bits == 1 and store.parameters == {"mode": "masked"}
    assert (store.memory_budget, store.tile_bytes) == (11, 12)
    assert store.distances[0, 1] == 1.0
    (tmp_path / "d.npy.json").write_text(json.dumps({
        "format": "omnifc-distances/1", "n": 2, "dtype": "int64", "scale_bits": 0}))
    assert DistanceStore.open(path).parameters == {}


@pytest.mark.parametrize("matrix", [np.zeros(3, dtype=np.int64), np.zeros((2, 3), np.int64),
                                    np.zeros((0, 0), np.int64), np.zeros((2, 2)),
                                    np.zeros((1, 2, 2), np.int64)])
def test_from_integer_refuses_all_but_integer_squares(matrix):
    with pytest.raises(InputError) as info:
        DistanceStore.from_integer(matrix, scale_bits=0)
    assert str(info.value) == (f"an integer square matrix is needed, got {matrix.dtype} "
                               f"{matrix.shape}")


def test_from_integer_bound_is_inclusive_and_checked_in_every_block(tmp_path, private_tmp):
    exact = np.array(_python_distances([[0], [1], [3], [7], [2]]), dtype=np.int64)
    top = int(exact.max())  # 49
    store = DistanceStore.from_integer(exact, scale_bits=0, distance_bound=top, tile_bytes=80)
    assert store.integer.dtype == np.int32 and store.integer.tolist() == exact.tolist()
    late = exact.copy()
    late[4, 3] = top + 1  # in the last block of 2 rows only (80 // (5 * 8) = 2 rows)
    with pytest.raises(InputError) as info:
        DistanceStore.from_integer(late, scale_bits=0, distance_bound=top, tile_bytes=80,
                                   memory_budget=0)
    assert str(info.value) == f"distances must lie in [0, {top}]"
    assert not list(private_tmp.iterdir()), "the temporary directory must be removed"
    negative = exact.copy()
    negative[3, 1] = -1
    with pytest.raises(InputError, match=r"must lie in \[0, 49\]"):
        DistanceStore.from_integer(negative, scale_bits=0, distance_bound=top, tile_bytes=80,
                                   out=tmp_path / "d.npy")
    assert not (tmp_path / "d.npy").exists()
    # without a bound nothing is checked, storage is int64
    store = DistanceStore.from_integer(negative, scale_bits=0, tile_bytes=80)
    assert store.integer.dtype == np.int64 and store.integer[3, 1] == -1


def test_from_integer_copies_block_by_block_and_writes_the_sidecar(tmp_path):
    rng = np.random.default_rng(5)
    rows = rng.integers(-50, 50, size=(13, 3))
    exact = np.array(_python_distances(rows), dtype=np.int64)
    out = tmp_path / "d.npy"
    store = DistanceStore.from_integer(exact, scale_bits=2, distance_bound=10**6, out=str(out),
                                       tile_bytes=13 * 8 * 3, memory_budget=10**9,
                                       parameters={"who": "me"})
    assert store.on_disk and store.path == out and store.memory_budget == 10**9
    assert store.tile_bytes == 13 * 8 * 3 and store.parameters == {"who": "me"}
    assert np.load(out).tolist() == exact.tolist()  # flushed to the file
    meta = json.loads((tmp_path / "d.npy.json").read_text())
    assert meta == {"format": "omnifc-distances/1", "n": 13, "dtype": "int32",
                    "scale_bits": 2, "primes": [], "distance_bound": 10**6,
                    "parameters": {"who": "me"}}
    again = DistanceStore.open(out)
    assert again.integer.tolist() == exact.tolist() and again.scale_bits == 2
    meta_none = DistanceStore.from_integer(exact, scale_bits=0, out=tmp_path / "e.npy")
    assert json.loads((tmp_path / "e.npy.json").read_text())["parameters"] == {}
    assert meta_none.parameters == {}


def test_from_integer_refuses_an_existing_file_or_sidecar(tmp_path):
    out = tmp_path / "d.npy"
    (tmp_path / "d.npy.json").write_text("{}")
    with pytest.raises(ParameterError) as info:
        DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=0, out=out)
    assert str(info.value) == f"out={str(out)!r} exists already; choose a new path"
    (tmp_path / "d.npy.json").unlink()
    out.write_bytes(b"")
    with pytest.raises(ParameterError, match="exists already"):
        DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=0, out=out)


@pytest.mark.slow
def test_from_integer_in_ram_and_in_a_temporary_file(private_tmp):
    exact = np.array([[0, 9], [9, 0]], dtype=np.int64)
    ram = DistanceStore.from_integer(exact, scale_bits=0, memory_budget=32)  # 2x2 int64 fits
    assert not ram.on_disk and ram.path is None and ram._cleanup is None
    disk = DistanceStore.from_integer(exact, scale_bits=0, memory_budget=31)
    assert disk.on_disk and disk.path.parent.parent == private_tmp
    assert disk.path.name == "distances.npy"
    assert disk.path.parent.name.startswith("omnifc-distances-")
    assert disk.integer.tolist() == exact.tolist()
    folder = disk.path.parent
    assert not (private_tmp / (disk.path.name + ".json")).exists()
    del disk
    gc.collect()
    assert not folder.exists()


# -- allocation and removal -----------------------------------------------------------

def test_allocate_keeps_exactly_the_budget_in_ram(private_tmp, caplog):
    array, path, tmpdir = acc_mod._allocate((3, 4), np.int32, path=None, budget=48, name="x")
    assert type(array) is np.ndarray and array.dtype == np.int32 and path is None
    assert tmpdir is None and not array.any()
    with caplog.at_level(logging.INFO, logger="protocols._result_storage"):
        array, path, tmpdir = acc_mod._allocate((3, 4), np.int32, path=None, budget=47,
                                                name="blob")
    assert isinstance(array, np.memmap) and array.shape == (3, 4) and not array.any()
    assert Path(tmpdir).parent == private_tmp and path == Path(tmpdir) / "blob.npy"
    assert [r.getMessage() for r in caplog.records] == [
        f"blob: 0.00 GB memory-mapped at {path}"]
    assert np.load(path).shape == (3, 4)
    acc_mod._remove(tmpdir)
    assert not Path(tmpdir).exists()


def test_allocate_with_a_path_always_maps_it(tmp_path):
    target = tmp_path / "r.npy"
    array, path, tmpdir = acc_mod._allocate((2, 2), np.uint32, path=target, budget=10**9,
                                            name="r")
    assert isinstance(array, np.memmap) and path == target and tmpdir is None
    assert np.load(target).dtype == np.uint32


def test_remove_files_folders_missing_and_none(tmp_path):
    folder = tmp_path / "f"
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "x").write_text("1")
    file = tmp_path / "g.npy"
    file.write_text("2")
    acc_mod._remove(None, str(folder), file, tmp_path / "missing")
    assert not folder.exists() and not file.exists()


def test_discard_store_removes_file_sidecar_and_temporary_folder(tmp_path, private_tmp):
    discard_store(None)
    out = tmp_path / "d.npy"
    store = DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=0, out=out)
    discard_store(store)
    assert store.integer is None
    assert not out.exists() and not (tmp_path / "d.npy.json").exists()
    temp = DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=0,
                                      memory_budget=0)
    folder = temp.path.parent
    discard_store(temp)
    assert not folder.exists() and not list(private_tmp.iterdir())


# -- the accumulator ------------------------------------------------------------------

@pytest.mark.parametrize("bad", [True, 0, -2, 2.0, "3"])
def test_accumulator_refuses_a_bad_n(bad):
    with pytest.raises(ParameterError) as info:
        DistanceAccumulator(bad, (13,), scale_bits=0)
    assert str(info.value) == f"n must be a positive integer, got {bad!r}"


@pytest.mark.parametrize("primes", [(), (1,), (13, 2**31), (0,), (-5,)])
def test_accumulator_refuses_bad_primes(primes):
    with pytest.raises(ParameterError) as info:
        DistanceAccumulator(2, primes, scale_bits=0)
    assert str(info.value) == ("primes must be a non-empty list of moduli in [2, 2^31), got "
                               f"{list(primes)}")


def test_accumulator_accepts_the_prime_boundaries_and_numpy_n():
    acc = DistanceAccumulator(np.int64(1), (2, 2**31 - 1), scale_bits=np.int32(2),
                              distance_bound=np.int64(3), parameters={"a": 1})
    assert acc.n == 1 and type(acc.n) is int and acc.primes == (2, 2**31 - 1)
    assert acc.scale_bits == 2 and type(acc.scale_bits) is int
    assert acc.distance_bound == 3 and type(acc.distance_bound) is int
    assert acc.dtype == np.int64 and acc.parameters == {"a": 1}
    assert acc.memory_budget == DEFAULT_MEMORY_BUDGET and acc.tile_bytes == DEFAULT_TILE_BYTES
    assert acc.out is None
    acc.add_tile(0, 0, 1, [[1]])
    acc.add_tile(1, 0, 1, [[2**31 - 2]])
    assert acc.finalize().integer.tolist() == [[0]]


def test_accumulator_refuses_an_existing_sidecar(tmp_path):
    (tmp_path / "d.npy.json").write_text("{}")
    with pytest.raises(ParameterError) as info:
        DistanceAccumulator(2, (13,), scale_bits=0, out=str(tmp_path / "d.npy"))
    assert str(info.value) == (f"out={str(tmp_path / 'd.npy')!r} exists already; choose a "
                               "new path")
    assert not (tmp_path / "d.npy").exists()


def test_budget_counts_the_result_and_the_scratch_residues(private_tmp, caplog):
    # n = 4, two primes: int64 result (8 bytes) + one uint32 scratch (4 bytes) per entry
    total = 4 * 4 * (8 + 4)
    ram = DistanceAccumulator(4, (13, 17), scale_bits=0, memory_budget=total)
    assert type(ram._result) is np.ndarray and type(ram._scratch[0]) is np.ndarray
    assert ram._scratch[0].dtype == np.uint32 and ram._scratch_paths == [None]
    ram.abort()
    with caplog.at_level(logging.INFO, logger="protocols._result_storage"):
        disk = DistanceAccumulator(4, (13, 17), scale_bits=0, memory_budget=total - 1)
    # the result alone (128 bytes) fits, but everything n x n moves to disk together
    assert isinstance(disk._result, np.memmap) and isinstance(disk._scratch[0], np.memmap)
    folder = disk._path.parent
    assert folder.parent == private_tmp
    assert sorted(p.name for p in folder.iterdir()) == ["distances.npy",
                                                        "distances.residues-1.npy"]
    assert [r.getMessage() for r in caplog.records] == [
        f"distances: 0.00 GB memory-mapped at {folder / 'distances.npy'}",
        f"residues-1: 0.00 GB memory-mapped at {folder / 'distances.residues-1.npy'}"]
    disk.abort()
    assert not folder.exists() and not list(private_tmp.iterdir())
    # one prime with int32 storage: 4 bytes per entry
    one = DistanceAccumulator(4, (13,), scale_bits=0, distance_bound=10, memory_budget=64)
    assert type(one._result) is np.ndarray and one.dtype == np.int32
    one = DistanceAccumulator(4, (13,), scale_bits=0, distance_bound=10, memory_budget=63)
    assert isinstance(one._result, np.memmap)
    one.abort()


def test_out_puts_scratch_files_next_to_it_and_removes_them(tmp_path):
    out = tmp_path / "d.npy"
    primes = (65521, 65519, 65497)
    acc = DistanceAccumulator(3, primes, scale_bits=0, out=out, memory_budget=10**9)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "d.npy", "d.residues-1.npy", "d.residues-2.npy"]
    exact = _python_distances([[0, 1], [5, 5], [9, 2]])
    _feed(acc, exact, primes, np.random.default_rng(3), rows_per_tile=2)
    store = acc.finalize()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "d.npy.json"]
    assert np.load(out).tolist() == exact
    assert store.path == out and store._cleanup is None


def test_abort_removes_the_files_and_refuses_more(tmp_path):
    out = tmp_path / "d.npy"
    acc = DistanceAccumulator(2, (13, 17), scale_bits=0, out=out)
    acc.add_tile(0, 0, 2, [[0, 1], [0, 0]])
    acc.abort()
    assert not list(tmp_path.iterdir())
    with pytest.raises(ProtocolError) as info:
        acc.add_tile(0, 0, 2, [[0, 1], [0, 0]])
    assert str(info.value) == "the accumulator is finalized (or aborted); no more tiles"
    with pytest.raises(ProtocolError) as info:
        acc.finalize()
    assert str(info.value) == "the accumulator is finalized (or aborted) already"


def test_a_finalized_accumulator_refuses_more():
    acc = DistanceAccumulator(1, (13,), scale_bits=0)
    acc.add_tile(0, 0, 1, [[0]])
    acc.finalize()
    with pytest.raises(ProtocolError, match="no more tiles"):
        acc.add_tile(0, 0, 1, [[0]])
    with pytest.raises(ProtocolError, match=r"^the accumulator is finalized \(or aborted\) "
                                            r"already$"):
        acc.finalize()


@pytest.mark.parametrize("index", [True, False, -1, 2, 5])
def test_add_tile_refuses_a_bad_prime_index(index):
    acc = DistanceAccumulator(2, (13, 17), scale_bits=0)
    with pytest.raises(ParameterError) as info:
        acc.add_tile(index, 0, 2, [[0, 0], [0, 0]])
    assert str(info.value) == f"prime_index must be in [0, 2), got {index!r}"


@pytest.mark.parametrize("a, b", [(-1, 1), (1, 1), (2, 1), (0, 4), (3, 4)])
def test_add_tile_refuses_a_bad_row_block(a, b):
    acc = DistanceAccumulator(3, (13,), scale_bits=0)
    with pytest.raises(ParameterError) as info:
        acc.add_tile(0, a, b, np.zeros((1, 1), dtype=np.int64))
    assert str(info.value) == ("row block must satisfy 0 <= row_start < row_stop <= 3, got "
                               f"[{a}, {b})")


def test_add_tile_shape_and_range_messages():
    acc = DistanceAccumulator(3, (13,), scale_bits=0)
    with pytest.raises(ParameterError) as info:
        acc.add_tile(0, 1, 3, np.zeros((2, 3), dtype=np.int64))
    assert str(info.value) == "tile rows [1, 3) needs shape (2, 2), got (2, 3)"
    with pytest.raises(ParameterError) as info:
        acc.add_tile(0, 2, 3, np.array([[13]], dtype=np.uint32))
    assert str(info.value) == "tile values must be reduced residues in [0, 13)"
    with pytest.raises(ParameterError) as info:
        acc.add_tile(0, 2, 3, np.array([[-1]]))
    assert str(info.value) == "tile values must be reduced residues in [0, 13)"
    with pytest.raises(ParameterError, match=r"\[0, 13\)"):
        acc.add_tile(0, 2, 3, np.array([[13]], dtype=np.int16))
    assert not acc._contributions.any(), "nothing counted on a refusal"
    acc.add_tile(0, 2, 3, np.array([[12]], dtype=np.uint32))   # p - 1 is fine
    acc.add_tile(0, 2, 3, np.array([[12]], dtype=np.uint8))
    acc.add_tile(0, 2, 3, np.array([[0]], dtype=np.int64))
    assert acc._contributions.tolist() == [[0, 0, 3]]
    assert int(acc._result[2, 2]) == (12 + 12) % 13


def test_contributions_count_per_prime_and_row():
    acc = DistanceAccumulator(3, (13, 17), scale_bits=0)
    acc.add_tile(1, 0, 2, np.zeros((2, 3), dtype=np.int64))
    acc.add_tile(1, 1, 3, np.zeros((2, 2), dtype=np.int64))
    acc.add_tile(0, 2, 3, np.zeros((1, 1), dtype=np.int64))
    assert acc._contributions.tolist() == [[0, 0, 1], [1, 2, 1]]
    assert acc._contributions.dtype == np.int64


def test_finalize_without_any_tile_names_row_zero(tmp_path):
    acc = DistanceAccumulator(2, (13,), scale_bits=0, out=tmp_path / "d.npy")
    with pytest.raises(ProtocolError) as info:
        acc.finalize()
    assert str(info.value) == ("incomplete result: row 0 received 0 contributions for prime "
                               "13, expected 1 like the others")
    assert not list(tmp_path.iterdir())


def test_finalize_names_the_first_row_that_differs_from_the_most():
    acc = DistanceAccumulator(3, (13, 17), scale_bits=0)
    for k in (0, 1):
        for _ in range(3):
            acc.add_tile(k, 0, 3, np.zeros((3, 3), dtype=np.int64))
    acc.add_tile(1, 1, 2, np.zeros((1, 2), dtype=np.int64))  # prime 17, row 1: 4 times
    with pytest.raises(ProtocolError) as info:
        acc.finalize()
    assert str(info.value) == ("incomplete result: row 0 received 3 contributions for prime "
                               "13, expected 4 like the others")


@pytest.mark.slow
@pytest.mark.parametrize("n_primes", [1, 2, 3])
@pytest.mark.parametrize("where", ["ram", "temp", "out"])
def test_finalize_is_exact_against_python_integers(n_primes, where, tmp_path, private_tmp):
    primes = (2147483647, 2147483629, 65521)[:n_primes]
    rng = np.random.default_rng(n_primes)
    magnitude = {1: 100, 2: 2**20, 3: 2**28}[n_primes]
    rows = rng.integers(-magnitude, magnitude + 1, size=(11, 3))
    exact = _python_distances(rows)
    bound = 3 * (2 * magnitude) ** 2
    kwargs = {"ram": {}, "temp": {"memory_budget": 0},
              "out": {"out": tmp_path / "d.npy"}}[where]
    acc = DistanceAccumulator(11, primes, scale_bits=5, distance_bound=bound,
                              tile_bytes=3 * 11 * 16 * n_primes, parameters={"q": 5},
                              **kwargs)
    _feed(acc, exact, primes, rng, rows_per_tile=4, parties=3)
    store = acc.finalize()
    assert store.integer.tolist() == exact
    assert store.integer.dtype == (np.int32 if n_primes == 1 else np.int64)
    assert store.scale_bits == 5 and store.parameters == {"q": 5}
    assert store.tile_bytes == 3 * 11 * 16 * n_primes
    assert store.memory_budget == (0 if where == "temp" else DEFAULT_MEMORY_BUDGET)
    assert store.on_disk == (where != "ram")
    assert np.asarray(store.distances).tolist() == [[v / 4**5 for v in r] for r in exact]
    if where == "out":
        meta = json.loads((tmp_path / "d.npy.json").read_text())
        assert meta == {"format": "omnifc-distances/1", "n": 11,
                        "dtype": "int32" if n_primes == 1 else "int64", "scale_bits": 5,
                        "primes": list(primes), "distance_bound": bound,
                        "parameters": {"q": 5}}
        assert np.load(tmp_path / "d.npy").tolist() == exact
        assert sorted(p.name for p in tmp_path.iterdir()) == ["d.npy", "d.npy.json",
                                                              "scratch"]
    if where == "temp":
        folder = store.path.parent
        assert sorted(p.name for p in folder.iterdir()) == ["distances.npy"]
        del store
        gc.collect()
        assert not folder.exists()
    assert not list(private_tmp.iterdir())


def test_crt_of_every_entry_by_hand():
    # residues chosen freely (not from distances): the combination must be the CRT
    primes = (65521, 65519)
    n = 5
    rng = np.random.default_rng(11)
    res = [rng.integers(0, p, size=(n, n)) for p in primes]
    acc = DistanceAccumulator(n, primes, scale_bits=0, tile_bytes=2 * n * 16 * 2)
    for k in range(2):
        acc.add_tile(k, 0, n, res[k])
    store = acc.finalize()
    expected = [[0 if i == j else _crt([int(res[0][min(i, j), max(i, j)]),
                                        int(res[1][min(i, j), max(i, j)])], primes)
                 for j in range(n)] for i in range(n)]
    assert store.integer.tolist() == expected


def test_one_prime_rows_beyond_1024_are_mirrored_and_bounded():
    n = 1030  # two blocks of the one-prime finish
    p = 2147483647
    acc = DistanceAccumulator(n, (p,), scale_bits=0, distance_bound=10**6)
    rng = np.random.default_rng(4)
    upper = np.triu(rng.integers(0, 10**6 + 1, size=(n, n)), 1)
    acc.add_tile(0, 0, n, upper)
    store = acc.finalize()
    assert np.array_equal(store.integer, upper + upper.T)
    bad = DistanceAccumulator(n, (p,), scale_bits=0, distance_bound=10**6)
    corrupt = upper.copy()
    corrupt[1028, 1029] = 10**6 + 1  # in the second block only
    bad.add_tile(0, 0, n, corrupt)
    with pytest.raises(ProtocolError) as info:
        bad.finalize()
    assert str(info.value) == ("combined distances exceed the largest possible value "
                               "(1000001 > 1000000): a contribution was corrupted")


def test_several_primes_bound_is_inclusive_and_checked_per_tile(tmp_path):
    primes = (65521, 65519)
    n = 6
    upper = np.triu(np.full((n, n), 1000, dtype=np.int64), 1)
    ok = DistanceAccumulator(n, primes, scale_bits=0, distance_bound=1000,
                             tile_bytes=n * 16 * 2)  # one row per tile
    for k, p in enumerate(primes):
        ok.add_tile(k, 0, n, upper % p)
    assert ok.finalize().integer.tolist() == (upper + upper.T).tolist()
    bad = DistanceAccumulator(n, primes, scale_bits=0, distance_bound=1000,
                              tile_bytes=n * 16 * 2, out=tmp_path / "d.npy")
    corrupt = upper.copy()
    corrupt[4, 5] = 1001  # the fifth tile
    for k, p in enumerate(primes):
        bad.add_tile(k, 0, n, corrupt % p)
    with pytest.raises(ProtocolError) as info:
        bad.finalize()
    assert str(info.value) == ("combined distances exceed the largest possible value "
                               "(1001 > 1000): a contribution was corrupted")
    assert not list(tmp_path.iterdir())


def test_entries_left_of_the_diagonal_are_ignored():
    primes = (65521, 65519)
    n = 4
    full = np.arange(1, n * n + 1).reshape(n, n)  # garbage below and on the diagonal
    acc = DistanceAccumulator(n, primes, scale_bits=0, tile_bytes=2 * n * 16 * 2)
    for k in range(2):
        for a in range(0, n, 3):
            acc.add_tile(k, a, min(n, a + 3), full[a:a + 3, a:])
    upper = np.triu(full, 1)
    assert acc.finalize().integer.tolist() == (upper + upper.T).tolist()


@pytest.mark.slow
def test_a_dropped_store_of_the_accumulator_removes_its_temporary_folder(private_tmp):
    acc = DistanceAccumulator(2, (13,), scale_bits=0, memory_budget=0)
    acc.add_tile(0, 0, 2, [[0, 3], [0, 0]])
    store = acc.finalize()
    assert store.integer.tolist() == [[0, 3], [3, 0]]
    assert store._cleanup is not None and store._cleanup.alive
    del acc
    gc.collect()
    assert store.path.exists(), "the finished result belongs to the store now"
    folder = store.path.parent
    del store
    gc.collect()
    assert not folder.exists()


# -- the float view -------------------------------------------------------------------

def test_view_shape_size_and_memory_rule():
    store = DistanceStore(np.zeros((5, 5), dtype=np.int64), scale_bits=0,
                          memory_budget=4 * 8 * 25)
    view = TiledDistances(store)
    assert view.shape == (5, 5) and view.n == 5 and view.size == 25 and len(view) == 5
    assert view.ndim == 2 and view.dtype == np.float64
    assert view.fits_in_memory() and not view.fits_in_memory(5)
    assert view.fits_in_memory(1)
    store.memory_budget = 4 * 8 * 25 - 1
    assert not view.fits_in_memory() and view.fits_in_memory(3)


def test_view_values_tiles_and_array(tmp_path, caplog):
    exact = np.array(_python_distances([[0], [1], [3], [6], [10]]), dtype=np.int64)
    store = DistanceStore.from_integer(exact, scale_bits=1, out=tmp_path / "d.npy",
                                       tile_bytes=2 * 5 * 16)
    view = store.distances
    dense = exact / 4.0
    assert view.rows(1, 3).tolist() == dense[1:3].tolist()
    assert view.rows(1, 3).dtype == np.float64
    assert view.take_rows(np.array([4, 0, 4], dtype=np.int8)).tolist() == \
        dense[[4, 0, 4]].tolist()
    blocks = list(view.tiles())  # default: the store's rows_per_tile() = 2
    assert [(a, b) for a, b, _ in blocks] == [(0, 2), (2, 4), (4, 5)]
    assert all(type(blk) is np.ndarray and blk.dtype == np.float64 for _, _, blk in blocks)
    assert np.vstack([blk for _, _, blk in blocks]).tolist() == dense.tolist()
    ints = list(view.tiles(3, integer=True))
    assert [(a, b) for a, b, _ in ints] == [(0, 3), (3, 5)]
    assert all(type(blk) is np.ndarray and blk.dtype == np.int64 for _, _, blk in ints)
    assert np.vstack([blk for _, _, blk in ints]).tolist() == exact.tolist()
    with caplog.at_level(logging.WARNING, logger="protocols._distance_store"):
        whole = np.asarray(view)
    assert whole.dtype == np.float64 and whole.tolist() == dense.tolist()
    assert ("materializing the on-disk 5 x 5 distance matrix in memory (0.00 GB)"
            in caplog.text)
    as32 = np.asarray(view, dtype=np.float32)
    assert as32.dtype == np.float32 and as32.tolist() == dense.astype(np.float32).tolist()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="protocols._distance_store"):
        np.asarray(DistanceStore(exact, scale_bits=1).distances)
    assert "materializing" not in caplog.text


# -- survivors of the first mutation run ----------------------------------------------

def test_repr_of_a_store_on_disk(tmp_path):
    store = DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=1,
                                       out=tmp_path / "d.npy")
    assert repr(store) == (f"DistanceStore(n=2, dtype=int64, scale_bits=1, on disk at "
                           f"{tmp_path / 'd.npy'})")


def test_a_one_by_one_matrix_is_a_store():
    store = DistanceStore.from_integer(np.zeros((1, 1), np.int64), scale_bits=0)
    assert store.integer.tolist() == [[0]] and store.n == 1


def test_from_integer_with_tiles_smaller_than_a_row(private_tmp):
    # tile_bytes below one row (13 entries x 8 bytes): one row per block
    exact = np.array(_python_distances([[i, 2 * i] for i in range(13)]), dtype=np.int64)
    store = DistanceStore.from_integer(exact, scale_bits=0, tile_bytes=16,
                                       distance_bound=int(exact.max()))
    assert store.integer.tolist() == exact.tolist()


def test_sidecar_writes_parameters_that_json_cannot_as_text(tmp_path):
    params = {"out": tmp_path / "x", "k": np.int64(3)}
    DistanceStore.from_integer(np.zeros((2, 2), np.int64), scale_bits=0,
                               out=tmp_path / "d.npy", parameters=params)
    meta = json.loads((tmp_path / "d.npy.json").read_text())
    assert meta["parameters"] == {"out": str(tmp_path / "x"), "k": "3"}
    acc = DistanceAccumulator(2, (13,), scale_bits=0, out=tmp_path / "e.npy",
                              parameters=params)
    acc.add_tile(0, 0, 2, [[0, 1], [0, 0]])
    acc.finalize()
    meta = json.loads((tmp_path / "e.npy.json").read_text())
    assert meta["parameters"] == {"out": str(tmp_path / "x"), "k": "3"}


def test_take_rows_of_no_rows_and_of_whole_floats():
    store = DistanceStore(np.arange(16, dtype=np.int64).reshape(4, 4), scale_bits=1)
    view = store.distances
    empty = view.take_rows([])
    assert empty.shape == (0, 4) and empty.dtype == np.float64
    assert view.take_rows(np.array([3.0, 1.0])).tolist() == [[3.0, 3.25, 3.5, 3.75],
                                                             [1.0, 1.25, 1.5, 1.75]]


@pytest.mark.slow
def test_one_prime_finish_covers_rows_past_2048():
    n = 2100  # three blocks of 1,024 rows
    acc = DistanceAccumulator(n, (2147483647,), scale_bits=0, distance_bound=1000)
    upper = np.triu(np.random.default_rng(8).integers(0, 1001, size=(n, n)), 1)
    acc.add_tile(0, 0, n, upper)
    assert np.array_equal(acc.finalize().integer, upper + upper.T)


def test_one_prime_bound_is_inclusive():
    acc = DistanceAccumulator(3, (2147483647,), scale_bits=0, distance_bound=100)
    acc.add_tile(0, 0, 3, [[0, 100, 7], [0, 0, 100], [0, 0, 0]])
    assert acc.finalize().integer.tolist() == [[0, 100, 7], [100, 0, 100], [7, 100, 0]]


@pytest.mark.parametrize("n, tile_bytes", [(5, 2), (11, 3), (11, 1)])
def test_several_primes_with_tiles_below_one_row(n, tile_bytes):
    primes = (65521, 65519)
    exact = _python_distances([[i % 4, (3 * i) % 7] for i in range(n)])
    acc = DistanceAccumulator(n, primes, scale_bits=0, tile_bytes=tile_bytes)
    _feed(acc, exact, primes, np.random.default_rng(2), rows_per_tile=2)
    assert acc.finalize().integer.tolist() == exact


def test_array_protocol_called_with_a_dtype():
    view = DistanceStore(np.array([[0, 3], [3, 0]], dtype=np.int64), scale_bits=1).distances
    as32 = view.__array__(np.float32)
    assert as32.dtype == np.float32 and as32.tolist() == [[0.0, 0.75], [0.75, 0.0]]
    plain = view.__array__()
    assert plain.dtype == np.float64 and plain.tolist() == [[0.0, 0.75], [0.75, 0.0]]


def test_materializing_warning_gives_the_size_in_gb(tmp_path, caplog):
    n = 2000  # 8 * n^2 bytes = 0.032 GB
    matrix = np.lib.format.open_memmap(tmp_path / "d.npy", mode="w+", dtype=np.int32,
                                       shape=(n, n))
    view = DistanceStore(matrix, scale_bits=0).distances
    with caplog.at_level(logging.WARNING, logger="protocols._distance_store"):
        dense = np.asarray(view)
    assert dense.shape == (n, n)
    assert ("materializing the on-disk 2000 x 2000 distance matrix in memory (0.03 GB)"
            in caplog.text)


def test_remove_never_follows_a_link_to_a_folder(tmp_path):
    target = tmp_path / "keep"
    target.mkdir()
    (target / "precious").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    acc_mod._remove(link)  # no error, nothing removed through the link
    assert (target / "precious").read_text() == "x"


def test_discard_store_runs_the_cleanup_given_to_the_store(tmp_path):
    import weakref

    folder = tmp_path / "tmp"
    folder.mkdir()
    matrix = np.zeros((2, 2), dtype=np.int64)
    store = DistanceStore(matrix, scale_bits=0,
                          _cleanup=weakref.finalize(matrix, acc_mod._remove, folder))
    discard_store(store)
    assert not folder.exists() and store.integer is None

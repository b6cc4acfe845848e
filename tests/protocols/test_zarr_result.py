"""The distance result as a Zarr v3 store (issue 22): written by the coordinator's
accumulator when ``out`` ends in ``.zarr``, read by ``dask.array.from_zarr`` and by
``DistanceStore.open``; never taken for a result before its metadata says complete.

References are independent: the exact squared distances of the quantized rows computed
with Python integers (``protocol_helpers.plaintext_sq_distances``) and the ``.npy`` result
of the same session, read with plain numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")

from finite_field import IntegrityError, ParameterError, PeerError, ProtocolError  # noqa: E402
from protocols import (DistanceAccumulator, DistanceStore, IncompleteResultError,  # noqa: E402
                       Party, SessionParameters, ZarrMatrix, run_memory_session)
from protocol_helpers import plaintext_sq_distances, random_data  # noqa: E402


def all_rows(data):
    return np.concatenate(list(data.values()))


def _leftovers(path: Path) -> list:
    return sorted(p.name for p in path.iterdir())


def _from_zarr(path):
    """The documented call: ``dask.array.from_zarr(path, component="integer")``."""
    return da.from_zarr(str(path), component="integer")


# -- the Zarr result equals the .npy result, bit for bit -------------------------------
@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("scale_bits, n_primes", [(8, 1), (24, 2)])
@pytest.mark.parametrize("budget", [None, 0])  # working matrix in RAM / memory-mapped
def test_zarr_result_read_by_dask_equals_the_npy_result(scale_bits, n_primes, budget,
                                                        tmp_path):
    data = random_data([60, 45, 55, 40], 5, seed=scale_bits)
    params = SessionParameters(dim=5, bound=1.0, scale_bits=scale_bits, chunk_bytes=4096)
    npy, zpath = tmp_path / "d.npy", tmp_path / "d.zarr"
    # tiles of 16 KiB: the store has several chunks (of 16384 / (200 x 16) = 5 rows, a
    # streamed pass's tile: integer and float copy)
    run_memory_session(data, params, out=npy, memory_budget=budget, tile_bytes=16384)
    outcome, _ = run_memory_session(data, params, out=zpath, memory_budget=budget,
                                    tile_bytes=16384)
    assert len(outcome.parameters["primes"]) == n_primes
    exact = plaintext_sq_distances(all_rows(data), 1.0, scale_bits)
    reference = np.load(npy)
    assert np.array_equal(reference, exact)
    # dask reads the store directly: same integers, same dtype
    lazy = _from_zarr(zpath)
    integer = lazy.compute()
    assert integer.dtype == reference.dtype == (np.int32 if n_primes == 1 else np.int64)
    assert integer.tobytes() == reference.tobytes()
    # chunked by row blocks of whole rows, none larger than the tile budget
    rows = lazy.chunks[0][0]
    assert lazy.chunks[1] == (200,)
    assert rows == 16384 // (200 * 16) and len(lazy.chunks[0]) > 1
    # the float view D / 4^q: dask, the store's lazy view and numpy agree bit for bit
    factor = 1.0 / 4.0 ** scale_bits
    floats = np.multiply(reference, factor, dtype=np.float64)
    assert (lazy.astype(np.float64) * factor).compute().tobytes() == floats.tobytes()
    store = outcome.store
    assert store.format == "zarr" and store.on_disk and store.path == zpath
    assert isinstance(store.integer, ZarrMatrix)
    assert np.asarray(store.distances).tobytes() == floats.tobytes()
    assert np.array_equal(outcome.integer, exact) and outcome.integer.dtype == np.int64
    assert outcome.values.tobytes() == floats.tobytes()
    reopened = DistanceStore.open(zpath)
    assert np.asarray(reopened.integer).tobytes() == reference.tobytes()
    assert reopened.scale_bits == scale_bits
    assert (reopened.to_dask() * reopened.factor).compute().tobytes() == floats.tobytes()
    assert DistanceStore.open(npy).to_dask().compute().tobytes() == reference.tobytes()
    # numpy indexing through the store, as the streamed clustering reads it
    rows_idx, cols_idx = np.array([7, 0, 7, 199]), np.array([3, 150])
    assert np.array_equal(reopened.integer[rows_idx], reference[rows_idx])
    assert np.array_equal(reopened.integer[np.ix_(rows_idx, cols_idx)],
                          reference[np.ix_(rows_idx, cols_idx)])
    assert np.array_equal(reopened.distances[5:9], floats[5:9])
    # the metadata, written last
    meta = json.loads((zpath / "zarr.json").read_text())["attributes"]["omnifc"]
    assert meta["complete"] is True and meta["n"] == 200
    assert meta["primes"] == list(outcome.parameters["primes"])
    assert meta["scale_factor"] == factor and meta["dtype"] == str(reference.dtype)
    # nothing else left behind: no working matrix, no residue scratch
    assert _leftovers(tmp_path) == ["d.npy", "d.npy.json", "d.zarr"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_rerun_round_leaves_only_the_final_store(tmp_path):
    data = random_data([3, 4, 2, 3], 3, seed=5)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=24, adversaries=0)
    out = tmp_path / "d.zarr"
    outcome, _ = run_memory_session(data, params, out=out, drop={"party-1": "evaluation"})
    assert outcome.round == 2
    assert np.array_equal(_from_zarr(out).compute(),
                          plaintext_sq_distances(all_rows(data), 1.0, 24))
    assert _leftovers(tmp_path) == ["d.zarr"]


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_grpc_session_writes_the_zarr_store(tmp_path):
    from protocols import run_local_grpc_session

    data = random_data([40, 30, 35], 4, seed=11)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=24)
    out = tmp_path / "d.zarr"
    outcome = run_local_grpc_session(data, params, out=out, deadline=60.0)
    assert outcome.store.format == "zarr"
    integer = _from_zarr(out).compute()
    assert integer.dtype == np.int64
    assert np.array_equal(integer, plaintext_sq_distances(all_rows(data), 1.0, 24))


def test_from_integer_writes_the_same_store(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.integers(-40, 40, (23, 3))
    exact = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    store = DistanceStore.from_integer(exact, scale_bits=1, distance_bound=3 * 80 ** 2,
                                       out=tmp_path / "e.zarr", tile_bytes=256)
    assert store.format == "zarr" and store.integer.dtype == np.int32
    assert np.array_equal(_from_zarr(tmp_path / "e.zarr").compute(), exact)
    assert _from_zarr(tmp_path / "e.zarr").chunks[0][0] == 1  # 256 B < one row's 23 x 16
    wide = DistanceStore.from_integer(exact, scale_bits=1, out=tmp_path / "f.zarr",
                                      tile_bytes=2000)
    assert wide.integer.chunk_rows == 2000 // (23 * 16)  # 5 rows: 5 chunks
    # row slices across chunk boundaries, in any order, repeated
    for a, b in [(0, 23), (3, 12), (12, 3), (4, 5), (20, 23), (7, 7), (0, 4), (21, 30)]:
        assert np.array_equal(wide.integer[a:b], exact[a:b])
    assert np.array_equal(wide.integer[-3:], exact[-3:])
    assert np.array_equal(wide.integer[2:9:2], exact[2:9:2])
    assert np.array_equal(wide.integer[5], exact[5])
    with pytest.raises(ParameterError, match="exists already"):
        DistanceStore.from_integer(exact, scale_bits=1, out=tmp_path / "e.zarr")


# -- a half-written store is never taken for a result ----------------------------------
def _finished_store(path):
    d = np.array([[0, 5, 9], [5, 0, 4], [9, 4, 0]])
    acc = DistanceAccumulator(3, primes=[7, 11], scale_bits=1, out=path)
    for k, p in enumerate((7, 11)):
        acc.add_tile(k, 0, 2, d[0:2, 0:] % p)
        acc.add_tile(k, 2, 3, d[2:3, 2:] % p)
    return d, acc


def test_an_unfinished_store_is_refused(tmp_path):
    path = tmp_path / "d.zarr"
    d, acc = _finished_store(path)
    # every tile is in, but finalize has not run: the store says "complete": false
    assert (path / "zarr.json").is_file()
    with pytest.raises(IncompleteResultError, match="not complete"):
        DistanceStore.open(path)
    store = acc.finalize()
    assert store.integer.tolist() == d.tolist()
    assert DistanceStore.open(path).integer.tolist() == d.tolist()


@pytest.mark.parametrize("damage", ["no-metadata", "complete-false", "truncated",
                                    "no-group", "no-array"])
def test_a_damaged_store_is_refused(damage, tmp_path):
    import shutil

    path = tmp_path / "d.zarr"
    _, acc = _finished_store(path)
    acc.finalize()
    root = path / "zarr.json"
    meta = json.loads(root.read_text())
    if damage == "no-metadata":
        del meta["attributes"]["omnifc"]
        root.write_text(json.dumps(meta))
    elif damage == "complete-false":
        meta["attributes"]["omnifc"]["complete"] = False
        root.write_text(json.dumps(meta))
    elif damage == "truncated":
        root.write_text(root.read_text()[:40])
    elif damage == "no-group":
        root.unlink()
    else:
        shutil.rmtree(path / "integer")
    with pytest.raises(IncompleteResultError):
        DistanceStore.open(path)


def test_an_aborted_or_dropped_accumulator_leaves_nothing(tmp_path):
    import gc

    path = tmp_path / "d.zarr"
    _, acc = _finished_store(path)
    acc.abort()
    assert _leftovers(tmp_path) == []
    _, acc = _finished_store(path)
    del acc
    gc.collect()
    assert _leftovers(tmp_path) == []


def test_a_failing_export_leaves_nothing(tmp_path, monkeypatch):
    import protocols._accumulator as accumulator

    def fail(group, meta):
        raise OSError("disk full")

    monkeypatch.setattr(accumulator, "_complete_zarr", fail)
    _, acc = _finished_store(tmp_path / "d.zarr")
    with pytest.raises(OSError, match="disk full"):
        acc.finalize()
    assert _leftovers(tmp_path) == []


def test_a_failing_decode_leaves_nothing(tmp_path):
    acc = DistanceAccumulator(2, primes=[7], scale_bits=0, distance_bound=3,
                              out=tmp_path / "d.zarr", memory_budget=0)
    acc.add_tile(0, 0, 2, np.array([[0, 5], [0, 0]]))  # 5 > the bound 3
    with pytest.raises(ProtocolError, match="largest possible value"):
        acc.finalize()
    assert _leftovers(tmp_path) == []


def test_the_working_matrix_lives_beside_the_store(tmp_path):
    acc = DistanceAccumulator(4, primes=[7, 11], scale_bits=0, out=tmp_path / "d.zarr",
                              memory_budget=0)
    names = _leftovers(tmp_path)
    assert "d.zarr" in names and len(names) == 2  # the store and one working directory
    acc.abort()
    assert _leftovers(tmp_path) == []


def test_resume_and_existing_paths_are_refused(tmp_path):
    with pytest.raises(ParameterError, match="Zarr store"):
        DistanceAccumulator(3, primes=[7], scale_bits=0, out=tmp_path / "d.zarr",
                            written=[])
    (tmp_path / "e.zarr").mkdir()
    with pytest.raises(ParameterError, match="exists already"):
        DistanceAccumulator(3, primes=[7], scale_bits=0, out=tmp_path / "e.zarr")


# -- fail closed in a session: no store after a failure --------------------------------
@pytest.mark.timeout(60)
def test_a_party_error_mid_evaluation_leaves_no_store(tmp_path, monkeypatch):
    data = random_data([80, 70, 60], 4, seed=6)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=24, chunk_bytes=4096)
    calls = {"n": 0}
    seen = []
    evaluate = Party._evaluate

    def failing(self, k, a, b):
        if self.party_id == "party-1":
            calls["n"] += 1
            if calls["n"] == 2:  # mid-evaluation: the store exists and is not complete
                try:
                    DistanceStore.open(tmp_path / "d.zarr")
                except Exception as error:
                    seen.append(error)
                raise RuntimeError("disk full")
        return evaluate(self, k, a, b)

    monkeypatch.setattr(Party, "_evaluate", failing)
    with pytest.raises(PeerError):
        run_memory_session(data, params, out=tmp_path / "d.zarr", memory_budget=0)
    assert calls["n"] == 2
    assert len(seen) == 1 and isinstance(seen[0], IncompleteResultError)
    assert "complete=False" in str(seen[0])
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(60)
def test_a_wrapped_decode_leaves_no_store(tmp_path):
    data = random_data([5, 4, 6], 3, seed=1)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    with pytest.raises(IntegrityError, match="no-wrap bound"):
        run_memory_session(data, params, out=tmp_path / "d.zarr",
                           faults={"party-0": "garbage-tiles"})
    assert _leftovers(tmp_path) == []


@pytest.mark.timeout(60)
def test_a_failing_clustering_callback_deletes_the_finished_store(tmp_path):
    data = random_data([5, 4, 6], 3, seed=1)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    seen = {}

    def cluster(distances):
        seen["complete"] = DistanceStore.open(tmp_path / "d.zarr").n  # finalized by now
        raise ValueError("no convergence")

    with pytest.raises(ProtocolError, match="clustering failed"):
        run_memory_session(data, params, out=tmp_path / "d.zarr", cluster=cluster)
    assert seen == {"complete": 15}
    assert _leftovers(tmp_path) == []


def test_without_zarr_the_extra_is_named(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "zarr", None)
    with pytest.raises(ParameterError, match=r"omnifc\[dask\]"):
        DistanceAccumulator(3, primes=[7], scale_bits=0, out=tmp_path / "d.zarr")
    with pytest.raises(ParameterError, match=r"omnifc\[dask\]"):
        DistanceStore.from_integer(np.zeros((2, 2), dtype=np.int64), scale_bits=0,
                                   out=tmp_path / "e.zarr")
    assert _leftovers(tmp_path) == []


# -- the same memory bound as the .npy result ------------------------------------------
_FINALIZE_PEAK = """
import json, sys, tracemalloc
import numpy as np
from finite_field import DistanceTiles
from protocols import DistanceAccumulator
primes, out, tile_bytes = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)
n = 1500
x = rng.integers(-100, 100, (n, 8))
acc = DistanceAccumulator(n, primes, scale_bits=0, distance_bound=8 * 200 ** 2, out=out,
                          memory_budget=0, tile_bytes=tile_bytes)  # working matrix mapped
for k, p in enumerate(primes):
    for a, b, tile in DistanceTiles(x % p, p).blocks(20, upper=True):
        acc.add_tile(k, a, b, tile)
tracemalloc.start()
store = acc.finalize()  # decode in the working matrix, copy, metadata
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"peak": peak, "itemsize": store.integer.dtype.itemsize}))
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("primes", [[2**31 - 1], [65521, 65519]])
def test_finalize_into_zarr_holds_row_blocks_not_the_matrix(primes, tmp_path):
    # Measured in a fresh interpreter: tracemalloc counts every thread of the process, and
    # after other tests in the same process (their zarr/dask I/O threads) 3.7 MB of objects
    # allocated in pathlib were traced during this finalize, in one order of test files only.
    import subprocess
    import sys

    n, tile_bytes = 1500, 1 << 16
    run = subprocess.run([sys.executable, "-c", _FINALIZE_PEAK, json.dumps(primes),
                          str(tmp_path / "d.zarr"), str(tile_bytes)],
                         capture_output=True, text=True, timeout=100,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    matrix = n * n * measured["itemsize"]  # 9 or 18 MB
    # a few row blocks (measured: <= 0.33 MB)
    assert measured["peak"] <= 8 * tile_bytes < matrix / 16
    x = np.random.default_rng(0).integers(-100, 100, (n, 8))
    exact = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    assert np.array_equal(_from_zarr(tmp_path / "d.zarr").compute(), exact)

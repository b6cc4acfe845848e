"""Streaming end to end (issue 11): the coordinator adds every tile, as it arrives, into one
preallocated result (in RAM or memory-mapped on disk) and decodes it in row blocks.

References are independent: the exact squared distances of the quantized rows computed
with Python integers (``protocol_helpers.plaintext_sq_distances``), and dense numpy
clustering/graphs on those integers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from finite_field import IntegrityError, ParameterError, PeerError, ProtocolError
from protocols import Party, SessionParameters, Transcript, run_memory_session
from protocol_helpers import plaintext_sq_distances, random_data


def all_rows(data):
    return np.concatenate(list(data.values()))


def _leftovers(tmp_path: Path) -> list:
    return sorted(p.name for p in tmp_path.rglob("*"))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Temporary result files (memory_budget=0 without out=) go under tmp_path."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


# -- streaming == exact, bit for bit --------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("chunk_bytes", [4096, 16384, 3 << 20])
@pytest.mark.parametrize("scale_bits, n_primes", [(8, 1), (24, 2)])
@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("integrity", ["detect", "off"])
@pytest.mark.parametrize("storage", ["ram", "disk"])
def test_streamed_result_equals_exact_integers(chunk_bytes, scale_bits, n_primes, mode,
                                               integrity, storage, tmp_path, private_tmp):
    # m = 4 > 2l+2t-1 = 3: with integrity "detect" every tile goes through the checks
    data = random_data([60, 45, 55, 40], 5, seed=chunk_bytes % 1000 + scale_bits)
    params = SessionParameters(dim=5, bound=1.0, scale_bits=scale_bits, mode=mode,
                               integrity=integrity, chunk_bytes=chunk_bytes)
    out = tmp_path / "d.npy" if storage == "disk" else None
    outcome, transcript = run_memory_session(data, params, out=out, record=True)
    expected = plaintext_sq_distances(all_rows(data), 1.0, scale_bits)
    store = outcome.store
    assert len(outcome.parameters["primes"]) == n_primes
    assert np.array_equal(np.asarray(store.integer), expected)
    assert store.integer.dtype == (np.int32 if n_primes == 1 else np.int64)
    assert store.on_disk == (storage == "disk")
    assert outcome.integrity.startswith("checked" if integrity == "detect" else "off")
    # the lazy views agree with the store
    assert np.array_equal(outcome.integer, expected)
    assert np.array_equal(outcome.values, expected / 4.0 ** scale_bits)
    if storage == "disk":
        assert store.path == out and (tmp_path / "d.npy.json").is_file()
        assert np.array_equal(np.load(out), expected)
    # several tiles per prime and party, so accumulation really is tile by tile
    tiles = transcript.of_kind("tile")
    assert len(tiles) == 4 * n_primes * len(transcript.coordinator.tiles)
    if chunk_bytes < 3 << 20:
        assert len(transcript.coordinator.tiles) > 5


def test_tiles_reach_the_coordinator_interleaved_round_robin():
    # the in-memory transport never materializes a party's upload: the coordinator sees
    # tile i of every party before tile i+1 of any
    data = random_data([80, 70, 60], 4, seed=2)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=8, chunk_bytes=4096)
    outcome, transcript = run_memory_session(data, params, record=True)
    order = [(m.envelope().tile.tile_index, m.sender) for m in transcript.of_kind("tile")]
    assert len(transcript.coordinator.tiles) > 5
    indices = [i for i, _ in order]
    assert indices == sorted(indices)
    assert [s for _, s in order[:3]] == ["party-0", "party-1", "party-2"]
    assert np.array_equal(outcome.integer, plaintext_sq_distances(all_rows(data), 1.0, 8))


def test_memory_budget_moves_the_result_to_a_temporary_file(private_tmp):
    data = random_data([7, 8, 9], 3, seed=4)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    outcome, _ = run_memory_session(data, params, memory_budget=0)
    store = outcome.store
    assert store.on_disk and store.path.is_relative_to(private_tmp)
    assert np.array_equal(np.asarray(store.integer),
                          plaintext_sq_distances(all_rows(data), 1.0, 8))
    path = store.path
    del outcome, store, _
    import gc
    gc.collect()
    assert not path.exists() and _leftovers(private_tmp) == []


def test_a_rerun_round_starts_from_a_clean_accumulator(tmp_path):
    # integrity excludes the corrupting party and reruns: the result file of the first
    # round is dropped, the second round's is exact (a stale sum would be off)
    data = random_data([6, 5, 7, 4, 6], 3, seed=9)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, adversaries=1)  # locates
    out = tmp_path / "d.npy"
    outcome, _ = run_memory_session(data, params, out=out,
                                    faults={"party-2": "corrupt-upload"})
    assert outcome.round == 2 and "party-2" not in outcome.responders
    assert np.array_equal(np.load(out), plaintext_sq_distances(all_rows(data), 1.0, 8))
    assert _leftovers(tmp_path) == ["d.npy", "d.npy.json"]


def test_a_dropout_rerun_is_exact_on_disk(tmp_path):
    data = random_data([3, 4, 2, 3], 3, seed=5)
    # two primes: scratch; best effort (A = 0), so the straggler may take the one check
    params = SessionParameters(dim=3, bound=1.0, scale_bits=24, adversaries=0)
    out = tmp_path / "d.npy"
    outcome, _ = run_memory_session(data, params, out=out, drop={"party-1": "evaluation"})
    assert outcome.round == 2
    assert np.array_equal(np.load(out), plaintext_sq_distances(all_rows(data), 1.0, 24))
    assert _leftovers(tmp_path) == ["d.npy", "d.npy.json"]  # residue scratch removed


# -- fail closed ------------------------------------------------------------------------
@pytest.mark.parametrize("storage", ["out", "budget"])
def test_a_party_error_mid_evaluation_leaves_no_file(storage, tmp_path, private_tmp,
                                                     monkeypatch):
    data = random_data([80, 70, 60], 4, seed=6)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=24, chunk_bytes=4096)
    calls = {"n": 0}
    evaluate = Party._evaluate

    def failing(self, k, a, b):
        if self.party_id == "party-1":
            calls["n"] += 1
            if calls["n"] == 2:  # its second block: prime 2 (two primes at q = 24)
                raise RuntimeError("disk full")
        return evaluate(self, k, a, b)

    monkeypatch.setattr(Party, "_evaluate", failing)
    out = tmp_path / "d.npy"
    kwargs = {"out": out} if storage == "out" else {"memory_budget": 0}
    seen = Transcript()
    with pytest.raises(PeerError) as info:
        run_memory_session(data, params, record=True, observe=seen, **kwargs)
    assert (info.value.party, info.value.phase) == ("party-1", "evaluation")
    # it failed mid-evaluation: tiles had been accumulated already
    assert len(seen.of_kind("tile")) > 3
    assert seen.coordinator.outcome is None and seen.coordinator._acc is None
    assert _leftovers(tmp_path) == ["scratch"] and _leftovers(private_tmp) == []


def test_a_dropout_that_ends_the_session_leaves_no_file(tmp_path):
    data = random_data([3, 4, 2], 3, seed=5)  # m = 2l+2t-1: nobody may drop
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    with pytest.raises(PeerError):
        run_memory_session(data, params, out=tmp_path / "d.npy",
                           drop={"party-2": "evaluation"})
    assert _leftovers(tmp_path) == []


def test_a_wrapped_decode_leaves_no_file(tmp_path):
    # no checks (m = 3, r = 0): a corrupted upload is caught by the no-wrap bound at decode,
    # after every tile was written: the half-true result file is deleted
    data = random_data([5, 4, 6], 3, seed=1)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)
    with pytest.raises(IntegrityError) as info:
        run_memory_session(data, params, out=tmp_path / "d.npy",
                           faults={"party-0": "garbage-tiles"})
    assert "no-wrap bound" in str(info.value)
    assert _leftovers(tmp_path) == []


def test_a_failing_clustering_callback_deletes_the_finished_file(tmp_path):
    data = random_data([5, 4, 6], 3, seed=1)
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8)

    def cluster(distances):
        assert (tmp_path / "d.npy.json").is_file()  # finalized when the callback runs
        raise ValueError("no convergence")

    with pytest.raises(ProtocolError, match="clustering failed"):
        run_memory_session(data, params, out=tmp_path / "d.npy", cluster=cluster)
    assert _leftovers(tmp_path) == []


def test_out_must_be_new(tmp_path):
    (tmp_path / "d.npy").write_bytes(b"precious")
    data = random_data([2, 2, 2], 2, seed=0)
    with pytest.raises(ParameterError, match="exists already"):
        run_memory_session(data, SessionParameters(dim=2, bound=1.0, scale_bits=4),
                           out=tmp_path / "d.npy")
    assert (tmp_path / "d.npy").read_bytes() == b"precious"


# -- the public API writes D once, where asked ---------------------------------------
@pytest.mark.slow
def test_library_call_with_out_clusters_like_the_in_memory_result(tmp_path):
    import omnifc
    from omnifc._clustering._streamed import knn_graph

    rng = np.random.default_rng(3)
    centers = rng.normal(0, 4, (3, 4))
    x = np.vstack([c + rng.normal(0, 0.5, (30, 4)) for c in centers])
    x = x[rng.permutation(len(x))]
    parties = [x[:40], x[40:65], x[65:]]
    kwargs = dict(bound=16.0, scale_bits=6)
    dense = omnifc.secure_distance_matrix(parties, **kwargs)
    disk = omnifc.secure_distance_matrix(parties, out=tmp_path / "d.npy",
                                         memory_budget=0, **kwargs)
    assert isinstance(dense.distances, np.ndarray) and dense.store is None
    assert disk.store.on_disk and disk.store.path == tmp_path / "d.npy"
    assert disk.integer_distances is disk.store.integer       # one copy, no after-the-fact
    exact = plaintext_sq_distances(x, 16.0, 6)
    assert np.array_equal(np.asarray(disk.integer_distances), exact)
    assert np.array_equal(dense.integer_distances, exact)
    reopened = omnifc.DistanceStore.open(tmp_path / "d.npy", memory_budget=0)
    # k-means via MDS: the streamed solver on disk gives the dense labels
    a = omnifc.cluster(dense.distances, "kmeans", 3, random_state=0, n_init=4)
    b = omnifc.cluster(disk, "kmeans", 3, random_state=0, n_init=4, out_of_core=True)
    c = omnifc.cluster(reopened, "kmeans", 3, random_state=0, n_init=4, out_of_core=True)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    # kNN graph: the same neighbours as a dense argsort of the exact integers
    idx, sq = knn_graph(disk.distances, 5)
    order = np.argsort(exact + np.diag(np.full(len(x), np.iinfo(np.int64).max // 2)),
                       axis=1, kind="stable")[:, :5]
    assert np.array_equal(np.sort(sq, axis=1),
                          np.sort(np.take_along_axis(exact, order, 1), axis=1) / 4.0 ** 6)
    idx_dense, sq_dense = knn_graph(reopened.distances, 5)
    assert np.array_equal(idx, idx_dense) and np.array_equal(sq, sq_dense)


@pytest.mark.network
def test_grpc_session_streams_into_the_file(tmp_path):
    from protocols import run_local_grpc_session

    # the session config fixes the default chunk (1 MiB): 800 rows still give several tiles
    data = random_data([220, 200, 210, 170], 4, seed=11)
    params = SessionParameters(dim=4, bound=1.0, scale_bits=24)
    out = tmp_path / "d.npy"
    outcome = run_local_grpc_session(data, params, out=out, deadline=60.0)
    assert outcome.store.on_disk and outcome.integrity.startswith("checked")
    assert outcome.stats["evaluation"][1] > 4 * 2 * 4 * 800 * 801 // 2  # every tile came
    assert np.array_equal(np.load(out), plaintext_sq_distances(all_rows(data), 1.0, 24))


# -- bounded coordinator memory -----------------------------------------------------
CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from protocols import SessionParameters, run_memory_session

    path, n = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    sizes = [n // 3, n // 3, n - 2 * (n // 3)]
    data = {f"p{i}": rng.uniform(-1, 1, (s, 3)) for i, s in enumerate(sizes)}
    params = SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=1 << 18)
    small = {k: v[:20] for k, v in data.items()}
    run_memory_session(small, params, memory_budget=0)   # warm up numba and threads

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    sums_bytes = 8 * n * n          # ONE int64 n x n array of the old coordinator
    result_bytes = 4 * n * n        # the int32 result, memory-mapped (counts in RLIMIT_AS)
    limit = vm_bytes() + result_bytes + sums_bytes // 2
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    outcome, _ = run_memory_session(data, params, out=path)
    store = outcome.store
    assert store.on_disk and store.integer.dtype == np.int32
    q = np.floor(np.clip(np.concatenate(list(data.values())), -1, 1) * 256 + 0.5)
    q = q.astype(np.int64)
    rows = rng.choice(n, 40, replace=False)
    truth = ((q[rows][:, None, :] - q[None, :, :]) ** 2).sum(-1)
    assert np.array_equal(np.asarray(store.integer[rows]), truth)
    print("streamed ok", flush=True)
    try:
        old = np.ones((n, n), dtype=np.int64)
    except MemoryError:
        print("n x n int64 refused", flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_coordinator_memory_stays_bounded_under_an_address_space_limit(tmp_path):
    n = 10000
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
                   [str(Path(__file__).resolve().parents[2]),
                    str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "d.npy"), str(n)],
                         capture_output=True, text=True, timeout=200, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("\n")[:2] == ["streamed ok", "n x n int64 refused"], run.stdout

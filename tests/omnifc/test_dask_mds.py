"""The streamed classical MDS with its products on a Dask distributed cluster (issue 22).

A ``dask.distributed.LocalCluster`` (two workers of one thread each, in this process, or
two worker processes) reads the result, a Zarr store or a ``.npy`` file, and computes the
products D @ W of the randomized eigensolver. References: the in-process streamed MDS on
the same store (same random block), and the exact eigenvalues of B = -1/2 J D J from
numpy on the plaintext rows.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import omnifc  # noqa: E402
from finite_field import ParameterError  # noqa: E402
from omnifc import DistanceStore, plaintext_distance_store  # noqa: E402
from omnifc._clustering._streamed import streamed_mds  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """Two workers, one thread each, in this process; always closed."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")  # in-process comms
    client = distributed.Client(cluster, timeout=30)
    try:
        yield client
    finally:
        client.close(timeout=30)
        cluster.close(timeout=30)


def _rows(n=150, seed=0):
    """Integer rows in a 3-dimensional subspace of R^6 (integer coordinates times an
    integer basis: exactly rank 3), spreads about 40, 20, 8 (well separated eigenvalues
    of B), in three planted clusters."""
    rng = np.random.default_rng(seed)
    basis = np.array([[1, 1, 0, 0, 0, 0], [0, 0, 1, -1, 0, 0], [0, 0, 0, 0, 1, 1]])
    centres = np.array([[60.0, 0, 0], [-60.0, 30, 0], [0, -40, 12]])
    labels = np.arange(n) % 3
    z = np.rint(centres[labels] + rng.normal(size=(n, 3)) * [40, 20, 8] / 4)
    return z.astype(np.int64) @ basis, labels


def _stores(tmp_path, x):
    zarr = plaintext_distance_store(x, scale_bits=1, out=tmp_path / "d.zarr", tile_bytes=8192)
    npy = plaintext_distance_store(x, scale_bits=1, out=tmp_path / "d.npy", tile_bytes=8192)
    return zarr, npy


def _exact_b(x, scale_bits):
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1) / 4.0 ** scale_bits
    n = len(x)
    j = np.eye(n) - 1.0 / n
    return d, -0.5 * j @ d @ j


def _tolerance(d, values):
    """Floating-point tolerance of a coordinate, from the data: the products differ by at
    most about n eps ||D||_F (summation order); an eigenvector moves by that over the
    smallest gap between the kept eigenvalues (and to zero), times sqrt(lambda_1)."""
    n = d.shape[0]
    gaps = np.diff(np.concatenate([np.sort(values), [0.0]])[::-1])
    gap = min(np.min(np.abs(np.diff(np.sort(values)))), np.min(values))
    assert gap > 0 and gaps.size
    return 100 * n * np.finfo(np.float64).eps * np.linalg.norm(d) / gap * np.sqrt(values.max())


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["zarr", "npy", "memory"])
def test_a_local_cluster_computes_the_in_process_mds(kind, client, tmp_path):
    x, _ = _rows()
    zarr, npy = _stores(tmp_path, x)
    store = {"zarr": zarr, "npy": npy,
             "memory": plaintext_distance_store(x, scale_bits=1, tile_bytes=8192)}[kind]
    assert store.format == kind
    local, local_values, local_explained = streamed_mds(store.distances, 3,
                                                        np.random.default_rng(7))
    with distributed.get_task_stream(client) as tasks:
        remote, values, explained = streamed_mds(store.distances, 3,
                                                 np.random.default_rng(7), dask=client)
    # the products ran on the cluster's workers, several row blocks each time
    assert len({t["worker"] for t in tasks.data}) >= 1 and len(tasks.data) >= 12
    d, b = _exact_b(x, 1)
    exact = np.sort(np.linalg.eigvalsh(b))[::-1][:3]
    tol = _tolerance(d, exact)
    assert remote.shape == local.shape == (len(x), 3)
    for c in range(3):  # up to the sign of each component
        sign = np.sign(remote[:, c] @ local[:, c])
        assert np.max(np.abs(remote[:, c] - sign * local[:, c])) <= tol
    rel = 1e3 * len(x) * np.finfo(np.float64).eps
    assert np.allclose(values, local_values, rtol=rel, atol=0)
    assert np.allclose(values, exact, rtol=rel, atol=0)  # and both are the exact ones
    assert abs(explained - local_explained) <= rel
    assert abs(explained - exact.sum() / np.trace(b)) <= rel  # (rounded rows: not quite 1)
    # isometric: the embedding's squared distances are D
    emb = ((remote[:, None, :] - remote[None, :, :]) ** 2).sum(-1)
    assert np.max(np.abs(emb - d)) <= tol * np.sqrt(exact.max()) * 4


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kmeans_on_the_cluster_gives_the_in_process_labels(client, tmp_path):
    x, planted = _rows(seed=3)
    zarr, npy = _stores(tmp_path, x)
    local = omnifc.cluster(npy, "kmeans", 3, random_state=0, n_init=3, out_of_core=True,
                           n_components=3)
    on_dask = omnifc.cluster(DistanceStore.open(tmp_path / "d.zarr"), "kmeans", 3,
                             random_state=0, n_init=3, n_components=3, dask=client)
    assert np.array_equal(local, on_dask)
    assert omnifc.adjusted_rand(planted, on_dask) == 1.0
    fcm = omnifc.cluster(zarr, "fcm", 3, random_state=0, n_components=3, dask=client)
    assert omnifc.adjusted_rand(planted, fcm) == 1.0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_worker_processes_read_the_npy_file_themselves(tmp_path):
    x, _ = _rows(n=90, seed=5)
    _, npy = _stores(tmp_path, x)
    local, _, _ = streamed_mds(npy.distances, 3, np.random.default_rng(1))
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", host="127.0.0.1")
    try:
        with distributed.Client(cluster, timeout=60) as client:
            remote, values, _ = streamed_mds(npy.distances, 3, np.random.default_rng(1),
                                             dask=client)
    finally:
        cluster.close(timeout=60)
    d, b = _exact_b(x, 1)
    tol = _tolerance(d, np.sort(np.linalg.eigvalsh(b))[::-1][:3])
    for c in range(3):
        sign = np.sign(remote[:, c] @ local[:, c])
        assert np.max(np.abs(remote[:, c] - sign * local[:, c])) <= tol


def test_dask_option_errors(tmp_path, monkeypatch):
    x, _ = _rows(n=12)
    store = plaintext_distance_store(x, scale_bits=1)
    with pytest.raises(ParameterError, match="does not use it"):
        omnifc.cluster(store, "dbscan", dask="synchronous")
    with pytest.raises(ParameterError, match="out-of-core result"):
        omnifc.cluster(np.asarray(store.distances), "kmeans", 2, dask="synchronous")
    with pytest.raises(ParameterError, match="Client, a scheduler name"):
        omnifc.cluster(store, "kmeans", 2, dask=3)
    import sys

    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.array", None)
    with pytest.raises(ParameterError, match=r"omnifc\[dask\]"):
        omnifc.cluster(store, "kmeans", 2, dask="synchronous")

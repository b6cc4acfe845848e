"""Memory stays bounded: streamed passes over an on-disk D run under an address-space limit
that a single dense n x n float64 copy would exceed.

The child process builds D on disk, reopens it (a read-only memory map, which counts
towards RLIMIT_AS at its file size, int32), measures its own address space, and sets
RLIMIT_AS to that plus a headroom smaller than one n x n float64 array. It then runs the
streamed MDS (k-means), the k-NN pass and the radius pass, and finally checks that the
limit bites: materializing the dense float matrix must raise MemoryError.
Estimators are exercised through the public ``DistanceKMeans`` too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import omnifc
    from omnifc import DistanceStore, plaintext_distance_store
    from omnifc._clustering._streamed import knn_graph, radius_graph, streamed_mds

    path, n = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    centers = rng.integers(0, 4000, size=(3, 3))
    rows = centers[rng.integers(0, 3, n)] + rng.integers(-40, 41, size=(n, 3))
    plaintext_distance_store(rows, scale_bits=4, out=path)
    store = DistanceStore.open(path, memory_budget=0, tile_bytes=4 * 2**20)
    view = store.distances
    # warm up numba, BLAS and scikit-learn before measuring
    omnifc.cluster(plaintext_distance_store(rows[:50], scale_bits=4, memory_budget=0),
                   "kmeans", 3, random_state=0, out_of_core=True, n_init=1, n_components=3)

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    dense_bytes = 8 * n * n
    headroom = dense_bytes // 2
    limit = vm_bytes() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    labels = omnifc.cluster(store, "kmeans", 3, random_state=0, n_init=2, n_components=3)
    model = omnifc.DistanceKMeans(3, n_init=1, random_state=0).fit(view)
    idx, sq = knn_graph(view, 5)
    graph = radius_graph(view, 2.0)
    assert labels.shape == (n,) and len(set(labels.tolist())) == 3
    assert model.labels_.shape == (n,)
    assert idx.shape == (n, 5) and graph.shape == (n, n)
    print("streamed ok", flush=True)
    try:
        dense = np.asarray(view)
    except MemoryError:
        print("dense copy refused", flush=True)
    else:
        print("dense copy fitted", dense.nbytes, flush=True)
""")


@pytest.mark.slow
def test_streamed_passes_fit_where_a_dense_copy_does_not(tmp_path):
    n = 4000  # D on disk: 64 MB int32; one float64 copy: 128 MB > the 64 MB headroom
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "d.npy"), str(n)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "streamed ok" in done.stdout
    assert "dense copy refused" in done.stdout, done.stdout

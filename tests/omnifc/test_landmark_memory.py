"""The landmarks layout's coordinator side stays out of core: under an address-space limit
(RLIMIT_AS, in a child process) smaller than one (n, L) int64 array, the coordinator's
accumulator of D[:, L] finalizes (decoded in place, row block by row block) and landmark
k-means runs on it (the embedding streamed over row blocks), exactly; the old decode, an
(n, L) int64 array plus its float64 values in RAM, cannot even allocate its int64 copy
under the same limit.

n = 250,000 rows, L = 128 landmarks: the residues are 128 MB (memory-mapped before the
limit is set: ``memory_budget=0``); the old decode needed 256 MB of int64 and 256 MB of
float64 on top; the limit leaves 160 MB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import protocols
    import omnifc._clustering._landmarks as landmarks_module
    from protocols._layout_plans import EntryAccumulator, LandmarkDistances

    print("MODULE", protocols.__file__, flush=True)
    n, width, headroom = 250_000, 128, 160 * 2**20
    p = 2**31 - 1
    rng = np.random.default_rng(7)
    centers = np.array([[0, 0, 0], [3000, 0, 0], [0, 3000, 0]])
    planted = rng.integers(0, 3, n)
    x = centers[planted] + rng.integers(-200, 201, size=(n, 3))
    landmarks = np.sort(rng.choice(n, width, replace=False))
    bound = 3 * 4000**2

    def exact(a, b):
        diff = x[a:b, None, :] - x[None, landmarks, :]
        return (diff * diff).sum(-1)

    def session(count, acc):
        # two additive shares per entry, as two uploads of a transparent session
        for a in range(0, count, 20_000):
            b = min(count, a + 20_000)
            value = exact(a, b)
            share = rng.integers(0, p, size=value.shape)
            acc.add_tile(0, a, b, share)
            acc.add_tile(0, a, b, (value - share) % p)

    def run(count):
        acc = EntryAccumulator((count, width), [p], scale_bits=0, distance_bound=bound,
                               memory_budget=0, tile_bytes=4 * 2**20)
        session(count, acc)
        return acc

    # warm up (imports, BLAS and scikit-learn threads) on a few rows, before the limit
    run(3_000).finalize()
    few = np.arange(0, 3_000, 300)
    c = ((x[:3_000, None, :] - x[None, few, :]) ** 2).sum(-1)
    landmarks_module.landmark_kmeans(c, few, 3, random_state=0, n_init=1, n_components=3)
    acc = run(n)  # the residues: memory-mapped (memory_budget=0), 128 MB
    import ctypes, gc
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap back to the system: not headroom
    with open("/proc/self/status") as status:
        vm = next(int(line.split()[1]) * 1024 for line in status
                  if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, vm + headroom))

    integer = acc.finalize()
    result = LandmarkDistances(integer, None, landmarks, 0)
    rows = np.sort(rng.choice(n, 2000, replace=False))
    ok = integer.dtype == np.int32 and integer.shape == (n, width) and all(
        np.array_equal(np.asarray(integer[r]), exact(r, r + 1)[0]) for r in rows)
    print("EXACT" if ok else "WRONG", flush=True)
    details = landmarks_module.landmark_kmeans(result, n_clusters=3, random_state=0,
                                               n_init=1, n_components=3)
    labels = details["labels"]
    same = all(len(set(labels[planted == c].tolist())) == 1 for c in range(3)) and \\
        len(set(labels.tolist())) == 3
    print("CLUSTERED" if same else "MISCLUSTERED", flush=True)
    try:
        copy = np.array(integer, dtype=np.int64)  # the old decode's int64 result
        copy[:] = 1
        print("OLD DECODE FITS", flush=True)
    except MemoryError:
        print("OLD DECODE REFUSED", flush=True)
""")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_the_landmark_decode_and_kmeans_fit_where_the_old_in_ram_decode_cannot():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=280)
    out = child.stdout + child.stderr[-3000:]
    assert f"MODULE {ROOT}" in child.stdout, out
    assert child.returncode == 0, out
    assert "EXACT" in child.stdout, out
    assert "CLUSTERED" in child.stdout, out
    assert "OLD DECODE REFUSED" in child.stdout, out

"""Out-of-core scale benchmark: D built tile-wise on disk, then k-means via streamed MDS.

MNIST-shaped synthetic data (d = 784, values in [0, 1], ten noisy prototypes), quantized
with q = 8 and R = 1 (the parameters of the OmniFC paper's MNIST run; l = 8, t = 1,
m = 17 fix the plan's prime). For each n:

1. **build**: the exact integer D of the quantized rows, computed tile by tile modulo the
   plan's prime with the exact kernels and accumulated into a memory-mapped ``.npy``
   (:func:`omnifc.plaintext_distance_store` through :class:`omnifc.DistanceAccumulator`),
   then spot-checked against exact int64 arithmetic on sampled blocks. Baseline: a
   float64 GEMM of the same shape (the row-block products X[a:b] X[a:]^T), measured in
   the same run.
2. **cluster**: ``omnifc.cluster(store, "kmeans", 10)`` out of core: canonical row order
   (one sort per row; also timed alone, in parentheses), classical MDS by a randomized
   eigensolver on streamed passes (``--components`` = 64 dimensions), k-means++ seeding on
   rows of D (``--n-init`` = 3), Lloyd. Baseline: one streamed pass over the file (a
   memory copy of the same bytes, tile by tile).

Every phase runs in a fresh process, which reports its seconds, its peak resident set
(VmHWM, which counts the file pages it mapped) and its peak anonymous memory (RssAnon
sampled every 20 ms: what the process itself allocated). Medians of ``--repeats`` runs
(default 3 up to n = 10,000, else 1). The paper's 70,000-row MNIST run took 4,352 s
(whole protocol, 17 parties); this benchmark measures the coordinator-side result and
clustering only (the streamed protocol is future work, issue 11).

    python benchmarks/bench_scale.py                 # n = 10,000 and 20,000
    python benchmarks/bench_scale.py --full          # also 40,000 and 70,000 (hours, 40 GB disk)
    python benchmarks/bench_scale.py --quick         # n = 1,500: a smoke test
    python benchmarks/bench_scale.py --sizes 5000 --json out.json --dir /var/tmp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

PAPER_SECONDS_70K = 4352
DIM, SCALE_BITS, CLUSTERS = 784, 8, 10


# -- child side ------------------------------------------------------------------------
class _MemoryWatch:
    """Peak RssAnon sampled in a background thread; VmHWM read at the end."""

    def __init__(self, interval=0.02):
        self.interval, self.peak_anon, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _status(field):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self):
        while not self._stop.is_set():
            self.peak_anon = max(self.peak_anon, self._status("RssAnon"))
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_anon = max(self.peak_anon, self._status("RssAnon"))
        self.peak_rss = self._status("VmHWM")


def make_data(n: int, seed: int = 0):
    """Quantized MNIST-shaped rows (ints in [0, 256]) and their prototype labels."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((CLUSTERS, DIM))
    labels = rng.integers(0, CLUSTERS, n)
    rows = np.empty((n, DIM), dtype=np.int64)
    for a in range(0, n, 4096):  # in chunks: no n x 784 float64 temporaries
        b = min(n, a + 4096)
        x = prototypes[labels[a:b]] + 0.3 * rng.standard_normal((b - a, DIM))
        rows[a:b] = np.floor(np.clip(x, 0.0, 1.0) * 2**SCALE_BITS + 0.5)
    return rows, labels


def _plan():
    from finite_field import make_plan
    return make_plan(DIM, bound=1.0, scale_bits=SCALE_BITS, segments=8, noise_segments=1,
                     parties=17, nonnegative=True)


def child_build(n: int, path: str, tile_bytes: int) -> dict:
    from omnifc import plaintext_distance_store

    rows, _ = make_data(n)
    plan = _plan()
    with _MemoryWatch() as watch:
        start = time.perf_counter()
        store = plaintext_distance_store(rows, scale_bits=SCALE_BITS,
                                         distance_bound=plan.distance_bound,
                                         primes=plan.primes, out=path, memory_budget=0,
                                         tile_bytes=tile_bytes)
        seconds = time.perf_counter() - start
    # exactness: sampled blocks against int64 arithmetic on the plaintext rows
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(4):
        r = np.sort(rng.choice(n, size=min(n, 48), replace=False))
        c = np.sort(rng.choice(n, size=min(n, 48), replace=False))
        diff = rows[r][:, None, :] - rows[c][None, :, :]
        exact = (diff * diff).sum(-1)
        if not np.array_equal(np.asarray(store.integer[np.ix_(r, c)]), exact):
            raise SystemExit("spot check FAILED: D differs from the plaintext distances")
        checked += exact.size
    st = os.stat(path)
    return {"seconds": seconds, "peak_rss": watch.peak_rss, "peak_anon": watch.peak_anon,
            "file_bytes": st.st_size, "disk_bytes": st.st_blocks * 512,
            "dtype": str(store.integer.dtype), "primes": list(plan.primes),
            "checked_entries": checked}


def child_gemm(n: int, tile_bytes: int) -> dict:
    rows, _ = make_data(n)
    x = rows.astype(np.float64)
    step = max(1, tile_bytes // (n * 24))
    with _MemoryWatch() as watch:
        start = time.perf_counter()
        for a in range(0, n, step):
            block = x[a:a + step] @ x[a:].T
            del block
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_rss": watch.peak_rss, "peak_anon": watch.peak_anon}


def child_read(path: str, tile_bytes: int) -> dict:
    from omnifc import DistanceStore

    store = DistanceStore.open(path, memory_budget=0, tile_bytes=tile_bytes)
    rows = store.rows_per_tile(store.integer.dtype.itemsize)
    buffer = np.empty((rows, store.n), dtype=store.integer.dtype)
    with _MemoryWatch() as watch:
        start = time.perf_counter()
        for a in range(0, store.n, rows):
            b = min(store.n, a + rows)
            np.copyto(buffer[: b - a], store.integer[a:b])
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_rss": watch.peak_rss, "peak_anon": watch.peak_anon}


def child_cluster(n: int, path: str, tile_bytes: int, n_components: int, n_init: int) -> dict:
    from sklearn.metrics import adjusted_rand_score

    import omnifc
    from omnifc import DistanceStore
    from omnifc._clustering import fit_method

    _, labels = make_data(n)
    store = DistanceStore.open(path, memory_budget=0, tile_bytes=tile_bytes)
    with _MemoryWatch() as watch:
        start = time.perf_counter()
        details = fit_method(store, "kmeans", CLUSTERS, random_state=0, out_of_core=True,
                             n_components=n_components, n_init=n_init)
        seconds = time.perf_counter() - start
        start = time.perf_counter()  # the canonical row order alone (part of the above)
        order = omnifc.canonical_order(store)
        order_seconds = time.perf_counter() - start
    assert np.array_equal(details["order"], order)
    return {"seconds": seconds, "order_seconds": order_seconds, "peak_rss": watch.peak_rss,
            "peak_anon": watch.peak_anon, "explained": details["explained"],
            "components": int(details["embedding"].shape[1]),
            "ari": float(adjusted_rand_score(labels, details["labels"]))}


def child_main(argv) -> int:
    kind, n, path, tile_bytes = argv[0], int(argv[1]), argv[2], int(argv[3])
    if kind == "build":
        out = child_build(n, path, tile_bytes)
    elif kind == "gemm":
        out = child_gemm(n, tile_bytes)
    elif kind == "read":
        out = child_read(path, tile_bytes)
    else:
        out = child_cluster(n, path, tile_bytes, int(argv[4]), int(argv[5]))
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# -- parent side -----------------------------------------------------------------------
def _run_child(*args, timeout: float) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run([sys.executable, __file__, "--child", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child {args[0]} failed:\n{done.stdout}\n{done.stderr[-4000:]}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _median(runs, key):
    return float(statistics.median(r[key] for r in runs))


def _gb(x):
    return f"{x / 1e9:.2f} GB"


def bench_size(n, args, workdir: Path) -> dict:
    path = workdir / f"d{n}.npy"
    repeats = args.repeats if args.repeats else (3 if n <= 10000 else 1)
    timeout = args.timeout
    builds, gemms, reads, clusters = [], [], [], []
    for i in range(repeats):  # subject and baseline alternate
        for p in (path, path.with_name(path.name + ".json")):
            if p.exists():
                p.unlink()
        builds.append(_run_child("build", n, path, args.tile_bytes, timeout=timeout))
        gemms.append(_run_child("gemm", n, "-", args.tile_bytes, timeout=timeout))
    for i in range(repeats):
        reads.append(_run_child("read", n, path, args.tile_bytes, timeout=timeout))
        clusters.append(_run_child("cluster", n, path, args.tile_bytes, args.components,
                                   args.n_init, timeout=timeout))
    last = builds[-1]
    result = {
        "n": n, "repeats": repeats, "dtype": last["dtype"], "primes": last["primes"],
        "file_bytes": last["file_bytes"], "disk_bytes": last["disk_bytes"],
        "checked_entries": last["checked_entries"],
        "build_seconds": _median(builds, "seconds"),
        "build_peak_rss": max(b["peak_rss"] for b in builds),
        "build_peak_anon": max(b["peak_anon"] for b in builds),
        "gemm_seconds": _median(gemms, "seconds"),
        "read_seconds": _median(reads, "seconds"),
        "order_seconds": _median(clusters, "order_seconds"),
        "cluster_seconds": _median(clusters, "seconds"),
        "cluster_peak_rss": max(c["peak_rss"] for c in clusters),
        "cluster_peak_anon": max(c["peak_anon"] for c in clusters),
        "explained": clusters[-1]["explained"], "components": clusters[-1]["components"],
        "n_init": args.n_init,
        "ari": clusters[-1]["ari"],
    }
    for p in (path, path.with_name(path.name + ".json")):
        if p.exists():
            p.unlink()
    return result


def print_results(results) -> None:
    from _common import print_grid  # benchmarks/ is on sys.path (see main)

    header = ["n", "D on disk", "build", "vs GEMM", "build peak anon/RSS", "k-means (order)",
              "vs 1 pass", "cluster peak anon/RSS", "MDS explained", "ARI"]
    lines = []
    for r in results:
        lines.append([
            f"{r['n']:,}", f"{_gb(r['file_bytes'])} {r['dtype']}",
            f"{r['build_seconds']:.1f} s", f"{r['build_seconds'] / r['gemm_seconds']:.2f}x",
            f"{_gb(r['build_peak_anon'])} / {_gb(r['build_peak_rss'])}",
            f"{r['cluster_seconds']:.1f} s ({r['order_seconds']:.1f} s)",
            f"{r['cluster_seconds'] / r['read_seconds']:.1f}x",
            f"{_gb(r['cluster_peak_anon'])} / {_gb(r['cluster_peak_rss'])}",
            f"{r['explained']:.3f} ({r['components']} dims)", f"{r['ari']:.3f}"])
    print_grid(header, lines)
    for r in results:
        print(f"  n = {r['n']:,}: GEMM baseline {r['gemm_seconds']:.2f} s, one streamed pass "
              f"{r['read_seconds']:.2f} s; D exact on {r['checked_entries']:,} sampled "
              f"entries; medians of {r['repeats']} run(s)")
    print(f"  the OmniFC paper, n = 70,000 MNIST, whole protocol with 17 parties: "
          f"{PAPER_SECONDS_70K:,} s")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--full", action="store_true", help="also n = 40,000 and 70,000")
    parser.add_argument("--quick", action="store_true", help="n = 1,500 only (smoke test)")
    parser.add_argument("--repeats", type=int, default=0,
                        help="runs per phase (default 3 up to n = 10,000, else 1)")
    parser.add_argument("--tile-bytes", type=int, default=64 * 2**20)
    parser.add_argument("--components", type=int, default=64, help="MDS dimensions")
    parser.add_argument("--n-init", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the .npy files go (temporary)")
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.sizes:
        sizes = args.sizes
    elif args.quick:
        sizes = [1500]
    else:
        sizes = [10000, 20000] + ([40000, 70000] if args.full else [])

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import environment, print_environment

    info = environment()
    print_environment(info)
    workdir = Path(tempfile.mkdtemp(prefix="omnifc-bench-scale-", dir=args.dir))
    results = []
    try:
        for n in sizes:
            print(f"n = {n:,} ...", flush=True)
            results.append(bench_size(n, args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print_results(results)
    print(f"load average after: {[round(x, 2) for x in os.getloadavg()]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": info, "results": results},
                                              indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

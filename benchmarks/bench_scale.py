"""Scale benchmark: the whole session streamed over gRPC into D on disk, then k-means.

MNIST-shaped synthetic data (d = 784, values in [0, 1], ten noisy prototypes), quantized
with q = 8 and R = 1: the OmniFC paper's MNIST setting, l = 8, t = 1, m = 17 parties
(``--parties``, ``--segments``). For each n:

1. **protocol**: the whole session over mutual-TLS gRPC on loopback. This process is the
   coordinator; every party is its own process holding n / m rows. Each party evaluates,
   masks (``--mask-degree``; 0 = every pair, the default) and uploads tile by tile; the
   coordinator accumulates every tile as it arrives into one preallocated integer D,
   memory-mapped ``.npy`` on disk (``memory_budget=0``), decoded in row blocks in place.
   D is then spot-checked against exact int64 arithmetic on sampled blocks. Reported: the
   session's seconds and its evaluation phase; per party (median over parties) the
   evaluation seconds, and as the baseline measured in the same run the party's own exact
   mod-p distance kernel alone on the same shares, and the bytes it uploaded; the peak
   anonymous memory (RssAnon, sampled) and peak RSS (VmHWM, which counts mapped file
   pages) of every party process and of the coordinator; D's size on disk.
2. **cluster**: ``omnifc.cluster(store, "kmeans", 10)`` out of core on that D: canonical
   row order (one sort per row; also timed alone, in parentheses), classical MDS by a
   randomized eigensolver on streamed passes (``--components`` = 64 dimensions),
   k-means++ seeding on rows of D (``--n-init`` = 3), Lloyd. Baseline: one streamed pass
   over the file (a memory copy of the same bytes, tile by tile).
3. with ``--plaintext-build``: D of the plaintext rows built tile by tile without any
   protocol (:func:`omnifc.plaintext_distance_store`) against a float64 GEMM of the same
   shape (X[a:b] X[a:]^T row blocks), alternating.

With ``--layout landmarks`` (``--landmarks L``, default 1,000) one ``landmarks`` session
computes D[:, L] and the coordinator clusters it by landmark k-means (streamed landmark MDS,
``--components`` directions, Lloyd) inside the session; with ``--layout pairs`` a
``landmarks`` session is followed by the candidate pairs of the landmark embedding
(``--candidates`` per row) in ``pairs`` sessions of at most ``--max-pairs`` each, and the
exact ``--k``-NN graph. Reported per session and phase: seconds, bytes, the peak anonymous
memory of the coordinator and of the largest party process, and the process CPU seconds;
D[:, L] and the pairs are spot-checked exact; ARI against the planted labels and against
k-means on the exact D (Lloyd on the plaintext rows: classical MDS of a Euclidean D is the
centred rows), recall against the exact k-NN graph of the plaintext rows (docs/scale.md,
"Layouts at scale"). The rows are generated once into a memory-mapped file (data generation
is not session time), so the coordinator process holds no n x d copy.

Every phase runs in a fresh process. Medians of ``--repeats`` runs (default 3 up to
n = 10,000, else 1). The paper's 70,000-row MNIST run took 4,352 s (whole protocol, 17
parties), printed beside.

    python benchmarks/bench_scale.py                 # n = 10,000 and 20,000, m = 17
    python benchmarks/bench_scale.py --full --mask-degree 2   # also 40,000 and 70,000
    python benchmarks/bench_scale.py --quick         # n = 1,500, m = 3, l = 1: a smoke test
    python benchmarks/bench_scale.py --sizes 5000 --json out.json --dir /var/tmp
    python benchmarks/bench_scale.py --layout landmarks --sizes 1000000 --mask-degree 2 \
        --no-reference                               # the issue-22 goal: D[:, L], L = 1,000
    python benchmarks/bench_scale.py --layout pairs --sizes 70000 --mask-degree 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _scale_data import (CLUSTERS, DIM, MALLOC_ENV, SCALE_BITS, _gb, _median, _remove,
                         _run_child, _run_parties, make_data)
from _scale_layouts import (bench_layout, child_landmarks, child_pairs, child_reference,
                            print_layout_results)
from _scale_watch import _MemoryWatch, _ProcessWatch

PAPER_SECONDS_70K = 4352




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
    checked = _spot_check(n, store, rows)
    st = os.stat(path)
    return {"seconds": seconds, "peak_rss": watch.peak_rss, "peak_anon": watch.peak_anon,
            "file_bytes": st.st_size, "disk_bytes": st.st_blocks * 512,
            "dtype": str(store.integer.dtype), "primes": list(plan.primes),
            "checked_entries": checked}


def child_protocol(n: int, path: str, parties: int, segments: int, mask_degree: int,
                   deadline: float) -> dict:
    """The whole session over mutual-TLS gRPC: this process is the coordinator, every
    party its own process; D is accumulated tile by tile into the .npy at ``path``."""
    from protocols import SessionParameters
    from protocols._config import Deadlines
    from protocols._grpc_local import LocalSession

    rows, _ = make_data(n)
    bounds = np.linspace(0, n, parties + 1).astype(int)
    party_data = {f"party-{j:02d}": rows[bounds[j]:bounds[j + 1]] / 2.0**SCALE_BITS
                  for j in range(parties)}  # exact: quantizing gives the rows back
    del rows
    parameters = SessionParameters(dim=DIM, bound=1.0, scale_bits=SCALE_BITS, segments=segments,
                                   noise_segments=1, nonnegative=True, mode="masked",
                                   mask_degree=mask_degree,
                                   max_rows_per_party=n, max_rows_total=n)
    deadlines = Deadlines(join=600.0, shares=deadline, evaluation=deadline, result=120.0)
    os.environ["NUMBA_NUM_THREADS"] = "1"  # 17 party processes share 2 cores
    phases = {}
    with LocalSession(party_data, parameters, deadline=deadlines) as local:
        del party_data
        with _MemoryWatch() as own, _ProcessWatch() as others:
            server = local.server(out=path, memory_budget=0).start()

            def on_phase(phase, elapsed):
                phases[phase] = elapsed

            outcome, seconds, stats = _run_parties(local, server, others.add, on_phase)
    store = outcome.store
    checked = _spot_check(n, store)
    st = os.stat(path)
    evaluation = phases.get("decode", seconds) - phases.get("evaluation", 0.0)
    return {"seconds": seconds, "phases": phases, "evaluation_seconds": evaluation,
            "coordinator_peak_anon": own.peak_anon, "coordinator_peak_rss": own.peak_rss,
            "party_peak_anon": max(others.peak_anon.values()),
            "party_peak_rss": max(others.peak_rss.values()),
            "party_cpu_seconds": statistics.median(others.cpu.values()),
            "party_stats": stats, "file_bytes": st.st_size,
            "dtype": str(store.integer.dtype), "checked_entries": checked,
            "parties": parties, "segments": segments, "mask_degree": mask_degree,
            "bytes_uploaded": outcome.stats.get("evaluation", (0, 0))[1]}


def _spot_check(n, store, rows=None) -> int:
    """D against int64 arithmetic on the plaintext rows, on sampled blocks."""
    rows = make_data(n)[0] if rows is None else rows
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
    return checked


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
    elif kind == "protocol":
        out = child_protocol(n, path, int(argv[4]), int(argv[5]), int(argv[6]), float(argv[7]))
    elif kind == "gemm":
        out = child_gemm(n, tile_bytes)
    elif kind == "read":
        out = child_read(path, tile_bytes)
    elif kind == "landmarks":
        out = child_landmarks(n, *map(int, argv[4:8]), float(argv[8]), int(argv[9]),
                              int(argv[10]))
    elif kind == "pairs":
        out = child_pairs(n, *map(int, argv[4:8]), float(argv[8]), *map(int, argv[9:13]))
    elif kind == "reference":
        out = child_reference(n, int(argv[4]))
    else:
        out = child_cluster(n, path, tile_bytes, int(argv[4]), int(argv[5]))
    print("RESULT " + json.dumps(out), flush=True)
    return 0




def _party_figures(runs) -> dict:
    """Medians over runs of the median party: evaluation, its kernel alone, bytes sent."""
    out = {}
    for key in ("evaluation_seconds", "kernel_seconds", "evaluation_cpu_seconds",
                "kernel_cpu_seconds", "bytes_uploaded"):
        per_run = [statistics.median(s[key] for s in r["party_stats"].values()) for r in runs]
        out["party_" + key] = float(statistics.median(per_run))
    return out


def bench_size(n, args, workdir: Path) -> dict:
    path, plain = workdir / f"d{n}.npy", workdir / f"plain{n}.npy"
    repeats = args.repeats if args.repeats else (3 if n <= 10000 else 1)
    timeout = args.timeout
    sessions, builds, gemms, reads, clusters = [], [], [], [], []
    for i in range(repeats):
        _remove(path)
        sessions.append(_run_child("protocol", n, path, args.tile_bytes, args.parties,
                                   args.segments, args.mask_degree, args.deadline,
                                   timeout=timeout))
        if args.plaintext_build:  # subject and baseline alternate
            _remove(plain)
            builds.append(_run_child("build", n, plain, args.tile_bytes, timeout=timeout))
            gemms.append(_run_child("gemm", n, "-", args.tile_bytes, timeout=timeout))
            _remove(plain)
    for i in range(0 if args.no_cluster else repeats):
        reads.append(_run_child("read", n, path, args.tile_bytes, timeout=timeout))
        clusters.append(_run_child("cluster", n, path, args.tile_bytes, args.components,
                                   args.n_init, timeout=timeout))
    last = sessions[-1]
    result = {
        "n": n, "repeats": repeats, "parties": last["parties"], "segments": last["segments"],
        "mask_degree": last["mask_degree"], "dtype": last["dtype"],
        "file_bytes": last["file_bytes"], "checked_entries": last["checked_entries"],
        "session_seconds": _median(sessions, "seconds"),
        "evaluation_seconds": _median(sessions, "evaluation_seconds"),
        "coordinator_peak_anon": max(r["coordinator_peak_anon"] for r in sessions),
        "coordinator_peak_rss": max(r["coordinator_peak_rss"] for r in sessions),
        "party_peak_anon": max(r["party_peak_anon"] for r in sessions),
        "party_peak_rss": max(r["party_peak_rss"] for r in sessions),
        "party_cpu_seconds": _median(sessions, "party_cpu_seconds"),
        "bytes_uploaded": last["bytes_uploaded"],
        **_party_figures(sessions),
    }
    if clusters:
        result |= {
            "read_seconds": _median(reads, "seconds"),
            "order_seconds": _median(clusters, "order_seconds"),
            "cluster_seconds": _median(clusters, "seconds"),
            "cluster_peak_rss": max(c["peak_rss"] for c in clusters),
            "cluster_peak_anon": max(c["peak_anon"] for c in clusters),
            "explained": clusters[-1]["explained"],
            "components": clusters[-1]["components"], "n_init": args.n_init,
            "ari": clusters[-1]["ari"]}
    if builds:
        result |= {"build_seconds": _median(builds, "seconds"),
                   "build_peak_anon": max(b["peak_anon"] for b in builds),
                   "build_peak_rss": max(b["peak_rss"] for b in builds),
                   "gemm_seconds": _median(gemms, "seconds")}
    _remove(path)
    return result


def print_results(results) -> None:
    from _common import print_grid, wrapped  # benchmarks/ is on sys.path (see main)

    print("The whole session (gRPC, mutual TLS, every party its own process; D accumulated "
          "on disk):")
    print(wrapped("x kernel = a party's evaluation CPU / the CPU of its own distance kernel "
                  "in it (masks, packing and sending on top); lower is better, 1.00x = free"))
    print_grid(["n", "m (l, k)", "session", "evaluation", "party eval CPU", "x kernel",
                "D on disk"], [[
        f"{r['n']:,}", f"{r['parties']} ({r['segments']}, {r['mask_degree'] or 'all'})",
        f"{r['session_seconds']:.1f} s", f"{r['evaluation_seconds']:.1f} s",
        f"{r['party_evaluation_cpu_seconds']:.1f} s",
        f"{r['party_evaluation_cpu_seconds'] / r['party_kernel_cpu_seconds']:.2f}x",
        f"{_gb(r['file_bytes'])} {r['dtype']}"] for r in results])
    print()
    print("Memory and traffic of the same sessions (peaks: anonymous memory / resident set):")
    print_grid(["n", "sent / party", "party peak", "coordinator peak"], [[
        f"{r['n']:,}", _gb(r["party_bytes_uploaded"]),
        f"{_gb(r['party_peak_anon'])} / {_gb(r['party_peak_rss'])}",
        f"{_gb(r['coordinator_peak_anon'])} / {_gb(r['coordinator_peak_rss'])}"]
        for r in results])
    clustered = [r for r in results if "cluster_seconds" in r]
    if clustered:
        print()
        print("k-means via MDS on the result on disk:")
        print(wrapped("x 1 pass = clustering time / one read pass over D on disk; lower is "
                      "better"))
        header = ["n", "k-means (order)", "x 1 pass", "peak anon/RSS", "MDS explained",
                  "ARI"]
        print_grid(header, [[
            f"{r['n']:,}", f"{r['cluster_seconds']:.1f} s ({r['order_seconds']:.1f} s)",
            f"{r['cluster_seconds'] / r['read_seconds']:.1f}x",
            f"{_gb(r['cluster_peak_anon'])} / {_gb(r['cluster_peak_rss'])}",
            f"{r['explained']:.3f} ({r['components']} dims)", f"{r['ari']:.3f}"]
            for r in clustered])
    built = [r for r in results if "build_seconds" in r]
    if built:
        print()
        print("D of the plaintext rows built tile by tile (no protocol) vs a same-shape GEMM:")
        print("x GEMM = build time / GEMM time (same run); lower is better")
        print_grid(["n", "build", "x GEMM", "peak anon/RSS"], [[
            f"{r['n']:,}", f"{r['build_seconds']:.1f} s",
            f"{r['build_seconds'] / r['gemm_seconds']:.2f}x",
            f"{_gb(r['build_peak_anon'])} / {_gb(r['build_peak_rss'])}"] for r in built])
    for r in results:
        print(wrapped(f"  n = {r['n']:,}: D exact on {r['checked_entries']:,} sampled "
                      f"entries; party process CPU {r['party_cpu_seconds']:.1f} s, "
                      f"evaluation wall {r['party_evaluation_seconds']:.1f} s (kernel "
                      f"{r['party_kernel_seconds']:.1f} s), medians over parties; medians "
                      f"of {r['repeats']} run(s)"))
    print(wrapped(f"  the OmniFC paper, n = 70,000 MNIST, whole protocol with 17 parties: "
                  f"{PAPER_SECONDS_70K:,} s"))


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
    parser.add_argument("--components", type=int, default=None,
                        help="MDS dimensions (default 64; pairs: every positive direction "
                             "of the landmark MDS, 0 says the same)")
    parser.add_argument("--n-init", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the .npy files go (temporary)")
    parser.add_argument("--parties", type=int, default=None,
                        help="m (default 17; 3 with --quick)")
    parser.add_argument("--segments", type=int, default=None,
                        help="l (default 8; 1 with --quick); t = 1")
    parser.add_argument("--mask-degree", type=int, default=0,
                        help="the session's mask_degree (0, the default: every pair; else "
                             "at least t + 1 = 2)")
    parser.add_argument("--deadline", type=float, default=3 * 3600,
                        help="seconds allowed for the share exchange and the evaluation")
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip the k-means phase (at n = 70,000 it takes longer than the "
                             "session)")
    parser.add_argument("--plaintext-build", action="store_true",
                        help="also build D of the plaintext rows tile by tile, vs a GEMM")
    parser.add_argument("--timeout", type=float, default=4 * 3600)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--layout", choices=("full", "landmarks", "pairs"), default="full",
                        help="full (default): every entry, as above; landmarks: D[:, L] and "
                             "landmark k-means; pairs: D[:, L], then the candidate pairs: "
                             "the exact k-NN graph")
    parser.add_argument("--landmarks", type=int, default=None,
                        help="L (default 1000; 50 with --quick)")
    parser.add_argument("--k", type=int, default=10, help="neighbours of the k-NN graph")
    parser.add_argument("--candidates", type=int, default=20,
                        help="candidate neighbours per row from the landmark embedding")
    parser.add_argument("--max-pairs", type=int, default=None,
                        help="public cap on the pairs of one pairs session (default 2^19)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="landmarks/pairs: run the session processes with glibc's "
                             "default malloc settings (by default MALLOC_ARENA_MAX=2 and "
                             "MALLOC_MMAP_THRESHOLD_=262144: large freed blocks go back to "
                             "the system)")
    parser.add_argument("--no-reference", action="store_true",
                        help="landmarks: skip k-means on the exact D (plaintext rows)")
    args = parser.parse_args(argv)
    from protocols._mask_graph import check_distance_mask_degree

    try:  # the session's own rule (t = 1), before any child process starts
        check_distance_mask_degree(args.mask_degree, 1)
    except ValueError as error:
        parser.error(f"--mask-degree: {error}")
    args.parties = args.parties or (3 if args.quick else 17)
    args.segments = args.segments or (1 if args.quick else 8)
    if args.default_malloc:
        MALLOC_ENV[0] = {}
    if args.layout != "full":
        from protocols import DEFAULT_MAX_PAIRS
        args.landmarks = args.landmarks or (50 if args.quick else 1000)
        args.max_pairs = args.max_pairs or DEFAULT_MAX_PAIRS
        if args.components is None:
            args.components = 0 if args.layout == "pairs" else 64
        args.components = min(args.components, args.landmarks)
    elif args.components is None:
        args.components = 64
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
            results.append(bench_layout(n, args) if args.layout != "full"
                           else bench_size(n, args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    (print_results if args.layout == "full" else print_layout_results)(results)
    print(f"load average after: {[round(x, 2) for x in os.getloadavg()]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": info, "results": results},
                                              indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
class _Sampler:
    """Calls ``_sample()`` every ``interval`` seconds in a background thread while entered,
    and once more on exit."""

    def __init__(self, interval):
        self.interval, self._stop = interval, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


class _MemoryWatch(_Sampler):
    """Peak RssAnon sampled in a background thread; VmHWM read at the end."""

    def __init__(self, interval=0.02):
        super().__init__(interval)
        self.peak_anon = self.peak_rss = 0

    @staticmethod
    def _status(field):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def _sample(self):
        self.peak_anon = max(self.peak_anon, self._status("RssAnon"))
        self.peak_rss = self._status("VmHWM")


def _data_blocks(n: int, seed: int = 0):
    """(labels, blocks): the prototype labels and a generator of (a, b, rows[a:b]), the
    quantized MNIST-shaped rows (ints in [0, 256]) made 4,096 rows at a time."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((CLUSTERS, DIM))
    labels = rng.integers(0, CLUSTERS, n)

    def blocks():
        for a in range(0, n, 4096):  # in chunks: no n x 784 float64 temporaries
            b = min(n, a + 4096)
            x = prototypes[labels[a:b]] + 0.3 * rng.standard_normal((b - a, DIM))
            yield a, b, np.floor(np.clip(x, 0.0, 1.0) * 2**SCALE_BITS + 0.5).astype(np.int64)
    return labels, blocks()


def make_data(n: int, seed: int = 0):
    """Quantized MNIST-shaped rows (ints in [0, 256]) and their prototype labels."""
    labels, blocks = _data_blocks(n, seed)
    rows = np.empty((n, DIM), dtype=np.int64)
    for a, b, block in blocks:
        rows[a:b] = block
    return rows, labels


def write_data(n: int, path: Path, seed: int = 0):
    """The rows of :func:`make_data` (the same values) written to a uint16 ``.npy`` at
    ``path`` block by block: returned memory-mapped read-only (file pages, not anonymous
    memory), with the labels."""
    labels, blocks = _data_blocks(n, seed)
    rows = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(n, DIM))
    for a, b, block in blocks:
        rows[a:b] = block
    rows.flush()
    del rows
    return np.load(path, mmap_mode="r"), labels


class _PartyRows:
    """{party name: its rows / 2^q as float64}, made on access from the memory-mapped
    rows: the loopback session writes one party's data file at a time, so no more than
    one party's floats exist at once."""

    def __init__(self, rows, parties: int) -> None:
        self.rows = rows
        n = rows.shape[0]
        self.bounds = np.linspace(0, n, parties + 1).astype(int)
        self.names = [f"party-{j:02d}" for j in range(parties)]

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, name):
        j = self.names.index(name)
        block = self.rows[self.bounds[j]:self.bounds[j + 1]]
        return np.asarray(block, dtype=np.float64) / 2.0**SCALE_BITS  # exact


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


class _ProcessWatch(_Sampler):
    """Peak RssAnon / VmHWM and CPU seconds of other processes, sampled every 0.2 s."""

    def __init__(self, interval=0.2):
        super().__init__(interval)
        self.pids, self.peak_anon, self.peak_rss, self.cpu = {}, {}, {}, {}

    def add(self, name, pid):
        self.pids[name] = pid

    def _sample(self):
        tick = os.sysconf("SC_CLK_TCK")
        for name, pid in list(self.pids.items()):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    status = dict(line.split(":", 1) for line in fh if ":" in line)
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue  # exited
            anon = int(status.get("RssAnon", "0 kB").split()[0]) * 1024
            hwm = int(status.get("VmHWM", "0 kB").split()[0]) * 1024
            self.peak_anon[name] = max(self.peak_anon.get(name, 0), anon)
            self.peak_rss[name] = max(self.peak_rss.get(name, 0), hwm)
            self.cpu[name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime


def _run_parties(local, server, watch, on_phase) -> tuple:
    """Start every party process of ``local`` (each handed to ``watch(name, pid)``), run the
    session at the started ``server`` (``on_phase(phase, seconds since the start)``), stop
    it and wait for the parties: the outcome, the session's seconds and each party's stats."""
    try:
        start = time.perf_counter()
        for name in local.names:
            watch(name, local.start_party(name, server.port).pid)
        outcome = server.run(on_phase=lambda phase, round_: on_phase(
            phase, time.perf_counter() - start), poll=lambda: local.watch(server))
        seconds = time.perf_counter() - start
    finally:
        server.stop()
    for process in local.processes.values():
        process.wait(timeout=120)
    return outcome, seconds, {name: local.party_stats(name) for name in local.names}


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


# -- the landmarks and pairs layouts ----------------------------------------------------
class _PhaseWatch(_Sampler):
    """Peak RssAnon of this process and of others, per phase of the session (the
    coordinator's phase, set by its phase callback), sampled every ``interval`` seconds."""

    def __init__(self, interval=0.1):
        super().__init__(interval)
        self.phase, self.pids, self.peaks = "start", {"coordinator": "self"}, {}
        self.cpu, self.cpu_until = {}, {}

    def add(self, name, pid):
        self.pids[name] = pid

    def _sample(self):
        tick = os.sysconf("SC_CLK_TCK")
        phase = self.phase
        for name, pid in list(self.pids.items()):
            try:
                with open(f"/proc/{pid}/status") as fh:
                    anon = next((int(line.split()[1]) * 1024 for line in fh
                                 if line.startswith("RssAnon:")), 0)
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, ValueError, StopIteration):
                continue  # exited
            per = self.peaks.setdefault(phase, {})
            per[name] = max(per.get(name, 0), anon)
            self.cpu[name] = (int(fields[11]) + int(fields[12])) / tick
            self.cpu_until.setdefault(phase, {})[name] = self.cpu[name]

    def summary(self) -> dict:
        """{phase: [coordinator peak, largest party peak, coordinator CPU seconds, median
        party CPU seconds]}: the CPU each process spent in the phase (process CPU, as
        sampled: a phase shorter than the interval may count in the next one)."""
        out, before = {}, {}
        for phase, per in self.peaks.items():
            parties = [v for k, v in per.items() if k != "coordinator"]
            until = self.cpu_until.get(phase, {})
            spent = {k: v - before.get(k, 0.0) for k, v in until.items()}
            before.update(until)
            party_cpu = [v for k, v in spent.items() if k != "coordinator"]
            out[phase] = [per.get("coordinator", 0), max(parties, default=0),
                          spent.get("coordinator", 0.0),
                          statistics.median(party_cpu) if party_cpu else 0.0]
        return out


def _layout_session(rows, parameters, *, parties: int, deadline: float, cluster=None) -> dict:
    """One session of a layout over mutual-TLS gRPC, this process the coordinator: the
    outcome, per phase the seconds and bytes (the coordinator's counters) and the peak
    anonymous memory of the coordinator and of the largest party process, and each
    party's timings."""
    from protocols._config import Deadlines
    from protocols._grpc_local import LocalSession

    deadlines = Deadlines(join=600.0, shares=deadline, evaluation=deadline, result=600.0)
    os.environ["NUMBA_NUM_THREADS"] = "1"  # m party processes share 2 cores
    with LocalSession(_PartyRows(rows, parties), parameters, deadline=deadlines) as local:
        with _PhaseWatch() as watch:
            server = local.server(cluster=cluster, memory_budget=0).start()

            def on_phase(phase, elapsed):
                watch.phase = phase

            watch.phase = "join"
            outcome, seconds, stats = _run_parties(local, server, watch.add, on_phase)
    memory = watch.summary()
    phases = {k: [float(v[0]), int(v[1])] + memory.get(k, [0, 0, 0.0, 0.0])
              for k, v in outcome.stats.items()}
    return {"outcome": outcome, "seconds": seconds, "phases": phases,
            "coordinator_cpu_seconds": sum(v[2] for v in memory.values()),
            "coordinator_peak_anon": max(v[0] for v in memory.values()),
            "party_peak_anon": max(v[1] for v in memory.values()),
            "party_cpu_seconds": statistics.median(
                v for k, v in watch.cpu.items() if k != "coordinator"),
            "party_evaluation_seconds": statistics.median(
                s["evaluation_seconds"] for s in stats.values() if s),
            "party_kernel_seconds": statistics.median(
                s["kernel_seconds"] for s in stats.values() if s)}


#: glibc malloc settings of the layout sessions' processes (--default-malloc: none). With
#: the defaults, the 1 MiB messages freed by 17 stream threads stay in per-thread arenas
#: and the dynamic mmap threshold: the coordinator's anonymous memory grew with the session
#: (n = 20,000, L = 1,000: 0.67 GB in the evaluation against 0.33 GB with these).
MALLOC_ENV = [{"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "262144"}]

#: Lloyd's tolerance of the landmark k-means (scikit-learn's default; the library's
#: default 0 runs until no label changes, which only adds iterations here).
KMEANS_TOL = 1e-4

def _layout_parameters(n: int, segments: int, mask_degree: int, **layout):
    from protocols import SessionParameters
    return SessionParameters(dim=DIM, bound=1.0, scale_bits=SCALE_BITS, segments=segments,
                             noise_segments=1, nonnegative=True, mode="masked",
                             mask_degree=mask_degree, max_rows_per_party=n,
                             max_rows_total=n, **layout)


def _check_landmarks(rows, integer, landmarks) -> int:
    """D[:, L] against int64 arithmetic on the plaintext rows, on sampled entries."""
    rng = np.random.default_rng(1)
    n, width = integer.shape
    checked = 0
    for _ in range(4):
        r = np.sort(rng.choice(n, size=min(n, 256), replace=False))
        c = np.sort(rng.choice(width, size=min(width, 48), replace=False))
        diff = np.asarray(rows[r], dtype=np.int64)[:, None, :] - \
            np.asarray(rows[landmarks[c]], dtype=np.int64)[None, :, :]
        exact = (diff * diff).sum(-1)
        if not np.array_equal(np.asarray(integer[np.ix_(r, c)]), exact):
            raise SystemExit("spot check FAILED: D[:, L] differs from the plaintext distances")
        checked += exact.size
    return checked


def _landmark_result(outcome):
    """The landmarks session's D[:, L] as the clustering callback gets it (lazy floats)."""
    from protocols._layout_plans import LandmarkDistances
    return LandmarkDistances(outcome.integer, None, outcome.landmarks, SCALE_BITS)


def _session_figures(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "outcome"}


def child_landmarks(n: int, landmarks: int, parties: int, segments: int, mask_degree: int,
                    deadline: float, n_components: int, n_init: int) -> dict:
    """A landmarks session with landmark k-means as the coordinator's clustering (timed
    inside the session: it runs in the decode phase, before the parties get labels)."""
    from sklearn.metrics import adjusted_rand_score

    from omnifc._clustering._landmarks import landmark_kmeans

    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="omnifc-bench-rows-"))
    rows, planted = write_data(n, scratch / "rows.npy")  # memory-mapped, not anonymous
    generate = time.perf_counter() - start
    clustering = {}

    def cluster(result):
        started = time.perf_counter()
        details = landmark_kmeans(result, n_clusters=CLUSTERS, random_state=0,
                                  n_init=n_init, n_components=n_components,
                                  tol=KMEANS_TOL)
        clustering["seconds"] = time.perf_counter() - started
        return details["labels"]

    parameters = _layout_parameters(n, segments, mask_degree, layout="landmarks",
                                    n_landmarks=landmarks)
    run = _layout_session(rows, parameters, parties=parties, deadline=deadline,
                          cluster=cluster)
    outcome = run["outcome"]
    checked = _check_landmarks(rows, outcome.integer, outcome.landmarks)
    labels = np.asarray(outcome.labels)
    del rows
    shutil.rmtree(scratch, ignore_errors=True)
    return {**_session_figures(run), "generate_seconds": generate,
            "kmeans_seconds": clustering["seconds"], "checked_entries": checked,
            "dtype": str(outcome.integer.dtype), "landmarks": len(outcome.landmarks),
            "ari_planted": float(adjusted_rand_score(planted, labels)),
            "labels": labels.tolist()}


def child_pairs(n: int, landmarks: int, parties: int, segments: int, mask_degree: int,
                deadline: float, k: int, candidates: int, max_pairs: int,
                n_components: int) -> dict:
    """The exact k-NN graph: a landmarks session, candidates from the landmark embedding,
    then the pairs in sessions of at most ``max_pairs`` each (omnifc._secure_knn)."""
    from omnifc._clustering._neighbours import candidate_pairs, knn_from_entries
    from omnifc._secure_knn import pair_rounds

    scratch = Path(tempfile.mkdtemp(prefix="omnifc-bench-rows-"))
    rows, _ = write_data(n, scratch / "rows.npy")  # memory-mapped, not anonymous
    first = _layout_session(rows, _layout_parameters(n, segments, mask_degree,
                                                     layout="landmarks",
                                                     n_landmarks=landmarks),
                            parties=parties, deadline=deadline)
    outcome = first["outcome"]
    checked = _check_landmarks(rows, outcome.integer, outcome.landmarks)
    started = time.perf_counter()
    pairs = candidate_pairs(_landmark_result(outcome), candidates=candidates,
                            n_components=n_components or None)
    candidate_seconds = time.perf_counter() - started
    rounds, values = [], []
    for chunk in pair_rounds(pairs, max_pairs):
        run = _layout_session(rows, _layout_parameters(
            n, segments, mask_degree, layout="pairs", layout_rows=chunk.ravel(),
            max_pairs=max_pairs), parties=parties, deadline=deadline)
        got = run["outcome"]
        if not np.array_equal(got.pairs, chunk):
            raise SystemExit("the pairs session computed other pairs than were listed")
        diff = np.asarray(rows[chunk[:256, 0]], dtype=np.int64) - \
            np.asarray(rows[chunk[:256, 1]], dtype=np.int64)
        if not np.array_equal(np.asarray(got.integer[:256]), (diff * diff).sum(-1)):
            raise SystemExit("spot check FAILED: pair distances differ from the plaintext")
        checked += min(256, len(chunk))
        values.append(np.asarray(got.integer, dtype=np.int64))
        rounds.append(_session_figures(run))
    started = time.perf_counter()
    graph = knn_from_entries(n, outcome.landmarks, outcome.integer, pairs,
                             np.concatenate(values) if values else np.empty(0, np.int64), k,
                             scale_bits=SCALE_BITS)
    graph_seconds = time.perf_counter() - started
    exact = exact_knn(rows, k)
    del rows
    shutil.rmtree(scratch, ignore_errors=True)
    recall = float(np.mean([np.intersect1d(a, b).size for a, b in
                            zip(graph.indices, exact)]) / k)
    return {"landmark_session": _session_figures(first), "pair_sessions": rounds,
            "pairs": int(len(pairs)), "candidate_seconds": candidate_seconds,
            "graph_seconds": graph_seconds, "recall": recall, "checked_entries": checked, "k": k,
            "landmarks": len(outcome.landmarks)}


def exact_knn(rows, k: int, block: int = 512) -> np.ndarray:
    """The exact k-NN graph of the quantized rows (ties: lower row first), by float64 GEMM
    on the small integers: every value below 2^53, so the distances are exact."""
    x = rows.astype(np.float64)
    norms = np.einsum("ij,ij->i", x, x)
    n = x.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for a in range(0, n, block):
        b = min(n, a + block)
        d = norms[a:b, None] + norms[None, :] - 2.0 * (x[a:b] @ x.T)
        d[np.arange(b - a), np.arange(a, b)] = np.inf  # not the row itself
        part = np.argpartition(d, k, axis=1)[:, :k + 1]
        for i in range(b - a):  # (distance, index) order among the k + 1 nearest
            cand = part[i]
            order = np.lexsort((cand, d[i, cand]))
            kth = d[i, cand[order[k - 1]]]
            ties = np.flatnonzero(d[i] == kth)  # every row tied with the k-th
            pool = np.union1d(cand[d[i, cand] < kth], ties)
            pool = pool[np.lexsort((pool, d[i, pool]))]
            out[a + i] = pool[:k]
    return out


def child_reference(n: int, n_init: int) -> dict:
    """k-means on the exact D, from the plaintext rows: classical MDS of the exact D is the
    centred rows themselves (D is Euclidean), so Lloyd on the quantized rows is k-means on
    the exact D; scikit-learn's KMeans (k-means++, ``n_init``), float32 rows."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    rows, planted = make_data(n)
    x = rows.astype(np.float32)
    del rows
    start = time.perf_counter()
    model = KMeans(n_clusters=CLUSTERS, n_init=n_init, random_state=0).fit(x)
    return {"seconds": time.perf_counter() - start, "labels": model.labels_.tolist(),
            "ari_planted": float(adjusted_rand_score(planted, model.labels_))}


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


# -- parent side -----------------------------------------------------------------------
def _run_child(*args, timeout: float) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args[0] in ("landmarks", "pairs"):
        env.update(MALLOC_ENV[0])  # the coordinator and, inherited, every party process
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


def _remove(*paths) -> None:
    for path in paths:
        for p in (path, path.with_name(path.name + ".json")):
            if p.exists():
                p.unlink()


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


def bench_layout(n, args) -> dict:
    """One n of ``--layout landmarks|pairs``: the secure run, and (unless
    ``--no-reference``) the exact references from the plaintext rows."""
    common = (args.parties, args.segments, args.mask_degree, args.deadline)
    if args.layout == "landmarks":
        run = _run_child("landmarks", n, "-", args.tile_bytes, args.landmarks, *common,
                         args.components, args.n_init, timeout=args.timeout)
        labels = np.asarray(run.pop("labels"))
        session = run["seconds"]
        result = {"n": n, "layout": "landmarks", "session_seconds": session, **run}
        if not args.no_reference:
            from sklearn.metrics import adjusted_rand_score
            ref = _run_child("reference", n, "-", args.tile_bytes, args.n_init,
                             timeout=args.timeout)
            result |= {"reference_seconds": ref["seconds"],
                       "reference_ari_planted": ref["ari_planted"],
                       "ari_exact": float(adjusted_rand_score(ref["labels"], labels))}
        return result
    run = _run_child("pairs", n, "-", args.tile_bytes, args.landmarks, *common, args.k,
                     args.candidates, args.max_pairs, args.components, timeout=args.timeout)
    sessions = [run["landmark_session"], *run["pair_sessions"]]
    return {"n": n, "layout": "pairs", **run,
            "session_seconds": sum(s["seconds"] for s in sessions)
            + run["candidate_seconds"] + run["graph_seconds"],
            "coordinator_peak_anon": max(s["coordinator_peak_anon"] for s in sessions),
            "party_peak_anon": max(s["party_peak_anon"] for s in sessions)}


def print_layout_results(results) -> None:
    from _common import print_grid, wrapped

    print(wrapped(f"malloc settings of the session processes: "
                  f"{MALLOC_ENV[0] or 'glibc defaults'}"))
    print(wrapped("Layouts over gRPC with mutual TLS, every party its own process. Per "
                  "session and phase: wall seconds, bytes the coordinator sent and received, "
                  "peak anonymous memory (RssAnon sampled every 0.1 s) of the coordinator "
                  "and of the largest party process, process CPU seconds of the coordinator "
                  "and of the median party; the decode phase includes the coordinator's "
                  "k-means:"))
    for r in results:
        sessions = [("landmarks", r)] if r["layout"] == "landmarks" else \
            [("landmarks", r["landmark_session"])] + \
            [(f"pairs {i + 1}", s) for i, s in enumerate(r["pair_sessions"])]
        rows = []
        for name, s in sessions:
            for phase in ("join", "shares", "evaluation", "decode"):
                if phase not in s["phases"]:
                    continue
                sec, sent, coord, party, coord_cpu, party_cpu = s["phases"][phase]
                rows.append([f"{r['n']:,}", name, phase, f"{sec:.1f} s", _gb(sent),
                             f"{coord / 1e9:.2f} / {party / 1e9:.2f} GB",
                             f"{coord_cpu:.1f} / {party_cpu:.1f} s"])
            rows.append([f"{r['n']:,}", name, "whole", f"{s['seconds']:.1f} s", "", "", ""])
        print_grid(["n", "session", "phase", "wall", "bytes", "anon coord/party",
                    "CPU coord/party"], rows)
        if r["layout"] == "landmarks":
            line = (f"  n = {r['n']:,}, L = {r['landmarks']}: whole session "
                    f"{r['session_seconds']:.1f} s including landmark k-means "
                    f"{r['kmeans_seconds']:.1f} s (data generation {r['generate_seconds']:.1f}"
                    f" s, not counted); D[:, L] exact on {r['checked_entries']:,} sampled "
                    f"entries ({r['dtype']}); ARI vs planted labels {r['ari_planted']:.4f}")
            if "ari_exact" in r:
                line += (f"; ARI vs k-means on the exact D (Lloyd on the plaintext rows, "
                         f"{r['reference_seconds']:.1f} s) {r['ari_exact']:.4f} (that "
                         f"reference vs planted: {r['reference_ari_planted']:.4f})")
        else:
            line = (f"  n = {r['n']:,}, L = {r['landmarks']}: {r['pairs']:,} candidate pairs "
                    f"in {len(r['pair_sessions'])} pairs session(s); whole "
                    f"{r['session_seconds']:.1f} s (candidates {r['candidate_seconds']:.1f} s,"
                    f" graph {r['graph_seconds']:.1f} s); recall of the exact {r['k']}-NN graph "
                    f"(from the plaintext rows) {r['recall']:.4f}; {r['checked_entries']:,} "
                    "entries spot-checked exact")
        print(wrapped(line))


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

"""bench_scale's data and processes: the MNIST-shaped rows, each party's share of them, the
session's party processes, and the benchmark's own child processes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: The benchmark script every child process runs.
SCRIPT = Path(__file__).with_name("bench_scale.py")

#: MNIST's shape and the OmniFC paper's setting: d = 784, q = 8 bits, ten prototypes.
DIM, SCALE_BITS, CLUSTERS = 784, 8, 10

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



#: glibc malloc settings of the layout sessions' processes (--default-malloc: none). With
#: the defaults, the 1 MiB messages freed by 17 stream threads stay in per-thread arenas
#: and the dynamic mmap threshold: the coordinator's anonymous memory grew with the session
#: (n = 20,000, L = 1,000: 0.67 GB in the evaluation against 0.33 GB with these).
MALLOC_ENV = [{"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "262144"}]


def _run_child(*args, timeout: float) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args[0] in ("landmarks", "pairs"):
        env.update(MALLOC_ENV[0])  # the coordinator and, inherited, every party process
    done = subprocess.run([sys.executable, str(SCRIPT), "--child", *map(str, args)],
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

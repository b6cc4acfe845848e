"""Restart benchmark: the coordinator process killed halfway through the evaluation and
continued with ``omnifc serve --resume``.

Issue 23's goal: at n = 20,000 rows and m = 17 parties over gRPC (one process per party,
mutual TLS on loopback; d = 16, l = 8, t = 1, q = 8, masked), with the coordinator process
killed (SIGKILL) halfway through the evaluation and ``omnifc serve --resume`` started, the
session completes with an exact D, and the work redone is at most the tiles that were in
flight. Everything runs as a user runs it: ``omnifc certs``, ``omnifc serve`` (its journal
on by default) and one party process per party (``python -m protocols._grpc_party``).

Three runs of the same data, one each: a fault-free run without a journal (the config's
``reconnect_grace = 0``: what ``serve`` cost before it kept one; the baseline), a
fault-free run with it, and a run whose coordinator is killed when its journal vouches for
half of the tiles (counted without the key: a record is a length, a body, a MAC), then
restarted at once on the same address from the same folder. Each party's ``--stats-out`` counts the tiles
it uploaded (a re-sent tile counts again): the work redone is their sum minus the
fault-free run's. What was in flight at the kill is read from the dead coordinator's
journal: the tiles it held are all it keeps; every upload of a tile not yet complete
(some parties' uploads in, not all) and every upload in the network is redone.
D is checked bit for bit against the oracle of ``bench_reset`` (float64 BLAS on the
quantized rows, exact on these integers).

    python benchmarks/bench_restart.py [--n 20000] [--m 17] [--check] [--json PATH]
    python benchmarks/bench_restart.py --quick     # n = 1,200, m = 5 (l = 2): a smoke run
                                                   # (party-0 held at half its tiles)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_chaos import party_data  # noqa: E402
from bench_reset import oracle  # noqa: E402
from protocols._journal import count_records  # noqa: E402

CLI = [sys.executable, "-m", "omnifc.cli"]
TARGET_SIZE = (20_000, 17)
DIM, SEGMENTS, NOISE, SCALE_BITS, BOUND = 16, 8, 1, 8, 1.0


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def total_tiles(config: Path, n: int, m: int) -> int:
    """Tiles of a round over all primes: the (prime, tile) pairs the journal can hold."""
    from protocols import load_session_config, parameters_from_config, row_tiles

    params = parameters_from_config(load_session_config(config))
    return len(params.plan(m).primes) * len(row_tiles(n, params.chunk_bytes))


def serve(work: Path, config: Path, port: int, out: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "serve", "--config", str(config), "--address",
                             f"127.0.0.1:{port}", "--out", str(out), "--no-progress",
                             "--no-cluster", *extra], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run(work: Path, config: Path, names: list, n: int, m: int, *, kill_at: int | None,
        label: str, hold: bool = False) -> dict:
    """One session; with ``kill_at``, the coordinator is killed when its journal holds
    that many tiles and restarted with --resume. ``hold``: the first party uploads only
    ``kill_at`` tiles until the restart (so a run of a few tiles cannot finish before the
    kill; the smoke run)."""
    release = work / f"{label}.release"
    held_fault = ["--fault", f"hold-tiles:{release}:{kill_at}"] if hold else []
    port, out = free_port(), work / f"results-{label}"
    started = time.perf_counter()
    coordinator = serve(work, config, port, out)
    parties = [subprocess.Popen(
        [sys.executable, "-m", "protocols._grpc_party", "--config", str(config), "--party",
         name, "--data", str(work / f"{name}.npy"), "--target", f"127.0.0.1:{port}",
         "--stats-out", str(work / f"{label}-{name}.json"),
         *(held_fault if name == names[0] else [])], cwd=work,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for name in names]
    killed = held = None
    restarted = None
    try:
        if kill_at is not None:
            journal = out / "in-progress" / "session.journal"
            end = time.monotonic() + 3600
            while count_records(journal, "tile") < kill_at:
                if coordinator.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"the session ended before the kill: "
                                       f"{coordinator.communicate()}")
                time.sleep(0.02)
            coordinator.send_signal(signal.SIGKILL)
            coordinator.communicate(timeout=60)
            killed = time.perf_counter() - started
            held = count_records(journal, "tile")
            restarted = serve(work, config, port, out, "--resume")
            coordinator = restarted
            release.touch()
        stdout, stderr = coordinator.communicate(timeout=7200)
        elapsed = time.perf_counter() - started
        ends = [p.communicate(timeout=600) for p in parties]
    finally:
        for p in [coordinator, *parties]:
            if p.poll() is None:
                p.kill()
                p.communicate()
    if coordinator.returncode != 0 or any(p.returncode for p in parties):
        raise RuntimeError(f"{label}: serve exit {coordinator.returncode}: {stderr[-2000:]}; "
                           f"parties {[p.returncode for p in parties]}: "
                           f"{[e[1][-300:] for e in ends if e[1]]}")
    stats = [json.loads((work / f"{label}-{name}.json").read_text()) for name in names]
    return {"label": label, "seconds": elapsed, "killed_at_seconds": killed,
            "held_at_kill": held, "tiles_uploaded": sum(s["tiles_uploaded"] for s in stats),
            "distances": out / "distances.npy", "left": (out / "in-progress").exists()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=TARGET_SIZE[0])
    parser.add_argument("--m", type=int, default=TARGET_SIZE[1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="n = 1,200, m = 5 (l = 2)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless D is exact and "
                        "the work redone is at most what was in flight")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    n, m = (1200, 5) if args.quick else (args.n, args.m)
    segments = SEGMENTS if m >= 2 * SEGMENTS + 2 * NOISE - 1 else (m + 1 - 2 * NOISE) // 2
    with tempfile.TemporaryDirectory(prefix="omnifc-bench-restart-") as tmp:
        work = Path(tmp)
        names = [f"party-{i}" for i in range(m)]
        done = subprocess.run(
            [*CLI, "certs", "--out", str(work / "s"), "--parties", ",".join(names),
             "--coordinator-address", "127.0.0.1:0", "--dim", str(DIM), "--bound",
             str(BOUND), "--scale-bits", str(SCALE_BITS), "--segments", str(segments),
             "--noise-segments", str(NOISE), "--deadline", "join=600",
             "--deadline", "shares=600", "--deadline", "evaluation=3600"],
            capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise RuntimeError(done.stderr)
        config = work / "s" / "session.toml"
        data = party_data(n, m, DIM, args.seed)
        for name, rows in data.items():
            np.save(work / f"{name}.npy", rows)
        expected = oracle(np.vstack([data[name] for name in names]), BOUND, SCALE_BITS)
        expected = expected / 4.0**SCALE_BITS
        total = total_tiles(config, n, m)
        unjournaled = work / "s" / "no-journal.toml"
        unjournaled.write_text(config.read_text().replace("reconnect_grace = 30.0",
                                                          "reconnect_grace = 0.0"))
        plain = run(work, unjournaled, names, n, m, kill_at=None, label="plain")
        clean = run(work, config, names, n, m, kill_at=None, label="clean")
        killed = run(work, config, names, n, m, kill_at=total // 2, label="killed",
                     hold=args.quick)
        exact = {r["label"]: bool(np.array_equal(np.load(r["distances"], mmap_mode="r"),
                                                 expected)) for r in (plain, clean, killed)}
        uploads = m * total  # every responder uploads every tile once
        redone = killed["tiles_uploaded"] - clean["tiles_uploaded"]
        in_flight = uploads - m * killed["held_at_kill"]  # all the journal did not hold
        figures = {
            "n": n, "m": m, "tiles": total, "uploads": uploads,
            "no_journal_seconds": round(plain["seconds"], 1),
            "clean_seconds": round(clean["seconds"], 1),
            "journal_ratio": round(clean["seconds"] / plain["seconds"], 3),
            "killed_seconds": round(killed["seconds"], 1),
            "ratio": round(killed["seconds"] / plain["seconds"], 3),
            "killed_at_seconds": round(killed["killed_at_seconds"], 1),
            "held_at_kill": killed["held_at_kill"], "redone_uploads": redone,
            "not_held_at_kill_uploads": in_flight, "exact": exact,
            "clean_tiles_uploaded": clean["tiles_uploaded"],
            "left_behind": plain["left"] or clean["left"] or killed["left"]}
    print(f"restart: n = {n}, m = {m}, {total} tiles x {m} parties = {uploads} uploads")
    print(f"  fault-free, no journal {figures['no_journal_seconds']:7.1f} s   "
          f"exact D: {exact['plain']}  (the baseline)")
    print(f"  fault-free, journal    {figures['clean_seconds']:7.1f} s   "
          f"exact D: {exact['clean']}  ({figures['journal_ratio']:.2f}x)")
    print(f"  killed at {figures['killed_at_seconds']:6.1f} s, "
          f"{killed['held_at_kill']}/{total} tiles journaled; resumed: "
          f"{figures['killed_seconds']:.1f} s ({figures['ratio']:.2f}x)  exact: "
          f"{exact['killed']}")
    print(f"  uploads redone: {redone} of {uploads}; not journaled at the kill: "
          f"{in_flight} (what a restart may redo at most)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    ok = all(exact.values()) and not figures["left_behind"] and redone <= in_flight
    if args.check and not ok:
        print("restart: CHECK FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

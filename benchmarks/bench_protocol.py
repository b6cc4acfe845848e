"""End-to-end protocol benchmark: seconds and bytes per phase vs plaintext ``pdist``.

n = 2000 rows, d = 16, m = 3 parties (l = 1, t = 1, masked mode, q = 12 so one prime
holds every distance), in memory and over gRPC with mutual TLS on loopback (one process
per party). The baseline, ``scipy.spatial.distance.pdist(x, "sqeuclidean")`` on the same
data, is timed in the same run, alternating with the protocol; medians of several runs.

Targets (issue 3): in-memory protocol within 10x of pdist; loopback gRPC within 30x. The
gRPC figure is given twice: the protocol phases after every party joined (shares,
evaluation, decode, result), and the wall time including process start-up and join.

    python benchmarks/bench_protocol.py [--n 2000] [--dim 16] [--parties 3] [--repeats 5]

``--quick`` is a smoke run in seconds (n = 200, one run each; its ratios say little);
``--json PATH`` saves the figures (benchmarks/write_figures.py uses it); ``--check`` exits
1 when a target is missed (otherwise the exit status is 0: the verdicts are informational).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import numpy as np
from scipy.spatial.distance import pdist

from finite_field import cross_sq_distances
from protocols import SessionParameters, run_memory_session
from protocols._grpc_local import run_local_grpc_session

PHASES = ("join", "shares", "evaluation", "decode", "result")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--scale-bits", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5, help="in-memory runs (and pdist)")
    parser.add_argument("--grpc-repeats", type=int, default=3)
    parser.add_argument("--skip-grpc", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: n = 200, one run of each (seconds)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats, args.grpc_repeats = min(args.n, 200), 1, 1
    load_before = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc)

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.n, args.dim))
    bounds = np.linspace(0, args.n, args.parties + 1).astype(int)
    data = {f"party-{i}": x[bounds[i]:bounds[i + 1]] for i in range(args.parties)}
    params = SessionParameters(dim=args.dim, bound=1.0, scale_bits=args.scale_bits)

    # One party's modular distance work, for attribution: g(beta_j) for all pairs.
    p = 2147483647
    shares = rng.integers(0, p, (args.n, args.dim))

    # Warm-up (numba compilation, imports), then alternate baseline and subject.
    run_memory_session(data, params)
    pdist(x, "sqeuclidean")
    cross_sq_distances(shares, shares, p)
    base, kernel, memory, memory_stats = [], [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        pdist(x, "sqeuclidean")
        base.append(time.perf_counter() - start)
        start = time.perf_counter()
        cross_sq_distances(shares, shares, p)
        kernel.append(time.perf_counter() - start)
        start = time.perf_counter()
        outcome, _ = run_memory_session(data, params)
        memory.append(time.perf_counter() - start)
        memory_stats.append(outcome.stats)
    grpc_wall, grpc_protocol, grpc_stats = [], [], []
    if not args.skip_grpc:
        for _ in range(args.grpc_repeats):
            start = time.perf_counter()
            pdist(x, "sqeuclidean")
            base.append(time.perf_counter() - start)
            start = time.perf_counter()
            outcome = run_local_grpc_session(data, params, deadline=300)
            grpc_wall.append(time.perf_counter() - start)
            grpc_protocol.append(sum(outcome.stats[p][0] for p in PHASES if p != "join"))
            grpc_stats.append(outcome.stats)
    pd = statistics.median(base)

    print(f"bench_protocol: n={args.n} d={args.dim} m={args.parties} l=1 t=1 "
          f"q={args.scale_bits} primes={outcome.parameters['primes']} masked; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"pdist (sqeuclidean, condensed)   median {pd * 1e3:9.2f} ms over {len(base)} runs")
    kern = statistics.median(kernel)
    print(f"one party's g(beta_j), all pairs median {kern * 1e3:9.2f} ms  ratio "
          f"{kern / pd:7.1f}x pdist (finite_field.cross_sq_distances, n x n)")

    def phase_table(stats_list):
        for phase in PHASES:
            seconds = statistics.median(s[phase][0] for s in stats_list)
            nbytes = statistics.median(s[phase][1] for s in stats_list)
            print(f"    {phase:<11} {seconds * 1e3:10.2f} ms {nbytes / 1e6:10.2f} MB")

    mem = statistics.median(memory)
    print(f"in-memory protocol (end to end)  median {mem * 1e3:9.2f} ms  ratio "
          f"{mem / pd:7.1f}x pdist (target <= 10x: {'met' if mem / pd <= 10 else 'NOT met'})")
    phase_table(memory_stats)
    figures = {"date": f"{now:%Y-%m-%d %H:%M} UTC", "quick": bool(args.quick), "n": args.n,
               "dim": args.dim, "parties": args.parties, "scale_bits": args.scale_bits,
               "cpu_count": os.cpu_count(), "load_before": list(load_before),
               "pdist_seconds": pd, "pdist_runs": len(base), "party_kernel_seconds": kern,
               "memory_seconds": mem, "memory_runs": len(memory),
               "memory_ratio": mem / pd, "memory_target_met": mem / pd <= 10,
               "memory_phases": {ph: [statistics.median(s[ph][0] for s in memory_stats),
                                      statistics.median(s[ph][1] for s in memory_stats)]
                                 for ph in PHASES}}
    missed = [] if mem / pd <= 10 else ["in-memory <= 10x pdist"]
    if grpc_wall:
        proto = statistics.median(grpc_protocol)
        wall = statistics.median(grpc_wall)
        print(f"gRPC+TLS, protocol after join    median {proto * 1e3:9.2f} ms  ratio "
              f"{proto / pd:7.1f}x pdist (target <= 30x: "
              f"{'met' if proto / pd <= 30 else 'NOT met'})")
        print(f"gRPC+TLS, wall incl. start-up    median {wall * 1e3:9.2f} ms  ratio "
              f"{wall / pd:7.1f}x pdist")
        phase_table(grpc_stats)
        figures.update(grpc_protocol_seconds=proto, grpc_wall_seconds=wall,
                       grpc_runs=len(grpc_wall), grpc_ratio=proto / pd,
                       grpc_wall_ratio=wall / pd, grpc_target_met=proto / pd <= 30)
        if proto / pd > 30:
            missed.append("gRPC after join <= 30x pdist")
    figures["load_after"] = list(os.getloadavg())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    if missed:
        print(f"target(s) missed: {', '.join(missed)}", file=sys.stderr)
    if args.check and missed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

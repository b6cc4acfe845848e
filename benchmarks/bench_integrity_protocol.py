"""The cost of integrity checking in the whole protocol, as a ratio over today's masked mode.

m = 7 parties, l = t = 1 (K = 3, so every round has r = 4 parity checks), d = 16, q = 12
(one prime), masked mode, in memory (every message serialized to protobuf bytes and back).
Each size runs ``integrity="off"`` (weighted pairwise masks, the unchecked baseline) and
``integrity="detect"`` (group seeds, unweighted masked uploads, running sums c.U and
mu_1..mu_4.U per tile, syndrome scan) in alternation, medians of ``--repeats`` runs, plus
the per-phase seconds of the coordinator (evaluation includes every party's upload work,
since the parties run in the same process). The shared machine is loaded: the script
prints the load average before and after; quote ranges over runs, not one figure.

    python benchmarks/bench_integrity_protocol.py [--sizes 2000,10000] [--repeats 3]
    python benchmarks/bench_integrity_protocol.py --quick   # n = 300, one run: a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from protocols import SessionParameters, run_memory_session


def one_run(data, params):
    start = time.perf_counter()
    outcome, _ = run_memory_session(data, params)
    seconds = time.perf_counter() - start
    phases = {k: v[0] for k, v in outcome.stats.items()}
    return seconds, phases, outcome.integrity


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="comma-separated n (default 2000,10000)")
    parser.add_argument("--parties", type=int, default=7)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=None, help="runs per policy (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="n = 300 and one run per policy: seconds, figures meaningless")
    args = parser.parse_args(argv)
    args.sizes = args.sizes or ("300" if args.quick else "2000,10000")
    args.repeats = args.repeats or (1 if args.quick else 3)
    print(f"load average before: {os.getloadavg()}", flush=True)
    rng = np.random.default_rng(0)
    for n in [int(s) for s in args.sizes.split(",")]:
        x = rng.uniform(-1, 1, (n, args.dim))
        bounds = np.linspace(0, n, args.parties + 1).astype(int)
        data = {f"party-{i}": x[bounds[i]:bounds[i + 1]] for i in range(args.parties)}
        runs = {}
        for policy in ("off", "detect"):
            params = SessionParameters(dim=args.dim, bound=1.0, scale_bits=12,
                                       integrity=policy)
            runs[policy] = (params, [])
        small = {k: v[:4] for k, v in data.items()}
        for params, _ in runs.values():  # warm-up: numba compilation, imports
            run_memory_session(small, params)
        for _ in range(args.repeats):
            for policy, (params, results) in runs.items():
                results.append(one_run(data, params))
        print(f"\nn = {n}, m = {args.parties}, l = t = 1, d = {args.dim}, masked, in memory, "
              f"{args.repeats} runs each (alternating)")
        medians = {}
        for policy, (_, results) in runs.items():
            total = [r[0] for r in results]
            evaluation = [r[1]["evaluation"] for r in results]
            decode = [r[1]["decode"] for r in results]
            medians[policy] = statistics.median(total)
            print(f"  integrity={policy:<6} total {statistics.median(total):7.2f} s "
                  f"[{min(total):.2f}-{max(total):.2f}]  evaluation "
                  f"{statistics.median(evaluation):6.2f} s  decode "
                  f"{statistics.median(decode):5.2f} s  ({results[0][2]})")
        ratios = [d[0] / o[0] for d, o in zip(runs["detect"][1], runs["off"][1])]
        print(f"  ratio detect/off: median {medians['detect'] / medians['off']:.2f}x, "
              f"per alternating pair {min(ratios):.2f}x-{max(ratios):.2f}x", flush=True)
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

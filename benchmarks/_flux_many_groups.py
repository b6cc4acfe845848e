"""FLUX's automatic K with three and five groups (issue 24, fourteenth pass).

Not a speed benchmark. ``omnifc bench k-selection`` plants K = 2 only; the FLUX paper, its
reproduction page and the tests of ``run_flux`` plant 3 and 5 groups. This script runs
``run_flux`` end to end (plaintext D of the quantized descriptors, which equals the secure
one; no cluster rounds) on digits federations of K = 3 and 5 groups of 4 and 8 clients under
each of the four shifts, and applies every candidate pipeline of ``PIPELINES`` to the same
federation (same seed, same encoder):

- ``default``: FLUX's default before issue 24's fourteenth pass, the descriptors' D and the
  calibrated Ward-gap rule at 0.05 with 39 draws;
- ``split_axis``: ``flux.SPLIT_HALF_RECIPE`` (the noise read from D alone, the top-axis test
  at 0.01, B = 199);
- ``split_ward``: the same split D with the calibrated Ward-gap rule at 0.01, B = 199;
- ``whitened``: ``flux.WHITENED_RECIPE``;
- ``split_axis_or_gap``: the split D with both tests against the same draws, the smaller p
  calibrated on them (``k_rule="calibrated_axis_or_gap"``, min-p) at 0.01, B = 199;
- ``split_groups10``: ``flux.SPLIT_GROUPS_RECIPE``, the same rule with the noise read from
  10 delete-a-group descriptors per client instead of two halves.

A run is right when K is the planted K and the partition is exact (ARI 1). The table counts
right runs per (K, clients per group), per shift and overall; ``--paired`` prints each
pipeline against ``default`` run by run (``bench_k_selection.paired_counts``).

Usage::

    python benchmarks/_flux_many_groups.py --seeds 5300-5302 --out FILE [--quick]

Design seeds 5300-5302 (``DESIGN_SEEDS``: the look that found the top-axis test weak with
3 and 5 groups); held out for the fourteenth pass's verdict: ``FRESH_SEEDS``; for the
twenty-second pass's: ``GROUPS_FRESH_SEEDS``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_k_selection as grid  # noqa: E402
from _common import int_list  # noqa: E402

from omnifc import fl  # noqa: E402
from omnifc.adapters import flux  # noqa: E402

#: Each pipeline's ``run_flux`` options (explicit, so a later change of the defaults does
#: not change what a column means).
PIPELINES = {
    "default": {"normalization": "none", "k_rule": "calibrated", "k_alpha": 0.05,
                "k_references": 39},
    "split_axis": dict(flux.SPLIT_HALF_RECIPE),
    "split_ward": {"normalization": "split", "k_rule": "calibrated", "k_alpha": 0.01,
                   "k_references": 199},
    "whitened": dict(flux.WHITENED_RECIPE),
    "split_axis_or_gap": dict(flux.SPLIT_MIN_P_RECIPE),
    "split_groups10": dict(flux.SPLIT_GROUPS_RECIPE),
}
GROUPS = (3, 5)
CLIENTS_PER_GROUP = (4, 8)
SHIFTS = ("label", "feature", "concept", "conditional")
#: The look that found the top-axis test weak with 3 and 5 groups (fourteenth pass).
DESIGN_SEEDS = (5300, 5301, 5302)
#: Generated only after the fourteenth pass's candidate and verdict were frozen
#: (``bench_k_selection.SPLIT_MIN_P_VERDICT``).
FRESH_SEEDS = tuple(range(5303, 5315))
#: Generated only after the twenty-second pass's candidate (``split_groups10``) and verdict
#: were frozen (``bench_k_selection.SPLIT_GROUPS_VERDICT``).
GROUPS_FRESH_SEEDS = tuple(range(5315, 5327))


def federations(seeds, groups=GROUPS, per_group=CLIENTS_PER_GROUP, shifts=SHIFTS):
    """Every (seed, K, clients per group, shift) of the look, seeds outermost."""
    for seed in seeds:
        for k in groups:
            for per in per_group:
                for shift in shifts:
                    yield seed, k, per, shift


def run_one(seed, k, per, shift, pipelines=PIPELINES, hidden=32):
    """One federation, every pipeline: ``{"seed", "k", "per", "shift", "rules": {name: [K,
    right]}}`` (right: K planted and ARI 1)."""
    from sklearn.metrics import adjusted_rand_score

    data = fl.make_federated("digits", shift=shift, n_groups=k, clients_per_group=per,
                             new_per_group=0, seed=seed)
    model = fl.MLP(data.n_features, hidden, data.n_classes)
    out = {}
    for name, options in pipelines.items():
        run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0, **options)
        right = run.n_clusters == k and adjusted_rand_score(data.groups, run.labels) == 1.0
        out[name] = [int(run.n_clusters), bool(right)]
    return {"seed": seed, "k": k, "per": per, "shift": shift, "rules": out}


def _row_groups():
    groups = [(f"K = {k}, {p} clients per group", lambda r, k=k, p=p: (r["k"], r["per"]) == (k, p))
              for k in GROUPS for p in CLIENTS_PER_GROUP]
    groups += [(s, lambda r, s=s: r["shift"] == s) for s in SHIFTS]
    groups.append(("**all**", lambda r: True))
    return groups


def table(rows, names=tuple(PIPELINES)) -> list[str]:
    """Right runs per row group and pipeline (markdown)."""
    out = ["| runs | " + " | ".join(f"`{n}`" for n in names) + " |",
           "|---|" + "---|" * len(names)]
    for label, pick in _row_groups():
        chosen = [r for r in rows if pick(r)]
        if chosen:
            out.append(f"| {label} | " + " | ".join(
                f"{sum(r['rules'][n][1] for r in chosen)}/{len(chosen)}" for n in names) + " |")
    return out


def paired(rows, names=tuple(PIPELINES)[1:], base="default") -> list[str]:
    """Each pipeline against ``base`` on the same runs, per row group (markdown)."""
    out = [f"| runs | pipeline | `{base}` | it | + / − | noise | against `{base}` |",
           "|---|---|---|---|---|---|---|"]
    for label, pick in _row_groups():
        chosen = [r for r in rows if pick(r)]
        for name in names if chosen else ():
            a = [int(r["rules"][base][1]) for r in chosen]
            b = [int(r["rules"][name][1]) for r in chosen]
            right_a, right_b, plus, minus, noise, word = grid.paired_counts(a, b)
            out.append(f"| {label} | `{name}` | {right_a}/{len(a)} | {right_b}/{len(b)} | "
                       f"+{plus} / -{minus} | {noise:.1f} | {word} |")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=f"{DESIGN_SEEDS[0]}-{DESIGN_SEEDS[-1]}")
    parser.add_argument("--out", help="append every federation's record here (JSON lines); "
                        "records already there are not run again")
    parser.add_argument("--table", nargs="+", metavar="RESULTS",
                        help="print the tables of these record files, run nothing")
    parser.add_argument("--pipelines", help="run only these (comma-separated; default all "
                        "of PIPELINES)")
    parser.add_argument("--quick", action="store_true",
                        help="one seed, K = 3 with 4 clients per group, feature shift")
    parser.add_argument("--base", default="default",
                        help="the pipeline the paired table compares the others against")
    args = parser.parse_args(argv)
    if args.table:
        rows = [json.loads(line) for path in args.table for line in open(path)]
    else:
        seeds = int_list(args.seeds)
        pipelines = {n: PIPELINES[n] for n in (args.pipelines.split(",") if args.pipelines
                                                else PIPELINES)}
        todo = (list(federations(seeds[:1], (3,), (4,), ("feature",))) if args.quick
                else list(federations(seeds)))
        rows = []
        if args.out and Path(args.out).exists():
            rows = [json.loads(line) for line in open(args.out)]
        done = {(r["seed"], r["k"], r["per"], r["shift"]) for r in rows}
        start = time.process_time()
        for key in todo:
            if key in done:
                continue
            rows.append(run_one(*key, pipelines=pipelines))
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(rows[-1]) + "\n")
        wanted = set(todo)
        rows = [r for r in rows if (r["seed"], r["k"], r["per"], r["shift"]) in wanted]
        print(f"cpu {time.process_time() - start:.1f} s (this process), seeds {seeds} "
              f"(design: {list(DESIGN_SEEDS)}; held out: {FRESH_SEEDS[0]}-{FRESH_SEEDS[-1]}, "
              f"{GROUPS_FRESH_SEEDS[0]}-{GROUPS_FRESH_SEEDS[-1]})")
    names = [n for n in PIPELINES if all(n in r["rules"] for r in rows)]
    print("\n".join(table(rows, names)))
    print()
    print("\n".join(paired(rows, [n for n in names if n != args.base], base=args.base)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

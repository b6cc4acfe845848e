"""FMCL's class-mix rule against the additive rule, frozen before its fresh seeds (issue 24).

Not a speed benchmark. ``fmcl.choose_clusters(rule="additive_mix")`` (twenty-sixth pass)
runs the additive client-effect test at 0.04 and, where it keeps one cluster, tests the
clients' class mixes at 0.01 (the calibrated rule's ``axis_ci`` test on the squared L1
distances of the class weights, read from the class overlap the coordinator learns). On
the grid's FMCL cells of seeds 1000-1002 and 2000-2002 (seen before, design data here) it
found K = 2 in 744 of the 864 planted runs against the additive rule's 721 (under label
shift 150 of 216 against 126) and kept one cluster in 172 of the 180 iid federations
against 173; in the class-sets regime (seeds 4000-4004, seen before) 22 of 30 K = 1 runs
against 24, and 81 of 90 K >= 2 runs against 81. The split of the level (0.04 and 0.01)
was chosen among four on those seeds.

:data:`VERDICT` was frozen with :data:`GRID_SEEDS` and :data:`CLASS_SET_SEEDS` before any of
them ran (never used by any FMCL run); :func:`verdict` computes it from the records.
On those seeds it **does not hold** (docs/adapters.md, "FMCL's class-mix rule, frozen and
judged"): planted grid runs 591 of 720 against 570 (better), iid 144 of 150 against 145,
class-sets K >= 2 82 of 90 against 82, but class-sets K = 1 20 of 30 against 28 (worse):
one-domain federations whose clients share dominant classes are split by their class
mixes. ``"additive_mix"`` stays an option.

Usage (JSON lines appended to ``--out``, resumed; ``--table`` prints the counts and the
verdict)::

    python benchmarks/_fmcl_class_mix.py --grid --seeds 6000-6002 --out A
    python benchmarks/_fmcl_class_mix.py --class-sets --seeds 4005-4009 --out B
    python benchmarks/_fmcl_class_mix.py --table A B ...
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: The two rules, the default first.
RULES = ("additive", "additive_mix")
#: Fresh seeds of the grid's FMCL cells and of the class-sets regime.
GRID_SEEDS = (6000, 6004)
CLASS_SET_SEEDS = (4005, 4009)
#: The grid's FMCL cells per seed (bench_k_selection's held-out grid for FMCL).
GRID_CLIENTS, GRID_ROWS, GRID_CLASSES = (6, 20, 100), (20, 50, 500), (2, 10)
GRID_IID_CLIENTS = (6, 20, 100, 300, 500)
#: Runs per seed a complete verdict counts.
RUNS_PER_SEED = {"planted": 144, "iid": 30, "class_sets_one": 6, "class_sets_many": 18}
VERDICT = (
    "fmcl rule 'additive_mix' against 'additive' (the default), paired on the same runs of "
    "fresh seeds (the grid's FMCL cells, 6000-6004: 720 planted K = 2 runs and 150 iid "
    "federations of 6-500 clients; the class-sets regime, 4005-4009: 30 K = 1 and 90 K >= 2 "
    "runs): it holds if K is right in more planted grid runs by more than the paired noise "
    "(two standard errors of the mean paired difference, times the runs), the iid grid "
    "runs keep one cluster in at least 143 of 150 (95 %) and are not worse beyond the "
    "noise, and neither class-sets count is worse beyond the noise. If it holds, "
    "'additive_mix' becomes FMCL's default rule in a later pass (every pipeline passing the "
    "overlap it already learns); if not, it stays an option")


def _ks(distances, overlap) -> dict:
    """Each rule's K on one D."""
    from omnifc.adapters import fmcl

    return {rule: int(fmcl.fmcl_server(distances, rule=rule, overlap=overlap).n_clusters)
            for rule in RULES}


def grid_records(seed: int, cache=None) -> list[dict]:
    """The grid's FMCL cells of one seed: per cell the planted K and each rule's K."""
    import bench_k_selection as grid

    out = []
    for cell in grid.cells(GRID_CLIENTS, GRID_ROWS, GRID_CLASSES, GRID_IID_CLIENTS):
        rec = grid.cached_distances(cell, seed, cache, adapters=("fmcl",))
        out.append({"kind": "grid", "run": [*cell, seed],
                    "planted": int(len(set(rec["groups"].tolist()))),
                    **_ks(rec["fmcl"], rec["overlap"])})
    return out


def class_set_records(seed: int) -> list[dict]:
    """The class-sets regime of one seed (``_k_class_sets``' runs): per run the planted K
    and each rule's K."""
    import _k_class_sets as cs
    from omnifc.adapters import fmcl

    out = []
    for per in cs.CLIENTS_PER_DOMAIN:
        for shift in fmcl.SHIFTS:
            for k in cs.DOMAINS:
                clients, _ = fmcl.synthetic_domains(n_domains=k, clients_per_domain=per,
                                                    samples=cs.SAMPLES, shift=shift,
                                                    seed=seed)
                sig = [fmcl.signature(x, y, 10) for x, y in clients]
                means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
                out.append({"kind": "class_sets", "run": [per, shift, k, seed], "planted": k,
                            **_ks(fmcl.fmcl_distances(means, weights),
                                  fmcl.class_overlap(weights))})
    return out


def _groups(records) -> dict:
    """The records by verdict group (a run given twice counts once)."""
    unique = {(r["kind"], tuple(r["run"])): r for r in records}.values()
    out = {"planted": [], "iid": [], "class_sets_one": [], "class_sets_many": []}
    for r in unique:
        if r["kind"] == "grid":
            out["iid" if r["run"][0] == "none" else "planted"].append(r)
        else:
            out["class_sets_one" if r["planted"] == 1 else "class_sets_many"].append(r)
    return out


def verdict(records) -> dict:
    """:data:`VERDICT` on the records of its seeds (others ignored): per group the paired
    counts (``bench_k_selection.paired_counts``: the default's and the candidate's K right,
    the runs only the candidate / only the default gets, the noise, the candidate's verdict
    against the default), and ``"verdict"``: ``"holds"``, ``"does not hold"`` or
    ``"incomplete"`` while a run of the seeds is missing."""
    import bench_k_selection as grid

    (g0, g1), (c0, c1) = GRID_SEEDS, CLASS_SET_SEEDS
    mine = [r for r in records
            if (r["kind"] == "grid" and g0 <= r["run"][-1] <= g1)
            or (r["kind"] == "class_sets" and c0 <= r["run"][-1] <= c1)]
    out = {}
    for name, runs in _groups(mine).items():
        a = [int(r["additive"] == r["planted"]) for r in runs]
        b = [int(r["additive_mix"] == r["planted"]) for r in runs]
        out[name] = dict(zip(("default", "candidate", "plus", "minus", "noise", "verdict"),
                             grid.paired_counts(a, b)), runs=len(runs))
    want = {"planted": g1 - g0 + 1, "iid": g1 - g0 + 1, "class_sets_one": c1 - c0 + 1,
            "class_sets_many": c1 - c0 + 1}
    if any(out[k]["runs"] != RUNS_PER_SEED[k] * want[k] for k in want):
        out["verdict"] = "incomplete"
        return out
    fine = ("better", "tie within noise")
    holds = (out["planted"]["verdict"] == "better"
             and out["iid"]["candidate"] >= 143 and out["iid"]["verdict"] in fine
             and out["class_sets_one"]["verdict"] in fine
             and out["class_sets_many"]["verdict"] in fine)
    out["verdict"] = "holds" if holds else "does not hold"
    return out


def table(records) -> list[str]:
    """The paired counts per group and the verdict, as ``--table`` prints them."""
    v = verdict(records)
    lines = ["| runs | additive (default) | additive_mix | mix only / additive only | noise "
             "| additive_mix against additive |", "|---|---|---|---|---|---|"]
    for name in ("planted", "iid", "class_sets_one", "class_sets_many"):
        g = v[name]
        lines.append(f"| {name} ({g['runs']}) | {g['default']} | {g['candidate']} | "
                     f"{g['plus']} / {g['minus']} | {g['noise']:.1f} | {g['verdict']} |")
    lines.append(f"verdict (VERDICT): {v['verdict']}")
    return lines


def main(argv=None) -> int:
    from _common import int_list
    from flux_noise_level import append_records, read_records

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--grid", action="store_true", help="the grid's FMCL cells")
    kind.add_argument("--class-sets", action="store_true", help="the class-sets regime")
    kind.add_argument("--table", nargs="+", metavar="FILE", help="counts and verdict")
    parser.add_argument("--seeds")
    parser.add_argument("--out")
    parser.add_argument("--cache", help="the grid's D cache (bench_k_selection --cache)")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(table(read_records(args.table))))
        return 0
    if not (args.out and args.seeds):
        parser.error("--seeds and --out are needed with --grid and --class-sets")
    seen = set()
    if os.path.exists(args.out):
        seen = {(r["kind"], tuple(r["run"])) for r in read_records([args.out])}
    for seed in int_list(args.seeds):
        kind_name = "grid" if args.grid else "class_sets"
        if any(k == kind_name and run[-1] == seed for k, run in seen):
            continue                               # a seed's records are written together
        records = grid_records(seed, args.cache) if args.grid else class_set_records(seed)
        append_records(args.out, records, seen)
    print("\n".join(table(read_records([args.out]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A design look (issue 24, twenty-first pass): how many degrees of freedom FLUX's noise
estimate needs.

Not a speed benchmark, not a verdict. The default (``flux.SPLIT_MIN_P_RECIPE``) reads the
descriptors' noise covariance from D alone, from one half-to-half difference per client;
the recipe (``flux.noise_whitening``) pools every client's jackknife over its rows, but the
coordinator learns that pooled noise. Between the two: the *delete-a-group jackknife*.
Every client splits its rows at random into ``k`` groups and computes the descriptor of its
rows without each group (``k`` descriptors, each of about ``(k - 1) / k`` of its rows, so
with the full descriptor's noise shape); their spread, times ``(k - 1) / k``, estimates
the full descriptor's noise covariance with ``k - 1`` degrees of freedom per client
(Efron & Stein 1981; with ``k`` = the rows it is the recipe's jackknife exactly). Pooled
and whitened as the recipe whitens (``flux.noise_whitening``), then the default's rule
(``calibrated_k``, ``statistic="axis_or_gap"``, level 0.01, B = 199).

Plaintext, in floating point: the question is the estimate, not the protocol. A secure
form that needs no trust would send the ``k`` descriptors through D, as the split halves
are sent, and read the within-client deviations from D's embedding; the coordinator would
then learn distances between descriptors that differ by ``rows / k`` rows.

Usage::

    python benchmarks/_flux_noise_groups.py --seeds 3317-3328 --groups 4,10 --out FILE
    python benchmarks/_flux_noise_groups.py --table FILE [FILE ...]

The seeds it was looked at on, 3317-3328, are design data (the fourteenth pass's default was
judged on them); ``DELETE_GROUP_VERDICT`` was frozen with ``FRESH_SEEDS`` before those ran.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_k_selection as grid  # noqa: E402
from _common import int_list  # noqa: E402

from omnifc.adapters import flux  # noqa: E402
from omnifc.adapters._calibrated_k import calibrated_k  # noqa: E402
from omnifc.adapters.flux._split_half import squared_distances as sq  # noqa: E402

#: The default's rule (bench_k_selection's ``flux:axis_or_gap@0.01``).
RULE = {"statistic": "axis_or_gap", "alpha": grid.GOAL_ALPHA, "references": 199}
FORM = "weighted_all"
#: The cells of the design look (docs/adapters.md, twenty-first pass): every shift, binary,
#: 6 and 20 clients, 20 and 50 rows, both group-size shapes; and the iid cells of those
#: sizes with 2 and 10 classes.
CELLS = tuple([(s, n, r, i, 2) for s in grid.SHIFTS for n in (6, 20) for r in (20, 50)
               for i in (1, 10)]
              + [("none", n, r, 1, c) for n in (6, 20) for r in (20, 50) for c in (2, 10)])
#: Written before these seeds were generated (the grid's fresh seeds resume at 3421).
FRESH_SEEDS = tuple(range(3421, 3433))
DELETE_GROUP_VERDICT = (
    "on FRESH_SEEDS, the cells CELLS, paired run by run: groups_10 against split on "
    "'planted, all' is 'better' (bench_k_selection.paired_counts), and on the iid runs it is "
    "not 'worse'. If both hold, the next pass builds its secure form (the k descriptors "
    "through D) and judges it as a default candidate on the whole grid; else the "
    "delete-a-group jackknife is dropped.")


def delete_group_descriptors(latents, labels, projection, n_classes: int, groups: int, rng,
                             *, form: str = FORM) -> np.ndarray:
    """One client's ``groups`` descriptors (``groups x p``), each of its rows without one
    of ``groups`` random disjoint groups (``numpy.array_split`` of a permutation by
    ``rng``). The library's ``flux.split_descriptors(groups=k)`` (twenty-second pass) cuts
    the pieces the other way round (the larger last, ``G_j`` without piece ``k - 1 - j``) so
    that ``k = 2`` is the split halves bit for bit; this look keeps its own draws."""
    z, y = np.asarray(latents), np.asarray(labels)
    if not 2 <= groups <= len(z):
        raise ValueError(f"groups must be in [2, rows = {len(z)}], got {groups}")
    order = rng.permutation(len(z))
    out = []
    for left_out in np.array_split(order, groups):
        kept = np.setdiff1d(order, left_out)
        out.append(flux.descriptor(z[kept], y[kept], projection, n_classes, form=form))
    return np.stack(out)


def group_jackknife(descriptors) -> np.ndarray:
    """The delete-a-group jackknife covariance of the full descriptor from the ``k``
    delete-a-group descriptors: ``(k - 1) / k`` times the sum of their centred outer
    products."""
    x = np.asarray(descriptors, dtype=np.float64)
    k = x.shape[0]
    centred = x - x.mean(axis=0)
    return (k - 1) / k * (centred.T @ centred)


def pooled_group_noise(descriptors):
    """``(S, df)`` from the clients' :func:`delete_group_descriptors` (one ``k x p`` array
    each): their delete-a-group jackknife covariances, averaged, and their degrees of
    freedom (``k - 1`` per client), in ``flux.noise_whitening``'s input."""
    return (np.mean([group_jackknife(g) for g in descriptors], axis=0),
            len(descriptors) * (len(descriptors[0]) - 1))


def group_whitened_distances(distances, n: int, groups: int) -> np.ndarray:
    """What a coordinator could compute from D alone: ``distances`` is the squared-distance
    matrix of ``[G_1; ...; G_k; F]`` (``(k + 1) n`` rows, stacked: ``G_j`` the clients'
    descriptors without their ``j``-th group, ``F`` the full ones). Returns the ``n x n``
    squared distances of ``F`` whitened by the OAS-shrunk covariance of the ``n (k - 1)``
    within-client orthonormal (Helmert) contrasts in D's MDS embedding. Since the
    twenty-second pass the library's ``flux.split_whitened_distances(groups=k)`` (one
    home), whose contrasts are these times ``2 sqrt((k - 1) / k)``: rescaled here by
    ``4 (k - 1) / k`` (at ``k = 2`` twice the split halves'; a constant, K is the same)."""
    d = np.asarray(distances, dtype=np.float64)
    if groups < 2 or d.shape != ((groups + 1) * n, (groups + 1) * n):
        raise ValueError(f"D must be (k + 1) n square for k = {groups} >= 2 groups and "
                         f"n = {n} clients, got shape {d.shape}")
    return 4.0 * (groups - 1) / groups * flux.split_whitened_distances(d, n, groups=groups)


def run(cell, seed: int, groups, *, from_d: bool = False) -> dict:
    """K found on one run of the grid by the default's rule under each noise estimate: the
    split halves (the default's D, plaintext), the rows' jackknife (the recipe) and the
    delete-a-group jackknife with each number of ``groups``; ``from_d``: also that
    jackknife as a coordinator reading D alone would estimate it
    (:func:`group_whitened_distances`, ``groups_<k>_from_d``)."""
    shift, n, rows, imbalance, classes = cell
    clients, _, c, latents, m = grid.encoded_run(shift, n, rows, imbalance, classes, seed)
    labels = [cl.y_train for cl in clients]
    proj, desc = grid.flux_descriptors(clients, latents, c, flux.flux_components(
        c, grid.ENCODER_DIM), FORM, m)
    a, b = grid.split_halves(latents, labels, proj, c, FORM, seed)
    k = {"split": calibrated_k(flux.split_whitened_distances(
        sq(np.vstack([a, b, desc])), n), **RULE).k}
    recipe = grid.flux_whitening(clients, latents, c, proj, FORM, m)
    k["rows"] = calibrated_k(sq(recipe.apply(desc)), **RULE).k
    for g in groups:
        rng = np.random.default_rng(seed)
        left = [delete_group_descriptors(z, y, proj, c, g, rng) for z, y in zip(latents, labels)]
        noise, df = pooled_group_noise(left)
        k[f"groups_{g}"] = calibrated_k(sq(flux.noise_whitening(noise, df).apply(desc)),
                                        **RULE).k
        if from_d:
            stacked = np.vstack([np.stack([a[j] for a in left]) for j in range(g)] + [desc])
            k[f"groups_{g}_from_d"] = calibrated_k(group_whitened_distances(
                sq(stacked), n, g), **RULE).k
    return {"cell": list(cell), "seed": seed, "planted": 1 if shift == "none" else 2, "k": k}


def table(records) -> list[str]:
    """Per cell, how often each estimate finds the planted K (runs where it was computed)."""
    names = list(dict.fromkeys(name for r in records for name in r["k"]))
    cells = collections.defaultdict(collections.Counter)
    for r in records:
        counts = cells[tuple(r["cell"])]
        counts["runs"] += 1
        for name, found in r["k"].items():
            counts[name] += found == r["planted"]
    lines = ["| cell (shift, clients, rows, imbalance, classes) | runs | "
             + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for cell, counts in cells.items():
        lines.append(f"| {', '.join(map(str, cell))} | {counts['runs']} | "
                     + " | ".join(str(counts[name]) for name in names) + " |")
    return lines


def verdict_lines(records, a: str = "split", b: str = "groups_10") -> list[str]:
    """:data:`DELETE_GROUP_VERDICT` computed on ``records``: ``b`` against ``a``, paired run
    by run on the planted and on the iid runs, and whether the verdict holds."""
    lines, outcome = [], {}
    for name, planted in (("planted, all", 2), ("iid", 1)):
        sub = [r for r in records if r["planted"] == planted and a in r["k"] and b in r["k"]]
        if not sub:
            continue
        got = grid.paired_counts([int(r["k"][a] == planted) for r in sub],
                                 [int(r["k"][b] == planted) for r in sub])
        outcome[name] = got[5]
        lines.append(f"{name}: {a} {got[0]}/{len(sub)}, {b} {got[1]}/{len(sub)}, "
                     f"+{got[2]} / -{got[3]}, noise {got[4]:.1f}: {b} {got[5]}")
    holds = outcome.get("planted, all") == "better" and outcome.get("iid") not in (None, "worse")
    lines.append(f"verdict (DELETE_GROUP_VERDICT): {'holds' if holds else 'does not hold'}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", help="comma-separated shift-clients-rows-imbalance-"
                        "classes (default: CELLS, the design look's)")
    parser.add_argument("--seeds", default="3317-3328")
    parser.add_argument("--groups", default="4,10")
    parser.add_argument("--from-d", action="store_true",
                        help="also the delete-a-group noise read from D alone")
    parser.add_argument("--out", help="JSON lines, resumed")
    parser.add_argument("--table", nargs="+", metavar="FILE", help="print the table, run nothing")
    args = parser.parse_args(argv)
    if args.table:
        records = [json.loads(line) for path in args.table for line in open(path)]
        print("\n".join(table(records) + verdict_lines(records)))
        return 0
    groups = int_list(args.groups)
    seeds = int_list(args.seeds)
    cells = [] if args.cells else list(CELLS)
    for text in args.cells.split(",") if args.cells else ():
        shift, *sizes = text.split("-")
        if shift not in ("none", *grid.SHIFTS) or len(sizes) != 4:
            parser.error(f"a cell is shift-clients-rows-imbalance-classes, got {text!r}")
        cells.append((shift, *map(int, sizes)))
    records, done = [], set()
    if args.out and os.path.exists(args.out):
        records = [json.loads(line) for line in open(args.out)]
        done = {(tuple(r["cell"]), r["seed"]) for r in records}
    for cell in cells:
        for seed in seeds:
            if (cell, seed) in done:
                continue
            rec = run(cell, seed, groups, from_d=args.from_d)
            records.append(rec)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
    print("\n".join(table(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""FLUX's automatic K on digits: the planted-K grid of docs/adapters.md (section FLUX).

Not a speed benchmark. For every setting (shift x K x seed x clients per group) it runs
``flux.run_flux``'s client side once (FedAvg warm-up encoder -> descriptors -> plaintext D,
equal to the secure D bit for bit, tested), caches D, and then applies every K rule to the
cached D: a rule "finds K" when it returns exactly the planted groups (K clusters, ARI 1).

Usage::

    python benchmarks/flux_k_grid.py [--seeds 0-2] [--per-group 5] [--new-per-group 2]
                                     [--shifts label,...] [--ks 2,3,5] [--cache DIR]
                                     [--rules ward,dbscan_gap,...] [--verbose] [--quick]

``--quick``: one setting (label shift, K = 2, seed 0), seconds; the smoke test runs it.
Rules (applied to the same cached D): ``calibrated`` (the default since issue 24),
``calibrated_axis`` (the same test on the top axis's 2-means cluster index),
``calibrated_unimodal`` (that statistic against the data's least-smooth unimodal top axis),
``ward`` (the previous default), ``dbscan_gap``,
``dbscan_knee`` on the default descriptor's D; ``paper_ward``, ``paper_dbscan_gap``,
``paper_knee`` (the paper's pipeline) on the paper descriptor's MinMax-scaled D.

The cache (``--cache``, default /tmp/flux_k_grid) holds one .npz per setting, so re-running
with other rules costs seconds.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from sklearn.metrics import adjusted_rand_score

from omnifc import fl
from omnifc.adapters import flux

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import int_list  # noqa: E402

SHIFTS = ("label", "feature", "concept", "conditional")
#: ``--shifts none``: iid clients (one group of ``--per-group`` clients, K = 1), the
#: calibration of the rules' "one cluster" threshold.


def distances(shift: str, k: int, seed: int, per_group: int, new_per_group: int,
              cache: str) -> dict:
    """D of the default descriptor (weighted, 'none') and of the paper's (paper, 'ranges')."""
    path = os.path.join(cache, f"{shift}_k{k}_s{seed}_g{per_group}_n{new_per_group}.npz")
    if os.path.exists(path):
        return dict(np.load(path))
    data = fl.make_federated("digits", shift=shift, n_groups=k, clients_per_group=per_group,
                             new_per_group=new_per_group, seed=seed)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    out = {"groups": data.groups}
    for name, form, norm in (("default", "weighted", "none"), ("paper", "paper", "ranges")):
        run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                            descriptor_form=form, normalization=norm)
        out[name] = run.distances
    np.savez(path, **out)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--per-group", type=int, default=5)
    parser.add_argument("--new-per-group", type=int, default=2)
    parser.add_argument("--shifts", default=",".join(SHIFTS))
    parser.add_argument("--ks", default="2,3,5")
    parser.add_argument("--cache", default="/tmp/flux_k_grid")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--verbose", action="store_true", help="print K found per run")
    parser.add_argument("--quick", action="store_true",
                        help="one setting (label shift, K = 2, seed 0): a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.shifts, args.ks = "0", "label", "2"
    os.makedirs(args.cache, exist_ok=True)
    seeds = int_list(args.seeds)
    shifts = args.shifts.split(",")
    ks = [int(k) for k in args.ks.split(",")]
    rules = args.rules.split(",")
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        parser.error(f"unknown rules {unknown}; choose from {sorted(RULES)}")
    found = {(r, s): 0 for r in rules for s in shifts}
    runs = {s: 0 for s in shifts}
    for shift in shifts:
        for k in ([1] if shift == "none" else ks):
            for seed in seeds:
                rec = distances(shift, k, seed, args.per_group, args.new_per_group, args.cache)
                runs[shift] += 1
                line = []
                for r in rules:
                    labels = RULES[r](rec)
                    hit = (len(set(labels.tolist())) == k
                           and adjusted_rand_score(rec["groups"], labels) == 1.0)
                    found[(r, shift)] += hit
                    line.append(f"{r}={len(set(labels.tolist()))}{'' if hit else '!'}")
                if args.verbose:
                    print(f"{shift:12s} K={k} seed={seed:2d}  " + " ".join(line))
    print(f"seeds {args.seeds}, {args.per_group} clients per group, K in {ks}")
    print("rule".ljust(28) + "".join(s.ljust(13) for s in shifts) + "total")
    for r in rules:
        row = [found[(r, s)] for s in shifts]
        print(r.ljust(28) + "".join(f"{v}/{runs[s]}".ljust(13) for v, s in zip(row, shifts))
              + f"{sum(row)}/{sum(runs.values())}")
    return 0


#: rule name -> labels from the cached D ("default": weighted descriptor, unscaled D;
#: "paper": the paper's descriptor, MinMax 'ranges').
RULES = {
    "calibrated": lambda rec: flux.cluster_clients(rec["default"]).labels,
    "calibrated_axis": lambda rec: flux.cluster_clients(rec["default"],
                                                        k_rule="calibrated_axis").labels,
    "calibrated_unimodal": lambda rec: flux.cluster_clients(
        rec["default"], k_rule="calibrated_unimodal").labels,
    "ward": lambda rec: flux.cluster_clients(rec["default"], k_rule="ward").labels,
    "dbscan_gap": lambda rec: flux.cluster_clients(rec["default"], k_rule="dbscan").labels,
    "dbscan_knee": lambda rec: flux.cluster_clients(rec["default"], k_rule="dbscan",
                                                    eps_rule="knee").labels,
    "paper_ward": lambda rec: flux.cluster_clients(rec["paper"], k_rule="ward").labels,
    "paper_dbscan_gap": lambda rec: flux.cluster_clients(rec["paper"], k_rule="dbscan").labels,
    "paper_knee": lambda rec: flux.cluster_clients(rec["paper"], k_rule="dbscan",
                                                   eps_rule="knee").labels,
}

if __name__ == "__main__":
    sys.exit(main())

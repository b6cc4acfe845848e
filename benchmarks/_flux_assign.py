"""FLUX's unseen-client assignment: the calibrated (conformal) rule against the nearest centroid.

Not a speed benchmark. For every setting and seed it runs ``flux.run_flux`` once
(plaintext D: equal to the secure D bit for bit, tested) and applies both assignment rules
to the same prefix distances and the same models, so the two rules' unseen-client
accuracies are paired. Settings:

- the reproduction's unseen-client cases (docs/reproduction/flux.md: digits, 4 training
  clients per group; here 4 unseen clients per group instead of 2, for more test rows):
  ``feature-3``, ``feature-2``, ``conditional-2``, ``concept-2``, ``label-3``;
- ``feature-2-big``: feature shift, K = 2, 20 training clients per group (clusters large
  enough for the test to reject: n + 1 >= 1 / alpha);
- ``new-shift`` (planted): feature shift with 3 rotations, the training clients from groups
  0 and 1 only (20 each), unseen clients from all three: group 2's rotation is a shift no
  training client has; reported separately (``new-shift:unseen-group`` and
  ``new-shift:seen-groups``).

For clients sent to the global model it also reports the accuracy the FedAvg of the
cluster models (weighted by training rows) would give, the alternative global model.

Usage::

    python benchmarks/_flux_assign.py --seeds 5101-5103 [--settings feature-2,...] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from omnifc import fl
from omnifc.adapters import flux
from omnifc.experiments.reproduce._verdicts import paired_noise, verdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import int_list  # noqa: E402

REPRODUCTION = (("feature", 3), ("feature", 2), ("conditional", 2), ("concept", 2),
                ("label", 3))
SETTINGS = tuple(f"{s}-{k}" for s, k in REPRODUCTION) + ("feature-2-big", "new-shift")


def _data(setting: str, seed: int):
    if setting == "new-shift":
        full = fl.make_federated("digits", shift="feature", n_groups=3, clients_per_group=20,
                                 new_per_group=4, seed=seed)
        keep = full.groups < 2
        return fl.FederatedDataset(
            clients=[c for c, k in zip(full.clients, keep) if k], new_clients=full.new_clients,
            groups=full.groups[keep], new_groups=full.new_groups, n_features=full.n_features,
            n_classes=full.n_classes, shift=full.shift, n_groups=2, info=full.info)
    if setting == "feature-2-big":
        return fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=20,
                                 new_per_group=4, seed=seed)
    shift, k = setting.rsplit("-", 1)
    return fl.make_federated("digits", shift=shift, n_groups=int(k), clients_per_group=4,
                             new_per_group=4, seed=seed)


def _accuracy(model, run, labels, clients, averaged):
    models = list(run.models) + [run.global_model if averaged is None else averaged]
    index = np.where(labels == flux.GLOBAL, len(run.models), labels)
    return fl.mean_accuracy(model, models, index, clients)


def measure(setting: str, seed: int) -> dict:
    data = _data(setting, seed)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=seed, secure=False)
    rows = np.array([sum(c.y_train.size for c, l in zip(data.clients, run.labels) if l == k)
                     for k in range(run.n_clusters)], dtype=float)
    averaged = sum(w * m for w, m in zip(rows / rows.sum(), run.models))
    out = {}
    parts = {"": np.ones(len(data.new_clients), bool)}
    if setting == "new-shift":
        parts = {":unseen-group": data.new_groups == 2, ":seen-groups": data.new_groups < 2}
    for rule in flux.ASSIGN_RULES:
        a = flux.assign_with_evidence(run.prefix, run.labels, rule=rule)
        for tag, mask in parts.items():
            clients = [c for c, k in zip(data.new_clients, mask) if k]
            labels = a.labels[mask]
            out[(setting + tag, rule)] = dict(
                acc=_accuracy(model, run, labels, clients, None),
                acc_avg=_accuracy(model, run, labels, clients, averaged),
                fallback=int(np.sum(labels == flux.GLOBAL)), n=int(mask.sum()),
                k=run.n_clusters)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="5101-5103")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--quick", action="store_true", help="feature-2, one seed")
    args = parser.parse_args(argv)
    seeds = [5101] if args.quick else int_list(args.seeds)
    settings = ["feature-2"] if args.quick else args.settings.split(",")
    results: dict = {}
    for setting in settings:
        for seed in seeds:
            start = time.time()
            for key, value in measure(setting, seed).items():
                results.setdefault(key, []).append(value)
                print(f"{key[0]:26s} seed {seed} {key[1]:10s} K={value['k']} "
                      f"acc {value['acc']:.3f} (avg-global {value['acc_avg']:.3f}) "
                      f"fallback {value['fallback']}/{value['n']}", flush=True)
            print(f"  ({time.time() - start:.1f} s)", flush=True)
    print("\nsetting                    calibrated  nearest  diff   noise  verdict  "
          "fallback  (with averaged global)")
    names = sorted({k[0] for k in results}, key=lambda s: [*SETTINGS, s].index(s.split(":")[0]))
    for name in names:
        cal = [r["acc"] for r in results[(name, "calibrated")]]
        near = [r["acc"] for r in results[(name, "nearest")]]
        avg = [r["acc_avg"] for r in results[(name, "calibrated")]]
        noise = paired_noise(cal, near)
        diff = float(np.mean(cal) - np.mean(near))
        fb = sum(r["fallback"] for r in results[(name, "calibrated")])
        total = sum(r["n"] for r in results[(name, "calibrated")])
        print(f"{name:26s} {np.mean(cal):.3f}       {np.mean(near):.3f}    {diff:+.3f}  "
              f"{noise:.3f}  {verdict(float(np.mean(cal)), float(np.mean(near)), noise):7s}  "
              f"{fb}/{total}    {np.mean(avg):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CLoVE with K known under label shift: how far the runs are from what the data allow.

Not a speed benchmark. The runs are docs/adapters.md's CLoVE study (issue 24): a 16-unit MLP,
unequal groups (5 clients in group 0, 2 in each other), 150 training and 30 test rows per
client, breast cancer K = 2, wine K = 2 and 3, digits K = 2, 3 and 5, label shift. Per run:

- ``bayes``: a reference **told each group's class prior** ``p_g`` (replayed from the
  generator's seed), the clients' concentration and the group sizes. Under label shift the
  groups differ only in ``P(Y)``: rows of a class come from one pool whatever the group, so
  a client's label counts (train and test rows) are a sufficient statistic for its group,
  with likelihood ``DirichletMultinomial(counts; 50 p_g + 1e-3)``
  (:func:`label_count_loglik`). The reference assigns the clients by the joint maximum of
  that likelihood with the group sizes fixed (:func:`bayes_assignment`: the assignment most
  likely to be the truth). Nothing a rule computes from the clients' data (loss vectors
  included) carries more about the groups than these counts, and the rule must also
  estimate what this reference is told.
- ``histograms``: a label-free reference, k-means (50 initializations, K known) on the
  clients' training label histograms.
- ``clove`` (with ``--clove``): ``clove.run_clove_fl`` with its defaults, K known, 8 rounds,
  plaintext (secure = plaintext is tested): minutes.

Each counts the runs whose clients are all assigned to their planted group (ARI 1).

Usage::

    python benchmarks/clove_label_reference.py [--seeds 70-79] [--clove] [--quick]

Seeds 70-79 are the study's fresh held-out seeds; 50-59 its design seeds.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import gammaln
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from omnifc import fl

CASES = (("breast_cancer", 2), ("wine", 2), ("wine", 3), ("digits", 2), ("digits", 3),
         ("digits", 5))
#: make_federated's defaults behind the runs (label shift): group prior Dirichlet(0.5),
#: client prior Dirichlet(50 p_g + 1e-3).
GROUP_ALPHA, CLIENT_CONCENTRATION, PRIOR_FLOOR = 0.5, 50.0, 1e-3


def case(name: str, k: int, seed: int, shift: str = "label", train_samples: int = 150):
    """The clients of one run (5 of group 0, the first 2 of every other group), their
    planted groups, the model and K initial models, and the class count (as in the study;
    the CLoVE loop tests build their cases here too)."""
    data = fl.make_federated(name, shift=shift, n_groups=k, clients_per_group=5,
                             new_per_group=0, train_samples=train_samples, test_samples=30,
                             seed=seed)
    seen = np.zeros(k, dtype=np.int64)
    keep = []
    for i, cl in enumerate(data.clients):
        if cl.group == 0 or seen[cl.group] < 2:
            keep.append(i)
            seen[cl.group] += 1
    clients = [data.clients[i] for i in keep]
    model = fl.MLP(data.n_features, 16, data.n_classes)
    return (clients, np.array([c.group for c in clients]), model,
            [model.init(seed * 100 + j) for j in range(k)], data.n_classes)


def group_priors(name: str, k: int, seed: int) -> np.ndarray:
    """The groups' class priors ``p_g`` that ``fl.make_federated(shift="label")`` draws:
    its generator's first two calls replayed (the pool order, then the priors)."""
    _, y = fl.load_pool(name)
    rng = np.random.default_rng(seed)
    rng.permutation(y.size)
    return rng.dirichlet(np.full(int(y.max()) + 1, GROUP_ALPHA), size=k)


def label_count_loglik(counts, alpha) -> float:
    """log DirichletMultinomial(counts; alpha), without the multinomial coefficient (the
    same for every group)."""
    counts, alpha = np.asarray(counts, dtype=np.float64), np.asarray(alpha, dtype=np.float64)
    return float(gammaln(alpha.sum()) - gammaln(counts.sum() + alpha.sum())
                 + (gammaln(counts + alpha) - gammaln(alpha)).sum())


def bayes_assignment(loglik, sizes) -> np.ndarray:
    """The assignment of clients to groups with ``sizes[g]`` clients in group g that
    maximizes the summed log-likelihood ``loglik[i, g]`` (a linear assignment of clients to
    the groups' slots).

    >>> bayes_assignment(np.log([[0.9, 0.1], [0.6, 0.4], [0.7, 0.3]]), [2, 1]).tolist()
    [0, 1, 0]
    """
    loglik = np.asarray(loglik, dtype=np.float64)
    slots = np.repeat(np.arange(len(sizes)), sizes)
    rows, cols = linear_sum_assignment(-loglik[:, slots])
    return slots[cols[np.argsort(rows)]]


def references(name: str, k: int, seed: int):
    """``(bayes exact, histograms exact, clients, groups, model, inits)`` of one run."""
    clients, groups, model, inits, n_classes = case(name, k, seed)
    priors = group_priors(name, k, seed)
    counts = [np.bincount(np.concatenate([c.y_train, c.y_test]), minlength=n_classes)
              for c in clients]
    loglik = np.array([[label_count_loglik(cn, CLIENT_CONCENTRATION * priors[g] + PRIOR_FLOOR)
                        for g in range(k)] for cn in counts])
    bayes = bool((bayes_assignment(loglik, np.bincount(groups, minlength=k)) == groups).all())
    hist = np.array([np.bincount(c.y_train, minlength=n_classes) / len(c.y_train)
                     for c in clients])
    labels = KMeans(k, n_init=50, random_state=0).fit_predict(hist)
    return (bayes, bool(adjusted_rand_score(groups, labels) == 1), clients, groups, model,
            inits)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="70-79")
    parser.add_argument("--clove", action="store_true",
                        help="also run clove.run_clove_fl with its defaults (minutes)")
    parser.add_argument("--quick", action="store_true", help="seed 70, two cases")
    args = parser.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    seeds = [70] if args.quick else list(range(int(lo), int(hi or lo) + 1))
    cases = CASES[:2] if args.quick else CASES
    totals = {"bayes": 0, "histograms": 0, "clove": 0}
    runs = 0
    print("seed  data            K  bayes  histograms" + ("  clove" if args.clove else ""))
    for seed in seeds:
        for name, k in cases:
            bayes, hist, clients, groups, model, inits = references(name, k, seed)
            line = f"{seed:4d}  {name:14s} {k:2d}  {int(bayes):5d}  {int(hist):10d}"
            totals["bayes"] += bayes
            totals["histograms"] += hist
            if args.clove:
                from omnifc.adapters import clove

                run = clove.run_clove_fl(clients, model, inits, n_clusters=k, rounds=8,
                                         seed=seed, secure=False)
                exact = bool(adjusted_rand_score(groups, run.assignments[-1]) == 1)
                totals["clove"] += exact
                line += f"  {int(exact):5d}"
            runs += 1
            print(line, flush=True)
    summary = (f"all clients right (ARI 1): bayes (told the priors) {totals['bayes']}/{runs}, "
               f"histograms (label-free) {totals['histograms']}/{runs}")
    if args.clove:
        summary += f", clove (defaults) {totals['clove']}/{runs}"
    print(summary + f"; seeds {seeds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

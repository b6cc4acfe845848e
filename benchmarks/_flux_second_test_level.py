"""FLUX's second test at 4 to 6 clients: how often the union splits a federation of one
population (issue 24, twenty-seventh pass; descriptive, measured after the verdict).

Not a speed benchmark. The union (``flux.cluster_split_clients``, the default since the
twenty-seventh pass) was judged at six clients on the grid's real runs; it asks the
spiked-null test at four and five clients too. This counts, on synthetic Gaussian split
federations (``tests/oracles.split_federation``: 20 rows a client, 10 groups left out in
turn, 4 dimensions), how often the rule alone, the test and the union find more than one
cluster at the default level 0.01 with B = 199, for one population and for clients that
each differ by ``N(0, 0.3^2 I)``. Seed 45045 was used by nothing before.

Measured (100 federations per row, 2026-12-07): the test rejected in none of the 600; the
rule (and so the union) split 0 to 2 per row (docs/adapters.md, twenty-seventh pass).

Usage: ``python benchmarks/_flux_second_test_level.py [--runs 100] [--seed 45045]``
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: The federations' generator's seed (fresh when first run).
SEED = 45045


def counts(n: int, runs: int, rng, **effects) -> tuple[int, int, int]:
    """``(rule, test, union)``: of ``runs`` split federations of ``n`` clients drawn from
    ``rng`` (``effects``: ``split_federation``'s client effects), how many the rule alone,
    the spiked-null test (at the rule's level) and the union split."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    from oracles import split_federation, sq_distances

    from omnifc.adapters import flux

    rule = test = union = 0
    for i in range(runs):
        d = sq_distances(split_federation(rng, n, 20, 10, p=4, **effects))
        _, found = flux.cluster_split_clients(d, n, random_state=i)
        rule += found.decision.k > 1
        test += found.second_test is not None and found.second_test.p_value <= 0.01
        union += found.n_clusters > 1
    return rule, test, union


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    for n in (4, 5, 6):
        for name, effects in (("one population", {}), ("client effects 0.3", {"client_sd": 0.3})):
            rule, test, union = counts(n, args.runs, rng, **effects)
            print(f"{n} clients, {name}, {args.runs} federations: rule {rule}, test {test}, "
                  f"union {union}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

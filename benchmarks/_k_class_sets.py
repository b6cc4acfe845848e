"""FMCL's K rules where clients hold overlapping class sets of unequal sizes (issue 24).

``bench_k_selection.py --class-sets``: :func:`omnifc.adapters.fmcl.synthetic_domains`
(Dirichlet(0.1) labels, so most clients hold 1-3 of 10 classes; 300 samples per client;
frozen-encoder embeddings of dimension 8) with K in {1, 2, 3, 5} domains, 10 and 30 clients
per domain, the three domain shifts (rotation + offset, per-class offsets, permuted class
means). For each run the plaintext FMCL D (the secure path equals it bit for bit, tested
in tests/adapters/test_fmcl_exact.py) and every FMCL rule's K. Counts: K right per
(rule, clients per domain, shift, K = 1 or K >= 2).

Fresh held-out seeds for this regime: 4000-4004 (first run 2026-12-05, after the additive
rule was frozen); the FMCL rules were designed on seeds 0-4 (exchangeable null, geodesic
fill) and 900-902 (additive null).
"""

from __future__ import annotations

import numpy as np

from omnifc.adapters import fmcl

#: The rules compared (FMCL's), the domain counts, clients per domain and samples.
RULES = ("additive", "tested", "calibrated", "paper")
DOMAINS = (1, 2, 3, 5)
CLIENTS_PER_DOMAIN = (10, 30)
SAMPLES = 300
SEEDS = (4000, 4001, 4002, 4003, 4004)


def run(seed: int, n_domains: int, clients_per_domain: int, shift: str) -> dict:
    """Every rule's K on one federation: ``{rule: K}``.

    >>> out = run(4000, 2, 4, "offset")
    >>> sorted(out) == sorted(RULES) and all(k >= 1 for k in out.values())
    True
    """
    clients, _ = fmcl.synthetic_domains(n_domains=n_domains,
                                        clients_per_domain=clients_per_domain,
                                        samples=SAMPLES, shift=shift, seed=seed)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    d = fmcl.fmcl_distances(means, weights)
    out = {rule: fmcl.fmcl_server(d, rule=rule).n_clusters
           for rule in RULES if rule != "paper"}
    out["paper"] = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights, fill="paper"),
                                    rule="paper").n_clusters
    return out


def grid(seeds=SEEDS, domains=DOMAINS, clients=CLIENTS_PER_DOMAIN, shifts=None) -> dict:
    """``{(rule, clients per domain, shift, "K = 1" or "K >= 2"): [right, runs]}``."""
    counts: dict = {}
    for seed in seeds:
        for per in clients:
            for shift in shifts or fmcl.SHIFTS:
                for k in domains:
                    for rule, got in run(seed, k, per, shift).items():
                        key = (rule, per, shift, "K = 1" if k == 1 else "K >= 2")
                        cell = counts.setdefault(key, [0, 0])
                        cell[0] += int(got == k)
                        cell[1] += 1
    return counts


def report(counts: dict) -> list[str]:
    """Lines: per rule, K = 1 and K >= 2 right / runs, by clients per domain and in all."""
    def tally(rule, single, per=None) -> str:
        cells = [v for key, v in counts.items() if key[0] == rule and key[3] == single
                 and per in (None, key[1])]
        return f"{sum(v[0] for v in cells)}/{sum(v[1] for v in cells)}"

    lines = ["FMCL, overlapping class sets of unequal sizes (synthetic_domains, "
             "Dirichlet(0.1) labels): K right / runs"]
    for rule in RULES:
        parts = []
        for single in ("K = 1", "K >= 2"):
            parts += [f"{single}, {per}/domain {tally(rule, single, per)}"
                      for per in sorted({key[1] for key in counts})]
            parts.append(f"{single} all {tally(rule, single)}")
        lines.append(f"  fmcl:{rule:<11}" + "; ".join(parts))
    return lines

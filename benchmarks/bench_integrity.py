"""Benchmark of the integrity math (Reed-Solomon checks) against today's decoding sum.

Run ``python benchmarks/bench_integrity.py`` (a few minutes on 2 cores) or ``--quick``.
m = 7 responding parties, l = t = 1 (K = 3, r = 4), s = 2 checks kept (masked mode:
correct 1 wrong party per entry, or detect 2), p = 2^31 - 1. Shapes: the full matrix of
n = 2000 (4M entries) and a tile of 500 rows of n = 10000 (5M entries); a session is
many such tiles, so the ratios carry over. Every row is timed in alternation with its
baseline (medians of several runs) and reported as a ratio (row / baseline, lower is
better); verdicts are informational, and judged only at those two shapes (a ``--quick``
run, n = 600, prints its ratios without verdicts).

Rows (coordinator side unless stated):

* ``D + syndromes``: ``weighted_sums([c; mu_1; mu_2], U)``, one pass over the 7 uploads,
  against today's ``weighted_sum(c, U)`` of the same (7, entries) array.
* ``checked_sum honest``: the above plus the zero-syndrome scan, nothing flagged.
* ``checked_sum 1% bad``: one party wrong on 1% of the entries, located and corrected.
* ``decode``: the Berlekamp-Massey kernel alone on the flagged 1% (rate: flagged entries
  per second).
* ``party mask``: a party's masked upload ``integrity_upload`` (party 0's groups,
  t-robust for 1 colluder), against today's pairwise-masked
  upload with m-1 masks (``masked_upload``). PRG streams are not included: a party
  expands one stream per group it is in instead of one per other party (printed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (Row, median, print_environment, environment,  # noqa: E402
                     print_ratio_tables, time_round_robin, wrapped)

from finite_field import (LagrangeCode, ReedSolomonCheck, checked_sum,  # noqa: E402
                          choose_mask_groups, integrity_rows, integrity_upload,
                          masked_upload,
                          weighted_sum, weighted_sums)

PRIME = 2**31 - 1
PARTIES, CHECKS = 7, 2


def _rng():
    return np.random.default_rng(20261130)  # benchmark inputs only, never protocol noise


def _setup(entries: int):
    rng = _rng()
    code = LagrangeCode(segments=1, noise_segments=1, parties=PARTIES, prime=PRIME)
    responders = list(range(PARTIES))
    check = ReedSolomonCheck.for_responders(code, responders)
    c = code.decoding_weights(responders)
    # Honest codewords: g of degree 2 per entry, evaluated at the 7 points.
    coefficients = rng.integers(0, PRIME, size=(3, entries), dtype=np.int64)
    uploads = np.empty((PARTIES, entries), dtype=np.int64)
    for j, b in enumerate(code.betas):
        uploads[j] = weighted_sum([1, b, b * b % PRIME], coefficients, PRIME)
    return code, check, c, uploads, rng


def bench_checks(label: str, entries: int, repeats: int) -> list[Row]:
    code, check, c, uploads, rng = _setup(entries)
    rows_w = np.concatenate([c[np.newaxis], check.parity_rows(CHECKS)])
    bad = uploads.copy()
    hit = rng.random(entries) < 0.01
    bad[3, hit] = (bad[3, hit] + 1) % PRIME
    syndromes = check.syndromes(bad, CHECKS)
    flagged = int(hit.sum())
    times = time_round_robin({
        "base": lambda: weighted_sum(c, uploads, PRIME),
        "sums": lambda: weighted_sums(rows_w, uploads, PRIME),
        "honest": lambda: checked_sum(check, c, uploads, checks=CHECKS),
        "bad": lambda: checked_sum(check, c, bad, checks=CHECKS),
        "decode": lambda: check.decode(syndromes),
    }, repeats)
    base = median(times["base"])
    out = []
    for key, name, target in [("sums", "D + syndromes", 2.0), ("honest", "checked_sum honest", 2.5),
                              ("bad", "checked_sum 1% bad", 3.0)]:
        t = median(times[key])
        out.append(Row(name, label, t, "weighted_sum(c, U)", base, f"<= {target}x",
                       t / base <= target, rate=f"{entries / t / 1e6:.0f} M entries/s"))
    t = median(times["decode"])
    out.append(Row("decode (BM, 1 error)", f"{label}, {flagged} flagged", t,
                   "weighted_sum(c, U)", base, "-", None,
                   rate=f"{flagged / t / 1e6:.2f} M flagged/s"))
    return out


def bench_party_mask(label: str, entries: int, repeats: int) -> Row:
    code, check, c, uploads, rng = _setup(entries)
    rows_w = integrity_rows(c, check.parity_rows(CHECKS), PRIME)
    groups = choose_mask_groups(rows_w, PRIME, colluders=1)
    mine = {i: rng.integers(0, PRIME, size=entries, dtype=np.int64)
            for i, g in enumerate(groups) if 0 in g.members}
    pairwise = rng.integers(0, 2**32, size=(PARTIES - 1, entries), dtype=np.uint32)
    half = (PARTIES - 1) // 2
    value = uploads[0]

    def integrity():
        return integrity_upload(value, groups, 0, mine, PRIME)

    times = time_round_robin({
        "pairwise": lambda: masked_upload(value, int(c[0]), pairwise[:half], pairwise[half:],
                                          PRIME),
        "integrity": integrity,
    }, repeats)
    t, base = median(times["integrity"]), median(times["pairwise"])
    return Row("party mask + upload", label, t, f"masked_upload, {PARTIES - 1} masks", base,
               "<= 2x", t / base <= 2.0,
               note=f"party 0 is in {len(mine)} mask groups (PRG streams) vs "
                    f"{PARTIES - 1} pairwise streams today")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer runs")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    shapes = ([("n=600", 600 * 600)] if args.quick
              else [("n=2000", 2000 * 2000), ("n=10000, 500-row tile", 500 * 10000)])
    now = datetime.datetime.now(datetime.timezone.utc)
    print(wrapped(f"# omnifc integrity benchmark, {now:%Y-%m-%d %H:%M} UTC"
                  f"{' (--quick)' if args.quick else ''}, p = 2^31 - 1, m = {PARTIES}, "
                  f"l = t = 1, s = {CHECKS}, {repeats} runs (median)"))
    _setup(100)
    print_environment(environment())
    print()
    started = time.perf_counter()
    rows: list[Row] = []
    for label, entries in shapes:
        rows += bench_checks(label, entries, repeats)
        rows.append(bench_party_mask(label, entries, repeats))
    if args.quick:  # the targets are defined for the full shapes only
        for row in rows:
            row.passed = None
    print_ratio_tables(rows)
    if args.quick:
        print(wrapped("targets not judged at this size: defined for n=2000 and the 500-row "
                      "tile of n=10000 (this run: n=600)"))
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

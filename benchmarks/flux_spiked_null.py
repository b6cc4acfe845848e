"""Six clients: the bound's ratio test, told nothing, against a null where clients differ.

Not a speed benchmark (issue 24). The twenty-fourth pass found that at six clients the
default's K rule falls short of the bound because of its test, not its estimate of the
noise: the bound's ratio test, told the noise covariance ``Sigma`` (with ``m`` and
``Delta``), finds K = 2 in 298 of 384 runs where the default's rule, told the same
``Sigma``, finds 177. It also found
that measuring the clients' spread against the noise alone (``flux_noise_level``) splits
single groups whose clients differ (the generator's label shift). This module builds the
ratio test with nothing told, and with a null that lets clients differ (the test itself is
the library's since the twenty-seventh pass, :mod:`omnifc.adapters.flux._spiked_null`; this
module runs it on the grid's six-client runs and judges the union):

- **Noise.** From the D of the ``(k + 1) n`` split rows (``flux.split_whitened_distances``'
  input) it embeds D and whitens the clients' descriptors by ``S``, the OAS-shrunk
  covariance of the ``n (k - 1)`` within-client contrasts (the default's whitening). A
  descriptor's own noise is then about ``kappa = (k - 1) / 4`` in every direction (the
  contrasts' mean outer product is ``4 / (k - 1)`` times a client's jackknife covariance).
- **Statistic** (``ratio_statistic``): ``T`` = the largest, over ``m = 2 ..
  floor(n / 2)``, of the bound's log likelihood ratio
  (``flux_direction_free_bound.log_likelihood_ratio``, not told the direction or the
  centre) on the centred Gram matrix of the whitened descriptors divided by ``kappa``: two
  groups of ``m`` and ``n - m`` clients ``Delta`` noise units apart, against the Gaussian
  that pools them (the same spread, no groups). ``Delta`` is read from the same Gram
  matrix: the top eigenvalue's excess over pure noise's, ``c = (l_1 - q_1) / (n - 1)``
  (at least :data:`EXCESS_FLOOR`), is the pooled spread ``pi (1 - pi) Delta^2`` of
  ``m : n - m`` groups (``pi = m / n``).
- **Null** (``fitted_spikes``, the reference): a Gaussian fitted to the clients with
  the contrasts' noise as its floor. ``PILOT`` draws of pure noise (the noise-level test's
  draws) give each centred Gram eigenvalue's expected value ``q_j``; every eigenvalue
  ``l_j`` above it becomes a spike ``c_j = (l_j - q_j) / (n - 1)`` along its direction
  ``v_j``. So clients that differ by more than their noise (in as many directions as they
  do) are part of the null, as in SigClust (Liu, Hayes, Nobel & Marron 2008), whose noise
  floor is here measured by the contrasts instead of guessed from the clients' spread.
- **Reference**: a parametric bootstrap that repeats the estimate. Each draw takes the
  contrasts from ``N(0, S)`` and the clients from ``N(0, kappa S^(1/2) (I + sum_j c_j v_j
  v_j^T) S^(1/2))``, re-estimates ``S`` by OAS, whitens and reads ``T``; ``p = (1 + #{T_b
  >= T}) / (1 + B)``. It is told nothing the coordinator does not have.

**Measured, not frozen.** A first candidate, the same test with ``T`` the largest ratio
over a fixed grid of separations (5 to 20 noise units), was frozen with a verdict and fresh
seeds 3457-3468 (commit 537e022) and withdrawn after its first 28 records: with 500 rows a
client the groups lie far beyond the grid, its ratio no longer told them from the pooled
Gaussian (p from 0.02 to 0.52 in all 8 planted runs with 500 rows among them, where the
default found K = 2 in 6), and each such run cost one to three minutes. Its verdict was
not computed. The test here reads the separation from the data instead; measured on the
design seeds 3433-3444 only, it loses to the default with 500 rows as well
(docs/adapters.md, twenty-fifth pass), so no verdict was frozen for it.

**The union, frozen (issue 24, twenty-sixth pass).** On the design seeds the spiked test
and the default miss different runs: the test loses groups far apart with 500 rows, the
default loses close groups with 20 and 50. :func:`union_k` takes the default's K where the
default finds structure and asks the spiked test only where it answers one cluster (each
at level 0.01, so the union's level is at most 0.02). On the design seeds' records it finds
K = 2 in 418 of the 576 planted runs against the default's 347 (+71 / -0), keeps one
cluster in 71 of the 72 iid runs (the default: 71), splits 4 of the 576 single groups (the
default: 2), and has K right in at least 11 of 12 runs in 27 of the 54 cells (the default:
22). :data:`UNION_VERDICT` was frozen with :data:`UNION_SEEDS` before any of them ran;
:func:`union_verdict` computes it from the records. On those seeds it **does not hold**:
393 planted runs against the default's 322 (+71 / -0, noise 15.8), one cluster in 70 of 72
iid runs, but 13 of 576 single groups split, 2 more than its bound of 11 (the default alone
split 10); 24 cells against 20 (docs/adapters.md, twenty-sixth pass). So the union stays
here and the library is unchanged.

**The union's second and last trial (twenty-seventh pass).** The first trial's level bound
(at most 11 of 576 splits) fails a rule of exact level 0.02 about half the time. The second
trial, :data:`UNION_LEVEL_VERDICT` on fresh seeds :data:`UNION_LEVEL_SEEDS`, frozen before
any of them ran, judges the level by a one-sided binomial test instead (:func:`most_splits`:
at most 17 of 576); its other criteria are the first's. If it does not hold, the union is
not tried again. It **holds**: 390 planted runs against the default's 319 (+71 / -0, noise
15.8), one cluster in 72 of 72 iid runs, 11 of 576 single groups split (the default's 11);
26 cells against 22 (docs/adapters.md, twenty-seventh pass). So the union is the library's
default since (``flux.SPLIT_UNION_RECIPE``, ``flux.cluster_split_clients``: the test asked
where the rule answers one cluster among 4 to 6 clients).

Usage (JSON lines appended to ``--out``, resumed; ``--table`` prints the counts)::

    python benchmarks/flux_spiked_null.py --runs --seeds 3433-3438 --out F
    python benchmarks/flux_spiked_null.py --one-group --seeds 3433-3438 --out G
    python benchmarks/flux_spiked_null.py --table F G ...
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# the test itself is the library's (FLUX's second test at six clients since this pass)
from omnifc.adapters.flux._spiked_null import spiked_of_parts  # noqa: E402
from omnifc.adapters.flux._spiked_null import union_k as _union_k  # noqa: E402

#: Reference draws and the level (the default's B and level).
REFERENCES = 199
ALPHA = 0.01

#: The design seeds: the test was measured and the union looked at on them (the command
#: line's default). :data:`UNION_SEEDS`: the union's fresh seeds, never run with any
#: six-client test before :data:`UNION_VERDICT` was frozen (the withdrawn candidate used
#: 3457-3468).
DESIGN_SEEDS = (3433, 3444)
UNION_SEEDS = (3469, 3480)
#: The runs a complete verdict counts: the grid's six-client planted runs (4 shifts, 2 class
#: counts, 3 row counts, 1 : 1 and 1 : 10) and iid runs (2 class counts, 3 row counts), and
#: the single groups of the level check (both groups of each shift, class and row count),
#: per seed.
UNION_RUNS_PER_SEED = {"planted": 48, "iid": 6, "single": 48}
UNION_VERDICT = (
    "The union at six clients (the default's K where its rule finds structure at 0.01, "
    "else K = 2 where the spiked-null test's p <= 0.01, else K = 1), on fresh seeds "
    "3469-3480, holds if (a) among the 576 planted runs it has K right more often than the "
    "default by more than the paired noise (two standard errors of the mean paired "
    "difference, times the runs), (b) it keeps one cluster in at least 69 of the 72 iid "
    "runs (95 %), and (c) it splits at most 11 of the 576 single groups (2 %, its nominal "
    "level as the union of two tests at 0.01). If it holds, the library's FLUX rule may "
    "take the spiked test as its second test at six clients (a later pass); if not, it "
    "stays a benchmark")
#: The union's second and last trial (issue 24, twenty-seventh pass): fresh seeds, never run
#: with any six-client test before :data:`UNION_LEVEL_VERDICT` was frozen.
UNION_LEVEL_SEEDS = (3481, 3492)
#: The second trial fails the union's level only where a one-sided binomial test rejects its
#: nominal level at this significance (:func:`most_splits`).
UNION_LEVEL_SIGNIFICANCE = 0.05
UNION_LEVEL_VERDICT = (
    "The union at six clients (as in UNION_VERDICT), on fresh seeds 3481-3492, holds if "
    "(a) among the 576 planted runs it has K right more often than the default by more "
    "than the paired noise, (b) it keeps one cluster in at least 69 of the 72 iid runs "
    "(95 %), and (c) its splits of the 576 single groups do not show its level above its "
    "nominal 0.02: a one-sided binomial test of level 0.02 at significance 0.05 does not "
    "reject, i.e. at most most_splits(576) = 17 splits. The first trial's (c), at most 11, "
    "fails a rule of exact level 0.02 about half the time (P(Bin(576, 0.02) >= 12) = 0.48); "
    "it was frozen as written and its verdict (does not hold) stands. This is the union's "
    "second and last trial: if it does not hold, the union is not tried again. If it "
    "holds, the library's FLUX rule may take the spiked test as its second test at six "
    "clients")
#: Each trial of the union: its seeds and the name of its verdict.
UNION_TRIALS = {"first": (UNION_SEEDS, "UNION_VERDICT"),
                "second": (UNION_LEVEL_SEEDS, "UNION_LEVEL_VERDICT")}


def spiked_fields(contrasts, points, seed: int) -> dict:
    """The spiked test's record fields (``p``, ``spikes``) on the parts of one split D."""
    test = spiked_of_parts(contrasts, points, references=REFERENCES, seed=seed)
    return {"p": test.p_value, "spikes": test.spikes}


def run_record(shift, n, rows, imbalance, classes, seed) -> dict:
    """One grid run (``flux_noise_level.run_record``): its planted K, the default's K and
    the spiked test's ``p`` (reference draws seeded by the run's seed)."""
    from flux_noise_level import run_record as record

    return record(shift, n, rows, imbalance, classes, seed, test=spiked_fields)


def one_group_records(shift, rows, classes, seed) -> list[dict]:
    """The level check (``flux_noise_level.one_group_records``): each planted group of the
    grid's 6 : 6 run alone; per group the spiked test's ``p`` and the default's K."""
    from flux_noise_level import one_group_records as records

    return records(shift, rows, classes, seed, test=spiked_fields)


def union_k(record, alpha: float = ALPHA) -> int:
    """The union's K on one record: the default's K where it is above 1, else 2 where the
    spiked test's ``p <= alpha``, else 1.

    >>> union_k({"default": 3, "p": 0.9}), union_k({"default": 1, "p": 0.01})
    (3, 2)
    """
    return _union_k(record["default"], record["p"], alpha)


def table(records, alpha: float = ALPHA) -> list[str]:
    """Per (kind, shift, rows, classes): runs, then the default's, the spiked test's and
    the union's K right (runs) or splits (one group); then cells with K right in at least
    11 of 12 runs."""
    counts, cells = {}, {}
    for r in records:
        shift, _, rows, imbalance, classes, _ = r["run"]
        key = (r["kind"], shift, rows, classes)
        c = counts.setdefault(key, [0, 0, 0, 0])
        c[0] += 1
        ks = (r["default"], 2 if r["p"] <= alpha else 1, union_k(r, alpha))
        if r["kind"] == "runs":
            cell = cells.setdefault((shift, rows, imbalance, classes), [0, 0, 0, 0])
            cell[0] += 1
            for i, k in enumerate(ks, 1):
                c[i] += k == r["planted"]
                cell[i] += k == r["planted"]
        else:
            for i, k in enumerate(ks, 1):
                c[i] += k > 1
    lines = ["| kind | shift | rows | classes | runs | default: K right / splits | "
             "spiked-null test: K right / splits | union: K right / splits |", "|---" * 8 + "|"]
    for (kind, shift, rows, classes), (n, a, b, u) in sorted(counts.items()):
        lines.append(f"| {kind} | {shift} | {rows} | {classes} | {n} | {a} | {b} | {u} |")
    full = [c for c in cells.values() if c[0] == 12]
    lines.append(f"cells of 12 runs with K right in >= 11: default {sum(c[1] >= 11 for c in full)}"
                 f", spiked-null test {sum(c[2] >= 11 for c in full)}, union "
                 f"{sum(c[3] >= 11 for c in full)}, of {len(full)}")
    return lines


def most_splits(single: int, level: float = 2 * ALPHA,
                significance: float = UNION_LEVEL_SIGNIFICANCE) -> int:
    """The most of ``single`` groups a rule of nominal ``level`` may split before a
    one-sided binomial test rejects that level at ``significance``: the largest ``s`` with
    ``P(Bin(single, level) >= s) >= significance`` (the second trial's bound).

    >>> most_splits(576), most_splits(576, 0.01)
    (17, 10)
    """
    from scipy.stats import binom

    s = 0
    while s < single and binom.sf(s, single, level) >= significance:  # P(X >= s + 1)
        s += 1
    return s


def union_verdict(records, alpha: float = ALPHA, *, trial: str = "first") -> dict:
    """The ``trial``'s verdict (:data:`UNION_TRIALS`: ``"first"``, :data:`UNION_VERDICT` on
    :data:`UNION_SEEDS`; ``"second"``, :data:`UNION_LEVEL_VERDICT` on
    :data:`UNION_LEVEL_SEEDS`) on the records of its seeds (others are ignored).

    Returns the counts (``runs``: planted runs; ``default`` and ``union``: K right there;
    ``plus`` / ``minus``: runs only the union / only the default gets right; ``noise``;
    ``iid`` and ``iid_one``: iid runs and those the union keeps as one cluster; ``single``
    and ``splits``: single groups and those the union splits) and ``verdict``: ``"holds"``,
    ``"does not hold"``, or ``"incomplete"`` while any run of the seeds is missing (the
    counts are then of the runs present)."""
    import bench_k_selection as grid

    if trial not in UNION_TRIALS:
        raise ValueError(f"trial must be one of {tuple(UNION_TRIALS)}, got {trial!r}")
    lo, hi = UNION_TRIALS[trial][0]
    mine = list({(r["kind"], tuple(r["run"])): r for r in records
                 if lo <= r["run"][5] <= hi}.values())      # a run given twice counts once
    planted = [r for r in mine if r["kind"] == "runs" and r["run"][0] != "none"]
    iid = [r for r in mine if r["kind"] == "runs" and r["run"][0] == "none"]
    single = [r for r in mine if r["kind"] == "one-group"]
    default, union, plus, minus, noise, word = grid.paired_counts(
        [int(r["default"] == r["planted"]) for r in planted],
        [int(union_k(r, alpha) == r["planted"]) for r in planted])
    out = {"runs": len(planted), "default": default, "union": union, "plus": plus,
           "minus": minus, "noise": noise, "iid": len(iid),
           "iid_one": sum(union_k(r, alpha) == 1 for r in iid), "single": len(single),
           "splits": sum(union_k(r, alpha) > 1 for r in single)}
    seeds = hi - lo + 1
    want = {k: v * seeds for k, v in UNION_RUNS_PER_SEED.items()}
    if (len(planted), len(iid), len(single)) != (want["planted"], want["iid"], want["single"]):
        out["verdict"] = "incomplete"
    else:
        bound = (math.floor(0.02 * len(single)) if trial == "first"     # as frozen
                 else most_splits(len(single), 2 * alpha))
        holds = (word == "better" and out["iid_one"] >= math.ceil(0.95 * len(iid))
                 and out["splits"] <= bound)
        out["verdict"] = "holds" if holds else "does not hold"
    return out


def union_lines(records, alpha: float = ALPHA) -> list[str]:
    """:func:`union_verdict` of each trial as the lines ``--table`` prints."""
    lines = []
    for trial, ((lo, hi), name) in UNION_TRIALS.items():
        v = union_verdict(records, alpha, trial=trial)
        lines += [f"union on seeds {lo}-{hi}: planted K right {v['union']} against the "
                  f"default's {v['default']} of {v['runs']} (+{v['plus']} / -{v['minus']}, "
                  f"noise {v['noise']:.1f}); iid one cluster {v['iid_one']} of {v['iid']}; "
                  f"single groups split {v['splits']} of {v['single']}",
                  f"verdict ({name}): {v['verdict']}"]
    return lines


def added_labels(records, alpha: float = ALPHA, groups: int = 10) -> list[tuple[list, float]]:
    """``[(run, ARI)]`` for every planted run of ``records`` where the union's K = 2 comes
    from the spiked test (the default at one cluster, ``p <= alpha``): the adjusted Rand
    index of the library's labels there (Ward's two-cut of the whitened D,
    ``flux.cluster_split_clients``) against the planted groups, the run's split D rebuilt
    as the records' were (the verdict counted K only)."""
    from sklearn.metrics import adjusted_rand_score

    from flux_noise_level import _split_parts, _split_run
    from omnifc._clustering._hierarchical import ward_from_distances
    from omnifc.adapters.flux._split_half import oas_whitened_distances

    out = []
    for r in records:
        if r["kind"] != "runs" or r["run"][0] == "none" or r["default"] != 1 \
                or r["p"] > alpha:
            continue
        full, planted = _split_run(*r["run"], groups=groups)
        whitened = oas_whitened_distances(*_split_parts(full, r["run"][1], groups))
        out.append((list(r["run"]), float(adjusted_rand_score(
            planted, ward_from_distances(whitened, 2)))))
    return out


def _parser():
    """The command line's arguments (module docstring)."""
    import argparse
    import bench_k_selection as grid
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--runs", action="store_true",
                      help="the grid's six-client runs (planted and iid)")
    kind.add_argument("--one-group", action="store_true",
                      help="the level check: each group of a 6 : 6 run alone")
    kind.add_argument("--table", nargs="+", metavar="FILE", help="counts per cell")
    kind.add_argument("--labels", nargs="+", metavar="FILE",
                      help="the ARI of the labels where the test added K = 2")
    parser.add_argument("--seeds", default="%d-%d" % DESIGN_SEEDS)
    parser.add_argument("--rows", default="20,50,500")
    parser.add_argument("--classes", default="2,10")
    parser.add_argument("--shifts", default=",".join(grid.SHIFTS))
    parser.add_argument("--out")
    return parser


def main(argv=None) -> int:
    from _common import int_list
    from flux_noise_level import append_records, read_records
    parser = _parser()
    args = parser.parse_args(argv)
    if args.table:
        records = read_records(args.table)
        print("\n".join(table(records) + union_lines(records)))
        return 0
    if args.labels:
        aris = [a for _, a in added_labels(read_records(args.labels))]
        print(f"runs where the test added K = 2: {len(aris)}; labels with ARI 1: "
              f"{sum(a > 1 - 1e-9 for a in aris)}; the others' ARI: "
              f"{sorted(round(a, 2) for a in aris if a <= 1 - 1e-9)}")
        return 0
    if not args.out:
        parser.error("--out is needed with --runs and --one-group")
    kind_name = "runs" if args.runs else "one-group"
    seen = set()
    if os.path.exists(args.out):
        seen = {(r["kind"], tuple(r["run"])) for r in read_records([args.out])}
    seeds, classes, rows = int_list(args.seeds), int_list(args.classes), int_list(args.rows)
    shifts = args.shifts.split(",")
    if args.runs:
        todo = [(shift, 6, r, imbalance, c, seed) for seed in seeds for shift in shifts
                for c in classes for r in rows for imbalance in (1, 10)]
        todo += [("none", 6, r, 1, c, seed) for seed in seeds for c in classes for r in rows]
    else:                        # imbalance holds the group; both come from one call
        todo = [(shift, 6, r, 0, c, seed) for seed in seeds for shift in shifts
                for c in classes for r in rows]
    for run in todo:
        if (kind_name, run) in seen:
            continue
        shift, n, r, imbalance, c, seed = run
        if args.runs:
            recs = [{"kind": kind_name, "run": list(run),
                     **run_record(shift, n, r, imbalance, c, seed)}]
        else:
            recs = [{"kind": kind_name, "run": [shift, 6, r, g, c, seed], **rec}
                    for g, rec in enumerate(one_group_records(shift, r, c, seed))]
        append_records(args.out, recs, seen)
    print("\n".join(table(read_records([args.out]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

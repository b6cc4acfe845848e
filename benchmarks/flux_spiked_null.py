"""Six clients: the bound's ratio test with nothing told, against a null that lets clients differ (issue 24).

Not a speed benchmark. The twenty-fourth pass found that at six clients the default's K rule
falls short of the bound because of its test, not its estimate of the noise: the bound's
ratio test, told the noise covariance ``Sigma`` (with ``m`` and ``Delta``), finds K = 2 in
298 of 384 runs where the default's rule, told the same ``Sigma``, finds 177. It also found
that measuring the clients' spread against the noise alone (``flux_noise_level``) splits
single groups whose clients differ (the generator's label shift). This module builds the
ratio test with nothing told, and with a null that lets clients differ:

- **Noise.** From the D of the ``(k + 1) n`` split rows (``flux.split_whitened_distances``'
  input) it embeds D and whitens the clients' descriptors by ``S``, the OAS-shrunk
  covariance of the ``n (k - 1)`` within-client contrasts (the default's whitening). A
  descriptor's own noise is then about ``kappa = (k - 1) / 4`` in every direction (the
  contrasts' mean outer product is ``4 / (k - 1)`` times a client's jackknife covariance).
- **Statistic** (:func:`ratio_statistic`): ``T`` = the largest, over ``m = 2 ..
  floor(n / 2)`` and ``Delta`` in :data:`DELTAS`, of the bound's log likelihood ratio
  (``flux_direction_free_bound.log_likelihood_ratio``, not told the direction or the
  centre) on the centred Gram matrix of the whitened descriptors divided by ``kappa``: two
  groups of ``m`` and ``n - m`` clients ``Delta`` noise units apart, against the Gaussian
  that pools them (the same spread, no groups).
- **Null** (:func:`fitted_spikes`, the reference): a Gaussian fitted to the clients with
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

The candidate and its verdict (:data:`SPIKED_VERDICT`) were frozen with their fresh seeds
(:data:`SPIKED_SEEDS`) before any of them ran.

Usage (JSON lines appended to ``--out``, resumed; ``--table`` prints the counts and the
verdict)::

    python benchmarks/flux_spiked_null.py --runs --seeds 3457-3462 --out F
    python benchmarks/flux_spiked_null.py --one-group --seeds 3457-3462 --out G
    python benchmarks/flux_spiked_null.py --table F G ...
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: The separations the statistic looks at, in units of a descriptor's noise (the bound's
#: six-client separations where its power crosses 0.5 to 0.95 lie between 7 and 13).
DELTAS = (5.0, 7.5, 10.0, 14.0, 20.0)
#: Pure-noise draws behind the expected eigenvalues ``q_j`` of the floor.
PILOT = 49
#: Reference draws and the level (the default's B and level).
REFERENCES = 199
ALPHA = 0.01
#: The fresh seeds of the verdict: the grid's six-client runs and single groups (FLUX's
#: next verdict seeds, ``bench_k_selection.FLUX_BOUND_ONLY_SEEDS`` ended at 3456).
SPIKED_SEEDS = "3457-3468"
#: The verdict, frozen before any of :data:`SPIKED_SEEDS` ran.
SPIKED_VERDICT = (
    "On the grid's six-client runs of seeds 3457-3468 (four shifts, 2 and 10 classes, 20, "
    "50 and 500 rows per client, 3 : 3 and 4 : 2; 576 planted runs) the spiked-null ratio "
    "test at 0.01 (K = 2 when p <= 0.01, else 1) finds the planted K in more runs than the "
    "default's rule (flux:axis_or_gap@0.01 on the same split D), paired, beyond noise "
    "(verdict 'better'); and it keeps its level: it splits at most 10 of the 576 single "
    "planted groups of six clients (each group of the 6 : 6 run alone; a level-0.01 test "
    "splits 5.76 on average, 10 is that plus two binomial standard errors rounded down) and "
    "at most 2 of the 72 iid federations (0.72 plus two standard errors).")
#: The most splits the verdict allows on single groups and on iid federations.
SPLITS_ALLOWED = {"one-group": 10, "iid": 2}


def ratio_statistic(grams, d: int, n: int, deltas=DELTAS) -> np.ndarray:
    """``T`` for each centred, noise-scaled Gram matrix of the stack ``grams`` (``n x n``,
    ``d`` dimensions): the largest log likelihood ratio over ``m = 2 .. floor(n / 2)`` and
    ``Delta`` in ``deltas`` (module docstring).

    >>> import flux_direction_free_bound as free
    >>> g = np.diag([30.0, 30.0, 1.0, 1.0]) ; g -= g.mean(0) ; g -= g.mean(1)[:, None]
    >>> want = free.log_likelihood_ratio(g, 2, 5.0, 8, told_centre=False)
    >>> bool(np.isclose(ratio_statistic(g[None], 8, 4, deltas=(5.0,))[0], want))
    True
    """
    grams = np.asarray(grams, dtype=np.float64)
    if n < 4:
        raise ValueError(f"the statistic needs n >= 4 clients (two groups of two), got {n}")
    import flux_direction_free_bound as free

    best = np.full(len(grams), -np.inf)
    for m in range(2, n // 2 + 1):
        a = free.arrangements(n, m)
        for delta in deltas:
            best = np.maximum(best, free.log_likelihood_ratio(grams, m, float(delta), d, a,
                                                              told_centre=False))
    return best


def scaled_gram(whitened, kappa: float) -> np.ndarray:
    """The centred Gram matrix of the whitened descriptors (rows; or a stack) divided by
    ``kappa``: the clients in units of a descriptor's noise.

    >>> scaled_gram(np.array([[1.0, 0.0], [-1.0, 0.0]]), 2.0)
    array([[ 0.5, -0.5],
           [-0.5,  0.5]])
    """
    y = np.asarray(whitened, dtype=np.float64)
    y = y - y.mean(axis=-2, keepdims=True)
    return np.einsum("...id,...jd->...ij", y, y) / kappa


def fitted_spikes(whitened, kappa: float, expected) -> list[tuple[float, np.ndarray]]:
    """The null's spikes: ``[(c_j, v_j)]`` for every eigenvalue ``l_j`` of
    :func:`scaled_gram` above ``expected[j]`` (the mean ``j``-th eigenvalue of pure noise,
    both in decreasing order): ``c_j = (l_j - expected[j]) / (n - 1)`` and ``v_j`` the unit
    direction (in the whitened coordinates) of its principal axis.

    >>> y = np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 0.5], [0.0, -0.5]])
    >>> [(round(c, 6), abs(v).round(6).tolist()) for c, v in fitted_spikes(y, 1.0, [2, 2, 0])]
    [(5.333333, [1.0, 0.0])]
    """
    y = np.asarray(whitened, dtype=np.float64)
    n = y.shape[0]
    values, vectors = np.linalg.eigh(scaled_gram(y, kappa))
    values, vectors = values[::-1], vectors[:, ::-1]
    centred = (y - y.mean(axis=0)) / np.sqrt(kappa)
    out = []
    for j in range(n - 1):
        if values[j] > expected[j]:
            v = centred.T @ vectors[:, j]
            out.append((float((values[j] - expected[j]) / (n - 1)), v / np.linalg.norm(v)))
    return out


def _null_draw(rng, contrasts_shape, n: int, values, vectors, kappa: float, spikes):
    """One reference draw, whitened as the observed clients are: contrasts from ``N(0,
    S)`` and clients from the fitted Gaussian (``S = vectors diag(values) vectors^T``),
    ``S`` re-estimated by OAS."""
    from omnifc.adapters.flux._split_half import oas_whitened_points

    root = np.sqrt(values)
    noise = rng.standard_normal(contrasts_shape) * root @ vectors.T
    w = rng.standard_normal((n, len(values)))
    for c, v in spikes:
        w = w + np.sqrt(c) * rng.standard_normal((n, 1)) * v[None, :]
    return oas_whitened_points(noise, np.sqrt(kappa) * w * root @ vectors.T)[0]


def spiked_null_test(distances, n: int, *, groups: int = 10, references: int = REFERENCES,
                     pilot: int = PILOT, seed: int = 0, deltas=DELTAS) -> dict:
    """``{"t", "p", "spikes"}`` of the spiked-null ratio test (module docstring) on the
    squared distances of the ``(k + 1) n`` rows ``[G_0; ...; G_{k-1}; F]``.

    >>> rng = np.random.default_rng(1)
    >>> f = rng.standard_normal((6, 4)) * 3
    >>> g = f[None] + rng.standard_normal((3, 6, 4))
    >>> x = np.vstack(list(g) + [f])
    >>> d = ((x[:, None] - x[None]) ** 2).sum(-1)
    >>> r = spiked_null_test(d, 6, groups=3, references=9, pilot=9)
    >>> bool(0 < r["p"] <= 1) and spiked_null_test(d * 4, 6, groups=3, references=9,
    ...                                            pilot=9)["p"] == r["p"]
    True
    """
    from flux_noise_level import _split_parts

    if references < 1 or pilot < 1:
        raise ValueError(f"references and pilot must be >= 1, got {references}, {pilot}")
    return spiked_of_parts(*_split_parts(distances, int(n), groups), references=references,
                           pilot=pilot, seed=seed, deltas=deltas)


def spiked_of_parts(contrasts, points, *, references: int = REFERENCES, pilot: int = PILOT,
                    seed: int = 0, deltas=DELTAS) -> dict:
    """:func:`spiked_null_test` on the within-client ``contrasts`` and the clients'
    ``points`` (``_split_half.split_embedding``'s parts)."""
    from omnifc.adapters.flux._split_half import oas_whitened_points

    n, d = points.shape
    kappa = (contrasts.shape[0] // n) / 4          # (k - 1) / 4
    whitened, s = oas_whitened_points(contrasts, points)
    values, vectors = np.linalg.eigh(s)
    values = np.maximum(values, values.max() * 1e-12)
    rng = np.random.default_rng(seed)
    noise = np.stack([scaled_gram(_null_draw(rng, contrasts.shape, n, values, vectors, kappa,
                                             []), kappa) for _ in range(pilot)])
    expected = np.sort(np.linalg.eigvalsh(noise), axis=1)[:, ::-1].mean(axis=0)
    spikes = fitted_spikes(whitened, kappa, expected)
    draws = np.stack([scaled_gram(_null_draw(rng, contrasts.shape, n, values, vectors,
                                             kappa, spikes), kappa)
                      for _ in range(references)])
    t = ratio_statistic(np.concatenate([scaled_gram(whitened, kappa)[None], draws]), d, n,
                        deltas)
    return {"t": float(t[0]), "p": float((1 + np.sum(t[1:] >= t[0])) / (1 + references)),
            "spikes": len(spikes)}


def _both(full, n: int, seed: int) -> dict:
    """The spiked test's ``p`` and the default's K on one split D (one embedding)."""
    from flux_noise_level import GROUPS, _default_k, _split_parts
    from omnifc.adapters.flux._split_half import oas_whitened_distances

    parts = _split_parts(full, n, GROUPS)
    test = spiked_of_parts(*parts, seed=seed)
    return {"default": _default_k(oas_whitened_distances(*parts)), "p": test["p"],
            "spikes": test["spikes"]}


def run_record(shift, n, rows, imbalance, classes, seed) -> dict:
    """One grid run (``flux_noise_level._split_run``): its planted K, the default's K and
    the spiked test's ``p`` (reference draws seeded by the run's seed)."""
    from flux_noise_level import _split_run

    full, planted = _split_run(shift, n, rows, imbalance, classes, seed)
    return {"planted": int(len(set(planted.tolist()))), **_both(full, n, seed)}


def one_group_records(shift, rows, classes, seed) -> list[dict]:
    """The level check (``flux_noise_level.one_group_distances``): each planted group of
    the grid's 6 : 6 run alone; per group the spiked test's ``p`` and the default's K."""
    from flux_noise_level import one_group_distances

    return [_both(full, n, seed) for full, n in one_group_distances(shift, rows, classes,
                                                                    seed)]


def _records(paths) -> list[dict]:
    out = []
    for path in paths:
        with open(path) as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def verdict(records, alpha: float = ALPHA) -> tuple[list[str], bool]:
    """:data:`SPIKED_VERDICT` computed from the records: the paired table of the planted
    runs (the spiked test against the default), the splits of single groups and of iid
    federations, and whether the verdict holds."""
    import bench_k_selection as grid

    planted = [r for r in records if r["kind"] == "runs" and r["planted"] == 2]
    a = [int(r["default"] == 2) for r in planted]
    b = [int(r["p"] <= alpha) for r in planted]
    ra, rb, plus, minus, noise, word = grid.paired_counts(a, b)
    splits = {"one-group": sum(r["p"] <= alpha for r in records if r["kind"] == "one-group"),
              "iid": sum(r["p"] <= alpha for r in records
                         if r["kind"] == "runs" and r["planted"] == 1)}
    counts = {"one-group": sum(r["kind"] == "one-group" for r in records),
              "iid": sum(r["kind"] == "runs" and r["planted"] == 1 for r in records)}
    default_splits = {"one-group": sum(r["default"] > 1 for r in records
                                       if r["kind"] == "one-group"),
                      "iid": sum(r["default"] > 1 for r in records
                                 if r["kind"] == "runs" and r["planted"] == 1)}
    holds = (word == "better" and len(planted) > 0
             and all(counts[k] > 0 and splits[k] <= SPLITS_ALLOWED[k] for k in splits))
    lines = ["| six clients | runs | default | spiked-null test | + / − | noise | verdict |",
             "|---|---|---|---|---|---|---|",
             f"| planted, K = 2 found | {len(planted)} | {ra} | {rb} | +{plus} / −{minus} | "
             f"{noise:.1f} | {word} |"]
    for k, label in (("one-group", "single groups"), ("iid", "iid federations")):
        lines.append(f"| {label}, split (allowed {SPLITS_ALLOWED[k]}) | {counts[k]} | "
                     f"{default_splits[k]} | {splits[k]} | | | |")
    lines.append(f"verdict (SPIKED_VERDICT): {'holds' if holds else 'does not hold'}")
    return lines, holds


def table(records, alpha: float = ALPHA) -> list[str]:
    """Per (kind, shift, rows, classes): runs, the default's K right (runs) or splits (one
    group), the spiked test's K right or splits; then cells with K right in at least 11 of
    12 runs."""
    counts, cells = {}, {}
    for r in records:
        shift, _, rows, imbalance, classes, _ = r["run"]
        key = (r["kind"], shift, rows, classes)
        c = counts.setdefault(key, [0, 0, 0])
        c[0] += 1
        if r["kind"] == "runs":
            k = 2 if r["p"] <= alpha else 1
            c[1] += r["default"] == r["planted"]
            c[2] += k == r["planted"]
            cell = cells.setdefault((shift, rows, imbalance, classes), [0, 0, 0])
            cell[0] += 1
            cell[1] += r["default"] == r["planted"]
            cell[2] += k == r["planted"]
        else:
            c[1] += r["default"] > 1
            c[2] += r["p"] <= alpha
    lines = ["| kind | shift | rows | classes | runs | default: K right / splits | "
             "spiked-null test: K right / splits |", "|---" * 7 + "|"]
    for (kind, shift, rows, classes), (n, a, b) in sorted(counts.items()):
        lines.append(f"| {kind} | {shift} | {rows} | {classes} | {n} | {a} | {b} |")
    full = [c for c in cells.values() if c[0] == 12]
    lines.append(f"cells of 12 runs with K right in >= 11: default {sum(c[1] >= 11 for c in full)}"
                 f", spiked-null test {sum(c[2] >= 11 for c in full)}, of {len(full)}")
    return lines


def main(argv=None) -> int:
    import argparse
    import bench_k_selection as grid
    from _common import int_list
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--runs", action="store_true",
                      help="the grid's six-client runs (planted and iid)")
    kind.add_argument("--one-group", action="store_true",
                      help="the level check: each group of a 6 : 6 run alone")
    kind.add_argument("--table", nargs="+", metavar="FILE",
                      help="counts per cell and the verdict (SPIKED_VERDICT)")
    parser.add_argument("--seeds", default=SPIKED_SEEDS)
    parser.add_argument("--rows", default="20,50,500")
    parser.add_argument("--classes", default="2,10")
    parser.add_argument("--shifts", default=",".join(grid.SHIFTS))
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.table:
        records = _records(args.table)
        lines, _ = verdict(records)
        print("\n".join(table(records) + lines))
        return 0
    if not args.out:
        parser.error("--out is needed with --runs and --one-group")
    kind_name = "runs" if args.runs else "one-group"
    seen = set()
    if os.path.exists(args.out):
        seen = {(r["kind"], tuple(r["run"])) for r in _records([args.out])}
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
        with open(args.out, "a") as f:
            f.writelines(json.dumps(rec) + "\n" for rec in recs
                         if (kind_name, tuple(rec["run"])) not in seen)
        seen.update((kind_name, tuple(rec["run"])) for rec in recs)
    print("\n".join(table(_records([args.out]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CLoVE's loss transform as a candidate default: ``run_clove_fl(transform="sqrt")`` (the
paper's ablation: each client sends the square roots of its losses) against the default
(``"identity"``), paired on the same runs (issue 24, fifteenth pass).

Not a speed benchmark. The runs are docs/adapters.md's CLoVE study (``clove_label_reference
.case``: a 16-unit MLP, unequal groups, K known, 8 rounds, breast cancer K = 2, wine K = 2
and 3, digits K = 2, 3 and 5), plaintext (secure = plaintext is tested). A run counts when
every client ends in its planted group (ARI 1). Why a candidate: with accurate models the
losses of a client's own group model are small and differ from the others' by ratios more
than by amounts; the square root spreads the small losses apart. Told the groups' models
(``clove_label_reference.at_truth``), k-means on the sqrt vectors keeps the groups in 51 of
the 60 label-shift runs of design seeds 50-59 against 47 on the losses themselves; the loop
gets 47 against 45 (label) and 60 against 60 (feature) there.

:data:`SQRT_VERDICT` was frozen, with :data:`SQRT_FRESH_SEEDS`, before any of those seeds
was run. Each record is one run of one variant (JSON lines, resumable with ``--out``).

Usage::

    python benchmarks/_clove_transform.py --seeds 400-439 --shift label --out F
    python benchmarks/_clove_transform.py --seeds 440-469 --auto-k --out F   # K unknown
    python benchmarks/_clove_transform.py --table F [F ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_k_selection as grid  # noqa: E402
from _common import int_list  # noqa: E402
import clove_label_reference as study  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from omnifc.adapters import clove  # noqa: E402

#: The default and the candidate, in that order.
VARIANTS = ("identity", "sqrt")
#: The seeds the candidate was designed on, and its fresh seeds (40 x 6 cases = 240 runs
#: per shift), never run with CLoVE before the verdict was frozen.
SQRT_DESIGN_SEEDS = (50, 59)
SQRT_FRESH_SEEDS = (400, 439)
SQRT_VERDICT = (
    "run_clove_fl(transform='sqrt') against the default transform ('identity'), K known, "
    "8 rounds, plaintext, the study's six cases on fresh seeds 400-439 (240 runs per shift), "
    "paired on the same runs (a run counts when every client is in its planted group; "
    "noise = paired_noise of the 0/1 outcomes): it becomes run_clove_fl's default if it is "
    "better under label shift and not worse under feature shift; otherwise it stays an "
    "option")


#: K unknown (the second verdict, frozen after the first held and before its seeds ran):
#: the automatic-K study of docs/adapters.md (digits, softmax regression, 5 clients per
#: group, K-hat = 15 models, 8 rounds, the calibrated K rule; shifts label, feature, concept,
#: conditional with K = 2, 3, 5, and one population, ``shift="none"``, of 15 clients).
#: Looked at before the freeze on the table's held-out seeds 3-5 and 60-65 (never used for
#: the transform): planted 105 against 103 of 108 runs, one population 9 and 9 of 9.
AUTO_K_SHIFTS = ("label", "feature", "concept", "conditional")
AUTO_K_DATA = "digits-auto-k"       # the records' "data" of the automatic-K study
AUTO_K_CASES = tuple((AUTO_K_DATA, k) for k in (2, 3, 5))
ONE_POPULATION = ((AUTO_K_DATA, 1),)
SQRT_AUTO_K_SEEDS = (440, 469)
SQRT_AUTO_K_VERDICT = (
    "run_clove_fl(transform='sqrt') against 'identity' with K unknown (the automatic-K "
    "study: digits, softmax regression, 5 clients per group, 15 models, 8 rounds), fresh "
    "seeds 440-469: 360 planted runs (4 shifts x K = 2, 3, 5) and 30 one-population runs, "
    "paired: if neither is worse, 'sqrt' becomes the default with K unknown too (one "
    "default whatever K); otherwise the losses stay the default there")


def run(seed: int, name: str, k: int, shift: str, transform: str) -> dict:
    """One run of ``run_clove_fl`` with its defaults but ``transform``: a case of the label
    study (K known), or of the automatic-K study (``name="digits-auto-k"``, K unknown;
    ``shift="none"``: one population of 15 clients, right when it stays on one model)."""
    if name == AUTO_K_DATA:
        from omnifc import fl

        n_groups, per_group = (1, 15) if shift == "none" else (k, 5)
        data = fl.make_federated("digits", shift=shift, n_groups=n_groups,
                                 clients_per_group=per_group, new_per_group=0, seed=seed)
        clients, groups = data.clients, data.groups
        model = fl.SoftmaxRegression(data.n_features, data.n_classes)
        inits = [model.init(seed=100 * seed + j) for j in range(15)]
        k_option = {"k_upper": 15}
    else:
        clients, groups, model, inits, _ = study.case(name, k, seed, shift=shift)
        k_option = {"n_clusters": k}
    out = clove.run_clove_fl(clients, model, inits, rounds=8, seed=seed, secure=False,
                             transform=transform, **k_option)
    return {"seed": seed, "data": name, "k": k, "shift": shift, "transform": transform,
            "exact": bool(adjusted_rand_score(groups, out.assignments[-1]) == 1)}


def collect(seeds, shift: str, out=None, cases=study.CASES, *, run_one=None,
            field: str = "transform", variants=VARIANTS) -> list:
    """Every variant on every case of ``seeds``; the records already in ``out`` are kept
    (a stopped run resumes), new ones appended to it. ``run_one(seed, name, k, shift,
    variant)`` makes one record (default :func:`run`); ``field`` names its variant and
    ``variants`` lists them (other candidate studies, ``_clove_probes``, collect here too)."""
    run_one = run if run_one is None else run_one
    records = study.resumed(out)
    done = {(r["seed"], r["data"], r["k"], r["shift"], r[field]) for r in records}
    for seed in seeds:
        for name, k in cases:
            for variant in variants:
                if (seed, name, k, shift, variant) in done:
                    continue
                record = run_one(seed, name, k, shift, variant)
                records.append(record)
                study.append_record(out, record)
    return records


def paired(records, shift, *, field: str = "transform", variants=VARIANTS) -> dict:
    """Counts and the verdict of the candidate against the default under ``shift`` (one
    shift, or a tuple of them pooled): the runs both variants completed, paired by (seed,
    data, K, shift); the grid's :func:`bench_k_selection.paired_counts` (noise in runs).
    ``field`` names the records' variant (``variants``: the default's value, then the
    candidate's); other candidate studies (``_clove_probes``) pair their records here too."""
    shifts = (shift,) if isinstance(shift, str) else tuple(shift)
    by = {}
    for r in records:
        if r["shift"] in shifts:
            key = (r["seed"], r["data"], r["k"], r["shift"])
            by.setdefault(key, {})[r[field]] = r["exact"]
    runs = sorted(key for key, v in by.items() if set(v) == set(variants))
    if not runs:
        return {"runs": 0}
    default, candidate, plus, minus, noise, word = grid.paired_counts(
        [int(by[key][variants[0]]) for key in runs], [int(by[key][variants[1]]) for key in runs])
    return {"runs": len(runs), "default": default, "candidate": candidate, "plus": plus,
            "minus": minus, "noise": noise, "verdict": word}


def holds(records, *, field: str = "transform", variants=VARIANTS) -> bool:
    """:data:`SQRT_VERDICT`: better under label shift, not worse under feature shift (the
    same rule judges other candidates' records, ``field`` and ``variants`` as in
    :func:`paired`)."""
    label = paired(records, "label", field=field, variants=variants)
    feature = paired(records, "feature", field=field, variants=variants)
    return (label.get("verdict") == "better"
            and feature.get("verdict") in ("better", "tie within noise"))


def holds_auto_k(records) -> bool:
    """:data:`SQRT_AUTO_K_VERDICT`: neither the planted runs (pooled) nor the one-population
    runs worse."""
    planted = paired(records, AUTO_K_SHIFTS)
    one = paired(records, "none")
    ok = ("better", "tie within noise")
    return planted.get("verdict") in ok and one.get("verdict") in ok


def table_row(name: str, p: dict) -> str:
    """One row of a paired table from :func:`paired`'s counts.

    >>> table_row("label", {"runs": 4, "default": 2, "candidate": 3, "plus": 1, "minus": 0,
    ...                     "noise": 2.0, "verdict": "tie within noise"})
    '| label | 4 | 2 | 3 | +1 / -0 | 2.0 | tie within noise |'
    """
    return (f"| {name} | {p['runs']} | {p['default']} | {p['candidate']} | "
            f"+{p['plus']} / -{p['minus']} | {p['noise']:.1f} | {p['verdict']} |")


def table(records) -> str:
    lines = ["| shift | runs | identity (default) | sqrt | + / - | noise (runs) | verdict |",
             "|---|---|---|---|---|---|---|"]
    study_rows = [r for r in records if r["data"] != AUTO_K_DATA]
    auto_rows = [r for r in records if r["data"] == AUTO_K_DATA]
    rows = [(shift, shift, study_rows) for shift in ("label", "feature")]
    rows += [(f"K unknown, {shift}", shift, auto_rows) for shift in AUTO_K_SHIFTS]
    rows += [("K unknown, planted (pooled)", AUTO_K_SHIFTS, auto_rows),
             ("K unknown, one population", "none", auto_rows)]
    for name, shifts, chosen in rows:
        p = paired(chosen, shifts)
        if p["runs"]:
            lines.append(table_row(name, p))
    return "\n".join(lines)


def candidate_parser(description: str, design_seeds) -> argparse.ArgumentParser:
    """The command line of a candidate study (this one, ``_clove_probes``): ``--seeds``
    (default ``design_seeds``, ``"lo-hi"``), ``--shift``, ``--out`` and ``--table``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", default="%d-%d" % tuple(design_seeds))
    parser.add_argument("--shift", choices=("label", "feature"), default="label")
    parser.add_argument("--out", help="JSON lines, appended to and resumed from")
    parser.add_argument("--table", nargs="+", help="print the paired table of these files")
    return parser


def main(argv=None) -> int:
    parser = candidate_parser(__doc__.splitlines()[0], SQRT_DESIGN_SEEDS)
    parser.add_argument("--auto-k", action="store_true",
                        help="the automatic-K study (K unknown): every shift and one "
                        "population, for --seeds")
    args = parser.parse_args(argv)
    if args.table:
        records = study.read_records(args.table)
        print(table(records))
        if any(r["data"] != AUTO_K_DATA for r in records):
            print(f"verdict (SQRT_VERDICT): {'holds' if holds(records) else 'does not hold'}")
        if any(r["data"] == AUTO_K_DATA for r in records):
            print("verdict (SQRT_AUTO_K_VERDICT): "
                  f"{'holds' if holds_auto_k(records) else 'does not hold'}")
        return 0
    seeds = int_list(args.seeds)
    jobs = ([(shift, AUTO_K_CASES) for shift in AUTO_K_SHIFTS] + [("none", ONE_POPULATION)]
            if args.auto_k else [(args.shift, study.CASES)])
    records = []
    for shift, cases in jobs:
        got = collect(seeds, shift, args.out, cases=cases)
        records = got if args.out else records + got    # with --out: the whole file
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Six clients: is FLUX's shortfall the noise estimate or the rule's reference? (issue 24).

Not a speed benchmark. Earlier passes read the six-client gap between FLUX's default and the
bound (docs/adapters.md, eighteenth and twenty-third passes) as the noise covariance
``Sigma``: the bound's ratio test, told ``Sigma``, came close to the bound on the real runs,
the default (which estimates ``Sigma`` from D's within-client contrasts) did not. This module
separates the two halves of that difference on the grid's own runs:

- :func:`rule_told_the_covariance`: the **default's rule** (``flux:axis_or_gap@0.01``,
  B = 199) on the run's descriptors whitened by the population's ``Sigma`` (as
  ``flux_direction_free_bound.told_the_covariance`` whitens them for the ratio test). If the
  estimate of ``Sigma`` were what the default lacks, this would find K = 2 about as often as
  the ratio test told ``Sigma``.
- :func:`noise_level_test`: a one-cluster test that, unlike the default's reference, reads
  the **noise level** from the contrasts instead of from the spread of the clients' own
  descriptors. From the D of the ``(k + 1) n`` split rows (``flux.split_whitened_distances``'
  input) it embeds D, whitens the descriptors by the OAS-shrunk covariance ``S`` of the
  ``n (k - 1)`` within-client contrasts (the default's whitening), and takes ``T`` = the
  largest eigenvalue of their centred Gram matrix. The reference is a parametric bootstrap
  that repeats the estimate: each draw takes ``n (k - 1)`` contrasts from ``N(0, S)`` and
  ``n`` descriptors from ``N(0, (k - 1) / 4 S)`` (the contrasts' mean outer product is
  ``4 / (k - 1)`` times the clients' jackknife covariance, which estimates a descriptor's
  own), re-estimates ``S`` by OAS, whitens and reads ``T``; ``p = (1 + #{T_b >= T}) / (1 +
  B)``. Its null is "the clients' descriptors differ by their rows' sampling noise only":
  clients drawn from one distribution. Clients of one group that each have their own
  distribution (the generator's label shift: every client's class prior is
  ``Dirichlet(50 p_g)``) differ by more, and the test splits them (measured:
  :func:`one_group_records`). So it is a measurement of what the noise level is worth, not a rule.

Usage (JSON lines appended to ``--out``, resumed; ``--table`` prints the counts)::

    python benchmarks/flux_noise_level.py --runs --clients 6 --seeds 3433-3438 --out F
    python benchmarks/flux_noise_level.py --one-group --seeds 3433-3444 --out G
    python benchmarks/flux_noise_level.py --told-covariance --seeds 3433-3438 --out H
    python benchmarks/flux_noise_level.py --table F G H
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from omnifc.adapters.flux._split_half import squared_distances  # noqa: E402

#: Reference draws of :func:`noise_level_test` and of the default's rule (``flux:
#: axis_or_gap@0.01``'s B), and the level both are read at (the default's).
REFERENCES = 199
ALPHA = 0.01
#: The default's number of groups per client (``flux.DEFAULT_SPLIT_GROUPS``).
GROUPS = 10


def _split_parts(distances, n: int, groups: int):
    """``(contrasts, points)`` of D of the ``(k + 1) n`` rows, as
    ``flux.split_whitened_distances`` reads them (``_split_half.split_embedding``); only
    that shape is taken: the test reads each client's own descriptor."""
    from omnifc.adapters.flux import _split_half

    d = np.asarray(distances, dtype=np.float64)
    k = _split_half.split_group_count(groups)
    if n < 2 or d.shape != ((k + 1) * n, (k + 1) * n):
        raise ValueError(f"D must be (k + 1) n x (k + 1) n for k = {k} and n = {n} >= 2, "
                         f"got {d.shape}")
    return _split_half.split_embedding(d, n, groups=k)


def top_eigenvalue(points) -> float:
    """The largest eigenvalue of the centred Gram matrix of ``points`` (rows): the spread of
    the clients along their leading axis.

    >>> round(top_eigenvalue(np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 1.0], [2.0, 1.0]])), 9)
    4.0
    """
    y = np.asarray(points, dtype=np.float64)
    y = y - y.mean(axis=0)
    return float(np.linalg.eigvalsh(y @ y.T)[-1])


def noise_level_test(distances, n: int, *, groups: int = GROUPS,
                     references: int = REFERENCES, seed: int = 0) -> tuple[float, float]:
    """``(T, p)`` of the one-cluster test at the contrasts' noise level (module docstring)
    on the squared distances of the ``(k + 1) n`` rows ``[G_0; ...; G_{k-1}; F]``.

    >>> rng = np.random.default_rng(1)
    >>> f = rng.standard_normal((6, 4))
    >>> g = f[None] + 0.3 * rng.standard_normal((3, 6, 4))
    >>> x = np.vstack(list(g) + [f])
    >>> d = ((x[:, None] - x[None]) ** 2).sum(-1)
    >>> t, p = noise_level_test(d, 6, groups=3, references=19)
    >>> bool(0 < p <= 1) and noise_level_test(d * 4, 6, groups=3, references=19)[1] == p
    True
    """
    if references < 1:
        raise ValueError(f"references must be >= 1, got {references}")
    return _noise_level_of_parts(*_split_parts(distances, int(n), groups), references, seed)


def _noise_level_of_parts(contrasts, points, references: int, seed: int):
    """:func:`noise_level_test` on the parts of D that ``_split_parts`` reads."""
    from omnifc.adapters.flux._split_half import oas_whitened_points

    k = contrasts.shape[0] // points.shape[0] + 1
    whitened, s = oas_whitened_points(contrasts, points)
    observed = top_eigenvalue(whitened)
    values, vectors = np.linalg.eigh(s)
    root = vectors * np.sqrt(np.maximum(values, 0.0))
    rng = np.random.default_rng(seed)
    draws = np.empty(references)
    for b in range(references):
        noise = rng.standard_normal(contrasts.shape) @ root.T
        clients = rng.standard_normal(points.shape) @ root.T * np.sqrt((k - 1) / 4)
        draws[b] = top_eigenvalue(oas_whitened_points(noise, clients)[0])
    return observed, float((1 + np.sum(draws >= observed)) / (1 + references))


def noise_level_of_parts(contrasts, points, seed: int) -> dict:
    """The noise-level test's record fields (``p``) on the parts of one split D."""
    return {"p": _noise_level_of_parts(contrasts, points, REFERENCES, seed)[1]}


def default_and_test(full, n: int, groups: int, seed: int, test=noise_level_of_parts) -> dict:
    """The default's K and ``test(contrasts, points, seed)``'s fields on one split D (one
    embedding for both)."""
    from omnifc.adapters.flux._split_half import oas_whitened_distances

    parts = _split_parts(full, n, groups)
    return {"default": _default_k(oas_whitened_distances(*parts)), **test(*parts, seed)}


def default_decision(distances):
    """The default's rule (``flux:axis_or_gap@0.01``, B = 199) on an n x n D: its
    ``KDecision``."""
    from omnifc.adapters._calibrated_k import calibrated_k

    return calibrated_k(distances, statistic="axis_or_gap", alpha=ALPHA,
                        references=REFERENCES)


def _default_k(distances) -> int:
    """The K of :func:`default_decision`."""
    return default_decision(distances).k


def _split_run(shift, n, rows, imbalance, classes, seed, *, groups=GROUPS):
    """``(D of the (k + 1) n split rows, planted groups)`` of one grid run, as the grid's
    ``--normalization split --split-groups k`` builds them (plaintext, not quantized)."""
    import bench_k_selection as grid
    from omnifc.adapters import flux

    clients, planted, c, latents, scale = grid.encoded_run(shift, n, rows, imbalance,
                                                           classes, seed)
    form = flux.DEFAULT_DESCRIPTOR_FORM
    proj, desc = grid.flux_descriptors(clients, latents, c,
                                       flux.flux_components(c, grid.ENCODER_DIM), form, scale)
    splits = grid.split_halves(latents, [cl.y_train for cl in clients], proj, c, form, seed,
                               groups=groups)
    return squared_distances(np.vstack(list(splits) + [desc])), planted


def run_record(shift, n, rows, imbalance, classes, seed, *, groups=GROUPS,
               test=noise_level_of_parts) -> dict:
    """One grid run: its planted K, the default's K on its split D and the noise-level
    test's ``p`` (reference draws seeded by the run's seed); ``test``: another test's
    fields instead (:func:`default_and_test`)."""
    full, planted = _split_run(shift, n, rows, imbalance, classes, seed, groups=groups)
    return {"planted": int(len(set(planted.tolist()))),
            **default_and_test(full, n, groups, seed, test)}


def one_group_records(shift, rows, classes, seed, *, per_group: int = 6,
                      groups=GROUPS, test=noise_level_of_parts) -> list[dict]:
    """The level check: the grid's run of ``2 per_group`` clients at 1 : 1, each planted
    group alone (``per_group`` clients of one distribution, or under label shift of one
    group prior), split as the grid splits them (:func:`one_group_distances`). Per group:
    the noise-level test's ``p`` (or ``test``'s fields) and the default's K on the same
    split D (K > 1 is a split)."""
    return [default_and_test(full, n, groups, seed, test) for full, n in
            one_group_distances(shift, rows, classes, seed, per_group=per_group,
                                groups=groups)]


def read_records(paths) -> list[dict]:
    """The records of the JSON-lines files ``paths``, in order (blank lines skipped)."""
    out = []
    for path in paths:
        with open(path) as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def append_records(path, records, seen: set) -> None:
    """Append to ``path`` the ``records`` whose ``(kind, run)`` is not in ``seen``, and add
    theirs to it (the scripts' resumption)."""
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records
                     if (r["kind"], tuple(r["run"])) not in seen)
    seen.update((r["kind"], tuple(r["run"])) for r in records)


def one_group_distances(shift, rows, classes, seed, *, per_group: int = 6, groups=GROUPS):
    """``[(D of the (k + 1) n split rows, n)]`` for each planted group of the grid's run of
    ``2 per_group`` clients at 1 : 1 alone, as the grid splits them (descriptors and
    delete-a-group descriptors of the group's own clients; the split's random groups seeded
    by ``[seed, g]``)."""
    import bench_k_selection as grid
    from omnifc.adapters import flux

    clients, planted, c, latents, scale = grid.encoded_run(shift, 2 * per_group, rows, 1,
                                                           classes, seed)
    form = flux.DEFAULT_DESCRIPTOR_FORM
    proj = flux.shared_projection(grid.ENCODER_DIM, flux.flux_components(c, grid.ENCODER_DIM),
                                  max_value=scale)
    out = []
    for g in (0, 1):
        take = np.flatnonzero(planted == g)
        lat, lab = [latents[i] for i in take], [clients[i].y_train for i in take]
        desc = np.stack([flux.descriptor(z, y, proj, c, form=form) for z, y in zip(lat, lab)])
        splits = flux.split_descriptors(lat, lab, proj, c, form=form,
                                        rng=np.random.default_rng([seed, g]), groups=groups)
        out.append((squared_distances(np.vstack(list(splits) + [desc])), len(take)))
    return out


def told_covariance_distances(shift, rows, classes, seed, n, imbalance, *,
                              clients_per_group: int = 2000, skip: int = 300) -> np.ndarray:
    """One grid run's descriptors whitened by the population's within-group covariance
    ``Sigma`` on its numerical rank, as squared distances: the population and the whitening
    of ``flux_direction_free_bound.told_the_covariance`` (the runs' own clients left out,
    descriptors at the run's activation scale)."""
    import bench_k_selection as grid
    import flux_direction_free_bound as free
    import flux_label_free_bound as lf
    from omnifc.adapters import flux

    clients, groups, c, latents, _ = free._last_population(shift, rows, classes, seed,
                                                           clients_per_group, skip)
    run_clients, _, _, run_latents, scale = grid.encoded_run(shift, n, rows, imbalance,
                                                             classes, seed)
    components = flux.flux_components(c, grid.ENCODER_DIM)
    form = flux.DEFAULT_DESCRIPTOR_FORM
    x = grid.flux_descriptors(clients, latents, c, components, form, scale)[1]
    run = grid.flux_descriptors(run_clients, run_latents, c, components, form, scale)[1]
    values, vectors = lf.numerical_eigen(lf._within_groups(x, groups)[1])
    return squared_distances(run @ (vectors / np.sqrt(values)))


def rule_told_the_covariance(shift, rows, classes, seed, n, imbalance, **population) -> int:
    """The default's rule (its K) on :func:`told_covariance_distances`: the rule instead of
    the ratio test, told what the ratio test is told of the noise."""
    return _default_k(told_covariance_distances(shift, rows, classes, seed, n, imbalance,
                                                **population))


def _runs(args, grid):
    from _common import int_list
    return [(shift, n, rows, imbalance, classes, seed)
            for seed in int_list(args.seeds) for shift in args.shifts.split(",")
            for classes in int_list(args.classes) for rows in int_list(args.rows)
            for n in int_list(args.clients) for imbalance in (1, 10)]


def table(paths, alpha: float = ALPHA) -> list[str]:
    """Counts of the records in ``paths`` per (kind, clients, rows, shift, classes): runs,
    the default's K right, the noise-level test's K = 2 at ``alpha`` (runs) or splits (one
    group), the rule told ``Sigma``'s K = 2."""
    counts = {}
    for rec in read_records(paths):
        shift, n, rows, _, classes, _ = rec["run"]
        key = (rec["kind"], n, rows, shift, classes)
        c = counts.setdefault(key, [0, 0, 0])
        c[0] += 1
        if rec["kind"] == "runs":
            c[1] += rec["default"] == rec["planted"]
            c[2] += (2 if rec["p"] <= alpha else 1) == rec["planted"]
        elif rec["kind"] == "one-group":
            c[1] += rec["default"] > 1
            c[2] += rec["p"] <= alpha
        else:
            c[2] += rec["k"] == 2
    lines = ["| kind | clients | rows | shift | classes | runs | default: K right / splits | "
             "noise-level test: K right / splits; told Sigma: K = 2 |", "|---" * 8 + "|"]
    for (kind, n, rows, shift, classes), (runs, default, other) in sorted(counts.items()):
        shown = "" if kind == "told-covariance" else default
        lines.append(f"| {kind} | {n} | {rows} | {shift} | {classes} | {runs} | {shown} | "
                     f"{other} |")
    return lines


def main(argv=None) -> int:
    import argparse
    import bench_k_selection as grid
    from _common import int_list
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kind = parser.add_mutually_exclusive_group(required=True)
    kind.add_argument("--runs", action="store_true",
                      help="the grid's runs (planted and iid): default K and the test's p")
    kind.add_argument("--one-group", action="store_true",
                      help="the level check: each group of a 6 : 6 run alone "
                      "(one_group_records)")
    kind.add_argument("--told-covariance", action="store_true",
                      help="the default's rule told the population's Sigma")
    kind.add_argument("--table", nargs="+", metavar="FILE")
    parser.add_argument("--seeds", default="3433-3444")
    parser.add_argument("--clients", default="6")
    parser.add_argument("--rows", default="20,50,500")
    parser.add_argument("--classes", default="2,10")
    parser.add_argument("--shifts", default=",".join(grid.SHIFTS))
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(table(args.table, args.alpha)))
        return 0
    if not args.out:
        parser.error("--out is needed with --runs, --one-group and --told-covariance")
    kind_name = "runs" if args.runs else "one-group" if args.one_group else "told-covariance"
    seen = set()
    if os.path.exists(args.out):
        seen = {(rec["kind"], tuple(rec["run"])) for rec in read_records([args.out])}
    if args.runs:
        todo = list(_runs(args, grid))
        todo += [("none", n, rows, 1, classes, seed) for seed in int_list(args.seeds)
                 for classes in int_list(args.classes) for rows in int_list(args.rows)
                 for n in int_list(args.clients)]
    elif args.one_group:
        todo = [(shift, 6, rows, g, classes, seed) for seed in int_list(args.seeds)
                for shift in args.shifts.split(",") for classes in int_list(args.classes)
                for rows in int_list(args.rows) for g in (0, 1)]
    else:
        todo = _runs(args, grid)
    for run in todo:
        if (kind_name, run) in seen:
            continue
        shift, n, rows, imbalance, classes, seed = run
        if args.runs:
            rec = run_record(shift, n, rows, imbalance, classes, seed)
        elif args.one_group:     # imbalance holds the group; both come from one call
            append_records(args.out, [
                {"kind": kind_name, "run": [shift, 6, rows, g, classes, seed], **r}
                for g, r in enumerate(one_group_records(shift, rows, classes, seed))], seen)
            continue
        else:
            rec = {"k": rule_told_the_covariance(shift, rows, classes, seed, n, imbalance)}
        append_records(args.out, [{"kind": kind_name, "run": list(run), **rec}], seen)
    print("\n".join(table([args.out], args.alpha)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

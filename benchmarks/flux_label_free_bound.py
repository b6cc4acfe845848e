"""FLUX's K grid against the best any label-free rule could do (a Neyman-Pearson bound).

Not a speed benchmark. Issue 24 asks, where a cell stays below its goal, to show that no rule
could do better there. The grid's oracle (``bench_k_selection.permanova``) is *told the
groups*, so it says what a test that knows them finds, not what a rule that must find them
could. This reference bounds every label-free rule, in a model:

**The model.** In one cell and seed, a client's FLUX descriptor is Gaussian with its
group's mean and a covariance ``Sigma`` shared by both groups; the groups have the cell's
sizes ``m`` and ``n - m``. The one-cluster null contains every Gaussian (every K rule of the
project treats a Gaussian as one cluster: ``calibrated``'s references are drawn from one), in
particular ``G0``, the Gaussian with the same mean and covariance as the two groups pooled.
A rule that answers K >= 2 in at most ``alpha`` of the runs drawn from ``G0`` (level alpha)
answers K >= 2 on the planted federation at most as often as the Neyman-Pearson test of
``G0`` against the planted model, which is told the groups' means, ``Sigma`` and sizes, but
not which client is in which group. K right needs K >= 2, so that power bounds every
label-free rule's count of K right in the model.

**Exact reduction to one axis.** Whitened by ``Sigma``, the two hypotheses differ only along
``Sigma^{-1} delta`` (``delta``: the difference of the group means); every orthogonal
direction is standard normal and independent of it under both. So the likelihood ratio is
that of the clients' projections ``u_i`` on that axis: under the planted model ``m`` of them
are ``N(a, 1)`` and ``n - m`` are ``N(b, 1)`` in an unknown arrangement (``a - b = Delta``,
the Mahalanobis separation; ``m a + (n - m) b = 0``), under ``G0`` all are
``N(0, 1 + pi (1 - pi) Delta^2)``, ``pi = m / n``. The planted density is the average over
the ``C(n, m)`` arrangements, ``e_m(r) prod f_b(u_i) / C(n, m)`` with ``r_i = f_a(u_i) /
f_b(u_i)`` and ``e_m`` the elementary symmetric polynomial (:func:`log_elementary_symmetric`,
a dynamic programme in O(n m)). :func:`label_free_power` gives the test's power by Monte
Carlo (common random numbers over ``Delta``); it depends on ``(n, m, Delta)`` only.

**The separation of a cell** (:func:`population_axis`): the generator of the grid
(``bench_k_selection``: same data set, shift, rows per client, seed, so the same group
transforms and public encoder) builds ``POPULATION_CLIENTS`` clients per group; their
descriptors (the grid's form) give ``Delta^2`` by the unbiased estimator of the squared
Mahalanobis distance (:func:`separation`). Each run of the grid gets the power at its own
seed's ``Delta``; a cell's bound is the mean over its seeds.

**What it is not.** A bound *in the model*: descriptors are not Gaussian, and groups that
differ in their spread as well as their mean (label shift can) give a test something this
model does not count. Where a rule exceeds the bound beyond Monte Carlo noise, the model does
not hold there, and the table says so (column ``over``).

Usage::

    python benchmarks/flux_label_free_bound.py [--seeds 3049-3072] [--cache DIR]
        [--results DIR/results_weighted_all.jsonl] [--rule flux:calibrated]
        [--descriptor-form weighted_all] [--alpha 0.05] [--quick]

``--alpha``: the level of the rules bounded and of the test told the axis (issue 24's iid
goal is met reliably at ``GOAL_ALPHA`` = 0.01: docs/adapters.md, twelfth pass).
``--results``: the grid's results file of the same seeds (``bench_k_selection --cache``),
whose rule is compared run by run; ``--cache``: the populations' separations and axes
and the told-axis runs are kept there and reused (resumable).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_k_selection as grid  # noqa: E402
from _common import int_list  # noqa: E402

from omnifc.adapters import flux  # noqa: E402

#: Clients per group behind a cell's separation: the estimator's spread at d = 220 and
#: Delta ~ 2 is about 0.05 in Delta (:func:`separation`'s docstring).
POPULATION_CLIENTS = 2000
#: Monte Carlo draws per hypothesis behind one power (its standard error <= 0.011).
DRAWS = 2000
#: The grid's level.
ALPHA = 0.05
#: Separations at which the power curve is tabulated (step 0.1), then interpolated.
DELTA_STEP = 0.1


def log_elementary_symmetric(log_r, m: int):
    """``log e_m(r)`` over the last axis, from ``log r`` (any leading shape).

    ``e_m(r) = sum over the m-subsets S of prod_{i in S} r_i``, by the recursion
    ``e_k(r_1..r_i) = e_k(r_1..r_{i-1}) + r_i e_{k-1}(r_1..r_{i-1})`` in log space.

    >>> r = np.array([1.0, 2.0, 3.0])
    >>> round(float(np.exp(log_elementary_symmetric(np.log(r), 2))), 9)   # 2 + 3 + 6
    11.0
    """
    log_r = np.asarray(log_r, dtype=np.float64)
    n = log_r.shape[-1]
    if not 0 <= m <= n:
        raise ValueError(f"need 0 <= m <= n, got m={m}, n={n}")
    table = np.full(log_r.shape[:-1] + (m + 1,), -np.inf)
    table[..., 0] = 0.0
    with np.errstate(invalid="ignore"):
        for i in range(n):
            table[..., 1:] = np.logaddexp(table[..., 1:], table[..., :-1] + log_r[..., i, None])
    return table[..., m]


def group_means(n: int, m: int, delta: float) -> tuple[float, float]:
    """The two groups' means on the discriminant axis: ``a - b = delta``, mean 0."""
    pi = m / n
    return (1.0 - pi) * delta, -pi * delta


def null_variance(n: int, m: int, delta: float) -> float:
    """The variance of ``G0`` on the discriminant axis: ``1 + pi (1 - pi) delta^2``."""
    return 1.0 + (m / n) * (1.0 - m / n) * delta ** 2


def log_likelihood_ratio(u, m: int, delta: float):
    """``log`` of (planted model / ``G0``) for the projections ``u`` (last axis: clients),
    plus ``log C(n, m)`` (a constant; the test does not need it).

    >>> float(log_likelihood_ratio(np.zeros(4), 2, 0.0))   # the hypotheses coincide: C(4, 2)
    1.791759469228055
    """
    u = np.asarray(u, dtype=np.float64)
    n = u.shape[-1]
    a, b = group_means(n, m, delta)
    var0 = null_variance(n, m, delta)
    log_r = delta * u - (a * a - b * b) / 2.0
    log_fb = -0.5 * (u - b) ** 2
    log_g0 = -0.5 * u ** 2 / var0 - 0.5 * math.log(var0)
    return log_elementary_symmetric(log_r, m) + (log_fb - log_g0).sum(axis=-1)


def label_free_power(n: int, m: int, deltas, *, alpha: float = ALPHA, draws: int = DRAWS,
                     seed: int = 0):
    """Power of the level-``alpha`` Neyman-Pearson test of ``G0`` against ``m : n - m``
    groups ``Delta`` apart (labels unknown), at every ``Delta`` in ``deltas`` (Monte Carlo,
    the same draws for every ``Delta``). At ``Delta = 0`` it is ``alpha`` up to the draws.

    >>> p = label_free_power(20, 10, [0.0, 8.0], draws=500)
    >>> bool(abs(p[0] - 0.05) < 0.03), bool(p[1] > 0.99)
    (True, True)
    """
    rng = np.random.default_rng(seed)
    z0, z1 = rng.standard_normal((draws, n)), rng.standard_normal((draws, n))
    out = []
    for delta in np.asarray(deltas, dtype=np.float64):
        a, b = group_means(n, m, float(delta))
        var0 = null_variance(n, m, float(delta))
        shift = np.where(np.arange(n) < m, a, b)
        null = log_likelihood_ratio(z0 * math.sqrt(var0), m, float(delta))
        planted = log_likelihood_ratio(z1 + shift, m, float(delta))
        out.append(_randomized_power(null, planted, alpha))
    return np.array(out)


def _randomized_power(null, planted, alpha: float) -> float:
    """The power of the test "reject above q, with probability gamma at q" whose level on
    the ``null`` draws is exactly ``alpha`` (ties matter at ``Delta = 0``, where the ratio is
    constant and the power is ``alpha``)."""
    q = float(np.quantile(null, 1.0 - alpha))
    above, tied = float(np.mean(null > q)), float(np.mean(null == q))
    gamma = (alpha - above) / tied if tied > 0 else 0.0
    return float(np.mean(planted > q) + gamma * np.mean(planted == q))


def power_curve(n: int, m: int, delta_max: float, *, alpha: float = ALPHA,
                draws: int = DRAWS, seed: int = 0):
    """``(deltas, powers)`` on a grid of step :data:`DELTA_STEP` from 0 to past
    ``delta_max``, stopped early once the power stays at 1 (two grid points)."""
    deltas, powers = [], []
    for delta in np.arange(0.0, delta_max + 2 * DELTA_STEP, DELTA_STEP):
        deltas.append(float(delta))
        powers.append(float(label_free_power(n, m, [delta], alpha=alpha, draws=draws,
                                             seed=seed)[0]))
        if len(powers) >= 2 and min(powers[-2:]) >= 1.0:
            break
    return np.array(deltas), np.array(powers)


def interpolate_power(curve, delta: float) -> float:
    """The power at ``delta`` from :func:`power_curve` (linear; 1 past a curve that ended
    at 1, the last value past one that did not reach it)."""
    deltas, powers = curve
    return float(np.interp(delta, deltas, powers))


def _within_groups(x, groups):
    """``(sizes, S, delta)`` of exactly two groups of rows: their sizes, the pooled
    within-group covariance (``N - 2`` degrees of freedom) and ``mean_0 - mean_1``."""
    x = np.asarray(x, dtype=np.float64)
    groups = np.asarray(groups)
    labels = np.unique(groups)
    if len(labels) != 2:
        raise ValueError(f"separation needs exactly 2 groups, got {len(labels)}")
    parts = [x[groups == g] for g in labels]
    centred = np.vstack([p - p.mean(axis=0) for p in parts])
    return ([len(p) for p in parts], centred.T @ centred / (len(x) - 2),
            parts[0].mean(axis=0) - parts[1].mean(axis=0))


def numerical_eigen(cov):
    """``(values, vectors)`` of a covariance on its numerical rank: the eigenpairs whose value
    exceeds ``1e-10`` times the largest (the rank of :func:`separation` and of the
    whitening in ``flux_direction_free_bound``).

    >>> values, vectors = numerical_eigen(np.diag([4.0, 1.0, 1e-14]))
    >>> values.tolist(), vectors.shape
    ([1.0, 4.0], (3, 2))
    """
    values, vectors = np.linalg.eigh(cov)
    keep = values > values.max(initial=0.0) * 1e-10
    return values[keep], vectors[:, keep]


def separation(x, groups):
    """``(Delta^2 unbiased, Delta^2 plug-in, rank)`` of two groups of rows ``x``.

    Plug-in: ``delta^T S^+ delta`` with ``S`` the pooled within-group covariance (``nu =
    N - 2`` degrees of freedom) restricted to its numerical rank ``r``. For Gaussian rows its
    mean is ``nu / (nu - r - 1) (Delta^2 + r (1/N_1 + 1/N_2))``, so ``(nu - r - 1) / nu``
    times it minus ``r (1/N_1 + 1/N_2)`` is unbiased (clipped at 0). Its standard deviation
    is about ``sqrt(2 r) (1/N_1 + 1/N_2) + 2 Delta sqrt(1/N_1 + 1/N_2)``: 0.05 in Delta at
    ``r = 220``, ``Delta = 2`` and 2,000 rows per group.

    >>> rng = np.random.default_rng(0)
    >>> x = np.vstack([rng.standard_normal((4000, 3)), rng.standard_normal((4000, 3)) + [2, 0, 0]])
    >>> unbiased, _, rank = separation(x, [0] * 4000 + [1] * 4000)
    >>> bool(abs(unbiased - 4.0) < 0.3), rank          # Delta^2 = 4
    (True, 3)
    """
    sizes, cov, delta = _within_groups(x, groups)
    return separation_of_parts(sizes, *numerical_eigen(cov), delta)


def separation_of_parts(sizes, values, vectors, delta):
    """:func:`separation` from parts already computed: the group sizes, the within-group
    covariance's :func:`numerical_eigen` pairs and the difference of the group means (for
    a caller that also whitens by those pairs)."""
    nu = sum(sizes) - 2
    rank = len(values)
    if rank == 0 or nu - rank - 1 <= 0:
        raise ValueError(f"too few rows ({sum(sizes)}) for a covariance of rank {rank}")
    coords = vectors.T @ delta
    plug_in = float(np.sum(coords ** 2 / values))
    unbiased = (nu - rank - 1) / nu * plug_in - rank * (1.0 / sizes[0] + 1.0 / sizes[1])
    return max(unbiased, 0.0), plug_in, rank


#: The generator draws a run's group-0 clients first, so a population of the same seed
#: begins with them: its first ``POPULATION_SKIP`` group-0 clients (the grid's largest
#: federation) are dropped, and no run's client is in its population.
POPULATION_SKIP = 300


def population_clients(shift: str, rows: int, classes: int, seed: int, *,
                       clients_per_group: int = POPULATION_CLIENTS,
                       skip: int = POPULATION_SKIP) -> tuple:
    """``(clients, groups, classes, latents, M)`` of one (shift, rows, classes, seed)'s
    population: drawn as the grid draws a run of this seed (``bench_k_selection.
    encoded_run`` at 1:1, ``clients_per_group + skip`` per group), group 0's first ``skip``
    clients (the runs' own) left out; ``M``, FLUX's activation scale, is the whole draw's."""
    per_group = clients_per_group + skip
    clients, groups, c, latents, scale = grid.encoded_run(shift, 2 * per_group, rows, 1,
                                                          classes, seed)
    kept = np.flatnonzero(~((groups == 0) & (np.arange(len(groups)) < skip)))
    return ([clients[i] for i in kept], groups[kept], c, [latents[i] for i in kept], scale)


def population_axis(shift: str, rows: int, classes: int, seed: int, *,
                    clients_per_group: int = POPULATION_CLIENTS, skip: int = POPULATION_SKIP,
                    descriptor_form: str = flux.DEFAULT_DESCRIPTOR_FORM) -> dict:
    """The separation and the discriminant axis of one (shift, rows, classes, seed).

    The clients are :func:`population_clients` (the same ``fl.make_federated`` call as a
    run of this seed, so the same group transforms, encoder and projection; the runs' own
    group-0 clients left out), their descriptors as ``bench_k_selection.run_descriptors``
    builds them (at the whole draw's activation scale). Returns
    ``delta2`` / ``plug_in`` / ``rank`` (:func:`separation`) and ``axis``: Fisher's
    discriminant direction of these clients (:func:`discriminant_axis`)."""
    clients, groups, c, latents, scale = population_clients(
        shift, rows, classes, seed, clients_per_group=clients_per_group, skip=skip)
    x = grid.flux_descriptors(clients, latents, c, flux.flux_components(c, grid.ENCODER_DIM),
                              descriptor_form, scale)[1]
    unbiased, plug_in, rank = separation(x, groups)
    return {"delta2": unbiased, "plug_in": plug_in, "rank": rank,
            "axis": discriminant_axis(x, groups)}


def discriminant_axis(x, groups):
    """Fisher's direction ``S^+ (mean_0 - mean_1)`` (``S``: the pooled within-group
    covariance, pseudo-inverted on its numerical rank), scaled to unit length."""
    _, cov, delta = _within_groups(x, groups)
    axis = np.linalg.pinv(cov, rcond=1e-10, hermitian=True) @ delta
    return axis / np.linalg.norm(axis)


def population_axes(keys, cache=None, **options) -> dict:
    """``{(shift, rows, classes, seed): population_axis(...)}``, each cached as
    ``cache/axis_<shift>_<rows>_<classes>_<seed>_<form>_n<clients>_skip<skip>.npz`` and
    reused."""
    form = options.get("descriptor_form", flux.DEFAULT_DESCRIPTOR_FORM)
    setting = (f"_{form}_n{options.get('clients_per_group', POPULATION_CLIENTS)}"
               f"_skip{options.get('skip', POPULATION_SKIP)}")
    out = {}
    for key in keys:
        path = (None if cache is None else
                os.path.join(cache, "axis_" + "_".join(map(str, key)) + setting + ".npz"))
        if path is not None and os.path.exists(path):
            rec = dict(np.load(path))
        else:
            rec = population_axis(*key, **options)
            if path is not None:
                np.savez(path, **rec)
        out[key] = {k: (v if k == "axis" else float(v)) for k, v in rec.items()}
    return out


def two_means_1d(y):
    """``(W_2 / W_1, labels)``: the exact best split of the values ``y`` into two groups
    (smallest within sum of squares ``W_2``; ``W_1`` that of one group), found over every
    cut of the sorted values.

    >>> index, labels = two_means_1d([0.0, 0.1, 5.0, 5.2])
    >>> round(index, 4), labels.tolist()
    (0.001, [0, 0, 1, 1])
    """
    y = np.asarray(y, dtype=np.float64)
    order = np.argsort(y, kind="stable")
    s = y[order]
    n = len(s)
    total = float(((s - s.mean()) ** 2).sum())
    if n < 2 or total <= 0:
        return 1.0, np.zeros(n, dtype=np.int64)
    csum, csq = np.cumsum(s), np.cumsum(s * s)
    k = np.arange(1, n)
    left = csq[:-1] - csum[:-1] ** 2 / k
    right = (csq[-1] - csq[:-1]) - (csum[-1] - csum[:-1]) ** 2 / (n - k)
    cut = int(np.argmin(left + right))
    labels = np.zeros(n, dtype=np.int64)
    labels[order[cut + 1:]] = 1
    return float(max(left[cut] + right[cut], 0.0) / total), labels


_NULLS: dict = {}


def two_means_null(n: int, *, draws: int = 20000, seed: int = 0):
    """The sorted null draws of :func:`two_means_1d` for ``n`` iid normal values. The
    index is invariant to location and scale, so this one distribution is the null of every
    normal sample of size ``n``: the test below has exact level under it."""
    if (n, draws, seed) not in _NULLS:
        z = np.random.default_rng(seed).standard_normal((draws, n))
        _NULLS[(n, draws, seed)] = np.sort([two_means_1d(row)[0] for row in z])
    return _NULLS[(n, draws, seed)]


def told_axis(x, axis, *, alpha: float = ALPHA, draws: int = 20000):
    """A label-free test **told the discriminant axis** (not the groups): the clients'
    descriptors ``x`` projected on ``axis``, their 1-D two-means index against its normal
    null (:func:`two_means_null`); the split when ``p <= alpha``, else one cluster.

    Returns ``(labels, p)``.

    >>> rng = np.random.default_rng(1)
    >>> x = np.vstack([rng.standard_normal((10, 3)), rng.standard_normal((10, 3)) + [6, 0, 0]])
    >>> labels, p = told_axis(x, np.array([1.0, 0.0, 0.0]), draws=2000)
    >>> labels.tolist() == [0] * 10 + [1] * 10, p <= 0.05
    (True, True)
    """
    y = np.asarray(x, dtype=np.float64) @ np.asarray(axis, dtype=np.float64)
    index, labels = two_means_1d(y)
    null = two_means_null(len(y), draws=draws)
    p = (1 + int(np.searchsorted(null, index, side="right"))) / (1 + len(null))
    return (labels if p <= alpha else np.zeros(len(y), dtype=np.int64)), p


def planted_cells(clients, rows, classes):
    """The grid's planted cells (shift, n, rows, imbalance, classes)."""
    return [cell for cell in grid.cells(clients, rows, classes, iid_clients=[])
            if cell[0] != "none"]


def cell_bounds(cells, seeds, deltas, *, draws: int = DRAWS, alpha: float = ALPHA) -> dict:
    """``{cell: [power per seed]}``: each run's bound at its own seed's separation (one power
    curve per group-size pair, up to the largest separation it is needed at), for rules of
    level ``alpha``."""
    sizes = {cell: grid.group_sizes(cell[1], cell[3]) for cell in cells}
    needed = {cell: [deltas[(cell[0], cell[2], cell[4], s)] for s in seeds] for cell in cells}
    reach = {}
    for cell, (big, small) in sizes.items():
        key = (big + small, small)
        reach[key] = max(reach.get(key, 0.0), max(needed[cell]))
    curves = {key: power_curve(*key, top, draws=draws, alpha=alpha)
              for key, top in reach.items()}
    return {cell: [interpolate_power(curves[(big + small, small)], d) for d in needed[cell]]
            for cell, (big, small) in sizes.items()}


def _level_suffix(alpha: float) -> str:
    """The told-axis runs files' suffix for a level other than :data:`ALPHA` (none for it,
    so the files of earlier runs stay theirs)."""
    return "" if float(alpha) == ALPHA else f"_alpha{float(alpha):g}"


def _runs_file(cache, name):
    """``(path, {(cell, seed): record})`` of a resumable per-run file ``cache/name`` (one
    JSON record per line; ``(None, {})`` without a cache)."""
    if cache is None:
        return None, {}
    path = os.path.join(cache, name)
    stored = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                stored[(tuple(rec["cell"]), rec["seed"])] = rec
    return path, stored


def _append(path, record) -> None:
    """One record appended to a :func:`_runs_file` (nothing without a cache)."""
    if path is not None:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def told_axis_counts(cells, seeds, axes, cache=None, *,
                     descriptor_form=flux.DEFAULT_DESCRIPTOR_FORM,
                     alpha: float = ALPHA) -> dict:
    """``{cell: {seed: (K, exact)}}`` of :func:`told_axis` at level ``alpha`` on each run's
    own descriptors, the axis being its seed's population axis
    (``cache/told_axis_<form>[_alpha<a>].jsonl``, resumable)."""
    path, stored = _runs_file(cache, f"told_axis_{descriptor_form}{_level_suffix(alpha)}.jsonl")
    done = {run: (rec["k"], rec["exact"]) for run, rec in stored.items()}
    for cell in cells:
        for seed in seeds:
            if (cell, seed) in done:
                continue
            x, groups = grid.run_descriptors(*cell, seed, descriptor_form=descriptor_form)
            labels, _ = told_axis(x, axes[(cell[0], cell[2], cell[4], seed)]["axis"],
                                  alpha=alpha)
            k = len(set(labels.tolist()))
            exact = bool(k == 2 and grid.adjusted_rand_score(groups, labels) == 1)
            done[(cell, seed)] = (k, exact)
            _append(path, {"cell": list(cell), "seed": seed, "k": k, "exact": exact})
    return {cell: {s: done[(cell, s)] for s in seeds} for cell in cells}


def told_axis_iid(clients, rows, classes, seeds, axes, cache=None, *,
                  descriptor_form=flux.DEFAULT_DESCRIPTOR_FORM, alpha: float = ALPHA) -> dict:
    """The told-axis test's level (``alpha``) on the grid's iid federations (K = 1):
    ``{(n, classes): (splits, tests)}``, every iid run projected on each planted shift's
    population axis of its (rows, classes, seed)
    (``cache/told_axis_iid_<form>[_alpha<a>].jsonl``, resumable)."""
    path, stored = _runs_file(cache,
                              f"told_axis_iid_{descriptor_form}{_level_suffix(alpha)}.jsonl")
    done = {run: rec["splits"] for run, rec in stored.items()}
    out = {}
    for n in clients:
        for c in classes:
            for r in rows:
                cell = ("none", n, r, 1, c)
                for seed in seeds:
                    if (cell, seed) not in done:
                        x, _ = grid.run_descriptors(*cell, seed,
                                                    descriptor_form=descriptor_form)
                        done[(cell, seed)] = [
                            int(told_axis(x, axes[(shift, r, c, seed)]["axis"])[1] <= alpha)
                            for shift in grid.SHIFTS]
                        _append(path, {"cell": list(cell), "seed": seed,
                                       "splits": done[(cell, seed)]})
                    splits, tests = out.get((n, c), (0, 0))
                    out[(n, c)] = (splits + sum(done[(cell, seed)]),
                                   tests + len(done[(cell, seed)]))
    return out


def grid_counts(path, rule, seeds) -> dict:
    """``{cell: {seed: K right}}`` of ``rule`` from a ``bench_k_selection`` results file."""
    counts = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec["seed"] in seeds and rule in rec["rules"]:
                k = rec["rules"][rule][0]
                counts.setdefault(tuple(rec["cell"]), {})[rec["seed"]] = k == rec["planted"]
    return counts


def share_at_goal(powers, goal: float = 0.9) -> float:
    """The probability that a rule right in each run with the given probabilities (one per
    run, independent) is right in at least ``goal`` of the runs (a Poisson binomial tail):
    the expected contribution of one cell to the count of cells at the goal, for a rule that
    matches the bound in every run.

    >>> round(share_at_goal([0.95] * 12), 4)      # 11 or 12 of 12
    0.8816
    """
    need = math.ceil(goal * len(powers) - 1e-9)
    dist = np.zeros(len(powers) + 1)
    dist[0] = 1.0
    for p in powers:
        dist[1:] = dist[1:] * (1.0 - p) + dist[:-1] * p
        dist[0] *= 1.0 - p
    return float(dist[need:].sum())


def cell_reach(cell, bounds, direction_free=None) -> tuple[float, np.ndarray]:
    """``(reach, powers)`` of ``cell``: the tightest bound's mean over the runs (the smaller
    of the label-free (told-axis) bound's mean and the direction-free one's, where that was
    computed), and per run the smaller of the two (for :func:`share_at_goal`).

    >>> cell_reach("c", {"c": [0.9, 0.5]}, {"c": [0.6, 0.6]})
    (0.6, array([0.6, 0.5]))
    """
    told = np.asarray(bounds[cell], dtype=np.float64)
    if direction_free is None or cell not in direction_free:
        return float(told.mean()), told
    free = np.asarray(direction_free[cell], dtype=np.float64)
    return min(float(told.mean()), float(free.mean())), np.minimum(told, free)


def summary(bounds, counts, *, direction_free=None, goal: float = 0.9, alpha: float = 0.01,
            iid=None) -> list[str]:
    """The per-cell report gathered: two tables (by clients and rows per client, by shift
    and classes) of the tightest bound (:func:`cell_reach`) beside the rule's counts
    (``counts``: :func:`grid_counts`), the cells the rule misses within the bound's reach,
    and the whole goal's count. Per group: the cells, the bound's mean and its cells at the
    goal, the cells a rule matching the bound in every run would reach in expectation
    (:func:`share_at_goal`), the rule's runs and cells at the goal, and of the cells it
    misses, those within the bound's reach and those beyond it (the goal out of reach there,
    in the model); a cell the rule has no runs of is not counted as missed. ``iid``:
    ``{cell: {seed: K right}}`` of the one-cluster cells, counted for the rule and, for a
    rule of level ``alpha`` that matched the bound, in expectation. The standard deviations
    are those of that rule's count (independent cells).

    >>> cells = [("label", 6, 20, 1, 2), ("feature", 6, 20, 1, 2)]
    >>> bounds = {cells[0]: [0.5, 0.5], cells[1]: [1.0, 1.0]}
    >>> counts = {cells[0]: {1: False, 2: False}, cells[1]: {1: True, 2: False}}
    >>> summary(bounds, counts)[-1]
    'planted cells at the goal: the rule 0 of 2, the bound 1 (in expectation 1.25, standard deviation 0.43); missed within reach 1, beyond reach 1'
    """
    facts = {}                       # each cell's contribution to every count, once
    for cell in bounds:
        reach, powers = cell_reach(cell, bounds, direction_free)
        right = list(counts.get(cell, {}).values())
        hit = bool(right) and sum(right) / len(right) >= goal
        share = share_at_goal(powers, goal)
        facts[cell] = {"cells": 1, "reach": reach, "bound_cells": reach >= goal,
                       "expected": share,
                       "variance": share * (1.0 - share),   # of that count, cells independent
                       "right": sum(right), "runs": len(right), "rule_cells": hit,
                       "missed_within": bool(right) and not hit and reach >= goal,
                       "missed_beyond": bool(right) and not hit and reach < goal}

    def tally(keyed):
        groups = {}
        for cell, fact in facts.items():
            g = groups.setdefault(keyed(cell), dict.fromkeys(fact, 0))
            for name, value in fact.items():
                g[name] += value
        return groups

    head = ("cells | bound: mean, cells at the goal | a rule matching the bound: cells "
            "(expected) | the rule: runs right, cells at the goal | missed: within the "
            "bound's reach, beyond it |")
    lines = []
    for title, keyed in (("clients, rows per client", lambda c: (c[1], c[2])),
                         ("shift, classes", lambda c: (grid.SHIFTS.index(c[0]), c[0], c[4]))):
        lines += [f"| {title} | {head}", "|---|---|---|---|---|---|"]
        for key, g in sorted(tally(keyed).items()):
            name = ", ".join(str(k) for k in key[-2:])
            lines.append(f"| {name} | {g['cells']} | {100 * g['reach'] / g['cells']:.1f} %, "
                         f"{g['bound_cells']} | {g['expected']:.1f} | {g['right']}/{g['runs']}, "
                         f"{g['rule_cells']} | {g['missed_within']}, {g['missed_beyond']} |")
        lines.append("")
    lines.append("missed within the bound's reach (shift, classes, rows, clients, groups: "
                 "bound, the rule):")
    for cell, fact in facts.items():
        if fact["missed_within"]:
            big, small = grid.group_sizes(cell[1], cell[3])
            lines.append(f"- {cell[0]}, {cell[4]}, {cell[2]}, {cell[1]}, {big}:{small}: "
                         f"{100 * fact['reach']:.1f} %, {fact['right']}/{fact['runs']}")
    total = tally(lambda c: 0)[0]
    if iid:
        runs = [list(v.values()) for v in iid.values()]
        rule_iid = sum(sum(r) / len(r) >= goal for r in runs)
        shares = [share_at_goal([1.0 - alpha] * len(r), goal) for r in runs]
        level = sum(shares)
        sd = math.sqrt(total["variance"] + sum(q * (1.0 - q) for q in shares))
        lines.append(f"one-cluster cells at the goal: the rule {rule_iid} of {len(runs)}, a "
                     f"rule of level {alpha:g} about {level:.1f}; all cells: the rule "
                     f"{total['rule_cells'] + rule_iid} of {total['cells'] + len(runs)}, a "
                     f"rule matching the bound about {total['expected'] + level:.1f} "
                     f"(standard deviation {sd:.1f})")
    lines.append(f"planted cells at the goal: the rule {total['rule_cells']} of "
                 f"{total['cells']}, the bound {total['bound_cells']} (in expectation "
                 f"{total['expected']:.2f}, standard deviation "
                 f"{math.sqrt(total['variance']):.2f}); missed within reach "
                 f"{total['missed_within']}, beyond reach {total['missed_beyond']}")
    return lines


def seed_set_shares(separations, set_size: int = 12, clients: int = 300, *,
                    goal: float = 0.9, alpha: float = ALPHA, draws: int = DRAWS) -> list:
    """``[(seeds, share)]`` for consecutive disjoint sets of ``set_size`` seeds (the seeds of
    ``separations``, ``{seed: Delta}``, in order; a last partial set is left out): the
    probability that a rule matching the told-axis bound reaches ``goal`` in the better of
    the two cells of ``clients`` clients (group sizes 1:1 and 1:10), given each seed's
    separation (:func:`share_at_goal`). With the separations of binary label shift at the
    grid's most rows, this is the most favourable binary label-shift cell of a seed set:
    where it is small, no label-free rule can be expected to reach the goal in any of
    them."""
    seeds = sorted(separations)
    top = max(separations.values())
    curves = {}
    for imbalance in (1, 10):
        small = grid.group_sizes(clients, imbalance)[1]
        curves[small] = power_curve(clients, small, top, alpha=alpha, draws=draws)
    out = []
    for i in range(0, len(seeds) - set_size + 1, set_size):
        chosen = seeds[i:i + set_size]
        out.append((chosen, max(share_at_goal([interpolate_power(curve, separations[s])
                                               for s in chosen], goal)
                                for curve in curves.values())))
    return out


def report(bounds, told=None, counts=None, *, goal: float = 0.9,
           noise: float = 2.0, direction_free=None,
           direction_free_name: str = "not told the direction") -> list[str]:
    """The per-cell table and the summary lines. ``over``: the rule's or the told-axis
    count exceeds the bound by more than ``noise`` binomial standard errors of the runs (the
    model does not bound that cell). ``direction_free``: ``{cell: [power per seed]}`` of
    ``flux_direction_free_bound`` (the bound for rules not told the direction); where it
    is given, a cell's reach is the smaller of the two bounds; ``direction_free_name``
    names it in the lines."""
    df = direction_free is not None
    lines = ["| shift | classes | rows | clients | groups | label-free bound (model) | "
             + (f"{direction_free_name} | " if df else "")
             + "told the axis: K = 2 | rule: K right | over |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if df else "")]
    tally = {"bound": 0, "told": 0, "rule": 0, "over": 0, "bound_only": 0, "reach": 0,
             "expected": 0.0, "expected_reach": 0.0}
    for cell, powers in bounds.items():
        shift, n, rows, imbalance, classes = cell
        big, small = grid.group_sizes(n, imbalance)
        bound = float(np.mean(powers))
        free = (None if not df or cell not in direction_free
                else float(np.mean(direction_free[cell])))
        reach, reach_powers = cell_reach(cell, bounds, direction_free)
        se = math.sqrt(max(reach * (1 - reach), 1.0 / len(powers)) / len(powers))
        tally["bound"] += bound >= goal
        tally["reach"] += reach >= goal
        tally["expected"] += share_at_goal(powers, goal)
        tally["expected_reach"] += share_at_goal(reach_powers, goal)
        shown, over = [], False
        for source, right in (("told", None if told is None else
                               {s: kx[0] == 2 for s, kx in told.get(cell, {}).items()}),
                              ("rule", None if counts is None else counts.get(cell))):
            if not right:
                shown.append("-")
                continue
            runs = list(right.values())
            rate = sum(runs) / len(runs)
            tally[source] += rate >= goal
            if source == "rule":
                tally["bound_only"] += reach >= goal and rate < goal
            if source == "rule" or free is None:   # the told-axis test is told a direction
                over |= rate - reach > noise * se
            shown.append(f"{sum(runs)}/{len(runs)}")
        tally["over"] += over
        lines.append(f"| {shift} | {classes} | {rows} | {n} | {big}:{small} | "
                     f"{100 * bound:.1f} % | "
                     + ((f"{100 * free:.1f} % | " if free is not None else "- | ") if df
                        else "")
                     + f"{shown[0]} | {shown[1]} | {'over' if over else ''} |")
    lines.append(f"cells reaching {100 * goal:.0f} % (of {len(bounds)}): label-free bound "
                 f"{tally['bound']}"
                 + (f", {direction_free_name} (where computed, else the label-free bound) "
                    f"{tally['reach']}" if df else "")
                 + (f", told the axis {tally['told']}" if told else "")
                 + (f", the rule {tally['rule']} (within the bound's reach and missed by the "
                    f"rule: {tally['bound_only']})" if counts else "")
                 + f"; cells with a count above the bound beyond noise: {tally['over']}")
    lines.append(f"a rule that matched the bound in every run would reach {100 * goal:.0f} % "
                 f"in about {tally['expected']:.1f} cells"
                 + (f" ({tally['expected_reach']:.1f} {direction_free_name})" if df else "")
                 + " (the binomial over each cell's runs)")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="3049-3072")
    parser.add_argument("--clients", default="6,20,100,300")
    parser.add_argument("--rows", default="20,50,500")
    parser.add_argument("--classes", default="2,10")
    parser.add_argument("--shifts", default=",".join(grid.SHIFTS))
    parser.add_argument("--cache", default=None,
                        help="directory for the population axes and the told-axis runs")
    parser.add_argument("--results", default=None,
                        help="a bench_k_selection results file of the same seeds")
    parser.add_argument("--rule", default="flux:calibrated")
    parser.add_argument("--no-told-axis", action="store_true",
                        help="skip the told-axis reference (it rebuilds every run's clients)")
    parser.add_argument("--iid-clients", default="6,20,100,300,500",
                        help="iid federations for the told-axis test's level ('' for none)")
    parser.add_argument("--descriptor-form", default=flux.DEFAULT_DESCRIPTOR_FORM,
                        choices=flux.DESCRIPTOR_FORMS)
    parser.add_argument("--population-clients", type=int, default=POPULATION_CLIENTS)
    parser.add_argument("--skip", type=int, default=POPULATION_SKIP,
                        help="group-0 clients dropped from each population (at least the "
                             "largest federation: the runs' own clients)")
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--alpha", type=float, default=ALPHA,
                        help="the level of the rules bounded and of the told-axis test "
                             f"(default {ALPHA}; the grid's iid goal is met reliably at "
                             "bench_k_selection.GOAL_ALPHA = 0.01)")
    parser.add_argument("--direction-free", action="store_true",
                        help="also the bound for rules not told the direction "
                             "(flux_direction_free_bound; the cells of at most "
                             "100,000 arrangements: 6 and 20 clients)")
    parser.add_argument("--not-told-centre", action="store_true",
                        help="with --direction-free: nor the pooled mean, the bound for every "
                             "rule that reads distances")
    parser.add_argument("--direction-free-draws", type=int, default=None,
                        help="draws per hypothesis behind one direction-free power "
                             "(default flux_direction_free_bound.DRAWS)")
    parser.add_argument("--processes", type=int, default=1,
                        help="with --direction-free: compute its curves in this many "
                             "processes (the same curves as in one)")
    parser.add_argument("--seed-sets", type=int, default=None, metavar="SIZE",
                        help="instead of the grid: binary label shift at the largest --rows "
                             "for every seed of --seeds, and per set of SIZE consecutive "
                             "seeds the share of the best cell of the largest --clients "
                             "(seed_set_shares)")
    parser.add_argument("--quick", action="store_true",
                        help="seed 3049, label shift, 20 rows, 2 classes, 6 and 20 clients "
                             "(6 with --direction-free, 100 draws), 300 clients per group, "
                             "500 draws (seconds)")
    args = parser.parse_args(argv)
    if not 0.0 < args.alpha < 1.0:
        parser.error(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    if args.not_told_centre and not args.direction_free:
        parser.error("--not-told-centre bounds the direction-free column: add --direction-free")
    seeds = int_list(args.seeds)
    clients, rows, classes = (int_list(args.clients), int_list(args.rows),
                              int_list(args.classes))
    shifts = args.shifts.split(",")
    if args.quick:
        seeds, clients, rows, classes, shifts = seeds[:1], [6, 20], [20], [2], ["label"]
        args.iid_clients = ""
        args.population_clients, args.draws = 300, 500
        args.skip = 20
        if args.direction_free:      # 20 clients at 1:1 sum over 92,378 arrangements
            clients, args.direction_free_draws = [6], 100
    cells = [c for c in planted_cells(clients, rows, classes) if c[0] in shifts]
    if args.cache:
        os.makedirs(args.cache, exist_ok=True)
    if args.seed_sets is not None:
        if not 1 <= args.seed_sets <= len(seeds):
            parser.error(f"--seed-sets must be between 1 and the {len(seeds)} seeds, got "
                         f"{args.seed_sets}")
        axes = population_axes([("label", max(rows), 2, s) for s in seeds], args.cache,
                               clients_per_group=args.population_clients, skip=args.skip,
                               descriptor_form=args.descriptor_form)
        shares = seed_set_shares({k[3]: math.sqrt(v["delta2"]) for k, v in axes.items()},
                                 args.seed_sets, max(clients), alpha=args.alpha,
                                 draws=args.draws)
        for chosen, share in shares:
            print(f"seeds {chosen[0]}-{chosen[-1]}: {share:.3f}")
        print(f"binary label shift, {max(rows)} rows, {max(clients)} clients, sets of "
              f"{args.seed_sets} seeds: a rule matching the told-axis bound reaches "
              f"90 % in the better cell with probability "
              f"{np.mean([s for _, s in shares]):.3f} on average; below 0.5 in "
              f"{sum(s < 0.5 for _, s in shares)} of {len(shares)} sets (level "
              f"{args.alpha:g}, {args.draws} draws per power)")
        return 0
    keys = {(c[0], c[2], c[4], s) for c in cells for s in seeds}
    if not args.no_told_axis and args.iid_clients:   # the iid runs meet every shift's axis
        keys |= {(sh, r, c, s) for sh in grid.SHIFTS for r in rows for c in classes
                 for s in seeds}
    keys = sorted(keys)
    form = args.descriptor_form
    axes = population_axes(keys, args.cache, clients_per_group=args.population_clients,
                           skip=args.skip, descriptor_form=form)
    bounds = cell_bounds(cells, seeds, {k: math.sqrt(v["delta2"]) for k, v in axes.items()},
                         draws=args.draws, alpha=args.alpha)
    told = (None if args.no_told_axis else
            told_axis_counts(cells, seeds, axes, args.cache, descriptor_form=form,
                             alpha=args.alpha))
    counts = None if args.results is None else grid_counts(args.results, args.rule, seeds)
    free = None
    if args.direction_free:
        import flux_direction_free_bound as df
        free = df.direction_free_bounds(
            cells, seeds, {k: math.sqrt(v["delta2"]) for k, v in axes.items()},
            {k: v["rank"] for k, v in axes.items()}, grid.group_sizes, alpha=args.alpha,
            draws=args.direction_free_draws or df.DRAWS, cache=args.cache,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            told_centre=not args.not_told_centre, processes=args.processes)
    name = ("not told the direction or the centre" if args.not_told_centre
            else "not told the direction")
    print("\n".join(report(bounds, told, counts, direction_free=free,
                           direction_free_name=name)))
    if counts is not None:       # the same gathered, with the rule's one-cluster cells
        iid = {c: v for c, v in counts.items()
               if c[0] == "none" and c[2] in rows and c[4] in classes}
        print("\n" + "\n".join(summary(bounds, counts, direction_free=free,
                                       alpha=args.alpha, iid=iid)))
    if not args.no_told_axis and args.iid_clients:
        level = told_axis_iid(int_list(args.iid_clients), rows, classes, seeds, axes,
                              args.cache, descriptor_form=form, alpha=args.alpha)
        print("told the axis, iid federations (K = 1) split: " + ", ".join(
            f"{n} clients {c} classes {s}/{t}" for (n, c), (s, t) in sorted(level.items())))
    print(f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}); {args.population_clients} clients "
          f"per group per population; {args.draws} draws per power; level {args.alpha:g}; "
          f"descriptor {form}"
          + (f"; rule {args.rule}" if counts is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

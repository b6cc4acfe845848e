"""The label-free bound when the direction in which the groups differ is not known.

Not a speed benchmark. ``flux_label_free_bound`` bounds every label-free K rule by the
Neyman-Pearson test that is *told the axis* along which two groups differ (their means and
the shared covariance ``Sigma``). A rule reading the federation's distances is told no axis:
it must find it among ``d`` directions from ``n`` clients. This module computes the bound
for a rule that does not know the direction.

**The model** (as in ``flux_label_free_bound``). Whitened by ``Sigma`` (``d``: its rank),
a client's descriptor is ``N(mu_g, I)``; ``m`` clients in one group and ``n - m`` in the
other, in an unknown arrangement, their means ``Delta`` apart along a unit direction ``u``.
The one-cluster null contains every Gaussian, in particular ``G0(u) = N(mu, I + c u u^T)``
(the two groups pooled; ``c = pi (1 - pi) Delta^2``, ``pi = m / n``).

**The bound.** Let the direction be unknown: ``u`` uniform on the sphere. A rule of level
``alpha`` against every Gaussian has level ``alpha`` against the average of ``G0(u)`` over
``u``, so by the Neyman-Pearson lemma its power *averaged over directions* is at most that
of the likelihood-ratio test of the averaged null against the averaged planted model
(:func:`direction_free_power`). A rule that reads only the distances in the noise's own
(Mahalanobis) metric does equally well in every direction, so for it the bound holds at
each direction, not only on average. It is told ``mu``, ``Sigma``, ``m`` and ``Delta``: more
than any rule knows, so the bound is generous. ``told_centre=False`` takes ``mu`` away: the
ratio of the descriptors relative to their own mean, a bound for every rule that reads
distances (a translation of every descriptor changes none). ``told_level=False`` takes the
noise level away as well (``Sigma`` known up to a factor): the ratio of the densities of
``Y / |Y|``, a bound for every rule whose answer does not change when all descriptors are
scaled alike (:func:`log_level_integral`).

**The ratio in closed form.** Both averaged densities depend on the clients' whitened,
centred descriptors ``Y`` (``n x d``) only through their Gram matrix ``G = Y Y^T``:

- planted / standard normal: ``exp(-n c / 2)`` times the mean over the ``C(n, m)``
  arrangements ``s`` of ``E_u exp(Delta u . Y^T a_s)`` (``a_i = 1 - pi`` in the small group,
  ``-pi`` in the other), and ``E_u exp(k u_1) = 0F1(; d/2; k^2 / 4)``
  (``omnifc.adapters.flux._spiked_null.log_sphere_mgf``, a Bessel function);
- null / standard normal: ``(1 + c)^(-n/2) E_u exp(b u^T Y^T Y u)``, ``b = c / (2 (1 + c))``;
  with ``lambda`` the eigenvalues of ``G`` the coordinates ``(u . e_j)^2`` are
  ``Dirichlet(1/2, ..., 1/2, (d - k) / 2)``, whose moment generating function
  (``_spiked_null.log_dirichlet_mgf``) is an inverse Laplace transform computed on a Bromwich line
  through its saddle point.

Usage: ``python benchmarks/flux_label_free_bound.py --direction-free ...`` (the cells'
separations and ranks come from the same populations). ``python
benchmarks/flux_direction_free_bound.py --told-covariance [--one-group] --out F``: the same
test on the grid's real runs, told the covariance (:func:`told_the_covariance`, a reference).
"""

from __future__ import annotations

import functools
import math
import os
import sys

import numpy as np
from scipy import special

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# the ratio's closed form, told the level, is the library's (FLUX's spiked-null test reads it)
from omnifc.adapters.flux import _spiked_null as _spiked  # noqa: E402
from omnifc.adapters.flux._spiked_null import (  # noqa: E402
    _centred, _log_null, _log_planted, arrangement_count, arrangement_pairs, arrangement_squares,
    arrangements, spike)

#: Monte Carlo draws per hypothesis behind one power.
DRAWS = 4000


def null_grams(rest, z, n: int, m: int, delta: float):
    """Gram matrices of draws from the null ``N(0, I + c u u^T)`` with ``u = e_1``: ``rest``
    (the other ``d - 1`` coordinates' Gram matrices, :func:`_wishart`) plus ``(1 + c) z
    z^T`` for the standard normal first coordinates ``z`` (one row per draw)."""
    return rest + (1.0 + spike(n, m, delta)) * np.einsum("bi,bj->bij", z, z)


def log_likelihood_ratio(gram, m: int, delta: float, d: int, a=None, *,
                         told_centre: bool = True, told_level: bool = True):
    """The library's ``omnifc.adapters.flux._spiked_null.log_likelihood_ratio`` (the
    direction-averaged log ratio, ``told_centre`` as there), and with ``told_level=False``
    not told the noise level either, i.e. ``Sigma`` known up to a factor ``sigma^2`` and
    ``Delta`` in units of ``sigma``: the ratio of the densities of the *maximal invariant*
    under scaling, ``Y / |Y|`` (Wijsman's representation), for rules whose answer does not
    change when every descriptor is scaled alike (a rule that must keep its level whatever
    the noise level). :func:`_log_ratio` computes it.

    >>> g = np.eye(4) + 0.5
    >>> bool(np.isclose(log_likelihood_ratio(3.0 * g, 2, 1.0, 6, told_level=False),
    ...                 log_likelihood_ratio(g, 2, 1.0, 6, told_level=False)))
    True
    """
    def ratio(squares, grams, rows, n, c, delta, d):
        return _log_ratio(squares, grams, rows, n, c, delta, d, told_level)

    return _spiked.chunked_log_ratio(gram, m, delta, d, a, told_centre, ratio,
                                     1 if told_level else LEVEL_POINTS)


def _rows_per_chunk(arrangement_total: int, told_level: bool) -> int:
    """Gram matrices per batch of the arrangement sums (the library's
    :func:`~omnifc.adapters.flux._spiked_null.rows_per_chunk`), each row's arrangements
    counted once told the level and at every scale point of :func:`log_level_integral`
    (:data:`LEVEL_POINTS`) when not."""
    return _spiked.rows_per_chunk(arrangement_total, 1 if told_level else LEVEL_POINTS)


#: The scale integral of ``told_level=False`` (:func:`log_level_integral`), in ``u = log
#: s``: ``LEVEL_SEARCH`` points within ``LEVEL_SEARCH_WIDTH`` of the standard normal's peak
#: find the integrand's; a parabola through the best three gives its place and width, a
#: second one through ``LEVEL_REFINE`` points within ``LEVEL_REFINE_SDS`` widths refines
#: both; then the trapezoid rule on ``LEVEL_NODES`` points within ``LEVEL_WIDTH_SDS`` widths
#: of the peak (0.8 widths apart). A peak at an end of the first grid moves it there, at
#: most ``LEVEL_SEARCH_MOVES`` times. Within 2e-5 of scipy's adaptive quadrature where
#: tested (tests/adapters/test_flux_direction_free_bound.py).
LEVEL_SEARCH, LEVEL_SEARCH_WIDTH, LEVEL_SEARCH_MOVES = 9, 1.0, 4
LEVEL_REFINE, LEVEL_REFINE_SDS = 5, 2.0
LEVEL_NODES, LEVEL_WIDTH_SDS = 21, 8.0
LEVEL_POINTS = LEVEL_SEARCH + LEVEL_REFINE + LEVEL_NODES


def _parabola(values, grid):
    """``(peak, width)`` per column of ``values`` (``(points, rows)`` on the equally spaced
    ``grid``, ``(points, rows)``): the vertex of the parabola through the largest value and
    its neighbours (the largest moved off the ends), and ``1 / sqrt(-curvature)`` (``nan``
    where the curvature is not negative)."""
    columns = np.arange(values.shape[1])
    i = np.clip(np.argmax(values, axis=0), 1, values.shape[0] - 2)
    left, mid, right = values[i - 1, columns], values[i, columns], values[i + 1, columns]
    step = grid[1, columns] - grid[0, columns]
    bend = left - 2.0 * mid + right
    with np.errstate(divide="ignore", invalid="ignore"):
        offset = np.where(bend < 0, 0.5 * (left - right) / bend, 0.0)
        width = np.where(bend < 0, step / np.sqrt(-bend), np.nan)
    return grid[i, columns] + np.clip(offset, -1.0, 1.0) * step, width


def log_level_integral(log_l, trace, dimension: int) -> np.ndarray:
    """``log int_0^inf s^(N - 1) exp(-s^2 T / 2) L(s) ds`` (up to a constant that depends on
    ``N`` only) for every row: ``trace`` holds each row's ``T``, ``N = dimension``, and
    ``log_l(s2)`` returns ``log L`` at the squared scales ``s2`` (shape ``(points, rows)``).
    In ``u = log s`` the integrand is ``exp(N u - e^(2u) T / 2 + log L)``: its peak and
    width are found on two coarse grids, then the trapezoid rule on a fine one around it.

    >>> t = np.array([3.0, 50.0])                  # L = 1: the Gamma integral, known exactly
    >>> got = log_level_integral(lambda s2: np.zeros_like(s2), t, 8)
    >>> want = special.gammaln(4) + 4 * np.log(2 / t) - np.log(2)
    >>> bool(np.allclose(got - got[0], want - want[0], atol=1e-9))
    True
    """
    trace = np.maximum(np.asarray(trace, dtype=np.float64), 1e-300)
    u0 = 0.5 * np.log(dimension / trace)           # the standard normal's peak
    normal_width = 1.0 / math.sqrt(2.0 * dimension)

    def log_integrand(u):
        s2 = np.exp(2.0 * u)
        return dimension * u - 0.5 * s2 * trace[None] + log_l(s2)

    def around(peak, width, points, sds):
        width = np.where(np.isfinite(width) & (width > 0), width, normal_width)
        return peak[None] + np.linspace(-sds, sds, points)[:, None] * width[None]

    search = np.linspace(-LEVEL_SEARCH_WIDTH, LEVEL_SEARCH_WIDTH, LEVEL_SEARCH)[:, None]
    centre = u0
    for _ in range(LEVEL_SEARCH_MOVES):            # an end of the grid is no peak: move on
        grid = centre[None] + search
        values = log_integrand(grid)
        best = np.argmax(values, axis=0)
        at_end = (best == 0) | (best == LEVEL_SEARCH - 1)
        if not at_end.any():
            break
        centre = np.where(at_end, grid[best, np.arange(len(trace))], centre)
    peak, width = _parabola(values, grid)
    grid = around(peak, width, LEVEL_REFINE, LEVEL_REFINE_SDS)
    peak, width = _parabola(log_integrand(grid), grid)
    grid = around(peak, width, LEVEL_NODES, LEVEL_WIDTH_SDS)
    return special.logsumexp(log_integrand(grid), axis=0) + np.log(grid[1] - grid[0])


def _log_ratio(squares, grams, rows: int, n: int, c: float, delta: float, d: int,
               told_level: bool) -> np.ndarray:
    """``log`` (planted / null) of the Gram matrices ``grams`` (their arrangements'
    ``squares``), both direction-averaged. ``told_level=False``: the ratio of the densities
    of ``Y / |Y|``; by Wijsman's representation it is ``int f1(s Y) s^(N-1) ds / int f0(s
    Y) s^(N-1) ds`` (``N = rows * d`` coordinates, ``|Y|^2 = T = tr G``), with ``f = phi
    L``, ``phi`` the standard normal density and ``L`` the ratios above
    (:func:`log_level_integral`); scaling ``Y`` by ``s`` scales ``G`` and the squares by
    ``s^2``."""
    if told_level:
        return _spiked._log_ratio_told_level(squares, grams, rows, n, c, delta, d)
    size = len(grams)

    def planted(s2):
        points = s2.shape[0]
        return _log_planted((s2[..., None] * squares[None]).reshape(points * size, -1),
                            n, c, delta, d).reshape(points, size)

    def null(s2):
        points = s2.shape[0]
        return _log_null((s2[..., None, None] * grams[None]).reshape(points * size, n, n),
                         rows, c, d).reshape(points, size)

    trace = np.trace(grams, axis1=1, axis2=2)
    return (log_level_integral(planted, trace, rows * d)
            - log_level_integral(null, trace, rows * d))


def direction_free_power(n: int, m: int, d: int, deltas, *, alpha: float = 0.05,
                         draws: int = DRAWS, seed: int = 0, told_centre: bool = True,
                         told_level: bool = True):
    """Power of the level-``alpha`` test of the direction-averaged null against the
    direction-averaged planted model (``m : n - m`` clients, separation ``Delta``, ``d``
    dimensions), at every ``Delta`` of ``deltas`` (Monte Carlo, the same draws for every
    ``Delta``; by symmetry the planted draws take ``u = e_1`` and the first ``m`` clients).
    ``told_centre=False``: the bound for rules not told the pooled mean either
    (:func:`log_likelihood_ratio`), which holds for every rule that reads distances.
    ``told_level=False``: nor the noise level (the bound for every rule whose answer does
    not change when all descriptors are scaled alike, :func:`_log_ratio`).

    >>> p = direction_free_power(6, 3, 8, [0.0, 12.0], draws=400)
    >>> bool(abs(p[0] - 0.05) < 0.04), bool(p[1] > 0.95)
    (True, True)
    """
    from flux_label_free_bound import _randomized_power   # (imports the grid: lazily)
    if not (1 <= m < n and d >= 2):
        raise ValueError(f"need 1 <= m < n and d >= 2, got n={n}, m={m}, d={d}")
    rng = np.random.default_rng(seed)
    a = arrangements(n, m)
    shift = np.where(np.arange(n) < m, 1.0 - m / n, -m / n)
    z0, z1 = rng.standard_normal((draws, n)), rng.standard_normal((draws, n))
    rest0, rest1 = _wishart(rng, draws, n, d - 1), _wishart(rng, draws, n, d - 1)
    deltas = [float(delta) for delta in np.asarray(deltas, dtype=np.float64)]
    null, planted = np.empty((len(deltas), draws)), np.empty((len(deltas), draws))
    along, pairs = a @ shift, arrangement_pairs(a)
    per_chunk = _rows_per_chunk(len(a), told_level)
    for lo in range(0, draws, per_chunk):
        part = slice(lo, lo + per_chunk)
        # |Y^T a_s|^2 = a_s^T R a_s + (a_s . y)^2, y the clients' coordinates along u = e_1:
        # the other coordinates' part R does not depend on Delta, so it is computed once
        rest_squares = (arrangement_squares(pairs, rest0[part]),
                        arrangement_squares(pairs, rest1[part]))
        along_u = z0[part] @ a.T, z1[part] @ a.T
        for j, delta in enumerate(deltas):
            c = spike(n, m, delta)
            y1 = z1[part] + delta * shift
            grams = (null_grams(rest0[part], z0[part], n, m, delta),
                     rest1[part] + np.einsum("bi,bj->bij", y1, y1))
            squares = (rest_squares[0] + (1.0 + c) * along_u[0] ** 2,
                       rest_squares[1] + (along_u[1] + delta * along) ** 2)
            for out, g, sq in zip((null, planted), grams, squares):
                g, rows = _centred(g, told_centre)
                out[j, part] = _log_ratio(sq, g, rows, n, c, delta, d, told_level)
    return np.array([_randomized_power(null[j], planted[j], alpha)
                     for j in range(len(deltas))])


def _wishart(rng, draws: int, n: int, dof: int) -> np.ndarray:
    """``draws`` Gram matrices ``W W^T`` of ``n x dof`` standard normal ``W``."""
    out = np.empty((draws, n, n))
    for i in range(draws):
        w = rng.standard_normal((n, dof))
        out[i] = w @ w.T
    return out


#: Separations at which a curve is tabulated, then interpolated.
DELTA_STEP = 0.5
#: Cells whose group sizes have more arrangements than this are not bounded here: the
#: ratio sums over every arrangement. At 20 clients 10:10 (92,378 of them) one ratio costs
#: about 8.5 ms (a curve of 4,000 draws about 4.5 minutes per four separations, one core);
#: at 100 clients 50:50 there are 5e28. On the grid: 6 and 20 clients.
MAX_ARRANGEMENTS = 100_000


def direction_free_curve(n: int, m: int, d: int, delta_max: float, *, alpha: float = 0.05,
                         draws: int = DRAWS, seed: int = 0, cache=None,
                         told_centre: bool = True, told_level: bool = True):
    """``(deltas, powers)`` of :func:`direction_free_power` on a grid of step
    :data:`DELTA_STEP` from 0 to past ``delta_max``, stopped once the power stays at 1
    (two grid points); kept in ``cache`` (a directory) as JSON and reused when it reaches
    far enough. ``told_centre=False``: not told the pooled mean either, ``told_level=False``:
    nor the noise level (each a file of its own).
    """
    import json
    path = None if cache is None else os.path.join(
        cache, f"direction_free_n{n}_m{m}_d{d}_a{alpha:g}_draws{draws}_seed{seed}"
               f"{'' if told_centre else '_centre_free'}"
               f"{'' if told_level else '_level_free'}.json")
    deltas, powers = [], []
    if path is not None and os.path.exists(path):
        with open(path) as f:
            deltas, powers = json.load(f)
    while not deltas or (deltas[-1] < delta_max + DELTA_STEP
                         and not (len(powers) >= 2 and min(powers[-2:]) >= 1.0)):
        chunk = [len(deltas) * DELTA_STEP + i * DELTA_STEP for i in range(4)]
        more = direction_free_power(n, m, d, chunk, alpha=alpha, draws=draws, seed=seed,
                                    told_centre=told_centre, told_level=told_level)
        deltas += chunk
        powers += [float(p) for p in more]
        if path is not None:
            with open(path, "w") as f:
                json.dump([deltas, powers], f)
    return np.array(deltas), np.array(powers)


def direction_free_bounds(cells, seeds, separations, ranks, group_sizes, *,
                          alpha: float = 0.05, draws: int = DRAWS, cache=None,
                          progress=None, told_centre: bool = True,
                          processes: int = 1, told_level: bool = True) -> dict:
    """``{cell: [power per seed]}`` for the cells (``(shift, n, rows, imbalance, classes)``)
    whose arrangements number at most :data:`MAX_ARRANGEMENTS`: each run's bound at its
    seed's separation and rank (``separations`` and ``ranks`` keyed by ``(shift, rows,
    classes, seed)``); ``group_sizes(n, imbalance) -> (big, small)``; ``told_centre`` and
    ``told_level``: as :func:`direction_free_power`. ``processes`` > 1 computes the curves
    in that many processes, the costliest first (a curve's draws depend on its own
    arguments alone, so the result is the same as in one process)."""
    sizes = {cell: (cell[1], group_sizes(cell[1], cell[3])[1]) for cell in cells}
    keys = {cell: [(cell[0], cell[2], cell[4], s) for s in seeds] for cell in cells
            if arrangement_count(*sizes[cell]) <= MAX_ARRANGEMENTS}
    wanted = {}
    for cell, cell_keys in keys.items():
        for key in cell_keys:
            curve = (*sizes[cell], int(ranks[key]))
            wanted[curve] = max(wanted.get(curve, 0.0), separations[key])
    options = dict(alpha=alpha, draws=draws, cache=cache, told_centre=told_centre,
                   told_level=told_level)
    # the costliest first: the arrangement count, then the dimension
    order = sorted(wanted, key=lambda c: (-arrangement_count(c[0], c[1]), -c[2], c))

    def start(curve, call):
        """Announce ``curve``, then compute it through ``call`` (now, or in the pool)."""
        if progress is not None:
            progress(f"direction-free power curve n={curve[0]} m={curve[1]} d={curve[2]} "
                     f"up to Delta={wanted[curve]:.1f}")
        return call(direction_free_curve, *curve, wanted[curve], **options)

    if processes > 1 and len(order) > 1:
        import concurrent.futures
        with concurrent.futures.ProcessPoolExecutor(min(processes, len(order))) as pool:
            futures = {curve: start(curve, pool.submit) for curve in order}
            curves = {curve: future.result() for curve, future in futures.items()}
    else:
        curves = {curve: start(curve, lambda f, *args, **kw: f(*args, **kw))
                  for curve in order}
    return {cell: [float(np.interp(separations[k], *curves[(*sizes[cell], int(ranks[k]))]))
                   for k in cell_keys] for cell, cell_keys in keys.items()}


def told_the_covariance(shift: str, rows: int, classes: int, seed: int, n: int, imbalance: int,
                        *, clients_per_group: int = 2000, skip: int = 300,
                        null_draws: int = 1000, form: str = "weighted_all",
                        one_group: bool = False, told_centre: bool = True) -> dict:
    """The direction-free ratio test *told the covariance* on one real run of the grid: a
    reference, not a rule (it is told the population's ``Sigma``, the pooled mean and
    ``Delta``), that shows whether the real descriptors reach what the model allows.

    The population is ``flux_label_free_bound.population_clients`` (the runs' own clients
    left out), as for the separations of the bound, but its descriptors are built with the run's activation scale
    ``M`` (FLUX's shared projection depends on it through the PCA mean, an affine change of
    the descriptors: ``Delta`` is the same, ``Sigma`` and the means are not). The run's
    descriptors, centred on the pooled mean of the run's group sizes and whitened by the
    population's within-group covariance (on its numerical rank ``d``), give the ratio
    (:func:`log_likelihood_ratio`); ``p`` is its rank among ``null_draws`` draws of the
    model's direction-averaged null at the same ``(n, m, d, Delta)``. Returns ``p``,
    ``Delta``, ``d`` and ``spread``: the run's whitened squared norm per client and
    dimension (1 + c / d in the model).

    ``one_group``: a check of its level on real data. The "run" is ``n`` clients of the
    population's group 0 (taken out of it), centred on that group's mean: one cluster, which
    the test should split in about ``alpha`` of the runs or fewer.

    ``told_centre=False``: not told the pooled mean either (the ratio of the run's
    descriptors relative to their own mean, :func:`log_likelihood_ratio`), as a rule
    reading distances."""
    import bench_k_selection as grid
    import flux_label_free_bound as lf
    from omnifc.adapters import flux
    clients, groups, c, latents, _ = _last_population(shift, rows, classes, seed,
                                                      clients_per_group, skip)
    big, small = grid.group_sizes(n, imbalance)
    run_clients, _, _, run_latents, scale = grid.encoded_run(shift, n, rows, imbalance,
                                                             classes, seed)
    components = flux.flux_components(c, grid.ENCODER_DIM)
    x = grid.flux_descriptors(clients, latents, c, components, form, scale)[1]
    if one_group:
        taken = np.flatnonzero(groups == 0)[:n]
        run = x[taken]
        x, groups = np.delete(x, taken, axis=0), np.delete(groups, taken)
    else:
        run = grid.flux_descriptors(run_clients, run_latents, c, components, form, scale)[1]
    sizes, cov, difference = lf._within_groups(x, groups)
    values, vectors = lf.numerical_eigen(cov)
    whiten = vectors / np.sqrt(values)
    d = len(values)
    delta = math.sqrt(lf.separation_of_parts(sizes, values, vectors, difference)[0])
    centre = (x[groups == 0].mean(axis=0) if one_group else
              (big * x[groups == 0].mean(axis=0) + small * x[groups == 1].mean(axis=0)) / n)
    y = (run - centre) @ whiten
    return {"p": ratio_p(y, small, delta, null_draws=null_draws, seed=seed,
                         told_centre=told_centre),
            "delta": delta, "d": d, "spread": float(np.trace(y @ y.T) / (n * d)),
            "told_centre": told_centre}


@functools.lru_cache(maxsize=1)
def _last_population(shift, rows, classes, seed, clients_per_group, skip):
    """``flux_label_free_bound.population_clients``, kept for the next run: the command
    line takes a population's two group-size shapes one after the other (read only)."""
    import flux_label_free_bound as lf
    return lf.population_clients(shift, rows, classes, seed,
                                 clients_per_group=clients_per_group, skip=skip)


def ratio_p(y, m: int, delta: float, *, null_draws: int = 1000, seed: int = 0,
            told_centre: bool = True) -> float:
    """``p`` of the direction-free ratio (:func:`log_likelihood_ratio`) of whitened
    descriptors ``y`` (``n x d``, one row per client, ``m`` in the small group): the rank
    of their ratio among ``null_draws`` draws of the model's null at the same ``(n, m, d,
    Delta)`` (seeded by ``seed``). ``told_centre=False``: ``y`` relative to its own mean.

    >>> y = np.random.default_rng(0).standard_normal((6, 8))
    >>> p = ratio_p(y, 3, 2.0, null_draws=99, told_centre=False)
    >>> p == ratio_p(y + 7.0, 3, 2.0, null_draws=99, told_centre=False)   # offset ignored
    True
    """
    n, d = y.shape
    stat = log_likelihood_ratio(y @ y.T, m, delta, d, told_centre=told_centre)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((null_draws, n))
    null = log_likelihood_ratio(null_grams(_wishart(rng, null_draws, n, d - 1), z, n, m,
                                           delta), m, delta, d, told_centre=told_centre)
    return float((1 + np.sum(null >= stat)) / (1 + null_draws))


def main(argv=None) -> int:
    """``--told-covariance``: :func:`told_the_covariance` on the grid's runs of the given
    seeds, appended to ``--out`` (JSON lines, resumed), then the counts of K = 2 (p at most
    ``--alpha``) per (clients, rows, shift, classes)."""
    import argparse
    import json
    import bench_k_selection as grid
    from _common import int_list
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--told-covariance", action="store_true", required=True)
    parser.add_argument("--seeds", default="3317-3328")
    parser.add_argument("--clients", default="6")
    parser.add_argument("--rows", default="20,50")
    parser.add_argument("--classes", default="2,10")
    parser.add_argument("--shifts", default=",".join(grid.SHIFTS))
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--null-draws", type=int, default=1000)
    parser.add_argument("--population-clients", type=int, default=2000)
    parser.add_argument("--skip", type=int, default=300)
    parser.add_argument("--one-group", action="store_true",
                        help="the level check: n clients of one group (told_the_covariance)")
    parser.add_argument("--not-told-centre", action="store_true",
                        help="nor the pooled mean: the run relative to its own mean")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    seen = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            records = [json.loads(line) for line in f]
        seen = {tuple(rec["run"]) for rec in records}
        # records before the option was added have no told_centre: they were told it
        if any(rec.get("told_centre", True) == args.not_told_centre for rec in records):
            parser.error(f"{args.out} holds runs {'told' if args.not_told_centre else 'not told'}"
                         f" the centre: resume it with the same --not-told-centre, or use "
                         f"another --out")
    runs = [(shift, n, rows, imbalance, classes, seed)
            for seed in int_list(args.seeds) for shift in args.shifts.split(",")
            for rows in int_list(args.rows) for classes in int_list(args.classes)
            for n in int_list(args.clients) for imbalance in (1, 10)]
    for run in runs:
        if run in seen:
            continue
        shift, n, rows, imbalance, classes, seed = run
        rec = told_the_covariance(shift, rows, classes, seed, n, imbalance,
                                  clients_per_group=args.population_clients, skip=args.skip,
                                  null_draws=args.null_draws, one_group=args.one_group,
                                  told_centre=not args.not_told_centre)
        with open(args.out, "a") as f:
            f.write(json.dumps({"run": list(run), **rec}) + "\n")
    counts = {}
    with open(args.out) as f:
        for line in f:
            rec = json.loads(line)
            shift, n, rows, _, classes, _ = rec["run"]
            hit = counts.setdefault((n, rows, shift, classes), [0, 0])
            hit[0] += rec["p"] <= args.alpha
            hit[1] += 1
    print("| clients | rows | shift | classes | told the covariance: K = 2 |")
    print("|---|---|---|---|---|")
    for (n, rows, shift, classes), (k2, runs_) in sorted(counts.items()):
        print(f"| {n} | {rows} | {shift} | {classes} | {k2}/{runs_} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

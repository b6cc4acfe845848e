"""benchmarks/flux_direction_free_bound.py: the label-free bound for rules not told the
direction in which the groups differ, against independent computations (closed forms,
quadrature, Monte Carlo over directions, scipy's densities)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from benchmark_scripts import load_benchmark
from omnifc.adapters.flux import _spiked_null as spiked


@pytest.fixture(scope="module")
def df():
    return load_benchmark("flux_direction_free_bound")


def _unit_vectors(rng, count, d):
    u = rng.standard_normal((count, d))
    return u / np.linalg.norm(u, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [1, 3, 5, 8, 41, 42, 60, 220])
def test_the_sphere_average_is_the_bessel_function(df, d):
    """E exp(k u_1) = 0F1(; d/2; k^2/4): scipy's hyp0f1 where it is finite, sinh(k)/k at
    d = 3, cosh at d = 1; every branch (series, Bessel, Debye from order 20, whose relative
    error stays below 1e-7 there) is hit."""
    kappa = np.array([0.0, 1e-4, 0.3, 2.0, 9.0, 15.0, 40.0, 120.0, 600.0])
    got = spiked.log_sphere_mgf(kappa, d)
    for k, g in zip(kappa, got):
        want = special.hyp0f1(d / 2.0, k * k / 4.0)
        if np.isfinite(want):
            assert g == pytest.approx(math.log(want), rel=1e-7, abs=1e-12)
        if d == 3 and k > 0:
            assert g == pytest.approx(math.log(math.sinh(k) / k) if k < 700 else g, rel=1e-9)
        if d == 1:
            assert g == pytest.approx(k + math.log1p(math.exp(-2 * k)) - math.log(2), rel=1e-9,
                                      abs=1e-12)
    assert spiked.log_sphere_mgf(-kappa, d) == pytest.approx(got)     # even in kappa
    assert spiked.log_sphere_mgf(kappa.reshape(3, 3), d).shape == (3, 3)


def test_the_sphere_average_against_monte_carlo(df):
    rng = np.random.default_rng(0)
    u = _unit_vectors(rng, 400_000, 12)
    for kappa in (0.5, 3.0, 8.0):
        want = special.logsumexp(kappa * u[:, 0]) - math.log(len(u))
        assert spiked.log_sphere_mgf(kappa, 12) == pytest.approx(want, abs=0.01)


@pytest.mark.parametrize("d,k", [(d, k) for d in (4, 8, 60, 220) for k in (1, 2, 3, 6) if k <= d])
def test_equal_eigenvalues_give_the_confluent_hypergeometric_function(df, d, k):
    """k equal betas: t_1 + ... + t_k is Beta(k/2, (d - k)/2), so the mean is 1F1(k/2; d/2;
    beta) (scipy's, where finite)."""
    for beta in (0.0, 0.5, 7.0, 60.0, 400.0):
        want = special.hyp1f1(k / 2.0, d / 2.0, beta)
        if np.isfinite(want) and want < 1e300:
            assert spiked.log_dirichlet_mgf([beta] * k, d) == pytest.approx(math.log(want),
                                                                      rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("betas,d", [([0.3, 0.1, 0.05], 8), ([0.45, 0.2, 0.2, 0.01, 0.0], 60),
                                     ([0.4, 0.3], 220)])
def test_distinct_eigenvalues_by_the_laplace_identity(df, betas, d):
    """For g ~ N(0, I_d): E exp(g^T B g) = prod (1 - 2 beta_j)^(-1/2) (beta_j < 1/2), and
    g^T B g = r (u^T B u) with r ~ chi2_d independent of u: so the chi2_d average of
    exp(log_dirichlet_mgf(r beta)) (quadrature over r) is that product."""
    betas = np.array(betas)
    chi2 = stats.chi2(d)
    top = 40.0 * (d + 30.0) / (1.0 - 2.0 * betas.max())   # the tilted integrand is gone
    value, _ = integrate.quad(lambda r: math.exp(chi2.logpdf(r)
                                                 + spiked.log_dirichlet_mgf(r * betas, d)),
                              0, top, limit=400, epsabs=0, epsrel=1e-11,
                              points=[d / 2.0, d, 3.0 * d])
    assert math.log(value) == pytest.approx(-0.5 * np.sum(np.log1p(-2 * betas)), rel=1e-7)


@pytest.mark.parametrize("b1,b2,d", [(3, 1, 8), (27, 12, 60), (27, 0.6, 60), (100, 30, 220),
                                     (5, 0, 10)])
def test_two_distinct_eigenvalues_by_conditioning(df, b1, b2, d):
    """t_1 ~ Beta(1/2, (d - 1)/2) and, given it, t_2 / (1 - t_1) ~ Beta(1/2, (d - 2)/2): the
    mean is the t_1-average of exp(b1 t_1) 1F1(1/2; (d - 1)/2; b2 (1 - t_1)) (quadrature)."""
    beta = stats.beta(0.5, (d - 1) / 2)
    value, _ = integrate.quad(lambda t: beta.pdf(t) * math.exp(b1 * t) * special.hyp1f1(
        0.5, (d - 1) / 2, b2 * (1 - t)), 0, 1, limit=500, epsabs=0, epsrel=1e-12,
        points=[1e-6, 1e-3, 0.1, 0.5])
    assert spiked.log_dirichlet_mgf([b1, b2], d) == pytest.approx(math.log(value), rel=1e-10)
    assert spiked.log_dirichlet_mgf([b2, b1], d) == pytest.approx(math.log(value), rel=1e-10)


def test_distinct_eigenvalues_against_monte_carlo_and_batches(df):
    rng = np.random.default_rng(1)
    u = _unit_vectors(rng, 1_000_000, 9)
    betas = np.array([[3.0, 1.0, 0.5, 0.0], [1.0, 2.0, 0.2, 0.1]])
    got = spiked.log_dirichlet_mgf(betas, 9)
    assert got.shape == (2,)
    for b, g in zip(betas, got):
        want = special.logsumexp(u[:, :4] ** 2 @ b) - math.log(len(u))
        assert g == pytest.approx(want, abs=0.005)
        assert spiked.log_dirichlet_mgf(b, 9) == pytest.approx(g, rel=1e-12)
    with pytest.raises(ValueError):
        spiked.log_dirichlet_mgf([1.0] * 5, 4)                 # more coordinates than d
    with pytest.raises(ValueError):
        spiked.log_dirichlet_mgf([-1.0], 4)


def test_arrangements_are_every_subset_once_and_halved_when_balanced(df):
    for n, m in [(5, 2), (6, 3), (6, 1), (8, 4)]:
        a = df.arrangements(n, m)
        want = math.comb(n, m) // (2 if 2 * m == n else 1)
        assert a.shape == (want, n) and df.arrangement_count(n, m) == want
        assert np.allclose(a.sum(axis=1), 0.0)
        assert len({tuple(np.flatnonzero(row > 0)) for row in a}) == want
        assert np.allclose(a[a > 0], 1 - m / n) and np.allclose(a[a < 0], -m / n)


def _contrasts(n, m):
    pi = m / n
    contrasts = []
    for subset in itertools.combinations(range(n), m):
        a = np.full(n, -pi)
        a[list(subset)] = 1 - pi
        contrasts.append(a)
    return np.array(contrasts)


def _brute_ratio(y, m, delta, u, contrasts=None, clients=None):
    """log of the direction-averaged planted / null densities: at each direction of ``u``
    the planted density summed over every arrangement and the null's, both written out
    (checked against scipy's densities at the first three directions), averaged explicitly.
    ``contrasts``: the arrangements' mean offsets per row of ``y`` (when not given, every
    subset of ``m`` of the rows, which are the ``clients``)."""
    n, d = y.shape
    pi = m / (clients or n)
    c = pi * (1 - pi) * delta ** 2
    constant = -0.5 * n * d * math.log(2 * math.pi)
    contrasts = _contrasts(n, m) if contrasts is None else contrasts
    # planted: -|y_i - Delta a_i u|^2 / 2 summed over clients, for each (u, arrangement)
    residual = y[None, None] - delta * contrasts[None, :, :, None] * u[:, None, None, :]
    planted = constant - 0.5 * np.sum(residual ** 2, axis=(2, 3))
    projections = u @ y.T
    null = (constant - 0.5 * n * math.log1p(c)
            - 0.5 * (np.sum(y ** 2) - c / (1 + c) * np.sum(projections ** 2, axis=1)))
    for i in range(3):
        scipy_planted = [stats.multivariate_normal(np.zeros(d)).logpdf(
            y - delta * a[:, None] * u[i]).sum() for a in contrasts]
        np.testing.assert_allclose(planted[i], scipy_planted, rtol=1e-12)
        assert null[i] == pytest.approx(stats.multivariate_normal(
            np.zeros(d), np.eye(d) + c * np.outer(u[i], u[i])).logpdf(y).sum(), rel=1e-12)
    planted = special.logsumexp(planted, axis=1) - math.log(len(contrasts))
    return special.logsumexp(planted) - special.logsumexp(null)


@pytest.mark.parametrize("n,m,d,delta", [(3, 1, 3, 2.0), (4, 2, 3, 1.5), (4, 1, 5, 2.5)])
def test_the_ratio_is_the_direction_average_of_the_densities(df, n, m, d, delta):
    rng = np.random.default_rng(n + 10 * d)
    y = rng.standard_normal((n, d)) * 1.3
    u = _unit_vectors(rng, 100_000, d)
    want = _brute_ratio(y, m, delta, u)
    assert df.log_likelihood_ratio(y @ y.T, m, delta, d) == pytest.approx(want, abs=0.03)
    # it reads the Gram matrix only: a rotation of the clients' vectors changes nothing
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    z = y @ q
    assert df.log_likelihood_ratio(z @ z.T, m, delta, d) == pytest.approx(
        df.log_likelihood_ratio(y @ y.T, m, delta, d), rel=1e-9)
    # and is symmetric in the clients
    p = rng.permutation(n)
    assert df.log_likelihood_ratio((y @ y.T)[np.ix_(p, p)], m, delta, d) == pytest.approx(
        df.log_likelihood_ratio(y @ y.T, m, delta, d), rel=1e-9)
    stack = np.stack([y @ y.T, z @ z.T, np.eye(n)])
    assert df.log_likelihood_ratio(stack, m, delta, d).shape == (3,)
    assert df.log_likelihood_ratio(np.eye(n) * 4.0, m, 0.0, d) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("n,m,d,delta", [(3, 1, 3, 2.0), (4, 2, 3, 1.5), (5, 2, 4, 2.5)])
def test_not_told_the_centre_is_the_ratio_of_the_contrasts_densities(df, n, m, d, delta):
    """Relative to their own mean the clients' descriptors are ``V^T Y`` (``V``: an
    orthonormal basis of the ``n - 1`` contrasts): ``n - 1`` rows, ``N(Delta (V^T a)_i u, I)``
    planted and ``N(0, I + c u u^T)`` under the null. The ratio of those densities, written
    out over every arrangement and 100,000 directions, is the ratio not told the centre; it
    ignores a shared offset, and it differs from the ratio told the centre."""
    rng = np.random.default_rng(7 * n + d)
    y = rng.standard_normal((n, d)) * 1.3
    v = np.linalg.svd(np.eye(n) - 1.0 / n)[0][:, :n - 1]   # orthonormal, orthogonal to 1
    assert np.allclose(v.T @ np.ones(n), 0.0) and np.allclose(v.T @ v, np.eye(n - 1))
    u = _unit_vectors(rng, 100_000, d)
    want = _brute_ratio(v.T @ y, m, delta, u, contrasts=_contrasts(n, m) @ v, clients=n)
    got = df.log_likelihood_ratio(y @ y.T, m, delta, d, told_centre=False)
    assert got == pytest.approx(want, abs=0.03)
    moved = y + rng.standard_normal(d) * 5.0
    assert df.log_likelihood_ratio(moved @ moved.T, m, delta, d,
                                   told_centre=False) == pytest.approx(got, rel=1e-9)
    assert abs(df.log_likelihood_ratio(y @ y.T, m, delta, d) - got) > 0.1


def test_power_is_alpha_at_no_separation_and_grows(df):
    p = df.direction_free_power(6, 2, 10, [0.0, 3.0, 6.0, 10.0], draws=800, alpha=0.05)
    assert abs(p[0] - 0.05) < 0.02
    assert p[0] < p[1] < p[2] < p[3] and p[3] > 0.9
    with pytest.raises(ValueError):
        df.direction_free_power(6, 0, 10, [1.0])


def test_not_told_the_direction_is_never_above_told_the_axis(df):
    """The told-axis bound (flux_label_free_bound) is the same test given u; more dimensions
    leave fewer runs found."""
    nb = load_benchmark("flux_label_free_bound")
    deltas = [4.0, 7.0]
    told = nb.label_free_power(6, 3, deltas, draws=2000)
    noise = 3 * math.sqrt(0.25 / 800 + 0.25 / 2000)
    low = df.direction_free_power(6, 3, 8, deltas, draws=800)
    high = df.direction_free_power(6, 3, 60, deltas, draws=800)
    assert np.all(low <= told + noise) and np.all(high <= low + noise)
    assert high[0] < told[0] - 0.2                     # and here far below it


def test_not_told_the_centre_is_alpha_at_no_separation_and_never_above_told_it(df):
    """The same draws, told and not told the centre: the test not told it is one of the
    tests the told one is most powerful among, so it is never above it (up to the Monte
    Carlo error of the thresholds), and with a small group it is far below."""
    deltas = [0.0, 6.0, 8.0]
    told = df.direction_free_power(6, 2, 40, deltas, draws=1500, alpha=0.05)
    free = df.direction_free_power(6, 2, 40, deltas, draws=1500, alpha=0.05,
                                   told_centre=False)
    assert abs(free[0] - 0.05) < 0.02 and free[1] < free[2]
    assert np.all(free <= told + 3 * math.sqrt(0.25 / 1500))
    assert free[1] < told[1] - 0.05                    # 0.57 against 0.65


@pytest.mark.parametrize("told_centre", [True, False])
@pytest.mark.parametrize("n,m,d,delta", [(6, 3, 20, 6.0), (6, 2, 12, 5.0)])
def test_no_rotation_invariant_test_beats_the_bound(df, n, m, d, delta, told_centre):
    """An actual test that is not told the direction (the largest spread of the clients
    along any arrangement's contrast, over the total spread: a function of the Gram matrix,
    level 0.05 against its own null draws) finds the groups no more often than the bound,
    and is a test with power. Not told the centre either, the spread is about the clients'
    own mean (a function of their distances), and the bound is the centre-free one."""
    bound = df.direction_free_power(n, m, d, [delta], draws=2000, told_centre=told_centre)[0]
    h = np.eye(n) if told_centre else np.eye(n) - 1.0 / n
    rng = np.random.default_rng(11)
    pi = m / n
    c = pi * (1 - pi) * delta ** 2
    shift = np.where(np.arange(n) < m, 1 - pi, -pi) * delta
    a = df.arrangements(n, m)

    def scan(y):
        gram = h @ y @ y.T @ h
        return np.max(np.einsum("si,ij,sj->s", a, gram, a)) / np.trace(gram)

    def null_draw():
        y = rng.standard_normal((n, d))
        y[:, 0] *= math.sqrt(1 + c)
        return scan(y)
    threshold = np.quantile([null_draw() for _ in range(4000)], 0.95)
    hits = 0
    for _ in range(1500):
        y = rng.standard_normal((n, d))
        y[:, 0] += shift
        hits += scan(y) > threshold
    assert hits / 1500 <= bound + 3 * math.sqrt(0.25 / 1500 + 0.25 / 2000)
    assert hits / 1500 > 0.15


def test_the_curve_is_cached_and_the_cells_bounded_where_computed(df, tmp_path):
    grid = load_benchmark("bench_k_selection")
    curve = df.direction_free_curve(6, 3, 8, 1.2, alpha=0.05, draws=200, cache=tmp_path)
    assert curve[0][0] == 0.0 and curve[0][-1] >= 1.2 + df.DELTA_STEP
    for told_centre in (True, False):     # its points are the powers at the same draws
        points = df.direction_free_curve(6, 3, 8, 1.2, alpha=0.05, draws=200,
                                         told_centre=told_centre)
        assert np.array_equal(points[1][:4], df.direction_free_power(
            6, 3, 8, points[0][:4], alpha=0.05, draws=200, told_centre=told_centre))
    files = list(tmp_path.glob("direction_free_*.json"))
    assert len(files) == 1
    stored = json.loads(files[0].read_text())
    assert stored[0] == list(curve[0]) and stored[1] == list(curve[1])
    files[0].write_text(json.dumps([stored[0], [0.5] * len(stored[1])]))   # reused, not redone
    assert np.all(df.direction_free_curve(6, 3, 8, 1.2, alpha=0.05, draws=200,
                                          cache=tmp_path)[1] == 0.5)
    cells = [("label", 6, 20, 1, 2), ("feature", 20, 20, 1, 2), ("concept", 300, 20, 1, 2)]
    seps = {("label", 20, 2, 1): 0.4, ("label", 20, 2, 2): 1.1,
            ("feature", 20, 2, 1): 3.0, ("feature", 20, 2, 2): 3.0,
            ("concept", 20, 2, 1): 3.0, ("concept", 20, 2, 2): 3.0}
    ranks = {k: 8 for k in seps}
    # 20 clients 10:10 (92,378 sums) read from a stored curve; 300 clients: too many sums
    balanced = tmp_path / "direction_free_n20_m10_d8_a0.05_draws200_seed0.json"
    balanced.write_text(json.dumps([[0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
                                    [0.05, 0.1, 0.3, 0.9, 1.0, 1.0]]))
    out = df.direction_free_bounds(cells, [1, 2], seps, ranks, grid.group_sizes, alpha=0.05,
                                   draws=200, cache=tmp_path)
    assert list(out) == cells[:2]
    assert out[cells[0]] == [0.5, 0.5] and out[cells[1]] == [1.0, 1.0]
    assert df.arrangement_count(20, 10) <= df.MAX_ARRANGEMENTS < df.arrangement_count(300, 150)


@pytest.mark.parametrize("d", [10, 40, 41, 42, 44, 60, 220])
def test_the_mean_over_arrangements_is_the_logsumexp_of_the_sphere_average(df, d):
    """The compiled loop (from d = 42) and the array path agree with ``log_sphere_mgf``,
    itself checked against the Bessel function above, on both of its branches (the series
    for small arguments, Debye's expansion for large ones), at zero and at huge ones."""
    rng = np.random.default_rng(d)
    squares = rng.uniform(0.0, 4.0 * d, (4, 50))
    squares[0, :5] = 0.0
    squares[1, :3] = -1e-12                      # rounding below zero: read as zero
    squares[2] *= 1e4
    for delta in (0.0, 0.3, 1.0, 3.0):
        norms = np.sqrt(np.maximum(squares, 0.0))
        want = special.logsumexp(spiked.log_sphere_mgf(delta * norms, d), axis=1) - math.log(50)
        np.testing.assert_allclose(spiked.log_mean_sphere_mgf(squares, delta, d), want,
                                   rtol=1e-12, atol=1e-12)


def test_the_arrangements_squares_are_their_quadratic_forms(df):
    rng = np.random.default_rng(5)
    a = df.arrangements(7, 3)
    w = rng.standard_normal((4, 7, 9))
    grams = w @ w.transpose(0, 2, 1)
    np.testing.assert_allclose(df.arrangement_squares(df.arrangement_pairs(a), grams),
                               np.einsum("si,bij,sj->bs", a, grams, a), rtol=1e-12)


@pytest.mark.parametrize("n,m,d,told_centre", [(6, 2, 60, False), (6, 3, 8, True),
                                               (8, 4, 50, False), (7, 2, 44, True)])
def test_the_power_is_the_ratio_of_the_assembled_gram_matrices(df, n, m, d, told_centre):
    """``direction_free_power`` splits each arrangement's square into the part of the
    coordinates other than ``u`` (computed once for every separation) and the coordinate
    along ``u``. The same draws assembled into Gram matrices here, put through
    ``log_likelihood_ratio``, give the same powers."""
    nb = load_benchmark("flux_label_free_bound")
    draws, deltas, seed = 300, [0.0, 2.0, 5.0], 3
    got = df.direction_free_power(n, m, d, deltas, draws=draws, seed=seed,
                                  told_centre=told_centre)
    rng = np.random.default_rng(seed)              # the draws, in the function's order
    z0, z1 = rng.standard_normal((draws, n)), rng.standard_normal((draws, n))
    rest0, rest1 = df._wishart(rng, draws, n, d - 1), df._wishart(rng, draws, n, d - 1)
    pi = m / n
    for delta, power in zip(deltas, got):
        y0 = z0 * math.sqrt(1.0 + pi * (1.0 - pi) * delta ** 2)   # the null's spike along u
        y1 = z1 + delta * np.where(np.arange(n) < m, 1.0 - pi, -pi)
        ratios = [df.log_likelihood_ratio(rest + y[:, :, None] * y[:, None, :], m, delta, d,
                                          told_centre=told_centre)
                  for rest, y in ((rest0, y0), (rest1, y1))]
        assert power == nb._randomized_power(*ratios, 0.05)
    assert got[0] == pytest.approx(0.05) and got[2] > got[0]


def test_the_dirichlet_function_is_the_same_in_batches_of_rows(df, monkeypatch):
    """Rows whose saddle lies far out need a long contour, shared by the whole stack: the
    stack goes through it in batches of rows (memory), with the same values as at once."""
    rng = np.random.default_rng(9)
    beta = rng.uniform(0.0, 3.0, (7, 5))
    beta[3] *= 300.0                             # one row far out: a long contour for all
    whole = spiked.log_dirichlet_mgf(beta, 40)
    monkeypatch.setattr(spiked, "_LINE_TERMS", 1)    # one row at a time
    np.testing.assert_allclose(spiked.log_dirichlet_mgf(beta, 40), whole, rtol=1e-13)
    for row, want in zip(beta, whole):
        assert spiked.log_dirichlet_mgf(row, 40) == pytest.approx(want, rel=1e-9)


def test_the_power_is_the_same_in_batches_of_draws(df, monkeypatch):
    """The draws go through the arrangement sums in batches (memory); batches of 3 draws
    give the same powers as one batch."""
    whole = df.direction_free_power(6, 2, 50, [0.0, 3.0, 6.0], draws=200, told_centre=False)
    monkeypatch.setattr(spiked, "_TERMS_PER_CHUNK", 3 * df.arrangement_count(6, 2) + 1)
    assert np.array_equal(df.direction_free_power(6, 2, 50, [0.0, 3.0, 6.0], draws=200,
                                                  told_centre=False), whole)


def test_the_power_refuses_sizes_outside_its_model(df):
    assert df.direction_free_power(3, 1, 2, [0.0], draws=50)[0] == pytest.approx(0.05)
    for n, m, d in [(3, 0, 4), (3, 3, 4), (3, 1, 1)]:
        with pytest.raises(ValueError, match=f"n={n}, m={m}, d={d}"):
            df.direction_free_power(n, m, d, [1.0], draws=50)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("told_centre", [True, False])
def test_the_command_line_adds_the_column_from_the_same_curves(df, tmp_path, told_centre):
    """``flux_label_free_bound.py --quick --direction-free [--not-told-centre]``: each
    6-client cell's entry is the mean over its seeds of the cached curve (told the centre or
    not) at the population's separation."""
    import subprocess
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "flux_label_free_bound.py"
    done = subprocess.run([sys.executable, str(script), "--quick", "--direction-free",
                           "--no-told-axis", "--cache", str(tmp_path)]
                          + ([] if told_centre else ["--not-told-centre"]),
                          capture_output=True, text=True, timeout=280, check=True)
    assert len(list(tmp_path.glob("direction_free_*_centre_free.json"))) == (
        0 if told_centre else 2)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| label")]
    assert len(rows) == 2
    axis = np.load(tmp_path / "axis_label_20_2_3049_weighted_all_n300_skip20.npz")
    separation, rank = math.sqrt(float(axis["delta2"])), int(axis["rank"])
    for row, (big, small) in zip(rows, [(3, 3), (4, 2)]):
        curve = df.direction_free_curve(6, small, rank, separation, alpha=0.05, draws=100,
                                        cache=tmp_path, told_centre=told_centre)  # cached
        power = float(np.interp(separation, *curve))
        assert f"| {big}:{small} | " in row and f"| {100 * power:.1f} % |" in row
    name = "not told the direction" + ("" if told_centre else " or the centre")
    assert f"{name} (where computed, else the label-free bound)" in done.stdout


def test_report_reads_the_smaller_bound_where_the_direction_free_one_exists(tmp_path):
    nb = load_benchmark("flux_label_free_bound")
    cells = [("label", 6, 20, 1, 2), ("feature", 6, 20, 1, 2), ("concept", 100, 20, 1, 2)]
    bounds = {cells[0]: [0.95] * 4, cells[1]: [0.99] * 4, cells[2]: [0.97] * 4}
    free = {cells[0]: [0.4] * 4, cells[1]: [0.92] * 4}             # none at 100 clients
    counts = {cells[0]: {s: True for s in range(4)},               # 4/4 > 0.4 + noise: over
              cells[1]: {0: True, 1: True, 2: True, 3: False},     # 3/4: missed within reach
              cells[2]: {s: True for s in range(4)}}
    lines = nb.report(bounds, None, counts, direction_free=free)
    assert lines[0].count("|") == 11 and "not told the direction" in lines[0]
    assert lines[2] == "| label | 2 | 20 | 6 | 3:3 | 95.0 % | 40.0 % | - | 4/4 | over |"
    assert lines[3] == "| feature | 2 | 20 | 6 | 3:3 | 99.0 % | 92.0 % | - | 3/4 |  |"
    assert lines[4] == "| concept | 2 | 20 | 100 | 50:50 | 97.0 % | - | - | 4/4 |  |"
    assert lines[5].startswith("cells reaching 90 % (of 3): label-free bound 3, not told the "
                               "direction (where computed, else the label-free bound) 2, the "
                               "rule 2 (within the bound's reach and missed by the rule: 1); "
                               "cells with a count above the bound beyond noise: 1")
    # 4 runs per cell: 90 % needs all 4 right
    expected = f"{0.95 ** 4 + 0.99 ** 4 + 0.97 ** 4:.1f}"
    reach = f"{0.4 ** 4 + 0.92 ** 4 + 0.97 ** 4:.1f}"
    assert lines[6] == (f"a rule that matched the bound in every run would reach 90 % in about "
                        f"{expected} cells ({reach} not told the direction) (the binomial over "
                        f"each cell's runs)")
    named = nb.report(bounds, None, counts, direction_free=free,
                      direction_free_name="not told the direction or the centre")
    assert "| not told the direction or the centre |" in named[0]
    assert named[2:5] == lines[2:5] and f"({reach} not told the direction or the centre)" in named[6]
    with pytest.raises(SystemExit) as stop:              # it bounds the direction-free column
        nb.main(["--not-told-centre", "--quick", "--no-told-axis", "--cache", str(tmp_path)])
    assert stop.value.code == 2
    # without it the table is the label-free bound's alone
    plain = nb.report(bounds, None, counts)
    assert plain[2] == "| label | 2 | 20 | 6 | 3:3 | 95.0 % | - | 4/4 |  |"



@pytest.mark.parametrize("runs", [4, 7, 12])
def test_share_at_goal_is_the_sum_over_every_outcome(runs):
    nb = load_benchmark("flux_label_free_bound")
    powers = np.random.default_rng(runs).uniform(0.5, 1.0, runs)
    want = 0.0
    for outcome in itertools.product([0, 1], repeat=runs):
        if sum(outcome) >= 0.9 * runs:
            want += math.prod(p if o else 1 - p for p, o in zip(powers, outcome))
    assert nb.share_at_goal(powers) == pytest.approx(want, rel=1e-12)
    assert nb.share_at_goal([1.0] * runs) == 1.0 and nb.share_at_goal([0.0] * runs) == 0.0


def test_the_ratio_p_is_a_rank_among_null_draws_and_ignores_the_centre_when_not_told(df):
    """p is (1 + the null draws at or above the run's ratio) / (1 + draws), the draws being
    the model's null Gram matrices (rebuilt here from the same seed); not told the centre, a
    shared offset of the clients changes nothing; told it, the offset is seen."""
    rng = np.random.default_rng(5)
    y = rng.standard_normal((6, 10))
    y[:2, 0] += 3.0
    for told_centre in (True, False):
        p = df.ratio_p(y, 2, 4.0, null_draws=199, seed=9, told_centre=told_centre)
        draws = np.random.default_rng(9)
        z = draws.standard_normal((199, 6))
        grams = df._wishart(draws, 199, 6, 9) + (1 + df.spike(6, 2, 4.0)) * np.einsum(
            "bi,bj->bij", z, z)
        null = [df.log_likelihood_ratio(g, 2, 4.0, 10, told_centre=told_centre) for g in grams]
        stat = df.log_likelihood_ratio(y @ y.T, 2, 4.0, 10, told_centre=told_centre)
        assert p == (1 + sum(v >= stat for v in null)) / 200
    moved = y + 2.0
    assert df.ratio_p(moved, 2, 4.0, null_draws=199, seed=9, told_centre=False) == df.ratio_p(
        y, 2, 4.0, null_draws=199, seed=9, told_centre=False)
    assert df.ratio_p(moved, 2, 4.0, null_draws=199, seed=9) != df.ratio_p(
        y, 2, 4.0, null_draws=199, seed=9)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_heavy_tailed_clients_break_the_small_groups_level_not_the_halves(df):
    """The twenty-first pass's reading of the level check at 20 clients (docs/adapters.md):
    one group of clients whose scales vary (Student-t with 3 degrees of freedom, the same
    covariance) makes the ratio for a small group (m = 2 of 12) split far more often than
    its level allows, while Gaussian clients stay at level and the ratio for two halves
    (m = 6) keeps its level on the same heavy-tailed clients. Not told the centre; at most
    ``allowed`` splits of 100 at level 0.05 (the binomial's 99.9 % quantile)."""
    n, d, delta, samples, alpha = 12, 60, 6.0, 100, 0.05
    allowed = stats.binom.ppf(0.999, samples, alpha)

    def splits(m, heavy):
        rng = np.random.default_rng(5)
        count = 0
        for k in range(samples):
            y = rng.standard_normal((n, d))
            if heavy:
                y *= np.sqrt(1.0 / rng.chisquare(3, size=(n, 1)))
            count += df.ratio_p(y, m, delta, null_draws=99, seed=k, told_centre=False) <= alpha
        return count

    assert splits(2, heavy=False) <= allowed
    assert splits(2, heavy=True) > allowed
    assert splits(6, heavy=True) <= allowed


@pytest.mark.timeout(300)
def test_told_the_covariance_reads_the_runs_own_descriptors_at_their_scale(df, tmp_path):
    """The population's descriptors, built at the run's scale M instead of their own, have
    the same separation (FLUX's projection depends on M through an affine change) and rank;
    p is a rank among the null draws. The command line writes one record per run, counts
    them, and resumes."""
    import subprocess
    import sys
    from pathlib import Path
    nb = load_benchmark("flux_label_free_bound")
    rec = df.told_the_covariance("feature", 20, 2, 3317, 6, 10, clients_per_group=150,
                                 skip=10, null_draws=99)
    assert rec["p"] in {k / 100 for k in range(1, 101)}
    own = nb.population_axis("feature", 20, 2, 3317, clients_per_group=150, skip=10)
    assert rec["delta"] == pytest.approx(math.sqrt(own["delta2"]), rel=1e-6)
    assert rec["d"] == own["rank"] == 60
    assert 0.5 < rec["spread"] < 3.0
    # the level check: six clients of group 0, centred on its mean (one cluster)
    level = df.told_the_covariance("feature", 20, 2, 3317, 6, 10, clients_per_group=150,
                                   skip=10, null_draws=99, one_group=True)
    assert level["p"] in {k / 100 for k in range(1, 101)} and level["d"] == 60
    assert level["delta"] != rec["delta"]                # six clients fewer in group 0
    assert level["delta"] == pytest.approx(rec["delta"], rel=0.2)
    # not told the centre: the run relative to its own mean, the same separation and rank
    free = df.told_the_covariance("feature", 20, 2, 3317, 6, 10, clients_per_group=150,
                                  skip=10, null_draws=99, told_centre=False)
    assert rec["told_centre"] and not free["told_centre"]   # (ratio_p: tested above)
    assert free["p"] in {k / 100 for k in range(1, 101)}
    assert (free["delta"], free["d"], free["spread"]) == (rec["delta"], rec["d"], rec["spread"])
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "flux_direction_free_bound.py"
    out = tmp_path / "runs.jsonl"
    args = [sys.executable, str(script), "--told-covariance", "--seeds", "3317", "--rows", "20",
            "--classes", "2", "--shifts", "feature", "--population-clients", "150", "--skip",
            "10", "--null-draws", "99", "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=280, check=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["run"] for r in records] == [["feature", 6, 20, 1, 2, 3317],
                                           ["feature", 6, 20, 10, 2, 3317]]
    assert records[1]["p"] == rec["p"]
    hits = sum(r["p"] <= 0.01 for r in records)
    assert f"| 6 | 20 | feature | 2 | {hits}/2 |" in done.stdout
    again = subprocess.run(args, capture_output=True, text=True, timeout=280, check=True)
    assert len(out.read_text().splitlines()) == 2 and f"{hits}/2" in again.stdout   # resumed
    mixed = subprocess.run(args + ["--not-told-centre"], capture_output=True, text=True,
                           timeout=280)                     # never mixed into one file
    assert mixed.returncode == 2 and "holds runs told the centre" in mixed.stderr
    assert len(out.read_text().splitlines()) == 2


@pytest.mark.timeout(300)
def test_the_curves_in_two_processes_are_the_curves_of_one(df, tmp_path):
    """``processes=2`` computes the same curves (bit for bit, each cached once) as one
    process, and an error in a worker reaches the caller."""
    grid = load_benchmark("bench_k_selection")
    cells = [("label", 6, 20, 1, 2), ("label", 6, 20, 10, 2), ("feature", 6, 20, 1, 10)]
    seps = {("label", 20, 2, 1): 0.8, ("label", 20, 2, 2): 1.3,
            ("feature", 20, 10, 1): 1.0, ("feature", 20, 10, 2): 0.2}
    ranks = {("label", 20, 2, 1): 8, ("label", 20, 2, 2): 8,
             ("feature", 20, 10, 1): 12, ("feature", 20, 10, 2): 12}
    lines = []
    for p in (1, 2):
        (tmp_path / str(p)).mkdir()
    outs = [df.direction_free_bounds(cells, [1, 2], seps, ranks, grid.group_sizes,
                                     alpha=0.05, draws=120, cache=tmp_path / str(p),
                                     processes=p, progress=lines.append) for p in (1, 2)]
    assert outs[0] == outs[1] and list(outs[0]) == cells
    for p in (1, 2):
        assert len(list((tmp_path / str(p)).glob("direction_free_*.json"))) == 3
    assert lines[:3] == lines[3:] and len(lines) == 6
    # one process announces each curve just before computing it: the curves done by then
    done = []
    df.direction_free_bounds(cells, [1, 2], seps, ranks, grid.group_sizes, alpha=0.05,
                             draws=120, cache=tmp_path / "1",
                             progress=lambda line: done.append(
                                 len(list((tmp_path / "1").glob("*.json")))))
    assert done == [3, 3, 3]                 # cached: nothing left to do
    (tmp_path / "3").mkdir()
    df.direction_free_bounds(cells, [1, 2], seps, ranks, grid.group_sizes, alpha=0.05,
                             draws=120, cache=tmp_path / "3",
                             progress=lambda line: done.append(
                                 len(list((tmp_path / "3").glob("*.json")))))
    assert done[3:] == [0, 1, 2]
    # the costliest first: 15 arrangements at 4:2, then 10 at 3:3, the larger d first
    assert ["n=6 m=2 d=8" in lines[0], "n=6 m=3 d=12" in lines[1],
            "n=6 m=3 d=8" in lines[2]] == [True] * 3
    with pytest.raises(ValueError, match="m=0") as raised:
        df.direction_free_bounds([("label", 6, 20, 1, 2), ("label", 6, 20, 10, 2)], [1],
                                 seps, ranks, lambda n, imbalance: (n, 0 if imbalance > 1 else 3),
                                 alpha=0.05, draws=50, processes=2)
    # raised in a worker process (its traceback travels as the cause), not in this one
    assert type(raised.value.__cause__).__name__ == "_RemoteTraceback"


def _quad_log_ratio(df, sq, g, rows, n, c, delta, d):
    """``log int f1(sY) s^(N-1) ds - log int f0(sY) s^(N-1) ds`` by scipy's adaptive
    quadrature over s, each integrand scaled by its own peak (found on a fine grid)."""
    trace, dim = float(np.trace(g[0])), rows * d

    def log_l(s, which):
        if which:
            return float(df._log_planted(sq * s * s, n, c, delta, d)[0])
        return float(df._log_null(g * s * s, rows, c, d)[0])

    def log_integral(which):
        s = np.exp(np.linspace(-3, 3, 601)) * math.sqrt(dim / trace)
        h = [(dim - 1) * math.log(x) - x * x * trace / 2 + log_l(x, which) for x in s]
        top, peak = max(h), s[int(np.argmax(h))]
        value, _ = integrate.quad(lambda x: math.exp((dim - 1) * math.log(x) - x * x * trace
                                                     / 2 + log_l(x, which) - top),
                                  peak * 0.2, peak * 3, points=[peak], limit=500,
                                  epsabs=0, epsrel=1e-11)
        return math.log(value) + top
    return log_integral(True) - log_integral(False)


@pytest.mark.parametrize("n,m,d,delta,told_centre", [
    (4, 2, 3, 2.0, False), (5, 2, 4, 2.5, True), (6, 3, 60, 6.0, False),
    (6, 3, 220, 10.0, False), (6, 2, 60, 0.0, False)])
def test_not_told_the_level_is_the_scale_integral_of_the_ratio(df, n, m, d, delta,
                                                               told_centre):
    """``told_level=False``: Wijsman's ratio of the densities of Y / |Y|, the planted and the
    null density integrated over the scale with s^(N-1) ds, against scipy's quadrature
    (a peak far from the standard normal's: the next test)."""
    rng = np.random.default_rng(n * d)
    y = rng.standard_normal((n, d))
    y[:m, 0] += delta
    a = df.arrangements(n, m)
    g, rows = df._centred((y @ y.T)[None], told_centre)
    sq = df.arrangement_squares(df.arrangement_pairs(a), g)
    c = df.spike(n, m, delta)
    want = _quad_log_ratio(df, sq, g, rows, n, c, delta, d)
    got = df.log_likelihood_ratio(y @ y.T, m, delta, d, told_centre=told_centre,
                                  told_level=False)
    assert got == pytest.approx(want, abs=2e-5)
    # a scale of every descriptor changes nothing, as it changes the told ratio
    for factor in (7.0, 1e-6):
        scaled = df.log_likelihood_ratio(factor * (y @ y.T), m, delta, d,
                                         told_centre=told_centre, told_level=False)
        assert scaled == pytest.approx(got, abs=1e-8)
    if delta > 0:
        assert df.log_likelihood_ratio(7.0 * (y @ y.T), m, delta, d,
                                       told_centre=told_centre) != pytest.approx(
            df.log_likelihood_ratio(y @ y.T, m, delta, d, told_centre=told_centre))


def test_the_level_integral_finds_a_peak_away_from_the_normals(df):
    """``L = exp(b s^2)`` moves the peak by ``log(T / (T - 2b)) / 2`` in log s (0.8 at
    b = 40; -1.3 at T = 30, b = -200 and +2.0 at T = 100, b = 49, past the first grid's ends):
    the integral is ``Gamma(N/2) (2 / (T - 2b))^(N/2) / 2``, in closed form; every row at
    once, each with its own peak."""
    dim = 60
    t = np.array([100.0, 100.0, 30.0, 100.0, 1e-6])
    b = np.array([0.0, 40.0, -200.0, 49.0, 0.0])
    got = df.log_level_integral(lambda s2: b[None] * s2, t, dim)
    want = special.gammaln(dim / 2) + dim / 2 * np.log(2 / (t - 2 * b)) - math.log(2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_not_told_the_level_is_alpha_at_no_separation_and_never_above_told_it(df):
    """The same draws, told and not told the level: a test of level alpha whatever the
    level is one of those the told test is most powerful among."""
    deltas = [0.0, 4.0]
    told = df.direction_free_power(4, 2, 3, deltas, draws=500, alpha=0.05, told_centre=False)
    free = df.direction_free_power(4, 2, 3, deltas, draws=500, alpha=0.05, told_centre=False,
                                   told_level=False)
    assert abs(free[0] - 0.05) < 0.03 and free[0] < free[1]
    assert np.all(free <= told + 3 * math.sqrt(0.25 / 500))
    assert free[1] < told[1] - 0.05           # in three dimensions the level is worth much


def test_the_curve_not_told_the_level_has_its_own_file(df, tmp_path):
    deltas, powers = df.direction_free_curve(4, 2, 3, 0.4, alpha=0.05, draws=60,
                                             cache=tmp_path, told_centre=False,
                                             told_level=False)
    names = [p.name for p in tmp_path.glob("*.json")]
    assert names == ["direction_free_n4_m2_d3_a0.05_draws60_seed0_centre_free_level_free.json"]
    assert np.array_equal(powers[:4], df.direction_free_power(
        4, 2, 3, deltas[:4], alpha=0.05, draws=60, told_centre=False, told_level=False))


def test_the_parabola_is_the_vertex_and_width_of_three_points(df):
    """On an exact parabola ``-(u - p)^2 / (2 w^2)`` the vertex and the width come back for
    every column; a vertex past either end of the grid is taken one step from the end's
    neighbour, at the end; where it bends up, the largest value's place moved off the ends,
    and no width."""
    shift = np.array([[0.0, 0.3, -0.2, 0.0, 0.0, 0.5]])
    grid = np.linspace(-1.0, 1.0, 9)[:, None] + shift
    peak = np.array([0.13, 1.2, -0.9, 3.0, -4.0, 0.0])
    width = np.array([0.2, 0.5, 0.05, 0.4, 0.3, 1.0])
    values = -(grid - peak) ** 2 / (2 * width ** 2)
    values[:, 5] = (grid[:, 5] - 0.5) ** 2                  # convex: no peak, no width
    got_peak, got_width = df._parabola(values, grid)
    np.testing.assert_allclose(got_peak[:3], peak[:3], atol=1e-12)
    np.testing.assert_allclose(got_width[:5], width[:5], rtol=1e-12)
    assert got_peak[3] == pytest.approx(1.0, abs=1e-12)     # clipped: one step past 0.75
    assert got_peak[4] == pytest.approx(-1.0, abs=1e-12)    # one step before -0.75
    assert got_peak[5] == pytest.approx(grid[1, 5], abs=1e-12) and np.isnan(got_width[5])

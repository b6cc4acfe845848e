"""benchmarks/flux_label_free_bound.py: the Neyman-Pearson bound on label-free K rules and the
reference told the discriminant axis, against independent computations."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nb():
    return load_benchmark("flux_label_free_bound")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_elementary_symmetric_is_the_sum_over_subsets(nb, seed):
    r = np.random.default_rng(seed).uniform(0.05, 20.0, size=(3, 7))
    np.testing.assert_array_equal(nb.log_elementary_symmetric(np.log(r), 0), np.zeros(3))
    for m in range(8):
        want = [math.log(math.fsum(math.prod(row[list(s)]) for s in
                                   itertools.combinations(range(7), m))) for row in r]
        np.testing.assert_allclose(nb.log_elementary_symmetric(np.log(r), m), want,
                                   rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        nb.log_elementary_symmetric(np.log(r), 8)


@pytest.mark.parametrize("n,m", [(6, 2), (5, 1), (6, 3)])
def test_the_likelihood_ratio_reduces_exactly_to_the_discriminant_axis(nb, n, m):
    """The full d-dimensional likelihood ratio (scipy densities, an explicit sum over the
    C(n, m) arrangements) equals the one-axis ratio of the projections, for any x."""
    rng = np.random.default_rng(n * 10 + m)
    d = 3
    a = rng.standard_normal((d, d))
    cov = a @ a.T + 0.5 * np.eye(d)
    mu_a, mu_b = rng.standard_normal(d), rng.standard_normal(d)
    pi = m / n
    delta = mu_a - mu_b
    big_delta = math.sqrt(delta @ np.linalg.solve(cov, delta))
    centre = pi * mu_a + (1 - pi) * mu_b
    null = multivariate_normal(centre, cov + pi * (1 - pi) * np.outer(delta, delta))
    fa, fb = multivariate_normal(mu_a, cov), multivariate_normal(mu_b, cov)
    for trial in range(3):
        x = centre + 2.0 * rng.standard_normal((n, d))
        la, lb = fa.logpdf(x), fb.logpdf(x)
        planted = np.logaddexp.reduce([la[list(s)].sum() + np.delete(lb, list(s)).sum()
                                       for s in itertools.combinations(range(n), m)])
        full = planted - null.logpdf(x).sum()            # + log C(n, m), as the function
        u = (x - centre) @ np.linalg.solve(cov, delta) / big_delta
        assert nb.log_likelihood_ratio(u, m, big_delta) == pytest.approx(full, abs=1e-9)


def test_power_is_alpha_where_the_hypotheses_coincide_and_grows_with_the_separation(nb):
    p = nb.label_free_power(20, 10, [0.0, 2.0, 4.0, 8.0], draws=1000)
    assert p[0] == pytest.approx(0.05, abs=1e-12)
    assert p[1] < p[2] < p[3] and p[3] > 0.99


@pytest.mark.parametrize("n,m,delta", [(6, 2, 3.0), (6, 1, 4.0)])
def test_power_against_an_explicit_sum_over_arrangements(nb, n, m, delta):
    """The power from draws made here (the m clients of the small group at mean a, the others
    at b, the ratio summed over every arrangement explicitly) matches label_free_power."""
    rng = np.random.default_rng(21)
    a, b = (1 - m / n) * delta, -(m / n) * delta
    var0 = 1 + (m / n) * (1 - m / n) * delta ** 2
    subsets = [list(s) for s in itertools.combinations(range(n), m)]

    def ratio(u):
        la, lb = -0.5 * (u - a) ** 2, -0.5 * (u - b) ** 2
        planted = np.logaddexp.reduce([la[s].sum() + np.delete(lb, s).sum() for s in subsets])
        return planted - (-0.5 * u ** 2 / var0 - 0.5 * math.log(var0)).sum()

    draws = 3000
    null = np.array([ratio(math.sqrt(var0) * rng.standard_normal(n)) for _ in range(draws)])
    planted_draws = rng.standard_normal((draws, n)) + np.r_[[a] * m, [b] * (n - m)]
    planted = np.array([ratio(u) for u in planted_draws])
    want = np.mean(planted > np.quantile(null, 0.95))
    got = nb.label_free_power(n, m, [delta], draws=draws)[0]
    assert got == pytest.approx(want, abs=4 * math.sqrt(2 * 0.25 / draws) + 0.01)


@pytest.mark.parametrize("n,m,delta", [(20, 10, 3.0), (6, 3, 5.0), (100, 50, 2.0)])
def test_no_label_free_test_beats_the_bound_in_the_model(nb, n, m, delta):
    """An actual label-free test of exact level 0.05 (the two-means index on the axis, its
    normal null) on draws from the model: its power stays below the Neyman-Pearson power
    (within the two Monte Carlo errors)."""
    bound = nb.label_free_power(n, m, [delta], draws=2000)[0]
    rng = np.random.default_rng(7)
    a, b = nb.group_means(n, m, delta)
    shift = np.where(np.arange(n) < m, a, b)
    hits = sum(nb.told_axis((rng.standard_normal(n) + shift)[:, None], [1.0],
                            draws=4000)[1] <= 0.05 for _ in range(1000))
    assert hits / 1000 <= bound + 3 * math.sqrt(0.25 / 1000 + 0.25 / 2000)
    assert hits / 1000 > 0.05                             # and it is a test with power


def test_separation_estimates_the_mahalanobis_distance_without_bias(nb):
    rng = np.random.default_rng(3)
    d, n = 6, 3000
    a = rng.standard_normal((d, d))
    cov = a @ a.T + np.eye(d)
    delta = rng.standard_normal(d)
    want = delta @ np.linalg.solve(cov, delta)
    chol = np.linalg.cholesky(cov)
    x = np.vstack([rng.standard_normal((n, d)) @ chol.T + delta,
                   rng.standard_normal((n, d)) @ chol.T])
    groups = [0] * n + [1] * n
    unbiased, plug_in, rank = nb.separation(x, groups)
    assert rank == d and plug_in > unbiased
    assert unbiased == pytest.approx(want, abs=4 * (2 * math.sqrt(want * 2 / n) + 0.01))
    # a constant coordinate leaves the rank one short and the distance unchanged
    padded = np.hstack([x, np.ones((2 * n, 1))])
    assert nb.separation(padded, groups)[2] == d
    assert nb.separation(padded, groups)[1] == pytest.approx(plug_in, rel=1e-9)
    axis = nb.discriminant_axis(x, groups)
    parts = [x[:n], x[n:]]
    pooled = sum((p - p.mean(0)).T @ (p - p.mean(0)) for p in parts) / (2 * n - 2)
    fisher = np.linalg.solve(pooled, parts[0].mean(0) - parts[1].mean(0))
    np.testing.assert_allclose(axis, fisher / np.linalg.norm(fisher), rtol=1e-8, atol=1e-12)
    with pytest.raises(ValueError):
        nb.separation(x, [0] * (2 * n))


def test_the_separation_estimate_is_unbiased_where_the_plug_in_is_not(nb):
    """d = 20 with 60 rows per group: the plug-in's mean is about twice Delta^2 = 1; the
    corrected estimate's mean over 300 draws is Delta^2 within 4 standard errors."""
    rng = np.random.default_rng(4)
    d, n = 20, 60
    shift = np.r_[1.0, np.zeros(d - 1)]
    est = np.array([nb.separation(np.vstack([rng.standard_normal((n, d)) + shift,
                                             rng.standard_normal((n, d))]),
                                  [0] * n + [1] * n)[:2] for _ in range(300)])
    unbiased, plug_in = est[:, 0], est[:, 1]
    assert abs(unbiased.mean() - 1.0) < 4 * unbiased.std() / math.sqrt(300)
    assert plug_in.mean() > 1.7


@pytest.mark.parametrize("seed", range(4))
def test_two_means_is_the_best_of_every_split(nb, seed):
    y = np.random.default_rng(seed).standard_normal(8) * [1, 1, 1, 1, 3, 3, 3, 3]
    total = ((y - y.mean()) ** 2).sum()
    best = min(sum(((y[list(g)] - y[list(g)].mean()) ** 2).sum() for g in (s, rest))
               for k in range(1, 8) for s in itertools.combinations(range(8), k)
               for rest in [tuple(i for i in range(8) if i not in s)])
    index, labels = nb.two_means_1d(y)
    assert index == pytest.approx(best / total, rel=1e-9)
    w = sum(((y[labels == g] - y[labels == g].mean()) ** 2).sum() for g in (0, 1))
    assert w == pytest.approx(best, rel=1e-9)
    assert nb.two_means_1d(3.5 * y - 2.0)[0] == pytest.approx(index, rel=1e-9)


def test_the_told_axis_test_has_its_level_on_normal_samples(nb):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2000, 20, 2)) * [1.0, 5.0] + [3.0, 0.0]
    tests = [nb.told_axis(row, [2.0, 0.0], draws=4000) for row in x]
    splits = sum(p <= 0.05 for _, p in tests)
    assert abs(splits / 2000 - 0.05) < 3 * math.sqrt(0.05 * 0.95 / 2000) + 0.005
    for labels, p in tests[:200]:                       # one cluster unless p <= alpha
        assert (len(set(labels.tolist())) == 2) == (p <= 0.05)


def test_run_descriptors_are_the_grids_d(nb):
    grid = load_benchmark("bench_k_selection")
    from omnifc.adapters import flux
    cell = ("label", 6, 20, 1, 2)
    desc, groups = grid.run_descriptors(*cell, 3049)
    want = grid.distances(*cell, 3049, adapters=("flux",), descriptor_form="weighted_all")
    got = flux.block_distances(desc, n_components=10, n_classes=2,
                               bound=_bound(grid, cell, 3049), normalization="none",
                               secure=False)[0]
    np.testing.assert_array_equal(got, want["flux"])
    np.testing.assert_array_equal(groups, want["groups"])


def _bound(grid, cell, seed):
    from omnifc.adapters import flux, fmcl
    clients, _, c, features = grid.federation(*cell, seed)
    encode = fmcl.fixed_encoder(features, grid.ENCODER_DIM, seed=seed)
    m = flux.ACTIVATION_MARGIN * max(float(encode(cl.x_train).max()) for cl in clients)
    return flux.descriptor_bound(flux.shared_projection(grid.ENCODER_DIM, 10, max_value=m), m)


def test_a_population_begins_with_the_runs_clients_so_they_are_skipped(nb):
    """The premise of POPULATION_SKIP: the generator draws a run's group-0 clients first, so
    a population of the same seed begins with them (and with none of its group 1)."""
    grid = load_benchmark("bench_k_selection")
    run, groups, _, _ = grid.federation("conditional", 20, 20, 10, 2, 3049)
    population, _, _, _ = grid.federation("conditional", 2 * 60, 20, 1, 2, 3049)
    same = [[j for j, p in enumerate(population) if p.x_train.shape == c.x_train.shape
             and np.array_equal(p.x_train, c.x_train)] for c in run]
    assert [s for s, g in zip(same, groups) if g == 0] == [[j] for j in range(18)]
    assert all(not s for s, g in zip(same, groups) if g == 1)
    assert nb.POPULATION_SKIP >= max(grid.group_sizes(n, i)[0] for n in (6, 20, 100, 300)
                                     for i in (1, 10))


def test_each_run_gets_the_power_at_its_own_seeds_separation(nb):
    cells = [("label", 20, 50, 1, 2), ("label", 20, 50, 10, 2)]
    deltas = {("label", 50, 2, 1): 1.0, ("label", 50, 2, 2): 2.5}
    bounds = nb.cell_bounds(cells, [1, 2], deltas, draws=300)
    for cell, (big, small) in zip(cells, [(10, 10), (18, 2)]):
        want = nb.label_free_power(big + small, small, [1.0, 2.5], draws=300)
        np.testing.assert_allclose(bounds[cell], want, atol=1e-12)


def test_the_iid_level_counts_every_shifts_axis(nb, monkeypatch):
    """Each iid run is projected on the four planted shifts' axes of its (rows, classes,
    seed); the splits are counted per (clients, classes), against told_axis directly."""
    rng = np.random.default_rng(5)
    runs = {}

    def fake(shift, n, rows, imbalance, classes, seed, descriptor_form=None):
        assert shift == "none" and imbalance == 1
        runs[(n, rows, classes, seed)] = x = rng.standard_normal((n, 3)) * [1.0, 1.0, 0.1]
        return x, np.zeros(n, dtype=np.int64)

    monkeypatch.setattr(nb.grid, "run_descriptors", fake)
    axes = {(sh, r, c, s): {"axis": rng.standard_normal(3)} for sh in nb.grid.SHIFTS
            for r in (20, 50) for c in (2, 10) for s in (1, 2)}
    got = nb.told_axis_iid([6, 20], [20, 50], [2, 10], [1, 2], axes)
    for n in (6, 20):
        for c in (2, 10):
            splits = sum(nb.told_axis(runs[(n, r, c, s)], axes[(sh, r, c, s)]["axis"])[1]
                         <= 0.05 for r in (20, 50) for s in (1, 2) for sh in nb.grid.SHIFTS)
            assert got[(n, c)] == (splits, 16)
    assert sum(s for s, _ in got.values()) > 0          # the fake data do split sometimes


def test_report_flags_a_count_above_the_bound(nb, tmp_path):
    cells = [("label", 20, 20, 1, 2), ("feature", 20, 20, 1, 2), ("concept", 20, 20, 1, 2)]
    bounds = {cells[0]: [0.95] * 4, cells[1]: [0.2] * 4, cells[2]: [0.99] * 4}
    told = {cells[0]: {s: (2, True) for s in range(4)}, cells[1]: {s: (1, False)
                                                                   for s in range(4)},
            cells[2]: {s: (2, True) for s in range(4)}}
    path = tmp_path / "results.jsonl"
    with open(path, "w") as f:
        for s in range(4):
            f.write(json.dumps({"cell": list(cells[0]), "seed": s, "planted": 2,
                                "rules": {"flux:calibrated": [1 + (s > 0), False]}}) + "\n")
            for cell in cells[1:]:
                f.write(json.dumps({"cell": list(cell), "seed": s, "planted": 2,
                                    "rules": {"flux:calibrated": [2, True]}}) + "\n")
    counts = nb.grid_counts(path, "flux:calibrated", [0, 1, 2, 3])
    assert counts == {cells[0]: {0: False, 1: True, 2: True, 3: True},
                      cells[1]: {s: True for s in range(4)}, cells[2]: {s: True for s in range(4)}}
    lines = nb.report(bounds, told, counts)
    assert lines[2] == "| label | 2 | 20 | 20 | 10:10 | 95.0 % | 4/4 | 3/4 |  |"
    assert lines[3] == "| feature | 2 | 20 | 20 | 10:10 | 20.0 % | 0/4 | 4/4 | over |"
    assert lines[4] == "| concept | 2 | 20 | 20 | 10:10 | 99.0 % | 4/4 | 4/4 |  |"
    assert lines[5].startswith("cells reaching 90 % (of 3): label-free bound 2, told the "
                               "axis 2, the rule 2 (within the bound's reach and missed by "
                               "the rule: 1); cells with a count above the bound beyond "
                               "noise: 1")


@pytest.mark.timeout(300)
def test_the_command_line_quick_run(nb, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flux_label_free_bound.py"),
                           "--quick", "--cache", str(tmp_path)], capture_output=True,
                          text=True, timeout=280, check=True)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| label")]
    assert len(rows) == 4
    axis = np.load(tmp_path / "axis_label_20_2_3049_weighted_all_n300_skip20.npz")
    x, groups = load_benchmark("bench_k_selection").run_descriptors("label", 640, 20, 1, 2,
                                                                   3049)
    kept = np.r_[20:640]                                # group 0's first 20 dropped
    assert nb.separation(x[kept], groups[kept])[0] == pytest.approx(float(axis["delta2"]),
                                                                    rel=1e-12)
    np.testing.assert_allclose(axis["axis"], nb.discriminant_axis(x[kept], groups[kept]),
                               rtol=1e-9, atol=1e-12)
    for row, (n, (big, small)) in zip(rows, [(6, (3, 3)), (6, (4, 2)), (20, (10, 10)),
                                            (20, (18, 2))]):
        power = nb.interpolate_power(nb.power_curve(n, small, math.sqrt(float(axis["delta2"])),
                                                    draws=500), math.sqrt(float(axis["delta2"])))
        assert f"| {big}:{small} | {100 * power:.1f} % |" in row
    told = [json.loads(line) for line in open(tmp_path / "told_axis_weighted_all.jsonl")]
    assert len(told) == 4 and all(r["seed"] == 3049 for r in told)


def test_randomized_power_splits_the_tied_mass_to_reach_alpha_exactly(nb):
    null = np.r_[[0.0] * 90, [1.0] * 8, [2.0] * 2]      # q = 1: 2 % above, 8 % at q
    planted = np.r_[[1.0] * 50, [2.0] * 50]
    gamma = (0.05 - 0.02) / 0.08
    assert nb._randomized_power(null, planted, 0.05) == pytest.approx(0.5 + gamma * 0.5)
    assert nb._randomized_power(np.arange(100.0), np.arange(100.0), 0.05) == pytest.approx(
        0.05)                                             # no tie at q = 94.05: 5 values above


def test_the_power_curve_tabulates_from_zero_at_the_given_level(nb):
    deltas, powers = nb.power_curve(20, 10, 0.5, alpha=0.1, draws=300)
    np.testing.assert_allclose(deltas[:6], np.arange(6) * nb.DELTA_STEP)
    assert powers[0] == pytest.approx(0.1)
    want = nb.label_free_power(20, 10, [0.3], alpha=0.1, draws=300)[0]
    assert nb.interpolate_power((deltas, powers), 0.3) == pytest.approx(want, abs=1e-12)


def test_two_means_edges_and_scale(nb):
    assert nb.two_means_1d([2.0, 2.0, 2.0])[0] == 1.0
    assert nb.two_means_1d([2.0, 2.0, 2.0])[1].tolist() == [0, 0, 0]
    y = np.array([0.0, 0.1, 0.3, 5.0, 5.2, 5.9])
    index, labels = nb.two_means_1d(y)
    assert nb.two_means_1d(0.01 * y)[0] == pytest.approx(index, rel=1e-9)
    assert nb.two_means_1d(0.01 * y)[1].tolist() == labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_separation_is_scale_free_and_refuses_too_few_rows(nb):
    rng = np.random.default_rng(8)
    x = np.vstack([rng.standard_normal((40, 4)) + [1, 0, 0, 0], rng.standard_normal((40, 4))])
    groups = [0] * 40 + [1] * 40
    assert nb.separation(1e-6 * x, groups)[:2] == pytest.approx(nb.separation(x, groups)[:2],
                                                              rel=1e-6)
    assert nb.separation(1e-6 * x, groups)[2] == 4
    with pytest.raises(ValueError, match="too few rows"):
        nb.separation(x[[0, 1, 2, 40, 41, 42]], [0, 0, 0, 1, 1, 1])  # nu = 4, rank 4


def test_told_axis_p_is_the_rank_of_the_index_in_its_null(nb):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((12, 2))
    axis = np.array([0.6, 0.8])
    labels, p = nb.told_axis(x, axis, draws=2000)
    index = nb.two_means_1d(x @ axis)[0]
    z = np.random.default_rng(0).standard_normal((2000, 12))
    null = np.array([nb.two_means_1d(row)[0] for row in z])
    assert p == (1 + int(np.sum(null <= index))) / 2001
    assert (labels.any()) == (p <= 0.05)


def test_the_runs_files_resume_without_rebuilding_a_run(nb, monkeypatch, tmp_path):
    calls = []

    def fake(shift, n, rows, imbalance, classes, seed, descriptor_form=None):
        calls.append((shift, n, seed))
        rng = np.random.default_rng(seed * 100 + n)
        groups = np.r_[[0] * (n // 2), [1] * (n - n // 2)]
        return rng.standard_normal((n, 2)) + 9.0 * groups[:, None] * (shift != "none"), groups

    monkeypatch.setattr(nb.grid, "run_descriptors", fake)
    cells = [("label", 20, 20, 1, 2)]
    axes = {(sh, 20, 2, s): {"axis": np.array([1.0, 0.0])} for sh in nb.grid.SHIFTS
            for s in (1, 2)}
    first = nb.told_axis_counts(cells, [1, 2], axes, str(tmp_path))
    iid = nb.told_axis_iid([20], [20], [2], [1, 2], axes, str(tmp_path))
    made = len(calls)
    assert made == 4 and first[cells[0]] == {1: (2, True), 2: (2, True)}
    assert nb.told_axis_counts(cells, [1, 2], axes, str(tmp_path)) == first
    assert nb.told_axis_iid([20], [20], [2], [1, 2], axes, str(tmp_path)) == iid
    assert len(calls) == made                             # nothing rebuilt
    stored = [json.loads(line) for line in open(tmp_path / "told_axis_weighted_all.jsonl")]
    assert stored == [{"cell": list(cells[0]), "seed": s, "k": 2, "exact": True} for s in (1, 2)]
    stored = [json.loads(line) for line in open(tmp_path / "told_axis_iid_weighted_all.jsonl")]
    assert [r["seed"] for r in stored] == [1, 2] and all(len(r["splits"]) == 4 for r in stored)
    assert iid[(20, 2)] == (sum(sum(r["splits"]) for r in stored), 8)


def test_report_without_references_and_the_null_draws_seeded(nb, tmp_path):
    lines = nb.report({("label", 6, 20, 1, 2): [0.5, 1.0]})
    assert lines[0] == ("| shift | classes | rows | clients | groups | label-free bound (model) "
                        "| told the axis: K = 2 | rule: K right | over |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|---|"
    assert lines[2] == "| label | 2 | 20 | 6 | 3:3 | 75.0 % | - | - |  |"
    assert lines[3] == ("cells reaching 90 % (of 1): label-free bound 0; cells with a count "
                        "above the bound beyond noise: 0")
    z = np.random.default_rng(3).standard_normal((50, 7))
    np.testing.assert_array_equal(nb.two_means_null(7, draws=50, seed=3),
                                  np.sort([nb.two_means_1d(row)[0] for row in z]))
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"cell": ["label", 6, 20, 1, 2], "seed": 9, "planted": 2,
                                "rules": {"flux:calibrated": [2, True]}}) + "\n")
    assert nb.grid_counts(path, "flux:calibrated", [1]) == {}


def test_an_over_count_of_the_told_axis_is_flagged_whatever_the_rule_does(nb, tmp_path):
    cell = ("label", 20, 20, 1, 2)
    told = {cell: {s: (2, True) for s in range(4)}}          # 4/4 against a bound of 20 %
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({"cell": list(cell), "seed": s, "planted": 2,
                                        "rules": {"r": [1, False]}}) + "\n" for s in range(4)))
    lines = nb.report({cell: [0.2] * 4}, told, nb.grid_counts(path, "r", range(4)))
    assert lines[2] == "| label | 2 | 20 | 20 | 10:10 | 20.0 % | 4/4 | 0/4 | over |"


def test_one_dimensional_input_and_two_values(nb):
    r = np.array([0.5, 2.0, 3.0, 0.1])
    one = nb.log_elementary_symmetric(np.log(r), 2)
    assert np.ndim(one) == 0
    assert float(one) == pytest.approx(nb.log_elementary_symmetric(np.log(r)[None], 2)[0])
    index, labels = nb.two_means_1d([3.0, 1.0])
    assert index == 0.0 and labels.tolist() == [1, 0]


def test_a_partly_done_runs_file_rebuilds_only_the_missing_runs(nb, monkeypatch, tmp_path):
    calls = []

    def fake(shift, n, rows, imbalance, classes, seed, descriptor_form=None):
        calls.append(seed)
        groups = np.r_[[0] * 10, [1] * 10]
        return np.random.default_rng(seed).standard_normal((20, 2)) + 9.0 * groups[:, None], \
            groups

    monkeypatch.setattr(nb.grid, "run_descriptors", fake)
    cells = [("label", 20, 20, 1, 2)]
    axes = {("label", 20, 2, s): {"axis": np.array([1.0, 0.0])} for s in (1, 2, 3)}
    nb.told_axis_counts(cells, [1], axes, str(tmp_path))
    got = nb.told_axis_counts(cells, [1, 2, 3], axes, str(tmp_path))
    assert calls == [1, 2, 3] and got[cells[0]] == {s: (2, True) for s in (1, 2, 3)}


def test_the_bound_at_a_stricter_level_is_that_levels_power_and_never_above(nb):
    """``alpha`` reaches the power curves: at Delta = 0 the power is the level itself, and a
    level-0.01 rule is bounded below the level-0.05 bound at every separation."""
    deltas = [0.0, 1.0, 2.0, 3.0, 4.0, 6.0]
    strict = nb.label_free_power(20, 10, deltas, alpha=0.01, draws=2000)
    loose = nb.label_free_power(20, 10, deltas, alpha=0.05, draws=2000)
    assert strict[0] == pytest.approx(0.01, abs=1e-12)
    assert np.all(strict <= loose) and np.any(strict < loose - 0.05)
    cells = [("label", 20, 50, 1, 2), ("label", 20, 50, 10, 2)]
    sep = {("label", 50, 2, 1): 1.5, ("label", 50, 2, 2): 3.0}
    bounds = nb.cell_bounds(cells, [1, 2], sep, draws=400, alpha=0.01)
    for cell, (big, small) in zip(cells, [(10, 10), (18, 2)]):
        want = nb.label_free_power(big + small, small, [1.5, 3.0], draws=400, alpha=0.01)
        np.testing.assert_allclose(bounds[cell], want, atol=1e-12)


def test_the_told_axis_runs_at_another_level_keep_their_own_files(nb, monkeypatch, tmp_path):
    """At ``alpha = 0.01`` the told-axis counts and the iid splits are told_axis's at that
    level, stored apart from the default level's files (which stay as they were)."""
    rng = np.random.default_rng(7)
    runs = {}

    def fake(shift, n, rows, imbalance, classes, seed, descriptor_form=None):
        if (shift, n, seed) not in runs:
            groups = np.r_[[0] * (n // 2), [1] * (n - n // 2)]
            lift = 2.2 * groups[:, None]          # the iid runs too: their p spread out
            runs[(shift, n, seed)] = (rng.standard_normal((n, 2)) + lift, groups)
        return runs[(shift, n, seed)]

    monkeypatch.setattr(nb.grid, "run_descriptors", fake)
    cells = [("label", 20, 20, 1, 2)]
    seeds = list(range(24))
    axes = {(sh, 20, 2, s): {"axis": np.array([1.0, 0.0])} for sh in nb.grid.SHIFTS
            for s in seeds}
    loose = nb.told_axis_counts(cells, seeds, axes, str(tmp_path))
    strict = nb.told_axis_counts(cells, seeds, axes, str(tmp_path), alpha=0.01)
    iid = nb.told_axis_iid([20], [20], [2], seeds, axes, str(tmp_path), alpha=0.01)
    for s in seeds:
        x, _ = runs[("label", 20, s)]
        for counts, level in ((loose, 0.05), (strict, 0.01)):
            assert (counts[cells[0]][s][0] == 2) == (nb.told_axis(x, [1.0, 0.0])[1] <= level)
    assert sum(k == 2 for k, _ in strict[cells[0]].values()) < sum(
        k == 2 for k, _ in loose[cells[0]].values())          # the levels do differ here
    p_iid = [nb.told_axis(runs[("none", 20, s)][0], [1.0, 0.0])[1] for s in seeds]
    assert any(0.01 < p <= 0.05 for p in p_iid)               # the level decides some runs
    splits = sum(p <= 0.01 for p in p_iid) * len(nb.grid.SHIFTS)
    assert iid[(20, 2)] == (splits, 24 * len(nb.grid.SHIFTS))
    assert {p.name for p in tmp_path.iterdir()} == {
        "told_axis_weighted_all.jsonl", "told_axis_weighted_all_alpha0.01.jsonl",
        "told_axis_iid_weighted_all_alpha0.01.jsonl"}


@pytest.mark.parametrize("alpha", ["0", "1", "-0.1"])
def test_the_command_line_refuses_a_level_outside_zero_one(nb, alpha, capsys):
    with pytest.raises(SystemExit) as stop:
        nb.main(["--quick", "--alpha", alpha])
    assert stop.value.code == 2 and "--alpha must be in (0, 1)" in capsys.readouterr().err


@pytest.mark.parametrize("processes", ["0", "-2"])
def test_the_command_line_refuses_fewer_than_one_process(nb, processes, capsys):
    with pytest.raises(SystemExit) as stop:
        nb.main(["--quick", "--direction-free", "--processes", processes])
    assert stop.value.code == 2 and (
        f"--processes must be at least 1, got {processes}" in capsys.readouterr().err)


def _summary_case():
    """Twelve hand-made cells of 3 runs, over both groupings, with and without a
    direction-free bound, and the rule's counts."""
    rng = np.random.default_rng(7)
    cells = [(shift, n, rows, 1, classes) for shift in ("label", "concept")
             for n, rows in ((6, 20), (6, 50), (20, 20)) for classes in (2, 10)]
    bounds = {c: list(rng.choice([0.5, 0.85, 0.95, 1.0], size=3)) for c in cells}
    free = {c: list(rng.choice([0.3, 0.92, 1.0], size=3)) for c in cells if c[1] == 6}
    counts = {c: {s: bool(rng.random() < 0.7) for s in range(3)} for c in cells}
    return cells, bounds, free, counts


def test_summary_gathers_the_cells_as_counted_one_by_one(nb):
    cells, bounds, free, counts = _summary_case()
    lines = nb.summary(bounds, counts, direction_free=free)

    def reach(c):                # written out: the smaller mean, per run the smaller power
        told = sum(bounds[c]) / 3
        return (told, bounds[c]) if c not in free else (
            min(told, sum(free[c]) / 3), [min(a, b) for a, b in zip(bounds[c], free[c])])

    def at_goal(powers):          # 3 runs: 90 % needs all 3
        return powers[0] * powers[1] * powers[2]

    def row(group):
        r = [reach(c) for c in group]
        hits = [sum(counts[c].values()) == 3 for c in group]
        mean = sum(m for m, _ in r) / len(group)
        return (f"| {len(group)} | {100 * mean:.1f} %, {sum(m >= 0.9 for m, _ in r)} | "
                f"{sum(at_goal(p) for _, p in r):.1f} | "
                f"{sum(sum(counts[c].values()) for c in group)}/{3 * len(group)}, "
                f"{sum(hits)} | {sum((not h) and m >= 0.9 for h, (m, _) in zip(hits, r))}, "
                f"{sum((not h) and m < 0.9 for h, (m, _) in zip(hits, r))} |")

    by_size = [f"| {n}, {rows} " + row([c for c in cells if c[1:3] == (n, rows)])
               for n, rows in ((6, 20), (6, 50), (20, 20))]
    by_shift = [f"| {shift}, {k} " + row([c for c in cells if (c[0], c[4]) == (shift, k)])
                for shift in ("label", "concept") for k in (2, 10)]   # grid.SHIFTS order
    assert lines[2:5] == by_size and lines[8:12] == by_shift
    head = ("cells | bound: mean, cells at the goal | a rule matching the bound: cells "
            "(expected) | the rule: runs right, cells at the goal | missed: within the "
            "bound's reach, beyond it |")
    assert lines[:2] == ["| clients, rows per client | " + head, "|---|---|---|---|---|---|"]
    assert lines[5:8] == ["", "| shift, classes | " + head, "|---|---|---|---|---|---|"]
    assert lines[12:14] == ["", "missed within the bound's reach (shift, classes, rows, "
                                "clients, groups: bound, the rule):"]
    missed = [c for c in cells if sum(counts[c].values()) < 3 and reach(c)[0] >= 0.9]
    listed = lines[lines.index(next(x for x in lines if x.startswith("missed"))) + 1:-1]
    assert len(listed) == len(missed) > 0
    for c, line in zip(missed, listed):
        assert line == (f"- {c[0]}, {c[4]}, {c[2]}, {c[1]}, {'3:3' if c[1] == 6 else '10:10'}"
                        f": {100 * reach(c)[0]:.1f} %, {sum(counts[c].values())}/3")
    rule = sum(sum(counts[c].values()) == 3 for c in cells)
    shares = [at_goal(reach(c)[1]) for c in cells]
    variance = sum(q * (1 - q) for q in shares)
    assert lines[-1] == (
        f"planted cells at the goal: the rule {rule} of 12, the bound "
        f"{sum(reach(c)[0] >= 0.9 for c in cells)} (in expectation {sum(shares):.2f}, "
        f"standard deviation {math.sqrt(variance):.2f}); missed within reach {len(missed)}, "
        f"beyond reach {12 - rule - len(missed)}")
    # a cell the rule has no runs of is not missed (the bound alone, e.g. on fresh seeds)
    alone = nb.summary(bounds, {}, direction_free=free)
    assert alone[-1] == (
        f"planted cells at the goal: the rule 0 of 12, the bound "
        f"{sum(reach(c)[0] >= 0.9 for c in cells)} (in expectation {sum(shares):.2f}, "
        f"standard deviation {math.sqrt(variance):.2f}); missed within reach 0, beyond "
        f"reach 0")
    # a bound exactly at the goal is within reach, as in report's count
    edge = nb.summary({cells[0]: [0.5, 0.5]}, {cells[0]: {0: True, 1: False}}, goal=0.75)
    assert edge[-1].endswith("missed within reach 0, beyond reach 1")
    edge = nb.summary({cells[0]: [0.5, 0.5]}, {cells[0]: {0: True, 1: False}}, goal=0.5)
    assert not any(line.startswith("- ") for line in edge)     # 1 of 2 is at the goal
    assert edge[-1] == ("planted cells at the goal: the rule 1 of 1, the bound 1 (in "
                        "expectation 0.75, standard deviation 0.43); missed within reach 0, "
                        "beyond reach 0")
    edge = nb.summary({cells[0]: [0.5, 0.5]}, {cells[0]: {0: False, 1: False}}, goal=0.5)
    assert edge[-1].endswith("missed within reach 1, beyond reach 0")
    assert edge[-2] == "- label, 2, 20, 6, 3:3: 50.0 %, 0/2"       # listed at the edge
    # one-cluster cells: a rate exactly at the goal counts; the level's tail at that goal;
    # the level 0.01 by default
    edge = nb.summary({cells[0]: [0.5, 0.5]}, {cells[0]: {0: False, 1: False}}, goal=0.5,
                      alpha=0.2, iid={("none", 6, 20, 1, 2): {0: True, 1: False}})
    assert edge[-2].startswith(f"one-cluster cells at the goal: the rule 1 of 1, a rule of "
                               f"level 0.2 about {1 - 0.2 ** 2:.1f}; ")
    edge = nb.summary({cells[0]: [0.5] * 12}, {cells[0]: {s: False for s in range(12)}},
                      iid={("none", 6, 20, 1, 2): {s: True for s in range(12)}})
    assert edge[-2].startswith("one-cluster cells at the goal: the rule 1 of 1, a rule of "
                               "level 0.01 about 1.0; ")
    iid = {("none", 6, 20, 1, 2): {0: True, 1: True, 2: False},
           ("none", 20, 20, 1, 2): {0: True, 1: True, 2: True}}
    with_iid = nb.summary(bounds, counts, direction_free=free, alpha=0.01, iid=iid)
    assert with_iid[-1] == lines[-1] and with_iid[-2] == (
        f"one-cluster cells at the goal: the rule 1 of 2, a rule of level 0.01 about "
        f"{2 * 0.99 ** 3:.1f}; all cells: the rule {rule + 1} of 14, a rule matching the "
        f"bound about {sum(shares) + 2 * 0.99 ** 3:.1f} (standard deviation "
        f"{math.sqrt(variance + 2 * 0.99 ** 3 * (1 - 0.99 ** 3)):.1f})")


@pytest.mark.timeout(300)
def test_the_command_line_gathers_the_rule_from_its_results_file(nb, tmp_path):
    """``--results``: the quick run's four cells and one one-cluster cell read from a grid
    file (other seeds, rules and cells left out) and gathered by :func:`summary`."""
    results = tmp_path / "results.jsonl"
    planted = [("label", 6, 20, 1, 2), ("label", 6, 20, 10, 2), ("label", 20, 20, 1, 2),
               ("label", 20, 20, 10, 2)]
    records = [{"cell": list(c), "seed": 3049, "planted": 2,
                "rules": {"r": [2 if i % 2 else 1, False]}} for i, c in enumerate(planted)]
    records += [{"cell": ["none", 6, 20, 1, 2], "seed": 3049, "planted": 1,
                 "rules": {"r": [1, False]}},
                {"cell": ["none", 6, 50, 1, 2], "seed": 3049, "planted": 1,    # 50 rows: out
                 "rules": {"r": [2, False]}},
                {"cell": ["label", 6, 20, 1, 2], "seed": 3050, "planted": 2,   # other seed
                 "rules": {"r": [2, False]}},
                {"cell": ["label", 6, 20, 1, 2], "seed": 3049, "planted": 2,   # other rule
                 "rules": {"q": [2, False]}}]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flux_label_free_bound.py"),
                           "--quick", "--no-told-axis", "--cache", str(tmp_path / "cache"),
                           "--results", str(results), "--rule", "r"], capture_output=True,
                          text=True, timeout=280, check=True)
    out = done.stdout.splitlines()
    assert "| 6, 20 | 2 | " in "\n".join(out) and "| 20, 20 | 2 | " in "\n".join(out)
    assert any(line.startswith("| label, 2 | 4 | ") and "| 2/4, 2 |" in line for line in out)
    iid_line = next(line for line in out if line.startswith("one-cluster cells"))
    assert iid_line.startswith("one-cluster cells at the goal: the rule 1 of 1, a rule of "
                               "level 0.05 about 0.9; all cells: the rule 3 of 5")
    assert out[-2].startswith("planted cells at the goal: the rule 2 of 4, the bound ")


def test_seed_set_shares_takes_the_better_cell_of_each_set_of_consecutive_seeds(nb):
    """Each set's share is the larger of the two cells' Poisson-binomial tails, the seeds'
    powers read off each cell's own curve; a partial last set is left out."""
    separations = {7: 0.2, 3: 9.0, 5: 2.0, 9: 6.0, 4: 1.0, 8: 3.0, 6: 0.5}
    out = nb.seed_set_shares(separations, 3, 20, goal=0.6, alpha=0.05, draws=300)
    assert [chosen for chosen, _ in out] == [[3, 4, 5], [6, 7, 8]]      # 9 left out
    curves = [nb.power_curve(20, small, 9.0, alpha=0.05, draws=300) for small in (10, 2)]
    for chosen, share in out:
        tails = []
        for curve in curves:
            p = [float(np.interp(separations[s], *curve)) for s in chosen]
            # at least 2 of 3 (60 %), written out
            tails.append(p[0] * p[1] * p[2] + (1 - p[0]) * p[1] * p[2]
                         + p[0] * (1 - p[1]) * p[2] + p[0] * p[1] * (1 - p[2]))
        assert share == pytest.approx(max(tails), rel=1e-12)
    assert out[0][1] > out[1][1]             # separations 9, 1, 2 against 0.5, 0.2, 3
    # the defaults: sets of 12, 300 clients (150:150 and 273:27), goal 90 %; alpha passed on
    twelve = {s: 0.25 * s for s in range(12)}
    [(chosen, share)] = nb.seed_set_shares(twelve, alpha=0.01, draws=100)
    assert chosen == list(range(12))
    curves = [nb.power_curve(300, small, 2.75, alpha=0.01, draws=100) for small in (150, 27)]
    assert share == pytest.approx(max(nb.share_at_goal(
        [float(np.interp(twelve[s], *curve)) for s in chosen], 0.9) for curve in curves),
        rel=1e-12)
    assert nb.seed_set_shares(twelve, alpha=0.05, draws=100)[0][1] != share


@pytest.mark.parametrize("size", ["0", "3"])
def test_the_command_line_refuses_seed_sets_larger_than_its_seeds(nb, size, capsys):
    with pytest.raises(SystemExit) as stop:
        nb.main(["--seeds", "1-2", "--seed-sets", size])
    assert stop.value.code == 2 and (
        f"--seed-sets must be between 1 and the 2 seeds, got {size}"
        in capsys.readouterr().err)


@pytest.mark.timeout(300)
def test_the_command_line_prints_each_seed_set_from_the_populations(nb, tmp_path, capsys):
    """``--seed-sets 1`` on two seeds: binary label shift at the largest rows, each seed's
    share from its own population's separation."""
    assert nb.main(["--seeds", "3049-3050", "--seed-sets", "1", "--rows", "20",
                    "--clients", "20", "--population-clients", "300", "--skip", "20",
                    "--draws", "300", "--cache", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    seps = {s: math.sqrt(float(np.load(
        tmp_path / f"axis_label_20_2_{s}_weighted_all_n300_skip20.npz")["delta2"]))
        for s in (3049, 3050)}
    expected = nb.seed_set_shares(seps, 1, 20, draws=300)
    assert lines[:2] == [f"seeds {s}-{s}: {share:.3f}" for [s], share in expected]
    assert lines[2].startswith("binary label shift, 20 rows, 20 clients, sets of 1 seeds: ")
    assert f"below 0.5 in {sum(x < 0.5 for _, x in expected)} of 2 sets" in lines[2]

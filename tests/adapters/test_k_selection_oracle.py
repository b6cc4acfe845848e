"""The grid's oracle (benchmarks/bench_k_selection.py ``flux:oracle``): PERMANOVA of the
planted groups on the rules' own D, checked against exact computations."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from finite_field import ParameterError


def _sq_int(points):
    """Squared Euclidean distances of integer points, as Python ints."""
    return [[sum((a - b) ** 2 for a, b in zip(p, q)) for q in points] for p in points]


def _pseudo_f_exact(d, groups):
    """Anderson's pseudo-F from its definition, in fractions (pairs i < j)."""
    n, labels = len(groups), sorted(set(groups))
    a = len(labels)
    total = Fraction(sum(d[i][j] for i in range(n) for j in range(i + 1, n)), n)
    within = Fraction(0)
    for g in labels:
        members = [i for i in range(n) if groups[i] == g]
        within += Fraction(sum(d[i][j] for i, j in itertools.combinations(members, 2)),
                           len(members))
    return ((total - within) / (a - 1)) / (within / (n - a))


def test_pseudo_f_equals_the_exact_definition(k_selection_bench):
    rng = np.random.default_rng(11)
    points = rng.integers(-20, 21, size=(13, 4)).tolist()
    groups = [0] * 4 + [1] * 6 + [2] * 3                # three groups of unequal sizes
    d = _sq_int(points)
    f, _ = k_selection_bench.permanova(np.array(d, dtype=np.float64), groups,
                                       permutations=9)
    exact = _pseudo_f_exact(d, groups)
    assert f == pytest.approx(float(exact), rel=1e-12)
    # group names do not matter, only the partition
    renamed = [{0: 7, 1: -1, 2: 3}[g] for g in groups]
    assert k_selection_bench.permanova(np.array(d, float), renamed, permutations=9)[0] == \
        pytest.approx(f, rel=1e-12)


def test_p_value_matches_the_full_enumeration_of_relabellings(k_selection_bench):
    """n = 9 in groups of 4 and 5: the exact permutation p is the share of all 126 splits
    whose F is at least the observed one; B = 999 random relabellings estimate it."""
    rng = np.random.default_rng(3)
    points = (rng.integers(-10, 11, size=(9, 2)) + np.repeat([[0, 0], [10, 0]], [4, 5], axis=0))
    groups = [0] * 4 + [1] * 5
    d = _sq_int(points.tolist())
    observed = _pseudo_f_exact(d, groups)
    splits = list(itertools.combinations(range(9), 4))
    at_least = sum(_pseudo_f_exact(d, [0 if i in s else 1 for i in range(9)]) >= observed
                   for s in splits)
    exact_p = at_least / len(splits)
    assert 0.02 < exact_p < 0.5                 # the data make the test non-trivial
    _, p = k_selection_bench.permanova(np.array(d, dtype=np.float64), groups)
    sd = np.sqrt(exact_p * (1 - exact_p) / 999)
    assert abs(p - exact_p) <= 4 * sd + 1 / 1000


def test_a_relabelling_of_the_same_partition_counts_as_at_least_observed(k_selection_bench):
    """Two equal groups, far apart: of the 70 splits of 8 clients into 4 + 4, exactly two
    (the partition and its swap) reach the observed F, so the exact p is 2/70, not the
    1/(B + 1) a test that drops ties (summed in another order) would give."""
    x = np.array([0.0, 0.1, 0.2, 0.3, 5.0, 5.1, 5.2, 5.3])
    _, p = k_selection_bench.permanova((x[:, None] - x[None]) ** 2, [0] * 4 + [1] * 4)
    exact_p = 2 / 70
    assert abs(p - exact_p) <= 4 * np.sqrt(exact_p * (1 - exact_p) / 999) + 1 / 1000


def test_level_when_the_clients_are_exchangeable(k_selection_bench):
    """One population, any two labelled groups: P(p <= 0.05) <= 0.05 (exact for B = 99:
    the observed F is one of 100 exchangeable values). 400 draws: the count of rejections
    is Binomial(400, 0.05), mean 20, sd 4.4."""
    rng = np.random.default_rng(20261205)
    groups = [0] * 5 + [1] * 7
    rejected = 0
    for draw in range(400):
        x = rng.standard_normal((12, 3))
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        rejected += k_selection_bench.permanova(d, groups, permutations=99, seed=draw)[1] <= 0.05
    assert 7 <= rejected <= 33


def test_separated_groups_reach_the_smallest_p_and_the_oracle_returns_them(
        k_selection_bench):
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(0, 1, (10, 3)), rng.normal(6, 1, (12, 3))])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    groups = np.array([0] * 10 + [1] * 12)
    assert k_selection_bench.permanova(d, groups)[1] == 1 / 1000
    assert k_selection_bench._oracle(d, groups).tolist() == groups.tolist()
    # the same D told a grouping that is not there: no difference found, one cluster
    mixed = np.array([0, 1] * 11)
    assert k_selection_bench.permanova(d, mixed)[1] > 0.05
    assert k_selection_bench._oracle(d, mixed).tolist() == [0] * 22
    # told one group (an iid cell): one cluster, nothing tested
    assert k_selection_bench._oracle(d, np.zeros(22, int)).tolist() == [0] * 22


def test_zero_distances_and_bad_input(k_selection_bench):
    assert k_selection_bench.permanova(np.zeros((4, 4)), [0, 0, 1, 1]) == (0.0, 1.0)
    with pytest.raises(ParameterError, match="groups"):
        k_selection_bench.permanova(np.zeros((4, 4)), [0, 0, 0, 0])
    with pytest.raises(ParameterError, match="groups"):
        k_selection_bench.permanova(np.zeros((4, 4)), [0, 1, 2, 3])      # every client alone
    with pytest.raises(ParameterError, match="n x n"):
        k_selection_bench.permanova(np.zeros((4, 4)), [0, 0, 1])


def test_grid_reports_the_oracle_on_planted_runs_only(k_selection_bench):
    """The oracle column counts planted runs (K = 2 when it rejects); on iid rows it is
    told one group and the table shows a dash."""
    rows = [{"cell": ["label", 6, 20, 1, 10], "seed": 1, "planted": 2,
             "rules": {"flux:calibrated": [1, False], "flux:oracle": [2, True]}},
            {"cell": ["label", 6, 20, 1, 10], "seed": 2, "planted": 2,
             "rules": {"flux:calibrated": [2, True], "flux:oracle": [1, False]}},
            {"cell": ["none", 6, 20, 1, 10], "seed": 1, "planted": 1,
             "rules": {"flux:calibrated": [1, True], "flux:oracle": [1, True]}}]
    lines = k_selection_bench.grouped_table(rows, ["flux:calibrated", "flux:oracle"])
    table = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert table["**K = 2, all**"] == ["1/2", "1/2 |"]
    assert table["iid (K = 1), 6 clients"] == ["1/1", "– |"]



def _paired(bench, tmp_path, capsys, rows_a, rows_b, rules=None):
    """``--paired A B [--rules RA,RB]`` on two results files written from ``rows_a`` and
    ``rows_b``, as a user runs it: the printed table by its first column."""
    import json

    paths = []
    for name, rows in (("a.jsonl", rows_a), ("b.jsonl", rows_b)):
        paths.append(tmp_path / name)
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--paired", str(paths[0]), str(paths[1])] + (["--rules", rules] if rules else [])
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    return {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in lines[2:]}, paths


def test_paired_table_counts_run_by_run_and_computes_its_verdict(k_selection_bench, tmp_path,
                                                                   capsys):
    """Two results files with known outcomes: the counts, the runs only one side gets right,
    the noise against statistics.stdev of the paired differences, the verdict; a run held by
    one file only is left out. Through ``--paired`` as a user runs it."""
    import statistics

    a_right = [1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0]
    b_right = [1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1]
    rows_a, rows_b = [], []
    for seed, (a, b) in enumerate(zip(a_right, b_right)):
        for rows, right in ((rows_a, a), (rows_b, b)):
            rows.append({"cell": ["label", 20, 50, 1, 2], "seed": seed, "planted": 2,
                         "rules": {"flux:calibrated": [2 if right else 1, bool(right)]}})
    rows_b.append({"cell": ["label", 20, 50, 1, 2], "seed": 99, "planted": 2,
                   "rules": {"flux:calibrated": [2, True]}})          # B only: not paired
    table, _ = _paired(k_selection_bench, tmp_path, capsys, rows_a, rows_b)
    diffs = [b - a for a, b in zip(a_right, b_right)]
    noise = 2 * statistics.stdev(diffs) / len(diffs) ** 0.5 * len(diffs)
    assert sum(diffs) == 5 and 4.5 < noise < 5                 # 5 more: just past the noise
    assert table["**K = 2, all**"] == ["5/12", "10/12", "+6 / -1", f"{noise:.1f}", "better |"]
    assert "iid (K = 1), all" not in table


def test_cells_at_goal_counts_a_cell_at_exactly_the_goal_share_and_not_below(
        k_selection_bench, tmp_path, capsys):
    """A cell of 10 runs with 9 right is at the goal (0.9), 8 right is not; 12 runs need
    11. Through ``--paired`` as a user runs it: A and B each get their own cell count."""
    def rows(right_by_cell):
        out = []
        for (cell, right) in right_by_cell:
            for seed, ok in enumerate(right):
                out.append({"cell": cell, "seed": seed, "planted": 2,
                            "rules": {"flux:axis_ci": [2 if ok else 1, bool(ok)]}})
        return out

    c1, c2, c3 = ["label", 6, 20, 1, 2], ["feature", 6, 20, 1, 2], ["concept", 6, 20, 1, 2]
    a = rows([(c1, [1] * 9 + [0]), (c2, [1] * 8 + [0] * 2), (c3, [1] * 10)])
    b = rows([(c1, [1] * 8 + [0] * 2), (c2, [1] * 10), (c3, [1] * 10)])
    assert k_selection_bench.cells_at_goal(a, "flux:axis_ci") == (2, 3)
    assert k_selection_bench.cells_at_goal(b, "flux:axis_ci") == (2, 3)
    twelve = rows([(c1, [1] * 11 + [0]), (c2, [1] * 10 + [0] * 2)])
    assert k_selection_bench.cells_at_goal(twelve, "flux:axis_ci") == (1, 2)
    b = rows([(c1, [1] * 10), (c2, [1] * 10), (c3, [1] * 10)])
    table, _ = _paired(k_selection_bench, tmp_path, capsys, a, b, "flux:axis_ci,flux:axis_ci")
    assert table["cells with K right in ≥ 90% of runs"][:2] == ["2/3", "3/3"]


def test_paired_table_with_two_rule_names_reads_a_from_a_and_b_from_b(k_selection_bench,
                                                                      tmp_path, capsys):
    """``--paired A B --rules RA,RB``: A's runs read rule RA, B's read RB (the whitened
    metric's flux:axis_ci against the default's flux:calibrated); three names are refused."""

    rows_a = [{"cell": ["feature", 6, 20, 1, 2], "seed": s, "planted": 2,
               "rules": {"flux:calibrated": [1, False], "flux:axis_ci": [2, True]}}
              for s in range(3)]
    rows_b = [{"cell": ["feature", 6, 20, 1, 2], "seed": s, "planted": 2,
               "rules": {"flux:calibrated": [1, False], "flux:axis_ci": [2 if s else 1, s > 0]}}
              for s in range(3)]
    table, paths = _paired(k_selection_bench, tmp_path, capsys, rows_a, rows_b,
                           "flux:calibrated,flux:axis_ci")
    assert table["**K = 2, all**"][:3] == ["0/3", "2/3", "+2 / -0"]
    with pytest.raises(SystemExit):
        k_selection_bench.main(["--paired", str(paths[0]), str(paths[1]), "--rules",
                                "flux:calibrated,flux:axis_ci,flux:ward"])


def test_variant_files_and_the_flux_d_the_rules_read(k_selection_bench):
    bench = k_selection_bench
    assert bench._variant_suffix("weighted", "none") == ""
    assert bench._variant_suffix("weighted_all", "none") == "_weighted_all"
    assert bench._variant_suffix("weighted_all", "whitened") == "_weighted_all_whitened"
    assert bench._flux_keys(None) == ("flux", "flux_old", "flux_paper")
    assert bench._flux_keys(["flux:axis_ci"]) == ("flux",)
    assert bench._flux_keys(["flux:ward", "flux:paper"]) == ("flux", "flux_old", "flux_paper")
    assert bench._flux_keys(["flux:cal_l=C"]) == ("flux", "flux_old")


def test_the_grid_whitened_d_is_the_whitened_descriptors_and_secure_equals_plaintext(
        k_selection_bench):
    """One cell: the grid's whitened D equals the squared distances of the run's own
    descriptors mapped by noise_whitening of the clients' pooled jackknife noise (recomputed
    here from the run's clients), within the quantization, and the secure path's D and map
    equal the plaintext ones bit for bit."""
    from omnifc.adapters import flux

    bench = k_selection_bench
    cell = ("label", 6, 20, 1, 2)
    plain = bench.distances(*cell, 1000, adapters=("flux",), descriptor_form="weighted_all",
                            normalization="whitened", flux_keys=("flux",))
    secure = bench.distances(*cell, 1000, adapters=("flux",), descriptor_form="weighted_all",
                             normalization="whitened", flux_keys=("flux",), secure=True)
    assert set(plain) == {"groups", "flux"} and np.array_equal(plain["flux"], secure["flux"])
    clients, _, c, latents, m = bench.encoded_run(*cell, 1000)
    proj, desc = bench.flux_descriptors(clients, latents, c, flux.flux_components(c, 32),
                                        "weighted_all", m)
    bound = flux.descriptor_bound(proj, m)
    parts = [flux.noise_contribution(z, cl.y_train, proj, c, bound=bound)
             for z, cl in zip(latents, clients)]
    y = flux.noise_whitening(*flux.pool_noise(parts)).apply(desc)
    exact = ((y[:, None] - y[None]) ** 2).sum(-1)
    assert np.abs(plain["flux"] - exact).max() < 4 * y.shape[1] * np.abs(y).max() * 2.0 ** -13


def test_the_grid_split_d_is_the_coordinators_whitening_and_secure_equals_plaintext(
        k_selection_bench):
    """One cell: the grid's split D is the coordinator's computation from D alone on the
    squared distances of the 3n rows [A; B; F], where F are the run's descriptors and A, B
    the descriptors of two halves of every client's rows, recomputed here from the rows
    themselves with the split run_flux uses (default_rng(seed)); quantization within its
    bound; and the secure path's D equals the plaintext one bit for bit."""
    from omnifc.adapters import flux

    bench = k_selection_bench
    cell, seed = ("label", 6, 20, 1, 2), 1000
    plain = bench.distances(*cell, seed, adapters=("flux",), descriptor_form="weighted_all",
                            normalization="split", flux_keys=("flux",))
    secure = bench.distances(*cell, seed, adapters=("flux",), descriptor_form="weighted_all",
                             normalization="split", flux_keys=("flux",), secure=True)
    # at six clients the grid keeps the split D too (flux:run_flux's second test reads it)
    assert set(plain) == {"groups", "flux", "flux_split"}
    assert all(np.array_equal(plain[key], secure[key]) for key in ("flux", "flux_split"))
    assert plain["flux_split"].shape == (18, 18)
    assert np.array_equal(plain["flux"],
                          flux.split_whitened_distances(plain["flux_split"], 6, groups=2))
    clients, _, c, latents, m = bench.encoded_run(*cell, seed)
    proj, desc = bench.flux_descriptors(clients, latents, c, flux.flux_components(c, 32),
                                        "weighted_all", m)
    rng = np.random.default_rng(seed)
    halves = [[], []]
    for z, cl in zip(latents, clients):
        order = rng.permutation(len(z))
        for side, rows in zip(halves, (order[:len(z) // 2], order[len(z) // 2:])):
            side.append(flux.descriptor(z[rows], cl.y_train[rows], proj, c,
                                        form="weighted_all"))

    def coordinator(a, b):
        rows = np.vstack([np.stack(a), np.stack(b), desc])
        return flux.split_whitened_distances(((rows[:, None] - rows[None]) ** 2).sum(-1), 6,
                                             groups=2)

    exact = coordinator(*halves)
    assert plain["flux"].shape == (6, 6)
    scale = np.abs(exact).max()
    assert 0 < np.abs(plain["flux"] - exact).max() < 1e-4 * scale   # 2^-16 quantization
    # another split of the same rows gives another D: the grid uses run_flux's split
    a, b = flux.split_descriptors(latents, [cl.y_train for cl in clients], proj, c,
                                  form="weighted_all", rng=np.random.default_rng(seed + 7),
                                  groups=2)
    assert np.abs(plain["flux"] - coordinator(a, b)).max() > 1e-2 * scale


def test_the_strict_top_axis_column_is_axis_ci_at_the_goal_level(k_selection_bench):
    """Two groups 2.2 sd apart (seed 19): the top-axis test gives p = 0.04 at B = 99 (K = 2
    at 0.05) and p = 0.02 at B = 199, above GOAL_ALPHA: ``flux:axis_ci@0.01`` answers one
    cluster, ``flux:axis_ci`` two."""
    from omnifc.adapters._calibrated_k import calibrated_k

    rng = np.random.default_rng(19)
    x = np.concatenate([rng.normal(0, 1, (12, 3)), rng.normal(0, 1, (12, 3)) + [2.2, 0, 0]])
    rec = {"flux": ((x[:, None] - x[None]) ** 2).sum(-1)}
    strict = calibrated_k(rec["flux"], statistic="axis_ci", alpha=0.01, references=199)
    assert strict.k == 1 and 0.01 < strict.p_value < 0.05 and strict.references == 199
    assert len(set(k_selection_bench.RULES["flux:axis_ci"](rec).tolist())) >= 2
    assert k_selection_bench.RULES["flux:axis_ci@0.01"](rec).tolist() == [0] * 24
    # seed 43, 2.8 sd apart: p = 0.01 with B = 199 (two clusters), 0.02 with B = 99 (one)
    rng = np.random.default_rng(43)
    x = np.concatenate([rng.normal(0, 1, (12, 3)), rng.normal(0, 1, (12, 3)) + [2.8, 0, 0]])
    rec = {"flux": ((x[:, None] - x[None]) ** 2).sum(-1)}
    assert calibrated_k(rec["flux"], statistic="axis_ci", alpha=0.01, references=99).k == 1
    assert len(set(k_selection_bench.RULES["flux:axis_ci@0.01"](rec).tolist())) == 2


def test_the_min_group_column_is_the_strict_test_with_no_singleton_cut(k_selection_bench):
    """One client far from eleven others: ``flux:axis_ci@0.01`` splits it off,
    ``flux:axis_ci_min2@0.01`` (min_group=2, frozen before FLUX_MIN_GROUP_SEEDS) does not."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 4))
    x[0] += [12.0, 0, 0, 0]
    rec = {"flux": ((x[:, None] - x[None]) ** 2).sum(-1)}
    assert len(set(k_selection_bench.RULES["flux:axis_ci@0.01"](rec).tolist())) >= 2
    assert k_selection_bench.RULES["flux:axis_ci_min2@0.01"](rec).tolist() == [0] * 12


def test_goal_alpha_is_derived_from_the_iid_goal(k_selection_bench):
    """GOAL_ALPHA: a test of that exact level keeps <= 3 of 60 iid runs split at all five
    sizes with probability >= 0.95 (Binomial tail); at 0.05 it would be 0.11."""
    from scipy.stats import binom

    assert binom.cdf(3, 60, k_selection_bench.GOAL_ALPHA) ** 5 >= 0.95
    assert binom.cdf(3, 60, 0.05) ** 5 < 0.2


def test_the_goal_level_column_is_the_default_rule_at_that_level(k_selection_bench):
    """Two groups 2.2 sd apart (seed 6): p = 0.05 with the default rule (K = 2), p = 0.03
    at B = 199, above GOAL_ALPHA: the column answers one cluster."""
    from omnifc.adapters._calibrated_k import calibrated_k

    rng = np.random.default_rng(6)
    x = np.concatenate([rng.normal(0, 1, (12, 3)), rng.normal(0, 1, (12, 3)) + [2.2, 0, 0]])
    rec = {"flux": ((x[:, None] - x[None]) ** 2).sum(-1)}
    strict = calibrated_k(rec["flux"], alpha=0.01, references=199)
    assert calibrated_k(rec["flux"]).k >= 2 and strict.k == 1 and 0.01 < strict.p_value
    assert k_selection_bench.RULES["flux:calibrated@0.01"](rec).tolist() == [0] * 24


def test_the_held_out_seed_sets_never_overlap(k_selection_bench):
    """Each FLUX seed set was generated after the rule it judged was frozen: no seed may sit in
    two sets (a reused seed would be a design seed of the later verdict), and each later
    set starts after the earlier ones."""
    grid = k_selection_bench
    sets = [grid.FLUX_FRESH_SEEDS, grid.FLUX_UNIMODAL_SEEDS, grid.FLUX_WEIGHTED_ALL_SEEDS,
            grid.FLUX_DENOISED_SEEDS, grid.FLUX_MAD_SEEDS, grid.FLUX_WHITENED_SEEDS,
            grid.FLUX_WHITENED_STRICT_SEEDS, grid.FLUX_REPLICATION_SEEDS, grid.FLUX_LEVEL_SEEDS,
            grid.FLUX_MIN_GROUP_SEEDS, grid.FLUX_MIN_GROUP_LEVEL_SEEDS,
            grid.FLUX_SPLIT_HALF_SEEDS, grid.FLUX_SPLIT_SECURE_SEEDS,
            grid.FLUX_SPLIT_MIN_P_SEEDS, grid.FLUX_SPLIT_MIN_P_LEVEL_SEEDS,
            grid.ROWS_5000_SEEDS]
    for earlier, later in zip(sets, sets[1:]):
        assert max(earlier) < min(later)
    everything = [s for seeds in sets for s in seeds]
    assert len(everything) == len(set(everything))
    assert not set(everything) & (set(grid.DESIGN_SEEDS) | set(grid.HELD_OUT_SEEDS)
                                  | set(grid.FRESH_SEEDS))


@pytest.mark.timeout(300)
def test_the_grid_runs_with_the_blas_threads_it_is_given(k_selection_bench, monkeypatch,
                                                        capsys):
    """``--blas-threads 1``: the whole grid runs inside ``_common.blas_threads(1)`` (every
    BLAS pool at one thread there), and counts the same K as without it; below 1 refused."""
    import contextlib

    from threadpoolctl import threadpool_info
    real = k_selection_bench.blas_threads
    seen = []

    @contextlib.contextmanager
    def spy(limit):
        with real(limit):
            seen.append((limit, sorted({p["num_threads"] for p in threadpool_info()
                                        if p["user_api"] == "blas"})))
            yield

    monkeypatch.setattr(k_selection_bench, "blas_threads", spy)
    quick = ["--quick", "--adapters", "flux", "--rules", "flux:axis_or_gap@0.01"]
    outs = []
    for extra in (["--blas-threads", "1"], []):
        assert k_selection_bench.main(quick + extra) == 0
        outs.append([line for line in capsys.readouterr().out.splitlines()
                     if "K = " in line])
    assert seen[0] == (1, [1]) and seen[1][0] is None
    assert outs[0] == outs[1] and len(outs[0]) >= 2
    with pytest.raises(SystemExit) as stop:
        k_selection_bench.main(quick + ["--blas-threads", "0"])
    assert stop.value.code == 2 and (
        "--blas-threads must be at least 1, got 0" in capsys.readouterr().err)

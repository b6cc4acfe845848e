"""benchmarks/flux_noise_level.py: the default's rule told the population's covariance, and
the one-cluster test at the noise level the contrasts estimate (issue 24, twenty-fourth
pass), against computations written out here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.covariance import oas

from benchmark_scripts import load_benchmark
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import calibrated_k
from oracles import split_federation, sq_distances

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "flux_noise_level.py"


@pytest.fixture(scope="module")
def nl():
    return load_benchmark("flux_noise_level")


def _federation(rng, n, rows, k, **kwargs):
    """``oracles.split_federation`` with each client's own effect on every axis."""
    return split_federation(rng, n, rows, k, client_axes="all", **kwargs)


@pytest.mark.parametrize("k, stretch", [(4, 1.0), (10, 100.0)])
def test_the_statistic_read_from_d_is_the_one_on_the_descriptors(nl, k, stretch):
    """T from D alone (MDS) equals the top eigenvalue of the centred descriptors whitened by
    the OAS covariance of the Helmert contrasts, both computed here in the descriptors' own
    coordinates (D fixes them up to a rotation, which changes neither). ``stretch``: one
    coordinate 100 times the others, so OAS leaves the others' variances near 0.7 % of the
    largest (54 contrasts), far above the floor of 1e-12 but where a larger one would bite."""
    rng = np.random.default_rng(5)
    n, p = 6, 5
    rows = _federation(rng, n, 20, k, p=p) * np.r_[stretch, np.ones(p - 1)]
    g, f = rows[:k * n].reshape(k, n, p), rows[k * n:]
    contrasts = []
    for r in range(1, k):
        c = (g[:r].sum(axis=0) - r * g[r]) / np.sqrt(r * (r + 1)) * 2 * np.sqrt((k - 1) / k)
        contrasts.append(c)
    s, _ = oas(np.vstack(contrasts), assume_centered=True)
    w = np.linalg.inv(np.linalg.cholesky(s)).T           # any whitening: y y^T is the same
    y = (f - f.mean(axis=0)) @ w
    want = np.linalg.eigvalsh(y @ y.T)[-1]
    d = sq_distances(rows)
    t, p_value = nl.noise_level_test(d, n, groups=k, references=39, seed=3)
    assert t == pytest.approx(want, rel=1e-9)
    assert p_value in {j / 40 for j in range(1, 41)}
    assert nl.noise_level_test(d, n, groups=k, references=39, seed=3) == (t, p_value)
    # scale-free: a unit change of the descriptors moves T and every draw alike
    assert nl.noise_level_test(9 * d, n, groups=k, references=39, seed=3)[1] == p_value


def test_the_p_is_the_rank_among_draws_rebuilt_from_its_seed(nl):
    """Each reference draw: contrasts from N(0, S) and descriptors from N(0, (k - 1)/4 S)
    (S the data's OAS covariance), S re-estimated by OAS on the drawn contrasts, T read;
    written out here on the embedding's own coordinates (whitened by Cholesky's factor, not
    the eigenvectors the script uses: T is the same for every whitening)."""
    from omnifc.adapters._calibrated_k import mds_embedding
    rng = np.random.default_rng(8)
    n, k, b = 6, 4, 29
    rows = _federation(rng, n, 20, k, p=3)
    x = mds_embedding(sq_distances(rows))[0]
    g, f = x[:k * n].reshape(k, n, -1), x[k * n:]
    contrasts = np.vstack([(g[:r].sum(axis=0) - r * g[r]) / np.sqrt(r * (r + 1))
                           * 2 * np.sqrt((k - 1) / k) for r in range(1, k)])
    s, _ = oas(contrasts, assume_centered=True)

    def top(points, cov):
        y = (points - points.mean(axis=0)) @ np.linalg.inv(np.linalg.cholesky(cov)).T
        return np.linalg.eigvalsh(y @ y.T)[-1]

    draw = np.random.default_rng(4)
    values, vectors = np.linalg.eigh(s)       # the draws' square root of S (the stream's)
    root = vectors * np.sqrt(values)
    t = top(f, s)
    null = []
    for _ in range(b):
        noise = draw.standard_normal(contrasts.shape) @ root.T
        points = draw.standard_normal(f.shape) @ root.T * np.sqrt((k - 1) / 4)
        null.append(top(points, oas(noise, assume_centered=True)[0]))
    got_t, got_p = nl.noise_level_test(sq_distances(rows), n, groups=k, references=b, seed=4)
    assert got_t == pytest.approx(t, rel=1e-9)
    assert got_p == (1 + sum(v >= t for v in null)) / (1 + b)
    assert 0.05 < got_p < 0.95                # draws on both sides of T: the ranks compare


def test_level_on_identically_distributed_clients_power_on_groups(nl):
    """Six clients of 20 rows, four groups each: clients of one distribution are split at
    0.05 about as often as the level allows (3 of 60 seen); two groups of three, four noise
    units apart (a client mean's noise is 1 / sqrt(20)), mostly (48 and 54 of 60 seen on two
    generator seeds); clients that each have their own distribution, their means 1.3 noise
    units apart (the null it does not hold), mostly too (46 and 51): the failure the docs
    state."""
    rng = np.random.default_rng(11)
    runs = 60

    def rejections(**kw):
        return sum(nl.noise_level_test(sq_distances(_federation(rng, 6, 20, 4, **kw)), 6, groups=4,
                                       references=39, seed=s)[1] <= 0.05
                   for s in range(runs))

    assert rejections() <= 9                 # P(Binomial(60, 0.05) >= 10) = 0.003
    assert rejections(shift=4.0 / np.sqrt(20), small=3) >= 40
    assert rejections(client_sd=0.3) >= 30   # client effects of 0.3 against noise of 0.22


def test_the_rule_told_the_covariance_whitens_by_the_populations(nl):
    """K of the default's rule on the run's descriptors whitened by the pooled within-group
    covariance of the population (computed here, group by group), on its numerical rank."""
    grid = load_benchmark("bench_k_selection")
    lf = load_benchmark("flux_label_free_bound")
    got = nl.told_covariance_distances("feature", 20, 2, 3317, 6, 1, clients_per_group=150,
                                       skip=10)
    clients, groups, c, latents, _ = lf.population_clients("feature", 20, 2, 3317,
                                                           clients_per_group=150, skip=10)
    run_clients, _, _, run_latents, scale = grid.encoded_run("feature", 6, 20, 1, 2, 3317)
    l = flux.flux_components(c, grid.ENCODER_DIM)
    x = grid.flux_descriptors(clients, latents, c, l, "weighted_all", scale)[1]
    run = grid.flux_descriptors(run_clients, run_latents, c, l, "weighted_all", scale)[1]
    scatter = sum(np.cov(x[groups == g].T, bias=True) * np.sum(groups == g) for g in (0, 1))
    values, vectors = np.linalg.eigh(scatter / (len(x) - 2))
    keep = values > values.max() * 1e-10
    y = run @ vectors[:, keep] / np.sqrt(values[keep])
    np.testing.assert_allclose(got, sq_distances(y), rtol=1e-7, atol=1e-9 * sq_distances(y).max())
    assert keep.sum() == 60
    want = calibrated_k(sq_distances(y), statistic="axis_or_gap", alpha=0.01, references=199).k
    assert nl.rule_told_the_covariance("feature", 20, 2, 3317, 6, 1, clients_per_group=150,
                                       skip=10) == want


@pytest.mark.slow
def test_one_group_reads_each_planted_group_alone(nl):
    grid = load_benchmark("bench_k_selection")
    got = nl.one_group_records("label", 20, 2, 3433)
    clients, planted, c, latents, scale = grid.encoded_run("label", 12, 20, 1, 2, 3433)
    proj = flux.shared_projection(grid.ENCODER_DIM, flux.flux_components(c, grid.ENCODER_DIM),
                                  max_value=scale)
    for g in (0, 1):
        take = np.flatnonzero(planted == g)
        assert len(take) == 6
        lat, lab = [latents[i] for i in take], [clients[i].y_train for i in take]
        desc = np.stack([flux.descriptor(z, y, proj, c) for z, y in zip(lat, lab)])
        splits = flux.split_descriptors(lat, lab, proj, c, form="weighted_all",
                                        rng=np.random.default_rng([3433, g]), groups=10)
        full = sq_distances(np.vstack(list(splits) + [desc]))
        assert got[g]["p"] == pytest.approx(nl.noise_level_test(full, 6, seed=3433)[1],
                                            abs=1e-12)
        whitened = flux.split_whitened_distances(full, 6, groups=10)
        assert got[g]["default"] == calibrated_k(whitened, statistic="axis_or_gap",
                                                 alpha=0.01, references=199).k


def test_refusals_and_the_smallest_sizes(nl):
    with pytest.raises(ValueError, match="k = 10"):
        nl.noise_level_test(np.zeros((12, 12)), 6)
    with pytest.raises(ValueError, match="n = 1 >= 2"):
        nl.noise_level_test(np.zeros((3, 3)), 1, groups=2)
    with pytest.raises(ValueError, match="references"):
        nl.noise_level_test(np.zeros((66, 66)), 6, references=0)
    rows = _federation(np.random.default_rng(2), 2, 20, 4, p=3)    # two clients, one draw
    t, p = nl.noise_level_test(sq_distances(rows), 2, groups=4, references=1)
    assert t > 0 and p in (0.5, 1.0)
    assert nl.noise_level_test(sq_distances(rows), 2, groups=4, references=9) == \
        nl.noise_level_test(sq_distances(rows), 2, groups=4, references=9,
                            seed=0)                                 # the default seed


def test_the_default_rule_is_the_grids(nl):
    """``flux:axis_or_gap@0.01`` with B = 199, as bench_k_selection's RULES apply it."""
    grid = load_benchmark("bench_k_selection")
    x = np.random.default_rng(3).standard_normal((8, 4))
    x[:4, 0] += 1.5
    got = nl.default_decision(sq_distances(x))
    want = calibrated_k(sq_distances(x), statistic="axis_or_gap", alpha=0.01, references=199)
    assert (got.rule, got.references, got.alpha, got.p_value, got.k) == \
        (want.rule, 199, 0.01, want.p_value, want.k)
    assert got.rule.endswith("axis_or_gap")
    labels = grid.RULES["flux:axis_or_gap@0.01"]({"flux": sq_distances(x)})
    assert len(set(labels.tolist())) == got.k


def test_the_run_is_the_grids_split_run(nl):
    """The split D of a run: the grid's clients, descriptors and delete-a-group splits of
    that seed, rebuilt here (10 groups, the default's form)."""
    grid = load_benchmark("bench_k_selection")
    full, planted = nl._split_run("feature", 6, 20, 10, 2, 3434)
    clients, groups, c, latents, scale = grid.encoded_run("feature", 6, 20, 10, 2, 3434)
    proj = flux.shared_projection(grid.ENCODER_DIM, flux.flux_components(c, grid.ENCODER_DIM),
                                  max_value=scale)
    labels = [cl.y_train for cl in clients]
    desc = np.stack([flux.descriptor(z, y, proj, c) for z, y in zip(latents, labels)])
    splits = flux.split_descriptors(latents, labels, proj, c, form="weighted_all",
                                    rng=np.random.default_rng(3434), groups=10)
    np.testing.assert_allclose(full, sq_distances(np.vstack(list(splits) + [desc])), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_array_equal(planted, groups)


def test_the_rule_told_the_covariance_reads_those_distances(nl, monkeypatch):
    """Its K is the default's on :func:`told_covariance_distances` of the same run, with the
    same population (a spy returns two clear groups); the population's defaults are
    ``told_the_covariance``'s."""
    import inspect
    free = load_benchmark("flux_direction_free_bound")
    seen = []
    x = np.r_[np.zeros((3, 2)), np.full((3, 2), 9.0)] + \
        np.random.default_rng(0).standard_normal((6, 2)) * 0.1

    def spy(*args, **kw):
        seen.append((args, kw))
        return sq_distances(x)

    monkeypatch.setattr(nl, "told_covariance_distances", spy)
    assert nl.rule_told_the_covariance("label", 50, 10, 3440, 6, 10, clients_per_group=99,
                                       skip=7) == 2
    assert seen == [(("label", 50, 10, 3440, 6, 10), {"clients_per_group": 99, "skip": 7})]
    monkeypatch.undo()
    asked = []

    class Stop(Exception):
        pass

    def population(*args):
        asked.append(args)
        raise Stop

    import flux_direction_free_bound as imported    # the module the script imports by name
    monkeypatch.setattr(imported, "_last_population", population)
    with pytest.raises(Stop):
        nl.told_covariance_distances("label", 50, 10, 3440, 6, 10)
    theirs = inspect.signature(free.told_the_covariance).parameters
    assert asked == [("label", 50, 10, 3440, theirs["clients_per_group"].default,
                      theirs["skip"].default)]


def test_the_table_counts_each_kind(nl, tmp_path):
    """Hand-written records: K right for runs (the test's K = 2 at p <= alpha), splits for
    single groups, K = 2 for the rule told the covariance."""
    records = [
        {"kind": "runs", "run": ["feature", 6, 20, 1, 2, 1], "planted": 2, "default": 2,
         "p": 0.005},
        {"kind": "runs", "run": ["feature", 6, 20, 10, 2, 2], "planted": 2, "default": 1,
         "p": 0.01},
        {"kind": "runs", "run": ["feature", 6, 20, 1, 2, 3], "planted": 2, "default": 3,
         "p": 0.02},
        {"kind": "runs", "run": ["none", 6, 20, 1, 2, 1], "planted": 1, "default": 1, "p": 0.5},
        {"kind": "runs", "run": ["none", 6, 20, 1, 2, 2], "planted": 1, "default": 2,
         "p": 0.001},
        {"kind": "one-group", "run": ["label", 6, 500, 0, 10, 1], "p": 0.001, "default": 1},
        {"kind": "one-group", "run": ["label", 6, 500, 1, 10, 1], "p": 0.3, "default": 2},
        {"kind": "one-group", "run": ["label", 6, 500, 0, 10, 2], "p": 0.01, "default": 1},
        {"kind": "told-covariance", "run": ["concept", 6, 50, 1, 2, 1], "k": 2},
        {"kind": "told-covariance", "run": ["concept", 6, 50, 10, 2, 1], "k": 1},
        {"kind": "told-covariance", "run": ["concept", 6, 50, 1, 2, 2], "k": 2},
        {"kind": "told-covariance", "run": ["concept", 6, 50, 1, 2, 3], "k": 3},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = nl.table([str(path)])
    assert lines[0] == ("| kind | clients | rows | shift | classes | runs | default: K right / "
                        "splits | noise-level test: K right / splits; told Sigma: K = 2 |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[2:] == ["| one-group | 6 | 500 | label | 10 | 3 | 1 | 2 |",
                         "| runs | 6 | 20 | feature | 2 | 3 | 1 | 2 |",
                         "| runs | 6 | 20 | none | 2 | 2 | 1 | 1 |",
                         "| told-covariance | 6 | 50 | concept | 2 | 4 |  | 2 |"]
    assert nl.table([str(path)], alpha=0.001)[3] == "| runs | 6 | 20 | feature | 2 | 3 | 1 | 0 |"


@pytest.mark.slow
def test_the_command_line_writes_resumes_and_counts(nl, tmp_path):
    out = tmp_path / "runs.jsonl"
    args = [sys.executable, str(SCRIPT), "--runs", "--seeds", "3433", "--rows", "20",
            "--classes", "2", "--shifts", "conditional", "--out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=280, check=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["run"] for r in records] == [["conditional", 6, 20, 1, 2, 3433],
                                           ["conditional", 6, 20, 10, 2, 3433],
                                           ["none", 6, 20, 1, 2, 3433]]
    first = nl.run_record("conditional", 6, 20, 1, 2, 3433)
    assert {k: records[0][k] for k in first} == first
    right = sum((2 if r["p"] <= 0.01 else 1) == 2 for r in records[:2])
    default = sum(r["default"] == 2 for r in records[:2])
    assert f"| runs | 6 | 20 | conditional | 2 | 2 | {default} | {right} |" in done.stdout
    subprocess.run(args, capture_output=True, text=True, timeout=280, check=True)
    assert len(out.read_text().splitlines()) == 3                        # resumed
    shown = subprocess.run([sys.executable, str(SCRIPT), "--table", str(out)],
                           capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.strip() == done.stdout.strip()
    groups = tmp_path / "groups.jsonl"
    level = subprocess.run([sys.executable, str(SCRIPT), "--one-group", "--seeds", "3433",
                            "--rows", "20", "--classes", "2", "--shifts", "label", "--out",
                            str(groups)], capture_output=True, text=True, timeout=280,
                           check=True)
    records = [json.loads(line) for line in groups.read_text().splitlines()]
    want = nl.one_group_records("label", 20, 2, 3433)
    assert [(r["run"], r["p"], r["default"]) for r in records] == [
        (["label", 6, 20, g, 2, 3433], w["p"], w["default"]) for g, w in enumerate(want)]
    splits = (sum(w["default"] > 1 for w in want), sum(w["p"] <= 0.01 for w in want))
    assert f"| one-group | 6 | 20 | label | 2 | 2 | {splits[0]} | {splits[1]} |" in level.stdout
    missing = subprocess.run([sys.executable, str(SCRIPT), "--runs"], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "--out is needed" in missing.stderr


def test_the_records_carry_any_test_with_the_runs_own_arguments(nl):
    """``test`` gets the parts of the run's own split D (its group count) and the run's
    seed, beside the default's K read by the library's whitening; without it, the
    noise-level test's p at that seed."""
    def probe(contrasts, points, seed):
        return {"contrasts": contrasts.shape[0], "clients": points.shape[0], "seed": seed}

    run = ("feature", 6, 20, 10, 2, 3434)
    full, _ = nl._split_run(*run, groups=4)
    assert nl.run_record(*run, groups=4, test=probe) == {
        "planted": 2, "default": nl._default_k(flux.split_whitened_distances(full, 6, groups=4)),
        "contrasts": 18, "clients": 6, "seed": 3434}
    full10, _ = nl._split_run(*run)
    assert nl.run_record(*run)["p"] == nl.noise_level_test(full10, 6, seed=3434)[1]
    got = nl.one_group_records("label", 20, 2, 3433, per_group=4, groups=4, test=probe)
    want = [{"default": nl._default_k(flux.split_whitened_distances(d, n, groups=4)),
             "contrasts": 12, "clients": 4, "seed": 3433}
            for d, n in nl.one_group_distances("label", 20, 2, 3433, per_group=4, groups=4)]
    assert got == want


def test_records_are_appended_once_and_read_back(nl, tmp_path):
    path = tmp_path / "r.jsonl"
    seen = set()
    first = [{"kind": "runs", "run": ["label", 6, 20, 1, 2, 1], "p": 0.5},
             {"kind": "one-group", "run": ["label", 6, 20, 0, 2, 1], "p": 0.1}]
    nl.append_records(path, first, seen)
    assert seen == {("runs", ("label", 6, 20, 1, 2, 1)), ("one-group", ("label", 6, 20, 0, 2, 1))}
    again = [dict(first[0], p=0.9), {"kind": "runs", "run": ["label", 6, 50, 1, 2, 1], "p": 0.2}]
    nl.append_records(path, again, seen)                 # the seen one is not written twice
    path.write_text(path.read_text() + "\n")             # a blank line is skipped
    other = tmp_path / "s.jsonl"
    other.write_text(json.dumps({"kind": "runs", "run": [], "p": 1.0}) + "\n")
    assert nl.read_records([str(path), str(other)]) == first + [again[1]] + [
        {"kind": "runs", "run": [], "p": 1.0}]
    assert len(seen) == 3

"""benchmarks/_flux_noise_groups.py: the delete-a-group jackknife of FLUX's descriptor noise
(issue 24, twenty-first pass), against the library's row jackknife and direct computation."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from omnifc.adapters import flux


@pytest.fixture(scope="module")
def ng():
    return load_benchmark("_flux_noise_groups")


def _client(seed, rows=8):
    proj = flux.shared_projection(3, 2, max_value=1.0)
    x = np.random.default_rng(seed).uniform(0, 1, (rows, 3))
    y = np.array([0, 1] * (rows // 2))
    return proj, x, y


@pytest.mark.parametrize("form", ["weighted_all", "weighted"])
def test_one_row_per_group_is_the_recipes_jackknife(ng, form):
    """With as many groups as rows the delete-a-group jackknife is the row jackknife that
    ``flux.noise_contribution`` computes (its ``(n - 1) J / B^2`` at B = 1)."""
    proj, x, y = _client(1)
    groups = ng.delete_group_descriptors(x, y, proj, 2, len(x), np.random.default_rng(3),
                                         form=form)
    noise, df = flux.noise_contribution(x, y, proj, 2, bound=1.0, form=form)
    assert df == len(x) - 1
    np.testing.assert_allclose(ng.group_jackknife(groups), noise / df, rtol=1e-12, atol=1e-15)


def test_each_descriptor_leaves_out_one_group_of_a_partition(ng):
    proj, x, y = _client(2, rows=10)
    got = ng.delete_group_descriptors(x, y, proj, 2, 3, np.random.default_rng(7))
    order = np.random.default_rng(7).permutation(10)
    parts = np.array_split(order, 3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    for row, part in zip(got, parts):
        kept = np.array(sorted(set(range(10)) - set(part.tolist())))
        np.testing.assert_array_equal(row, flux.descriptor(x[kept], y[kept], proj, 2,
                                                           form="weighted_all"))


def test_the_group_jackknife_is_its_formula(ng):
    x = np.random.default_rng(4).standard_normal((5, 3))
    want = np.zeros((3, 3))
    for row in x:
        dev = row - x.mean(axis=0)
        want += np.outer(dev, dev)
    np.testing.assert_allclose(ng.group_jackknife(x), 4 / 5 * want, rtol=1e-12)


def test_the_pool_is_the_mean_with_k_minus_one_degrees_of_freedom_a_client(ng):
    clients = [_client(s) for s in (1, 2, 3)]
    proj = clients[0][0]
    rng = np.random.default_rng(5)
    groups = [ng.delete_group_descriptors(c[1], c[2], proj, 2, 4, rng) for c in clients]
    noise, df = ng.pooled_group_noise(groups)
    each = [ng.group_jackknife(g) for g in groups]
    assert df == 3 * 3
    np.testing.assert_allclose(noise, np.mean(each, axis=0), rtol=1e-12)


@pytest.mark.parametrize("groups", [1, 9])
def test_groups_outside_two_to_the_rows_are_refused(ng, groups):
    proj, x, y = _client(1)
    with pytest.raises(ValueError, match=r"groups must be in \[2, rows = 8\]"):
        ng.delete_group_descriptors(x, y, proj, 2, groups, np.random.default_rng(0))


def test_the_table_counts_the_planted_k_per_estimate(ng):
    records = [{"cell": ["label", 6, 20, 1, 2], "seed": s, "planted": 2,
                "k": {"split": ks[0], "rows": ks[1]}} for s, ks in ((1, (1, 2)), (2, (2, 2)),
                                                                    (3, (3, 1)))]
    records.append({"cell": ["none", 6, 20, 1, 2], "seed": 1, "planted": 1,
                    "k": {"split": 1, "rows": 2}})
    assert ng.table(records)[2:] == ["| label, 6, 20, 1, 2 | 3 | 1 | 2 |",
                                     "| none, 6, 20, 1, 2 | 1 | 1 | 0 |"]


def test_a_malformed_cell_is_refused(ng, capsys):
    with pytest.raises(SystemExit):
        ng.main(["--cells", "sideways-6-20-1-2"])
    assert "shift-clients-rows-imbalance-classes" in capsys.readouterr().err


def _records(planted_pairs, iid_pairs):
    """Records whose split / groups_10 outcomes are the given (a right, b right) pairs."""
    out = []
    for planted, pairs in ((2, planted_pairs), (1, iid_pairs)):
        for a, b in pairs:
            wrong = 3 - planted
            out.append({"cell": ["x"], "seed": 0, "planted": planted,
                        "k": {"split": planted if a else wrong,
                              "groups_10": planted if b else wrong}})
    return out


def test_the_frozen_verdict_is_computed_from_the_paired_outcomes(ng):
    better = [(0, 1)] * 30 + [(1, 1)] * 10
    lines = ng.verdict_lines(_records(better, [(1, 1)] * 20))
    # noise: two standard errors of the mean paired difference (30 ones, 10 zeros), x 40
    diffs = [1.0] * 30 + [0.0] * 10
    var = sum((d - 0.75) ** 2 for d in diffs) / 39
    assert f"{2 * (var / 40) ** 0.5 * 40:.1f}" == "5.5"
    assert lines[0] == ("planted, all: split 10/40, groups_10 40/40, +30 / -0, noise 5.5: "
                        "groups_10 better")
    assert lines[-1] == "verdict (DELETE_GROUP_VERDICT): holds"
    # planted better but the iid runs worse beyond noise: does not hold
    worse_iid = [(1, 0)] * 20
    assert ng.verdict_lines(_records(better, worse_iid))[-1].endswith("does not hold")
    # planted within noise: does not hold
    tie = [(0, 1), (1, 0)] * 10
    assert ng.verdict_lines(_records(tie, [(1, 1)] * 20))[-1].endswith("does not hold")
    # no iid runs at all: does not hold
    assert ng.verdict_lines(_records(better, []))[-1].endswith("does not hold")


def test_the_default_cells_are_the_design_looks_and_the_fresh_seeds_follow_the_grids(ng):
    import bench_k_selection as grid
    assert len(ng.CELLS) == 40 and len(set(ng.CELLS)) == 40
    assert {c[0] for c in ng.CELLS} == set(grid.SHIFTS) | {"none"}
    assert ng.FRESH_SEEDS[0] == 3421 and len(ng.FRESH_SEEDS) == 12


def test_from_d_at_two_groups_is_the_split_halves_up_to_a_factor_two(ng):
    """The descriptor without one half is the other half: at k = 2 the coordinator's
    estimate from D is ``flux.split_whitened_distances`` (its contrast is (A - B) / sqrt 2,
    so the whitened squared distances are twice the split halves')."""
    rng = np.random.default_rng(11)
    a, b, f = (rng.standard_normal((6, 5)) for _ in range(3))
    got = ng.group_whitened_distances(ng.sq(np.vstack([b, a, f])), 6, 2)
    want = flux.split_whitened_distances(ng.sq(np.vstack([a, b, f])), 6, groups=2)
    np.testing.assert_allclose(got, 2 * want, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("k", [3, 5])
def test_from_d_is_the_estimate_on_the_descriptors_themselves(ng, k):
    """D's embedding is the descriptors up to a rotation and a shift, which change neither
    the contrasts' OAS covariance (up to the same rotation) nor the whitened distances:
    computed here on the descriptors, with the contrasts written out per client."""
    from sklearn.covariance import oas
    rng = np.random.default_rng(k)
    n, p = 7, 4
    g = rng.standard_normal((k, n, p)) + rng.standard_normal((1, n, p)) * 3.0
    f = rng.standard_normal((n, p))
    rows = []
    for i in range(n):
        centred = g[:, i] - g[:, i].mean(axis=0)
        basis = np.linalg.qr(np.eye(k) - 1.0 / k, mode="reduced")[0][:, :k - 1]
        rows.extend(basis.T @ centred)            # k - 1 orthonormal contrasts of client i
    noise = oas(np.array(rows), assume_centered=True)[0]
    values, vectors = np.linalg.eigh(noise)
    want = ng.sq(f @ vectors / np.sqrt(values))
    got = ng.group_whitened_distances(ng.sq(np.vstack([*g, f])), n, k)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


def test_from_d_refuses_a_d_of_the_wrong_size(ng):
    d = np.zeros((12, 12))
    with pytest.raises(ValueError, match=r"D must be \(k \+ 1\) n square for k = 3"):
        ng.group_whitened_distances(d, 4, 3)
    with pytest.raises(ValueError, match="k = 1 >= 2 groups"):
        ng.group_whitened_distances(np.zeros((8, 8)), 4, 1)

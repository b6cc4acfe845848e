"""The grid's ``flux:run_flux`` column: run_flux's own decision (the default recipe's rule,
its second test at 4 to 6 clients, the run's seed) on the grid's quantized split D."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import calibrated_k
from omnifc.adapters.flux._spiked_null import spiked_null_test
from oracles import split_federation, sq_distances

pytestmark = pytest.mark.timeout(600)

SPLIT = dict(adapters=("flux",), population=False, descriptor_form="weighted_all",
             normalization="split", split_groups=10)


def test_at_six_clients_the_column_is_the_union_on_the_split_d_with_the_runs_seed(
        k_selection_bench, monkeypatch):
    """Seed 3481, label shift, 50 rows, 1 : 10 (a run of the union's second trial): the rule
    alone (axis_or_gap at 0.01, B = 199) answers one cluster on the whitened D, with the
    grid's seed 0 and with the run's seed; the spiked-null test on the same split D, seeded
    by the run, gives p <= 0.01: the column answers the planted two groups, as run_flux's
    union does, where the rule's column answers one."""
    bench = k_selection_bench
    cell, seed = ("label", 6, 50, 10, 2), 3481
    rules = ["flux:run_flux", "flux:axis_or_gap@0.01"]
    planted, out = bench.evaluate(cell, seed, None, rules=rules, **SPLIT)
    assert planted == 2
    assert out == {"flux:run_flux": [2, True], "flux:axis_or_gap@0.01": [1, False]}
    rec = bench.cached_distances(cell, seed, None, ("flux",), False, "weighted_all", "split",
                                 rules, 10)
    split, whitened = rec["flux_split"], rec["flux"]
    assert split.shape == (66, 66)
    for state in (0, seed):
        assert calibrated_k(whitened, statistic="axis_or_gap", alpha=0.01, references=199,
                            random_state=state).k == 1
    test = spiked_null_test(split, 6, groups=10, references=199, seed=seed)
    assert test.p_value <= 0.01
    calls = []
    real = flux.cluster_split_clients
    monkeypatch.setattr(flux, "cluster_split_clients",
                        lambda d, n, **kw: calls.append((d, n, kw)) or real(d, n, **kw))
    labels = bench.RULES["flux:run_flux"]({**rec, "seed": seed})
    assert adjusted_rand_score(rec["groups"], labels) == 1
    # run_flux's call: its split D, its client count, 10 groups, the run's seed, no override
    ((d, n, kw),) = calls
    assert d is split and n == 6 and kw == {"groups": 10, "random_state": seed}


def _split_d(n, seed, gap):
    """The split D (10 groups, 20 rows a client) of ``n`` Gaussian clients, half of them
    moved by ``gap`` (``oracles.split_federation``)."""
    rows = split_federation(np.random.default_rng(seed), n, 20, 10, shift=gap, small=n // 2)
    return sq_distances(rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_beyond_six_clients_the_column_is_the_rule_on_the_whitened_d(
        k_selection_bench, monkeypatch, seed):
    """With more than SPIKED_MAX_CLIENTS clients the grid keeps no split D; the column's
    answer on the whitened D alone equals cluster_split_clients' on the split D, and it
    runs the default recipe's rule at run_flux's level and draws with the run's seed."""
    n = 8
    split = _split_d(n, seed, gap=[0.0, 1.0, 2.0][seed - 1])   # K = 1, 1, 2
    rec = {"groups": np.repeat([0, 1], n // 2), "seed": 100 + seed,
           "flux": flux.split_whitened_distances(split, n, groups=10)}
    expected = flux.cluster_split_clients(split, n, groups=10, random_state=100 + seed)[1]
    calls = []
    real = flux.cluster_clients
    monkeypatch.setattr(flux, "cluster_clients",
                        lambda d, **kw: calls.append(kw) or real(d, **kw))
    labels = k_selection_bench.run_flux_labels(rec)
    assert np.array_equal(labels, expected.labels)
    assert calls == [{"k_rule": flux.DEFAULT_RECIPE["k_rule"], "k_alpha": 0.01,
                      "k_references": 199, "random_state": 100 + seed}]
    # with the split D kept, the same answer through cluster_split_clients itself
    assert np.array_equal(k_selection_bench.run_flux_labels({**rec, "flux_split": split}),
                          expected.labels)


def test_the_column_needs_the_split_d_where_the_test_may_be_asked(k_selection_bench):
    """At six clients without the split D the column refuses (it would silently be the rule
    alone), and the grid refuses the column on any D but run_flux's (split, 10 groups), at
    any client count."""
    split = _split_d(6, 0, gap=3.0)
    rec = {"groups": np.repeat([0, 1], 3), "seed": 0,
           "flux": flux.split_whitened_distances(split, 6, groups=10)}
    with pytest.raises(ParameterError, match="needs the split D"):
        k_selection_bench.run_flux_labels(rec)
    for normalization, groups in (("none", 10), ("split", 2)):   # not run_flux's D
        with pytest.raises(ParameterError, match="--normalization split --split-groups 10"):
            k_selection_bench.cached_distances(("label", 20, 20, 1, 2), 0, None, ("flux",),
                                               False, "weighted_all", normalization,
                                               ["flux:run_flux"], groups)


def test_the_column_is_applied_on_the_split_d_only(k_selection_bench):
    """Without --rules, the grid applies flux:run_flux on the split D and on no other."""
    wanted = k_selection_bench._wanted
    assert "flux:run_flux" in wanted(("flux",), False, "split")
    for normalization in ("none", "whitened"):
        names = wanted(("flux",), False, normalization)
        assert "flux:run_flux" not in names and "flux:axis_or_gap@0.01" in names


def test_the_cache_asks_for_the_split_d_only_where_the_column_reads_it(
        k_selection_bench, monkeypatch, tmp_path):
    """The split D is needed only for flux:run_flux (named, or by default on the split D)
    at most SPIKED_MAX_CLIENTS clients: a cached file without it is then recomputed, and
    otherwise read as it is (a fake distances() counts the computations)."""
    bench = k_selection_bench
    calls = []

    def fake(*cell, **kw):
        calls.append(cell[1])
        out = {key: np.zeros((cell[1],) * 2) for key in bench.FLUX_KEYS}
        return {"groups": np.zeros(cell[1], dtype=int), **out}   # never a split D

    monkeypatch.setattr(bench, "distances", fake)
    cases = [  # (clients, normalization, rules, computed again on the second call)
        (6, "none", ["flux:axis_or_gap@0.01"], False),
        (6, "split", ["flux:axis_or_gap@0.01"], False),
        (7, "split", ["flux:run_flux"], False),
        (6, "split", ["flux:run_flux"], True),
        (6, "split", None, True),                # every FLUX rule of the split D
        (6, "none", None, False),
    ]
    for n, normalization, rules, again in cases:
        cache = tmp_path / f"{n}_{normalization}_{rules}"
        cache.mkdir()
        calls.clear()
        for _ in range(2):
            bench.cached_distances(("label", n, 20, 1, 2), 0, str(cache), ("flux",), False,
                                   "weighted_all", normalization, rules, 10)
        assert len(calls) == (2 if again else 1), (n, normalization, rules)

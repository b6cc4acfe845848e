"""benchmarks/clove_label_reference.py: the references behind CLoVE's label-shift ceiling,
checked against scipy, brute force and the generator itself."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
import types
from fractions import Fraction
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from scipy.stats import dirichlet_multinomial

from omnifc import fl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ref(clove_reference):
    return clove_reference


def test_loglik_is_scipys_dirichlet_multinomial_up_to_the_shared_coefficient(ref):
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 30, size=6)
    a1, a2 = rng.uniform(0.1, 20, size=6), rng.uniform(0.1, 20, size=6)
    n = int(counts.sum())
    mine = ref.label_count_loglik(counts, a1) - ref.label_count_loglik(counts, a2)
    theirs = (dirichlet_multinomial.logpmf(counts, a1, n)
              - dirichlet_multinomial.logpmf(counts, a2, n))
    assert mine == pytest.approx(theirs, rel=1e-10, abs=1e-10)


def test_bayes_assignment_is_the_best_assignment_with_the_sizes(ref):
    """9 clients in groups of 5, 2 and 2: every one of the 756 assignments tried."""
    rng = np.random.default_rng(9)
    sizes = [5, 2, 2]
    for _ in range(5):
        loglik = rng.normal(0, 3, size=(9, 3))
        best = max((a for a in itertools.product(range(3), repeat=9)
                    if np.bincount(a, minlength=3).tolist() == sizes),
                   key=lambda a: sum(loglik[i, g] for i, g in enumerate(a)))
        assert ref.bayes_assignment(loglik, sizes).tolist() == list(best)


def test_group_priors_replay_the_generators_draw(ref):
    """The priors the generator drew (recorded from its own Dirichlet call) are replayed."""
    from omnifc.fl import _data

    drawn, real = [], np.random.default_rng

    class Recording:
        def __init__(self, *args, **kwargs):
            self._rng = real(*args, **kwargs)

        def dirichlet(self, alpha, size=None):
            out = self._rng.dirichlet(alpha, size=size)
            if size is not None:                     # the group priors, not a client's
                drawn.append(out)
            return out

        def __getattr__(self, name):
            return getattr(self._rng, name)

    with mock.patch.object(_data.np.random, "default_rng", Recording):
        clients, groups, *_ = ref.case("wine", 3, 73)
    assert np.array_equal(drawn[0], ref.group_priors("wine", 3, 73))
    assert np.bincount(groups).tolist() == [5, 2, 2] and len(clients) == 9


def test_kmeans_objective_is_the_within_cluster_sum_of_squares(ref):
    """Against the centroid form, in fractions, on integer vectors and random partitions."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        x = rng.integers(-50, 50, size=(9, 3))
        labels = rng.integers(0, 3, size=9)
        d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2).astype(np.float64)
        expected = Fraction(0)
        for g in np.unique(labels):
            rows = x[labels == g]
            centre = [Fraction(int(c), len(rows)) for c in rows.sum(axis=0)]
            expected += sum((int(v) - centre[j]) ** 2 for row in rows for j, v in enumerate(row))
        assert ref.kmeans_objective(d, labels) == expected


def test_truth_models_are_each_trained_by_their_own_group_only(ref):
    """Changing a group-1 client's labels leaves group 0's model bit for bit and moves
    group 1's."""
    clients, groups, model, inits, _ = ref.case("wine", 2, 71)
    before = ref.truth_models(clients, groups, model, inits, seed=71, rounds=2)
    i = int(np.flatnonzero(groups == 1)[0])
    changed = list(clients)
    changed[i] = dataclasses.replace(clients[i], y_train=clients[i].y_train[::-1].copy())
    after = ref.truth_models(changed, groups, model, inits, seed=71, rounds=2)
    assert all(np.array_equal(a, b) for a, b in zip(before[0], after[0]))
    assert not all(np.array_equal(a, b) for a, b in zip(before[1], after[1]))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transform", ["identity", "sqrt"])
@pytest.mark.parametrize("name, k, seed", [("wine", 3, 70), ("wine", 3, 72), ("wine", 2, 74),
                                           ("digits", 3, 70), ("breast_cancer", 2, 79)])
def test_at_truth_optimal_means_the_planted_partition_is_the_global_optimum(ref, name, k,
                                                                             seed, transform):
    """Every partition of the clients into k clusters tried (3,025 for 9 clients): the
    ``optimal`` count is "the planted partition has the least k-means objective", so where it
    is 0 no k-means search can reach the groups; ``argmin`` is the library's IFCA rule on the
    same models. Cases from seeds 70-79 with both answers of each (on the losses, the eighth
    pass's table), and the same cases on the default transform's square roots."""
    clients, groups, model, inits, _ = ref.case(name, k, seed)
    kmeans, optimal, argmin = ref.at_truth(clients, groups, model, inits, k, seed,
                                           transform=transform)
    _, d = ref.truth_loss_vectors(clients, groups, model, inits, seed, transform=transform)
    models = ref.truth_models(clients, groups, model, inits, seed)
    ifca = fl.ifca_assign(model)(types.SimpleNamespace(models=models, clients=clients))
    assert argmin == bool((ifca == groups).all())       # the library's IFCA rule
    best = min(ref.kmeans_objective(d, np.array(a))
               for a in itertools.product(range(k), repeat=len(clients))
               if a[0] == 0 and len(set(a)) == k)
    assert optimal == (ref.kmeans_objective(d, groups) == best)
    assert kmeans <= optimal          # k-means finding the groups makes them optimal


@pytest.mark.timeout(120)
def test_feature_shift_runs_only_the_at_truth_columns(ref, capsys, monkeypatch):
    """--shift feature: the clients of a feature-shift federation, the label-shift references
    shown as '-' and left out of the summary, the at-truth counts those of at_truth itself."""
    shifts, real = [], ref.case

    def recording(*args, **kwargs):
        shifts.append(kwargs.get("shift", "label"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ref, "case", recording)
    assert ref.main(["--quick", "--shift", "feature"]) == 0
    assert shifts == ["feature", "feature"]
    monkeypatch.undo()
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[1:-1]]
    expected = []
    for name, k in ref.CASES[:2]:
        clients, groups, model, inits, _ = ref.case(name, k, 70, shift="feature")
        expected.append([str(int(v)) for v in ref.at_truth(clients, groups, model, inits, k, 70)])
    assert [r[3:5] for r in rows] == [["-", "-"], ["-", "-"]]
    assert [r[5:8] for r in rows] == expected
    assert lines[-1].startswith("all clients right (ARI 1), feature shift: at truth: k-means ")
    assert "bayes" not in lines[-1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_run_counts_its_rows():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "clove_label_reference.py"),
                           "--quick"], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[1:-1]]
    assert [r[1:3] for r in rows] == [["breast_cancer", "2"], ["wine", "2"]]
    bayes, hist = sum(int(r[3]) for r in rows), sum(int(r[4]) for r in rows)
    kmeans, optimal, argmin = (sum(int(r[c]) for r in rows) for c in (5, 6, 7))
    assert (f"bayes (told the priors) {bayes}/2, histograms (label-free) {hist}/2, at truth: "
            f"k-means {kmeans}/2, planted objective optimal {optimal}/2, argmin {argmin}/2"
            in lines[-1])


def test_at_truth_sends_the_loops_transform(ref):
    """The at-truth vectors are the loop's: the default is the loop's transform, and the
    square roots are those of the losses, element by element."""
    from omnifc.adapters import clove
    clients, groups, model, inits, _ = ref.case("wine", 3, 72)
    losses, d_losses = ref.truth_loss_vectors(clients, groups, model, inits, 72,
                                              transform="identity")
    roots, d_roots = ref.truth_loss_vectors(clients, groups, model, inits, 72, transform="sqrt")
    default, d_default = ref.truth_loss_vectors(clients, groups, model, inits, 72)
    assert clove.DEFAULT_TRANSFORM == "sqrt"
    assert np.array_equal(roots, np.sqrt(losses)) and np.array_equal(default, roots)
    assert np.array_equal(d_default, d_roots) and not np.array_equal(d_roots, d_losses)
    asked, real = [], ref.truth_loss_vectors

    def spy(*args, **kwargs):
        asked.append(kwargs.get("transform"))
        return real(*args, **kwargs)

    with mock.patch.object(ref, "truth_loss_vectors", spy):
        ref.at_truth(clients, groups, model, inits, 3, 72, transform="identity")
        ref.at_truth(clients, groups, model, inits, 3, 72)
    assert asked == ["identity", clove.DEFAULT_TRANSFORM]


def _independent_within_reach(records):
    looped = [r for r in records if r["clove"] is not None]
    reach = [r for r in looped if r["k-means"]]
    return (len([r for r in reach if r["clove"]]), len(reach),
            len([r for r in looped if not r["k-means"] and r["clove"]]),
            len(looped) - len(reach))


def test_within_reach_counts_every_pattern_of_four_runs(ref):
    """Every record pattern of four runs (at truth right or not; the loop right, wrong or not
    run): the split and the goal against a count written independently."""
    states = [{"k-means": a, "clove": c} for a in (False, True) for c in (None, False, True)]
    for records in itertools.product(states, repeat=4):
        expected = _independent_within_reach(records)
        assert ref.within_reach(records) == expected
        right, reach = expected[0], expected[1]
        assert ref.goal_within_reach(records) == (reach > 0 and 100 * right >= 95 * reach)


@pytest.mark.parametrize("reach", [20, 40, 60, 100])
def test_the_goal_within_reach_at_its_bound(ref, reach):
    """At exactly 95 % of the runs within reach the goal holds; one run fewer, it does not;
    runs beyond reach, however many the loop gets wrong or right, change nothing."""
    at_bound = 95 * reach // 100
    beyond = [{"k-means": False, "clove": c} for c in (True, False, False)]
    for right, holds in ((at_bound, True), (at_bound - 1, False)):
        records = ([{"k-means": True, "clove": True}] * right
                   + [{"k-means": True, "clove": False}] * (reach - right) + beyond)
        assert ref.goal_within_reach(records) is holds
    assert ref.goal_within_reach(beyond) is False


def test_draws_within_reach_counts_every_pattern_of_four_runs(ref):
    """Every record pattern of four runs (at truth right or not; some draw right, wrong or
    not recorded, as in records written before the draws were): the count and the verdict
    against a count written independently."""
    states = [{"k-means": a, "clove": False, **({} if c is None else {"clove_any": c})}
              for a in (False, True) for c in (None, False, True)]
    for records in itertools.product(states, repeat=4):
        recorded = [r for r in records if r["k-means"] and "clove_any" in r]
        right = len([r for r in recorded if r["clove_any"]])
        assert ref.draws_within_reach(records) == (right, len(recorded))
        assert ref.draws_verdict_holds(records) == (
            bool(recorded) and 100 * right < 95 * len(recorded))


@pytest.mark.parametrize("reach", [20, 40, 60, 100])
def test_the_draws_verdict_at_its_bound(ref, reach):
    """With the chooser right in exactly 95 % of the runs within reach the verdict (fewer
    than 95 %) fails; one run fewer, it holds; runs beyond reach change nothing."""
    at_bound = 95 * reach // 100
    beyond = [{"k-means": False, "clove": False, "clove_any": c} for c in (True, False)]
    for right, holds in ((at_bound, False), (at_bound - 1, True)):
        records = ([{"k-means": True, "clove": False, "clove_any": True}] * right
                   + [{"k-means": True, "clove": False, "clove_any": False}] * (reach - right)
                   + beyond)
        assert ref.draws_verdict_holds(records) is holds
    assert ref.draws_verdict_holds(beyond) is False


@pytest.mark.timeout(180)
def test_out_resumes_and_table_sums_the_halves(ref, tmp_path, capsys, monkeypatch):
    """Two halves of the seeds in two record files: --table prints the summary of running
    both seeds in one go; a second run on a file skips the runs it holds; the loop runs with
    the transform asked for."""
    from omnifc.adapters import clove
    monkeypatch.setattr(ref, "CASES", ref.CASES[1:2])          # wine, K = 2
    transforms, real = [], clove.run_clove_fl

    def spy(*args, **kwargs):
        transforms.append(kwargs["transform"])
        return real(*args, **kwargs)

    monkeypatch.setattr(clove, "run_clove_fl", spy)
    at_truth_transforms, real_at_truth = [], ref.at_truth

    def at_truth_spy(*args, **kwargs):
        at_truth_transforms.append(kwargs["transform"])
        return real_at_truth(*args, **kwargs)

    monkeypatch.setattr(ref, "at_truth", at_truth_spy)
    halves = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for seed, out in zip((70, 71), halves):
        assert ref.main(["--seeds", str(seed), "--clove", "--transform", "identity",
                         "--out", str(out)]) == 0
    assert transforms == at_truth_transforms == ["identity", "identity"]
    assert ref.main(["--seeds", "70", "--clove", "--transform", "identity",
                     "--out", str(halves[0])]) == 0          # resumed: nothing new
    assert transforms == ["identity", "identity"]
    assert len(halves[0].read_text().splitlines()) == 1
    capsys.readouterr()
    assert ref.main(["--seeds", "70-71", "--clove", "--transform", "identity"]) == 0
    whole = capsys.readouterr().out.splitlines()[-1]
    assert ref.main(["--table", *map(str, halves)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == whole
    records = [json.loads(line) for p in halves for line in p.read_text().splitlines()]
    right, reach, _, _ = _independent_within_reach(records)
    assert f"within reach (at truth: k-means right) clove {right}/{reach}" in whole
    assert table[1] == ("goal within reach (WITHIN_REACH_VERDICT): "
                        + ("holds" if reach and 100 * right >= 95 * reach else "does not hold"))
    assert "transform identity; seeds [70, 71]" in whole
    drawn = [r["clove_any"] for r in records if r["k-means"]]
    if drawn:
        assert (f"some draw of the default right (a chooser told the truth) "
                f"{sum(drawn)}/{len(drawn)}") in whole
        assert table[2] == ("no choice among the draws reaches the goal (DRAWS_VERDICT): "
                            + ("holds" if 100 * sum(drawn) < 95 * len(drawn)
                               else "does not hold"))
    assert all(r["clove_any"] >= r["clove"] for r in records)   # the kept draw is a draw


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transform", ["identity", "sqrt"])
def test_at_truth_counts_from_an_independent_computation(ref, transform):
    """at_truth's three counts recomputed here from the truth models: the loss vectors of the
    transform, their D at the loop's scale (2^-20, exact integers), k-means as the loop runs
    it, the objective compared in fractions and the row minima. The cases give both answers
    of the k-means count on the losses."""
    from omnifc.adapters import clove
    seen = []
    for name, k, seed in (("wine", 3, 70), ("wine", 3, 72), ("digits", 3, 70)):
        clients, groups, model, inits, _ = ref.case(name, k, seed)
        models = ref.truth_models(clients, groups, model, inits, seed)
        vectors = np.array([clove.loss_vector(models, c.x_train, c.y_train, loss=model.loss,
                                              transform=transform) for c in clients])
        scale = 2 ** 20
        ints = [[int(round(float(v) * scale)) for v in row] for row in vectors]
        d = np.array([[Fraction(sum((a - b) ** 2 for a, b in zip(p, q)), scale * scale)
                       for q in ints] for p in ints])
        got_vectors, got_d = ref.truth_loss_vectors(clients, groups, model, inits, seed,
                                                    transform=transform)
        assert np.array_equal(got_vectors, vectors)
        assert [[Fraction(x) for x in row] for row in got_d.tolist()] == d.tolist()
        labels = clove.cluster_clients(got_d, k, random_state=seed, n_init=10)
        kmeans = bool((np.unique(np.stack([labels, groups]), axis=1).shape[1] == k))
        expected = (kmeans, ref.kmeans_objective(got_d, groups)
                    <= ref.kmeans_objective(got_d, labels),
                    bool((vectors.argmin(axis=1) == groups).all()))
        assert ref.at_truth(clients, groups, model, inits, k, seed,
                            transform=transform) == expected
        seen.append(kmeans)
    if transform == "identity":
        assert set(seen) == {True, False}


@pytest.mark.timeout(180)
def test_run_record_reports_the_references_and_the_last_rounds_partition(ref, monkeypatch):
    """A label-shift record carries the label references of ``references``; a feature-shift
    record none; the loop is called with K known, 8 rounds, the run's seed, plaintext and the
    transform, and its count is the last round's partition (a run whose earlier rounds are
    right and last is wrong counts 0, and the reverse 1)."""
    from omnifc.adapters import clove
    bayes, hist, clients, groups, model, inits = ref.references("wine", 2, 72)
    calls = []
    wrong = np.zeros_like(groups)

    def loop(*args, **kwargs):
        calls.append(kwargs)
        order = [groups, groups, wrong] if len(calls) == 1 else [wrong, wrong, groups]
        draws = [wrong, 1 - groups, wrong] if len(calls) == 1 else [wrong, wrong]
        return types.SimpleNamespace(assignments=order, restart_assignments=draws)

    monkeypatch.setattr(clove, "run_clove_fl", loop)
    first = ref.run_record(72, "wine", 2, "label", "identity", True)
    second = ref.run_record(72, "wine", 2, "label", "identity", True)
    assert (first["bayes"], first["histograms"]) == (bayes, hist)
    assert first["clove"] is False and second["clove"] is True
    # some draw right: the first's relabelled groups count (ARI 1), the second has none
    assert first["clove_any"] is True and second["clove_any"] is False
    assert calls[0] == {"n_clusters": 2, "rounds": 8, "seed": 72, "secure": False,
                        "transform": "identity"}
    assert first["k-means"] == ref.at_truth(clients, groups, model, inits, 2, 72,
                                            transform="identity")[0]
    feature = ref.run_record(72, "wine", 2, "feature", "sqrt", False)
    assert feature["bayes"] is None and feature["histograms"] is None
    assert feature["clove"] is None and feature["clove_any"] is None and len(calls) == 2


@pytest.mark.timeout(180)
def test_one_draw_is_the_runs_own_last_assignment(ref, monkeypatch):
    """A loop with one draw (no restart_assignments): some draw is right exactly when its
    last assignment is, whatever the earlier rounds were."""
    from omnifc.adapters import clove
    _, _, _, groups, _, _ = ref.references("wine", 2, 72)
    wrong = np.zeros_like(groups)
    orders = [[groups, wrong, groups], [groups, groups, wrong]]

    def loop(*args, **kwargs):
        return types.SimpleNamespace(assignments=orders.pop(0), restart_assignments=None)

    monkeypatch.setattr(clove, "run_clove_fl", loop)
    right = ref.run_record(72, "wine", 2, "label", "sqrt", True)
    wrong_last = ref.run_record(72, "wine", 2, "label", "sqrt", True)
    assert (right["clove"], right["clove_any"]) == (True, True)
    assert (wrong_last["clove"], wrong_last["clove_any"]) == (False, False)


def test_summary_text_from_hand_made_records(ref):
    """The closing line, written out for records whose counts are known: label shift with the
    loop (runs within reach and beyond), feature shift without it, and no run within reach."""
    def rec(seed, shift, km, cl, transform="sqrt", bayes=True, hist=False):
        return {"seed": seed, "data": "wine", "k": 2, "shift": shift, "transform": transform,
                "bayes": bayes if shift == "label" else None,
                "histograms": hist if shift == "label" else None, "k-means": km,
                "optimal": km, "argmin": not km, "clove": cl}

    label = [rec(1, "label", True, True), rec(2, "label", True, False, hist=True),
             rec(3, "label", False, True), rec(4, "label", True, True, bayes=False)]
    assert ref.summary(label) == (
        "all clients right (ARI 1), label shift: bayes (told the priors) 3/4, histograms "
        "(label-free) 1/4, at truth: k-means 3/4, planted objective optimal 3/4, argmin 1/4, "
        "clove (defaults) 3/4; within reach (at truth: k-means right) clove 2/3 (66.7 %), "
        "beyond it clove 1/1; transform sqrt; seeds [1, 2, 3, 4]")
    feature = [rec(5, "feature", True, None, "identity"), rec(6, "feature", False, None,
                                                              "identity")]
    assert ref.summary(feature) == (
        "all clients right (ARI 1), feature shift: at truth: k-means 1/2, planted objective "
        "optimal 1/2, argmin 1/2; transform identity; seeds [5, 6]")
    mixed = ref.summary([rec(9, "label", True, None), rec(10, "feature", True, None)])
    assert mixed.startswith("all clients right (ARI 1), feature/label shift: at truth: ")
    beyond = [rec(7, "label", False, False), rec(8, "label", False, True, transform="identity")]
    assert ref.summary(beyond).endswith(
        "clove (defaults) 1/2; within reach (at truth: k-means right) clove 0/0, beyond it "
        "clove 1/2; transform identity/sqrt; seeds [7, 8]")
    drawn = [dict(rec(11, "label", True, False), clove_any=True),
             dict(rec(12, "label", True, True), clove_any=True),
             dict(rec(13, "label", True, False), clove_any=False),
             dict(rec(14, "label", False, False), clove_any=True)]
    assert ref.summary(drawn) == (
        "all clients right (ARI 1), label shift: bayes (told the priors) 4/4, histograms "
        "(label-free) 0/4, at truth: k-means 3/4, planted objective optimal 3/4, argmin 1/4, "
        "clove (defaults) 1/4; within reach (at truth: k-means right) clove 1/3 (33.3 %), "
        "beyond it clove 0/1; within reach, some draw of the default right (a chooser told "
        "the truth) 2/3 (66.7 %); transform sqrt; seeds [11, 12, 13, 14]")

"""CLoVE's loss transform in the classifier loop (``run_clove_fl(transform=...)``) and the
look script that judges ``"sqrt"`` against the default (benchmarks/_clove_transform.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from finite_field import ParameterError


@pytest.fixture(scope="module")
def look():
    return load_benchmark("_clove_transform")


@pytest.mark.timeout(300)
def test_the_loop_sends_the_transformed_losses_and_secure_equals_plaintext(look, monkeypatch):
    """Every loss vector the loop computes goes through loss_vector with the run's
    transform, the sqrt run's D is the D of the square roots, and the secure run equals the
    plaintext one."""
    from omnifc.adapters import clove
    from omnifc.adapters.clove import _simulation

    clients, groups, model, inits, _ = look.study.case("wine", 2, 51)
    seen, real = [], _simulation.loss_vector

    def spy(*args, **kwargs):
        seen.append(kwargs.get("transform", "identity"))
        out = real(*args, **kwargs)
        identity = real(*args, **{**kwargs, "transform": "identity"})
        assert np.array_equal(out, np.sqrt(identity) if seen[-1] == "sqrt" else identity)
        return out

    monkeypatch.setattr(_simulation, "loss_vector", spy)
    plain = clove.run_clove_fl(clients, model, inits, n_clusters=2, rounds=3, seed=51,
                               secure=False, transform="sqrt", restarts=1)
    assert seen and set(seen) == {"sqrt"}
    secure = clove.run_clove_fl(clients, model, inits, n_clusters=2, rounds=3, seed=51,
                                transform="sqrt", restarts=1)
    for a, b in zip(plain.assignments, secure.assignments):
        assert np.array_equal(a, b)
    for a, b in zip(plain.distances, secure.distances):
        assert (a is None and b is None) or np.array_equal(a, b)
    with pytest.raises(ParameterError, match="transform must be one of"):
        clove.run_clove_fl(clients, model, inits, n_clusters=2, transform="log")


def _records(pairs, shift="label"):
    """Records from (identity, sqrt) outcome pairs, one case per pair."""
    out = []
    for i, outcomes in enumerate(pairs):
        for transform, exact in zip(("identity", "sqrt"), outcomes):
            out.append({"seed": 400 + i, "data": "wine", "k": 2, "shift": shift,
                        "transform": transform, "exact": bool(exact)})
    return out


def test_paired_counts_and_verdicts_are_computed_from_the_runs(look):
    from omnifc.experiments.reproduce._verdicts import paired_noise

    pairs = [(0, 1)] * 6 + [(1, 0)] + [(1, 1)] * 13
    p = look.paired(_records(pairs), "label")
    default, candidate = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    noise = paired_noise(candidate, default)
    assert (p["runs"], p["default"], p["candidate"], p["plus"], p["minus"]) == (20, 14, 19, 6, 1)
    assert p["noise"] == noise * 20 and 5 / 20 > noise and p["verdict"] == "better"
    # a run only one variant completed is not paired
    partial = _records(pairs) + [{"seed": 999, "data": "wine", "k": 2, "shift": "label",
                                  "transform": "sqrt", "exact": True}]
    assert look.paired(partial, "label")["runs"] == 20
    assert look.paired(_records(pairs), "feature") == {"runs": 0}


def test_the_verdict_needs_label_better_and_feature_not_worse(look):
    better = [(0, 1)] * 8 + [(1, 1)] * 12            # +8 of 20: beyond the noise
    tie = [(1, 1)] * 19 + [(0, 1)]
    worse = [(1, 0)] * 8 + [(1, 1)] * 12
    assert look.paired(_records(better), "label")["verdict"] == "better"
    assert look.paired(_records(tie), "label")["verdict"] == "tie within noise"
    assert look.paired(_records(worse), "label")["verdict"] == "worse"
    assert look.holds(_records(better) + _records(tie, "feature"))
    assert look.holds(_records(better) + _records(better, "feature"))
    assert not look.holds(_records(better) + _records(worse, "feature"))
    assert not look.holds(_records(tie) + _records(tie, "feature"))
    assert not look.holds(_records(better))                # feature never run


def test_collect_resumes_from_its_records(look, tmp_path, monkeypatch):
    calls = []

    def fake(seed, name, k, shift, transform):
        calls.append((seed, name, k, shift, transform))
        return {"seed": seed, "data": name, "k": k, "shift": shift, "transform": transform,
                "exact": transform == "sqrt"}

    monkeypatch.setattr(look, "run", fake)
    out = tmp_path / "r.jsonl"
    cases = look.study.CASES[:2]
    first = look.collect([400], "label", out, cases=cases)
    assert len(first) == len(calls) == 4
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:3]) + "\n")      # stopped after three records
    again = look.collect([400, 401], "label", out, cases=cases)
    assert calls[4:] == [(400, "wine", 2, "label", "sqrt")] + [
        (401, name, k, "label", t) for name, k in cases for t in look.VARIANTS]
    assert len(again) == 8 == len(out.read_text().splitlines())
    assert [json.loads(line) for line in out.read_text().splitlines()] == again


def test_the_fresh_seeds_were_never_a_clove_seed_set(look):
    design = set(range(look.SQRT_DESIGN_SEEDS[0], look.SQRT_DESIGN_SEEDS[1] + 1))
    fresh = set(range(look.SQRT_FRESH_SEEDS[0], look.SQRT_FRESH_SEEDS[1] + 1))
    earlier = set(range(0, 34)) | set(range(50, 80)) | set(range(100, 110)) | {1000}
    assert len(fresh) == 40 and not fresh & (design | earlier)
    assert "400-439" in look.SQRT_VERDICT and "better under label shift" in look.SQRT_VERDICT


@pytest.mark.timeout(300)
def test_the_default_transform_is_sqrt_and_the_papers_loop_sends_the_losses(look,
                                                                            monkeypatch):
    """The frozen verdicts' consequence (both held: K known on 400-439, K unknown on
    440-469): run_clove_fl sends square roots by default whatever K; paper=True sends the
    losses; an explicit transform wins either way."""
    from omnifc.adapters import clove
    from omnifc.adapters.clove import _simulation

    clients, _, model, inits, _ = look.study.case("breast_cancer", 2, 52, train_samples=20)
    seen, real = [], _simulation.loss_vector

    def spy(*args, **kwargs):
        seen.append(kwargs.get("transform"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_simulation, "loss_vector", spy)
    common = dict(rounds=2, seed=52, secure=False, restarts=1)
    known = dict(common, n_clusters=2)
    for options, want in (({}, "sqrt"), ({"paper": True}, "identity"),
                          ({"paper": True, "transform": "sqrt"}, "sqrt"),
                          ({"transform": "identity"}, "identity"),
                          ({"n_clusters": None}, "sqrt"),           # K unknown too
                          ({"n_clusters": None, "transform": "identity"}, "identity")):
        seen.clear()
        clove.run_clove_fl(clients, model, inits, **{**known, **options})
        assert seen and set(seen) == {want}, options
    assert clove.DEFAULT_TRANSFORM == "sqrt" and clove.LOSS_TRANSFORMS == ("identity", "sqrt")


# -- K unknown: the second verdict --------------------------------------------------------------

def test_auto_k_runs_are_the_automatic_k_study(look, monkeypatch):
    """name 'digits-auto-k': K unknown (15 models, k_upper 15, no n_clusters), 5 clients per
    planted group, one population of 15 clients for shift 'none'; a run counts at ARI 1."""
    from omnifc import fl
    from omnifc.adapters import clove

    made, calls = [], []
    real_make = fl.make_federated

    def make(name, **kwargs):
        made.append((name, kwargs["shift"], kwargs["n_groups"], kwargs["clients_per_group"]))
        return real_make(name, **{**kwargs, "train_samples": 20, "test_samples": 5})

    def fake_run(clients, model, inits, **kwargs):
        calls.append((len(clients), len(inits), kwargs))

        class Out:
            assignments = [np.zeros(len(clients), dtype=int)]
        return Out()

    monkeypatch.setattr(fl, "make_federated", make)
    monkeypatch.setattr(clove, "run_clove_fl", fake_run)
    planted = look.run(441, "digits-auto-k", 3, "concept", "sqrt")
    one = look.run(441, "digits-auto-k", 1, "none", "identity")
    assert made == [("digits", "concept", 3, 5), ("digits", "none", 1, 15)]
    assert [(n, m) for n, m, _ in calls] == [(15, 15), (15, 15)]
    for _, _, kwargs in calls:
        assert "n_clusters" not in kwargs and kwargs["k_upper"] == 15 and kwargs["rounds"] == 8
    assert calls[0][2]["transform"] == "sqrt" and calls[1][2]["transform"] == "identity"
    assert planted["exact"] is False and one["exact"] is True     # all on one model


def test_the_auto_k_verdict_needs_neither_planted_nor_one_population_worse(look):
    def records(pairs, shift, k=2):
        out = []
        for i, outcomes in enumerate(pairs):
            for transform, exact in zip(look.VARIANTS, outcomes):
                out.append({"seed": 440 + i, "data": "digits-auto-k", "k": k, "shift": shift,
                            "transform": transform, "exact": bool(exact)})
        return out

    tie, worse = [(1, 1)] * 20, [(1, 0)] * 8 + [(1, 1)] * 12
    planted = [r for s in look.AUTO_K_SHIFTS for r in records(tie, s)]
    assert look.paired(planted, look.AUTO_K_SHIFTS)["runs"] == 80   # pooled, paired by shift
    assert look.holds_auto_k(planted + records(tie, "none", 1))
    better = [(0, 1)] * 8 + [(1, 1)] * 12
    gained = [r for s in look.AUTO_K_SHIFTS for r in records(better, s)]
    assert look.paired(gained, look.AUTO_K_SHIFTS)["verdict"] == "better"
    assert look.holds_auto_k(gained + records(better, "none", 1))      # better passes too
    assert not look.holds_auto_k(planted + records(worse, "none", 1))
    assert not look.holds_auto_k(records(worse, "label") + records(tie, "none", 1))
    assert not look.holds_auto_k(planted)                             # one population never run
    text = look.table(planted + records(tie, "none", 1))
    assert "| K unknown, planted (pooled) | 80 | 80 | 80 |" in text
    assert "| K unknown, one population | 20 |" in text and "| label |" not in text


def test_the_auto_k_seeds_are_fresh(look):
    fresh = set(range(look.SQRT_AUTO_K_SEEDS[0], look.SQRT_AUTO_K_SEEDS[1] + 1))
    earlier = (set(range(look.SQRT_FRESH_SEEDS[0], look.SQRT_FRESH_SEEDS[1] + 1))
               | set(range(0, 34)) | set(range(50, 80)) | set(range(100, 110)) | {1000})
    assert len(fresh) == 30 and not fresh & earlier
    assert "440-469" in look.SQRT_AUTO_K_VERDICT

"""Probe models in CLoVE's classifier loop (``run_clove_fl(probes=...)``) and the script that
judges them against the default (benchmarks/_clove_probes.py)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def look():
    return load_benchmark("_clove_probes")


@pytest.mark.timeout(300)
def test_probes_in_the_loop_secure_equals_plaintext_and_the_vectors_are_longer(look,
                                                                               monkeypatch):
    """On the study's MLP: every loss vector has K + P entries (the group models, then the
    probe models of probe_models), and the secure run equals the plaintext one."""
    from omnifc.adapters import clove
    from omnifc.adapters.clove import _simulation

    clients, groups, model, inits, _ = look.study.case("wine", 2, 51, train_samples=20)
    seen, real = [], _simulation.loss_vector

    def spy(models, *args, **kwargs):
        seen.append(len(models))
        return real(models, *args, **kwargs)

    monkeypatch.setattr(_simulation, "loss_vector", spy)
    kw = dict(n_clusters=2, rounds=3, seed=51, restarts=1, probes=4)
    plain = clove.run_clove_fl(clients, model, inits, secure=False, **kw)
    assert seen and set(seen) == {6}
    probes = clove.probe_models(model, 4, seed=51)
    assert len(plain.models) == 6
    secure = clove.run_clove_fl(clients, model, inits, **kw)
    for a, b in zip(plain.assignments, secure.assignments):
        assert np.array_equal(a, b)
    for a, b in zip(plain.distances, secure.distances):
        assert (a is None and b is None) or np.array_equal(a, b)
    for a, b in zip(plain.models, secure.models):
        assert np.array_equal(a, b)
    # a probe no client ever held after round 0 moved only in round 0 (or never)
    held = {int(m) for a in plain.assignments[1:] for m in a}
    for j, probe in enumerate(probes, start=2):
        if j not in held and j not in set(plain.assignments[0].tolist()):
            assert np.array_equal(plain.models[j], probe)


def _records(pairs, shift="label", reach=None):
    """Records from (default, candidate) outcome pairs, one case per pair."""
    out = []
    for i, outcomes in enumerate(pairs):
        for probes, exact in zip((0, 3), outcomes):
            record = {"seed": 550 + i, "data": "wine", "k": 2, "shift": shift,
                      "probes": probes, "exact": bool(exact)}
            if reach is not None and probes == 0:
                record["reach"] = bool(reach[i])
            out.append(record)
    return out


def test_the_variants_are_no_probes_and_three_per_cluster(look):
    assert look.VARIANTS == (0, look.PROBES_PER_CLUSTER) == (0, 3)
    assert "probes=3 K" in look.PROBES_VERDICT


def test_run_passes_probes_per_cluster_times_k_and_records_reach_for_the_default(look,
                                                                                monkeypatch):
    """run() calls the loop on the study's case of (name, K, seed, shift) with K known, 8
    rounds, the seed, plaintext and per_cluster * K probes; at truth on the same case for
    the default's label-shift record only; a run counts when the last assignment is the
    planted partition (up to the labels' names)."""
    from omnifc.adapters import clove

    made, calls, reach = [], [], []
    real_case = look.study.case

    def case(name, k, seed, shift="label", train_samples=150):
        made.append((name, k, seed, shift))
        out = real_case(name, k, seed, shift=shift, train_samples=20)
        cases.append(out)
        return out

    cases = []

    def fake(clients, model, inits, **kwargs):
        calls.append(((clients, model, inits), kwargs))
        groups = cases[-1][1]
        last = (k_minus_one - groups) if len(calls) == 1 else np.zeros_like(groups)

        class Out:
            assignments = [np.zeros_like(groups), groups, last]    # the last one counts
        return Out()

    def fake_at_truth(clients, groups, model, inits, k, seed, **kwargs):
        reach.append(((clients, groups, model, inits), k, seed))
        return (False, True, True)        # only the first entry is the reach

    k_minus_one = 2
    monkeypatch.setattr(look.study, "case", case)
    monkeypatch.setattr(clove, "run_clove_fl", fake)
    monkeypatch.setattr(look.study, "at_truth", fake_at_truth)
    default = look.run(551, "wine", 3, "label", 0)
    candidate = look.run(551, "wine", 3, "label", 3)
    feature = look.run(552, "wine", 3, "feature", 0)
    assert made == [("wine", 3, 551, "label"), ("wine", 3, 551, "label"),
                    ("wine", 3, 552, "feature")]
    for (args, kwargs), made_case in zip(calls, cases):
        clients, groups, model, inits, _ = made_case
        assert args[0] is clients and args[1] is model and args[2] is inits
    assert [kw for _, kw in calls] == [
        {"n_clusters": 3, "rounds": 8, "seed": s, "secure": False, "probes": p}
        for s, p in ((551, 0), (551, 9), (552, 0))]
    (truth_args, k, seed), = reach
    assert (k, seed) == (3, 551)
    assert all(a is b for a, b in zip(truth_args, cases[0][:4]))
    assert default == {"seed": 551, "data": "wine", "k": 3, "shift": "label", "probes": 0,
                       "exact": True, "reach": False}
    assert candidate == {"seed": 551, "data": "wine", "k": 3, "shift": "label", "probes": 3,
                         "exact": False}
    assert feature == {"seed": 552, "data": "wine", "k": 3, "shift": "feature", "probes": 0,
                       "exact": False}


def test_paired_and_the_verdict_read_the_probes_field(look):
    better = [(0, 1)] * 8 + [(1, 1)] * 12
    tie = [(1, 1)] * 19 + [(0, 1)]
    worse = [(1, 0)] * 8 + [(1, 1)] * 12
    p = look.paired(_records(better), "label")
    assert (p["runs"], p["default"], p["candidate"], p["plus"], p["minus"]) == (20, 12, 20, 8, 0)
    assert p["verdict"] == "better"
    assert look.holds(_records(better) + _records(tie, "feature"))
    assert not look.holds(_records(better) + _records(worse, "feature"))
    assert not look.holds(_records(tie) + _records(tie, "feature"))
    assert not look.holds(_records(better))                    # feature never run


def test_within_reach_counts_every_pattern_of_three_runs(look):
    """Every pattern of three label-shift runs (reach or not; each variant right or not):
    the counts against a count written out here; feature runs and unpaired runs ignored."""
    states = list(itertools.product((False, True), repeat=3))     # reach, default, candidate
    for runs in itertools.product(states, repeat=3):
        records = []
        for i, (reach, d, c) in enumerate(runs):
            records += _records([(d, c)], reach=[reach])
            records[-2]["seed"] = records[-1]["seed"] = 550 + i
        records += _records([(1, 1)], shift="feature")
        records.append({"seed": 999, "data": "wine", "k": 2, "shift": "label", "probes": 0,
                        "exact": True, "reach": True})         # no candidate: not paired
        inside = [(d, c) for reach, d, c in runs if reach]
        assert look.within_reach(records) == (len(inside), sum(d for d, _ in inside),
                                              sum(c for _, c in inside))


def test_the_table_shows_both_shifts_and_the_runs_within_reach(look):
    pairs = [(0, 1), (1, 1), (1, 0), (0, 0), (1, 1)]
    records = (_records(pairs, reach=[True, True, False, True, True])
               + _records([(1, 1)], "feature"))
    lines = look.table(records).splitlines()
    assert lines[:2] == ["| shift | runs | no probes (default) | 3 per cluster | + / - | "
                         "noise (runs) | verdict |", "|---|---|---|---|---|---|---|"]
    assert lines[2].startswith("| label | 5 | 3 | 3 | +1 / -1 |")
    assert lines[3].startswith("| feature | 1 | 1 | 1 | +0 / -0 |")
    assert lines[4] == "| label, within reach | 4 | 2 (50.0 %) | 3 (75.0 %) | | | |"
    assert len(lines) == 5
    assert look.table(_records(pairs)).splitlines()[3:] == []     # no reach recorded


def test_the_command_line_collects_its_seeds_and_prints_the_verdict(look, tmp_path,
                                                                   monkeypatch, capsys):
    better = [(0, 1)] * 8 + [(1, 1)] * 12
    tie = [(1, 1)] * 20
    files = [tmp_path / "label.jsonl", tmp_path / "feature.jsonl"]
    for path, records in zip(files, (_records(better), _records(tie, "feature"))):
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert look.main(["--table", *map(str, files)]) == 0
    out = capsys.readouterr().out.splitlines()
    records = _records(better) + _records(tie, "feature")
    assert out == look.table(records).splitlines() + ["verdict (PROBES_VERDICT): holds"]
    assert look.main(["--table", str(files[0])]) == 0          # feature never run
    assert capsys.readouterr().out.splitlines()[-1] == "verdict (PROBES_VERDICT): does not hold"
    asked = []

    def collect(seeds, shift, out=None):
        asked.append((list(seeds), shift, out))
        return _records(tie, shift)

    monkeypatch.setattr(look, "collect", collect)
    assert look.main(["--seeds", "550-552", "--shift", "feature", "--out", "F"]) == 0
    assert look.main(["--seeds", "553"]) == 0
    assert look.main([]) == 0
    with pytest.raises(SystemExit):
        look.main(["--seeds", "553", "--shift", "concept"])      # not a shift of the study
    assert asked == [([550, 551, 552], "feature", "F"), ([553], "label", None),
                     (list(range(470, 510)), "label", None)]
    assert capsys.readouterr().out.splitlines()[-2:] == look.table(
        _records(tie, "label")).splitlines()[-2:]


def test_collect_resumes_from_its_records(look, tmp_path, monkeypatch):
    calls = []

    def fake(seed, name, k, shift, per_cluster):
        calls.append((seed, name, k, shift, per_cluster))
        return {"seed": seed, "data": name, "k": k, "shift": shift, "probes": per_cluster,
                "exact": per_cluster > 0}

    monkeypatch.setattr(look, "run", fake)
    out = tmp_path / "r.jsonl"
    cases = look.study.CASES[:2]
    assert len(look.collect([550], "label", out, cases=cases)) == len(calls) == 4
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:3]) + "\n")               # stopped after three records
    again = look.collect([550, 551], "label", out, cases=cases)
    assert calls[4:] == [(550, "wine", 2, "label", 3)] + [
        (551, name, k, "label", v) for name, k in cases for v in look.VARIANTS]
    assert [json.loads(line) for line in out.read_text().splitlines()] == again


def test_the_fresh_seeds_were_never_a_clove_seed_set(look):
    """Fresh: no earlier CLoVE study ran them (design 50-59, held out 0-33, 60-79, 100-109,
    the transform's 400-469, the within-reach 470-509, the draws' 510-549, the example's
    1000)."""
    earlier = (set(range(0, 34)) | set(range(50, 80)) | set(range(100, 110))
               | set(range(400, 550)) | {1000})
    for shift, (lo, hi) in look.PROBES_FRESH_SEEDS.items():
        fresh = set(range(lo, hi + 1))
        assert fresh and not fresh & earlier, shift
    assert "550-589" in look.PROBES_VERDICT and "550-569" in look.PROBES_VERDICT

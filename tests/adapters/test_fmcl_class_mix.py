"""FMCL's class-mix rule (``rule="additive_mix"``, issue 24, twenty-sixth pass) and the
benchmark that judges it (benchmarks/_fmcl_class_mix.py), against computations written out
here."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from benchmark_scripts import load_benchmark
from finite_field import InputError, ParameterError
from omnifc.adapters import fmcl
from omnifc.adapters._calibrated_k import calibrated_k
from omnifc.adapters._k_selection import OneClusterTest
from omnifc.adapters.fmcl import _one_cluster


def _weights(shares):
    s = np.asarray(shares, dtype=float)
    return np.stack([s, 1.0 - s], axis=1)


def _overlap(w):
    return np.minimum(w[:, None, :], w[None, :, :]).sum(axis=2)


def _one_population_d(n, seed):
    """An FMCL-like D of one population (client effects, no groups)."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.normal(0, 0.3, n))
    d = np.outer(scale, scale) * rng.chisquare(8, (n, n))
    d = np.triu(d, 1)
    return d + d.T


def test_class_mix_distances_are_the_squared_l1_distances_of_the_weights():
    """Three classes, weights summing to 1: (sum_c |w_ic - w_jc|)^2 from the overlap alone;
    a rounding of the overlap above 1 is clipped to 0; refusals."""
    rng = np.random.default_rng(3)
    w = rng.dirichlet([1, 1, 1], 7)
    want = np.abs(w[:, None, :] - w[None, :, :]).sum(axis=2) ** 2
    assert np.allclose(fmcl.class_mix_distances(_overlap(w)), want, atol=1e-12)
    omega = _overlap(w)
    omega[0, 1] = omega[1, 0] = 1.0 + 1e-12
    assert fmcl.class_mix_distances(omega)[0, 1] == 0.0
    with pytest.raises(InputError, match="square"):
        fmcl.class_mix_distances(omega[:3])
    omega[2, 3] = np.nan
    with pytest.raises(InputError, match="^overlap must be finite$"):
        fmcl.class_mix_distances(omega)
    whole = np.eye(3, dtype=np.int64)                      # integers are read as floats
    assert fmcl.class_mix_distances(whole).dtype == np.float64
    assert fmcl.class_mix_distances(whole)[0, 1] == 4.0


def test_class_mix_test_is_the_calibrated_axis_test_on_those_distances():
    rng = np.random.default_rng(8)
    w = _weights(np.concatenate([rng.normal(0.3, 0.05, 8), rng.normal(0.6, 0.05, 8)]))
    got = fmcl.class_mix_test(_overlap(w))
    want = calibrated_k(np.abs(w[:, None, 0] - w[None, :, 0]) ** 2 * 4, statistic="axis_ci",
                        alpha=0.01)
    assert (got.k, got.p_value, got.alpha) == (want.k, want.p_value, 0.01)
    assert np.array_equal(got.labels, want.labels)
    assert fmcl.MIX_ALPHAS == (0.04, 0.01) and sum(fmcl.MIX_ALPHAS) == pytest.approx(0.05)


def _fixed_test(p):
    def test(d, *, null=None, alpha=0.05, **kwargs):
        assert null == "additive"
        return OneClusterTest(statistic=0.5, null=np.zeros(99), p_value=p, alpha=alpha)
    return test


@pytest.mark.parametrize("p, expect", [(0.04, "additive"), (0.05, "mix"), (0.5, "mix")])
def test_the_additive_test_at_0_04_then_the_class_mix_test(monkeypatch, caplog, p, expect):
    """The additive test's p at 0.04 rejects (the silhouette rule's K, the class mixes not
    read); at 0.05 (which the additive rule rejects) and above the class-mix test decides:
    two groups of class mix give its K and labels, found by the planted shares."""
    d = _one_population_d(16, 1)
    shares = np.repeat([0.2, 0.8], 8) + np.random.default_rng(2).normal(0, 0.02, 16)
    omega = _overlap(_weights(shares))
    monkeypatch.setattr(_one_cluster, "one_cluster_test", _fixed_test(p))
    silhouette = fmcl.choose_clusters(d, rule="silhouette")
    with caplog.at_level(logging.INFO, logger="omnifc.adapters.fmcl._one_cluster"):
        labels, k, window, scores = fmcl.choose_clusters(d, rule="additive_mix", overlap=omega)
    if expect == "additive":
        assert k == silhouette[1] and np.array_equal(labels, silhouette[0])
        assert "class-mix" not in caplog.text
    else:
        mix = fmcl.class_mix_test(omega)
        assert mix.k == 2 and k == 2 and np.array_equal(labels, mix.labels)
        assert len(set(zip(labels.tolist(), (shares > 0.5).tolist()))) == 2
        assert "class-mix test rejected one cluster" in caplog.text
    assert window == (1, silhouette[2][1])
    assert (fmcl.choose_clusters(d, rule="additive")[1] == 1) == (p > 0.05)


def test_one_cluster_when_neither_test_rejects_and_the_refusals(monkeypatch):
    """One class mix (shares around 0.5) and no additive rejection: K = 1, every label 0,
    the scores with K = 1 at 0; without the overlap the rule is refused; under 3 clients
    nothing is tested."""
    d = _one_population_d(12, 4)
    omega = _overlap(_weights(0.5 + np.random.default_rng(5).normal(0, 0.02, 12)))
    monkeypatch.setattr(_one_cluster, "one_cluster_test", _fixed_test(0.3))
    assert fmcl.class_mix_test(omega).k == 1
    labels, k, _, scores = fmcl.choose_clusters(d, rule="additive_mix", overlap=omega)
    assert k == 1 and not labels.any() and scores[1] == 0.0
    with pytest.raises(ParameterError, match="needs overlap="):
        fmcl.choose_clusters(d, rule="additive_mix")
    small = fmcl.choose_clusters(d[:2, :2], rule="additive_mix", overlap=omega[:2, :2])
    assert small[1] == fmcl.choose_clusters(d[:2, :2], rule="silhouette")[1]


def test_the_real_tests_on_a_federation_of_two_class_mixes():
    """No monkeypatch: 20 clients of breast cancer whose class-1 shares form two groups
    (FMCL signatures of a fixed random encoder): the additive rule's K and the class-mix
    rule's K, each from its own tests written out here."""
    rng = np.random.default_rng(11)
    shares = np.repeat([0.15, 0.85], 10)
    means = rng.normal(0, 1, (20, 2, 6))                  # one population of class means
    w = _weights(shares + rng.normal(0, 0.02, 20))
    d = fmcl.fmcl_distances(means, w)
    omega = fmcl.class_overlap(w)
    additive = fmcl.one_cluster_test(d, null="additive", alpha=0.04)
    mix = calibrated_k(fmcl.class_mix_distances(omega), statistic="axis_ci", alpha=0.01)
    want = (fmcl.choose_clusters(d, rule="silhouette")[1] if not additive.one_cluster
            else mix.k)
    assert fmcl.fmcl_server(d, rule="additive_mix", overlap=omega).n_clusters == want
    assert want == 2


# -- the benchmark ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def cm():
    return load_benchmark("_fmcl_class_mix")


def _records(cm, *, plus=30, iid_right=146, one_minus=0, seeds=None):
    """Complete hand-made records: the default right in half the planted runs, the
    candidate in ``plus`` more; iid: ``iid_right`` of 150 kept by the candidate, 2 more by
    the default (a tie); class sets: the candidate loses ``one_minus`` K = 1 runs."""
    (g0, g1), (c0, c1) = seeds or (cm.GRID_SEEDS, cm.CLASS_SET_SEEDS)
    recs = []
    for seed in range(g0, g1 + 1):
        recs += [{"kind": "grid", "run": ["label", 6, 20, i, 2, seed], "planted": 2,
                  "additive": 1, "additive_mix": 1} for i in range(144)]
        recs += [{"kind": "grid", "run": ["none", 6, 20, i, 2, seed], "planted": 1,
                  "additive": 1, "additive_mix": 1} for i in range(30)]
    for seed in range(c0, c1 + 1):
        recs += [{"kind": "class_sets", "run": [10, "offset", i, seed], "planted": 1,
                  "additive": 1, "additive_mix": 1} for i in range(6)]
        recs += [{"kind": "class_sets", "run": [30, "offset", i, seed], "planted": 3,
                  "additive": 3, "additive_mix": 3} for i in range(18)]
    planted = [r for r in recs if r["kind"] == "grid" and r["planted"] == 2]
    for r in planted[:len(planted) // 2]:
        r["additive"] = r["additive_mix"] = 2
    for r in planted[len(planted) // 2:len(planted) // 2 + plus]:
        r["additive_mix"] = 2
    iid = [r for r in recs if r["run"][0] == "none"]
    for r in iid[iid_right:]:
        r["additive_mix"] = 2
    for r in iid[iid_right + 2:]:
        r["additive"] = 2
    for r in [r for r in recs if r["kind"] == "class_sets" and r["planted"] == 1][:one_minus]:
        r["additive_mix"] = 2
    return recs


def test_the_verdict_at_its_bounds(cm):
    """Complete: 720 planted, 150 iid, 30 and 90 class-sets runs. Holds with 143 of 150 iid
    kept, not with 142; not with a planted gain within the noise (3 runs), with it at 30;
    not when the class-sets K = 1 count is worse beyond the noise; incomplete with a run
    missing; a run given twice counts once; runs of other seeds are ignored."""
    recs = _records(cm, iid_right=143)
    v = cm.verdict(recs)
    assert {k: v[k]["runs"] for k in ("planted", "iid", "class_sets_one", "class_sets_many")} \
        == {"planted": 720, "iid": 150, "class_sets_one": 30, "class_sets_many": 90}
    assert (v["planted"]["default"], v["planted"]["candidate"], v["planted"]["plus"]) == \
        (360, 390, 30)
    gain = np.array([1.0] * 30 + [0.0] * 690)
    assert v["planted"]["noise"] == pytest.approx(2 * gain.std(ddof=1) * np.sqrt(720))
    assert (v["iid"]["default"], v["iid"]["candidate"], v["iid"]["verdict"]) == (
        145, 143, "tie within noise")
    assert v["verdict"] == "holds"
    worse = _records(cm, iid_right=143)
    for r in [r for r in worse if r["run"][0] == "none"][143:]:
        r["additive"] = 1                                   # the default keeps all 150
    assert cm.verdict(worse)["iid"]["verdict"] == "worse"
    assert cm.verdict(worse)["verdict"] == "does not hold"
    assert cm.verdict(_records(cm, iid_right=142))["verdict"] == "does not hold"
    assert cm.verdict(_records(cm, plus=3))["verdict"] == "does not hold"
    assert cm.verdict(_records(cm, one_minus=6))["class_sets_one"]["verdict"] == "worse"
    assert cm.verdict(_records(cm, one_minus=6))["verdict"] == "does not hold"
    for i in (0, 700, 730, -1):
        assert cm.verdict(recs[:i] + recs[i + 1:] if i != -1 else recs[:-1])["verdict"] == \
            "incomplete"
    other = _records(cm, iid_right=0, seeds=((5999, 5999), (4004, 4004)))
    other += _records(cm, iid_right=0, seeds=((6005, 6005), (4010, 4010)))
    assert cm.verdict(recs + recs[:5] + other) == v


def test_the_table_and_the_command_line(cm, tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    recs = _records(cm, iid_right=143)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert cm.main(["--table", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == cm.table(recs)
    assert lines[2].startswith("| planted (720) | 360 | 390 | 30 / 0 |")
    assert lines[-1] == "verdict (VERDICT): holds"
    with pytest.raises(SystemExit):
        cm.main(["--grid", "--out", str(path)])
    assert "--seeds and --out are needed" in capsys.readouterr().err


@pytest.mark.slow
def test_the_records_are_the_rules_own_decisions(cm, tmp_path, capsys):
    """In process: one class-sets seed written (4000, not a verdict seed), each record's K
    equal to fmcl_server's on the run rebuilt here; a second call computes nothing new."""
    out = tmp_path / "cs.jsonl"
    assert cm.main(["--class-sets", "--seeds", "4000", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 24 and {r["run"][-1] for r in recs} == {4000}
    per, shift, k, seed = recs[5]["run"]
    clients, _ = fmcl.synthetic_domains(n_domains=k, clients_per_domain=per, samples=300,
                                        shift=shift, seed=seed)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    d = fmcl.fmcl_distances(means, weights)
    for rule in cm.RULES:
        assert recs[5][rule] == fmcl.fmcl_server(d, rule=rule,
                                                 overlap=fmcl.class_overlap(weights)).n_clusters
    before = out.read_text()
    cm.main(["--class-sets", "--seeds", "4000", "--out", str(out)])
    assert out.read_text() == before


def test_the_pipeline_refuses_the_rule_before_any_session(monkeypatch):
    """run_federated_fmcl does not pass the overlap: the rule is refused with the reason
    before any signature is computed or share sent."""
    from omnifc import fl

    data = fl.make_federated("digits", n_groups=2, clients_per_group=3, new_per_group=0,
                             seed=1)

    def no_session(*args, **kwargs):
        raise AssertionError("a signature was computed before the refusal")

    monkeypatch.setattr("omnifc.adapters.fmcl._simulation.fixed_encoder", no_session)
    with pytest.raises(ParameterError, match="does not pass; use fmcl_server"):
        fmcl.run_federated_fmcl(data, rule="additive_mix")


def test_the_flower_embedding_refuses_the_rule_when_built():
    """The Flower FMCL embedding does not pass the overlap either: refused when built
    (omnifc.flower._embeddings imports without flwr), other rules still accepted."""
    from omnifc.flower._embeddings import embedding

    with pytest.raises(ParameterError, match="needs the class overlap"):
        embedding("fmcl", resolution=8, rule="additive_mix")
    assert callable(embedding("fmcl", resolution=8, rule="additive").cluster)


def test_every_path_logs_its_evidence_and_returns_integer_labels(monkeypatch, caplog):
    """The three paths of rule="additive_mix" (the additive test rejects; only the class-mix
    test does; neither): the log lines word for word, integer labels, the window (1, top);
    under 3 clients the silhouette rule's own answer; the refusal's text."""
    d = _one_population_d(16, 1)
    two = _overlap(_weights(np.repeat([0.2, 0.8], 8)
                            + np.random.default_rng(2).normal(0, 0.02, 16)))
    one = _overlap(_weights(0.5 + np.random.default_rng(5).normal(0, 0.02, 16)))
    silhouette = fmcl.choose_clusters(d, rule="silhouette")
    top = silhouette[2][1]
    logger = "omnifc.adapters.fmcl._one_cluster"
    for p, omega in ((0.02, two), (0.3, two), (0.3, one)):
        monkeypatch.setattr(_one_cluster, "one_cluster_test", _fixed_test(p))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=logger):
            labels, k, window, _ = fmcl.choose_clusters(d, rule="additive_mix", overlap=omega)
        lines = [r.getMessage() for r in caplog.records if r.name == logger]
        mix = fmcl.class_mix_test(omega)
        assert labels.dtype == np.int64 and window == (1, top)
        if p == 0.02:
            assert lines == [f"one-cluster test rejected (additive null, p={p:.3g}); "
                             f"K={silhouette[1]} by silhouette"]
        else:
            first = ("K=1 (one-cluster test, additive client-effect null: silhouette 0.5, "
                     "p=0.3 > alpha=0.04)")
            if omega is two:
                assert k == 2 and lines == [first, (
                    f"class-mix test rejected one cluster (p={mix.p_value:.3g} <= alpha=0.01); "
                    "K=2 by Ward's cut of the class-mix distances")]
            else:
                assert k == 1 and lines == [first, (
                    f"K=1 by the class-mix test too (p={mix.p_value:.3g} > alpha=0.01)")]
    monkeypatch.setattr(_one_cluster, "one_cluster_test", _fixed_test(0.02))
    capped = fmcl.choose_clusters(d, rule="additive_mix", overlap=two, max_clusters=3)
    assert capped[2] == (1, fmcl.choose_clusters(d, rule="silhouette", max_clusters=3)[2][1])
    assert capped[2][1] == 3 != top
    small = fmcl.choose_clusters(d[:2, :2], rule="additive_mix", overlap=one[:2, :2])
    base = fmcl.choose_clusters(d[:2, :2], rule="silhouette")
    assert small[1] == base[1] and small[2] == (1, base[2][1])
    with pytest.raises(ParameterError) as info:
        fmcl.choose_clusters(d, rule="additive_mix")
    assert str(info.value) == "rule='additive_mix' needs overlap= (the class overlap Omega)"
    with pytest.raises(ParameterError) as info:
        fmcl.choose_clusters(d, rule="additive_mix", overlap=two[:15, :15])
    assert str(info.value) == ("overlap must have the distances' shape (16, 16), got "
                               "(15, 15)")


def test_the_class_mix_test_draws_from_its_public_seed():
    """Shares spread in one blur (an undecided configuration): the p at seeds 0 (the
    default) and 5 is the calibrated rule's at the same seeds."""
    w = _weights(np.random.default_rng(12).uniform(0.3, 0.7, 14))
    d = fmcl.class_mix_distances(_overlap(w))
    for seed in (0, 5):
        want = calibrated_k(d, statistic="axis_ci", alpha=0.01, random_state=seed).p_value
        assert fmcl.class_mix_test(_overlap(w), random_state=seed).p_value == want
    assert fmcl.class_mix_test(_overlap(w)).p_value == calibrated_k(
        d, statistic="axis_ci", alpha=0.01).p_value
    assert fmcl.class_mix_test(_overlap(w), random_state=5).p_value != \
        fmcl.class_mix_test(_overlap(w)).p_value


def test_other_rules_get_the_overlap(monkeypatch):
    """Every rule but the two additive ones goes to the shared chooser with the overlap."""
    seen = {}

    def base(d, *, rule, max_clusters, overlap):
        seen.update(rule=rule, max_clusters=max_clusters, overlap=overlap)
        return np.zeros(len(d), dtype=np.int64), 1, (1, 2), {}

    monkeypatch.setattr(_one_cluster, "_base_choose_clusters", base)
    omega = np.eye(4)
    fmcl.choose_clusters(_one_population_d(4, 0), rule="calibrated", overlap=omega,
                         max_clusters=3)
    assert seen["rule"] == "calibrated" and seen["overlap"] is omega and \
        seen["max_clusters"] == 3

"""Reproduction pages: computed verdicts, stated seeds, no hand-written comparisons (issue 24)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from finite_field import ParameterError
from omnifc.experiments.reproduce import _report
from omnifc.experiments.reproduce._report import (accuracy_noise, compared, paired_noise,
                                                  verdict)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reproduction"


def test_verdict_at_and_past_the_noise():
    # exact binary fractions, so the difference is exactly the noise
    assert verdict(0.75, 0.5, 0.25) == "tie within noise"          # diff == noise: a tie
    assert verdict(0.75, 0.5, 0.1875) == "better"                  # one step past
    assert verdict(0.5, 0.75, 0.25) == "tie within noise"
    assert verdict(0.5, 0.75, 0.1875) == "worse"
    assert verdict(0.5, 0.5, 0.0) == "tie within noise"
    for bad in ((math.nan, 0.5, 0.1), (0.5, 0.5, -0.125), (0.5, math.inf, 0.1)):
        with pytest.raises(ParameterError, match="finite values and noise >= 0"):
            verdict(*bad)


def test_noise_measures_against_their_formulas():
    assert accuracy_noise(0.5, 0.5, 100) == 2 * math.sqrt(0.5 / 100)
    assert accuracy_noise(1.0, 0.0, 7) == 0.0
    with pytest.raises(ParameterError, match="n must be >= 1"):
        accuracy_noise(0.5, 0.5, 0)
    # differences 0.25, 0.75: mean 0.5, sample variance 0.125, 2 sqrt(0.125 / 2) = 0.5
    assert paired_noise([1.0, 1.0], [0.75, 0.25]) == 0.5
    assert paired_noise([0.9], [0.1]) == 0.0
    assert compared("FedAvg", 0.75, 0.5, 0.125) == "better than FedAvg (0.750 vs 0.500; noise 0.125)"
    assert compared("IFCA", 0.5, 0.5, 0.0).startswith("tie with IFCA")


def test_page_states_seeds_noise_and_refuses_hand_written_comparisons(tmp_path):
    fig, _ = _report.figure(1)
    row = ("claim", "paper", "plain", "secure", "bit-identical")
    out = _report.write_paper_report(tmp_path, "demo", "Demo", [row], ["a note"], fig, 1.0,
                                     False, seeds="seeds 100-104, held out",
                                     not_reproduced=["the paper's CIFAR table"],
                                     noise="two binomial standard errors")
    text = out["markdown"].read_text()
    assert "**Seeds:** seeds 100-104, held out" in text
    assert "two binomial standard errors" in text
    assert "## Claims of the paper not reproduced here\n\n- the paper's CIFAR table" in text
    for bad in ("FLUX beats FedAvg", "outperforms IFCA", "Beating the baseline"):
        with pytest.raises(ParameterError, match="hand-written comparison"):
            _report.write_paper_report(tmp_path, "demo", "Demo", [(bad,) + row[1:]], [], fig,
                                       1.0, False, seeds="s", not_reproduced=[], noise="n")
    with pytest.raises(ParameterError, match="state its seeds"):
        _report.write_paper_report(tmp_path, "demo", "Demo", [row], [], fig, 1.0, False,
                                   seeds="", not_reproduced=[], noise="n")


@pytest.mark.parametrize("page", ["flux", "clove", "fmcl", "client2vec", "omnifc"])
def test_committed_pages_state_their_seeds_and_carry_no_hand_written_beats(page):
    text = (DOCS / f"{page}.md").read_text()
    assert "**Seeds:**" in text and ("held out" in text or "design" in text)
    assert "## Claims of the paper not reproduced here" in text
    assert _report._HAND_WRITTEN.search(text) is None
    if page == "flux":      # every FLUX row carries computed verdicts against both baselines
        rows = [line for line in text.splitlines() if line.startswith("| FLUX finds K;")]
        assert rows and all("FedAvg (" in r and "IFCA (" in r for r in rows)
        assert all(any(v in r for v in ("better than", "tie with", "worse than")) for r in rows)


def _records(dataset, kappas):
    return [{"dataset": dataset, "method": m, "pipeline": "federated", "kappa": k, "p": p}
            for m, ks in kappas.items() for p, k in zip((0.0, 1.0), ks)]


def test_iris_side_by_side_says_which_rows_match_the_paper():
    lo, hi = _report.PAPER_IRIS_KAPPA
    tol = _report.IRIS_MATCH_TOLERANCE
    records = (_records("iris", {"kmeans": (0.84, 0.84), "spectral": (0.82, 0.82)})
               + _records("iris_l2", {"kmeans": (lo - tol, hi + tol),     # at the edge: yes
                                      "spectral": (0.95, hi + tol + 0.001)}))  # past: no
    lines = _report.iris_side_by_side(records, ["kmeans", "spectral", "fcm"])
    text = "\n".join(lines)
    assert "| KM (exact, MDS) | 0.840 | no | 0.920-0.970 | yes |" in text
    assert "| SC | 0.820 | no | 0.950-0.971 | no |" in text
    assert "match **the L2-normalized rows**: 1 of 2 methods on normalized rows, 0 of 2" in text
    assert _report.iris_side_by_side(_records("iris", {"kmeans": (0.8, 0.8)}), ["kmeans"]) == []


def test_verdict_from_two_accuracies_and_their_binomial_standard_errors():
    # By hand: accuracies 3/4 and 1/2 on n test rows each; variances 3/16 and 1/4, so the
    # noise is 2 sqrt((3/16 + 1/4) / n) = 2 sqrt(7 / (16 n)). The difference 1/4 equals it
    # when 7 / (16 n) = 1/64, i.e. n = 28 (a tie, exactly at the noise); from n = 29 on the
    # noise is smaller and the verdict is "better" (and "worse" the other way round).
    assert accuracy_noise(0.75, 0.5, 28) == 0.25
    assert verdict(0.75, 0.5, accuracy_noise(0.75, 0.5, 28)) == "tie within noise"
    assert verdict(0.75, 0.5, accuracy_noise(0.75, 0.5, 29)) == "better"
    assert verdict(0.5, 0.75, accuracy_noise(0.5, 0.75, 29)) == "worse"
    assert verdict(0.75, 0.5, accuracy_noise(0.75, 0.5, 16)) == "tie within noise"


def test_not_better_lists_exactly_the_claims_the_numbers_do_not_show():
    comparisons = [("seen", "FedAvg", 0.75, 0.5, 0.125),       # better: not listed
                   ("unseen", "IFCA", 0.5, 0.5, 0.25),          # tie: listed
                   ("new", "random", 0.25, 0.5, 0.125),         # worse: listed
                   ("edge", "FedAvg", 0.75, 0.5, 0.25)]         # at the noise: a tie
    assert _report.not_better("above the baselines", comparisons) == [
        "above the baselines, unseen: tie with IFCA (0.500 vs 0.500; noise 0.250)",
        "above the baselines, new: worse than random (0.250 vs 0.500; noise 0.125)",
        "above the baselines, edge: tie with FedAvg (0.750 vs 0.500; noise 0.250)"]
    assert _report.not_better("c", []) == []


def _github_anchor(heading):
    """GitHub's heading anchor, written out character by character (independent of docs_link)."""
    kept = []
    for ch in heading.strip().lower():
        if ch.isalnum() or ch in "-_":
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


def test_docs_link_anchors():
    assert _report.docs_link("t", "adapters.md", "FLUX (NeurIPS 2025, arXiv 2511.22305)") == \
        "[t](../adapters.md#flux-neurips-2025-arxiv-251122305)"
    assert _report.docs_link("t", "adapters.md", "Automatic K: the calibrated rule (issue 24)") \
        == "[t](../adapters.md#automatic-k-the-calibrated-rule-issue-24)"
    assert _report.docs_link("t", "a.md", "CLoVE on a classifier (`clove.run_clove_fl`)") == \
        "[t](../a.md#clove-on-a-classifier-cloverun_clove_fl)"


@pytest.mark.parametrize("page", ["flux", "clove", "fmcl", "client2vec"])
def test_committed_pages_link_headings_that_exist(page):
    import re

    text = (DOCS / f"{page}.md").read_text()
    links = re.findall(r"\]\(\.\./([\w.]+)#([\w-]+)\)", text)
    assert links, f"{page}.md links no table of the docs"
    for target, anchor in links:
        headings = [line.lstrip("#").strip() for line in
                    (DOCS.parent / target).read_text().splitlines() if line.startswith("#")]
        assert anchor in {_github_anchor(h) for h in headings}, (page, target, anchor)


def _claims_records():
    """Two data sets, two levels, one method; one federated partition differs."""
    out = []
    for dataset, kappas in (("iris", (0.5, 0.75)), ("iris_l2", (0.9375, 0.9375))):
        for p, k in zip((0.0, 1.0), kappas):
            same = not (dataset == "iris" and p == 1.0)
            out += [{"dataset": dataset, "method": "kmeans", "pipeline": pipe, "p": p,
                     "kappa": k, "same_as_centralized": same}
                    for pipe in ("federated", "centralized")]
    return out


def test_omnifc_claims_are_computed_from_the_records():
    lines = _report.omnifc_claims(_claims_records(), ["iris", "iris_l2"], [0.0, 1.0],
                                  ["kmeans"])
    text = "\n".join(lines)
    # 4 federated records, 3 identical to centralized
    assert "identical partitions in 3 of 4 (data set, p, method) cases | no (1 differ) |" in text
    # spread over p: iris 0.75 - 0.5, iris_l2 0
    assert "iris 0.250, iris_l2 0.000" in text
    assert "not shown (federated and centralized differ)" in text
    # 0.9375 lies within 0.02 of 0.94-0.95; 0.5 and 0.75 do not
    assert "raw rows: 0 of 1 methods within 0.02; L2-normalized rows: 1 of 1" in text
    assert "only with the L2-normalized rows" in text
    assert "## Claims of the paper not reproduced here" in text
    match = _report.iris_match(_claims_records(), ["kmeans", "spectral"])
    assert (match["raw"], match["l2"], match["counted"]) == (0, 1, 1)


def test_page_carries_its_headline_grids(tmp_path):
    fig, _ = _report.figure(1)
    row = ("claim", "paper", "plain", "secure", "bit-identical")
    out = _report.write_paper_report(tmp_path, "demo", "Demo", [row], ["a note"], fig, 1.0,
                                     False, seeds="s", not_reproduced=[], noise="n",
                                     headline=["36/36 [t](../adapters.md#x); not re-run"])
    text = out["markdown"].read_text()
    assert ("## Headline grids of docs/adapters.md\n\n- 36/36 [t](../adapters.md#x); not re-run\n"
            "\n## Claims of the paper not reproduced here\n\n- none") in text
    with pytest.raises(ParameterError, match="hand-written comparison"):
        _report.write_paper_report(tmp_path, "demo", "Demo", [row], [], fig, 1.0, False,
                                   seeds="s", not_reproduced=[], noise="n",
                                   headline=["the rule beats the paper's"])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_client2vec_shift_rows_from_known_accuracies(monkeypatch):
    """The helps/hurts rows of the Client2Vec page, from accuracies chosen by hand."""
    from types import SimpleNamespace

    import numpy as np

    from omnifc import fl
    from omnifc.adapters import client2vec as c2v
    from omnifc.experiments.reproduce import _client2vec

    per_seed = {(False, False, False): [0.5, 0.5, 0.5, 0.5],       # FedAvg (the defaults)
                (False, False, True): [0.625, 0.5, 0.75, 0.5],     # regularizer alone
                (True, False, False): [0.25, 0.25, 0.25, 0.25],    # sampling alone
                (False, True, False): [0.75, 0.75, 0.75, 0.75],    # MWU alone
                (True, True, False): [0.5, 0.5, 0.5, 0.5],         # sampling + MWU
                (True, True, True): [0.375, 0.375, 0.375, 0.375]}  # the paper's
    seeds = list(_client2vec.SHIFT_SEEDS)
    made, flags_seen = [], []

    def fake_federation(name, **kw):
        made.append((kw["shift"], kw["seed"]))
        return SimpleNamespace(clients=[kw["seed"]])

    def fake_run(clients, *, seed, uses=None, sampling=None, mwu=None, regularizer=None,
                 secure=True, **kw):
        named = {None: (False, False, False), "fedavg": (False, False, False),
                 "paper": (True, True, True)}[uses]
        flags = tuple(b if f is None else f for b, f in zip(named, (sampling, mwu,
                                                                    regularizer)))
        flags_seen.append(flags)
        acc = per_seed[flags][seeds.index(seed)]
        return {"accuracy": acc, "run": SimpleNamespace(models=[np.full(3, acc)])}

    monkeypatch.setattr(fl, "make_federated", fake_federation)
    monkeypatch.setattr(c2v, "run_federated_client2vec", fake_run)
    rows, comparisons, means = _client2vec._shift_rows(quick=False)
    assert made == [(s, seed) for s in ("feature", "label") for seed in seeds]
    assert set(flags_seen) == set(per_seed)          # every variant ran, each with its flags
    assert len(flags_seen) == 2 * len(seeds) * len(per_seed) * 2     # x secure / plaintext
    # by hand: regularizer - FedAvg = 0.125, 0, 0.25, 0: mean 0.09375, squared deviations
    # sum to 0.04296875, noise = 2 sqrt(0.04296875 / 3 / 4) = 0.1197 > 0.09375: a tie
    noise = 2 * math.sqrt(0.04296875 / 3 / 4)
    assert rows[0] == (
        "regularizer alone against FedAvg (feature rotation, 3 domains x 4 clients, pooled): "
        f"tie with FedAvg (0.594 vs 0.500; noise {noise:.3f})", "each use improves FL",
        "0.594 vs 0.500", "0.594 vs 0.500 (better on 2/4 seeds)", "bit-identical")
    assert rows[1][0].startswith("similarity sampling alone against")
    assert rows[1][0].endswith("worse than FedAvg (0.250 vs 0.500; noise 0.000)")
    assert rows[2][0].startswith("MWU alone against")
    assert rows[2][0].endswith("better than FedAvg (0.750 vs 0.500; noise 0.000)")
    assert rows[3][0].startswith("sampling + MWU (the previous defaults) against")
    assert rows[3][0].endswith("tie with FedAvg (0.500 vs 0.500; noise 0.000)")
    assert rows[4][0].startswith("all three (the paper's, uses='paper') against")
    assert rows[4][0].endswith("worse than FedAvg (0.375 vs 0.500; noise 0.000)")
    assert [("(feature rotation, " in r[0], "(label shift, " in r[0]) for r in rows] == \
        [(True, False)] * 5 + [(False, True)] * 5
    assert comparisons[0] == ("regularizer alone, feature rotation", "FedAvg", 0.59375, 0.5,
                              noise)
    assert means[("label shift", "all three (the paper's, uses='paper')")] == 0.375
    assert means[("label shift", "FedAvg (the defaults: no use)")] == 0.5
    expected = []
    for shift in ("feature rotation", "label shift"):
        expected += [
            f"c, regularizer alone, {shift}: tie with FedAvg (0.594 vs 0.500; noise "
            f"{noise:.3f})",
            f"c, similarity sampling alone, {shift}: worse than FedAvg (0.250 vs 0.500; "
            "noise 0.000)",
            f"c, sampling + MWU (the previous defaults), {shift}: tie with FedAvg (0.500 vs "
            "0.500; noise 0.000)",
            f"c, all three (the paper's, uses='paper'), {shift}: worse than FedAvg (0.375 vs "
            "0.500; noise 0.000)"]
    assert _report.not_better("c", comparisons) == expected


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_clove_rows_count_ifca_stuck_per_delta(monkeypatch):
    """The CLoVE page's linear-regression rows, from runs whose ARIs are known exactly.

    CLoVE ends on the true partition (ARI 1); IFCA ends either on it (ARI 1) or with every
    client in one cluster (ARI 0 exactly). Delta = 1: IFCA at ARI 0 on seeds 100-103 (4 of
    10), so "stuck on most seeds" does not hold; Delta = 0.1: on all 10.
    """
    from types import SimpleNamespace

    import numpy as np

    from omnifc.adapters import clove
    from omnifc.experiments.reproduce import _clove

    truth = np.repeat(np.arange(5), 5)
    monkeypatch.setattr(clove, "linear_mixture",
                        lambda *, delta, seed: ((delta, seed), truth, None))
    monkeypatch.setattr(clove, "random_unit_models", lambda *a, **k: None)
    monkeypatch.setattr(clove, "run_clove", lambda clients, start, **k: SimpleNamespace(
        assignments=[np.zeros(25, dtype=int), truth.copy()]))

    def ifca(clients, start, **k):
        delta, seed = clients
        merged = delta == 0.1 or seed < 104
        return SimpleNamespace(assignments=[np.zeros(25, dtype=int),
                                            np.zeros(25, dtype=int) if merged else truth])
    monkeypatch.setattr(clove, "run_ifca", ifca)
    monkeypatch.delattr(clove, "run_clove_fl")          # the classifier row is not tested here
    page = _clove.run(quick=False)
    # Delta = 1: paired differences of final ARI: 1 on 4 seeds, 0 on 6: mean 0.4, sample
    # variance (4 * 0.6^2 + 6 * 0.4^2) / 9 = 0.24 / 0.9, noise 2 sqrt(that / 10) = 0.327
    noise = 2 * math.sqrt((4 * 0.36 + 6 * 0.16) / 9 / 10)
    first, second = page["rows"][0][0], page["rows"][1][0]
    assert first == ("loss-vector clustering recovers 5 clusters (linear regression, Delta = "
                     f"1): mean final ARI better than IFCA (1.000 vs 0.600; noise {noise:.3f}); "
                     "IFCA below ARI 0.5 in 4/10 seeds (docs/adapters.md, seeds 0-29: 11/30), "
                     "below ARI 1 in 4/10: 'IFCA stuck' does not hold at this Delta")
    assert second.endswith("better than IFCA (1.000 vs 0.000; noise 0.000); IFCA below ARI "
                           "0.5 in 10/10 seeds (docs/adapters.md, seeds 0-29: 28/30), below "
                           "ARI 1 in 10/10: 'IFCA stuck' holds at this Delta")
    stuck = [n for n in page["not_reproduced"] if n.startswith("'IFCA stuck'")]
    assert stuck == ["'IFCA stuck' (final ARI below 0.5 on most seeds) at Delta = 1: 4/10 "
                     "seeds here, 11/30 in docs/adapters.md (seeds 0-29); IFCA ends below "
                     "ARI 1 on 4/10 here."]


def _kappa_by_hand(truth, predicted):
    """Hungarian-matched Cohen's kappa, from scipy and the kappa formula (not omnifc's)."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    classes, clusters = np.unique(truth), np.unique(predicted)
    size = max(classes.size, clusters.size)
    overlap = np.zeros((size, size))
    for i, c in enumerate(clusters):
        for j, t in enumerate(classes):
            overlap[i, j] = np.sum((predicted == c) & (truth == t))
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    mapping = {clusters[r]: classes[c] if c < classes.size else -1 - r
               for r, c in zip(rows, cols) if r < clusters.size}
    aligned = np.array([mapping[p] for p in predicted])
    labels = np.union1d(truth, aligned)
    n = truth.size
    p_o = np.mean(aligned == truth)
    p_e = sum(np.mean(truth == k) * np.mean(aligned == k) for k in labels)
    return (p_o - p_e) / (1 - p_e)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kappa_noise_is_twice_the_bootstrap_sd_of_the_paired_difference():
    import numpy as np

    truth = np.repeat([0, 1, 2], 10)
    ours = truth.copy()
    ours[[0, 11]] = [1, 2]                       # two rows wrong
    theirs = np.tile([0, 1, 2], 10)              # unrelated to the classes
    rng = np.random.Generator(np.random.PCG64(7))
    diffs = []
    for _ in range(25):
        idx = rng.integers(0, 30, 30)
        diffs.append(_kappa_by_hand(truth[idx], ours[idx])
                     - _kappa_by_hand(truth[idx], theirs[idx]))
    expected = 2 * np.std(diffs, ddof=1)
    got = _report.kappa_noise(truth, ours, theirs, draws=25, seed=7)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert got > 0
    assert _report.kappa_noise(truth, ours, ours, draws=25, seed=7) == 0.0   # same labels
    with pytest.raises(ParameterError, match="draws must be >= 2"):
        _report.kappa_noise(truth, ours, theirs, draws=1)


def test_baseline_verdicts_table_and_tally():
    recs = [{"dataset": "iris", "method": "kfed-k", "p": 0.0, "vs_omnifc": (0.75, 0.5, 0.125)},
            {"dataset": "iris", "method": "kfed-k", "p": 1.0, "vs_omnifc": (0.75, 0.5, 0.25)},
            {"dataset": "iris", "method": "mufc", "p": 0.0, "vs_omnifc": (0.5, 0.75, 0.125)},
            {"dataset": "iris", "method": "kmeans", "p": 0.0, "pipeline": "federated"}]
    lines, tally = _report.baseline_verdicts(recs, ["iris"], [0.0, 1.0])
    assert tally == {"better": 1, "tie within noise": 1, "worse": 1}
    assert "| iris | k-FED (k'=k) | better (0.75 vs 0.50; 0.12) | tie within noise (0.75 vs " \
           "0.50; 0.25) |" in lines
    assert "| iris | MUFC (clustering part) | worse (0.50 vs 0.75; 0.12) | - |" in lines
    assert _report.baseline_verdicts(recs[3:], ["iris"], [0.0]) == \
        ([], {"better": 0, "tie within noise": 0, "worse": 0})
    claims = "\n".join(_report.omnifc_claims(
        [r | {"pipeline": "baseline"} for r in recs[:3]], ["iris"], [0.0, 1.0], ["kmeans"]))
    assert "better in 1, tie within noise in 1, worse in 1 of 3 (table below) | in 1 of 3 " \
           "cells |" in claims
    assert "not in 2 of 3 (data set, p, baseline) cells" in claims

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


@pytest.mark.parametrize("page", ["flux", "clove", "fmcl", "client2vec"])
def test_committed_pages_state_their_seeds_and_carry_no_hand_written_beats(page):
    text = (DOCS / f"{page}.md").read_text()
    assert "**Seeds:**" in text and ("held out" in text or "design seed" in text)
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

"""The reproduction runner writes the table and the plot; federated equals centralized."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import AgglomerativeClustering

from omnifc.experiments import load_dataset
from omnifc.experiments.reproduce._omnifc import _parties_for, run_reproduction
from omnifc.experiments import split_non_iid
from omnifc.cli import build_parser


def matched_kappa(truth, predicted) -> float:
    """Cohen's kappa after Hungarian matching of clusters to classes, from the formula.

    Independent of omnifc.experiments._metrics (which calls scikit-learn): the contingency table, the
    matching that maximizes agreement, then (p_o - p_e) / (1 - p_e).
    """
    classes, t = np.unique(truth, return_inverse=True)
    clusters, c = np.unique(predicted, return_inverse=True)
    table = np.zeros((clusters.size, classes.size), dtype=np.int64)
    np.add.at(table, (c, t), 1)
    rows, cols = linear_sum_assignment(-table)
    mapping = dict(zip(rows.tolist(), cols.tolist()))
    aligned = np.array([mapping.get(i, classes.size + i) for i in c])
    size = max(classes.size, int(aligned.max()) + 1)
    agree = np.zeros((size, size))
    np.add.at(agree, (t, aligned), 1)
    agree /= agree.sum()
    observed = np.trace(agree)
    expected = float(agree.sum(axis=1) @ agree.sum(axis=0))
    return (observed - expected) / (1.0 - expected)


def test_small_reproduction_writes_table_and_plot(tmp_path):
    outcome = run_reproduction(tmp_path, datasets=("iris",), levels=(0.0, 1.0),
                               methods=("kmeans", "hierarchical"))
    text = (tmp_path / "reproduction.md").read_text()
    png = (tmp_path / "reproduction_kappa.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| iris | KM (exact, MDS) |" in text and "| iris | HC (Ward) |" in text
    assert "k-FED (k'=floor(sqrt k))" in text and "## Choices the paper does not fix" in text
    records = outcome["records"]
    assert len(records) == 2 * (2 * 2 + 5)   # p x (methods x pipelines + 2 k-FED + FFCM,
    assert "| iris | MUFC (clustering part) |" in text   # FedSC, MUFC)
    fed = [r for r in records if r["pipeline"] == "federated"]
    assert all(r["same_as_centralized"] for r in fed)
    # Kappa recomputed independently for Ward on the plaintext rows (scikit-learn's
    # AgglomerativeClustering, the same row order as the runner's split).
    iris = load_dataset("iris")
    for level in (0.0, 1.0):
        rows = np.concatenate(split_non_iid(iris.labels, _parties_for(iris), level))
        ward = AgglomerativeClustering(n_clusters=iris.n_classes, linkage="ward")
        predicted = ward.fit_predict(iris.features[rows])
        record = next(r for r in records if r["method"] == "hierarchical" and r["p"] == level
                      and r["pipeline"] == "centralized")
        assert record["kappa"] == pytest.approx(matched_kappa(iris.labels[rows], predicted),
                                                abs=1e-12)
        assert record["kappa"] > 0.5   # Ward separates iris well; near 0 would be a bug


def test_matched_kappa_helper_on_known_values():
    assert matched_kappa([0, 0, 1, 1], [1, 1, 0, 0]) == 1.0
    # 6 rows, 5 agree after matching: p_o = 5/6, p_e = (3*2 + 3*4) / 36 = 1/2 -> 2/3
    assert matched_kappa([0, 0, 0, 1, 1, 1], [5, 5, 7, 7, 7, 7]) == pytest.approx(2 / 3)


def test_cli_registers_reproduce():
    args = build_parser().parse_args(["reproduce", "--quick", "--out", "somewhere"])
    assert args.quick and args.out == "somewhere" and callable(args.handler)

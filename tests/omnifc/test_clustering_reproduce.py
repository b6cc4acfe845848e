"""The reproduction runner writes the table and the plot; federated equals centralized."""

from __future__ import annotations

from omnifc._reproduce import run_reproduction
from omnifc.cli import build_parser


def test_small_reproduction_writes_table_and_plot(tmp_path):
    outcome = run_reproduction(tmp_path, datasets=("iris",), levels=(0.0, 1.0),
                               methods=("kmeans", "hierarchical"))
    text = (tmp_path / "reproduction.md").read_text()
    png = (tmp_path / "reproduction_kappa.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| iris | KM (exact, MDS) |" in text and "| iris | HC (Ward) |" in text
    assert "k-FED (k'=floor(sqrt k))" in text and "## Choices the paper does not fix" in text
    records = outcome["records"]
    assert len(records) == 2 * (2 * 2 + 4)   # p x (methods x pipelines + 2 k-FED + FFCM + FedSC)
    fed = [r for r in records if r["pipeline"] == "federated"]
    assert all(r["same_as_centralized"] for r in fed)
    assert all(-1.0 <= r["kappa"] <= 1.0 for r in records)


def test_cli_registers_reproduce():
    args = build_parser().parse_args(["reproduce", "--quick", "--out", "somewhere"])
    assert args.quick and args.out == "somewhere" and callable(args.handler)

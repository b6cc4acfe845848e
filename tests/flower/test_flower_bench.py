"""benchmarks/bench_flower.py runs to the end (a ``--quick`` smoke run: no timing asserted)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'omnifc[flower]')")

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_bench_flower_quick_writes_consistent_figures(tmp_path):
    out = tmp_path / "flower.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_flower.py"),
                           "--quick", "--check", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=840,
                          stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    figures = json.loads(out.read_text())
    (row,) = figures["rows"]
    assert figures["n"] == 200 and row["parties"] == 3 and row["runs"] == 1
    assert row["ratio"] == pytest.approx(row["flower_seconds"] / row["native_seconds"])
    # the same omnifc envelopes on both paths, within the run nonces' and signatures' jitter
    assert row["flower_bytes"] == pytest.approx(row["native_bytes"], rel=0.01)
    assert done.returncode == (0 if row["goal_met"] else 1)
    assert "same integer D on both paths" in done.stdout


@pytest.mark.timeout(900)
def test_bench_flower_quick_strategy_binds_every_party(tmp_path):
    """``--strategy``: ClusteredFedAvg's clustering step over the gRPC data plane (the
    bench raises unless every party was bound to its node by its proof)."""
    out = tmp_path / "flower.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_flower.py"),
                           "--quick", "--strategy", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=840,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["strategy"] is True and row["transport"] == "grpc" and row["parties"] == 3
    assert row["flower_bytes"] == pytest.approx(row["native_bytes"], rel=0.01)
    assert "[deployment, grpc, strategy]" in done.stdout

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
                           "--quick", "--check", "--trace", "--json", str(out)], cwd=ROOT,
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
    # --trace: every stamp of the breakdown is there, in the order the path runs
    stamps = {label: (first, last) for label, first, last in row["breakdown"]}
    assert all(first is not None and first <= last for first, last in stamps.values()), stamps
    order = ["workflow called (clock starts)", "start messages pushed",
             "ClientApp process started", "ClientApp imports done", "handler entered",
             "party built", "coordinator: all joined (shares)", "coordinator: result final",
             "workflow returns (clock stops)", "reply seen by the ServerApp (bind)",
             "proofs checked (bind)"]
    lasts = [stamps[label][1] for label in order]
    assert lasts == sorted(lasts), dict(zip(order, lasts))
    assert stamps["workflow called (clock starts)"] == (0.0, 0.0)
    # the clock stops when the result is final, before any node's reply is pulled
    assert stamps["workflow returns (clock stops)"][1] == pytest.approx(
        row["flower_seconds"], abs=0.25)
    assert stamps["workflow returns (clock stops)"][1] <= stamps[
        "reply seen by the ServerApp (bind)"][0]
    assert "where the Flower path's time goes" in done.stdout


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

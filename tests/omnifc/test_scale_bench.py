"""Smoke test of ``omnifc bench scale --quick``: it runs, D is exact on its spot checks,
and the figures it reports are consistent (through the CLI, as a user would run it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from protocols import SessionParameters
from protocols._messages import row_tiles


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(600)
def test_bench_scale_quick_runs_and_reports(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "omnifc.cli", "bench", "scale", "--", "--quick", "--sizes",
         "600", "--repeats", "1", "--components", "16", "--n-init", "1", "--json", str(out),
         "--dir", str(tmp_path), "--plaintext-build", "--mask-degree", "2"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4,352 s" in done.stdout
    # the shared tables: every line fits 100 columns, each ratio says what it is
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    for ratio in ("x kernel = a party's evaluation CPU / the CPU of its own distance kernel",
                  "x 1 pass = clustering time / one read pass over D on disk; lower is better",
                  "x GEMM = build time / GEMM time (same run); lower is better"):
        assert ratio in done.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["n"] == 600 and result["dtype"] == "int32"
    assert (result["parties"], result["segments"], result["mask_degree"]) == (3, 1, 2)
    assert result["file_bytes"] >= 600 * 600 * 4
    assert result["checked_entries"] == 4 * 48 * 48  # sampled blocks matched exactly
    assert result["ari"] == 1.0  # ten well separated prototypes
    # every party uploaded each row strip [a, b) x [a, n) of the schedule once, as uint32
    strips = row_tiles(600, SessionParameters(dim=1, bound=1.0).chunk_bytes)
    assert result["party_bytes_uploaded"] == 4 * sum((b - a) * (600 - a) for a, b in strips)
    assert 600 * 601 // 2 <= result["party_bytes_uploaded"] // 4 < 600 * 600
    assert 0 < result["party_kernel_seconds"] <= result["party_evaluation_seconds"]
    assert 0 < result["party_kernel_cpu_seconds"] <= result["party_evaluation_cpu_seconds"]
    assert result["session_seconds"] >= result["evaluation_seconds"] > 0
    assert result["coordinator_peak_anon"] > 0 and result["party_peak_anon"] > 0
    assert result["build_seconds"] > 0 and result["cluster_peak_anon"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name != "scale.json"]  # files removed


def _bench(tmp_path, *args):
    out = tmp_path / "layout.json"
    done = subprocess.run(
        [sys.executable, "-m", "omnifc.cli", "bench", "scale", "--", "--quick", "--sizes",
         "600", "--n-init", "3", "--mask-degree", "2", "--json", str(out), *args],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    (result,) = json.loads(out.read_text())["results"]
    return result, done.stdout


def _phases_consistent(session, uploaded_entries):
    phases = session["phases"]
    assert {"join", "shares", "evaluation", "decode"} <= set(phases)
    for seconds, sent, coordinator, party, coordinator_cpu, party_cpu in phases.values():
        assert min(seconds, sent, coordinator, party, coordinator_cpu, party_cpu) >= 0
    # three parties, each uploading every entry of the layout once as uint32
    assert phases["evaluation"][1] >= 3 * 4 * uploaded_entries
    assert session["coordinator_peak_anon"] > 0 and session["party_peak_anon"] > 0
    assert session["seconds"] >= phases["evaluation"][0]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(600)
def test_bench_scale_landmarks_quick_is_exact_and_reports_every_phase(tmp_path):
    result, stdout = _bench(tmp_path, "--layout", "landmarks", "--landmarks", "30")
    assert result["n"] == 600 and result["layout"] == "landmarks"
    assert result["landmarks"] == 30 and result["dtype"] == "int32"
    assert result["checked_entries"] == 4 * 256 * 30  # sampled entries matched exactly
    _phases_consistent(result, 600 * 30)
    assert 0 < result["kmeans_seconds"] <= result["phases"]["decode"][0] + 1.0
    # ten well separated prototypes: the landmark labels, the exact-D k-means (Lloyd on the
    # plaintext rows) and the planted labels agree
    assert result["ari_planted"] == 1.0 and result["ari_exact"] == 1.0
    assert result["reference_ari_planted"] == 1.0
    assert "malloc settings of the session processes" in stdout


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(600)
def test_bench_scale_pairs_quick_splits_the_list_at_the_cap(tmp_path):
    result, stdout = _bench(tmp_path, "--layout", "pairs", "--landmarks", "40",
                            "--max-pairs", "2000", "--candidates", "12")
    assert result["layout"] == "pairs" and result["landmarks"] == 40
    sessions = result["pair_sessions"]
    assert len(sessions) == -(-result["pairs"] // 2000) >= 2  # ceil(P / cap) sessions
    _phases_consistent(result["landmark_session"], 600 * 40)
    for i, session in enumerate(sessions):
        size = min(2000, result["pairs"] - 2000 * i)
        _phases_consistent(session, size)
    # 4 x 256 x 40 sampled landmark entries, then up to 256 pairs per session, all exact
    assert result["checked_entries"] == 4 * 256 * 40 + sum(
        min(256, min(2000, result["pairs"] - 2000 * i)) for i in range(len(sessions)))
    assert 0.0 <= result["recall"] <= 1.0
    assert f"in {len(sessions)} pairs session(s)" in stdout

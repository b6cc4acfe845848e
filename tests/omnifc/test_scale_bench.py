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

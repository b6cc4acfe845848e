"""Smoke test of ``omnifc bench scale --quick``: it runs, D is exact on its spot checks,
and the figures it reports are consistent (through the CLI, as a user would run it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_scale_quick_runs_and_reports(tmp_path):
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "omnifc.cli", "bench", "scale", "--", "--quick", "--sizes",
         "600", "--repeats", "1", "--components", "16", "--n-init", "1", "--json", str(out),
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4,352 s" in done.stdout
    (result,) = json.loads(out.read_text())["results"]
    assert result["n"] == 600 and result["dtype"] == "int32"
    assert result["file_bytes"] >= 600 * 600 * 4
    assert result["checked_entries"] == 4 * 48 * 48  # sampled blocks matched exactly
    assert result["ari"] == 1.0  # ten well separated prototypes
    assert result["build_seconds"] > 0 and result["cluster_peak_anon"] > 0
    assert not [p for p in tmp_path.iterdir() if p.name != "scale.json"]  # files removed

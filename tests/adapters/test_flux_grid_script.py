"""benchmarks/flux_k_grid.py (the planted-K grid of docs/adapters.md) runs and counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from omnifc.adapters import flux

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_quick_grid_caches_d_and_counts_what_the_rules_find_on_it(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flux_k_grid.py"),
                           "--quick", "--cache", str(tmp_path), "--rules", "calibrated,ward,paper_knee"],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    cached = list(tmp_path.glob("label_k2_s0_g5_n2.npz"))
    assert len(cached) == 1
    rec = np.load(cached[0])
    # recount from the cached D with the library and sklearn's ARI, independently
    expected = {}
    for name, d, kwargs in (("calibrated", rec["default"], {}),
                            ("ward", rec["default"], dict(k_rule="ward")),
                            ("paper_knee", rec["paper"], dict(k_rule="dbscan",
                                                              eps_rule="knee"))):
        labels = flux.cluster_clients(d, **kwargs).labels
        expected[name] = int(len(set(labels.tolist())) == 2
                             and adjusted_rand_score(rec["groups"], labels) == 1.0)
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()
            if line.split() and line.split()[0] in expected}
    assert rows == {name: f"{hit}/1" for name, hit in expected.items()}
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flux_k_grid.py"),
                          "--quick", "--cache", str(tmp_path), "--rules", "elbow"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown rules" in bad.stderr

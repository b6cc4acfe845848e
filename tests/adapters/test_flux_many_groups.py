"""benchmarks/_flux_many_groups.py (issue 24, fourteenth pass): FLUX's pipelines with three
and five planted groups; each record is run_flux's own answer, the tables count them."""

from __future__ import annotations

import json

import pytest
from sklearn.metrics import adjusted_rand_score

from benchmark_scripts import load_benchmark

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def look():
    return load_benchmark("_flux_many_groups")


def test_a_record_is_each_pipelines_run_flux_answer(look):
    """One federation (K = 3, 4 clients per group, feature shift): every pipeline's K and
    rightness are run_flux's with that pipeline's options, recomputed here."""
    from omnifc import fl
    from omnifc.adapters import flux

    rec = look.run_one(5300, 3, 4, "feature")
    data = fl.make_federated("digits", shift="feature", n_groups=3, clients_per_group=4,
                             new_per_group=0, seed=5300)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    assert set(rec["rules"]) == set(look.PIPELINES)
    for name in ("default", "split_axis_or_gap"):
        run = flux.run_flux(data, model, seed=5300, secure=False, cluster_rounds=0,
                            **look.PIPELINES[name])
        right = run.n_clusters == 3 and adjusted_rand_score(data.groups, run.labels) == 1.0
        assert rec["rules"][name] == [run.n_clusters, right]
    assert look.PIPELINES["default"] == {"normalization": "none", "k_rule": "calibrated",
                                         "k_alpha": 0.05, "k_references": 39}
    assert look.PIPELINES["split_axis"] == flux.SPLIT_HALF_RECIPE


def test_tables_count_the_records_and_pair_them_with_the_default(look, tmp_path, capsys):
    rows = [{"seed": s, "k": 3, "per": 4, "shift": "label",
             "rules": {n: [3, s < 2] if n == "default" else [3, s >= 1] for n in look.PIPELINES}}
            for s in range(4)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert look.main(["--table", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    counts = next(l for l in out if l.startswith("| **all** |") and "`" not in l)
    assert counts.split(" | ")[1:3] == ["2/4", "3/4"]
    paired = next(l for l in out if l.startswith("| **all** | `split_axis_or_gap`"))
    assert paired.split(" | ")[2:5] == ["2/4", "3/4", "+2 / -1"]


def test_quick_run_resumes_from_its_records(look, tmp_path, capsys, monkeypatch):
    """--quick --out: one federation run and written; run again, nothing is recomputed."""
    path = tmp_path / "r.jsonl"
    assert look.main(["--quick", "--seeds", "5300", "--out", str(path)]) == 0
    assert len(path.read_text().splitlines()) == 1
    monkeypatch.setattr(look, "run_one", lambda *a: pytest.fail("re-ran a stored record"))
    assert look.main(["--quick", "--seeds", "5300", "--out", str(path)]) == 0
    assert "| **all** |" in capsys.readouterr().out
    assert len(path.read_text().splitlines()) == 1

"""Clustering methods are discoverable: the README lists every method with a guide, and
DBSCAN warns when it found no grouping (all noise, or one cluster)."""

from __future__ import annotations

import logging
import pathlib
import re

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import omnifc

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_lists_every_method_with_a_one_line_guide():
    rows = dict(re.findall(r"^\| `([a-z-]+)`(?: \(default\))? \| (.+) \|$", README, re.M))
    assert set(omnifc.METHODS) <= set(rows), sorted(set(omnifc.METHODS) - set(rows))
    for method in omnifc.METHODS:
        assert len(rows[method].split()) >= 5, (method, rows[method])


def blobs():
    rng = np.random.Generator(np.random.PCG64(0))
    x = np.concatenate([rng.normal(c, 0.2, (20, 2)) for c in ((0, 0), (6, 0), (0, 6))])
    return cdist(x, x, "sqeuclidean")


def dbscan_warnings(caplog, d, **options):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="omnifc._clustering"):
        labels = omnifc.cluster(d, "dbscan", **options)
    return labels, [r for r in caplog.records
                    if r.name.startswith("omnifc._clustering") and r.levelno == logging.WARNING]


def test_dbscan_warns_when_everything_is_noise(caplog):
    labels, records = dbscan_warnings(caplog, blobs(), eps=1e-3)
    assert (labels == -1).all()                              # the case itself
    assert len(records) == 1
    assert "all 60 rows as noise" in records[0].getMessage()
    assert "larger eps" in records[0].getMessage()


def test_dbscan_warns_when_everything_is_one_cluster(caplog):
    labels, records = dbscan_warnings(caplog, blobs(), eps=100.0)
    assert set(labels.tolist()) == {0}
    assert len(records) == 1
    assert "all 60 rows in one cluster" in records[0].getMessage()
    assert "smaller eps" in records[0].getMessage()


def test_dbscan_warns_on_one_cluster_with_some_noise(caplog):
    d = blobs()
    d = np.pad(d, ((0, 1), (0, 1)))
    far = cdist(np.array([[100.0, 100.0]]), np.zeros((1, 2)), "sqeuclidean")[0, 0]
    d[-1, :-1] = d[:-1, -1] = far                             # one outlier far away
    labels, records = dbscan_warnings(caplog, d, eps=100.0)
    assert sorted(set(labels.tolist())) == [-1, 0]
    assert len(records) == 1 and "(1 noise)" in records[0].getMessage()


def test_dbscan_finding_clusters_says_nothing(caplog):
    labels, records = dbscan_warnings(caplog, blobs())
    assert len(set(labels.tolist()) - {-1}) == 3
    assert records == []


@pytest.mark.timeout(120)
def test_dbscan_default_on_digits_warns_through_the_estimator(caplog):
    data = omnifc.load_dataset("digits")
    d = cdist(data.features, data.features, "sqeuclidean")
    with caplog.at_level(logging.WARNING, logger="omnifc._clustering"):
        labels = omnifc.DistanceDBSCAN().fit(d).labels_
    assert len(set(labels.tolist()) - {-1}) <= 1             # the reported ARI 0.000 case
    assert any("one cluster" in r.getMessage() for r in caplog.records)

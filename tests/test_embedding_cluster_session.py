"""``Embedding.cluster_session``: a clustering session's client-level D and labels together."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from finite_field import ParameterError
from omnifc.flower._embeddings import Embedding

pytestmark = pytest.mark.timeout(60)


def _session(points, rows):
    """A one-part session outcome over ``points`` (rows client by client)."""
    d = ((points[:, None] - points[None]) ** 2).sum(-1)
    return SimpleNamespace(rows=list(rows), values=d)


def test_without_cluster_outcomes_it_combines_then_clusters():
    """One part: D is the squared distance of the clients' row centroids (numpy here), the
    labels ``cluster`` of exactly that D."""
    rng = np.random.default_rng(5)
    points = rng.normal(size=(7, 3))
    rows = [2, 3, 1, 1]
    seen = []
    e = Embedding("mine", cluster=lambda d: seen.append(d) or (d[0] > 1.0).astype(int))
    d, labels = e.cluster_session({None: _session(points, rows)})
    bounds = np.cumsum([0] + rows)
    centroids = np.stack([points[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])])
    want = ((centroids[:, None] - centroids[None]) ** 2).sum(-1)
    assert np.allclose(d, want, atol=1e-12)
    assert len(seen) == 1 and seen[0] is d
    assert labels.tolist() == (want[0] > 1.0).astype(int).tolist()


def test_with_cluster_outcomes_it_returns_its_pair_and_checks_the_parts():
    """Two parts: cluster_outcomes gets the outcomes themselves and its (D, labels) pair is
    returned as arrays; combine and cluster are not called; a session set that is not the
    parts is refused before anything runs."""
    calls = []
    e = Embedding("two", cluster=lambda d: calls.append("cluster"), parts=("z", "t"),
                  combine=lambda o: calls.append("combine"),
                  cluster_outcomes=lambda o: (calls.append(sorted(o)) or
                                              ([[0.0, 1.0], [1.0, 0.0]], [1, 0])))
    d, labels = e.cluster_session({"z": 1, "t": 2})
    assert calls == [["t", "z"]]
    assert isinstance(d, np.ndarray) and d.tolist() == [[0.0, 1.0], [1.0, 0.0]]
    assert isinstance(labels, np.ndarray) and labels.tolist() == [1, 0]
    for wrong in ({"z": 1}, {"z": 1, "t": 2, "u": 3}, {None: 1}):
        with pytest.raises(ParameterError, match="combines the parts"):
            e.cluster_session(wrong)
    assert calls == [["t", "z"]]
    one = Embedding("one", cluster=lambda d: d)
    with pytest.raises(ParameterError, match="combines the parts"):
        one.cluster_session({"z": 1})

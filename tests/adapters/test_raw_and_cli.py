"""OmniFC raw samples through the same interface, and the ``simulate --adapter`` examples."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from omnifc.adapters import raw
from omnifc.cli import main


def test_raw_secure_labels_equal_plaintext_labels():
    rng = np.random.Generator(np.random.PCG64(0))
    x = np.concatenate([rng.normal(c, 0.4, (12, 3)) for c in (-2.0, 0.0, 2.0)])
    truth = np.repeat([0, 1, 2], 12)
    order = rng.permutation(36)
    parties = {"a": x[order[:10]], "b": x[order[10:25]], "c": x[order[25:]]}
    secure = raw.run(parties, bound=5.0, n_clusters=3, random_state=1)
    plain = raw.run(parties, bound=5.0, n_clusters=3, random_state=1, secure=False)
    assert np.array_equal(secure.labels, plain.labels)
    assert np.array_equal(secure.distances, plain.distances)
    assert [len(v) for v in secure.party_labels.values()] == [10, 15, 11]
    assert adjusted_rand_score(truth[order], secure.labels) == 1.0
    hier = raw.run(parties, bound=5.0, n_clusters=3, method="hierarchical", secure=False)
    assert adjusted_rand_score(truth[order], hier.labels) == 1.0


@pytest.mark.parametrize("name", ["raw", "client2vec"])
def test_simulate_adapter_prints_the_claim_next_to_the_results(name, capsys):
    assert main(["simulate", "--adapter", name]) == 0
    out = capsys.readouterr().out
    assert "claim" in out and "secure" in out
    assert f"adapter          {name}" in out


def test_simulate_without_adapter_is_unchanged(capsys):
    assert main(["simulate", "--dataset", "iris"]) == 0
    assert "exact         yes" in capsys.readouterr().out

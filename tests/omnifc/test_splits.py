"""split_non_iid: the paper's p-split (CCFC construct_workers) with its documented fixes."""

from __future__ import annotations

import numpy as np
import pytest

import omnifc


def reference_split(labels, parties, level, pool_order):
    """Direct transcription of the rule for parties == classes, given the pool permutation."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    if level == 1.0:
        return [np.flatnonzero(labels == c) for c in classes]
    n = labels.size // parties
    own = int(round(n * level))
    chosen = [np.flatnonzero(labels == c)[:own] for c in classes]
    rest = np.concatenate([np.flatnonzero(labels == c)[own:] for c in classes])
    rest = rest[pool_order(rest.size)]
    out, start = [], 0
    for i in range(parties):
        need = n - chosen[i].size
        out.append(np.sort(np.concatenate([chosen[i], rest[start:start + need]])))
        start += need
    return out


def pcg_order(seed):
    def order(size):
        perm = np.arange(size)
        np.random.Generator(np.random.PCG64(seed)).shuffle(perm)
        return perm
    return order


@pytest.mark.parametrize("level", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_matches_the_rule_on_iris(level):
    labels = omnifc.load_dataset("iris").labels
    got = omnifc.split_non_iid(labels, 3, level)
    expected = reference_split(labels, 3, level, pcg_order(20))
    assert [g.tolist() for g in got] == [e.tolist() for e in expected]


def test_p1_is_one_class_per_party_and_uses_everything():
    labels = omnifc.load_dataset("digits").labels
    parts = omnifc.split_non_iid(labels, 10, 1.0)
    for i, part in enumerate(parts):
        assert set(labels[part].tolist()) == {i}
    assert sum(p.size for p in parts) == labels.size


def test_p0_is_about_iid_and_disjoint():
    labels = np.repeat(np.arange(4), 250)
    parts = omnifc.split_non_iid(labels, 4, 0.0)
    allrows = np.concatenate(parts)
    assert allrows.size == np.unique(allrows).size == 1000
    for part in parts:
        counts = np.bincount(labels[part], minlength=4)
        assert counts.min() > 30 and counts.max() < 100     # far from one class


@pytest.mark.parametrize("level", [0.25, 0.5, 0.75])
def test_own_class_share_and_party_size(level):
    labels = np.repeat(np.arange(3), [60, 59, 59])         # wine-like sizes, N = 178
    parts = omnifc.split_non_iid(labels, 3, level)
    n = 178 // 3
    own = round(n * level)
    for i, part in enumerate(parts):
        assert part.size == n                               # n - round(n p) from the pool
        first = np.flatnonzero(labels == i)[:own]
        assert set(first.tolist()) <= set(part.tolist())


def test_rounding_half_to_even_keeps_sizes():
    # n = 59, p = 0.5: round(29.5) = 30 own and the authors' round(n (1-p)) = 30 more
    # would give 60; the pool share is n - own = 29.
    labels = np.repeat(np.arange(3), 60)[:177]
    parts = omnifc.split_non_iid(labels, 3, 0.5)
    assert [p.size for p in parts] == [59, 59, 59]


def test_more_parties_than_classes():
    labels = np.repeat([0, 1], [212, 357])                 # breast-cancer sizes
    parts = omnifc.split_non_iid(labels, 4, 1.0)
    assert [set(labels[p].tolist()) for p in parts] == [{0}, {1}, {0}, {1}]
    assert sorted(np.concatenate(parts).tolist()) == list(range(569))
    parts = omnifc.split_non_iid(labels, 4, 0.5)
    assert [p.size for p in parts] == [142] * 4
    assert (labels[parts[0]] == 0).sum() >= 71 and (labels[parts[2]] == 0).sum() >= 71
    assert not set(parts[0].tolist()) & set(parts[2].tolist())


def test_seed_changes_only_the_pool():
    labels = np.repeat(np.arange(3), 20)
    a = omnifc.split_non_iid(labels, 3, 0.5, seed=1)
    b = omnifc.split_non_iid(labels, 3, 0.5, seed=2)
    assert [x.tolist() for x in a] != [x.tolist() for x in b]
    for i in range(3):
        own = np.flatnonzero(labels == i)[:10]
        assert set(own.tolist()) <= set(a[i].tolist()) and set(own.tolist()) <= set(b[i].tolist())


@pytest.mark.parametrize("kwargs,message", [
    ({"parties": 0, "level": 0.5}, "parties"),
    ({"parties": 7, "level": 0.5}, "parties"),
    ({"parties": 2, "level": 1.5}, "level"),
    ({"parties": 2, "level": -0.1}, "level"),
    ({"parties": 2, "level": "half"}, "level"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(omnifc.ParameterError, match=message):
        omnifc.split_non_iid([0, 0, 1, 1, 2, 2], **kwargs)


def test_p1_with_fewer_parties_than_classes_tops_up_from_the_pool():
    labels = np.repeat(np.arange(4), 10)
    parts = omnifc.split_non_iid(labels, 2, 1.0)
    assert [p.size for p in parts] == [20, 20]
    assert set(range(10)) <= set(parts[0].tolist())          # all of class 0
    assert set(range(10, 20)) <= set(parts[1].tolist())      # all of class 1
    assert not set(parts[0].tolist()) & set(parts[1].tolist())

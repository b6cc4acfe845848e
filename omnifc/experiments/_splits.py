"""Non-IID splits of a labelled data set across parties, with the OmniFC paper's level p.

Follows the first author's ``construct_workers`` (CCFC-pytorch ``model.py``; SDA-FC
``construct_clients``), which OmniFC reuses:

- ``p = 1``: party i holds every sample of class i (one class per party; parties may
  differ in size).
- ``p < 1``: with n = N // m samples per party, party i takes the *first* round(n p)
  samples of class i (in data-set order), then n - round(n p) samples from a shuffled
  pool of everything not taken (shuffled once with ``seed``). p = 0 is about IID.
  Samples beyond m n are not used (N mod m of them, as in the paper's code).

Differences from the authors' code, all needed for cases it does not handle:

- More parties than classes (needed when m = K classes is below the 2l + 2t - 1 parties the
  protocol requires, e.g. breast-cancer's 2 classes with l = t = 1): party i is tied to
  class ``i mod K``. At p = 1 the parties of one class split it into contiguous, nearly
  equal blocks; at p < 1 they take successive blocks of round(n p) of its samples.
- The pool share is n - round(n p) (the authors use round(n (1 - p)), which with Python's
  half-to-even rounding can give n + 1 samples, e.g. n = 59, p = 0.5) and a class with
  fewer than round(n p) samples left is topped up from the pool, so every party holds
  exactly n samples when p < 1.
- Fewer parties than classes at p = 1: the p < 1 rule with p = 1 (each party takes up to n
  samples of its class and is topped up from the pool), since one class per party cannot
  cover every class.
- The shuffle is numpy's PCG64 seeded with ``seed`` (20, as in the paper) instead of
  ``torch.randperm``: the same rule, not the same permutation.

Examples
--------
>>> import numpy as np
>>> from omnifc import split_non_iid
>>> y = np.repeat([0, 1, 2], 4)
>>> [part.tolist() for part in split_non_iid(y, parties=3, level=1.0)]
[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
>>> [len(part) for part in split_non_iid(y, parties=3, level=0.5)]
[4, 4, 4]
"""

from __future__ import annotations

import numbers

import numpy as np

from finite_field import ParameterError

__all__ = ["split_non_iid"]


def split_non_iid(labels, parties: int, level: float, seed: int = 20) -> list[np.ndarray]:
    """Row indices for each party under the paper's non-IID level p.

    Parameters
    ----------
    labels : array-like of shape (N,)
        Class of every sample. Classes are taken in sorted order: class i is the i-th
        smallest label.
    parties : int
        Number of parties m (1 <= m <= N). Party i is tied to class ``i mod K``.
    level : float
        Non-IID level p in [0, 1].
    seed : int
        Seed of the pool shuffle (the paper uses 20). This is data partitioning for
        experiments, not a secret.

    Returns
    -------
    list of ndarray of int
        Sorted, disjoint row indices per party; no party is empty.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ParameterError(f"labels must be 1-D, got shape {labels.shape}")
    if isinstance(level, bool) or not isinstance(level, numbers.Real) \
            or not 0.0 <= float(level) <= 1.0:
        raise ParameterError(f"level p must be a number in [0, 1], got {level!r}")
    n_total = labels.size
    if isinstance(parties, bool) or not isinstance(parties, numbers.Integral) \
            or not 1 <= parties <= n_total:
        raise ParameterError(f"parties must be an integer in [1, {n_total}], got {parties!r}")
    parties = int(parties)
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == c) for c in classes]
    tied = [list(range(c, parties, classes.size)) for c in range(classes.size)]
    if float(level) == 1.0 and parties >= classes.size:
        chosen: list = [None] * parties
        for c, owners in enumerate(tied):
            for owner, block in zip(owners, np.array_split(members[c], len(owners))):
                chosen[owner] = block
        out = [np.sort(c.astype(np.int64)) for c in chosen]
    else:
        per_party = n_total // parties
        own_count = int(round(per_party * float(level)))
        taken = np.zeros(n_total, dtype=bool)
        chosen = [np.zeros(0, dtype=np.int64)] * parties
        for c, owners in enumerate(tied):
            for position, owner in enumerate(owners):
                block = members[c][position * own_count:(position + 1) * own_count]
                chosen[owner] = block
                taken[block] = True
        pool = np.flatnonzero(~taken)  # leftovers, in class-then-index order as in the paper
        pool = pool[np.argsort(labels[pool], kind="stable")]
        np.random.Generator(np.random.PCG64(seed)).shuffle(pool)
        start = 0
        for i in range(parties):
            need = per_party - chosen[i].size
            chosen[i] = np.concatenate([chosen[i], pool[start:start + need]])
            start += need
        out = [np.sort(c.astype(np.int64)) for c in chosen]
    for i, part in enumerate(out):
        if part.size == 0:
            raise ParameterError(f"party {i} would hold no samples (N={n_total}, "
                                 f"parties={parties}, p={level})")
    return out

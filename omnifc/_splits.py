"""Non-IID splits of a labelled data set across parties, with the OmniFC paper's level p.

The paper (following the first author's CCFC ``construct_workers``) gives client i the
*first* round(n p) samples of class i and fills the rest of its n = N/m samples from a
shuffled pool of everything left. p = 0 is about IID, p = 1 gives one class per client.
With more parties than classes, party i is tied to class ``i mod K``.

Examples
--------
>>> import numpy as np
>>> from omnifc import split_non_iid
>>> y = np.repeat([0, 1, 2], 4)
>>> [part.tolist() for part in split_non_iid(y, parties=3, level=1.0)]
[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

__all__ = ["split_non_iid"]


def split_non_iid(labels, parties: int, level: float, seed: int = 20) -> list[np.ndarray]:
    """Row indices for each party.

    Parameters
    ----------
    labels : array-like of shape (N,)
        Class of every sample.
    parties : int
        Number of parties m (>= 1, <= N).
    level : float
        Non-IID level p in [0, 1].
    seed : int
        Seed of the pool shuffle (the paper uses 20). This is data partitioning for
        experiments, not a secret.

    Returns
    -------
    list of ndarray of int
        Sorted indices per party; every sample is used at most once and each party gets
        N // m samples.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ParameterError(f"labels must be 1-D, got shape {labels.shape}")
    if not 0.0 <= float(level) <= 1.0:
        raise ParameterError(f"level p must be in [0, 1], got {level}")
    n_total = labels.size
    if isinstance(parties, bool) or not 1 <= int(parties) <= n_total:
        raise ParameterError(f"parties must be in [1, {n_total}], got {parties}")
    classes = np.unique(labels)
    per_party = n_total // parties
    taken = np.zeros(n_total, dtype=bool)
    chosen = []
    for i in range(parties):
        cls = classes[i % classes.size]
        candidates = np.flatnonzero((labels == cls) & ~taken)
        own = candidates[: int(round(per_party * level))]
        taken[own] = True
        chosen.append(list(own))
    pool = np.flatnonzero(~taken)
    np.random.Generator(np.random.PCG64(seed)).shuffle(pool)
    start = 0
    for i in range(parties):
        need = per_party - len(chosen[i])
        chosen[i].extend(pool[start : start + need])
        start += need
    return [np.sort(np.asarray(c, dtype=np.int64)) for c in chosen]

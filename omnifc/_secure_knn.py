"""``secure_knn_graph``: an exact k-NN graph from two secure sessions (issue 22).

Round 1 is a ``landmarks`` session (D[:, L]); the coordinator embeds the rows by landmark
MDS and lists every row's ``candidates`` nearest rows in that embedding; round 2 is a
``pairs`` session on that list. Both go through :func:`omnifc.secure_distance_matrix`
with the same public parameters (masks, integrity, primes, ...), so the coordinator learns
entries of D only: D[:, L] and the listed pairs (docs/protocol.md, "Layouts").
"""

from __future__ import annotations

import logging

import numpy as np

from finite_field import ParameterError

from ._clustering._neighbours import KNNGraph, candidate_pairs, knn_from_entries
from ._secure import normalize_parties, secure_distance_matrix

__all__ = ["secure_knn_graph", "pair_rounds"]

logger = logging.getLogger(__name__)

#: Arguments of secure_distance_matrix that the two rounds set themselves.
_OWN = ("layout", "landmarks", "pairs", "n_landmarks", "out", "cluster", "max_pairs")


def pair_rounds(pairs, max_pairs: int) -> list:
    """The pair list split into consecutive rounds of at most ``max_pairs`` pairs each.

    Each round is one ``pairs`` session whose list every party checks in full (rows in
    range, no pair twice, no row with itself, at most ``max_pairs``) before it computes
    anything. The list (i < j, sorted and distinct, as :func:`candidate_pairs` makes it)
    is partitioned, so no pair is computed twice across rounds either.

    >>> import numpy as np
    >>> [r.tolist() for r in pair_rounds(np.array([[0, 1], [0, 2], [1, 2]]), 2)]
    [[[0, 1], [0, 2]], [[1, 2]]]
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    cap = int(max_pairs)
    if cap < 1:
        raise ParameterError(f"max_pairs must be >= 1, got {max_pairs!r}")
    return [pairs[a:a + cap] for a in range(0, len(pairs), cap)]


def secure_knn_graph(parties, *, k: int, n_landmarks: int | None = None, landmarks=None,
                     candidates: int | None = None, max_pairs: int | None = None,
                     n_components: int | None = None, **session) -> KNNGraph:
    """The exact k-nearest-neighbour graph of all parties' rows from D[:, L] and listed pairs.

    1. A ``landmarks`` session computes D[:, L] for ``landmarks`` (global rows) or
       ``n_landmarks`` rows drawn from the session's public randomness.
    2. Landmark (Nyström) MDS embeds every row; scikit-learn's ``NearestNeighbors`` gives
       each row its ``candidates`` nearest rows there; the distinct pairs without a
       landmark end (their distances are in D[:, L]) are listed.
    3. A ``pairs`` session computes those pairs exactly.
    4. Each row's k nearest rows among the exact entries (ordered by exact distance, then
       row index) form the graph.

    Parameters
    ----------
    parties : dict of str to array-like, or sequence of array-like
        Each party's rows, as for :func:`omnifc.secure_distance_matrix`.
    k : int
        Neighbours per row (at most n - 1).
    n_landmarks, landmarks
        L drawn landmarks, or the landmark rows themselves (one of them).
    candidates : int, optional
        c >= k candidates per row from the embedding (default ``4 * k``); c = n - 1 lists
        every pair and gives the exact k-NN graph of D.
    max_pairs : int, optional
        The public cap on the pairs of one ``pairs`` session (default and at most 2^19:
        the list travels in the roster). A longer list runs as several ``pairs``
        sessions of at most ``max_pairs`` each (:func:`pair_rounds`), each list checked
        in full by every party. The number of sessions is bounded in advance by
        ``ceil(n * min(c, n - 1) / max_pairs)``, which does not depend on the data.
    n_components : int, optional
        Directions of the landmark embedding kept for the candidate search (default all).
    **session
        Every other argument of :func:`omnifc.secure_distance_matrix` (``bound``,
        ``scale_bits``, ``mode``, ``integrity``, ``transport``, ...), used by both rounds.

    Returns
    -------
    KNNGraph
        ``indices``, ``integer_distances`` and ``distances`` (n, k); ``graph()`` as a
        scipy CSR matrix; the rounds' results (``landmark_result``; ``pair_result``: the
        pairs session's result, a list of them when the list took several sessions, None
        when no pair was left to compute).

    Examples
    --------
    >>> import numpy as np, omnifc
    >>> parties = [np.array([[0.0, 0.0], [0.0, 1.0]]), np.array([[5.0, 5.0], [5.0, 6.0]]),
    ...            np.array([[1.0, 0.0], [6.0, 6.0]])]
    >>> knn = omnifc.secure_knn_graph(parties, k=1, n_landmarks=3, candidates=5,
    ...                               bound=8.0, scale_bits=4)  # c = n - 1: exact
    >>> knn.indices.ravel().tolist()
    [1, 0, 3, 2, 0, 3]
    """
    from protocols import DEFAULT_MAX_PAIRS

    taken = sorted(set(session) & set(_OWN))
    if taken:
        raise ParameterError(f"secure_knn_graph runs its own landmarks and pairs rounds; "
                             f"it does not take {taken}")
    names, arrays = normalize_parties(parties)
    n = sum(x.shape[0] for x in arrays)
    if n < 2:
        raise ParameterError(f"a k-NN graph needs at least 2 rows, got n = {n}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n - 1:
        raise ParameterError(f"k must be an integer in [1, n - 1 = {n - 1}], got {k!r}")
    candidates = 4 * int(k) if candidates is None else candidates
    if isinstance(candidates, bool) or not isinstance(candidates, (int, np.integer)) or \
            candidates < k:
        raise ParameterError(f"candidates must be an integer >= k = {k}, got {candidates!r}")
    if (landmarks is None) == (n_landmarks is None):
        raise ParameterError("give the landmark rows (landmarks=) or their number "
                             "(n_landmarks=), one of them")
    cap = DEFAULT_MAX_PAIRS if max_pairs is None else max_pairs
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or \
            not 1 <= cap <= DEFAULT_MAX_PAIRS:
        raise ParameterError(f"max_pairs must be an integer in [1, {DEFAULT_MAX_PAIRS}] (the "
                             f"pairs of one session), got {max_pairs!r}")
    cap = int(cap)
    parties = dict(zip(names, arrays)) if isinstance(parties, dict) else arrays
    choice = {"landmarks": list(landmarks)} if landmarks is not None else \
        {"n_landmarks": int(n_landmarks)}
    first = secure_distance_matrix(parties, layout="landmarks", **choice, **session)
    columns = np.asarray(first.integer_distances)
    pairs = candidate_pairs(first.distances, first.landmarks, candidates=int(candidates),
                            n_components=n_components)
    second = []
    pair_values = np.empty(0, dtype=np.int64)
    if len(pairs):
        values = []
        for chunk in pair_rounds(pairs, cap):
            got = secure_distance_matrix(parties, layout="pairs", pairs=chunk,
                                         max_pairs=cap, **session)
            if not np.array_equal(got.pairs, chunk):  # the session computes what was listed
                raise ParameterError("a pairs round returned other pairs than were listed")
            values.append(np.asarray(got.integer_distances, dtype=np.int64))
            second.append(got)
        pair_values = np.concatenate(values)
    scale_bits = int(first.parameters.get("scale_bits", session.get("scale_bits", 16)))
    graph = knn_from_entries(n, first.landmarks, columns, pairs, pair_values, int(k),
                             scale_bits=scale_bits)
    graph.landmark_result = first
    graph.pair_result = second[0] if len(second) == 1 else (second or None)
    graph.party_names, graph.owners = list(first.party_names), first.owners
    logger.info("k-NN graph (k=%d) of %d rows from %d landmarks and %d pairs in %d pairs "
                "session(s)", k, n, len(first.landmarks), len(pairs), len(second))
    return graph

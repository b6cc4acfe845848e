"""Layouts of D: which entries of the squared-distance matrix a session computes.

A distance session computes one *layout* of D (issue 22). Every layout is a set of entries
of D, so the coordinator learns no more than it may (D itself); the shares, the
view-bound masks, the integrity checks and the streaming are the same for all three:

==============  ===========================================  ===========================
layout          entries                                      result
==============  ===========================================  ===========================
``full``        every pair (the default)                     the n x n matrix (a store)
``landmarks``   D[:, L]: every row against L landmark rows   an (n, L) array + L indices
``pairs``       an explicit list of P pairs (i, j), i != j   a (P,) vector + the pairs
==============  ===========================================  ===========================

Parameters (:mod:`protocols._parameters`): ``layout``; ``layout_rows`` (landmarks: the
landmark rows; pairs: i0, j0, i1, j1, ... flattened); ``n_landmarks`` (L drawn from the
run's public randomness when no rows are listed); the public caps ``max_landmarks`` and
``max_pairs``. What can be checked without the roster is checked when the parameters are
made (:func:`check_layout`: duplicates, caps, pairs of a row with itself); the rest when
the roster is known (:func:`resolve_layout`: every row index below n), by every party
before it encrypts, shares or computes anything, and by the coordinator before it sends the
roster.

Drawn landmarks (:func:`draw_landmarks`) come from the roster digest, which hashes every
party's signed hello and so its fresh 32-byte run nonce: no party chooses them alone (it
does not see the other nonces before it signs its own) and the coordinator cannot choose
them (it cannot change a signed hello). A coordinator can still abort and rerun a session
to draw again, or show a colluding party the other nonces before it signs; either way
it gets only other entries of D.

>>> from protocols._layouts import check_layout, draw_landmarks, layout_rows
>>> check_layout("pairs", layout_rows([(0, 1), (2, 0)]), 0, max_landmarks=8, max_pairs=8)
(0, 1, 2, 0)
>>> draw_landmarks("s", bytes(32), n=10, count=3).tolist() == \\
...     draw_landmarks("s", bytes(32), n=10, count=3).tolist()
True
"""

from __future__ import annotations

import hashlib

import numpy as np

from finite_field import ParameterError

__all__ = ["LAYOUTS", "DEFAULT_MAX_LANDMARKS", "DEFAULT_MAX_PAIRS", "MAX_PAIRS", "check_layout",
           "layout_rows", "resolve_layout", "draw_landmarks"]

#: The layouts of a distance session.
LAYOUTS = ("full", "landmarks", "pairs")
#: Public cap on L unless the config says otherwise.
DEFAULT_MAX_LANDMARKS = 4096
#: The most pairs a session may list: the list travels in the roster, and 2^19 pairs of
#: row indices below 2^24 (8 bytes each as varints) keep it under 4.2 MB, about half of
#: gRPC's 8 MiB message limit (protocols._tls.MAX_MESSAGE_BYTES). A longer list runs as
#: several pairs sessions of at most the cap each (omnifc._secure_knn.pair_rounds).
MAX_PAIRS = 1 << 19
#: Public cap on P (pairs) unless the config says otherwise.
DEFAULT_MAX_PAIRS = MAX_PAIRS
#: Row indices are below every row cap (< 2^40).
_MAX_INDEX = 1 << 40
#: Domain label of the landmark draw.
_DRAW_LABEL = b"omnifc/v1 landmarks"


def layout_rows(value, key: str = "layout_rows") -> tuple:
    """``value`` as a flat tuple of row indices >= 0 (pairs may be given as (i, j) pairs;
    None is empty)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParameterError(f"{key} must be a list of row indices, got {value!r:.80}")
    flat = []
    for item in value:
        items = item if hasattr(item, "__iter__") and not isinstance(item, (str, bytes)) \
            else (item,)
        for v in items:
            if isinstance(v, bool) or not hasattr(v, "__index__") or \
                    not 0 <= int(v) < _MAX_INDEX:
                raise ParameterError(f"{key} must hold row indices (integers in [0, 2^40)), "
                                     f"got {v!r:.40}")
            flat.append(int(v))
    return tuple(flat)


def check_layout(layout: str, rows: tuple, n_landmarks: int, *, max_landmarks: int,
                 max_pairs: int, kind: str = "distance", prefix: str = "") -> tuple:
    """The checks that need no roster; returns ``rows`` (flat). ``prefix`` names the
    config table in messages (``"[parameters] "``)."""
    if layout not in LAYOUTS:
        raise ParameterError(f"{prefix}layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "full":
        if rows or n_landmarks:
            raise ParameterError(f"{prefix}layout = 'full' computes every entry: "
                                 f"layout_rows must be empty and n_landmarks 0, got "
                                 f"{len(rows)} rows and n_landmarks = {n_landmarks}")
        return rows
    if kind != "distance":
        raise ParameterError(f"{prefix}layout = {layout!r} is for distance sessions, this "
                             f"one is a {kind}")
    if layout == "landmarks":
        count = len(rows) or n_landmarks
        if not count:
            raise ParameterError(f"{prefix}layout = 'landmarks' needs the landmark rows "
                                 "(layout_rows) or their number (n_landmarks >= 1)")
        if rows and n_landmarks and n_landmarks != len(rows):
            raise ParameterError(f"{prefix}n_landmarks must be 0 or the number of listed "
                                 f"landmark rows ({len(rows)}), got {n_landmarks}")
        if count > max_landmarks:
            raise ParameterError(f"{prefix}the layout has {count} landmarks, more than the "
                                 f"public cap max_landmarks = {max_landmarks}")
        seen = set()
        for row in rows:
            if row in seen:
                raise ParameterError(f"{prefix}landmark rows must be distinct; row {row} is "
                                     "listed twice")
            seen.add(row)
        return rows
    # pairs
    if n_landmarks:
        raise ParameterError(f"{prefix}layout = 'pairs' draws no landmarks: n_landmarks "
                             f"must be 0, got {n_landmarks}")
    if not rows or len(rows) % 2:
        raise ParameterError(f"{prefix}layout = 'pairs' needs a non-empty list of pairs "
                             f"(layout_rows = i0, j0, i1, j1, ...: an even count), got "
                             f"{len(rows)} values")
    count = len(rows) // 2
    if count > max_pairs:
        raise ParameterError(f"{prefix}the layout lists {count} pairs, more than the public "
                             f"cap max_pairs = {max_pairs}")
    pairs = np.asarray(rows, dtype=np.int64).reshape(-1, 2)
    same = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
    if same.size:
        i = int(same[0])
        raise ParameterError(f"{prefix}pair {i} is ({pairs[i, 0]}, {pairs[i, 1]}): a row "
                             "with itself (its distance is 0)")
    key = np.sort(pairs, axis=1)
    _, first, counts = np.unique(key, axis=0, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = key[first[np.argmax(counts > 1)]]
        raise ParameterError(f"{prefix}pairs must be distinct (in either order); "
                             f"{{{dup[0]}, {dup[1]}}} is listed {int(counts.max())} times")
    return rows


def _uniform(seed: bytes):
    """Uniform integers below ``bound`` from SHA-256 in counter mode (rejection)."""
    counter = 0
    buffer = b""

    def below(bound: int) -> int:
        nonlocal counter, buffer
        limit = (1 << 64) - (1 << 64) % bound
        while True:
            if len(buffer) < 8:
                buffer += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
                counter += 1
            word, buffer = int.from_bytes(buffer[:8], "big"), buffer[8:]
            if word < limit:
                return word % bound
    return below


def draw_landmarks(session_id: str, roster_digest: bytes, *, n: int, count: int) -> np.ndarray:
    """``count`` distinct rows of ``range(n)``, uniformly, from the roster digest (sorted).

    Robert Floyd's sampling over SHA-256(label, session, digest) in counter mode: every
    party and the coordinator compute the same set from public values.
    """
    if not 1 <= count <= n:
        raise ParameterError(f"n_landmarks = {count} landmarks cannot be drawn from the "
                             f"n = {n} rows of the roster")
    seed = hashlib.sha256(_DRAW_LABEL + len(session_id.encode()).to_bytes(4, "big")
                          + session_id.encode() + bytes(roster_digest)).digest()
    below = _uniform(seed)
    chosen: set = set()
    for j in range(n - count, n):
        t = below(j + 1)
        chosen.add(j if t in chosen else t)
    return np.array(sorted(chosen), dtype=np.int64)


def resolve_layout(parameters, n_total: int, session_id: str, roster_digest: bytes):
    """The layout's entries once the roster is known: (n, landmarks) or (n, pairs).

    Returns ``None`` (full), an int64 array of L landmark rows, or an int64 (P, 2) array
    of pairs. ParameterError when a listed row is not below ``n_total`` or more
    landmarks are asked for than there are rows.
    """
    layout, rows = parameters.layout, parameters.layout_rows
    if layout == "full":
        return None
    if rows and max(rows) >= n_total:
        bad = next(r for r in rows if r >= n_total)
        raise ParameterError(f"layout_rows lists row {bad}, but the roster has n = {n_total} "
                             f"rows (0..{n_total - 1})")
    if layout == "landmarks":
        if rows:
            return np.asarray(rows, dtype=np.int64)
        return draw_landmarks(session_id, roster_digest, n=n_total,
                              count=parameters.n_landmarks)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)

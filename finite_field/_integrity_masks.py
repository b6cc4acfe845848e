"""Integrity masks: masks that cancel in D and in the parity checks and hide everything else.

Each party j of the responding set B uploads U_j = g(beta_j) + M_j (unweighted). The
coordinator may learn exactly the combinations in

    W = span(c, mu_1, ..., mu_s)    (c: decoding vector, mu_k: parity rows, s <= r),

namely D = c.U and the syndromes mu_k.U (zero for honest parties). So the mask vector M
(entry by entry) must lie in the orthogonal complement W^perp (dimension |B| - s - 1, as
c is not in span(mu): c.y = sum_o g(alpha_o) is not zero on the code) and be uniform there.

Sparse construction. For a *group* G of s+2 parties, the (s+1) x (s+2) matrix W|_G has a
null vector z_G (generically exactly one; every null vector is taken when there are more),
and z_G extended by zeros lies in W^perp. With group coefficients rho_G (per entry, uniform,
from a seed the members of G share),

    M = sum_G rho_G z_G,     party j adds M_j = sum_{G containing j} rho_G z_G[j].

Then w.M = 0 for every w in W, so c.U = c.g = D and mu_k.U = mu_k.g exactly; and when the
vectors z_G span W^perp, M is uniform on W^perp (the image of a uniform vector under a
linear surjection is uniform), so U is uniform on g + W^perp: the coordinator learns the
projections w.g, w in W, and nothing else.

Coalitions. A coordinator colluding with a set T of parties knows g_T, the U of everyone,
and the coefficients of every group that meets T. What stays hidden is g_H (H = B - T)
modulo the span of the honest vectors Z_H = span{z_G : G subset of H}. The best possible
(what w.U = w.g reveals anyway) is g_H modulo V_H = {x in W^perp : supp x subset of H}, of
dimension |H| - rank(W[:, H]). The group structure is *t-robust* when Z_H = V_H for every
|T| <= t; otherwise the coalition learns dim V_H - dim Z_H extra linear functionals of the
honest evaluations (with cyclic windows, for instance, the combinations w_R . g_R over each
run R of consecutive honest parties that the colluders cut out: with two or more runs, a
partial decoded sum of each run leaks). :func:`exposed_coalitions` lists the coalitions
that learn more, by exhaustive search; :func:`choose_mask_groups` starts from cyclic
windows (robust for one colluder) and adds groups inside each exposed honest set until
none is left.

Examples
--------
>>> import numpy as np
>>> from finite_field import LagrangeCode, ReedSolomonCheck
>>> code = LagrangeCode(segments=1, noise_segments=1, parties=6, prime=251)
>>> check = ReedSolomonCheck.for_responders(code, range(6))            # K = 3, r = 3
>>> rows = integrity_rows(code.decoding_weights(range(6)), check.parity_rows(1), 251)
>>> groups = choose_mask_groups(rows, 251, colluders=1)
>>> [g.members for g in groups]
[(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 5), (4, 5, 0), (5, 0, 1)]
>>> rho = {i: np.array([7, 100]) for i in range(len(groups))}          # two entries
>>> masks = np.stack([party_mask(groups, j, rho, 251) for j in range(6)])
>>> (rows @ masks % 251).tolist()                                       # W cancels them
[[0, 0], [0, 0]]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ._jit import kernel
from ._aggregate import _reduce
from ._errors import ParameterError
from ._kernels._checks import _check_field_array, _check_modulus
from ._kernels import weighted_sum

__all__ = ["MaskGroup", "integrity_rows", "null_space", "rank_mod", "cyclic_groups",
           "mask_groups", "choose_mask_groups", "party_mask", "exposed_coalitions",
           "spans_complement", "integrity_upload"]


def _rref(matrix, p: int):
    """Reduced row echelon form mod p (int64, entries < 2^31 so products fit) and pivots."""
    a = np.array(matrix, dtype=np.int64) % p
    rows, cols = a.shape
    pivots = []
    r = 0
    for c in range(cols):
        if r == rows:
            break
        nz = np.flatnonzero(a[r:, c])
        if nz.size == 0:
            continue
        k = r + int(nz[0])
        if k != r:
            a[[r, k]] = a[[k, r]]
        a[r] = a[r] * pow(int(a[r, c]), -1, p) % p
        others = np.flatnonzero(a[:, c])
        others = others[others != r]
        if others.size:
            a[others] = (a[others] - a[others, c:c + 1] * a[r]) % p
        pivots.append(c)
        r += 1
    return a[:r], pivots


def rank_mod(matrix, p: int) -> int:
    """The rank of an integer matrix over GF(p).

    >>> rank_mod([[1, 2], [2, 4]], 13), rank_mod([[1, 2], [2, 5]], 13)
    (1, 2)
    """
    matrix = np.asarray(matrix, dtype=np.int64)
    if matrix.size == 0:
        return 0
    return len(_rref(matrix, p)[1])


def null_space(matrix, p: int) -> np.ndarray:
    """A deterministic basis of {x : matrix x = 0} over GF(p), shape (k, columns).

    One vector per free column (the value 1 there, 0 at the other free columns), then
    scaled so that its first nonzero entry is 1: the same matrix always gives the same
    basis, so every member of a group derives the same vector.

    >>> null_space([[1, 1, 1], [0, 1, 2]], 13).tolist()
    [[1, 11, 1]]
    """
    matrix = np.asarray(matrix, dtype=np.int64)
    cols = matrix.shape[1]
    reduced, pivots = _rref(matrix, p) if matrix.shape[0] else (matrix, [])
    free = [c for c in range(cols) if c not in pivots]
    out = np.zeros((len(free), cols), dtype=np.int64)
    for i, f in enumerate(free):
        out[i, f] = 1
        for row, c in enumerate(pivots):
            out[i, c] = (-reduced[row, f]) % p
        lead = int(out[i, np.flatnonzero(out[i])[0]])
        out[i] = out[i] * pow(lead, -1, p) % p
    return out


def integrity_rows(weights, parity_rows, p: int) -> np.ndarray:
    """W's spanning rows [c; mu_1; ...; mu_s] as one (s+1, N) int64 matrix (checked)."""
    p = _check_modulus(p)
    weights = _check_field_array(np.asarray(weights).reshape(1, -1), p, "weights")
    parity = _check_field_array(np.asarray(parity_rows, dtype=np.int64).reshape(
        -1, weights.shape[1]), p, "parity rows")
    rows = np.concatenate([weights, parity])
    if rank_mod(rows, p) != rows.shape[0]:
        raise ParameterError(
            f"the decoding vector and the {parity.shape[0]} parity rows must be independent")
    return rows


@dataclass(frozen=True)
class MaskGroup:
    """One mask generator: parties ``members`` (indices into B) add rho * ``vector``.

    ``vector[i]`` is the coefficient of party ``members[i]``; the full vector (zero
    elsewhere) lies in W^perp.
    """

    members: tuple
    vector: tuple

    def coefficient(self, party: int) -> int:
        return self.vector[self.members.index(party)]

    def dense(self, size: int) -> np.ndarray:
        out = np.zeros(size, dtype=np.int64)
        out[list(self.members)] = self.vector
        return out


def cyclic_groups(size: int, group_size: int, strides=(1,)) -> list[tuple[int, ...]]:
    """Windows {i, i+d, ..., i+(group_size-1)d} mod ``size`` for each stride d, deduplicated.

    >>> cyclic_groups(5, 3, strides=(1, 2))[:6]
    [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1), (0, 2, 4)]
    """
    seen, out = set(), []
    for d in strides:
        for i in range(size):
            members = tuple((i + k * d) % size for k in range(group_size))
            key = frozenset(members)
            if len(key) == group_size and key not in seen:
                seen.add(key)
                out.append(members)
    return out


def mask_groups(rows, p: int, groups) -> list[MaskGroup]:
    """The null vector(s) of W restricted to each group: one :class:`MaskGroup` each.

    ``rows`` is W's (s+1, N) matrix (:func:`integrity_rows`); a group whose restriction
    has a larger null space contributes one MaskGroup per basis vector.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = []
    for members in groups:
        members = tuple(int(j) for j in members)
        for vector in null_space(rows[:, list(members)], p):
            out.append(MaskGroup(members=members, vector=tuple(int(v) for v in vector)))
    return out


def spans_complement(rows, p: int, groups, colluders=()) -> int:
    """dim V_H - dim Z_H for H = B minus ``colluders``: 0 when the honest groups span V_H.

    V_H = {x in W^perp supported on H}; Z_H = span of the vectors of groups inside H.
    The result is the number of extra linear functionals of the honest evaluations that
    the coordinator together with ``colluders`` learns.
    """
    rows = np.asarray(rows, dtype=np.int64)
    size = rows.shape[1]
    bad = set(int(j) for j in colluders)
    honest = [j for j in range(size) if j not in bad]
    target = len(honest) - rank_mod(rows[:, honest], p) if honest else 0
    vectors = [g.dense(size) for g in groups if not bad.intersection(g.members)]
    have = rank_mod(np.array(vectors), p) if vectors else 0
    return target - have


def exposed_coalitions(rows, p: int, groups, colluders: int) -> list[tuple[tuple, int]]:
    """Every coalition of at most ``colluders`` parties that learns more than W allows.

    Exhaustive over all coalitions (sum_k C(N, k) rank computations: for small N). Returns
    [(coalition, extra dimensions)]; the empty coalition checks that the groups span W^perp.
    """
    size = np.asarray(rows).shape[1]
    out = []
    for k in range(0, min(colluders, size) + 1):
        for coalition in itertools.combinations(range(size), k):
            deficit = spans_complement(rows, p, groups, coalition)
            if deficit:
                out.append((coalition, deficit))
    return out


def choose_mask_groups(rows, p: int, colluders: int) -> list[MaskGroup]:
    """A small, deterministic, t-robust group structure, checked exhaustively.

    Starts from the cyclic windows of s+2 consecutive parties (stride 1: enough for one
    colluder, whose removal leaves one run of N-1 parties with N-s-2 windows, as many as
    dim V_H). Then, for every coalition T of up to ``colluders`` parties in lexicographic
    order, while the honest groups do not span V_H it adds a group of s+2 honest parties
    whose vector raises the rank, preferring the least loaded parties (then lexicographic
    order), so that no party holds many more group seeds than the others. Adding groups never breaks a
    coalition already repaired, so one pass suffices; the result is checked again.
    Every party computes the same structure from the public (points, s, t, prime).

    Raises
    ------
    ParameterError
        When some coalition cannot be repaired (degenerate points), naming it.
    """
    rows = np.asarray(rows, dtype=np.int64)
    size = rows.shape[1]
    group_size = rows.shape[0] + 1
    if group_size > size:
        raise ParameterError(
            f"groups of s+2 = {group_size} parties need |B| >= {group_size}, got {size}")
    groups = mask_groups(rows, p, cyclic_groups(size, group_size))
    present = {g.members for g in groups}
    for k in range(0, min(colluders, size) + 1):
        for coalition in itertools.combinations(range(size), k):
            deficit = spans_complement(rows, p, groups, coalition)
            if not deficit:
                continue
            honest = [j for j in range(size) if j not in coalition]
            load = [sum(j in g.members for g in groups) for j in range(size)]
            candidates = sorted(
                itertools.combinations(honest, group_size),
                key=lambda ms: (max(load[j] for j in ms), sum(load[j] for j in ms), ms))
            for members in candidates:
                if members in present:
                    continue
                candidate = groups + mask_groups(rows, p, [members])
                reduced = spans_complement(rows, p, candidate, coalition)
                if reduced < deficit:
                    groups, deficit = candidate, reduced
                    present.add(members)
                if not deficit:
                    break
            if deficit:
                raise ParameterError(
                    f"coalition {list(coalition)} learns {deficit} extra combination(s) of "
                    "the honest evaluations whatever the groups (degenerate points)")
    return groups


@kernel("int64(int64[::1], int64[::1], int64[:, ::1], int64, uint32[::1])",
            cache=True, nogil=True)
def _integrity_upload_kernel(values, weights, coefficients, p, out):
    # out = (values + sum_k weights[k] * coefficients[k]) mod p, one pass; each product
    # (< 2^62) is reduced before it is added (see _aggregate._reduce). Returns the number of
    # values or coefficients outside [0, p).
    n = values.shape[0]
    k = coefficients.shape[0]
    p_inv = 1.0 / p
    bad = 0
    acc = np.empty(n, dtype=np.int64)
    for e in range(n):
        v = values[e]
        bad += (v < 0) | (v >= p)
        acc[e] = v
    for q in range(k):
        w = weights[q]
        row = coefficients[q]
        for e in range(n):
            x = row[e]
            bad += (x < 0) | (x >= p)
            acc[e] += _reduce(w * x, p, p_inv)
        if q % 1024 == 1023:
            for e in range(n):
                acc[e] = _reduce(acc[e], p, p_inv)
    for e in range(n):
        out[e] = np.uint32(_reduce(acc[e], p, p_inv))
    return bad


def _own_groups(groups, party: int, coefficients) -> list[int]:
    """Indices of the groups containing ``party``; each must have its coefficients."""
    mine = [i for i, g in enumerate(groups) if party in g.members]
    if not mine:
        raise ParameterError(f"party {party} is in no mask group")
    missing = [i for i in mine if i not in coefficients]
    if missing:
        raise ParameterError(f"coefficients of groups {missing} (containing party {party}) "
                             "are missing")
    return mine


def integrity_upload(values, groups, party: int, coefficients, p: int) -> np.ndarray:
    """What party j uploads: U_j = g(beta_j) + M_j mod p as uint32, in one pass.

    ``values`` are its evaluations (reduced, any shape); ``coefficients`` maps the index of
    each group containing ``party`` to that group's rho array (same shape as ``values``),
    as for :func:`party_mask`. Unweighted: the coordinator applies c and the parity rows.

    >>> import numpy as np
    >>> group = MaskGroup(members=(0, 1, 2), vector=(1, 5, 3))
    >>> integrity_upload(np.array([4, 0]), [group], 1, {0: np.array([2, 3])}, 7).tolist()
    [0, 1]
    """
    p = _check_modulus(p)
    values = np.asarray(values, dtype=np.int64)
    mine = _own_groups(groups, party, coefficients)
    weights = np.array([groups[i].coefficient(party) % p for i in mine], dtype=np.int64)
    stack = np.stack([np.asarray(coefficients[i], dtype=np.int64).reshape(-1) for i in mine])
    if stack.shape[1] != values.size:
        raise ParameterError(f"coefficients must have {values.size} entries, "
                             f"got {stack.shape[1]}")
    out = np.empty(values.size, dtype=np.uint32)
    if _integrity_upload_kernel(np.ascontiguousarray(values.reshape(-1)), weights,
                                np.ascontiguousarray(stack), p, out):
        raise ParameterError(f"values and coefficients must be reduced field elements "
                             f"in [0, {p})")
    return out.reshape(values.shape)


def party_mask(groups, party: int, coefficients, p: int) -> np.ndarray:
    """M_j = sum over the groups G containing ``party`` of rho_G * z_G[party] (mod p).

    ``coefficients`` maps group index (position in ``groups``) to that group's rho array
    (per entry, reduced); only the groups containing ``party`` are read.
    """
    p = _check_modulus(p)
    mine = _own_groups(groups, party, coefficients)
    weights = [groups[i].coefficient(party) for i in mine]
    stack = np.stack([np.asarray(coefficients[i], dtype=np.int64) for i in mine])
    return weighted_sum(weights, stack, p)

"""FMCL: the paper's client embedding and server algorithm."""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

import numpy as np

from finite_field import InputError, ParameterError

from .._k_selection import MAX_CLUSTERS
from ._one_cluster import DEFAULT_RULE, choose_clusters

__all__ = ["ALPHA", "BETA", "COORDINATOR_LEARNS", "DEFAULT_RESOLUTION", "EPS", "FmclResult",
           "exact_resolution", "fill_missing", "fmcl_distances", "fmcl_from_thermometer",
           "fmcl_server", "geodesic_fill", "round_weights", "signature", "thermometer_rows",
           "LevelCode", "MAX_LEVELS", "MAX_LEVEL_SCALE", "check_level_counts",
           "class_counts", "level_code", "level_rows", "sum_of_squares", "GroupedLevelCode",
           "group_counts", "grouped_level_code"]


COORDINATOR_LEARNS = ("the two squared-distance matrices D^z and D^t of the protected codes "
                      "(with the public zero anchor: their Gram matrices): per pair the class "
                      "overlap and the overlap-weighted cosine sum, per client the quantization "
                      "residue sum_c w_ic |mu_q,ic|^2 of its own unit means; no weights, means "
                      "or class counts (with the exact level-set code, grouped or not, the "
                      "default end to end, every client's sample count is public: the code is "
                      "built from them, and FedAvg's weights reveal them anyway)")

#: alpha, beta (cap of the inverse-overlap factor) and eps: the paper's values as the
#: reference notes read them ([2nd]; the form of g is omnifc's reading, unverified).
ALPHA, BETA, EPS = 1.0, 100.0, 1e-3

#: Thermometer resolution q when the clients do not agree on :func:`exact_resolution`
#: (omnifc's choice; weights are rounded to multiples of 1/q).
DEFAULT_RESOLUTION = 500

def signature(embeddings, labels, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Client side: per-class mean embeddings (C, d) (0 for absent classes) and weights (C,)."""
    e = np.asarray(embeddings, dtype=np.float64)
    y = np.asarray(labels)
    if e.ndim != 2 or e.shape[0] != y.shape[0] or e.shape[0] == 0:
        raise InputError(f"expected embeddings (N, d) with N >= 1 labels, got {e.shape} and "
                         f"{y.shape}")
    means = np.zeros((n_classes, e.shape[1]))
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)[:n_classes]
    for c in np.flatnonzero(counts):
        means[c] = e[y == c].mean(axis=0)
    return means, counts / counts.sum()

def round_weights(weights, resolution: int = DEFAULT_RESOLUTION) -> np.ndarray:
    """Largest-remainder rounding: integers k_c >= 0 summing to q with |k_c/q - w_c| < 1/q."""
    w = np.asarray(weights, dtype=np.float64)
    q = int(resolution)
    if q < 1:
        raise ParameterError(f"resolution must be >= 1, got {resolution}")
    scaled = w / w.sum() * q
    nearest = np.round(scaled)
    if np.all(np.abs(scaled - nearest) < 1e-9 * max(q, 1)) and nearest.sum() == q:
        return nearest.astype(np.int64)     # already on the grid: exact (Delta = 0)
    k = np.floor(scaled).astype(np.int64)
    remainder = q - int(k.sum())
    if remainder:
        order = np.argsort(-(scaled - k), kind="stable")
        k[order[:remainder]] += 1
    return k

def exact_resolution(sample_counts, *, limit: int = 4096) -> int:
    """The least q with ``q n_ic / n_i`` integral for every client: lcm of the sample counts.

    With this q the thermometer encodes every class weight exactly (no rounding). Raises
    :class:`ParameterError` above ``limit`` (the code has C q d entries per client); use a
    fixed public q and :func:`thermometer_error_bound` then.

    Examples
    --------
    >>> exact_resolution([200, 300, 300])
    600
    """
    counts = [int(c) for c in np.asarray(sample_counts).ravel()]
    if not counts or min(counts) < 1:
        raise ParameterError(f"sample counts must be positive integers, got {sample_counts}")
    q = 1
    for c in counts:
        q = q * c // math.gcd(q, c)
        if q > limit:
            raise ParameterError(f"the least common multiple of the sample counts exceeds "
                                 f"limit={limit}; use a fixed resolution (weights rounded, "
                                 "error bounded by thermometer_error_bound)")
    return q

def thermometer_rows(means, weights, resolution: int = DEFAULT_RESOLUTION):
    """Client side: the two rows to protect, ``z_i`` (C q d) and ``t_i`` (C q), unnormalized.

    ``t`` has the first k_c of each class's q slots set to 1; ``z`` repeats the unit class
    mean in those slots. The server divides the squared distances by q.
    """
    means = np.asarray(means, dtype=np.float64)
    k = round_weights(weights, resolution)
    q = int(resolution)
    c, d = means.shape
    t = np.zeros((c, q))
    z = np.zeros((c, q, d))
    for cls in range(c):
        if k[cls]:
            norm = np.linalg.norm(means[cls])
            if norm == 0:
                raise InputError(f"class {cls} has weight but a zero mean embedding")
            t[cls, :k[cls]] = 1.0
            z[cls, :k[cls]] = means[cls] / norm
    return z.ravel(), t.ravel()

def _g(overlap):
    with np.errstate(divide="ignore"):
        return np.minimum(np.where(overlap > 0, overlap ** -ALPHA, np.inf), BETA)

def _combine(numerator, overlap) -> np.ndarray:
    """``D = N / (Omega + eps) g(Omega)``; inf where Omega = 0 (no shared class)."""
    overlap = np.asarray(overlap, dtype=np.float64)
    d = np.where(overlap > 0, numerator / (overlap + EPS) * _g(overlap), np.inf)
    np.fill_diagonal(d, 0.0)
    return d

def _fill(d, fill):
    if fill is False or fill is None:
        return d
    if fill is True or fill == "geodesic":
        return geodesic_fill(d)
    if fill == "paper":
        return fill_missing(d)
    raise ParameterError(f"fill must be 'geodesic', 'paper' or False, got {fill!r}")

def fmcl_distances(means, weights, *, fill="geodesic") -> np.ndarray:
    """Direct (plaintext) FMCL distance matrix from signatures (Algorithm 3).

    ``fill``: how pairs with no shared class are filled, ``"geodesic"`` (default,
    :func:`geodesic_fill`), ``"paper"`` (:func:`fill_missing`, ``D_big``) or ``False`` (inf).
    """
    means = np.asarray(means, dtype=np.float64)       # (n, C, d)
    weights = np.asarray(weights, dtype=np.float64)   # (n, C)
    norms = np.linalg.norm(means, axis=2)
    unit = np.divide(means, norms[..., None], out=np.zeros_like(means), where=norms[..., None] > 0)
    cos = np.einsum("icd,jcd->ijc", unit, unit)
    m = np.minimum(weights[:, None, :], weights[None, :, :])
    numerator = (m * (1.0 - cos)).sum(axis=2)
    d = _combine(numerator, m.sum(axis=2))
    return _fill(d, fill)

def fmcl_from_thermometer(d_z, d_t, resolution: int, *, fill="geodesic") -> np.ndarray:
    """FMCL distances from the two protected squared-distance matrices (unnormalized codes)."""
    q = float(resolution)
    dz = np.asarray(d_z, dtype=np.float64) / q
    dt = np.asarray(d_t, dtype=np.float64) / q
    numerator = np.maximum((dz - dt) / 2.0, 0.0)
    overlap = np.clip(1.0 - dt / 2.0, 0.0, 1.0)
    overlap[np.isclose(overlap, 0.0, atol=0.5 / q)] = 0.0  # overlaps are multiples of 1/q
    d = _combine(numerator, overlap)
    return _fill(d, fill)

def fill_missing(distances) -> np.ndarray:
    """The paper's fill: inf (no shared class) -> ``D_big = min(2 P95, P99)`` of finite off-diagonals."""
    d = np.array(distances, dtype=np.float64, copy=True)
    n = d.shape[0]
    off = ~np.eye(n, dtype=bool)
    finite = d[off & np.isfinite(d)]
    missing = off & ~np.isfinite(d)
    if missing.any():
        big = (min(2.0 * np.percentile(finite, 95), np.percentile(finite, 99))
               if finite.size else 1.0)
        d[missing] = big
    return d

def geodesic_fill(distances) -> np.ndarray:
    """omnifc's fill: inf (no shared class) -> the shortest path through the finite pairs.

    A missing pair is missing information, not a large distance: two clients of one domain
    with disjoint classes are each close to a third client that shares classes with both.
    Finite entries are kept; pairs with no path at all get the paper's ``D_big``.

    Examples
    --------
    >>> d = np.array([[0, 1, np.inf], [1, 0, 2], [np.inf, 2, 0]])
    >>> geodesic_fill(d).tolist()
    [[0.0, 1.0, 3.0], [1.0, 0.0, 2.0], [3.0, 2.0, 0.0]]
    """
    from scipy.sparse.csgraph import csgraph_from_dense, shortest_path

    d = np.array(distances, dtype=np.float64, copy=True)
    missing = ~np.isfinite(d)
    if not missing.any():
        return d
    # Sparse, with inf = no edge: every finite entry is an edge, zero-length ones too (a
    # dense csgraph reads every entry within 1e-8 of 0 as "no edge").
    graph = csgraph_from_dense(np.where(missing, np.inf, d), null_value=np.inf)
    paths = shortest_path(graph, method="D", directed=False)
    d[missing] = paths[missing]
    return fill_missing(d)

@dataclass
class FmclResult:
    """Server output: clusters, the chosen K, the K window, silhouettes, and the distances."""

    labels: np.ndarray
    n_clusters: int
    window: tuple
    silhouettes: dict
    distances: np.ndarray

def fmcl_server(distances, *, rule: str = DEFAULT_RULE,
                max_clusters: int = MAX_CLUSTERS, overlap=None) -> FmclResult:
    """Server side: cluster a filled FMCL distance matrix, choosing K by ``rule``.

    ``rule``: one of :data:`RULES` (FMCL's, with ``"additive"``). ``overlap`` (optional):
    the per-pair class overlap, for the overlap-stratified null of :func:`one_cluster_test`.
    """
    d = np.asarray(distances, dtype=np.float64)
    labels, k, window, scores = choose_clusters(d, rule=rule, max_clusters=max_clusters,
                                                overlap=overlap)
    return FmclResult(labels=labels, n_clusters=k, window=window, silhouettes=scores,
                      distances=d)


# -- exact class weights for any sample counts: the level-set thermometer -----------------

def sum_of_squares(value: int) -> tuple[int, ...]:
    """A few positive integers whose squares sum to ``value`` (non-increasing).

    Values up to 2^16: the fewest parts (Lagrange: at most 4), among those the smallest
    largest part. Above: the largest square first until the rest is below 2^16 (a handful of
    parts; each part is at most sqrt(value) either way).

    Examples
    --------
    >>> sum_of_squares(9), sum_of_squares(5), sum_of_squares(6), sum_of_squares(7)
    ((3,), (2, 1), (2, 1, 1), (2, 1, 1, 1))
    >>> sum_of_squares(2**40 + 5)
    (1048576, 2, 1)
    """
    value = int(value)
    if value < 1:
        raise ParameterError(f"value must be a positive integer, got {value}")
    head = []
    while value > _FEWEST_BELOW:
        root = math.isqrt(value)
        head.append(root)
        value -= root * root
    return tuple(head) + (_sum_of_squares(value) if value else ())


_FEWEST_BELOW = 2**16


@lru_cache(maxsize=None)
def _sum_of_squares(value: int) -> tuple[int, ...]:
    for parts in (1, 2, 3, 4):
        found = _squares(value, parts, math.isqrt(value))
        if found is not None:
            return found
    raise AssertionError("Lagrange's four-square theorem")  # pragma: no cover


def _squares(value: int, parts: int, largest: int):
    """``parts`` positive squares summing to ``value``, each part <= ``largest``, the largest
    part as small as possible (parts in non-increasing order); None if there is none."""
    if parts == 1:
        root = math.isqrt(value)
        return (root,) if root * root == value and root <= largest else None
    # the largest part a satisfies a^2 >= value / parts: try the smallest such a first
    low = math.isqrt((value - 1) // parts) + 1 if value > parts else 1
    for a in range(max(low, 1), min(largest, math.isqrt(value - (parts - 1))) + 1):
        rest = _squares(value - a * a, parts - 1, a)
        if rest is not None:
            return (a,) + rest
    return None


#: The largest lcm L of the sample counts :func:`level_code` accepts (derived, not tuned):
#: two clients' z codes have squared norms L 4^s, so their squared distance can reach
#: 4 L 4^s, and with the least scale s = 8 of the unit means this fits the protocol's
#: 63-bit integers only for L <= 2^45.
MAX_LEVEL_SCALE = 2**45

#: The most distinct sample counts' levels a code may have (sum of the distinct counts):
#: every level is a slot of every client's code (C * slots * d entries per client).
MAX_LEVELS = 2**20


@dataclass(frozen=True)
class LevelCode:
    """The public level-set thermometer of a federation's sample counts.

    Attributes
    ----------
    scale : int
        L = lcm of the sample counts: every class weight ``n_ic / n_i`` is ``v / L`` with
        ``v = n_ic (L / n_i)`` an integer.
    levels : tuple of int
        Every weight any client can have, in units of 1/L: the sorted union of
        ``k L / n_i`` (1 <= k <= n_i) over the clients.
    parts : tuple of tuple of int
        Slot s (level ``levels[s]``) carries the integers ``parts[s]`` whose squares sum to
        the gap ``levels[s] - levels[s-1]`` (:func:`sum_of_squares`).
    """

    scale: int
    levels: tuple
    parts: tuple

    @property
    def width(self) -> int:
        """Coordinates per class."""
        return sum(len(p) for p in self.parts)

    @property
    def largest_part(self) -> int:
        return max(max(p) for p in self.parts)

    def code(self, value: int) -> np.ndarray:
        """One class's code: the parts of every level <= value, zeros above (int64)."""
        out = np.zeros(self.width, dtype=np.int64)
        pos = 0
        for level, part in zip(self.levels, self.parts):
            if level > value:
                break
            out[pos:pos + len(part)] = part
            pos += len(part)
        return out

    @property
    def n_levels(self) -> int:
        """Slots per class (one per level)."""
        return len(self.levels)

    def accepts(self, total: int) -> bool:
        """Whether a client with ``total`` samples has a code (its weights are on the levels)."""
        return total >= 1 and self.scale % total == 0

    def class_code(self, total: int, count: int) -> np.ndarray:
        """The code of a class with ``count`` of the client's ``total`` samples."""
        if not count:
            return np.zeros(self.width, dtype=np.int64)
        return self.code(count * (self.scale // total))

    def pair_scale(self, total_i: int, total_j: int) -> int:
        """``<t_i, t_j> / Omega_ij`` for two clients: L for every pair."""
        return self.scale


def check_level_counts(sample_counts, *, lcm_limit: bool = True) -> tuple[list, int]:
    """The sample counts as ints and their lcm L, or :class:`ParameterError` past a limit.

    Cheap (no code is built): the distinct counts must sum to at most :data:`MAX_LEVELS`
    and (``lcm_limit``, the single code's limit) L must be at most :data:`MAX_LEVEL_SCALE`.
    """
    counts = [int(c) for c in np.asarray(sample_counts).ravel()]
    if not counts or min(counts) < 1:
        raise ParameterError(f"sample counts must be positive integers, got {sample_counts}")
    if sum(set(counts)) > MAX_LEVELS:
        raise ParameterError(
            f"the distinct sample counts sum to {sum(set(counts))}, above {MAX_LEVELS}: "
            "the level code would have that many slots per class; pass resolution=q for "
            "the rounded thermometer")
    scale = math.lcm(*counts)
    if lcm_limit and scale > MAX_LEVEL_SCALE:
        raise ParameterError(
            f"the least common multiple of the sample counts is {scale} (2^"
            f"{math.log2(scale):.1f}), above 2^45: exact "
            "class weights would need squared distances beyond the protocol's 63-bit "
            "integers; pass resolution=q for the rounded thermometer (error bounded by "
            "thermometer_error_bound) or let clients report counts on a common grid")
    return counts, scale


def level_code(sample_counts) -> LevelCode:
    """The public level code of a federation (from the clients' sample counts alone).

    The inner product of two class codes is ``min(v_i, v_j)`` for any two values on the
    level set: the slots active in both are the levels up to the smaller value, and each
    contributes its gap. The Gram matrix ``min(a, b)`` of |levels| distinct positive values
    has rank |levels|, so no exact inner-product encoding is shorter than one slot per level.

    Examples
    --------
    >>> code = level_code([2, 3])
    >>> code.scale, code.levels
    (6, (2, 3, 4, 6))
    >>> int(code.code(3) @ code.code(4)), int(code.code(6) @ code.code(6))
    (3, 6)
    """
    counts, scale = check_level_counts(sample_counts)
    levels = sorted({k * (scale // n) for n in set(counts) for k in range(1, n + 1)})
    gaps = [b - a for a, b in zip([0] + levels[:-1], levels)]
    return LevelCode(scale=scale, levels=tuple(levels),
                     parts=tuple(sum_of_squares(g) for g in gaps))


def group_counts(sample_counts, largest_lcm: int) -> tuple:
    """The distinct sample counts in groups of consecutive values, each group's lcm at most
    ``largest_lcm`` (greedy in increasing order; a count above it is a group of its own).

    Examples
    --------
    >>> group_counts([101, 103, 107, 101, 109], 101 * 103)
    ((101, 103), (107,), (109,))
    """
    groups, current, lcm = [], [], 1
    for n in sorted({int(c) for c in np.asarray(sample_counts).ravel()}):
        joined = math.lcm(lcm, n)
        if current and joined > largest_lcm:
            groups.append(tuple(current))
            current, joined = [], n
        current.append(n)
        lcm = joined
    groups.append(tuple(current))
    return tuple(groups)


@dataclass(frozen=True)
class GroupedLevelCode:
    """The level code of a federation whose sample counts' lcm is too large for one code.

    The distinct sample counts are split into groups (:func:`group_counts`); block
    ``(g, h)`` (``g <= h``) is the :class:`LevelCode` of the counts of groups g and h together,
    of scale ``L_gh = lcm(G_g u G_h)``. A client of group g fills every block containing g
    with its class code (zeros elsewhere). Two clients of groups g != h share exactly one
    block, so ``<t_i, t_j> = L_gh Omega_ij``; two clients of one group g share every block
    containing g, so ``<t_i, t_j> = F_g Omega_ij`` with ``F_g = sum_k L_gk``. Both factors are
    public (:meth:`pair_scale`): the coordinator recovers Omega_ij exactly, and every integer
    stays below the blocks' own scales instead of the lcm of all the counts.

    Attributes
    ----------
    groups : tuple of tuple of int
        The distinct sample counts of each group.
    blocks : tuple of ((int, int), LevelCode)
        Each block's pair of groups and its level code, in the order of the coordinates.
    """

    groups: tuple
    blocks: tuple

    @property
    def width(self) -> int:
        """Coordinates per class."""
        return sum(code.width for _, code in self.blocks)

    @property
    def largest_part(self) -> int:
        return max(code.largest_part for _, code in self.blocks)

    @property
    def n_levels(self) -> int:
        """Slots per class (one per level of every block)."""
        return sum(code.n_levels for _, code in self.blocks)

    @property
    def scale(self) -> int:
        """The common denominator of every client's weights: the lcm of all the counts."""
        return math.lcm(*(n for group in self.groups for n in group))

    def group_of(self, total: int):
        """The index of the group holding ``total`` (None when no group does)."""
        for g, group in enumerate(self.groups):
            if int(total) in group:
                return g
        return None

    def accepts(self, total: int) -> bool:
        return self.group_of(total) is not None

    def class_code(self, total: int, count: int) -> np.ndarray:
        """The code of a class with ``count`` of the client's ``total`` samples."""
        g = self.group_of(total)
        return np.concatenate([code.class_code(total, count) if g in pair
                               else np.zeros(code.width, dtype=np.int64)
                               for pair, code in self.blocks])

    def pair_scale(self, total_i: int, total_j: int) -> int:
        """``<t_i, t_j> / Omega_ij``: ``L_gh`` for groups g != h, ``F_g`` within group g."""
        g, h = self.group_of(total_i), self.group_of(total_j)
        if g != h:
            return next(code.scale for pair, code in self.blocks if pair == (min(g, h), max(g, h)))
        return sum(code.scale for pair, code in self.blocks if g in pair)


def grouped_level_code(sample_counts, largest_lcm: int) -> GroupedLevelCode:
    """The :class:`GroupedLevelCode` of the counts with groups of lcm at most ``largest_lcm``.

    Every block's scale is at most ``largest_lcm^2``; each block is checked by
    :func:`level_code` (``ParameterError`` past its limits) and the slots of all blocks
    together by :data:`MAX_LEVELS`.

    Examples
    --------
    >>> code = grouped_level_code([2, 3, 5], 6)      # groups (2, 3) and (5,)
    >>> code.groups, [(pair, c.scale) for pair, c in code.blocks]
    (((2, 3), (5,)), [((0, 0), 6), ((0, 1), 30), ((1, 1), 5)])
    >>> a, b = code.class_code(2, 1), code.class_code(5, 3)    # weights 1/2 and 3/5
    >>> int(a @ b), code.pair_scale(2, 5)                      # min = 1/2 = 15/30
    (15, 30)
    >>> int(a @ code.class_code(3, 2)), code.pair_scale(2, 3)  # min(1/2, 2/3) (6 + 30)
    (18, 36)
    """
    counts = check_level_counts(sample_counts, lcm_limit=False)[0]
    groups = group_counts(counts, int(largest_lcm))
    sums = [sum(group) for group in groups]
    slots = sum(sums[g] + (sums[h] if h != g else 0)
                for g in range(len(groups)) for h in range(g, len(groups)))
    if slots > MAX_LEVELS:
        raise ParameterError(
            f"the grouped level code would have up to {slots} slots per class, above "
            f"{MAX_LEVELS}; pass resolution=q for the rounded thermometer")
    blocks = tuple(((g, h), level_code(groups[g] + (groups[h] if h != g else ())))
                   for g in range(len(groups)) for h in range(g, len(groups)))
    return GroupedLevelCode(groups=groups, blocks=blocks)


def class_counts(labels, n_classes: int) -> np.ndarray:
    """Client side: the number of samples of each class (int64, length ``n_classes``)."""
    y = np.asarray(labels)
    return np.bincount(y, minlength=n_classes)[:n_classes].astype(np.int64)


def level_rows(unit_ints, counts, code: LevelCode):
    """Client side: the two integer rows to protect, ``z_i`` (C W d) and ``t_i`` (C W).

    ``unit_ints`` (C, d): the client's unit class means quantized to integers (multiples of
    2^-s times 2^s); ``counts`` (C,): its class counts. Class c's value is
    ``v_ic = n_ic L / n_i``; ``t`` holds its level code, ``z`` the code times the mean.
    Then ``<t_i, t_j> = L Omega_ij`` and ``<z_i, z_j> = L 4^s sum_c m_c cos_q,c`` exactly
    (``code`` a :class:`LevelCode`; for a :class:`GroupedLevelCode` L is the pair's
    ``code.pair_scale(n_i, n_j)``).
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total < 1 or not code.accepts(total):
        raise ParameterError(f"the client's sample count {total} is not one of the counts "
                             "the level code was built from")
    t_parts, z_parts = [], []
    for cls, n in enumerate(counts.tolist()):
        t = code.class_code(total, n)
        t_parts.append(t)
        z_parts.append(np.outer(t, np.asarray(unit_ints[cls], dtype=np.int64)).ravel())
    return np.concatenate(z_parts), np.concatenate(t_parts)

"""The embeddings of :class:`~omnifc.flower.ClusteredFedAvg`: what is clustered, and how.

An :class:`Embedding` names the rows each node's party contributes (one part, or FMCL's
two parts ``z`` and ``t``), how the parts' secure D become client-level distances
(:func:`client_distances` for one part: the squared distances between the clients' row
centroids) and the paper's server algorithm that clusters them. :data:`EMBEDDINGS` is
the registry by adapter name, :func:`embedding` builds one. Moved here unchanged from
:mod:`omnifc.flower._strategy` (issue 20), which re-exports its public names.

>>> sorted(EMBEDDINGS) == sorted(["raw", "clove", "client2vec", "flux", "fmcl"])
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from finite_field import ParameterError, ProtocolError

__all__ = ["Embedding", "EMBEDDINGS", "embedding", "client_distances", "fmcl_rows",
           "fmcl_dims", "fmcl_exact_rows", "fmcl_exact_parameters", "FMCL_PARTS"]

logger = logging.getLogger(__name__)

def client_distances(distances, rows) -> np.ndarray:
    """Squared distances between the clients' row centroids, from the row distances alone.

    ``rows``: how many consecutive rows of ``distances`` each client owns (roster order).
    With ``A``, ``B`` the row sets of two clients,
    ``||c_A - c_B||^2 = mean_{a in A, b in B} D_ab - W_A - W_B`` with
    ``W_A = sum_{a, a' in A} D_aa' / (2 |A|^2)``; clients of one row each give D itself.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [2.0], [5.0]])          # client 0 owns rows 0-1, client 1 row 2
    >>> client_distances((x - x.T) ** 2, [2, 1]).tolist()
    [[0.0, 16.0], [16.0, 0.0]]
    """
    d = np.asarray(distances, dtype=np.float64)
    counts = [int(r) for r in rows]
    if any(c < 1 for c in counts) or sum(counts) != d.shape[0]:
        raise ParameterError(f"rows per client must be >= 1 and sum to {d.shape[0]}, "
                             f"got {counts}")
    if all(c == 1 for c in counts):
        return d.copy()
    bounds = np.cumsum([0] + counts)
    blocks = [slice(bounds[i], bounds[i + 1]) for i in range(len(counts))]
    within = np.array([d[b, b].sum() / (2.0 * (b.stop - b.start) ** 2) for b in blocks])
    out = np.empty((len(counts), len(counts)))
    for i, a in enumerate(blocks):
        for j, b in enumerate(blocks):
            out[i, j] = d[a, b].mean() - within[i] - within[j]
    np.fill_diagonal(out, 0.0)
    return np.maximum(out, 0.0)


def _nearest_centroid(distances, labels) -> np.ndarray:
    from ..adapters.flux import assign_new_clients

    return assign_new_clients(distances, labels)


def _one_session(outcomes: dict) -> np.ndarray:
    (outcome,) = outcomes.values()
    return client_distances(outcome.values, outcome.rows)


@dataclass(frozen=True)
class Embedding:
    """The server side of an adapter's client embedding.

    An embedding is a list of **parts**, each one secure session over its own rows (one
    part, unnamed, for raw samples, CLoVE, Client2Vec, FLUX; two for FMCL); ``distances``
    combines the parts' outcomes into the client-level distances, on which
    ``cluster(D_clients) -> labels`` (the paper's server algorithm) runs.
    ``assign(D, labels) -> labels`` places newcomers (D over the clustered clients first,
    then the newcomers); FLUX's nearest-centroid rule by default. The client side is the
    ``rows`` function each node gives :func:`add_party` (the adapter's embedding of its local
    data; a dict ``{part: rows}`` for a multi-part embedding).

    Attributes
    ----------
    name : str
    cluster, assign : callable
    parts : tuple of str
        The named parts (empty: one session, whose rows are the embedding).
    combine : callable, optional
        ``combine({part: Outcome}) -> D_clients`` (roster order); for one part by default
        the squared distances of the clients' row centroids (:func:`client_distances`).
    combine_newcomers : callable, optional
        The same for the newcomer session (``ClusteredFedAvg(newcomer_workflow=...)``),
        when its rows differ from the clustering's (FLUX's split embedding: three rows per
        client to cluster, the label-free prefix to assign); ``combine`` when None.
    cluster_outcomes : callable, optional
        ``cluster_outcomes({part: Outcome}) -> (D_clients, labels)``: the client-level
        distances and the clustering from the sessions' outcomes themselves, for a rule
        that reads more than the client-level D (FLUX's split embedding: its second test
        reads the split D, and both come from one embedding of it); ``combine`` then
        ``cluster`` when None (:meth:`cluster_session`).

    Examples
    --------
    >>> import numpy as np
    >>> e = Embedding("mine", cluster=lambda d: (d[0] > 1).astype(int))
    >>> e.parts, e.cluster(np.array([[0.0, 4.0], [4.0, 0.0]])).tolist()
    ((), [0, 1])
    """

    name: str
    cluster: Callable
    assign: Callable = _nearest_centroid
    parts: tuple = ()
    combine: Callable | None = None
    combine_newcomers: Callable | None = None
    cluster_outcomes: Callable | None = None

    def cluster_session(self, outcomes: dict) -> tuple[np.ndarray, np.ndarray]:
        """``(D_clients, labels)`` of a clustering session's ``{part: Outcome}``:
        ``cluster_outcomes(outcomes)`` when the embedding has one, else :meth:`distances`
        and ``cluster`` of them.

        >>> from types import SimpleNamespace
        >>> e = Embedding("mine", cluster=lambda d: (d[0] > 1).astype(int))
        >>> out = SimpleNamespace(rows=[1, 1], values=np.array([[0.0, 4.0], [4.0, 0.0]]))
        >>> d, labels = e.cluster_session({None: out})
        >>> d.tolist(), labels.tolist()
        ([[0.0, 4.0], [4.0, 0.0]], [0, 1])
        """
        if self.cluster_outcomes is None:
            distances = self.distances(outcomes)             # checks the parts
            return distances, np.asarray(self.cluster(distances))
        self._check_parts(outcomes)
        distances, labels = self.cluster_outcomes(outcomes)
        return np.asarray(distances), np.asarray(labels)

    def distances(self, outcomes: dict, *, newcomers: bool = False) -> np.ndarray:
        """The client-level distances from ``{part: Outcome}`` (``{None: Outcome}`` for a
        one-part embedding); ``newcomers=True``: of the newcomer session."""
        self._check_parts(outcomes)
        combine = (self.combine_newcomers if newcomers else None) or self.combine
        return (combine or _one_session)(outcomes)

    def _check_parts(self, outcomes: dict) -> None:
        """ParameterError unless ``outcomes`` holds exactly one session per part."""
        expected = set(self.parts) if self.parts else {None}
        if set(outcomes) != expected:
            raise ParameterError(f"embedding {self.name!r} combines the parts "
                                 f"{sorted(map(str, expected))}, got sessions for "
                                 f"{sorted(map(str, outcomes))}")


def _needs_k(name, n_clusters):
    if n_clusters is None or int(n_clusters) < 1:
        raise ParameterError(f"embedding {name!r} needs n_clusters >= 1, got {n_clusters!r}")
    return int(n_clusters)


def _raw(n_clusters=None, random_state=0, method="kmeans", **options):
    from ..adapters import raw

    k = _needs_k("raw", n_clusters)
    return lambda d: raw.cluster_samples(d, method=method, n_clusters=k,
                                         random_state=random_state, **options)


def _clove(n_clusters=None, random_state=0):
    from ..adapters import clove

    k = _needs_k("clove", n_clusters)
    return lambda d: clove.cluster_clients(d, k, random_state=random_state)


def _client2vec(n_clusters=None, random_state=0):
    from ..adapters import client2vec

    k = _needs_k("client2vec", n_clusters)
    return lambda d: client2vec.cluster_indices(d, k, random_state=random_state)


#: The normalizations a Flower FLUX embedding runs: one session of every node's
#: ``flux.split_rows`` (``run_flux``'s default) or of its descriptor alone. The others need
#: a secure sum (``"whitened"``) or a session per block.
FLUX_NORMALIZATIONS = ("split", "none")


def _rows_per_client(outcome, expected: int, message: str) -> list:
    """The session's rows per client (roster order), refused (``ProtocolError``) unless
    every client sent exactly ``expected``; ``message`` is formatted with the counts
    (``{rows}``) and the roster (``{names}``)."""
    rows = [int(r) for r in outcome.rows]
    if any(r != expected for r in rows):
        raise ProtocolError(message.format(rows=rows, names=outcome.party_names))
    return rows


def _flux(n_clusters=None, *, normalization=None, k_rule=None, k_alpha=None,
          k_references=None, split_groups=None, second_test=None, random_state=0,
          **options):
    """``run_flux``'s server side. ``normalization="split"`` (default, ``run_flux``'s): every
    node sends :func:`omnifc.adapters.flux.split_rows` (``split_groups + 1`` rows, with
    ``groups=split_groups``; ``run_flux``'s, ``flux.DEFAULT_SPLIT_GROUPS`` = 10, by
    default), the server whitens the
    descriptors by the noise it reads from that D alone; ``"none"``: one descriptor row per
    node (``**flux.PREVIOUS_DEFAULT``: the pipeline before issue 24's fourteenth pass). K by
    :func:`~omnifc.adapters.flux.cluster_clients` with ``run_flux``'s rule and level
    (:func:`~omnifc.adapters.flux.run_k_level`); on the split D with ``run_flux``'s second
    test (``second_test``, :func:`~omnifc.adapters.flux.cluster_split_clients`: the
    spiked-null test where the rule answers one cluster among 4 to 6 clients). Newcomers
    send one row each (their :func:`~omnifc.adapters.flux.prefix_row`) and join the nearest
    centroid of that D."""
    from ..adapters import flux
    from ..adapters.flux._split_half import split_groups_for

    if n_clusters is not None:
        raise ParameterError("FLUX chooses K itself (flux.cluster_clients); n_clusters must "
                             f"be None, got {n_clusters!r}")
    normalization = flux.DEFAULT_RECIPE["normalization"] if normalization is None \
        else normalization
    if normalization not in FLUX_NORMALIZATIONS:
        raise ParameterError(f"a Flower FLUX embedding runs normalization "
                             f"{FLUX_NORMALIZATIONS}, got {normalization!r}")
    k_rule = flux.DEFAULT_RECIPE["k_rule"] if k_rule is None else k_rule
    k_alpha, k_references = flux.run_k_level(k_rule, k_alpha, k_references, **options)
    groups = split_groups_for(normalization, split_groups)
    second = flux.second_test_for(second_test, normalization, k_rule)

    def cluster(d):
        return np.asarray(flux.cluster_clients(d, k_rule=k_rule, k_alpha=k_alpha,
                                               k_references=k_references,
                                               random_state=random_state, **options).labels)

    def split_outcome(outcomes):
        (outcome,) = outcomes.values()
        _rows_per_client(outcome, groups + 1, f"FLUX's split embedding (flux.split_rows, "
                         f"groups={groups}) needs {groups + 1} row(s) per client, got "
                         "{rows} (roster order)")
        return outcome

    def split(outcomes):
        outcome = split_outcome(outcomes)
        return flux.split_whitened_distances(outcome.values, len(outcome.rows),
                                             groups=groups, order="client")

    def cluster_split(outcomes):                 # one embedding of the split D for both
        outcome = split_outcome(outcomes)
        whitened, found = flux.cluster_split_clients(
            outcome.values, len(outcome.rows), groups=groups, order="client", k_rule=k_rule,
            k_alpha=k_alpha, k_references=k_references, second_test=second,
            random_state=random_state, **options)
        return whitened, np.asarray(found.labels)

    def prefix(outcomes):
        (outcome,) = outcomes.values()
        _rows_per_client(outcome, 1, "FLUX's newcomer session (flux.prefix_row) needs 1 "
                         "row(s) per client, got {rows} (roster order)")
        return _one_session(outcomes)

    if normalization == "none":
        return {"cluster": cluster}
    return {"cluster": cluster, "combine": split, "combine_newcomers": prefix,
            "cluster_outcomes": cluster_split}


#: FMCL's two parts: the class-weighted unit means ``z`` and the thermometer code ``t``.
FMCL_PARTS = ("z", "t")


def fmcl_rows(means, weights, resolution: int) -> dict:
    """A node's FMCL embedding (the client half of ``embedding("fmcl", ...)``).

    ``means`` (C, d): the node's class mean embeddings; ``weights`` (C,): its class weights
    ``n_c / n``; ``resolution``: the public q of every node. Returns ``{"z": rows, "t":
    rows}``: FMCL's thermometer rows (:func:`omnifc.adapters.fmcl.thermometer_rows`), each
    followed by the public all-zero anchor row that turns the squared distances into exact
    inner products. Return it from the node's ``rows(context)``.

    Examples
    --------
    >>> import numpy as np
    >>> parts = fmcl_rows(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, 0.5]), 2)
    >>> parts["t"].tolist()
    [[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    >>> parts["z"].shape
    (2, 8)
    """
    from ..adapters import fmcl

    z, t = fmcl.thermometer_rows(np.asarray(means, dtype=np.float64),
                                 np.asarray(weights, dtype=np.float64), int(resolution))
    return {"z": np.stack([z, np.zeros_like(z)]), "t": np.stack([t, np.zeros_like(t)])}


def _exact_code(sample_counts, n_classes: int, dim: int):
    """FMCL's exact code of the public sample counts and the means' scale bits ``(code, s)``
    (:func:`omnifc.adapters.fmcl.exact_code`: one level code when it fits, else the grouped
    level code), from the counts as a set (every node and the server build the same)."""
    from ..adapters import fmcl

    counts = sorted(int(c) for c in (sample_counts.values() if isinstance(sample_counts, dict)
                                     else sample_counts))
    return fmcl.exact_code(counts, int(n_classes), int(dim))


def fmcl_exact_rows(means, counts, sample_counts) -> dict:
    """A node's FMCL embedding with its class weights carried **exactly** (the client half
    of ``embedding("fmcl", sample_counts=...)``): FMCL's level-set rows
    (:func:`omnifc.adapters.fmcl.level_rows` on :func:`~omnifc.adapters.fmcl.exact_code` of
    the public sample counts: one level code, or the grouped level code when the counts'
    lcm is too large for one), each followed by the public all-zero anchor row.

    ``means`` (C, d): the node's class mean embeddings; ``counts`` (C,): its class counts
    (their sum, its sample count, must be one of ``sample_counts``); ``sample_counts``: every
    node's sample count (public, as FedAvg's weights; a list or a dict party -> count).
    The sessions' parameters are :func:`fmcl_exact_parameters`'s.

    Examples
    --------
    >>> import numpy as np
    >>> parts = fmcl_exact_rows(np.array([[1.0, 0.0], [0.0, 2.0]]), [1, 2], [3, 4])
    >>> parts["t"].shape, parts["z"].shape, bool(parts["t"][1].any())   # row, zero anchor
    ((2, 24), (2, 48), False)
    >>> int(parts["t"][0] @ parts["t"][0])   # |t|^2 = L = lcm(3, 4): weights 4/12 + 8/12
    12
    """
    from ..adapters.fmcl._paper import level_rows
    from ..adapters.fmcl._secure import _unit_ints

    means = np.asarray(means, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    if means.ndim != 2 or counts.shape != means.shape[:1]:
        raise ParameterError(f"expected means (C, d) and counts (C,), got {means.shape} and "
                             f"{counts.shape}")
    code, bits = _exact_code(sample_counts, means.shape[0], means.shape[1])
    z, t = level_rows(_unit_ints(means[None], counts[None], bits)[0], counts, code)
    z, t = z.astype(np.float64), t.astype(np.float64)
    return {"z": np.stack([z, np.zeros_like(z)]), "t": np.stack([t, np.zeros_like(t)])}


def fmcl_exact_parameters(sample_counts, n_classes: int, dim: int) -> dict:
    """The session parameters of each part of the exact FMCL embedding (public, from the
    sample counts alone): ``{"z": {...}, "t": {...}}`` with ``dim``, ``bound``,
    ``scale_bits`` (0: the rows are integers) and, for ``t``, ``nonnegative``; pass each to
    :class:`protocols.SessionParameters` (or the session config of that part).

    >>> fmcl_exact_parameters([3, 4], 2, 2)
    {'z': {'dim': 48, 'bound': 65536.0, 'scale_bits': 0}, 't': {'dim': 24, 'bound': 1.0, 'scale_bits': 0, 'nonnegative': True}}
    """
    code, bits = _exact_code(sample_counts, n_classes, dim)
    width = int(n_classes) * code.width
    return {"z": {"dim": width * int(dim), "bound": float(code.largest_part * 2**bits),
                  "scale_bits": 0},
            "t": {"dim": width, "bound": float(code.largest_part), "scale_bits": 0,
                  "nonnegative": True}}


def fmcl_dims(n_classes: int, dim: int, resolution: int) -> dict:
    """The session ``dim`` of each FMCL part: ``{"z": C q d, "t": C q}`` (bound 1.0 both).

    >>> fmcl_dims(3, 4, 10)
    {'z': 120, 't': 30}
    """
    return {"z": int(n_classes) * int(resolution) * int(dim),
            "t": int(n_classes) * int(resolution)}


def _anchored(outcome, part: str, exact: bool = False) -> np.ndarray:
    """The (n+1) x (n+1) distances of the clients' rows and one anchor (anchor last), after
    checking that every client sent two rows whose second (the anchor) is the same point
    (``exact``: the exact integer distances instead of the decoded values)."""
    rows = _rows_per_client(outcome, 2, f"FMCL part {part!r}: every client sends its row and "
                            "the zero anchor (2 rows), got {rows} rows (roster {names})")
    integer = np.asarray(outcome.integer)
    anchors = np.arange(1, 2 * len(rows), 2)
    if np.any(integer[np.ix_(anchors, anchors)] != 0):
        raise ProtocolError(f"FMCL part {part!r}: the clients' anchor rows are not one point "
                            "(every anchor must be the public all-zero row)")
    order = np.concatenate([np.arange(0, 2 * len(rows), 2), anchors[:1]])
    return (integer if exact else np.asarray(outcome.values))[np.ix_(order, order)]


def _mean_distance_assign(distances, labels) -> np.ndarray:
    """Each newcomer joins the cluster of the least mean distance to its members (for a
    distance that is not a squared Euclidean one, where no centroid exists)."""
    d = np.asarray(distances, dtype=np.float64)
    labels = np.asarray(labels)
    n = len(labels)
    clusters = sorted(set(labels.tolist()))
    scores = np.stack([d[n:, :n][:, labels == c].mean(axis=1) for c in clusters], axis=1)
    return np.array(clusters)[np.argmin(scores, axis=1)]


def _fmcl_exact_combine(sample_counts: dict, n_classes: int, dim: int, fill):
    """``combine`` of the exact FMCL embedding: the two parts' exact integer Gram matrices
    (from the anchored integer distances), divided by each pair's public scale and
    evaluated in exact fractions, as :func:`omnifc.adapters.fmcl.exact_fmcl_distances`."""
    from ..adapters.fmcl._secure import _anchored_grams, _exact_combine

    counts = {str(k): int(v) for k, v in sample_counts.items()}
    code, bits = _exact_code(counts, n_classes, dim)
    expected = fmcl_exact_parameters(counts, n_classes, dim)

    def combine(outcomes):
        names = list(outcomes["z"].party_names)
        if list(outcomes["t"].party_names) != names:
            raise ProtocolError("FMCL's z and t sessions have different rosters")
        missing = [n for n in names if n not in counts]
        if missing:
            raise ProtocolError(f"FMCL's exact embedding has no public sample count for "
                                f"{missing}")
        for part in FMCL_PARTS:
            got = int(outcomes[part].parameters["dim"])
            if got != expected[part]["dim"]:
                raise ProtocolError(f"FMCL part {part!r}: the session's dim is {got}, the "
                                    f"exact code of these sample counts needs "
                                    f"{expected[part]['dim']}")
        grams = [_anchored_grams(_anchored(outcomes[part], part, exact=True))
                 for part in FMCL_PARTS]
        totals = [counts[n] for n in names]
        scales = [[code.pair_scale(a, b) for b in totals] for a in totals]
        return _exact_combine(grams[0], grams[1], scales, bits, fill)[0]

    return combine


def _fmcl(resolution=None, n_clusters=None, rule=None, max_clusters=None, fill="geodesic",
          sample_counts=None, n_classes=None, dim=None):
    from ..adapters import fmcl

    if sample_counts is not None:  # exact class weights (the adapter's default path)
        if resolution is not None:
            raise ParameterError("embedding 'fmcl': give sample_counts (exact weights) or "
                                 "resolution (rounded weights), not both")
        if not isinstance(sample_counts, dict) or n_classes is None or dim is None:
            raise ParameterError("embedding 'fmcl' with exact weights needs sample_counts "
                                 "(a dict party -> count), n_classes and dim")
        combine = _fmcl_exact_combine(sample_counts, int(n_classes), int(dim), fill)
    else:
        if resolution is None or int(resolution) < 1:
            raise ParameterError("embedding 'fmcl' needs the nodes' public sample counts "
                                 "(sample_counts=, exact) or resolution q >= 1 (rounded), "
                                 f"got resolution={resolution!r}")
        q = int(resolution)

        def combine(outcomes):
            return fmcl.fmcl_from_anchored(_anchored(outcomes["z"], "z"),
                                           _anchored(outcomes["t"], "t"), q, fill=fill)

    if n_clusters is not None:
        from .._clustering import average_linkage_labels

        if rule is not None:
            raise ParameterError("embedding 'fmcl': give n_clusters or a K rule, not both")
        k = _needs_k("fmcl", n_clusters)
        cluster = lambda d: np.asarray(average_linkage_labels(d, k))  # noqa: E731
    else:
        if rule == "additive_mix":       # refused when the embedding is built, not after a round
            raise ParameterError("embedding 'fmcl': rule='additive_mix' needs the class "
                                 "overlap, which this embedding does not pass")
        options = {"rule": rule} if rule is not None else {}
        if max_clusters is not None:
            options["max_clusters"] = int(max_clusters)
        cluster = lambda d: np.asarray(fmcl.fmcl_server(d, **options).labels)  # noqa: E731
    return {"cluster": cluster, "combine": combine, "parts": FMCL_PARTS,
            "assign": _mean_distance_assign}


#: Server algorithms by adapter name (``embedding(name, ...)``). FMCL's distance needs two
#: reconstructions (the thermometer-weighted class means ``z`` and the thermometer code
#: ``t``, each with a zero anchor row: :func:`fmcl_rows`), so its embedding has two parts.
EMBEDDINGS = {"raw": _raw, "clove": _clove, "client2vec": _client2vec, "flux": _flux,
              "fmcl": _fmcl}


def embedding(name: str, **options) -> Embedding:
    """The :class:`Embedding` of adapter ``name`` (``raw``, ``clove``, ``client2vec``,
    ``flux``, ``fmcl``), its server algorithm configured by ``options`` (``n_clusters``,
    ``random_state``; FLUX: ``normalization`` (``"split"``, the default: the nodes send
    :func:`omnifc.adapters.flux.split_rows`; ``"none"``: their descriptor), ``k_rule``,
    ``k_alpha``, ``k_references`` (``run_flux``'s defaults), ``eps_rule``...; FMCL:
    ``sample_counts`` (party -> public sample count), ``n_classes`` and ``dim`` for exact
    class weights (the nodes send :func:`fmcl_exact_rows`), or ``resolution`` (a public q:
    weights rounded to 1/q, the nodes send :func:`fmcl_rows`), ``n_clusters`` (average
    linkage) or ``rule`` (K chosen by
    :func:`omnifc.adapters.fmcl.fmcl_server`, its default rule when neither is given),
    ``max_clusters``, ``fill``; newcomers join the cluster of least mean FMCL distance).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> embedding("clove", n_clusters=2).cluster((x - x.T) ** 2).tolist()
    [0, 0, 1, 1]
    """
    if name not in EMBEDDINGS:
        raise ParameterError(f"embedding must be one of {sorted(EMBEDDINGS)}, got {name!r}")
    made = EMBEDDINGS[name](**options)
    if isinstance(made, dict):  # a multi-part embedding
        return Embedding(name, **made)
    return Embedding(name, made)

"""``secure_distance_matrix``: the whole OmniFC protocol behind one call.

The computation runs through the share-exchange protocol of :mod:`protocols` (the same
state machines in memory and over gRPC), so the library call, ``omnifc simulate``, the
tests and a real deployment exercise the same code.
"""

from __future__ import annotations

import logging

import numpy as np

from finite_field import InputError, ParameterError, check_adversaries, make_plan
from protocols import DEFAULT_MAX_PAIRS

from ._clipping import MAX_CLIPPED, check_clipping, clip_report
from ._result import DistanceResult, PhaseStats

__all__ = ["secure_distance_matrix", "normalize_parties", "session_keywords",
           "NOT_KEYWORDS"]

logger = logging.getLogger(__name__)

#: The session parameters of the table (:data:`protocols.PARAMETERS`) that
#: :func:`secure_distance_matrix` does not take, and why (a call that names one gets a
#: TypeError with the reason). Every other row of the table is taken: the common ones as
#: the keywords written out in the signature (with the table's defaults; a test checks),
#: the rest by name through ``**options``, so a new row of the table is a parameter of this
#: function without an edit here.
NOT_KEYWORDS = {
    "dim": "taken from the parties' rows",
    "kind": "always a distance session (omnifc.secure_sum is the sum)",
    "rows": "sum sessions only",
    "max_rows_per_party": "the caller holds every row: no cap to announce",
    "max_rows_total": "the caller holds every row: no cap to announce",
    "alphas": "the default points (pairwise distinct, checked by the plan)",
    "betas": "the default points (pairwise distinct, checked by the plan)",
    "layout_rows": "given as landmarks= (layout 'landmarks') or pairs= (layout 'pairs')",
    "max_landmarks": "the caller holds every row: the table's cap bounds landmarks=",
}


def session_keywords() -> tuple:
    """The session parameters :func:`secure_distance_matrix` takes, in the table's order:
    the keywords of its signature, then the rows it takes by name through ``**options``."""
    from protocols import PARAMETERS

    return tuple(p.name for p in PARAMETERS if p.name not in NOT_KEYWORDS)


def _session_options(options: dict) -> dict:
    """``**options`` of :func:`secure_distance_matrix`, checked against the table: only its
    rows that are neither keywords of the signature nor refused (:data:`NOT_KEYWORDS`)."""
    import inspect

    written = inspect.signature(secure_distance_matrix).parameters
    taken = set(session_keywords()) - set(written)
    for name in options:
        if name in NOT_KEYWORDS:
            raise TypeError(f"secure_distance_matrix() does not take {name!r}: "
                            f"{NOT_KEYWORDS[name]}")
        if name not in taken:
            raise TypeError(f"secure_distance_matrix() got an unexpected keyword argument "
                            f"{name!r} (the session parameters it takes: "
                            f"{', '.join(session_keywords())})")
    return dict(options)


def normalize_parties(parties) -> tuple[list[str], list[np.ndarray]]:
    """Accept ``{name: array}`` or a sequence of arrays; check shapes before anything leaves.

    Returns the party names and their float64 (n_i, d) arrays. Every party must hold at
    least one row, and all parties the same number of features.
    """
    if getattr(parties, "ndim", 3) <= 2 or hasattr(parties, "toarray"):  # one array/matrix
        raise InputError(
            f"got one array of shape {getattr(parties, 'shape', None)}: pass the parties' "
            "rows as a list (or dict name -> array) of per-party 2-D arrays, e.g. "
            "[rows_a, rows_b, rows_c]; one array would make every row its own party")
    if isinstance(parties, dict):
        names = [str(k) for k in parties]
        arrays = list(parties.values())
    else:
        arrays = list(parties)
        names = [f"party-{i}" for i in range(len(arrays))]
    if not arrays:
        raise ParameterError("at least one party is needed, got none")
    if len(set(names)) != len(names):
        raise ParameterError(f"party names must be unique, got {names}")
    out = []
    for name, x in zip(names, arrays):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            # One row; an empty 1-D array (e.g. []) holds no rows, not one row of no features.
            x = x.reshape(1, -1) if x.size else x.reshape(0, 0)
        if x.ndim != 2:
            raise InputError(f"data must be a 2-D array (rows x features), got shape {x.shape}",
                             party=name)
        if x.shape[0] == 0:
            raise InputError("holds no rows (empty party)", party=name)
        out.append(x)
    dim = out[0].shape[1]
    for name, x in zip(names, out):
        if x.shape[1] != dim:
            raise InputError(
                f"d must be equal for all parties; sent d={x.shape[1]}, expected {dim} "
                f"(from party {names[0]!r})", party=name)
    return names, out


def secure_distance_matrix(parties, *, bound: float, scale_bits: int = 16, segments: int = 1,
                           noise_segments: int = 1, nonnegative: bool = False,
                           clip: str = "clip", max_clipped: float = MAX_CLIPPED,
                           primes=None, responders=None,
                           mode: str = "masked", transport: str = "memory",
                           deadline: float = 60.0, cluster=None,
                           insecure: bool = False, out=None,
                           memory_budget=None, integrity: str = "detect",
                           adversaries: int | None = None,
                           mask_degree: int = 0, layout: str = "full", landmarks=None,
                           n_landmarks: int = 0, pairs=None,
                           max_pairs: int = DEFAULT_MAX_PAIRS, **options) -> DistanceResult:
    """Exact pairwise squared distances of all parties' rows, computed on Lagrange shares.

    Each party quantizes its rows with the public ``bound`` and ``scale_bits``, encodes them
    with ``noise_segments`` random segments (any that many parties learn nothing), and
    sends one share to every other party, encrypted end to end. Each party computes the
    squared distances of its shares and uploads them masked (``mode="masked"``): the
    coordinator learns only the sum, which is the exact squared-distance matrix of the
    quantized rows (recombined over several primes when one is not enough).

    Parameters
    ----------
    parties : dict of str to array-like, or sequence of array-like
        Each party's rows, shape (n_i, d).
    bound : float
        Public clip bound R: features are clipped to [-R, R] ([0, R] if ``nonnegative``).
    scale_bits : int
        q: features are rounded to multiples of 2^-q.
    segments, noise_segments : int
        l and t; at least 2l + 2t - 1 parties are needed.
    nonnegative, clip, primes
        See :func:`finite_field.make_plan`.
    max_clipped : float
        Largest fraction of a party's entries that may lie outside the bound (and be
        clipped) before the call refuses with :class:`InputError`; 1.0 accepts any amount.
        Per-party counts and fractions are in the result's ``clipped`` and
        ``clipped_fraction``.
    responders : sequence of str or int, optional
        The parties whose results are combined (the set B, at least 2l + 2t - 1); all by
        default.
    mode : {"masked", "transparent"}
        ``"transparent"`` uploads raw per-party evaluations: the coordinator then learns
        every per-segment distance matrix (with l > 1, more than D). Opt-in only.
    transport : {"memory", "grpc"}
        ``"memory"`` runs the protocol's state machines in this process; ``"grpc"`` starts
        one local process per party and runs the session over gRPC with mutual TLS on
        loopback (certificates made on the fly in a temporary folder, removed afterwards).
    deadline : float
        Seconds each phase may take over gRPC before the missing parties count as dropped.
    cluster : callable, optional
        ``cluster(distances) -> labels`` run by the coordinator; labels in ``result.labels``.
    insecure : bool
        gRPC without TLS (logs a warning). Never needed on loopback.
    out, memory_budget : optional
        Where the coordinator accumulates the result, tile by tile as the uploads arrive:
        one preallocated integer matrix (a :class:`~omnifc.DistanceStore`), in RAM below
        ``memory_budget`` bytes (default 2 GiB), else (or with ``out``, a new ``.npy``
        path) memory-mapped on disk. D is written once; ``result.store`` is that matrix,
        ``distances`` a lazy float view and ``omnifc.cluster`` streams it when needed. A
        failed session deletes the file. An ``out`` ending in ``.zarr`` writes a Zarr v3
        store instead (``omnifc[dask]``; docs/scale.md, "A result that Dask reads"):
        ``dask.array.from_zarr(out, component="integer")`` reads it. With neither given
        and a small result (four dense float64 n x n copies fit 2 GiB, n <= 8,192),
        ``distances`` and ``integer_distances`` are plain float64 and int64 arrays as
        before.

    integrity : {"detect", "correct", "off"}
        Reed-Solomon checks on the uploads D is decoded from, whenever there are
        r = |B| - (2l+2t-1) >= 1 redundant responders (docs/protocol.md, "Integrity"):
        ``"detect"`` (default) excludes the parties found deviating and reruns, or raises
        :class:`~omnifc.DeviationError` naming them; ``"correct"`` corrects located errors
        and names the parties in ``result.parameters["deviations"]``; ``"off"`` skips
        the checks. With r = 0 nothing can be checked (a WARNING says so).
    adversaries : int, optional
        A, the most parties that may deviate together. Against any A of them the result
        is exactly D or the call raises :class:`~omnifc.DeviationError`, and nobody
        outside them is named (docs/integrity.md, "Declared adversaries"). "detect"
        needs A <= r, "correct" A <= floor(r/2); default: that largest A (for the
        ``responders`` when given: a round needs 2l+2t-1+A of them); 0: best effort.
    mask_degree : int
        Mask partners of each party: 0 (default) every other party; k its neighbours in a
        k-connected Harary graph, so the masks withstand a coordinator colluding with up
        to k - 1 parties at a fraction of the keystream (docs/protocol.md, "Mask graph").
        k must be at least ``noise_segments + 1`` (and at most m - 1):
        1 <= k <= ``noise_segments`` raises :class:`ParameterError` before anything runs,
        because the coordinator chooses the responders, can leave r = 0 (no integrity
        checks), and then the masks alone protect each party's evaluation.
    layout, landmarks, n_landmarks, pairs : str, sequence, int, sequence
        ``layout`` in {"full", "landmarks", "pairs"}: which entries of D to compute (docs/protocol.md, "Layouts"): all of them
        (default); ``"landmarks"``: D[:, L], every row against the landmark rows
        ``landmarks`` (global row indices, parties' rows concatenated in order), or
        ``n_landmarks`` rows drawn from the session's public randomness; ``"pairs"``: the
        pairs ``pairs`` ((i, j) global rows). The coordinator learns only those entries;
        the result holds them (``layout``, ``landmarks``, ``pairs``), in memory (``out``
        is for the full layout).
    max_pairs : int
        The public cap on the number of pairs of a ``"pairs"`` layout (default and at most
        2^19: the list travels in the roster); a longer list is refused before anything
        runs.
    **options
        Any other session parameter of the table (:data:`protocols.PARAMETERS`, listed in
        docs/deployment.md) by name, e.g. ``chunk_bytes=1 << 18``, with the table's default
        and checks; the ones this function cannot take (:data:`NOT_KEYWORDS`, e.g.
        ``dim``: taken from the rows) raise TypeError with the reason.

    Returns
    -------
    DistanceResult

    Examples
    --------
    >>> import numpy as np
    >>> import omnifc
    >>> parties = [np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), np.array([[1.0, 1.0]])]
    >>> result = omnifc.secure_distance_matrix(parties, bound=8.0, scale_bits=8)
    >>> result.distances[0].tolist()
    [0.0, 25.0, 2.0]
    """
    from protocols import SessionParameters
    from protocols import check_distance_mask_degree

    given = locals() | _session_options(options)
    session = {name: given[name] for name in session_keywords()  # by name, from the table
               if name in given}
    # The weakest masks a session allows, before any data is read (SessionParameters
    # refuses the same below).
    check_distance_mask_degree(mask_degree, noise_segments)
    names, arrays = normalize_parties(parties)
    # Validate every public parameter (and each party's data) before anything runs.
    plan = make_plan(arrays[0].shape[1], bound=bound, scale_bits=scale_bits, segments=segments,
                     noise_segments=noise_segments, parties=len(arrays),
                     nonnegative=nonnegative, clip=clip, primes=primes)
    responder_idx = _resolve_responders(responders, names)
    # A defaults to the largest the first round's responders allow (all parties, or the
    # responders given); an explicit A is checked against all m parties
    adversaries = check_adversaries(len(responder_idx) if adversaries is None else len(arrays),
                                    segments, noise_segments, adversaries, integrity)
    clipped = {name: plan.quantizer.quantize(x, party=name).clipped
               for name, x in zip(names, arrays)}
    report = clip_report(dict(zip(names, arrays)), bound=bound, nonnegative=nonnegative)
    check_clipping(report, bound=bound, nonnegative=nonnegative, max_clipped=max_clipped,
                   clip=clip)
    session.update(primes=plan.primes, adversaries=adversaries,  # as the plan resolved them
                   **_layout_parameters(layout, landmarks, n_landmarks, pairs))
    parameters = SessionParameters(dim=plan.dim, **session)
    chosen = None if responders is None else [names[j] for j in responder_idx]
    outcome = _run(dict(zip(names, arrays)), parameters, transport=transport,
                   responders=chosen, cluster=cluster, deadline=deadline, insecure=insecure,
                   out=out, memory_budget=memory_budget)
    owners = np.concatenate([np.full(x.shape[0], i) for i, x in enumerate(arrays)])
    described = outcome.parameters | {"party_names": names, "transport": transport,
                                      "integrity_status": outcome.integrity,
                                      "deviations": list(outcome.deviations),
                                      "undelivered": dict(outcome.undelivered)}
    for name, reason in outcome.undelivered.items():  # D is whole; that party's copy is not
        logger.warning("party %r did not receive the result: %s", name, reason)
    clipped_fraction = {n: r[2] for n, r in report.items()}
    if outcome.layout != "full":  # only the layout's entries, held in memory
        return DistanceResult(distances=outcome.values, integer_distances=outcome.integer,
                              party_names=names, owners=owners, parameters=described,
                              stats=_stats(outcome), clipped=clipped, labels=outcome.labels,
                              clipped_fraction=clipped_fraction, layout=outcome.layout,
                              landmarks=outcome.landmarks, pairs=outcome.pairs)
    store = outcome.store  # the coordinator wrote D once, here
    store.parameters = described
    extra = dict(stats=_stats(outcome), clipped=clipped, labels=outcome.labels,
                 clipped_fraction=clipped_fraction)
    if out is None and memory_budget is None and not store.on_disk and \
            store.distances.fits_in_memory(copies=4):
        # small and nothing asked for: plain arrays, as callers of this function expect
        result = DistanceResult(distances=outcome.values, integer_distances=outcome.integer,
                                party_names=names, owners=owners, parameters=described,
                                **extra)
    else:
        result = DistanceResult.from_store(store, party_names=names, owners=owners,
                                           parameters=described, **extra)
    logger.info("reconstructed %d x %d distances from %d parties (%s, %s)",
                store.n, store.n, len(names), mode, transport)
    return result


def _layout_parameters(layout, landmarks, n_landmarks, pairs) -> dict:
    """The session's layout fields from the call's arguments (each for its own layout)."""
    if landmarks is not None and layout != "landmarks":
        raise ParameterError(f"landmarks= is for layout='landmarks', got layout={layout!r}")
    if pairs is not None and layout != "pairs":
        raise ParameterError(f"pairs= is for layout='pairs', got layout={layout!r}")
    rows = landmarks if layout == "landmarks" else pairs
    return {"layout": layout, "layout_rows": rows, "n_landmarks": n_landmarks}


def _run(party_data: dict, parameters, *, transport: str, responders, cluster, deadline,
         insecure: bool = False, out=None, memory_budget=None):
    """One protocol session over the chosen transport; returns the coordinator's Outcome."""
    if transport == "memory":
        from protocols import run_memory_session

        outcome, _ = run_memory_session(party_data, parameters, responders=responders,
                                        cluster=cluster, out=out,
                                        memory_budget=memory_budget)
        return outcome
    if transport == "grpc":
        from protocols import run_local_grpc_session

        return run_local_grpc_session(party_data, parameters, responders=responders,
                                      cluster=cluster, deadline=deadline, insecure=insecure,
                                      out=out, memory_budget=memory_budget)
    raise ParameterError(f"transport must be 'memory' or 'grpc', got {transport!r}")


def _stats(outcome) -> dict:
    return {phase: PhaseStats(seconds=float(seconds), bytes_sent=int(nbytes))
            for phase, (seconds, nbytes) in outcome.stats.items()}


def _resolve_responders(responders, names: list[str]) -> list[int]:
    if responders is None:
        return list(range(len(names)))
    out = []
    for r in responders:
        if isinstance(r, (int, np.integer)) and not isinstance(r, bool):
            if not 0 <= r < len(names):
                raise ParameterError(f"responder index must be in [0, {len(names)}), got {r}")
            out.append(int(r))
        elif r in names:
            out.append(names.index(r))
        else:
            raise ParameterError(f"unknown responder {r!r}; parties are {names}")
    return sorted(out)

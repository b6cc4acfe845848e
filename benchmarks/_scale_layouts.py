"""bench_scale --layout landmarks|pairs: one layout session over gRPC, its exactness on sampled
entries, its clustering against the exact references, and the table."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _scale_data import (CLUSTERS, DIM, MALLOC_ENV, SCALE_BITS, _gb, _PartyRows, _run_child,
                         _run_parties, make_data, write_data)
from _scale_watch import _PhaseWatch

#: Lloyd's tolerance of the landmark k-means (scikit-learn's default; the library's
#: default 0 runs until no label changes, which only adds iterations here).
KMEANS_TOL = 1e-4


def _layout_session(rows, parameters, *, parties: int, deadline: float, cluster=None) -> dict:
    """One session of a layout over mutual-TLS gRPC, this process the coordinator: the
    outcome, per phase the seconds and bytes (the coordinator's counters) and the peak
    anonymous memory of the coordinator and of the largest party process, and each
    party's timings."""
    from protocols._config import Deadlines
    from protocols._grpc_local import LocalSession

    deadlines = Deadlines(join=600.0, shares=deadline, evaluation=deadline, result=600.0)
    os.environ["NUMBA_NUM_THREADS"] = "1"  # m party processes share 2 cores
    with LocalSession(_PartyRows(rows, parties), parameters, deadline=deadlines) as local:
        with _PhaseWatch() as watch:
            server = local.server(cluster=cluster, memory_budget=0).start()

            def on_phase(phase, elapsed):
                watch.phase = phase

            watch.phase = "join"
            outcome, seconds, stats = _run_parties(local, server, watch.add, on_phase)
    memory = watch.summary()
    phases = {k: [float(v[0]), int(v[1])] + memory.get(k, [0, 0, 0.0, 0.0])
              for k, v in outcome.stats.items()}
    return {"outcome": outcome, "seconds": seconds, "phases": phases,
            "coordinator_cpu_seconds": sum(v[2] for v in memory.values()),
            "coordinator_peak_anon": max(v[0] for v in memory.values()),
            "party_peak_anon": max(v[1] for v in memory.values()),
            "party_cpu_seconds": statistics.median(
                v for k, v in watch.cpu.items() if k != "coordinator"),
            "party_evaluation_seconds": statistics.median(
                s["evaluation_seconds"] for s in stats.values() if s),
            "party_kernel_seconds": statistics.median(
                s["kernel_seconds"] for s in stats.values() if s)}


def _layout_parameters(n: int, segments: int, mask_degree: int, **layout):
    from protocols import SessionParameters
    return SessionParameters(dim=DIM, bound=1.0, scale_bits=SCALE_BITS, segments=segments,
                             noise_segments=1, nonnegative=True, mode="masked",
                             mask_degree=mask_degree, max_rows_per_party=n,
                             max_rows_total=n, **layout)


def _check_landmarks(rows, integer, landmarks) -> int:
    """D[:, L] against int64 arithmetic on the plaintext rows, on sampled entries."""
    rng = np.random.default_rng(1)
    n, width = integer.shape
    checked = 0
    for _ in range(4):
        r = np.sort(rng.choice(n, size=min(n, 256), replace=False))
        c = np.sort(rng.choice(width, size=min(width, 48), replace=False))
        diff = np.asarray(rows[r], dtype=np.int64)[:, None, :] - \
            np.asarray(rows[landmarks[c]], dtype=np.int64)[None, :, :]
        exact = (diff * diff).sum(-1)
        if not np.array_equal(np.asarray(integer[np.ix_(r, c)]), exact):
            raise SystemExit("spot check FAILED: D[:, L] differs from the plaintext distances")
        checked += exact.size
    return checked


def _landmark_result(outcome):
    """The landmarks session's D[:, L] as the clustering callback gets it (lazy floats)."""
    from protocols._layout_plans import LandmarkDistances
    return LandmarkDistances(outcome.integer, None, outcome.landmarks, SCALE_BITS)


def _session_figures(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "outcome"}


def child_landmarks(n: int, landmarks: int, parties: int, segments: int, mask_degree: int,
                    deadline: float, n_components: int, n_init: int) -> dict:
    """A landmarks session with landmark k-means as the coordinator's clustering (timed
    inside the session: it runs in the decode phase, before the parties get labels)."""
    from sklearn.metrics import adjusted_rand_score

    from omnifc._clustering._landmarks import landmark_kmeans

    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="omnifc-bench-rows-"))
    rows, planted = write_data(n, scratch / "rows.npy")  # memory-mapped, not anonymous
    generate = time.perf_counter() - start
    clustering = {}

    def cluster(result):
        started = time.perf_counter()
        details = landmark_kmeans(result, n_clusters=CLUSTERS, random_state=0,
                                  n_init=n_init, n_components=n_components,
                                  tol=KMEANS_TOL)
        clustering["seconds"] = time.perf_counter() - started
        return details["labels"]

    parameters = _layout_parameters(n, segments, mask_degree, layout="landmarks",
                                    n_landmarks=landmarks)
    run = _layout_session(rows, parameters, parties=parties, deadline=deadline,
                          cluster=cluster)
    outcome = run["outcome"]
    checked = _check_landmarks(rows, outcome.integer, outcome.landmarks)
    labels = np.asarray(outcome.labels)
    del rows
    shutil.rmtree(scratch, ignore_errors=True)
    return {**_session_figures(run), "generate_seconds": generate,
            "kmeans_seconds": clustering["seconds"], "checked_entries": checked,
            "dtype": str(outcome.integer.dtype), "landmarks": len(outcome.landmarks),
            "ari_planted": float(adjusted_rand_score(planted, labels)),
            "labels": labels.tolist()}


def child_pairs(n: int, landmarks: int, parties: int, segments: int, mask_degree: int,
                deadline: float, k: int, candidates: int, max_pairs: int,
                n_components: int) -> dict:
    """The exact k-NN graph: a landmarks session, candidates from the landmark embedding,
    then the pairs in sessions of at most ``max_pairs`` each (omnifc._secure_knn)."""
    from omnifc._clustering._neighbours import candidate_pairs, knn_from_entries
    from omnifc._secure_knn import pair_rounds

    scratch = Path(tempfile.mkdtemp(prefix="omnifc-bench-rows-"))
    rows, _ = write_data(n, scratch / "rows.npy")  # memory-mapped, not anonymous
    first = _layout_session(rows, _layout_parameters(n, segments, mask_degree,
                                                     layout="landmarks",
                                                     n_landmarks=landmarks),
                            parties=parties, deadline=deadline)
    outcome = first["outcome"]
    checked = _check_landmarks(rows, outcome.integer, outcome.landmarks)
    started = time.perf_counter()
    pairs = candidate_pairs(_landmark_result(outcome), candidates=candidates,
                            n_components=n_components or None)
    candidate_seconds = time.perf_counter() - started
    rounds, values = [], []
    for chunk in pair_rounds(pairs, max_pairs):
        run = _layout_session(rows, _layout_parameters(
            n, segments, mask_degree, layout="pairs", layout_rows=chunk.ravel(),
            max_pairs=max_pairs), parties=parties, deadline=deadline)
        got = run["outcome"]
        if not np.array_equal(got.pairs, chunk):
            raise SystemExit("the pairs session computed other pairs than were listed")
        diff = np.asarray(rows[chunk[:256, 0]], dtype=np.int64) - \
            np.asarray(rows[chunk[:256, 1]], dtype=np.int64)
        if not np.array_equal(np.asarray(got.integer[:256]), (diff * diff).sum(-1)):
            raise SystemExit("spot check FAILED: pair distances differ from the plaintext")
        checked += min(256, len(chunk))
        values.append(np.asarray(got.integer, dtype=np.int64))
        rounds.append(_session_figures(run))
    started = time.perf_counter()
    graph = knn_from_entries(n, outcome.landmarks, outcome.integer, pairs,
                             np.concatenate(values) if values else np.empty(0, np.int64), k,
                             scale_bits=SCALE_BITS)
    graph_seconds = time.perf_counter() - started
    exact = exact_knn(rows, k)
    del rows
    shutil.rmtree(scratch, ignore_errors=True)
    recall = float(np.mean([np.intersect1d(a, b).size for a, b in
                            zip(graph.indices, exact)]) / k)
    return {"landmark_session": _session_figures(first), "pair_sessions": rounds,
            "pairs": int(len(pairs)), "candidate_seconds": candidate_seconds,
            "graph_seconds": graph_seconds, "recall": recall, "checked_entries": checked, "k": k,
            "landmarks": len(outcome.landmarks)}


def exact_knn(rows, k: int, block: int = 512) -> np.ndarray:
    """The exact k-NN graph of the quantized rows (ties: lower row first), by float64 GEMM
    on the small integers: every value below 2^53, so the distances are exact."""
    x = rows.astype(np.float64)
    norms = np.einsum("ij,ij->i", x, x)
    n = x.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for a in range(0, n, block):
        b = min(n, a + block)
        d = norms[a:b, None] + norms[None, :] - 2.0 * (x[a:b] @ x.T)
        d[np.arange(b - a), np.arange(a, b)] = np.inf  # not the row itself
        part = np.argpartition(d, k, axis=1)[:, :k + 1]
        for i in range(b - a):  # (distance, index) order among the k + 1 nearest
            cand = part[i]
            order = np.lexsort((cand, d[i, cand]))
            kth = d[i, cand[order[k - 1]]]
            ties = np.flatnonzero(d[i] == kth)  # every row tied with the k-th
            pool = np.union1d(cand[d[i, cand] < kth], ties)
            pool = pool[np.lexsort((pool, d[i, pool]))]
            out[a + i] = pool[:k]
    return out


def child_reference(n: int, n_init: int) -> dict:
    """k-means on the exact D, from the plaintext rows: classical MDS of the exact D is the
    centred rows themselves (D is Euclidean), so Lloyd on the quantized rows is k-means on
    the exact D; scikit-learn's KMeans (k-means++, ``n_init``), float32 rows."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    rows, planted = make_data(n)
    x = rows.astype(np.float32)
    del rows
    start = time.perf_counter()
    model = KMeans(n_clusters=CLUSTERS, n_init=n_init, random_state=0).fit(x)
    return {"seconds": time.perf_counter() - start, "labels": model.labels_.tolist(),
            "ari_planted": float(adjusted_rand_score(planted, model.labels_))}


def bench_layout(n, args) -> dict:
    """One n of ``--layout landmarks|pairs``: the secure run, and (unless
    ``--no-reference``) the exact references from the plaintext rows."""
    common = (args.parties, args.segments, args.mask_degree, args.deadline)
    if args.layout == "landmarks":
        run = _run_child("landmarks", n, "-", args.tile_bytes, args.landmarks, *common,
                         args.components, args.n_init, timeout=args.timeout)
        labels = np.asarray(run.pop("labels"))
        session = run["seconds"]
        result = {"n": n, "layout": "landmarks", "session_seconds": session, **run}
        if not args.no_reference:
            from sklearn.metrics import adjusted_rand_score
            ref = _run_child("reference", n, "-", args.tile_bytes, args.n_init,
                             timeout=args.timeout)
            result |= {"reference_seconds": ref["seconds"],
                       "reference_ari_planted": ref["ari_planted"],
                       "ari_exact": float(adjusted_rand_score(ref["labels"], labels))}
        return result
    run = _run_child("pairs", n, "-", args.tile_bytes, args.landmarks, *common, args.k,
                     args.candidates, args.max_pairs, args.components, timeout=args.timeout)
    sessions = [run["landmark_session"], *run["pair_sessions"]]
    return {"n": n, "layout": "pairs", **run,
            "session_seconds": sum(s["seconds"] for s in sessions)
            + run["candidate_seconds"] + run["graph_seconds"],
            "coordinator_peak_anon": max(s["coordinator_peak_anon"] for s in sessions),
            "party_peak_anon": max(s["party_peak_anon"] for s in sessions)}


def print_layout_results(results) -> None:
    from _common import print_grid, wrapped

    print(wrapped(f"malloc settings of the session processes: "
                  f"{MALLOC_ENV[0] or 'glibc defaults'}"))
    print(wrapped("Layouts over gRPC with mutual TLS, every party its own process. Per "
                  "session and phase: wall seconds, bytes the coordinator sent and received, "
                  "peak anonymous memory (RssAnon sampled every 0.1 s) of the coordinator "
                  "and of the largest party process, process CPU seconds of the coordinator "
                  "and of the median party; the decode phase includes the coordinator's "
                  "k-means:"))
    for r in results:
        sessions = [("landmarks", r)] if r["layout"] == "landmarks" else \
            [("landmarks", r["landmark_session"])] + \
            [(f"pairs {i + 1}", s) for i, s in enumerate(r["pair_sessions"])]
        rows = []
        for name, s in sessions:
            for phase in ("join", "shares", "evaluation", "decode"):
                if phase not in s["phases"]:
                    continue
                sec, sent, coord, party, coord_cpu, party_cpu = s["phases"][phase]
                rows.append([f"{r['n']:,}", name, phase, f"{sec:.1f} s", _gb(sent),
                             f"{coord / 1e9:.2f} / {party / 1e9:.2f} GB",
                             f"{coord_cpu:.1f} / {party_cpu:.1f} s"])
            rows.append([f"{r['n']:,}", name, "whole", f"{s['seconds']:.1f} s", "", "", ""])
        print_grid(["n", "session", "phase", "wall", "bytes", "anon coord/party",
                    "CPU coord/party"], rows)
        if r["layout"] == "landmarks":
            line = (f"  n = {r['n']:,}, L = {r['landmarks']}: whole session "
                    f"{r['session_seconds']:.1f} s including landmark k-means "
                    f"{r['kmeans_seconds']:.1f} s (data generation {r['generate_seconds']:.1f}"
                    f" s, not counted); D[:, L] exact on {r['checked_entries']:,} sampled "
                    f"entries ({r['dtype']}); ARI vs planted labels {r['ari_planted']:.4f}")
            if "ari_exact" in r:
                line += (f"; ARI vs k-means on the exact D (Lloyd on the plaintext rows, "
                         f"{r['reference_seconds']:.1f} s) {r['ari_exact']:.4f} (that "
                         f"reference vs planted: {r['reference_ari_planted']:.4f})")
        else:
            line = (f"  n = {r['n']:,}, L = {r['landmarks']}: {r['pairs']:,} candidate pairs "
                    f"in {len(r['pair_sessions'])} pairs session(s); whole "
                    f"{r['session_seconds']:.1f} s (candidates {r['candidate_seconds']:.1f} s,"
                    f" graph {r['graph_seconds']:.1f} s); recall of the exact {r['k']}-NN graph "
                    f"(from the plaintext rows) {r['recall']:.4f}; {r['checked_entries']:,} "
                    "entries spot-checked exact")
        print(wrapped(line))

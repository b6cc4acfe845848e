"""``omnifc serve``: run the coordinator of a session described by a session config."""

from __future__ import annotations

import logging
from pathlib import Path
import sys

import numpy as np

from ._session_io import (add_output_arguments, add_tls_refusal, output_dir,
                          clustering_progress, phase_progress, refuse_insecure_flag, save_folder,
                          warn_if_reused)

#: ``omnifc serve``'s exit status when the session finished and its results are saved, but
#: some party's result did not reach it (0: every party got its result; 1: the session
#: failed and nothing was saved; 2: a usage error).
EXIT_UNDELIVERED = 3

logger = logging.getLogger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the coordinator of a session (gRPC, mutual TLS)",
        description="Serve one session: wait for every party of the session config, relay "
                    "their encrypted shares, sum their masked evaluations into the exact "
                    "squared-distance matrix, run the requested clustering and send each "
                    "party the labels of its own rows. The distance matrix and the labels "
                    "are saved (distances.npy, labels.npy, with summary.json saying who "
                    "received their result) and their paths printed. Exit status: 0 every "
                    "party received its result; 1 the session failed (nothing saved); "
                    f"{EXIT_UNDELIVERED} the session finished and its results are saved, but "
                    "some party's result did not reach it (named on stderr).")
    parser.add_argument("--config", required=True, help="session config (TOML)")
    parser.add_argument("--keys", metavar="DIR",
                        help="your keys folder from 'omnifc keygen --coordinator' (default: "
                             "the key file named in the config)")
    parser.add_argument("--address", help="host:port to listen on (default: the config's "
                                          "coordinator address; port 0 = any free port)")
    parser.add_argument("--port-file", help="write the port actually bound to this file")
    add_output_arguments(parser, what="distances.npy and labels.npy")
    parser.add_argument("--data-out", help="save the squared-distance matrix here instead: "
                                           ".npy (float64), or .zarr (a full-layout "
                                           "session's exact integer matrix as a Zarr v3 "
                                           "store that dask.array.from_zarr reads; needs "
                                           "omnifc[dask])")
    parser.add_argument("--labels-out", help="save the cluster labels of all rows here "
                                             "instead (.npy)")
    parser.add_argument("--no-cluster", action="store_true",
                        help="do not cluster; parties receive no labels")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    parser.add_argument("--resume", action="store_true",
                        help="continue the session whose coordinator process died during "
                             "the evaluation, from the journal it kept in the result folder "
                             "(--out, or the one folder under ./omnifc-results/ holding "
                             "it); start it within reconnect_grace seconds of the death, "
                             "with the same config and address: the parties are reconnecting")
    add_tls_refusal(parser)
    parser.set_defaults(handler=run)


def clustering_callback(config, on_detail=None):
    """The coordinator's clustering, from the config's [clustering] table; its progress
    inside the long steps goes to ``on_detail(text)`` (:func:`clustering_progress`)."""
    from .. import cluster

    method, n_clusters = config.clustering.method, config.clustering.n_clusters

    def clustering(distances):
        with clustering_progress(on_detail):
            return cluster(distances, method, n_clusters, random_state=0)
    return clustering


def save_distances(distances, path) -> None:
    """Save squared distances as a float64 ``.npy``, one row block at a time when they are
    a lazy view of the coordinator's store: never a second n x n array in memory.

    >>> import tempfile, os, numpy as np
    >>> from omnifc import DistanceStore
    >>> store = DistanceStore.from_integer(np.array([[0, 4], [4, 0]]), scale_bits=1)
    >>> path = os.path.join(tempfile.mkdtemp(), "d.npy")
    >>> save_distances(store.distances, path); np.load(path).tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    from .._store import as_tiled

    tiled = as_tiled(distances)
    if tiled is None:
        np.save(path, np.asarray(distances, dtype=np.float64))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=tiled.shape)
    for start, stop, block in tiled.tiles():
        out[start:stop] = block
    out.flush()
    del out


def check_data_out(path, layout: str) -> None:
    """Refuse, before the session starts, a ``--data-out`` that cannot be written: a
    suffix other than ``.npy`` or ``.zarr``, or ``.zarr`` for a landmarks or pairs session
    (its result is not a square matrix).

    >>> check_data_out("D.zarr", "full"); check_data_out("D.npy", "pairs")
    >>> check_data_out("D.zarr", "pairs")
    Traceback (most recent call last):
    ...
    finite_field._errors.ParameterError: --data-out D.zarr: a Zarr result holds the full layout's n x n matrix; this session's layout is 'pairs' (save it as .npy)
    """
    from finite_field import ParameterError

    suffix = Path(path).suffix
    if suffix not in (".npy", ".zarr"):
        raise ParameterError(f"--data-out {path}: the file must end in .npy or .zarr, got "
                             f"{suffix or 'no suffix'!r}")
    if suffix == ".zarr" and layout != "full":
        raise ParameterError(f"--data-out {path}: a Zarr result holds the full layout's n x n "
                             f"matrix; this session's layout is {layout!r} (save it as .npy)")
    if suffix == ".zarr":
        from protocols import require_zarr

        require_zarr()  # refused now, with the install hint, not after the session


def save_result(outcome, path, distance_bound=None) -> None:
    """Save a session's distances at ``path``: a ``.zarr`` path gets the exact integer
    matrix as a Zarr v3 store (:meth:`DistanceStore.from_integer`, its metadata written
    last), anything else the float64 ``.npy`` of :func:`save_distances`."""
    if Path(path).suffix == ".zarr":
        from protocols import DistanceStore

        store = outcome.store
        DistanceStore.from_integer(store.integer, scale_bits=store.scale_bits,
                                   distance_bound=distance_bound, out=path,
                                   tile_bytes=store.tile_bytes, parameters=store.parameters)
        return
    distances = outcome.store.distances if outcome.store is not None else outcome.values
    save_distances(distances, path)


def save_layout_rows(outcome, distances_path) -> Path | None:
    """For a landmarks or pairs session: save its rows (the landmark row of each column,
    or the (i, j) of each entry) beside the distances, as ``<name>.landmarks.npy`` or
    ``<name>.pairs.npy``; returns that path (None for the full matrix).

    >>> import tempfile, os, numpy as np
    >>> from types import SimpleNamespace
    >>> outcome = SimpleNamespace(layout="landmarks", landmarks=np.array([4, 0]), pairs=None)
    >>> path = save_layout_rows(outcome, os.path.join(tempfile.mkdtemp(), "distances.npy"))
    >>> path.name, np.load(path).tolist()
    ('distances.landmarks.npy', [4, 0])
    """
    layout = getattr(outcome, "layout", "full")
    if layout == "full":
        return None
    path = Path(distances_path)
    path = path.with_name(f"{path.stem}.{layout}.npy")
    np.save(path, outcome.landmarks if layout == "landmarks" else outcome.pairs)
    return path


def coordinator_bound(coordinator):
    """The largest possible distance of the coordinator's session (its coding plan's
    ``distance_bound``), or None before it has a plan."""
    return getattr(coordinator.plan, "distance_bound", None)


def format_stats(stats) -> str:
    return "\n".join(f"  {phase:<11} {seconds:8.3f} s {nbytes / 1e6:10.3f} MB"
                     for phase, (seconds, nbytes) in stats.items())


def run(args) -> int:
    from finite_field import ParameterError
    from protocols import CoordinatorServer, WORK_DIR
    from protocols import coordinator_credentials

    from .cmd_session import announce_session, load_config

    refuse_insecure_flag(args)
    config = load_config(args.config, keys=args.keys, who="coordinator")
    if args.data_out:
        check_data_out(args.data_out, config.parameters.layout)
    announce_session(config, "the coordinator")
    display = {}  # the phase display, once it exists (the clustering runs long after)

    def on_clustering(detail):
        if "on_phase" in display:
            display["on_phase"]("decode", coordinator.round, f"clustering: {detail}")
    cluster = None if args.no_cluster else clustering_callback(config, on_clustering)
    credentials = None if config.insecure else coordinator_credentials(config)
    results = ["summary.json"] + ([] if args.data_out else ["distances.npy"])
    if cluster is not None and not args.labels_out:
        results.append("labels.npy")
    if not args.resume and args.out and \
            (Path(args.out) / WORK_DIR / "session.journal").exists():
        raise ParameterError(f"{args.out} holds the journal of a session whose coordinator "
                             "stopped during the evaluation: continue it with --resume, or "
                             "move the folder away")
    folder = resume_folder(args, config) if args.resume else output_dir(
        args, config, results + [WORK_DIR], explicit=(
            args.data_out, args.labels_out if cluster is not None else None))
    coordinator, journal = journaled_coordinator(config, folder, cluster, resume=args.resume)
    try:
        server = CoordinatorServer(
            coordinator, config.deadlines, address=args.address or config.coordinator,
            credentials=credentials, insecure=config.insecure, config=config).start()
    except BaseException:
        if args.resume:  # e.g. the address is taken: the journal stays for another try
            coordinator.keep_files()
        else:
            end_journal(journal, folder)
        raise
    if args.port_file:
        with open(args.port_file, "w") as handle:
            handle.write(f"{server.port}\n")
    warn_if_reused(config, "serve")
    print(f"coordinator of session {config.session_id} listening on port {server.port} "
          f"({'INSECURE, no TLS' if config.insecure else 'mutual TLS'}); waiting for "
          f"{', '.join(config.party_names)}", flush=True)
    if journal is not None:
        print(f"journal in {folder / WORK_DIR}: if this process dies during the evaluation, "
              f"'omnifc serve --config {args.config} --out {folder} --resume' continues the "
              f"session (within reconnect_grace = "
              f"{coordinator.reconnect_grace:g} s)", flush=True)
    bar, on_phase = phase_progress(disable=args.no_progress, desc="serve")
    display["on_phase"] = on_phase
    outcome = None
    try:
        outcome = server.run(on_phase=on_phase, on_progress=lambda phase, detail: on_phase(
            phase, server.coordinator.round, detail))
    finally:
        bar.close()
        server.stop()
        if outcome is None:  # ended here (failed, interrupted): nothing to resume
            end_journal(journal, folder)
    distances = outcome.store.distances if outcome.store is not None else outcome.values
    n = len(outcome.labels) if outcome.labels is not None else sum(outcome.rows)
    what = (f"the {n} x {n} squared-distance matrix" if outcome.layout == "full" else
            f"the {outcome.layout} layout's {' x '.join(map(str, distances.shape))} "
            "squared distances")
    undelivered = dict(outcome.undelivered)
    dropped = f"; dropped out: {', '.join(outcome.lost)}" if outcome.lost else ""
    print(f"reconstructed {what} of "
          f"{len(outcome.party_names)} parties (round {outcome.round}, responders "
          f"{', '.join(outcome.responders)}{dropped})")
    save_folder(folder)
    distances_path = args.data_out or folder / "distances.npy"
    del distances
    save_result(outcome, distances_path, distance_bound=coordinator_bound(server.coordinator))
    end_journal(journal, folder, outcome)
    print(f"saved {'the squared-distance matrix' if outcome.layout == 'full' else what} to "
          f"{distances_path}")
    rows_path = save_layout_rows(outcome, distances_path)
    if rows_path is not None:
        print(f"saved the {outcome.layout} rows (global row order) to {rows_path}")
    labels_path = None
    if outcome.labels is not None:
        sizes = np.bincount(outcome.labels[outcome.labels >= 0])
        print(f"clustering {config.clustering.method}: cluster sizes {sizes.tolist()}")
        labels_path = args.labels_out or folder / "labels.npy"
        np.save(labels_path, outcome.labels)
        print(f"saved the labels of all {n} rows (global row order) to {labels_path}")
    status = EXIT_UNDELIVERED if undelivered else 0
    summary = write_summary(folder / "summary.json", config, outcome, status,
                            distances=distances_path, labels=labels_path,
                            layout_rows=rows_path)
    print(f"delivered: {', '.join(summary['delivered']) or 'none'} received their "
          f"{'labels' if outcome.labels is not None else 'result'}; summary in "
          f"{folder / 'summary.json'}")
    print("per phase (seconds, bytes sent and received by the coordinator):")
    print(format_stats(outcome.stats))
    if undelivered:
        for name, reason in undelivered.items():
            print(f"omnifc serve: NOT DELIVERED: party {name!r} did not receive its "
                  f"{'labels' if outcome.labels is not None else 'result'}: {reason}",
                  file=sys.stderr)
        source = labels_path or "the saved results"
        print(f"omnifc serve: the session finished and its results are saved, but "
              f"{len(undelivered)} of {len(outcome.party_names)} parties did not receive "
              f"theirs (their rows' labels are in {source}; exit status "
              f"{EXIT_UNDELIVERED})", file=sys.stderr)
    return status


def resume_folder(args, config) -> Path:
    """The result folder whose journal ``--resume`` continues: ``--out``, or the one
    folder of this session under ./omnifc-results/ that holds a journal."""
    from finite_field import ParameterError
    from protocols import WORK_DIR

    from ._session_io import RESULTS_DIR

    if args.out:
        candidates = [Path(args.out)]
    else:
        candidates = sorted(Path(RESULTS_DIR).glob(f"{config.session_id}*"))
    found = [c for c in candidates if (c / WORK_DIR / "session.journal").is_file()]
    if not found:
        where = args.out or f"./{RESULTS_DIR}/{config.session_id}*"
        raise ParameterError(f"--resume: no journal of session {config.session_id!r} in "
                             f"{where} (a coordinator keeps one only during the evaluation, "
                             "and removes it when the session ends)")
    if len(found) > 1:
        raise ParameterError(f"--resume: {len(found)} folders hold a journal of this "
                             f"session ({', '.join(map(str, found))}); pass --out")
    return found[0]


def journaled_coordinator(config, folder: Path, cluster, *, resume: bool) -> tuple:
    """``(coordinator, journal or None)``: with a journal (docs/protocol.md,
    "Coordinator restart") whenever the config allows a restart; ``resume`` restores the
    coordinator from the journal in ``folder``."""
    from finite_field import ParameterError
    from protocols import (coordinator_from_config, open_serve_journal,
                           parameters_from_config, why_not_journaled)

    why = why_not_journaled(parameters_from_config(config), tls=not config.insecure)
    if why is not None:
        if resume:
            raise ParameterError(f"--resume: this session keeps no journal: {why}")
        logger.info("no journal (no coordinator restart): %s", why)
        return coordinator_from_config(config, cluster=cluster), None
    journal, records, out = open_serve_journal(config, folder, resume=resume)
    try:
        coordinator = coordinator_from_config(config, cluster=cluster, out=out,
                                              journal=journal)
        if resume:
            coordinator.restore(records)
    except BaseException:
        if resume:  # refused: the files stay as they are, for another try
            journal.close()
        else:
            end_journal(journal, folder)
        raise
    return coordinator, journal


def end_journal(journal, folder: Path, outcome=None) -> None:
    """The session ended in this process: the journal and the accumulated result go
    (after a success, once the distances are saved), and so does a result folder left
    empty. Only a process that died without getting here leaves a journal to resume."""
    import shutil

    from protocols import WORK_DIR, discard_store

    if journal is None:
        return
    if outcome is not None:
        discard_store(outcome.store)
    journal.close(remove=True)
    shutil.rmtree(folder / WORK_DIR, ignore_errors=True)
    if outcome is None:  # failed: no empty result folder is left behind
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass


def write_summary(path, config, outcome, status: int, *, distances, labels,
                  layout_rows=None) -> dict:
    """``summary.json``: what the session produced and who received it (written last, so
    its presence means every result file of the run is complete)."""
    import json

    summary = {
        "session_id": config.session_id,
        "parties": list(outcome.party_names),
        "rows": dict(zip(outcome.party_names, outcome.rows)),
        "round": outcome.round,
        "responders": list(outcome.responders),
        "lost": list(outcome.lost),
        "delivered": [name for name in outcome.party_names
                      if name not in outcome.undelivered],
        "undelivered": dict(outcome.undelivered),
        "integrity": outcome.integrity,
        "layout": outcome.layout,
        "deviations": list(outcome.deviations),
        "clustering": None if labels is None else {"method": config.clustering.method,
                                                   "n_clusters": config.clustering.n_clusters},
        "files": {"distances": str(distances),
                  **({} if labels is None else {"labels": str(labels)}),
                  **({} if layout_rows is None else {"layout_rows": str(layout_rows)})},
        "exit_status": status,
    }
    with open(path, "w") as handle:
        json.dump(summary, handle, indent=2, default=str)
        handle.write("\n")
    return summary

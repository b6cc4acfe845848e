"""``omnifc demo``: the whole system on one machine, zero configuration.

It writes throwaway certificates into a temporary folder, starts the coordinator (in this
process) and one process per party on loopback (ephemeral port), splits a built-in data set
non-IID across the parties, runs the share-exchange protocol over gRPC with mutual TLS,
and prints: exactness against the plaintext quantized distances (bit for bit), clustering
quality against the centralized result, and per-phase seconds and bytes. Every process it
started is stopped and the folder removed, also on errors and Ctrl-C.

Defaults: iris, 4 parties, l = 1, t = 1 (3 parties suffice to decode, so one party may
drop out during evaluation), q = 16, masked mode, exact k-means with 3 clusters.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def register(subparsers) -> None:
    from .cmd_simulate import add_session_arguments

    parser = subparsers.add_parser(
        "demo", help="run a whole secure session over gRPC+TLS on this machine",
        description=__doc__.split("\n\n")[1])
    add_session_arguments(parser, parties=4)
    from .. import METHODS

    from protocols import add_parameter_options

    add_parameter_options(parser, ["mode"])
    parser.add_argument("--method", choices=METHODS, default="kmeans", help="clustering on D")
    parser.add_argument("--n-clusters", type=int, dest="n_clusters",
                        help="number of clusters (default: the data set's classes)")
    parser.add_argument("--clusters", type=int, dest="n_clusters", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", action="append", default=[], metavar="[PHASE=]SECONDS",
                        help="SECONDS for every phase, or PHASE=SECONDS for one phase (join, "
                             "shares, evaluation, result), as in 'omnifc session new'; "
                             "repeatable (default: 60 s per phase, join at least 120 s)")
    parser.add_argument("--insecure", action="store_true",
                        help="no TLS (not recommended; logs a warning)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from protocols import new_party_server

    # Started first: the party processes' server loads their modules and numba's kernels
    # (about 2 s) in its own process while this one imports scikit-learn and loads the
    # data set; the session below owns it, and closes it (again, harmlessly) on every path.
    party_server = new_party_server()
    try:
        return _run(args, party_server)
    finally:
        if party_server is not None:
            party_server.close()


def _run(args, party_server) -> int:
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from protocols import SessionParameters
    from protocols import LocalSession

    from finite_field import Quantizer

    from .. import cluster, load_dataset, plaintext_sq_distances, split_non_iid
    from ._session_io import clustering_progress, phase_progress
    from .cmd_serve import format_stats
    from .cmd_session import parse_deadlines

    # one spelling with session new: SECONDS (every phase) or PHASE=SECONDS
    deadline = 60.0
    if args.deadline and not any("=" in item for item in args.deadline):
        deadline = parse_deadlines(args.deadline).shares  # one number: join stays >= 120 s
    elif args.deadline:
        deadline = parse_deadlines(args.deadline, base=parse_deadlines(["60", "join=120",
                                                                        "result=10"]))

    data = load_dataset(args.dataset)
    parts = split_non_iid(data.labels, args.parties, args.non_iid)
    names = [f"party-{i}" for i in range(args.parties)]
    party_data = {name: data.features[idx] for name, idx in zip(names, parts)}
    features = np.concatenate([data.features[idx] for idx in parts])
    truth = np.concatenate([data.labels[idx] for idx in parts])
    k = args.n_clusters or data.n_classes
    parameters = SessionParameters(dim=data.features.shape[1], bound=data.bound,
                                   scale_bits=args.scale_bits, segments=args.segments,
                                   noise_segments=args.noise_segments,
                                   nonnegative=data.nonnegative, mode=args.mode,
                                   mask_degree=args.mask_degree)
    print(f"omnifc demo: {args.dataset} ({features.shape[0]} rows x {features.shape[1]} "
          f"features) split non-IID (p={args.non_iid}) across {args.parties} parties "
          f"({', '.join(str(len(i)) for i in parts)} rows)")
    unused = data.features.shape[0] - features.shape[0]
    if unused:
        print(f"             {features.shape[0]} of the data set's {data.features.shape[0]} "
              f"rows are used: the paper's split gives each of the {args.parties} parties "
              f"{data.features.shape[0]} // {args.parties} = {len(parts[0])} rows, so "
              f"{unused} row{'s are' if unused > 1 else ' is'} left out (the split's rule, "
              "not duplicates)")
    start = time.perf_counter()
    with LocalSession(party_data, parameters, deadline=deadline, insecure=args.insecure,
                      party_server=party_server) as local:
        print(f"certificates, identity keys and session config in {local.directory} "
              f"({'INSECURE: no TLS' if args.insecure else 'mutual TLS'})")

        def clustering(d):  # runs in the decode, when on_phase below exists
            def on_detail(detail):
                on_phase("decode", server.coordinator.round, f"clustering: {detail}")
            with clustering_progress(on_detail):
                return cluster(d, args.method, k, random_state=0)
        server = local.server(cluster=clustering)
        server.start()
        bar, on_phase = phase_progress(disable=args.no_progress)
        try:
            for name in names:
                local.start_party(name, server.port)
            print(f"coordinator on 127.0.0.1:{server.port}; started {args.parties} party "
                  "processes", flush=True)
            outcome = server.run(on_phase=on_phase, poll=lambda: local.watch(server),
                                 on_progress=lambda phase, detail: on_phase(
                                     phase, server.coordinator.round, detail))
        finally:
            bar.close()
            server.stop()
        for process in local.processes.values():
            process.wait(timeout=30)
        received = {name: local.received_labels(name) for name in names}
        exit_codes = {name: p.returncode for name, p in local.processes.items()}
    elapsed = time.perf_counter() - start

    params = outcome.parameters
    public = {"bound": params["bound"], "scale_bits": params["scale_bits"],
              "nonnegative": params["nonnegative"]}
    exact = bool(np.array_equal(outcome.integer, plaintext_sq_distances(features, **public)))
    quantized = Quantizer(**public).quantize(features).values / 2.0 ** params["scale_bits"]
    centralized = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(quantized)
    secure = outcome.labels
    own_ok = all(received[name] is not None and np.array_equal(
        received[name], secure[outcome.row_offsets[i]:outcome.row_offsets[i] + outcome.rows[i]])
        for i, name in enumerate(names))
    print(f"parameters   l={params['segments']} t={params['noise_segments']} "
          f"q={params['scale_bits']} R={params['bound']} primes={params['primes']} "
          f"mode={params['mode']}; round {outcome.round}, responders "
          f"{', '.join(outcome.responders)}")
    print(f"exact        {'yes' if exact else 'NO'}: the coordinator's integer distances "
          "equal the plaintext quantized squared distances bit for bit")
    print(f"clustering   {args.method} on the secure D vs centralized sklearn KMeans on the "
          f"plaintext quantized rows: ARI {adjusted_rand_score(centralized, secure):.4f}")
    print(f"             vs true classes: secure ARI {adjusted_rand_score(truth, secure):.4f}, "
          f"centralized ARI {adjusted_rand_score(truth, centralized):.4f}")
    codes = ", ".join(f"{name} {code}" for name, code in exit_codes.items())
    print(f"labels       each party received the labels of its own rows: "
          f"{'yes' if own_ok else 'NO'} (party exit codes: {codes})")
    for name, reason in outcome.undelivered.items():
        print(f"             NOT DELIVERED to {name}: {reason}")
    print(f"per phase    (seconds, bytes sent and received by the coordinator; total "
          f"{elapsed:.2f} s incl. process start-up)")
    print(format_stats(outcome.stats))
    return 0 if exact and own_ok else 1

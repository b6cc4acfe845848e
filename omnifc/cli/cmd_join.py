"""``omnifc join``: take part in a session as one party."""

from __future__ import annotations

import numpy as np

from ._session_io import (add_output_arguments, add_tls_refusal, output_dir, phase_progress,
                          refuse_insecure_flag, save_folder, warn_if_reused)

CSV_FORMAT = ("CSV: one row per line, comma-separated numbers, no header, no index column "
              "(as written by np.savetxt(path, rows, delimiter=','))")


def register(subparsers) -> None:
    from .._clipping import MAX_CLIPPED

    parser = subparsers.add_parser(
        "join", help="join a session as a party (gRPC, mutual TLS)",
        description="Connect to the coordinator of a session config, share your rows as "
                    "end-to-end encrypted Lagrange shares, evaluate, upload masked results "
                    "and receive the cluster labels of your own rows, which are saved "
                    "(<party>-labels.npy) and their path printed. Your rows never leave "
                    f"this process in the clear. {CSV_FORMAT}.")
    parser.add_argument("--config", required=True, help="session config (TOML)")
    parser.add_argument("--party", required=True, help="your party name in the config")
    parser.add_argument("--keys", metavar="DIR",
                        help="your keys folder from 'omnifc keygen --party NAME' (default: "
                             "the key files named in the config)")
    parser.add_argument("--data", required=True,
                        help="your rows (n x d): .npy, or .csv with one row per line, "
                             "comma-separated, no header")
    parser.add_argument("--target", help="coordinator host:port (default: from the config)")
    add_output_arguments(parser, what="<party>-labels.npy")
    parser.add_argument("--labels-out", help="save the received labels here instead (.npy)")
    parser.add_argument("--clip", choices=("clip", "error"), default="clip",
                        help="values outside the public bound: clip them (and count), or "
                             "refuse any")
    parser.add_argument("--max-clipped", type=float, default=MAX_CLIPPED, metavar="FRACTION",
                        help="refuse to join when more than this fraction of your entries "
                             "lie outside the public bound (1 accepts any amount)")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")
    add_tls_refusal(parser)
    parser.set_defaults(handler=run)


def run(args) -> int:
    from protocols import join_from_config, load_party_data

    from .._clipping import check_clipping, clip_report
    from .cmd_session import announce_session, load_config

    refuse_insecure_flag(args)
    config = load_config(args.config, keys=args.keys, who=args.party)
    config.party(args.party)  # an unknown party name fails before anything else
    data = load_party_data(args.data)
    p = config.parameters
    report = clip_report({args.party: data}, bound=p.bound, nonnegative=p.nonnegative)
    check_clipping(report, bound=p.bound, nonnegative=p.nonnegative,
                   max_clipped=args.max_clipped, clip=args.clip)
    clipped, entries, fraction = report[args.party]
    folder = output_dir(args, config, [] if args.labels_out else [f"{args.party}-labels.npy"],
                        explicit=(args.labels_out,))
    warn_if_reused(config, f"join:{args.party}")
    announce_session(config, f"party {args.party!r}")
    bar, on_phase = phase_progress(disable=args.no_progress)
    try:  # every phase as this party sees it, and its upload tile by tile
        party = join_from_config(config, args.party, data, target=args.target,
                                 on_progress=on_phase)
    finally:
        bar.close()
    result = party.result
    print(f"party {party.party_id}: session finished (round {result.round}, responders "
          f"{', '.join(result.responders)}); {party.n_rows} rows")
    print(f"clipping: {clipped} of {entries} entries ({fraction:.1%}) were outside the "
          f"public bound [{0 if p.nonnegative else -p.bound:g}, {p.bound:g}] and clipped")
    if party.labels is not None:
        sizes = np.bincount(party.labels[party.labels >= 0])
        print(f"labels of your rows: cluster sizes {sizes.tolist()}")
        path = args.labels_out or save_folder(folder) / f"{args.party}-labels.npy"
        np.save(path, party.labels)
        print(f"saved the labels of your {party.n_rows} rows (in your file's row order) to "
              f"{path}")
    else:
        print("the coordinator returned no labels")
    return 0

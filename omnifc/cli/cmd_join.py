"""``omnifc join``: take part in a session as one party."""

from __future__ import annotations

import numpy as np


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "join", help="join a session as a party (gRPC, mutual TLS)",
        description="Connect to the coordinator of a session config, share your rows as "
                    "end-to-end encrypted Lagrange shares, evaluate, upload masked results "
                    "and receive the cluster labels of your own rows. Your rows never leave "
                    "this process in the clear.")
    parser.add_argument("--config", required=True, help="session config (TOML)")
    parser.add_argument("--party", required=True, help="your party name in the config")
    parser.add_argument("--keys", metavar="DIR",
                        help="your keys folder from 'omnifc keygen --party NAME' (default: "
                             "the key files named in the config)")
    parser.add_argument("--data", required=True, help="your rows: .npy or .csv (no header)")
    parser.add_argument("--target", help="coordinator host:port (default: from the config)")
    parser.add_argument("--labels-out", help="save the received labels (.npy)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from protocols._grpc_party import join_from_config

    from .cmd_serve import phase_progress
    from .cmd_session import announce_session, load_config

    config = load_config(args.config, keys=args.keys, who=args.party)
    announce_session(config, f"party {args.party!r}")
    phases = {"roster": "shares", "share": "shares", "round_start": "evaluation",
              "result": "result"}
    bar, on_phase = phase_progress(disable=args.no_progress)
    try:
        party = join_from_config(config, args.party, args.data, target=args.target,
                                 on_message=lambda kind: on_phase(phases.get(kind, "join"), 0))
    finally:
        bar.close()
    result = party.result
    print(f"party {party.party_id}: session finished (round {result.round}, responders "
          f"{', '.join(result.responders)}); {party.n_rows} rows, "
          f"{party.clipped} entries clipped to the public bound")
    if party.labels is not None:
        sizes = np.bincount(party.labels[party.labels >= 0])
        print(f"labels of your rows: cluster sizes {sizes.tolist()}")
        if args.labels_out:
            np.save(args.labels_out, party.labels)
    else:
        print("the coordinator returned no labels")
    return 0

"""``omnifc certs``: the one-machine demo shortcut (everyone's keys in one folder).

Whoever runs it holds every party's private keys; real deployments use ``omnifc keygen``
on each organization's machine and ``omnifc session new`` (docs/deployment.md).
"""

from __future__ import annotations

from types import SimpleNamespace

from finite_field import ParameterError

from .cmd_session import add_session_parameters, session_settings, validate_clustering


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certs", help="DEMO shortcut: every participant's keys and a session config in one "
                      "folder (whoever runs it can impersonate every party)",
        description="Demo and test shortcut: runs the key ceremony for the coordinator and "
                    "every party on this one machine (self-signed ECDSA P-256 TLS "
                    "certificates, Ed25519 identity keys, public cards) and writes a session "
                    "config pinning them all. WHOEVER RUNS THIS CAN IMPERSONATE EVERY PARTY: "
                    "it holds all their private keys. For a real deployment each "
                    "organization runs 'omnifc keygen' itself and one person runs 'omnifc "
                    "session new' on the cards. Private keys are written with mode 0600; no "
                    "key material is printed.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder (created with mode 0700 if missing; an "
                             "existing one must be yours, writable by you only, and not "
                             "a symbolic link)")
    parser.add_argument("--parties", required=True, metavar="A,B,C",
                        help="comma-separated party names ([A-Za-z0-9_.-], unique)")
    parser.add_argument("--coordinator", default="coordinator", metavar="NAME",
                        help="the coordinator's certificate name (default: coordinator)")
    parser.add_argument("--days", type=int, default=30,
                        help="certificate validity in days (default: 30)")
    parser.add_argument("--coordinator-address", default="127.0.0.1:50051",
                        metavar="HOST:PORT", help="where parties connect (default: "
                        "127.0.0.1:50051); HOST is added to the coordinator certificate")
    parser.add_argument("--coordinator-host", action="append", default=[], metavar="HOST",
                        help="extra DNS name or IP for the coordinator certificate "
                             "(repeatable; loopback names are always included)")
    add_session_parameters(parser)
    parser.add_argument("--config-name", default="session.toml",
                        help="file name of the session config (default: session.toml)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing key, card and config files (never "
                             "symbolic links)")
    parser.set_defaults(handler=run)


def _parties(text: str) -> list:
    names = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in names):
        raise ParameterError(f"--parties must be comma-separated names like a,b,c, "
                             f"got {text!r}")
    return names


def run(args) -> int:
    from protocols import generate_certificates
    from protocols import IMPERSONATION_WARNING

    settings = session_settings(args)
    # the clustering request is checked against omnifc's registry before anything is written
    validate_clustering(SimpleNamespace(**settings))
    certs = generate_certificates(
        args.out, _parties(args.parties), coordinator=args.coordinator, days=args.days,
        coordinator_address=args.coordinator_address,
        coordinator_hosts=args.coordinator_host, config_name=args.config_name,
        overwrite=args.force, **settings)
    private = set(certs.private_files)
    print(f"wrote session {certs.session_id} to {certs.directory}")
    for path in certs.files:
        kind = "private key, mode 0600" if path in private else "public"
        print(f"  {path.name:<32} {kind}")
    print("card fingerprints (the same values as in the cards and in "
          f"{certs.config.name}):")
    print(f"  coordinator {certs.coordinator:<20} {certs.coordinator_fingerprint}")
    for party in certs.parties:
        print(f"  party       {party.name:<20} {party.fingerprint}")
    print(f"session fingerprint: {certs.fingerprint}")
    print(f"WARNING: {IMPERSONATION_WARNING}")
    return 0

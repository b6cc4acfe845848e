"""``omnifc certs``: a throwaway CA, TLS certificates, identity keys and a session config."""

from __future__ import annotations

from finite_field import ParameterError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "certs", help="write TLS certificates, identity keys and a session config",
        description="Write a throwaway session CA (its private key is discarded), an ECDSA "
                    "P-256 TLS certificate for the coordinator and for every party, each "
                    "party's Ed25519 identity key, and a session config (TOML) that pins "
                    "every party's identity key and certificate fingerprint. Private keys "
                    "are written with mode 0600; no key material is printed.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder (created with mode 0700 if missing)")
    parser.add_argument("--parties", required=True, metavar="A,B,C",
                        help="comma-separated party names ([A-Za-z0-9_.-], unique)")
    parser.add_argument("--coordinator", default="coordinator", metavar="NAME",
                        help="the coordinator's certificate name (default: coordinator)")
    parser.add_argument("--days", type=int, default=30, help="certificate validity (days)")
    parser.add_argument("--coordinator-address", default="127.0.0.1:50051",
                        metavar="HOST:PORT", help="where parties connect (default: "
                        "127.0.0.1:50051); HOST is added to the coordinator certificate")
    parser.add_argument("--coordinator-host", action="append", default=[], metavar="HOST",
                        help="extra DNS name or IP for the coordinator certificate "
                             "(repeatable; loopback names are always included)")
    session = parser.add_argument_group("session parameters (written to the config)")
    session.add_argument("--dim", type=int, default=0,
                         help="d; 0 (default) = taken from the data at join, must match")
    session.add_argument("--bound", type=float, default=8.0, help="R: public clip bound")
    session.add_argument("--scale-bits", type=int, default=16,
                         help="q: quantization step 2^-q")
    session.add_argument("--segments", type=int, default=1, help="l: data segments per row")
    session.add_argument("--noise-segments", type=int, default=1,
                         help="t: random segments; any t parties learn nothing")
    session.add_argument("--nonnegative", action="store_true",
                         help="all features lie in [0, R]")
    session.add_argument("--primes", default="", metavar="P1,P2",
                         help="explicit moduli (default: chosen automatically)")
    session.add_argument("--mode", choices=("masked", "transparent"), default="masked",
                         help="masked (default): the coordinator learns only D; transparent "
                              "leaks per-segment distances when l > 1")
    session.add_argument("--method", default="kmeans", help="clustering method (kmeans)")
    session.add_argument("--n-clusters", type=int, default=3, help="number of clusters")
    session.add_argument("--deadline", action="append", default=[], metavar="PHASE=SECONDS",
                         help="deadline of a phase (join, shares, evaluation, result); "
                              "repeatable")
    parser.add_argument("--config-name", default="session.toml",
                        help="file name of the session config (default: session.toml)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing key, certificate and config files")
    parser.set_defaults(handler=run)


def _parties(text: str) -> list:
    names = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in names):
        raise ParameterError(f"--parties must be comma-separated names like a,b,c, "
                             f"got {text!r}")
    return names


def _primes(text: str) -> tuple:
    if not text.strip():
        return ()
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ParameterError(f"--primes must be comma-separated integers, got {text!r}") \
            from None


def _deadlines(items):
    from protocols import Deadlines

    values = {}
    for item in items:
        phase, sep, seconds = item.partition("=")
        try:
            values[phase.strip()] = float(seconds)
        except ValueError:
            sep = ""
        if not sep:
            raise ParameterError(f"--deadline must look like PHASE=SECONDS, got {item!r}")
    try:
        return Deadlines(**values)
    except TypeError:
        raise ParameterError(f"--deadline phases are join, shares, evaluation and result; "
                             f"got {', '.join(sorted(values))}") from None


def run(args) -> int:
    from protocols import (ClusteringRequest, ConfigParameters, generate_certificates,
                           identity_fingerprint)

    parameters = ConfigParameters(dim=args.dim, segments=args.segments,
                                  noise_segments=args.noise_segments,
                                  scale_bits=args.scale_bits, bound=args.bound,
                                  nonnegative=args.nonnegative, primes=_primes(args.primes))
    certs = generate_certificates(
        args.out, _parties(args.parties), coordinator=args.coordinator, days=args.days,
        coordinator_address=args.coordinator_address,
        coordinator_hosts=args.coordinator_host, mode=args.mode, parameters=parameters,
        clustering=ClusteringRequest(method=args.method, n_clusters=args.n_clusters),
        deadlines=_deadlines(args.deadline), config_name=args.config_name,
        overwrite=args.force)
    private = set(certs.private_files)
    print(f"wrote session {certs.session_id} to {certs.directory}")
    for path in certs.files:
        kind = "private key, mode 0600" if path in private else "public"
        print(f"  {path.name:<32} {kind}")
    print("identity key fingerprints (compare out of band):")
    for party in certs.parties:
        print(f"  {party.name:<16} {identity_fingerprint(party.identity_public_key)}")
    shared = f"{certs.ca_cert.name}, {certs.config.name}"
    print("distribute (the CA private key was discarded; never copy one party's keys "
          "to another):")
    print(f"  coordinator {certs.coordinator!r}: {shared}, {certs.coordinator_cert.name}, "
          f"{certs.coordinator_key.name}")
    for party in certs.parties:
        print(f"  party {party.name!r}: {shared}, {party.cert.name}, {party.key.name}, "
              f"{party.identity_key.name}")
    return 0

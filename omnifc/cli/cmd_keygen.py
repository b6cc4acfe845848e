"""``omnifc keygen``: one organization's private keys and public card, on its own machine."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "keygen", help="make your organization's private keys and public card",
        description="Run on your own machine: writes your private TLS key and (for a "
                    "party) your Ed25519 identity key with mode 0600, a self-signed TLS "
                    "certificate and a public card (NAME.card.toml). Send only the card to "
                    "whoever assembles the session ('omnifc session new'); the keys never "
                    "leave this folder.")
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--party", metavar="NAME",
                     help="your party name ([A-Za-z0-9_.-], e.g. hospital-a)")
    who.add_argument("--coordinator", nargs="?", const="coordinator", metavar="NAME",
                     help="make the coordinator's keys instead (name default: coordinator)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="your keys folder (created with mode 0700 if missing; an "
                             "existing one must be yours, writable by you only, and not "
                             "a symbolic link)")
    parser.add_argument("--host", action="append", default=[], metavar="HOST",
                        help="coordinator only: a DNS name or IP parties dial, added to its "
                             "certificate (repeatable; loopback names are always included)")
    parser.add_argument("--days", type=int, default=30,
                        help="certificate validity in days (default: 30)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing key files (never symbolic links)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from protocols import generate_keys

    role = "party" if args.party else "coordinator"
    name = args.party or args.coordinator
    files = generate_keys(args.out, name, role=role, hosts=args.host, days=args.days,
                          overwrite=args.force)
    private = set(files.private_files)
    print(f"wrote the keys of {role} {name!r} to {files.directory}")
    for path in files.files:
        kind = "PRIVATE, mode 0600: never leaves this folder" if path in private \
            else "public"
        print(f"  {path.name:<32} {kind}")
    print(f"card fingerprint: {files.fingerprint}")
    print(f"send {files.card.name} to whoever assembles the session, and read this "
          "fingerprint out to the other organizations; 'omnifc session new' and 'omnifc "
          "session fingerprint' show the same value for your card")
    return 0

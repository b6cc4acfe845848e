"""The ``omnifc`` command line.

Each subcommand lives in its own module ``omnifc/cli/cmd_<name>.py`` that defines
``register(subparsers)``; :func:`main` discovers them, so commands stay independent.
Only the CLI configures logging handlers and shows progress bars.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from finite_field import OmniFCError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omnifc",
        description="Secure federated clustering: exact pairwise distances on Lagrange shares.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except OmniFCError as error:
        print(f"omnifc {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``omnifc`` command line.

Each subcommand lives in its own module ``omnifc/cli/cmd_<name>.py`` that defines
``register(subparsers)``; :func:`main` discovers them, so commands stay independent.
Only the CLI configures logging handlers and shows progress bars. Every ``--help`` shows
the options' defaults (:class:`HelpFormatter`).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import pkgutil
import sys

from finite_field import OmniFCError

from ._logging import configure_logging

__all__ = ["main", "build_parser", "HelpFormatter"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` after an option's help unless the help already names its
    default or there is none to show (None, False, an empty list)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], "", argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="omnifc", formatter_class=HelpFormatter,
        description="Secure federated clustering: exact pairwise distances on Lagrange shares.")
    parser.add_argument("--version", action="version", version=f"omnifc {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output (-v info, -vv debug)")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND",
        parser_class=functools.partial(argparse.ArgumentParser, formatter_class=HelpFormatter))
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging([logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)])
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

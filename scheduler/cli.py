"""The ``gang-scheduler`` command line: flags become settings, settings start the operator.

Subcommands are added as the features behind them land; ``--help`` lists what exists.
"""

from __future__ import annotations

import argparse
import platform
import sys

from scheduler import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gang-scheduler",
        description=(
            "A Kubernetes scheduler for jobs whose pods must start together: "
            "a gang binds whole, or none of it holds resources."
        ),
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    commands.add_parser("version", help="print the version and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"gang-scheduler {__version__} (Python {platform.python_version()})")
        return 0
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse rejects unknown ones


if __name__ == "__main__":
    sys.exit(main())

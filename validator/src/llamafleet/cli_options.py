"""What the command line's subcommands share: the usage error and the options and policy for
files named inside an input. ``llamafleet.cli`` and ``llamafleet.plan_cli`` both import this
module (neither imports the other's options, so no import cycle)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from llamafleet.refs import ReferencedFiles


class UsageError(Exception):
    """Bad usage: exit status 2, one line naming what to change."""


def referenced_policy(args: argparse.Namespace) -> ReferencedFiles:
    """The referenced-files policy of --referenced-dir / --read-referenced (default: never)."""
    from llamafleet.refs import NEVER, ReferencedFiles

    if getattr(args, "read_referenced", False):
        return ReferencedFiles(as_named=True)
    directory = getattr(args, "referenced_dir", None)
    if directory is not None:
        if not os.path.isdir(directory):
            raise UsageError(f"--referenced-dir {directory}: not a directory")
        return ReferencedFiles(directory=directory)
    return NEVER


def add_referenced_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "files named inside the inputs (EnvironmentFile=, LoadCredential=NAME:PATH, "
        "--api-key-file); by default none is opened: an input may come from another machine, "
        "and rules that need such a file stay silent as when it is missing"
    ).add_mutually_exclusive_group()
    g.add_argument(
        "--referenced-dir",
        metavar="DIR",
        help="look a named file up only as DIR/<its basename> (e.g. a scratch directory with "
        "copies of the key files)",
    )
    g.add_argument(
        "--read-referenced",
        action="store_true",
        help="open the named files as named, on this machine (checking this machine's own "
        "units); regular files of at most 1 MiB only",
    )

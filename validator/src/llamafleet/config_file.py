"""Where ``llamafleet check`` finds its configuration (``skip``, ``severity``, ``fail_on``).

Standard library only, so that the command line and the Ansible side (plugins on the controller)
import the same rule without loading the check machinery.
"""

from __future__ import annotations

import os

#: The names looked for in each directory, in this order (``.yaml`` wins when both exist).
CONFIG_NAMES = (".llamafleet.yaml", ".llamafleet.yml")
#: A directory holding this (a git directory, or the ``.git`` file of a worktree or submodule) is
#: the top of a repository: the search stops after it.
REPOSITORY_MARKER = ".git"


def find_config(start: str | os.PathLike[str]) -> str | None:
    """The nearest ``.llamafleet.yaml`` (or ``.llamafleet.yml``) from ``start`` upwards.

    Looks in ``start`` (a directory, made absolute), then in each parent in turn; stops after the
    first directory that contains ``.git`` (the repository's top, whose own config still counts)
    or after the filesystem root. Only regular files (or links to them) count. Returns the
    absolute path of the file found, or None.
    """
    directory = os.path.abspath(os.fspath(start))
    while True:
        for name in CONFIG_NAMES:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate):
                return candidate
        if os.path.lexists(os.path.join(directory, REPOSITORY_MARKER)):
            return None
        parent = os.path.dirname(directory)
        if parent == directory:  # the root
            return None
        directory = parent

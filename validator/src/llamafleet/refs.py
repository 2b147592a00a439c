"""Files named *inside* the inputs: ``EnvironmentFile=``, ``LoadCredential=NAME:PATH``,
``--api-key-file``.

An input can come from another machine (the fleet audit reads units from managed hosts), so a path
named in it says nothing about the machine that runs the validator. By default such a file is
never opened, and the rules that need it stay silent as if it were missing. The caller can allow:

* ``ReferencedFiles(directory=DIR)`` (CLI ``--referenced-dir DIR``): a referenced file is looked
  up only as ``DIR/<basename>``: the roles render their own units and key files into a private
  scratch directory;
* ``ReferencedFiles(as_named=True)`` (CLI ``--read-referenced``): the paths as named (a user
  checking the files of their own machine).

Either way only regular files are read (no FIFOs, devices or directories; the last path component
must not be a symbolic link) and at most :data:`MAX_BYTES`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from llamafleet.record import FrozenRecord

#: Referenced files above this size are not read.
MAX_BYTES = 1 << 20


def read_regular_file(path: str, limit: int = MAX_BYTES) -> str | None:
    """The text of a regular file of at most ``limit`` bytes, or None.

    None for anything else: a missing file, a FIFO, socket, device or directory, a symbolic link
    as the last component, a larger file, or a read error. Opened with O_NONBLOCK (a FIFO swapped
    in after the check cannot block the open) and O_NOFOLLOW; the opened file is checked again.
    """
    try:
        before = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(before.st_mode) or before.st_size > limit:
        return None
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOFOLLOW", "O_NOCTTY", "O_CLOEXEC"):
        flags |= getattr(os, name, 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino)
            or st.st_size > limit
        ):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


class ReferencedFiles(FrozenRecord):
    """Which files named inside an input may be opened (default: none).

    ``contents``: texts handed over in memory, by the exact path an input names (an Ansible role
    passes the files it is about to write beside a unit, e.g. its chat template): read before any
    disk; neither compared nor hashed. ``complete``: the caller handed over every file it has (an
    Ansible role's check): nothing is left unopened to tell the user about (LF003)."""

    _fields = ("directory", "as_named", "contents", "complete")
    _uncompared = frozenset(("contents",))
    directory: str | None
    as_named: bool
    contents: Mapping[str, str] | None
    complete: bool

    def __init__(
        self,
        directory: str | None = None,
        as_named: bool = False,
        contents: Mapping[str, str] | None = None,
        complete: bool = False,
    ) -> None:
        if directory is not None and as_named:
            raise ValueError("give either a referenced-files directory or as_named, not both")
        self._set("directory", directory)
        self._set("as_named", as_named)
        self._set("contents", contents)
        self._set("complete", complete)

    @property
    def enabled(self) -> bool:
        return self.as_named or self.directory is not None or bool(self.contents)

    def locate(self, named: str) -> str | None:
        """Where the file an input names as ``named`` is read from, or None (never opened)."""
        if self.as_named:
            return os.path.expanduser(named) if named else None
        if self.directory is None:
            return None
        base = os.path.basename(named.replace("\\", "/"))
        if base in ("", ".", ".."):
            return None
        return os.path.join(self.directory, base)

    def size(self, named: str) -> int | None:
        """The size of the regular file an input names, when this policy allows looking at it."""
        if self.contents is not None and named in self.contents:
            return len(self.contents[named].encode("utf-8"))
        path = self.locate(named)
        if path is None:
            return None
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def read(self, named: str) -> str | None:
        """The text of the file an input names, when this policy allows opening it."""
        if self.contents is not None and named in self.contents:
            return self.contents[named]
        path = self.locate(named)
        return None if path is None else read_regular_file(path)


#: Open nothing an input names (the default everywhere).
NEVER = ReferencedFiles()
#: Open the files as named (a user checking the files of their own machine).
AS_NAMED = ReferencedFiles(as_named=True)

# Apache-2.0
"""File system access for the gguf_models role's modules, safe for root under directories that
another account could write to (or could until this run).

Root never opens, writes, chowns or chmods anything by a path another account controls:

- `walk_dir` opens a directory chain from ``/`` one component at a time with
  O_DIRECTORY|O_NOFOLLOW relative to the parent's descriptor. Every directory above the role's
  own ones must be owned by root and not writable by group or others (a sticky directory such as
  /tmp is accepted: nobody else can rename or remove a root-owned entry in it). A symbolic link is
  followed only when root owns it (and it has one link); a link another account owns is refused.
- The role's own directories (the models directory and those below it) are "managed": created
  when missing, and when owned by the takeover account (the service account that owned them in
  earlier versions of the role) taken over through the descriptor: fchown root:root, fchmod
  0755. Only then are their entries looked at; from then on no other account can add, remove or
  swap an entry.
- Entries are opened with O_NOFOLLOW|O_NONBLOCK and must be regular files with one link; new
  files are created O_CREAT|O_EXCL|O_NOFOLLOW, fchowned to root and renamed with directory
  descriptors.
- `validate_metadata` checks a model's metadata document (metadata.json, facts) before it is
  written, returned or trusted: checksums are 64 hex digits, names and paths carry no control
  characters or newlines.
"""

from __future__ import annotations

import collections
import errno
import grp
import json
import os
import pwd
import re
import stat
import unicodedata
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    Change = tuple[str, str, str]  # (path, before, after)
    Owners = Collection[int | None]  # who may own an entry (None: nobody more)
    Bad = Callable[[str, str], NoReturn]  # raises InvalidMetadataError for (field, why)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
DIR_MODE = 0o755
FILE_MODE = 0o644
TEMP_MODE = 0o600
MAX_LINKS = 40
MAX_METADATA_BYTES = 64 * 1024 * 1024

HEX64 = re.compile(r"[0-9a-f]{64}\Z")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


class UnsafePathError(Exception):
    """A path that root must not touch (a link another account owns, a foreign directory, a FIFO
    where a file belongs, ...). The message names the path, what is wrong and the fix."""


class InvalidMetadataError(ValueError):
    """A metadata document with a bad field. The message names the file and the field."""


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def describe(st: os.stat_result) -> str:
    """`llama:1001 0755` style: owner, group and mode of a stat result."""
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{owner_name(st.st_uid)}:{group} {stat.S_IMODE(st.st_mode):04o}"


def kind(st_mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(st_mode):
            return name
    return "an unknown kind of file"


def resolve_uid(account: str | int | None) -> int | None:
    """uid of the takeover account (a name or a number); None for none, root or an unknown name
    (nothing is then taken over)."""
    if account is None or str(account).strip() == "":
        return None
    account = str(account).strip()
    if account.isdigit():
        uid = int(account)
    else:
        try:
            uid = pwd.getpwnam(account).pw_uid
        except KeyError:
            return None
    return uid or None


def has_control(text: str) -> bool:
    """Control characters (C0, DEL, C1, which include newline and carriage return) or the Unicode
    line and paragraph separators."""
    return any(unicodedata.category(c) == "Cc" or c in "\u2028\u2029" for c in text)


def check_name(name: Any, what: str = "file name") -> str:
    """A single path component the role creates: no slash, no control characters, not . or .."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\0" in name
        or has_control(name)
    ):
        raise UnsafePathError(
            f"invalid {what} {name!r}: it must be one path component without control characters"
        )
    return name


def join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c not in ("", ".")]


class DirWalk:
    """The result of `walk_dir`: `fd` is the deepest directory opened (the requested one when
    `exists`), `path` its resolved path, `changes` a list of (path, before, after) for each
    directory created or taken over (or that would be, without `modify`). Close it (a context
    manager)."""

    def __init__(self, fd: int, path: str, exists: bool, changes: list[Change]) -> None:
        self.fd = fd
        self.path = path
        self.exists = exists
        self.changes = changes

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None  # type: ignore[assignment]  # closed: no descriptor to use

    def __enter__(self) -> DirWalk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ancestor_ok(st: os.stat_result) -> bool:
    """A directory above the role's own ones: root's, and nobody else can change its entries (a
    sticky directory such as /tmp: nobody else can rename or remove root's entries in it)."""
    mode = stat.S_IMODE(st.st_mode)
    return st.st_uid == 0 and not (mode & 0o022 and not mode & stat.S_ISVTX)


def _ancestor_error(
    path: str, st: os.stat_result, base: str, below: str | None = None
) -> UnsafePathError:
    """`below`: what the next name of the walk is, when that says more (a link)."""
    if st.st_uid != 0:
        what, fix = f"is owned by {owner_name(st.st_uid)}", f"chown root {path}"
    else:
        what, fix = "is writable by group or others", f"chmod go-w {path}"
    return UnsafePathError(
        f"{path} {what} ({describe(st)}): every directory above the models directory {base} must "
        "be owned by root and writable only by root, or another account could swap what lies "
        f"below it, e.g. for a symbolic link to anywhere.{below or ''} Fix: {fix}, or put "
        "gguf_models_dir below root-owned directories only."
    )


def _next_is_link(dfd: int, dpath: str, name: str) -> str | None:
    """For the message of a refused directory: what the next name of the walk is, if a link."""
    try:
        lst = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISLNK(lst.st_mode):
        return None
    return (
        f" {join(dpath, name)} is in fact a symbolic link owned by {owner_name(lst.st_uid)}, "
        "which is not followed."
    )


def _link_error(path: str, lst: os.stat_result) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is a symbolic link owned by {owner_name(lst.st_uid)}, not root; a link another "
        "account controls is never followed (it could point root anywhere). Fix: if you made it, "
        f"give it to root (chown -h root:root {path}); if not, remove it (it may have been "
        "planted) and rerun; or point gguf_models_dir at the real directory."
    )


def walk_dir(
    path: str,
    base: str | None = None,
    *,
    takeover_uid: int | None = None,
    modify: bool = True,
    create: bool = True,
) -> DirWalk:
    """Open the directory `path` (absolute) through a chain of directory descriptors from `/`.

    `base` (default `path`) is the role's models directory: it and the directories below it on the
    way to `path` are managed (created when missing with `create`, taken over from
    `takeover_uid`, normalised to root:root 0755); the directories above it must already be
    root's (missing ones are created root:root 0755 with `create`). Without `modify` nothing is
    changed: the changes that would be made are recorded and the walk stops at a missing
    directory (`exists` false). Raises UnsafePathError."""
    path = os.path.normpath(path)
    base = os.path.normpath(base or path)
    todo = _walk_todo(path, base)
    changes: list[Change] = []
    stack = [(os.open("/", DIR_FLAGS), "/")]
    try:
        st = os.fstat(stack[0][0])
        if not ancestor_ok(st):
            raise _ancestor_error("/", st, base)
        links = 0
        while todo:
            name, managed = todo.popleft()
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                continue
            pfd, ppath = stack[-1]
            here = join(ppath, name)
            lst, created = _stat_or_make(name, pfd, make=modify and create)
            if lst is None:
                _record_absent(here, todo, changes)
                return DirWalk(stack.pop()[0], ppath, False, changes)
            if stat.S_ISLNK(lst.st_mode):
                links = _follow_link(
                    name, pfd, here, lst, links=links, managed=managed, stack=stack, todo=todo
                )
                continue
            fd = _open_dir_entry(name, pfd, here, lst)
            stack.append((fd, here))
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
                raise UnsafePathError(f"{here} changed while it was checked; rerun")
            if managed or created:
                _own_dir(
                    fd,
                    here,
                    st,
                    takeover_uid=takeover_uid,
                    modify=modify,
                    created=created,
                    changes=changes,
                )
            elif not ancestor_ok(st):
                below = _next_is_link(fd, here, todo[0][0]) if todo else None
                raise _ancestor_error(here, st, base, below)
        fd, where = stack.pop()
        return DirWalk(fd, where, True, changes)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _walk_todo(path: str, base: str) -> collections.deque[tuple[str, bool]]:
    """The components walk_dir goes through from `/`, each with whether it is managed (the
    models directory `base` and what is below it on the way to `path`)."""
    if not os.path.isabs(path) or not os.path.isabs(base):
        raise UnsafePathError(f"{path}: the directory must be an absolute path")
    if base == "/":
        raise UnsafePathError("the models directory must not be /")
    if path != base and not path.startswith(base + "/"):
        raise UnsafePathError(f"{path} is not below the models directory {base}")
    for comp in _components(path):
        if has_control(comp):
            raise UnsafePathError(f"{path!r}: directory names must not contain control characters")
    base_parts = _components(base)
    todo = collections.deque((c, False) for c in base_parts[:-1])
    todo.append((base_parts[-1], True))
    todo.extend((c, True) for c in _components(path[len(base) :]))
    return todo


def _stat_or_make(name: str, pfd: int, *, make: bool) -> tuple[os.stat_result | None, bool]:
    """(lstat of the entry, created?); the directory is made (0700 until it is root:root 0755)
    when it is missing and `make`; (None, False) when it is missing and not made."""
    try:
        return os.stat(name, dir_fd=pfd, follow_symlinks=False), False
    except FileNotFoundError:
        if not make:
            return None, False
    created = False
    try:
        os.mkdir(name, 0o700, dir_fd=pfd)  # opened to others once root:root 0755
        created = True
    except FileExistsError:
        pass
    return os.stat(name, dir_fd=pfd, follow_symlinks=False), created


def _record_absent(
    here: str, todo: collections.deque[tuple[str, bool]], changes: list[Change]
) -> None:
    """The directories a walk without `modify` would create: `here` and the rest of `todo`."""
    want = "directory root:root 0755"
    changes.append((here, "absent", want))
    for rest, _ in todo:
        if rest != "..":
            here = join(here, rest)
            changes.append((here, "absent", want))


def _follow_link(
    name: str,
    pfd: int,
    here: str,
    lst: os.stat_result,
    *,
    links: int,
    managed: bool,
    stack: list[tuple[int, str]],
    todo: collections.deque[tuple[str, bool]],
) -> int:
    """Follow root's symbolic link `here`: its target's components replace it in `todo` (an
    absolute target restarts from `/`). Returns the links followed so far."""
    if lst.st_uid != 0:
        raise _link_error(here, lst)
    if lst.st_nlink != 1:
        raise UnsafePathError(
            f"{here} is a symbolic link with {lst.st_nlink} hard links (a link made "
            f"to root's link by another account?). Fix: remove {here} and rerun."
        )
    links += 1
    if links > MAX_LINKS:
        raise UnsafePathError(f"{here}: too many levels of symbolic links")
    target = os.readlink(name, dir_fd=pfd)
    if has_control(target):
        raise UnsafePathError(f"{here} points at a name with control characters")
    parts = _components(target)
    if target.startswith("/"):
        while len(stack) > 1:
            os.close(stack.pop()[0])
    new = [(c, False) for c in parts]
    if new:  # the link's target takes the place of the link
        new[-1] = (new[-1][0], managed)
    todo.extendleft(reversed(new))
    return links


def _open_dir_entry(name: str, pfd: int, here: str, lst: os.stat_result) -> int:
    """Open the directory entry `name` (lstat `lst`) of `pfd` without following a link."""
    if not stat.S_ISDIR(lst.st_mode):
        raise UnsafePathError(
            f"{here} is {kind(lst.st_mode)} owned by {owner_name(lst.st_uid)}, not a "
            f"directory. Fix: move it away and rerun."
        )
    try:
        return os.open(name, DIR_FLAGS, dir_fd=pfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise UnsafePathError(f"{here} changed while it was checked; rerun") from e
        raise


def _own_dir(
    fd: int,
    path: str,
    st: os.stat_result,
    *,
    takeover_uid: int | None,
    modify: bool,
    created: bool,
    changes: list[Change],
) -> None:
    """Make a managed (or newly created) directory root:root 0755 through its descriptor."""
    mode = stat.S_IMODE(st.st_mode)
    if (st.st_uid, st.st_gid, mode) == (0, 0, DIR_MODE):
        return
    if st.st_uid not in (0, takeover_uid):
        hint = (
            f"only directories of {owner_name(takeover_uid)} (gguf_models_takeover_owner) are "
            "taken over"
            if takeover_uid is not None
            else "gguf_models_takeover_owner names no existing account, so nothing is taken over"
        )
        raise UnsafePathError(
            f"{path} is owned by {owner_name(st.st_uid)} ({describe(st)}); the model directories "
            f"must belong to root and {hint}. Fix: check what is in it, then chown root:root "
            f"{path} (or set gguf_models_takeover_owner to that account)."
        )
    before = "absent" if created else f"directory {describe(st)}"
    changes.append((path, before, "directory root:root 0755"))
    if not modify:
        return
    # first the owner: from here on the old owner can neither change the mode nor the entries
    os.fchown(fd, 0, 0)
    os.fchmod(fd, DIR_MODE)
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, 0, DIR_MODE):
        raise UnsafePathError(f"{path} could not be made root:root 0755 (it is {describe(st)})")


def open_root_dir(path: str, dir_mode: int, *, modify: bool) -> tuple[int | None, list[str]]:
    """A directory of root's own (keys, certificates, copies): its descriptor (None when it is
    missing and not made, in check mode) and the changes made to it (or that would be).

    The chain is opened from ``/`` one component at a time, never following a link; every
    directory above `path` must be owned by root and writable only by root (sticky allowed), and
    missing ones are created (0755; `path` itself `dir_mode`). `path` is made root:root
    `dir_mode` when it is not. Raises UnsafePathError."""
    if not os.path.isabs(path) or os.path.normpath(path) == "/":
        raise UnsafePathError(f"{path!r}: the directory must be an absolute path below /")
    parts = [p for p in os.path.normpath(path).split("/") if p]
    for p in parts:
        check_name(p, "directory name")
    changes: list[str] = []
    fd = os.open("/", DIR_FLAGS)
    here = ""
    try:
        for i, name in enumerate(parts):
            st = os.fstat(fd)
            if not ancestor_ok(st):
                raise UnsafePathError(
                    f"{here or '/'} is {describe(st)}: every directory above {path} must be "
                    f"owned by root and writable only by root. Fix: chown root {here or '/'}; "
                    f"chmod go-w {here or '/'}."
                )
            here = f"{here}/{name}"
            last = i == len(parts) - 1
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                changes.append(f"{here}: created")
                if not modify:
                    os.close(fd)
                    return None, changes
                os.mkdir(name, dir_mode if last else 0o755, dir_fd=fd)
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.fchown(nfd, 0, 0)
                os.fchmod(nfd, dir_mode if last else 0o755)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                lst = os.lstat(name, dir_fd=fd)
                raise UnsafePathError(
                    f"{here} is {kind(lst.st_mode)} owned by {owner_name(lst.st_uid)}, not a "
                    f"directory; it is not followed. Fix: remove it, or point the role at the "
                    "real directory."
                ) from exc
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (0, 0, dir_mode):
            if f"{here}: created" not in changes:
                changes.append(f"{here}: {describe(st)} -> root:root {dir_mode:04o}")
            if modify:
                os.fchown(fd, 0, 0)
                os.fchmod(fd, dir_mode)
        return fd, changes
    except BaseException:
        os.close(fd)
        raise


def lstat_entry(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def entry_problem(st: os.stat_result, owners: Owners | None = None) -> str | None:
    """Why a directory entry is not a plain file root may use: None when it is a regular file
    with one link (owned by one of `owners`, when given)."""
    if not stat.S_ISREG(st.st_mode):
        owner = f" owned by {owner_name(st.st_uid)}" if stat.S_ISLNK(st.st_mode) else ""
        return f"{kind(st.st_mode)}{owner}"
    if st.st_nlink != 1:
        return f"a file with {st.st_nlink} hard links (it is also reachable under another name)"
    if owners is not None and st.st_uid not in owners:
        return f"a file owned by {owner_name(st.st_uid)}"
    return None


def remove_unsafe_temp(
    dfd: int, dpath: str, name: str, owners: Owners, *, modify: bool = True
) -> str | None:
    """A temporary name of the role (`<file>.part`, `<file>.sha256.tmp`, ...) in a root-owned
    directory: remove whatever is there unless it is a regular file with one link owned by one
    of `owners` (a link is removed, never followed; a hard link's other names keep their file).
    Returns a description of what was (or would be) removed, or None."""
    lst = lstat_entry(dfd, name)
    if lst is None:
        return None
    problem = entry_problem(lst, owners)
    if problem is None:
        return None
    path = join(dpath, name)
    if stat.S_ISDIR(lst.st_mode):
        raise UnsafePathError(
            f"{path} is a directory where the role keeps a temporary file. Fix: remove it."
        )
    if modify:
        os.unlink(name, dir_fd=dfd)
    return f"{path}: removed {problem}"


def open_regular(
    dfd: int, dpath: str, name: str, flags: int = os.O_RDONLY, owners: Owners | None = None
) -> tuple[int, os.stat_result] | None:
    """Open an entry that must be a regular file with one link, never following a link and
    never blocking on a FIFO. Returns (fd, stat) or None when there is no such entry; raises
    UnsafePathError for anything else."""
    path = join(dpath, name)
    lst = lstat_entry(dfd, name)
    if lst is None:
        return None
    problem = entry_problem(lst, owners)
    if problem is not None:
        raise UnsafePathError(f"{path} is {problem}")
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            raise UnsafePathError(f"{path} changed while it was checked; rerun") from e
        raise
    st = os.fstat(fd)
    problem = entry_problem(st, owners)
    if problem is None and (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
        problem = "replaced while it was checked"
    if problem is not None:
        os.close(fd)
        raise UnsafePathError(f"{path} is {problem}")
    return fd, st


def is_clean(st: os.stat_result, mode: int = FILE_MODE) -> bool:
    """A finished file of the role: regular, one link, root:root, `mode`."""
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_nlink == 1
        and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, mode)
    )


def create_exclusive(dfd: int, name: str, mode: int = TEMP_MODE) -> int:
    """A new file that did not exist (O_EXCL: never an existing file or link), root:root `mode`."""
    fd = os.open(name, CREATE_FLAGS, mode, dir_fd=dfd)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = os.read(fd, min(1 << 20, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def replace_file(
    dfd: int,
    dpath: str,
    name: str,
    data: bytes,
    *,
    mode: int = FILE_MODE,
    temp: str | None = None,
) -> None:
    """Write `data` to a fresh root-owned temporary file (O_EXCL, 0600 until complete), then
    rename it over `name`, both through the directory's descriptor. A stale temporary entry
    (whatever it is) is removed first; what was at `name` is replaced, never written to."""
    temp = temp or name + ".tmp"
    remove_unsafe_temp(dfd, dpath, temp, owners=())  # any stale temporary file goes
    fd = create_exclusive(dfd, temp, TEMP_MODE)
    try:
        write_all(fd, data)
        os.fsync(fd)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(temp, dir_fd=dfd)
        raise
    os.close(fd)
    os.rename(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


# --- metadata documents ------------------------------------------------------------------------

INT_FIELDS = ("size_bytes", "gguf_version", "tensor_count", "split_count")
NUMBER_FIELDS = (
    "context_length",
    "block_count",
    "embedding_length",
    "head_count",
    "head_count_kv",
    "key_length",
    "value_length",
    "expert_count",
    "expert_used_count",
    "file_type",
    "vocab_size",
)
PATH_FIELDS = ("path", "dir", "mmproj")
# header key/value maps: their keys are checked, their values may be free text (a licence)
FREE_TEXT_MAPS = ("kv", "metadata")


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_metadata(doc: Any, source: str) -> dict[str, Any]:
    """Check a model's metadata document (metadata.json or the facts) and return it. `source`
    names where it comes from (the file). Raises InvalidMetadataError naming `source` and the
    field."""

    def bad(field: str, why: str) -> NoReturn:
        raise InvalidMetadataError(f"{source}: field {field} {why}; the file is not trusted")

    if not isinstance(doc, dict):
        bad("(document)", "is not a JSON object")
    for key, value in doc.items():
        if not isinstance(key, str) or has_control(key):
            bad(repr(key), "is a key with control characters")
        _clean_strings(value, key, bad, free_text=key in FREE_TEXT_MAPS)
    _check_checksums(doc, bad)
    _check_names_and_paths(doc, bad)
    _check_numbers(doc, bad)
    _check_tensors(doc, bad)
    return doc


def _clean_strings(value: Any, field: str, bad: Bad, *, free_text: bool = False) -> None:
    """No control characters in strings (except free text) and keys; only JSON types."""
    if isinstance(value, str):
        if not free_text and has_control(value):
            bad(field, f"contains control characters or a newline ({value[:80]!r})")
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str) or has_control(k):
                bad(f"{field}[{k!r}]", "has a key with control characters")
            _clean_strings(v, f"{field}.{k}", bad, free_text=free_text)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _clean_strings(v, f"{field}[{i}]", bad, free_text=free_text)
    elif value is not None and not isinstance(value, (bool, int, float)):
        bad(field, f"has a value of type {type(value).__name__}")


def _check_checksums(doc: dict[str, Any], bad: Bad) -> None:
    if "sha256" in doc:
        sums = doc["sha256"]
        if isinstance(sums, str):
            sums = [sums]
        if not isinstance(sums, list) or not sums:
            bad("sha256", "must be a list of checksums")
        for s in sums:
            if not isinstance(s, str) or not HEX64.match(s):
                bad("sha256", f"must hold 64 lower-case hex digits, not {s!r}")
    if doc.get("chat_template_sha256") is not None and not (
        isinstance(doc["chat_template_sha256"], str) and HEX64.match(doc["chat_template_sha256"])
    ):
        bad("chat_template_sha256", "must be 64 lower-case hex digits")


def _check_names_and_paths(doc: dict[str, Any], bad: Bad) -> None:
    if "model" in doc and not (isinstance(doc["model"], str) and MODEL_NAME.match(doc["model"])):
        bad("model", f"must be a model name (letters, digits, . _ -), not {doc['model']!r}")
    for field in PATH_FIELDS:
        value = doc.get(field)
        if value is None and field != "path":
            continue
        if field in doc and not (isinstance(value, str) and value.startswith("/")):
            bad(field, f"must be an absolute path, not {value!r}")
    files = doc.get("files", [])
    if not isinstance(files, list) or not all(
        isinstance(f, str) and f.startswith("/") for f in files
    ):
        bad("files", "must be a list of absolute paths")
    for field in ("architecture", "name"):
        if doc.get(field) is not None and not isinstance(doc[field], str):
            bad(field, "must be a string")


def _check_numbers(doc: dict[str, Any], bad: Bad) -> None:
    for field in INT_FIELDS:
        if field in doc and not (isinstance(doc[field], int) and not isinstance(doc[field], bool)):
            bad(field, f"must be an integer, not {doc[field]!r}")
    for field in NUMBER_FIELDS:
        value = doc.get(field)
        if value is None or _is_number(value):
            continue
        if isinstance(value, list) and all(_is_number(v) for v in value):
            continue  # per-layer values
        bad(field, f"must be a number or a list of numbers, not {value!r}")
    for field in ("kv",):
        if field in doc and not isinstance(doc[field], dict):
            bad(field, "must be a mapping")


def _check_tensors(doc: dict[str, Any], bad: Bad) -> None:
    tensors = doc.get("tensors", [])
    if not isinstance(tensors, list):
        bad("tensors", "must be a list")
    for i, t in enumerate(tensors):
        if not (
            isinstance(t, dict)
            and isinstance(t.get("name"), str)
            and isinstance(t.get("shape", []), list)
            and all(isinstance(n, int) and not isinstance(n, bool) for n in t.get("shape", []))
        ):
            bad(f"tensors[{i}]", "must have a name and a shape of integers")


def dump_metadata(doc: dict[str, Any]) -> bytes:
    """The bytes of metadata.json (sorted, indented, ASCII only: no raw line separators)."""
    return (json.dumps(doc, indent=4, sort_keys=True, separators=(",", ": ")) + "\n").encode()


def load_metadata_fd(fd: int, source: str) -> dict[str, Any]:
    """Parse and validate a metadata document read from an open file."""
    data = read_fd(fd, MAX_METADATA_BYTES)
    if len(data) > MAX_METADATA_BYTES:
        raise InvalidMetadataError(f"{source}: larger than {MAX_METADATA_BYTES} bytes; not read")
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as e:
        raise InvalidMetadataError(
            f"{source}: not valid JSON ({e}); the file is not trusted"
        ) from e
    return validate_metadata(doc, source)


def read_saved_metadata(path: str, takeover_uid: int | None = None) -> dict[str, Any] | None:
    """Read and validate a saved metadata.json without following links or blocking, without
    changing anything. Returns the document, or None when there is none. Raises UnsafePathError
    (a link, a FIFO, a hard-linked file, a directory chain root does not control) or
    InvalidMetadataError (a bad field: the message names the file and the field)."""
    path = os.path.normpath(path)
    dpath, name = os.path.split(path)
    with walk_dir(dpath, takeover_uid=takeover_uid, modify=False, create=False) as w:
        if not w.exists:
            return None
        opened = open_regular(w.fd, w.path, name, owners=(0, takeover_uid))
        if opened is None:
            return None
        fd, _ = opened
        try:
            return load_metadata_fd(fd, join(w.path, name))
        finally:
            os.close(fd)

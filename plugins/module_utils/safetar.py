# Apache-2.0
"""Archive handling for the llama_cpp role's modules, safe for root.

Two archives reach root in this role, and neither is trusted:

- the binaries the build account compiled, streamed out of its build tree by that account
  (`runuser -u <build account> -- tar -cf - ...`): root never opens a path in the build tree, so a
  link planted there (to /etc/shadow, say) is never followed; the stream may only hold regular
  files with the expected names;
- a build shipped through the controller (a tarball another host packed): its sha256 must equal
  the one the controller recorded, and every member must be a regular file or a directory below
  the build's own top directory (no absolute path, no `..`, no link, no device).

Members are written by root into a fresh private staging directory (mkdtemp, 0700) with
O_CREAT|O_EXCL|O_NOFOLLOW, modes normalised (0755 for directories and executables, 0644 for other
files, no set-id bits), owned by root, and the result is renamed into place only when everything
checked out: on any refusal nothing is left behind.

The controller's index of shipped builds (index.json beside the tarballs) is kept here too: the
controller records the sha256 it computed itself on the fetched file, never one a host reports.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from typing import IO

# b<build number>-<first 10 hex digits of the commit>-<backend>-<first 10 of the options hash>,
# as tasks/build.yml names a build.
BUILD_NAME = re.compile(r"b[0-9]{1,9}-[0-9a-f]{10}-(?:cpu|cuda)-[0-9a-f]{10}\Z")
# a platform key: distribution-release-architecture[-backend-cuda architectures]
PLATFORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# a CMake target / binary name
BINARY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")
HEX40 = re.compile(r"[0-9a-f]{40}\Z")
HEX64 = re.compile(r"[0-9a-f]{64}\Z")

INDEX_FORMAT = 1
CHUNK = 1024 * 1024
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeArchiveError(Exception):
    """An archive (or stream) that root must not unpack. The message says which member and why."""


class ChecksumMismatchError(Exception):
    """The file's sha256 differs from the recorded one."""


def check_build_name(name: object) -> str:
    """Return the build name, or raise ValueError: it becomes a path on the controller and hosts."""
    if not isinstance(name, str) or not BUILD_NAME.match(name):
        raise ValueError(
            f"build name {name!r} is not of the form b<number>-<10 hex>-<cpu|cuda>-<10 hex> "
            "(as the llama_cpp role names its builds); refusing to use it as a path"
        )
    return name


def check_platform(platform: object) -> str:
    """Return the platform key, or raise ValueError (it becomes a directory name)."""
    if not isinstance(platform, str) or not PLATFORM.match(platform) or ".." in platform:
        raise ValueError(
            f"platform key {platform!r} must be letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit, no '..', at most 128 characters)"
        )
    return platform


def safe_host_part(host: str) -> str:
    """A host name reduced to characters that are safe in a file name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", host or "host").lstrip(".")
    return cleaned[:64] or "host"


def sha256_fd(fd: int) -> tuple[str, int]:
    """sha256 and size of what is read from `fd` (from its current offset to the end)."""
    h = hashlib.sha256()
    size = 0
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return h.hexdigest(), size
        h.update(block)
        size += len(block)


def open_regular(path: str) -> int:
    """Open an existing regular file for reading without following a link at its last component
    (and without blocking on a FIFO); refuse anything but a regular file."""
    fd = os.open(path, READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeArchiveError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_path(path: str) -> tuple[str, int]:
    fd = open_regular(path)
    try:
        return sha256_fd(fd)
    finally:
        os.close(fd)


def check_private_dir(path: str) -> None:
    """`path` must be a directory (not a link) of the current user that nobody else can write to:
    root creates its staging directory in it and renames into it."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeArchiveError(f"{path} is not a directory (or is a link)")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UnsafeArchiveError(
            f"{path} must be owned by uid {os.geteuid()} and not writable by group or others "
            f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
        )


def member_problem(
    member: tarfile.TarInfo,
    top: str | None = None,
    allowed: frozenset[str] | None = None,
    dirs: bool = True,
) -> str | None:
    """Why root must not unpack this member (None: it may).

    top: every member must be this directory or below it. allowed: the exact member names that
    may appear. dirs: whether directory members are accepted."""
    name = member.name
    if not name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"member {name!r}: empty name or control characters"
    if name.startswith("/"):
        return f"member {name!r}: absolute path"
    parts = name.rstrip("/").split("/") if member.isdir() else name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"member {name!r}: empty, '.' or '..' path component"
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        return f"member {name!r}: {kind} to {member.linkname!r} (links are refused)"
    if member.isdir():
        if not dirs:
            return f"member {name!r}: a directory where only files are expected"
    elif not member.isreg():
        return f"member {name!r}: not a regular file or directory (device, FIFO, ...)"
    if top is not None and parts[0] != top:
        return f"member {name!r}: outside the build's directory {top}/"
    if allowed is not None and "/".join(parts) not in allowed:
        return f"member {name!r}: not one of the expected names {sorted(allowed)}"
    return None


def member_mode(member: tarfile.TarInfo) -> int:
    """Normalised mode: 0755 for directories and anything executable, else 0644; never set-id."""
    if member.isdir() or member.mode & 0o111:
        return 0o755
    return 0o644


class Staging:
    """A fresh private directory (mkdtemp, 0700) beside the final destination, removed unless
    `commit` renamed its content into place."""

    def __init__(self, parent: str, prefix: str) -> None:
        check_private_dir(parent)
        self.parent = parent
        self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        self.hashes: dict[str, str] = {}

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if os.path.isdir(self.path) and not os.path.islink(self.path):
            shutil.rmtree(self.path, ignore_errors=True)

    def _dir(self, parts: list[str]) -> str:
        path = self.path
        for part in parts:
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    raise UnsafeArchiveError(f"{path}: expected a directory") from None
        return path

    def add_dir(self, name: str, mode: int = 0o755) -> None:
        path = self._dir(name.rstrip("/").split("/"))
        os.chmod(path, mode)

    def add_file(self, name: str, source: IO[bytes], mode: int) -> str:
        """Write `source` (a file object) to `name` below the staging directory; return its
        sha256."""
        parts = name.split("/")
        parent = self._dir(parts[:-1])
        path = os.path.join(parent, parts[-1])
        try:
            fd = os.open(path, FILE_FLAGS, 0o600)
        except FileExistsError:
            raise UnsafeArchiveError(f"member {name!r} appears twice") from None
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                while True:
                    block = source.read(CHUNK)
                    if not block:
                        break
                    h.update(block)
                    out.write(block)
                out.flush()
            if os.geteuid() == 0:
                os.fchown(fd, 0, 0)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = h.hexdigest()
        self.hashes[name] = digest
        return digest

    def finalize_dirs(self, root: str) -> None:
        """Give every directory below `root` (inside the staging directory) mode 0755."""
        base = os.path.join(self.path, root)
        for dirpath, _dirnames, _files in os.walk(base):
            os.chmod(dirpath, 0o755)


def _replace_dir(src: str, dest: str) -> None:
    """Move directory `src` to `dest`, replacing an older (incomplete) `dest` (root-owned)."""
    if os.path.lexists(dest):
        if os.path.islink(dest) or not os.path.isdir(dest):
            os.unlink(dest)
        else:
            old = dest + ".old-" + str(os.getpid())
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
    os.rename(src, dest)


def _replace_dir_away(path: str) -> None:
    """Remove an installed build directory that failed its check after the rename."""
    old = path + ".refused-" + str(os.getpid())
    os.rename(path, old)
    shutil.rmtree(old, ignore_errors=True)


def install_stream(
    stream: IO[bytes],
    dest: str,
    names: list[str],
    before_commit: Callable[[], None] | None = None,
) -> dict[str, str]:
    """Unpack a tar stream that must hold exactly the regular files `names` (no directories, no
    links, no paths) into the fresh directory `dest` (its parent must be private to root).
    `before_commit` is called once the stream is read, before anything is renamed into place (it
    raises to refuse, e.g. when the producer exited non-zero). Returns {name: sha256}. On any
    problem raise and leave `dest`'s parent as it was."""
    for n in names:
        if not BINARY.match(n):
            raise ValueError(f"binary name {n!r} is not a plain file name")
    allowed = frozenset(names)
    parent = os.path.dirname(dest.rstrip("/"))
    with Staging(parent, ".bin-") as staging:
        with tarfile.open(fileobj=stream, mode="r|") as tf:
            for member in tf:
                problem = member_problem(member, allowed=allowed, dirs=False)
                if problem:
                    raise UnsafeArchiveError(problem)
                src = tf.extractfile(member)
                if src is None:
                    raise UnsafeArchiveError(f"member {member.name!r}: no data")
                staging.add_file(member.name, src, 0o755)
        missing = sorted(allowed - set(staging.hashes))
        if missing:
            raise UnsafeArchiveError(f"the stream lacks {missing}")
        if before_commit is not None:
            before_commit()
        os.chmod(staging.path, 0o755)
        _replace_dir(staging.path, dest)
        return dict(staging.hashes)


def _load_manifest(build_dir: str, name: str) -> dict[str, object]:
    try:
        with open(os.path.join(build_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except ValueError as exc:
        problem = f"shipped build {name}: manifest.json is not JSON: {exc}"
        raise UnsafeArchiveError(problem) from None
    if not isinstance(manifest, dict):
        raise UnsafeArchiveError(f"shipped build {name}: manifest.json is not an object")
    return manifest


def binaries_problems(
    manifest: dict[str, object], name: str, hashes: dict[str, str], builder: str | None = None
) -> list[str]:
    """Why a build's files disagree with its own manifest (empty: they agree).

    `hashes` maps each regular file of the build (as ``<name>/bin/<binary>`` and the like) to its
    sha256. Every file in ``<name>/bin/`` must be one of the manifest's ``binaries_sha256`` with
    that sha256, and every binary the manifest lists must be there: a binary changed after the
    build, or one added beside them, refuses the build. With `builder`, the manifest's ``host``
    (the host that compiled it) must be that host."""
    problems = []
    listed = manifest.get("binaries_sha256")
    if (
        not isinstance(listed, dict)
        or not listed
        or not all(
            isinstance(k, str) and BINARY.match(k) and isinstance(v, str) and HEX64.match(v)
            for k, v in listed.items()
        )
    ):
        return [f"shipped build {name}: its manifest.json has no valid binaries_sha256"]
    prefix = f"{name}/bin/"
    present = {m[len(prefix) :]: h for m, h in hashes.items() if m.startswith(prefix)}
    for binary, digest in sorted(present.items()):
        if binary not in listed:
            problems.append(f"bin/{binary} is not in the manifest's binaries_sha256")
        elif digest != listed[binary]:
            problems.append(
                f"bin/{binary} has sha256 {digest}, "
                f"the manifest's binaries_sha256 says {listed[binary]}"
            )
    problems += [
        f"bin/{b} is in the manifest's binaries_sha256 but not in the archive"
        for b in sorted(set(listed) - set(present))
    ]
    if builder is not None and manifest.get("host") != builder:
        problems.append(
            f"its manifest.json says it was built on {manifest.get('host')!r}, "
            f"the controller recorded it from {builder!r}"
        )
    return problems


def _check_build_manifest(
    build_dir: str,
    name: str,
    commit: str | None,
    hashes: dict[str, str] | None = None,
    builder: str | None = None,
) -> dict[str, object]:
    """The unpacked manifest.json must be JSON naming the build `name` (and `commit`, when
    given) and, with `hashes`, agree with the files (binaries_problems); else
    UnsafeArchiveError. Returns the manifest."""
    manifest = _load_manifest(build_dir, name)
    if manifest.get("name") != name:
        raise UnsafeArchiveError(
            f"shipped build {name}: its manifest.json names the build {manifest.get('name')!r}"
        )
    if commit and manifest.get("commit") != commit:
        raise UnsafeArchiveError(
            f"shipped build {name}: its manifest.json has commit "
            f"{manifest.get('commit')!r}, this host checked out {commit}"
        )
    if hashes is not None:
        problems = binaries_problems(manifest, name, hashes, builder)
        if problems:
            raise UnsafeArchiveError(
                f"shipped build {name}: refused, nothing was installed: " + "; ".join(problems[:5])
            )
    return manifest


def installed_binaries_problems(build_dir: str, manifest: dict[str, object]) -> list[str]:
    """Compare the binaries installed in `build_dir`/bin with the manifest's binaries_sha256
    (read again from disk, after the rename)."""
    name = os.path.basename(build_dir.rstrip("/"))
    hashes = {}
    bindir = os.path.join(build_dir, "bin")
    for entry in sorted(os.listdir(bindir)) if os.path.isdir(bindir) else []:
        hashes[f"{name}/bin/{entry}"] = sha256_path(os.path.join(bindir, entry))[0]
    return binaries_problems(manifest, name, hashes)


def unpack_build(
    path: str,
    dest: str,
    name: str,
    sha256: str,
    commit: str | None = None,
    *,
    builder: str | None = None,
) -> dict[str, object]:
    """Install the shipped build tarball `path` as `dest`/`name`.

    The file is opened once (no link followed); its sha256 must equal `sha256` (else
    ChecksumMismatchError, nothing unpacked); every member is checked before anything is
    written; the unpacked manifest.json must name the build `name` (and `commit`, when given),
    list every binary with the sha256 it has (binaries_problems: a binary changed by the host that
    packed it, or one added, refuses the build) and, with `builder`, name that host. After the
    rename the installed binaries are hashed again against the manifest.
    Returns {changed, sha256, members, binaries_sha256}; changed is False when `dest`/`name`
    already holds a complete build (its manifest.json)."""
    check_build_name(name)
    if not HEX64.match(sha256 or ""):
        raise ValueError(f"expected sha256 {sha256!r} is not 64 hex digits")
    final = os.path.join(dest, name)
    fd = open_regular(path)
    try:
        actual, _size = sha256_fd(fd)
        if actual != sha256:
            raise ChecksumMismatchError(
                f"shipped build {name}: sha256 mismatch: the controller recorded {sha256}, "
                f"the copy on this host ({path}) has {actual}; nothing was unpacked"
            )
        os.lseek(fd, 0, os.SEEK_SET)
        with os.fdopen(os.dup(fd), "rb") as raw, tarfile.open(fileobj=raw, mode="r:gz") as tf:
            members = tf.getmembers()
            problems = [p for p in (member_problem(m, top=name) for m in members) if p]
            if problems:
                raise UnsafeArchiveError(
                    f"shipped build {name}: refused, nothing was unpacked: "
                    + "; ".join(problems[:5])
                )
            names = {m.name.rstrip("/") for m in members}
            if f"{name}/manifest.json" not in names:
                raise UnsafeArchiveError(
                    f"shipped build {name}: the archive has no {name}/manifest.json"
                )
            if os.path.isfile(os.path.join(final, "manifest.json")):
                return {"changed": False, "sha256": actual, "members": len(members)}
            with Staging(dest, ".unpack-") as staging:
                for m in members:
                    if m.isdir():
                        staging.add_dir(m.name)
                    else:
                        src = tf.extractfile(m)
                        if src is None:
                            raise UnsafeArchiveError(f"member {m.name!r}: no data")
                        staging.add_file(m.name, src, member_mode(m))
                staging.finalize_dirs(name)
                manifest = _check_build_manifest(
                    os.path.join(staging.path, name), name, commit, staging.hashes, builder
                )
                _replace_dir(os.path.join(staging.path, name), final)
            problems = installed_binaries_problems(final, manifest)
            if problems:
                _replace_dir_away(final)
                raise UnsafeArchiveError(
                    f"shipped build {name}: the installed binaries differ from its manifest "
                    f"({'; '.join(problems[:5])}); removed again"
                )
            return {
                "changed": True,
                "sha256": actual,
                "members": len(members),
                "binaries_sha256": manifest["binaries_sha256"],
            }
    finally:
        os.close(fd)


# --- the controller's index of shipped builds -------------------------------------------------


def index_file(directory: str) -> str:
    return os.path.join(directory, "index.json")


def tarball_rel(platform: str, name: str) -> str:
    return f"{check_platform(platform)}/{check_build_name(name)}.tar.gz"


def load_index(directory: str) -> dict[str, object]:
    path = index_file(directory)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"format": INDEX_FORMAT, "builds": {}}
    except ValueError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc}); remove it to start a new index"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("builds"), dict):
        raise ValueError(f"{path} is not an index of shipped builds; remove it to start a new one")
    return data


def not_a_builder(entry: object, builders: Collection[str] | None) -> str:
    """Why an index entry does not count (its builder is not one of `builders` now); "" when it
    counts or when `builders` is None (no restriction)."""
    if builders is None or not isinstance(entry, dict):
        return ""
    who = str(entry.get("builder", ""))
    if who in builders:
        return ""
    return (
        f"recorded from {who or 'an unnamed host'}, which is not one of the builders now "
        f"({', '.join(sorted(builders)) or 'none named'}): ignored"
    )


def lookup(
    directory: str, platform: str, name: str, builders: Collection[str] | None = None
) -> dict[str, object]:
    """The index entry of build `name` for `platform` ({} when none), the tarball's path and
    whether it exists. With `builders`, an entry recorded from a host that is not one of them
    (a builder taken off the list) is not found (`ignored` says why)."""
    rel = tarball_rel(platform, name)
    builds = load_index(directory)["builds"]
    per_platform = builds.get(platform) if isinstance(builds, dict) else None
    entry = per_platform.get(name) if isinstance(per_platform, dict) else None
    valid = isinstance(entry, dict) and HEX64.match(str(entry.get("sha256", "")))
    if entry is not None and not valid:
        raise ValueError(
            f"{index_file(directory)}: the entry of {platform}/{name} has no valid sha256"
        )
    ignored = not_a_builder(entry, builders)
    if ignored:
        entry = None
    tarball = os.path.join(directory, rel)
    return {
        "found": entry is not None,
        "entry": entry or {},
        "tarball": tarball,
        "tarball_exists": os.path.isfile(tarball) and not os.path.islink(tarball),
        "ignored": ignored,
    }


def find_build(
    directory: str,
    platform: str,
    commit: str,
    backend: str,
    options_hash: str,
    *,
    builders: Collection[str] | None = None,
) -> str:
    """The name of the build of ``commit`` with these options (``backend``, the first 10 hex
    digits of the options hash) recorded for ``platform`` with that commit, whose tarball is in
    place; "" when there is none or more than one (then the host checks out and counts itself).
    A host that installs a shipped build learns the build number this way, from the build its
    builder counted on the same commit, instead of cloning the history to count it again."""
    if not HEX40.match(commit or "") or backend not in ("cpu", "cuda"):
        return ""
    if not re.fullmatch(r"[0-9a-f]{10,64}", options_hash or ""):
        return ""
    builds = load_index(directory)["builds"]
    per_platform = builds.get(check_platform(platform)) if isinstance(builds, dict) else None
    if not isinstance(per_platform, dict):
        return ""
    suffix = f"-{commit[:10]}-{backend}-{options_hash[:10]}"
    found = []
    for name, entry in per_platform.items():
        if not (isinstance(name, str) and name.endswith(suffix) and isinstance(entry, dict)):
            continue
        try:
            check_build_name(name)
        except ValueError:
            continue
        hit = lookup(directory, platform, name, builders)
        if entry.get("commit") == commit and hit["found"] and hit["tarball_exists"]:
            found.append(name)
    return found[0] if len(found) == 1 else ""


def incoming_path(directory: str, platform: str, name: str, builder: str) -> str:
    """Where a tarball fetched from ``builder`` waits to be recorded."""
    return os.path.join(
        directory, check_platform(platform), f".incoming-{safe_host_part(builder)}-{name}.tar.gz"
    )


def query(
    directory: str,
    platform: str,
    *,
    name: str = "",
    commit: str = "",
    backend: str = "",
    options_hash: str = "",
    builders: Collection[str] | None = None,
    builder: str = "",
) -> dict[str, object]:
    """A read-only query of the index: the entry of build ``name`` for ``platform``, or, without
    a name, of the one build of ``commit`` with these options whose tarball is in place
    (find_build; ``name`` "" and nothing found when there is none), with the tarball's path,
    whether it exists and where a tarball of ``builder`` would be fetched to. Raises ValueError,
    OSError or UnsafeArchiveError on a bad name, platform or index."""
    platform = check_platform(platform)
    if not name:
        name = find_build(directory, platform, commit, backend, options_hash, builders=builders)
        if not name:
            return {
                "name": "",
                "found": False,
                "entry": {},
                "tarball": "",
                "tarball_exists": False,
                "incoming": "",
                "ignored": "",
            }
    name = check_build_name(name)
    result = lookup(directory, platform, name, builders)
    result["incoming"] = incoming_path(directory, platform, name, builder)
    result["name"] = name
    return result


MANIFEST_MAX = 1024 * 1024


def archive_problems(path: str, name: str, builder: str | None = None) -> list[str]:
    """Read the build tarball `path` (no link followed) without unpacking it: every member must be
    safe (member_problem) and every binary agree with the manifest's binaries_sha256
    (binaries_problems; with `builder`, the manifest must name it). Returns the problems."""
    check_build_name(name)
    fd = open_regular(path)
    try:
        with os.fdopen(os.dup(fd), "rb") as raw, tarfile.open(fileobj=raw, mode="r|gz") as tf:
            hashes: dict[str, str] = {}
            manifest_data = b""
            for m in tf:
                problem = member_problem(m, top=name)
                if problem:
                    return [problem]
                if not m.isreg():
                    continue
                src = tf.extractfile(m)
                if src is None:
                    return [f"member {m.name!r}: no data"]
                h = hashlib.sha256()
                keep = m.name == f"{name}/manifest.json"
                if keep and m.size > MANIFEST_MAX:
                    return [f"{m.name}: larger than {MANIFEST_MAX} bytes"]
                while block := src.read(CHUNK):
                    h.update(block)
                    if keep:
                        manifest_data += block
                hashes[m.name] = h.hexdigest()
    except (tarfile.TarError, OSError, EOFError) as exc:
        return [f"not a readable archive ({type(exc).__name__}: {exc})"]
    finally:
        os.close(fd)
    if f"{name}/manifest.json" not in hashes:
        return [f"the archive has no {name}/manifest.json"]
    try:
        manifest = json.loads(manifest_data.decode("utf-8"))
    except ValueError as exc:
        return [f"manifest.json is not JSON: {exc}"]
    if not isinstance(manifest, dict) or manifest.get("name") != name:
        return [f"its manifest.json does not name the build {name}"]
    return binaries_problems(manifest, name, hashes, builder)


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    os.makedirs(directory, exist_ok=True)
    lock = os.path.join(directory, ".index.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_json(path: str, data: object) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".index.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def record(
    directory: str,
    platform: str,
    name: str,
    src: str,
    *,
    builder: str,
    commit: str = "",
    now: float | None = None,
    builders: Collection[str] | None = None,
) -> tuple[bool, dict[str, object]]:
    """Record the tarball `src` (just fetched from `builder`) as build `name` of `platform`: the
    sha256 is computed here, on the controller's copy. `src` is moved to its final name. An entry
    whose tarball is still in place with the recorded sha256 is kept (first recorded wins; `src`
    is dropped), unless its builder is not one of `builders` now. With `builders`, a host that is
    not one of them may not record anything; every tarball must agree with its own manifest
    (archive_problems) before it is recorded. Returns (changed, entry)."""
    rel = tarball_rel(platform, name)
    final = os.path.join(directory, rel)
    if builders is not None and builder not in builders:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(src)
        raise UnsafeArchiveError(
            f"{builder or 'an unnamed host'} is not one of the builders "
            f"({', '.join(sorted(builders)) or 'none named'}): it may not ship a build "
            f"({platform}/{name} was not recorded); name the hosts that build in the inventory "
            "group llama_cpp_builders"
        )
    with _locked(directory):
        data = load_index(directory)
        builds = data["builds"]
        if not isinstance(builds, dict):
            raise AssertionError("expected isinstance(builds, dict)")
        per_platform = builds.get(platform)
        if not isinstance(per_platform, dict):
            per_platform = builds[platform] = {}
        old = per_platform.get(name)
        if not_a_builder(old, builders):
            old = None
        if isinstance(old, dict) and os.path.isfile(final) and not os.path.islink(final):
            try:
                same = sha256_path(final)[0] == old.get("sha256")
            except (OSError, UnsafeArchiveError):
                same = False
            if same:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(src)
                return False, old
        problems = archive_problems(src, name, builder)
        if problems:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(src)
            raise UnsafeArchiveError(
                f"the build {platform}/{name} fetched from {builder} was not recorded: "
                + "; ".join(problems[:5])
            )
        digest, size = sha256_path(src)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(src, final)
        entry: dict[str, object] = {
            "sha256": digest,
            "size": size,
            "file": rel,
            "platform": platform,
            "builder": builder,
            "commit": commit if HEX40.match(commit or "") else "",
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        }
        per_platform[name] = entry
        data["format"] = INDEX_FORMAT
        _write_json(index_file(directory), data)
        return True, entry


def oserror_text(exc: OSError) -> str:
    return f"{exc.filename}: {os.strerror(exc.errno or errno.EIO)}" if exc.filename else str(exc)

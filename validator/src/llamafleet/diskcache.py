"""Answers that cost a process to compute, kept on disk for the processes of one account.

The chat template's renders run in a child process (:mod:`llamafleet.chat_template`: a template
from a downloaded GGUF is hostile until rendered under limits). Every ``llamafleet check`` is a new
process, and Ansible runs each task of each host in a new process too, so without this each of
them starts a child for a template it has rendered before; with it, one answer per template (and
per version of the code that answers) serves them all.

Where: ``$LLAMAFLEET_TEMPLATE_CACHE``, else ``$XDG_CACHE_HOME/llamafleet``, else
``~/.cache/llamafleet``; ``off`` (or an empty value) keeps nothing.

Trust. The directory is used only when it is a real directory (not a link) owned by this process's
effective user and not writable by its group or others; it is created ``0700``. An entry is a
file named by the sha256 of its key (the question and the version of the code that answers it,
:func:`key`), read only when it is a regular file (opened without following a link) owned by the
same user, not writable by group or others, at most :data:`MAX_ENTRY` bytes, and when the key it
records is the one asked for. Anything else is ignored (and a new answer is computed); a write is a
new file renamed over the entry. Who can write the directory could plant answers: that is the
account itself, which already runs the checker."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from typing import Any

#: Largest entry read back (a fixed chat template is tens of KiB).
MAX_ENTRY = 8 << 20
_FORMAT = 1


def switched_off(value: str) -> bool:
    """Whether an environment setting of a cache says off ("", off, 0, no, false)."""
    return value.strip().lower() in ("", "off", "0", "no", "false")


def directory() -> str | None:
    """The cache directory ("" or ``off`` in the environment: none)."""
    given = os.environ.get("LLAMAFLEET_TEMPLATE_CACHE")
    if given is not None:
        return None if switched_off(given) else given
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "llamafleet")


def key(namespace: str, question: Mapping[str, Any]) -> str:
    """The entry's name: the sha256 of the namespace and the question (JSON, sorted keys)."""
    text = json.dumps(
        {"format": _FORMAT, "namespace": namespace, "question": question},
        sort_keys=True,
        ensure_ascii=True,
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def own_dir(path: str, create: bool) -> bool:
    """Whether ``path`` is a directory this user owns that no one else can write (made 0700)."""
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.geteuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def read_own(path: str, limit: int = MAX_ENTRY) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (opened without following a link) of this
    process's effective user that nobody else can write, of at most ``limit`` bytes; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or st.st_size > limit
        ):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def write_own(directory: str, name: str, body: bytes) -> None:
    """``body`` as ``directory/name``: a new file (0600) renamed over the name; nothing on an
    error (the next reader computes its answer again)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name[:16]}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.chmod(tmp, 0o600)
        os.replace(tmp, os.path.join(directory, name))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def get(namespace: str, question: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer kept for ``question``, or None."""
    where = directory()
    if where is None or not own_dir(where, create=False):
        return None
    name = key(namespace, question)
    raw = read_own(os.path.join(where, name))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("key") != name:
        return None
    answer = data.get("answer")
    return answer if isinstance(answer, dict) else None


def put(namespace: str, question: Mapping[str, Any], answer: Mapping[str, Any]) -> None:
    """Keep ``answer`` for ``question`` (nothing when there is no usable directory)."""
    where = directory()
    if where is None or not own_dir(where, create=True):
        return
    name = key(namespace, question)
    body = json.dumps({"key": name, "answer": dict(answer)}).encode("utf-8")
    if len(body) > MAX_ENTRY:
        return
    write_own(where, name, body)

"""Reading the files given to ``llamafleet check``: regular files only, size-capped, any encoding.

A FIFO, a device or a directory is refused before anything is read from it (opening a FIFO for
reading would block until a writer comes); a file above :data:`MAX_INPUT_BYTES` is refused; the
bytes are decoded by their byte-order mark (UTF-8, UTF-16, UTF-32), as UTF-16 when every other
byte is NUL (a Windows editor's "Unicode"), else as UTF-8, else as Windows-1252 (where every
byte means a character: latin-1 files read as they were written). NUL bytes left in the text are
kept as characters; no input makes the reader fail other than by :class:`InputError`.
"""

from __future__ import annotations

import codecs
import os
import stat

from llamafleet.errors import InputError

#: The largest input file read (llama-server scripts, units, compose files and settings are a few
#: KiB; a larger file is not a configuration).
MAX_INPUT_BYTES = 2 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory; give the files to check"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _what(mode: int) -> str:
    for test, what in _KINDS:
        if test(mode):
            return what
    return "not a regular file"


def read_bytes(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); InputError otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file ({_what(st.st_mode)}); nothing was read")
    if st.st_size > limit:
        raise InputError(
            f"{path}: {st.st_size} bytes; llamafleet reads input files of at most "
            f"{limit // (1024 * 1024)} MiB (a configuration is a few KiB)"
        )
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC", "O_BINARY"):
        flags |= getattr(os, name, 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for something else after the first look
            raise InputError(f"{path}: not a regular file ({_what(st.st_mode)}); nothing was read")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise InputError(
                    f"{path}: larger than {limit // (1024 * 1024)} MiB; llamafleet reads input "
                    "files of at most that size"
                )
            chunks.append(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    return b"".join(chunks)


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def decode(data: bytes) -> str:
    """Text from bytes in whatever encoding a configuration file was saved in (see the module)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    if len(data) >= 4 and b"\x00" in data[:256]:
        head = data[:256]
        even, odd = head[0::2], head[1::2]
        if odd.count(0) > len(odd) * 0.6 and even.count(0) < len(even) * 0.2:
            return data.decode("utf-16-le", errors="replace")
        if even.count(0) > len(even) * 0.6 and odd.count(0) < len(odd) * 0.2:
            return data.decode("utf-16-be", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def read_text(path: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of the regular file ``path``: see :func:`read_bytes` and :func:`decode`."""
    return decode(read_bytes(path, limit))

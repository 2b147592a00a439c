"""Readers of the files people keep llama-server commands and Claude Code environments in.

Each reader returns a :class:`~llamafleet.readers.common.ReadResult`: every llama-server
invocation of the file (each with its own lines), the Claude Code environments it sets, and the
proxies that listen in the server's place. :func:`read_script` picks the reader by kind:
``shell`` (sh/bash), ``cmd`` (Windows batch), ``powershell``; :func:`read_compose` reads Docker
Compose files.
"""

from __future__ import annotations

from llamafleet.readers import common
from llamafleet.readers.common import ClientEnv, EnvValue, Listener, ReadResult
from llamafleet.readers.shell import ShellReader

# a unit's or a container's `sh -c` is read by the shell reader, which builds on common
common.SHELL_READER = ShellReader

__all__ = ["ClientEnv", "EnvValue", "Listener", "ReadResult", "read_compose", "read_script"]


def read_script(text: str, path: str, kind: str = "shell") -> ReadResult:
    """Every llama-server command of a script (``kind``: shell, cmd, powershell, env)."""
    if kind == "cmd":
        from llamafleet.readers.windows import read_cmd

        return read_cmd(text, path)
    if kind == "powershell":
        from llamafleet.readers.windows import read_powershell

        return read_powershell(text, path)
    from llamafleet.readers.shell import read_shell

    return read_shell(text, path)


def read_compose(data: object, text: str, path: str) -> ReadResult:
    """The llama-server services, Claude Code environments and proxies of a Compose file."""
    from llamafleet.readers.compose import read_compose as _read

    return _read(data, text, path)

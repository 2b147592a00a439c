"""Shared base of the errors that mean "bad input" (the CLI turns them into exit code 2) and of an
internal error (exit code 3)."""

from __future__ import annotations

SEVERITIES = ("error", "warning", "info")


class InputError(ValueError):
    """A file, fact or option the user gave cannot be used; the message names it and the fix."""


class InternalError(RuntimeError):
    """A bug in llamafleet met while checking a file; the message names the file (one line)."""

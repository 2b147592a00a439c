"""Shared base of the errors that mean "bad input" (the CLI turns them into exit code 2)."""

from __future__ import annotations

SEVERITIES = ("error", "warning", "info")


class InputError(ValueError):
    """A file, fact or option the user gave cannot be used; the message names it and the fix."""

"""The llamafleet validator package on the controller: the one import guard of the collection's
filters and action plugins. They import the package (``pip install llamafleet``, ./validator of
this repository) where they are loaded and call ``require`` where they need it, so that a
controller without it gets one message saying what to install, from whichever plugin ran first.
The modules never import it: they run on the managed hosts."""

from __future__ import annotations

from ansible.errors import AnsibleError

#: what to do about it
INSTALL = "pip install ./validator (the llamafleet package) into the Python that runs Ansible"


def message(exc: BaseException) -> str:
    """The one wording of a missing validator package."""
    return f"the llamafleet Python package is not importable on the controller ({INSTALL}): {exc}"


def require(exc: ImportError | None, error: type[AnsibleError] = AnsibleError) -> None:
    """Raise ``error`` (a plugin's own kind: AnsibleFilterError, AnsibleActionFail) when ``exc``,
    the ImportError the plugin caught importing the package, is set."""
    if exc is not None:
        raise error(message(exc)) from exc

# Apache-2.0
"""Compile a Jinja template once per run, not once per task and host.

ansible-core (2.19 to 2.21) compiles a template every time it renders one: the source is parsed,
turned into Python and compiled again in every task's process, and each task of each host runs in
a process of its own. A no-change rollout compiles some 350 templates per host, the same ones on
every host (the tasks' arguments, their conditions, the roles' variables).

:func:`install` (called by the ``llamafleet.fleet.preload`` callback in ansible-playbook's main
process, before it forks any task's process) wraps ``AnsibleEnvironment.compile``: a template
source whose compiled code some process of this run already made is not compiled again. The code
is kept in memory (this process) and in a directory of this run (``<ansible's local tmp>/
llamafleet-jinja``, the directory where Ansible keeps the run's module payloads; removed with it
when the run ends), one file per template, so a task's process finds what an earlier one
compiled. What the code depends on is in its key: the template source, the environment's syntax
and code-generation settings, whether Ansible escapes backslashes in it, and the versions of
Python, Jinja and ansible-core. The run's plugins do not change while it runs, so a filter's
calling convention (which Jinja reads while compiling) is the same in every process.

Trust: the directory is made ``0700`` inside Ansible's own ``0700`` run directory, and is used
only when it is a real directory owned by this user and writable by nobody else. An entry is read
only when it is a regular file (opened without following a link), owned by this user, writable by
nobody else, not larger than :data:`MAX_ENTRY`, and holds the key it is named for; anything else
is compiled again (and, where it can be, replaced). A write is a new file renamed over the name.
Whoever can write the run directory can already change the module payloads Ansible sends to the
hosts from it. (The checks are llamafleet.diskcache's own_dir and read_own, the ones the chat
template's kept answers pass: the llamafleet package is needed, as by every plugin that checks.)

Off with ``LLAMAFLEET_JINJA_CACHE=off`` (or when ansible-core has no such environment): templates
are then compiled as Ansible compiles them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
import types
from typing import Any

#: Largest entry read back (the code of one template; the rollout's largest is a few KiB).
MAX_ENTRY = 4 << 20
#: Entries kept in one process's memory.
MAX_MEMORY = 4096
_MAGIC = b"LFJC1\n"
_SUBDIR = "llamafleet-jinja"

_state: dict[str, Any] = {"installed": False, "dir": None, "compiled": 0, "loaded": 0}
_memory: dict[str, types.CodeType] = {}


def enabled() -> bool:
    """LLAMAFLEET_JINJA_CACHE, read as the chat template's cache reads its own switch."""
    from llamafleet.diskcache import switched_off

    return not switched_off(os.environ.get("LLAMAFLEET_JINJA_CACHE", "on"))


def cache_dir(run_tmp: str) -> str | None:
    """The run's entry directory under ``run_tmp`` (made 0700); None where it is not trusted."""
    from llamafleet.diskcache import own_dir

    if not own_dir(run_tmp, create=False):
        return None
    path = os.path.join(run_tmp, _SUBDIR)
    return path if own_dir(path, create=True) else None


def _versions() -> str:
    """Python's bytecode magic and version, Jinja's and ansible-core's (computed once)."""
    if "versions" in _state:
        return str(_state["versions"])
    import jinja2

    try:
        from ansible.release import __version__ as ansible_version
    except ImportError:  # pragma: no cover - Ansible always has it
        ansible_version = "?"
    _state["versions"] = (
        f"{importlib.util.MAGIC_NUMBER.hex()}|{sys.version}|{jinja2.__version__}|{ansible_version}"
    )
    return str(_state["versions"])


def settings_key(env: Any, escape_backslashes: bool) -> str | None:
    """What, besides the source, the compiled code of a template depends on; None when the
    environment has a setting this cache does not key on (an autoescape function)."""
    if callable(getattr(env, "autoescape", False)):
        return None
    parts = (
        f"{type(env).__module__}.{type(env).__qualname__}",
        f"{env.code_generator_class.__module__}.{env.code_generator_class.__qualname__}",
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.optimized,
        env.is_async,
        bool(env.autoescape),
        env.finalize is not None,
        tuple(sorted(env.extensions)),
        tuple(sorted(getattr(env, "intercepted_binops", ()))),
        tuple(sorted(getattr(env, "intercepted_unops", ()))),
        escape_backslashes,
    )
    return repr(parts)


def entry_key(settings: str, source: str) -> str:
    """The sha256 that names an entry."""
    h = hashlib.sha256()
    for part in (_versions(), settings, source):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def read_entry(directory: str, key: str) -> types.CodeType | None:
    """The code kept under ``key``, or None (absent, or anything that cannot be trusted: see
    llamafleet.diskcache.read_own)."""
    from llamafleet.diskcache import read_own

    data = read_own(os.path.join(directory, key), MAX_ENTRY)
    head = _MAGIC + key.encode("ascii") + b"\n"
    if data is None or not data.startswith(head):
        return None
    try:
        code = marshal.loads(data[len(head) :])
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def write_entry(directory: str, key: str, code: types.CodeType) -> None:
    """Keep ``code`` under ``key``: a new 0600 file renamed over the name (best effort)."""
    from llamafleet.diskcache import write_own

    write_own(directory, key, _MAGIC + key.encode("ascii") + b"\n" + marshal.dumps(code))


def stats() -> dict[str, Any]:
    """How many templates this process compiled and how many it took from the cache."""
    return {k: _state[k] for k in ("installed", "dir", "compiled", "loaded")}


def install(run_tmp: str | None = None) -> str | None:
    """Wrap ``AnsibleEnvironment.compile`` (once per process). Returns why it did not, or None."""
    if _state["installed"]:
        return None
    try:
        import llamafleet.diskcache  # noqa: F401 - its switch, private-file reader and writer
    except ImportError:
        return "the llamafleet package is not installed"
    if not enabled():
        return "off (LLAMAFLEET_JINJA_CACHE)"
    try:
        from ansible._internal._templating import _jinja_bits
    except ImportError:
        return "this ansible-core has no AnsibleEnvironment"
    environment = getattr(_jinja_bits, "AnsibleEnvironment", None)
    context = getattr(_jinja_bits, "_TemplateCompileContext", None)
    if environment is None or context is None:
        return "this ansible-core has no AnsibleEnvironment"
    if run_tmp is None:
        from ansible import constants

        run_tmp = str(constants.DEFAULT_LOCAL_TMP)
    directory = cache_dir(run_tmp)
    original = environment.compile

    def compile(  # noqa: PLR0917 - jinja2.Environment.compile's own signature
        self: Any,
        source: Any,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> Any:
        if (
            not isinstance(source, str)
            or name is not None
            or filename is not None
            or raw
            or defer_init
            or getattr(self, "_debuggable_template_source", False)
        ):
            return original(self, source, name, filename, raw, defer_init)
        current = context.current(optional=True)
        settings = settings_key(self, bool(current and current.escape_backslashes))
        if settings is None:
            return original(self, source, name, filename, raw, defer_init)
        key = entry_key(settings, source)
        code = _memory.get(key)
        if code is None and directory is not None:
            code = read_entry(directory, key)
            if code is not None:
                _state["loaded"] += 1
        if code is None:
            code = original(self, source, name, filename, raw, defer_init)
            _state["compiled"] += 1
            if directory is not None and isinstance(code, types.CodeType):
                write_entry(directory, key, code)
        if len(_memory) < MAX_MEMORY:
            _memory[key] = code
        return code

    environment.compile = compile
    _state.update(installed=True, dir=directory)
    return None

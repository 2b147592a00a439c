"""Claude Code settings files: loading with positions, and merging with Claude Code's precedence.

Precedence (highest first): managed (``/etc/claude-code/managed-settings.json``) > local project
(``.claude/settings.local.json``) > project (``.claude/settings.json``) > user
(``~/.claude/settings.json``) > the environment Claude Code starts in (lowest, for ``env`` keys):
variables a shell script exports, a Compose service's ``environment`` (:func:`env_settings`), the
process environment.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from urllib.parse import SplitResult

from llamafleet.lazyre import lazy
from llamafleet.record import Record
from llamafleet.values import Unresolved, split_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCOPES = ("managed", "local", "project", "user", "env")  # highest precedence first
_COLON = lazy(r"\s*:")
_RANK = {s: i for i, s in enumerate(SCOPES)}
#: Deepest nesting of a settings file accepted (Claude Code's settings are 3-4 levels deep).
MAX_DEPTH = 100
ANTHROPIC_HOSTS = ("api.anthropic.com",)
TOKEN_KEYS = ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")


class SettingsFile(Record):
    """One Claude Code settings file (or environment) as read: its data, or why it is invalid.
    ``mode``: the st_mode permission bits when read from disk; ``name``: how findings name it
    when it is not a whole file (a Compose service's environment)."""

    _fields = (
        "path",
        "scope",
        "text",
        "data",
        "error",
        "error_line",
        "error_col",
        "mode",
        "name",
        "_lines",
    )
    _hidden = frozenset(("_lines",))

    def __init__(  # noqa: PLR0917 - the fields, in the order they always had
        self,
        path: str,
        scope: str,
        text: str,
        data: dict[str, Any] | None = None,
        error: str | None = None,
        error_line: int = 1,
        error_col: int = 1,
        mode: int | None = None,
        name: str = "",
    ) -> None:
        self.path = path
        self.scope = scope
        self.text = text
        self.data = data
        self.error = error
        self.error_line = error_line
        self.error_col = error_col
        self.mode = mode
        self.name = name
        self._lines: dict[tuple[str, ...], int] = {}

    def line_of(self, *keys: str) -> int:
        """Best-effort line of a (nested) key, e.g. line_of("env", "ANTHROPIC_BASE_URL")."""
        if keys in self._lines:
            return self._lines[keys]
        if self.scope == "env":
            return self._lines.get((), 1)
        if "\n" not in self.text:
            return 1  # one line (json.dumps without indent)
        pos = 0
        for key in keys:
            idx = self.text.find(f'"{key}"', pos)
            while idx >= 0 and not _COLON.match(self.text, idx + len(key) + 2):
                idx = self.text.find(f'"{key}"', idx + 1)
            if idx < 0:
                break
            pos = idx
        line = self.text.count("\n", 0, pos) + 1
        self._lines[keys] = line
        return line

    def env(self) -> dict[str, Any]:
        data = self.data
        if data is None:
            return {}
        env = data.get("env")
        return env if isinstance(env, dict) else {}


def classify(path: str) -> str:
    """Guess the scope of a settings file from its path."""
    p = path.replace("\\", "/")
    base = os.path.basename(p)
    if base == "managed-settings.json" or "/etc/claude-code/" in p:
        return "managed"
    if base == "settings.local.json":
        return "local"
    parent = os.path.dirname(p)
    if os.path.basename(parent) == ".claude":
        home = os.path.expanduser("~").replace("\\", "/")
        top = os.path.dirname(parent)
        if top in (home, "~") or (top.startswith("/home/") and top.count("/") == 2):
            return "user"
        if top == "/root":
            return "user"
        return "project"
    return "user"


class FromStat:
    """Marker: take the permission bits from the file at ``path``."""


STAT = FromStat()


def load_settings(
    path: str, text: str, scope: str | None = None, *, mode: int | FromStat | None = STAT
) -> SettingsFile:
    """Load a settings file's ``text``. ``mode``: its permission bits (e.g. ``0o644``) as known to
    the caller, e.g. of the original on another host; ``None`` when unknown (CC008 then stays
    silent); by default they come from ``os.stat(path)``."""
    sf = SettingsFile(path=path, scope=scope or classify(path), text=text)
    if isinstance(mode, FromStat):
        try:
            sf.mode = stat.S_IMODE(os.stat(path).st_mode)
        except (OSError, ValueError):
            sf.mode = None
    else:
        sf.mode = None if mode is None else stat.S_IMODE(int(mode))
    deep = _too_deep(text)
    if deep is not None:
        sf.error = f"nested deeper than {MAX_DEPTH} levels (refused: settings are never that deep)"
        sf.error_line, sf.error_col = deep
        return sf
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        sf.error = exc.msg
        sf.error_line, sf.error_col = exc.lineno, exc.colno
        return sf
    except RecursionError:  # pragma: no cover - _too_deep refuses it first
        sf.error = "nested too deeply"
        return sf
    if not isinstance(data, dict):
        sf.error = f"the top level must be a JSON object, not {type(data).__name__}"
        return sf
    sf.data = data
    return sf


_JSON_STRING = lazy(r'"(?:\\.|[^"\\])*"')
_BRACKET = lazy(r"[\[\]{}]")


def _too_deep(text: str) -> tuple[int, int] | None:
    """(line, column) where ``text`` (JSON) nests deeper than MAX_DEPTH, or None."""
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return None
    depth = 0
    bare = _JSON_STRING.sub(lambda m: " " * len(m.group(0)), text)
    for m in _BRACKET.finditer(bare):
        depth += 1 if m.group(0) in "[{" else -1
        if depth > MAX_DEPTH:
            line = text.count("\n", 0, m.start()) + 1
            return line, m.start() - text.rfind("\n", 0, m.start())
    return None


def env_settings(path: str, values: Mapping[str, Any], name: str | None = None) -> SettingsFile:
    """Claude Code's environment as a file sets it (``export ANTHROPIC_BASE_URL=...``, a Compose
    service's ``environment``), as the ``env`` block of a settings file of the lowest precedence.
    ``values``: name -> object with ``value``, ``line`` and ``unknown`` (a value set outside the
    file: an :class:`~llamafleet.values.Unresolved`)."""
    env: dict[str, Any] = {}
    sf = SettingsFile(path=path, scope="env", text="", mode=None, name=name or path)
    for key, v in values.items():
        env[key] = Unresolved(v.value) if v.unknown else v.value
        sf._lines[("env", key)] = v.line
    sf.data = {"env": env}
    first = min((v.line for v in values.values()), default=1)
    sf._lines[()] = first
    return sf


class Value:
    """A setting or an env value as the client gets it, and where it is set."""

    __slots__ = ("file", "line", "value")

    def __init__(self, value: Any, file: SettingsFile | None, line: int) -> None:
        self.value = value
        self.file = file  # None: from the process environment
        self.line = line

    def __repr__(self) -> str:
        return f"Value({self.value!r}, {self.file.path if self.file else None!r}, {self.line})"


class Client(Record):
    """The effective settings of one Claude Code user: files merged by precedence. ``memo``:
    values rules compute once per client (its URL split up, ...)."""

    _fields = ("files", "process_env", "name", "_ordered", "_env", "_third_party", "memo")
    _hidden = frozenset(("_ordered", "_env", "_third_party", "memo"))

    def __init__(
        self,
        files: list[SettingsFile],
        process_env: dict[str, str] | None = None,
        name: str = "",
    ) -> None:
        self.files = files
        self.process_env: dict[str, str] = process_env if process_env is not None else {}
        self.name = name
        self._ordered: list[SettingsFile] | None = None
        self._env: dict[str, Value | None] = {}
        self._third_party: bool | None = None
        self.memo: dict[str, Any] = {}

    def ordered(self) -> list[SettingsFile]:
        """Valid files from highest to lowest precedence."""
        if self._ordered is None:
            self._ordered = sorted(
                (f for f in self.files if f.data is not None), key=lambda f: _RANK[f.scope]
            )
        return self._ordered

    def env(self, key: str) -> Value | None:
        if key in self._env:
            return self._env[key]
        found: Value | None = None
        for f in self.ordered():
            env = f.env()
            if key in env:
                found = Value(env[key], f, f.line_of("env", key))
                break
        else:
            if key in self.process_env:
                found = Value(self.process_env[key], None, 0)
        self._env[key] = found
        return found

    def setting(self, key: str) -> Value | None:
        memo = self.memo.get("settings")
        if memo is None:
            memo = self.memo["settings"] = {}
        if key in memo:
            found: Value | None = memo[key]
            return found
        found = None
        for f in self.ordered():
            assert f.data is not None
            if key in f.data:
                found = Value(f.data[key], f, f.line_of(key))
                break
        memo[key] = found
        return found

    @property
    def primary(self) -> SettingsFile | None:
        """The file findings about the merged result are reported against."""
        order = self.ordered()
        for f in order:  # prefer the file that sets the base URL
            if "ANTHROPIC_BASE_URL" in f.env():
                return f
        if order:
            return order[-1]
        return self.files[0] if self.files else None

    def tokens(self) -> list[str]:
        """Non-empty credentials the client sends (ANTHROPIC_AUTH_TOKEN, ANTHROPIC_API_KEY)."""
        out = []
        for key in TOKEN_KEYS:
            v = self.env(key)
            if v is not None and str(v.value).strip():
                out.append(str(v.value))
        return out

    def base_url(self) -> Value | None:
        return self.env("ANTHROPIC_BASE_URL")

    def is_third_party(self) -> bool:
        """True when requests go to a server other than Anthropic's API."""
        if self._third_party is None:
            self._third_party = self._is_third_party()
        return self._third_party

    def url_parts(self) -> SplitResult | None:
        """ANTHROPIC_BASE_URL split up (None when unset, unresolved or not a URL)."""
        if "url_parts" not in self.memo:
            v = self.base_url()
            text = v.value if v is not None and isinstance(v.value, str) else ""
            usable = bool(text.strip()) and not isinstance(text, Unresolved)
            self.memo["url_parts"] = split_url(text) if usable else None
        parts: SplitResult | None = self.memo["url_parts"]
        return parts

    def _is_third_party(self) -> bool:
        v = self.base_url()
        if v is None or not isinstance(v.value, str) or not v.value.strip():
            return False
        if isinstance(v.value, Unresolved):
            return False  # set outside the file: where it points is unknown
        parts = self.url_parts()
        if parts is None:
            return False  # not a URL (CC007 says so): Claude Code sends nothing anywhere
        host = parts.hostname or ""
        return host not in ANTHROPIC_HOSTS


def truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def group_clients(files: list[SettingsFile], process_env: Mapping[str, str]) -> list[Client]:
    """Files checked together form one client, unless several files share the user scope:
    then each user file is its own client, sharing the managed and project files."""
    users = [f for f in files if f.scope == "user"]
    envs = [f for f in files if f.scope == "env"]
    shared = [f for f in files if f.scope not in ("user", "env")]
    env = dict(process_env)
    if not files and not env:
        return []
    if len(users) + len(envs) <= 1:
        own = users or envs
        return [Client(files=list(files), process_env=env, name=own[0].path if own else "")]
    if not envs:
        return [Client(files=[u, *shared], process_env=env, name=u.path) for u in users]
    if len(users) <= 1:
        # each environment (a script, a Compose service) is a client with the user's settings
        return [Client(files=[e, *users, *shared], process_env=env, name=e.name) for e in envs]
    return [Client(files=[u, *shared], process_env=env, name=u.path) for u in users] + [
        Client(files=[e, *shared], process_env=env, name=e.name) for e in envs
    ]

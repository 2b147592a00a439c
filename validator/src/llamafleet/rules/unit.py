"""Rules on systemd units running llama-server (SD001-SD004)."""

from __future__ import annotations

from collections.abc import Iterator

from llamafleet.lazyre import lazy
from llamafleet.rules.base import Context, Hit, rule
from llamafleet.units import Unit, UnitEntry


@rule("SD001")
def mlock_without_limit(ctx: Context) -> Iterator[Hit]:
    for u in ctx.units:
        cfg = u.server
        if cfg is None:
            continue
        opt = cfg.get("--mlock")
        lm = cfg.get("--load-mode")
        trigger = None
        if opt is not None and not opt.negated:
            trigger = opt
        elif lm is not None and lm.value and lm.value.endswith("mlock"):
            trigger = lm
        if trigger is None:
            continue
        limit = u.get("Service", "LimitMEMLOCK")
        if limit is not None and limit.value.strip().lower() in ("infinity", "unlimited"):
            continue
        yield Hit(u.path, limit.line if limit else trigger.line, {"option": trigger.display})


@rule("SD002")
def runs_as_root(ctx: Context) -> Iterator[Hit]:
    for u in ctx.units:
        if u.server is None or user_unit(u):
            continue
        user = u.get("Service", "User")
        dynamic = u.get("Service", "DynamicUser")
        if dynamic is not None and dynamic.value.lower() in ("yes", "true", "1", "on"):
            continue
        if user is None or user.value in ("root", "0") or not _valid_user(user.value):
            yield Hit(u.path, user.line if user else u.server.line, {})


def user_unit(u: Unit) -> bool:
    """Whether ``u`` is a systemd user unit, which the user's own manager runs as that user
    (never as root): its path is a user unit directory (``~/.config/systemd/user``,
    ``/etc/systemd/user``, ``/usr/lib/systemd/user``), or it is installed into
    ``default.target`` (the user manager's target) and names paths with ``%h`` (the user's home:
    root's in a system unit, where nobody writes it)."""
    if "/systemd/user/" in u.path.replace("\\", "/"):
        return True
    wanted = " ".join(
        e.value for e in u.all("Install", "WantedBy") + u.all("Install", "RequiredBy")
    )
    home = any("%h" in e.value for entries in u.sections.values() for e in entries)
    return "default.target" in wanted.split() and home


def _valid_user(name: str) -> bool:
    """Whether systemd takes ``User=`` as written: a "#" after the value is part of it (only a
    line that starts with "#" is a comment), and a name with white space is refused ("Invalid
    user/group name or numeric ID, ignoring"): the service then runs as root."""
    return not any(c.isspace() for c in name.strip())


@rule("SD003")
def no_restart(ctx: Context) -> Iterator[Hit]:
    for u in ctx.units:
        if u.server is None:
            continue
        r = u.get("Service", "Restart")
        if r is None or r.value == "no":
            yield Hit(u.path, r.line if r else u.server.line, {})


# ----------------------------------------------------------------------------- SD004

EXEC_KEYS = (
    "ExecCondition",
    "ExecStartPre",
    "ExecStart",
    "ExecStartPost",
    "ExecReload",
    "ExecStop",
    "ExecStopPost",
)
_EXEC_PREFIX = lazy(r"[-@:+!|]*")
_FALSE = ("no", "false", "0", "off", "")
#: Protections that are on or off; off (or an empty reset) after on weakens the sandbox.
_BOOL_PROTECTIONS = (
    "NoNewPrivileges",
    "PrivateTmp",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectControlGroups",
    "ProtectClock",
    "ProtectHostname",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "LockPersonality",
    "MemoryDenyWriteExecute",
    "RestrictNamespaces",
)
#: Graded protections: a later, lower level after a higher one weakens the sandbox.
_LEVELS: dict[str, dict[str, int]] = {
    "ProtectSystem": {
        **dict.fromkeys(_FALSE, 0),
        **dict.fromkeys(("yes", "true", "1", "on"), 1),
        "full": 2,
        "strict": 3,
    },
    "ProtectHome": {
        **dict.fromkeys(_FALSE, 0),
        "tmpfs": 1,
        "read-only": 1,
        **dict.fromkeys(("yes", "true", "1", "on"), 2),
    },
}
_ROOT = ("root", "0", "")


def _shown(e: UnitEntry) -> str:
    text = f"{e.key}={e.value}"
    return text if len(text) <= 70 else text[:67] + "..."


def _hit(u: Unit, e: UnitEntry, detail: str) -> Hit:
    return Hit(
        u.path,
        e.line,
        {"directive": _shown(e), "key": f"the {e.key}= line", "line": e.line, "detail": detail},
    )


_PREFIX_CHARS = frozenset("-@:+!|")
#: The [Service] keys _weakened looks at.
_WEAKENED_KEYS = frozenset(
    {"PrivateDevices", "User", "CapabilityBoundingSet", *_BOOL_PROTECTIONS, *_LEVELS}
)


def _privileged_exec(u: Unit) -> Iterator[Hit]:
    for entries in u.sections.values():
        for e in entries:
            if e.key not in EXEC_KEYS or e.value[:1] not in _PREFIX_CHARS:
                continue
            prefix = _EXEC_PREFIX.match(e.value)
            flags = prefix.group(0) if prefix else ""
            if "+" in flags:
                yield _hit(
                    u, e, "runs its command with full privileges, outside the sandbox (prefix +)"
                )
            elif "!" in flags:
                yield _hit(
                    u,
                    e,
                    "runs its command without the unit's User= and capability limits "
                    f"(prefix {'!!' if '!!' in flags else '!'})",
                )


def _repeated_sections(u: Unit) -> Iterator[Hit]:
    first: dict[str, int] = {}
    for name, line in u.headers:
        if name in first:
            yield Hit(
                u.path,
                line,
                {
                    "directive": f"[{name}]",
                    "key": f"the second [{name}] header and the lines after it",
                    "line": line,
                    "detail": f"starts a second [{name}] section (the first is on line "
                    f"{first[name]}): the shape an injected line leaves",
                },
            )
        else:
            first[name] = line


def _devices_narrowed(u: Unit) -> bool:
    policy = u.get("Service", "DevicePolicy")
    if policy is not None and policy.value.strip().lower() in ("closed", "strict"):
        return True
    return bool(u.all("Service", "DeviceAllow"))


def _weakened(u: Unit) -> Iterator[Hit]:
    strongest: dict[str, UnitEntry] = {}  # protection -> the assignment that set it highest
    level: dict[str, int] = {}
    user: UnitEntry | None = None
    empty_caps: UnitEntry | None = None
    for e in u.sections.get("Service", []):
        if e.key not in _WEAKENED_KEYS:
            continue
        value = e.value.strip().lower()
        if e.key in _BOOL_PROTECTIONS or e.key == "PrivateDevices":
            if value not in _FALSE:
                strongest.setdefault(e.key, e)
            elif e.key in strongest:
                if e.key == "PrivateDevices" and _devices_narrowed(u):
                    continue
                was = strongest.pop(e.key)
                yield _hit(u, e, f"undoes {_shown(was)} of line {was.line}")
        elif e.key in _LEVELS:
            n = _LEVELS[e.key].get(value)
            if n is None:
                continue
            if e.key in strongest and n < level[e.key]:
                was = strongest[e.key]
                yield _hit(u, e, f"weakens {_shown(was)} of line {was.line}")
            if n > level.get(e.key, -1):
                strongest[e.key], level[e.key] = e, n
        elif e.key == "User":
            if e.value.strip() not in _ROOT:
                user = e
            elif user is not None:
                yield _hit(
                    u,
                    e,
                    f"switches the service back to root after {_shown(user)} of line {user.line}",
                )
                user = None
        elif e.key == "CapabilityBoundingSet":
            if value == "":
                empty_caps = e
            elif empty_caps is not None and not value.startswith("~"):
                yield _hit(
                    u,
                    e,
                    "gives capabilities back after the empty bounding set of line "
                    f"{empty_caps.line}",
                )
                empty_caps = None
    for e in u.all("Service", "AmbientCapabilities"):
        yield _hit(u, e, "hands capabilities to the service's processes")


@rule("SD004")
def unit_escapes_sandbox(ctx: Context) -> Iterator[Hit]:
    for u in ctx.units:
        yield from _privileged_exec(u)
        yield from _repeated_sections(u)
        yield from _weakened(u)

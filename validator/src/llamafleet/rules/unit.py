"""Rules on systemd units running llama-server (SD001-SD003)."""

from __future__ import annotations

from collections.abc import Iterator

from llamafleet.rules import Context, Hit, rule


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
        if u.server is None:
            continue
        user = u.get("Service", "User")
        dynamic = u.get("Service", "DynamicUser")
        if dynamic is not None and dynamic.value.lower() in ("yes", "true", "1", "on"):
            continue
        if user is None or user.value in ("root", "0"):
            yield Hit(u.path, user.line if user else u.server.line, {})


@rule("SD003")
def no_restart(ctx: Context) -> Iterator[Hit]:
    for u in ctx.units:
        if u.server is None:
            continue
        r = u.get("Service", "Restart")
        if r is None or r.value == "no":
            yield Hit(u.path, r.line if r else u.server.line, {})

"""Rules on the llama.cpp build against the host (BD001)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from llamafleet.rules.base import Context, Hit, rule


def _arch_numbers(archs: list[str]) -> list[int]:
    out = []
    for a in archs:
        m = re.match(r"(?:sm_|compute_)?(\d+)", a.strip())
        if m:
            out.append(int(m.group(1)))
    return out


@rule("BD001")
def cuda_arch_mismatch(ctx: Context) -> Iterator[Hit]:
    f = ctx.facts
    if not f.cuda_architectures or not f.gpu_cc:
        return
    major, minor = (int(x) for x in f.gpu_cc.split("."))
    sm = major * 10 + minor
    built = _arch_numbers(f.cuda_architectures)
    if not built or sm in built:
        return
    file, line = "<build manifest>", 0
    servers = ctx.all_servers
    if servers:
        file, line = servers[0].path, servers[0].line
    same_major = any(b // 10 == major for b in built)
    detail = (
        "" if same_major else "; no architecture of the same major version: kernels will not run"
    )
    yield Hit(
        file,
        line,
        {"archs": ";".join(f.cuda_architectures), "cc": f.gpu_cc, "sm": sm, "detail": detail},
        severity=None if same_major else "error",
    )

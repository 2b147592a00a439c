"""Write the collection's module_utils that are copies of the validator's own modules (the
modules run on the managed hosts, where the validator package is not installed):

    plugins/module_utils/gguf_header.py  <- validator/src/llamafleet/gguf_header.py

Each copy is the source with one line on top saying where it comes from. ``--check`` exits 1,
naming the copy, when one differs (tests/test_collection.py runs it; `make lint` too)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COPIES = {
    REPO / "plugins" / "module_utils" / "gguf_header.py": REPO
    / "validator"
    / "src"
    / "llamafleet"
    / "gguf_header.py",
}


def expected(source: Path) -> str:
    rel = source.relative_to(REPO)
    return (
        f"# Generated from {rel}\n"
        "# by validator/tools/gen_module_utils.py: edit that file, not this copy.\n"
        + source.read_text(encoding="utf-8")
    )


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = ap.parse_args(argv)
    stale = []
    for copy, source in COPIES.items():
        want = expected(source)
        have = copy.read_text(encoding="utf-8") if copy.is_file() else None
        if have == want:
            continue
        if args.check:
            stale.append(_shown(copy))
        else:
            copy.write_text(want, encoding="utf-8")
            print(f"wrote {_shown(copy)}")
    if stale:
        print(
            f"out of date: {', '.join(stale)} (run validator/tools/gen_module_utils.py)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

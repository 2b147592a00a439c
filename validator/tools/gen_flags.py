#!/usr/bin/env python3
"""Generate the llama-server flag table from llama.cpp's common/arg.cpp.

Usage: gen_flags.py PATH/TO/common/arg.cpp BUILD_LABEL > src/llamafleet/data/flags_upstream.json

Each `add_opt(common_arg(...))` block gives the option's names, its negated names, whether it
takes a value (and of which C++ type), its LLAMA_ARG_* environment variable and the programs
("examples") it applies to. Only options that reach llama-server are kept.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any


def _split_top(text: str) -> list[str]:
    """Split a C++ argument list on commas at nesting depth 0, skipping string literals."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if ch == "'":
            j = i + 1
            while text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if cur and "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _matching(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at `start`."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            j = i + 1
            while text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced")


_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|//[^\n]*|/\*.*?\*/', re.S)


def _strip_comments(src: str) -> str:
    return _TOKENS.sub(lambda m: " " if m.group(0).startswith("/") else m.group(0), src)


def parse(src: str) -> list[dict[str, Any]]:
    src = _strip_comments(src)
    out: list[dict[str, Any]] = []
    seen: list[list[str]] = []
    for m in re.finditer(r"add_opt\(\s*common_arg\(", src):
        open_common = m.end() - 1
        close_common = _matching(src, open_common)
        args = _split_top(src[open_common + 1 : close_common])
        close_add = _matching(src, m.start() + len("add_opt"))
        tail = src[close_common + 1 : close_add]
        lists = [a for a in args if a.startswith("{")]
        names = re.findall(r'"([^"]+)"', lists[0]) if lists else []
        negs = re.findall(r'"([^"]+)"', lists[1]) if len(lists) > 1 else []
        strings = [a for a in args[len(lists) : -1]]
        value_hint = None
        if len(strings) >= 2 and re.fullmatch(r'"[^"]*"', strings[0]):
            value_hint = strings[0].strip('"')
        lam = args[-1]
        sig = re.match(r"\[[^\]]*\]\s*\(([^)]*)\)", lam)
        params = [p.strip() for p in sig.group(1).split(",")] if sig else []
        kind = "flag"
        if len(params) >= 3:
            kind = "pair"
        elif len(params) == 2:
            p = params[1]
            if p.startswith("bool"):
                kind = "bool"
            elif p.startswith("int"):
                kind = "int"
            elif p.startswith("float") or p.startswith("double"):
                kind = "float"
            else:
                kind = "str"
        env = re.search(r'set_env\("([^"]+)"\)', tail)
        ex = re.search(r"set_examples\(\{([^}]*)\}\)", tail)
        excl = re.search(r"set_excludes\(\{([^}]*)\}\)", tail)
        examples = [e.strip() for e in ex.group(1).split(",")] if ex else ["LLAMA_EXAMPLE_COMMON"]
        excluded = [e.strip() for e in excl.group(1).split(",")] if excl else []
        server = (
            "LLAMA_EXAMPLE_SERVER" in examples or "LLAMA_EXAMPLE_COMMON" in examples
        ) and "LLAMA_EXAMPLE_SERVER" not in excluded
        if not server or not names or names in seen:
            continue
        seen.append(names)
        entry: dict[str, Any] = {"names": names, "kind": kind}
        if negs:
            entry["negations"] = negs
        if value_hint is not None and kind not in ("flag", "bool"):
            entry["value"] = value_hint
        if env:
            entry["env"] = env.group(1)
        out.append(entry)
    return out


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as fh:
        src = fh.read()
    flags = parse(src)
    doc = {"source": sys.argv[2], "flags": flags}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

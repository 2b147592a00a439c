#!/usr/bin/env python3
"""Generate the llama-server flag table from llama.cpp's common/arg.cpp.

Usage: gen_flags.py SOURCE BUILD_LABEL > src/llamafleet/data/flags_fork.json

SOURCE is llama.cpp's ``common/arg.cpp``, or a source archive (``.tar.gz``) holding it (the fork's
``llama-cpp-turboquant-<commit>.tar.gz``): it is read from the archive without unpacking.

Each `add_opt(common_arg(...))` block gives the option's names, its negated names, whether it
takes a value (and of which C++ type), its LLAMA_ARG_* environment variable and the programs
("examples") it applies to. Only options that reach llama-server are kept.

The value forms come from the option's handler, as llama.cpp's parser applies them:

* a handler that tests ``is_truthy``/``is_falsey``/``is_autoy`` and ``value == "..."`` and throws
  otherwise accepts exactly those words: ``values`` (``-fa``: on, enabled, true, 1, off, disabled,
  false, 0, auto, -1);
* a handler that tests ``value == "..."`` and then parses a number (``std::stoi``) accepts those
  words besides a number: ``special`` (``-ngl``: auto, all);
* a string handler that only parses a number is an ``int`` or ``float`` option;
* an integer handler that throws on ``value == N`` or ``value < N`` refuses those numbers:
  ``rejects`` (``-np 0``) and ``min`` (``--n-cpu-moe`` below 0).
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from typing import Any

#: The words llama.cpp's common_arg_utils::is_truthy / is_falsey / is_autoy accept (common/arg.cpp).
TRUTHY = ("on", "enabled", "true", "1")
FALSEY = ("off", "disabled", "false", "0")
AUTOY = ("auto", "-1")


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
        if kind in ("str", "int"):
            entry.update(value_forms(lam, kind))
        out.append(entry)
    return out


_WORD = re.compile(r'\bvalue\s*==\s*"([^"]*)"')
_NUMBER_PARSE = re.compile(r"std::sto(i|l|ll|ul|ull|f|d)\(\s*value\s*\)")
_INT_REFUSAL = re.compile(r"if\s*\(\s*value\s*(==|<|<=)\s*(-?\d+)\s*\)\s*\{\s*throw")


def value_forms(lam: str, kind: str) -> dict[str, Any]:
    """What the handler's body says about the values it accepts (see the module docstring)."""
    body = lam[lam.find("{") :]
    out: dict[str, Any] = {}
    if kind == "int":
        for op, num in _INT_REFUSAL.findall(body):
            if op == "==":
                out.setdefault("rejects", []).append(int(num))
            else:
                out["min"] = int(num) + (1 if op == "<=" else 0)
        return out
    words: list[str] = []
    for fn, accepted in (("is_truthy", TRUTHY), ("is_falsey", FALSEY), ("is_autoy", AUTOY)):
        if re.search(rf"\b{fn}\(\s*value\s*\)", body):
            words += [w for w in accepted if w not in words]
    words += [w for w in _WORD.findall(body) if w and w not in words]
    parsed = _NUMBER_PARSE.search(body)
    if words and parsed:
        out["special"] = words
        out["kind"] = "int" if parsed.group(1) in ("i", "l", "ll", "ul", "ull") else "float"
    elif words and "throw" in body:
        out["values"] = words
    elif parsed and re.fullmatch(
        r"\{\s*[\w.\[\]]+\s*=\s*" + re.escape(parsed.group(0)) + r"\s*;\s*\}", body.strip()
    ):
        out["kind"] = "int" if parsed.group(1) in ("i", "l", "ll", "ul", "ull") else "float"
    return out


def read_source(path: str) -> str:
    """The text of common/arg.cpp: the file itself, or its member of a source archive."""
    if path.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith("/common/arg.cpp"):
                    member_file = tar.extractfile(member)
                    assert member_file is not None
                    data: bytes = member_file.read()
                    return data.decode("utf-8")
        raise SystemExit(f"{path}: no common/arg.cpp in the archive")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def main() -> None:
    flags = parse(read_source(sys.argv[1]))
    doc = {"source": sys.argv[2], "flags": flags}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

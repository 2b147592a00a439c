"""``llamafleet template``: check a chat template against Claude Code's late system message, and
rewrite the guard that rejects it.

::

    llamafleet template check FILE [--format human|json]
    llamafleet template fix FILE -o OUT

FILE is a Jinja template, a GGUF model (its ``tokenizer.chat_template.tool_use``, else
``tokenizer.chat_template``: what llama-server uses for requests with tools) or the JSON of
``llamafleet inspect --format json``. ``-o -`` writes the fixed template to standard output.

Exit codes: ``check``: 0 the template renders the late system message in place, 1 it raises,
drops or moves it or cannot be rendered; ``fix``: 0 fixed (or nothing to fix), 1 not fixable;
2 usage or input error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from llamafleet import chat_template
from llamafleet.errors import InputError

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2
#: Which rule of ``llamafleet check`` reports each classification.
RULES = {
    chat_template.RAISES: "LS021",
    chat_template.DROPS: "LS022",
    chat_template.MOVES: "LS022",
    chat_template.UNRENDERABLE: "LS023",
}
#: A JSON file (``inspect`` output) above this size is not read.
MAX_JSON_BYTES = 64 << 20


class TemplateInputError(InputError):
    pass


def register(subparsers: Any) -> None:
    """Add the ``template`` command (``check``, ``fix``) to an argparse ``add_subparsers()``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "template",
        help="check a chat template against Claude Code's late system message, or fix it",
        description="Render a chat template (a .jinja file, a GGUF model or `llamafleet inspect` "
        "JSON) with a conversation shaped like Claude Code's, which sends a system message after "
        "the user's prompt, as llama-server renders it; `fix` rewrites the guard of the official "
        "Qwen3.5/Qwen3.6 templates that rejects that message.",
    )
    sub = p.add_subparsers(dest="template_command", required=True)
    c = sub.add_parser("check", help="print what the template does with a late system message")
    c.add_argument("file", metavar="FILE", help="template, GGUF model or inspect JSON")
    c.add_argument("--format", choices=("human", "json"), default="human")
    c.set_defaults(func=cmd_check)
    f = sub.add_parser("fix", help="rewrite the guard that rejects a late system message")
    f.add_argument("file", metavar="FILE", help="template, GGUF model or inspect JSON")
    f.add_argument(
        "-o", "--output", metavar="OUT", required=True, help="where to write it (- for stdout)"
    )
    f.set_defaults(func=cmd_fix)


def load_template(path: str) -> tuple[str, str]:
    """(template text, where it came from) from a template file, a GGUF model or inspect JSON."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            if head == b"GGUF":
                return _from_metadata(path, _gguf_metadata(path))
            data = head + fh.read(MAX_JSON_BYTES)
    except FileNotFoundError as exc:
        raise TemplateInputError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise TemplateInputError(f"{path}: is a directory") from exc
    except OSError as exc:
        raise TemplateInputError(f"{path}: cannot read: {exc.strerror}") from exc
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{") and '"metadata"' in text:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None  # a template that starts with a brace: take it as a template
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
            return _from_metadata(path, doc["metadata"])
    if len(text) > chat_template.MAX_TEMPLATE_CHARS:
        raise TemplateInputError(
            f"{path}: larger than {chat_template.MAX_TEMPLATE_CHARS} characters; not a template"
        )
    return text, path


def _gguf_metadata(path: str) -> dict[str, Any]:
    from llamafleet.gguf_meta import GGUFError, read_gguf

    try:
        meta: dict[str, Any] = read_gguf(path)["metadata"]
    except (GGUFError, OSError) as exc:
        raise TemplateInputError(
            str(exc) if str(exc).startswith(path) else f"{path}: {exc}"
        ) from exc
    return meta


def _from_metadata(path: str, metadata: dict[str, Any]) -> tuple[str, str]:
    found = chat_template.model_template(metadata)
    if found is None:
        raise TemplateInputError(
            f"{path}: the model has no tokenizer.chat_template (llama-server uses ChatML, which "
            "renders every message in place)"
        )
    text, key = found
    return text, f"{path} ({key})"


def _needs_jinja2() -> None:
    if not chat_template.jinja2_available():
        raise TemplateInputError("jinja2 is not installed: `pip install jinja2`")


def cmd_check(args: argparse.Namespace) -> int:
    _needs_jinja2()
    text, origin = load_template(args.file)
    result = chat_template.classify(text)
    rule = RULES.get(result.kind)
    if args.format == "json":
        doc = {"file": args.file, "template": origin, **result.as_dict(), "rule": rule}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(f"{origin}: [{result.kind}] {result.describe()}\n")
        if result.kind == chat_template.RAISES:
            sys.stdout.write(
                f"  every Claude Code request fails with HTTP 500 ({rule}); "
                f"`llamafleet template fix {args.file} -o OUT` rewrites the guard\n"
            )
        elif rule is not None:
            sys.stdout.write(f"  see `llamafleet explain {rule}`\n")
    return EXIT_OK if result.kind == chat_template.OK else EXIT_FOUND


def cmd_fix(args: argparse.Namespace) -> int:
    _needs_jinja2()
    text, origin = load_template(args.file)
    try:
        fixed, description = chat_template.fix_late_system(text, isolate=True)
    except chat_template.TemplateFixError as exc:
        sys.stderr.write(f"llamafleet: {origin}: not fixed: {exc}\n")
        return EXIT_FOUND
    if args.output == "-":
        sys.stdout.write(fixed)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(fixed)
        except OSError as exc:
            raise TemplateInputError(f"{args.output}: cannot write: {exc.strerror}") from exc
    where = sys.stderr if args.output == "-" else sys.stdout
    where.write(f"{origin}: {description}\n")
    if args.output != "-":
        where.write(f"wrote {args.output}\n")
    return EXIT_OK

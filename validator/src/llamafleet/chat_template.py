"""A server's chat template, rendered as llama-server renders it, with a conversation shaped like
Claude Code's (rules LS021-LS023, ``llamafleet template check|fix``).

Claude Code 2.1.197 sends, after the user's prompt, a message with ``"role": "system"`` (the agent
types and the skills list) inside ``messages``. llama-server's Anthropic endpoint folds only the
top-level ``system`` field into a first system message and passes a later ``role: system`` entry to
the chat template unchanged. What the template does with it decides everything:

* it renders it where it stands (Qwen3-Coder, Qwen2.5, ChatML): ``ok``;
* it raises (the official Qwen3.5/Qwen3.6 templates: ``System message must be at the
  beginning.``): llama-server answers HTTP 500 to every Claude Code request: ``raises``;
* it renders without it (some re-quantized GGUFs): the model never sees the agent list: ``drops``;
* it renders it elsewhere (e.g. folded into the first system message): ``moves``;
* it cannot render this conversation at all (a syntax error, a helper llama.cpp's engine does not
  have, a failure without the late system message too): ``unrenderable``;
* ``unknown``: nothing to render (jinja2 missing, no template known).

Where the template comes from, as llama-server chooses it (:func:`template_of`): the last of
``--chat-template-file FILE`` / ``--chat-template TEXT`` (the file only where the referenced-files
policy allows opening it; a built-in name such as ``chatml`` is not rendered), otherwise the
model's ``tokenizer.chat_template.tool_use`` (Claude Code always sends tools) or
``tokenizer.chat_template``.

Rendering (:func:`render`): jinja2's ``ImmutableSandboxedEnvironment`` (no loader, so no
``include``/``import``: no file access) with what llama.cpp's own engine (common/jinja) has and
plain jinja2 lacks: ``trim_blocks`` and ``lstrip_blocks`` on (its lexer's defaults),
``break``/``continue``, ``{% generation %}`` blocks, ``raise_exception()``, ``strftime_now()``,
``tojson`` as ``json.dumps`` (no HTML escaping; ``indent``, ``separators``, ``ensure_ascii``,
``sort_keys``), and ``list.append``/``list.pop`` (the only mutations llama.cpp allows). Messages are
prepared as llama-server prepares them: a first system message folded into the first user message
when the template ignores the system role, tool-call arguments as an object (or as a JSON string
when the template cannot take an object), string content (or typed parts when the template cannot
take a string).

Bounds: every render has a deadline (checked on each call and attribute access and on each piece
of output), a cap on output and on string/list growth by ``*``/``+``; :func:`classify` and
:func:`fix_late_system` run in a child process by default (``isolate=True``) with a wall-clock
timeout and, on POSIX, limits on CPU time and address space and no file writes, so a hostile
template from a downloaded GGUF cannot hang or exhaust the checking machine: past a limit the
template is reported unrenderable, or not fixed, naming the limit. The fix's search for the guard
is linear in the template's length in any case (no pattern that backtracks without bound).

The fix (:func:`fix_late_system`) rewrites the one guard the official Qwen templates use; see its
docstring for the exact transformation.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from llamafleet import diskcache

if TYPE_CHECKING:
    from llamafleet.argv import Option, ServerConfig
    from llamafleet.facts import Facts
    from llamafleet.refs import ReferencedFiles

# ----------------------------------------------------------------------------- classification

OK = "ok"
RAISES = "raises"
DROPS = "drops"
MOVES = "moves"
UNRENDERABLE = "unrenderable"
UNKNOWN = "unknown"
KINDS = (OK, RAISES, DROPS, MOVES, UNRENDERABLE, UNKNOWN)

#: Unique texts placed in the conversation, found again in the rendered prompt.
LATE_MARKER = "LLAMAFLEET-LATE-SYSTEM-7f3a9c51"
SYSTEM_MARKER = "LLAMAFLEET-FIRST-SYSTEM-2b8e"
USER_MARKER = "LLAMAFLEET-USER-PROMPT-91d4"
ASSISTANT_MARKER = "LLAMAFLEET-ASSISTANT-TEXT-5c0a"
ARGUMENT_MARKER = "LLAMAFLEET-TOOL-ARGUMENT-e6f1"
RESULT_MARKER = "LLAMAFLEET-TOOL-RESULT-38bd"
_PROBE_SYSTEM = "LLAMAFLEET-SYSTEM-ROLE-PROBE-44c2"

#: Above this size a template is not rendered (llama.cpp reads a template file whole; 1 MiB is
#: far above any real one).
MAX_TEMPLATE_CHARS = 1 << 20
#: Output of one render above this size ends it (a Claude Code prompt here is a few KiB).
MAX_OUTPUT_CHARS = 4 << 20
#: Strings or lists built with ``*``/``+`` above this size end the render.
MAX_VALUE_LEN = 4 << 20
#: Wall-clock seconds for one classification (all its renders).
DEFAULT_TIMEOUT = 10.0
#: Wall-clock seconds for one fix (:func:`fix_late_system`: both classifications and the rewrite).
DEFAULT_FIX_TIMEOUT = 2 * DEFAULT_TIMEOUT
#: Address space of the child process that renders (bytes).
CHILD_ADDRESS_SPACE = 2 << 30


@dataclass(frozen=True)
class Classification:
    """What a template does with the late system message. ``detail``: the exception's message
    (raises), the reason (unrenderable, unknown), where it went (moves)."""

    kind: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}

    def describe(self) -> str:
        text = {
            OK: "renders the late system message in place",
            RAISES: "raises on the late system message",
            DROPS: "renders without the late system message (dropped)",
            MOVES: "renders the late system message out of place",
            UNRENDERABLE: "cannot be rendered",
            UNKNOWN: "not checked",
        }[self.kind]
        return f"{text}: {self.detail}" if self.detail else text


class TemplateError(Exception):
    """The template raised or failed while rendering (``raised``: through ``raise_exception``)."""

    def __init__(self, message: str, raised: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.raised = raised


class TemplateSyntaxError(TemplateError):
    """The template cannot be parsed."""


class TemplateTimeoutError(TemplateError):
    """Rendering reached its deadline."""


class TemplateFixError(ValueError):
    """:func:`fix_late_system` cannot rewrite this template."""


# ----------------------------------------------------------------------------- the conversation

#: Two tools as Claude Code sends them (Anthropic format), after llama-server's conversion to the
#: OpenAI form the template gets.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "description": "Executes a given bash command and returns its output.\n\n"
            "The working directory persists between commands.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to execute"},
                    "timeout": {
                        "type": "number",
                        "description": "Optional timeout in milliseconds (max 600000)",
                    },
                    "description": {
                        "type": "string",
                        "description": "Clear, concise description of what this command does",
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "Read",
            "description": "Reads a file from the local filesystem. The file_path parameter "
            "must be an absolute path, not a relative path.",
            "parameters": {
                "type": "object",
                "properties": {
                    "file_path": {
                        "type": "string",
                        "description": "The absolute path to the file to read",
                    },
                    "offset": {"type": "integer", "description": "The line to start reading"},
                    "limit": {"type": "integer", "description": "The number of lines to read"},
                },
                "required": ["file_path"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        },
    },
]

FIRST_SYSTEM = (
    "You are Claude Code, Anthropic's official CLI for Claude.\n"
    f"You are an interactive CLI tool that helps users with software engineering tasks. "
    f"{SYSTEM_MARKER}\n\nIMPORTANT: Assist with defensive security tasks only."
)
USER_PROMPT = (
    "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
    "# currentDate\nToday's date is 2026-05-04.\n</system-reminder>\n"
    f"Fix the failing test in tests/test_app.py {USER_MARKER}"
)
LATE_SYSTEM = (
    f"{LATE_MARKER}\nAvailable agent types for the Task tool:\n"
    "- general-purpose: General-purpose agent for researching complex questions. (Tools: *)\n"
    "- Explore: Fast agent specialized for exploring codebases. (Tools: Glob, Grep, Read)\n\n"
    "The following skills are available for use with the Skill tool:\n"
    "- verify: Verify a code change does what it should by running the app."
)
ASSISTANT_TEXT = f"I'll read the test first. {ASSISTANT_MARKER}"
TOOL_RESULT = f"     1\timport app\n     2\tassert app.answer() == 42  # {RESULT_MARKER}\n"


def conversation(
    late_system: bool = True,
    *,
    typed_content: bool = False,
    object_arguments: bool = True,
    fold_system: bool = False,
) -> list[dict[str, Any]]:
    """The messages of a Claude Code request as llama-server hands them to the template: the
    folded top-level system prompt, the user's prompt, (the late system message,) an assistant
    turn with a tool call and the tool's result. The keyword arguments shape it as llama-server
    does for a template that needs it (see the module's docstring)."""
    args: Any = {"file_path": f"/home/user/project/tests/{ARGUMENT_MARKER}.py"}
    if not object_arguments:
        args = json.dumps(args)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": FIRST_SYSTEM},
        {"role": "user", "content": USER_PROMPT},
    ]
    if late_system:
        messages.append({"role": "system", "content": LATE_SYSTEM})
    messages += [
        {
            "role": "assistant",
            "content": ASSISTANT_TEXT,
            "tool_calls": [
                {
                    "id": "toolu_01A",
                    "type": "function",
                    "function": {"name": "Read", "arguments": args},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01A", "content": TOOL_RESULT},
    ]
    if fold_system:  # llama.cpp's workaround for templates without a system role
        first = messages.pop(0)
        messages[0] = {**messages[0], "content": first["content"] + "\n" + messages[0]["content"]}
    if typed_content:
        messages = [
            {**m, "content": [{"type": "text", "text": m["content"]}]}
            if isinstance(m.get("content"), str)
            else m
            for m in messages
        ]
    return messages


# ----------------------------------------------------------------------------- the renderer

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar(
    "llamafleet_template_deadline", default=math.inf
)


def _check_deadline() -> None:
    if time.monotonic() > _deadline.get():
        raise TemplateTimeoutError("rendering took too long (time limit reached)")


def _too_big(value: Any) -> bool:
    return isinstance(value, (str, list, tuple)) and len(value) > MAX_VALUE_LEN


def _repeat_too_big(left: Any, right: Any) -> bool:
    """Whether ``left * right`` repeats a string or list beyond :data:`MAX_VALUE_LEN`."""
    if isinstance(left, int) and isinstance(right, (str, list)):
        left, right = right, left
    return (
        isinstance(left, (str, list))
        and isinstance(right, int)
        and not isinstance(right, bool)
        and len(left) * right > MAX_VALUE_LEN
    )


def jinja2_available() -> bool:
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _environment() -> Any:
    """The sandboxed jinja2 environment (built once; jinja2 is imported only here)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.parser import Parser
    from jinja2.runtime import Context
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` (assistant masks): renders its body, as
        llama.cpp's engine does."""

        tags = {"generation"}  # noqa: RUF012 - jinja2's own attribute

        def parse(self, parser: Parser) -> list[nodes.Node]:
            next(parser.stream)
            body: list[nodes.Node] = parser.parse_statements(
                ("name:endgeneration",), drop_needle=True
            )
            return body

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if isinstance(obj, list) and attr in ("append", "pop"):
                return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
            return super().is_safe_attribute(obj, attr, value)

        def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
            _check_deadline()
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 4096:
                raise TemplateError("exponent too large")
            if operator == "*" and _repeat_too_big(left, right):
                raise TemplateError("a value grows beyond the size limit")
            result = super().call_binop(context, operator, left, right)
            if _too_big(result):
                raise TemplateError("a value grows beyond the size limit")
            return result

        def getattr(self, obj: Any, attribute: str) -> Any:
            _check_deadline()
            return super().getattr(obj, attribute)

        def getitem(self, obj: Any, argument: Any) -> Any:
            _check_deadline()
            return super().getitem(obj, argument)

        def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _check_deadline()
            result = super().call(__context, __obj, *args, **kwargs)
            if _too_big(result):
                raise TemplateError("a value grows beyond the size limit")
            return result

    env = Sandbox(
        loader=None,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        extensions=["jinja2.ext.loopcontrols", Generation],
        undefined=jinja2.Undefined,
    )

    def raise_exception(message: Any = "") -> None:
        raise TemplateError(str(message), raised=True)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(str(fmt))

    def tojson(
        value: Any,
        indent: int | None = None,
        separators: Sequence[str] | None = None,
        ensure_ascii: bool = False,
        sort_keys: bool = False,
    ) -> str:
        seps = tuple(separators) if separators is not None else None
        return json.dumps(
            value,
            indent=indent,
            separators=seps,  # type: ignore[arg-type]
            ensure_ascii=ensure_ascii,
            sort_keys=sort_keys,
            default=str,
        )

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = tojson
    return env


def _llama_cpp_patches(source: str) -> str:
    """The two source patches llama.cpp applies before parsing (common_chat_templates_init)."""
    if "<|channel|>" in source and "in message.content or" in source:
        source = source.replace(
            '{%- if "<|channel|>analysis<|message|>" in message.content or '
            '"<|channel|>final<|message|>" in message.content %}',
            "{%- if false %}",
        )
    if "[TOOL_CALLS]" in source and "if (message['content'] is none or" in source:
        source = source.replace(
            "{%- if (message['content'] is none or message['content'] == '' or "
            "message['content']|length == 0) and (message['tool_calls'] is not defined or "
            "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
            "{%- if false %}",
        )
    return source


def compile_template(source: str) -> Any:
    """Parse ``source`` in the sandbox; raises :class:`TemplateSyntaxError`."""
    import jinja2

    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateSyntaxError(f"the template is larger than {MAX_TEMPLATE_CHARS} characters")
    try:
        return _environment().from_string(_llama_cpp_patches(source))
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateSyntaxError(f"syntax error on line {exc.lineno}: {exc.message}") from exc
    except (RecursionError, MemoryError) as exc:
        raise TemplateSyntaxError(f"cannot be parsed: {type(exc).__name__}") from exc


def _run(compiled: Any, context: Mapping[str, Any], deadline: float) -> str:
    import jinja2

    token = _deadline.set(deadline)
    try:
        out: list[str] = []
        size = 0
        for piece in compiled.generate(**context):
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateError(f"the output exceeds {MAX_OUTPUT_CHARS} characters")
            if time.monotonic() > deadline:
                raise TemplateTimeoutError("rendering took too long (time limit reached)")
            out.append(piece)
        return "".join(out)
    except TemplateError:
        raise
    except jinja2.TemplateSyntaxError as exc:  # raised lazily by some constructs
        raise TemplateSyntaxError(f"syntax error on line {exc.lineno}: {exc.message}") from exc
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateError(f"not allowed in llama.cpp's template engine: {exc}") from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"undefined: {exc.message}") from exc
    except RecursionError as exc:
        raise TemplateError("too deep a recursion") from exc
    except MemoryError as exc:
        raise TemplateError("out of memory") from exc
    except Exception as exc:  # a template can make Python raise anything (TypeError, ...)
        raise TemplateError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        _deadline.reset(token)


def render(
    template: str | Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    extra: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """Render ``template`` (source text or :func:`compile_template`'s result) in this process
    with the variables llama-server gives it (``extra`` adds or replaces some). Raises
    :class:`TemplateError` (``raised`` when the template called ``raise_exception``) or
    :class:`TemplateSyntaxError`."""
    compiled = compile_template(template) if isinstance(template, str) else template
    now = datetime.now()
    context: dict[str, Any] = {
        "messages": json.loads(json.dumps(list(messages))),  # a fresh copy per render
        "bos_token": "",
        "eos_token": "",
        "add_generation_prompt": add_generation_prompt,
        # what llama-server always adds (common/chat.cpp: enable_thinking, extra context)
        "enable_thinking": True,
        "datetime": now.strftime("%b %d %Y"),
        "date_string": now.strftime("%d %b %Y"),
    }
    if tools:
        context["tools"] = json.loads(json.dumps(list(tools)))
    context.update(extra or {})
    return _run(compiled, context, time.monotonic() + timeout)


# ----------------------------------------------------------------------------- classify


def _in_place(out: str) -> tuple[bool, str]:
    """Whether the late marker lies between the user's prompt and the assistant's turn."""
    user = out.find(USER_MARKER)
    after = [
        p for p in (out.find(m, user + 1) for m in (ASSISTANT_MARKER, ARGUMENT_MARKER)) if p >= 0
    ]
    result = out.find(RESULT_MARKER, user + 1)
    end = min(after) if after else (result if result >= 0 else len(out))
    places = [m.start() for m in re.finditer(re.escape(LATE_MARKER), out)]
    if user >= 0 and any(user < p < end for p in places):
        return True, ""
    if user < 0:
        return False, "the user's prompt is not in the rendered prompt either"
    if places[0] < user:
        return False, "it is rendered before the user's prompt"
    return False, "it is rendered after the assistant's turn"


def _classify_here(template: str, timeout: float) -> Classification:
    """:func:`classify` in this process."""
    if not jinja2_available():
        return Classification(UNKNOWN, "jinja2 is not installed")
    deadline = time.monotonic() + timeout
    try:
        compiled = compile_template(template)
    except TemplateSyntaxError as exc:
        return Classification(UNRENDERABLE, exc.message)

    def left() -> float:
        return max(0.001, deadline - time.monotonic())

    # llama.cpp folds the first system message into the first user message when the template
    # ignores the system role (caps: supports_system_role)
    try:
        probe = render(
            compiled,
            [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": "Hi"}],
            [],
            timeout=left(),
        )
        fold = _PROBE_SYSTEM not in probe
    except (TemplateSyntaxError, TemplateTimeoutError) as exc:
        return Classification(UNRENDERABLE, exc.message)
    except TemplateError:
        fold = True
    first_error: TemplateError | None = None
    for typed in (False, True):
        for objects in (True, False):
            shape = {"typed_content": typed, "object_arguments": objects, "fold_system": fold}
            try:
                render(compiled, conversation(False, **shape), TOOLS, timeout=left())
            except TemplateTimeoutError as exc:
                return Classification(UNRENDERABLE, exc.message)
            except TemplateError as exc:
                first_error = first_error or exc
                continue
            try:
                out = render(compiled, conversation(True, **shape), TOOLS, timeout=left())
            except TemplateTimeoutError as exc:
                return Classification(UNRENDERABLE, exc.message)
            except TemplateError as exc:
                return Classification(RAISES, exc.message)
            if LATE_MARKER not in out:
                return Classification(DROPS, "the rendered prompt does not contain it")
            placed, where = _in_place(out)
            return Classification(OK) if placed else Classification(MOVES, where)
    assert first_error is not None
    why = first_error.message
    if first_error.raised:
        why = f"raise_exception('{why}')"
    return Classification(
        UNRENDERABLE, f"fails on a Claude Code conversation even without the late message: {why}"
    )


def classify(
    template: str, *, isolate: bool = True, timeout: float = DEFAULT_TIMEOUT
) -> Classification:
    """What ``template`` does with a late system message in a Claude Code conversation.
    ``isolate``: render in a child process with resource limits (the default; a template can come
    from a downloaded GGUF); False: in this process (deadline and size caps only)."""
    return _classify_cached(template, isolate, timeout)


@functools.lru_cache(maxsize=64)
def _classify_cached(template: str, isolate: bool, timeout: float) -> Classification:
    if not jinja2_available():
        return Classification(UNKNOWN, "jinja2 is not installed")
    if not isolate or not sys.executable:
        return _classify_here(template, timeout)
    return _classify_in_child(template, timeout)


#: Seconds a child process may take to start and import jinja2, besides its work.
_CHILD_START = 20.0


class _ChildTimeoutError(Exception):
    pass


def _run_child(request: dict[str, Any], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python -m llamafleet.chat_template`` on ``request`` (JSON on its standard input),
    with :func:`_limit_child`'s limits; raises :class:`_ChildTimeoutError` after ``timeout``
    seconds of work (and the start-up), OSError when no child can be started."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    try:
        return subprocess.run(
            [sys.executable, "-m", "llamafleet.chat_template"],
            input=json.dumps({**request, "timeout": timeout}),
            capture_output=True,
            text=True,
            timeout=timeout + _CHILD_START,  # start-up and imports on a slow machine
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise _ChildTimeoutError from exc


def _child_failure(proc: subprocess.CompletedProcess[str], timeout: float, who: str) -> str:
    """Why the child process (``who``, for the message) gave no answer."""
    if proc.returncode < 0:
        return (
            f"{who} was stopped by signal {-proc.returncode} at a resource limit (the limits: "
            f"{_cpu_limit(timeout)} s of CPU time, {CHILD_ADDRESS_SPACE >> 20} MiB of memory)"
        )
    if "MemoryError" in proc.stderr:
        return f"{who} needs more than the {CHILD_ADDRESS_SPACE >> 20} MiB of memory allowed"
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return f"{who} failed: {last[:200]}"


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    """What the child's answers depend on besides the template: this module's source, jinja2's
    version and Python's (an answer kept on disk by :mod:`llamafleet.diskcache` is used again only
    by the same code)."""
    import jinja2

    with open(__file__, "rb") as fh:
        source = hashlib.sha256(fh.read()).hexdigest()
    return f"{source}/{jinja2.__version__}/{sys.version_info[0]}.{sys.version_info[1]}"


def _question(op: str, template: str, timeout: float) -> dict[str, Any]:
    digest = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
    return {"op": op, "template": digest, "timeout": timeout, "code": _code_version()}


#: The classifications kept on disk: those of a render that ran to its end. One that hit a limit
#: (time, memory: unrenderable) depends on how busy the machine was, and is asked again.
_KEPT_KINDS = frozenset({OK, RAISES, DROPS, MOVES})


def _classify_in_child(template: str, timeout: float) -> Classification:
    question = _question("classify", template, timeout)
    kept = diskcache.get("chat-template", question)
    if kept is not None and kept.get("kind") in _KEPT_KINDS:
        return Classification(str(kept["kind"]), str(kept.get("detail", "")))
    try:
        proc = _run_child({"op": "classify", "template": template}, timeout)
    except _ChildTimeoutError:
        return Classification(
            UNRENDERABLE, f"rendering took longer than {timeout:g} s (the time limit)"
        )
    except OSError:  # cannot start a child: render here, bounded by the deadline
        return _classify_here(template, timeout)
    try:
        data = json.loads(proc.stdout)
        found = Classification(str(data["kind"]), str(data.get("detail", "")))
    except (ValueError, KeyError, TypeError):
        if proc.returncode >= 0 and "MemoryError" in proc.stderr:
            return Classification(UNRENDERABLE, "rendering needs more memory than allowed")
        return Classification(UNRENDERABLE, _child_failure(proc, timeout, "the renderer"))
    if proc.returncode == 0 and found.kind in _KEPT_KINDS:
        diskcache.put("chat-template", question, found.as_dict())
    return found


def _cpu_limit(timeout: float) -> int:
    return math.ceil(timeout) + 1


def _limit_child(timeout: float) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's wall-clock timeout still holds
        return
    for name, value in (
        ("RLIMIT_CPU", _cpu_limit(timeout)),
        ("RLIMIT_AS", CHILD_ADDRESS_SPACE),
        ("RLIMIT_FSIZE", 0),
        ("RLIMIT_CORE", 0),
    ):
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            _soft, hard = resource.getrlimit(which)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (new, hard))
        except (ValueError, OSError):
            pass


def _child_main() -> int:
    """The child process: ``{"op": "classify"|"fix", "template", "timeout"}`` on standard input,
    the classification or ``{"fixed", "description"}``/``{"error"}`` as JSON on standard output."""
    request = json.loads(sys.stdin.read())
    timeout = float(request.get("timeout", DEFAULT_TIMEOUT))
    template = str(request["template"])
    import jinja2  # noqa: F401 - imported before the address-space limit

    _environment()
    _limit_child(timeout)
    answer: dict[str, str]
    if request.get("op") == "fix":
        try:
            fixed, description = _fix_here(template, timeout)
            answer = {"fixed": fixed, "description": description}
        except TemplateFixError as exc:
            answer = {"error": str(exc)}
        except MemoryError:
            answer = {"error": "the fix needs more memory than allowed"}
    else:
        try:
            result = _classify_here(template, timeout)
        except MemoryError:
            result = Classification(UNRENDERABLE, "rendering needs more memory than allowed")
        answer = result.as_dict()
    sys.stdout.write(json.dumps(answer))
    return 0


# ----------------------------------------------------------------------------- the fix

#: A string literal as Jinja's lexer reads it: a quote, then any character but a backslash or that
#: quote, or a backslash and the character it escapes. Each character matches one way only (a
#: backslash only as an escape), so a run of backslashes costs linear time, not exponential.
_QUOTED = r"(?P<q>['\"])(?P<msg>(?:\\.|(?!(?P=q))[^\\])*)(?P=q)"


def _role(group: str) -> str:
    """``<msg>.role == 'system'`` or ``<msg>['role'] == "system"``, the variable in ``group``."""
    return (
        rf"(?P<{group}>[A-Za-z_]\w*)(?:\.role|\[\s*['\"]role['\"]\s*\])"
        r"\s*==\s*['\"]system['\"]"
    )


_POSITION = (
    r"(?:not\s+loop\.first"
    r"|loop\.index0\s*(?:>|!=)\s*0|loop\.index0\s*>=\s*1"
    r"|loop\.index\s*(?:>|!=)\s*1|loop\.index\s*>=\s*2"
    r"|not\s+loop\.index0\s*==\s*0|not\s*\(\s*loop\.index0\s*==\s*0\s*\))"
)
_COND = rf"(?:{_POSITION}(?:\s+and\s+{_role('var1')})?|{_role('var2')}\s+and\s+{_POSITION})"
#: ``{% if <not first> %}{{ raise_exception('...system...') }}{% endif %}``. No two quantifiers
#: next to each other can take the same characters (``if(?:\s*\(\s*|\s+)``, not ``if\s+\(?\s*``),
#: so a failed attempt costs time linear in what it read, and the attempts (one per ``{%``) read
#: apart from each other but for string literals: the scan is linear in the template's length.
_GUARD = re.compile(
    r"(?P<open>\{%[-+]?\s*if(?:\s*\(\s*|\s+)" + _COND + r"(?:\s*\))?\s*[-+]?%\})"
    r"(?P<gap>\s*)"
    r"(?P<raise>\{\{[-+]?\s*raise_exception\(\s*" + _QUOTED + r"\s*\)\s*[-+]?\}\})"
    r"(?P<tail>\s*\{%[-+]?\s*endif\s*[-+]?%\})",
    re.S,
)
_LOOP_TAG = re.compile(
    r"\{%[-+]?\s*(?:for\s+(?P<var>[A-Za-z_]\w*)(?:\s*,\s*[A-Za-z_]\w*)*\s+in\b|(?P<end>endfor)\b)"
)


def _loop_variables(template: str, positions: Sequence[int]) -> list[str | None]:
    """The variable of the innermost ``{% for %}`` still open at each of ``positions`` (in
    ascending order), in one pass over the template."""
    out: list[str | None] = []
    stack: list[str] = []
    tags = _LOOP_TAG.finditer(template)
    tag = next(tags, None)
    for pos in positions:
        while tag is not None and tag.end() <= pos:
            if tag.group("end"):
                if stack:
                    stack.pop()
            else:
                stack.append(tag.group("var"))
            tag = next(tags, None)
        out.append(stack[-1] if stack else None)
    return out


def _enclosing_loop_variable(template: str, pos: int) -> str | None:
    """The variable of the innermost ``{% for %}`` still open at ``pos``."""
    return _loop_variables(template, [pos])[0]


def _in_place_turn(var: str) -> str:
    """The jinja that replaces the guard's raise: a ChatML system turn for message ``var``,
    whose content is a string or a list of typed parts (their texts, joined), trimmed as the
    Qwen templates trim the first system message. Only constructs llama.cpp's engine has."""
    return (
        f"{{%- if {var}.content is string %}}"
        f"{{%- set _lf_late_system = {var}.content %}}"
        f"{{%- else %}}"
        f"{{%- set _lf_late_system = {var}.content | selectattr('text') "
        f"| map(attribute='text') | join('') %}}"
        f"{{%- endif %}}"
        f"{{{{- '<|im_start|>system\\n' + _lf_late_system | trim + '<|im_end|>\\n' -}}}}"
    )


def fix_late_system(
    template: str, *, isolate: bool = True, timeout: float = DEFAULT_FIX_TIMEOUT
) -> tuple[str, str]:
    """Rewrite the guard that rejects a late system message so that it renders in place.

    The transformation: in each ``{% if C %}{{ raise_exception('M') }}{% endif %}`` where C says
    "not the first message" (``not loop.first``, ``loop.index0 > 0``, ``loop.index0 != 0``,
    ``loop.index > 1``, ..., optionally ``and <msg>.role == 'system'`` / ``<msg>['role'] ==
    'system'``, any quoting, any whitespace control) and M mentions "system", only the
    ``{{ raise_exception('M') }}`` expression is replaced by a ChatML turn
    ``<|im_start|>system\\n`` + the message's content (a string, or the texts of its typed parts
    joined) trimmed + ``<|im_end|>\\n``, for the loop variable of the enclosing
    ``{% for <msg> in ... %}``. The ``if`` and ``endif`` stay, so a first system message (rendered
    by the template before its loop) is rendered exactly as before, and so is everything else.

    Returns ``(template, "no change")`` for a template that already renders a late system message
    in place. Raises :class:`TemplateFixError` when the template is not ChatML, no such guard is
    found, or the rewritten template still does not render the late system message in place
    (checked by rendering), or the work takes longer than ``timeout`` seconds.

    ``isolate`` (the default; a template can come from a downloaded GGUF): everything (the checks,
    the search for the guard, the rewrite) runs in a child process with the limits of
    :func:`classify` (wall-clock and CPU time, memory); False: in this process (the renders are
    bounded by their deadline, the search is linear in the template's length)."""
    if not jinja2_available():
        raise TemplateFixError("jinja2 is not installed: the fix is verified by rendering")
    if not isolate or not sys.executable:
        return _fix_here(template, timeout)
    question = _question("fix", template, timeout)
    kept = diskcache.get("chat-template", question)
    if kept is not None and isinstance(kept.get("fixed"), str):
        return str(kept["fixed"]), str(kept.get("description", ""))
    try:
        proc = _run_child({"op": "fix", "template": template}, timeout)
    except _ChildTimeoutError:
        raise TemplateFixError(
            f"checking and rewriting the template took longer than {timeout:g} s (the time "
            "limit); not fixed"
        ) from None
    except OSError:  # cannot start a child: here, bounded by the deadlines
        return _fix_here(template, timeout)
    try:
        data = json.loads(proc.stdout)
        answer = (str(data["fixed"]), str(data["description"])) if "error" not in data else None
        error = str(data.get("error", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        why = _child_failure(proc, timeout, "the process that checks and rewrites the template")
        raise TemplateFixError(f"{why}; not fixed") from None
    if answer is None:
        raise TemplateFixError(error)
    if proc.returncode == 0:
        diskcache.put("chat-template", question, {"fixed": answer[0], "description": answer[1]})
    return answer


def _fix_here(template: str, timeout: float) -> tuple[str, str]:
    """:func:`fix_late_system` in this process, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout

    def left() -> float:
        if time.monotonic() >= deadline:
            raise TemplateFixError(
                f"checking and rewriting the template took longer than {timeout:g} s (the time "
                "limit); not fixed"
            )
        return deadline - time.monotonic()

    before = classify(template, isolate=False, timeout=left())
    if before.kind == OK:
        return template, "no change"
    if before.kind == UNKNOWN:
        raise TemplateFixError(f"cannot check the template: {before.detail}")
    if "<|im_start|>" not in template:
        raise TemplateFixError(
            "the template is not ChatML (no <|im_start|>): only the Qwen/ChatML guard is "
            f"rewritten; it {before.describe()}"
        )
    matches = [m for m in _GUARD.finditer(template) if "system" in m.group("msg").lower()]
    if not matches:
        raise TemplateFixError(
            "no guard of the known form ({% if not loop.first %}{{ raise_exception('...system"
            "...') }}{% endif %}) found; the template " + before.describe()
        )
    loops = _loop_variables(template, [m.start() for m in matches])
    out: list[str] = []
    pos = 0
    line, counted = 1, 0  # the line at `counted`, counted forward once
    lines: list[str] = []
    for m, loop in zip(matches, loops, strict=True):
        line += template.count("\n", counted, m.start("raise"))
        counted = m.start("raise")
        var = m.group("var1") or m.group("var2") or loop
        if var is None:
            guard_line = line - template.count("\n", m.start(), m.start("raise"))
            raise TemplateFixError(
                f"the guard on line {guard_line} is not inside a {{% for message in messages %}} "
                "loop"
            )
        out.append(template[pos : m.start("raise")])
        out.append(_in_place_turn(var))
        pos = m.end("raise")
        lines.append(str(line))
    out.append(template[pos:])
    fixed = "".join(out)
    after = classify(fixed, isolate=False, timeout=left())
    if after.kind != OK:
        raise TemplateFixError(
            f"rewrote the guard, but the result still {after.describe()}; not fixed"
        )
    msg = matches[0].group("msg")
    where = ", ".join(lines)
    description = (
        f"line {where}: raise_exception({msg!r}) for a system message after the first replaced "
        "by an in-place <|im_start|>system ... <|im_end|> turn"
    )
    return fixed, description


# ----------------------------------------------------------------------------- server template

#: llama.cpp's built-in template names (src/llama-chat.cpp): not Jinja text, not rendered here.
_BUILTIN_NAMES = (
    "chatml llama2 llama2-sys llama2-sys-bos llama2-sys-strip mistral-v1 mistral-v3 "
    "mistral-v3-tekken mistral-v7 mistral-v7-tekken phi3 phi4 falcon3 zephyr monarch gemma "
    "orion openchat vicuna vicuna-orca deepseek deepseek2 deepseek3 deepseek-ocr command-r "
    "llama3 chatglm3 chatglm4 glmedge minicpm exaone3 exaone4 exaone-moe rwkv-world granite "
    "granite-4.0 gigachat megrez yandex bailing bailing-think bailing2 llama4 smolvlm "
    "hunyuan-moe gpt-oss hunyuan-dense hunyuan-ocr kimi-k2 seed_oss grok-2 pangu-embedded "
    "solar-open"
)
BUILTIN_TEMPLATES = frozenset(_BUILTIN_NAMES.split())
METADATA_KEYS = ("tokenizer.chat_template.tool_use", "tokenizer.chat_template")


@dataclass(frozen=True)
class TemplateSource:
    """The template a server uses: its text, where it comes from (for messages) and the line to
    report on."""

    text: str
    origin: str
    line: int


def model_template(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """(template, key) from GGUF metadata: the ``tool_use`` variant when there is one (llama-server
    uses it for requests with tools, and Claude Code always sends tools)."""
    for key in METADATA_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value, key
    return None


def _override(cfg: ServerConfig) -> Option | None:
    """The last of --chat-template/--chat-template-file as llama.cpp applies them (environment
    variables first, then the command line in order)."""
    chosen: Option | None = None
    for from_env in (True, False):
        for opt in cfg.options:
            if (opt.from_env is not None) != from_env or opt.negated or opt.value is None:
                continue
            if opt.canonical in ("--chat-template", "--chat-template-file"):
                chosen = opt
    return chosen


def template_of(
    cfg: ServerConfig, facts: Facts, referenced: ReferencedFiles
) -> TemplateSource | None:
    """The chat template ``cfg`` serves Claude Code with, or None when none is known or it is not
    rendered by Jinja (``--no-jinja``, a built-in name)."""
    if cfg.bool_value("--jinja") is False:
        return None
    opt = _override(cfg)
    if opt is not None and opt.value is not None:
        if opt.canonical == "--chat-template-file":
            text = referenced.read(opt.value)
            if text is None:
                return None  # not allowed to open it, or not there: unknown
            return TemplateSource(text, f"the chat template {opt.value}", opt.line)
        value = opt.value
        if value.strip() in BUILTIN_TEMPLATES or not re.search(r"\{[{%]", value):
            return None
        return TemplateSource(value, "the template given with --chat-template", opt.line)
    model = facts.model
    if model is None:
        return None
    found = model_template(model.metadata)
    if found is None:
        return None  # llama-server falls back to ChatML, which renders every message in place
    text, key = found
    mopt = cfg.get("--model")
    line = mopt.line if mopt is not None else cfg.line
    return TemplateSource(text, f"the model's chat template ({key})", line)


if __name__ == "__main__":
    raise SystemExit(_child_main())

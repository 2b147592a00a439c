"""The chat template renderer, its classification of Claude Code's late system message, the fix,
the server's template choice, the facts that carry the template, and ``llamafleet template``.

The real templates come from the fork's source archive at test time (never copied here):
``LLAMAFLEET_FORK_ARCHIVE``, default ``../shared/sources/llama-cpp-turboquant-69d8e4be4.tar.gz``
beside the repository. Without it those tests are skipped. ``LLAMAFLEET_LLAMA_SERVER`` (a fork
llama-server binary) adds a comparison with llama.cpp's own template engine.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from conftest import CliResult, plugin_path, run_cli
from llamafleet import chat_template as ct
from llamafleet import template_cli
from llamafleet.errors import InputError
from llamafleet.facts import Facts, apply_facts
from llamafleet.gguf_meta import model_from_dict
from llamafleet.refs import AS_NAMED, NEVER, ReferencedFiles
from llamafleet.sources import parse_argv_string, parse_mapping

pytest.importorskip("jinja2")

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = Path(
    os.environ.get("LLAMAFLEET_FORK_ARCHIVE")
    or REPO.parent / "shared" / "sources" / "llama-cpp-turboquant-69d8e4be4.tar.gz"
)
TEMPLATES_DIR = "models/templates/"
QWEN35 = "Qwen3.5-4B.jinja"
GUARD = """    {%- if message.role == "system" %}
        {%- if not loop.first %}
            {{- raise_exception('System message must be at the beginning.') }}
        {%- endif %}
"""

#: What each template of the fork's models/templates (69d8e4be4, build 9079) does with the late
#: system message (`_classify_here`, in this process).
EXPECTED = {
    "Apertus-8B-Instruct.jinja": "raises",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "ok",
    "Bielik-11B-v3.0-Instruct.jinja": "drops",
    "ByteDance-Seed-OSS.jinja": "ok",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "ok",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "ok",
    "GLM-4.6.jinja": "ok",
    "GLM-4.7-Flash.jinja": "ok",
    "GigaChat3-10B-A1.8B.jinja": "ok",
    "GigaChat3.1-10B-A1.8B.jinja": "ok",
    "HuggingFaceTB-SmolLM3-3B.jinja": "drops",
    "Kimi-K2-Instruct.jinja": "ok",
    "Kimi-K2-Thinking.jinja": "ok",
    "LFM2-8B-A1B.jinja": "ok",
    "LFM2.5-Instruct.jinja": "ok",
    "MiMo-VL.jinja": "ok",
    "MiniMax-M2.jinja": "drops",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "ok",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "ok",
    "NVIDIA-Nemotron-Nano-v2.jinja": "drops",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "ok",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "ok",
    "Qwen-QwQ-32B.jinja": "ok",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "ok",
    "Qwen-Qwen3-0.6B.jinja": "ok",
    "Qwen3-Coder.jinja": "ok",
    "Qwen3.5-4B.jinja": "raises",
    "Reka-Edge.jinja": "drops",
    "StepFun3.5-Flash.jinja": "ok",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "moves",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "moves",
    "deepseek-ai-DeepSeek-V3.1.jinja": "moves",
    "deepseek-ai-DeepSeek-V3.2.jinja": "moves",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "unrenderable",
    "google-gemma-2-2b-it.jinja": "unrenderable",
    "google-gemma-4-31B-it-interleaved.jinja": "ok",
    "google-gemma-4-31B-it.jinja": "ok",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "ok",
    "ibm-granite-granite-4.0.jinja": "ok",
    "llama-cpp-deepseek-r1.jinja": "moves",
    "llama-cpp-rwkv-world.jinja": "moves",
    "meetkai-functionary-medium-v3.1.jinja": "ok",
    "meetkai-functionary-medium-v3.2.jinja": "ok",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "ok",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "ok",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "ok",
    "microsoft-Phi-3.5-mini-instruct.jinja": "ok",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "raises",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "raises",
    "moonshotai-Kimi-K2.jinja": "ok",
    "openai-gpt-oss-120b.jinja": "drops",
    "stepfun-ai-Step-3.5-Flash.jinja": "ok",
    "unsloth-Apriel-1.5.jinja": "ok",
    "unsloth-mistral-Devstral-Small-2507.jinja": "ok",
    "upstage-Solar-Open-100B.jinja": "moves",
}


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    """Every models/templates/*.jinja of the fork's source archive, by file name."""
    if not ARCHIVE.is_file():
        pytest.skip(
            f"the fork's source archive is not at {ARCHIVE} (set LLAMAFLEET_FORK_ARCHIVE to "
            "llama-cpp-turboquant-69d8e4be4.tar.gz): the real chat templates come from it"
        )
    out: dict[str, str] = {}
    with tarfile.open(ARCHIVE, "r:gz") as tf:
        for member in tf:
            _, _, inner = member.name.partition("/")
            if member.isfile() and inner.startswith(TEMPLATES_DIR) and inner.endswith(".jinja"):
                fh = tf.extractfile(member)
                assert fh is not None
                out[inner[len(TEMPLATES_DIR) :]] = fh.read().decode("utf-8")
    assert QWEN35 in out, f"{ARCHIVE} has no {TEMPLATES_DIR}{QWEN35}"
    return out


@pytest.fixture(scope="module")
def qwen35(templates: dict[str, str]) -> str:
    return templates[QWEN35]


def here(template: str) -> ct.Classification:
    return ct.classify(template, isolate=False)


def late_block(content: str = ct.LATE_SYSTEM) -> str:
    return "<|im_start|>system\n" + content.strip() + "<|im_end|>\n"


# ----------------------------------------------------------------------------- the real templates


def test_every_archive_template_is_classified(templates: dict[str, str]) -> None:
    got = {name: here(text).kind for name, text in templates.items()}
    assert got == EXPECTED


def test_real_qwen35_raises_in_a_bounded_child(qwen35: str) -> None:
    result = ct.classify(qwen35)  # the default: a child process with resource limits
    assert result == ct.Classification(ct.RAISES, "System message must be at the beginning.")
    assert here(qwen35) == result


def test_real_qwen35_renders_without_the_late_message(qwen35: str) -> None:
    out = ct.render(qwen35, ct.conversation(False), ct.TOOLS)
    for marker in (ct.SYSTEM_MARKER, ct.USER_MARKER, ct.ARGUMENT_MARKER, ct.RESULT_MARKER):
        assert marker in out
    assert out.index(ct.USER_MARKER) < out.index(ct.ARGUMENT_MARKER) < out.index(ct.RESULT_MARKER)
    assert '"name": "Bash"' in out  # tojson as json.dumps, no HTML escaping
    assert out.endswith("<|im_start|>assistant\n<think>\n")


def test_real_templates_in_place(templates: dict[str, str]) -> None:
    for name in ("Qwen3-Coder.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"):
        out = ct.render(templates[name], ct.conversation(True), ct.TOOLS)
        user_end = out.index(ct.USER_MARKER)
        assert user_end < out.index(ct.LATE_MARKER) < out.index(ct.ARGUMENT_MARKER), name
        assert late_block() in out, name


# ----------------------------------------------------------------------------- the fix


def test_fix_real_qwen35(qwen35: str) -> None:
    fixed, description = ct.fix_late_system(qwen35)
    assert here(fixed).kind == ct.OK
    assert "line 85" in description and "System message must be at the beginning." in description
    old, new = qwen35.splitlines(), fixed.splitlines()
    assert len(old) == len(new)
    changed = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    assert changed == [84]
    assert "raise_exception" not in new[84] and "<|im_start|>system" in new[84]
    assert ct.fix_late_system(fixed) == (fixed, "no change")


@pytest.mark.parametrize("typed", [False, True], ids=["string-content", "typed-parts"])
def test_fixed_qwen35_renders_the_rest_as_before(qwen35: str, typed: bool) -> None:
    """The first system message, the user's prompt, the tool call and its result render exactly
    as the original renders them; the late system message becomes a turn where it stands."""
    fixed, _ = ct.fix_late_system(qwen35)
    before = ct.render(qwen35, ct.conversation(False, typed_content=typed), ct.TOOLS)
    assert ct.render(fixed, ct.conversation(False, typed_content=typed), ct.TOOLS) == before
    after = ct.render(fixed, ct.conversation(True, typed_content=typed), ct.TOOLS)
    assert after.count(late_block()) == 1
    assert after.replace(late_block(), "") == before
    user_turn_end = after.index("<|im_end|>\n", after.index(ct.USER_MARKER)) + len("<|im_end|>\n")
    assert after[user_turn_end:].startswith(late_block())
    # without tools, and without generation prompt, too
    cases: tuple[dict[str, Any], ...] = ({"tools": None}, {"add_generation_prompt": False})
    for kw in cases:
        tools = kw.get("tools", ct.TOOLS)
        gen = bool(kw.get("add_generation_prompt", True))
        a = ct.render(qwen35, ct.conversation(False), tools, add_generation_prompt=gen)
        b = ct.render(fixed, ct.conversation(True), tools, add_generation_prompt=gen)
        assert b.replace(late_block(), "") == a


def _variant(text: str, old: str, new: str) -> str:
    assert old in text, f"the template no longer holds {old!r}"
    return text.replace(old, new)


def _variants(qwen35: str) -> dict[str, str]:
    raise_ = "{{- raise_exception('System message must be at the beginning.') }}"
    return {
        "double quotes": _variant(
            qwen35, raise_, '{{- raise_exception("System message must be at the beginning.") }}'
        ),
        "no whitespace control": _variant(
            qwen35,
            GUARD,
            """    {%- if message.role == "system" %}
        {% if not loop.first %}
            {{ raise_exception('System message must be at the beginning.') }}
        {% endif %}
""",
        ),
        "both sides trimmed": _variant(
            qwen35,
            GUARD,
            """    {%- if message.role == "system" %}
        {%- if not loop.first -%}
            {{- raise_exception( 'System message must be at the beginning.' ) -}}
        {%- endif -%}
""",
        ),
        "message['role']": _variant(
            _variant(
                qwen35,
                '{%- if message.role == "system" %}',
                "{%- if message['role'] == 'system' %}",
            ),
            '{%- elif message.role == "user" %}',
            "{%- elif message['role'] == 'user' %}",
        ),
        "loop.index0 > 0": _variant(
            qwen35, "{%- if not loop.first %}", "{%- if loop.index0 > 0 %}"
        ),
        "loop.index0 != 0": _variant(
            qwen35, "{%- if not loop.first %}", "{%- if loop.index0 != 0 %}"
        ),
        "role and position in one if": _variant(
            qwen35,
            GUARD,
            """    {%- if message['role'] == 'system' and loop.index0 > 0 %}
        {{- raise_exception('System message must be at the beginning.') }}
    {%- endif %}
    {%- if message.role == "system" %}
""",
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "double quotes",
        "no whitespace control",
        "both sides trimmed",
        "message['role']",
        "loop.index0 > 0",
        "loop.index0 != 0",
        "role and position in one if",
    ],
)
def test_fix_variants(qwen35: str, name: str) -> None:
    variant = _variants(qwen35)[name]
    assert here(variant) == ct.Classification(ct.RAISES, "System message must be at the beginning.")
    fixed, description = ct.fix_late_system(variant)
    assert here(fixed).kind == ct.OK, fixed
    assert "System message must be at the beginning." in description
    before = ct.render(variant, ct.conversation(False), ct.TOOLS)
    assert ct.render(fixed, ct.conversation(False), ct.TOOLS) == before
    after = ct.render(fixed, ct.conversation(True), ct.TOOLS)
    assert after.replace(late_block(), "") == before


def test_fix_other_loop_variable_and_typed_content() -> None:
    template = (
        "{% for m in messages %}"
        "{% if m.role == 'system' %}{% if loop.index > 1 %}"
        '{{ raise_exception("system messages must come first") }}{% endif %}'
        "<|im_start|>system\n{{ m.content }}<|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n"
        "{% if m.content is string %}{{ m.content }}{% else %}"
        "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}<|im_end|>\n"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert here(template) == ct.Classification(ct.RAISES, "system messages must come first")
    fixed, _ = ct.fix_late_system(template)
    assert "m.content is string" in fixed and here(fixed).kind == ct.OK
    parts = ct.conversation(True)
    parts[2] = {"role": "system", "content": [{"type": "text", "text": ct.LATE_SYSTEM}]}
    assert late_block() in ct.render(fixed, parts, ct.TOOLS)


def test_fix_finds_the_loop_the_guard_is_in() -> None:
    template = (
        "{% for message in messages %}{% for tool in tools or [] %}{% endfor %}"
        "{% if message.role == 'system' %}{% if not loop.first %}"
        "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
        "<|im_start|>system\n{{ message.content }}<|im_end|>\n"
        "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
        "{% endif %}{% endfor %}"
    )
    fixed, _ = ct.fix_late_system(template)
    assert "message.content is string" in fixed and "tool.content" not in fixed
    assert ct._enclosing_loop_variable(template, template.index("raise_exception")) == "message"
    assert ct._enclosing_loop_variable(template, 0) is None
    with pytest.raises(ct.TemplateFixError, match="not inside"):
        ct.fix_late_system(
            "{% if not loop.first %}{{ raise_exception('System message first') }}{% endif %}"
            "<|im_start|>{{ messages[0].content }}"
        )


def test_fix_leaves_a_working_template_alone(templates: dict[str, str]) -> None:
    for name in ("Qwen3-Coder.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja"):
        assert ct.fix_late_system(templates[name]) == (templates[name], "no change")


def test_fix_refuses_what_it_does_not_know(templates: dict[str, str]) -> None:
    with pytest.raises(ct.TemplateFixError, match="not ChatML"):
        ct.fix_late_system(templates["mistralai-Mistral-Nemo-Instruct-2407.jinja"])
    with pytest.raises(ct.TemplateFixError, match="no guard of the known form"):
        ct.fix_late_system(templates["Bielik-11B-v3.0-Instruct.jinja"])  # ChatML, drops it
    other_guard = (
        "{%- set ns = namespace(seen=false) %}{%- for message in messages %}"
        "{%- if message.role == 'system' and ns.seen %}"
        "{{- raise_exception('one system message only') }}{%- endif %}"
        "{%- set ns.seen = true %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endfor %}"
    )
    assert here(other_guard).kind == ct.RAISES
    with pytest.raises(ct.TemplateFixError, match="no guard of the known form"):
        ct.fix_late_system(other_guard)
    with pytest.raises(ct.TemplateFixError, match="syntax error"):
        ct.fix_late_system("<|im_start|>{% if %}")


def test_fix_verifies_by_rendering() -> None:
    """A second check that the rewrite does not touch keeps the template raising: refused."""
    template = (
        "{%- for message in messages %}"
        "{%- if message.role == 'system' and not loop.first %}"
        "{{- raise_exception('System message must be at the beginning.') }}{%- endif %}"
        "{%- if message.role == 'system' and loop.index0 == 2 %}"
        "{{- raise_exception('really not here') }}{%- endif %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endfor %}"
    )
    with pytest.raises(ct.TemplateFixError, match="still raises on the late system message"):
        ct.fix_late_system(template)


# ----------------------------------------------------------------------------- crafted templates
#
# A model file from the internet can hold any chat template. These are written by the generator
# below (into the test's own directory): the official guard of the Qwen3.5/3.6 templates (the real
# Qwen3.5-4B template of the fork's archive, or a minimal ChatML loop with the same guard when the
# archive is not there) with a run of backslashes in its raise_exception('...') string. The guard
# pattern before this test backtracked exponentially on it: 60 backslashes in a GGUF's template
# hung the playbook and `llamafleet template fix`; runs of whitespace in the guard's tag cost
# quadratic time.

OFFICIAL_RAISE = "raise_exception('System message must be at the beginning.')"
MINIMAL_GUARDED = (
    "{%- for message in messages %}\n"
    "{%- if message.role == 'system' %}\n"
    "    {%- if not loop.first %}\n"
    f"        {{{{- {OFFICIAL_RAISE} }}}}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)
#: Generous for a slow, busy machine (each takes well under a second on an idle one).
CRAFTED_SECONDS = 5.0


def backslash_template(base: str, count: int, concatenated: bool) -> str:
    """``base`` with the official guard's message ending in ``count`` backslashes (an even count:
    a valid Jinja string of count/2 escaped backslashes). ``concatenated``: the string is followed
    by ``~ ''``, the form on which the old guard pattern backtracked (about 1.6^count steps) before
    failing; otherwise a plain string, which the fix rewrites."""
    assert count % 2 == 0 and OFFICIAL_RAISE in base
    message = "System message must be at the beginning." + "\\" * count
    arg = f"'{message}'" + (" ~ ''" if concatenated else "")
    return base.replace(OFFICIAL_RAISE, f"raise_exception({arg})")


@pytest.fixture(params=["minimal", "qwen35"])
def guarded(request: pytest.FixtureRequest) -> str:
    """A template with the official guard: the minimal ChatML loop, the real Qwen3.5 template."""
    if request.param == "minimal":
        return MINIMAL_GUARDED
    text: str = request.getfixturevalue("qwen35")
    return text


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    try:
        result: Any = fn()
    except ct.TemplateFixError as exc:
        result = exc
    return result, time.monotonic() - t0


@pytest.mark.parametrize("count", [60, 10_000, 1_000_000])
def test_the_guard_search_is_linear_on_backslashes(count: int) -> None:
    """The pattern alone, in this process: a million backslashes take well under a second."""
    template = backslash_template(MINIMAL_GUARDED, count, concatenated=True)
    t0 = time.monotonic()
    assert list(ct._GUARD.finditer(template)) == []
    plain = backslash_template(MINIMAL_GUARDED, count, concatenated=False)
    (m,) = ct._GUARD.finditer(plain)
    assert m.group("msg").endswith("\\" * count)
    assert time.monotonic() - t0 < CRAFTED_SECONDS


@pytest.mark.parametrize(
    "tag",
    [
        "{%- if" + " " * 100_000 + "not loop.first x %}",
        "{%- if (" + " " * 100_000 + "x %}",
        "{%- if not loop.first" + " " * 100_000 + "x %}",
        "{%- if message.role == 'system' and" + " " * 100_000 + "x %}",
    ],
    ids=["after-if", "after-paren", "before-end", "after-and"],
)
def test_the_guard_search_is_linear_on_whitespace(tag: str) -> None:
    template = MINIMAL_GUARDED.replace("{%- if not loop.first %}", tag)
    t0 = time.monotonic()
    assert list(ct._GUARD.finditer(template)) == []
    assert time.monotonic() - t0 < CRAFTED_SECONDS


@pytest.mark.parametrize("count", [60, 10_000])
def test_crafted_template_is_classified_and_refused_in_bounded_time(
    guarded: str, count: int
) -> None:
    """classify (its bounded child) and the fix (in its bounded child, the default, and in this
    process) each finish: the template raises; the guard is not of the known form, refused."""
    template = backslash_template(guarded, count, concatenated=True)
    result, seconds = _timed(lambda: ct.classify(template))
    assert result.kind == ct.RAISES and result.detail.endswith("\\" * (count // 2)), result
    assert seconds < CRAFTED_SECONDS
    for isolate in (True, False):
        refused, seconds = _timed(functools.partial(ct.fix_late_system, template, isolate=isolate))
        assert isinstance(refused, ct.TemplateFixError), refused
        assert "no guard of the known form" in str(refused)
        assert seconds < CRAFTED_SECONDS, (isolate, seconds)


@pytest.mark.parametrize("count", [60, 10_000])
def test_crafted_plain_string_guard_is_fixed_in_bounded_time(guarded: str, count: int) -> None:
    template = backslash_template(guarded, count, concatenated=False)
    (fixed, description), seconds = _timed(lambda: ct.fix_late_system(template))
    assert seconds < CRAFTED_SECONDS
    assert here(fixed).kind == ct.OK and "must be at the beginning." not in fixed
    assert "System message must be at the beginning." in description
    assert ct.fix_late_system(template, isolate=False) == (fixed, description)


def _llamafleet(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m llamafleet ARGV`` as a real process; (its result, wall-clock seconds)."""
    src = str(Path(ct.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.getenv("PYTHONPATH")])),
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llamafleet", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("count", [60, 10_000])
def test_template_fix_command_on_crafted_model_finishes(
    tmp_path: Path, guarded: str, count: int
) -> None:
    """``llamafleet template fix`` (a real process, as a user runs it) on the crafted template,
    as a .jinja file and inside a GGUF model: refused with a clear message, within seconds."""
    crafted = backslash_template(guarded, count, concatenated=True)
    (tmp_path / "crafted.jinja").write_text(crafted)
    _write_gguf(tmp_path / "crafted.gguf", crafted)
    for name in ("crafted.jinja", "crafted.gguf"):
        proc, seconds = _llamafleet(["template", "fix", name, "-o", "out.jinja"], tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith(f"llamafleet: {name}") and "not fixed" in proc.stderr
        assert "no guard of the known form" in proc.stderr
        assert not (tmp_path / "out.jinja").exists()
        assert seconds < CRAFTED_SECONDS, (name, seconds)
    plain = backslash_template(guarded, count, concatenated=False)
    (tmp_path / "plain.jinja").write_text(plain)
    proc, seconds = _llamafleet(["template", "fix", "plain.jinja", "-o", "out.jinja"], tmp_path)
    assert proc.returncode == 0 and "wrote out.jinja" in proc.stdout, proc.stderr
    assert here((tmp_path / "out.jinja").read_text()).kind == ct.OK
    assert seconds < CRAFTED_SECONDS


def test_a_template_too_slow_to_fix_is_refused_naming_the_limit() -> None:
    """Loops that call nothing run past the child's limits: the fix is refused, saying which."""
    spin = (
        "<|im_start|>{% set xs = range(100000) | list %}"
        "{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}"
    )
    refused, seconds = _timed(lambda: ct.fix_late_system(spin, timeout=1))
    assert isinstance(refused, ct.TemplateFixError), refused
    assert "limit" in str(refused) and "not fixed" in str(refused), refused
    assert seconds < 30


# ----------------------------------------------------------------------------- classify, bounds

CHATML_LOOP = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)


@pytest.mark.parametrize(
    ("template", "kind", "detail"),
    [
        (CHATML_LOOP, ct.OK, ""),
        (
            "{%- for message in messages %}{%- if message.role != 'system' or loop.first %}"
            "{{- message.role + ': ' + message.content + '\\n' }}{%- endif %}{%- endfor %}",
            ct.DROPS,
            "the rendered prompt does not contain it",
        ),
        (
            "{{- messages | selectattr('role', 'equalto', 'system') | map(attribute='content') "
            "| join('\\n') }}{%- for message in messages if message.role != 'system' %}"
            "{{- message.role + ': ' + message.content + '\\n' }}{%- endfor %}",
            ct.MOVES,
            "it is rendered before the user's prompt",
        ),
        (
            "{%- for message in messages %}{%- if message.role != 'system' or loop.first %}"
            "{{- message.role + ': ' + message.content + '\\n' }}{%- endif %}{%- endfor %}"
            "{%- for message in messages %}{%- if message.role == 'system' and not loop.first %}"
            "{{- message.content }}{%- endif %}{%- endfor %}",
            ct.MOVES,
            "it is rendered after the assistant's turn",
        ),
        ("{% for m in messages %}{% endfor", ct.UNRENDERABLE, "syntax error on line 1"),
        ("{{ render_tools(tools) }}", ct.UNRENDERABLE, "'render_tools' is undefined"),
        ("{{ ''.__class__.__mro__ }}", ct.UNRENDERABLE, "not allowed"),
        ("{% include 'secrets.jinja' %}", ct.UNRENDERABLE, "no loader"),
        ("{{ 'x' * 100000000 }}", ct.UNRENDERABLE, "size limit"),
        ("{% generation %}{{ messages[0].content }}{% endgeneration %}", ct.DROPS, ""),
    ],
    ids=[
        "ok",
        "drops",
        "moves-before",
        "moves-after",
        "syntax",
        "helper",
        "sandbox",
        "no-files",
        "size",
        "generation-block",
    ],
)
def test_classify(template: str, kind: str, detail: str) -> None:
    result = here(template)
    assert result.kind == kind, result
    assert detail in result.detail


def test_helpers_of_llama_cpp_engine() -> None:
    template = (
        "{%- set ids = [] %}{%- set _ = ids.append('a') %}{%- set _ = ids.append('b') %}"
        "{{- ids.pop(0) }}|{{ strftime_now('%Y') }}|{{ {'k': '<é>'} | tojson }}|"
        "{{ [1, 2] | tojson(indent=2) }}|{% for i in range(5) %}{% if i == 2 %}{% break %}"
        "{% endif %}{{ i }}{% endfor %}|{{ 'a,b'.split(',') | length }}|{{ 'xy'.startswith('x') }}"
    )
    out = ct.render(template, [{"role": "user", "content": "hi"}])
    assert out == (f'a|{time.strftime("%Y")}|{{"k": "<é>"}}|[\n  1,\n  2\n]|01|2|True')
    with pytest.raises(ct.TemplateError) as info:
        ct.render("{{ raise_exception('boom') }}", [])
    assert info.value.raised and info.value.message == "boom"
    with pytest.raises(ct.TemplateError, match="not allowed"):
        ct.render("{% set d = {} %}{{ d.update({'a': 1}) }}", [])


def test_trim_and_lstrip_blocks_as_llama_cpp() -> None:
    template = (
        "{% for m in messages %}\n  {% if true %}\n{{ m.content }}\n  {% endif %}\n{% endfor %}"
    )
    assert ct.render(template, [{"role": "user", "content": "a"}]) == "a\n"


def test_in_process_deadline() -> None:
    nested = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"
    t0 = time.monotonic()
    result = ct.classify(nested, isolate=False, timeout=0.5)
    assert result.kind == ct.UNRENDERABLE and "too long" in result.detail
    assert time.monotonic() - t0 < 5


def test_child_process_limits() -> None:
    """Loops that call nothing escape the in-process deadline: the child's CPU limit ends them.
    Memory: the child's address-space limit."""
    spin = (
        "{% set xs = range(100000) | list %}"
        "{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}"
    )
    t0 = time.monotonic()
    result = ct.classify(spin, timeout=0.5)
    assert result.kind == ct.UNRENDERABLE, result
    assert time.monotonic() - t0 < 20
    grow = (  # 100 MB, then 3 GB: above the child's 2 GiB of address space
        "{% set ns = namespace(s='x' * 100000) %}"
        "{{ ns.s | replace('x', 'x' * 1000) | replace('x', 'x' * 30) | length }}"
    )
    result = ct.classify(grow, timeout=5)
    assert result.kind == ct.UNRENDERABLE and "memory" in result.detail, result


def test_classify_without_jinja2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ct, "jinja2_available", lambda: False)
    ct._classify_cached.cache_clear()
    try:
        assert ct.classify(CHATML_LOOP + " ") == ct.Classification(
            ct.UNKNOWN, "jinja2 is not installed"
        )
    finally:
        ct._classify_cached.cache_clear()


# ----------------------------------------------------------------------------- server template


def _facts(metadata: dict[str, Any]) -> Facts:
    return Facts(model=model_from_dict({"metadata": metadata}))


def test_template_of_model_metadata() -> None:
    cfg = parse_argv_string("llama-server \\\n -m q.gguf -c 8192", "<argv>")
    assert ct.template_of(cfg, Facts(), NEVER) is None
    assert ct.template_of(cfg, _facts({"general.architecture": "llama"}), NEVER) is None
    src = ct.template_of(cfg, _facts({"tokenizer.chat_template": "A"}), NEVER)
    # reported on the line of -m
    assert src == ct.TemplateSource("A", "the model's chat template (tokenizer.chat_template)", 2)
    both = {"tokenizer.chat_template": "A", "tokenizer.chat_template.tool_use": "B"}
    src = ct.template_of(cfg, _facts(both), NEVER)
    assert src is not None and src.text == "B" and "tool_use" in src.origin


def test_template_of_flags(tmp_path: Path) -> None:
    facts = _facts({"tokenizer.chat_template": "{{ model }}"})
    (tmp_path / "t.jinja").write_text("{{ file }}")

    def source(argv: str, referenced: ReferencedFiles = NEVER) -> ct.TemplateSource | None:
        return ct.template_of(parse_argv_string(argv, "<argv>"), facts, referenced)

    assert source("llama-server -m q.gguf --no-jinja") is None
    assert source("llama-server -m q.gguf --chat-template chatml") is None
    assert source("llama-server -m q.gguf --chat-template llama3") is None
    src = source("llama-server -m q.gguf --chat-template '{{ inline }}'")
    assert src is not None and src.text == "{{ inline }}"
    # a file is read only where the referenced-files policy allows: otherwise unknown
    path = str(tmp_path / "t.jinja")
    assert source(f"llama-server -m q.gguf --chat-template-file {path}") is None
    src = source(f"llama-server -m q.gguf --chat-template-file {path}", AS_NAMED)
    assert src is not None and src.text == "{{ file }}" and path in src.origin
    src = source(
        "llama-server -m q.gguf --chat-template-file /etc/llama/t.jinja",
        ReferencedFiles(directory=str(tmp_path)),
    )
    assert src is not None and src.text == "{{ file }}"
    assert (
        source("llama-server -m q.gguf --chat-template-file /nonexistent.jinja", AS_NAMED) is None
    )
    # the last of the two options wins, as llama.cpp applies them
    src = source(
        f"llama-server --chat-template-file {path} --chat-template '{{{{ x }}}}'", AS_NAMED
    )
    assert src is not None and src.text == "{{ x }}"
    src = source(
        f"llama-server --chat-template '{{{{ x }}}}' --chat-template-file {path}", AS_NAMED
    )
    assert src is not None and src.text == "{{ file }}"


def test_template_of_environment_then_command_line() -> None:
    cfg = parse_mapping(
        {
            "model": "/m/q.gguf",
            "args": {"chat_template": "{{ argv }}"},
            "environment": {"LLAMA_ARG_CHAT_TEMPLATE": "{{ env }}"},
        },
        "inst.yml",
        1,
    )
    src = ct.template_of(cfg, Facts(), NEVER)
    assert src is not None and src.text == "{{ argv }}"


# ----------------------------------------------------------------------------- facts reach the rule


def _ids(res: CliResult) -> list[str]:
    assert res.code in (0, 1), res.err
    return [f["id"] for f in res.json()["findings"]]


def test_facts_mapping_as_the_role_passes_it(tmp_path: Path, qwen35: str) -> None:
    """{"model": {"metadata": kv, "tensors": [...], "path": ...}}: the shape validate.yml and
    audit.yml build from gguf_models' metadata.json (its kv needs tokenizer.chat_template)."""
    model = {
        "model": {
            "metadata": {"general.architecture": "qwen35", "tokenizer.chat_template": qwen35},
            "tensors": [],
            "path": "/srv/models/qwen/q.gguf",
        }
    }
    facts = apply_facts(model)  # in-process, as the action plugin hands them over
    assert facts.model is not None
    assert facts.model.metadata["tokenizer.chat_template"] == qwen35
    (tmp_path / ".git").mkdir()
    (tmp_path / "facts.json").write_text(json.dumps(model))
    (tmp_path / "run.sh").write_text("llama-server -m /srv/models/qwen/q.gguf -c 131072\n")
    res = run_cli(["check", "run.sh", "--facts", "facts.json", "--format", "json"], cwd=tmp_path)
    findings = [f for f in res.json()["findings"] if f["id"] == "LS021"]
    assert len(findings) == 1, res.out
    assert "System message must be at the beginning." in findings[0]["message"]
    assert "HTTP 500" in findings[0]["message"] and findings[0]["severity"] == "error"


def _write_gguf(path: Path, template: str, tool_use: str | None = None) -> None:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_chat_template(template)
    if tool_use is not None:
        w.add_string("tokenizer.chat_template.tool_use", tool_use)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_and_model_meta_carry_the_template(tmp_path: Path, qwen35: str) -> None:
    (tmp_path / ".git").mkdir()
    _write_gguf(tmp_path / "q.gguf", qwen35)
    (tmp_path / "run.sh").write_text("llama-server -m q.gguf\n")
    res = run_cli(["check", "run.sh", "--gguf", "q.gguf", "--format", "json"], cwd=tmp_path)
    assert "LS021" in _ids(res)
    res = run_cli(["inspect", "q.gguf", "--format", "json"], cwd=tmp_path)
    (tmp_path / "meta.json").write_text(res.out)
    res = run_cli(
        ["check", "run.sh", "--model-meta", "meta.json", "--format", "json"], cwd=tmp_path
    )
    assert "LS021" in _ids(res)


def test_fixed_template_file_silences_the_rule(tmp_path: Path, qwen35: str) -> None:
    (tmp_path / ".git").mkdir()
    _write_gguf(tmp_path / "q.gguf", qwen35)
    fixed, _ = ct.fix_late_system(qwen35)
    (tmp_path / "fixed.jinja").write_text(fixed)
    (tmp_path / "orig.jinja").write_text(qwen35)
    base = ["--gguf", "q.gguf", "--format", "json"]
    for name, expected in (("fixed.jinja", False), ("orig.jinja", True)):
        (tmp_path / "run.sh").write_text(
            f"llama-server -m q.gguf --jinja \\\n  --chat-template-file {tmp_path / name}\n"
        )
        res = run_cli(["check", "run.sh", "--read-referenced", *base], cwd=tmp_path)
        found = [f for f in res.json()["findings"] if f["id"] == "LS021"]
        assert bool(found) is expected, (name, found)
        if found:
            assert found[0]["line"] == 2 and name in found[0]["message"]
    # not allowed to open the file: the server's template is unknown, no finding either way
    res = run_cli(["check", "run.sh", *base], cwd=tmp_path)
    assert "LS021" not in _ids(res)


# ----------------------------------------------------------------------------- llamafleet template


def template_cmd(argv: list[str], cwd: Path) -> CliResult:
    """``llamafleet template ...`` through cli.main when cli.py registers it, else through a
    parser with only template_cli registered (the same functions, the same error handling)."""
    from llamafleet import cli

    registered = any(
        isinstance(a, argparse._SubParsersAction) and "template" in a.choices
        for a in cli.build_parser()._actions
    )
    if registered:
        return run_cli(["template", *argv], cwd=cwd)
    parser = argparse.ArgumentParser(prog="llamafleet")
    template_cli.register(parser.add_subparsers(dest="command", required=True))
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            args = parser.parse_args(["template", *argv])
            try:
                code: int = args.func(args)
            except InputError as exc:
                sys.stderr.write(f"llamafleet: error: {exc}\n")
                code = 2
    finally:
        os.chdir(old)
    return CliResult(code, out.getvalue(), err.getvalue())


def test_template_check_and_fix(tmp_path: Path, qwen35: str) -> None:
    (tmp_path / "qwen35.jinja").write_text(qwen35)
    res = template_cmd(["check", "qwen35.jinja"], tmp_path)
    assert res.out.startswith("qwen35.jinja: [raises] raises on the late system message: System")
    assert res.code == 1 and "LS021" in res.out, res
    res = template_cmd(["check", "qwen35.jinja", "--format", "json"], tmp_path)
    assert res.code == 1
    assert json.loads(res.out) == {
        "file": "qwen35.jinja",
        "template": "qwen35.jinja",
        "kind": "raises",
        "detail": "System message must be at the beginning.",
        "rule": "LS021",
    }
    res = template_cmd(["fix", "qwen35.jinja", "-o", "fixed.jinja"], tmp_path)
    assert res.code == 0 and "line 85" in res.out and "wrote fixed.jinja" in res.out, res
    assert (tmp_path / "fixed.jinja").read_text() == ct.fix_late_system(qwen35)[0]
    res = template_cmd(["check", "fixed.jinja"], tmp_path)
    assert (
        res.code == 0 and res.out == "fixed.jinja: [ok] renders the late system message in place\n"
    )
    res = template_cmd(["fix", "fixed.jinja", "-o", "-"], tmp_path)
    assert res.code == 0 and res.out == (tmp_path / "fixed.jinja").read_text()
    assert "no change" in res.err


def test_template_cli_reads_gguf_and_inspect_json(tmp_path: Path, qwen35: str) -> None:
    _write_gguf(tmp_path / "q.gguf", "{{ plain }}", tool_use=qwen35)
    res = template_cmd(["check", "q.gguf", "--format", "json"], tmp_path)
    doc = json.loads(res.out)
    assert res.code == 1 and doc["kind"] == "raises"
    assert doc["template"] == "q.gguf (tokenizer.chat_template.tool_use)"
    meta = {"metadata": {"tokenizer.chat_template": qwen35}, "tensors": []}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    res = template_cmd(["fix", "meta.json", "-o", "out.jinja"], tmp_path)
    assert res.code == 0 and ct.classify((tmp_path / "out.jinja").read_text()).kind == ct.OK


def test_template_cli_errors(tmp_path: Path, templates: dict[str, str]) -> None:
    (tmp_path / "nemo.jinja").write_text(templates["mistralai-Mistral-Nemo-Instruct-2407.jinja"])
    res = template_cmd(["fix", "nemo.jinja", "-o", "out.jinja"], tmp_path)
    assert res.code == 1 and "not fixed" in res.err and "not ChatML" in res.err
    assert not (tmp_path / "out.jinja").exists()
    res = template_cmd(["check", "missing.jinja"], tmp_path)
    assert res.code == 2 and "missing.jinja: no such file" in res.err
    (tmp_path / "plain.json").write_text(json.dumps({"metadata": {"general.name": "x"}}))
    res = template_cmd(["check", "plain.json"], tmp_path)
    assert res.code == 2 and "no tokenizer.chat_template" in res.err


# ----------------------------------------------------------------------------- llama.cpp itself

SERVER = os.environ.get("LLAMAFLEET_LLAMA_SERVER", "")
GENERATOR = REPO / "testbed" / "make-tiny-model.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """Start the fork's llama-server on a tiny model with a given --chat-template-file; yields
    a function that starts one and returns its base URL."""
    models = os.environ.get("LLAMAFLEET_TINY_MODELS")
    model = Path(models) / "tiny-llama.gguf" if models else tmp_path / "tiny-llama.gguf"
    if not model.exists():
        subprocess.run([sys.executable, str(GENERATOR), str(model)], check=True, timeout=300)
    procs: list[subprocess.Popen[bytes]] = []

    def start(template: Path) -> str:
        port = _free_port()
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(Path(SERVER).parent), env.get("LD_LIBRARY_PATH", "")) if p
        )
        argv = [SERVER, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "512"]
        argv += ["--jinja", "--chat-template-file", str(template)]
        log = open(tmp_path / f"server-{port}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return url
            except OSError:
                time.sleep(0.25)
        raise AssertionError((tmp_path / f"server-{port}.log").read_text(errors="replace"))

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


@pytest.mark.skipif(
    not SERVER,
    reason="set LLAMAFLEET_LLAMA_SERVER to a llama-server binary to compare the rendering with "
    "llama.cpp's own template engine",
)
def test_llama_server_renders_the_fixed_template_as_we_do(
    tmp_path: Path, qwen35: str, llama_server: Callable[[Path], str]
) -> None:
    fixed, _ = ct.fix_late_system(qwen35)
    (tmp_path / "fixed.jinja").write_text(fixed)
    (tmp_path / "orig.jinja").write_text(qwen35)
    messages = ct.conversation(True)
    for m in messages:  # the OpenAI form: arguments as a JSON string
        for call in m.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    body = {"messages": messages, "tools": ct.TOOLS}
    status, doc = _post(llama_server(tmp_path / "orig.jinja") + "/apply-template", body)
    assert status == 500 and "System message must be at the beginning." in json.dumps(doc)
    status, doc = _post(llama_server(tmp_path / "fixed.jinja") + "/apply-template", body)
    assert status == 200, doc
    ours = ct.render(fixed, ct.conversation(True), ct.TOOLS)
    assert doc["prompt"] == ours
    assert re.search(re.escape(ct.USER_MARKER) + r"<\|im_end\|>\n<\|im_start\|>system\n", ours)


# ----------------------------------------------------------------------------- the role's filter


def test_the_llama_server_filter_fixes_the_real_qwen35_template_and_the_preflight_passes(
    qwen35: str,
) -> None:
    """The llama_server role's filter llamafleet_chat_template_fix: the model's own template (the
    real Qwen3.5 one, as GGUF metadata) raises -> a fixed copy; the unit that passes it with
    --chat-template-file, checked in-process with the copy handed over in memory, has no LS021;
    the same unit without the copy in memory is not confirmed (unknown), and the model's own
    template refuses."""
    from conftest import load_ansible_plugin
    from llamafleet.preflight import check_items

    f = load_ansible_plugin(plugin_path("filter", "llama_server")).llamafleet_chat_template_fix
    meta = {"tokenizer.chat_template": qwen35, "general.architecture": "qwen35moe"}
    out = f(meta, "main")
    assert (
        out["action"] == "fixed"
        and out["kind"] == ct.RAISES
        and out["key"] == "tokenizer.chat_template"
    )
    assert ct.classify(out["text"], isolate=False).kind == ct.OK and len(out["sha256"]) == 64
    assert f(meta, "main", False)["action"] == "none"
    assert f({"tokenizer.chat_template": out["text"]}, "main")["action"] == "none"
    path = "/etc/llamafleet/chat-templates/main.jinja"
    unit = (
        "[Service]\nRestart=on-failure\n"
        f"ExecStart=/x/llama-server -m /m.gguf --chat-template-file {path}\n"
    )
    facts = {"model": {"metadata": meta, "tensors": [], "path": "/m.gguf"}}
    fixed = check_items(
        [
            {
                "name": "main",
                "path": "u.service",
                "text": unit,
                "facts": facts,
                "files": {path: out["text"]},
            }
        ]
    )
    assert "LS021" not in [x["id"] for x in fixed[0].findings]
    own = "[Service]\nRestart=on-failure\nExecStart=/x/llama-server -m /m.gguf\n"
    refused = check_items([{"name": "main", "path": "u.service", "text": own, "facts": facts}])
    assert refused[0].refused and "LS021" in [x["id"] for x in refused[0].findings]
    # as the role writes it: the template reaches the service as a credential
    cred = (
        f"[Service]\nRestart=on-failure\nLoadCredential=chat-template:{path}\n"
        "ExecStart=/x/llama-server -m /m.gguf --chat-template-file %d/chat-template\n"
    )
    as_written = check_items(
        [
            {
                "name": "main",
                "path": "u.service",
                "text": cred,
                "facts": facts,
                "files": {path: out["text"]},
            }
        ]
    )
    assert not as_written[0].refused, as_written[0].findings
    as_shipped = check_items(
        [
            {
                "name": "main",
                "path": "u.service",
                "text": cred,
                "facts": facts,
                "files": {path: qwen35},
            }
        ]
    )
    assert "LS021" in [x["id"] for x in as_shipped[0].findings]
    unfixed = check_items(
        [
            {
                "name": "main",
                "path": "u.service",
                "text": unit,
                "facts": facts,
                "files": {path: qwen35},
            }
        ]
    )
    assert "LS021" in [x["id"] for x in unfixed[0].findings]

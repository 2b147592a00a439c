"""The chat template's answers kept on disk (llamafleet/diskcache.py, llamafleet/chat_template.py):
a template rendered once in a child process is not rendered again by the next process of the same
account (the next `llamafleet check`, the next Ansible task), and nothing another account could
write, nor an answer computed by other code, is ever taken for one. The templates are ChatML loops
written here: one with the official Qwen templates' guard (it raises on Claude Code's late system
message), one that renders it in place, one that spins past its time limit."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RAISING_CHATML as RAISING
from llamafleet import chat_template as ct
from llamafleet import diskcache

pytest.importorskip("jinja2")

IN_PLACE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)
SPIN = (
    "{% set xs = range(100000) | list %}{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}"
)
NOBODY = 65534


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "cache"
    monkeypatch.setenv("LLAMAFLEET_TEMPLATE_CACHE", str(where))
    ct._classify_cached.cache_clear()
    yield where
    ct._classify_cached.cache_clear()


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The child processes started (each op), the real ones still run."""
    started: list[str] = []
    real = ct._run_child

    def counted(request: dict[str, Any], timeout: float) -> Any:
        started.append(str(request["op"]))
        return real(request, timeout)

    monkeypatch.setattr(ct, "_run_child", counted)
    return started


def _fresh() -> None:
    """As a new process: nothing in memory."""
    ct._classify_cached.cache_clear()


def test_a_template_is_rendered_in_a_child_once_per_account(
    cache: Path, children: list[str]
) -> None:
    first = ct.classify(RAISING)
    assert first.kind == ct.RAISES and children == ["classify"]
    _fresh()
    assert ct.classify(RAISING) == first and children == ["classify"]
    fixed = ct.fix_late_system(RAISING)
    assert ct.classify(fixed[0], isolate=False).kind == ct.OK
    assert ct.fix_late_system(RAISING) == fixed and children == ["classify", "fix"]
    # the directory is the account's own, each entry a file only it can write
    assert (cache.stat().st_mode & 0o777) == 0o700
    assert {oct(p.stat().st_mode & 0o777) for p in cache.iterdir()} == {"0o600"}
    # off: every process renders again
    os.environ["LLAMAFLEET_TEMPLATE_CACHE"] = "off"
    _fresh()
    assert ct.classify(RAISING) == first and children == ["classify", "fix", "classify"]


def test_an_answer_that_hit_a_limit_is_asked_again(cache: Path, children: list[str]) -> None:
    """A render stopped by its time limit depends on how busy the machine was."""
    assert ct.classify(SPIN, timeout=0.5).kind == ct.UNRENDERABLE
    _fresh()
    assert ct.classify(SPIN, timeout=0.5).kind == ct.UNRENDERABLE
    assert children == ["classify", "classify"]


def _plant(cache: Path, template: str, answer: dict[str, str]) -> Path:
    """An entry under the name the checker will look for, with a forged answer."""
    cache.mkdir(mode=0o700, exist_ok=True)
    name = diskcache.key("chat-template", ct._question("classify", template, ct.DEFAULT_TIMEOUT))
    path = cache / name
    path.write_text(json.dumps({"key": name, "answer": answer}))
    path.chmod(0o600)
    return path


FORGED = {"kind": ct.OK, "detail": ""}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the planted files are another account's")
@pytest.mark.parametrize(
    "plant",
    [
        "directory writable by others",
        "directory of another account",
        "directory is a link",
        "entry of another account",
        "entry writable by others",
        "entry is a link",
        "entry names another key",
    ],
)
def test_a_planted_answer_is_never_taken(
    cache: Path, children: list[str], tmp_path: Path, plant: str
) -> None:
    """Attack: a raising template (every Claude Code request would fail) passed as fine by an
    answer someone else could write. Each is ignored: the template is rendered and raises."""
    path = _plant(cache, RAISING, FORGED)
    if plant == "directory writable by others":
        cache.chmod(0o777)
    elif plant == "directory of another account":
        os.chown(cache, NOBODY, NOBODY)
    elif plant == "directory is a link":
        real = tmp_path / "elsewhere"
        cache.rename(real)
        cache.symlink_to(real)
    elif plant == "entry of another account":
        os.chown(path, NOBODY, NOBODY)
    elif plant == "entry writable by others":
        path.chmod(0o666)
    elif plant == "entry is a link":
        target = tmp_path / "forged.json"
        path.rename(target)
        path.symlink_to(target)
    elif plant == "entry names another key":
        data = json.loads(path.read_text())
        data["key"] = "0" * 64
        path.write_text(json.dumps(data))
    assert ct.classify(RAISING).kind == ct.RAISES
    assert children == ["classify"]


def test_the_planted_answer_of_the_account_itself_is_taken(
    cache: Path, children: list[str]
) -> None:
    """What the attack tests stand against: the same forged entry, written as the account would
    write it, is read (whoever can write it is the account that runs the checker)."""
    _plant(cache, RAISING, FORGED)
    assert ct.classify(RAISING).kind == ct.OK and children == []


def test_another_version_of_the_code_answers_again(
    cache: Path, children: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ct.classify(IN_PLACE).kind == ct.OK
    _fresh()
    monkeypatch.setattr(ct, "_code_version", lambda: "another")
    assert ct.classify(IN_PLACE).kind == ct.OK
    assert children == ["classify", "classify"]


def test_where_the_answers_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LLAMAFLEET_TEMPLATE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert diskcache.directory() == str(tmp_path / "xdg" / "llamafleet")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert diskcache.directory() == str(tmp_path / "home" / ".cache" / "llamafleet")
    for off in ("off", "", "0"):
        monkeypatch.setenv("LLAMAFLEET_TEMPLATE_CACHE", off)
        assert diskcache.directory() is None

"""Random and hostile inputs never crash the CLI: findings (exit 0/1) or a one-line usage error
(exit 2); deep nesting, alias bombs, huge files and lines, FIFOs and devices, invalid URLs and
every encoding included. An internal error exits 3 with one line naming the file."""

from __future__ import annotations

import json
import os
import string
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from llamafleet.flags import table

FLAG_NAMES = sorted(table().by_name)
words = st.one_of(
    st.sampled_from(FLAG_NAMES),
    st.sampled_from(
        [
            "0",
            "-1",
            "1",
            "4096",
            "on",
            "off",
            "turbo3",
            "q8_0",
            "0.0.0.0",
            "x=y",
            "$HOME",
            "%X%",
            "\\",
            "'",
            '"',
            "^",
            "#",
            ";",
            "&&",
            "\n",
        ]
    ),
    st.text(alphabet=string.printable, max_size=12),
)
SETTINGS = dict(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _check(name: str, content: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_text(content)
        res = run_cli(["check", str(p), "--format", "json"], cwd=Path(d))
        assert res.code in (0, 1, 2), res
        if res.code in (0, 1):
            json.loads(res.out)
        else:
            assert res.err.startswith("llamafleet: error:"), res.err


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.lists(words, max_size=25))
def test_random_argv_scripts(tokens: list[str]) -> None:
    _check("run.sh", "llama-server " + " ".join(tokens) + "\n")
    _check("run.cmd", "llama-server.exe " + " ^\r\n".join(tokens) + "\r\n")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "env",
                    "ANTHROPIC_BASE_URL",
                    "ANTHROPIC_AUTH_TOKEN",
                    "includeGitInstructions",
                    "apiKeyHelper",
                    "x",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                ]
            )
            | st.text(max_size=5),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(json_values)
def test_random_settings_json(value: object) -> None:
    _check("settings.json", json.dumps(value))


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.text(max_size=200))
def test_random_bytes_as_settings(text: str) -> None:
    _check("settings.json", text)


unit_lines = st.one_of(
    st.sampled_from(
        [
            "[Service]",
            "[Unit]",
            "ExecStart=/usr/bin/llama-server",
            "Environment=LLAMA_ARG_CTX_SIZE=x",
            "User=root",
            "Restart=no",
            "LimitMEMLOCK=infinity",
            "EnvironmentFile=-/nonexistent",
            "\\",
        ]
    ),
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(["ExecStart", "Environment", "User"]),
        st.lists(words, max_size=6).map(" ".join),
    ),
    st.text(max_size=30),
)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.lists(unit_lines, max_size=12))
def test_random_unit_files(lines: list[str]) -> None:
    _check("llama.service", "[Service]\n" + "\n".join(lines) + "\n")


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.text(max_size=200))
def test_random_yaml_mapping(text: str) -> None:
    _check("vars.yml", "args:\n" + text)


# ----------------------------------------------------------------------------- hostile shapes
# Every input gives findings (exit 0/1) or a one-line usage error (exit 2): never a traceback,
# never a hang, never exit 3.


def _run(path: Path, *args: str) -> Any:
    res = run_cli(["check", str(path), *args, "--format", "json"], cwd=path.parent)
    assert res.code in (0, 1, 2), res
    assert "Traceback" not in res.err
    if res.code == 2:
        assert res.err.startswith("llamafleet: error:") and res.err.count("\n") == 1, res.err
    else:
        json.loads(res.out)
    return res


def _codes(findings: list[dict[str, Any]]) -> set[str]:
    return {f["id"] for f in findings}


deep = st.integers(min_value=150, max_value=3000)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(deep, st.sampled_from(["[", '{"a": ']))
def test_deeply_nested_settings_json(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "settings.json"
        p.write_text(opener * depth + "1" + closer * depth)
        res = _run(p)
        assert res.code == 1 and "CC007" in _codes(res.json()["findings"])


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(deep, st.sampled_from(["flow", "block"]))
def test_deeply_nested_yaml(depth: int, style: str) -> None:
    text = (
        "[" * depth + "]" * depth
        if style == "flow"
        else "".join(" " * i + "a:\n" for i in range(min(depth, 1000)))
    )
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "compose.yaml"
        p.write_text(text)
        res = _run(p)
        assert res.code == 1 and _codes(res.json()["findings"]) == {"LF002"}


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.integers(min_value=3, max_value=12), st.integers(min_value=4, max_value=12))
def test_yaml_alias_bombs_are_refused_fast(levels: int, width: int) -> None:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    text = (
        f"services:\n  x:\n    command: *a{levels - 1}\n"
        + "x-bomb:\n"
        + "".join("  " + ln + "\n" for ln in lines)
    )
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "compose.yaml"
        p.write_text(text)
        started = time.process_time()
        _run(p)
        assert time.process_time() - started < 5


def test_the_alias_bomb_of_the_issue() -> None:
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
        for i in range(8)
    )
    assert len(bomb) < 400
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "vars.yml"
        p.write_text(bomb)
        started = time.process_time()
        res = _run(p)
        assert time.process_time() - started < 2
        assert "alias" in res.json()["findings"][0]["message"]


@pytest.mark.parametrize("size", [3 * 1024 * 1024])
def test_huge_input_is_refused_not_read(size: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.sh"
        with open(p, "wb") as fh:
            fh.write(b"llama-server " + b"-c 1 " * (size // 5))
        res = _run(p)
        assert res.code == 2 and "at most 2 MiB" in res.err


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(st.integers(min_value=10_000, max_value=400_000))
def test_long_one_line_scripts(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.sh"
        p.write_text("llama-server -m q.gguf " + "x" * n + " " + "-c 4096 " * (n // 100) + "\n")
        _run(p)


def test_fifo_is_refused_without_blocking() -> None:
    with tempfile.TemporaryDirectory() as d:
        fifo = Path(d) / "run.sh"
        os.mkfifo(fifo)
        res = _run(fifo)
        assert res.code == 2 and "not a regular file (a FIFO" in res.err


def test_directory_and_device_are_refused() -> None:
    with tempfile.TemporaryDirectory() as d:
        assert "a directory" in _run(Path(d)).err
    assert "character device" in _run(Path("/dev/null")).err


invalid_urls = st.one_of(
    st.sampled_from(
        [
            "http://[::1:8080",
            "http://[::1]:99999",
            "http://host:port",
            "://x",
            "http://",
            "file:///etc/passwd",
            "http://[v7.x]",
            "ftp://h",
            " ",
        ]
    ),
    st.text(alphabet=string.printable, max_size=30).map(lambda s: "http://" + s),
)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(invalid_urls)
def test_invalid_base_urls(url: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        s = Path(d) / "settings.json"
        s.write_text(json.dumps({"env": {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "k"}}))
        r = Path(d) / "run.sh"
        r.write_text("llama-server -m q.gguf --port 8080\n")
        res = run_cli(["check", str(s), str(r), "--format", "json"], cwd=Path(d))
        assert res.code in (0, 1), res
        json.loads(res.out)


def test_the_invalid_url_of_the_issue_is_a_finding() -> None:
    with tempfile.TemporaryDirectory() as d:
        s = Path(d) / "settings.json"
        s.write_text('{"env": {"ANTHROPIC_BASE_URL": "http://[::1:8080"}}')
        res = _run(s)
        cc007 = [f for f in res.json()["findings"] if f["id"] == "CC007"]
        assert res.code == 1 and cc007 and "not a valid URL" in cc007[0]["message"]


encodings = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "latin-1"])


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(encodings, st.lists(words, max_size=10), st.booleans())
def test_any_encoding_and_nul_bytes(encoding: str, tokens: list[str], nul: bool) -> None:
    text = "llama-server -m modèle.gguf --port 8081 " + " ".join(tokens) + "\n"
    data = text.encode(encoding, errors="replace")
    if nul:
        data = data[: len(data) // 2] + b"\x00" + data[len(data) // 2 :]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.sh"
        p.write_bytes(data)
        _run(p)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-8-sig", "latin-1"])
def test_a_windows_editors_file_is_read(encoding: str) -> None:
    text = "llama-server.exe -m C:\\models\\café.gguf --cache-ram 0\r\n"
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "start.cmd"
        p.write_bytes(text.encode(encoding))
        res = _run(p)
        assert "LS001" in _codes(res.json()["findings"])


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(
    st.lists(
        st.sampled_from(
            [
                "'",
                '"',
                "$(",
                "${",
                "`",
                "\\",
                "<<EOF",
                "(",
                ")",
                "{",
                "}",
                "=(",
                "\n",
                " ",
                "llama-server",
                "-c",
                "4096",
                "$X",
                "f()",
                "export A=",
                "docker run",
                "sh -c",
            ]
        ),
        max_size=30,
    )
)
def test_random_shell_syntax(parts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.sh"
        p.write_text("".join(parts) + "\nllama-server -m q.gguf\n")
        _run(p)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(
    st.lists(
        st.sampled_from(
            [
                "'",
                '"',
                "`",
                "`\n",
                "$env:A = ",
                "@(",
                ")",
                "&",
                "$x",
                "llama-server.exe",
                "-c",
                "4096",
                "\n",
                " ",
                "<#",
                "#>",
                "Start-Process",
                "-ArgumentList",
            ]
        ),
        max_size=30,
    )
)
def test_random_powershell(parts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "start.ps1"
        p.write_text("".join(parts) + "\nllama-server.exe -m q.gguf\n")
        _run(p)


compose_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=12)
    | st.sampled_from(
        ["ghcr.io/ggml-org/llama.cpp:server", "-m", "/m/q.gguf", "--port 8080", "${X}", "$$"]
    ),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "image",
                    "command",
                    "entrypoint",
                    "environment",
                    "ports",
                    "services",
                    "x",
                    "network_mode",
                    "llama",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(**SETTINGS)  # type: ignore[arg-type]
@given(compose_values)
def test_random_compose_files(value: object) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "compose.yaml"
        p.write_text(json.dumps({"services": value}))
        _run(p)


def test_an_internal_error_exits_3_with_one_line_naming_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llamafleet import engine
    from llamafleet.rules import REGISTRY

    def broken(ctx: object) -> Any:
        raise KeyError("a bug")
        yield  # pragma: no cover

    monkeypatch.setitem(REGISTRY, "LS001", broken)
    monkeypatch.setattr(engine, "_PLAN", [])
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.sh"
        p.write_text("llama-server -m q.gguf\n")
        res = run_cli(["check", str(p)], cwd=Path(d))
    assert res.code == 3 and res.err.count("\n") == 1 and str(p) in res.err
    assert "internal error in rule LS001" in res.err and "Traceback" not in res.err

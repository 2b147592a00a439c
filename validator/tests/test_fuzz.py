"""Random argv strings, JSON and unit files never crash the CLI: findings or a clean exit 2."""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

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

"""The validator against the real `--help` of two builds, captured by tools/capture_help.py: the
TurboQuant fork (build 9079) and upstream llama.cpp 0c1e570 (as vendored in llama-cpp-python
0.3.36). See tests/fixtures/help/README.md for how each was built and captured."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, run_cli
from llamafleet.facts import Facts
from llamafleet.flags import (
    ALL_CACHE_TYPES,
    UPSTREAM_CACHE_TYPES,
    help_option_names,
    parse_help,
    table,
)

HELP = FIXTURES / "help"
FORK = HELP / "fork-b9079-69d8e4be4.help.txt"
UPSTREAM = HELP / "upstream-b1-0c1e570.help.txt"
SEED_SCRIPT = FIXTURES / "seed" / "start-qwen36.sh"
FORK_CACHE_TYPES = (*UPSTREAM_CACHE_TYPES, "turbo2", "turbo3", "turbo4")
CACHE_OPTIONS = (
    "-ctk",
    "--cache-type-k",
    "-ctv",
    "--cache-type-v",
    "-ctkd",
    "--cache-type-k-draft",
    "-ctvd",
    "--cache-type-v-draft",
)


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _check(tmp_path: Path, help_file: Path, *args: str) -> tuple[int, list[dict[str, Any]]]:
    (tmp_path / ".git").mkdir(exist_ok=True)  # no .llamafleet.yaml from above tmp_path
    res = run_cli(["check", "--format", "json", "--help-text", str(help_file), *args], cwd=tmp_path)
    assert res.code in (0, 1), res.err
    findings: list[dict[str, Any]] = json.loads(res.out)["findings"]
    return res.code, findings


# ----------------------------------------------------------------------------- the fixtures


def test_both_fixtures_are_there() -> None:
    for path in (FORK, UPSTREAM):
        assert (
            path.is_file()
            and path.with_name(path.name.replace(".help.txt", ".version.txt")).is_file()
        )


@pytest.mark.parametrize("help_file", sorted(HELP.glob("*.help.txt")), ids=lambda p: p.name)
def test_fixture_name_matches_its_version_text(help_file: Path) -> None:
    """<name>-b<N>-<commit>.help.txt beside a .version.txt whose `version:` line gives N and the
    commit (the fork's "version: N (C)", upstream's "version: X (build N, commit C)")."""
    m = re.fullmatch(r"([a-z0-9_.]+)-b(\d+)-([0-9a-f]{7,40})\.help\.txt", help_file.name)
    assert m, help_file.name
    version = _text(help_file.with_name(help_file.name.replace(".help.txt", ".version.txt")))
    v = re.search(r"^version: (\d+) \(([0-9a-f]+)\)$", version, re.M) or re.search(
        r"^version: \S+ \(build (\d+), commit ([0-9a-f]+)\)$", version, re.M
    )
    assert v, version
    assert (v.group(1), v.group(2)) == (m.group(2), m.group(3))
    # and the facts read the same commit from it
    facts = Facts()
    facts.set_version(version)
    assert facts.commit == m.group(3)


def test_every_fixture_is_in_the_readme() -> None:
    readme = _text(HELP / "README.md")
    for path in HELP.glob("*.help.txt"):
        assert f"`{path.name}`" in readme
        assert "cmake " in readme and str(path.name.split("-")[0]) in readme


# ----------------------------------------------------------------------------- parse_help


def test_fork_wrapped_allowed_values_are_parsed_completely() -> None:
    # the fork prints "... q5_0, q5_1," and "turbo2, turbo3, turbo4" on the next line
    text = _text(FORK)
    assert re.search(r"q5_1,\n {40}turbo2, turbo3, turbo4\n", text)
    h = parse_help(text)
    assert h.cache_types == FORK_CACHE_TYPES
    for name in CACHE_OPTIONS:
        assert h.allowed_values[name] == FORK_CACHE_TYPES, name
    assert {"turbo2", "turbo3", "turbo4"} <= set(h.allowed_values["-ctv"])
    assert Facts(help=h).has_turbo is True


def test_upstream_allowed_values() -> None:
    h = parse_help(_text(UPSTREAM))
    assert h.cache_types == UPSTREAM_CACHE_TYPES
    for name in ("-ctk", "--cache-type-v", "--cache-type-k-draft", "-ctvd"):
        assert h.allowed_values[name] == UPSTREAM_CACHE_TYPES, name
    assert Facts(help=h).has_turbo is False
    assert set(UPSTREAM_CACHE_TYPES) <= set(ALL_CACHE_TYPES)


@pytest.mark.parametrize("help_file", [FORK, UPSTREAM], ids=lambda p: p.name)
def test_every_option_line_is_read(help_file: Path) -> None:
    """Each line that starts in the first column with an option gives all its spellings, short
    one-letter ones included; indented description lines give none."""
    text = _text(help_file)
    h = parse_help(text)
    expected: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("-") or line.startswith("-----"):
            continue
        head = re.match(r"(-[^\s,]+(?:,\s*-[^\s,]+)*)", line)
        assert head, line
        expected.update(re.split(r",\s*", head.group(1)))
    assert h.names == expected
    assert {"-c", "-t", "-h", "-m", "-n", "-b", "-a"} <= h.names


def test_description_lines_are_not_options() -> None:
    # upstream: "the argument has been removed. use the respective" + "--spec-ngram-*-size-n or ..."
    text = _text(UPSTREAM)
    assert re.search(r"^ {40}--spec-ngram-\*-size-n", text, re.M)
    assert "--spec-ngram" not in parse_help(text).names


@pytest.mark.parametrize(
    ("line", "names"),
    [
        (
            "-c,    --ctx-size N                     size of the prompt context",
            ["-c", "--ctx-size"],
        ),
        (
            "-h,    --help, --usage                  print usage and exit",
            ["-h", "--help", "--usage"],
        ),
        (
            "-kvu,  --kv-unified, -no-kvu, --no-kv-unified",
            ["-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified"],
        ),
        ("--fim-qwen-1.5b-default                 use default", ["--fim-qwen-1.5b-default"]),
        ("-sm,   --split-mode {none,layer,row}    how to split", ["-sm", "--split-mode"]),
        ("-cram, --cache-ram N   (default: 8192, -1 - no limit, -ot x)", ["-cram", "--cache-ram"]),
        ("----- common params -----", []),
        ("- auto: mmap, unless a device does not support it", []),
    ],
)
def test_help_option_names(line: str, names: list[str]) -> None:
    assert help_option_names(line) == names


def test_allowed_values_belong_to_their_option() -> None:
    pad = " " * 40
    text = (
        "-ctk,  --cache-type-k TYPE              KV cache data type for K\n"
        f"{pad}allowed values: f32, f16,\n"
        f"{pad}turbo3\n"
        f"{pad}(default: f16)\n"
        "-x,    --other N                        no list of its own\n"
        "-ctv,  --cache-type-v TYPE              KV cache data type for V\n"
        f"{pad}allowed values: f32, f16\n"
        "--next                                  an option line ends the list\n"
    )
    h = parse_help(text)
    assert h.allowed_values["-ctk"] == ("f32", "f16", "turbo3") == h.cache_types
    assert h.allowed_values["--cache-type-v"] == ("f32", "f16")
    assert "-x" not in h.allowed_values and "--other" not in h.allowed_values
    assert h.names == {
        "-ctk",
        "--cache-type-k",
        "-x",
        "--other",
        "-ctv",
        "--cache-type-v",
        "--next",
    }


def test_indented_option_names_are_description() -> None:
    text = "--draft N     removed. use the respective\n    --spec-ngram-*-size-n or\n"
    assert parse_help(text).names == {"--draft"}


def test_a_help_text_indented_as_a_whole_is_read_as_it_is() -> None:
    text = _text(FORK)
    indented = "".join("    " + ln if ln.strip() else ln for ln in text.splitlines(keepends=True))
    assert parse_help(indented) == parse_help(text)


def test_upstream_help_is_within_the_generated_table() -> None:
    assert parse_help(_text(UPSTREAM)).names <= set(table().by_name)


def test_fork_only_options_of_the_table_are_in_the_fork_help() -> None:
    """The options the table keeps for older builds and the fork (flags_legacy.json) are all in the
    fork's help, and the upstream options it calls their successors are not."""
    names = parse_help(_text(FORK)).names
    legacy = [s for s in table().specs if s.legacy]
    assert legacy
    for spec in legacy:
        assert set(spec.names) | set(spec.negations) <= names, spec.canonical
    assert "--load-mode" in table().predecessors and "--load-mode" not in names
    upstream = parse_help(_text(UPSTREAM)).names
    assert "--load-mode" in upstream and "--mlock" not in upstream


def test_every_fork_option_is_in_the_table() -> None:
    """data/flags_fork.json is generated from the fork's common/arg.cpp (tools/gen_flags.py):
    every option its real --help prints is known, so LS014 never calls one unknown."""
    missing = parse_help(_text(FORK)).names - set(table().by_name)
    assert not missing, sorted(missing)


# ----------------------------------------------------------------------------- the rules


def test_turbo3_v_on_the_fork_is_not_ls009(tmp_path: Path) -> None:
    _, findings = _check(tmp_path, FORK, "--", "-ctk", "q8_0", "-ctv", "turbo3", "-fa", "on")
    assert "LS009" not in {f["id"] for f in findings}, findings


def test_turbo3_v_on_upstream_is_ls009(tmp_path: Path) -> None:
    code, findings = _check(tmp_path, UPSTREAM, "--", "-ctk", "q8_0", "-ctv", "turbo3", "-fa", "on")
    ls009 = [f for f in findings if f["id"] == "LS009"]
    assert code == 1 and ls009 and ls009[0]["severity"] == "error"
    assert "q5_1" in ls009[0]["message"] and "turbo" not in ls009[0]["message"].split("allows")[1]


def test_seed_script_has_twenty_flags() -> None:
    flags = re.findall(r"^\s*(--[a-z-]+)", _text(SEED_SCRIPT), re.M)
    assert len(flags) == 20, flags


def test_seed_script_passes_ls009_ls014_on_the_fork(tmp_path: Path) -> None:
    _, findings = _check(tmp_path, FORK, str(SEED_SCRIPT), "--select", "LS009,LS014")
    assert findings == []


def test_seed_script_fails_ls009_and_ls014_on_upstream(tmp_path: Path) -> None:
    code, findings = _check(tmp_path, UPSTREAM, str(SEED_SCRIPT), "--select", "LS009,LS014")
    got = sorted((f["id"], re.split(r":| is not", f["message"])[0]) for f in findings)
    # turbo3 K and V: no such cache type upstream; --mlock: replaced by --load-mode upstream
    assert got == [
        ("LS009", "--cache-type-k turbo3"),
        ("LS009", "--cache-type-v turbo3"),
        ("LS014", "--mlock"),
    ], findings
    assert code == 1


def test_ls016_models_the_forks_k_rewrite_only_for_a_build_that_does_it() -> None:
    """LS016's plan follows the build in the facts: the fork's build 9079 rewrites a symmetric
    turbo K to q8_0 on GQA >= 6 (measured: tools/planner_vs_log.py), older or unknown builds are
    planned as written."""
    from llamafleet.facts import Facts
    from llamafleet.rules.server import _rewrites_turbo_k

    class Ctx:
        def __init__(self, facts: Facts) -> None:
            self.facts = facts

    fork = Facts()
    fork.set_help(_text(FORK))
    fork.set_version((HELP / "fork-b9079-69d8e4be4.version.txt").read_text())
    assert fork.build_number == 9079 and _rewrites_turbo_k(Ctx(fork))  # type: ignore[arg-type]
    older = Facts()
    older.set_help(_text(FORK))
    older.set_version("version: 8800 (0123456)")
    assert not _rewrites_turbo_k(Ctx(older))  # type: ignore[arg-type]
    up = Facts()
    up.set_help(_text(UPSTREAM))
    up.set_version("version: 9500 (0123456)")
    assert not _rewrites_turbo_k(Ctx(up))  # type: ignore[arg-type]

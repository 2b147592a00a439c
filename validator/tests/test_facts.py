"""Facts parsing: --version formats, the real --help of an upstream build, manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FIXTURES
from llamafleet.facts import Facts, FactsError, apply_manifest, load_facts_file
from llamafleet.flags import parse_help, table


@pytest.mark.parametrize(
    ("text", "number", "commit"),
    [
        ("version: 9079 (69d8e4be)\nbuilt with GNU 13.3.0 for Linux x86_64", 9079, "69d8e4be"),
        ("version: 0.5.0-dev (build 8200, commit 612d308)\nbuilt with GNU 12.2.0", 8200, "612d308"),
        ("version: 0.5.0-dev (build 1, commit 612d308)", None, "612d308"),  # no git history
        ("garbage", None, None),
    ],
)
def test_version_formats(text: str, number: int | None, commit: str | None) -> None:
    f = Facts()
    f.set_version(text)
    assert (f.build_number, f.commit) == (number, commit)


def test_real_upstream_help_matches_the_generated_table() -> None:
    h = parse_help((FIXTURES / "help" / "upstream-b1-0c1e570.help.txt").read_text())
    assert h.cache_types == ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
    assert "--load-mode" in h.names and "-lm" in h.names and "--mlock" not in h.names
    assert {"--cache-ram", "-cram", "--kv-unified", "-no-kvu", "--fim-qwen-1.5b-default"} <= h.names
    known = set(table().by_name)
    # every option the real binary lists is in the table generated from its arg.cpp (a
    # description line "--spec-ngram-*-size-n or ..." is not an option line)
    assert h.names <= known


def test_fork_help_has_turbo_and_mlock() -> None:
    f = Facts()
    f.set_help((FIXTURES / "help" / "fork-b9079-69d8e4be4.help.txt").read_text())
    assert f.has_turbo is True
    assert f.help is not None and "--mlock" in f.help.names


def test_manifest_of_the_llama_cpp_role(tmp_path: Path) -> None:
    help_file = tmp_path / "llama-server.help.txt"
    help_file.write_text((FIXTURES / "help" / "upstream-b1-0c1e570.help.txt").read_text())
    f = Facts()
    apply_manifest(
        f,
        {
            "version_output": "version: 0.5.0-dev (build 8300, commit abc1234)",
            "help_file": str(help_file),
            "cuda_architectures": ["89"],
            "backend": "cuda",
        },
        str(tmp_path),
    )
    assert f.build_number == 8300 and f.has_turbo is False and f.cuda_architectures == ["89"]


def test_unknown_fact_is_named(tmp_path: Path) -> None:
    p = tmp_path / "facts.yaml"
    p.write_text("gpu_vram: 16000\n")
    with pytest.raises(FactsError, match="unknown fact"):
        load_facts_file(str(p))


def test_bad_compute_capability(tmp_path: Path) -> None:
    p = tmp_path / "facts.yaml"
    p.write_text("gpu: {compute_capability: sm89}\n")
    with pytest.raises(FactsError, match=r"MAJOR\.MINOR"):
        load_facts_file(str(p))


def test_help_value_list_wrapped_over_two_lines() -> None:
    # the shape of the real fork's --help (build 9079): the list continues on the next line
    from llamafleet.flags import parse_help

    pad = " " * 40
    text = (
        "-ctk,  --cache-type-k TYPE              KV cache data type for K\n"
        f"{pad}allowed values: f32, f16, bf16, q8_0, q4_0, q4_1,\n"
        f"{pad}iq4_nl, q5_0, q5_1, turbo2, turbo3, turbo4\n"
        f"{pad}(default: f16)\n"
        "-ctv,  --cache-type-v TYPE              KV cache data type for V\n"
    )
    facts = parse_help(text)
    assert facts.cache_types is not None
    assert facts.cache_types[-3:] == ("turbo2", "turbo3", "turbo4")
    assert len(facts.cache_types) == 12
    # a list that is not wrapped stops at "(default: ...)"
    one = parse_help(text.replace(f",\n{pad}iq4_nl", ", iq4_nl"))
    assert one.cache_types == facts.cache_types

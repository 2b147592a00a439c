"""tools/capture_help.py: build ids from --version, the files it writes, the README lines, the
refusal to overwrite, against a stand-in llama-server (a shell script)."""

from __future__ import annotations

import importlib.util
import io
import os
import stat
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "capture_help.py"
HELP = "-h,    --help, --usage                  print usage and exit\n--version   show version\n"


@pytest.fixture(scope="module")
def capture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capture_help", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _fake(tmp_path: Path, version: str, help_text: str = HELP, stderr: str = "") -> Path:
    """A llama-server stand-in: --version on stderr (as llama.cpp does), --help on stdout; it
    also writes its environment and whether stdin is empty, for the tests to look at."""
    (tmp_path / "version.txt").write_text(version)
    (tmp_path / "help.txt").write_text(help_text)
    (tmp_path / "stderr.txt").write_text(stderr)
    script = tmp_path / "build" / "bin" / "llama-server"
    script.parent.mkdir(parents=True)
    script.write_text(
        "#!/bin/sh\n"
        f"d={tmp_path}\n"
        'env > "$d/env.seen"; cat > "$d/stdin.seen"\n'
        'cat "$d/stderr.txt" >&2\n'
        'case "$1" in --version) cat "$d/version.txt" >&2;; --help) cat "$d/help.txt";; '
        "*) exit 2;; esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def _run(capture: ModuleType, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = capture.main(list(args))
    return code, out.getvalue(), err.getvalue()


def _args(binary: Path, out: Path, *extra: str) -> list[str]:
    return [
        str(binary),
        "--name",
        "fork",
        "--source",
        "a test tree",
        "--cmake",
        "-DGGML_NATIVE=OFF",
        "--out-dir",
        str(out),
        "--no-isolate",
        *extra,
    ]


@pytest.mark.parametrize(
    ("version", "bid"),
    [
        ("version: 9079 (69d8e4be4)\nbuilt with GNU 12.2.0 for Linux x86_64\n", "b9079-69d8e4be4"),
        ("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0\n", "b1-0c1e570"),
        ("version: 0.5.0-dev (build 11312, commit 0c1e57098)\n", "b11312-0c1e57098"),
    ],
)
def test_build_id(capture: ModuleType, version: str, bid: str) -> None:
    assert capture.build_id(version) == bid


@pytest.mark.parametrize("version", ["version: 0 (unknown)\n", "llama-server\n", ""])
def test_build_id_refused(capture: ModuleType, version: str) -> None:
    with pytest.raises(capture.CaptureError, match="LLAMA_BUILD_COMMIT"):
        capture.build_id(version)


def test_device_log_lines_are_left_out(capture: ModuleType) -> None:
    stderr = (
        b"ggml_cuda_init: found 1 CUDA devices:\n"
        b"  Device 0: NVIDIA GeForce RTX 4080 SUPER, compute capability 8.9, VMM: yes\n"
        b"load_backend: loaded CUDA backend from /opt/llama/lib/libggml-cuda.so\n"
        b"version: 9079 (69d8e4be4)\n"
        b"built with GNU 12.2.0 for Linux x86_64\n"
    )
    kept, dropped = capture.split_device_log(stderr)
    assert kept == b"version: 9079 (69d8e4be4)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    assert len(dropped) == 3


def test_writes_both_files_byte_for_byte_and_the_readme(
    capture: ModuleType, tmp_path: Path
) -> None:
    help_text = HELP + "trailing spaces   \n\n"
    binary = _fake(
        tmp_path,
        "version: 9079 (69d8e4be4)\nbuilt with GNU 12.2.0 for Linux x86_64\n",
        help_text,
        stderr="load_backend: loaded CPU backend from /x/libggml-cpu.so\n",
    )
    out = tmp_path / "fixtures"
    out.mkdir()
    (out / "README.md").write_text("# Help texts\n\nSome prose.\n")
    code, stdout, err = _run(capture, *_args(binary, out))
    assert code == 0, err
    assert (out / "fork-b9079-69d8e4be4.help.txt").read_text() == help_text
    assert (out / "fork-b9079-69d8e4be4.version.txt").read_text() == (
        "version: 9079 (69d8e4be4)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    )
    assert "written" in stdout
    readme = (out / "README.md").read_text()
    assert readme.startswith("# Help texts\n\nSome prose.\n")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("- `fork-b9079")]
    assert "a test tree" in line and "`cmake -DGGML_NATIVE=OFF`" in line
    assert "<build>/bin/llama-server --help < /dev/null" in line and "LC_ALL=C" in line
    assert str(binary.resolve()) not in line  # no path of the capturing machine
    assert "(network not isolated)" in line
    assert "2 device log line(s) left out" in line  # one from each run
    # the environment was only LC_ALL and PATH, and stdin was empty
    seen = dict(
        ln.split("=", 1) for ln in (tmp_path / "env.seen").read_text().splitlines() if "=" in ln
    )
    assert seen.get("LC_ALL") == "C" and not any(k.startswith("LLAMA_") for k in seen)
    assert (tmp_path / "stdin.seen").read_bytes() == b""


def test_same_content_again_is_unchanged_and_readme_keeps_one_line(
    capture: ModuleType, tmp_path: Path
) -> None:
    binary = _fake(tmp_path, "version: 9079 (69d8e4be4)\n")
    out = tmp_path / "fixtures"
    assert _run(capture, *_args(binary, out))[0] == 0
    code, stdout, _ = _run(capture, *_args(binary, out))
    assert code == 0 and stdout.count("unchanged") == 2
    assert (out / "README.md").read_text().count("- `fork-b9079-69d8e4be4.help.txt`") == 1


def test_other_content_needs_force(capture: ModuleType, tmp_path: Path) -> None:
    binary = _fake(tmp_path, "version: 9079 (69d8e4be4)\n")
    out = tmp_path / "fixtures"
    assert _run(capture, *_args(binary, out))[0] == 0
    (tmp_path / "help.txt").write_text(HELP + "-x, --extra  new\n")
    code, _, err = _run(capture, *_args(binary, out))
    assert code == 1 and "--force" in err
    assert (out / "fork-b9079-69d8e4be4.help.txt").read_text() == HELP  # untouched
    code, _, err = _run(capture, *_args(binary, out, "--force"))
    assert code == 0, err
    assert (out / "fork-b9079-69d8e4be4.help.txt").read_text().endswith("--extra  new\n")


def test_readme_drops_lines_of_removed_fixtures(capture: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "fixtures"
    out.mkdir()
    (out / "README.md").write_text(
        f"# x\n\n{capture.BEGIN}\n- `gone-b1-abcdef0.help.txt` old\n{capture.END}\n\ntail\n"
    )
    binary = _fake(tmp_path, "version: 0.5.0-dev (build 1, commit 0c1e570)\n")
    code, _, err = _run(capture, *[*_args(binary, out)[:2], "upstream", *_args(binary, out)[3:]])
    assert code == 0, err
    readme = (out / "README.md").read_text()
    assert "gone-b1" not in readme and "- `upstream-b1-0c1e570.help.txt`" in readme
    assert readme.endswith("\n\ntail\n")


def test_unexpected_stderr_of_help_is_an_error(capture: ModuleType, tmp_path: Path) -> None:
    binary = _fake(tmp_path, "version: 9079 (69d8e4be4)\n", stderr="error: something broke\n")
    code, _, err = _run(capture, *_args(binary, tmp_path / "out"))
    assert code == 1 and "unexpected stderr" in err


def test_cmake_options_must_match_the_cache(capture: ModuleType, tmp_path: Path) -> None:
    binary = _fake(tmp_path, "version: 9079 (69d8e4be4)\n")
    (binary.parent.parent / "CMakeCache.txt").write_text(
        "GGML_NATIVE:BOOL=ON\nLLAMA_BUILD_NUMBER:UNINITIALIZED=9079\n"
    )
    code, _, err = _run(capture, *_args(binary, tmp_path / "out"))
    assert code == 1 and "GGML_NATIVE=OFF (cache: ON)" in err


def test_bad_name_and_missing_binary(capture: ModuleType, tmp_path: Path) -> None:
    binary = _fake(tmp_path, "version: 9079 (69d8e4be4)\n")
    args = _args(binary, tmp_path / "out")
    args[2] = "Fork-1"
    assert _run(capture, *args)[0] == 1
    args = _args(tmp_path / "nope", tmp_path / "out")
    code, _, err = _run(capture, *args)
    assert code == 1 and "not an executable" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="unshare --net needs root (or user namespaces)")
def test_network_isolation_prefix(capture: ModuleType) -> None:
    try:
        prefix = capture.isolation_prefix(True)
    except capture.CaptureError:
        pytest.skip("unshare --net is not permitted here")
    assert "--net" in prefix and prefix[-1] == "--"
    assert capture.isolation_prefix(False) == []

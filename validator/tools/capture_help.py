#!/usr/bin/env python3
"""Capture a llama-server build's ``--version`` and ``--help`` output as test fixtures.

Usage:
  capture_help.py BINARY --name NAME --source TEXT --cmake OPTIONS [--build-command CMD]
                  [--out-dir DIR] [--timeout S] [--force] [--no-isolate]

Runs ``BINARY --version`` and ``BINARY --help`` with stdin from /dev/null, an environment of only
``LC_ALL=C`` and ``PATH=/usr/bin:/bin`` (no ``LLAMA_ARG_*`` variable can change a default the help
shows), a timeout, and no network (``unshare --net``; ``--no-isolate`` runs without it and the
README says so). From the version text (``version: 9079 (69d8e4be4)`` of the fork and older
upstream, ``version: 0.5.0-dev (build 1, commit 0c1e570)`` of upstream since 2026) it derives the
build id ``b<N>-<commit>`` and writes, in ``validator/tests/fixtures/help`` by default:

- ``<NAME>-b<N>-<commit>.help.txt``: the standard output of ``--help``, byte for byte;
- ``<NAME>-b<N>-<commit>.version.txt``: the standard output of ``--version`` followed by its
  standard error (where llama.cpp prints the version), byte for byte,

leaving out only the lines llama.cpp logs to standard error about devices and backends
(``load_backend:``, ``ggml_cuda_init:``, ``  Device 0: ...``, ``ggml_vulkan:``, ``ggml_metal...``,
``register_backend:``/``register_device:``). Any other standard-error output of ``--help``, a
nonzero exit or a timeout is an error. An existing fixture with other content is not overwritten
without ``--force``. The README.md in the output directory gets (or has replaced) one line per
fixture between its ``capture_help`` markers: the source tree, the CMake options, the build command
and the exact commands that produced the files. Lines of fixtures that no longer exist are dropped.

When the binary lies in ``<build>/bin`` next to a ``<build>/CMakeCache.txt``, each ``-DKEY=VALUE``
of ``--cmake`` must match the cache (so the README cannot name options the build did not have).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "help"
ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
BEGIN = "<!-- capture_help: begin (one line per fixture, by validator/tools/capture_help.py) -->"
END = "<!-- capture_help: end -->"

#: Lines llama.cpp (ggml) logs to stderr while registering backends and devices.
DEVICE_LOG = re.compile(
    rb"^(?:load_backend: |register_backend: |register_device: |ggml_cuda_init: |ggml_vulkan: "
    rb"|ggml_metal\w*: |ggml_sycl\w*: |ggml_opencl\w*: |ggml_backend\w*: "
    rb"|\s+Device \d+: )"
)
_VERSION_OLD = re.compile(r"^version: (\d+) \(([0-9a-f]{7,40})\)$", re.M)
_VERSION_NEW = re.compile(r"^version: \S+ \(build (\d+), commit ([0-9a-f]{7,40})\)$", re.M)
_NAME = re.compile(r"[a-z0-9][a-z0-9_.]*\Z")
_TEXT_OPTIONS = ("--source", "--cmake", "--build-command")


class CaptureError(Exception):
    pass


@dataclass
class Run:
    argv: list[str]
    stdout: bytes
    stderr: bytes
    dropped: list[bytes]


def build_id(version_text: str) -> str:
    """``b<N>-<commit>`` from llama-server's ``--version`` output."""
    m = _VERSION_OLD.search(version_text) or _VERSION_NEW.search(version_text)
    if not m:
        raise CaptureError(
            f"no 'version: N (COMMIT)' or 'version: X (build N, commit C)' line in {version_text!r}"
            " (a build without a commit reports 'unknown': configure with -DLLAMA_BUILD_COMMIT=...)"
        )
    return f"b{int(m.group(1))}-{m.group(2)}"


def split_device_log(stderr: bytes) -> tuple[bytes, list[bytes]]:
    """(stderr without the device/backend log lines, the lines left out)."""
    kept: list[bytes] = []
    dropped: list[bytes] = []
    for line in stderr.splitlines(keepends=True):
        (dropped if DEVICE_LOG.match(line) else kept).append(line)
    return b"".join(kept), dropped


def isolation_prefix(isolate: bool) -> list[str]:
    """The command prefix that runs a program without network access."""
    if not isolate:
        return []
    unshare = shutil.which("unshare", path=ENV["PATH"])
    if unshare:
        for prefix in ([unshare, "--net"], [unshare, "--net", "--map-root-user"]):
            probe = subprocess.run(
                [*prefix, "true"], env=ENV, capture_output=True, check=False, timeout=30
            )
            if probe.returncode == 0:
                return [*prefix, "--"]
    raise CaptureError(
        "cannot run without network: `unshare --net` is missing or not permitted here "
        "(run as root, or pass --no-isolate and the README line says so)"
    )


def run(prefix: list[str], binary: str, option: str, timeout: float) -> Run:
    argv = [*prefix, binary, option]
    try:
        with open(os.devnull, "rb") as devnull:
            proc = subprocess.run(
                argv, stdin=devnull, capture_output=True, env=ENV, timeout=timeout, check=False
            )
    except subprocess.TimeoutExpired as exc:
        raise CaptureError(f"{shlex.join(argv)}: no exit after {timeout:g} s") from exc
    except OSError as exc:
        raise CaptureError(f"{shlex.join(argv)}: cannot run: {exc.strerror}") from exc
    if proc.returncode != 0:
        raise CaptureError(
            f"{shlex.join(argv)}: exit status {proc.returncode}; stderr: "
            f"{proc.stderr.decode(errors='replace')[-2000:]}"
        )
    stderr, dropped = split_device_log(proc.stderr)
    return Run(argv, proc.stdout, stderr, dropped)


def check_cmake(binary: Path, cmake: str) -> None:
    """Refuse ``-DKEY=VALUE`` options that the binary's CMakeCache.txt contradicts."""
    cache = binary.resolve().parent.parent / "CMakeCache.txt"
    if not cache.is_file():
        return
    values: dict[str, str] = {}
    for line in cache.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"([A-Za-z_][\w-]*):[A-Z]+=(.*)$", line)
        if m:
            values[m.group(1)] = m.group(2)
    wrong = []
    for word in shlex.split(cmake):
        m = re.fullmatch(r"-D([A-Za-z_]\w*)(?::[A-Z]+)?=(.*)", word)
        if m and values.get(m.group(1)) != m.group(2):
            wrong.append(f"{m.group(1)}={m.group(2)} (cache: {values.get(m.group(1), 'unset')})")
    if wrong:
        raise CaptureError(f"{cache}: --cmake does not match the build: {', '.join(wrong)}")


def write_fixture(path: Path, data: bytes, force: bool) -> str:
    if path.exists():
        old = path.read_bytes()
        if old == data:
            return "unchanged"
        if not force:
            raise CaptureError(
                f"{path} exists with other content ({len(old)} bytes, new {len(data)}); "
                "pass --force to replace it"
            )
    path.write_bytes(data)
    return "written"


def update_readme(readme: Path, stem: str, line: str) -> None:
    """Put ``line`` as the entry of ``stem`` between the markers (entries sorted by file name);
    entries of fixtures whose files are gone are dropped."""
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + f"{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    entries: dict[str, str] = {}
    for entry in body.strip("\n").split("\n"):
        m = re.match(r"- `([^`]+)\.help\.txt`", entry)
        if m and (readme.parent / f"{m.group(1)}.help.txt").exists():
            entries[m.group(1)] = entry
    entries[stem] = line
    lines = "\n".join(entries[k] for k in sorted(entries))
    readme.write_text(f"{head}{BEGIN}\n{lines}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("binary", help="the llama-server binary")
    p.add_argument("--name", required=True, help="flavour, e.g. fork or upstream")
    p.add_argument("--source", required=True, help="the source tree it was built from (prose)")
    p.add_argument("--cmake", required=True, help="the CMake configure options, as given")
    p.add_argument(
        "--build-command",
        default="cmake --build build --target llama-server",
        help="the build command (default: %(default)s)",
    )
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run (default: 60)")
    p.add_argument("--force", action="store_true", help="replace fixtures with other content")
    p.add_argument("--no-isolate", action="store_true", help="do not cut the network off")
    args = p.parse_args(_joined(sys.argv[1:] if argv is None else argv))
    try:
        if not _NAME.match(args.name):
            raise CaptureError(f"--name {args.name!r}: lower-case letters, digits, '_' and '.'")
        binary = Path(args.binary)
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise CaptureError(f"{binary}: not an executable file")
        check_cmake(binary, args.cmake)
        prefix = isolation_prefix(not args.no_isolate)
        abs_binary = str(binary.resolve())
        version = run(prefix, abs_binary, "--version", args.timeout)
        version_bytes = version.stdout + version.stderr
        bid = build_id(version_bytes.decode("utf-8", errors="replace"))
        helped = run(prefix, abs_binary, "--help", args.timeout)
        if helped.stderr.strip():
            raise CaptureError(
                f"{shlex.join(helped.argv)}: unexpected stderr output: "
                f"{helped.stderr.decode(errors='replace')[:2000]!r}"
            )
        if not helped.stdout.strip():
            raise CaptureError(f"{shlex.join(helped.argv)}: no help text on stdout")
        stem = f"{args.name}-{bid}"
        out: Path = args.out_dir
        out.mkdir(parents=True, exist_ok=True)
        help_path = out / f"{stem}.help.txt"
        version_path = out / f"{stem}.version.txt"
        # check both before writing either
        for path, data in ((help_path, helped.stdout), (version_path, version_bytes)):
            if path.exists() and path.read_bytes() != data and not args.force:
                write_fixture(path, data, False)
        states = [
            write_fixture(help_path, helped.stdout, args.force),
            write_fixture(version_path, version_bytes, args.force),
        ]
        env = " ".join(f"{k}={v}" for k, v in ENV.items())
        run_prefix = shlex.join(prefix) + " " if prefix else "(network not isolated) "
        dropped = len(version.dropped) + len(helped.dropped)
        # where the build tree lies on the capturing machine says nothing to a reader
        shown_binary = f"<build>/{binary.parent.name}/{binary.name}"
        line = (
            f"- `{stem}.help.txt` ({len(helped.stdout)} bytes), `{stem}.version.txt` "
            f"({len(version_bytes)} bytes): source: {args.source}; configured with "
            f"`cmake {args.cmake}`, built with `{args.build_command}`; captured with "
            f"`env -i {env} {run_prefix}{shown_binary} --help < /dev/null` (stdout) and "
            f"`... --version` (stdout, then stderr)"
            + (f", {dropped} device log line(s) left out" if dropped else "")
            + ", by `"
            + shlex.join(
                ["validator/tools/capture_help.py"]
                + [shown_binary if w == args.binary else w for w in _shown(argv)]
            )
            + "`."
        )
        update_readme(out / "README.md", stem, line)
    except CaptureError as exc:
        sys.stderr.write(f"capture_help: error: {exc}\n")
        return 1
    sys.stdout.write(
        f"{help_path.name}: {states[0]} ({len(helped.stdout)} bytes)\n"
        f"{version_path.name}: {states[1]} ({len(version_bytes)} bytes)\n"
    )
    return 0


def _joined(words: list[str]) -> list[str]:
    """``--cmake -DX=1`` as ``--cmake=-DX=1``: argparse would take a value that starts with '-'
    (and has no space) for an option of its own."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] in _TEXT_OPTIONS and i + 1 < len(words):
            out.append(f"{words[i]}={words[i + 1]}")
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out


def _shown(argv: list[str] | None) -> list[str]:
    """The command line as given, without --force, and the prose options (already in the line)
    shortened to ``--source=...``."""
    words = _joined(list(sys.argv[1:] if argv is None else argv))
    return [
        w.split("=", 1)[0] + "=..." if w.startswith(tuple(f"{o}=" for o in _TEXT_OPTIONS)) else w
        for w in words
        if w != "--force"
    ]


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Move the claude_code role to another Claude Code release: its integrity pins, and the gates'
recorded request.

Usage:
  claude_code_pins.py VERSION [--registry URL] [--no-capture] [--repo DIR]
  make claude-code-pins VERSION=x.y.z

1. Reads from the npm registry (``--registry``, else ``$NPM_CONFIG_REGISTRY``, else what
   ``npm config get registry`` prints) the version document of the wrapper package
   (``claude_code_package`` of ``roles/claude_code/defaults/main.yml``) and of each native package
   the role pins (``PACKAGE-linux-x64``, ``PACKAGE-linux-arm64``) at VERSION. Each must exist, name
   that package and that version, carry a sha512 SRI integrity, and the wrapper must list each
   native package at VERSION in its optionalDependencies (the native binary is what runs). Anything
   else is refused and nothing is written.
2. Rewrites, in ``defaults/main.yml`` and ``meta/argument_specs.yml`` of the role, only the lines of
   ``claude_code_version``, ``claude_code_integrity`` and the ``claude_code_platform_integrity``
   entries: comments, order and every other line stay (each file is written whole to a temporary
   file beside it, then renamed over it).
3. Unless ``--no-capture``: runs ``capture_claude_request.py`` (which installs the new pins,
   checked, and records the CLI's first main-conversation request) and prints how the request's
   shape changed against the recording it replaces: tools, system blocks, late ``role: system``
   messages, headers (``llamafleet.claude_request.shape_changes``).

What is left to do after it is printed: the claude scenario (``molecule test -s claude``) measures
the new release's prompt-cache reuse, and the README's table takes its figures.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = Path("roles") / "claude_code"
DEFAULTS = ROLE / "defaults" / "main.yml"
SPECS = ROLE / "meta" / "argument_specs.yml"
RECORDED = Path("validator") / "src" / "llamafleet" / "data" / "claude-code-request.json"
VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
#: a sha512 SRI value as npm prints it (64 bytes, base64 with padding)
SRI_RE = re.compile(r"^sha512-[A-Za-z0-9+/]{86}==$")


class PinError(Exception):
    pass


def registry_url(given: str | None) -> str:
    """The registry to ask: the option, the environment, or npm's own configuration."""
    url = given or os.environ.get("NPM_CONFIG_REGISTRY")
    if not url:
        npm = shutil.which("npm")
        if npm is None:
            raise PinError("no npm on PATH to ask for its registry: give --registry URL")
        proc = subprocess.run(
            [npm, "config", "get", "registry"], capture_output=True, text=True, check=False
        )
        url = proc.stdout.strip()
        if proc.returncode != 0 or not url:
            raise PinError(f"`npm config get registry` failed: {proc.stderr.strip()}")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PinError(f"registry {url!r} is not an http(s) URL")
    return url.rstrip("/")


def version_document(registry: str, package: str, version: str) -> dict[str, Any]:
    """The registry's document of PACKAGE@VERSION (GET REGISTRY/@scope%2fname/VERSION)."""
    url = f"{registry}/{urllib.parse.quote(package, safe='@')}/{urllib.parse.quote(version)}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read(8 * 1024 * 1024 + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise PinError(f"the registry has no {package}@{version} ({url}: 404)") from exc
        raise PinError(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise PinError(f"{url}: {exc}") from exc
    if len(raw) > 8 * 1024 * 1024:
        raise PinError(f"{url}: the document is larger than 8 MiB")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise PinError(f"{url}: not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise PinError(f"{url}: not a version document")
    if doc.get("name") != package or doc.get("version") != version:
        raise PinError(
            f"{url}: the registry answered {doc.get('name')!r}@{doc.get('version')!r}, "
            f"not {package}@{version}"
        )
    return doc


def _integrity(doc: Mapping[str, Any], what: str) -> str:
    dist = doc.get("dist")
    integrity = dist.get("integrity") if isinstance(dist, Mapping) else None
    if not isinstance(integrity, str) or not SRI_RE.match(integrity):
        raise PinError(f"{what}: no sha512 integrity in its dist ({integrity!r})")
    return integrity


def read_pins(
    registry: str, package: str, version: str, suffixes: list[str]
) -> tuple[str, dict[str, str]]:
    """(the wrapper's integrity, {suffix: the native package's integrity}) of VERSION."""
    if not VERSION_RE.match(version):
        raise PinError(f"{version!r} is not an exact version (x.y.z)")
    wrapper = version_document(registry, package, version)
    wrapper_pin = _integrity(wrapper, f"{package}@{version}")
    optional = wrapper.get("optionalDependencies")
    optional = optional if isinstance(optional, Mapping) else {}
    platform: dict[str, str] = {}
    for suffix in suffixes:
        native = f"{package}-{suffix}"
        if optional.get(native) != version:
            raise PinError(
                f"{package}@{version} does not install {native}@{version} "
                f"(its optionalDependencies give {optional.get(native)!r})"
            )
        platform[suffix] = _integrity(
            version_document(registry, native, version), f"{native}@{version}"
        )
    return wrapper_pin, platform


def _replace_value(text: str, key: str, value: str, path: Path, indent: str | None = None) -> str:
    """Replace the quoted value of every ``KEY: "..."`` line (at INDENT when given); the line
    must exist."""
    pattern = re.compile(
        rf"^(?P<lead>{re.escape(indent) if indent is not None else '[ ]*'}{re.escape(key)}:[ ]*)"
        r'"[^"\n]*"[ ]*$',
        re.M,
    )
    new, count = pattern.subn(lambda m: f'{m.group("lead")}"{value}"', text)
    if count == 0:
        raise PinError(f'{path}: no line `{key}: "..."` to update')
    return new


def _quoted_after(value: str) -> Callable[[re.Match[str]], str]:
    """A replacement: the match's first group, then VALUE in double quotes."""
    return lambda m: f'{m.group(1)}"{value}"'


def rewrite_pins(
    repo: Path, version: str, wrapper_pin: str, platform: Mapping[str, str]
) -> list[Path]:
    """Write the new pins into the role's defaults and argument specs; returns the files changed.
    Both are read and checked before either is written."""
    texts: dict[Path, str] = {}
    for rel, indent in ((DEFAULTS, ""), (SPECS, None)):
        path = repo / rel
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PinError(f"{path}: cannot read: {exc}") from exc
        new = text
        if rel == DEFAULTS:
            new = _replace_value(new, "claude_code_version", version, path, indent)
            new = _replace_value(new, "claude_code_integrity", wrapper_pin, path, indent)
        else:
            # argument_specs: the default line right under each option
            for key, value in (
                ("claude_code_version", version),
                ("claude_code_integrity", wrapper_pin),
            ):
                block = re.compile(
                    rf"(^[ ]+{re.escape(key)}:\n(?:[ ]+(?!default:)\S.*\n)*?[ ]+default:[ ]*)"
                    r'"[^"\n]*"',
                    re.M,
                )
                new, count = block.subn(_quoted_after(value), new)
                if count != 1:
                    raise PinError(f"{path}: no default of {key} to update")
        for suffix, pin in platform.items():
            new = _replace_value(new, suffix, pin, path)
        texts[path] = new
    for path, new in texts.items():
        _check_read_back(path, new, version, wrapper_pin, platform)
    changed = []
    for path, new in texts.items():
        if new == path.read_text(encoding="utf-8"):
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
        changed.append(path)
    return changed


def _check_read_back(
    path: Path, text: str, version: str, wrapper_pin: str, platform: Mapping[str, str]
) -> None:
    """Refuse a rewritten file whose YAML does not give the new pins."""
    data = yaml.safe_load(text)
    if path.name == "main.yml":
        got = (data["claude_code_version"], data["claude_code_integrity"])
        got_platform = data["claude_code_platform_integrity"]
    else:
        opts = data["argument_specs"]["main"]["options"]
        got = (opts["claude_code_version"]["default"], opts["claude_code_integrity"]["default"])
        got_platform = opts["claude_code_platform_integrity"]["default"]
    if got != (version, wrapper_pin) or any(got_platform.get(s) != p for s, p in platform.items()):
        raise PinError(f"{path}: the rewritten file does not read back as the new pins")


def current_pins(repo: Path) -> dict[str, Any]:
    path = repo / DEFAULTS
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PinError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(
        data.get("claude_code_platform_integrity"), dict
    ):
        raise PinError(f"{path}: no claude_code_platform_integrity mapping")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("version", help="the Claude Code release to pin (x.y.z)")
    parser.add_argument("--registry", default=None, help="npm registry URL (npm's own by default)")
    parser.add_argument(
        "--no-capture", action="store_true", help="update the pins only; do not re-record"
    )
    parser.add_argument("--repo", default=str(REPO), help="the checkout to update (%(default)s)")
    args = parser.parse_args(argv)
    repo = Path(args.repo)
    try:
        defaults = current_pins(repo)
        package = str(defaults["claude_code_package"])
        old_version = str(defaults["claude_code_version"])
        suffixes = sorted(defaults["claude_code_platform_integrity"])
        registry = registry_url(args.registry)
        wrapper_pin, platform = read_pins(registry, package, args.version, suffixes)
        changed = rewrite_pins(repo, args.version, wrapper_pin, platform)
    except PinError as exc:
        print(f"claude_code_pins: {exc}; nothing written", file=sys.stderr)
        return 1
    print(f"{package}: {old_version} -> {args.version}")
    print(f"  integrity {wrapper_pin}")
    for suffix, pin in platform.items():
        print(f"  {suffix} {pin}")
    for path in changed:
        print(f"  updated {path.relative_to(repo)}")
    if not changed:
        print("  the pins were already these")
    if args.no_capture:
        return 0
    return recapture(repo, registry)


def recapture(repo: Path, registry: str) -> int:
    """Re-record the gates' request from the newly pinned CLI and print what changed."""
    sys.path.insert(0, str(repo / "validator" / "src"))
    from llamafleet.claude_request import load_recorded, shape_changes

    recorded = repo / RECORDED
    old = load_recorded(recorded) if recorded.is_file() else None
    tool = repo / "validator" / "tools" / "capture_claude_request.py"
    proc = subprocess.run(
        [sys.executable, str(tool), "--out", str(recorded), "--registry", registry], check=False
    )
    if proc.returncode != 0:
        print(
            f"claude_code_pins: the capture failed (rc {proc.returncode}); the pins are written, "
            f"the recording is the old one",
            file=sys.stderr,
        )
        return proc.returncode
    new = load_recorded(recorded)
    print(f"\nthe recorded request, {RECORDED}:")
    for line in shape_changes(old, new) if old is not None else ["(no earlier recording)"]:
        print(f"  {line}")
    print(
        "\nnext: `molecule test -s claude` measures the prompt-cache reuse of this release; "
        "the README's table takes its figures"
    )
    return 0


def sri(data: bytes) -> str:
    """The sha512 SRI value of DATA, as npm computes a tarball's (for tests and fixtures)."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


if __name__ == "__main__":
    sys.exit(main())

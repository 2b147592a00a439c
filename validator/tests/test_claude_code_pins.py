"""tools/claude_code_pins.py (`make claude-code-pins VERSION=x.y.z`): the role's pins moved to
another Claude Code release, read from an npm registry.

The registry here is a stand-in: a loopback HTTP server that answers npm's version documents
(``GET /@scope%2fname/VERSION``: name, version, dist.integrity, optionalDependencies) the way the
npm registry does. It stands for the registry's answers only; it cannot show that a real release's
tarballs match (the role's install and the capture check that against the real registry). The
role's files are the real ones, copied. The request-shape report is checked on the real recording.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import io
import json
import shutil
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from llamafleet.claude_request import load_recorded, request_shape, shape_changes

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "validator" / "tools" / "claude_code_pins.py"
ROLE = REPO / "roles" / "claude_code"
RECORDED = REPO / "validator" / "src" / "llamafleet" / "data" / "claude-code-request.json"
PACKAGE = "@anthropic-ai/claude-code"

pytestmark = pytest.mark.skipif(
    not ROLE.is_dir(), reason="run from a checkout of the whole repository"
)


@pytest.fixture(scope="module")
def pins() -> ModuleType:
    spec = importlib.util.spec_from_file_location("claude_code_pins", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class Registry:
    """Version documents by (package, version); ``seen`` lists the paths asked for."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], dict[str, Any]] = {}
        self.seen: list[str] = []

    def publish(
        self, pins: ModuleType, version: str, override: dict[tuple[str, str], Any] | None = None
    ) -> dict[str, str]:
        """The wrapper and its two linux packages at VERSION; returns their integrities."""
        out = {}
        for suffix in ("", "-linux-x64", "-linux-arm64"):
            name = PACKAGE + suffix
            integrity = pins.sri(f"{name}@{version}".encode())
            out[suffix or "wrapper"] = integrity
            dist = {"integrity": integrity}
            doc: dict[str, Any] = {"name": name, "version": version, "dist": dist}
            if not suffix:
                doc["optionalDependencies"] = {
                    f"{PACKAGE}-{s}": version
                    for s in ("darwin-arm64", "linux-x64", "linux-arm64", "win32-x64")
                }
            self.docs[(name, version)] = doc
        for (name, field), value in (override or {}).items():
            self.docs[(name, version)][field] = value
        return out


@pytest.fixture
def registry() -> Iterator[tuple[Registry, str]]:
    reg = Registry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reg.seen.append(self.path)
            name, _, version = urllib.parse.unquote(self.path.lstrip("/")).rpartition("/")
            doc = reg.docs.get((name, version))
            body = json.dumps(doc if doc is not None else {"error": "Not found"}).encode()
            self.send_response(200 if doc is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reg, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The role's real defaults and argument specs, in a checkout of their own."""
    for rel in ("defaults/main.yml", "meta/argument_specs.yml"):
        dest = tmp_path / "roles" / "claude_code" / rel
        dest.parent.mkdir(parents=True)
        shutil.copy2(ROLE / rel, dest)
    return tmp_path


def _run(pins: ModuleType, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = pins.main(list(args))
    return code, out.getvalue(), err.getvalue()


def _files(root: Path) -> dict[str, str]:
    return {
        rel: (root / "roles" / "claude_code" / rel).read_text(encoding="utf-8")
        for rel in ("defaults/main.yml", "meta/argument_specs.yml")
    }


def test_moves_the_pins_and_nothing_else(
    pins: ModuleType, registry: tuple[Registry, str], checkout: Path
) -> None:
    reg, url = registry
    want = reg.publish(pins, "9.9.9")
    before = _files(checkout)
    code, out, err = _run(pins, "9.9.9", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 0, err
    assert "-> 9.9.9" in out and "updated roles/claude_code/defaults/main.yml" in out
    after = _files(checkout)
    defaults = yaml.safe_load(after["defaults/main.yml"])
    assert defaults["claude_code_version"] == "9.9.9"
    assert defaults["claude_code_integrity"] == want["wrapper"]
    assert defaults["claude_code_platform_integrity"] == {
        "linux-x64": want["-linux-x64"],
        "linux-arm64": want["-linux-arm64"],
    }
    opts = yaml.safe_load(after["meta/argument_specs.yml"])["argument_specs"]["main"]["options"]
    for key in ("claude_code_version", "claude_code_integrity", "claude_code_platform_integrity"):
        assert opts[key]["default"] == defaults[key]
    # four lines in each file, every comment and every other line as they were
    for rel in after:
        changed = [
            ln
            for ln in difflib.unified_diff(before[rel].splitlines(), after[rel].splitlines(), n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
        ]
        assert len(changed) == 8, (rel, changed)
        keys = ("claude_code_version:", "claude_code_integrity:", "linux-x64:", "linux-arm64:")
        assert all(ln[1:].strip().startswith((*keys, "default:")) for ln in changed), changed
        assert sum("9.9.9" in ln for ln in changed) == 1
    # the three documents, by their escaped scoped names
    assert sorted(reg.seen) == sorted(
        f"/{urllib.parse.quote(PACKAGE + s, safe='@')}/9.9.9"
        for s in ("", "-linux-arm64", "-linux-x64")
    )
    # a second run finds nothing to change
    code, out, _ = _run(pins, "9.9.9", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 0 and "already these" in out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # the wrapper would install another release's native binary
        (
            {(PACKAGE, "optionalDependencies"): {f"{PACKAGE}-linux-x64": "9.9.8"}},
            "does not install",
        ),
        # the registry answers another version than the one asked for
        ({(f"{PACKAGE}-linux-x64", "version"): "9.9.8"}, "the registry answered"),
        # a weaker hash than the role checks (sha1 only)
        ({(f"{PACKAGE}-linux-arm64", "dist"): {"shasum": "0" * 40}}, "no sha512 integrity"),
        ({(PACKAGE, "dist"): {"integrity": "sha1-" + "A" * 27 + "="}}, "no sha512 integrity"),
    ],
)
def test_refuses_a_registry_answer_it_cannot_pin(
    pins: ModuleType,
    registry: tuple[Registry, str],
    checkout: Path,
    override: dict[tuple[str, str], Any],
    message: str,
) -> None:
    reg, url = registry
    reg.publish(pins, "9.9.9", override)
    before = _files(checkout)
    code, _, err = _run(pins, "9.9.9", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 1
    assert message in err and "nothing written" in err
    assert _files(checkout) == before


def test_refuses_a_version_the_registry_lacks_and_a_range(
    pins: ModuleType, registry: tuple[Registry, str], checkout: Path
) -> None:
    reg, url = registry
    before = _files(checkout)
    code, _, err = _run(pins, "9.9.9", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 1 and f"has no {PACKAGE}@9.9.9" in err
    code, _, err = _run(pins, "latest", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 1 and "not an exact version" in err
    assert reg.seen == [f"/{urllib.parse.quote(PACKAGE, safe='@')}/9.9.9"]
    code, _, err = _run(pins, "9.9.9", "--registry", "file:///etc", "--repo", str(checkout))
    assert code == 1 and "not an http(s) URL" in err
    assert _files(checkout) == before


def test_refuses_a_checkout_without_the_pin_lines(
    pins: ModuleType, registry: tuple[Registry, str], checkout: Path
) -> None:
    reg, url = registry
    reg.publish(pins, "9.9.9")
    specs = checkout / "roles" / "claude_code" / "meta" / "argument_specs.yml"
    specs.write_text(specs.read_text().replace('default: "2.', "default: '2."), encoding="utf-8")
    before = _files(checkout)
    code, _, err = _run(pins, "9.9.9", "--registry", url, "--no-capture", "--repo", str(checkout))
    assert code == 1 and "no default of claude_code_version" in err
    # neither file is written when the second cannot be
    assert _files(checkout) == before


# --- the request's shape, on the real recording -----------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return load_recorded(RECORDED)


def test_shape_of_the_recording(recorded: dict[str, Any]) -> None:
    shape = request_shape(recorded)
    assert shape["version"] == recorded["capture"]["claude_code_version"]
    assert shape["tools"] == [t["name"] for t in recorded["body"]["tools"]]
    assert len(shape["late_system"]) == 1 and shape["late_system"][0]["index"] >= 1
    assert "anthropic-version" in shape["headers"]
    assert shape["beta"] and all("," not in b for b in shape["beta"])
    same = shape_changes(recorded, recorded)
    assert all("->" not in line or line.startswith("version") for line in same)
    assert sum("unchanged" in line for line in same) == len(same) - 1


def test_shape_changes_name_what_moved(recorded: dict[str, Any]) -> None:
    new = copy.deepcopy(recorded)
    new["capture"]["claude_code_version"] = "9.9.9"
    dropped = new["body"]["tools"].pop(0)["name"]
    new["body"]["tools"].append({"name": "Brand", "input_schema": {}})
    new["body"]["system"].append({"type": "text", "text": "x" * 10})
    new["body"]["messages"].append({"role": "system", "content": "tokens left: 1000\nmore"})
    new["headers"]["x-new"] = "1"
    new["headers"]["anthropic-beta"] += ",brand-new-2030-01-01"
    lines = shape_changes(recorded, new)
    text = "\n".join(lines)
    assert lines[0].endswith("-> 9.9.9")
    assert f"removed {dropped}" in text and "added Brand" in text
    assert "system blocks: " in text and "-> " + str(len(new["body"]["system"])) in text
    assert "'tokens left: 1000'" in text
    assert "headers: " in text and "added x-new" in text
    assert "added brand-new-2030-01-01" in text

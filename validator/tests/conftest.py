from __future__ import annotations

import atexit
import importlib
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from llamafleet.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def tool(name: str) -> str:
    """The path of a program the tests run besides Python (promtool, mtail, haproxy): PATH, then
    ``$LLAMAFLEET_CACHE/tools/bin``, which testbed/unit-tools.sh fills from the Debian packages
    (``make unit`` runs it). Without it the test is skipped, saying why; under CI (CI=true) it
    fails instead, so CI never passes a test it did not run."""
    found = shutil.which(name)
    if found:
        return found
    cache = Path(os.environ.get("LLAMAFLEET_CACHE", "/var/cache/llamafleet")) / "tools" / "bin"
    if (cache / name).is_file():
        return str(cache / name)
    why = f"{name} not found on PATH nor in {cache}: run testbed/unit-tools.sh (make unit does)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out)
        return data


def run_cli(args: Sequence[str], cwd: Path | None = None) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> Any:
    return run_cli


REPO = Path(__file__).resolve().parents[2]
#: the collection's plugins (modules, action plugins, filters, module_utils)
PLUGINS = REPO / "plugins"
COLLECTION = "ansible_collections.llamafleet.fleet"


def _collection_root() -> Path:
    """A directory holding ``ansible_collections/llamafleet/fleet``, a link to this checkout, so
    that the plugins under test import each other (and Ansible finds them by FQCN) from the
    checkout itself, not from an installed copy. Made once per test run; every ansible-playbook a
    test starts inherits it through ANSIBLE_COLLECTIONS_PATH."""
    root = Path(tempfile.mkdtemp(prefix="lf-collections-"))
    (root / "ansible_collections" / "llamafleet").mkdir(parents=True)
    (root / "ansible_collections" / "llamafleet" / "fleet").symlink_to(REPO)
    atexit.register(shutil.rmtree, root, True)
    return root


COLLECTIONS_ROOT = _collection_root()
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS_ROOT)
sys.path.insert(0, str(COLLECTIONS_ROOT))
# the chat template's answers are not kept on disk between tests (one test's answer would spare
# another the child process it tests); tests/test_diskcache.py turns it on where it tests it
os.environ["LLAMAFLEET_TEMPLATE_CACHE"] = "off"
# a module a test runs as a program (python MODULE.py ARGS) imports its module_utils the same way
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(COLLECTIONS_ROOT), os.environ.get("PYTHONPATH")])
)


def plugin_path(kind: str, name: str) -> Path:
    """The file of one of the collection's plugins: kind is modules, action, filter or
    module_utils."""
    return PLUGINS / kind / f"{name}.py"


def load_ansible_plugin(path: Path) -> ModuleType:
    """Import a plugin file of the collection by its FQCN module name (so that its module_utils
    and every other test see one and the same module), or any other file by its path (they import
    Ansible, so the test is skipped without it)."""
    pytest.importorskip("ansible")
    path = path.resolve()
    if path.is_relative_to(PLUGINS):
        rel = path.relative_to(REPO).with_suffix("")
        return importlib.import_module(".".join((COLLECTION, *rel.parts)))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fqcn_filters(plugin: ModuleType) -> dict[str, Any]:
    """A filter plugin's filters by the names templates use: llamafleet.fleet.NAME."""
    filters: dict[str, Any] = plugin.FilterModule().filters()
    return {f"llamafleet.fleet.{name}": f for name, f in filters.items()}


def module_utils(name: str) -> ModuleType:
    """One of the collection's module_utils, as its modules import it."""
    pytest.importorskip("ansible")
    return importlib.import_module(f"{COLLECTION}.plugins.module_utils.{name}")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh root-owned 0755 directory: another uid can enter it (pytest's tmp_path lies below a
    0700 directory), and nothing in it is shared with another test."""
    d = Path(tempfile.mkdtemp(prefix="lf-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


class ModelServer:
    """A local HTTP server (127.0.0.1, a free port) for download tests: serves ``files`` with
    Range requests (206, 416 past the end), answers ``redirects`` (path -> (code, Location)) and
    records each request as (method, path, headers)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, tuple[int, str]] = {}
        self.log: list[tuple[str, str, dict[str, str]]] = []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: bool) -> None:
                path = self.path.split("?")[0]
                srv.log.append((self.command, self.path, dict(self.headers.items())))
                if path in srv.redirects:
                    code, location = srv.redirects[path]
                    self.send_response(code)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = srv.files.get(path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if body:
                    self.wfile.write(data[start:])

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def saw(self, name: str) -> list[tuple[str, str]]:
        """(method, path) of the requests that carried header `name`."""
        return [(m, p) for m, p, h in self.log if name.lower() in (k.lower() for k in h)]

    def gets(self) -> list[tuple[str, str, str | None]]:
        """(method, path, Range header) of the GET requests."""
        return [(m, p, h.get("Range")) for m, p, h in self.log if m == "GET"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server_filters() -> ModuleType:
    """The llama_server role's filter plugin (the unit renderer and its value checks)."""
    return load_ansible_plugin(plugin_path("filter", "llama_server"))


@pytest.fixture(scope="module")
def filter_error() -> type[Exception]:
    """The exception Ansible's filters raise."""
    pytest.importorskip("ansible")
    from ansible.errors import AnsibleFilterError

    error: type[Exception] = AnsibleFilterError
    return error


class CommandRunner:
    """Stands in for AnsibleModule where a test calls a module's functions directly: its
    run_command only (argv, no shell, `data` on stdin), here subprocess.run. Each module so tested
    also runs under the real ansible-playbook in its own test file."""

    def run_command(
        self, args: list[str], data: bytes | None = None, **_: Any
    ) -> tuple[int, bytes, bytes]:
        done = subprocess.run(args, input=data, capture_output=True, check=False)
        return done.returncode, done.stdout, done.stderr


def run_playbook(
    tmp_path: Path, play: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real ansible-playbook on localhost: `play` (dedented) as tmp_path/play.yml, run in
    tmp_path with this checkout as the llamafleet.fleet collection and its roles (tmp_path/roles
    first); `env` adds to or replaces that environment."""
    (tmp_path / "play.yml").write_text(textwrap.dedent(play))
    full = {
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS_ROOT),
        "ANSIBLE_ROLES_PATH": f"{tmp_path / 'roles'}:{REPO / 'roles'}",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LLAMAFLEET_TEMPLATE_CACHE": "off",
    } | (env or {})
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "play.yml", *extra],
        cwd=tmp_path,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def playbook_results(out: str) -> dict[str, Any]:
    """The `RESULT <name> <json>` lines (debug msg) a test playbook prints, by name."""
    found = {}
    for raw in out.splitlines():
        line = raw.strip()
        if line.startswith('"msg": "RESULT '):
            msg = json.loads("{" + line.rstrip(",") + "}")["msg"]
            _, name, data = msg.split(" ", 2)
            found[name] = json.loads(data)
    return found


#: A ChatML chat template with the guard of the official Qwen3.5/3.6 templates: it raises on
#: Claude Code's late system message (so the role's fix applies to it), written here
RAISING_CHATML = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and not loop.first %}"
    "{{- raise_exception('System message must be at the beginning.') }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
)


def gguf_bytes(name: str = "tiny", pad: int = 256 * 1024) -> bytes:
    """A GGUF v3 file with a few key/values, no tensors, and `pad` bytes after the header."""

    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    kvs = [
        s("general.architecture") + struct.pack("<I", 8) + s("llama"),
        s("general.name") + struct.pack("<I", 8) + s(name),
        s("llama.context_length") + struct.pack("<I", 4) + struct.pack("<I", 4096),
        s("llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 2),
    ]
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    return head + bytes(range(256)) * (pad // 256)

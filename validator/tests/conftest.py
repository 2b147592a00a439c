from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
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


def role_module_utils(role: Path) -> None:
    """Make a role's module_utils importable as ``ansible.module_utils.NAME``, where Ansible finds
    them for the role's own modules."""
    pytest.importorskip("ansible")
    import ansible.module_utils

    utils = str(role / "module_utils")
    if utils not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(utils)


def load_ansible_plugin(path: Path) -> ModuleType:
    """Import a module or plugin file of the repository's roles or playbooks by its path (they
    import Ansible, so the test is skipped without it). A role module's module_utils are found as
    Ansible finds them."""
    pytest.importorskip("ansible")
    if path.parent.name == "library" and (path.parent.parent / "module_utils").is_dir():
        role_module_utils(path.parent.parent)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    return load_ansible_plugin(
        Path(__file__).resolve().parents[2]
        / "roles"
        / "llama_server"
        / "filter_plugins"
        / "llamafleet.py"
    )


@pytest.fixture(scope="module")
def filter_error() -> type[Exception]:
    """The exception Ansible's filters raise."""
    pytest.importorskip("ansible")
    from ansible.errors import AnsibleFilterError

    error: type[Exception] = AnsibleFilterError
    return error


REPO = Path(__file__).resolve().parents[2]


def run_playbook(
    tmp_path: Path, play: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real ansible-playbook on localhost: `play` (dedented) as tmp_path/play.yml, run in
    tmp_path with the llamafleet_common role's modules and action plugins and the repository's
    roles (tmp_path/roles first); `env` adds to or replaces that environment."""
    common = REPO / "roles" / "llamafleet_common"
    (tmp_path / "play.yml").write_text(textwrap.dedent(play))
    full = {
        "ANSIBLE_LIBRARY": str(common / "library"),
        "ANSIBLE_ACTION_PLUGINS": str(common / "action_plugins"),
        "ANSIBLE_ROLES_PATH": f"{tmp_path / 'roles'}:{REPO / 'roles'}",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": str(tmp_path),
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

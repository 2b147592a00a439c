#!/usr/bin/env python3
"""Record a real request of the real Claude Code CLI, for the project's gates.

Usage:
  capture_claude_request.py [--out FILE] [--prompt TEXT] [--model-alias NAME] [--timeout S]
                            [--registry URL] [--keep-tmp]

What it does, in a private temporary directory (removed afterwards unless ``--keep-tmp``):

1. ``npm pack --ignore-scripts`` (with a private npm cache) of the wrapper package and of this
   architecture's native package at the version pinned in ``roles/claude_code/defaults/main.yml``
   (``claude_code_package``, ``claude_code_version``); each tarball's SHA-512 must equal its pin
   there (``claude_code_integrity``, ``claude_code_platform_integrity``). They are unpacked into a
   temporary prefix by the role's own module (``plugins/modules/claude_code_npm.py``,
   imported: ``install()`` checks the pins and the package.json names and versions, unpacks the
   wrapper without links and without running any package script and puts the native binary over
   the stub, as the role does).
2. A recording HTTP server on 127.0.0.1 (a free port): every ``POST /v1/messages`` (path, headers,
   raw body) is recorded and answered with a minimal valid Anthropic streaming response (SSE
   ``message_start``, ``content_block_start``/``content_block_delta``/``content_block_stop`` with
   the text "OK", ``message_delta`` with ``stop_reason: end_turn`` and usage, ``message_stop``; a
   plain JSON message when the request does not ask for a stream). ``HEAD /`` and anything else get
   404, as from llama-server.
3. ``claude -p PROMPT`` with a fresh temporary HOME, an empty temporary git repository
   ``HOME/project`` as working directory, stdin from /dev/null, a timeout, and an environment of
   only PATH, HOME, LANG=C.UTF-8, TZ=UTC, TERM=dumb and SHELL=/bin/bash (a login shell's; without
   it the prompt says "Shell: unknown"). Everything else comes from
   ``HOME/.claude/settings.json``, written as the claude_code role writes it (defaults of
   roles/claude_code/defaults/main.yml): ``env`` = CLAUDE_CODE_ATTRIBUTION_HEADER=0,
   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, API_TIMEOUT_MS, ANTHROPIC_BASE_URL (the recorder),
   ANTHROPIC_MODEL and ANTHROPIC_DEFAULT_OPUS/SONNET/HAIKU_MODEL (all the one alias),
   ANTHROPIC_AUTH_TOKEN (a random key made for this run); top level
   ``"includeGitInstructions": false``.
4. The first *main-conversation* request is saved (see ``is_main_request``): a request is the main
   conversation's when it is streamed, offers tools, has the Claude Code system prompt and its first
   user message ends with the prompt given to ``-p`` as a text block of its own. Side requests
   (session title, quota probe, topic detection and the like) lack tools or that prompt block.

The output file (by default ``llamafleet/data/claude-code-request.json``, package data) is
pretty JSON:
``{"capture": {...}, "headers": {...}, "body": {...}}``. ``capture`` records the Claude Code
version, the capture date, the command, the settings used and every substitution made; ``headers``
are the request's headers as received (names lower-cased), the key scrubbed; ``body`` is the request
body as Claude Code sent it (same keys in the same order, same values) except for these
substitutions, made in every string:

- the temporary working directory -> ``/home/user/project``, the temporary HOME -> ``/home/user``,
  also in the dash-encoded form Claude Code uses for per-project directories
  (``-tmp-...-home-project`` -> ``-home-user-project``);
- the capture date (YYYY-MM-DD, in the ``<system-reminder>`` of the first user message) ->
  ``2026-01-01``, and the capture month ("The current month is November 2026" in the WebSearch
  tool's description) -> ``January 2026``;
- the recorder's port in the Host header -> ``127.0.0.1:8080``.

The key is never written: ``authorization``/``x-api-key`` headers become ``<scrubbed>``, and the
script fails if the key, the temporary directory's name or the capture date is left anywhere in
what it would write.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "claude_code"
DEFAULTS = ROLE / "defaults" / "main.yml"
NPM_MODULE = REPO / "plugins" / "modules" / "claude_code_npm.py"
DEFAULT_OUT = REPO / "validator" / "src" / "llamafleet" / "data" / "claude-code-request.json"
DEFAULT_PROMPT = "Reply with the single word OK."
DEFAULT_ALIAS = "main"
NEUTRAL_HOME = "/home/user"
NEUTRAL_CWD = "/home/user/project"
PLACEHOLDER_DATE = "2026-01-01"
#: the kernel release the recorded system prompt names instead of the capturing machine's
NEUTRAL_KERNEL = "6.1.0"
NEUTRAL_HOST = "127.0.0.1:8080"
SCRUBBED = "<scrubbed>"
SECRET_HEADERS = ("authorization", "x-api-key")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
PLATFORMS = {"x86_64": "linux-x64", "amd64": "linux-x64", "aarch64": "linux-arm64"}


class CaptureError(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Install


def load_npm_module() -> ModuleType:
    """The collection's claude_code_npm module, imported by its FQCN from this checkout (a
    temporary ``ansible_collections/llamafleet/fleet`` link to it: the module imports the
    collection's module_utils, and Ansible's AnsibleModule, at load time)."""
    if not NPM_MODULE.is_file():
        raise CaptureError(f"no {NPM_MODULE}")
    root = Path(tempfile.mkdtemp(prefix="cc-collections-"))
    (root / "ansible_collections" / "llamafleet").mkdir(parents=True)
    (root / "ansible_collections" / "llamafleet" / "fleet").symlink_to(REPO)
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(
            "ansible_collections.llamafleet.fleet.plugins.modules.claude_code_npm"
        )
    except ImportError as exc:
        raise CaptureError(
            f"{NPM_MODULE} needs Ansible ({exc}); run this script with the project's venv"
        ) from exc
    finally:
        sys.path.remove(str(root))
        shutil.rmtree(root, ignore_errors=True)


def role_defaults() -> dict[str, Any]:
    data = yaml.safe_load(DEFAULTS.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise CaptureError(f"{DEFAULTS} is not a mapping")
    return data


def native_platform() -> str:
    machine = platform.machine().lower()
    if sys.platform != "linux" or machine not in PLATFORMS:
        raise CaptureError(f"no native Claude Code package for {sys.platform}/{machine}")
    return PLATFORMS[machine]


def install_cli(defaults: dict[str, Any], tmp: Path, registry: str | None) -> tuple[Path, str, str]:
    """npm pack, verify against the pins, unpack; returns (claude binary, version, platform)."""
    npm_mod = load_npm_module()
    package = str(defaults["claude_code_package"])
    version = str(defaults["claude_code_version"])
    plat = native_platform()
    platform_package = f"{package}-{plat}"
    pins = defaults["claude_code_platform_integrity"]
    if plat not in pins:
        raise CaptureError(f"{DEFAULTS} pins no integrity for {platform_package}")
    want = {
        "package": package,
        "version": version,
        "platform": plat,
        "integrity": str(defaults["claude_code_integrity"]),
        "platform_integrity": str(pins[plat]),
    }
    pack_dir = tmp / "pack"
    pack_dir.mkdir(mode=0o700)
    # a private npm cache (and log directory) in the temporary directory: nothing in ~/.npm
    argv = ["npm", "pack", "--json", "--ignore-scripts", "--cache", str(tmp / "npm-cache")]
    if registry:
        argv += ["--registry", registry]
    argv += [f"{package}@{version}", f"{platform_package}@{version}"]
    print(f"capture: {' '.join(argv)}", file=sys.stderr)
    proc = subprocess.run(
        argv, cwd=pack_dir, capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        raise CaptureError(f"npm pack failed (rc {proc.returncode}): {proc.stderr.strip()}")
    wrapper_tgz = pack_dir / npm_mod.tarball_name(package, version)
    platform_tgz = pack_dir / npm_mod.tarball_name(platform_package, version)
    layout = npm_mod.Layout(str(tmp / "prefix"), package)
    try:
        binary, _digest = npm_mod.install(
            layout, want, str(wrapper_tgz), str(platform_tgz), platform_package
        )
    except npm_mod.InstallError as exc:
        raise CaptureError(str(exc)) from exc
    print(f"capture: {package}@{version} ({plat}) verified against the pins", file=sys.stderr)
    shutil.rmtree(pack_dir)
    return Path(binary), version, plat


# --------------------------------------------------------------------------------------------
# Recorder


def sse_response(model: str) -> bytes:
    """A minimal valid Anthropic Messages stream answering "OK"."""
    msg_id = "msg_" + secrets.token_hex(12)
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "OK"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def json_response(model: str) -> bytes:
    return json.dumps(
        {
            "id": "msg_" + secrets.token_hex(12),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "OK"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    ).encode()


class Recorder:
    """A loopback HTTP server that records POST /v1/messages and answers "OK"."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.other: list[str] = []
        self.lock = threading.Lock()
        self.closed = False
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _not_found(self) -> None:
                with recorder.lock:
                    recorder.other.append(f"{self.command} {self.path}")
                body = b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}'
                self._send(404, "application/json; charset=utf-8", body)

            def do_HEAD(self) -> None:
                self._not_found()

            def do_GET(self) -> None:
                self._not_found()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.split("?", 1)[0] != "/v1/messages":
                    self._not_found()
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                with recorder.lock:
                    recorder.requests.append(
                        {
                            "path": self.path,
                            "headers": [(k.lower(), v) for k, v in self.headers.items()],
                            "raw": raw,
                            "body": body,
                        }
                    )
                model = body.get("model", "") if isinstance(body, dict) else ""
                if isinstance(body, dict) and body.get("stream"):
                    self._send(200, "text/event-stream", sse_response(model))
                else:
                    self._send(200, "application/json", json_response(model))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------------------------
# Which request is the main conversation's


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
        ]
    return []


def is_main_request(body: Any, prompt: str) -> bool:
    """Streamed, with tools, the Claude Code system prompt, and a first user message whose last
    text block is exactly the -p prompt (side requests have no tools, another system prompt, or
    quote the prompt inside a text of their own)."""
    if not isinstance(body, dict) or not body.get("stream") or not body.get("tools"):
        return False
    system = "\n".join(_texts(body.get("system")))
    if "Claude Code" not in system:
        return False
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    first = messages[0]
    if not isinstance(first, dict) or first.get("role") != "user":
        return False
    texts = _texts(first.get("content"))
    return bool(texts) and texts[-1] == prompt


# --------------------------------------------------------------------------------------------
# Scrubbing


def _dash_encoded(path: str) -> str:
    """Claude Code's per-project directory name: every non-alphanumeric character -> '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """value with fn applied to every string (dict keys too), order kept."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k): map_strings(v, fn) for k, v in value.items()}
    return value


def month_year(date: str) -> str:
    """'2026-11-30' -> 'November 2026' (English, as Claude Code writes it)."""
    day = dt.date.fromisoformat(date)
    return f"{MONTHS[day.month - 1]} {day.year}"


def substitutions(home: Path, cwd: Path, date: str) -> list[tuple[str, str, str]]:
    """(old, new, why), longest first."""
    subs = [
        (str(cwd), NEUTRAL_CWD, "temporary working directory (empty git repository)"),
        (str(home), NEUTRAL_HOME, "temporary HOME"),
        (
            _dash_encoded(str(cwd)),
            _dash_encoded(NEUTRAL_CWD),
            "temporary working directory, dash-encoded (per-project directory names)",
        ),
        (_dash_encoded(str(home)), _dash_encoded(NEUTRAL_HOME), "temporary HOME, dash-encoded"),
        (date, PLACEHOLDER_DATE, "capture date (UTC) in the first user message's system-reminder"),
        (
            month_year(date),
            month_year(PLACEHOLDER_DATE),
            "capture month in the WebSearch tool's description ('The current month is ...')",
        ),
        (
            f"OS Version: {platform.system()} {platform.release()}",
            f"OS Version: {platform.system()} {NEUTRAL_KERNEL}",
            "the capturing machine's kernel release in the system prompt's environment section",
        ),
    ]
    subs = [s for s in subs if s[0] != s[1]]
    return sorted(subs, key=lambda s: -len(s[0]))


def scrub(value: Any, subs: list[tuple[str, str, str]]) -> tuple[Any, dict[str, int]]:
    counts = {old: 0 for old, _new, _why in subs}

    def fn(s: str) -> str:
        for old, new, _why in subs:
            n = s.count(old)
            if n:
                counts[old] += n
                s = s.replace(old, new)
        return s

    return map_strings(value, fn), counts


def scrub_headers(headers: list[tuple[str, str]], port: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, sent in headers:
        value = sent
        if name in SECRET_HEADERS:
            value = SCRUBBED
        elif name == "host":
            value = value.replace(f"127.0.0.1:{port}", NEUTRAL_HOST).replace(
                f"localhost:{port}", NEUTRAL_HOST
            )
        out[name] = value if name not in out else out[name] + ", " + value
    return out


# --------------------------------------------------------------------------------------------
# Run


def git_init(cwd: Path, env: dict[str, str]) -> None:
    cwd.mkdir(mode=0o755)
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "config", "user.name", "user"]):
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def run_claude(
    binary: Path, prompt: str, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), "-p", prompt]
    try:
        return subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return subprocess.CompletedProcess(argv, 124, out, err)


def role_settings(
    defaults: dict[str, Any], base_url: str, model_alias: str, key: str
) -> dict[str, Any]:
    """What the claude_code role writes with its defaults (configure.yml: _claude_code_owned_env
    + _server_env + the token; _claude_code_owned_settings)."""
    return {
        "env": {
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "API_TIMEOUT_MS": str(defaults["claude_code_api_timeout_ms"]),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_MODEL": model_alias,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": model_alias,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": model_alias,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": model_alias,
            "ANTHROPIC_AUTH_TOKEN": key,
        },
        "includeGitInstructions": bool(defaults["claude_code_include_git_instructions"]),
    }


def write_settings(home: Path, settings: dict[str, Any]) -> None:
    """``~/.claude/settings.json`` of the capture's home, owner-only as the role writes it."""
    claude_dir = home / ".claude"
    claude_dir.mkdir(mode=0o700)
    settings_file = claude_dir / "settings.json"
    settings_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    settings_file.chmod(0o600)


def report_requests(recorder: Recorder, prompt: str) -> None:
    """One line per recorded request (and per other path answered 404) on stderr."""
    for i, r in enumerate(recorder.requests):
        b = r["body"] if isinstance(r["body"], dict) else {}
        print(
            f"capture: request {i}: {r['path']} {len(r['raw'])} bytes, "
            f"{len(b.get('tools') or [])} tools, max_tokens {b.get('max_tokens')}, "
            f"stream {b.get('stream')}, main {is_main_request(b, prompt)}",
            file=sys.stderr,
        )
    for line in recorder.other:
        print(f"capture: other: {line} -> 404", file=sys.stderr)


def refuse_leaks(record: dict[str, Any], text: str, leaks: list[tuple[str, str]]) -> None:
    """Raise when a secret or a machine-specific value is still in the scrubbed record: the
    ``(value, what)`` pairs in the body or the headers, the key or the temporary directory
    (the first two pairs) anywhere."""
    for leak, what in leaks:
        if leak in json.dumps(record["body"], ensure_ascii=False) or leak in json.dumps(
            record["headers"], ensure_ascii=False
        ):
            raise CaptureError(f"{what} is still in the scrubbed request; nothing written")
    if any(leak in text for leak, _ in leaks[:2]):
        raise CaptureError("the key or the temporary directory leaked; nothing written")


def capture(args: argparse.Namespace) -> int:
    defaults = role_defaults()
    tmp = Path(tempfile.mkdtemp(prefix="cc-capture-")).resolve()
    os.chmod(tmp, 0o700)
    recorder: Recorder | None = None
    try:
        binary, version, plat = install_cli(defaults, tmp, args.registry)
        home = tmp / "home"
        home.mkdir(mode=0o700)
        cwd = home / "project"
        key = "sk-capture-" + secrets.token_hex(16)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "TERM": "dumb",
            "SHELL": "/bin/bash",
        }
        git_init(cwd, env)
        recorder = Recorder()
        base_url = f"http://127.0.0.1:{recorder.port}"
        settings = role_settings(defaults, base_url, args.model_alias, key)
        write_settings(home, settings)

        date = dt.datetime.now(dt.timezone.utc).date().isoformat()
        print(f"capture: claude -p {args.prompt!r} against {base_url}", file=sys.stderr)
        proc = run_claude(binary, args.prompt, cwd, env, args.timeout)
        date_after = dt.datetime.now(dt.timezone.utc).date().isoformat()
        print(
            f"capture: claude exited {proc.returncode}; stdout {proc.stdout.strip()[:200]!r}; "
            f"stderr {proc.stderr.strip()[:2000]!r}",
            file=sys.stderr,
        )
        recorder.close()
        seen = recorder.requests
        report_requests(recorder, args.prompt)
        main = next((r for r in seen if is_main_request(r["body"], args.prompt)), None)
        if main is None:
            raise CaptureError(
                f"no main-conversation request among {len(seen)} recorded (claude exited "
                f"{proc.returncode}: {proc.stderr.strip()[:500]})"
            )
        if date_after != date and date_after in main["raw"].decode("utf-8", "replace"):
            date = date_after
        subs = substitutions(home, cwd, date)
        body, counts = scrub(main["body"], subs)
        headers = scrub_headers(main["headers"], recorder.port)
        record: dict[str, Any] = {
            "capture": {
                "tool": "validator/tools/capture_claude_request.py",
                "claude_code_package": str(defaults["claude_code_package"]),
                "claude_code_version": version,
                "platform": plat,
                "integrity_checked": True,
                "captured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "command": ["claude", "-p", args.prompt],
                "prompt": args.prompt,
                "exit_status": proc.returncode,
                "environment": sorted(env),
                "settings": map_strings(
                    settings,
                    lambda s: (
                        SCRUBBED if s == key else s.replace(base_url, f"http://{NEUTRAL_HOST}")
                    ),
                ),
                "home": NEUTRAL_HOME,
                "cwd": NEUTRAL_CWD + " (an empty git repository, no commits)",
                "path": main["path"],
                "requests_seen": len(seen),
                "request_index": seen.index(main),
                "request_bytes_as_sent": len(main["raw"]),
                "main_request_rule": (
                    "the first POST /v1/messages that is streamed, has tools, the Claude Code "
                    "system prompt and a first user message whose last text block is exactly the "
                    "-p prompt"
                ),
                "substitutions": [
                    {
                        "from": _describe(old, tmp, date),
                        "to": new,
                        "what": why,
                        "occurrences": counts[old],
                    }
                    for old, new, why in subs
                ],
                "scrubbed_headers": {
                    "authorization / x-api-key": f"value replaced by {SCRUBBED!r}",
                    "host": f"recorder's port replaced: {NEUTRAL_HOST}",
                },
                "unchanged": (
                    "everything else in body is as Claude Code sent it: keys in the same order, "
                    "same values (re-serialized as indented JSON)"
                ),
            },
            "headers": headers,
            "body": body,
        }
        text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
        leaks = [(key, "the API key"), (tmp.name, "the temporary directory")]
        leaks += [(old, why) for old, new, why in subs if old in (date, month_year(date))]
        refuse_leaks(record, text, leaks)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"capture: wrote {out} ({len(main['raw'])} bytes as sent)", file=sys.stderr)
        return 0
    finally:
        if recorder is not None:
            recorder.close()
        if args.keep_tmp:
            print(f"capture: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _describe(old: str, tmp: Path, date: str) -> str:
    """How a substituted value looked, without the random temporary name."""
    if old == date:
        return "YYYY-MM-DD (the capture date)"
    if old == month_year(date):
        return "MONTH YYYY (the capture month)"
    placeholder = "/tmp/cc-capture-XXXXXXXX"
    return old.replace(str(tmp), placeholder).replace(
        _dash_encoded(str(tmp)), _dash_encoded(placeholder)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Record the first main-conversation request of the pinned Claude Code CLI."
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output file (%(default)s)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the -p prompt (%(default)r)")
    parser.add_argument(
        "--model-alias", default=DEFAULT_ALIAS, help="model name of every tier (%(default)s)"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for claude -p")
    parser.add_argument("--registry", default=None, help="npm registry (npm's default)")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    try:
        return capture(args)
    except (CaptureError, subprocess.SubprocessError, OSError) as exc:
        print(f"capture_claude_request: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""TLS of the llama_server role: which instances serve it (llama_server_tls auto/true/false and an
instance's `tls`), the certificate names, the unit's credentials and --ssl-* arguments (rendered
from the real template, parsed by the validator), the fleet playbooks' scheme, and the
llamafleet_wait module's https check (the llamafleet_common role) against a local TLS server whose
CA and certificates the role's own module (llamafleet_tls) made."""

from __future__ import annotations

import http.server
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from test_unit_template import INJECTED, _findings, _instance, render

from conftest import CommandRunner, load_ansible_plugin, plugin_path
from llamafleet.units import parse_unit

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_server"
COMMON = REPO / "roles" / "llamafleet_common"
WAIT = plugin_path("modules", "llamafleet_wait")
UNITS = plugin_path("filter", "llamafleet_units")
TLS_DIR = "/etc/llamafleet/tls"


def _tls_vars(**over: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"llama_server_tls_dir": TLS_DIR, "llama_server_tls_ca_cert": ""}
    values.update(over)
    return values


# --- which instances serve TLS ------------------------------------------------------------


@pytest.fixture(scope="module")
def common_filters() -> ModuleType:
    """The llamafleet_common role's filters: TLS on/off and certificate names."""
    return load_ansible_plugin(plugin_path("filter", "llamafleet_common"))


@pytest.mark.parametrize(
    ("setting", "host", "want"),
    [
        ("auto", "127.0.0.1", False),
        ("auto", "127.0.0.2", False),
        ("auto", "::1", False),
        ("auto", "[::1]", False),
        ("auto", "localhost", False),
        ("auto", "/run/llama/main.sock", False),
        ("auto", "0.0.0.0", True),
        ("auto", "::", True),
        ("auto", "10.0.0.5", True),
        ("auto", "gpu1.example.org", True),
        (True, "127.0.0.1", True),
        ("true", "127.0.0.1", True),
        ("yes", "127.0.0.1", True),
        (False, "0.0.0.0", False),
        ("false", "10.0.0.5", False),
        ("off", "10.0.0.5", False),
    ],
)
def test_tls_on(common_filters: ModuleType, setting: Any, host: str, want: bool) -> None:
    assert common_filters.tls_on(setting, host) is want


def test_tls_setting_must_be_auto_true_or_false(
    common_filters: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="auto, true or false"):
        common_filters.tls_on("sometimes", "0.0.0.0")


def test_certificate_names(common_filters: ModuleType) -> None:
    sans = common_filters.tls_sans(
        ["0.0.0.0", "10.0.0.5", "GPU1.example.org.", "gpu1", "", None, "10.0.0.5", "[fd00::1]"],
        "main",
    )
    assert sans == [
        "IP:127.0.0.1",
        "IP:::1",
        "DNS:localhost",
        "IP:10.0.0.5",
        "DNS:gpu1.example.org",
        "DNS:gpu1",
        "IP:fd00::1",
    ]
    # a loopback instance: the loopback names only
    assert common_filters.tls_sans(["127.0.0.1", "localhost"], "main") == list(
        common_filters.TLS_LOOPBACK_SANS
    )


@pytest.mark.parametrize("bad", ["a,b", "a b", "host\nsubjectAltName=DNS:evil", "-x", "a/b"])
def test_certificate_names_refuse_what_is_no_name(
    common_filters: ModuleType, filter_error: type[Exception], bad: str
) -> None:
    with pytest.raises(filter_error, match="neither an IP address nor a DNS name"):
        common_filters.tls_sans([bad], "main")


def test_certificate_names_must_be_a_list(
    common_filters: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="expected a list"):
        common_filters.tls_sans("gpu1", "main")


# --- the unit -----------------------------------------------------------------------------


def test_tls_unit_has_credentials_and_ssl_args(server_filters: ModuleType) -> None:
    text = render(server_filters, _instance(server_filters, tls=True), **_tls_vars())
    lines = text.splitlines()
    assert f"LoadCredential=tls-key:{TLS_DIR}/main.key" in lines
    assert f"LoadCredential=tls-cert:{TLS_DIR}/main.crt" in lines
    assert "LoadCredential=api-key:/etc/llamafleet/keys/main.key" in lines
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.endswith(
        " --api-key-file %d/api-key --ssl-key-file %d/tls-key --ssl-cert-file %d/tls-cert"
    )
    assert f"# TLS: key and certificate signed by {TLS_DIR}/ca.crt" in lines
    # the validator resolves %d/NAME to the credential's file (without opening it)
    u = parse_unit(text, "llama-server-main.service")
    assert u.server is not None
    assert u.server.value("--ssl-key-file") == f"{TLS_DIR}/main.key"
    assert u.server.value("--ssl-cert-file") == f"{TLS_DIR}/main.crt"
    assert [h for h, _ in u.headers] == ["Unit", "Service", "Install"]
    assert _findings(text) == []


def test_tls_unit_names_the_certificate_checksum_and_own_ca(server_filters: ModuleType) -> None:
    text = render(
        server_filters,
        _instance(server_filters, tls=True),
        **_tls_vars(
            llama_server_tls_ca_cert="/etc/pki/fleet-ca.crt",
            _llama_server_tls_certs={"main": "ab" * 32},
        ),
    )
    want = "# TLS: key and certificate signed by /etc/pki/fleet-ca.crt (certificate sha256 "
    assert f"{want}{'ab' * 32})" in text.splitlines()


@pytest.mark.parametrize("inst_over", [{"tls": False}, {}])
def test_no_tls_no_credentials(server_filters: ModuleType, inst_over: dict[str, Any]) -> None:
    # tls false, or absent (a unit rendered as before): no TLS lines; the TLS variables unused
    text = render(server_filters, _instance(server_filters, **inst_over))
    assert "tls-" not in text
    assert "--ssl-" not in text
    u = parse_unit(text, "llama-server-main.service")
    assert u.server is not None
    assert u.server.value("--ssl-cert-file") is None


def test_tls_without_api_key(server_filters: ModuleType) -> None:
    text = render(server_filters, _instance(server_filters, tls=True, api_key=False), **_tls_vars())
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert "--api-key-file" not in exec_start
    assert exec_start.endswith(" --ssl-key-file %d/tls-key --ssl-cert-file %d/tls-cert")


@pytest.mark.parametrize(
    ("role_vars", "purpose"),
    [
        ({"llama_server_tls_dir": "/etc/x" + INJECTED}, "llama_server_tls_dir"),
        ({"llama_server_tls_ca_cert": "/etc/ca.crt" + INJECTED}, "llama_server_tls_ca_cert"),
        ({"_llama_server_tls_certs": {"main": "ab" + INJECTED}}, "certificate checksum"),
    ],
)
def test_a_newline_in_a_tls_value_fails_the_render(
    server_filters: ModuleType,
    filter_error: type[Exception],
    role_vars: dict[str, Any],
    purpose: str,
) -> None:
    with pytest.raises(filter_error) as exc:
        render(server_filters, _instance(server_filters, tls=True), **_tls_vars(**role_vars))
    assert purpose in str(exc.value)


@pytest.mark.parametrize(
    ("setting", "host", "tls"),
    [
        ("auto", "127.0.0.1", False),
        ("auto", "0.0.0.0", True),
        (True, "127.0.0.1", True),
        (False, "10.0.0.5", False),
    ],
)
def test_setting_to_unit(
    server_filters: ModuleType, common_filters: ModuleType, setting: Any, host: str, tls: bool
) -> None:
    # as tasks/preflight.yml resolves an instance: llama_server_tls and the listen address
    text = render(
        server_filters,
        _instance(server_filters, tls=common_filters.tls_on(setting, host)),
        **_tls_vars(),
    )
    assert ("--ssl-cert-file %d/tls-cert" in text) is tls


# --- the fleet playbooks' unit reader -----------------------------------------------------


def test_playbook_filter_reads_the_scheme(server_filters: ModuleType) -> None:
    read = load_ansible_plugin(UNITS).FilterModule().filters()["llamafleet_unit_server"]
    on = read(render(server_filters, _instance(server_filters, tls=True), **_tls_vars()))
    off = read(render(server_filters, _instance(server_filters)))
    assert on["scheme"] == "https"
    assert off.get("scheme", "http") == "http"
    assert "scheme" not in off  # absent means http (the fields the audit reads stay as they were)
    half = read("[Service]\nExecStart=/usr/bin/llama-server -m m.gguf --ssl-cert-file /c.pem\n")
    assert "scheme" not in half  # a certificate without a key: llama-server serves http


# --- llama_server_wait over https ---------------------------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI")
    if os.geteuid() != 0:
        pytest.skip("needs root: llamafleet_tls makes root's files")
    d = tmp_path_factory.mktemp("tls")
    tls = load_ansible_plugin(plugin_path("modules", "llamafleet_tls"))
    main_sans = ["IP:127.0.0.1", "IP:::1", "DNS:localhost", "DNS:gpu1"]

    def cert(name: str, sans: list[str]) -> dict[str, Any]:
        files = {"key": f"{name}.key", "cert": f"{name}.crt", "ext": f"{name}.ext"}
        return {"name": name, **files, "mode": "0600", "subject": f"/CN={name}",
                "comment": f"llama-server instance {name}", "sans": sans}  # fmt: skip

    common = load_ansible_plugin(plugin_path("filter", "llamafleet_common"))
    other_sans = ["DNS:gpu2.example.org"]  # names another host only
    tls.keep(
        CommandRunner(),
        {
            "dir": str(d),
            "ca_cert": "",
            "ca_key": "",
            "ca_subject": "/CN=llamafleet CA test",
            "ca_comment": "the nameConstraints of the llamafleet CA of test",
            "name_constraints": common.name_constraints([main_sans, other_sans]),
            "days": 825,
            "renew_within": 2592000,
            "certs": [cert("main", main_sans), cert("other", other_sans)],
        },
        modify=True,
    )
    # a second CA, which signed nothing the server serves
    (d / "ca2").mkdir()
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=other",
        "-keyout",
        str(d / "ca2" / "ca.key"),
        "-out",
        str(d / "ca2" / "ca.crt"),
    )
    return d


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"status":"ok"}' if self.path == "/health" else b"{}"
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(pki: Path, name: str) -> Iterator[str]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki / f"{name}.crt"), str(pki / f"{name}.key"))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}/health"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def https_url(pki: Path) -> Iterator[str]:
    yield from _serve(pki, "main")


@pytest.fixture
def https_url_other(pki: Path) -> Iterator[str]:
    yield from _serve(pki, "other")


@pytest.fixture(scope="module")
def wait() -> ModuleType:
    return load_ansible_plugin(WAIT)


def test_wait_verifies_with_the_ca(wait: ModuleType, pki: Path, https_url: str) -> None:
    assert wait.health(https_url, str(pki / "ca.crt")) == (200, "")


def test_wait_asks_the_instance_not_a_proxy(
    wait: ModuleType, pki: Path, https_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a proxy in the module's environment (nothing listens there) never sees the probe: urllib's
    # default opener, which the module used before, sent it there and got no answer
    for var in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert wait.health(https_url, str(pki / "ca.crt")) == (200, "")


def test_wait_refuses_without_the_ca(wait: ModuleType, https_url: str) -> None:
    status, error = wait.health(https_url, None)  # the system's CAs only
    assert status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_wait_refuses_another_ca(wait: ModuleType, pki: Path, https_url: str) -> None:
    status, error = wait.health(https_url, str(pki / "ca2" / "ca.crt"))
    assert status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in error


def test_wait_checks_the_host_name(wait: ModuleType, pki: Path, https_url_other: str) -> None:
    # signed by the CA, but for another name than 127.0.0.1
    status, error = wait.health(https_url_other, str(pki / "ca.crt"))
    assert status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in error or "mismatch" in error.lower()


def test_wait_plain_http_is_unchanged(wait: ModuleType) -> None:
    # nothing listens there: no answer, and the reason
    status, error = wait.health("http://127.0.0.1:9/health")
    assert status == 0
    assert error

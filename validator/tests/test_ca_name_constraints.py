"""Trust anchors scoped: the CAs the llama_server and llama_pool roles create carry X.509 name
constraints (the llamafleet_name_constraints filter over the certificate names: DNS names only, as
Claude Code's TLS stack refuses any CA with an IP constraint), so a client that trusts a server's
CA (Claude Code's NODE_EXTRA_CA_CERTS, which applies to every connection) trusts it for that
server's names only. The CA here is made by the roles' own module, llamafleet_tls, with the
name constraints the llama_server role hands it (its task read from the role); the attack is the
review's: a
certificate for api.anthropic.com signed by the host's CA, served over TLS on loopback and
verified by OpenSSL, by Python's ssl and by Node. The Claude Code CLI is not installed here: its
refusal is replayed on the claude scenario's client (molecule/claude/attacks.yml)."""

from __future__ import annotations

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
import yaml

from conftest import CommandRunner, load_ansible_plugin, plugin_path

REPO = Path(__file__).resolve().parents[2]
COMMON = plugin_path("filter", "llamafleet_common")
TLS_TASKS = {
    "llama_server": REPO / "roles" / "llama_server" / "tasks" / "install.yml",
    "llama_pool": REPO / "roles" / "llama_pool" / "tasks" / "configure.yml",
}
SANS = ["IP:127.0.0.1", "IP:::1", "DNS:localhost", "DNS:gpu1", "IP:10.0.0.5"]

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI")


@pytest.fixture(scope="module")
def common() -> ModuleType:
    return load_ansible_plugin(COMMON)


def test_constraints_name_every_dns_name_and_no_address(common: ModuleType) -> None:
    value = common.name_constraints([SANS, ["DNS:gpu1", "DNS:GPU2.example.org"]])
    assert value == (
        "critical,permitted;DNS:localhost,permitted;DNS:gpu1,permitted;DNS:gpu2.example.org"
    )


def test_addresses_only_permit_no_name(common: ModuleType) -> None:
    """No IP constraint ever (Claude Code refuses a CA that has one): a CA for addresses only
    may sign no DNS name at all."""
    assert common.name_constraints(["IP:10.0.0.5", "IP:::1"]) == "critical,permitted;DNS:invalid"


@pytest.mark.parametrize("bad", [[], ["gpu1"], ["IP:not-an-address"], ["URI:http://x"]])
def test_constraints_refuse_what_is_no_name(common: ModuleType, bad: list[str]) -> None:
    with pytest.raises(Exception, match="name constraints"):
        common.name_constraints(bad)


def _tls_task(role: str) -> dict[str, Any]:
    """The arguments of the role's llamafleet_tls task."""
    tasks = yaml.safe_load(TLS_TASKS[role].read_text())
    (task,) = [t for t in tasks if "llamafleet.fleet.llamafleet_tls" in t]
    return task["llamafleet.fleet.llamafleet_tls"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("role", sorted(TLS_TASKS))
def test_the_roles_create_their_ca_with_name_constraints(role: str) -> None:
    """Each role hands its own CA the name constraints of its certificates' names."""
    args = _tls_task(role)
    assert "llamafleet.fleet.llamafleet_name_constraints" in args["name_constraints"]
    assert "tls_sans" in args["name_constraints"] or "_sans" in args["name_constraints"]


def _openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)


def _key(path: Path) -> None:
    out = _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    assert out.returncode == 0, out.stderr


def _leaf(d: Path, name: str, sans: str) -> Path:
    _key(d / f"{name}.key")
    (d / f"{name}.ext").write_text(
        "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n"
        f"extendedKeyUsage = serverAuth\nsubjectAltName = {sans}\n"
    )
    assert (
        _openssl(
            "req",
            "-new",
            "-key",
            str(d / f"{name}.key"),
            "-subj",
            f"/CN={name}",
            "-out",
            str(d / f"{name}.csr"),
        ).returncode
        == 0
    )
    out = _openssl(
        "x509",
        "-req",
        "-in",
        str(d / f"{name}.csr"),
        "-CA",
        str(d / "ca.crt"),
        "-CAkey",
        str(d / "ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(d / f"{name}.ext"),
        "-out",
        str(d / f"{name}.crt"),
    )
    assert out.returncode == 0, out.stderr
    return d / f"{name}.crt"


@pytest.fixture(scope="module")
def pki(common: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host CA made by llamafleet_tls with the constraints the llama_server role hands it, a
    certificate for the host's names and one for api.anthropic.com, both signed by it."""
    if os.geteuid() != 0:
        pytest.skip("needs root: llamafleet_tls makes root's files")
    d = tmp_path_factory.mktemp("ca")
    tls = load_ansible_plugin(plugin_path("modules", "llamafleet_tls"))
    args = _tls_task("llama_server")
    nc_expr = (
        "{{ _llama_server_tls_instances | map(attribute='tls_sans')"
        " | llamafleet.fleet.llamafleet_name_constraints }}"
    )
    assert args["name_constraints"].strip() == nc_expr
    # the module's own CA, in a directory of root's (tmp_path_factory's are): no certificate yet
    tls.keep(
        CommandRunner(),
        {
            "dir": str(d / "tls"),
            "ca_cert": "",
            "ca_key": "",
            "ca_subject": "/CN=llamafleet CA gpu1",
            "ca_comment": "the nameConstraints of the llamafleet CA of gpu1",
            "name_constraints": common.name_constraints([SANS]),
            "days": 2,
            "renew_within": 0,
            "certs": [],
        },
        modify=True,
    )
    for name in ("ca.key", "ca.crt"):
        (d / name).write_bytes((d / "tls" / name).read_bytes())
    _leaf(d, "own", "DNS:gpu1, IP:10.0.0.5, IP:127.0.0.1")
    _leaf(d, "foreign", "DNS:api.anthropic.com")
    return d


def test_openssl_verifies_the_hosts_names_and_refuses_another(pki: Path) -> None:
    for check in (["-verify_hostname", "gpu1"], ["-verify_ip", "10.0.0.5"]):
        ok = _openssl("verify", "-CAfile", str(pki / "ca.crt"), *check, str(pki / "own.crt"))
        assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _openssl(
        "verify",
        "-CAfile",
        str(pki / "ca.crt"),
        "-verify_hostname",
        "api.anthropic.com",
        str(pki / "foreign.crt"),
    )
    assert bad.returncode != 0 and "permitted subtree violation" in bad.stdout + bad.stderr


class _TLSServer:
    """An openssl-free TLS listener on loopback (Python's ssl) that serves one certificate."""

    def __init__(self, cert: Path, key: Path) -> None:
        import socket

        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    )
            except (ssl.SSLError, OSError):
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def foreign_server(pki: Path) -> Iterator[_TLSServer]:
    srv = _TLSServer(pki / "foreign.crt", pki / "foreign.key")
    try:
        yield srv
    finally:
        srv.close()


def test_python_refuses_the_foreign_name(pki: Path, foreign_server: _TLSServer) -> None:
    import socket

    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with (
        socket.create_connection(("127.0.0.1", foreign_server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match="permitted subtree violation"),
    ):
        ctx.wrap_socket(raw, server_hostname="api.anthropic.com")


NODE_CLIENT = r"""
const tls = require("tls");
const s = tls.connect({host: "127.0.0.1", port: Number(process.argv[1]),
  servername: "api.anthropic.com",
  checkServerIdentity: (h, c) => tls.checkServerIdentity("api.anthropic.com", c)}, () => {
  console.log("ACCEPTED"); s.end(); process.exit(0); });
s.on("error", e => { console.log("REFUSED " + e.message); process.exit(3); });
"""


@pytest.mark.skipif(
    shutil.which("node") is None, reason="no node (the molecule claude scenario has it)"
)
def test_node_with_the_ca_in_node_extra_ca_certs_refuses_the_foreign_name(
    pki: Path, foreign_server: _TLSServer, tmp_path: Path
) -> None:
    """What Claude Code's runtime does with the CA the claude_code role installs."""
    env: dict[str, Any] = {"PATH": "/usr/bin:/bin", "NODE_EXTRA_CA_CERTS": str(pki / "ca.crt")}
    node = shutil.which("node")
    assert node
    out = subprocess.run(
        [node, "-e", NODE_CLIENT, str(foreign_server.port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 3 and "permitted subtree violation" in out.stdout, (
        out.stdout + out.stderr
    )


def test_without_the_constraints_the_foreign_certificate_verifies(tmp_path: Path) -> None:
    """The attack as it was: a CA with the role's old extensions only (no nameConstraints)
    lets its certificate for api.anthropic.com verify for that name."""
    _key(tmp_path / "ca.key")
    out = _openssl(
        "req",
        "-x509",
        "-new",
        "-sha256",
        "-days",
        "2",
        "-key",
        str(tmp_path / "ca.key"),
        "-subj",
        "/CN=unconstrained",
        "-addext",
        "basicConstraints=critical,CA:TRUE,pathlen:0",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        str(tmp_path / "ca.crt"),
    )
    assert out.returncode == 0, out.stderr
    cert = _leaf(tmp_path, "foreign", "DNS:api.anthropic.com")
    ok = _openssl(
        "verify",
        "-CAfile",
        str(tmp_path / "ca.crt"),
        "-verify_hostname",
        "api.anthropic.com",
        str(cert),
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr

"""Verify the claude scenario's server: llama-server listens on the bridge address for the client."""

import os
import re
import shlex

NET = os.environ.get("LLAMAFLEET_NET", "10.131.7")

testinfra_hosts = ["ansible://lf-claude-server"]


def test_server_listens_on_its_bridge_address(host):
    assert host.service("llama-server-main.service").is_running
    assert host.socket(f"tcp://{NET}.31:8080").is_listening


def _get(host, url, cafile=None):
    """GET url from the host itself with Python (curl is not installed); the status or the error."""
    ctx = f"ssl.create_default_context(cafile={cafile!r})" if cafile else "None"
    code = (
        "import ssl, urllib.request\n"
        "try:\n"
        f"    r = urllib.request.urlopen({url!r}, timeout=10, context={ctx})\n"
        "    print(r.status)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    return host.run("python3 -c " + shlex.quote(code)).stdout.strip()


def test_server_speaks_tls_with_the_role_ca(host):
    # not on loopback: llama_server_tls auto serves https with a certificate of the host's own CA
    url = f"https://{NET}.31:8080/health"
    assert _get(host, url, "/etc/llamafleet/tls/ca.crt") == "200"
    # not trusted without the CA, and no clear-text HTTP on the port
    assert "CERTIFICATE_VERIFY_FAILED" in _get(host, url)
    assert _get(host, f"http://{NET}.31:8080/health") != "200"
    unit = host.file("/etc/systemd/system/llama-server-main.service").content_string
    assert "--ssl-key-file %d/tls-key" in unit and "--ssl-cert-file %d/tls-cert" in unit


def test_tls_files_are_root_only(host):
    d = host.file("/etc/llamafleet/tls")
    assert d.user == "root" and d.mode == 0o700
    for name, mode in (("ca.key", 0o600), ("ca.crt", 0o644), ("main.key", 0o600)):
        f = host.file(f"/etc/llamafleet/tls/{name}")
        assert f.user == "root" and f.mode == mode, name


def test_kv_cache_types_from_the_journal(host):
    """The KV types the scenario sets are really in use, from llama-server's own log line in the
    journal: f16 here (molecule.yml says why); the default and fleet scenarios check the fork's
    q8_0/turbo3 the same way."""
    log = "journalctl -u llama-server-main.service -o cat --no-pager | grep -F "
    size = host.run(log + "'llama_kv_cache: size' | tail -n 1").stdout
    m = re.search(r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB", size)
    assert m, size
    assert (m.group(1), m.group(3)) == ("f16", "f16"), m.group(0)
    assert host.run(log + "'turbo zero-padding'").rc != 0


def test_the_fixed_chat_template_is_served(host):
    """The model's own template (official Qwen3.5) raises on Claude Code's late system message: the
    role serves a copy whose guard renders it in place, root-owned, named in the unit with its
    sha256, and the server never answered with the template's exception."""
    path = "/etc/llamafleet/chat-templates/main.jinja"
    f = host.file(path)
    assert f.exists and f.user == "root" and f.mode == 0o600
    assert "raise_exception('System message must be at the beginning.')" not in f.content_string
    assert "_lf_late_system" in f.content_string
    unit = host.file("/etc/systemd/system/llama-server-main.service").content_string
    assert f"LoadCredential=chat-template:{path}" in unit
    assert "--chat-template-file %d/chat-template" in unit
    assert f"# chat template: {path} sha256 {f.sha256sum}" in unit
    log = host.run("journalctl -u llama-server-main.service -o cat --no-pager").stdout
    assert "System message must be at the beginning" not in log

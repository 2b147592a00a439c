"""Verify the pool scenario on lf-pool-lb: HAProxy from the distribution, its configuration and
runtime API root-only, the pool key only in HAProxy's root-only map file and no user's key on the
pool host (their SHA-256 only), the sandbox of its unit, the three backends UP, and requests
through the pool: a bad key and the key of a user not on the list refused by HAProxy, the pool
key and the user's own key accepted, the answering backend named, a conversation kept on one
backend."""

import json
import os
import shlex
import uuid

import pytest
import testinfra

NET = os.environ.get("LLAMAFLEET_NET", "10.131.7")
POOL = f"https://{NET}.51:8443"
CA = "/etc/llamafleet/pool/ca.crt"
KEY_MAP = "/etc/llamafleet/pool/backend-key.map"
BACKENDS = ["lf-pool-1", "lf-pool-2", "lf-pool-3"]

testinfra_hosts = ["ansible://lf-pool-lb"]


@pytest.fixture(scope="module")
def pool_key():
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    backend = testinfra.get_host(f"ansible://lf-pool-1?ansible_inventory={inv}")
    return backend.check_output("cat /etc/llamafleet/keys/main.clients/pool.key").strip()


def runtime(host, command):
    """A command to HAProxy's runtime API, as root (python3: no socat on the host)."""
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.connect('/run/haproxy/admin.sock')\n"
        f"s.sendall({command!r}.encode() + b'\\n'); out = b''\n"
        "while True:\n"
        "    c = s.recv(65536)\n"
        "    if not c: break\n"
        "    out += c\n"
        "sys.stdout.write(out.decode())\n"
    )
    return host.check_output("python3 -c " + shlex.quote(code))


def request(host, key, session="", path="/v1/messages", auth="bearer"):
    """POST a small Anthropic request through the pool from the pool host: (status, backend)."""
    headers = {"content-type": "application/json"}
    if key:
        headers["Authorization" if auth == "bearer" else "x-api-key"] = (
            f"Bearer {key}" if auth == "bearer" else key
        )
    if session:
        headers["X-Claude-Code-Session-Id"] = session
    body = {"model": "main", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    code = (
        "import json, ssl, urllib.request, urllib.error\n"
        f"req = urllib.request.Request({POOL + path!r}, data={json.dumps(body)!r}.encode(),"
        f" headers={headers!r})\n"
        f"ctx = ssl.create_default_context(cafile={CA!r})\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=60, context=ctx)\n"
        "    print(r.status, r.headers.get('X-Llamafleet-Backend', ''))\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code, e.headers.get('X-Llamafleet-Backend', ''))\n"
    )
    out = host.check_output("python3 -c " + shlex.quote(code)).split()
    return int(out[0]), (out[1] if len(out) > 1 else "")


def test_haproxy_from_the_distribution_runs(host):
    assert host.package("haproxy").is_installed
    assert host.package("haproxy").version.startswith("2.6")
    svc = host.service("haproxy")
    assert svc.is_running and svc.is_enabled


def test_configuration_is_root_only_and_valid(host):
    cfg = host.file("/etc/haproxy/haproxy.cfg")
    assert cfg.user == "root" and cfg.mode == 0o600
    assert host.run("haproxy -c -f /etc/haproxy/haproxy.cfg").rc == 0


def test_the_pool_key_is_only_in_haproxys_root_only_map(host, pool_key):
    """HAProxy sends the backends the pool key in place of a user's key: it keeps it in a
    root-only map file, never in its configuration; no user's key is on the pool host at all
    (only its SHA-256)."""
    from llamafleet.poolkeys import digest, user_key

    cfg = host.file("/etc/haproxy/haproxy.cfg").content_string
    assert "sha2(256),hex" in cfg
    assert pool_key not in cfg
    keymap = host.file(KEY_MAP)
    assert keymap.user == "root" and keymap.mode == 0o600
    assert keymap.content_string == f"pool {pool_key}\n"
    # nowhere else under /etc, /run, /var/lib or root's home
    found = host.run(f"grep -rlF -D skip {shlex.quote(pool_key)} /etc /run /var/lib /root")
    assert found.stdout.split() == [KEY_MAP], found.stdout
    dev = user_key(pool_key, "lf-pool-lb/dev")
    assert digest(dev) in cfg
    # dev's key only in dev's own settings (test_pool_client.py), not under root's paths
    found = host.run(f"grep -rlF -D skip {shlex.quote(dev)} /etc /run /var/lib /root")
    assert found.stdout.strip() == "", found.stdout


def test_a_user_not_on_the_list_is_refused(host, pool_key):
    """The key a user taken off llama_pool_clients holds (derived as the role derives it) is
    refused by HAProxy; dev's own key is let in (the real HAProxy's reload without a digest is
    tested on loopback: test_llama_pool.py)."""
    from llamafleet.poolkeys import user_key

    assert request(host, user_key(pool_key, "lf-pool-lb/former-user"))[0] == 401
    status, backend = request(host, user_key(pool_key, "lf-pool-lb/dev"), session=str(uuid.uuid4()))
    assert status == 200 and backend in BACKENDS


def test_runtime_api_is_root_only(host):
    sock = host.file("/run/haproxy/admin.sock")
    assert sock.is_socket and sock.user == "root" and sock.mode == 0o600
    run_dir = host.file("/run/haproxy")
    assert run_dir.user == "root" and run_dir.mode == 0o700
    # nobody else can talk to it
    probe = "import socket; socket.socket(socket.AF_UNIX).connect('/run/haproxy/admin.sock')"
    assert host.run("runuser -u nobody -- python3 -c " + shlex.quote(probe)).rc != 0


def test_tls_files_are_root_only(host):
    assert host.file("/etc/llamafleet/pool").mode == 0o700
    assert host.file("/etc/llamafleet/pool/pool.pem.key").mode == 0o600
    assert host.file("/etc/llamafleet/pool/ca.key").mode == 0o600
    for name in BACKENDS:
        assert host.file(f"/etc/llamafleet/pool/backends/{name}.crt").content_string.startswith(
            "-----BEGIN CERTIFICATE-----"
        )


def test_the_unit_is_sandboxed(host):
    props = host.check_output(
        "systemctl show haproxy.service -p NoNewPrivileges -p ProtectSystem -p PrivateDevices "
        "-p CapabilityBoundingSet -p IPAddressDeny -p RestrictAddressFamilies -p UMask"
    )
    values = dict(line.split("=", 1) for line in props.splitlines())
    assert values["NoNewPrivileges"] == "yes" and values["ProtectSystem"] == "strict"
    assert values["PrivateDevices"] == "yes" and values["UMask"] == "0077"
    assert set(values["CapabilityBoundingSet"].split()) == {
        "cap_net_bind_service",
        "cap_setuid",
        "cap_setgid",
        "cap_sys_chroot",
        "cap_kill",
    }
    # the workers run as haproxy, the master as root
    users = host.check_output(
        "for p in /proc/[0-9]*; do "
        '[ "$(cat $p/comm 2>/dev/null)" = haproxy ] && stat -c %U $p; done; true'
    ).split()
    assert "root" in users and "haproxy" in users
    score = host.check_output("systemd-analyze security --no-pager haproxy.service | tail -1")
    assert "Overall exposure level" in score


def test_every_backend_is_up(host):
    lines = runtime(host, "show stat").splitlines()
    header = lines[0][2:].split(",")
    rows = [line.split(",") for line in lines[1:] if line.startswith("llama,")]
    status = {r[1]: r[header.index("status")] for r in rows}
    for name in BACKENDS:
        assert status[name] == "UP", status


def test_a_wrong_key_is_refused_by_haproxy(host):
    assert request(host, "not-the-pool-key") == (401, "")
    assert request(host, "") == (401, "")


def test_no_backend_name_without_the_key(host, pool_key):
    # /v1/models needs no key (llama-server's public path): the answer comes from a backend, but
    # only a client with the pool key learns which one
    assert request(host, "", path="/v1/models")[1] == ""
    assert request(host, "not-the-pool-key", path="/v1/models")[1] == ""
    assert request(host, pool_key, path="/v1/models")[1] in BACKENDS


def test_the_pool_key_is_accepted_both_ways(host, pool_key):
    status, backend = request(host, pool_key, session=str(uuid.uuid4()))
    assert status == 200 and backend in BACKENDS
    status, backend = request(host, pool_key, session=str(uuid.uuid4()), auth="x-api-key")
    assert status == 200 and backend in BACKENDS


def test_a_conversation_stays_on_one_backend(host, pool_key):
    session = str(uuid.uuid4())
    seen = {request(host, pool_key, session=session)[1] for _ in range(5)}
    assert len(seen) == 1 and seen <= set(BACKENDS)


def test_pool_health(host):
    out = host.check_output(f"python3 -c {shlex.quote(_get(POOL + '/health'))}")
    assert json.loads(out) == {"status": "ok"}


def _get(url):
    return (
        "import ssl, urllib.request\n"
        f"print(urllib.request.urlopen({url!r}, timeout=10,"
        f" context=ssl.create_default_context(cafile={CA!r})).read().decode())\n"
    )

"""Verify the llama_server role on the test host: a hardened, keyed, health-checked service with a
working prompt cache. Requests are made from inside the host with its own python3 (urllib)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

UNIT = "llama-server-main.service"
SERVER = "/opt/llama.cpp/current/bin/llama-server"
WWW = os.path.join(os.environ.get("LLAMAFLEET_TESTHOSTS", "/var/tmp/llamafleet-testhosts"), "www")
PORT = 8080
KEY_FILE = "/etc/llamafleet/keys/main.key"

_CLIENT = r"""
import json, sys, urllib.request, urllib.error
url, key, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(url, data=body.encode() if body else None,
                             headers={"content-type": "application/json",
                                      **({"x-api-key": key} if key else {})})
try:
    with urllib.request.urlopen(req, timeout=300) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode()}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode()}))
"""


def request(host, path, key="", body=None):
    out = host.run("python3 -c %s %s %s %s", _CLIENT, f"http://127.0.0.1:{PORT}{path}", key,
                   json.dumps(body) if body is not None else "")
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout)


def api_key(host):
    with host.sudo():
        return host.file(KEY_FILE).content_string.strip()


def test_service_active_enabled_as_service_user(host):
    svc = host.service("llama-server-main")
    assert svc.is_running and svc.is_enabled
    pid = host.run("systemctl show -p MainPID --value %s", UNIT).stdout.strip()
    assert host.run("ps -o user= -p %s", pid).stdout.strip() == "llama"


def test_hardening_in_effect(host):
    props = host.run("systemctl show %s -p NoNewPrivileges -p ProtectSystem -p ProtectHome "
                     "-p PrivateTmp -p PrivateDevices -p User -p Restart", UNIT).stdout
    for expected in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                     "PrivateTmp=yes", "PrivateDevices=yes", "User=llama", "Restart=on-failure"):
        assert expected in props, props
    pid = host.run("systemctl show -p MainPID --value %s", UNIT).stdout.strip()
    status = host.file(f"/proc/{pid}/status").content_string
    assert "NoNewPrivs:\t1" in status
    # inside the service's mount namespace the model directory (and /usr, /etc) cannot be written,
    # while the same path is writable for root outside it
    inside = host.run("nsenter -t %s -m -- touch /srv/models/tiny-llama/.probe", pid)
    assert inside.rc != 0 and "Read-only file system" in inside.stderr, inside
    probe = "/srv/models/tiny-llama/.probe"
    assert host.run("touch %s && rm %s", probe, probe).rc == 0


def test_key_is_root_only_and_listening_only_on_loopback(host):
    key = host.file(KEY_FILE)
    assert key.user == "root" and key.mode == 0o600
    listen = host.run("ss -Hltn sport = :%s", str(PORT)).stdout.split()
    assert "127.0.0.1:8080" in listen and "0.0.0.0:8080" not in listen


def test_health_public_messages_need_the_key(host):
    assert request(host, "/health")["status"] == 200
    body = {"model": "main", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    assert request(host, "/v1/messages", "", body)["status"] == 401
    assert request(host, "/v1/messages", "wrong-key", body)["status"] == 401
    ok = request(host, "/v1/messages", api_key(host), body)
    assert ok["status"] == 200, ok
    assert json.loads(ok["body"])["type"] == "message"


def test_prompt_cache_reuses_shared_system_prompt(host):
    words = " ".join(f"rule{i} keep answers short and precise." for i in range(250))
    system = f"You are a careful assistant. {words}"
    key = api_key(host)

    def ask(question):
        body = {"model": "main", "max_tokens": 4, "system": system,
                "messages": [{"role": "user", "content": question}]}
        res = request(host, "/v1/messages", key, body)
        assert res["status"] == 200, res
        return json.loads(res["body"])["usage"]

    first = ask("What is the first rule?")
    second = ask("And what is the last one?")
    prompt_1 = first["input_tokens"] + first.get("cache_read_input_tokens", 0)
    assert prompt_1 >= 1500, first
    # the shared prefix is the whole first prompt up to the user's question
    reused = second.get("cache_read_input_tokens", 0)
    shared = prompt_1 - 20  # the question and the template's tail differ
    assert reused >= 0.95 * shared, (first, second)


def exposure(text):
    """The number of `systemd-analyze security`'s "Overall exposure level for UNIT: 0.9 SAFE 😀"
    (not what follows the last colon: "1.2 OK :-)" on a terminal without emoji)."""
    m = re.search(r"Overall exposure level for \S+: *([0-9]+(?:\.[0-9]+)?)", text)
    assert m, text
    return float(m.group(1))


def test_exposure_score_at_most_1_0(host):
    out = host.run("systemd-analyze security --no-pager %s", UNIT)
    assert out.rc == 0, out.stderr
    score = exposure(out.stdout)
    print(f"systemd-analyze security {UNIT}: {score}")
    assert score <= 1.0, out.stdout


def test_exposure_parser_reads_the_number():
    assert exposure("→ Overall exposure level for a.service: 1.2 OK :-)") == 1.2
    assert exposure("→ Overall exposure level for a.service: 0.9 SAFE 😀") == 0.9


def test_slots_endpoint_off(host):
    exec_start = host.run("systemctl show -p ExecStart --value %s", UNIT).stdout
    assert " --no-slots " in f" {exec_start} ".replace(";", " "), exec_start
    res = request(host, "/slots", api_key(host))
    assert res["status"] in (404, 501), res
    assert request(host, "/slots")["status"] == 401


def test_kv_cache_types_from_the_journal(host):
    """The fork's KV types are really in use: llama-server's own log line, read from the journal
    (the fork zero-pads turbo V heads to 128: head_dim 32 -> 128)."""
    log = "journalctl -u llama-server-main.service -o cat --no-pager | grep -F "
    size = host.run(log + "'llama_kv_cache: size' | tail -n 1").stdout
    m = re.search(r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB", size)
    assert m, size
    assert (m.group(1), m.group(3)) == ("q8_0", "turbo3"), m.group(0)
    assert host.run(log + "'turbo zero-padding V head_dim 32 -> 128'").rc == 0


def test_planner_matches_the_servers_own_log(host, capsys):
    """The planner's K, V and recurrent-state MiB against the log lines of this host's fork build
    (validator/tools/planner_vs_log.py: 22 configurations, the tiny llama, its GQA-6 variant and the
    tiny qwen35moe, copied over SSH; each server runs on the host's loopback and is killed)."""
    v = host.ansible.get_variables()
    root = Path(__file__).resolve().parents[3]
    key = v.get("ansible_private_key_file") or v["ansible_ssh_private_key_file"]
    ssh = (
        f"ssh -i {key} -o StrictHostKeyChecking=no "
        f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR root@{v['ansible_host']}"
    )
    proc = subprocess.run(
        [sys.executable, str(root / "validator" / "tools" / "planner_vs_log.py"),
         "--server", SERVER, "--models-dir", os.path.join(WWW, "models"), "--no-generate",
         "--ssh", ssh, "--remote-dir", "/var/tmp/llamafleet-planner"],
        capture_output=True, text=True, timeout=900, check=False,
    )
    with capsys.disabled():
        print("\n" + proc.stdout + proc.stderr[-2000:])
    assert proc.returncode == 0

"""Verify the claude scenario: the client user's settings, the failure path, fleet mode and the
real Claude Code CLI against the real llama-server (prompt-cache reuse with the header off and on)."""

import json
import os
import re
import shlex
import subprocess

import pytest
import testinfra

HERE = os.path.dirname(os.path.abspath(__file__))
NET = os.environ.get("LLAMAFLEET_NET", "10.131.7")
SERVER_IP = f"{NET}.31"
SETTINGS = "/home/dev/.claude/settings.json"
MANAGED = "/etc/claude-code/managed-settings.json"

testinfra_hosts = ["ansible://lf-claude-client"]


@pytest.fixture(scope="module")
def server():
    inv = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://lf-claude-server?ansible_inventory={inv}")


def settings(host, path=SETTINGS):
    return json.loads(host.file(path).content_string)


def test_settings_file_modes(host):
    f = host.file(SETTINGS)
    assert f.user == "dev" and f.group == "dev" and f.mode == 0o600
    d = host.file("/home/dev/.claude")
    assert d.user == "dev" and d.mode == 0o700


def test_owned_keys(host, server):
    s = settings(host)
    env = s["env"]
    # the server listens on the bridge: TLS, with its host's CA installed for Claude Code
    assert env["ANTHROPIC_BASE_URL"] == f"https://{SERVER_IP}:8080"
    ca = host.file(env["NODE_EXTRA_CA_CERTS"])
    assert ca.user == "root" and ca.mode == 0o644
    assert ca.content_string.startswith("-----BEGIN CERTIFICATE-----")
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert int(env["API_TIMEOUT_MS"]) >= 600000
    for k in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
              "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
        assert env[k] == "main"
    assert s["includeGitInstructions"] is False
    own = server.check_output("cat /etc/llamafleet/keys/main.clients/lf-claude-client__dev.key").strip()
    assert env["ANTHROPIC_AUTH_TOKEN"] == own


def _status(host, url, key, cafile):
    """HTTP status of GET url with a bearer key, from the host itself (Python: no curl there)."""
    code = (
        "import ssl, urllib.request, urllib.error\n"
        f"req = urllib.request.Request({url!r}, headers={{'Authorization': 'Bearer ' + {key!r}}})\n"
        "try:\n"
        f"    print(urllib.request.urlopen(req, timeout=10, context=ssl.create_default_context(cafile={cafile!r})).status)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code)\n"
    )
    return host.run("python3 -c " + shlex.quote(code)).stdout.strip()


def test_dev_has_its_own_key_and_the_server_accepts_it(host, server):
    env = settings(host)["env"]
    token = env["ANTHROPIC_AUTH_TOKEN"]
    instance = server.check_output("cat /etc/llamafleet/keys/main.key").strip()
    assert token and token != instance
    assert server.check_output("cat /etc/llamafleet/keys/main.keys").split() == [instance, token]
    assert server.file("/etc/llamafleet/keys/main.keys").mode == 0o600
    assert server.file("/etc/llamafleet/keys/main.clients").mode == 0o700
    url = f"https://{SERVER_IP}:8080/props"  # /props needs a key (/v1/models does not)
    for key, want in ((token, "200"), (instance, "200"), ("not-a-key", "401")):
        assert _status(host, url, key, env["NODE_EXTRA_CA_CERTS"]) == want, (key == token, want)


def test_users_own_settings_survive(host):
    s = settings(host)
    assert s["permissions"] == {"allow": ["Bash(ls:*)", "Read(~/project/**)"], "deny": ["Bash(rm:*)"]}
    assert s["hooks"] == {
        "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "true"}]}]
    }
    assert s["env"]["DEV_OWN_VAR"] == "mine"
    assert s["cleanupPeriodDays"] == 30
    # the hand-edited top-level base URL (ignored by Claude Code) was moved into env
    assert "ANTHROPIC_BASE_URL" not in s


def test_one_backup_of_the_original(host):
    out = host.check_output("ls -1 /home/dev/.claude/").split()
    backups = [n for n in out if n.startswith("settings.json.") and n.endswith("~")]
    assert len(backups) == 1, out  # one change on the first converge, none after
    b = host.file(f"/home/dev/.claude/{backups[0]}")
    assert b.mode == 0o600 and b.user == "dev"
    assert json.loads(b.content_string)["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9999/v1"


def test_invalid_json_left_alone(host):
    f = host.file("/home/broken/.claude/settings.json")
    assert f.content_string == '{\n  "env": {"BROKEN_OWN": "1",},\n  "permissions": {}\n}\n'
    assert f.mode == 0o600
    assert not [n for n in host.check_output("ls -1 /home/broken/.claude/").split() if n.endswith("~")]


def test_managed_settings_without_the_key(host):
    f = host.file(MANAGED)
    assert f.user == "root" and f.mode == 0o644
    env = settings(host, MANAGED)["env"]
    assert env["ANTHROPIC_BASE_URL"] == f"https://{SERVER_IP}:8080"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert "ANTHROPIC_AUTH_TOKEN" not in env


def test_claude_code_reuses_the_prompt_cache(host):
    """Two real `claude -p` runs with a file edited in between: >= 75 % of run 2's prompt (a new
    session) comes from the server's cache with the role's settings, >= 99 % of the next turn of the
    same session (`--continue`), less with the attribution header on."""
    out = subprocess.run(
        [os.path.join(HERE, "..", "reuse-ratio.sh")],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    report = out.stdout + out.stderr
    # kept beside the scenario's state (LLAMAFLEET_TESTHOSTS outlives the destroy step)
    for where in (os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY"), os.environ.get("LLAMAFLEET_TESTHOSTS")):
        if where and os.path.isdir(where):
            with open(os.path.join(where, "reuse-ratio.txt"), "w") as fh:
                fh.write(report)
    print(report)
    assert out.returncode == 0, report
    off = float(re.search(r"^reuse_header_off=([0-9.]+)$", out.stdout, re.M).group(1))
    on = float(re.search(r"^reuse_header_on=([0-9.]+)$", out.stdout, re.M).group(1))
    cont = float(re.search(r"^reuse_continue=([0-9.]+)$", out.stdout, re.M).group(1))
    found = re.search(r"^reuse_turns=([0-9.,]+)$", out.stdout, re.M)
    turns = [float(x) for x in found.group(1).split(",")] if found else []
    # a new session: its prompt and Claude Code's late system message after it are new. Claude Code
    # 2.1.332 moved the session's environment (working directory, platform, date: ~9,100 characters
    # with the agent and skills lists) into that message: 79.7 % measured (2.1.197: 92.0 %). The same
    # session's next turn reuses nearly everything (99.7 %).
    assert off >= 0.75, report
    assert cont >= 0.99, report
    # a session of six turns (runs 2 to 7): each later turn reuses the whole conversation so far
    assert len(turns) == 4 and min(turns) >= 0.99, report
    # a session with six Read/Edit tool calls: every request reads all of the previous request's
    # prompt from the cache (measured 100 %)
    assert re.search(r"^tool_turns=6$", out.stdout, re.M), report
    held = re.search(r"^reuse_min_of_held=([0-9.]+)$", out.stdout, re.M)
    assert held and float(held.group(1)) >= 0.99, report
    # the header costs reuse; how much depends on where the template puts the system text: the
    # official Qwen3.5 template renders the tools first, so only what follows them is lost (measured
    # with 2.1.332: 79.7 % -> 72.8 %; 2.1.197: 92.0 % -> 88.2 %); a template with the system text
    # first loses nearly all (0.2 %)
    assert on < off, report
    # the run restores the role's value
    assert settings(host, MANAGED)["env"]["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"

"""Verify the default scenario: llama.cpp built and installed, models placed and described."""

import hashlib
import json
import os
import re

import pytest

SERVER = "/opt/llama.cpp/current/bin/llama-server"
WWW = os.path.join(os.environ.get("LLAMAFLEET_TESTHOSTS", "/var/tmp/llamafleet-testhosts"), "www")


@pytest.fixture(scope="module")
def expected_sha256():
    with open(os.path.join(WWW, "models", "tiny-llama.gguf"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def manifest(host, link):
    return json.loads(host.file(f"/opt/llama.cpp/{link}/manifest.json").content_string)


def test_pid1_is_systemd(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    assert host.run("systemctl is-system-running").stdout.strip() in ("running", "degraded")


def test_current_and_previous_links(host):
    current = host.file("/opt/llama.cpp/current")
    previous = host.file("/opt/llama.cpp/previous")
    assert current.is_symlink and previous.is_symlink
    assert current.linked_to.startswith("/opt/llama.cpp/builds/b9080-")
    assert previous.linked_to.startswith("/opt/llama.cpp/builds/b9079-")
    # same options, other commit: the same options hash ends both names
    assert current.linked_to.rsplit("-", 1)[1] == previous.linked_to.rsplit("-", 1)[1]


def test_binary_runs_and_reports_its_version(host):
    out = host.run(f"{SERVER} --version")
    assert out.rc == 0
    text = out.stdout + out.stderr
    m = manifest(host, "current")
    # the fork (build 9079 + test/next's commit): "version: 9080 (<short commit>)"
    found = re.search(r"version: (\d+) \(([0-9a-f]{7,})\)", text)
    assert found, text
    assert found.group(1) == "9080" and m["commit"].startswith(found.group(2))
    assert m["version_output"] in text.strip()


def test_binary_is_static_in_llama(host):
    ldd = host.run(f"ldd {SERVER}").stdout
    assert "libllama" not in ldd and "libggml" not in ldd


def test_manifest(host):
    m = manifest(host, "current")
    for key in ("repo", "ref", "commit", "build_number", "backend", "cmake_options", "version_output", "help_file"):
        assert key in m
    assert m["backend"] == "cpu"
    assert m["cuda_architectures"] == []
    opts = m["cmake_options"]
    assert opts["BUILD_SHARED_LIBS"] == "OFF"
    assert opts["LLAMA_BUILD_NUMBER"] == "9080"
    for off in ("LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_UI", "LLAMA_BUILD_WEBUI",
                "LLAMA_USE_PREBUILT_UI"):
        assert opts[off] == "OFF"
    assert opts["LLAMA_OPENSSL"] == "ON"
    assert opts["GGML_CCACHE"] == "ON"
    assert "--ctx-size" in host.file(m["help_file"]).content_string
    prev = manifest(host, "previous")
    assert prev["ref"] == "feature/turboquant-kv-cache"
    assert prev["build_number"] == 9079
    assert prev["commit"] != m["commit"]


def test_build_is_pinned_and_unprivileged(host):
    m = manifest(host, "current")
    assert m["commit"] == "e5f4827604fe63c3681edc2a2d2613a42d28bf52" and m["pinned"] is True
    # what was installed is what the build account produced, byte for byte
    assert m["binaries_sha256"]["llama-server"] == host.file(SERVER).sha256sum
    work = host.file("/var/cache/llama.cpp")
    assert work.user == "llama-build" and work.mode == 0o750
    assert host.file("/var/cache/llama.cpp/src").user == "llama-build"
    config = host.file("/var/cache/llama.cpp/src/.git/config").content_string
    assert "url = http" in config and "@" not in config.split("url =", 1)[1].split()[0]
    assert not host.file("/run/llama_cpp-git/auth.conf").exists
    binary = host.file(SERVER)
    assert binary.user == "root" and binary.mode == 0o755


@pytest.mark.parametrize("path", ["/srv/models/tiny-llama/tiny-llama.gguf", "/srv/models/tiny-llama-copy/tiny.gguf"])
def test_model_placed(host, path, expected_sha256):
    f = host.file(path)
    # root-owned and read-only to the service: `llama` cannot change what it serves or plant links
    assert f.exists and f.user == "root" and f.group == "root" and f.mode == 0o644
    assert f.sha256sum == expected_sha256
    assert host.file(path + ".sha256").content_string.split()[0] == expected_sha256
    assert not host.file(path + ".part").exists
    for d in ("/srv/models", "/srv/models/tiny-llama"):
        assert host.file(d).user == "root" and host.file(d).mode == 0o755


def test_model_metadata(host, expected_sha256):
    meta = json.loads(host.file("/srv/models/tiny-llama/metadata.json").content_string)
    assert meta["architecture"] == "llama"
    assert meta["context_length"] == 131072
    assert meta["block_count"] == 2
    assert meta["size_bytes"] == host.file("/srv/models/tiny-llama/tiny-llama.gguf").size
    assert meta["sha256"] == [expected_sha256]


def test_resumed_download_is_complete(host, expected_sha256):
    f = host.file("/srv/models/resumed/tiny-llama.gguf")
    assert f.exists and f.sha256sum == expected_sha256
    assert not host.file("/srv/models/resumed/tiny-llama.gguf.part").exists


def test_wrong_checksum_left_nothing(host):
    assert not host.file("/srv/models/wrong-sum/tiny-llama.gguf").exists
    assert not host.file("/srv/models/wrong-sum/tiny-llama.gguf.part").exists


def test_server_answers_with_the_tiny_model(host):
    """Smoke test of build + model together (the llama_server role tests the service itself)."""
    cmd = (
        f"{SERVER} -m /srv/models/tiny-llama/tiny-llama.gguf --host 127.0.0.1 --port 18181 -c 4096 -np 1 "
        ">/tmp/smoke.log 2>&1 & pid=$!; "
        "for i in $(seq 1 100); do python3 -c \"import urllib.request as u; u.urlopen('http://127.0.0.1:18181/health')\" "
        "2>/dev/null && break; sleep 0.2; done; "
        "python3 -c \"import json, urllib.request as u; "
        "r = u.Request('http://127.0.0.1:18181/v1/chat/completions', "
        "data=json.dumps({'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 64000}).encode(), "
        "headers={'Content-Type': 'application/json'}); "
        "print(json.dumps(json.load(u.urlopen(r, timeout=60))))\"; rc=$?; kill $pid; exit $rc"
    )
    out = host.run(cmd)
    assert out.rc == 0, out.stderr
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] <= 3
    assert reply["choices"][0]["message"]["content"].strip() == "OK"

"""Verify the claude scenario's server: llama-server listens on the bridge address for the client."""

import os

NET = os.environ.get("LLAMAFLEET_NET", "10.131.7")

testinfra_hosts = ["ansible://lf-claude-server"]


def test_server_listens_on_its_bridge_address(host):
    assert host.service("llama-server-main.service").is_running
    assert host.socket(f"tcp://{NET}.31:8080").is_listening

"""XC001/XC002 with https clients and TLS servers (--ssl-key-file + --ssl-cert-file), and CC010."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamafleet.engine import Inputs, add_file, run
from llamafleet.rules.cross import client_url, server_url, serves_tls
from llamafleet.settings import Client, load_settings
from llamafleet.units import parse_unit

TLS = "--ssl-key-file /etc/llamafleet/tls/main.key --ssl-cert-file /etc/llamafleet/tls/main.crt"


def _unit(args: str, env: str = "") -> str:
    return (
        "[Service]\nUser=llama\n"
        + (f"Environment={env}\n" if env else "")
        + f"ExecStart=/usr/local/bin/llama-server -m /m/q.gguf {args}\n"
    )


def _settings(url: str, token: str = "k", **extra: str) -> str:
    env: dict[str, Any] = {"ANTHROPIC_BASE_URL": url, **extra}
    if token:
        env["ANTHROPIC_AUTH_TOKEN"] = token
    return json.dumps({"env": env})


def _findings(unit: str | None, settings: str, only: list[str]) -> list[Any]:
    inputs = Inputs()
    if unit is not None:
        add_file(inputs, "llama-server-main.service", unit, kind="unit")
    add_file(inputs, "settings.json", settings, kind="settings", scope="user", mode=0o600)
    return run(inputs, only=only).findings


def _client(url: str) -> Client:
    return Client(files=[load_settings("s.json", _settings(url), "user", mode=0o600)])


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://10.0.0.5", ("https", "10.0.0.5", 443)),
        ("http://10.0.0.5", ("http", "10.0.0.5", 80)),
        ("HTTPS://GPU-01:8443/", ("https", "gpu-01", 8443)),
        ("https://[fd00::5]:8080", ("https", "fd00::5", 8080)),
    ],
)
def test_client_url_default_ports(url: str, expected: tuple[str, str, int]) -> None:
    u = client_url(_client(url))
    assert u is not None and (u.scheme, u.host, u.port) == expected


def test_client_url_refuses_other_schemes_and_bad_ports() -> None:
    assert client_url(_client("ftp://10.0.0.5:8080")) is None
    assert client_url(_client("https://10.0.0.5:99999")) is None


def test_serves_tls_needs_key_and_certificate() -> None:
    for args, env, tls in (
        (f"--host 10.0.0.5 {TLS}", "", True),
        ("--host 10.0.0.5 --ssl-cert-file /c.pem", "", False),
        ("--host 10.0.0.5 --ssl-key-file /k.pem", "", False),
        ("--host 10.0.0.5", "LLAMA_ARG_SSL_KEY_FILE=/k.pem LLAMA_ARG_SSL_CERT_FILE=/c.pem", True),
    ):
        server = parse_unit(_unit(args, env), "u.service").server
        assert server is not None
        assert serves_tls(server) is tls, args
    server = parse_unit(_unit(f"--host fd00::5 --port 8443 {TLS}"), "u.service").server
    assert server is not None and server_url(server) == "https://[fd00::5]:8443"


@pytest.mark.parametrize(
    ("url", "args", "ids"),
    [
        # https to a TLS server on the listen address, on a wildcard, on the default port
        ("https://10.0.0.5:8080", f"--host 10.0.0.5 --api-key-file /k {TLS}", ["XC002"]),
        ("https://gpu-01:8080", f"--host 0.0.0.0 --api-key-file /k {TLS}", ["XC002"]),
        ("https://gpu-01", f"--host 0.0.0.0 --port 443 --api-key-file /k {TLS}", ["XC002"]),
        ("https://127.0.0.1:8080", f"--host 0.0.0.0 --api-key-file /k {TLS}", ["XC002"]),
        # scheme mismatch: still the same server for the key, but XC001 reports the scheme
        ("http://10.0.0.5:8080", f"--host 10.0.0.5 --api-key-file /k {TLS}", ["XC001", "XC002"]),
        ("https://10.0.0.5:8080", "--host 10.0.0.5 --api-key-file /k", ["XC001", "XC002"]),
        # https without a port is 443, not the server's 8080
        ("https://10.0.0.5", f"--host 10.0.0.5 --api-key-file /k {TLS}", ["XC001"]),
    ],
)
def test_https_matching(url: str, args: str, ids: list[str]) -> None:
    # the key file is never opened (the key is unknown), so XC002 fires only for "sends none"
    found = _findings(_unit(args), _settings(url, token=""), ["XC001", "XC002"])
    assert sorted({f.id for f in found}) == ids, [f.message for f in found]


def test_https_key_comparison_with_known_key() -> None:
    unit = _unit(f"--host 10.0.0.5 --api-key right {TLS}")
    assert _findings(unit, _settings("https://10.0.0.5:8080", "right"), ["XC001", "XC002"]) == []
    found = _findings(unit, _settings("https://10.0.0.5:8080", "wrong"), ["XC001", "XC002"])
    assert [f.id for f in found] == ["XC002"] and "different key" in found[0].message


def test_scheme_mismatch_remedies() -> None:
    tls_unit = _unit(f"--host 0.0.0.0 --api-key k {TLS}")
    (f,) = _findings(tls_unit, _settings("http://gpu-01:8080"), ["XC001"])
    assert "https://gpu-01:8080" in f.fix and "NODE_EXTRA_CA_CERTS" in f.fix
    assert "https://0.0.0.0:8080" in f.message
    (f,) = _findings(
        _unit("--host 0.0.0.0 --api-key k"), _settings("https://gpu-01:8080"), ["XC001"]
    )
    assert "http://gpu-01:8080" in f.fix and "plain http" in f.fix


def test_loopback_only_remedy_keeps_the_servers_scheme() -> None:
    unit = _unit(f"--host 127.0.0.1 --api-key k {TLS}")
    (f,) = _findings(unit, _settings("https://10.0.0.5:8080"), ["XC001"])
    assert "ANTHROPIC_BASE_URL=https://127.0.0.1:8080" in f.fix


@pytest.mark.parametrize(
    ("url", "token", "fires"),
    [
        ("http://10.0.0.5:8080", "k", True),
        ("http://gpu-01:8080", "k", True),
        ("http://[fd00::5]:8080", "k", True),
        ("https://10.0.0.5:8080", "k", False),
        ("http://127.0.0.1:8080", "k", False),
        ("http://127.1.2.3:8080", "k", False),
        ("http://localhost:8080", "k", False),
        ("http://[::1]:8080", "k", False),
        ("http://10.0.0.5:8080", "", False),
        ("http://api.anthropic.com", "k", False),
    ],
)
def test_cc010(url: str, token: str, fires: bool) -> None:
    found = _findings(None, _settings(url, token), ["CC010"])
    assert bool(found) is fires, found
    if fires:
        assert found[0].severity == "error"
        assert "unencrypted" in found[0].message and url.replace("http", "https", 1) in found[0].fix


def test_cc010_without_any_key() -> None:
    inputs = Inputs()
    add_file(
        inputs,
        "settings.json",
        json.dumps({"env": {"ANTHROPIC_BASE_URL": "http://10.0.0.5:8080"}}),
        kind="settings",
        scope="user",
        mode=0o600,
    )
    assert run(inputs, only=["CC010"]).findings == []

"""ansible-test units for the request the collection's modules send to an instance of their host
(plugins/module_utils/instance_http.py), against a real HTTP server on loopback: the instance's
key goes to the instance and nowhere else, whatever the environment says."""

from __future__ import annotations

import http.server
import threading
import urllib.error
from typing import ClassVar

import pytest
from ansible_collections.llamafleet.fleet.plugins.module_utils import instance_http


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self):
        _Handler.seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://198.51.100.7/steal")
            self.end_headers()
            return
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Handler.seen.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_key_goes_to_the_instance(server):
    with instance_http.open_instance(
        server + "/health", None, 5, {"Authorization": "Bearer k"}
    ) as r:
        assert r.status == 200
    assert _Handler.seen == [("/health", "Bearer k")]


def test_a_proxy_of_the_environment_is_not_used(server, monkeypatch):
    # nothing listens on port 9: a request through the proxy would get no answer
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with instance_http.open_instance(server + "/health", None, 5) as r:
        assert r.status == 200


def test_netrc_credentials_are_not_sent(server, monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login admin password secret\n", encoding="utf-8")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with instance_http.open_instance(server + "/metrics", None, 5) as r:
        assert r.status == 200
    assert _Handler.seen == [("/metrics", None)]


def test_a_redirect_is_not_followed(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        instance_http.open_instance(server + "/moved", None, 5, {"Authorization": "Bearer k"})
    assert err.value.code == 302
    assert [p for p, _ in _Handler.seen] == ["/moved"]  # never asked 198.51.100.7

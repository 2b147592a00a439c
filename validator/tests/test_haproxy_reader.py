"""The HAProxy configuration reader (llamafleet.readers.haproxy): HAProxy's line syntax, the
sections and what the pool rules read from them, and the errors for text that is not HAProxy's
configuration (file and line)."""

from __future__ import annotations

import hashlib

import pytest

from llamafleet.argv import ParseError
from llamafleet.engine import Inputs, _detect, add_file, run
from llamafleet.readers.haproxy import (
    format_ms,
    key_digest,
    parse_time,
    read_haproxy,
    split_line,
)

DIGEST = hashlib.sha256(b"k").hexdigest().upper()


def test_words_quotes_escapes_and_comments() -> None:
    ln = split_line("""  http-request return string 'a # b' "c \\"d\\"" e\\ f # a comment""", 1)
    assert ln.words == ["http-request", "return", "string", "a # b", 'c "d"', "e f"]
    assert split_line("# only a comment", 2).words == []
    assert split_line('bind "${ADDR}:8443"', 3).unknown == {1}
    with pytest.raises(ParseError, match="unmatched double quote") as exc:
        split_line('acl x path "/a', 7)
    assert exc.value.line == 7


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("*:8443", "*", 8443),
        (":8443", "*", 8443),
        ("0.0.0.0:8443", "*", 8443),
        (":::8443", "*", 8443),
        ("[::]:8443", "*", 8443),
        ("ipv4@10.0.0.2:443", "10.0.0.2", 443),
        ("[fd00::2]:8443", "fd00::2", 8443),
        ("lb.example:8443", "lb.example", 8443),
    ],
)
def test_bind_addresses(address: str, host: str, port: int) -> None:
    cfg = read_haproxy(f"frontend f\n    bind {address} ssl crt /x.pem alpn http/1.1\n", "h.cfg")
    (b,) = cfg.proxies[0].binds
    assert (b.host, b.port, b.ssl, b.line) == (host, port, True, 2)


def test_bind_lists_ranges_sockets_and_plain() -> None:
    cfg = read_haproxy(
        "frontend f\n    bind :80,10.0.0.2:8000-8010\n    bind /run/haproxy.sock\n", "h.cfg"
    )
    binds = cfg.proxies[0].binds
    assert [(b.host, b.port_lo, b.port_hi, b.ssl) for b in binds] == [
        ("*", 80, 80, False),
        ("10.0.0.2", 8000, 8010, False),
    ]
    assert binds[1].has_port(8005) and not binds[1].has_port(8011)


def test_listen_old_form_and_backends_of_a_frontend() -> None:
    text = """\
listen old 0.0.0.0:9000
    server a 10.0.0.1:8080
frontend f
    bind *:8443 ssl crt /x.pem
    use_backend b1 if { path_beg /v1 }
    use_backend b2 unless { src 10.0.0.0/8 }
    use_backend %[req.hdr(host),lower]
    default_backend b3
backend b1
    server s1 10.0.0.1:8080
backend b2
    server s2 10.0.0.2:8080 ssl verify none disabled
backend b3
    server s3 gpu3
    server s4 10.0.0.4:+1
"""
    cfg = read_haproxy(text, "h.cfg")
    old, f = cfg.proxies[0], cfg.proxies[1]
    assert [(b.host, b.port) for b in old.binds] == [("*", 9000)]
    assert cfg.backends_of(old) == [old]
    assert [b.name for b in cfg.backends_of(f)] == ["b1", "b2", "b3"]
    assert f.dynamic_backend
    s2 = cfg.backend("b2").servers[0]  # type: ignore[union-attr]
    assert (s2.host, s2.port, s2.ssl, s2.disabled, s2.line) == ("10.0.0.2", 8080, True, True, 12)
    s3, s4 = cfg.backend("b3").servers  # type: ignore[union-attr]
    assert (s3.host, s3.port) == ("gpu3", None)  # no port: the client's
    assert (s4.host, s4.port) == ("10.0.0.4", None)  # relative


def test_defaults_are_inherited_and_overridden() -> None:
    text = """\
global
    stats timeout 30s
defaults base
    mode http
    balance leastconn
    timeout client 30s
    timeout server 1h
    default-server ssl verify none
defaults
    mode tcp
    timeout server 90000
backend b from base
    timeout server 2m
    server s1 10.0.0.1:8080
    server s2 10.0.0.2:8080 no-ssl
backend c
    server s3 10.0.0.3:8080
"""
    cfg = read_haproxy(text, "h.cfg")
    b, c = cfg.proxies
    assert b.mode == "http" and b.balance is not None and b.balance.value == "leastconn"
    assert b.balance.section == "defaults" and b.balance.line == 5
    assert b.timeouts["client"].value == "30000" and b.timeouts["client"].line == 6
    assert b.timeouts["server"].value == "120000" and b.timeouts["server"].section == "b"
    assert [s.ssl for s in b.servers] == [True, False]
    assert c.mode == "tcp" and c.balance is None
    assert c.timeouts["server"].value == "90000" and "client" not in c.timeouts
    assert c.servers[0].ssl is False


def test_the_key_digest_acl() -> None:
    text = f"""\
frontend f
    bind *:8443 ssl crt /x.pem
    acl key_ok var(txn.llama_key),sha2(256),hex -m str {DIGEST} ABCDEF
    acl key_ok req.hdr(x-api-key),sha2(256),hex 0123
    acl unused req.hdr(x-api-key),sha2(256),hex FFFF
    http-request return status 401 unless key_ok
    http-request deny if !{{ req.hdr(authorization),sha2(256),hex -i -m str abcd }}
frontend g
    bind *:8444
    acl k req.hdr(x-api-key),sha2(256),hex -m str -f /etc/haproxy/keys.lst
    http-request deny unless k
"""
    f, g = read_haproxy(text, "h.cfg").proxies
    found = sorted((tuple(a.digests or ()), a.ignore_case, a.line) for a in f.key_acls)
    assert found == [
        (("0123",), False, 4),
        ((DIGEST, "ABCDEF"), False, 3),
        (("abcd",), True, 7),
    ]
    assert [a.digests for a in g.key_acls] == [None]  # from a file: not known


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("bind *:80\n", 1, "outside a section"),
        ('{"env": {}}\n', 1, "outside a section"),
        ("global\n    maxconn 10\n", 1, "no frontend, backend or listen"),
        ("frontend\n    bind :80\n", 1, "frontend needs a name"),
        ("frontend f\n    bind 10.0.0.1\n", 2, "no port"),
        ("frontend f\n    bind :99999\n", 2, "out of range"),
        ("frontend f\n    bind :http\n", 2, "is not a port"),
        ("backend b\n    server s\n", 2, "server needs a name and an address"),
        ("backend b\n    server s 10.0.0.1:eighty\n", 2, "is not a port"),
        ("defaults\n    timeout server 5x\n", 2, "is not an HAProxy time"),
        ("defaults\n    timeout client\n", 2, "needs a time"),
        ("backend b\n    balance\n", 2, "balance needs a value"),
        ("backend b from nothing\n", 1, "no defaults section named 'nothing'"),
        ("frontend f\n    bind '[::1:80\n", 2, "unmatched single quote"),
        ("frontend f\n    bind [::1:80\n", 2, "no closing ]"),
    ],
)
def test_what_is_not_an_haproxy_configuration(text: str, line: int, message: str) -> None:
    with pytest.raises(ParseError, match=message) as exc:
        read_haproxy(text, "h.cfg")
    assert exc.value.line == line


def test_an_unreadable_file_is_reported_with_its_line() -> None:
    inputs = Inputs()
    add_file(inputs, "lb:/etc/haproxy/haproxy.cfg", "frontend f\n    bind 10.0.0.1\n")
    (f,) = run(inputs).findings
    assert (f.id, f.file, f.line) == ("LF002", "lb:/etc/haproxy/haproxy.cfg", 2)
    assert f.message.startswith("cannot read as an HAProxy configuration: bind '10.0.0.1'")
    assert "haproxy -c" in f.fix


def test_detection() -> None:
    assert _detect("/etc/haproxy/haproxy.cfg", "global\n") == "haproxy"
    assert _detect("lb:/etc/haproxy/haproxy.cfg", "") == "haproxy"
    assert _detect("pool.cfg", "defaults\nbackend llama\n    server a b:1\n") == "haproxy"
    assert _detect("other.cfg", "[section]\nkey=value\n") == "shell"


def test_times() -> None:
    assert parse_time("1h", 1) == 3_600_000
    assert parse_time("10m", 1) == 600_000
    assert parse_time("600s", 1) == 600_000
    assert parse_time("5000", 1) == 5000
    assert parse_time("2d", 1) == 172_800_000
    assert parse_time("1500us", 1) == 1
    assert [format_ms(v) for v in (500, 30_000, 90_000, 3_600_000, 5_400_000)] == [
        "500 ms",
        "30 s",
        "1 min 30 s",
        "1 h",
        "1 h 30 min",
    ]
    assert key_digest("k") == DIGEST


def test_conditional_blocks_and_other_sections_are_read_over() -> None:
    text = """\
.if defined(POOL)
userlist admins
    user a insecure-password b
.endif
backend b
    server s 10.0.0.1:8080
"""
    (b,) = read_haproxy(text, "h.cfg").proxies
    assert [s.name for s in b.servers] == ["s"]

"""The llama_server role's unit template, rendered with Jinja2 and the role's filter plugin: a
value with a newline (or any control character) fails the render instead of adding lines to the
unit; the environment is a mapping rendered one quoted Environment= per entry; extra lines come
before the hardening block; and SD004 reports what an extra line can still do."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import fqcn_filters
from llamafleet.engine import Inputs, add_file, run
from llamafleet.units import parse_unit

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "llama_server"
TEMPLATE = ROLE / "templates" / "llama-server.service.j2"
INJECTED = "\n[Service]\nExecStartPre=+/bin/sh -c 'id > /root/pwned'"
SHA = "0123456789abcdef" * 4


def _instance(server_filters: ModuleType, **over: Any) -> dict[str, Any]:
    argv = server_filters.llamafleet_argv(
        {
            "model": "/srv/models/q/q.gguf",
            "host": "127.0.0.1",
            "port": 8080,
            "alias": "main",
            "args": {"ctx_size": 131072, "jinja": True},
        }
    )
    inst: dict[str, Any] = {
        "name": "main",
        "model_path": "/srv/models/q/q.gguf",
        "model_sha256": SHA,
        "argv": argv,
        "environment": {"A": 1},
        "api_key": True,
        "memlock": False,
        "gpu": False,
    }
    inst.update(over)
    return inst


def render(server_filters: ModuleType, inst: dict[str, Any], **role_vars: Any) -> str:
    jinja2 = pytest.importorskip("jinja2")
    # as Ansible's template module: trim_blocks on, undefined variables are errors
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters.update(fqcn_filters(server_filters))
    env.filters["basename"] = os.path.basename
    env.filters["dirname"] = os.path.dirname
    values: dict[str, Any] = {
        "ansible_managed": "Ansible managed",
        "llama_server_user": "llama",
        "llama_server_group": "llama",
        "llama_server_key_dir": "/etc/llamafleet/keys",
        "llama_server_binary": "/opt/llama.cpp/current/bin/llama-server",
        "llama_server_hardening": True,
        "llama_server_unit_extra": [],
        "_build_id": "b9079-69d8e4be",
        "_i": inst,
    }
    values.update(role_vars)
    text: str = env.from_string(TEMPLATE.read_text()).render(values)
    return text


def _findings(text: str, rule: str = "SD004") -> list[str]:
    inputs = Inputs()
    add_file(inputs, "llama-server-main.service", text, kind="unit")
    return [f.message for f in run(inputs).findings if f.id in (rule, "LF002")]


def test_a_normal_instance_renders_and_parses(server_filters: ModuleType) -> None:
    text = render(
        server_filters, _instance(server_filters, environment={"A": 1, "B": 'x "y" 50%', "C": True})
    )
    u = parse_unit(text, "llama-server-main.service")
    assert u.server is not None
    assert u.server.value("--model") == "/srv/models/q/q.gguf"
    assert u.server.int_value("--port") == 8080
    assert u.server.value("--api-key-file") == "/etc/llamafleet/keys/main.key"  # the credential
    lines = text.splitlines()
    assert 'Environment="A=1"' in lines
    assert 'Environment="B=x \\"y\\" 50%%"' in lines
    assert 'Environment="C=true"' in lines
    assert f"# model: /srv/models/q/q.gguf sha256 {SHA}" in lines
    assert [h for h, _ in u.headers] == ["Unit", "Service", "Install"]
    assert _findings(text) == []


@pytest.mark.parametrize(
    ("where", "purpose"),
    [
        ("sha256", "model sha256 of instance main"),
        ("name", "instance name"),
        ("model_path", "model path of instance"),
        ("env_value", "instance 'main': environment: A"),
        ("env_key", "instance 'main': environment"),
        ("argv", "ExecStart= of instance main word"),
        ("build", "build id"),
        ("user", "llama_server_user"),
        ("managed", "ansible_managed"),
        ("extra", "llama_server_unit_extra[0]"),
    ],
)
def test_a_newline_anywhere_fails_the_render(
    server_filters: ModuleType, filter_error: type[Exception], where: str, purpose: str
) -> None:
    inst = _instance(server_filters)
    role_vars: dict[str, Any] = {}
    bad = "x" + INJECTED
    if where == "sha256":
        inst["model_sha256"] = SHA + INJECTED
    elif where == "name":
        inst["name"] = bad
    elif where == "model_path":
        inst["model_path"] = "/srv/models/q" + INJECTED
    elif where == "env_value":
        inst["environment"] = {"A": bad}
    elif where == "env_key":
        inst["environment"] = {bad: "1"}
    elif where == "argv":
        inst["argv"] = [*inst["argv"], "--alias", bad]
    elif where == "build":
        role_vars["_build_id"] = bad
    elif where == "user":
        role_vars["llama_server_user"] = bad
    elif where == "managed":
        role_vars["ansible_managed"] = bad
    else:
        role_vars["llama_server_unit_extra"] = ["Nice=5" + INJECTED]
    with pytest.raises(filter_error) as exc:
        render(server_filters, inst, **role_vars)
    msg = str(exc.value)
    assert purpose in msg, msg
    assert "[Service]\\nExecStartPre=+/bin/sh" in msg or "is not a variable name" in msg, msg


@pytest.mark.parametrize("char", ["\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028"])
def test_every_control_character_is_refused(
    server_filters: ModuleType, filter_error: type[Exception], char: str
) -> None:
    with pytest.raises(filter_error, match="control character"):
        server_filters.unit_value(f"a{char}b", "x")
    with pytest.raises(filter_error, match="control character"):
        server_filters.systemd_quote(["llama-server", f"a{char}b"])


def test_a_trailing_backslash_is_refused(
    server_filters: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="backslash"):
        render(server_filters, _instance(server_filters, model_path="/srv/models/q\\"))
    with pytest.raises(filter_error, match="backslash"):
        render(
            server_filters, _instance(server_filters), llama_server_unit_extra=["Environment=A=\\"]
        )


@pytest.mark.parametrize("environment", ["CUDA_VISIBLE_DEVICES=0", ["A=1", "B=2"]])
def test_environment_must_be_a_mapping(
    server_filters: ModuleType, filter_error: type[Exception], environment: Any
) -> None:
    with pytest.raises(filter_error) as exc:
        render(server_filters, _instance(server_filters, environment=environment))
    msg = str(exc.value)
    assert "instance 'main': environment must be a mapping" in msg
    assert "LLAMA_ARG_THREADS: 8" in msg and repr(environment) in msg


@pytest.mark.parametrize("value", [None, [1], {"x": 1}])
def test_environment_values_are_scalars(
    server_filters: ModuleType, filter_error: type[Exception], value: Any
) -> None:
    with pytest.raises(filter_error, match="must be a string or number"):
        server_filters.unit_environment({"A": value}, "main")


def test_systemd_quote_refuses_a_string(
    server_filters: ModuleType, filter_error: type[Exception]
) -> None:
    with pytest.raises(filter_error, match="expected a list of words"):
        server_filters.systemd_quote("CUDA=1")
    assert server_filters.systemd_quote(["a b", "%n", "$X", "c"]) == '"a b" "%%n" "$$X" c'


def test_extra_lines_come_before_the_hardening(server_filters: ModuleType) -> None:
    extra = ["Nice=5", "NoNewPrivileges=no", "AmbientCapabilities=CAP_NET_ADMIN"]
    text = render(server_filters, _instance(server_filters), llama_server_unit_extra=extra)
    lines = text.splitlines()
    assert lines.index("Nice=5") < lines.index("NoNewPrivileges=yes")
    assert lines.index("NoNewPrivileges=no") < lines.index("NoNewPrivileges=yes")
    u = parse_unit(text, "u.service")
    nnp = u.get("Service", "NoNewPrivileges")
    assert nnp is not None and nnp.value == "yes"
    assert u.get("Service", "AmbientCapabilities") is None  # the hardening's empty reset wins
    assert _findings(text) == []  # undone by order: nothing left for SD004


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("ExecStartPre=+/bin/sh -c id", "ExecStartPre=+/bin/sh -c id on line"),
        ("ExecStopPost=!!/usr/local/bin/x", "prefix !!"),
        ("User=root", "back to root after User=llama"),
    ],
)
def test_sd004_reports_what_order_cannot_stop(
    server_filters: ModuleType, line: str, shown: str
) -> None:
    text = render(server_filters, _instance(server_filters), llama_server_unit_extra=[line])
    found = _findings(text)
    assert len(found) == 1 and shown in found[0], found


def test_without_hardening_sd004_reports_ambient_capabilities(server_filters: ModuleType) -> None:
    text = render(
        server_filters,
        _instance(server_filters),
        llama_server_unit_extra=["AmbientCapabilities=CAP_NET_ADMIN"],
        llama_server_hardening=False,
    )
    assert any("AmbientCapabilities=CAP_NET_ADMIN" in m for m in _findings(text))


def test_gpu_unit_with_private_devices_in_extra_is_fine(server_filters: ModuleType) -> None:
    text = render(
        server_filters,
        _instance(server_filters, gpu=True),
        llama_server_unit_extra=["PrivateDevices=yes"],
    )
    assert "DevicePolicy=closed" in text
    assert _findings(text) == []


@pytest.mark.parametrize("line", ["[Service]", "  [Install]", "[X-Mine]"])
def test_extra_lines_cannot_start_a_section(
    server_filters: ModuleType, filter_error: type[Exception], line: str
) -> None:
    with pytest.raises(filter_error, match="starts a section"):
        render(server_filters, _instance(server_filters), llama_server_unit_extra=["Nice=5", line])
    with pytest.raises(filter_error, match="is not a string"):
        server_filters.unit_line({"Nice": 5})

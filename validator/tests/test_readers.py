"""The forms people keep llama-server commands and Claude Code environments in: shell scripts
(functions, arrays, commands in variables, eval, sh -c, docker run, here-documents), batch files,
PowerShell, Docker Compose and systemd units; and what `llamafleet check` says about each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from llamafleet.engine import Inputs, add_file, run
from llamafleet.readers import read_script
from llamafleet.readers.common import build_in_text, image_kind, parse_port
from llamafleet.readers.compose import interpolate
from llamafleet.units import parse_unit


def _servers(text: str, path: str = "run.sh", kind: str = "shell") -> list[Any]:
    return read_script(text, path, kind).servers


def _line(cfg: Any, name: str) -> int:
    opt = cfg.get(name)
    assert opt is not None, name
    line: int = opt.line
    return line


def _check(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    paths = []
    for name, text in files.items():
        p = tmp_path / name
        p.write_text(text)
        paths.append(str(p))
    res = run_cli(["check", *paths, *args, "--format", "json"], cwd=tmp_path)
    assert res.code in (0, 1), res.err
    findings: list[dict[str, Any]] = res.json()["findings"]
    return res.code, findings


# ----------------------------------------------------------------------------- shell scripts


def test_every_invocation_with_its_own_lines() -> None:
    text = (
        "#!/bin/bash\n"
        'if [ "$1" = big ]; then\n'
        "  llama-server -m big.gguf \\\n"
        "    -c 131072\n"
        "else\n"
        "  llama-server -m small.gguf -c 8192 --port 8081\n"
        "fi\n"
        "llama-server --version\n"
    )
    servers = _servers(text)
    assert [(s.line, s.value("--model"), s.get("--ctx-size").line) for s in servers] == [
        (3, "big.gguf", 4),
        (6, "small.gguf", 6),
    ]  # `llama-server --version` prints and exits: not a server


def test_wrapper_function_is_read_where_it_is_called() -> None:
    text = 'serve() {\n  exec llama-server -m "$1" --port "$2" "${@:3}"\n}\nserve q.gguf 8081\n'
    (cfg,) = _servers(text)
    assert cfg.value("--model") == "q.gguf" and cfg.int_value("--port") == 8081


def test_a_function_whose_body_is_a_subshell_is_read_where_it_is_called() -> None:
    # `f() ( ... )`: bash runs the body in a subshell; its arguments are the call's
    text = 'serve() (\n  exec llama-server -m "$1" -c 4096 --port "$2"\n)\nserve /m/q.gguf 8081\n'
    (cfg,) = _servers(text)
    assert cfg.value("--model") == "/m/q.gguf" and cfg.int_value("--port") == 8081
    assert cfg.int_value("--ctx-size") == 4096 and cfg.line == 2


def test_a_subshell_is_not_a_case_pattern() -> None:
    # the `)` that closes `(cd ... && exec ./llama-server ...)` is not the end of a pattern: only
    # inside `case ... in` is `word)` one
    (cfg,) = _servers("(cd /opt && exec ./llama-server -m /m/q.gguf -c 4096)\n")
    assert cfg.value("--model") == "/m/q.gguf" and cfg.int_value("--ctx-size") == 4096
    (one,) = _servers("(llama-server -m /m/q.gguf)\n")
    assert one.value("--model") == "/m/q.gguf"
    text = (
        'case "$1" in\n'
        "  (big) llama-server -m /m/big.gguf -c 32768 ;;\n"
        "  small|tiny) llama-server -m /m/small.gguf -c 4096 ;;\n"
        "  *) echo usage ;;\n"
        "esac\n"
        "(exec llama-server -m /m/after.gguf)\n"
    )
    assert [s.value("--model") for s in _servers(text)] == [
        "/m/big.gguf",
        "/m/small.gguf",
        "/m/after.gguf",
    ]


def test_function_never_called_is_read_with_unknown_arguments() -> None:
    text = 'start_server() {\n  llama-server -m "$MODEL" -c "$1"\n}\n'
    (cfg,) = _servers(text)
    assert cfg.is_unknown("--model") and cfg.is_unknown("--ctx-size")


def test_commands_kept_in_variables_and_arrays() -> None:
    text = (
        'CMD="llama-server -m q.gguf -c 8192"\n'
        "$CMD --port 8081\n"
        "ARGS=(-m q.gguf\n"
        "      --ctx-size 16384)\n"
        "ARGS+=(--jinja)\n"
        'llama-server "${ARGS[@]}"\n'
        'eval "llama-server -m e.gguf --port 9000"\n'
    )
    a, b, c = _servers(text)
    assert a.int_value("--ctx-size") == 8192 and a.int_value("--port") == 8081
    assert a.get("--ctx-size").line == 1  # where the variable holds it
    assert b.int_value("--ctx-size") == 16384 and b.get("--ctx-size").line == 4
    assert b.has("--jinja")
    assert c.value("--model") == "e.gguf" and c.int_value("--port") == 9000


def test_appending_to_a_variable_keeps_each_options_line() -> None:
    text = 'ARGS="-m q.gguf"\nARGS="$ARGS -c 8192"\nllama-server $ARGS\n'
    (cfg,) = _servers(text)
    assert cfg.get("--model").line == 1 and cfg.get("--ctx-size").line == 2


@pytest.mark.parametrize(
    "prefix",
    [
        "exec",
        "nohup",
        "sudo -u llama",
        "env CUDA_VISIBLE_DEVICES=0",
        "nice -n 10",
        "taskset -c 0-7",
        "numactl --cpunodebind=0 --membind=0",
        "timeout 1h",
        "time",
    ],
)
def test_wrappers(prefix: str) -> None:
    (cfg,) = _servers(f"{prefix} ./build/bin/llama-server -m q.gguf -c 4096 > log 2>&1 &\n")
    assert cfg.int_value("--ctx-size") == 4096 and cfg.refused == []


def test_sh_c_and_tmux() -> None:
    text = (
        "bash -c 'llama-server -m a.gguf --port 8081'\n"
        'tmux new-session -d -s llm "llama-server -m b.gguf --port 8082"\n'
    )
    assert [s.int_value("--port") for s in _servers(text)] == [8081, 8082]


def test_docker_run_of_a_server_image() -> None:
    text = (
        "docker run -d --gpus all -p 127.0.0.1:8081:8080 -v /m:/models \\\n"
        "  -e LLAMA_ARG_CTX_SIZE=32768 --name llm \\\n"
        "  ghcr.io/ggml-org/llama.cpp:server-cuda-b8200 \\\n"
        "  -m /models/q.gguf --n-gpu-layers 99\n"
        "podman run --rm -it ghcr.io/ggml-org/llama.cpp:full --server -m /models/f.gguf\n"
        "docker run --rm ghcr.io/ggml-org/llama.cpp:light -m /models/x.gguf -p hello\n"
    )
    a, b = _servers(text)
    assert a.source == "docker" and a.published == [("127.0.0.1", 8081, 8080)]
    assert a.int_value("--ctx-size") == 32768 and a.value("--host") == "0.0.0.0"  # the image's
    assert a.build == 8200 and a.names == ("llm",) and a.get("--gpu-layers").line == 4
    assert b.value("--model") == "/models/f.gguf"


def test_here_document_unit_is_read_and_other_bodies_skipped() -> None:
    text = (
        "cat > /etc/systemd/system/llama.service <<EOF\n"
        "[Service]\n"
        "ExecStart=/usr/bin/llama-server -m /m/q.gguf --port 8081\n"
        "EOF\n"
        "cat <<'NOTE'\n"
        "llama-server -m not-a-command.gguf\n"
        "NOTE\n"
    )
    result = read_script(text, "install.sh")
    assert result.servers == [] and len(result.units) == 1
    unit = result.units[0]
    assert unit.server is not None and unit.server.get("--port").line == 3  # type: ignore[attr-defined]


def test_claude_code_environment_exported_by_a_script() -> None:
    text = (
        "export ANTHROPIC_BASE_URL=http://127.0.0.1:8080/v1\n"
        "export ANTHROPIC_AUTH_TOKEN=$LLAMA_KEY\n"
        "CLAUDE_CODE_ATTRIBUTION_HEADER=0 claude\n"
    )
    (client,) = read_script(text, "claude.sh").clients
    values = {k: (v.value, v.line, v.unknown) for k, v in client.values.items()}
    assert values == {
        "ANTHROPIC_BASE_URL": ("http://127.0.0.1:8080/v1", 1, False),
        "ANTHROPIC_AUTH_TOKEN": ("$LLAMA_KEY", 2, True),
        "CLAUDE_CODE_ATTRIBUTION_HEADER": ("0", 3, False),
    }


def test_exported_client_environment_is_checked_like_settings(tmp_path: Path) -> None:
    code, findings = _check(
        tmp_path,
        {
            "claude.sh": "export ANTHROPIC_BASE_URL=http://127.0.0.1:8080/v1\n"
            "export ANTHROPIC_AUTH_TOKEN=k\nclaude\n"
        },
    )
    cc004 = [f for f in findings if f["id"] == "CC004"]
    assert code == 1 and cc004 and cc004[0]["line"] == 1


def test_build_named_by_the_file() -> None:
    assert build_in_text("curl -LO .../releases/download/b8200/llama-b8200-bin-ubuntu.zip") == 8200
    assert build_in_text("image: ghcr.io/ggml-org/llama.cpp:server-cuda-b6000") == 6000
    assert build_in_text("git checkout b7000 && git checkout b8000") is None  # two: unknown
    assert build_in_text("llama-server -m q.gguf -b 4096") is None


# ----------------------------------------------------------------------------- Windows


def test_batch_file() -> None:
    text = (
        "@echo off\r\n"
        "set ARGS=-ngl 99 --jinja\r\n"
        "set ANTHROPIC_BASE_URL=http://127.0.0.1:8080\r\n"
        'start "" /b "%~dp0llama-server.exe" -m q.gguf %ARGS% --port %1 >nul 2>&1\r\n'
        "llama-server.exe -m r.gguf ^\r\n"
        "  -c 8192\r\n"
        "  --port 8082\r\n"
    )
    result = read_script(text, "start.cmd", "cmd")
    a, b = result.servers
    assert a.int_value("--gpu-layers") == 99 and a.has("--jinja") and a.is_unknown("--port")
    assert a.refused == []
    assert b.int_value("--ctx-size") == 8192 and [t.text for t in b.detached] == ["--port"]
    assert result.clients[0].values["ANTHROPIC_BASE_URL"].value == "http://127.0.0.1:8080"


def test_powershell() -> None:
    text = (
        '$env:ANTHROPIC_BASE_URL = "http://localhost:8080"\n'
        "$env:LLAMA_ARG_CTX_SIZE = 8192\n"
        '$ngl = @("-ngl", "99")\n'
        '& "C:\\llama\\llama-server.exe" -m "C:\\models\\q.gguf" `\n'
        "  @ngl `\n"
        "  --port 8081\n"
        'Start-Process -FilePath "llama-server.exe" -ArgumentList "-m x.gguf --port 9090"\n'
    )
    result = read_script(text, "start.ps1", "powershell")
    a, b = result.servers
    assert a.int_value("--gpu-layers") == 99 and _line(a, "--port") == 6
    assert a.int_value("--ctx-size") == 8192
    assert b.int_value("--port") == 9090
    assert result.clients[0].values["ANTHROPIC_BASE_URL"].line == 1


# ----------------------------------------------------------------------------- Compose


COMPOSE = """\
services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server-cuda
    ports: ["127.0.0.1:8081:8080"]
    environment:
      - LLAMA_ARG_CTX_SIZE=${CTX:-65536}
      - LLAMA_ARG_N_PARALLEL=$NP
    command: >
      -m /models/q.gguf
      --port 8080 -fa on
  other:
    image: local/llama:latest
    entrypoint: ["/app/llama-server"]
    command: ["-m", "/models/o.gguf", "--port", "9000"]
  script:
    image: ubuntu
    command: ["sh", "-c", "llama-server -m /m/s.gguf --port 7000"]
  litellm:
    image: ghcr.io/berriai/litellm:main-latest
    ports: ["4000:4000"]
  claude:
    image: node:22
    environment:
      ANTHROPIC_BASE_URL: http://litellm:4000
      ANTHROPIC_AUTH_TOKEN:
"""


def test_compose_services() -> None:
    inputs = Inputs()
    add_file(inputs, "compose.yaml", COMPOSE)
    assert inputs.problems == []
    llama, other, script = inputs.servers
    assert llama.source == "compose" and llama.names[0] == "llama"
    assert llama.published == [("127.0.0.1", 8081, 8080)]
    assert llama.int_value("--ctx-size") == 65536 and llama.is_unknown("--parallel")
    assert _line(llama, "--model") == 9 and _line(llama, "--flash-attn") == 10
    assert other.int_value("--port") == 9000 and _line(other, "--port") == 14
    assert script.int_value("--port") == 7000
    assert {(lst.host, lst.port) for lst in inputs.listeners} >= {
        ("0.0.0.0", 4000),
        ("litellm", 4000),
    }
    (env,) = [sf for sf in inputs.settings if sf.scope == "env"]
    assert env.env()["ANTHROPIC_BASE_URL"] == "http://litellm:4000"
    assert env.line_of("env", "ANTHROPIC_BASE_URL") == 24


def test_compose_yaml_is_read_as_yaml_1_2() -> None:
    text = "services:\n  s:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    command: [-fa, on]\n"
    inputs = Inputs()
    add_file(inputs, "docker-compose.yml", text)
    assert inputs.servers[0].value("--flash-attn") == "on"  # not YAML 1.1's True


def test_interpolation_and_ports() -> None:
    assert interpolate("${A:-x}/$$HOME/${B}") == ("x/$HOME/${B}", True)
    assert parse_port("8080") is None
    assert parse_port("8081:8080/tcp") == ("", 8081, 8080)
    assert parse_port("[::1]:8081:8080") == ("::1", 8081, 8080)
    assert image_kind("ghcr.io/ggml-org/llama.cpp:server-vulkan") == "server"
    assert image_kind("ghcr.io/ggerganov/llama.cpp:full-cuda") == "full"
    assert image_kind("ghcr.io/mostlygeek/llama-swap:cuda") == "other"


def test_xc001_silent_behind_a_proxy_and_matching_published_ports(tmp_path: Path) -> None:
    _, findings = _check(tmp_path, {"compose.yaml": COMPOSE}, "--select", "XC001")
    assert findings == []  # the client talks to LiteLLM on :4000, which fronts the server
    direct = COMPOSE.replace("http://litellm:4000", "http://llama:8080")
    _, findings = _check(tmp_path, {"compose.yaml": direct}, "--select", "XC001")
    assert findings == []  # the service name and the container port
    wrong = COMPOSE.replace("http://litellm:4000", "http://llama:8081")
    _, findings = _check(tmp_path, {"compose.yaml": wrong}, "--select", "XC001")
    assert [f["id"] for f in findings] == ["XC001"]


def test_xc001_silent_for_a_litellm_command_and_a_path_prefix(tmp_path: Path) -> None:
    files = {
        "run.sh": "llama-server -m q.gguf --port 8080 &\nlitellm --config c.yaml --port 4000\n",
        "settings.json": '{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000", '
        '"ANTHROPIC_AUTH_TOKEN": "k"}}',
    }
    _, findings = _check(tmp_path, files, "--select", "XC001")
    assert findings == []
    files["run.sh"] = "llama-server -m q.gguf --port 8080\n"
    files["settings.json"] = (
        '{"env": {"ANTHROPIC_BASE_URL": "https://gw.example/llama", "ANTHROPIC_AUTH_TOKEN": "k"}}'
    )
    _, findings = _check(tmp_path, files, "--select", "XC001")
    assert findings == []  # a path: a reverse proxy's prefix


def test_xc001_silent_when_the_servers_port_is_unknown(tmp_path: Path) -> None:
    files = {
        "run.sh": 'llama-server -m q.gguf --port "$PORT"\n',
        "settings.json": '{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8081", '
        '"ANTHROPIC_AUTH_TOKEN": "k"}}',
    }
    _, findings = _check(tmp_path, files, "--select", "XC001")
    assert findings == []


# ----------------------------------------------------------------------------- systemd units


def test_unit_specifiers_shell_and_docker() -> None:
    u = parse_unit(
        "[Service]\nExecStart=/usr/bin/llama-server -m /m/%i.gguf --port %i\n", "l@.service"
    )
    assert u.server is not None and u.server.is_unknown("--port")
    u = parse_unit(
        "[Service]\nExecStart=/bin/sh -c 'exec /usr/bin/llama-server -m /m/q.gguf --port 8081'\n",
        "s.service",
    )
    assert u.server is not None and u.server.int_value("--port") == 8081
    u = parse_unit(
        "[Service]\nExecStart=/usr/bin/docker run --rm -p 8081:8080 "
        "ghcr.io/ggml-org/llama.cpp:server -m /m/q.gguf\n",
        "d.service",
    )
    assert u.server is not None and u.server.published == [("", 8081, 8080)]


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("empty.service", "", "no [Service] section with ExecStart="),
        ("other.service", "[Service]\nExecStart=/opt/start.sh\n", "runs '/opt/start.sh'"),
        ("notes.sh", "echo hello\n", "no llama-server command"),
        ("vars.yml", "a: 1\n", "not a Compose file"),
        ("compose.yaml", "services:\n  web:\n    image: nginx\n", "no llama-server service"),
    ],
)
def test_nothing_read_is_said_never_exit_0(tmp_path: Path, name: str, text: str, says: str) -> None:
    code, findings = _check(tmp_path, {name: text})
    assert code == 1 and [f["id"] for f in findings] == ["LF002"], findings
    assert says in findings[0]["message"]


def test_in_process_run_reports_lines_per_invocation() -> None:
    inputs = Inputs()
    add_file(
        inputs, "run.sh", "llama-server -m a.gguf -c 0\nllama-server -m b.gguf --cache-ram 0\n"
    )
    found = [(f.id, f.line) for f in run(inputs).findings if f.id == "LS001"]
    assert found == [("LS001", 2)]


# ----------------------------------------------------------------------------- cases of the corpus


def test_a_program_in_a_variable_known_in_part() -> None:
    text = "BIN=/media/$USER/apps/llama-server\nLAYERS=20\n$BIN -m q.gguf -ngl $LAYERS -c 2048\n"
    (cfg,) = _servers(text)
    assert cfg.binary == "/media/$USER/apps/llama-server" and cfg.int_value("--gpu-layers") == 20


def test_a_locally_built_llama_image_takes_llama_server_arguments() -> None:
    text = (
        'IMAGE="localhost/llama-vulkan:latest"\n'
        "podman run --rm -d -p 8080:8080 $IMAGE -m /models/q.gguf --host 0.0.0.0 -fa 1\n"
        "docker run --rm ollama/ollama:latest -m x\n"
    )
    (cfg,) = _servers(text)
    assert cfg.value("--host") == "0.0.0.0" and cfg.published == [("", 8080, 8080)]


def test_a_compose_service_configured_by_llama_arg_variables_only() -> None:
    text = (
        "services:\n  llama:\n    image: my-llama-build\n    environment:\n"
        "      - LLAMA_ARG_CTX_SIZE=2048\n      - LLAMA_ARG_N_GPU_LAYERS=99\n"
    )
    inputs = Inputs()
    add_file(inputs, "compose.yaml", text)
    (cfg,) = inputs.servers
    assert cfg.int_value("--ctx-size") == 2048 and _line(cfg, "--gpu-layers") == 6


def test_a_mode_newer_builds_added_is_not_invalid(tmp_path: Path) -> None:
    _, findings = _check(tmp_path, {"run.sh": "llama-server -m q.gguf --spec-type draft-mtp\n"})
    assert "LS020" not in {f["id"] for f in findings}


def test_each_option_of_a_continued_execstart_has_its_line() -> None:
    u = parse_unit(
        "[Service]\nUser=llama\nExecStart=/usr/bin/llama-server \\\n    --host 0.0.0.0 \\\n"
        "    --port 9000\n",
        "l.service",
    )
    assert u.server is not None
    assert (_line(u.server, "--host"), _line(u.server, "--port")) == (4, 5)


def test_a_unit_that_runs_a_checked_script_is_read_through_it(tmp_path: Path) -> None:
    unit = "[Service]\nUser=llama\nRestart=always\nExecStart=/opt/llm/start-llama.sh\n"
    script = "#!/bin/sh\nexec llama-server -m q.gguf -c 65536\n"
    _, findings = _check(tmp_path, {"llama.service": unit, "start-llama.sh": script})
    assert "LF002" not in {f["id"] for f in findings}
    _, findings = _check(tmp_path, {"llama.service": unit})
    assert [f["id"] for f in findings] == ["LF002"] and "start-llama.sh" in findings[0]["message"]

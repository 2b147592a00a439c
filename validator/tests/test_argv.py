"""The llama-server command-line parser on the shapes users keep their flags in."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamafleet.argv import ParseError, parse_argv_list
from llamafleet.refs import ReferencedFiles
from llamafleet.sources import parse_argv_string, parse_mapping, parse_script, render_argv
from llamafleet.units import parse_unit

SHORT_FORMS = [
    ("-c 4096", "--ctx-size", "4096"),
    ("-b 1024", "--batch-size", "1024"),
    ("-ub 512", "--ubatch-size", "512"),
    ("-ngl 99", "--gpu-layers", "99"),
    ("-np 1", "--parallel", "1"),
    ("-fa on", "--flash-attn", "on"),
    ("-ctk q8_0", "--cache-type-k", "q8_0"),
    ("-ctv turbo3", "--cache-type-v", "turbo3"),
    ("-t 8", "--threads", "8"),
    ("-m m.gguf", "--model", "m.gguf"),
    ("-mm p.gguf", "--mmproj", "p.gguf"),
    ("-cram 4096", "--cache-ram", "4096"),
    ("-ncmoe 12", "--n-cpu-moe", "12"),
    ("-lm mlock", "--load-mode", "mlock"),
]


@pytest.mark.parametrize(("argv", "canonical", "value"), SHORT_FORMS)
def test_short_forms(argv: str, canonical: str, value: str) -> None:
    cfg = parse_argv_string("llama-server " + argv)
    assert cfg.value(canonical) == value


def test_boolean_short_forms_and_negations() -> None:
    cfg = parse_argv_string("llama-server -kvu -cmoe --no-mmproj-offload")
    assert cfg.bool_value("--kv-unified") is True
    assert cfg.has("--cpu-moe")
    assert cfg.bool_value("--mmproj-offload") is False
    cfg = parse_argv_string("llama-server --no-kv-unified")
    assert cfg.bool_value("--kv-unified") is False
    cfg = parse_argv_string("llama-server -no-kvu")
    assert cfg.bool_value("--kv-unified") is False


def test_equals_form_and_negative_values() -> None:
    cfg = parse_argv_string("llama-server --ctx-size=65536 --cache-ram -1 -ngl=all")
    assert cfg.int_value("--ctx-size") == 65536
    assert cfg.value("--cache-ram") == "-1"
    assert cfg.value("--gpu-layers") == "all"


def test_last_occurrence_wins_and_argv_beats_env() -> None:
    text = "LLAMA_ARG_CTX_SIZE=8192 llama-server -c 4096 -c 16384\n"
    cfg = parse_script(text, "run.sh")
    assert cfg.int_value("--ctx-size") == 16384
    cfg = parse_script("LLAMA_ARG_CTX_SIZE=8192 llama-server -m m.gguf\n", "run.sh")
    assert cfg.int_value("--ctx-size") == 8192
    assert cfg.get("--ctx-size").from_env == "LLAMA_ARG_CTX_SIZE"  # type: ignore[union-attr]


def test_env_bool_false() -> None:
    cfg = parse_script("LLAMA_ARG_KV_UNIFIED=0 llama-server\n", "run.sh")
    assert cfg.bool_value("--kv-unified") is False


def test_shell_script_with_continuations_variables_and_lines() -> None:
    text = (
        "#!/bin/bash\n"
        "# comment with llama-server in it\n"
        'DIR="/srv/models"\n'
        "export LLAMA_ARG_THREADS=8\n"
        "cd /opt && \\\n"
        "  exec ./bin/llama-server \\\n"
        '    -m "${DIR}/model one.gguf" \\\n'
        "    --ctx-size 131072 \\\n"
        "    --flash-attn on   # trailing comment\n"
        "echo done\n"
    )
    cfg = parse_script(text, "run.sh")
    assert cfg.binary == "./bin/llama-server"
    assert cfg.value("--model") == "/srv/models/model one.gguf"
    assert cfg.get("--ctx-size").line == 8  # type: ignore[union-attr]
    assert cfg.get("--flash-attn").line == 9  # type: ignore[union-attr]
    assert cfg.int_value("--threads") == 8


def test_windows_cmd_with_carets() -> None:
    text = (
        "@echo off\r\n"
        "REM start\r\n"
        ":: another comment\r\n"
        'set "DIR=C:\\models"\r\n'
        "set CTX=65536\r\n"
        '"C:\\llama\\llama-server.exe" -m %DIR%\\q.gguf ^\r\n'
        "  -c %CTX% ^\r\n"
        "  -ctk q8_0 -ctv q8_0\r\n"
        "pause\r\n"
    )
    cfg = parse_script(text, "start.cmd")
    assert cfg.source == "cmd"
    assert cfg.int_value("--ctx-size") == 65536
    assert cfg.get("--ctx-size").line == 7  # type: ignore[union-attr]
    assert cfg.value("--cache-type-v") == "q8_0"


def test_windows_set_quoted_assignment() -> None:
    cfg = parse_script('set "M=C:\\m.gguf"\r\nllama-server -m %M%\r\n', "a.bat")
    assert cfg.value("--model") == "C:\\m.gguf"


def test_unit_execstart_with_environment(tmp_path: Path) -> None:
    envfile = tmp_path / "llama.env"
    envfile.write_text("# flags\nCTX=131072\nLLAMA_ARG_CACHE_RAM=4096\n")
    unit = (
        "[Unit]\nDescription=llama\n\n[Service]\n"
        f"EnvironmentFile=-{envfile}\n"
        'Environment="EXTRA=--jinja --metrics" MODEL=/srv/q.gguf\n'
        "ExecStart=/opt/llama.cpp/current/bin/llama-server -m ${MODEL} \\\n"
        "    -c ${CTX} $EXTRA\n"
        "User=llama\n"
    )
    u = parse_unit(unit, str(tmp_path / "llama.service"), ReferencedFiles(as_named=True))
    assert u.server is not None
    assert u.server.value("--model") == "/srv/q.gguf"
    assert u.server.int_value("--ctx-size") == 131072
    assert u.server.has("--metrics") and u.server.has("--jinja")
    assert u.server.int_value("--cache-ram") == 4096
    assert u.get("Service", "User").value == "llama"  # type: ignore[union-attr]


def test_unit_exec_prefixes() -> None:
    u = parse_unit("[Service]\nExecStart=-@/usr/bin/llama-server llama-server -c 8\n", "x.service")
    assert u.server is not None and u.server.binary == "/usr/bin/llama-server"


def test_mapping_renders_like_the_role() -> None:
    inst = {
        "name": "main",
        "model": "/srv/models/q.gguf",
        "host": "127.0.0.1",
        "port": 8080,
        "args": {
            "ctx_size": 131072,
            "cache_ram": 8192,
            "parallel": 1,
            "flash_attn": "on",
            "kv_unified": False,
            "jinja": True,
            "metrics": True,
            "swa_full": False,
            "api_key_file": "/etc/llamafleet/main.key",
            "cache_type_v": None,
        },
        "extra_args": ["--alias", "qwen"],
        "environment": {"LLAMA_ARG_THREADS": 8},
    }
    argv = render_argv(inst)
    assert argv[:6] == ["--model", "/srv/models/q.gguf", "--host", "127.0.0.1", "--port", "8080"]
    assert "--no-kv-unified" in argv and "--jinja" in argv and "--swa-full" not in argv
    assert "--cache-type-v" not in argv
    assert argv[-2:] == ["--alias", "qwen"]
    cfg = parse_mapping(inst, "vars.yml")
    assert cfg.int_value("--ctx-size") == 131072
    assert cfg.bool_value("--kv-unified") is False
    assert cfg.int_value("--threads") == 8
    # the same argv, parsed as a command line, gives the same options
    again = parse_argv_list(["llama-server", *argv])
    assert [(o.canonical, o.value) for o in again.options] == [
        (o.canonical, o.value) for o in cfg.options if not o.from_env
    ]


def test_mapping_bool_for_on_off_option() -> None:
    assert render_argv({"args": {"flash_attn": True}}) == ["--flash-attn", "on"]


def test_unknown_option_keeps_its_value() -> None:
    cfg = parse_argv_string("llama-server --frobnicate 3 -c 4096")
    assert cfg.get("--frobnicate").value == "3"  # type: ignore[union-attr]
    assert cfg.int_value("--ctx-size") == 4096


def test_missing_value_is_recorded() -> None:
    cfg = parse_argv_string("llama-server -fa -ngl 99")
    fa = cfg.get("--flash-attn")
    assert fa is not None and fa.missing_value
    assert cfg.value("--gpu-layers") == "99"


def test_script_without_server_is_an_error() -> None:
    with pytest.raises(ParseError):
        parse_script("echo hi\n", "x.sh")


def test_unterminated_quote_names_the_line() -> None:
    with pytest.raises(ParseError) as err:
        parse_script("\n\nllama-server -m 'q.gguf\n", "x.sh")
    assert err.value.line == 3


# ----------------------------------------------------------------------------- as llama.cpp reads


@pytest.mark.parametrize(
    ("written", "canonical"),
    [("--top_k", "--top-k"), ("--ctx_size", "--ctx-size"), ("--no_mmap", "--mmap")],
)
def test_long_options_with_underscores(written: str, canonical: str) -> None:
    """llama.cpp replaces every `_` of an argument that starts with `--` (common/arg.cpp)."""
    cfg = parse_argv_string(f"llama-server {written} 40")
    opt = cfg.get(canonical)
    assert opt is not None and opt.written == written and opt.spec is not None


def test_short_options_keep_their_underscores() -> None:
    cfg = parse_argv_string("llama-server -ctk_x q8_0")
    assert cfg.get("-ctk_x") is not None and cfg.get("-ctk_x").spec is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value", ["on", "off", "auto", "1", "0", "-1", "true", "false", "enabled", "disabled"]
)
def test_flash_attn_accepts_what_its_handler_accepts(value: str) -> None:
    from llamafleet.argv import validate_value

    opt = parse_argv_string(f"llama-server -fa {value}").get("--flash-attn")
    assert opt is not None and opt.value == value and validate_value(opt) is None


def test_fit_takes_no_auto_and_words_are_case_sensitive() -> None:
    from llamafleet.argv import validate_value

    fit = parse_argv_string("llama-server --fit auto").get("--fit")
    assert fit is not None and "is not one of on, off" in (validate_value(fit) or "")
    fa = parse_argv_string("llama-server -fa ON").get("--flash-attn")
    assert fa is not None and validate_value(fa) is not None


@pytest.mark.parametrize("value", ["-1", "auto", "all", "99", "0"])
def test_gpu_layers_special_values(value: str) -> None:
    from llamafleet.argv import validate_value

    opt = parse_argv_string(f"llama-server -ngl {value}").get("--gpu-layers")
    assert opt is not None and validate_value(opt) is None


def test_rejected_numbers_come_from_the_handlers() -> None:
    from llamafleet.argv import validate_value

    np0 = parse_argv_string("llama-server -np 0").get("--parallel")
    assert np0 is not None and "rejected" in (validate_value(np0) or "")
    moe = parse_argv_string("llama-server --n-cpu-moe -2").get("--n-cpu-moe")
    assert moe is not None and "the least is 0" in (validate_value(moe) or "")


def test_refused_arguments() -> None:
    cfg = parse_argv_list(["llama-server", "q.gguf", "--jinja", "true", "--port=8080", "-c 4096"])
    assert [(r.token.text, r.kind) for r in cfg.refused] == [
        ("q.gguf", "positional"),
        ("true", "positional"),
        ("--port=8080", "equals"),
        ("-c 4096", "joined"),
    ]
    assert cfg.refused[1].after is not None and cfg.refused[1].after.canonical == "--jinja"
    assert cfg.int_value("--port") == 8080 and cfg.int_value("--ctx-size") == 4096


def test_a_value_taking_option_takes_the_next_word_even_a_negative_number() -> None:
    cfg = parse_argv_string("llama-server --cache-ram -1 -ngl -1")
    assert cfg.value("--cache-ram") == "-1" and cfg.value("--gpu-layers") == "-1"
    assert cfg.refused == []


# ----------------------------------------------------------------------------- unknown values


def test_unresolved_variables_are_unknown_not_invalid() -> None:
    from llamafleet.argv import validate_value

    cfg = parse_script('llama-server -c "$CTX" -fa ${FA} --host $(hostname -I) --port %i\n', "r.sh")
    for name in ("--ctx-size", "--flash-attn", "--host"):
        opt = cfg.get(name)
        assert opt is not None and opt.unknown and validate_value(opt) is None, name
    assert cfg.int_value("--ctx-size") is None and cfg.bool_value("--flash-attn") is None
    assert cfg.value("--ctx-size") == "$CTX"  # the text as written


def test_an_unquoted_expansion_makes_the_config_opaque_and_silences_stray_words() -> None:
    cfg = parse_script("llama-server -m q.gguf $MMPROJ_ARG mmproj.gguf --port 8081\n", "r.sh")
    assert cfg.opaque and cfg.refused == [] and cfg.int_value("--port") == 8081


def test_a_known_unquoted_variable_splits_into_words() -> None:
    text = 'EXTRA="--jinja --ctx-size 8192"\nllama-server -m q.gguf $EXTRA\n'
    cfg = parse_script(text, "r.sh")
    assert cfg.has("--jinja") and cfg.int_value("--ctx-size") == 8192 and not cfg.opaque
    assert cfg.get("--ctx-size").line == 1  # type: ignore[union-attr]  # where it is written


def test_a_quoted_variable_is_one_argument() -> None:
    text = 'EXTRA="--jinja --ctx-size 8192"\nllama-server -m q.gguf "$EXTRA"\n'
    cfg = parse_script(text, "r.sh")
    assert [r.kind for r in cfg.refused] == ["joined"]


def test_defaults_of_unset_variables_apply() -> None:
    cfg = parse_script('PORT=${PORT:-8081}\nllama-server -m q.gguf --port "$PORT"\n', "r.sh")
    assert cfg.int_value("--port") == 8081


def test_llama_arg_no_variable_turns_an_option_off() -> None:
    cfg = parse_script("LLAMA_ARG_NO_MMAP=1 llama-server -m q.gguf\n", "r.sh")
    assert cfg.bool_value("--mmap") is False
